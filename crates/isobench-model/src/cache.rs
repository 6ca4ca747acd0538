//! The paged KV cache: per layer, one key and one value tensor of shape
//! `[num_blocks, block_size, num_kv_heads, head_dim]`, allocated once.
//!
//! The cache only stores; the server's block allocator decides which blocks
//! each sequence owns and tells the model through the step's block tables
//! and slot mappings (slot = `block * block_size + offset`).

use candle_core::{DType, Device, Tensor};

use crate::{ModelConfig, ModelError};

pub struct KvCache {
    /// (keys, values) per layer.
    layers: Vec<(Tensor, Tensor)>,
    num_blocks: usize,
    block_size: usize,
    num_kv_heads: usize,
    head_dim: usize,
    max_blocks_per_seq: usize,
    dtype: DType,
    device: Device,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCache")
            .field("layers", &self.layers.len())
            .field("num_blocks", &self.num_blocks)
            .field("block_size", &self.block_size)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl KvCache {
    /// Allocates (zeroed) `num_blocks` blocks of `block_size` tokens for
    /// every layer of a model with `config`. `dtype` and `device` must be
    /// the model's ([`crate::CausalLm::dtype`], [`crate::CausalLm::device`]).
    pub fn new(
        config: &ModelConfig,
        num_blocks: usize,
        block_size: usize,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, ModelError> {
        if num_blocks == 0 || block_size == 0 {
            return Err(ModelError::CacheMismatch(format!(
                "num_blocks ({num_blocks}) and block_size ({block_size}) must both be at least 1"
            )));
        }
        let shape = (
            num_blocks,
            block_size,
            config.num_key_value_heads,
            config.head_dim,
        );
        let layers = (0..config.num_hidden_layers)
            .map(|_| {
                Ok((
                    Tensor::zeros(shape, dtype, device)?,
                    Tensor::zeros(shape, dtype, device)?,
                ))
            })
            .collect::<Result<Vec<_>, candle_core::Error>>()?;
        Ok(Self {
            layers,
            num_blocks,
            block_size,
            num_kv_heads: config.num_key_value_heads,
            head_dim: config.head_dim,
            max_blocks_per_seq: config
                .max_position_embeddings
                .div_ceil(block_size)
                .min(num_blocks),
            dtype,
            device: device.clone(),
        })
    }

    /// Narrows the width of every step's block table to the blocks of
    /// `tokens` (a server's `--max-model-len`), when that is narrower than
    /// the model's context: no sequence grows longer, and a CUDA graph's
    /// static tables and the decode attention's split follow this width.
    /// Call it before warm-up and graph capture.
    pub fn with_context_limit(mut self, tokens: usize) -> Self {
        self.max_blocks_per_seq = self
            .max_blocks_per_seq
            .min(tokens.div_ceil(self.block_size).max(1));
        self
    }

    /// Bytes one block takes over all layers (keys and values), so a server
    /// can size the pool from a memory budget.
    pub fn bytes_per_block(config: &ModelConfig, block_size: usize, dtype: DType) -> usize {
        2 * config.num_hidden_layers
            * block_size
            * config.num_key_value_heads
            * config.head_dim
            * dtype.size_in_bytes()
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The width every step's block table is padded to: enough blocks for
    /// `max_position_embeddings` tokens (or the whole pool, or the limit of
    /// [`Self::with_context_limit`], if smaller), so that a decode step's
    /// tensors have a shape that depends on its batch size only.
    pub fn max_blocks_per_seq(&self) -> usize {
        self.max_blocks_per_seq
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub(crate) fn kv_shape(&self) -> (usize, usize) {
        (self.num_kv_heads, self.head_dim)
    }

    /// Layer `index`'s (keys, values).
    pub(crate) fn layer(&self, index: usize) -> (&Tensor, &Tensor) {
        let (keys, values) = &self.layers[index];
        (keys, values)
    }
}
