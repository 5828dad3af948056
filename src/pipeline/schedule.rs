//! The `schedule` stage: register-tiled, vectorised matrix products. Rust reads the static
//! shapes of every `linalg.matmul` / `linalg.batch_matmul` on `f32` or `f64`, picks tile sizes
//! that divide them (so every tile is full and vectorises without masks), tags the op and
//! appends a generated transform-dialect schedule (`@__transform_main`) to the module. The
//! stage's textual pipeline runs the upstream `transform-interpreter`, so the stage input (with
//! the schedule inside) replays in stock `mlir-opt`. Afterwards `transform::detach` erases the schedule.
//!
//! The shape of the generated code: an `mr`×`nr` accumulator tile (two vector registers wide,
//! at most eight rows) stays in registers over the reduction loop, which advances `ku` steps of
//! `k` at a time; `vector.contract` is left for `convert-vector-to-llvm` to lower as outer
//! products (broadcast-FMA). Large products get a `kc` reduction block (and, when wide, an `nc`
//! column block) so a block of the right operand stays in L2, packed into contiguous panels
//! (one per column tile) as each block begins, and small-`m` products walk columns outermost. Rows or columns that no good tile divides (a prime row count, 1000
//! columns) are split into a main part of full tiles and one narrower tile. A single
//! elementwise consumer (bias, activation) is tiled with the product and fused into its tile
//! loop, so the product never reaches memory. Everything else (other dtypes, dynamic shapes,
//! transposed matmul variants) keeps the scalar path.

use super::chains;
use super::ir::maps::elementwise_maps;
use super::ir::ops::{op_name, raw_value, result_owner, tensor_shape, use_count};
use super::ir::outlining;
use super::transform::{ANY, append_script, handles, has_entry, list, script, tag};
use crate::error::{Error, Result};
use crate::target::Target;
use crate::tuning::{
    BATCHED_PAIR_MAPS, MIN_PARALLEL_PRODUCT_WORK, PAIR_LANES, PAIR_MAPS, largest_divisor_at_most,
};
use melior::{
    Context,
    ir::{
        Module,
        attribute::{IntegerAttribute, StringAttribute},
        block::BlockLike,
        operation::{OperationLike, OperationMutLike, WalkOrder, WalkResult},
        r#type::IntegerType,
    },
};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// Discardable attribute naming a scheduled contraction (value: its index in the schedule).
pub const CONTRACTION_TAG: &str = "fxmlir.contraction";
/// Discardable attribute naming the elementwise consumer fused into a contraction's tile loop.
pub const EPILOGUE_TAG: &str = "fxmlir.epilogue";

/// Element types the schedule handles; all three operands must agree, but for half-precision
/// operands accumulating in f32 (scheduled as `F32`) and `Bf16Pairs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    F32,
    F64,
    /// `fxmlir.mm_pairs`' contraction: bf16 operands in pairs along the reduction (each step
    /// of `k` is one pair), accumulated in f32 by AVX512-BF16's dot product.
    Bf16Pairs,
}

impl Element {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "f32" => Some(Element::F32),
            "f64" => Some(Element::F64),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Element::F32 => "f32",
            Element::F64 => "f64",
            Element::Bf16Pairs => "bf16 pairs",
        }
    }

    /// Bytes of one step of `k` in an operand row, and of one accumulator (a pair of bf16
    /// accumulates into one f32).
    pub fn bytes(self) -> i64 {
        match self {
            Element::F32 | Element::Bf16Pairs => 4,
            Element::F64 => 8,
        }
    }
}

/// One static contraction: `[batch x] m x k` times `[batch x] k x n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    pub batch: Option<i64>,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub element: Element,
    /// The element type of both operands (`f32`, `f64`, or `bf16`/`f16` widened to f32).
    pub operand: &'static str,
}

/// A dimension cut in two: tiles of the main part `[0, at)` use the register tile; the rest
/// (`at` to the end, shorter than one register tile) is a single tile of `rest` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub at: i64,
    pub rest: i64,
}

/// Column blocks of `size` columns over the first `covers` columns (a multiple of `size`);
/// columns after them (fewer than `size`) get register tiles without a block loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub size: i64,
    pub covers: i64,
}

/// Tile sizes for one contraction. Every size divides its dimension (or its part of a split
/// dimension), so every tile is full and vectorises without masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    /// Rows of the register tile.
    pub mr: i64,
    /// Columns of the register tile (two vectors when the shape allows).
    pub nr: i64,
    /// Rows cut where `mr` does not divide them and no divisor makes a good tile.
    pub m_split: Option<Split>,
    /// Columns cut where no whole number of vectors divides them.
    pub n_split: Option<Split>,
    /// The rest of `n_split` cut again after one vector, when it is more than one vector but
    /// not two: a register tile of one whole vector and a part of one per row ran 5-7x slower
    /// than whole vectors (512 x 4608 x 17: 1.5 ms, x 16: 0.22 ms; x 49, whose rest is 17
    /// columns: 2.1 ms, x 48: 0.67 ms).
    pub n_tail: Option<Split>,
    /// Reduction steps per inner-loop iteration.
    pub ku: i64,
    /// Reduction block (cache blocking); `None` keeps the whole reduction inside the tile.
    pub kc: Option<i64>,
    /// Column blocks around the reduction blocks, so a `kc` x `nc` block of the right operand
    /// fits L2 (wide products only).
    pub nc: Option<Block>,
    /// Walk column tiles outermost (the left operand block is the one that stays in cache).
    pub columns_outer: bool,
}

/// Bytes of a left-operand block (`m` x `kc`) small enough to keep while columns vary.
const LEFT_BLOCK_L1: i64 = 64 << 10;
/// Bounds of the reduction block: below, the accumulator is reloaded too often; above, the
/// register tile's rows of the left operand no longer fit in L1. Blocks aim at least at
/// `KC_BYTES` of each row of the left operand (256 f32 elements); narrower products go deeper.
const KC_MIN: i64 = 16;
const KC_MAX: i64 = 512;
const KC_BYTES: i64 = 1024;

/// Tile sizes for `p` on `target`.
pub fn choose(p: &Problem, target: &Target) -> Tiles {
    let lanes = (target.vector_bytes() / p.element.bytes()).max(1);
    // Two vectors per row; a width that is no whole number of pairs is cut after the last
    // pair (the rest is one narrower tile); a narrower width is a single tile.
    let (nr, n_split) = if p.n % (2 * lanes) == 0 {
        (2 * lanes, None)
    } else if p.n > 2 * lanes {
        let at = p.n / (2 * lanes) * (2 * lanes);
        (2 * lanes, Some(Split { at, rest: p.n - at }))
    } else if p.n > lanes && p.n % lanes != 0 {
        // One vector, then less than one.
        (
            lanes,
            Some(Split {
                at: lanes,
                rest: p.n - lanes,
            }),
        )
    } else {
        (p.n, None)
    };
    let n_tail = n_split
        .filter(|s| s.rest > lanes && nr == 2 * lanes)
        .map(|s| Split {
            at: lanes,
            rest: s.rest - lanes,
        });
    // Accumulators use about half the registers: eight rows of two vectors with 32 registers.
    let vectors_per_row = ((nr + lanes - 1) / lanes).max(1);
    let mr_limit = (target.registers() / 2 / vectors_per_row).clamp(1, 8);
    // A divisor of the rows if it keeps at least half the accumulators busy, else full tiles
    // and one shorter tile for the rest (a prime row count would otherwise get 1-row tiles).
    let divisor = largest_divisor_at_most(p.m, mr_limit);
    let (mr, m_split) = if p.m <= mr_limit || 2 * divisor >= mr_limit {
        (divisor, None)
    } else {
        let at = p.m / mr_limit * mr_limit;
        (mr_limit, Some(Split { at, rest: p.m - at }))
    };
    let bytes = p.element.bytes();
    // Saturating: absurd shapes must not overflow (they simply count as large).
    let right_bytes = p.k.saturating_mul(p.n).saturating_mul(bytes);
    // A right operand above half of L2 is blocked; a block (`kc` x `nc`, packed into panels
    // by the schedule) takes half of L2. On a Zen 3 core (512 KiB L2), packed 1024³ ran at
    // 92-95% of torch.mm (one and two threads) with an eighth of L2 and 128-deep blocks, at
    // 98% with half of L2 and 256-deep ones.
    let right_operand_l2 = target.l2_bytes / 2;
    let right_block_l2 = target.l2_bytes / 2;
    let kc = if right_bytes > right_operand_l2 {
        // The deepest block of the right operand that fits the L2 budget (but at least
        // `KC_BYTES` deep), dividing k, a multiple of 4 if possible (for `ku`).
        let target = (right_block_l2 / p.n.saturating_mul(bytes)).clamp(KC_BYTES / bytes, KC_MAX);
        let divisors = || {
            (KC_MIN..=target.min(p.k / 2))
                .rev()
                .filter(|d| p.k % d == 0)
        };
        divisors()
            .find(|d| d % 4 == 0)
            .or_else(|| divisors().next())
    } else {
        None
    };
    // Too wide for a `kc` block of every column to fit L2: block the columns too.
    let columns = n_split.map_or(p.n, |s| s.at);
    let nc = kc.and_then(|kc| {
        let size = (right_block_l2 / (kc * bytes) / nr).max(1) * nr;
        (columns > size).then_some(Block {
            size,
            covers: columns / size * size,
        })
    });
    let reduction = kc.unwrap_or(p.k);
    // A pairs product's reduction loop steps one pair at a time: its register tile is unrolled
    // into one dot product per row and vector (see [`emit_pair_lanes`]).
    let ku = if p.element == Element::Bf16Pairs {
        1
    } else {
        [4, 2, 1]
            .into_iter()
            .find(|u| reduction % u == 0)
            .unwrap_or(1)
    };
    let columns_outer =
        kc.is_some_and(|c| p.m.saturating_mul(c).saturating_mul(bytes) <= LEFT_BLOCK_L1);
    Tiles {
        mr,
        nr,
        m_split,
        n_split,
        n_tail,
        ku,
        kc,
        nc,
        columns_outer,
    }
}

