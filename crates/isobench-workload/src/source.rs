//! Request sources: the prompt and lengths of each request, in plan order,
//! from synthetic length distributions, a ShareGPT dump or a trace.

use std::sync::Arc;

use rand::rngs::StdRng;

use crate::dataset::{Dataset, ShareGptReplay, TraceReplay};
use crate::lengths::LengthDistribution;
use crate::request::Requests;
use crate::synth::PromptSynth;
use crate::tokens::TokenCounter;

/// What one request sends, before it is scheduled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Content {
    pub(crate) prompt: String,
    pub(crate) input_tokens: u32,
    pub(crate) max_tokens: u32,
    /// A trace's own offset for the request, in seconds (already scaled).
    pub(crate) trace_offset: Option<f64>,
}

/// Yields the content of each request; all draws come from its own seeded
/// generator, so content does not depend on the arrival process.
#[derive(Debug)]
pub(crate) enum RequestSource {
    Synthetic {
        input: LengthDistribution,
        output: LengthDistribution,
        synth: PromptSynth,
        rng: StdRng,
    },
    ShareGpt {
        replay: ShareGptReplay,
        output: Option<LengthDistribution>,
        rng: StdRng,
    },
    Trace {
        replay: TraceReplay,
        output: Option<LengthDistribution>,
        synth: PromptSynth,
        rng: StdRng,
    },
}

impl RequestSource {
    /// A source for `requests`; fails (with the reason) when the tokenizer
    /// cannot synthesise prompts.
    pub(crate) fn new(
        requests: &Requests,
        counter: &TokenCounter,
        mut rng: StdRng,
    ) -> Result<Self, String> {
        Ok(match requests {
            Requests::Synthetic { input, output } => RequestSource::Synthetic {
                input: input.clone(),
                output: output.clone(),
                synth: PromptSynth::new(counter)?,
                rng,
            },
            Requests::Dataset {
                dataset: Dataset::ShareGpt(data),
                output,
            } => RequestSource::ShareGpt {
                replay: ShareGptReplay::new(Arc::clone(data), counter.clone(), &mut rng),
                output: output.clone(),
                rng,
            },
            Requests::Dataset {
                dataset: Dataset::Trace(data),
                output,
            } => RequestSource::Trace {
                replay: TraceReplay::new(Arc::clone(data)),
                output: output.clone(),
                synth: PromptSynth::new(counter)?,
                rng,
            },
        })
    }

    /// The next request's content; `None` when a finite dataset is exhausted.
    pub(crate) fn next_content(&mut self) -> Option<Content> {
        match self {
            RequestSource::Synthetic {
                input,
                output,
                synth,
                rng,
            } => {
                let target = input.sample(rng);
                let max_tokens = output.sample(rng);
                let (prompt, input_tokens) = synth.prompt(target, rng);
                Some(Content {
                    prompt,
                    input_tokens,
                    max_tokens,
                    trace_offset: None,
                })
            }
            RequestSource::ShareGpt {
                replay,
                output,
                rng,
            } => {
                let exchange = replay.next_exchange()?;
                Some(Content {
                    prompt: exchange.prompt,
                    input_tokens: exchange.input_tokens,
                    max_tokens: output
                        .as_ref()
                        .map_or(exchange.output_tokens, |output| output.sample(rng)),
                    trace_offset: None,
                })
            }
            RequestSource::Trace {
                replay,
                output,
                synth,
                rng,
            } => {
                let record = replay.next_record()?;
                let max_tokens = output
                    .as_ref()
                    .map_or(record.output_tokens, |output| output.sample(rng));
                let (prompt, input_tokens) = synth.prompt(record.input_tokens, rng);
                Some(Content {
                    prompt,
                    input_tokens,
                    max_tokens,
                    trace_offset: record.offset,
                })
            }
        }
    }
}
