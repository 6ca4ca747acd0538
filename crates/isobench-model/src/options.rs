//! How a model is loaded ([`ModelOptions`]) and what its last step did
//! ([`StepStats`]).

use std::time::Duration;

use candle_core::DType;

use crate::ModelError;
use crate::graph_shapes::{DEFAULT_GRAPH_TOKEN_BUCKETS, GraphShapes};

/// Batch sizes a decode step is captured for by default: powers of two up
/// to 256; a larger decode batch runs eagerly.
pub const DEFAULT_GRAPH_BUCKETS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Options for [`crate::load_model_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOptions {
    /// The compute dtype (the KV cache must use it too). `None`: f32 on the
    /// CPU, the checkpoint's `torch_dtype` elsewhere.
    pub dtype: Option<DType>,
    /// Replay steps from CUDA graphs, captured per padded shape (see
    /// `graph_buckets` and `graph_token_buckets`). Ignored on the CPU.
    pub cuda_graphs: bool,
    /// The batch sizes graphs are captured for: a pure-decode batch of `n`
    /// sequences replays the graph of the smallest bucket `>= n`, padded.
    pub graph_buckets: Vec<usize>,
    /// The token counts graphs of steps with prompt tokens are captured
    /// for (with a bucket of `graph_buckets` for their sequences): such a
    /// step of `t` tokens replays the graph of the smallest bucket `>= t`
    /// that leaves room for its padding, padded. Empty: those steps run
    /// eagerly.
    pub graph_token_buckets: Vec<usize>,
    /// Run steps on this crate's own kernels: on the CPU every step (`cpu`
    /// module: SIMD projections, one thread pool, reused buffers); on CUDA
    /// the single-token steps (`decode` module: projections that stream
    /// each weight once, with norms, RoPE, K/V writes, residuals and SiLU
    /// fused in), larger ones on candle's ops and cuBLAS. Off: candle's
    /// general ops everywhere, the plain path the kernels are tested
    /// against.
    pub own_kernels: bool,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            dtype: None,
            cuda_graphs: true,
            graph_buckets: DEFAULT_GRAPH_BUCKETS.to_vec(),
            graph_token_buckets: DEFAULT_GRAPH_TOKEN_BUCKETS.to_vec(),
            own_kernels: true,
        }
    }
}

impl ModelOptions {
    /// The buckets sorted and deduplicated, checked to be usable.
    pub(crate) fn buckets(&self) -> Result<GraphShapes, ModelError> {
        let sorted = |buckets: &[usize]| {
            let mut buckets = buckets.to_vec();
            buckets.sort_unstable();
            buckets.dedup();
            buckets
        };
        let (rows, tokens) = (
            sorted(&self.graph_buckets),
            sorted(&self.graph_token_buckets),
        );
        if self.cuda_graphs && rows.is_empty() {
            return Err(ModelError::InvalidOptions(
                "graph_buckets is empty while cuda_graphs is on; give at least one batch size (e.g. 1,2,4,8), or turn graphs off".into(),
            ));
        }
        if rows.first() == Some(&0) {
            return Err(ModelError::InvalidOptions(
                "graph_buckets contains 0; every bucket must be a batch size of at least 1".into(),
            ));
        }
        if let Some(&small) = tokens.first().filter(|&&t| t < 2) {
            return Err(ModelError::InvalidOptions(format!(
                "graph_token_buckets contains {small}; a step with prompt tokens has at least 2, so every bucket must be 2 or more (or leave the list empty)"
            )));
        }
        Ok(GraphShapes { rows, tokens })
    }
}

/// What the model's last [`crate::CausalLm::forward`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepStats {
    /// The step was replayed from a CUDA graph.
    pub graph_replayed: bool,
    /// The number of rows the step ran: its sequences, or the bucket size
    /// when a graph replayed it padded.
    pub padded_batch: usize,
    /// GPU time of the step, between CUDA events recorded on the model's
    /// stream before the step's inputs were uploaded and after its logits
    /// were written. `None` on the CPU.
    pub device_time: Option<Duration>,
    /// Calls of the fused elementwise ops (SwiGLU's product, a residual
    /// add with its norm) in this step's launches that ran candle's ops
    /// although the network has the fused kernels, because the kernels
    /// could not take the tensors. 0 where nothing is fused (the CPU,
    /// candle's plain ops, single-token steps); a step that captured its
    /// graph counts the capture's calls, a replay makes none.
    pub fused_fallbacks: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_sorted_and_checked() {
        let options = ModelOptions {
            graph_buckets: vec![8, 1, 8, 2],
            graph_token_buckets: vec![64, 16, 64],
            ..ModelOptions::default()
        };
        let shapes = options.buckets().unwrap();
        assert_eq!((shapes.rows, shapes.tokens), (vec![1, 2, 8], vec![16, 64]));
        let default = ModelOptions::default().buckets().unwrap();
        assert_eq!(default.rows, DEFAULT_GRAPH_BUCKETS);
        assert_eq!(default.tokens, DEFAULT_GRAPH_TOKEN_BUCKETS);
        let zero = ModelOptions {
            graph_buckets: vec![0, 4],
            ..ModelOptions::default()
        };
        let err = zero.buckets().unwrap_err();
        assert_eq!(err.kind(), "invalid_options");
        assert!(err.to_string().contains("graph_buckets contains 0"));
        let one_token = ModelOptions {
            graph_token_buckets: vec![1, 32],
            ..ModelOptions::default()
        };
        let err = one_token.buckets().unwrap_err();
        assert_eq!(err.kind(), "invalid_options");
        assert!(err.to_string().contains("graph_token_buckets contains 1"));
        let no_prompt_graphs = ModelOptions {
            graph_token_buckets: vec![],
            ..ModelOptions::default()
        };
        assert!(no_prompt_graphs.buckets().unwrap().tokens.is_empty());
        let empty = ModelOptions {
            graph_buckets: vec![],
            ..ModelOptions::default()
        };
        assert!(empty.buckets().unwrap_err().to_string().contains("empty"));
        let off = ModelOptions {
            cuda_graphs: false,
            ..empty
        };
        assert!(off.buckets().unwrap().rows.is_empty());
    }
}
