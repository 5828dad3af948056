//! The fused forward of scaled dot-product attention over fixed sizes (flash attention):
//! `softmax(q kᵀ · scale + mask) v` and its logsumexp without a score matrix in memory. Each
//! iteration of one `scf.forall` (an `scf.for` on one thread) takes a block of query rows of
//! one head and walks the key blocks, keeping the block's scores (`rows x keys`, in L1), its
//! running row maxima and sums, and its output accumulator (`rows x Ev`) in scratch tensors;
//! the products are register tiles written as vector FMAs (`mr` rows x two vectors, broadcast
//! left operand), the softmax is online (each key block rescales the accumulator by
//! `exp(old max - new max)`). With causality, key blocks wholly above the block's last row are
//! skipped. The last key block computes only its keys up to the last real one, in whole
//! register tiles (197 keys: a block of 128, then 96).
//!
//! Operands are packed once per call, outside the loop, so that every read in the loop is a
//! whole vector in bounds: the queries as `[B·H, Lp, E]` f32, the keys transposed, scaled and
//! blocked as `[B·Hkv, S/Bc, E, Bc]` f32 (a key block's rows are contiguous vectors of keys),
//! the values as `[B·Hkv, Sp, Evp]` f32; padded rows, keys and columns are zeros, padded keys
//! hidden like causally masked ones. Half-precision operands are widened there; everything
//! accumulates in f32. Sizes that need no padding and f32 operands are read as they come. On a
//! target with AVX512-BF16, bf16 operands stay bf16 and the products take pairs of them
//! (`vdpbf16ps`): keys packed as `[B·Hkv, S/Bc, Ep/2, 2·Bc]`, values as `[B·Hkv, Sp/2, 2·Evp]`,
//! the exponentials rounded to bf16 for `p v` as PyTorch's kernel rounds them.

use super::loops::{for_loop, forall, nth, reuse};
use super::products::pad_to_multiple;
use super::{Emit, Iter, LowerCtx, Scalar, Tensor, emit, layout};
use crate::error::Result;
use crate::graph::{DType, dims};
use crate::target::Target;
use melior::ir::{Type, Value, ValueLike};

/// One attention forward: `q` `[B, H, L, E]`, `k` `[B, Hkv, S, E]`, `v` `[B, Hkv, S, Ev]`, an
/// additive `mask` broadcastable to `[B, H, L, S]`, causality (query `i` sees keys `j <= i`),
/// the scale of the scores and the output's dtype.
pub(super) struct Problem<'c, 'a> {
    pub q: Tensor<'c, 'a>,
    pub k: Tensor<'c, 'a>,
    pub v: Tensor<'c, 'a>,
    pub mask: Option<Tensor<'c, 'a>>,
    pub causal: bool,
    pub scale: f64,
    pub at: Sizes,
    pub dtype: DType,
}

/// The sizes of an attention: batch, query and key heads, query and key lengths, the head
/// sizes of the queries and keys (`E`) and of the values (`Ev`).
#[derive(Clone, Copy)]
pub(super) struct Sizes {
    pub batch: i64,
    pub heads: i64,
    pub kv_heads: i64,
    pub l: i64,
    pub s: i64,
    pub e: i64,
    pub ev: i64,
}

impl Sizes {
    fn all(&self) -> [i64; 7] {
        [
            self.batch,
            self.heads,
            self.kv_heads,
            self.l,
            self.s,
            self.e,
            self.ev,
        ]
    }
}

/// Scores per head below which the unfused forward is at least as fast: its score matrix stays
/// in cache, and the fused kernel's packing and per-block work are not repaid (12 heads of 64
/// tokens, batch 8: 0.65 ms unfused against 0.81-0.90 fused; 16 x 512: 0.15 against 0.14).
const MIN_SCORES: i64 = 8192;

/// Query rows below which the unfused forward is faster (a decode step's one row would fill a
/// register tile of eight).
const MIN_ROWS: i64 = 8;

/// Whether the fused kernel computes `p`: fixed, non-empty sizes, f32 or half-precision
/// operands, a fixed mask shape, and a score matrix of at least [`MIN_ROWS`] rows and
/// [`MIN_SCORES`] scores per head. Anything else takes the unfused forward.
pub(super) fn applies(p: &Problem) -> bool {
    let fixed = |shape: &[i64]| shape.iter().all(|&d| !dims::is_symbolic(d));
    let floats = [DType::Float32, DType::Bfloat16, DType::Float16];
    let at = p.at;
    at.all().iter().all(|&d| !dims::is_symbolic(d) && d > 0)
        && floats.contains(&p.q.dtype)
        && floats.contains(&p.dtype)
        && p.mask.as_ref().is_none_or(|m| fixed(&m.shape))
        && at.l >= MIN_ROWS
        && at.l.saturating_mul(at.s) >= MIN_SCORES
}

/// The blocking: register tiles of `mr` rows and two vectors of `lanes` f32, query blocks of
/// `br` rows, key blocks of `bc` keys; `lp`, `sp` and `evp` are the padded sizes.
#[derive(Clone, Copy)]
struct Plan {
    at: Sizes,
    lanes: i64,
    mr: i64,
    br: i64,
    bc: i64,
    lp: i64,
    sp: i64,
    evp: i64,
    causal: bool,
    /// The mask's shape as rank 4, when there is one.
    mask: Option<[i64; 4]>,
    /// bf16 operands multiplied as pairs by AVX512-BF16's dot product (`vdpbf16ps`: two
    /// products a lane, twice an FMA's), the probabilities rounded to bf16 for `p v` as
    /// PyTorch's kernel rounds them; the scale applies to the f32 scores.
    pairs: Option<f64>,
}

fn round_up(x: i64, multiple: i64) -> i64 {
    x + (-x).rem_euclid(multiple)
}

