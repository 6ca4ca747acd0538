//! The events a step makes, held in an [`Outbox`], and when they leave
//! ([`EventTiming`]).
//!
//! Sending an event wakes its request's handler. On a GPU the engine
//! sends a step's events once the next step's kernels are launched, so
//! the GPU does not idle while the handlers wake, but only when that
//! launch returns at once (it replays a CUDA graph, a decode step or one
//! with prompt tokens): an eager launch (a prompt chunk above the largest
//! graph, graphs off, more sequences than the largest graph) can take
//! milliseconds, and the events leave before it instead. On the CPU a
//! forward returns only once it has run, and a step's events leave at its
//! end.

use isobench_model::{CausalLm, GraphShapes, KvCache};
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::Event;
use crate::scheduler::StepSummary;

/// Events made by a step, each with its request's channel, held to be
/// sent at once in the order they were made.
///
/// Each event holds a clone of its channel's sender: a sequence that
/// finished is dropped before its `Finished` event leaves.
#[derive(Default)]
pub struct Outbox(Vec<(UnboundedSender<Event>, Event)>);

impl Outbox {
    pub fn push(&mut self, to: &UnboundedSender<Event>, event: Event) {
        self.0.push((to.clone(), event));
    }

    /// Sends every held event (to a request still listening), in order.
    pub fn send_all(&mut self) {
        for (to, event) in self.0.drain(..) {
            let _ = to.send(event);
        }
    }
}

/// When the engine sends the events a step made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventTiming {
    /// At the end of the step that made them.
    AfterStep,
    /// Just after the next step's launch when that step replays a CUDA
    /// graph of `graphs` (none: graphs off), just before it otherwise.
    /// `max_padded_context` is the most tokens a padded row may hold (a
    /// block table's).
    AfterGraphLaunch {
        graphs: Option<GraphShapes>,
        max_padded_context: usize,
    },
}

impl EventTiming {
    /// The timing for `model` over `cache`: after the step on the CPU,
    /// after a graph's launch on a GPU.
    pub fn for_model(model: &dyn CausalLm, cache: &KvCache) -> Self {
        if model.device().is_cpu() {
            return Self::AfterStep;
        }
        Self::AfterGraphLaunch {
            graphs: model.graph_shapes(),
            max_padded_context: cache.max_blocks_per_seq() * cache.block_size(),
        }
    }

    /// Where, around the step `summary` describes, the last step's events
    /// leave.
    pub fn send_at(&self, summary: &StepSummary) -> SendAt {
        match self {
            Self::AfterStep => SendAt::AfterStep,
            Self::AfterGraphLaunch {
                graphs,
                max_padded_context,
            } => {
                let tokens = summary.prefill_tokens + summary.decode_tokens;
                let replays = graphs.as_ref().is_some_and(|graphs| {
                    graphs
                        .of(summary.num_seqs, tokens, *max_padded_context)
                        .is_some()
                });
                if replays {
                    SendAt::AfterLaunch
                } else {
                    SendAt::BeforeStep
                }
            }
        }
    }
}

/// Where in one step the held events leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendAt {
    /// Before the step's forward: the last step's events.
    BeforeStep,
    /// Just after the forward returns (a GPU step is then launched, not
    /// run): the last step's events.
    AfterLaunch,
    /// At the end of the step: its own events.
    AfterStep,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of `num_seqs` sequences, `decode` of them decoding, and
    /// `prefill_tokens` prompt tokens.
    fn step(num_seqs: usize, decode: usize, prefill_tokens: usize) -> StepSummary {
        StepSummary {
            num_seqs,
            prefill_tokens,
            decode_tokens: decode,
            ..StepSummary::default()
        }
    }

    #[test]
    fn events_leave_after_a_graph_launch_only() {
        let gpu = EventTiming::AfterGraphLaunch {
            graphs: Some(GraphShapes {
                rows: vec![1, 2, 4, 8],
                tokens: vec![16, 32],
            }),
            max_padded_context: 64,
        };
        // Decode steps up to the largest row bucket replay a graph.
        assert_eq!(gpu.send_at(&step(1, 1, 0)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(8, 8, 0)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(9, 9, 0)), SendAt::BeforeStep);
        // So do steps with prompt tokens up to the largest token bucket,
        // and up to 9 sequences (the largest row bucket and a padded row).
        assert_eq!(gpu.send_at(&step(2, 1, 29)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(3, 2, 20)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(8, 7, 20)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(2, 1, 40)), SendAt::BeforeStep);
        assert_eq!(gpu.send_at(&step(9, 8, 20)), SendAt::BeforeStep);
        // A padded row would hold more tokens than a block table does.
        let short_tables = EventTiming::AfterGraphLaunch {
            graphs: Some(GraphShapes {
                rows: vec![1, 2],
                tokens: vec![64],
            }),
            max_padded_context: 16,
        };
        assert_eq!(short_tables.send_at(&step(1, 0, 40)), SendAt::BeforeStep);
        assert_eq!(short_tables.send_at(&step(1, 0, 60)), SendAt::AfterLaunch);
        let graphs_off = EventTiming::AfterGraphLaunch {
            graphs: None,
            max_padded_context: 64,
        };
        assert_eq!(graphs_off.send_at(&step(1, 1, 0)), SendAt::BeforeStep);
        assert_eq!(
            EventTiming::AfterStep.send_at(&step(1, 1, 0)),
            SendAt::AfterStep
        );
        assert_eq!(
            EventTiming::AfterStep.send_at(&step(1, 0, 7)),
            SendAt::AfterStep
        );
    }
}
