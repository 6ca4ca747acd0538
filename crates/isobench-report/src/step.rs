//! What a report of one load step carries besides a run's: which sweep or
//! capacity search it belongs to ([`StepMeta`], key `step`) and its
//! steady-state figures ([`SteadyState`], key `steady_state`): the summary
//! of the requests that ended in the steady window (ramp-up and the drain
//! of stragglers left out, see `isobench_metrics::SteadyWindow`) and
//! whether the endpoint kept up in it.

use isobench_metrics::{Saturation, Summary};
use serde::{Deserialize, Serialize};

/// Which series of steps a report belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// `isobench sweep`.
    Sweep,
    /// A trial of `isobench plan`'s search.
    Plan,
}

/// The step's place in its sweep or search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMeta {
    pub kind: StepKind,
    /// Shared by every step of one sweep (or one configuration's search):
    /// the steps of a series make one curve.
    pub series: String,
    /// 0-based, in the order the steps ran.
    pub index: u32,
    /// The offered rate, req/s, for an open-loop step.
    pub rate: Option<f64>,
    /// The concurrency of a closed-loop step.
    pub concurrency: Option<u64>,
}

/// The steady window's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// The window, seconds since the run's start.
    pub start_s: f64,
    pub end_s: f64,
    /// The requests that ended in the window; rates over the window.
    pub summary: Summary,
    pub saturation: Saturation,
}
