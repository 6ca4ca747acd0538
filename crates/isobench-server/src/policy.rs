//! Batching policies: which waiting requests join the running batch, and
//! how many tokens one engine step may compute.
//!
//! A policy is pure: it sees a [`QueueSnapshot`] (waiting requests in
//! arrival order, how many sequences run, free KV blocks, the time) and
//! answers an [`Admission`]. It never touches sequences or the model, so
//! each policy is unit-tested here without either. Admission is first come,
//! first served: a policy admits a prefix of the queue, and a request whose
//! blocks do not fit stops admission (no overtaking, so no starvation).
//!
//! - [`StaticBatching`]: when nothing runs, take up to `max_batch_size`
//!   waiting requests and run them to completion; each step computes at
//!   most `max_num_batched_tokens` tokens, so a batch whose prompts hold
//!   more is prefilled over several steps (which bounds a step's memory).
//! - [`DynamicBatching`]: like static, but wait until `max_batch_size`
//!   requests are queued or the oldest has waited `max_wait`.
//! - [`ContinuousBatching`]: admit at every step while fewer than
//!   `max_num_seqs` run and blocks remain (keeping a small watermark of free
//!   blocks for the running sequences to grow into); each step computes at
//!   most `max_num_batched_tokens` tokens, so long prompts are prefilled in
//!   chunks beside the running decodes.

use std::time::{Duration, Instant};

use crate::config::BatchingConfig;

/// One waiting request as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingEntry {
    /// When the server received it.
    pub arrived: Instant,
    /// KV blocks its tokens (prompt, plus output generated before a
    /// preemption) need before it can run.
    pub blocks_needed: u32,
}

/// The scheduler's state, as input to a policy.
#[derive(Debug, Clone, Copy)]
pub struct QueueSnapshot<'a> {
    pub now: Instant,
    /// Waiting requests, oldest (or preempted) first.
    pub waiting: &'a [WaitingEntry],
    /// Sequences running now.
    pub running: usize,
    pub free_blocks: u32,
    pub total_blocks: u32,
}

/// A policy's answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admission {
    /// How many requests from the front of the queue join the batch now.
    pub count: usize,
    /// When nothing is admitted although requests wait: the time at which
    /// the policy will admit without new arrivals (dynamic batching's timer).
    pub wake_at: Option<Instant>,
}

/// A batching policy (see the module docs).
pub trait BatchingPolicy: Send {
    /// Which waiting requests start running now.
    fn admit(&mut self, snapshot: &QueueSnapshot<'_>) -> Admission;

    /// The most tokens one step computes: one per decoding sequence plus
    /// prefill chunks.
    fn step_token_budget(&self) -> usize;
}

/// The policy a configuration names.
pub fn from_config(config: &BatchingConfig) -> Box<dyn BatchingPolicy> {
    match *config {
        BatchingConfig::Static {
            max_batch_size,
            max_num_batched_tokens,
        } => Box::new(StaticBatching {
            max_batch_size,
            max_num_batched_tokens,
        }),
        BatchingConfig::Dynamic {
            max_batch_size,
            max_wait,
            max_num_batched_tokens,
        } => Box::new(DynamicBatching {
            max_batch_size,
            max_wait,
            max_num_batched_tokens,
        }),
        BatchingConfig::Continuous {
            max_num_seqs,
            max_num_batched_tokens,
        } => Box::new(ContinuousBatching {
            max_num_seqs,
            max_num_batched_tokens,
        }),
    }
}

/// The longest queue prefix of at most `max_count` requests whose blocks fit
/// in `free_blocks`.
fn fitting_prefix(waiting: &[WaitingEntry], max_count: usize, free_blocks: u32) -> usize {
    let mut left = free_blocks;
    waiting
        .iter()
        .take(max_count)
        .take_while(|entry| match left.checked_sub(entry.blocks_needed) {
            Some(rest) => {
                left = rest;
                true
            }
            None => false,
        })
        .count()
}

#[derive(Debug, Clone)]
pub struct StaticBatching {
    pub max_batch_size: u32,
    pub max_num_batched_tokens: u32,
}

impl BatchingPolicy for StaticBatching {
    fn admit(&mut self, snapshot: &QueueSnapshot<'_>) -> Admission {
        if snapshot.running > 0 {
            return Admission::default();
        }
        Admission {
            count: fitting_prefix(
                snapshot.waiting,
                self.max_batch_size as usize,
                snapshot.free_blocks,
            ),
            wake_at: None,
        }
    }

    fn step_token_budget(&self) -> usize {
        self.max_num_batched_tokens as usize
    }
}

#[derive(Debug, Clone)]
pub struct DynamicBatching {
    pub max_batch_size: u32,
    pub max_wait: Duration,
    pub max_num_batched_tokens: u32,
}

impl BatchingPolicy for DynamicBatching {
    fn admit(&mut self, snapshot: &QueueSnapshot<'_>) -> Admission {
        let Some(oldest) = snapshot.waiting.first() else {
            return Admission::default();
        };
        if snapshot.running > 0 {
            return Admission::default();
        }
        let deadline = oldest.arrived + self.max_wait;
        let full = snapshot.waiting.len() >= self.max_batch_size as usize;
        if !full && snapshot.now < deadline {
            return Admission {
                count: 0,
                wake_at: Some(deadline),
            };
        }
        Admission {
            count: fitting_prefix(
                snapshot.waiting,
                self.max_batch_size as usize,
                snapshot.free_blocks,
            ),
            wake_at: None,
        }
    }

