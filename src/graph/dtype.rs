//! PyTorch scalar types and PyTorch's type-promotion rules.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bool,
    Uint8,
    Int8,
    Int16,
    Int32,
    Int64,
    Float16,
    Bfloat16,
    Float32,
    Float64,
}

/// The kind of a Python scalar operand (`x + 2`, `x * 0.5`, `x & True`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarKind {
    Bool,
    Int,
    Float,
}

impl DType {
    pub const ALL: [DType; 10] = [
        DType::Bool,
        DType::Uint8,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Float16,
        DType::Bfloat16,
        DType::Float32,
        DType::Float64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Uint8 => "uint8",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Float16 => "float16",
            DType::Bfloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
        }
    }

    /// The MLIR element type (integers are signless; signedness lives in the ops).
    pub fn mlir(self) -> &'static str {
        match self {
            DType::Bool => "i1",
            DType::Uint8 | DType::Int8 => "i8",
            DType::Int16 => "i16",
            DType::Int32 => "i32",
            DType::Int64 => "i64",
            DType::Float16 => "f16",
            DType::Bfloat16 => "bf16",
            DType::Float32 => "f32",
            DType::Float64 => "f64",
        }
    }

    pub fn byte_size(self) -> usize {
        match self {
            DType::Bool | DType::Uint8 | DType::Int8 => 1,
            DType::Int16 | DType::Float16 | DType::Bfloat16 => 2,
            DType::Int32 | DType::Float32 => 4,
            DType::Int64 | DType::Float64 => 8,
        }
    }

    pub fn bits(self) -> u32 {
        if self == DType::Bool {
            1
        } else {
            8 * self.byte_size() as u32
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::Float16 | DType::Bfloat16 | DType::Float32 | DType::Float64
        )
    }

    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// Integer types other than bool.
    pub fn is_int(self) -> bool {
        !self.is_float() && !self.is_bool()
    }

    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::Uint8 | DType::Bool)
    }

    /// The type PyTorch computes in for this storage type: half types are computed in f32.
    pub fn compute(self) -> DType {
        match self {
            DType::Float16 | DType::Bfloat16 => DType::Float32,
            other => other,
        }
    }

    /// The accumulator of a sum-like reduction (PyTorch's `acc_type` on CPU).
    pub fn accumulator(self) -> DType {
        match self {
            DType::Float16 | DType::Bfloat16 => DType::Float32,
            DType::Bool | DType::Uint8 | DType::Int8 | DType::Int16 | DType::Int32 => DType::Int64,
            other => other,
        }
    }

    /// `torch.promote_types`.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        if a.is_bool() {
            return b;
        }
        if b.is_bool() {
            return a;
        }
        match (a.is_float(), b.is_float()) {
            (true, false) => a,
            (false, true) => b,
            (true, true) => {
                if matches!((a, b), (Float16, Bfloat16) | (Bfloat16, Float16)) {
                    Float32
                } else if a.byte_size() >= b.byte_size() {
                    a
                } else {
                    b
                }
            }
            (false, false) => {
                if matches!((a, b), (Uint8, Int8) | (Int8, Uint8)) {
                    Int16
                } else if a == Uint8 {
                    b.max_int(Int16)
                } else if b == Uint8 {
                    a.max_int(Int16)
                } else if a.byte_size() >= b.byte_size() {
                    a
                } else {
                    b
                }
            }
        }
    }

    fn max_int(self, floor: DType) -> DType {
        if self.byte_size() >= floor.byte_size() {
            self
        } else {
            floor
        }
    }
}

/// One operand of an op, as PyTorch's `result_type` sees it.
#[derive(Debug, Clone, Copy)]
pub enum Operand {
    Tensor { dtype: DType, rank: usize },
    Scalar(ScalarKind),
}

/// `torch.result_type`: tensors with dimensions outrank zero-dim tensors, which outrank Python
/// scalars, unless a lower-ranked operand belongs to a higher category (bool < int < float).
pub fn result_type(operands: &[Operand], default_float: DType) -> DType {
    let mut dim: Option<DType> = None;
    let mut zero_dim: Option<DType> = None;
    let mut scalar: Option<DType> = None;
    let join = |slot: &mut Option<DType>, t: DType| {
        *slot = Some(slot.map_or(t, |s| DType::promote(s, t)));
    };
    for operand in operands {
        match *operand {
            Operand::Tensor { dtype, rank } if rank > 0 => join(&mut dim, dtype),
            Operand::Tensor { dtype, .. } => join(&mut zero_dim, dtype),
            Operand::Scalar(kind) => join(
                &mut scalar,
                match kind {
                    ScalarKind::Bool => DType::Bool,
                    ScalarKind::Int => DType::Int64,
                    ScalarKind::Float => default_float,
                },
            ),
        }
    }
    let combine = |higher: Option<DType>, lower: Option<DType>| match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) if !h.is_float() && (h.is_bool() || l.is_float()) => {
            Some(DType::promote(h, l))
        }
        (h, _) => h,
    };
    combine(dim, combine(zero_dim, scalar)).unwrap_or(default_float)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn promote_types_matches_torch() {
        assert_eq!(DType::promote(Uint8, Int8), Int16);
        assert_eq!(DType::promote(Uint8, Int32), Int32);
        assert_eq!(DType::promote(Bool, Uint8), Uint8);
        assert_eq!(DType::promote(Float16, Bfloat16), Float32);
        assert_eq!(DType::promote(Int64, Float16), Float16);
        assert_eq!(DType::promote(Float32, Float64), Float64);
    }

    #[test]
    fn result_type_respects_operand_priority() {
        let t = |dtype, rank| Operand::Tensor { dtype, rank };
        // int tensor + float scalar -> default float
        assert_eq!(
            result_type(&[t(Int64, 2), Operand::Scalar(ScalarKind::Float)], Float32),
            Float32
        );
        // f16 tensor + float scalar -> f16
        assert_eq!(
            result_type(
                &[t(Float16, 2), Operand::Scalar(ScalarKind::Float)],
                Float32
            ),
            Float16
        );
        // f32 tensor + f64 zero-dim tensor -> f32
        assert_eq!(
            result_type(&[t(Float32, 2), t(Float64, 0)], Float32),
            Float32
        );
        // i32 tensor + f64 zero-dim tensor -> f64
        assert_eq!(result_type(&[t(Int32, 1), t(Float64, 0)], Float32), Float64);
        // u8 tensor + int scalar -> u8
        assert_eq!(
            result_type(&[t(Uint8, 1), Operand::Scalar(ScalarKind::Int)], Float32),
            Uint8
        );
        // bool tensor + int scalar -> i64
        assert_eq!(
            result_type(&[t(Bool, 1), Operand::Scalar(ScalarKind::Int)], Float32),
            Int64
        );
        // zero-dim tensors alone promote normally
        assert_eq!(result_type(&[t(Int32, 0), t(Int64, 0)], Float32), Int64);
    }
}
