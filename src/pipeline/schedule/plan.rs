//! Finding the contractions to schedule in a module: their problems, thread chunks, tiles,
//! fusable epilogues and whether their right operand is packed.

use super::model::*;
use crate::pipeline::ir::maps::elementwise_maps;
use crate::pipeline::ir::ops::{op_name, raw_value, tensor_dims, tensor_sizes};
use crate::target::Target;
use crate::tuning::{
    BATCHED_PAIR_MAPS, PAIR_LANES, PAIR_MAPS, PANEL_MAPS, SHARED_LEFT_BATCH_MAPS,
    SYMBOLIC_PLANNING_SIZE,
};
use melior::ir::{
    Module,
    operation::{OperationLike, WalkOrder, WalkResult},
};
use std::collections::{HashMap, HashSet};

/// A contraction the schedule will handle, found in the module.
#[derive(Debug, Clone)]
pub(super) struct PlannedProduct {
    pub(super) op: usize,
    /// The whole product; `tiles` are chosen for one chunk of it when it is split.
    pub(super) problem: Problem,
    /// The cut across threads, if any.
    pub(super) chunks: Option<Chunks>,
    pub(super) tiles: Tiles,
    /// The elementwise consumer fused into the tile loop.
    pub(super) epilogue: Option<usize>,
    /// Whether the accumulator init comes from a `linalg.fill` (fused into the tile loop).
    pub(super) fill_init: bool,
    /// Whether that fill has no other use (a fill CSE merged with another product's does not).
    pub(super) fill_alone: bool,
    /// Whether no operand producer could be tiled: then `transform.structured.fuse` (which
    /// pulls every tileable producer into the loop, the fill through the loop's destination)
    /// fuses only the fill, and never recomputes a transpose per tile.
    pub(super) only_fill_fusable: bool,
}

impl PlannedProduct {
    /// Rows of the product (of one thread's chunk when it is split).
    pub(super) fn rows(&self) -> i64 {
        self.chunks.as_ref().map_or(self.problem.m, |c| c.chunk.m)
    }

    /// Whether a blocked part of `rows` rows and `nr`-column register tiles packs its right
    /// operand: not a pairs or panels product (its operand is packed already), not a
    /// narrower column part, and only for enough rows that each panel is read by several
    /// register tiles. Fewer rows do not repay the copy (a one-row product reads the right
    /// operand once: packing it triples the traffic) nor its compile time: resnet18's 17
    /// packed parts add about 15% to its compile (best of six: 810 to 960 ms), for 5-20% less
    /// run time on two threads. Symbolic rows are not known to be few: their part of full
    /// register tiles packs (a BERT encoder's products at 2,048 rows ran 24% longer unpacked
    /// than the kernel compiled for that size); should the rows at run time be fewer than a
    /// register tile, the copy costs a read and a write of the right operand more.
    pub(super) fn packs(&self, rows: i64, nr: i64) -> bool {
        let p = &self.problem;
        if p.dynamic_columns {
            return self.column_panels() && nr == self.tiles.nr;
        }
        let min_rows = match self.tiles.kc {
            Some(_) => PACK_MIN_ROWS,
            None if p.dynamic_rows => self.tiles.mr,
            None => UNBLOCKED_PACK_MIN_TILES * self.tiles.mr,
        };
        !matches!(p.element, Element::Bf16Pairs | Element::F32Panels)
            && !p.dynamic_columns
            && !p.dynamic_reduction
            && nr == self.tiles.nr
            && rows >= min_rows
            && p.k.saturating_mul(p.n).saturating_mul(p.element.bytes()) > PACK_MIN_RIGHT_BYTES
    }