impl Plan {
    fn new(p: &Problem, mask: Option<[i64; 4]>, target: &Target) -> Plan {
        let at = p.at;
        let bf16 = [&p.q, &p.k, &p.v]
            .iter()
            .all(|t| t.dtype == DType::Bfloat16);
        let lanes = (target.vector_bytes() / 4).max(4);
        // As the products' schedule: accumulators take half the registers.
        let mr = (target.registers() / 4).clamp(1, 8);
        let nr = 2 * lanes;
        // Four register tiles of keys a block: the per-row work of each block (the row's
        // maximum, its rescaling) spread over 128 keys with AVX-512 (at 2,048 tokens, 0.90 of
        // the time with 64 keys, 0.95 of it with 256).
        let bc = (4 * nr).min(round_up(at.s, nr));
        // Up to four register tiles of rows share each key block read into L1; fewer when
        // that pads the rows less (197 tokens: 25 blocks of 8 rows, not 7 of 32).
        let br = (1..=4)
            .rev()
            .map(|n| n * mr)
            .min_by_key(|&br| round_up(at.l, br))
            .unwrap_or(mr);
        Plan {
            at,
            lanes,
            mr,
            br,
            bc,
            lp: round_up(at.l, br),
            sp: round_up(at.s, bc),
            evp: round_up(at.ev, nr),
            causal: p.causal,
            mask,
            pairs: (bf16 && target.bf16_dot()).then_some(p.scale),
        }
    }

    fn nr(&self) -> i64 {
        2 * self.lanes
    }

    fn key_blocks(&self) -> i64 {
        self.sp / self.bc
    }

    /// The keys the last key block computes: the block's keys up to the last real one, in
    /// whole register tiles (197 keys in blocks of 128: 96, so 224 keys are computed, not 256).
    /// The padding beyond stays in the packed operands, never read.
    fn last_width(&self) -> i64 {
        round_up(self.at.s - (self.key_blocks() - 1) * self.bc, self.nr())
    }

    fn query_blocks(&self) -> i64 {
        self.lp / self.br
    }

    fn ratio(&self) -> i64 {
        self.at.heads / self.at.kv_heads
    }

    /// The query and key head size the loop steps over: in pairs, rounded up to whole pairs.
    fn ep(&self) -> i64 {
        match self.pairs {
            Some(_) => round_up(self.at.e, 2),
            None => self.at.e,
        }
    }
}

/// `(output [B, H, L, Ev], logsumexp [B, H, L])` of `p` (see [`applies`]).
pub(super) fn forward<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    p: &Problem<'c, 'a>,
) -> Result<(Value<'c, 'a>, Value<'c, 'a>)> {
    let at = p.at;
    let mask = match &p.mask {
        Some(m) => Some(rank4(ctx, m)?),
        None => None,
    };
    let plan = Plan::new(p, mask.as_ref().map(|m| shape4(&m.shape)), ctx.target);
    let bh = at.batch * at.heads;
    let bh_kv = at.batch * at.kv_heads;
    let f32 = DType::Float32;

    let q = ctx.reshape(&p.q, &[bh, at.l, at.e])?;
    let q = pad_to_multiple(ctx, &pad_to_multiple(ctx, &q, 1, plan.br)?, 2, plan.ep())?;
    let k = ctx.reshape(&p.k, &[bh_kv, at.s, at.e])?;
    let k = pad_to_multiple(ctx, &pad_to_multiple(ctx, &k, 1, plan.bc)?, 2, plan.ep())?;
    let v = ctx.reshape(&p.v, &[bh_kv, at.s, at.ev])?;
    let v = pad_to_multiple(ctx, &v, 1, plan.bc)?;
    let v = pad_to_multiple(ctx, &v, 2, plan.nr())?;
    let (q, k, v) = match plan.pairs {
        Some(_) => (q, key_pairs(ctx, &k, &plan)?, value_pairs(ctx, &v)?),
        None => (
            widen(ctx, &q)?,
            packed_keys(ctx, &k, &plan, p.scale)?,
            widen(ctx, &v)?,
        ),
    };
    let mask = match mask {
        Some(m) if m.shape[3] != 1 => Some(pad_to_multiple(ctx, &m, 3, plan.bc)?),
        other => other,
    };

    let out = ctx.e.empty(&[bh, plan.lp, plan.evp], p.dtype)?;
    let lse = ctx.e.empty(&[bh, plan.lp], f32)?;
    let operands = Operands {
        q: q.value,
        k: k.value,
        v: v.value,
        mask: mask.as_ref().map(|m| (m.value, m.dtype)),
    };
    let count = bh * plan.query_blocks();
    let out_sizes = [1, plan.br, plan.evp];
    let lse_sizes = [1, plan.br];
    // One thread (a plugin's executor among them): a sequential loop, no OpenMP.
    let results = if ctx.target.threads > 1 {
        forall(&ctx.e, count, &[out, lse], |b, writes, w, shared| {
            let (tile, lse_tile, bh, q0) = block(b, &plan, &operands.reused(), w, p.dtype)?;
            let at = [reuse(bh), reuse(q0)];
            insert_tile(writes, reuse(tile), nth(shared, 0)?, &at, &out_sizes, true)?;
            insert_tile(
                writes,
                reuse(lse_tile),
                nth(shared, 1)?,
                &at,
                &lse_sizes,
                true,
            )?;
            Ok(())
        })?
    } else {
        let (zero, one) = (ctx.e.index(0)?, ctx.e.index(1)?);
        for_loop(
            &ctx.e,
            zero,
            ctx.e.index(count)?,
            one,
            &[out, lse],
            |b, w, c| {
                let (tile, lse_tile, bh, q0) = block(b, &plan, &operands.reused(), w, p.dtype)?;
                let out = insert_tile(b, tile, nth(c, 0)?, &[bh, q0], &out_sizes, false)?;
                let lse = insert_tile(b, lse_tile, nth(c, 1)?, &[bh, q0], &lse_sizes, false)?;
                Ok(vec![out, lse])
            },
        )?
    };

    let out = sliced(
        ctx,
        nth(&results, 0)?,
        &[bh, plan.lp, plan.evp],
        &[bh, at.l, at.ev],
        p.dtype,
    )?;
    let out = ctx.reshape(&out, &[at.batch, at.heads, at.l, at.ev])?;
    let lse = sliced(ctx, nth(&results, 1)?, &[bh, plan.lp], &[bh, at.l], f32)?;
    let lse = ctx.reshape(&lse, &[at.batch, at.heads, at.l])?;
    Ok((out.value, lse.value))
}

/// The packed operands the loop reads (see the module doc), and the mask with its dtype.
#[derive(Clone, Copy)]
struct Operands<'c, 'a> {
    q: Value<'c, 'a>,
    k: Value<'c, 'a>,
    v: Value<'c, 'a>,
    mask: Option<(Value<'c, 'a>, DType)>,
}

