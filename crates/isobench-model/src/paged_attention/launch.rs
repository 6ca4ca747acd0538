//! The shape of a CUDA paged-attention launch, from layouts alone: the
//! kernel that fits the heads (query heads per thread block), the blocks
//! per row, how a decode step's contexts are split (flash decoding), and
//! whether a step with prompt tokens runs on tensor cores (tiles of query
//! rows, kernels/prefill_attention.cu).
//! Nothing here depends on a value on the device, so every replay of a
//! CUDA graph makes the same choice; `cuda` launches what it decides.
//! Compiled for the `cuda` feature and for its tests, which run on any
//! machine.

use candle_core::{Layout, Result, bail};

/// Tokens per shared-memory chunk and the largest decode partition; must
/// match `PARTITION` in kernels/paged_attention.cu.
pub(super) const PARTITION: usize = 512;
/// Thread blocks (sequences x KV-head blocks) below which decode
/// partitions shrink to 256, then 128 tokens, then to what the kernel
/// reads in one pass (64 at most): an H200 has 132 SMs, each running
/// about four of these blocks. One sequence of a Llama shape (8 KV heads)
/// gets one-pass partitions (32 tokens at head_dim 128 in bf16, 64 at 64),
/// their V rows fetched with their K rows: measured on the H200, 8B batch
/// 1 step 4.87 ms with 64-token partitions against 4.76 with 32, 1B 1.056
/// with 64 against 1.067 with 32.
const FULL_GRID: usize = 512;
/// Thread blocks a split decode launch aims for: its grid has at most
/// this many (but at least one per row and head block), and each block
/// loops over every `splits`-th partition of its row up to the row's
/// context.
const SPLIT_GRID: usize = 1024;
/// Threads per block of every kernel of kernels/paged_attention.cu.
pub(super) const THREADS: u32 = 128;
/// Head dims with a compiled attention kernel.
const HEAD_DIMS: [usize; 5] = [16, 32, 64, 128, 256];
/// Query vectors (a row's head) per thread block of the tensor-core
/// kernel; must match `VECTORS` in kernels/prefill_attention.cu.
const PREFILL_VECTORS: usize = 64;
/// Head dims with a tensor-core kernel (for 16-bit caches only).
const PREFILL_HEAD_DIMS: [usize; 2] = [64, 128];

/// The sizes a launch depends on, all from layouts.
pub(super) struct Shapes {
    pub rows: usize,
    pub seqs: usize,
    pub table_width: usize,
    pub block_size: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

impl Shapes {
    pub(super) fn new(
        num_heads: usize,
        q_layout: &Layout,
        keys_layout: &Layout,
        values_layout: &Layout,
        (tables, lens, starts): (&Layout, &Layout, &Layout),
    ) -> Result<Self> {
        let [_, block_size, num_kv_heads, head_dim] = *keys_layout.dims() else {
            bail!(
                "paged attention: cache must be 4-dimensional, not {:?}",
                keys_layout.dims()
            )
        };
        if values_layout.dims() != keys_layout.dims() {
            bail!(
                "paged attention: key cache {:?} and value cache {:?} differ",
                keys_layout.dims(),
                values_layout.dims()
            );
        }
        if num_kv_heads == 0 || num_heads == 0 || !num_heads.is_multiple_of(num_kv_heads) {
            bail!("paged attention: {num_heads} heads do not group over {num_kv_heads} KV heads");
        }
        if !HEAD_DIMS.contains(&head_dim) {
            bail!(
                "paged attention on CUDA: head_dim {head_dim} has no kernel (supported: {HEAD_DIMS:?})"
            );
        }
        let q_elems = q_layout.shape().elem_count();
        let rows = q_elems / (num_heads * head_dim);
        let [seqs, table_width] = *tables.dims() else {
            bail!(
                "paged attention: block_tables must be [sequences, width], not {:?}",
                tables.dims()
            )
        };
        if rows * num_heads * head_dim != q_elems
            || lens.dims() != [seqs]
            || starts.dims() != [seqs + 1]
            || seqs == 0
            || rows < seqs
        {
            bail!(
                "paged attention: queries {:?}, block_tables {:?}, context_lens {:?} and query_starts {:?} do not describe one step of {num_heads} heads of {head_dim}",
                q_layout.dims(),
                tables.dims(),
                lens.dims(),
                starts.dims()
            );
        }
        Ok(Self {
            rows,
            seqs,
            table_width,
            block_size,
            num_heads,
            num_kv_heads,
            head_dim,
        })
    }