    /// Whether a product over symbolic columns ([`Problem::columns_outside_rows`]) is tiled
    /// with its columns outside its rows, each full column tile's right operand (`k x nr`)
    /// packed into one panel that every row tile of that column tile reads
    /// (`script::emit_column_panels`): for rows of at least [`COLUMN_PANEL_MIN_TILES`] register
    /// tiles. Read in place, the right operand's rows are a row of patches apart (a
    /// convolution's patch matrix over every column of an image): every row of a tile in
    /// another page, no prefetcher following.
    pub(super) fn column_panels(&self) -> bool {
        self.problem.columns_outside_rows() && self.rows() >= COLUMN_PANEL_MIN_TILES * self.tiles.mr
    }

    /// The rows of a product after its last full register tile (`tiles.m_split`), when they
    /// are fixed within its thread chunk: they stay in the register tiles' loop, which is
    /// peeled as a loop over symbolic rows is (the rest tiled a row at a time). A product
    /// without reduction blocks thus keeps its fill and epilogue fused into every tile: cut
    /// into two products, it kept a whole fill (a `memset`, read back as the accumulator) and
    /// an epilogue pass of its own (ViT-Tiny: 6% less time). A blocked product packs its
    /// right operand block before the peel, so that the rest reads the same packed panels:
    /// cut off, the rest read the block where it lies (ViT-Base's 197 rows as 192 + 5: the
    /// five rows took a fifth of its FFN product's samples). Not for symbolic columns, pairs
    /// products or rows cut across threads (a chunk's rows may then be symbolic).
    pub(super) fn peeled_rest(&self) -> Option<TileSplit> {
        peeled_rest(&self.problem, self.chunks.as_ref(), &self.tiles)
    }

    /// `sizes` over the loops `[batch,] m, n[, k]` as sizes over the contraction's own loops: a
    /// panels product's columns are two loops, the panels (a size counts whole panels of
    /// `tiles.nr` columns) and the columns of one (never tiled).
    pub(super) fn loop_sizes(&self, sizes: &[i64]) -> Vec<i64> {
        let mut sizes = sizes.to_vec();
        if self.problem.element == Element::F32Panels {
            sizes[1] /= self.tiles.nr;
            sizes.insert(2, 0);
        }
        sizes
    }

    /// The position `at` along the columns as one along the contraction's column loop (whole
    /// panels for a panels product).
    pub(super) fn column_position(&self, at: i64) -> i64 {
        if self.problem.element == Element::F32Panels {
            at / self.tiles.nr
        } else {
            at
        }
    }

    /// Whether the columns' cuts ([`Self::cuts_columns`], and `n_tail` within the rest) give
    /// each part a fill of its own: the product, with its fill, is tiled into column parts and the
    /// parts' loop peeled, so that each part starts its register tiles from zeros. Cut by
    /// `transform.structured.split`, the parts shared the whole product's fill (a `memset`,
    /// read back by every tile). For an f32 or f64 product without reduction blocks (or with
    /// one, the whole reduction) whose fill alone is fusable and used by nothing else (then
    /// the product waits in a function of its own, see `isolate`, or in a loop, which the cut
    /// canonicalizes), outside a cut of its main column part (see `script::emit_column_cut`).
    pub(super) fn cuts_columns_with_fills(&self) -> bool {
        self.cuts_columns()
            && self.tiles.kc.is_none_or(|kc| kc == self.problem.k)
            && self.fill_alone
            && self.fill_joins_tiles()
            && !self.chunks.as_ref().is_some_and(|c| c.main_part)
    }

    /// Whether its fill can go into its register tiles by `transform.structured.fuse`: a fill
    /// that is the only producer the fusion would pull in, of an f32 or f64 product over fixed
    /// columns.
    fn fill_joins_tiles(&self) -> bool {
        self.fill_init
            && self.only_fill_fusable
            && matches!(self.problem.element, Element::F32 | Element::F64)
            && !self.problem.dynamic_columns
    }

    /// The columns of its main part: a thread's chunk (or the whole product) up to its
    /// columns' split.
    pub(super) fn main_columns(&self) -> i64 {
        match (&self.chunks, self.tiles.n_split) {
            (Some(c), _) if c.main_part => c.chunk.n,
            (c, split) => split.map_or(c.as_ref().map_or(self.problem.n, |c| c.chunk.n), |s| s.at),
        }
    }

