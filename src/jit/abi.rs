//! The calling convention between the runtime and compiled code: MLIR's ranked memref
//! descriptors (`{allocated, aligned, offset, sizes[r], strides[r]}`, all 64-bit) passed by
//! pointer through a packed argument array, and resolution of external symbols.

use std::ffi::{CString, c_void};
use std::sync::OnceLock;

/// `void fxmlir_entry(void **descriptors)`.
pub type EntryFn = unsafe extern "C" fn(*mut *mut c_void);

/// One ranked memref descriptor. The data pointer is patched per call.
#[derive(Debug, Clone)]
pub struct Descriptor {
    words: Vec<i64>,
}

impl Descriptor {
    /// A descriptor for a tensor of `sizes` and `strides` (in elements), offset 0.
    pub fn new(sizes: &[i64], strides: &[i64]) -> Self {
        let mut words = vec![0i64, 0, 0];
        words.extend_from_slice(sizes);
        words.extend_from_slice(strides);
        Descriptor { words }
    }

    pub fn set_data(&mut self, data: usize) {
        self.words[0] = data as i64;
        self.words[1] = data as i64;
    }

    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.words.as_mut_ptr().cast()
    }
}

/// The address of a C symbol for the JIT's external calls: fxmlir's own runtime functions,
/// then whatever the process has loaded, then libm (which a Rust binary may not have linked when it calls no libm function).
pub fn resolve(symbol: &str) -> Option<usize> {
    if let Some(own) = super::support::lookup(symbol) {
        return Some(own);
    }
    let name = CString::new(symbol).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a valid C string only reads the loaded images.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !address.is_null() {
        return Some(address as usize);
    }
    let libm = libm_handle()?;
    // SAFETY: `libm` is a live handle from dlopen; the name is a valid C string.
    let address = unsafe { libc::dlsym(libm as *mut c_void, name.as_ptr()) };
    (!address.is_null()).then_some(address as usize)
}

fn libm_handle() -> Option<usize> {
    static LIBM: OnceLock<usize> = OnceLock::new();
    let handle = *LIBM.get_or_init(|| {
        // SAFETY: dlopen of the system math library with a valid C string; the handle is kept
        // for the life of the process.
        unsafe { libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) as usize }
    });
    (handle != 0).then_some(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_layout_matches_mlir() {
        let mut d = Descriptor::new(&[2, 3], &[3, 1]);
        d.set_data(0x1000);
        assert_eq!(d.words, vec![0x1000, 0x1000, 0, 2, 3, 3, 1]);
    }

    #[test]
    fn resolves_libm() {
        assert!(resolve("expf").is_some());
        assert!(resolve("definitely_not_a_symbol_fxmlir").is_none());
    }
}
