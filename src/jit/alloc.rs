//! The allocator behind compiled code's `malloc`/`free` (the buffers `memref.alloc` needs for
//! intermediate results). Kernels allocate the same sizes on every call, often from OpenMP
//! worker threads; glibc serves large blocks with a fresh `mmap` each time (or from per-thread
//! arenas whose thresholds adapt separately), so every call paid page faults on its
//! intermediates: a transformer block ran at 2.4 ms or 1.2 ms depending on what the process had
//! freed before. Freed blocks are kept here by size class ([`class`]) and handed out again, up
//! to [`CACHE_LIMIT`] bytes in all; beyond that they go back to the system. Classes rather
//! than exact sizes serve kernels for every size: a BERT encoder called with 22 batch sizes
//! allocated 22 sets of intermediates, more than the cache keeps, and paid fresh pages on
//! every call.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// Bytes of freed blocks kept for reuse, across all sizes.
pub const CACHE_LIMIT: usize = 512 << 20;

/// Alignment of every block: one cache line, one AVX-512 vector.
pub const ALIGN: usize = 64;

/// Bytes before each block: its size, padded to keep the block aligned.
const HEADER: usize = ALIGN;

struct Cache {
    free: HashMap<usize, Vec<usize>>,
    bytes: usize,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

fn with_cache<T>(f: impl FnOnce(&mut Cache) -> T) -> T {
    // A poisoned lock only means another thread panicked while holding it; the map is still
    // consistent (every update is a single push or pop).
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = guard.get_or_insert_with(|| Cache {
        free: HashMap::new(),
        bytes: 0,
    });
    f(cache)
}

/// Blocks up to this size are classed by whole cache lines.
const SMALL: usize = 4096;

/// The size a block of `size` bytes is allocated with: whole cache lines up to [`SMALL`],
/// above it eight classes per power of two (rounded up to a multiple of an eighth of the
/// power of two below it: at most 12.5% more than asked).
pub fn class(size: usize) -> Option<usize> {
    let step = if size <= SMALL {
        ALIGN
    } else {
        1 << (usize::BITS - 1 - size.leading_zeros() - 3)
    };
    size.checked_next_multiple_of(step)
}

/// `malloc` for compiled code: a cached block of `size`'s [`class`], else a new one.
///
/// # Safety
/// Returns memory only [`free`] may release.
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    let Some(size) = class(size) else {
        return std::ptr::null_mut();
    };
    if let Some(base) = with_cache(|c| {
        let base = c.free.get_mut(&size)?.pop()?;
        c.bytes -= size;
        Some(base)
    }) {
        return (base + HEADER) as *mut c_void;
    }
    let Some(total) = size.checked_add(HEADER) else {
        return std::ptr::null_mut();
    };
    let mut base = std::ptr::null_mut();
    // SAFETY: plain libc allocation; the header is written within it.
    unsafe {
        if libc::posix_memalign(&mut base, ALIGN, total) != 0 {
            return std::ptr::null_mut();
        }
        let base = base as *mut usize;
        base.write(size);
        (base as *mut u8).add(HEADER) as *mut c_void
    }
}

/// `free` for compiled code: keeps the block for the next allocation of its size class.
///
/// # Safety
/// `ptr` is null or came from [`malloc`] and is not used afterwards.
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: `ptr` came from `malloc` above, so its header is just before it.
    let base = unsafe { (ptr as *mut u8).sub(HEADER) } as usize;
    // SAFETY: as above; the header holds the block's size.
    let size = unsafe { *(base as *const usize) };
    let kept = with_cache(|c| {
        if c.bytes + size > CACHE_LIMIT {
            return false;
        }
        c.free.entry(size).or_default().push(base);
        c.bytes += size;
        true
    });
    if !kept {
        // SAFETY: `base` is the start of a libc allocation.
        unsafe { libc::free(base as *mut c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_freed_blocks_of_the_same_size() {
        // SAFETY: each block is used within its size and freed once.
        unsafe {
            let a = malloc(1_048_583);
            assert!(!a.is_null());
            assert_eq!(a as usize % ALIGN, 0);
            std::ptr::write_bytes(a as *mut u8, 7, 1_048_583);
            free(a);
            let b = malloc(1_048_583);
            assert_eq!(a, b, "a freed block of the same size comes back");
            let c = malloc(1_048_583);
            assert_ne!(b, c);
            free(b);
            free(c);
            free(std::ptr::null_mut());
            // A different size of the same class (a kernel for every size at another size)
            // takes the same block.
            let d = malloc(1_100_000);
            assert_eq!(d, c);
            free(d);
        }
    }

    #[test]
    fn size_classes_waste_at_most_an_eighth() {
        assert_eq!(class(1), Some(64));
        assert_eq!(class(4096), Some(4096));
        assert_eq!(class(4097), Some(4608));
        assert_eq!(class(1 << 20), Some(1 << 20));
        assert_eq!(class((1 << 20) + 1), Some((1 << 20) + (1 << 17)));
        for size in (SMALL..1 << 24).step_by(9973) {
            let c = class(size).unwrap();
            assert!(c >= size && (c - size) * 8 <= size, "{size} -> {c}");
        }
        assert_eq!(class(usize::MAX), None);
    }
}