    /// Query heads per block: the group size rounded up to a compiled one.
    pub(super) fn heads_per_block(&self) -> usize {
        match self.num_heads / self.num_kv_heads {
            1 => 1,
            2 => 2,
            3 | 4 => 4,
            _ => 8,
        }
    }

    /// The x dimension of the tensor-core kernel's grid when this step
    /// runs on it: a step with prompt tokens (more query rows than
    /// sequences) over a 16-bit cache with a compiled head dim. Tiles of
    /// `PREFILL_VECTORS / heads_per_block()` rows of one sequence; the
    /// grid bounds their count by shapes alone (each sequence's last tile
    /// may be partial), and blocks without a tile return.
    pub(super) fn prefill_tiles(&self, elem_size: usize) -> Option<usize> {
        if self.rows == self.seqs || elem_size != 2 || !PREFILL_HEAD_DIMS.contains(&self.head_dim) {
            return None;
        }
        let tile_rows = PREFILL_VECTORS / self.heads_per_block();
        Some(self.rows.div_ceil(tile_rows) + self.seqs)
    }

    /// Thread blocks per row and split: one per KV head and chunk of its
    /// query heads.
    pub(super) fn head_blocks(&self) -> usize {
        self.num_kv_heads * (self.num_heads / self.num_kv_heads).div_ceil(self.heads_per_block())
    }

    /// Tokens the attention kernel reads in one pass of its threads: each
    /// K/V row takes up to 32 lanes of 16-byte copies, and each thread
    /// copies `UNROLL` rows a pass (kernels/paged_attention.cu).
    fn one_pass(&self, elem_size: usize) -> usize {
        let lanes_per_token = (self.head_dim * elem_size / 16).clamp(1, 32);
        let unroll = if self.heads_per_block() == 8 { 2 } else { 4 };
        THREADS as usize / lanes_per_token * unroll
    }

    /// Thread blocks per row and head block (1: no split) and the
    /// partition size in tokens: a split only for a decode step. Both
    /// follow from shapes alone, so every replay of a graph makes the same
    /// choice.
    pub(super) fn split(&self, elem_size: usize) -> (usize, usize) {
        if self.rows != self.seqs {
            return (1, PARTITION);
        }
        let blocks = self.seqs * self.head_blocks();
        let size = if blocks >= FULL_GRID {
            PARTITION
        } else if blocks >= FULL_GRID / 4 {
            PARTITION / 2
        } else if blocks >= FULL_GRID / 16 {
            PARTITION / 4
        } else {
            self.one_pass(elem_size).min(PARTITION / 8)
        };
        let partitions = (self.table_width * self.block_size).div_ceil(size);
        let splits = partitions.min(SPLIT_GRID.div_ceil(blocks)).max(1);
        (splits, size)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Layout, Result};

    use super::{PARTITION, Shapes};

    const BF16: usize = 2;
    const F32: usize = 4;

    /// The shapes of a step of `rows` query rows over `seqs` sequences,
    /// `heads` query heads over caches of `kv_heads` heads of `head_dim`,
    /// and block tables `width` blocks of 16 tokens wide.
    fn shapes(
        (heads, kv_heads, head_dim): (usize, usize, usize),
        rows: usize,
        seqs: usize,
        width: usize,
    ) -> Result<Shapes> {
        let q = Layout::contiguous((1, rows, heads, head_dim));
        let cache = Layout::contiguous((64, 16, kv_heads, head_dim));
        let tables = Layout::contiguous((seqs, width));
        let lens = Layout::contiguous(seqs);
        let starts = Layout::contiguous(seqs + 1);
        Shapes::new(heads, &q, &cache, &cache, (&tables, &lens, &starts))
    }

    /// Llama-3-8B's heads, and its table width (131,072 tokens).
    const LLAMA_8B: (usize, usize, usize) = (32, 8, 128);
    const LLAMA_1B: (usize, usize, usize) = (32, 8, 64);
    const WIDE: usize = 8192;

