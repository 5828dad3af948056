//! IR construction helpers shared by every lowering: scalar arithmetic inside region bodies,
//! dtype conversion with PyTorch's semantics, and the tensor-level structured ops
//! (`tensor.empty`, `linalg.fill`, `linalg.generic` with its maps and iterators, slices and
//! reshapes).

use crate::error::{Error, NodeSite, Result};
use crate::graph::{DType, dims};
use crate::pipeline::ir::maps;
use melior::{
    Context,
    ir::{
        Attribute, Block, BlockLike, Identifier, Location, Operation, OperationRef, Region,
        RegionLike, Type, Value, ValueLike,
        attribute::StringAttribute,
        operation::{OperationBuilder, OperationLike, OperationMutLike},
        r#type::TypeLike,
    },
};

/// The placeholder op of a symbolic size (in fxmlir's dialect) that [`Emit::empty`] writes
/// and `sizes::resolve` replaces.
pub const SIZE_PLACEHOLDER: &str = "fxmlir.size";

/// A failure inside a lowering; the driver fills in the node it happened on.
pub fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(lowering_error(message))
}

/// The error of a failed lowering; the driver fills in the node it happened on.
pub fn lowering_error(message: impl Into<String>) -> Error {
    Error::Lowering {
        site: NodeSite::default(),
        message: message.into(),
    }
}

/// A Python scalar operand, or a literal a lowering needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    pub fn kind(self) -> crate::graph::ScalarKind {
        match self {
            Scalar::Bool(_) => crate::graph::ScalarKind::Bool,
            Scalar::Int(_) => crate::graph::ScalarKind::Int,
            Scalar::Float(_) => crate::graph::ScalarKind::Float,
        }
    }
}

/// `tensor<2x3xf32>`-style type text.
pub fn tensor_type_text(shape: &[i64], dtype: DType) -> String {
    format!("tensor<{}{}>", dims_text(shape), dtype.mlir())
}

/// `4x?x` for a shape: a symbolic size (see [`crate::graph::dims`]) is `?`.
fn dims_text(shape: &[i64]) -> String {
    shape
        .iter()
        .map(|&d| format!("{}x", size_text(d)))
        .collect()
}

fn size_text(d: i64) -> String {
    match dims::is_symbolic(d) {
        true => "?".to_string(),
        false => d.to_string(),
    }
}

/// A static list of sizes for an op's attribute: a symbolic size is dynamic there
/// (`i64::MIN`, MLIR's `ShapedType::kDynamic`), and an operand of the op.
fn fixed(values: &[i64]) -> Vec<i64> {
    values
        .iter()
        .map(|&d| if dims::is_symbolic(d) { i64::MIN } else { d })
        .collect()
}

/// `memref<…>` with a strided layout unless the strides are the row-major ones.
pub fn memref_type_text(shape: &[i64], strides: &[i64], dtype: DType) -> String {
    let dims = dims_text(shape);
    let contiguous = crate::graph::contiguous_strides(shape);
    // Equal polynomials have equal markers, so symbolic row-major strides compare equal too.
    if strides == contiguous.as_slice() {
        format!("memref<{dims}{}>", dtype.mlir())
    } else {
        let strides: Vec<String> = strides.iter().map(|&s| size_text(s)).collect();
        format!(
            "memref<{dims}{}, strided<[{}]>>",
            dtype.mlir(),
            strides.join(", ")
        )
    }
}

pub use crate::pipeline::ir::maps::identity_map;

/// An affine map over `rank` loop dimensions; `None` entries are the constant 0 (a broadcast).
pub fn affine_map(rank: usize, results: &[Option<usize>]) -> String {
    let results: Vec<String> = results
        .iter()
        .map(|r| r.map_or("0".to_string(), maps::dim))
        .collect();
    maps::affine_map(rank, &results)
}

/// The map reading an operand of `shape` broadcast (numpy rules) to `out_shape`.
pub fn broadcast_map(shape: &[i64], out_shape: &[i64]) -> String {
    let lead = out_shape.len() - shape.len();
    let results: Vec<Option<usize>> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| (d != 1 || out_shape[lead + i] == 1).then_some(lead + i))
        .collect();
    affine_map(out_shape.len(), &results)
}

/// The map of a tensor that lost `dims` (a reduction result) read inside a loop nest over
/// all `rank` dimensions.
pub(super) fn reduced_map(rank: usize, dims: &[usize]) -> String {
    let kept: Vec<Option<usize>> = (0..rank).filter(|d| !dims.contains(d)).map(Some).collect();
    affine_map(rank, &kept)
}

/// The iterators of a loop nest over `rank` dimensions that reduces `dims`.
pub(super) fn iterators(rank: usize, dims: &[usize]) -> Vec<Iter> {
    (0..rank)
        .map(|d| {
            if dims.contains(&d) {
                Iter::Reduction
            } else {
                Iter::Parallel
            }
        })
        .collect()
}

