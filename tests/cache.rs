//! The compile cache: what its key depends on (and what it ignores), disk entries that load
//! and run, damaged entries and unwritable directories reported instead of failing.
//! The in-process cache is shared by every test here, so each test compiles graphs of its own.

mod common;

use common::*;
use fxmlir::graph::{Arg, DType, Graph, Source};
use fxmlir::runtime::{Source as KernelSource, cache};
use fxmlir::{Options, Target, compile};
use std::path::PathBuf;

/// A fresh directory under the system temp directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("fxmlir-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key(g: &Graph, options: &Options) -> cache::Key {
    cache::Key::new(g, options).expect("key")
}

/// `broadcast_add` with every name changed and source lines added.
fn renamed_broadcast_add(alpha: i64) -> Graph {
    let mut add = node(
        "sum_7",
        "aten.add.Tensor",
        vec![r("lhs"), r("rhs"), Arg::Int(alpha)],
        vec![meta(&[2, 3], DType::Float32)],
    );
    add.arg_names = vec!["self".into(), "other".into(), "alpha".into()];
    add.source = Some(Source {
        file: "model.py".into(),
        line: 12,
        code: Some("x + 2 * y".into()),
    });
    graph(
        "graph_41",
        vec![
            input("lhs", meta(&[2, 3], DType::Float32)),
            input("rhs", meta(&[3], DType::Float32)),
        ],
        vec![add],
        &["sum_7"],
    )
}

#[test]
fn key_ignores_names_and_source_lines() {
    let options = Options::new(Target::host().unwrap());
    assert_eq!(
        key(&broadcast_add("a", 2), &options),
        key(&renamed_broadcast_add(2), &options)
    );
}

#[test]
fn key_follows_structure_options_and_toolchain() {
    let options = Options::new(Target::host().unwrap());
    let base = key(&broadcast_add("a", 2), &options);
    assert_ne!(base, key(&broadcast_add("a", 3), &options), "an argument");
    assert_ne!(
        base,
        key(&unary("a", "aten.neg.default", &[2, 3], &[2, 3]), &options),
        "the ops"
    );
    let to_llvm = Options {
        pipeline: "to-llvm".into(),
        ..Options::new(Target::host().unwrap())
    };
    assert_ne!(base, key(&broadcast_add("a", 2), &to_llvm), "the pipeline");
    let threaded = Options::new(Target::host().unwrap().with_threads(4));
    assert_ne!(base, key(&broadcast_add("a", 2), &threaded), "the threads");
    let without_avx512 = Options::new(Target::parse("host,-avx512f").unwrap());
    assert_ne!(
        base,
        key(&broadcast_add("a", 2), &without_avx512),
        "the target's features"
    );
    let smaller_l2 = Options::new(Target::parse("x86-64-v3,l2=256K").unwrap());
    assert_ne!(
        key(
            &broadcast_add("a", 2),
            &Options::new(Target::parse("x86-64-v3").unwrap())
        ),
        key(&broadcast_add("a", 2), &smaller_l2),
        "the target's cache"
    );
    let elsewhere = Options {
        dump_dir: Some("dumps".into()),
        cache_dir: Some("cache".into()),
        ..Options::new(Target::host().unwrap())
    };
    assert_eq!(
        base,
        key(&broadcast_add("a", 2), &elsewhere),
        "where dumps and entries go does not change the code"
    );

    let lines: Vec<&str> = base.text.lines().collect();
    assert_eq!(lines[0], "fxmlir-kernel 2");
    assert!(lines[1].starts_with(concat!("fxmlir ", env!("CARGO_PKG_VERSION"), " ")));
    assert!(lines[2].starts_with("graph "));
    assert_eq!(lines[3], format!("options {}", options.fingerprint()));
    assert!(lines[3].starts_with("options pipeline=\"default\" "));
    assert!(lines[4].starts_with("llvm 22."));
    assert_eq!(
        lines[5],
        format!("target {}", Target::host().unwrap().fingerprint())
    );
    assert_eq!(base.digest.len(), 64);
}

#[test]
fn stored_entry_loads_and_runs() {
    let dir = TempDir::new("load");
    let g = unary("stored", "aten.abs.default", &[5], &[5]);
    let options = Options {
        cache_dir: Some(dir.0.clone()),
        ..Options::new(Target::host().unwrap())
    };
    let compiled = compile(&g, None, &options).unwrap();
    assert_eq!(compiled.source, KernelSource::Compiled);
    assert!(compiled.timings.iter().any(|(s, _)| s == "cache-store"));
    let k = key(&g, &options);
    assert!(cache::entry_path(&dir.0, &k).is_file());

    // What a second process does: load the entry and run it.
    let mut warnings = Vec::new();
    let kernel = cache::disk_lookup(&dir.0, &k, &mut warnings).expect("the entry loads");
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut x = [-1.5f32, 2.0, -0.0, 4.25, -8.0];
    let mut out = [0f32; 5];
    let descriptors = fxmlir::jit::Descriptors::new([(&[5i64][..], &[1i64][..]); 2]);
    let (_words, mut argv) =
        descriptors.bind(&[x.as_mut_ptr() as usize, out.as_mut_ptr() as usize]);
    // SAFETY: both descriptors describe the live 5-element arrays above.
    unsafe { (kernel.entry())(argv.as_mut_ptr()) };
    assert_eq!(out, [1.5, 2.0, 0.0, 4.25, 8.0]);

    // The same structure under another name comes from this process's cache.
    let again = compile(
        &unary("renamed", "aten.abs.default", &[5], &[5]),
        None,
        &options,
    )
    .unwrap();
    assert_eq!(again.source, KernelSource::Memory);
}

#[test]
fn damaged_entry_is_reported_not_loaded() {
    let dir = TempDir::new("damaged");
    let g = unary("damaged", "aten.floor.default", &[3], &[3]);
    let options = Options {
        cache_dir: Some(dir.0.clone()),
        ..Options::new(Target::host().unwrap())
    };
    compile(&g, None, &options).unwrap();
    let k = key(&g, &options);
    let path = cache::entry_path(&dir.0, &k);
    let mut entry = std::fs::read(&path).unwrap();
    let last = entry.len() - 1;
    entry[last] ^= 0x55;
    std::fs::write(&path, &entry).unwrap();

    let mut warnings = Vec::new();
    assert!(cache::disk_lookup(&dir.0, &k, &mut warnings).is_none());
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains(&path.display().to_string())
            && warnings[0].contains("does not match its checksum"),
        "{warnings:?}"
    );
}

#[test]
fn unwritable_cache_dir_is_reported_once() {
    let dir = TempDir::new("unwritable");
    let blocker = dir.0.join("a file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let options = Options {
        cache_dir: Some(blocker.clone()),
        ..Options::new(Target::host().unwrap())
    };
    let first = compile(
        &unary("w1", "aten.ceil.default", &[4], &[4]),
        None,
        &options,
    )
    .unwrap();
    assert_eq!(first.source, KernelSource::Compiled);
    assert_eq!(first.warnings.len(), 1, "{:?}", first.warnings);
    assert!(first.warnings[0].contains("cannot write the compile cache under"));
    let second = compile(
        &unary("w2", "aten.trunc.default", &[4], &[4]),
        None,
        &options,
    )
    .unwrap();
    assert!(second.warnings.is_empty(), "{:?}", second.warnings);
}
