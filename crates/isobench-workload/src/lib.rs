//! isobench workloads: what to send and when.
//!
//! A workload file (TOML, documented in `docs/workloads.md`) becomes a
//! validated [`Workload`]; command-line [`Overrides`] adjust its load; its
//! [`Plan`] yields [`PlannedRequest`]s, each with its prompt, its output
//! length and the offset from the run's start at which the arrival process
//! means it to be sent. Everything is seeded: the same workload and seed give
//! the same requests at the same offsets.
//!
//! - prompts and lengths: synthetic length distributions (`lengths`) with
//!   prompts synthesised to an exact token count (`synth`, `tokens`), or
//!   ShareGPT dumps and JSONL traces (`dataset`), every input file read
//!   with bounds (`input`);
//! - when: closed loop, or the open-loop processes of `arrival`;
//! - [`Distribution`]: the general compact distribution type
//!   (`uniform:10,30`), re-exported from `isobench-common`, where the mock
//!   endpoint takes it from too.
//!
//! ```
//! use isobench_workload::Workload;
//!
//! let workload = Workload::from_toml(
//!     r#"
//!     [request]
//!     input_tokens = { dist = "uniform", min = 16, max = 32 }
//!     output_tokens = 32
//!     [load]
//!     arrival = "poisson"
//!     rate = 10.0
//!     max_requests = 5
//!     "#,
//!     "inline.toml".as_ref(),
//! )?;
//! let plan = workload.plan(None)?;
//! assert_eq!(plan.shape.description, "poisson 10 req/s");
//! let requests: Vec<_> = plan.requests.collect();
//! assert_eq!(requests.len(), 5);
//! assert!(requests.windows(2).all(|w| w[0].offset <= w[1].offset));
//! # Ok::<(), isobench_workload::WorkloadError>(())
//! ```

mod arrival;
mod context;
mod dataset;
mod error;
mod file;
mod input;
mod lengths;
mod load;
mod plan;
mod planner;
mod request;
mod source;
mod synth;
mod tokens;
mod workload;

pub use error::WorkloadError;
pub use input::{MAX_LINE_BYTES, MAX_WORKLOAD_BYTES};
pub use isobench_common::Distribution;
pub use load::{ArrivalKind, Overrides};
pub use plan::{ApiKind, LoadShape, Plan, PlannedRequest, Prompt, PromptTokens};
pub use request::Sampling;
pub use workload::{DEFAULT_TIMEOUT, Workload};
