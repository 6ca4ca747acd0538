//! The events a step makes, held in an [`Outbox`], and when they leave
//! ([`EventTiming`]).
//!
//! Sending an event wakes its request's handler. On a GPU the engine
//! sends a step's events once the next step's kernels are launched, so
//! the GPU does not idle while the handlers wake, but only when that
//! launch returns at once (it replays a decode graph): an eager launch
//! (a prompt chunk, graphs off, more sequences than the largest graph)
//! can take milliseconds, and the events leave before it instead. On the
//! CPU a forward returns only once it has run, and a step's events leave
//! at its end.

use isobench_model::CausalLm;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTiming {
    /// At the end of the step that made them.
    AfterStep,
    /// Just after the next step's launch when that step replays a decode
    /// graph (no prompt tokens, at most `decode_graph_rows` sequences),
    /// just before it otherwise.
    AfterGraphLaunch { decode_graph_rows: usize },
}

impl EventTiming {
    /// The timing for `model`: after the step on the CPU, after a graph's
    /// launch on a GPU (with graphs off no step replays one, and every
    /// step's events leave before it).
    pub fn for_model(model: &dyn CausalLm) -> Self {
        if model.device().is_cpu() {
            return Self::AfterStep;
        }
        let decode_graph_rows = model
            .graph_shapes()
            .into_iter()
            .filter(|&(rows, tokens)| rows == tokens)
            .map(|(rows, _)| rows)
            .max()
            .unwrap_or(0);
        Self::AfterGraphLaunch { decode_graph_rows }
    }

    /// Where, around the step `summary` describes, the last step's events
    /// leave.
    pub fn send_at(self, summary: &StepSummary) -> SendAt {
        match self {
            Self::AfterStep => SendAt::AfterStep,
            Self::AfterGraphLaunch { decode_graph_rows } => {
                if summary.prefill_tokens == 0 && summary.num_seqs <= decode_graph_rows {
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

    fn step(num_seqs: usize, prefill_tokens: usize) -> StepSummary {
        StepSummary {
            num_seqs,
            prefill_tokens,
            decode_tokens: num_seqs,
            ..StepSummary::default()
        }
    }

    #[test]
    fn events_leave_after_a_graph_launch_only() {
        let gpu = EventTiming::AfterGraphLaunch {
            decode_graph_rows: 8,
        };
        assert_eq!(gpu.send_at(&step(1, 0)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(8, 0)), SendAt::AfterLaunch);
        assert_eq!(gpu.send_at(&step(9, 0)), SendAt::BeforeStep);
        assert_eq!(gpu.send_at(&step(2, 30)), SendAt::BeforeStep);
        let graphs_off = EventTiming::AfterGraphLaunch {
            decode_graph_rows: 0,
        };
        assert_eq!(graphs_off.send_at(&step(1, 0)), SendAt::BeforeStep);
        assert_eq!(
            EventTiming::AfterStep.send_at(&step(1, 0)),
            SendAt::AfterStep
        );
        assert_eq!(
            EventTiming::AfterStep.send_at(&step(1, 7)),
            SendAt::AfterStep
        );
    }
}
