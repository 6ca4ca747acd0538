//! Per-worker recording. CONTRACT STUB: the signatures are fixed (the load
//! engine codes against them); the internals are being written.

use std::time::Duration;

use crate::RequestRecord;

/// Records finished requests into histograms. One per worker; merged at the end.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    completed: u64,
    failed: u64,
    warmup: u64,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one finished (or failed) request. Warm-up records are only counted.
    pub fn record(&mut self, record: &RequestRecord) {
        if record.warmup {
            self.warmup += 1;
        } else if record.succeeded() {
            self.completed += 1;
        } else {
            self.failed += 1;
        }
    }

    /// Folds another worker's recorder into this one.
    pub fn merge(&mut self, other: &Recorder) {
        self.completed += other.completed;
        self.failed += other.failed;
        self.warmup += other.warmup;
    }

    /// Requests recorded so far, warm-ups excluded.
    pub fn measured(&self) -> u64 {
        self.completed + self.failed
    }

    /// Unused until the summary is written: the measured window.
    pub fn window_placeholder(&self, _window: Duration) {}
}