impl<'c> Operands<'c, '_> {
    /// The same values, for a nested region.
    fn reused<'b>(&self) -> Operands<'c, 'b> {
        Operands {
            q: reuse(self.q),
            k: reuse(self.k),
            v: reuse(self.v),
            mask: self.mask.map(|(m, d)| (reuse(m), d)),
        }
    }
}

/// `t` in f32.
fn widen<'c, 'a>(ctx: &LowerCtx<'c, 'a>, t: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
    ctx.cast(t, DType::Float32)
}

/// The mask as rank 4 (leading sizes of 1).
fn rank4<'c, 'a>(ctx: &LowerCtx<'c, 'a>, m: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
    ctx.reshape(m, &shape4(&m.shape))
}

fn shape4(shape: &[i64]) -> [i64; 4] {
    let mut out = [1; 4];
    for (slot, &d) in out.iter_mut().rev().zip(shape.iter().rev()) {
        *slot = d;
    }
    out
}

/// Keys `[B·Hkv, Sp, E]` as `[B·Hkv, Sp/Bc, E, Bc]` f32, times `scale`.
fn packed_keys<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    k: &Tensor<'c, 'a>,
    plan: &Plan,
    scale: f64,
) -> Result<Tensor<'c, 'a>> {
    let (bh_kv, e) = (k.shape[0], k.shape[2]);
    let blocked = ctx.reshape(k, &[bh_kv, plan.key_blocks(), plan.bc, e])?;
    let shape = [bh_kv, plan.key_blocks(), e, plan.bc];
    let f32 = DType::Float32;
    let init = ctx.e.empty(&shape, f32)?;
    let from = k.dtype;
    let read = emit::affine_map(4, &[Some(0), Some(1), Some(3), Some(2)]);
    let value = ctx.e.generic(
        &[(blocked.value, read)],
        &[(init, emit::identity_map(4))],
        &[Iter::Parallel; 4],
        |b, x| {
            let wide = b.convert(x[0], from, f32)?;
            Ok(vec![b.same(
                "arith.mulf",
                &[wide, b.constant(Scalar::Float(scale), f32)?],
            )?])
        },
    )?[0];
    Ok(Tensor {
        value,
        shape: shape.to_vec(),
        dtype: f32,
    })
}

/// Keys `[B·Hkv, Sp, Ep]` bf16 as pairs `[B·Hkv, Sp/Bc, Ep/2, 2·Bc]`: each row of a key block
/// holds, key by key, the key's two elements of one pair of the head size.
fn key_pairs<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    k: &Tensor<'c, 'a>,
    plan: &Plan,
) -> Result<Tensor<'c, 'a>> {
    let (bh_kv, half) = (k.shape[0], k.shape[2] / 2);
    let blocks = plan.key_blocks();
    let split = ctx.reshape(k, &[bh_kv, blocks, plan.bc, half, 2])?;
    let moved = Tensor {
        value: layout::permute(ctx, &split, &[0, 1, 3, 2, 4])?,
        shape: vec![bh_kv, blocks, half, plan.bc, 2],
        dtype: k.dtype,
    };
    ctx.reshape(&moved, &[bh_kv, blocks, half, 2 * plan.bc])
}

/// Values `[B·Hkv, Sp, Evp]` bf16 as pairs `[B·Hkv, Sp/2, 2·Evp]`: each row holds, column by
/// column, the column's values of two consecutive keys.
fn value_pairs<'c, 'a>(ctx: &LowerCtx<'c, 'a>, v: &Tensor<'c, 'a>) -> Result<Tensor<'c, 'a>> {
    let (bh_kv, keys, columns) = (v.shape[0], v.shape[1], v.shape[2]);
    let split = ctx.reshape(v, &[bh_kv, keys / 2, 2, columns])?;
    let moved = Tensor {
        value: layout::permute(ctx, &split, &[0, 1, 3, 2])?,
        shape: vec![bh_kv, keys / 2, columns, 2],
        dtype: v.dtype,
    };
    ctx.reshape(&moved, &[bh_kv, keys / 2, 2 * columns])
}

/// `t` of `shape` cut to `to` from its origin (nothing when they are the same).
fn sliced<'c, 'a>(
    ctx: &LowerCtx<'c, 'a>,
    t: Value<'c, 'a>,
    shape: &[i64],
    to: &[i64],
    dtype: DType,
) -> Result<Tensor<'c, 'a>> {
    let value = if shape == to {
        t
    } else {
        let ones = vec![1; to.len()];
        ctx.e
            .extract_slice(t, &vec![0; to.len()], to, &ones, to, dtype)?
    };
    Ok(Tensor {
        value,
        shape: to.to_vec(),
        dtype,
    })
}

/// `dest` with `tile` inserted as a slice of `sizes` at the dynamic leading `offsets` (the
/// other offsets 0): `tensor.insert_slice`, or in an `scf.forall.in_parallel` block
/// (`parallel`) `tensor.parallel_insert_slice`, which has no result (`dest` comes back).
fn insert_tile<'c, 'b>(
    writes: &Emit<'c, 'b>,
    tile: Value<'c, 'b>,
    dest: Value<'c, 'b>,
    offsets: &[Value<'c, 'b>],
    sizes: &[i64],
    parallel: bool,
) -> Result<Value<'c, 'b>> {
    let mut statics = vec![0; sizes.len()];
    statics[..offsets.len()].fill(i64::MIN);
    let named = [
        ("static_offsets", writes.attr(&emit::i64_array(&statics))?),
        ("static_sizes", writes.attr(&emit::i64_array(sizes))?),
        (
            "static_strides",
            writes.attr(&emit::i64_array(&vec![1; sizes.len()]))?,
        ),
        (
            "operandSegmentSizes",
            writes.attr(&format!("array<i32: 1, 1, {}, 0, 0>", offsets.len()))?,
        ),
    ];
    let mut operands = vec![tile, dest];
    operands.extend_from_slice(offsets);
    if parallel {
        writes.op("tensor.parallel_insert_slice", &operands, &[], &named)?;
        return Ok(dest);
    }
    writes.op1("tensor.insert_slice", &operands, dest.r#type(), &named)
}

// ---- the loop body ------------------------------------------------------------------------

/// Index arithmetic and vector ops of the kernel, on one block.
struct K<'e, 'c, 'b> {
    e: &'e Emit<'c, 'b>,
    lanes: i64,
}

