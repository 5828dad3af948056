//! The allocator behind compiled code's `malloc`/`free` (the buffers `memref.alloc` needs for
//! intermediate results). Kernels allocate the same sizes on every call, often from OpenMP
//! worker threads; glibc serves large blocks with a fresh `mmap` each time (or from per-thread
//! arenas whose thresholds adapt separately), so every call paid page faults on its
//! intermediates: a transformer block ran at 2.4 ms or 1.2 ms depending on what the process had
//! freed before. Freed blocks are kept here by size class ([`class`]) and handed out again, up
//! to [`CACHE_LIMIT`] bytes in all; beyond that they go back to the system. Classes rather
//! than exact sizes serve kernels for every size, and a request takes the smallest kept block
//! of its class or a larger one up to [`REUSE_FACTOR`] times its size: a BERT encoder called
//! with 22 batch sizes from 1 to 32 allocated 22 sets of intermediates, more than the cache
//! keeps, and paid fresh pages on every call (28% of its time in the kernel's page faults on
//! an AMD EPYC; each pass over the sizes took 1.35-1.5 s, 1.1-1.2 s with the cache unbounded,
//! which then held 2.1 GiB, and 0.91-1.04 s with larger blocks reused).
//!
//! Each thread keeps the blocks it frees: a thread chunk allocates and frees its scratch on its
//! own thread (flash attention's per block of query rows, thousands a call), and one cache
//! behind a mutex spent 3% of ViT-Tiny's time on two threads moving the lock's cache line
//! between the cores. Only the count of bytes kept is shared. A thread's blocks go back to the
//! system when it ends.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Bytes of freed blocks kept for reuse, across all sizes and threads.
pub const CACHE_LIMIT: usize = 512 << 20;

/// How many times its size a kept block may be to serve a request: the intermediates of a
/// kernel for every size, called at a batch of 10, take blocks a batch of up to 20 freed.
pub const REUSE_FACTOR: usize = 2;

/// Alignment of every block: one cache line, one AVX-512 vector.
pub const ALIGN: usize = 64;

/// Bytes before each block: its size, padded to keep the block aligned.
const HEADER: usize = ALIGN;

/// Bytes kept in the caches of all threads.
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// One thread's freed blocks, by size class (no class without blocks).
struct Cache {
    free: BTreeMap<usize, Vec<usize>>,
}

impl Cache {
    /// The smallest kept block of class `size` up to [`REUSE_FACTOR`] times it, taken out of
    /// the cache: its address and its class.
    fn take(&mut self, size: usize) -> Option<(usize, usize)> {
        let (&class, blocks) = self
            .free
            .range_mut(size..=size.saturating_mul(REUSE_FACTOR))
            .next()?;
        let base = blocks.pop()?;
        if blocks.is_empty() {
            self.free.remove(&class);
        }
        Some((base, class))
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        for (size, blocks) in std::mem::take(&mut self.free) {
            for base in blocks {
                KEPT.fetch_sub(size, Relaxed);
                // SAFETY: a kept block is the start of a libc allocation no one else holds.
                unsafe { libc::free(base as *mut c_void) };
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { free: BTreeMap::new() }) };
}

/// `f` on this thread's cache; `None` while the thread is ending (its cache is gone).
fn with_cache<T>(f: impl FnOnce(&mut Cache) -> T) -> Option<T> {
    CACHE
        .try_with(|cache| cache.try_borrow_mut().ok().map(|mut c| f(&mut c)))
        .ok()
        .flatten()
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

/// `malloc` for compiled code: a cached block of `size`'s [`class`] or a larger one (see
/// [`Cache::take`]), else a new one.
///
/// # Safety
/// Returns memory only [`free`] may release.
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    let Some(size) = class(size) else {
        return std::ptr::null_mut();
    };
    if let Some((base, class)) = with_cache(|c| c.take(size)).flatten() {
        KEPT.fetch_sub(class, Relaxed);
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

/// `free` for compiled code: keeps the block for this thread's next allocation of its size
/// class (or of a smaller one).
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
    let kept = KEPT.fetch_add(size, Relaxed) + size <= CACHE_LIMIT
        && with_cache(|c| c.free.entry(size).or_default().push(base)).is_some();
    if !kept {
        KEPT.fetch_sub(size, Relaxed);
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

    /// A request takes the smallest kept block from its class up to twice its size.
    #[test]
    fn larger_blocks_serve_requests_up_to_half_their_size() {
        // SAFETY: each block is used within its size and freed once.
        unsafe {
            let (small, large) = (malloc(5_000_000), malloc(9_000_000));
            free(large);
            free(small);
            let a = malloc(4_000_000);
            assert_eq!(a, small, "the smallest kept block that holds it");
            let b = malloc(4_600_000);
            assert_eq!(b, large, "a block up to twice the request");
            free(a);
            let c = malloc(2_000_000);
            assert_ne!(c, a, "a block more than twice the request stays kept");
            free(b);
            free(c);
        }
    }

    /// A block freed on another thread is kept for that thread, not handed to this one.
    #[test]
    fn blocks_stay_with_the_thread_that_freed_them() {
        const SIZE: usize = 3_000_017;
        let (freed_tx, freed_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            // SAFETY: the block is used within its size and freed once.
            unsafe {
                let a = malloc(SIZE);
                free(a);
                freed_tx.send(a as usize).expect("the test waits");
                // The block stays in this thread's cache until the thread ends.
                done_rx.recv().expect("the test signals");
            }
        });
        let freed = freed_rx.recv().expect("the thread frees its block");
        // SAFETY: as above.
        unsafe {
            let c = malloc(SIZE);
            assert!(!c.is_null());
            assert_ne!(
                c as usize, freed,
                "another thread's kept block was handed out"
            );
            free(c);
            assert_eq!(malloc(SIZE), c, "this thread gets back the block it freed");
            free(c);
        }
        done_tx.send(()).expect("the thread waits");
        other.join().expect("the thread ends");
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