    fn step_token_budget(&self) -> usize {
        self.max_num_batched_tokens as usize
    }
}

#[derive(Debug, Clone)]
pub struct ContinuousBatching {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
}

impl ContinuousBatching {
    /// Free blocks kept back for running sequences to grow into, so that a
    /// new admission does not immediately force a preemption (1% of the
    /// pool, at least one block).
    fn watermark(total_blocks: u32) -> u32 {
        (total_blocks / 100).max(1)
    }
}

impl BatchingPolicy for ContinuousBatching {
    fn admit(&mut self, snapshot: &QueueSnapshot<'_>) -> Admission {
        let slots = (self.max_num_seqs as usize).saturating_sub(snapshot.running);
        let usable = if snapshot.running == 0 {
            snapshot.free_blocks
        } else {
            snapshot
                .free_blocks
                .saturating_sub(Self::watermark(snapshot.total_blocks))
        };
        Admission {
            count: fitting_prefix(snapshot.waiting, slots, usable),
            wake_at: None,
        }
    }

    fn step_token_budget(&self) -> usize {
        self.max_num_batched_tokens as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(start: Instant, blocks: &[u32]) -> Vec<WaitingEntry> {
        blocks
            .iter()
            .enumerate()
            .map(|(i, &blocks_needed)| WaitingEntry {
                arrived: start + Duration::from_millis(i as u64),
                blocks_needed,
            })
            .collect()
    }

    fn snapshot(
        now: Instant,
        waiting: &[WaitingEntry],
        running: usize,
        free: u32,
    ) -> QueueSnapshot<'_> {
        QueueSnapshot {
            now,
            waiting,
            running,
            free_blocks: free,
            total_blocks: 100,
        }
    }

    #[test]
    fn static_takes_a_batch_only_when_idle() {
        let t0 = Instant::now();
        let waiting = queue(t0, &[1, 1, 1, 1, 1]);
        let mut policy = StaticBatching {
            max_batch_size: 3,
            max_num_batched_tokens: 64,
        };
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 0, 100)).count, 3);
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 1, 100)).count, 0);
        assert_eq!(policy.admit(&snapshot(t0, &waiting[..2], 0, 100)).count, 2);
    }

    #[test]
    fn admission_stops_at_the_first_request_that_does_not_fit() {
        let t0 = Instant::now();
        let waiting = queue(t0, &[4, 10, 1]);
        let mut policy = StaticBatching {
            max_batch_size: 8,
            max_num_batched_tokens: 64,
        };
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 0, 12)).count, 1);
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 0, 15)).count, 3);
        let mut policy = ContinuousBatching {
            max_num_seqs: 8,
            max_num_batched_tokens: 64,
        };
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 0, 3)).count, 0);
    }

    #[test]
    fn dynamic_waits_for_a_full_batch_or_the_deadline() {
        let t0 = Instant::now();
        let max_wait = Duration::from_millis(50);
        let mut policy = DynamicBatching {
            max_batch_size: 4,
            max_wait,
            max_num_batched_tokens: 64,
        };
        let waiting = queue(t0, &[1, 1]);
        let early = policy.admit(&snapshot(t0 + Duration::from_millis(10), &waiting, 0, 100));
        assert_eq!(
            early,
            Admission {
                count: 0,
                wake_at: Some(t0 + max_wait)
            }
        );
        let late = policy.admit(&snapshot(t0 + max_wait, &waiting, 0, 100));
        assert_eq!(late.count, 2);
        let full = queue(t0, &[1; 6]);
        assert_eq!(policy.admit(&snapshot(t0, &full, 0, 100)).count, 4);
        assert_eq!(
            policy.admit(&snapshot(t0 + max_wait, &full, 2, 100)).count,
            0
        );
        assert_eq!(
            policy.admit(&snapshot(t0, &[], 0, 100)),
            Admission::default()
        );
    }

    #[test]
    fn continuous_fills_free_slots_and_keeps_a_watermark() {
        let t0 = Instant::now();
        let waiting = queue(t0, &[2, 2, 2, 2]);
        let mut policy = ContinuousBatching {
            max_num_seqs: 5,
            max_num_batched_tokens: 64,
        };
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 3, 100)).count, 2);
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 5, 100)).count, 0);
        // 5 free blocks, 1 held back while sequences run: two requests fit.
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 1, 5)).count, 2);
        // Nothing runs: the whole pool is usable.
        assert_eq!(policy.admit(&snapshot(t0, &waiting, 0, 4)).count, 2);
        assert_eq!(policy.step_token_budget(), 64);
    }
}
