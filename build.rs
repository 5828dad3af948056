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
