//! The in-memory kernel cache is bounded (`FXMLIR_MEMORY_CACHE_KERNELS`): compiling more
//! distinct graphs than the bound keeps only the most recently used, and a kernel dropped from
//! the cache still runs for the compiled graph that holds it. A test binary of its own: the
//! bound is read once per process.

mod common;

use common::unary;
use fxmlir::runtime::cache;
use fxmlir::{Options, Target, compile};

#[test]
fn the_memory_cache_keeps_the_most_recently_used_kernels() {
    // SAFETY: set before any thread of this process reads the environment.
    unsafe { std::env::set_var("FXMLIR_MEMORY_CACHE_KERNELS", "3") };
    let options = Options::new(Target::host().unwrap());
    let shapes: Vec<i64> = (1..=5).collect();
    let compiled: Vec<_> = shapes
        .iter()
        .map(|&n| {
            let g = unary(&format!("bounded{n}"), "aten.neg.default", &[n], &[n]);
            compile(&g, None, &options).expect("compiles")
        })
        .collect();
    assert_eq!(cache::memory_len(), 3);
    // The first graph's kernel left the cache; its compiled graph still runs it.
    let input = [2.0f32];
    let mut output = [0.0f32];
    let pointers = [input.as_ptr() as usize, output.as_mut_ptr() as usize];
    // SAFETY: one f32 in, one f32 out, as graph `bounded1` records.
    unsafe { compiled[0].call(&pointers, None).expect("runs") };
    assert_eq!(output, [-2.0]);
    // Compiling it again compiles anew (it is not in memory), and evicts another.
    let again = compile(
        &unary("bounded1", "aten.neg.default", &[1], &[1]),
        None,
        &options,
    )
    .expect("compiles");
    assert_eq!(again.source, fxmlir::runtime::Source::Compiled);
    assert_eq!(cache::memory_len(), 3);
}
