//! The host's measured f32 FMA peak: what its FMA units do on the target's widest vectors when
//! nothing waits on memory. The bench reports each model's achieved GFLOP/s against it, as
//! measured in the same run (clock speeds differ between hosts, and between runs on a shared
//! one).
//!
//! Each thread runs `CHAINS` independent chains of fused multiply-adds on registers for about
//! `seconds`; the peak is the floating-point operations of all threads over the wall time.

use crate::error::{Error, Result};
use crate::target::Target;
use std::time::Instant;

/// Independent accumulator chains per thread: enough to cover the FMA latency (4 cycles) on
/// two FMA ports with a margin, few enough to stay in registers on AVX2 (16 registers).
const CHAINS: usize = 12;

/// FMA steps per timed batch: the clock is read between batches.
const STEPS: u64 = 1 << 20;

/// The f32 FMA peak of this host in GFLOP/s, on `target`'s widest vectors (which must run
/// here), with `threads` threads each for about `seconds`.
pub fn fma_peak(target: &Target, threads: usize, seconds: f64) -> Result<f64> {
    target.check_runs_here()?;
    let lanes = match target.vector_bytes() {
        64 if target.has("avx512f") => 16,
        32 if target.has("fma") => 8,
        bytes => {
            return Err(Error::Target(format!(
                "no FMA peak measure for {bytes}-byte vectors on target `{}`",
                target.describe()
            )));
        }
    };
    let threads = threads.max(1);
    let start = Instant::now();
    let steps: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(move || run_chains(lanes, seconds)))
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or(0)).sum()
    });
    let elapsed = start.elapsed().as_secs_f64();
    // Two operations (a multiply and an add) per lane of every step of every chain.
    let flops = steps as f64 * (CHAINS * lanes * 2) as f64;
    Ok(flops / elapsed / 1e9)
}

/// Runs the chains on vectors of `lanes` f32 for about `seconds`; returns the steps done.
fn run_chains(lanes: usize, seconds: f64) -> u64 {
    let start = Instant::now();
    let mut steps = 0;
    let mut sink = 0.0;
    while start.elapsed().as_secs_f64() < seconds {
        // SAFETY: `fma_peak` picked `lanes` from features the host has (`check_runs_here`).
        sink += unsafe {
            if lanes == 16 {
                chains_avx512(std::hint::black_box(STEPS))
            } else {
                chains_avx2(std::hint::black_box(STEPS))
            }
        };
        steps += STEPS;
    }
    std::hint::black_box(sink);
    steps
}

/// `steps` rounds of [`CHAINS`] AVX-512 FMAs; returns a value of the accumulators so that
/// none is dropped.
#[target_feature(enable = "avx512f")]
fn chains_avx512(steps: u64) -> f32 {
    use std::arch::x86_64::*;
    let scale = _mm512_set1_ps(0.999_99);
    let bias = _mm512_set1_ps(1e-6);
    let mut acc = [_mm512_set1_ps(1.0); CHAINS];
    for _ in 0..steps {
        for a in acc.iter_mut() {
            *a = _mm512_fmadd_ps(*a, scale, bias);
        }
    }
    acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
}

/// `steps` rounds of [`CHAINS`] AVX2 FMAs; returns a value of the accumulators.
#[target_feature(enable = "avx2,fma")]
fn chains_avx2(steps: u64) -> f32 {
    use std::arch::x86_64::*;
    let scale = _mm256_set1_ps(0.999_99);
    let bias = _mm256_set1_ps(1e-6);
    let mut acc = [_mm256_set1_ps(1.0); CHAINS];
    for _ in 0..steps {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, scale, bias);
        }
    }
    let mut lanes = [0.0f32; 8];
    let mut total = 0.0;
    for a in acc {
        // SAFETY: `lanes` holds the eight f32 the store writes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
        total += lanes.iter().sum::<f32>();
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_peak_is_measured() {
        let target = Target::host().expect("the host target");
        let one = fma_peak(&target, 1, 0.05).expect("a peak on the host");
        assert!(one > 1.0, "{one} GFLOP/s");
    }

    #[test]
    fn a_target_that_cannot_run_here_is_refused() {
        let target = Target::parse("znver5").expect("a named target");
        let host = Target::host().expect("the host target");
        if host.cpu != "znver5" {
            let error = fma_peak(&target, 1, 0.01).expect_err("a foreign target");
            assert!(error.to_string().contains("this host"), "{error}");
        }
    }
}
