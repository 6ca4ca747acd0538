//! The result of `isobench plan` (`plan.json`): for each server
//! configuration searched, the highest request rate one replica sustained
//! within every SLO, the bracket it lies in, the replicas a target rate
//! needs with the stated headroom, and every trial (each also a full
//! report of its own). docs/report-schema.md documents it; its JSON
//! Schema is `$defs/plan` in docs/report.schema.json.

use serde::{Deserialize, Serialize};

/// The `kind` of a plan document.
pub const PLAN_KIND: &str = "isobench_plan";

/// A capacity plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanResult {
    /// Always [`PLAN_KIND`].
    pub kind: String,
    /// The report schema version of the trials' reports.
    pub schema_version: u32,
    pub tool_version: String,
    pub workload: String,
    /// The external endpoint, or `embedded`.
    pub target: String,
    /// The SLOs every trial was judged by, canonical text.
    pub slos: Vec<String>,
    /// The rate to plan replicas for, requests/s.
    pub target_rps: Option<f64>,
    /// The share of a replica's capacity kept free: each replica is
    /// planned at capacity x (1 - headroom).
    pub headroom: f64,
    /// Trials at the capacity rate, each with its own seed, all passed.
    pub trials_at_capacity: u32,
    /// The bracket's relative width the search stops at.
    pub tolerance: f64,
    /// How long each trial sent, seconds.
    pub trial_duration_s: f64,
    pub configurations: Vec<ConfigurationPlan>,
    /// The configuration with the most SLO-meeting throughput per replica.
    pub best: Option<String>,
}

/// One configuration's search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigurationPlan {
    /// `continuous, max batch 16, 256 KV blocks`, or `external`.
    pub name: String,
    /// The embedded server's configuration in words.
    pub server: Option<String>,
    /// The highest rate at which every trial (`trials_at_capacity` of them)
    /// met every SLO and the endpoint kept up (the bracket's lower end);
    /// `None` when none did.
    pub capacity_rps: Option<f64>,
    /// The lowest rate at which a trial failed (the bracket's upper end):
    /// the capacity lies between `capacity_rps` and it.
    pub upper_rps: Option<f64>,
    /// Good requests per second (every SLO met) in the steady windows of
    /// the trials at `capacity_rps`, averaged.
    pub goodput_rps: Option<f64>,
    /// Replicas for `target_rps`: ceil(target / (capacity x (1 - headroom))).
    pub replicas: Option<u64>,
    /// Confirmed within the tolerance before the trial limit.
    pub converged: bool,
    pub trials: Vec<TrialRecord>,
}

/// One trial of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// The offered rate, requests/s.
    pub rate: f64,
    pub seed: u64,
    /// Every SLO met in the steady window, the endpoint kept up, the run valid.
    pub passed: bool,
    /// The client fell behind its schedule, so the trial said nothing about
    /// the endpoint and was run again at the same rate; the search did not
    /// count it.
    #[serde(default)]
    pub inconclusive: bool,
    /// Why it failed, as sentences.
    pub reasons: Vec<String>,
    /// The trial's report, relative to plan.json.
    pub report: String,
    /// Completed requests per second in the steady window.
    pub throughput_rps: f64,
    /// Good requests per second in the steady window.
    pub goodput_rps: Option<f64>,
}

impl ConfigurationPlan {
    /// Replicas for `target` requests/s at `capacity` each, keeping `headroom` free.
    pub fn replicas_for(target: f64, capacity: f64, headroom: f64) -> Option<u64> {
        let per_replica = capacity * (1.0 - headroom);
        (per_replica > 0.0 && target > 0.0)
            .then(|| (target / per_replica - 1e-9).ceil().max(1.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_keep_the_headroom() {
        assert_eq!(ConfigurationPlan::replicas_for(200.0, 25.0, 0.2), Some(10));
        assert_eq!(ConfigurationPlan::replicas_for(201.0, 25.0, 0.2), Some(11));
        assert_eq!(ConfigurationPlan::replicas_for(1.0, 25.0, 0.2), Some(1));
        assert_eq!(ConfigurationPlan::replicas_for(10.0, 0.0, 0.2), None);
    }
}