    /// Whether the schedule cuts its columns into parts: where no whole number of register
    /// tiles divides them (`tiles.n_split`), or after its last whole column block.
    pub(super) fn cuts_columns(&self) -> bool {
        self.tiles.n_split.is_some()
            || self
                .tiles
                .nc
                .is_some_and(|b| b.covers < self.main_columns())
    }

    /// Whether a blocked product's fill goes into its column blocks (one block for a part
    /// without them) and then into its register tiles, which then start from zeros: when its
    /// one reduction block is the whole reduction, its fill alone is fusable and the part is
    /// `whole` (no split shares the fill). Else the fill is a `memset` of the whole product,
    /// read back by every tile (the 64 x 27 x 12,352 patch products of SqueezeNet's stem: 1.6
    /// MB a thread, beyond L2).
    pub(super) fn fuses_fill_into_block(&self, whole: bool) -> bool {
        self.tiles.kc == Some(self.problem.k) && whole && self.fill_joins_tiles()
    }

    /// Whether its schedule pulls ops into loops: the product into its epilogue's loop, the
    /// fill into the thread chunk loop or into the loop of its column parts.
    pub(super) fn fuses_into_loops(&self) -> bool {
        self.epilogue.is_some()
            || (self.chunks.as_ref().is_some_and(|c| !c.main_part) && self.fill_init)
            || self.cuts_columns_with_fills()
    }
}

/// See [`PlannedProduct::peeled_rest`].
fn peeled_rest(p: &Problem, chunks: Option<&Chunks>, t: &Tiles) -> Option<TileSplit> {
    let m_dim = usize::from(p.batch.is_some());
    let rows_chunked = chunks.is_some_and(|c| c.sizes.get(m_dim).is_some_and(|&s| s != 0));
    t.m_split
        .filter(|_| !rows_chunked && !p.dynamic_columns && p.element != Element::Bf16Pairs)
}

/// Rows below which a product's part reads its right operand where it lies.
pub(super) const PACK_MIN_ROWS: i64 = 16;

/// Register tiles of rows from which a product over symbolic columns packs each column tile
/// into a panel ([`PlannedProduct::column_panels`]): with one, each panel would be read once.
pub(super) const COLUMN_PANEL_MIN_TILES: i64 = 2;

/// Bytes of the right operand up to which it is read where it lies: it stays in L1 and L2
/// whatever its layout.
pub(super) const PACK_MIN_RIGHT_BYTES: i64 = 64 << 10;

