//! Decisions the lowering and the pipeline share: the layouts of bf16 pair products and of f32
//! products by a weight in panels (built by the lowering, recognised by the schedule), the
//! vector width pairs come in, and the work
//! below which an op stays on one thread. A leaf, so that neither layer reaches into the
//! other for them.

/// The indexing maps of `fxmlir.mm_pairs`' `linalg.contract` (loops `m, n, k, pair`), as the
/// lowering builds them and as the schedule recognises them.
pub const PAIR_MAPS: &str = "[affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d2, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1)>]";

/// The same over a batch (loops `batch, m, n, k, pair`): bf16 batched products of two
/// computed operands, such as attention's (see `lower::products::computed_pairs`).
pub const BATCHED_PAIR_MAPS: &str = "[affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]";

/// The indexing maps of `fxmlir.mm_panels`' `linalg.contract` (loops `m, panel, column, k`):
/// the left operand `m x k`, the right one in panels of whole register tiles of columns
/// (`panels x k x columns`, `panels[j / w, k, j % w] = right[k, j]`), the result `m x panels x
/// columns` (`m x n` in memory).
pub const PANEL_MAPS: &str = "[affine_map<(d0, d1, d2, d3) -> (d0, d3)>, affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]";

/// The indexing maps of a `linalg.batch_matmul` whose left operand is shared by every batch
/// entry (loops `batch, m, n, k`: `m x k`, `batch x k x n`, `batch x m x n`): a convolution of
/// several images as one product per image by the same weight (see
/// `lower::conv::per_image_product`), which the schedule tiles as any batched product.
pub const SHARED_LEFT_BATCH_MAPS: &str = "[affine_map<(d0, d1, d2, d3) -> (d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]";

/// Accumulator lanes of one AVX512-BF16 dot product (`vdpbf16ps` on a 512-bit register):
/// the columns of a pairs product's register tile come in groups of this many, and its right
/// operand gets zero columns up to a multiple of it, which its result drops again. A
/// convolution's patch matrix gets them in f32 too: an f32 product whose columns are whole
/// AVX-512 vectors has no narrow last tile (ResNet's 7 x 7 outputs, 49 columns: 512 x 4608 x 49
/// took 2.1 ms, padded to 64 columns 0.7 ms).
pub const PAIR_LANES: i64 = 16;

/// Loop iterations (the product of all loop ranges) below which an op stays on one thread:
/// starting a parallel region costs a few microseconds, which small ops do not repay. Timed
/// alone, interleaved, two threads against one, on 512-wide rows: `x * 2 + 1` took 3% longer
/// split at 32768 elements and 10% less at 65536; a layer norm 7-130% longer at 32768 and about
/// the same at 65536; a column sum 15-80% longer at 32768.
pub const MIN_PARALLEL_WORK: i64 = 1 << 16;

/// The same for an op whose body calls a `math` function (`exp`, `erf`, `tanh`, ...: a libm or
/// libmvec call), which pays for the region sooner: `exp` took 16-24% less time split at 32768
/// elements, GELU 22-36% less. At 16384 the split still won for GELU (6-28%) but moved from 8%
/// faster to 24% slower for `exp` between runs, so it is not taken.
pub const MIN_PARALLEL_MATH_WORK: i64 = 1 << 15;

/// Multiply-adds below which a product stays on one thread. Timed alone on two threads
/// against one: products of 2^18 multiply-adds (attention's `8 x 32 x 32 x 32`) took 20% longer
/// split, of 2^19 (`64 x 128 x 64`) 3-6% longer, of 2^20 (`64 x 128 x 128`) 15-18% less time.
pub const MIN_PARALLEL_PRODUCT_WORK: i64 = 1 << 20;

/// Bytes of a product's right operand from which it is split across threads however few its
/// multiply-adds: a product of few rows (a decode step's matrix-vector products) is bound by
/// streaming its right operand, and two threads stream it at about twice the rate. A Llama
/// (d = 256, 4 layers) decoding on two threads of an AVX-512 host: 1.58 ms per token with
/// its 256 KiB and 688 KiB weights split, 1.73 without.
pub const MIN_PARALLEL_RIGHT_BYTES: i64 = 128 << 10;

/// The size a symbolic dimension (a batch, a sequence length) is taken to have when a stage
/// plans for it (whether and where to split loops across threads, whether a product's right
/// operand is packed): the kernel reads the real size at run time, and a split of a short
/// loop costs a parallel region of a few microseconds.
pub const SYMBOLIC_PLANNING_SIZE: i64 = 64;

/// Bytes of rows a row group (a softmax's or a normalisation's passes, `pipeline::rows`) reads
/// per block: the block stays in L1 (32-48 KiB) between the passes that read it.
pub const ROW_BLOCK_BYTES: i64 = 16 << 10;

/// The largest divisor of `n` that is at most `limit` (at least 1).
pub fn largest_divisor_at_most(n: i64, limit: i64) -> i64 {
    (1..=limit.min(n).max(1))
        .rev()
        .find(|d| n % d == 0)
        .unwrap_or(1)
}