/// A product cut into one equal chunk per thread: `tile_using_forall` sizes over its parallel
/// loops (`[batch,] m, n`), and the problem each chunk solves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunks {
    pub sizes: Vec<i64>,
    pub chunk: Problem,
}

/// How to cut `p` across `threads`: the batch when it divides evenly; else the columns when
/// the right operand is the larger one (each thread then streams only its share of it), else
/// the rows; a dimension is only cut into whole vectors (columns) or at least eight rows.
/// `None` for one thread, small products and shapes no such cut fits.
pub fn chunks(p: &Problem, threads: i64, target: &Target) -> Option<Chunks> {
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k);
    if threads < 2 || work.saturating_mul(p.batch.unwrap_or(1)) < MIN_PARALLEL_PRODUCT_WORK {
        return None;
    }
    let lead = usize::from(p.batch.is_some());
    let cut = |dim: usize, size: i64, chunk: Problem| {
        let mut sizes = vec![0; lead + 2];
        sizes[dim] = size;
        Some(Chunks { sizes, chunk })
    };
    if let Some(b) = p.batch
        && b % threads == 0
    {
        return cut(
            0,
            b / threads,
            Problem {
                batch: Some(b / threads),
                ..*p
            },
        );
    }
    let lanes = (target.vector_bytes() / p.element.bytes()).max(1);
    let by_columns = (p.n % threads == 0 && (p.n / threads) % lanes == 0).then(|| {
        let n = p.n / threads;
        cut(lead + 1, n, Problem { n, ..*p })
    });
    let by_rows = (p.m % threads == 0 && p.m / threads >= 8).then(|| {
        let m = p.m / threads;
        cut(lead, m, Problem { m, ..*p })
    });
    if p.n >= p.m {
        by_columns.or(by_rows).flatten()
    } else {
        by_rows.or(by_columns).flatten()
    }
}

/// A contraction the schedule will handle, found in the module.
#[derive(Debug, Clone)]
struct Planned {
    op: usize,
    /// The whole product; `tiles` are chosen for one chunk of it when it is split.
    problem: Problem,
    /// The cut across threads, if any.
    chunks: Option<Chunks>,
    tiles: Tiles,
    /// The elementwise consumer fused into the tile loop.
    epilogue: Option<usize>,
    /// Whether the accumulator init comes from a `linalg.fill` (fused into the tile loop).
    fill_init: bool,
    /// Whether no operand producer could be tiled: then `transform.structured.fuse` (which
    /// pulls every tileable producer into the loop, the fill through the loop's destination)
    /// fuses only the fill, and never recomputes a transpose per tile.
    only_fill_fusable: bool,
}

impl Planned {
    /// Rows of the product (of one thread's chunk when it is split).
    fn rows(&self) -> i64 {
        self.chunks.as_ref().map_or(self.problem.m, |c| c.chunk.m)
    }

    /// Whether a blocked part of `rows` rows and `nr`-column register tiles packs its right
    /// operand: not a pairs product (its operand is packed by the lowering already), not a
    /// narrower column part, and only for enough rows that each panel is read by several
    /// register tiles. Fewer rows do not repay the copy (a one-row product reads the right
    /// operand once: packing it triples the traffic) nor its compile time: resnet18's 17
    /// packed parts add about 15% to its compile (best of six: 810 to 960 ms), for 5-20% less
    /// run time on two threads.
    fn packs(&self, rows: i64, nr: i64) -> bool {
        let p = &self.problem;
        let min_rows = match self.tiles.kc {
            Some(_) => PACK_MIN_ROWS,
            None => UNBLOCKED_PACK_MIN_TILES * self.tiles.mr,
        };
        p.element != Element::Bf16Pairs
            && nr == self.tiles.nr
            && rows >= min_rows
            && p.k.saturating_mul(p.n).saturating_mul(p.element.bytes()) > PACK_MIN_RIGHT_BYTES
    }

    /// Whether its schedule pulls ops into loops with `fuse_into_containing_op`: the product
    /// into its epilogue's loop, or the fill into the thread chunk loop.
    fn fuses_into_loops(&self) -> bool {
        self.epilogue.is_some() || (self.chunks.is_some() && self.fill_init)
    }
}

/// Producers that tiling cannot pull into a loop (they implement no tiling interface).
const NOT_TILEABLE: &[&str] = &[
    "arith.constant",
    "bufferization.to_tensor",
    "tensor.cast",
    "tensor.collapse_shape",
    "tensor.empty",
    "tensor.expand_shape",
    "tensor.extract_slice",
    "tensor.reshape",
];

/// What the analysis records of every operation, by raw pointer.
#[derive(Debug, Default)]
struct OpInfo {
    name: String,
    /// Raw values of the operands.
    operands: Vec<usize>,
    /// Raw values of the results.
    results: Vec<usize>,
    /// For matmul / batch_matmul with static f32/f64 operands: the problem.
    problem: Option<Problem>,
    /// For a linalg.generic: whether it is an elementwise map we can fuse and vectorise, and
    /// for which of its operands the indexing map is the identity.
    elementwise: Option<Vec<bool>>,
    /// Results' shapes (tensor results only).
    result_shapes: Vec<Vec<i64>>,
    /// Inside a loop a lowering built (a grouped product's tile loops) rather than directly in
    /// its function: such a product is not cut into thread chunks, the loop around it is
    /// already one.
    in_loop: bool,
}

/// The problem of a `linalg.matmul` / `linalg.batch_matmul`, if the schedule handles it.
fn contraction_problem(op: &melior::ir::OperationRef, batched: bool) -> Option<Problem> {
    // Transposed / broadcast variants carry other indexing maps: leave them alone. (Parsed
    // ops carry the default maps explicitly; built ones may have none.)
    let default_maps = if batched {
        "[affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]"
    } else {
        "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>]"
    };
    if op.operand_count() != 3
        || op.result_count() != 1
        || op
            .attribute("indexing_maps")
            .is_ok_and(|maps| maps.to_string() != default_maps)
    {
        return None;
    }
    let (a, ta) = tensor_shape(op.operand(0).ok()?)?;
    let (b, tb) = tensor_shape(op.operand(1).ok()?)?;
    let (c, tc) = tensor_shape(op.operand(2).ok()?)?;
    // Half-precision operands accumulate in f32 (the product's own element): they are
    // widened as they are loaded, so the tiles are those of an f32 product.
    let widened = ta == tb && matches!(ta.as_str(), "bf16" | "f16") && tc == "f32";
    if !widened && (ta != tb || tb != tc) {
        return None;
    }
    let element = Element::parse(&tc)?;
    let operand = ["f32", "f64", "bf16", "f16"]
        .into_iter()
        .find(|t| *t == ta)?;
    let rank = if batched { 3 } else { 2 };
    if a.len() != rank || b.len() != rank || c.len() != rank {
        return None;
    }
    let (m, k, n) = (a[rank - 2], a[rank - 1], b[rank - 1]);
    if b[rank - 2] != k || c[rank - 2] != m || c[rank - 1] != n {
        return None;
    }
    let batch = if batched {
        if a[0] != b[0] || a[0] != c[0] {
            return None;
        }
        Some(a[0])
    } else {
        None
    };
    if [m, n, k].iter().chain(batch.iter()).any(|&d| d <= 0) {
        return None;
    }
    Some(Problem {
        batch,
        m,
        n,
        k,
        element,
        operand,
    })
}

