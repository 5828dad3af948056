//! Native MLIR plugins: shared objects built against the same MLIR as fxmlir (Debian's
//! `libMLIR.so`, or fxmlir's `libMLIR-C.so` for C written against MLIR's C API) that register
//! passes (`mlirGetPassPluginInfo`) or dialects (`mlirGetDialectPluginInfo`), as
//! `mlir-opt --load-pass-plugin` and `--load-dialect-plugin` load them.
//!
//! fxmlir links MLIR and LLVM as shared libraries, so a plugin shares their one copy: its
//! passes land in the registry fxmlir's pipelines parse, its TypeIDs and command-line options
//! are the process's own. A plugin built against another MLIR or LLVM (a `DT_NEEDED` on a
//! `libMLIR.so`/`libLLVM.so` of another version) or carrying a copy of its own (linking
//! neither) would crash the process when loaded; it is refused before `dlopen` runs any of its
//! code. A plugin that loads is kept for the life of the process, once per path.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// `MLIR_PLUGIN_API_VERSION`, the plugin ABI MLIR 22 defines.
pub const PLUGIN_API_VERSION: u32 = 1;

/// What a plugin registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Pass,
    Dialect,
}

impl Kind {
    /// The plugin's entry point, a C symbol.
    fn entry(self) -> &'static CStr {
        match self {
            Kind::Pass => c"mlirGetPassPluginInfo",
            Kind::Dialect => c"mlirGetDialectPluginInfo",
        }
    }
}

/// `mlir::PassPluginLibraryInfo` and `mlir::DialectPluginLibraryInfo`: the same layout, the
/// callback taking a `mlir::DialectRegistry *` for a dialect plugin and nothing for a pass
/// plugin.
#[repr(C)]
struct PluginInfo {
    api_version: u32,
    name: *const c_char,
    version: *const c_char,
    register: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// A loaded plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    pub path: PathBuf,
    pub kind: Kind,
    /// The name and version it gives.
    pub name: String,
    pub version: String,
    /// The SHA-256 of the file, for cache keys: a rebuilt plugin changes the code.
    pub digest: String,
    /// A dialect plugin's registration callback, called for each context.
    register: usize,
}