/// Producers that tiling cannot pull into a loop (they implement no tiling interface).
pub(super) const NOT_TILEABLE: &[&str] = &[
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
pub(super) struct OpInfo {
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
    /// Results' sizes (tensor results only; `None` for a symbolic one).
    result_shapes: Vec<Vec<Option<i64>>>,
    /// Inside a loop a lowering built (a grouped product's tile loops) rather than directly in
    /// its function: such a product is not cut into thread chunks, the loop around it is
    /// already one.
    in_loop: bool,
}

/// A product the schedule leaves to the scalar path although its sizes are symbolic (an
/// integer product, a transposed variant): only cut into one chunk per thread (see `script::emit_scalar_product`), which also keeps the fusion stage from
/// pulling elementwise producers into its loops (a softmax's `exp` recomputed per column).
pub(super) struct ScalarProduct {
    pub(super) op: usize,
    /// The dimension cut: the first of the batch, rows and columns that has a chunk per
    /// thread (symbolic, or at least as large as the thread count), else the first not of
    /// size 1.
    pub(super) cut: usize,
    /// The threads it is cut for, one chunk each; `None` to cut it into slices of one, in a
    /// loop (one thread, or too few to cut).
    pub(super) threads: Option<i64>,
    /// Loops of the contraction (batch, rows, columns, reduction).
    pub(super) loops: usize,
}

/// The products the schedule leaves to the scalar path although their sizes are symbolic.
pub(super) fn scalar_products(module: &Module, threads: i64) -> Vec<ScalarProduct> {
    let mut found = Vec::new();
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        let batched = match op_name(&op).as_str() {
            "linalg.batch_matmul" => true,
            "linalg.matmul" => false,
            _ => return WalkResult::Advance,
        };
        let in_function = op
            .parent_operation()
            .is_some_and(|parent| op_name(&parent) == "func.func");
        let Some(result) = op.operand(2).ok().and_then(tensor_dims) else {
            return WalkResult::Advance;
        };
        let dims: Vec<_> = op.operands().filter_map(tensor_dims).collect();
        let symbolic = dims.iter().any(|d| d.contains(&None));
        // MLIR's tiling crashes on an operand with no elements (nothing to cut anyway).
        let empty = dims.iter().any(|d| d.contains(&Some(0)));
        if in_function && symbolic && !empty && contraction_problem(&op, batched).is_none() {
            // The first parallel dimension with a chunk per thread, else one not of size 1.
            let chunked = (threads > 1)
                .then(|| (0..result.len()).find(|&d| result[d].is_none_or(|size| size >= threads)))
                .flatten();
            let sliced = || (0..result.len()).find(|&d| result[d] != Some(1));
            if let Some(cut) = chunked.or_else(sliced) {
                found.push(ScalarProduct {
                    op: op.to_raw().ptr as usize,
                    cut,
                    threads: chunked.map(|_| threads),
                    loops: result.len() + 1,
                });
            }
        }
        WalkResult::Advance
    });
    found
}

/// The problem of a `linalg.matmul` / `linalg.batch_matmul`, if the schedule handles it.
pub(super) fn contraction_problem(op: &melior::ir::OperationRef, batched: bool) -> Option<Problem> {
    // Transposed / broadcast variants carry other indexing maps: leave them alone. (Parsed
    // ops carry the default maps explicitly; built ones may have none.)
    let default_maps = if batched {
        "[affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]"
    } else {
        "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>]"
    };
    // A batched product may share its left operand across the batch (one weight, several
    // images): its tiles read the same rows in every batch entry.
    let maps = op.attribute("indexing_maps").ok().map(|m| m.to_string());
    let shared_left = batched && maps.as_deref() == Some(SHARED_LEFT_BATCH_MAPS);
    if op.operand_count() != 3
        || op.result_count() != 1
        || maps.is_some_and(|maps| maps != default_maps && !shared_left)
    {
        return None;
    }
    let (mut a, ta) = tensor_sizes(op.operand(0).ok()?)?;
    let (b, tb) = tensor_sizes(op.operand(1).ok()?)?;
    if shared_left {
        a.insert(0, *b.first()?);
    }
    let (c, tc) = tensor_sizes(op.operand(2).ok()?)?;
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
    // Any size may be symbolic (`None`), in every operand it appears in alike.
    let (k, n, m) = (a[rank - 1], b[rank - 1], a[rank - 2]);
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
    let planned = |d: Option<i64>| d.unwrap_or(SYMBOLIC_PLANNING_SIZE);
    let batch_size = batch.map(planned);
    if [planned(m), planned(n), planned(k)]
        .iter()
        .chain(batch_size.iter())
        .any(|&d| d <= 0)
    {
        return None;
    }
    Some(Problem {
        batch: batch_size,
        m: planned(m),
        n: planned(n),
        k: planned(k),
        element,
        operand,
        dynamic_batch: batch.is_some_and(|b| b.is_none()),
        dynamic_rows: m.is_none(),
        dynamic_columns: n.is_none(),
        dynamic_reduction: k.is_none(),
    })
}

