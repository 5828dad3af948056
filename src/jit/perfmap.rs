//! Names for JIT code in `perf` profiles. With `FXMLIR_PERF_MAP=1` every linked kernel appends
//! its functions (the graph function, each outlined OpenMP region `<graph>..omp_par.N`, the
//! wrappers) to `/tmp/perf-<pid>.map`, the file `perf report` reads to name addresses that no
//! loaded file covers. A function's address is its offset in its object's `.text` section
//! plus where the linker put that section, found by looking one exported function up.

use llvm_sys::object::{
    LLVMBinaryRef, LLVMCreateBinary, LLVMDisposeBinary, LLVMDisposeSectionIterator,
    LLVMDisposeSymbolIterator, LLVMGetSectionName, LLVMGetSymbolAddress, LLVMGetSymbolName,
    LLVMGetSymbolSize, LLVMMoveToContainingSection, LLVMMoveToNextSymbol,
    LLVMObjectFileCopySectionIterator, LLVMObjectFileCopySymbolIterator,
    LLVMObjectFileIsSectionIteratorAtEnd, LLVMObjectFileIsSymbolIteratorAtEnd,
};
use std::ffi::CStr;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// Whether `FXMLIR_PERF_MAP` asks for the map (any value but empty and `0`).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED
        .get_or_init(|| std::env::var("FXMLIR_PERF_MAP").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// A function of an object's `.text` section: name, offset in the section, size in bytes.
struct Function {
    name: String,
    offset: u64,
    size: u64,
}

/// The sized symbols of `object`'s `.text` section (empty when it does not parse).
fn text_functions(object: &[u8]) -> Vec<Function> {
    let mut functions = Vec::new();
    // SAFETY: the buffer copies `object`; the binary, its symbol iterator and the section
    // iterator are live until disposed of at the end of this block, and every string read
    // from them is copied before they are.
    unsafe {
        let buffer = llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy(
            object.as_ptr().cast(),
            object.len(),
            c"fxmlir-kernel".as_ptr(),
        );
        let mut message = std::ptr::null_mut();
        let binary: LLVMBinaryRef = LLVMCreateBinary(buffer, std::ptr::null_mut(), &mut message);
        if !message.is_null() {
            llvm_sys::core::LLVMDisposeMessage(message);
        }
        if binary.is_null() {
            llvm_sys::core::LLVMDisposeMemoryBuffer(buffer);
            return functions;
        }
        let symbols = LLVMObjectFileCopySymbolIterator(binary);
        let section = LLVMObjectFileCopySectionIterator(binary);
        while LLVMObjectFileIsSymbolIteratorAtEnd(binary, symbols) == 0 {
            let size = LLVMGetSymbolSize(symbols);
            if size > 0 {
                LLVMMoveToContainingSection(section, symbols);
                let in_text = LLVMObjectFileIsSectionIteratorAtEnd(binary, section) == 0
                    && CStr::from_ptr(LLVMGetSectionName(section)).to_bytes() == b".text";
                if in_text {
                    functions.push(Function {
                        name: CStr::from_ptr(LLVMGetSymbolName(symbols))
                            .to_string_lossy()
                            .into_owned(),
                        offset: LLVMGetSymbolAddress(symbols),
                        size,
                    });
                }
            }
            LLVMMoveToNextSymbol(symbols);
        }
        LLVMDisposeSectionIterator(section);
        LLVMDisposeSymbolIterator(symbols);
        LLVMDisposeBinary(binary);
        llvm_sys::core::LLVMDisposeMemoryBuffer(buffer);
    }
    functions
}

/// The map lines of one linked object: `lookup` gives the address of an exported symbol (any
/// one places the whole `.text` section).
fn lines(object: &[u8], lookup: &dyn Fn(&str) -> Option<u64>) -> Vec<String> {
    let functions = text_functions(object);
    let Some(base) = functions
        .iter()
        .find_map(|f| lookup(&f.name).map(|address| address.wrapping_sub(f.offset)))
    else {
        return Vec::new();
    };
    functions
        .iter()
        .map(|f| format!("{:x} {:x} {}", base.wrapping_add(f.offset), f.size, f.name))
        .collect()
}

/// Appends the functions of a kernel's linked `objects` to this process's perf map. A map
/// that cannot be written is reported once in the log; profiling is never worth a failure.
pub fn record<O: AsRef<[u8]>>(objects: &[O], lookup: &dyn Fn(&str) -> Option<u64>) {
    static FILE: Mutex<()> = Mutex::new(());
    let text: String = objects
        .iter()
        .flat_map(|o| lines(o.as_ref(), lookup))
        .map(|line| line + "\n")
        .collect();
    let path = format!("/tmp/perf-{}.map", std::process::id());
    let _serial = FILE.lock();
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    if let Err(e) = written {
        static WARNED: OnceLock<()> = OnceLock::new();
        WARNED.get_or_init(|| tracing::warn!("cannot write the perf map {path}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_placed_from_one_exported_symbol() {
        let ctx = inkwell::context::Context::create();
        let text = "define void @a() {\n  ret void\n}\ndefine internal void @b() {\n  ret void\n}\n\
                    define void @c() {\n  call void @b()\n  ret void\n}\n";
        let buffer = inkwell::memory_buffer::MemoryBuffer::create_from_memory_range_copy(
            text.as_bytes(),
            "test",
        );
        let llvm = ctx.create_module_from_ir(buffer).unwrap();
        let target = crate::target::Target::host().unwrap();
        let machine = super::super::target_machine(&target).unwrap();
        let object = machine
            .write_to_memory_buffer(&llvm, inkwell::targets::FileType::Object)
            .unwrap();
        let functions = text_functions(object.as_slice());
        let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let a = functions.iter().find(|f| f.name == "a").unwrap().offset;
        let lookup = |name: &str| (name == "a").then_some(0x1000 + a);
        let mapped = lines(object.as_slice(), &lookup);
        assert_eq!(mapped.len(), 3);
        assert!(mapped.iter().any(|l| l.ends_with(" b")), "{mapped:?}");
        assert!(
            mapped.iter().all(|l| {
                u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap() >= 0x1000
            })
        );
    }
}