fn refused(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Plugin {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// Loads the plugin at `path` (once per process): checks that it links this process's MLIR,
/// opens it, checks its API version and, for a pass plugin, registers its passes.
pub fn load(path: &Path, kind: Kind) -> Result<Plugin> {
    static LOADED: OnceLock<Mutex<HashMap<(PathBuf, Kind), Plugin>>> = OnceLock::new();
    let canonical =
        std::fs::canonicalize(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let loaded = LOADED.get_or_init(Default::default);
    let mut loaded = loaded.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(plugin) = loaded.get(&(canonical.clone(), kind)) {
        return Ok(plugin.clone());
    }
    let bytes =
        std::fs::read(&canonical).map_err(|e| Error::io(canonical.display().to_string(), e))?;
    check_links(&canonical, &bytes)?;
    let plugin = open(&canonical, kind, &bytes)?;
    loaded.insert((canonical, kind), plugin.clone());
    Ok(plugin)
}

impl Plugin {
    /// Registers a dialect plugin's dialects with `context` (a pass plugin registered its
    /// passes when it loaded).
    pub fn register_dialects(&self, context: &melior::Context) {
        if self.kind != Kind::Dialect || self.register == 0 {
            return;
        }
        // SAFETY: `register` is the plugin's callback (the plugin stays loaded), which takes
        // a `mlir::DialectRegistry *`: what an `MlirDialectRegistry` wraps.
        unsafe {
            let callback: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(self.register);
            let registry = mlir_sys::mlirDialectRegistryCreate();
            callback(registry.ptr);
            mlir_sys::mlirContextAppendDialectRegistry(context.to_raw(), registry);
            mlir_sys::mlirDialectRegistryDestroy(registry);
        }
    }
}

/// Opens a plugin whose links were checked and reads its entry point.
fn open(path: &Path, kind: Kind, bytes: &[u8]) -> Result<Plugin> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| refused(path, "the path holds a NUL byte"))?;
    // SAFETY: the plugin links this process's MLIR and LLVM (checked above); dlopen runs its
    // initialisers, which register with those.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a message owned by libc, or null.
        let message = unsafe { libc::dlerror() };
        let message = if message.is_null() {
            "dlopen failed".to_string()
        } else {
            // SAFETY: a NUL-terminated string from libc.
            unsafe { CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(refused(path, message));
    }
    // SAFETY: a live handle; the symbol, if present, is the plugin's entry point.
    let symbol = unsafe { libc::dlsym(handle, kind.entry().as_ptr()) };
    if symbol.is_null() {
        return Err(refused(
            path,
            format!(
                "it has no `{}`: not a {} plugin",
                kind.entry().to_string_lossy(),
                match kind {
                    Kind::Pass => "pass",
                    Kind::Dialect => "dialect",
                }
            ),
        ));
    }
    // SAFETY: MLIR's plugin entry points take nothing and return the info struct by value.
    let info = unsafe {
        let entry: extern "C" fn() -> PluginInfo = std::mem::transmute(symbol);
        entry()
    };
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated string in the loaded plugin.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    if info.api_version != PLUGIN_API_VERSION {
        return Err(refused(
            path,
            format!(
                "plugin API version {}, fxmlir's MLIR takes {PLUGIN_API_VERSION}",
                info.api_version
            ),
        ));
    }
    let register = info
        .register
        .ok_or_else(|| refused(path, "its registration callback is null"))?;
    if kind == Kind::Pass {
        // SAFETY: a pass plugin's callback takes no argument; it registers the plugin's
        // passes with MLIR's (this process's) pass registry.
        unsafe {
            let register: unsafe extern "C" fn() = std::mem::transmute(register);
            register();
        }
    }
    Ok(Plugin {
        path: path.to_path_buf(),
        kind,
        name: text(info.name),
        version: text(info.version),
        digest: sha256(bytes),
        register: register as usize,
    })
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The sonames of the MLIR and LLVM this process runs (`libMLIR.so.22.1`, `libLLVM.so.22.1`),
/// read from the libraries mapped into it.
fn process_sonames() -> Result<Vec<String>> {
    let maps =
        std::fs::read_to_string("/proc/self/maps").map_err(|e| Error::io("/proc/self/maps", e))?;
    let mut sonames = Vec::new();
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let file = Path::new(path)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("");
        if !(file.starts_with("libMLIR.so") || file.starts_with("libLLVM")) {
            continue;
        }
        if let Ok(bytes) = std::fs::read(path)
            && let Ok(dynamic) = elf::Dynamic::read(&bytes)
            && let Some(soname) = dynamic.soname
            && !sonames.contains(&soname)
        {
            sonames.push(soname);
        }
    }
    sonames.sort();
    Ok(sonames)
}

/// Whether a library name is MLIR's or LLVM's shared library (any version).
fn is_mlir_or_llvm(name: &str) -> bool {
    name.starts_with("libMLIR.so") || name.starts_with("libLLVM.so") || name.starts_with("libLLVM-")
}

/// Refuses a plugin that would bring a second MLIR or LLVM into the process: one that needs
/// another version's libraries, or none of MLIR's (a static copy of its own).
fn check_links(path: &Path, bytes: &[u8]) -> Result<()> {
    let dynamic = elf::Dynamic::read(bytes).map_err(|m| refused(path, m))?;
    let ours = process_sonames()?;
    if !ours.iter().any(|s| s.starts_with("libMLIR.so")) {
        return Err(refused(
            path,
            "this fxmlir links MLIR statically: native plugins need its shared build",
        ));
    }
    for needed in dynamic.needed.iter().filter(|n| is_mlir_or_llvm(n)) {
        if !ours.contains(needed) {
            return Err(refused(
                path,
                format!(
                    "it was built against {needed}, but fxmlir runs {}: rebuild it against the \
                     same MLIR",
                    ours.join(" and ")
                ),
            ));
        }
    }
    let shares = dynamic
        .needed
        .iter()
        .any(|n| n.starts_with("libMLIR.so") || n == "libMLIR-C.so");
    if !shares {
        return Err(refused(
            path,
            "it links neither libMLIR.so nor libMLIR-C.so: a plugin with MLIR linked in is a \
             second copy of MLIR (link it against the MLIR dylib: `target_link_libraries(... \
             MLIR)`)",
        ));
    }
    Ok(())
}

/// The dynamic section of an ELF64 little-endian shared object: what it needs, and its name.
mod elf {
    pub struct Dynamic {
        pub needed: Vec<String>,
        pub soname: Option<String>,
    }

    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    const DT_SONAME: u64 = 14;

    fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }

    /// A program header: type, file offset, virtual address, size in the file.
    struct Segment {
        kind: u32,
        offset: u64,
        vaddr: u64,
        size: u64,
    }

    impl Dynamic {
        pub fn read(b: &[u8]) -> Result<Dynamic, String> {
            Self::parse(b).ok_or_else(|| "not an ELF64 little-endian shared object".to_string())
        }

        fn parse(b: &[u8]) -> Option<Dynamic> {
            if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
                return None;
            }
            let (phoff, phentsize, phnum) = (
                u64_at(b, 0x20)? as usize,
                u16_at(b, 0x36)? as usize,
                u16_at(b, 0x38)?,
            );
            let segments: Vec<Segment> = (0..phnum as usize)
                .map(|i| {
                    let at = phoff + i * phentsize;
                    Some(Segment {
                        kind: u32_at(b, at)?,
                        offset: u64_at(b, at + 8)?,
                        vaddr: u64_at(b, at + 16)?,
                        size: u64_at(b, at + 32)?,
                    })
                })
                .collect::<Option<_>>()?;
            let dynamic = segments.iter().find(|s| s.kind == PT_DYNAMIC)?;
            let mut entries = Vec::new();
            let mut at = dynamic.offset as usize;
            loop {
                let (tag, value) = (u64_at(b, at)?, u64_at(b, at + 8)?);
                if tag == DT_NULL {
                    break;
                }
                entries.push((tag, value));
                at += 16;
            }
            let strtab = entries.iter().find(|(t, _)| *t == DT_STRTAB)?.1;
            let strtab = segments
                .iter()
                .find(|s| s.kind == PT_LOAD && s.vaddr <= strtab && strtab < s.vaddr + s.size)
                .map(|s| (strtab - s.vaddr + s.offset) as usize)?;
            let string = |offset: u64| -> Option<String> {
                let start = strtab + offset as usize;
                let end = start + b.get(start..)?.iter().position(|&c| c == 0)?;
                Some(String::from_utf8_lossy(&b[start..end]).into_owned())
            };
            let needed = entries
                .iter()
                .filter(|(t, _)| *t == DT_NEEDED)
                .map(|(_, v)| string(*v))
                .collect::<Option<_>>()?;
            let soname = match entries.iter().find(|(t, _)| *t == DT_SONAME) {
                Some((_, v)) => Some(string(*v)?),
                None => None,
            };
            Some(Dynamic { needed, soname })
        }
    }
}
