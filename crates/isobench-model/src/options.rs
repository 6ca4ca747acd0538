//! How a model is loaded ([`ModelOptions`]) and what its last step did
//! ([`StepStats`]).

use std::time::Duration;

use candle_core::DType;

use crate::ModelError;

/// Batch sizes a decode step is captured for by default: powers of two up
/// to 256; a larger decode batch runs eagerly.
pub const DEFAULT_GRAPH_BUCKETS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Options for [`crate::load_model_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOptions {
    /// The compute dtype (the KV cache must use it too). `None`: f32 on the
    /// CPU, the checkpoint's `torch_dtype` elsewhere.
    pub dtype: Option<DType>,
    /// Replay decode steps from CUDA graphs (captured per batch bucket).
    /// Ignored on the CPU.
    pub cuda_graphs: bool,
    /// The batch sizes graphs are captured for: a pure-decode batch of `n`
    /// sequences replays the graph of the smallest bucket `>= n`, padded.
    pub graph_buckets: Vec<usize>,
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
            own_kernels: true,
        }
    }
}

impl ModelOptions {
    /// The buckets sorted and deduplicated, checked to be usable.
    pub(crate) fn buckets(&self) -> Result<Vec<usize>, ModelError> {
        let mut buckets = self.graph_buckets.clone();
        buckets.sort_unstable();
        buckets.dedup();
        if self.cuda_graphs && buckets.is_empty() {
            return Err(ModelError::InvalidOptions(
                "graph_buckets is empty while cuda_graphs is on; give at least one batch size (e.g. 1,2,4,8), or turn graphs off".into(),
            ));
        }
        if buckets.first() == Some(&0) {
            return Err(ModelError::InvalidOptions(
                "graph_buckets contains 0; every bucket must be a batch size of at least 1".into(),
            ));
        }
        Ok(buckets)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_sorted_and_checked() {
        let options = ModelOptions {
            graph_buckets: vec![8, 1, 8, 2],
            ..ModelOptions::default()
        };
        assert_eq!(options.buckets().unwrap(), [1, 2, 8]);
        assert_eq!(
            ModelOptions::default().buckets().unwrap(),
            DEFAULT_GRAPH_BUCKETS
        );
        let zero = ModelOptions {
            graph_buckets: vec![0, 4],
            ..ModelOptions::default()
        };
        let err = zero.buckets().unwrap_err();
        assert_eq!(err.kind(), "invalid_options");
        assert!(err.to_string().contains("graph_buckets contains 0"));
        let empty = ModelOptions {
            graph_buckets: vec![],
            ..ModelOptions::default()
        };
        assert!(empty.buckets().unwrap_err().to_string().contains("empty"));
        let off = ModelOptions {
            cuda_graphs: false,
            ..empty
        };
        assert_eq!(off.buckets().unwrap(), Vec::<usize>::new());
    }
}