/// The problem of a pairs contraction: [`PAIR_MAPS`] over bf16 operands of `m x k x 2` and
/// `k x n x 2` and an f32 `m x n` accumulator (`k` counts pairs), or [`BATCHED_PAIR_MAPS`]
/// over the same with a leading batch dimension.
fn pairs_problem(op: &melior::ir::OperationRef) -> Option<Problem> {
    let maps = op.attribute("indexing_maps").ok()?.to_string();
    let batched = maps == BATCHED_PAIR_MAPS;
    if op.operand_count() != 3 || op.result_count() != 1 || !(batched || maps == PAIR_MAPS) {
        return None;
    }
    let (mut a, ta) = tensor_shape(op.operand(0).ok()?)?;
    let (mut b, tb) = tensor_shape(op.operand(1).ok()?)?;
    let (mut c, tc) = tensor_shape(op.operand(2).ok()?)?;
    if (ta.as_str(), tb.as_str(), tc.as_str()) != ("bf16", "bf16", "f32") {
        return None;
    }
    let batch = if batched {
        let lead = *a.first()?;
        if b.first() != Some(&lead) || c.first() != Some(&lead) || lead <= 0 {
            return None;
        }
        for shape in [&mut a, &mut b, &mut c] {
            shape.remove(0);
        }
        Some(lead)
    } else {
        None
    };
    let (&[m, k, 2], &[k2, n, 2], &[m2, n2]) = (a.as_slice(), b.as_slice(), c.as_slice()) else {
        return None;
    };
    (k == k2 && m == m2 && n == n2 && m > 0 && n > 0 && k > 0).then_some(Problem {
        batch,
        m,
        n,
        k,
        element: Element::Bf16Pairs,
        operand: "bf16",
    })
}

/// Records every operation of `module`.
fn analyse(module: &Module) -> (Vec<usize>, HashMap<usize, OpInfo>) {
    let mut order = Vec::new();
    let mut ops = HashMap::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        let key = op.to_raw().ptr as usize;
        let name = op
            .name()
            .as_string_ref()
            .as_str()
            .map(str::to_string)
            .unwrap_or_default();
        let mut info = OpInfo {
            operands: op.operands().map(raw_value).collect(),
            results: op.results().map(|r| raw_value(r.into())).collect(),
            result_shapes: op
                .results()
                .filter_map(|r| tensor_shape(r.into()).map(|(s, _)| s))
                .collect(),
            in_loop: op
                .parent_operation()
                .is_some_and(|parent| op_name(&parent) != "func.func"),
            ..OpInfo::default()
        };
        match name.as_str() {
            "linalg.matmul" => info.problem = contraction_problem(&op, false),
            "linalg.batch_matmul" => info.problem = contraction_problem(&op, true),
            "linalg.contract" => info.problem = pairs_problem(&op),
            "linalg.generic" => info.elementwise = elementwise_maps(&op),
            _ => {}
        }
        info.name = name;
        order.push(key);
        ops.insert(key, info);
        WalkResult::Advance
    });
    (order, ops)
}

/// Finds the contractions to schedule and their tiles and epilogues.
fn plan(module: &Module, target: &Target) -> Vec<Planned> {
    let threads = target.threads as i64;
    let (order, ops) = analyse(module);
    // value -> (user op, operand index) for every use.
    let mut uses: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    // value -> defining op.
    let mut producer: HashMap<usize, usize> = HashMap::new();
    for (key, info) in order.iter().filter_map(|k| Some((*k, ops.get(k)?))) {
        for (i, &v) in info.operands.iter().enumerate() {
            uses.entry(v).or_default().push((key, i));
        }
        for &r in &info.results {
            producer.insert(r, key);
        }
    }
    let mut planned = Vec::new();
    // Epilogues already taken: one consumer reading two products (Phi's parallel attention
    // and MLP, summed in one op) fuses with the first only; the second is scheduled alone.
    let mut claimed = HashSet::new();
    for (key, info) in order.iter().filter_map(|k| Some((*k, ops.get(k)?))) {
        let Some(problem) = info.problem else {
            continue;
        };
        // Pairs need the dot product, and whole vectors of columns (the lowering's own loops
        // compute them otherwise).
        let pairs = problem.element == Element::Bf16Pairs;
        if pairs && !(target.bf16_dot() && problem.n % PAIR_LANES == 0) {
            continue;
        }
        let chunks = chunks(&problem, if info.in_loop { 1 } else { threads }, target);
        let tiles = choose(chunks.as_ref().map_or(&problem, |c| &c.chunk), target);
        let fill_init = info
            .operands
            .get(2)
            .and_then(|v| producer.get(v))
            .and_then(|p| ops.get(p))
            .is_some_and(|p| p.name == "linalg.fill");
        // A single elementwise consumer reading the product with the identity map, writing a
        // result of the same shape: tile it and pull the product into its loop.
        let epilogue = (|| {
            if pairs || tiles.kc.is_some() || tiles.m_split.is_some() || tiles.n_split.is_some() {
                return None;
            }
            let result = *info.results.first()?;
            let [(user, operand)] = uses.get(&result)?.as_slice() else {
                return None;
            };
            let consumer = ops.get(user)?;
            let identity = *consumer.elementwise.as_ref()?.get(*operand)?;
            let inputs = consumer
                .operands
                .len()
                .checked_sub(consumer.results.len())?;
            let same_shape = consumer.result_shapes.first() == info.result_shapes.first();
            (*operand < inputs && identity && same_shape && claimed.insert(*user)).then_some(*user)
        })();
        let only_fill_fusable = info.operands.iter().take(2).all(|v| {
            producer
                .get(v)
                .and_then(|p| ops.get(p))
                .is_none_or(|p| NOT_TILEABLE.contains(&p.name.as_str()))
        });
        planned.push(Planned {
            op: key,
            problem,
            chunks,
            tiles,
            epilogue,
            fill_init,
            only_fill_fusable,
        });
    }
    planned
}

