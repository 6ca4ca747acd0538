//! isobench measurement: what happened to each request, and the statistics
//! of a run.
//!
//! A backend fills one [`RequestRecord`] per request (times in nanoseconds
//! since the run's start, one entry per streamed content event); recorders
//! turn records into HDR histograms without allocating per token, merge
//! across workers, and summarise into percentiles, throughput and goodput.

mod record;

pub use record::{ErrorKind, RequestError, RequestRecord, TokenSource};
mod recorder;

pub use recorder::Recorder;