impl<'c, 'b> K<'_, 'c, 'b> {
    fn index(&self, v: i64) -> Result<Value<'c, 'b>> {
        self.e.index(v)
    }

    fn add(&self, a: Value<'c, 'b>, b: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        self.e.same("arith.addi", &[a, b])
    }

    fn add_n(&self, a: Value<'c, 'b>, n: i64) -> Result<Value<'c, 'b>> {
        if n == 0 {
            return Ok(a);
        }
        self.add(a, self.index(n)?)
    }

    fn mul_n(&self, a: Value<'c, 'b>, n: i64) -> Result<Value<'c, 'b>> {
        self.e.same("arith.muli", &[a, self.index(n)?])
    }

    fn div_n(&self, a: Value<'c, 'b>, n: i64) -> Result<Value<'c, 'b>> {
        self.e.same("arith.divui", &[a, self.index(n)?])
    }

    fn rem_n(&self, a: Value<'c, 'b>, n: i64) -> Result<Value<'c, 'b>> {
        self.e.same("arith.remui", &[a, self.index(n)?])
    }

    fn min_n(&self, a: Value<'c, 'b>, n: i64) -> Result<Value<'c, 'b>> {
        self.e.same("arith.minui", &[a, self.index(n)?])
    }

    fn f32(&self, v: f64) -> Result<Value<'c, 'b>> {
        self.e.constant(Scalar::Float(v), DType::Float32)
    }

    fn vector_type(&self, dtype: DType) -> Result<Type<'c>> {
        self.e
            .ty(&format!("vector<{}x{}>", self.lanes, dtype.mlir()))
    }

    /// `n` elements of `source` (of `dtype`) from `indices`, along its last dimension.
    fn load(
        &self,
        source: Value<'c, 'b>,
        indices: &[Value<'c, 'b>],
        (n, dtype): (i64, DType),
    ) -> Result<Value<'c, 'b>> {
        let rank = indices.len();
        let mut operands = vec![source];
        operands.extend_from_slice(indices);
        operands.push(self.e.constant(Scalar::Float(0.0), dtype)?);
        let map = emit::affine_map(rank, &[Some(rank - 1)]);
        let attrs = [
            ("in_bounds", self.e.attr("[true]")?),
            ("permutation_map", self.e.attr(&map)?),
            (
                "operandSegmentSizes",
                self.e.attr(&format!("array<i32: 1, {rank}, 1, 0>"))?,
            ),
        ];
        let ty = self.e.ty(&format!("vector<{n}x{}>", dtype.mlir()))?;
        self.e.op1("vector.transfer_read", &operands, ty, &attrs)
    }

    /// A whole vector of `source` (of `dtype`) at `indices`, along its last dimension, in f32.
    fn read(
        &self,
        source: Value<'c, 'b>,
        indices: &[Value<'c, 'b>],
        dtype: DType,
    ) -> Result<Value<'c, 'b>> {
        let read = self.load(source, indices, (self.lanes, dtype))?;
        if dtype == DType::Float32 {
            return Ok(read);
        }
        self.e.op1(
            "arith.extf",
            &[read],
            self.vector_type(DType::Float32)?,
            &[],
        )
    }

    /// The bf16 pair of `source` at `indices` in every lane: `vector<2·lanes x bf16>`.
    fn pair(&self, source: Value<'c, 'b>, indices: &[Value<'c, 'b>]) -> Result<Value<'c, 'b>> {
        let pair = self.load(source, indices, (2, DType::Bfloat16))?;
        let word = self
            .e
            .op1("vector.bitcast", &[pair], self.e.ty("vector<1xi32>")?, &[])?;
        let word = self.e.op1(
            "vector.extract",
            &[word],
            self.e.ty("i32")?,
            &[("static_position", self.e.attr("array<i64: 0>")?)],
        )?;
        let words = self.splat(word)?;
        let ty = self.e.ty(&format!("vector<{}xbf16>", 2 * self.lanes))?;
        self.e.op1("vector.bitcast", &[words], ty, &[])
    }

    /// `2·lanes` bf16 of `source` from `indices` (`lanes` pairs).
    fn pairs(&self, source: Value<'c, 'b>, indices: &[Value<'c, 'b>]) -> Result<Value<'c, 'b>> {
        self.load(source, indices, (2 * self.lanes, DType::Bfloat16))
    }

    /// `dest` with `vector` written at `indices`, along its last dimension.
    fn write(
        &self,
        vector: Value<'c, 'b>,
        dest: Value<'c, 'b>,
        indices: &[Value<'c, 'b>],
    ) -> Result<Value<'c, 'b>> {
        let rank = indices.len();
        let mut operands = vec![vector, dest];
        operands.extend_from_slice(indices);
        let map = emit::affine_map(rank, &[Some(rank - 1)]);
        let attrs = [
            ("in_bounds", self.e.attr("[true]")?),
            ("permutation_map", self.e.attr(&map)?),
            (
                "operandSegmentSizes",
                self.e.attr(&format!("array<i32: 1, 1, {rank}, 0>"))?,
            ),
        ];
        self.e
            .op1("vector.transfer_write", &operands, dest.r#type(), &attrs)
    }

    /// The element of `t` (of `dtype`) at `indices`, in f32.
    fn at(
        &self,
        t: Value<'c, 'b>,
        indices: &[Value<'c, 'b>],
        dtype: DType,
    ) -> Result<Value<'c, 'b>> {
        let mut operands = vec![t];
        operands.extend_from_slice(indices);
        let x = self
            .e
            .op1("tensor.extract", &operands, self.e.elem_type(dtype)?, &[])?;
        self.e.convert(x, dtype, DType::Float32)
    }

    fn put(
        &self,
        x: Value<'c, 'b>,
        t: Value<'c, 'b>,
        indices: &[Value<'c, 'b>],
    ) -> Result<Value<'c, 'b>> {
        let mut operands = vec![x, t];
        operands.extend_from_slice(indices);
        self.e.op1("tensor.insert", &operands, t.r#type(), &[])
    }

    fn splat(&self, x: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let ty = self
            .e
            .ty(&format!("vector<{}x{}>", self.lanes, x.r#type()))?;
        self.e.op1("vector.broadcast", &[x], ty, &[])
    }

    /// A register tile (`rows` rows of two vectors, row by row) after `steps` rank-one
    /// updates: step `i` takes the right operand's two vectors and a scalar of the left operand
    /// per row from `operands(k, i)`, and adds each scalar times the two vectors to its row.
    /// With `pairs`, each step is two: the vectors hold bf16 pairs and each row's left operand
    /// is a pair in every lane ([`K::pair`]), multiplied by `vdpbf16ps`.
    fn rank_one_updates<F>(
        &self,
        (steps, pairs): (i64, bool),
        tile: &[Value<'c, 'b>],
        operands: F,
    ) -> Result<Vec<Value<'c, 'b>>>
    where
        F: for<'d> Fn(&K<'_, 'c, 'd>, Value<'c, 'd>) -> Result<RankOne<'c, 'd>>,
    {
        self.upto(steps, 1, tile, |k, step, tile| {
            let RankOne { right, left } = operands(k, step)?;
            let mut next = Vec::with_capacity(tile.len());
            for (r, &scalar) in left.iter().enumerate() {
                let scalar = if pairs { scalar } else { k.splat(scalar)? };
                for (half, &vector) in right.iter().enumerate() {
                    let acc = nth(tile, 2 * r + half)?;
                    next.push(if pairs {
                        k.e.same("x86vector.avx512.dot", &[acc, scalar, vector])?
                    } else {
                        k.fma(scalar, vector, acc)?
                    });
                }
            }
            Ok(next)
        })
    }

    /// The vectors of a register tile, row `r` and half `h` of it at row `row + r` and column
    /// `col + h · lanes` of `dest`, each passed through `each(r, h, vector)` first.
    fn write_tile(
        &self,
        tile: &[Value<'c, 'b>],
        dest: Value<'c, 'b>,
        (row, col): (Value<'c, 'b>, Value<'c, 'b>),
        mut each: impl FnMut(i64, i64, Value<'c, 'b>) -> Result<Value<'c, 'b>>,
    ) -> Result<Value<'c, 'b>> {
        let mut dest = dest;
        for (at, &vector) in tile.iter().enumerate() {
            let (r, half) = (at as i64 / 2, at as i64 % 2);
            let vector = each(r, half, vector)?;
            let indices = [self.add_n(row, r)?, self.add_n(col, half * self.lanes)?];
            dest = self.write(vector, dest, &indices)?;
        }
        Ok(dest)
    }

    /// Lanes where vector `a` is above `b` (unsigned indices).
    fn above(&self, a: Value<'c, 'b>, b: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let ugt = self.e.attr("8 : i64")?;
        let mask = self.e.ty(&format!("vector<{}xi1>", self.lanes))?;
        self.e
            .op1("arith.cmpi", &[a, b], mask, &[("predicate", ugt)])
    }

    fn fma(&self, a: Value<'c, 'b>, b: Value<'c, 'b>, c: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        self.e.same("vector.fma", &[a, b, c])
    }

    /// `a > b ? a : b` of scalars or vectors: one `vmaxps`, where `arith.maxnumf` takes three
    /// instructions for its NaN rule. A NaN score may lose here; its exponential is NaN anyway,
    /// and so is its row's output.
    fn larger(&self, a: Value<'c, 'b>, b: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let ogt = self.e.attr("2 : i64")?;
        let condition = if a.r#type() == self.e.elem_type(DType::Float32)? {
            self.e.ty("i1")?
        } else {
            self.e.ty(&format!("vector<{}xi1>", self.lanes))?
        };
        let greater = self
            .e
            .op1("arith.cmpf", &[a, b], condition, &[("predicate", ogt)])?;
        self.e.select(greater, a, b)
    }

    /// The largest lane of `v` (see [`K::larger`]), by halving: log2(lanes) steps, where
    /// `vector.reduction` of a maximum is a chain of one step per lane.
    fn largest(&self, v: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let mut v = v;
        let mut half = self.lanes / 2;
        while half > 0 {
            let mask: Vec<i64> = (0..self.lanes).map(|i| (i + half) % self.lanes).collect();
            let rotated = self.e.op1(
                "vector.shuffle",
                &[v, v],
                v.r#type(),
                &[("mask", self.e.attr(&emit::i64_array(&mask))?)],
            )?;
            v = self.larger(v, rotated)?;
            half /= 2;
        }
        self.e.op1(
            "vector.extract",
            &[v],
            self.e.elem_type(DType::Float32)?,
            &[("static_position", self.e.attr("array<i64: 0>")?)],
        )
    }

    /// The vector reduced with `kind` (`add`).
    fn reduce(&self, kind: &str, v: Value<'c, 'b>) -> Result<Value<'c, 'b>> {
        let attr = self.e.attr(&format!("#vector.kind<{kind}>"))?;
        // In any order: a tree of shuffles, not a chain of dependent scalar steps.
        let reassoc = self.e.attr("#arith.fastmath<reassoc>")?;
        self.e.op1(
            "vector.reduction",
            &[v],
            self.e.elem_type(DType::Float32)?,
            &[("kind", attr), ("fastmath", reassoc)],
        )
    }

    /// `scf.for %iv = 0 to upper step step`, carrying `inits`.
    fn each<F>(
        &self,
        upper: Value<'c, 'b>,
        step: i64,
        inits: &[Value<'c, 'b>],
        body: F,
    ) -> Result<Vec<Value<'c, 'b>>>
    where
        F: for<'d> FnOnce(
            &K<'_, 'c, 'd>,
            Value<'c, 'd>,
            &[Value<'c, 'd>],
        ) -> Result<Vec<Value<'c, 'd>>>,
    {
        let lanes = self.lanes;
        for_loop(
            self.e,
            self.index(0)?,
            upper,
            self.index(step)?,
            inits,
            |inner, iv, carried| body(&K { e: inner, lanes }, iv, carried),
        )
    }

    /// [`K::each`] over a fixed count.
    fn upto<F>(
        &self,
        upper: i64,
        step: i64,
        inits: &[Value<'c, 'b>],
        body: F,
    ) -> Result<Vec<Value<'c, 'b>>>
    where
        F: for<'d> FnOnce(
            &K<'_, 'c, 'd>,
            Value<'c, 'd>,
            &[Value<'c, 'd>],
        ) -> Result<Vec<Value<'c, 'd>>>,
    {
        self.each(self.index(upper)?, step, inits, body)
    }
}

