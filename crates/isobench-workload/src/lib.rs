//! isobench workloads: what to send and when.
//!
//! A workload file (TOML) becomes a validated [`Workload`]; its [`Plan`]
//! yields [`PlannedRequest`]s, each with its prompt, its output length and
//! the instant (offset from the run's start) at which the arrival process
//! means it to be sent. Everything is seeded: the same workload and seed
//! give the same requests at the same offsets.

mod plan;

pub use plan::{ApiKind, LoadShape, Plan, PlannedRequest, Prompt, PromptTokens};
