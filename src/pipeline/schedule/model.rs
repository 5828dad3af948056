//! The tile model: tile sizes for one static contraction on a target (register tile, splits
//! of awkward dimensions, reduction and column blocks sized for L2) and its cut into thread
//! chunks. Pure arithmetic over shapes: no IR.

use crate::target::Target;
use crate::tuning::{
    MIN_PARALLEL_PRODUCT_WORK, MIN_PARALLEL_RIGHT_BYTES, PAIR_LANES, largest_divisor_at_most,
};

/// Element types the schedule handles; all three operands must agree, but for half-precision
/// operands accumulating in f32 (scheduled as `F32`) and `Bf16Pairs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    F32,
    F64,
    /// `fxmlir.mm_pairs`' contraction: bf16 operands in pairs along the reduction (each step
    /// of `k` is one pair), accumulated in f32 by AVX512-BF16's dot product.
    Bf16Pairs,
    /// `fxmlir.mm_panels`' contraction: f32 operands, the right one in panels of one register
    /// tile's columns (see [`crate::tuning::PANEL_MAPS`]), which the register tiles read where
    /// they lie: it is never packed.
    F32Panels,
}

impl Element {
    pub(super) fn parse(text: &str) -> Option<Self> {
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
            Element::F32Panels => "f32 panels",
        }
    }

    /// The columns a thread chunk's width must be a multiple of, given the `lanes` of a
    /// vector: a pairs product's tiles are whole `PAIR_LANES` columns, a panels product's
    /// whole panels (two vectors; 1,008 columns are not cut in two 504s, whose rest would be 8
    /// columns wide).
    fn column_granule(self, lanes: i64) -> i64 {
        match self {
            Element::Bf16Pairs => PAIR_LANES,
            Element::F32Panels => 2 * lanes,
            Element::F32 | Element::F64 => 1,
        }
    }

    /// Bytes of one step of `k` in an operand row, and of one accumulator (a pair of bf16
    /// accumulates into one f32).
    pub fn bytes(self) -> i64 {
        match self {
            Element::F32 | Element::Bf16Pairs | Element::F32Panels => 4,
            Element::F64 => 8,
        }
    }
}

/// One contraction: `[batch x] m x k` times `[batch x] k x n`. The batch and the rows may be
/// symbolic (read at run time): their sizes here are then
/// [`crate::tuning::SYMBOLIC_PLANNING_SIZE`], what the
/// tiles are planned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    pub batch: Option<i64>,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub element: Element,
    /// The element type of both operands (`f32`, `f64`, or `bf16`/`f16` widened to f32).
    pub operand: &'static str,
    /// Whether the batch is symbolic.
    pub dynamic_batch: bool,
    /// Whether the rows are symbolic: their register tile loop is peeled into full tiles and
    /// a rest of single rows.
    pub dynamic_rows: bool,
    /// Whether the columns are symbolic (`q @ kᵀ` over a growing cache, a weight whose sizes
    /// Dynamo made symbolic): their register tile loop is peeled into full tiles and a rest of
    /// single columns; the right operand is packed only when the columns go outside the rows
    /// ([`Problem::columns_outside_rows`]).
    pub dynamic_columns: bool,
    /// Whether the reduction is symbolic (`p @ v` over a growing cache): it advances one step
    /// at a time, unblocked and unpacked.
    pub dynamic_reduction: bool,
}

impl Problem {
    /// Whether the columns are symbolic under fixed rows, without a batch or a symbolic
    /// reduction, in f32 or f64: a convolution's patches over images whose sizes Dynamo made
    /// symbolic. Such a product is register-tiled with its columns outside its rows, each full
    /// column tile's right operand packed into one panel (see `PlannedProduct::column_panels`).
    pub fn columns_outside_rows(&self) -> bool {
        self.dynamic_columns
            && !self.dynamic_rows
            && !self.dynamic_reduction
            && self.batch.is_none()
            && matches!(self.element, Element::F32 | Element::F64)
    }

    /// The shape as the schedule's locations show it (`?` for a symbolic size).
    pub fn describe(&self) -> String {
        let size = |d: i64, dynamic: bool| {
            if dynamic {
                "?".to_string()
            } else {
                d.to_string()
            }
        };
        let rows = size(self.m, self.dynamic_rows);
        let k = size(self.k, self.dynamic_reduction);
        let n = size(self.n, self.dynamic_columns);
        match self.batch {
            Some(b) => format!("{}x{rows}x{k}x{n}", size(b, self.dynamic_batch)),
            None => format!("{rows}x{k}x{n}"),
        }
    }
}

