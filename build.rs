//! Hashes the sources that determine fxmlir's generated code into `FXMLIR_SOURCE_HASH`, part of
//! the compile cache's key: the crate version does not change when a lowering or a pipeline
//! does, and a cache keyed on it alone would serve kernels built by older code.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn main() {
    let mut files = vec![PathBuf::from("Cargo.toml"), PathBuf::from("Cargo.lock")];
    collect(Path::new("src"), &mut files);
    files.sort();
    let mut hash = Sha256::new();
    for file in &files {
        // A file that vanished between listing and reading only changes the hash.
        let contents = std::fs::read(file).unwrap_or_default();
        hash.update(file.to_string_lossy().as_bytes());
        hash.update((contents.len() as u64).to_le_bytes());
        hash.update(&contents);
    }
    let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo::rustc-env=FXMLIR_SOURCE_HASH={digest}");
    mlir_c();
    // Cargo rescans a directory for changed files on each build.
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=Cargo.toml");
    println!("cargo::rerun-if-changed=Cargo.lock");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// Builds libMLIR-C.so (MLIR's C API, from the prefix's static CAPI archives, over its shared
/// libMLIR and libLLVM) into the profile directory, and points the link and the run-time
/// search path at it and at the prefix.
fn mlir_c() {
    let prefix = std::env::var("MLIR_SYS_220_PREFIX").expect("MLIR_SYS_220_PREFIX is set");
    let lib = Path::new(&prefix).join("lib");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let profile = out.ancestors().nth(3).unwrap().to_path_buf();
    let target = profile.join("libMLIR-C.so");
    let mut archives: Vec<PathBuf> = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libMLIRCAPI") && n.ends_with(".a"))
        })
        .collect();
    archives.sort();
    let status = std::process::Command::new("clang++-22")
        .arg("-shared")
        .arg("-o")
        .arg(&target)
        .arg("-Wl,-soname,libMLIR-C.so")
        .arg("-Wl,--no-undefined")
        .arg("-Wl,--whole-archive")
        .args(&archives)
        .arg("-Wl,--no-whole-archive")
        .arg(format!("-L{}", lib.display()))
        .args(["-lMLIR", "-lLLVM"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("clang++-22 runs");
    assert!(status.success(), "linking libMLIR-C.so failed");
    println!("cargo::rustc-link-search=native={}", profile.display());
    println!("cargo::rustc-link-arg=-Wl,-rpath,$ORIGIN");
    println!("cargo::rustc-link-arg=-Wl,-rpath,{}", profile.display());
    println!("cargo::rustc-link-arg=-Wl,-rpath,{}", lib.display());
    // The C library (not the Python extension, which the same target builds with the
    // `python` feature) is found by its soname, as CMake's fxmlir::fxmlir links it.
    if std::env::var_os("CARGO_FEATURE_PYTHON").is_none() {
        println!("cargo::rustc-link-arg-cdylib=-Wl,-soname,libfxmlir.so");
    }
}