/// numpy-style broadcast of shapes, or an error naming them.
pub fn broadcast_shapes(shapes: &[&[i64]]) -> Result<Vec<i64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for shape in shapes {
        let lead = rank - shape.len();
        for (i, &d) in shape.iter().enumerate() {
            let o = &mut out[lead + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return fail(format!("shapes {shapes:?} do not broadcast"));
            }
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Iter {
    Parallel,
    Reduction,
}

/// Appends operations to one block at one location.
#[derive(Clone, Copy)]
pub struct Emit<'c, 'a> {
    pub context: &'c Context,
    pub block: &'a Block<'c>,
    pub loc: Location<'c>,
}

/// An IR construction failure (a bug in a lowering, not in the user's graph).
pub(super) fn internal(e: impl std::fmt::Display) -> Error {
    lowering_error(format!("internal IR construction error: {e}"))
}

impl<'c, 'a> Emit<'c, 'a> {
    pub fn ty(&self, text: &str) -> Result<Type<'c>> {
        Type::parse(self.context, text).ok_or_else(|| internal(format!("bad type `{text}`")))
    }

    pub fn attr(&self, text: &str) -> Result<Attribute<'c>> {
        Attribute::parse(self.context, text)
            .ok_or_else(|| internal(format!("bad attribute `{text}`")))
    }

    pub fn elem_type(&self, dtype: DType) -> Result<Type<'c>> {
        self.ty(dtype.mlir())
    }

    pub fn tensor_type(&self, shape: &[i64], dtype: DType) -> Result<Type<'c>> {
        self.ty(&tensor_type_text(shape, dtype))
    }

    /// Builds and appends an operation from its generic form.
    pub fn op(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        results: &[Type<'c>],
        attributes: &[(&str, Attribute<'c>)],
    ) -> Result<OperationRef<'c, 'a>> {
        let op = self.build(name, operands, results, attributes, vec![])?;
        Ok(self.block.append_operation(op))
    }

    fn build(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        results: &[Type<'c>],
        attributes: &[(&str, Attribute<'c>)],
        regions: Vec<Region<'c>>,
    ) -> Result<Operation<'c>> {
        let attributes: Vec<(Identifier<'c>, Attribute<'c>)> = attributes
            .iter()
            .map(|(k, v)| (Identifier::new(self.context, k), *v))
            .collect();
        OperationBuilder::new(name, self.loc)
            .add_operands(operands)
            .add_results(results)
            .add_attributes(&attributes)
            .add_regions_vec(regions)
            .build()
            .map_err(|e| internal(format!("{name}: {e}")))
    }

    /// A single-result operation.
    pub fn op1(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        result: Type<'c>,
        attributes: &[(&str, Attribute<'c>)],
    ) -> Result<Value<'c, 'a>> {
        let op = self.op(name, operands, &[result], attributes)?;
        Ok(op.result(0).map_err(internal)?.into())
    }

    // ---- scalars -------------------------------------------------------------------------

    pub fn constant(&self, value: Scalar, dtype: DType) -> Result<Value<'c, 'a>> {
        let ty = dtype.mlir();
        let text = if dtype.is_float() {
            let v = value.as_f64();
            if v.is_nan() {
                // The canonical quiet NaN of each width.
                let bits = match dtype {
                    DType::Float16 => "0x7E00",
                    DType::Bfloat16 => "0x7FC0",
                    DType::Float32 => "0x7FC00000",
                    _ => "0x7FF8000000000000",
                };
                format!("{bits} : {ty}")
            } else if v.is_infinite() {
                let bits = match (dtype, v > 0.0) {
                    (DType::Float16, true) => "0x7C00",
                    (DType::Float16, false) => "0xFC00",
                    (DType::Bfloat16, true) => "0x7F80",
                    (DType::Bfloat16, false) => "0xFF80",
                    (DType::Float32, true) => "0x7F800000",
                    (DType::Float32, false) => "0xFF800000",
                    (_, true) => "0x7FF0000000000000",
                    (_, false) => "0xFFF0000000000000",
                };
                format!("{bits} : {ty}")
            } else {
                format!("{v:.17e} : {ty}")
            }
        } else if dtype.is_bool() {
            let truth = match value {
                Scalar::Bool(b) => b,
                other => other.as_f64() != 0.0,
            };
            format!("{truth}")
        } else {
            let v = match value {
                Scalar::Bool(b) => b as i64,
                Scalar::Int(i) => i,
                // Float -> int truncates toward zero, as a C cast does.
                Scalar::Float(f) => f as i64,
            };
            // Wrap into the type's width (two's complement), as PyTorch casts a Python int to
            // a narrower dtype: uint8 300 is 44; MLIR rejects out-of-range literals.
            let shift = 64 - dtype.bits().clamp(1, 64);
            let v = (v << shift) >> shift;
            format!("{v} : {ty}")
        };
        let attr = self.attr(&text)?;
        self.op1(
            "arith.constant",
            &[],
            self.elem_type(dtype)?,
            &[("value", attr)],
        )
    }

    pub fn index(&self, value: i64) -> Result<Value<'c, 'a>> {
        let attr = self.attr(&format!("{value} : index"))?;
        self.op1("arith.constant", &[], self.ty("index")?, &[("value", attr)])
    }

    /// A same-typed unary or binary op (`arith.addf`, `math.tanh`, …).
    pub fn same(&self, name: &str, operands: &[Value<'c, 'a>]) -> Result<Value<'c, 'a>> {
        let ty = operands[0].r#type();
        self.op1(name, operands, ty, &[])
    }

    pub fn cmpf(
        &self,
        predicate: &str,
        a: Value<'c, 'a>,
        b: Value<'c, 'a>,
    ) -> Result<Value<'c, 'a>> {
        const NAMES: [&str; 16] = [
            "false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
            "ule", "une", "uno", "true",
        ];
        let p = self.predicate(&NAMES, predicate)?;
        self.op1("arith.cmpf", &[a, b], self.ty("i1")?, &[("predicate", p)])
    }

    pub fn cmpi(
        &self,
        predicate: &str,
        a: Value<'c, 'a>,
        b: Value<'c, 'a>,
    ) -> Result<Value<'c, 'a>> {
        const NAMES: [&str; 10] = [
            "eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge",
        ];
        let p = self.predicate(&NAMES, predicate)?;
        self.op1("arith.cmpi", &[a, b], self.ty("i1")?, &[("predicate", p)])
    }

    /// The larger (`maximum`) or smaller of two floats as PyTorch's elementwise `maximum` and
    /// `minimum` compute them: NaN when either is NaN, else of two equal values (0.0 and -0.0)
    /// the second. (`arith.maximumf` orders -0.0 below 0.0; it stays for reductions, whose
    /// combiners LLVM vectorises, where PyTorch's order is unspecified.)
    pub fn torch_extremum(
        &self,
        a: Value<'c, 'a>,
        b: Value<'c, 'a>,
        maximum: bool,
    ) -> Result<Value<'c, 'a>> {
        let keep_a = self.cmpf(if maximum { "ugt" } else { "ult" }, a, b)?;
        let picked = self.select(keep_a, a, b)?;
        let b_is_nan = self.cmpf("uno", b, b)?;
        self.select(b_is_nan, b, picked)
    }

    /// Signed integer division rounding towards negative infinity, spelled out in `divsi`,
    /// `remsi` and a correction (what `arith.floordivsi` means). The LLVM stage runs no
    /// `arith-expand`, which would also turn every `maximumf` into a compare-and-select chain
    /// that LLVM cannot vectorise as a reduction.
    pub fn floor_div_si(
        &self,
        a: Value<'c, 'a>,
        d: Value<'c, 'a>,
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        let q = self.same("arith.divsi", &[a, d])?;
        let r = self.same("arith.remsi", &[a, d])?;
        let zero = self.constant(Scalar::Int(0), dtype)?;
        let one = self.constant(Scalar::Int(1), dtype)?;
        let inexact = self.cmpi("ne", r, zero)?;
        let r_negative = self.cmpi("slt", r, zero)?;
        let d_negative = self.cmpi("slt", d, zero)?;
        let signs_differ = self.same("arith.xori", &[r_negative, d_negative])?;
        let round_down = self.same("arith.andi", &[inexact, signs_differ])?;
        let below = self.same("arith.subi", &[q, one])?;
        self.select(round_down, below, q)
    }

    /// A comparison predicate: its position in the dialect's enum, as an i64 attribute.
    fn predicate(&self, names: &[&str], name: &str) -> Result<Attribute<'c>> {
        let index = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| internal(format!("unknown comparison predicate `{name}`")))?;
        self.attr(&format!("{index} : i64"))
    }

    /// A comparison in `dtype`'s domain: `pred` is one of eq, ne, lt, le, gt, ge.
    /// Floats compare ordered (false on NaN) except `ne`, which is true on NaN, as in PyTorch.
    pub fn compare(
        &self,
        pred: &str,
        a: Value<'c, 'a>,
        b: Value<'c, 'a>,
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        if dtype.is_float() {
            let p = match pred {
                "ne" => "une".to_string(),
                other => format!("o{other}"),
            };
            self.cmpf(&p, a, b)
        } else {
            let p = match pred {
                "eq" | "ne" => pred.to_string(),
                other if dtype.is_unsigned() => format!("u{other}"),
                other => format!("s{other}"),
            };
            self.cmpi(&p, a, b)
        }
    }

    /// `exp(x)` of an `x` at most 0 (a value minus the largest of its row, as softmax takes
    /// it), with the values that underflow computed as 0 without `exp`. glibc's vector `exp`
    /// hands every lane outside its range (a masked score of -inf or of a dtype's lowest
    /// value minus the row's maximum) to scalar `expf` and its error handling one at a time,
    /// which put a quarter of a causal bf16 Llama's time in `expf`. Exponents down to the limit
    /// still give a normal number; those below it, 0 here, are below 1e-37 of the row's
    /// largest term.
    pub fn exp_shifted(&self, x: Value<'c, 'a>, dtype: DType) -> Result<Value<'c, 'a>> {
        let limit = if dtype == DType::Float64 {
            -708.0
        } else {
            -87.0
        };
        let limit = self.constant(Scalar::Float(limit), dtype)?;
        let clamped = self.same("arith.maximumf", &[x, limit])?;
        let e = self.same("math.exp", &[clamped])?;
        let underflows = self.cmpf("olt", x, limit)?;
        self.select(underflows, self.constant(Scalar::Float(0.0), dtype)?, e)
    }

    pub fn select(
        &self,
        c: Value<'c, 'a>,
        a: Value<'c, 'a>,
        b: Value<'c, 'a>,
    ) -> Result<Value<'c, 'a>> {
        self.op1("arith.select", &[c, a, b], a.r#type(), &[])
    }

    /// Converts a scalar between dtypes with PyTorch's cast semantics: float to int truncates,
    /// anything to bool tests `!= 0`, unsigned and bool sources zero-extend.
    pub fn convert(&self, v: Value<'c, 'a>, from: DType, to: DType) -> Result<Value<'c, 'a>> {
        if from == to || (from.mlir() == to.mlir() && from.is_bool() == to.is_bool()) {
            return Ok(v);
        }
        let target = self.elem_type(to)?;
        if to.is_bool() {
            let zero = self.constant(Scalar::Int(0), from)?;
            return self.compare("ne", v, zero, from);
        }
        let half = |d: DType| matches!(d, DType::Float16 | DType::Bfloat16);
        if half(to) && !half(from) && from != DType::Float32 {
            // PyTorch builds halves from a float (double -> float -> half rounds twice); a
            // direct f64 -> bf16 truncation would also need a libcall the JIT lacks.
            let wide = self.convert(v, from, DType::Float32)?;
            return self.convert(wide, DType::Float32, to);
        }
        if from.is_float() && to.is_unsigned() {
            // PyTorch casts floats to uint8 through int64, so negative values wrap (-1.0 is
            // 255) where fptoui would give poison.
            let wide = self.convert(v, from, DType::Int64)?;
            return self.convert(wide, DType::Int64, to);
        }
        match (from.is_float(), to.is_float()) {
            (true, true) => {
                if from == DType::Bfloat16 {
                    let wide = self.bfloat16_to_float32(v)?;
                    self.convert(wide, DType::Float32, to)
                } else if from.bits() < to.bits() {
                    self.op1("arith.extf", &[v], target, &[])
                } else if from == DType::Float32 && to == DType::Bfloat16 {
                    self.float32_to_bfloat16(v)
                } else if from.bits() > to.bits() {
                    self.op1("arith.truncf", &[v], target, &[])
                } else {
                    // f16 <-> bf16 goes through f32.
                    let wide = self.convert(v, from, DType::Float32)?;
                    self.convert(wide, DType::Float32, to)
                }
            }
            (false, true) => {
                let name = if from.is_unsigned() {
                    "arith.uitofp"
                } else {
                    "arith.sitofp"
                };
                self.op1(name, &[v], target, &[])
            }
            (true, false) => {
                let name = if to.is_unsigned() {
                    "arith.fptoui"
                } else {
                    "arith.fptosi"
                };
                self.op1(name, &[v], target, &[])
            }
            (false, false) => {
                if from.bits() < to.bits() {
                    let name = if from.is_unsigned() {
                        "arith.extui"
                    } else {
                        "arith.extsi"
                    };
                    self.op1(name, &[v], target, &[])
                } else if from.bits() > to.bits() {
                    self.op1("arith.trunci", &[v], target, &[])
                } else {
                    Ok(v)
                }
            }
        }
    }

    /// bfloat16 -> float32 as the integer ops it is: the 16 bits become the high half. LLVM's
    /// loop vectoriser prices a vector `fpext` from bfloat as if scalarised, and so vectorised
    /// every loop holding one 4 lanes wide (a bf16 GPT-2's GELU, residual sums and layer
    /// norms: a third of its run time), where these integer ops run 16 wide.
    fn bfloat16_to_float32(&self, v: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let bits = self.op1("arith.bitcast", &[v], self.elem_type(DType::Int16)?, &[])?;
        let wide = self.op1("arith.extui", &[bits], self.elem_type(DType::Int32)?, &[])?;
        let shift = self.constant(Scalar::Int(16), DType::Int32)?;
        let high = self.same("arith.shli", &[wide, shift])?;
        self.op1(
            "arith.bitcast",
            &[high],
            self.elem_type(DType::Float32)?,
            &[],
        )
    }

    /// float32 -> bfloat16 by rounding the bits to nearest even, as PyTorch's
    /// `round_to_nearest_even` does: subnormals are kept and NaN becomes 0x7FC0. (`fptrunc`
    /// becomes `vcvtneps2bf16` on AVX512-BF16 hosts, which flushes subnormals to zero.)
    fn float32_to_bfloat16(&self, v: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let int = |x: i64| self.constant(Scalar::Int(x), DType::Int32);
        let bits = self.op1("arith.bitcast", &[v], self.elem_type(DType::Int32)?, &[])?;
        let high = self.same("arith.shrui", &[bits, int(16)?])?;
        let odd = self.same("arith.andi", &[high, int(1)?])?;
        let bias = self.same("arith.addi", &[odd, int(0x7FFF)?])?;
        let rounded = self.same("arith.addi", &[bits, bias])?;
        let high = self.same("arith.shrui", &[rounded, int(16)?])?;
        let high = self.op1("arith.trunci", &[high], self.elem_type(DType::Int16)?, &[])?;
        let nan = self.constant(Scalar::Int(0x7FC0), DType::Int16)?;
        let is_nan = self.cmpf("uno", v, v)?;
        let high = self.select(is_nan, nan, high)?;
        self.op1(
            "arith.bitcast",
            &[high],
            self.elem_type(DType::Bfloat16)?,
            &[],
        )
    }

    // ---- tensors -------------------------------------------------------------------------

    /// `tensor.empty`; a symbolic size (see [`crate::graph::dims`]) becomes an operand, a
    /// `fxmlir.size` placeholder that the lowering resolves to a value computed from the
    /// kernel's arguments (see `sizes`).
    pub fn empty(&self, shape: &[i64], dtype: DType) -> Result<Value<'c, 'a>> {
        let sizes = self.symbolic_sizes(shape)?;
        self.op1("tensor.empty", &sizes, self.tensor_type(shape, dtype)?, &[])
    }

    /// `bufferization.alloc_tensor`: an uninitialised tensor that is its own allocation (unlike
    /// a `tensor.empty`, slices of it do not fold into fresh tensors).
    pub fn alloc_tensor(&self, shape: &[i64], dtype: DType) -> Result<Value<'c, 'a>> {
        let sizes = self.symbolic_sizes(shape)?;
        let segments = self.attr(&format!("array<i32: {}, 0, 0>", sizes.len()))?;
        self.op1(
            "bufferization.alloc_tensor",
            &sizes,
            self.tensor_type(shape, dtype)?,
            &[("operandSegmentSizes", segments)],
        )
    }

    /// A tensor of `shape` holding `value` everywhere in a buffer of its own: a `linalg.fill`
    /// of a `bufferization.alloc_tensor` (CSE merges equal fills of `tensor.empty`s into one
    /// value, and every tensor then written into it is written out of place, the fill copied
    /// whole each time). A tensor placed into it is computed there in place: the fusion stage
    /// first moves the fill above that tensor's computation
    /// ([`crate::pipeline`]'s `destinations`).
    pub fn filled(&self, shape: &[i64], dtype: DType, value: Scalar) -> Result<Value<'c, 'a>> {
        let fill = self.constant(value, dtype)?;
        let buffer = self.alloc_tensor(shape, dtype)?;
        self.named_linalg("linalg.fill", &[fill], buffer, &[])
    }

    /// A size as an `index` value: a constant, or for a symbolic size (see
    /// [`crate::graph::dims`]) a `fxmlir.size` placeholder the lowering resolves.
    pub fn size(&self, d: i64) -> Result<Value<'c, 'a>> {
        if !dims::is_symbolic(d) {
            return self.index(d);
        }
        let text = dims::poly_of(d).to_string();
        let size = StringAttribute::new(self.context, &text).into();
        self.op1(SIZE_PLACEHOLDER, &[], self.ty("index")?, &[("size", size)])
    }

    /// A size as a scalar of `dtype` (through `i64`): a constant, or for a symbolic size its
    /// value computed from the kernel's arguments.
    pub fn size_value(&self, d: i64, dtype: DType) -> Result<Value<'c, 'a>> {
        let int64 = self.elem_type(DType::Int64)?;
        let size = self.op1("arith.index_cast", &[self.size(d)?], int64, &[])?;
        self.convert(size, DType::Int64, dtype)
    }

    /// The values of the symbolic sizes of `shape`, in order (the dynamic operands of ops that
    /// make a tensor of that shape).
    fn symbolic_sizes(&self, shape: &[i64]) -> Result<Vec<Value<'c, 'a>>> {
        shape
            .iter()
            .filter(|&&d| dims::is_symbolic(d))
            .map(|&d| self.size(d))
            .collect()
    }

    /// `linalg.fill` of a fresh tensor with `value` (a scalar of `dtype`).
    pub fn fill(&self, shape: &[i64], dtype: DType, value: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        let init = self.empty(shape, dtype)?;
        self.named_linalg("linalg.fill", &[value], init, &[])
    }

    pub fn splat(&self, shape: &[i64], dtype: DType, value: Scalar) -> Result<Value<'c, 'a>> {
        let v = self.constant(value, dtype)?;
        self.fill(shape, dtype, v)
    }

    /// A linalg named op (fill, matmul, batch_matmul, contract) with its implicit body filled
    /// in; `attributes` are the op's own (a contraction's `indexing_maps`).
    pub fn named_linalg(
        &self,
        name: &str,
        inputs: &[Value<'c, 'a>],
        init: Value<'c, 'a>,
        attributes: &[(&str, Attribute<'c>)],
    ) -> Result<Value<'c, 'a>> {
        let mut operands = inputs.to_vec();
        operands.push(init);
        let segments = self.attr(&format!("array<i32: {}, 1>", inputs.len()))?;
        let mut attributes = attributes.to_vec();
        attributes.push(("operandSegmentSizes", segments));
        let op = self.build(
            name,
            &operands,
            &[init.r#type()],
            &attributes,
            vec![Region::new()],
        )?;
        // SAFETY: `op` is a freshly built linalg named op with one empty region, which is what
        // the C API expects; it fills the region with the op's canonical body.
        unsafe { mlir_sys::mlirLinalgFillBuiltinNamedOpRegion(op.to_raw()) };
        let op = self.block.append_operation(op);
        Ok(op.result(0).map_err(internal)?.into())
    }

    /// `linalg.generic`. `inputs`/`outputs` pair each operand with its indexing map; `body`
    /// receives the block arguments (inputs then outputs) and returns the values to yield.
    pub fn generic<F>(
        &self,
        inputs: &[(Value<'c, 'a>, String)],
        outputs: &[(Value<'c, 'a>, String)],
        iterators: &[Iter],
        body: F,
    ) -> Result<Vec<Value<'c, 'a>>>
    where
        F: for<'b> FnOnce(&Emit<'c, 'b>, &[Value<'c, 'b>]) -> Result<Vec<Value<'c, 'b>>>,
    {
        let mut arg_types = Vec::new();
        for (v, _) in inputs.iter().chain(outputs) {
            let ty = v.r#type();
            let elem = element_type_of(ty)
                .ok_or_else(|| internal("generic operand is not a shaped type"))?;
            arg_types.push((elem, self.loc));
        }
        let block = Block::new(&arg_types);
        {
            let inner = Emit {
                context: self.context,
                block: &block,
                loc: self.loc,
            };
            let args: Vec<Value<'c, '_>> = (0..arg_types.len())
                .map(|i| block.argument(i).map(Into::into).map_err(internal))
                .collect::<Result<_>>()?;
            let yielded = body(&inner, &args)?;
            let y = inner.build("linalg.yield", &yielded, &[], &[], vec![])?;
            block.append_operation(y);
            if iterators.contains(&Iter::Reduction) {
                self.mark_reassociable(&block, &args[inputs.len()..])?;
            }
        }
        let region = Region::new();
        region.append_block(block);
        let maps: Vec<&str> = inputs
            .iter()
            .chain(outputs)
            .map(|(_, m)| m.as_str())
            .collect();
        let maps = self.attr(&format!("[{}]", maps.join(", ")))?;
        let iters: Vec<&str> = iterators
            .iter()
            .map(|i| match i {
                Iter::Parallel => "#linalg.iterator_type<parallel>",
                Iter::Reduction => "#linalg.iterator_type<reduction>",
            })
            .collect();
        let iters = self.attr(&format!("[{}]", iters.join(", ")))?;
        let segments = self.attr(&format!("array<i32: {}, {}>", inputs.len(), outputs.len()))?;
        let operands: Vec<Value<'c, 'a>> = inputs.iter().chain(outputs).map(|(v, _)| *v).collect();
        let results: Vec<Type<'c>> = outputs.iter().map(|(v, _)| v.r#type()).collect();
        let op = self.build(
            "linalg.generic",
            &operands,
            &results,
            &[
                ("indexing_maps", maps),
                ("iterator_types", iters),
                ("operandSegmentSizes", segments),
            ],
            vec![region],
        )?;
        let op = self.block.append_operation(op);
        (0..outputs.len())
            .map(|i| op.result(i).map(Into::into).map_err(internal))
            .collect()
    }

    /// Lets the floating-point combiners of a reduction body (the add, multiply, maximum or
    /// minimum that takes an accumulator `outputs` argument) be reassociated, so that LLVM's
    /// loop vectoriser may split the running value into vector lanes, as every vectorising
    /// compiler (Inductor included) sums in a different order than a scalar loop.
    fn mark_reassociable(&self, block: &Block<'c>, outputs: &[Value<'c, '_>]) -> Result<()> {
        const COMBINERS: [&str; 4] = [
            "arith.addf",
            "arith.mulf",
            "arith.maximumf",
            "arith.minimumf",
        ];
        let reassoc = self.attr("#arith.fastmath<reassoc>")?;
        let mut next = block.first_operation_mut();
        while let Some(mut op) = next {
            let name = op.name();
            let is_combiner = COMBINERS
                .iter()
                .any(|c| name.as_string_ref().as_str() == Ok(*c));
            if is_combiner && op.operands().any(|v| outputs.contains(&v)) {
                op.set_attribute("fastmath", reassoc);
            }
            next = op.next_in_block_mut();
        }
        Ok(())
    }

    /// `tensor.extract_slice` with static offsets, sizes and strides; `result_shape` may drop
    /// unit dimensions (a rank-reducing slice).
    pub fn extract_slice(
        &self,
        source: Value<'c, 'a>,
        offsets: &[i64],
        sizes: &[i64],
        strides: &[i64],
        result_shape: &[i64],
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        if result_shape.contains(&0) || sizes.contains(&0) {
            // MLIR rejects slices at offsets that are out of bounds of a size-0 dimension
            // (`x[4:]` of 4 rows, any slice of an empty tensor); the result holds nothing.
            return self.empty(result_shape, dtype);
        }
        let (mut operands, attrs) = self.slice_operands(offsets, sizes, strides, 1)?;
        operands.insert(0, source);
        self.op1(
            "tensor.extract_slice",
            &operands,
            self.tensor_type(result_shape, dtype)?,
            &attrs,
        )
    }

    /// `tensor.insert_slice` of `source` into `dest` at `offsets` (symbolic ones included)
    /// with unit strides.
    pub fn insert_slice(
        &self,
        source: Value<'c, 'a>,
        dest: Value<'c, 'a>,
        offsets: &[i64],
        sizes: &[i64],
    ) -> Result<Value<'c, 'a>> {
        let ones = vec![1i64; sizes.len()];
        self.insert_strided_slice(source, dest, offsets, sizes, &ones)
    }

    /// `source` written into `dest` at `offsets`, every `strides`-th element.
    pub fn insert_strided_slice(
        &self,
        source: Value<'c, 'a>,
        dest: Value<'c, 'a>,
        offsets: &[i64],
        sizes: &[i64],
        strides: &[i64],
    ) -> Result<Value<'c, 'a>> {
        if sizes.contains(&0) {
            // Inserting nothing (MLIR would reject the offset of an empty slice).
            return Ok(dest);
        }
        let (mut operands, attrs) = self.slice_operands(offsets, sizes, strides, 2)?;
        operands.splice(0..0, [source, dest]);
        self.op1("tensor.insert_slice", &operands, dest.r#type(), &attrs)
    }

    /// The dynamic operands (symbolic offsets, then symbolic sizes) and the attributes of a
    /// slice op whose `leading` operands (source, destination) come first: a symbolic entry
    /// is dynamic (`i64::MIN`) in its static list.
    fn slice_operands(
        &self,
        offsets: &[i64],
        sizes: &[i64],
        strides: &[i64],
        leading: usize,
    ) -> Result<(Vec<Value<'c, 'a>>, SliceAttributes<'c>)> {
        let dynamic_offsets = self.symbolic_sizes(offsets)?;
        let dynamic_sizes = self.symbolic_sizes(sizes)?;
        let lead = vec!["1"; leading].join(", ");
        let segments = format!(
            "array<i32: {lead}, {}, {}, 0>",
            dynamic_offsets.len(),
            dynamic_sizes.len()
        );
        let attrs = [
            ("static_offsets", self.attr(&i64_array(&fixed(offsets)))?),
            ("static_sizes", self.attr(&i64_array(&fixed(sizes)))?),
            ("static_strides", self.attr(&i64_array(strides))?),
            ("operandSegmentSizes", self.attr(&segments)?),
        ];
        Ok(([dynamic_offsets, dynamic_sizes].concat(), attrs))
    }

    /// `tensor.extract_slice` of `source` (of `shape`) at the dynamic position `at` of dimension
    /// `dim`, whole along the others: `len` positions (`Some`), or one position with the
    /// dimension dropped (`None`).
    pub fn extract_at(
        &self,
        source: Value<'c, 'a>,
        shape: &[i64],
        dim: usize,
        at: Value<'c, 'a>,
        len: Option<i64>,
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        let (mut attrs, sizes) = self.slice_at_attrs(shape, dim, len)?;
        let segments = format!("array<i32: 1, 1, {}, 0>", sizes.len());
        attrs.push(("operandSegmentSizes", self.attr(&segments)?));
        let mut operands = vec![source, at];
        operands.extend(sizes);
        let mut result = shape.to_vec();
        match len {
            Some(len) => result[dim] = len,
            None => {
                result.remove(dim);
            }
        }
        self.op1(
            "tensor.extract_slice",
            &operands,
            self.tensor_type(&result, dtype)?,
            &attrs,
        )
    }

    /// `tensor.insert_slice` of `source` into `dest` (of `shape`) at the dynamic position `at`
    /// of dimension `dim`, `len` as for [`Emit::extract_at`]; returns the updated tensor. In an
    /// `scf.forall.in_parallel` block (`parallel`), `tensor.parallel_insert_slice` instead,
    /// which has no result: `dest` comes back.
    pub fn insert_at(
        &self,
        source: Value<'c, 'a>,
        dest: Value<'c, 'a>,
        shape: &[i64],
        (dim, at, len): (usize, Value<'c, 'a>, Option<i64>),
        parallel: bool,
    ) -> Result<Value<'c, 'a>> {
        let (mut attrs, sizes) = self.slice_at_attrs(shape, dim, len)?;
        let segments = format!("array<i32: 1, 1, 1, {}, 0>", sizes.len());
        attrs.push(("operandSegmentSizes", self.attr(&segments)?));
        let mut operands = vec![source, dest, at];
        operands.extend(sizes);
        if parallel {
            self.op("tensor.parallel_insert_slice", &operands, &[], &attrs)?;
            return Ok(dest);
        }
        self.op1("tensor.insert_slice", &operands, dest.r#type(), &attrs)
    }

    /// The attributes of a slice at a dynamic offset of dimension `dim` and the values of its
    /// symbolic sizes (its dynamic size operands).
    fn slice_at_attrs(
        &self,
        shape: &[i64],
        dim: usize,
        len: Option<i64>,
    ) -> Result<SliceAt<'c, 'a>> {
        let rank = shape.len();
        let mut offsets = vec![0; rank];
        offsets[dim] = i64::MIN; // ShapedType::kDynamic: the offset is an operand
        let mut sizes = shape.to_vec();
        sizes[dim] = len.unwrap_or(1);
        let attrs = vec![
            ("static_offsets", self.attr(&i64_array(&offsets))?),
            ("static_sizes", self.attr(&i64_array(&fixed(&sizes)))?),
            ("static_strides", self.attr(&i64_array(&vec![1; rank]))?),
        ];
        Ok((attrs, self.symbolic_sizes(&sizes)?))
    }

    /// Any reshape that keeps the element count: collapse to 1-D, then expand to the target.
    /// Canonicalisation folds the pair into one op whenever the dimensions line up.
    pub fn reshape(
        &self,
        source: Value<'c, 'a>,
        from: &[i64],
        to: &[i64],
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        if from == to {
            return Ok(source);
        }
        if from.iter().chain(to).any(|&d| dims::is_symbolic(d)) {
            return self.reshape_symbolic(source, from, to, dtype);
        }
        self.reshape_through_line(source, from, to, dtype)
    }

    /// A reshape as a collapse to one dimension and an expand from it.
    fn reshape_through_line(
        &self,
        source: Value<'c, 'a>,
        from: &[i64],
        to: &[i64],
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        let numel = dims::product(from)?;
        let flat = match from.len() {
            1 => source,
            0 => self.reassociate("tensor.expand_shape", source, &[1], dtype, "[]", Some(&[1]))?,
            n => {
                let group: Vec<String> = (0..n).map(|i| i.to_string()).collect();
                let r = format!("[[{}]]", group.join(", "));
                self.reassociate("tensor.collapse_shape", source, &[numel], dtype, &r, None)?
            }
        };
        match to.len() {
            1 => Ok(flat),
            0 => self.reassociate("tensor.collapse_shape", flat, &[], dtype, "[]", None),
            n => {
                let group: Vec<String> = (0..n).map(|i| i.to_string()).collect();
                let r = format!("[[{}]]", group.join(", "));
                self.reassociate("tensor.expand_shape", flat, to, dtype, &r, Some(to))
            }
        }
    }

    /// A reshape with symbolic sizes: one collapse or one expand whose groups match the
    /// sizes as polynomials (a size of one joins a neighbour's group), else a collapse to one
    /// dimension and an expand from it. An expand whose group splits into several symbolic
    /// sizes becomes a reshape through a shape operand before bufferization
    /// ([`crate::pipeline::reshapes`]).
    fn reshape_symbolic(
        &self,
        source: Value<'c, 'a>,
        from: &[i64],
        to: &[i64],
        dtype: DType,
    ) -> Result<Value<'c, 'a>> {
        let text = |groups: &[Vec<usize>]| {
            let groups: Vec<String> = groups
                .iter()
                .map(|g| {
                    let items: Vec<String> = g.iter().map(usize::to_string).collect();
                    format!("[{}]", items.join(", "))
                })
                .collect();
            format!("[{}]", groups.join(", "))
        };
        if dims::is_empty(from)? {
            // No element to move.
            return self.empty(to, dtype);
        }
        let groups = match from.len().cmp(&to.len()) {
            std::cmp::Ordering::Greater => {
                reshape_groups(from, to).map(|g| ("tensor.collapse_shape", g, None))
            }
            std::cmp::Ordering::Less => {
                reshape_groups(to, from).map(|g| ("tensor.expand_shape", g, Some(to)))
            }
            std::cmp::Ordering::Equal => None,
        };
        match groups {
            Some((name, groups, output)) => {
                self.reassociate(name, source, to, dtype, &text(&groups), output)
            }
            // Sizes that match in no groups (a size from a floor division whose product
            // equals the input's only where the graph's tracing guards it): through one
            // dimension.
            None => self.reshape_through_line(source, from, to, dtype),
        }
    }

    fn reassociate(
        &self,
        name: &str,
        source: Value<'c, 'a>,
        shape: &[i64],
        dtype: DType,
        reassociation: &str,
        output_shape: Option<&[i64]>,
    ) -> Result<Value<'c, 'a>> {
        let mut attrs = vec![("reassociation", self.attr(reassociation)?)];
        let mut operands = vec![source];
        if let Some(out) = output_shape {
            attrs.push(("static_output_shape", self.attr(&i64_array(&fixed(out)))?));
            operands.extend(self.symbolic_sizes(out)?);
        }
        self.op1(name, &operands, self.tensor_type(shape, dtype)?, &attrs)
    }
}

/// The attributes of a slice at a dynamic offset and its dynamic size operands.
type SliceAt<'c, 'a> = (Vec<(&'static str, Attribute<'c>)>, Vec<Value<'c, 'a>>);

/// The attributes of a slice op: its static offsets, sizes and strides and its operand segments.
type SliceAttributes<'c> = [(&'static str, Attribute<'c>); 4];

/// The groups of the dimensions of `long` whose sizes multiply, as polynomials, to each size
/// of `short` in turn (sizes of one join the group before them, or the first); `None` if
/// there are none.
fn reshape_groups(long: &[i64], short: &[i64]) -> Option<Vec<Vec<usize>>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut next = 0;
    for &target in short {
        let wanted = dims::poly_of(target);
        let mut group = Vec::new();
        let mut product = dims::Poly::constant(1);
        loop {
            let &d = long.get(next)?;
            group.push(next);
            product = product.mul(&dims::poly_of(d)).ok()?;
            next += 1;
            if product == wanted {
                break;
            }
        }
        groups.push(group);
    }
    while next < long.len() && long[next] == 1 {
        groups.last_mut()?.push(next);
        next += 1;
    }
    (next == long.len() && !groups.is_empty()).then_some(groups)
}

pub fn i64_array(values: &[i64]) -> String {
    let items: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    if items.is_empty() {
        "array<i64>".to_string()
    } else {
        format!("array<i64: {}>", items.join(", "))
    }
}

fn element_type_of(ty: Type<'_>) -> Option<Type<'_>> {
    // SAFETY: the checks guard the shaped-type accessor.
    unsafe {
        let raw = ty.to_raw();
        if mlir_sys::mlirTypeIsAShaped(raw) {
            Some(Type::from_raw(mlir_sys::mlirShapedTypeGetElementType(raw)))
        } else {
            None
        }
    }
}