/// A dimension cut in two: tiles of the main part `[0, at)` use the register tile; the rest
/// (`at` to the end, shorter than one register tile) is a single tile of `rest` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileSplit {
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
    /// Rows after the last full register tile, where `mr` does not divide them and no divisor
    /// makes a good tile: peeled from the tile loop or cut off (see
    /// `PlannedProduct::peeled_rest`).
    pub m_split: Option<TileSplit>,
    /// Columns cut where no whole number of vectors divides them.
    pub n_split: Option<TileSplit>,
    /// The rest of `n_split` cut again after one vector, when it is more than one vector but
    /// not two: a register tile of one whole vector and a part of one per row ran 5-7x slower
    /// than whole vectors (512 x 4608 x 17: 1.5 ms, x 16: 0.22 ms; x 49, whose rest is 17
    /// columns: 2.1 ms, x 48: 0.67 ms).
    pub n_tail: Option<TileSplit>,
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

/// Rows of a thread's chunk from which a product over symbolic columns tiled outside its rows
/// is cut across the threads by rows (see [`chunks`]).
pub(super) const PANEL_CHUNK_ROWS: i64 = 64;

/// Register tiles (of rows) below which an unblocked product reads its right operand where it
/// lies: its panel is then copied once for the whole product, so only a panel that many tiles
/// read repays it. With 16 rows, small_convnet's first convolution (`16 x 27 x 8192`, four
/// tiles per panel) took 17% longer packed.
pub(super) const UNBLOCKED_PACK_MIN_TILES: i64 = 16;

/// Bytes of a left-operand block (`m` x `kc`) small enough to keep while columns vary.
pub(super) const LEFT_BLOCK_L1: i64 = 64 << 10;

/// Bounds of the reduction block: below, the accumulator is reloaded too often; above, the
/// register tile's rows of the left operand no longer fit in L1. Blocks aim at least at
/// `KC_BYTES` of each row of the left operand (256 f32 elements); narrower products go deeper.
pub(super) const KC_MIN: i64 = 16;

pub(super) const KC_MAX: i64 = 512;

pub(super) const KC_BYTES: i64 = 1024;