/// The transform script for one contraction, appended to the body of `@__transform_main`.
fn emit_one(out: &mut String, id: usize, p: &Planned) -> std::fmt::Result {
    let t = &p.tiles;
    let batched = p.problem.batch.is_some();
    let pairs = p.problem.element == Element::Bf16Pairs;
    // The tile choice travels as the location of the match, so the dump shows it.
    let shape = match p.problem.batch {
        Some(b) => format!("{b}x{}x{}x{}", p.problem.m, p.problem.k, p.problem.n),
        None => format!("{}x{}x{}", p.problem.m, p.problem.k, p.problem.n),
    };
    let split = |name: &str, s: Option<Split>| {
        s.map_or(String::new(), |s| {
            format!(", {name} split at {} (rest {})", s.at, s.rest)
        })
    };
    // Rows of row part `r` (see `emit_row_split`).
    let part_rows = |r: usize| match t.m_split {
        Some(s) if r == 0 => s.at,
        Some(s) => s.rest,
        None => p.rows(),
    };
    let why = format!(
        "{} {shape} {}: {}tile {}x{}, k step {}, k block {}{}{}{}{}{}{}",
        if batched { "batch_matmul" } else { "matmul" },
        p.problem.element.name(),
        p.chunks.as_ref().map_or(String::new(), |c| format!(
            "thread chunks {}, ",
            list(&c.sizes)
        )),
        t.mr,
        t.nr,
        t.ku,
        t.kc.map_or("none".to_string(), |c| c.to_string()),
        if p.packs(part_rows(0), t.nr) {
            ", right operand packed"
        } else {
            ""
        },
        t.nc.map_or(String::new(), |b| format!(
            ", column block {} over {} columns",
            b.size, b.covers
        )),
        split("rows", t.m_split),
        split("columns", t.n_split),
        split("column rest", t.n_tail),
        match (p.epilogue.is_some(), t.columns_outer) {
            (true, _) => ", epilogue fused",
            (false, true) => ", columns outermost",
            (false, false) => "",
        }
    );
    match &p.chunks {
        None => writeln!(
            out,
            "    %c{id} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY} loc(\"{why}\")
    %fn{id} = transform.get_parent_op %c{id} {{isolated_from_above}} : ({ANY}) -> {ANY}"
        )?,
        Some(chunks) => emit_chunks(out, id, p, chunks, &why)?,
    }
    let (m_dim, n_dim) = if batched { (1, 2) } else { (0, 1) };
    // Sizes over the contraction's loops (batch, m, n, k): a leading 1 tiles the batch.
    let lead: &[i64] = if batched { &[1] } else { &[] };
    let zero: &[i64] = if batched { &[0] } else { &[] };
    let with_lead = |rest: &[i64]| [lead, rest].concat();
    let with_zero = |rest: &[i64]| [zero, rest].concat();
    let interchange = |loops: usize| -> String {
        // The m and n tile loops swap when columns go outermost.
        if !t.columns_outer {
            return String::new();
        }
        let mut order: Vec<i64> = (0..loops as i64).collect();
        order.swap(m_dim, n_dim);
        format!(" interchange = {}", list(&order))
    };
    // Columns are cut first (outside any block loop: the rest is a narrow strip); rows are cut
    // inside the reduction/column blocks, so both row parts reuse the cached right block.
    // Column parts: (handle, register tile columns, column block).
    let mut main = format!("%c{id}");
    let mut column_parts = Vec::new();
    if let Some(s) = t.n_split {
        let (head, rest) = emit_split(out, &main, &format!("n{id}"), n_dim, s.at)?;
        main = head;
        match t.n_tail {
            Some(tail) => {
                let (vector, last) = emit_split(out, &rest, &format!("nt{id}"), n_dim, tail.at)?;
                column_parts.push((vector, tail.at, None));
                column_parts.push((last, tail.rest, None));
            }
            None => column_parts.push((rest, s.rest, None)),
        }
    }
    let columns = p.chunks.as_ref().map_or(p.problem.n, |c| c.chunk.n);
    let main_columns = t.n_split.map_or(columns, |s| s.at);
    match t.nc {
        Some(b) if b.covers < main_columns => {
            let (blocked, rest) = emit_split(out, &main, &format!("nb{id}"), n_dim, b.covers)?;
            column_parts.insert(0, (rest, t.nr, None));
            column_parts.insert(0, (blocked, t.nr, Some(b.size)));
        }
        _ => column_parts.insert(0, (main, t.nr, t.nc.map(|b| b.size))),
    }
    let whole = t.m_split.is_none() && t.n_split.is_none();
    for (c, (handle, nr, nc)) in column_parts.iter().enumerate() {
        let name = format!("{id}_{c}");
        if let Some(kc) = t.kc {
            let sizes = with_lead(&[0, nc.unwrap_or(0), kc]);
            let loops = sizes.iter().filter(|&&s| s != 0).count();
            writeln!(
                out,
                "    %b{name}, %bl{name}:{loops} = transform.structured.tile_using_for {handle} tile_sizes {} : ({ANY}) -> ({ANY}, {})",
                list(&sizes),
                handles(loops)
            )?;
            let mut reductions = Vec::new();
            for (r, (row, mr)) in emit_row_split(out, &format!("%b{name}"), &name, m_dim, t)?
                .into_iter()
                .enumerate()
            {
                let part = format!("{name}_{r}");
                let sizes = with_zero(&[mr, *nr, 0]);
                writeln!(
                    out,
                    "    %t{part}, %tl{part}:2 = transform.structured.tile_using_for {row} tile_sizes {}{} : ({ANY}) -> ({ANY}, {ANY}, {ANY})",
                    list(&sizes),
                    interchange(sizes.len())
                )?;
                let tiled = if p.packs(part_rows(r), *nr) {
                    emit_packing(
                        out,
                        &part,
                        &format!("%t{part}"),
                        p.problem.operand,
                        zero,
                        (kc, *nr),
                    )?
                } else {
                    format!("%t{part}")
                };
                emit_reduction_tile(out, &part, &tiled, &with_zero(&[0, 0, t.ku]))?;
                if pairs {
                    emit_pair_lanes(out, &part, zero, (mr, *nr))?;
                }
                reductions.push(format!("%kl{part}"));
            }
            emit_vectorize(out, &name, &format!("%bl{name}#0"), &reductions, pairs)?;
        } else {
            for (r, (row, mr)) in emit_row_split(out, handle, &name, m_dim, t)?
                .into_iter()
                .enumerate()
            {
                let part = format!("{name}_{r}");
                let (outer, tile) = emit_register_tiles(out, id, &part, &row, p, (mr, *nr), whole)?;
                let tile = if p.packs(part_rows(r), *nr) {
                    emit_packing(
                        out,
                        &part,
                        &tile,
                        p.problem.operand,
                        zero,
                        (p.problem.k, *nr),
                    )?
                } else {
                    tile
                };
                emit_reduction_tile(out, &part, &tile, &with_zero(&[0, 0, t.ku]))?;
                if pairs {
                    emit_pair_lanes(out, &part, zero, (mr, *nr))?;
                }
                emit_vectorize(out, &part, &outer, &[format!("%kl{part}")], pairs)?;
            }
        }
    }
    Ok(())
}

/// Cuts the product (through its epilogue, when it has one) into one `scf.forall` chunk per
/// thread, pulling the product and its fill into the chunk loop, and binds `%c<id>` to the
/// product inside it, which the rest of the schedule tiles like a whole product.
fn emit_chunks(
    out: &mut String,
    id: usize,
    p: &Planned,
    chunks: &Chunks,
    why: &str,
) -> std::fmt::Result {
    writeln!(
        out,
        "    %a{id} = transform.structured.match attributes {{{CONTRACTION_TAG} = {id} : i64}} in %root : ({ANY}) -> {ANY} loc(\"{why}\")
    %fn{id} = transform.get_parent_op %a{id} {{isolated_from_above}} : ({ANY}) -> {ANY}"
    )?;
    if p.fill_init {
        writeln!(
            out,
            "    %af{id} = transform.get_producer_of_operand %a{id}[2] : ({ANY}) -> {ANY}"
        )?;
    }
    let sizes = list(&chunks.sizes);
    let containing = if p.epilogue.is_some() {
        writeln!(
            out,
            "    %ae{id} = transform.structured.match attributes {{{EPILOGUE_TAG} = {id} : i64}} in %fn{id} : ({ANY}) -> {ANY}
    %we{id}, %w{id} = transform.structured.tile_using_forall %ae{id} tile_sizes {sizes} : ({ANY}) -> ({ANY}, {ANY})
    %c{id}, %wc{id} = transform.structured.fuse_into_containing_op %a{id} into %w{id} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
        )?;
        format!("%wc{id}")
    } else {
        writeln!(
            out,
            "    %c{id}, %w{id} = transform.structured.tile_using_forall %a{id} tile_sizes {sizes} : ({ANY}) -> ({ANY}, {ANY})"
        )?;
        format!("%w{id}")
    };
    if p.fill_init {
        writeln!(
            out,
            "    %wf{id}, %wfl{id} = transform.structured.fuse_into_containing_op %af{id} into {containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
        )?;
    }
    Ok(())
}

/// Splits `handle` along `dim` after `at`; returns the handles of the two parts.
fn emit_split(
    out: &mut String,
    handle: &str,
    name: &str,
    dim: usize,
    at: i64,
) -> Result<(String, String), std::fmt::Error> {
    writeln!(
        out,
        "    %{name} = transform.structured.split {handle} after {at} {{dimension = {dim}}} : {ANY}
    %{name}_0, %{name}_1 = transform.split_handle %{name} : ({ANY}) -> ({ANY}, {ANY})"
    )?;
    Ok((format!("%{name}_0"), format!("%{name}_1")))
}