/// The operands of one rank-one update of a register tile: the right operand's two vectors and
/// the left operand's scalar for each row.
struct RankOne<'c, 'b> {
    right: [Value<'c, 'b>; 2],
    left: Vec<Value<'c, 'b>>,
}

fn reused<'c, 'b>(values: &[Value<'c, '_>]) -> Vec<Value<'c, 'b>> {
    values.iter().map(|&v| reuse(v)).collect()
}

/// Where one iteration works: its head, the key head it reads, its first query row and the
/// indices of its mask's slice.
#[derive(Clone, Copy)]
struct Site<'c, 'b> {
    bh: Value<'c, 'b>,
    bh_kv: Value<'c, 'b>,
    q0: Value<'c, 'b>,
    mask_bh: [Value<'c, 'b>; 2],
}

impl<'c> Site<'c, '_> {
    fn reused<'d>(&self) -> Site<'c, 'd> {
        Site {
            bh: reuse(self.bh),
            bh_kv: reuse(self.bh_kv),
            q0: reuse(self.q0),
            mask_bh: [reuse(self.mask_bh[0]), reuse(self.mask_bh[1])],
        }
    }
}

/// One iteration `w` of the loop: `(output tile [br, evp], logsumexp [br], head, first row)`.
fn block<'c, 'b>(
    e: &Emit<'c, 'b>,
    plan: &Plan,
    x: &Operands<'c, 'b>,
    w: Value<'c, 'b>,
    dtype: DType,
) -> Result<(Value<'c, 'b>, Value<'c, 'b>, Value<'c, 'b>, Value<'c, 'b>)> {
    let k = K {
        e,
        lanes: plan.lanes,
    };
    let f32 = DType::Float32;
    let bh = k.div_n(w, plan.query_blocks())?;
    let q0 = k.mul_n(k.rem_n(w, plan.query_blocks())?, plan.br)?;
    let (batch, head) = (k.div_n(bh, plan.at.heads)?, k.rem_n(bh, plan.at.heads)?);
    let bh_kv = k.add(
        k.mul_n(batch, plan.at.kv_heads)?,
        k.div_n(head, plan.ratio())?,
    )?;
    let zero = k.index(0)?;
    let mask_bh = match plan.mask {
        Some([mb, mh, _, _]) => [
            if mb == 1 { zero } else { batch },
            if mh == 1 { zero } else { head },
        ],
        None => [zero, zero],
    };
    let site = Site {
        bh,
        bh_kv,
        q0,
        mask_bh,
    };
    let (br, bc) = (plan.br, plan.bc);
    let scores = e.empty(&[br, bc], f32)?;
    let acc = e.splat(&[br, plan.evp], f32, Scalar::Float(0.0))?;
    let max = e.splat(&[br], f32, Scalar::Float(f64::NEG_INFINITY))?;
    let sum = e.splat(&[br, plan.lanes], f32, Scalar::Float(0.0))?;
    let alpha = e.empty(&[br], f32)?;
    let mut state = vec![scores, acc, max, sum, alpha];
    if plan.pairs.is_some() {
        state.push(e.empty(&[br, bc], DType::Bfloat16)?);
    }
    // Causal: the keys up to the block's last row.
    let blocks = if plan.causal {
        let last = k.add_n(q0, br - 1)?;
        k.min_n(k.add_n(k.div_n(last, bc)?, 1)?, plan.key_blocks())?
    } else {
        k.index(plan.key_blocks())?
    };
    // The blocks of `bc` keys, then a shorter last one (run when causality reaches it).
    let width = plan.last_width();
    let full = plan.key_blocks() - i64::from(width < bc);
    let main = k.min_n(blocks, full)?;
    let state = k.each(main, 1, &state, |k, kb, c| {
        key_block(k, plan, x, &site.reused(), (kb, bc), c)
    })?;
    let state = if width < bc {
        let rest = k.e.same("arith.subi", &[blocks, main])?;
        k.each(rest, 1, &state, |k, first, c| {
            let kb = k.add_n(first, full)?;
            key_block(k, plan, x, &site.reused(), (kb, width), c)
        })?
    } else {
        state
    };
    let (tile, lse) = normalised(
        &k,
        plan,
        nth(&state, 1)?,
        nth(&state, 2)?,
        nth(&state, 3)?,
        dtype,
    )?;
    Ok((tile, lse, bh, q0))
}