    #[test]
    fn one_sequence_is_split_into_partitions_of_one_pass() {
        let one = shapes(LLAMA_8B, 1, 1, WIDE).unwrap();
        assert_eq!((one.heads_per_block(), one.head_blocks()), (4, 8));
        // 128 threads, 16 lanes a bf16 row of 128, 4 rows in flight each.
        assert_eq!(one.one_pass(BF16), 32);
        // 1,024 blocks: 8 head blocks x 128 splits of 32-token partitions.
        assert_eq!(one.split(BF16), (128, 32));
        // f32 rows take 32 lanes: 16 tokens a pass.
        assert_eq!(one.split(F32), (128, 16));
        // head_dim 64 in bf16: 64 tokens a pass, the most a partition gets.
        assert_eq!(shapes(LLAMA_1B, 1, 1, WIDE).unwrap().split(BF16), (128, 64));
    }

    #[test]
    fn partitions_grow_with_the_batch_until_the_grid_is_full_unsplit() {
        let split = |batch| shapes(LLAMA_8B, batch, batch, WIDE).unwrap().split(BF16);
        assert_eq!(split(2), (64, 32));
        assert_eq!(split(4), (32, 128));
        assert_eq!(split(16), (8, 256));
        assert_eq!(split(64), (2, PARTITION));
        // 1,024 blocks without a split: one launch, no partials to combine.
        assert_eq!(split(128).0, 1);
    }

    #[test]
    fn prefill_steps_and_one_partition_tables_are_not_split() {
        // Seven new tokens of one sequence: a prefill chunk.
        assert_eq!(shapes(LLAMA_8B, 7, 1, WIDE).unwrap().split(BF16).0, 1);
        // A table of 32 tokens is one partition.
        assert_eq!(shapes(LLAMA_8B, 1, 1, 2).unwrap().split(BF16).0, 1);
    }

    #[test]
    fn steps_with_prompt_tokens_in_16_bits_run_in_tiles_of_rows() {
        // A prefill chunk of 100 tokens beside 3 decodes: 4 sequences,
        // 103 rows; 4 heads a block, so tiles of 16 rows.
        let mixed = shapes(LLAMA_8B, 103, 4, WIDE).unwrap();
        assert_eq!(mixed.prefill_tiles(BF16), Some(103usize.div_ceil(16) + 4));
        // The 1B shape's head dim too: 4 tiles of 16 rows, plus the bound's
        // one per sequence. A group of 8 heads takes 8 rows a tile.
        assert_eq!(
            shapes(LLAMA_1B, 64, 1, WIDE).unwrap().prefill_tiles(BF16),
            Some(5)
        );
        assert_eq!(
            shapes((64, 8, 128), 64, 1, WIDE)
                .unwrap()
                .prefill_tiles(BF16),
            Some(9)
        );
        // Decode steps, f32 caches and other head dims keep the CUDA-core kernel.
        assert_eq!(
            shapes(LLAMA_8B, 4, 4, WIDE).unwrap().prefill_tiles(BF16),
            None
        );
        assert_eq!(mixed.prefill_tiles(F32), None);
        assert_eq!(
            shapes((8, 2, 256), 103, 4, WIDE)
                .unwrap()
                .prefill_tiles(BF16),
            None
        );
    }

    #[test]
    fn head_groups_pick_a_compiled_kernel() {
        let heads = |layout| shapes(layout, 1, 1, WIDE).unwrap();
        // 3 and 7 query heads per KV head run in the 4- and 8-head kernels.
        assert_eq!(heads((24, 8, 128)).heads_per_block(), 4);
        assert_eq!(heads((56, 8, 128)).heads_per_block(), 8);
        // 16 per KV head: two blocks of 8 each.
        assert_eq!(heads((32, 2, 128)).head_blocks(), 4);
        // The 8-head kernel keeps 2 rows in flight, not 4.
        assert_eq!(heads((64, 8, 128)).one_pass(BF16), 16);
    }

    #[test]
    fn shapes_without_a_kernel_are_refused() {
        let err = |layout| shapes(layout, 1, 1, WIDE).err().unwrap().to_string();
        assert!(err((32, 8, 96)).contains("head_dim 96 has no kernel"));
        assert!(err((30, 8, 128)).contains("30 heads do not group over 8 KV heads"));
    }
}