/// The row parts of `handle` with their register-tile rows: itself, or its two halves when
/// the rows are split.
fn emit_row_split(
    out: &mut String,
    handle: &str,
    name: &str,
    dim: usize,
    t: &Tiles,
) -> Result<Vec<(String, i64)>, std::fmt::Error> {
    Ok(match t.m_split {
        Some(s) => {
            let (main, rest) = emit_split(out, handle, &format!("m{name}"), dim, s.at)?;
            vec![(main, t.mr), (rest, s.rest)]
        }
        None => vec![(handle.to_string(), t.mr)],
    })
}

/// Rows below which a product's part reads its right operand where it lies.
const PACK_MIN_ROWS: i64 = 16;
/// Register tiles (of rows) below which an unblocked product reads its right operand where it
/// lies: its panel is then copied once for the whole product, so only a panel that many tiles
/// read repays it. With 16 rows, small_convnet's first convolution (`16 x 27 x 8192`, four
/// tiles per panel) took 17% longer packed.
const UNBLOCKED_PACK_MIN_TILES: i64 = 16;
/// Bytes of the right operand up to which it is read where it lies: it stays in L1 and L2
/// whatever its layout.
const PACK_MIN_RIGHT_BYTES: i64 = 64 << 10;

/// Rows of a right-operand panel copied per iteration of the packing loop.
const PACK_ROWS: i64 = 8;

/// Packs the right operand of the register tile `handle`: its `kc` x `nr` slice (`k` x `nr`
/// unblocked) is copied (a zero-width `nofold` pad) and the copy hoisted out of the register
/// tile's two loops, which turns it into one contiguous panel per column tile, built once per
/// reduction block (once per product or thread chunk unblocked). Rows of the right operand
/// are a row stride apart; at 1024 f32 columns that stride is 4 KiB, every row of a panel
/// falls in the same L1 set and no prefetcher follows. Packed, the panel is read as one
/// stream (1024³ on one Zen 3 core: 38 to 80 GFLOP/s). Returns the handle of the padded
/// register tile.
fn emit_packing(
    out: &mut String,
    part: &str,
    handle: &str,
    operand: &str,
    zero: &[i64],
    (kc, nr): (i64, i64),
) -> Result<String, std::fmt::Error> {
    let dims: Vec<i64> = (0..zero.len() as i64 + 3).collect();
    // The copy moves `rows` rows of the panel per iteration (unrolled whole, a 256-deep panel
    // was 512 vector transfers, and LLVM took a second over three of them).
    let rows = largest_divisor_at_most(kc, PACK_ROWS);
    let zero_value = format!("0.0 : {operand}");
    writeln!(
        out,
        "    %pd{part}, %pp{part}, %pc{part} = transform.structured.pad {handle} {{padding_values = [{zero_value}, {zero_value}, 0.0 : {accumulator}], padding_dimensions = {}, nofold_flags = {}, copy_back_op = \"none\"}} : ({ANY}) -> ({ANY}, {ANY}, {ANY})
    %ph{part} = transform.structured.hoist_pad %pp{part} by 2 loops : ({ANY}) -> {ANY}
    %pr{part}, %prl{part} = transform.structured.tile_using_for %ph{part} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})
    transform.structured.vectorize %pr{part} vector_sizes {} : {ANY}",
        list(&dims),
        list(&[0, 1, 0]),
        list(&[zero, &[rows, 0]].concat()),
        list(&[&vec![1; zero.len()], &[rows, nr][..]].concat()),
        accumulator = if operand == "f64" { "f64" } else { "f32" },
    )?;
    Ok(format!("%pd{part}"))
}

/// The reduction loop of a register tile, `ku` steps per iteration.
fn emit_reduction_tile(
    out: &mut String,
    part: &str,
    handle: &str,
    sizes: &[i64],
) -> std::fmt::Result {
    writeln!(
        out,
        "    %k{part}, %kl{part} = transform.structured.tile_using_for {handle} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY})",
        list(sizes)
    )
}

/// A pairs product's register tile (`%k<part>`, one step of the reduction) cut into one
/// `1 x PAIR_LANES` tile per row and vector, its loops unrolled: each vectorises to a
/// contraction of one pair of the left operand with a vector of pairs of the right one, which
/// the x86vector patterns turn into a broadcast and a dot product. `zero` leads the sizes over
/// a batch, whose register tile is one product already.
fn emit_pair_lanes(
    out: &mut String,
    part: &str,
    zero: &[i64],
    (mr, nr): (i64, i64),
) -> std::fmt::Result {
    writeln!(
        out,
        "    %u{part}, %ul{part}:2 = transform.structured.tile_using_for %k{part} tile_sizes {} : ({ANY}) -> ({ANY}, {ANY}, {ANY})
    transform.loop.unroll %ul{part}#1 {{factor = {}}} : {ANY}
    transform.loop.unroll %ul{part}#0 {{factor = {mr}}} : {ANY}",
        list(&[zero, &[1, PAIR_LANES]].concat()),
        nr / PAIR_LANES
    )
}

/// Register tiles for a product without reduction blocks: tiles the product (or its fused
/// elementwise consumer, pulling the product in) and fuses the fill where it can; the caller
/// packs the right operand and tiles the reduction. `whole`: the part is the whole product
/// (the fill and epilogue are its own). Returns the handles of the outermost loop and of the
/// product's register tile.
fn emit_register_tiles(
    out: &mut String,
    contraction: usize,
    part: &str,
    handle: &str,
    p: &Planned,
    (mr, nr): (i64, i64),
    whole: bool,
) -> Result<(String, String), std::fmt::Error> {
    let batched = p.problem.batch.is_some();
    let lead: &[i64] = if batched { &[1] } else { &[] };
    let epilogue = p.epilogue.is_some() && whole;
    let fill = p.fill_init && whole;
    if fill && epilogue {
        writeln!(
            out,
            "    %f{part} = transform.get_producer_of_operand {handle}[2] : ({ANY}) -> {ANY}"
        )?;
    }
    let (target, sizes) = if epilogue {
        writeln!(
            out,
            "    %e{part} = transform.structured.match attributes {{{EPILOGUE_TAG} = {contraction} : i64}} in %fn{contraction} : ({ANY}) -> {ANY}"
        )?;
        (format!("%e{part}"), [lead, &[mr, nr]].concat())
    } else {
        (handle.to_string(), [lead, &[mr, nr, 0]].concat())
    };
    let loops = sizes.iter().filter(|&&s| s != 0).count();
    // Without an epilogue the fill is the loop's destination: only `structured.fuse` reaches
    // it, and only when it would fuse nothing else.
    let fuse_fill = !epilogue && fill && p.only_fill_fusable;
    writeln!(
        out,
        "    %t{part}, %tl{part}:{loops} = transform.structured.{} {target} tile_sizes {} : ({ANY}) -> ({ANY}, {})",
        if fuse_fill { "fuse" } else { "tile_using_for" },
        list(&sizes),
        handles(loops)
    )?;
    let mut containing = format!("%tl{part}#0");
    let mut inner = format!("%t{part}");
    if epilogue {
        writeln!(
            out,
            "    %p{part}, %pl{part} = transform.structured.fuse_into_containing_op {handle} into {containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
        )?;
        containing = format!("%pl{part}");
        inner = format!("%p{part}");
        if fill {
            writeln!(
                out,
                "    %ff{part}, %fl{part} = transform.structured.fuse_into_containing_op %f{part} into {containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"
            )?;
            containing = format!("%fl{part}");
        }
    }
    Ok((containing, inner))
}

/// Vectorises the tiled ops inside `outer` (and only them: fill, contraction and epilogue
/// tiles), folds tensor slices into the transfers and keeps each accumulator in registers
/// across its reduction loop (`reductions`). Only those loops hoist their accumulator: hoisting
/// the row parts' slices out of a reduction block loop would make bufferization copy them.
/// Canonicalization comes after the hoisting, as it folds single-iteration reduction loops
/// (which then need no hoisting, but would leave their handles without a replacement).
/// `pairs`: the contractions become AVX512-BF16 dot products once their accumulators are
/// hoisted (their unit dimensions stay: the patterns expect them).
fn emit_vectorize(
    out: &mut String,
    name: &str,
    outer: &str,
    reductions: &[String],
    pairs: bool,
) -> std::fmt::Result {
    let unit_dims = if pairs {
        ""
    } else {
        "\n      transform.apply_patterns.vector.cast_away_vector_leading_one_dim"
    };
    writeln!(
        out,
        "    %v{name} = transform.structured.match interface{{LinalgOp}} in {outer} : ({ANY}) -> {ANY}
    transform.structured.vectorize %v{name} {{create_named_contraction}} : {ANY}
    transform.apply_patterns to {outer} {{
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers{unit_dims}
    }} : {ANY}
    %s{name} = transform.structured.match ops{{[\"scf.for\"]}} in {outer} : ({ANY}) -> {ANY}
    transform.apply_licm to %s{name} : {ANY}"
    )?;
    for reduction in reductions {
        writeln!(
            out,
            "    transform.loop.hoist_loop_invariant_subsets {reduction} : {ANY}"
        )?;
    }
    writeln!(
        out,
        "    transform.apply_patterns to {outer} {{
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
      transform.apply_patterns.canonicalization
    }} : {ANY}
    transform.apply_cse to {outer} : {ANY}"
    )?;
    if pairs {
        writeln!(
            out,
            "    transform.apply_patterns to {outer} {{
      transform.apply_patterns.x86vector.vector_contract_to_packed_type_dot_product
    }} : {ANY}
    transform.apply_cse to {outer} : {ANY}"
        )?;
    }
    Ok(())
}

