//! The calling convention between the runtime and compiled code: MLIR's ranked memref
//! descriptors (`{allocated, aligned, offset, sizes[r], strides[r]}`, all 64-bit) passed by
//! pointer through a packed argument array, and resolution of external symbols.

use std::ffi::{CString, c_void};
use std::sync::OnceLock;

/// `void fxmlir_entry(void **descriptors)`.
pub type EntryFn = unsafe extern "C" fn(*mut *mut c_void);

/// The ranked memref descriptors of every argument of a compiled function, laid out in one
/// buffer. Sizes and strides are fixed at compile time; a call only patches the data pointers.
#[derive(Debug, Clone)]
pub struct Descriptors {
    words: Vec<i64>,
    starts: Vec<usize>,
}

impl Descriptors {
    /// One descriptor per `(sizes, strides)` (in elements), each with offset 0.
    pub fn new<'m>(arguments: impl IntoIterator<Item = (&'m [i64], &'m [i64])>) -> Self {
        let mut words = Vec::new();
        let mut starts = Vec::new();
        for (sizes, strides) in arguments {
            starts.push(words.len());
            words.extend_from_slice(&[0, 0, 0]);
            words.extend_from_slice(sizes);
            words.extend_from_slice(strides);
        }
        Descriptors { words, starts }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// A copy whose descriptor `i` addresses `data[i]` (allocated and aligned pointer alike),
    /// and the argument vector of pointers into it. `data` must have one entry per descriptor.
    pub fn bind(&self, data: &[usize]) -> (Vec<i64>, Vec<*mut c_void>) {
        let mut words = self.words.clone();
        for (&start, &pointer) in self.starts.iter().zip(data) {
            words[start] = pointer as i64;
            words[start + 1] = pointer as i64;
        }
        let base = words.as_mut_ptr();
        // SAFETY: every start is an index into `words`.
        let argv = self
            .starts
            .iter()
            .map(|&s| unsafe { base.add(s) }.cast())
            .collect();
        (words, argv)
    }
}

/// The address of a C symbol for the JIT's external calls: fxmlir's own runtime functions
/// (the OpenMP entry points among them), then whatever the process has loaded, then libm and
/// libmvec (which a Rust binary may not have linked when it calls none of their functions).
pub fn resolve(symbol: &str) -> Option<usize> {
    if let Some(own) = super::support::lookup(symbol).or_else(|| super::openmp::lookup(symbol)) {
        return Some(own);
    }
    let name = CString::new(symbol).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a valid C string only reads the loaded images.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !address.is_null() {
        return Some(address as usize);
    }
    system_libraries().iter().find_map(|&handle| {
        // SAFETY: `handle` is a live handle from dlopen; the name is a valid C string.
        let address = unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) };
        (!address.is_null()).then_some(address as usize)
    })
}

/// Handles of the system libraries compiled code may call into, opened once.
fn system_libraries() -> &'static [usize] {
    static HANDLES: OnceLock<Vec<usize>> = OnceLock::new();
    HANDLES.get_or_init(|| {
        [open(c"libm.so.6"), open(c"libmvec.so.1")]
            .into_iter()
            .filter(|&handle| handle != 0)
            .collect()
    })
}

/// `dlopen`s a library for the life of the process; 0 when it cannot be loaded.
fn open(library: &std::ffi::CStr) -> usize {
    // SAFETY: dlopen with a valid C string; the handle is never closed.
    unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_layout_matches_mlir() {
        let d = Descriptors::new([(&[2i64, 3][..], &[3i64, 1][..]), (&[][..], &[][..])]);
        let (words, argv) = d.bind(&[0x1000, 0x2000]);
        assert_eq!(
            words,
            vec![0x1000, 0x1000, 0, 2, 3, 3, 1, 0x2000, 0x2000, 0]
        );
        assert_eq!(argv[1], words[7..].as_ptr() as *mut c_void);
    }

    #[test]
    fn resolves_libm() {
        assert!(resolve("expf").is_some());
        assert!(resolve("_ZGVdN8v_expf").is_some());
        assert!(resolve("__kmpc_fork_call").is_some());
        assert!(resolve("__kmpc_for_static_init_4").is_none());
        assert!(resolve("definitely_not_a_symbol_fxmlir").is_none());
    }
}
