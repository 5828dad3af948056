//! The allocator behind compiled code's `malloc`/`free` (the buffers `memref.alloc` needs for
//! intermediate results). Kernels allocate the same sizes on every call, often from OpenMP
//! worker threads; glibc serves large blocks with a fresh `mmap` each time (or from per-thread
//! arenas whose thresholds adapt separately), so every call paid page faults on its
//! intermediates: a transformer block ran at 2.4 ms or 1.2 ms depending on what the process had
//! freed before. Freed blocks are kept here by exact size and handed out again, up to
//! [`CACHE_LIMIT`] bytes in all; beyond that they go back to the system.

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

/// `malloc` for compiled code: a cached block of exactly `size` bytes, else a new one.
///
/// # Safety
/// Returns memory only [`free`] may release.
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
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

/// `free` for compiled code: keeps the block for the next allocation of its size.
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
        }
    }
}