/// The whole schedule as a module holding `@__transform_main`, for the planned contractions
/// but those `merged` into an identical one's function.
fn emit(planned: &[Planned], merged: &[i64]) -> Result<String> {
    let mut body = String::new();
    for (id, p) in planned.iter().enumerate() {
        if merged.contains(&(id as i64)) {
            continue;
        }
        emit_one(&mut body, id, p).map_err(|_| Error::PassPipeline {
            pipeline: "schedule".to_string(),
            message: "cannot format the transform schedule".to_string(),
        })?;
    }
    Ok(script(&body))
}

/// Tags the contractions of `module` (and their fused epilogues) and appends the transform
/// schedule that tiles and vectorises them. Returns how many contractions it scheduled. A module
/// that already has a `@__transform_main` is left alone.
pub fn attach(context: &Context, module: &mut Module, target: &Target) -> Result<usize> {
    if has_entry(module) {
        return Ok(0);
    }
    let folded = chains::fold(context, module)?;
    tracing::debug!(
        folded,
        "elementwise ops folded into the chains after products"
    );
    let mut planned = plan(module, target);
    let mut tags: HashMap<usize, (&str, i64)> = HashMap::new();
    for (id, p) in planned.iter().enumerate() {
        tags.insert(p.op, (CONTRACTION_TAG, id as i64));
        if let Some(e) = p.epilogue {
            tags.insert(e, (EPILOGUE_TAG, id as i64));
        }
    }
    tag(module, &tags);
    let moved = isolate(context, module, &planned)?;
    // In a function of its own, a product's operands are arguments: `fuse` can pull in only
    // its fill.
    for &id in &moved {
        planned[id].only_fill_fusable = true;
    }
    let merged = merge_identical(context, module, &planned)?;
    tracing::debug!(
        moved = moved.len(),
        merged = merged.len(),
        "contractions moved into functions of their own, identical ones merged"
    );
    append_script(context, module, &emit(&planned, &merged)?, "schedule")?;
    Ok(planned.len() - merged.len())
}

/// Merges the isolated contractions' functions that are identical but for their tags and
/// whose scripts are the same (a model's repeated layers: BERT's 16 become 6), so that each
/// is scheduled once; the calls of a merged one call the one kept. Returns the planned ids
/// whose functions were merged away.
fn merge_identical(
    context: &Context,
    module: &mut Module,
    planned: &[Planned],
) -> Result<Vec<i64>> {
    // Equal tags for equal scripts (the plan also depends on the product's surroundings, which
    // the function does not show), so only those can merge: each script rendered as the
    // first contraction's.
    let keys = planned
        .iter()
        .map(|p| {
            let mut script = String::new();
            emit_one(&mut script, 0, p).map(|()| script)
        })
        .collect::<std::result::Result<Vec<String>, _>>()
        .map_err(|_| Error::stage("schedule", "cannot format the transform schedule"))?;
    let classes: Vec<i64> = keys
        .iter()
        .map(|key| keys.iter().position(|k| k == key).map_or(0, |c| c as i64))
        .collect();
    let class = |id: i64| {
        usize::try_from(id)
            .ok()
            .and_then(|i| classes.get(i).copied())
            .unwrap_or(id)
    };
    let before = retag(module, class);
    if before.len() < 2 {
        retag(module, |id| id);
        return Ok(Vec::new());
    }
    super::run_pipeline_text(
        context,
        module,
        "builtin.module(duplicate-function-elimination)",
    )
    .map_err(|e| e.in_stage("schedule"))?;
    let after = retag(module, |id| id);
    Ok(before
        .into_iter()
        .filter(|id| !after.contains(id))
        .collect())
}

/// Sets the tags inside each isolated contraction's function (private, `…_contraction{id}`)
/// to `value(id)`; returns the ids of those functions.
fn retag(module: &mut Module, value: impl Fn(i64) -> i64) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut next = module.body().first_operation_mut();
    while let Some(mut function) = next {
        next = function.next_in_block_mut();
        let text = |name: &str| {
            function
                .attribute(name)
                .ok()
                .and_then(|a| StringAttribute::try_from(a).ok())
                .map(|a| a.value().to_string())
        };
        let Some(id) = text("sym_name")
            .filter(|_| text("sym_visibility").as_deref() == Some("private"))
            .and_then(|name| name.rsplit_once("_contraction")?.1.parse().ok())
        else {
            continue;
        };
        ids.push(id);
        let tag_value = value(id);
        function.walk_mut(WalkOrder::PreOrder, |mut op| {
            let context = op.context();
            // SAFETY: the context owns the module being walked, so it outlives this closure.
            let context = unsafe { context.to_ref() };
            for tag in [CONTRACTION_TAG, EPILOGUE_TAG] {
                if op.has_attribute(tag) {
                    let i64_type = IntegerType::new(context, 64).into();
                    let attribute = IntegerAttribute::new(i64_type, tag_value).into();
                    op.set_discardable_attribute(tag, attribute);
                }
            }
            WalkResult::Advance
        });
    }
    ids
}

/// Ops cloned into an isolated contraction's function rather than passed to it: constants and
/// the empty tensors of the fill and the epilogue, so that their tiles fold as before.
const ISOLATE_CLONED: &[&str] = &["arith.constant", "ub.poison", "tensor.empty"];

/// The same for a pairs product, whose function stays a call (its dot products are x86vector
/// ops, which MLIR's inliner does not inline): it is passed its empty result tensor and writes
/// the product there, so that bufferisation drops the function's result
/// (`drop-equivalent-buffer-results`) and the buffer stays the caller's. A function returning
/// a buffer of its own hid it from the deallocation pipeline: ResNet-50 in bf16 checked 203
/// buffers for aliases on every call and had 600 conditional deallocations.
const ISOLATE_CLONED_PAIRS: &[&str] = &["arith.constant", "ub.poison"];

