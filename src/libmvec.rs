//! glibc's libmvec: which libm functions it vectorises, and how its variants are named for
//! each x86-64 vector ISA (the vector function ABI: `_ZGVeN16v_expf` is `expf` on sixteen
//! lanes with AVX-512). A leaf: the `loops` stage calls variants on MLIR vectors
//! (`pipeline::vmath`), the JIT names them for LLVM's loop vectoriser (`jit::veclib`).

use crate::target::Target;

/// libm functions libmvec has vector versions of, with their arity.
pub const FUNCTIONS: &[(&str, usize)] = &[
    ("acos", 1),
    ("acosh", 1),
    ("asin", 1),
    ("asinh", 1),
    ("atan", 1),
    ("atanh", 1),
    ("cbrt", 1),
    ("cos", 1),
    ("cosh", 1),
    ("erf", 1),
    ("erfc", 1),
    ("exp", 1),
    ("exp10", 1),
    ("exp2", 1),
    ("expm1", 1),
    ("log", 1),
    ("log10", 1),
    ("log1p", 1),
    ("log2", 1),
    ("sin", 1),
    ("sinh", 1),
    ("tan", 1),
    ("tanh", 1),
    ("atan2", 2),
    ("pow", 2),
];

/// A vector ISA of the x86-64 vector function ABI: its mangling letter and register width.
#[derive(Debug, Clone, Copy)]
pub struct Isa {
    pub letter: char,
    pub bits: u32,
}

impl Isa {
    /// The name of libmvec's variant of the libm function `base` on `bits`-bit floats taking
    /// `arity` vectors (all of this ISA's width): `_ZGVeN16v_erff` for `erf`, 32, 1 on AVX-512.
    pub fn variant(self, base: &str, bits: u32, arity: usize) -> String {
        let suffix = if bits == 32 { "f" } else { "" };
        let lanes = self.bits / bits;
        format!(
            "_ZGV{}N{lanes}{}_{base}{suffix}",
            self.letter,
            "v".repeat(arity)
        )
    }
}

/// The libmvec function `target` runs `base` (a libm name) with on whole vectors of `bits`-bit
/// floats, for a row of `length` of them: the widest variant whose lanes divide `length`, as
/// its name, its lanes and the libm function's arity. `None` for a function libmvec lacks, a
/// target without a vector ISA libmvec serves, or a row no variant's lanes divide.
pub fn row_variant(
    base: &str,
    bits: u32,
    length: i64,
    target: &Target,
) -> Option<(String, i64, usize)> {
    let (_, arity) = FUNCTIONS.iter().find(|(n, _)| *n == base)?;
    target_isas(target).into_iter().find_map(|isa| {
        let lanes = i64::from(isa.bits / bits);
        (length % lanes == 0).then(|| (isa.variant(base, bits, *arity), lanes, *arity))
    })
}

/// The ISAs whose libmvec variants `target` can run, widest first.
pub fn target_isas(target: &Target) -> Vec<Isa> {
    let mut isas = Vec::new();
    if !target.triple.starts_with("x86_64") {
        return isas;
    }
    if target.has("avx512f") {
        isas.push(Isa {
            letter: 'e',
            bits: 512,
        });
    }
    if target.has("avx2") {
        isas.push(Isa {
            letter: 'd',
            bits: 256,
        });
    }
    isas.push(Isa {
        letter: 'b',
        bits: 128,
    });
    isas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_variants_by_the_vector_function_abi() {
        let avx512 = Isa {
            letter: 'e',
            bits: 512,
        };
        assert_eq!(avx512.variant("erf", 32, 1), "_ZGVeN16v_erff");
        assert_eq!(avx512.variant("pow", 64, 2), "_ZGVeN8vv_pow");
        let sse = Isa {
            letter: 'b',
            bits: 128,
        };
        assert_eq!(sse.variant("tanh", 32, 1), "_ZGVbN4v_tanhf");
    }

    /// The widest variant the target runs whose lanes divide the row: AVX-512's, AVX2's, or
    /// at least SSE's four lanes on any x86-64.
    #[test]
    fn row_variants_follow_the_target() {
        let avx512 = Target::parse("skylake-avx512").unwrap();
        let avx2 = Target::parse("x86-64-v3").unwrap();
        let sse = Target::parse("x86-64").unwrap();
        let variant = |base, bits, length, target| {
            row_variant(base, bits, length, target).map(|(name, lanes, arity)| {
                assert_eq!(length % lanes, 0);
                (name, arity)
            })
        };
        assert_eq!(
            variant("erf", 32, 32, &avx512),
            Some(("_ZGVeN16v_erff".to_string(), 1))
        );
        assert_eq!(
            variant("erf", 32, 32, &avx2),
            Some(("_ZGVdN8v_erff".to_string(), 1))
        );
        assert_eq!(
            variant("erf", 32, 32, &sse),
            Some(("_ZGVbN4v_erff".to_string(), 1))
        );
        assert_eq!(
            variant("pow", 64, 8, &avx512),
            Some(("_ZGVeN8vv_pow".to_string(), 2))
        );
        assert_eq!(variant("erf", 32, 3, &avx512), None);
        assert_eq!(variant("sqrt", 32, 16, &avx512), None);
    }
}
