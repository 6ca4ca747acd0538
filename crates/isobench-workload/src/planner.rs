//! Turns a validated [`Workload`] into a [`Plan`]: the shape of the load and
//! a lazy iterator of planned requests.
//!
//! Two seeded generators feed the plan: one for content (prompts, lengths,
//! the ShareGPT shuffle) seeded with `seed`, one for arrivals (gaps, burst
//! sizes) seeded with `seed` XOR a fixed constant. Changing the rate, the
//! arrival process or the concurrency therefore leaves the prompts and
//! lengths of a seed unchanged, so runs at different loads send the same
//! requests.
//!
//! Warm-up requests are the first `warmup` requests of the plan: they are
//! scheduled by the same arrival process as the others (in a closed loop,
//! they simply go first), and the measured requests follow on the same
//! schedule without a pause. An open-loop plan bounded by a duration ends
//! at the first request whose offset is not before the duration.

use std::path::Path;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::arrival::{ArrivalProcess, BurstProcess, Gaps, RateProcess, seconds};
use crate::dataset::Dataset;
use crate::error::WorkloadError;
use crate::load::{Arrival, LoadSettings};
use crate::plan::{LoadShape, Plan, PlannedRequest, Prompt};
use crate::request::Requests;
use crate::source::{Content, RequestSource};
use crate::tokens::TokenCounter;
use crate::workload::Workload;

/// Mixed into the seed of the arrival generator.
const ARRIVAL_STREAM: u64 = 0x9E37_79B9_7F4A_7C15;

/// Builds the plan of `workload`, counting tokens with `tokenizer` when given.
pub(crate) fn build(workload: &Workload, tokenizer: Option<&Path>) -> Result<Plan, WorkloadError> {
    let load = &workload.load;
    let requests = &workload.request.requests;
    let finite_dataset =
        matches!(requests, Requests::Dataset { dataset, .. } if !dataset.repeats());
    if load.max_requests.is_none() && load.duration.is_none() && !finite_dataset {
        return Err(WorkloadError::NoStopCondition {
            file: workload.path.clone(),
        });
    }
    let counter = match tokenizer {
        Some(path) => TokenCounter::load(path)?,
        None => TokenCounter::Approximate,
    };
    let content_rng = StdRng::seed_from_u64(workload.seed);
    let mut source = RequestSource::new(requests, &counter, content_rng).map_err(|message| {
        WorkloadError::Tokenizer {
            path: tokenizer.unwrap_or(Path::new("")).to_path_buf(),
            message,
        }
    })?;
    let first = source.next_content();
    if let (None, Requests::Dataset { dataset, .. }) = (&first, requests) {
        return Err(WorkloadError::data(
            dataset.path(),
            None,
            "no record passes the length filters of request.dataset",
        ));
    }
    let arrival_rng = StdRng::seed_from_u64(workload.seed ^ ARRIVAL_STREAM);
    let schedule = match &load.arrival {
        Arrival::Closed => Schedule::Closed,
        Arrival::Rate {
            gaps,
            rate,
            ramp_up,
            ..
        } => Schedule::Open(Box::new(RateProcess::new(
            *gaps,
            *rate,
            *ramp_up,
            arrival_rng,
        ))),
        Arrival::Burst(bursts) => Schedule::Open(Box::new(BurstProcess::new(
            bursts.size.clone(),
            bursts.interval,
            arrival_rng,
        ))),
        Arrival::Trace => Schedule::Trace,
    };
    let open_loop = !matches!(schedule, Schedule::Closed);
    Ok(Plan {
        shape: shape(load, requests),
        prompt_tokens: counter.source(),
        requests: Box::new(PlannedRequests {
            next_index: 0,
            warmup: load.warmup,
            end: load.max_requests.map(|n| n.saturating_add(load.warmup)),
            deadline: load.duration.filter(|_| open_loop),
            source,
            schedule,
            first,
            done: false,
        }),
    })
}