/// Moves each planned contraction, with the fill that starts it and its epilogue, into a
/// private function of its own, called in its place; the stage's `inline` pass puts the
/// scheduled code back. This is for compile time: `fuse_into_containing_op` prints its
/// producer and container into a diagnostic on every fusion (used only if the fusion fails),
/// and printing an op numbers everything in the nearest op isolated from above. In the graph
/// function that was 70% of the stage; in a function of three ops it is nothing. Only the
/// contractions whose schedule fuses that way move (the others, with the inlining, would cost
/// more than they save), and of those not one whose fill has other users or whose ops other
/// ops use before the last of them. Returns the ids of those it moved.
fn isolate(context: &Context, module: &Module, planned: &[Planned]) -> Result<Vec<usize>> {
    let attributes = outlining::private_attributes(context, &[])?;
    let mut moved = Vec::new();
    for (function, name, block) in outlining::public_functions(module)? {
        let mut ops = HashMap::new();
        let mut next = block.first_operation();
        while let Some(op) = next {
            next = op.next_in_block();
            ops.insert(op.to_raw().ptr as usize, (ops.len(), op));
        }
        let at = |op: &melior::ir::OperationRef| ops.get(&(op.to_raw().ptr as usize)).copied();
        for (id, p) in planned.iter().enumerate() {
            let Some((_, contraction)) = ops.get(&p.op).copied().filter(|_| p.fuses_into_loops())
            else {
                continue;
            };
            let mut group = vec![contraction];
            if p.fill_init {
                let fill = contraction
                    .operand(2)
                    .ok()
                    .and_then(result_owner)
                    .filter(|f| use_count(f) == 1);
                match fill.as_ref().and_then(at) {
                    Some((_, fill)) => group.push(fill),
                    None => continue,
                }
            }
            if let Some(epilogue) = p.epilogue {
                match ops.get(&epilogue) {
                    Some((_, epilogue)) => group.push(*epilogue),
                    None => continue,
                }
            }
            group.sort_by_key(|op| at(op).map(|(i, _)| i));
            let callee = outlining::Callee {
                name: format!("{name}_contraction{id}"),
                attributes: &attributes,
                cloned: if p.problem.element == Element::Bf16Pairs {
                    ISOLATE_CLONED_PAIRS
                } else {
                    ISOLATE_CLONED
                },
            };
            if outlining::outline_group(context, &module.body(), function, block, &group, &callee)
                .map_err(|e| e.in_stage("schedule"))?
            {
                moved.push(id);
            }
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A generic AVX-512 CPU: 32 registers of 64 bytes, no bf16 dot product, 2 MiB of L2.
    fn avx512() -> Target {
        Target::parse("x86-64-v4").unwrap()
    }

    fn problem(m: i64, k: i64, n: i64, element: Element) -> Problem {
        Problem {
            batch: None,
            m,
            n,
            k,
            element,
            operand: if element == Element::Bf16Pairs {
                "bf16"
            } else {
                element.name()
            },
        }
    }

    #[test]
    fn tiles_divide_every_dimension() {
        for m in 1..40 {
            for n in [1, 3, 7, 16, 17, 33, 48, 65, 100, 1000, 3000, 4100] {
                for k in [1, 5, 64, 4096, 4099] {
                    for element in [Element::F32, Element::F64] {
                        let p = problem(m, k, n, element);
                        let t = choose(&p, &avx512());
                        let rows = t.m_split.map_or(m, |s| s.at);
                        let columns = t.n_split.map_or(n, |s| s.at);
                        assert_eq!(rows % t.mr, 0, "{p:?} {t:?}");
                        assert_eq!(columns % t.nr, 0, "{p:?} {t:?}");
                        for s in t.m_split.iter().chain(&t.n_split) {
                            assert!(s.at > 0 && s.rest > 0, "{p:?} {t:?}");
                        }
                        assert_eq!(t.m_split.map_or(m, |s| s.at + s.rest), m);
                        assert_eq!(t.n_split.map_or(n, |s| s.at + s.rest), n);
                        assert!(t.m_split.is_none_or(|s| s.rest < t.mr), "{p:?} {t:?}");
                        assert!(t.n_split.is_none_or(|s| s.rest < t.nr), "{p:?} {t:?}");
                        if let Some(b) = t.nc {
                            assert!(b.size % t.nr == 0 && b.covers % b.size == 0, "{p:?} {t:?}");
                            assert!(b.size < b.covers + 1 && b.covers <= columns, "{p:?} {t:?}");
                        }
                        let r = t.kc.unwrap_or(k);
                        assert_eq!(k % r, 0, "{p:?} {t:?}");
                        assert_eq!(r % t.ku, 0, "{p:?} {t:?}");
                        assert!(t.mr <= 8 && t.nr <= 32, "{p:?} {t:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn products_are_cut_into_thread_chunks() {
        let t = &avx512();
        // Wide right operand: columns, whole vectors per thread.
        let c = chunks(&problem(64, 512, 512, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![0, 256]);
        assert_eq!((c.chunk.m, c.chunk.n, c.chunk.k), (64, 256, 512));
        // Tall product (an im2col convolution): rows.
        let c = chunks(&problem(4096, 576, 64, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![2048, 0]);
        // Columns that no whole vector per thread divides fall back to rows.
        let c = chunks(&problem(64, 256, 1000, Element::F32), 2, t).unwrap();
        assert_eq!(c.sizes, vec![32, 0]);
        // A batch that divides evenly is cut first.
        let batched = Problem {
            batch: Some(8),
            ..problem(128, 64, 128, Element::F32)
        };
        let c = chunks(&batched, 4, t).unwrap();
        assert_eq!(c.sizes, vec![2, 0, 0]);
        assert_eq!(c.chunk.batch, Some(2));
        // One thread, small products and shapes with no even cut stay whole.
        assert_eq!(chunks(&problem(64, 512, 512, Element::F32), 1, t), None);
        assert_eq!(chunks(&problem(16, 16, 16, Element::F32), 2, t), None);
        assert_eq!(chunks(&problem(7, 4096, 1000, Element::F32), 2, t), None);
        // The threshold: 2^19 multiply-adds stay whole, 2^20 are cut; a batch counts.
        assert_eq!(chunks(&problem(64, 128, 64, Element::F32), 2, t), None);
        assert!(chunks(&problem(64, 128, 128, Element::F32), 2, t).is_some());
        let attention = Problem {
            batch: Some(8),
            ..problem(32, 32, 32, Element::F32)
        };
        assert_eq!(chunks(&attention, 2, t), None);
    }

    #[test]
    fn avx512_register_tiles() {
        let t = choose(&problem(256, 512, 256, Element::F32), &avx512());
        assert_eq!((t.mr, t.nr, t.kc), (8, 32, None));
        let t = choose(&problem(512, 512, 512, Element::F64), &avx512());
        assert_eq!((t.mr, t.nr, t.kc, t.nc), (8, 16, Some(256), None));
        let block = |size, covers| Some(Block { size, covers });
        let t = choose(&problem(1024, 1024, 1024, Element::F32), &avx512());
        assert_eq!(
            (t.kc, t.nc, t.columns_outer, t.ku),
            (Some(256), None, false, 4)
        );
        let t = choose(&problem(1024, 1024, 1024, Element::F64), &avx512());
        assert_eq!(
            (t.kc, t.nc, t.columns_outer, t.ku),
            (Some(128), None, false, 4)
        );
        let t = choose(&problem(64, 4096, 1024, Element::F32), &avx512());
        assert_eq!((t.kc, t.nc, t.columns_outer), (Some(256), None, true));
        // A prime depth cannot be blocked; 1000 columns block by a multiple of 4.
        let t = choose(&problem(512, 4099, 512, Element::F32), &avx512());
        assert_eq!((t.kc, t.ku), (None, 1));
        let t = choose(&problem(512, 2000, 1000, Element::F32), &avx512());
        assert_eq!((t.kc, t.nr, t.ku), (Some(200), 32, 4));
        assert_eq!(t.n_split, Some(Split { at: 992, rest: 8 }));
        // Wide: 256-deep blocks of 1024 columns (1 MiB of the right operand, half of L2).
        let t = choose(&problem(197, 768, 3072, Element::F32), &avx512());
        assert_eq!((t.kc, t.nc), (Some(256), block(1024, 3072)));
        // Blocks need not divide the columns: 2976 main columns are 2 blocks of 1024 and 928
        // unblocked columns, then 24 columns.
        let t = choose(&problem(197, 768, 3000, Element::F32), &avx512());
        assert_eq!(t.nc, block(1024, 2048));
        assert_eq!(t.n_split, Some(Split { at: 2976, rest: 24 }));
        // That tile is one vector and 8 columns, as is a whole width of 24.
        assert_eq!(t.n_tail, Some(Split { at: 16, rest: 8 }));
        let t = choose(&problem(64, 64, 24, Element::F32), &avx512());
        assert_eq!(
            (t.nr, t.n_split, t.n_tail),
            (16, Some(Split { at: 16, rest: 8 }), None)
        );
        // f64 3000 columns: pairs of 8-lane vectors up to 2992, then one vector.
        let t = choose(&problem(64, 64, 3000, Element::F64), &avx512());
        assert_eq!((t.nr, t.n_split), (16, Some(Split { at: 2992, rest: 8 })));
        // 197 rows (prime): 24 full 8-row tiles and one of 5, not 197 one-row tiles; 100 rows
        // divide by 5.
        let t = choose(&problem(197, 768, 768, Element::F32), &avx512());
        assert_eq!((t.mr, t.m_split), (8, Some(Split { at: 192, rest: 5 })));
        let t = choose(&problem(100, 784, 10, Element::F32), &avx512());
        assert_eq!((t.mr, t.nr, t.m_split, t.n_split), (5, 10, None, None));
    }

    #[test]
    fn avx2_tiles_follow_a_smaller_l2() {
        let zen3 = &Target::parse("znver3").unwrap();
        let block = |size, covers| Some(Block { size, covers });
        // Eight accumulators of two 8-lane vectors; 512³'s right operand (1 MiB) is blocked
        // here but not with a 2 MiB L2; blocks of 256 KiB.
        let t = choose(&problem(512, 512, 512, Element::F32), zen3);
        assert_eq!(
            (t.mr, t.nr, t.kc, t.nc),
            (4, 16, Some(256), block(256, 512))
        );
        assert_eq!(
            choose(&problem(512, 512, 512, Element::F32), &avx512()).kc,
            None
        );
        let t = choose(&problem(1024, 1024, 1024, Element::F32), zen3);
        assert_eq!((t.kc, t.nc), (Some(256), block(256, 1024)));
    }

    /// Compiles a graph of one product (`mm`, or `bmm` with `batch`), with the left operand
    /// optionally column-major, runs it on deterministic data and compares with a naive product
    /// in f64. Returns whether the schedule stage vectorised it.
    fn run_product(
        m: i64,
        k: i64,
        n: i64,
        batch: Option<i64>,
        f64_data: bool,
        column_major_a: bool,
    ) -> bool {
        let dtype = if f64_data { "float64" } else { "float32" };
        let lead: Vec<i64> = batch.into_iter().collect();
        let dims = |r: i64, c: i64| -> Vec<i64> { lead.iter().copied().chain([r, c]).collect() };
        let strides = |shape: &[i64], column_major: bool| -> Vec<i64> {
            let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            let mut st = if column_major { vec![1, r] } else { vec![c, 1] };
            if shape.len() == 3 {
                st.insert(0, r * c);
            }
            st
        };
        let meta = |shape: &[i64], column_major: bool| {
            format!(
                r#"{{"shape": {shape:?}, "strides": {:?}, "dtype": "{dtype}"}}"#,
                strides(shape, column_major)
            )
        };
        let (sa, sb, sc) = (dims(m, k), dims(k, n), dims(m, n));
        let target = if batch.is_some() {
            "aten.bmm.default"
        } else {
            "aten.mm.default"
        };
        let json = format!(
            r#"{{"format": "fxmlir.graph", "version": 1, "name": "product",
              "inputs": [{{"name": "a", "meta": {}}}, {{"name": "b", "meta": {}}}],
              "nodes": [{{"name": "mm", "target": "{target}",
                "args": [{{"ref": {{"node": "a"}}}}, {{"ref": {{"node": "b"}}}}],
                "outputs": [{}]}}],
              "outputs": [{{"node": "mm"}}]}}"#,
            meta(&sa, column_major_a),
            meta(&sb, false),
            meta(&sc, false)
        );
        let graph = crate::Graph::from_json(&json).expect("valid graph");
        let dir = std::env::temp_dir().join(format!(
            "fxmlir-schedule-{}-{m}x{k}x{n}-{batch:?}-{f64_data}-{column_major_a}",
            std::process::id()
        ));
        let options = crate::Options {
            dump_dir: Some(dir.clone()),
            ..crate::Options::new(crate::Target::host().unwrap())
        };
        let compiled = crate::compile(&graph, None, &options).expect("compiles");
        let scheduled = std::fs::read_to_string(dir.join("product.01-schedule.mlir"))
            .expect("schedule dump")
            .contains("vector.contract");
        std::fs::remove_dir_all(&dir).ok();

        let b_count = batch.unwrap_or(1);
        let count = |s: &[i64]| s.iter().product::<i64>() as usize;
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        };
        let a: Vec<f64> = (0..count(&sa)).map(|_| next()).collect();
        let b: Vec<f64> = (0..count(&sb)).map(|_| next()).collect();
        // a[bi][i][p] as stored (row- or column-major within each batch).
        let at = |bi: i64, i: i64, p: i64| -> f64 {
            let base = bi * m * k;
            a[(base + if column_major_a { p * m + i } else { i * k + p }) as usize]
        };
        let mut expected = vec![0f64; count(&sc)];
        for bi in 0..b_count {
            for i in 0..m {
                for j in 0..n {
                    expected[(bi * m * n + i * n + j) as usize] = (0..k)
                        .map(|p| at(bi, i, p) * b[(bi * k * n + p * n + j) as usize])
                        .sum();
                }
            }
        }
        let got: Vec<f64> = if f64_data {
            let mut out = vec![0f64; count(&sc)];
            let (mut a, mut b) = (a.clone(), b.clone());
            let pointers = [
                a.as_mut_ptr() as usize,
                b.as_mut_ptr() as usize,
                out.as_mut_ptr() as usize,
            ];
            // SAFETY: the buffers match the graph's shapes, strides and dtype.
            unsafe { compiled.call(&pointers).expect("runs") };
            out
        } else {
            let mut a: Vec<f32> = a.iter().map(|&v| v as f32).collect();
            let mut b: Vec<f32> = b.iter().map(|&v| v as f32).collect();
            let mut out = vec![0f32; count(&sc)];
            let pointers = [
                a.as_mut_ptr() as usize,
                b.as_mut_ptr() as usize,
                out.as_mut_ptr() as usize,
            ];
            // SAFETY: as above.
            unsafe { compiled.call(&pointers).expect("runs") };
            out.into_iter().map(f64::from).collect()
        };
        let scale = expected.iter().fold(1f64, |acc, v| acc.max(v.abs()));
        let tolerance = if f64_data { 1e-12 } else { 1e-4 } * scale;
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (g - e).abs() <= tolerance,
                "{m}x{k}x{n} batch {batch:?}: element {i}: {g} vs {e}"
            );
        }
        scheduled
    }

    #[test]
    fn products_of_awkward_shapes_are_vectorised_and_correct() {
        for (m, k, n) in [
            (1, 1, 1),
            (3, 5, 7),
            (17, 33, 65),
            (8, 4, 32),
            (13, 300, 48),
            (40, 520, 600),
            (197, 64, 1000),
            // Reduction and column blocks, blocks not dividing the columns, split rows.
            (16, 512, 3000),
            (9, 600, 2100),
        ] {
            for f64_data in [false, true] {
                assert!(
                    run_product(m, k, n, None, f64_data, false),
                    "{m}x{k}x{n} not vectorised"
                );
            }
        }
        assert!(run_product(37, 19, 23, Some(4), false, false));
        assert!(run_product(19, 8, 70, Some(2), false, false));
        assert!(run_product(16, 600, 512, Some(3), true, false));
    }

    /// A `fxmlir.mm_pairs` contraction of `m x 2k` by `k x n x 2`, as the lowering builds it.
    fn pairs_module(context: &Context, m: i64, k: i64, n: i64) -> Module<'_> {
        let text = format!(
            "func.func @f(%a: tensor<{m}x{k}x2xbf16>, %b: tensor<{k}x{n}x2xbf16>, %c: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %r = linalg.contract indexing_maps = {PAIR_MAPS} ins(%a, %b : tensor<{m}x{k}x2xbf16>, tensor<{k}x{n}x2xbf16>) outs(%c : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}"
        );
        Module::parse(context, &text).expect("a valid module")
    }

    #[test]
    fn pairs_products_need_the_dot_product_and_whole_vectors() {
        let context = crate::context::new_context().expect("default LLVM options parse");
        let bf16 = &Target::parse("x86-64-v4,+avx512bf16").unwrap();
        let planned = plan(&pairs_module(&context, 64, 128, 96), bf16);
        let [p] = planned.as_slice() else {
            panic!("one product planned, got {}", planned.len());
        };
        assert_eq!(p.problem, problem(64, 128, 96, Element::Bf16Pairs));
        // The tiles of an f32 product of as many steps, one pair per step.
        let f32_tiles = choose(&problem(64, 128, 96, Element::F32), &avx512());
        assert_eq!(p.tiles, Tiles { ku: 1, ..f32_tiles });
        assert!(p.epilogue.is_none());
        // Without AVX512-BF16, or with a width of no whole number of 16-lane vectors, the
        // contraction is left to the lowering's loops.
        assert!(plan(&pairs_module(&context, 64, 128, 96), &avx512()).is_empty());
        assert!(plan(&pairs_module(&context, 64, 128, 40), bf16).is_empty());
    }

    #[test]
    fn column_major_left_operand() {
        assert!(run_product(24, 40, 64, None, false, true));
        assert!(run_product(9, 7, 5, Some(2), true, true));
    }
}