/// The problem of a pairs contraction: [`PAIR_MAPS`] over bf16 operands of `m x k x 2` and
/// `k x n x 2` and an f32 `m x n` accumulator (`k` counts pairs), or [`BATCHED_PAIR_MAPS`]
/// over the same with a leading batch dimension.
pub(super) fn pairs_problem(op: &melior::ir::OperationRef) -> Option<Problem> {
    let maps = op.attribute("indexing_maps").ok()?.to_string();
    let batched = maps == BATCHED_PAIR_MAPS;
    if op.operand_count() != 3 || op.result_count() != 1 || !(batched || maps == PAIR_MAPS) {
        return None;
    }
    let (mut a, ta) = tensor_sizes(op.operand(0).ok()?)?;
    let (mut b, tb) = tensor_sizes(op.operand(1).ok()?)?;
    let (mut c, tc) = tensor_sizes(op.operand(2).ok()?)?;
    if (ta.as_str(), tb.as_str(), tc.as_str()) != ("bf16", "bf16", "f32") {
        return None;
    }
    let batch = if batched {
        let lead = (*a.first()?)?;
        if b.first() != Some(&Some(lead)) || c.first() != Some(&Some(lead)) || lead <= 0 {
            return None;
        }
        for shape in [&mut a, &mut b, &mut c] {
            shape.remove(0);
        }
        Some(lead)
    } else {
        None
    };
    // The rows may be symbolic (`None`, planned at `SYMBOLIC_PLANNING_SIZE`), the rest fixed.
    let (&[m, Some(k), Some(2)], &[Some(k2), Some(n), Some(2)], &[m2, Some(n2)]) =
        (a.as_slice(), b.as_slice(), c.as_slice())
    else {
        return None;
    };
    let rows = m.unwrap_or(SYMBOLIC_PLANNING_SIZE);
    (k == k2 && m == m2 && n == n2 && rows > 0 && n > 0 && k > 0).then_some(Problem {
        batch,
        m: rows,
        n,
        k,
        element: Element::Bf16Pairs,
        operand: "bf16",
        dynamic_batch: false,
        dynamic_rows: m.is_none(),
        dynamic_columns: false,
        dynamic_reduction: false,
    })
}

/// The problem of a panels contraction ([`PANEL_MAPS`]): f32 operands of `m x k` and `panels
/// x k x w` and an `m x panels x w` accumulator, all sizes fixed, when `w` is the width of
/// the register tiles the schedule gives `target`'s f32 products (two vectors); else `None`,
/// and the product keeps the scalar path.
pub(super) fn panels_problem(op: &melior::ir::OperationRef, target: &Target) -> Option<Problem> {
    let maps = op.attribute("indexing_maps").ok()?.to_string();
    if op.operand_count() != 3 || op.result_count() != 1 || maps != PANEL_MAPS {
        return None;
    }
    let (a, ta) = tensor_sizes(op.operand(0).ok()?)?;
    let (b, tb) = tensor_sizes(op.operand(1).ok()?)?;
    let (c, tc) = tensor_sizes(op.operand(2).ok()?)?;
    if (ta.as_str(), tb.as_str(), tc.as_str()) != ("f32", "f32", "f32") {
        return None;
    }
    let (&[Some(m), Some(k)], &[Some(panels), Some(k2), Some(w)], &[Some(m2), Some(p2), Some(w2)]) =
        (a.as_slice(), b.as_slice(), c.as_slice())
    else {
        return None;
    };
    let fits = k == k2 && m == m2 && panels == p2 && w == w2 && w == panel_width(target);
    (fits && m > 0 && k > 0 && panels > 0).then_some(Problem {
        batch: None,
        m,
        n: panels * w,
        k,
        element: Element::F32Panels,
        operand: "f32",
        dynamic_batch: false,
        dynamic_rows: false,
        dynamic_columns: false,
        dynamic_reduction: false,
    })
}

/// The columns of one panel of an f32 right operand on `target`: its f32 register tiles'.
pub fn panel_width(target: &Target) -> i64 {
    2 * (target.vector_bytes() / Element::F32.bytes()).max(1)
}

