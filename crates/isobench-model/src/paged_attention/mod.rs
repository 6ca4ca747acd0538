//! Paged attention: two candle custom ops over the KV cache, with a CPU
//! kernel ([`cpu`]) and, in a `cuda` build, CUDA kernels (`cuda`).
//!
//! - [`write_kv`] copies a step's new keys (or values) into their cache
//!   slots, in place. A slot equal to [`PADDING_SLOT`] is skipped: the
//!   padded rows of a CUDA-graph bucket write nowhere.
//! - [`paged_attention`] computes, for every new token and query head,
//!   softmax(q·K / sqrt(d))·V over the token's visible context, reading K
//!   and V through the sequence's block table. A sequence's new tokens sit
//!   at the end of its context, so new token `j` of `n` in a context of `L`
//!   sees context positions `0 ..= L - n + j` (causal within a prefill
//!   chunk, everything before it otherwise). Query heads share KV heads in
//!   groups (GQA): head `h` reads KV head `h / (num_heads / num_kv_heads)`.
//!
//! Both kernels accumulate in f32 for f32, f16 and bf16 caches. The step's
//! metadata (block tables, context lengths, query starts) is read from
//! tensors on the cache's device, never from host values, and every shape
//! the kernels depend on follows from the batch size: on CUDA a decode step
//! can be captured in a graph.

use candle_core::{CpuStorage, CustomOp3, InplaceOp3, Layout, Result, Shape, Tensor};

use crate::step::StepTensors;

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(any(feature = "cuda", test))]
mod launch;

/// A `slot_mapping` entry that [`write_kv`] skips: the rows that pad a
/// decode batch up to its CUDA-graph bucket. Such rows get a context of 1,
/// one new token and a block table of zeros, so attention for them reads
/// block 0 and produces finite values that are discarded.
pub(crate) const PADDING_SLOT: u32 = u32::MAX;

/// Writes `new` ([T, num_kv_heads, head_dim], any leading 1s allowed) into
/// `cache` ([num_blocks, block_size, num_kv_heads, head_dim]) at the slots
/// of `slot_mapping` ([T], u32).
pub(crate) fn write_kv(cache: &Tensor, new: &Tensor, slot_mapping: &Tensor) -> Result<()> {
    cache.inplace_op3(new, slot_mapping, &WriteKv)
}

/// Attention of `q` ([1, T, num_heads, head_dim]) over the paged cache;
/// returns [T, num_heads * head_dim].
pub(crate) fn paged_attention(
    q: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    step: &StepTensors,
    num_heads: usize,
) -> Result<Tensor> {
    attend(q, key_cache, value_cache, Metadata::of(step), num_heads)
}

/// A step's attention metadata, all u32 on the cache's device:
/// `block_tables` [B, W], `context_lens` [B], `query_starts` [B + 1].
#[derive(Clone)]
pub(crate) struct Metadata {
    pub block_tables: Tensor,
    pub context_lens: Tensor,
    pub query_starts: Tensor,
}

impl Metadata {
    /// The step's metadata tensors.
    pub(crate) fn of(step: &StepTensors) -> Self {
        Self {
            block_tables: step.block_tables.clone(),
            context_lens: step.context_lens.clone(),
            query_starts: step.query_starts.clone(),
        }
    }
}

/// The attention op over explicit metadata (also the reference the CPU
/// step's kernel is tested against).
pub(crate) fn attend(
    q: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    metadata: Metadata,
    num_heads: usize,
) -> Result<Tensor> {
    let op = PagedAttention {
        metadata,
        num_heads,
    };
    q.apply_op3_no_bwd(key_cache, value_cache, &op)
}

struct WriteKv;

impl InplaceOp3 for WriteKv {
    fn name(&self) -> &'static str {
        "paged-write-kv"
    }

    fn cpu_fwd(
        &self,
        cache: &mut CpuStorage,
        cache_layout: &Layout,
        new: &CpuStorage,
        new_layout: &Layout,
        slots: &CpuStorage,
        slots_layout: &Layout,
    ) -> Result<()> {
        cpu::write_kv(
            (cache, cache_layout),
            (new, new_layout),
            (slots, slots_layout),
        )
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        cache: &mut candle_core::CudaStorage,
        cache_layout: &Layout,
        new: &candle_core::CudaStorage,
        new_layout: &Layout,
        slots: &candle_core::CudaStorage,
        slots_layout: &Layout,
    ) -> Result<()> {
        cuda::write_kv(
            (cache, cache_layout),
            (new, new_layout),
            (slots, slots_layout),
        )
    }
}

struct PagedAttention {
    metadata: Metadata,
    num_heads: usize,
}

impl CustomOp3 for PagedAttention {
    fn name(&self) -> &'static str {
        "paged-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        q_layout: &Layout,
        keys: &CpuStorage,
        keys_layout: &Layout,
        values: &CpuStorage,
        values_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        cpu::attend(
            &self.metadata,
            self.num_heads,
            (q, q_layout),
            (keys, keys_layout),
            (values, values_layout),
        )
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        q: &candle_core::CudaStorage,
        q_layout: &Layout,
        keys: &candle_core::CudaStorage,
        keys_layout: &Layout,
        values: &candle_core::CudaStorage,
        values_layout: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::attend(
            &self.metadata,
            self.num_heads,
            (q, q_layout),
            (keys, keys_layout),
            (values, values_layout),
        )
    }
}

/// The two ops over plain tensors, for `examples/gpu_kernels.rs`, which
/// checks the CUDA kernels against the CPU ones on the GPU machine. Not an
/// API: the model calls the ops itself.
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub mod checks {
    use candle_core::{Result, Tensor};

    /// See the crate-internal `write_kv`; `u32::MAX` slots are skipped.
    pub fn write_kv(cache: &Tensor, new: &Tensor, slot_mapping: &Tensor) -> Result<()> {
        super::write_kv(cache, new, slot_mapping)
    }

    /// See the crate-internal `paged_attention`; the metadata tensors are
    /// u32 on `q`'s device.
    pub fn paged_attention(
        q: &Tensor,
        (key_cache, value_cache): (&Tensor, &Tensor),
        (block_tables, context_lens, query_starts): (&Tensor, &Tensor, &Tensor),
        num_heads: usize,
    ) -> Result<Tensor> {
        let metadata = super::Metadata {
            block_tables: block_tables.clone(),
            context_lens: context_lens.clone(),
            query_starts: query_starts.clone(),
        };
        super::attend(q, key_cache, value_cache, metadata, num_heads)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::{PADDING_SLOT, write_kv};

    #[test]
    fn padding_slots_write_nowhere_and_other_slots_are_checked() {
        let device = &Device::Cpu;
        // 2 blocks of 2 slots, 1 KV head of 2.
        let cache = Tensor::zeros((2, 2, 1, 2), DType::F32, device).unwrap();
        let new = Tensor::new(&[[[1f32, 2.]], [[3., 4.]], [[5., 6.]]], device).unwrap();
        let slots = Tensor::new(&[3u32, PADDING_SLOT, 0], device).unwrap();
        write_kv(&cache, &new, &slots).unwrap();
        let rows = cache.reshape((4, 2)).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(rows, [[5., 6.], [0., 0.], [0., 0.], [1., 2.]]);

        let outside = Tensor::new(&[4u32, 0, 1], device).unwrap();
        let err = write_kv(&cache, &new, &outside).unwrap_err();
        assert!(
            err.to_string().contains("slot 4 is outside the cache"),
            "{err}"
        );
    }
}
