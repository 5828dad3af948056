//! Resident memory stays bounded over many distinct compiles (the in-memory kernel cache drops
//! the least recently used kernels, whose JIT memory is freed) and over many calls. A test
//! binary of its own: the cache's bound is read once per process. The bounds catch a kernel
//! kept per compile (without the cache's bound, these 336 compiles grew RSS by about 46 MiB;
//! with it, by 0.1 MiB), not allocator noise.

mod common;

use common::unary;
use fxmlir::{Options, Target, compile};

/// Resident set size of this process, in MiB.
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux");
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's resident field");
    pages * 4096.0 / (1 << 20) as f64
}

#[test]
fn many_compiles_and_calls_keep_memory_bounded() {
    // SAFETY: set before any thread of this process reads the environment.
    unsafe { std::env::set_var("FXMLIR_MEMORY_CACHE_KERNELS", "16") };
    let options = Options::new(Target::parse("host,threads=1").unwrap());
    let compile_one = |n: i64| {
        let g = unary(&format!("rss{n}"), "aten.tanh.default", &[n], &[n]);
        compile(&g, None, &options).expect("compiles")
    };
    // Warm up: the context, the registry, LLVM's state.
    for n in 1..=64 {
        drop(compile_one(n));
    }
    let after_warmup = rss_mib();
    for n in 65..=400 {
        drop(compile_one(n));
    }
    let after_compiles = rss_mib();
    let kernel = compile_one(4);
    let input = [0.5f32; 4];
    let mut output = [0.0f32; 4];
    let pointers = [input.as_ptr() as usize, output.as_mut_ptr() as usize];
    for _ in 0..10_000 {
        // SAFETY: four f32 in, four out, as graph `rss4` records.
        unsafe { kernel.call(&pointers, None).expect("runs") };
    }
    let after_calls = rss_mib();
    println!(
        "RSS: {after_warmup:.1} MiB after 64 compiles, {after_compiles:.1} after 400, \
         {after_calls:.1} after 10,000 calls"
    );
    assert!(
        after_compiles - after_warmup < 16.0,
        "336 more distinct compiles grew RSS from {after_warmup:.1} to {after_compiles:.1} MiB"
    );
    assert!(
        after_calls - after_compiles < 8.0,
        "10,000 calls grew RSS from {after_compiles:.1} to {after_calls:.1} MiB"
    );
}