/// The shape of the load, for the engine and the report.
fn shape(load: &LoadSettings, requests: &Requests) -> LoadShape {
    let trace_length = match requests {
        Requests::Dataset {
            dataset: Dataset::Trace(trace),
            ..
        } if !trace.repeats() => Some(trace.len() as u64),
        _ => None,
    };
    let (mut description, offered_rate) = match &load.arrival {
        Arrival::Closed => {
            let concurrency = load.concurrency.unwrap_or(1);
            (format!("closed loop, {concurrency} concurrent"), None)
        }
        Arrival::Rate {
            kind,
            gaps,
            rate,
            ramp_up,
        } => {
            let mut text = format!("{kind} {rate} req/s");
            if let Gaps::Gamma { burstiness, .. } = gaps {
                text.push_str(&format!(" (burstiness {burstiness})"));
            }
            if !ramp_up.is_zero() {
                text.push_str(&format!(
                    ", ramp-up {}",
                    humantime::format_duration(*ramp_up)
                ));
            }
            (text, Some(*rate))
        }
        Arrival::Burst(bursts) => (
            format!(
                "bursts of {} every {}",
                bursts.size,
                humantime::format_duration(bursts.interval)
            ),
            Some(bursts.size.mean() / bursts.interval.as_secs_f64()),
        ),
        Arrival::Trace => {
            let (path, rate) = match requests {
                Requests::Dataset {
                    dataset: Dataset::Trace(trace),
                    ..
                } => {
                    let span = trace.span_seconds();
                    let rate =
                        (trace.len() > 1 && span > 0.0).then(|| (trace.len() - 1) as f64 / span);
                    (trace.path().display().to_string(), rate)
                }
                _ => (String::new(), None),
            };
            (format!("trace timestamps of `{path}`"), rate)
        }
    };
    let max_concurrency = match load.arrival {
        Arrival::Closed => Some(load.concurrency.unwrap_or(1)),
        _ => load.concurrency,
    };
    if let (Some(cap), false) = (load.concurrency, matches!(load.arrival, Arrival::Closed)) {
        description.push_str(&format!(", at most {cap} in flight"));
    }
    if load.warmup > 0 {
        description.push_str(&format!(", {} warm-up", load.warmup));
    }
    LoadShape {
        max_concurrency,
        duration: load.duration,
        max_requests: load
            .max_requests
            .or_else(|| trace_length.map(|n| n.saturating_sub(load.warmup))),
        warmup: load.warmup,
        offered_rate,
        ramp_up: match &load.arrival {
            Arrival::Rate { ramp_up, .. } => *ramp_up,
            _ => Duration::ZERO,
        },
        description,
    }
}

/// When requests are sent.
enum Schedule {
    /// As soon as a slot is free: no offset.
    Closed,
    Open(Box<dyn ArrivalProcess>),
    /// At the trace's own offsets.
    Trace,
}

/// The plan's lazy iterator.
struct PlannedRequests {
    next_index: u64,
    warmup: u64,
    /// Index one past the last request (warm-ups included), if bounded.
    end: Option<u64>,
    /// Open loop only: no request at or after this offset.
    deadline: Option<Duration>,
    source: RequestSource,
    schedule: Schedule,
    /// The first content, drawn early to check that there is one.
    first: Option<Content>,
    done: bool,
}

impl Iterator for PlannedRequests {
    type Item = PlannedRequest;

    fn next(&mut self) -> Option<PlannedRequest> {
        if self.done || self.end.is_some_and(|end| self.next_index >= end) {
            return None;
        }
        let Some(content) = self.first.take().or_else(|| self.source.next_content()) else {
            self.done = true;
            return None;
        };
        let offset = match &mut self.schedule {
            Schedule::Closed => None,
            Schedule::Open(process) => Some(process.next_offset()),
            Schedule::Trace => Some(seconds(content.trace_offset.unwrap_or(0.0))),
        };
        if offset
            .zip(self.deadline)
            .is_some_and(|(offset, deadline)| offset >= deadline)
        {
            self.done = true;
            return None;
        }
        let index = self.next_index;
        self.next_index += 1;
        Some(PlannedRequest {
            index,
            warmup: index < self.warmup,
            offset,
            prompt: Prompt::Text(content.prompt),
            input_tokens: content.input_tokens,
            max_tokens: content.max_tokens,
        })
    }
}