/// Tile sizes for `p` on `target`.
pub fn choose_tiles(p: &Problem, target: &Target) -> Tiles {
    let lanes = (target.vector_bytes() / p.element.bytes()).max(1);
    // Two vectors per row; a width that is no whole number of pairs is cut after the last
    // pair (the rest is one narrower tile); a narrower width is a single tile.
    let (nr, n_split) = if p.n % (2 * lanes) == 0 || p.dynamic_columns {
        (2 * lanes, None)
    } else if p.n > 2 * lanes {
        let at = p.n / (2 * lanes) * (2 * lanes);
        (2 * lanes, Some(TileSplit { at, rest: p.n - at }))
    } else if p.n > lanes && p.n % lanes != 0 {
        // One vector, then less than one.
        (
            lanes,
            Some(TileSplit {
                at: lanes,
                rest: p.n - lanes,
            }),
        )
    } else {
        (p.n, None)
    };
    let n_tail = n_split
        .filter(|s| s.rest > lanes && nr == 2 * lanes)
        .map(|s| TileSplit {
            at: lanes,
            rest: s.rest - lanes,
        });
    // Accumulators use about half the registers: eight rows of two vectors with 32 registers.
    let vectors_per_row = ((nr + lanes - 1) / lanes).max(1);
    let mr_limit = (target.registers() / 2 / vectors_per_row).clamp(1, 8);
    // A divisor of the rows if it keeps at least half the accumulators busy, else full tiles
    // and one shorter tile for the rest (a prime row count would otherwise get 1-row tiles).
    let divisor = largest_divisor_at_most(p.m, mr_limit);
    let (mr, m_split) = if p.dynamic_rows {
        (mr_limit, None)
    } else if p.m <= mr_limit || 2 * divisor >= mr_limit {
        (divisor, None)
    } else {
        let at = p.m / mr_limit * mr_limit;
        (mr_limit, Some(TileSplit { at, rest: p.m - at }))
    };
    let bytes = p.element.bytes();
    // Saturating: absurd shapes must not overflow (they simply count as large).
    let right_bytes = p.k.saturating_mul(p.n).saturating_mul(bytes);
    // A right operand above half of L2 is blocked; a block (`kc` x `nc`, packed into panels
    // by the schedule) takes half of L2. On a Zen 3 core (512 KiB L2), packed 1024³ ran at
    // 92-95% of torch.mm (one and two threads) with an eighth of L2 and 128-deep blocks, at
    // 98% with half of L2 and 256-deep ones.
    let target_l2 = target.l2_bytes;
    let right_operand_l2 = target_l2 / 2;
    let right_block_l2 = target_l2 / 2;
    let kc = if right_bytes > right_operand_l2 && !p.dynamic_reduction && !p.dynamic_columns {
        // The deepest block of the right operand that fits the L2 budget (but at least
        // `KC_BYTES` deep), dividing k, a multiple of 4 if possible (for `ku`); the whole
        // reduction when it is no deeper, its columns then blocked. A right operand that is
        // no deeper than a block and fits L2 whole is not blocked at all: packed once, its
        // panels stay in L2 while the rows sweep them, and the fill and the epilogue join the
        // register tiles (halved, as the block was before, its sum was read and written from
        // memory twice). 256 x 64 x 3136 per image (ResNet-50's 1 x 1 convolutions at 56 x
        // 56, batch 8, a batch norm and ReLU after): two blocks 8.5 ms, one block 7.7,
        // unblocked 6.3. Only for rows that an unblocked product packs for
        // (`UNBLOCKED_PACK_MIN_TILES` register tiles): fewer keep the block, which packs from
        // `PACK_MIN_ROWS` on (a linear layer's weight handed over in panels).
        let target = (right_block_l2 / p.n.saturating_mul(bytes)).clamp(KC_BYTES / bytes, KC_MAX);
        let divisors = || (KC_MIN..=target.min(p.k)).rev().filter(|d| p.k % d == 0);
        divisors()
            .find(|d| d % 4 == 0)
            .or_else(|| divisors().next())
            .filter(|&d| d != p.k || right_bytes > target_l2 || p.m < UNBLOCKED_PACK_MIN_TILES * mr)
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
    // into one dot product per row and vector (see [`emit_pair_lanes`]). Two steps per
    // iteration are never taken: their contraction reaches LLVM with its right operand
    // rebuilt element by element, and ran about 1.5x slower than one step (2048 x 256 x 1024
    // forced to two steps: 203 GFLOP/s; one step: 305; four: 311; 2048 x 256 x 256: 139,
    // 236, 235).
    let ku = if p.element != Element::Bf16Pairs && !p.dynamic_reduction && reduction % 4 == 0 {
        4
    } else {
        1
    };
    let columns_outer = !p.dynamic_rows
        && kc.is_some_and(|c| p.m.saturating_mul(c).saturating_mul(bytes) <= LEFT_BLOCK_L1);
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
/// loops (`[batch,] m, n`), and the problem each chunk solves. A symbolic dimension is cut
/// into `threads` chunks whose size the kernel computes: `sizes` are then thread counts.
/// `main_part`: the cut is of the main part of the columns' split (`Tiles::n_split` of the
/// whole product), and the rest runs on one thread after it (see [`main_part_chunks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunks {
    pub sizes: Vec<i64>,
    pub chunk: Problem,
    pub by_threads: bool,
    pub main_part: bool,
}

/// How to cut `p` across `threads` (a product of enough multiply-adds, or one that streams a
/// large right operand): the batch when it divides evenly; else the columns when
/// the right operand is the larger one (each thread then streams only its share of it), else
/// the rows; a dimension is only cut into whole vectors (columns; any equal widths of a vector
/// or more for a streaming product) or at least eight rows.
/// `None` for one thread, small products and shapes no such cut fits.
pub fn chunks(p: &Problem, threads: i64, target: &Target) -> Option<Chunks> {
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k);
    let right_bytes = p.k.saturating_mul(p.n).saturating_mul(p.element.bytes());
    // Symbolic columns or reduction grow with what they count (a cache, a sequence): always
    // worth a cut, as their size says nothing of their work.
    let streams =
        right_bytes >= MIN_PARALLEL_RIGHT_BYTES || p.dynamic_columns || p.dynamic_reduction;
    if threads < 2
        || (work.saturating_mul(p.batch.unwrap_or(1)) < MIN_PARALLEL_PRODUCT_WORK && !streams)
    {
        return None;
    }
    let lead = usize::from(p.batch.is_some());
    let cut = |dim: usize, size: i64, chunk: Problem, by_threads: bool| {
        let mut sizes = vec![0; lead + 2];
        sizes[dim] = size;
        Some(Chunks {
            sizes,
            chunk,
            by_threads,
            main_part: false,
        })
    };
    // A symbolic batch, or symbolic rows no column cut fits, go in `threads` chunks.
    let by_threads = |dim: usize, chunk: Problem| cut(dim, threads, chunk, true);
    if let Some(b) = p.batch
        && p.dynamic_batch
    {
        let batch = Some((b / threads).max(1));
        return by_threads(0, Problem { batch, ..*p });
    }
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
            false,
        );
    }
    let lanes = (target.vector_bytes() / p.element.bytes()).max(1);
    let columns = |fits: bool| {
        fits.then(|| {
            let n = p.n / threads;
            cut(lead + 1, n, Problem { n, ..*p }, false)
        })
    };
    let granule = p.element.column_granule(lanes);
    let by_columns = columns(
        !p.dynamic_columns && p.n % threads == 0 && (p.n / threads) % lanes.max(granule) == 0,
    );
    if p.dynamic_rows {
        let m = (p.m / threads).max(1);
        return by_columns.unwrap_or_else(|| by_threads(lead, Problem { m, ..*p }));
    }
    // Symbolic columns under fixed rows: the rows if they cut, else `threads` column chunks.
    let by_column_threads = || {
        let n = (p.n / threads).max(1);
        by_threads(lead + 1, Problem { n, ..*p })
    };
    let by_rows = (p.m % threads == 0 && p.m / threads >= 8).then(|| {
        let m = p.m / threads;
        cut(lead, m, Problem { m, ..*p }, false)
    });
    // A product that streams its right operand with too few rows to cut (a matrix-vector
    // product, bound by memory) takes equal column chunks of any width of a vector or more
    // (688 columns: 344 each, the tiles ending in narrower ones): each thread streams half.
    // A pairs or panels product's chunks are whole tiles (see `Element::column_granule`).
    let streaming = columns(
        !p.dynamic_columns && streams && p.n % (threads * granule) == 0 && p.n / threads >= lanes,
    );
    if p.dynamic_columns {
        // Columns tiled outside the rows are cut by rows when each thread keeps at least
        // `PANEL_CHUNK_ROWS` of them: its columns then end in one short tile, not one per
        // thread (a tile's last columns are computed one at a time). Fewer rows are cut by
        // columns: each thread packs only its own columns' panels, each read by every row.
        // Under `dynamic=True`, two threads, one image of 7 x 7 through 512 x 4608 weights:
        // 10.5 ms cut by columns, 4.7 by rows; 8 images of 40 x 40 through 64 x 576 weights:
        // 7.3 by columns, 8.1 by rows.
        if p.columns_outside_rows() && p.m / threads < PANEL_CHUNK_ROWS {
            return by_column_threads();
        }
        return by_rows.flatten().or_else(by_column_threads);
    }
    if p.n >= p.m {
        by_columns.or(by_rows).or(streaming).flatten()
    } else {
        by_rows.or(by_columns).or(streaming).flatten()
    }
}

/// For a product no cut of [`chunks`] fits, whose columns split into a main part of whole
/// register tiles and a narrow rest (`q @ kᵀ` over ViT's 197 keys, 3 heads: 192 + 5): the main
/// part cut into column chunks, the rest left to one thread. Uncut, such a product ran on one
/// thread while the other waited (a third of SDPA's samples over 3 heads x 197 x 64). Only
/// for unblocked products (whose columns are not blocked for L2), and chunks of whole register
/// tiles (the tiles are the whole product's).
pub fn main_part_chunks(p: &Problem, threads: i64, target: &Target) -> Option<Chunks> {
    let whole = choose_tiles(p, target);
    let split = whole.n_split.filter(|_| whole.kc.is_none())?;
    let main = Problem { n: split.at, ..*p };
    let columns = usize::from(p.batch.is_some()) + 1;
    chunks(&main, threads, target)
        .filter(|c| {
            !c.by_threads
                && c.chunk.n % whole.nr == 0
                && c.sizes
                    .iter()
                    .enumerate()
                    .all(|(d, &s)| (s != 0) == (d == columns))
        })
        .map(|c| Chunks {
            main_part: true,
            ..c
        })
}
