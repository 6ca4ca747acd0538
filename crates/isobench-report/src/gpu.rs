//! The optional `gpu` section of a report: the GPU the server ran on, its
//! peak memory, the energy it drew and the time its model forwards took
//! over the measured window and the time its engine sat idle, with the
//! figures derived from those and the run's summary (joules per output
//! token, mean power, the shares of the window the GPU spent in forwards
//! and the engine idle).
//!
//! The binary measures a [`GpuMeasurement`] (from the target's `/metrics`,
//! see docs/gpu.md) and [`GpuReport::new`] derives the rest, so each
//! derived figure comes from the one record of the energy and the one
//! record of the tokens and window. Runs that did not use a GPU have no
//! section.

use isobench_metrics::Summary;
use serde::{Deserialize, Serialize};

/// Bytes in a GiB, the unit the report's tables show memory in.
pub(crate) const GIB: f64 = (1u64 << 30) as f64;

/// What was measured on the GPU during a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuMeasurement {
    /// The GPU's name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Its index (the `N` of `cuda:N`).
    pub index: u32,
    /// The NVIDIA driver's version.
    pub driver: String,
    pub memory_total_bytes: u64,
    /// The highest device memory in use (all processes) sampled while the
    /// server ran, up to the end of the run.
    pub peak_memory_bytes: u64,
    /// Energy the GPU drew over the measured window, in joules; `None` when
    /// the GPU has no energy counter.
    pub energy_j: Option<f64>,
    /// Model steps replayed from a CUDA graph during the run (warm-up included).
    pub cuda_graph_replays: u64,
    /// Model steps run eagerly during the run (warm-up included).
    pub eager_steps: u64,
    /// GPU time of the server's model forwards over the measured window,
    /// in seconds (its CUDA-event step times); `None` from a server that
    /// does not report them, and in reports written before they were.
    #[serde(default)]
    pub device_busy_s: Option<f64>,
    /// Time the server's engine slept with nothing it could run over the
    /// measured window, in seconds (`isobench_engine_idle_seconds_total`):
    /// waiting for requests, or for dynamic batching's deadline; `None`
    /// from a server that does not report it, and in reports written
    /// before it did.
    #[serde(default)]
    pub engine_idle_s: Option<f64>,
}

/// The report's `gpu` section: the measurement and what derives from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    #[serde(flatten)]
    pub measured: GpuMeasurement,
    /// `energy_j` / output tokens of the measured window's completed requests.
    pub energy_per_output_token_j: Option<f64>,
    /// `energy_j` / the measured window's length, in watts.
    pub mean_power_w: Option<f64>,
    /// `device_busy_s` / the measured window's length: the share of the
    /// window the GPU spent in model forwards (the rest went to choosing
    /// tokens, waiting for the host, or idling with nothing to run).
    #[serde(default)]
    pub device_busy_share: Option<f64>,
    /// `engine_idle_s` / the measured window's length: the share of the
    /// window the engine had nothing to run. What is left beside it and
    /// `device_busy_share` went to choosing tokens and the host's work
    /// between steps.
    #[serde(default)]
    pub engine_idle_share: Option<f64>,
}

impl GpuReport {
    pub fn new(measured: GpuMeasurement, summary: &Summary) -> Self {
        let energy = measured.energy_j;
        let per = |denominator: f64| {
            energy
                .filter(|_| denominator > 0.0)
                .map(|joules| joules / denominator)
        };
        let window_s = summary.window_s;
        let share = |seconds: Option<f64>| {
            seconds
                .filter(|_| window_s > 0.0)
                .map(|seconds| seconds / window_s)
        };
        Self {
            energy_per_output_token_j: per(summary.tokens.output as f64),
            mean_power_w: per(window_s),
            device_busy_share: share(measured.device_busy_s),
            engine_idle_share: share(measured.engine_idle_s),
            measured,
        }
    }
}