/// The panel width for an f32 product of `m x k` by a weight of `k x n` on `target` (with
/// its threads) when the weight is better handed to the kernel in panels
/// (`fxmlir.mm_panels`, [`PANEL_MAPS`]): when the schedule would copy the weight (each of
/// its reduction blocks, or its whole column tiles) into panels on every call, and `n` and
/// every thread's columns are whole panels. Else `None`: the product stays as it is.
pub fn weight_panels(m: i64, k: i64, n: i64, target: &Target) -> Option<i64> {
    let width = panel_width(target);
    if m <= 0 || k <= 0 || n <= 0 || n % width != 0 {
        return None;
    }
    let problem = Problem {
        batch: None,
        m,
        n,
        k,
        element: Element::F32,
        operand: "f32",
        dynamic_batch: false,
        dynamic_rows: false,
        dynamic_columns: false,
        dynamic_reduction: false,
    };
    let chunks = chunks(&problem, target.threads as i64, target);
    let tiles = choose_tiles(chunks.as_ref().map_or(&problem, |c| &c.chunk), target);
    let planned = PlannedProduct {
        op: 0,
        problem,
        chunks,
        tiles,
        epilogue: None,
        fill_init: true,
        fill_alone: true,
        only_fill_fusable: true,
    };
    let packs = tiles.nr == width && planned.packs(planned.rows(), width);
    let whole_chunks = planned
        .chunks
        .as_ref()
        .is_none_or(|c| c.chunk.n % width == 0);
    (packs && whole_chunks).then_some(width)
}

/// Records every operation of `module`; `target` decides which panels products it plans.
pub(super) fn analyse(module: &Module, target: &Target) -> (Vec<usize>, HashMap<usize, OpInfo>) {
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
            result_shapes: op.results().filter_map(|r| tensor_dims(r.into())).collect(),
            in_loop: op
                .parent_operation()
                .is_some_and(|parent| op_name(&parent) != "func.func"),
            ..OpInfo::default()
        };
        match name.as_str() {
            "linalg.matmul" => info.problem = contraction_problem(&op, false),
            "linalg.batch_matmul" => info.problem = contraction_problem(&op, true),
            "linalg.contract" => {
                info.problem = pairs_problem(&op).or_else(|| panels_problem(&op, target))
            }
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
pub(super) fn plan_products(module: &Module, target: &Target) -> Vec<PlannedProduct> {
    let threads = target.threads as i64;
    let (order, ops) = analyse(module, target);
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
        let threads = if info.in_loop { 1 } else { threads };
        let chunks = chunks(&problem, threads, target)
            .or_else(|| main_part_chunks(&problem, threads, target));
        // A cut of the main column part keeps the whole product's tiles (and their split).
        let tiled = chunks.as_ref().filter(|c| !c.main_part);
        let tiles = choose_tiles(tiled.map_or(&problem, |c| &c.chunk), target);
        let fill_init = info
            .operands
            .get(2)
            .and_then(|v| producer.get(v))
            .and_then(|p| ops.get(p))
            .is_some_and(|p| p.name == "linalg.fill");
        let fill_alone = fill_init
            && info
                .operands
                .get(2)
                .and_then(|v| uses.get(v))
                .is_some_and(|u| u.len() == 1);
        // A single elementwise consumer reading the product with the identity map, writing a
        // result of the same shape: tile it and pull the product into its loop.
        let peels = peeled_rest(&problem, chunks.as_ref(), &tiles).is_some();
        let epilogue = (|| {
            if pairs
                || problem.dynamic_columns
                || tiles.kc.is_some()
                || tiles.m_split.is_some() && !peels
                || tiles.n_split.is_some()
            {
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
        planned.push(PlannedProduct {
            op: key,
            problem,
            chunks,
            tiles,
            epilogue,
            fill_init,
            fill_alone,
            only_fill_fusable,
        });
    }
    planned
}