/// One key block `kb` of `width` keys for the query block: its scores, the online softmax
/// over them and the product with its values; `c` is the loop's state (the scores, the
/// accumulator and the softmax's statistics), and so is the result.
fn key_block<'c, 'b>(
    k: &K<'_, 'c, 'b>,
    plan: &Plan,
    x: &Operands<'c, '_>,
    site: &Site<'c, 'b>,
    (kb, width): (Value<'c, 'b>, i64),
    c: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>> {
    let x = x.reused();
    let scores = block_scores(k, plan, &x, site, (kb, width), nth(c, 0)?)?;
    let softmax = online_softmax(k, plan, width, scores, &c[2..])?;
    // The products read the exponentials in f32, or their bf16 copy with pairs.
    let (scores, alpha) = (nth(&softmax, 0)?, nth(&softmax, 3)?);
    let probs = softmax.get(4).copied().unwrap_or(scores);
    let acc = attend(k, plan, &x, site, (kb, width), probs, nth(c, 1)?, alpha)?;
    let mut next = vec![scores, acc];
    next.extend_from_slice(&softmax[1..]);
    Ok(next)
}

/// The key block `kb`'s scores of the query block over its first `width` keys: `q kᵀ` (the
/// scale is in the packed keys), plus the mask, -inf where causality or padding hides the
/// key; written into `scores`.
fn block_scores<'c, 'b>(
    k: &K<'_, 'c, 'b>,
    plan: &Plan,
    x: &Operands<'c, 'b>,
    site: &Site<'c, 'b>,
    (kb, width): (Value<'c, 'b>, i64),
    scores: Value<'c, 'b>,
) -> Result<Value<'c, 'b>> {
    let (mr, nr, lanes) = (plan.mr, plan.nr(), plan.lanes);
    let f32 = DType::Float32;
    let kb_outer = kb;
    let result = k.upto(plan.br, mr, &[scores], |k, row, c| {
        let (site, x, kb) = (site.reused(), x.reused(), reuse(kb_outer));
        let row_outer = row;
        k.upto(width, nr, &reused(c), |k, col, c| {
            let (site, x, kb, row) = (site.reused(), x.reused(), reuse(kb), reuse(row_outer));
            let zero = k.splat(k.f32(0.0)?)?;
            let first = k.add(site.q0, row)?;
            let col_outer = col;
            let pairs = plan.pairs.is_some();
            let steps = if pairs { plan.ep() / 2 } else { plan.at.e };
            let zeros = vec![zero; 2 * mr as usize];
            let accs = k.rank_one_updates((steps, pairs), &zeros, |k, d| {
                let (site, x, kb, col) = (site.reused(), x.reused(), reuse(kb), reuse(col_outer));
                let first = reuse(first);
                if pairs {
                    let col = k.mul_n(col, 2)?;
                    let right = [
                        k.pairs(x.k, &[site.bh_kv, kb, d, col])?,
                        k.pairs(x.k, &[site.bh_kv, kb, d, k.add_n(col, 2 * lanes)?])?,
                    ];
                    let d = k.mul_n(d, 2)?;
                    let left = (0..mr)
                        .map(|r| k.pair(x.q, &[site.bh, k.add_n(first, r)?, d]))
                        .collect::<Result<_>>()?;
                    return Ok(RankOne { right, left });
                }
                let right = [
                    k.read(x.k, &[site.bh_kv, kb, d, col], f32)?,
                    k.read(x.k, &[site.bh_kv, kb, d, k.add_n(col, lanes)?], f32)?,
                ];
                let left = (0..mr)
                    .map(|r| k.at(x.q, &[site.bh, k.add_n(first, r)?, d], f32))
                    .collect::<Result<_>>()?;
                Ok(RankOne { right, left })
            })?;
            let j0 = k.mul_n(kb, plan.bc)?;
            let scores = k.write_tile(&accs, nth(c, 0)?, (row, col), |r, half, s| {
                let i = k.add_n(first, r)?;
                let j = k.add(j0, k.add_n(col, half * lanes)?)?;
                masked(k, plan, &x, &site, s, i, j)
            })?;
            Ok(vec![scores])
        })
    })?;
    nth(&result, 0)
}

/// Scores `s` of query row `i` and the vector of keys from `j`, with the mask added and the
/// keys that causality or padding hides at -inf.
fn masked<'c, 'b>(
    k: &K<'_, 'c, 'b>,
    plan: &Plan,
    x: &Operands<'c, 'b>,
    site: &Site<'c, 'b>,
    s: Value<'c, 'b>,
    i: Value<'c, 'b>,
    j: Value<'c, 'b>,
) -> Result<Value<'c, 'b>> {
    let mut s = s;
    if let Some(scale) = plan.pairs {
        s = k.e.same("arith.mulf", &[s, k.splat(k.f32(scale)?)?])?;
    }
    if let (Some([_, _, ml, ms]), Some((mask, dtype))) = (plan.mask, x.mask) {
        // Padded query rows read the last row's mask.
        let row = if ml == 1 {
            k.index(0)?
        } else {
            k.min_n(i, plan.at.l - 1)?
        };
        let [mb, mh] = site.mask_bh;
        let m = if ms == 1 {
            k.splat(k.at(mask, &[mb, mh, row, k.index(0)?], dtype)?)?
        } else {
            k.read(mask, &[mb, mh, row, j], dtype)?
        };
        s = k.e.same("arith.addf", &[s, m])?;
    }
    let padded = plan.at.s % plan.bc != 0;
    if !plan.causal && !padded {
        return Ok(s);
    }
    let index_vector = k.e.ty(&format!("vector<{}xindex>", k.lanes))?;
    let keys = k.add(k.e.op1("vector.step", &[], index_vector, &[])?, k.splat(j)?)?;
    let mut hidden = None;
    if plan.causal {
        hidden = Some(k.above(keys, k.splat(i)?)?);
    }
    if padded {
        let past = k.above(keys, k.splat(k.index(plan.at.s - 1)?)?)?;
        hidden = Some(match hidden {
            Some(h) => k.e.same("arith.ori", &[h, past])?,
            None => past,
        });
    }
    match hidden {
        Some(h) => k.e.select(h, k.splat(k.f32(f64::NEG_INFINITY)?)?, s),
        None => Ok(s),
    }
}

/// The online softmax over the first `width` keys of one key block, row by row: the new maxima, the scores replaced by
/// `exp(score - max)`, the sums rescaled by `alpha = exp(old max - new max)` plus the block's,
/// and `alpha` for the accumulator. A row whose keys so far are all hidden keeps a maximum of
/// -inf and is shifted by 0 instead, so its exponentials and its `alpha` are 0, never NaN.
/// `stats` are the maxima, sums and `alpha`, and with pairs the exponentials' bf16 copy; the
/// result is the scores and the `stats` after the block.
fn online_softmax<'c, 'b>(
    k: &K<'_, 'c, 'b>,
    plan: &Plan,
    width: i64,
    scores: Value<'c, 'b>,
    stats: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>> {
    let f32 = DType::Float32;
    let lanes = plan.lanes;
    let chunks = width / lanes;
    let mut inits = vec![scores];
    inits.extend_from_slice(stats);
    let out = k.upto(plan.br, 1, &inits, |k, r, c| {
        let (scores, max, sum, alpha) = (nth(c, 0)?, nth(c, 1)?, nth(c, 2)?, nth(c, 3)?);
        let offsets = (0..chunks)
            .map(|chunk| k.index(chunk * lanes))
            .collect::<Result<Vec<_>>>()?;
        let xs = offsets
            .iter()
            .map(|&o| k.read(scores, &[r, o], f32))
            .collect::<Result<Vec<_>>>()?;
        let mut top = nth(&xs, 0)?;
        for &x in &xs[1..] {
            top = k.larger(top, x)?;
        }
        let old = k.at(max, &[r], f32)?;
        let new = k.larger(old, k.largest(top)?)?;
        let none = k.e.cmpf("oeq", new, k.f32(f64::NEG_INFINITY)?)?;
        let shift = k.e.select(none, k.f32(0.0)?, new)?;
        let rescale =
            k.e.same("math.exp", &[k.e.same("arith.subf", &[old, shift])?])?;
        let shift_vector = k.splat(shift)?;
        let mut scores = scores;
        let mut probs = c.get(4).copied();
        let mut total = None;
        for (&x, &o) in xs.iter().zip(&offsets) {
            let p =
                k.e.same("math.exp", &[k.e.same("arith.subf", &[x, shift_vector])?])?;
            scores = k.write(p, scores, &[r, o])?;
            if let Some(copy) = probs {
                let rounded =
                    k.e.op1("arith.truncf", &[p], k.vector_type(DType::Bfloat16)?, &[])?;
                probs = Some(k.write(rounded, copy, &[r, o])?);
            }
            total = Some(match total {
                Some(t) => k.e.same("arith.addf", &[t, p])?,
                None => p,
            });
        }
        let old_sum = k.read(sum, &[r, k.index(0)?], f32)?;
        let rescaled = k.e.same("arith.mulf", &[old_sum, k.splat(rescale)?])?;
        let new_sum = match total {
            Some(t) => k.e.same("arith.addf", &[rescaled, t])?,
            None => rescaled,
        };
        let mut next = vec![
            scores,
            k.put(new, max, &[r])?,
            k.write(new_sum, sum, &[r, k.index(0)?])?,
            k.put(rescale, alpha, &[r])?,
        ];
        next.extend(probs);
        Ok(next)
    })?;
    Ok(out)
}

/// The accumulator rescaled by each row's `alpha`, plus the exponentials of the key block's
/// first `width` keys (`scores`, or with pairs their bf16 copy) times their values: register
/// tiles of `mr` rows and two vectors of value columns.
#[allow(clippy::too_many_arguments)]
fn attend<'c, 'b>(
    k: &K<'_, 'c, 'b>,
    plan: &Plan,
    x: &Operands<'c, 'b>,
    site: &Site<'c, 'b>,
    (kb, width): (Value<'c, 'b>, i64),
    scores: Value<'c, 'b>,
    acc: Value<'c, 'b>,
    alpha: Value<'c, 'b>,
) -> Result<Value<'c, 'b>> {
    let (mr, nr, lanes) = (plan.mr, plan.nr(), plan.lanes);
    let f32 = DType::Float32;
    let j0 = k.mul_n(kb, plan.bc)?;
    let outer = (j0, scores, alpha);
    let result = k.upto(plan.evp, nr, &[acc], |k, col, c| {
        let (site, x) = (site.reused(), x.reused());
        let (j0, scores, alpha) = (reuse(outer.0), reuse(outer.1), reuse(outer.2));
        let col_outer = col;
        k.upto(plan.br, mr, &reused(c), |k, row, c| {
            let (site, x) = (site.reused(), x.reused());
            let (j0, scores, alpha, col) =
                (reuse(j0), reuse(scores), reuse(alpha), reuse(col_outer));
            let acc = nth(c, 0)?;
            let mut tile = Vec::with_capacity(2 * mr as usize);
            for r in 0..mr {
                let at_row = k.add_n(row, r)?;
                let rescale = k.splat(k.at(alpha, &[at_row], f32)?)?;
                for half in 0..2 {
                    let old = k.read(acc, &[at_row, k.add_n(col, half * lanes)?], f32)?;
                    tile.push(k.e.same("arith.mulf", &[old, rescale])?);
                }
            }
            let row_outer = row;
            let pairs = plan.pairs.is_some();
            let steps = if pairs { width / 2 } else { width };
            let tile = k.rank_one_updates((steps, pairs), &tile, |k, j| {
                let (site, x) = (site.reused(), x.reused());
                let (j0, scores, col, row) =
                    (reuse(j0), reuse(scores), reuse(col), reuse(row_outer));
                if pairs {
                    // Keys 2j and 2j + 1 of the block: row j0 / 2 + j of the value pairs.
                    let key = k.add(k.div_n(j0, 2)?, j)?;
                    let col = k.mul_n(col, 2)?;
                    let right = [
                        k.pairs(x.v, &[site.bh_kv, key, col])?,
                        k.pairs(x.v, &[site.bh_kv, key, k.add_n(col, 2 * lanes)?])?,
                    ];
                    let j = k.mul_n(j, 2)?;
                    let left = (0..mr)
                        .map(|r| k.pair(scores, &[k.add_n(row, r)?, j]))
                        .collect::<Result<_>>()?;
                    return Ok(RankOne { right, left });
                }
                let key = k.add(j0, j)?;
                let right = [
                    k.read(x.v, &[site.bh_kv, key, col], f32)?,
                    k.read(x.v, &[site.bh_kv, key, k.add_n(col, lanes)?], f32)?,
                ];
                let left = (0..mr)
                    .map(|r| k.at(scores, &[k.add_n(row, r)?, j], f32))
                    .collect::<Result<_>>()?;
                Ok(RankOne { right, left })
            })?;
            let acc = k.write_tile(&tile, acc, (row, col), |_, _, v| Ok(v))?;
            Ok(vec![acc])
        })
    })?;
    nth(&result, 0)
}

/// The output tile (the accumulator over each row's sum, in `dtype`; zeros for a row whose
/// keys are all hidden) and the logsumexp `max + log(sum)` (0 for such a row).
fn normalised<'c, 'b>(
    k: &K<'_, 'c, 'b>,
    plan: &Plan,
    acc: Value<'c, 'b>,
    max: Value<'c, 'b>,
    sum: Value<'c, 'b>,
    dtype: DType,
) -> Result<(Value<'c, 'b>, Value<'c, 'b>)> {
    let f32 = DType::Float32;
    let lanes = plan.lanes;
    let tile = k.e.empty(&[plan.br, plan.evp], dtype)?;
    let lse = k.e.empty(&[plan.br], f32)?;
    let stats = (acc, max, sum);
    let out = k.upto(plan.br, 1, &[tile, lse], |k, r, c| {
        let (acc, max, sum) = (reuse(stats.0), reuse(stats.1), reuse(stats.2));
        let l = k.reduce("add", k.read(sum, &[r, k.index(0)?], f32)?)?;
        let m = k.at(max, &[r], f32)?;
        let zero = k.f32(0.0)?;
        let empty = k.e.cmpf("oeq", l, zero)?;
        let inverse = k.e.same("arith.divf", &[k.f32(1.0)?, l])?;
        let inverse = k.splat(k.e.select(empty, zero, inverse)?)?;
        let mut tile = nth(c, 0)?;
        for chunk in 0..plan.evp / lanes {
            let at = [r, k.index(chunk * lanes)?];
            let o = k.e.same("arith.mulf", &[k.read(acc, &at, f32)?, inverse])?;
            let o = if dtype == f32 {
                o
            } else {
                k.e.op1("arith.truncf", &[o], k.vector_type(dtype)?, &[])?
            };
            tile = k.write(o, tile, &at)?;
        }
        let log = k.e.same("arith.addf", &[m, k.e.same("math.log", &[l])?])?;
        let lse = k.put(k.e.select(empty, zero, log)?, nth(c, 1)?, &[r])?;
        Ok(vec![tile, lse])
    })?;
    Ok((nth(&out, 0)?, nth(&out, 1)?))
}
