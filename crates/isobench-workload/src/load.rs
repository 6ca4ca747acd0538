//! The `[load]` section: which arrival process, how many requests in
//! flight, when to stop, how many warm-ups; and the command-line
//! [`Overrides`] applied on top of it.
//!
//! In the file every field must fit the arrival process (a `rate` on a
//! closed loop is an error); flags are more forgiving (see [`Overrides`]).

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::arrival::Gaps;
use crate::context::FileContext;
use crate::error::WorkloadError;
use crate::file::HumanDuration;
use crate::lengths::{LengthDistribution, RawLength};

/// The arrival process of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalKind {
    /// Closed loop: a fixed number of requests in flight, each sent as soon
    /// as one finishes.
    Closed,
    /// Open loop, evenly spaced at `rate`.
    Constant,
    /// Open loop, exponential gaps at mean `rate`.
    Poisson,
    /// Open loop, gamma gaps at mean `rate` with shape `burstiness`.
    Gamma,
    /// Bursts of `burst_size` simultaneous requests every `burst_interval`.
    Burst,
    /// The timestamps of a trace dataset.
    Trace,
}

const ARRIVAL_KINDS: &str = "closed, constant, poisson, gamma, burst, trace";

impl ArrivalKind {
    /// The name used in files and flags.
    pub fn name(self) -> &'static str {
        match self {
            ArrivalKind::Closed => "closed",
            ArrivalKind::Constant => "constant",
            ArrivalKind::Poisson => "poisson",
            ArrivalKind::Gamma => "gamma",
            ArrivalKind::Burst => "burst",
            ArrivalKind::Trace => "trace",
        }
    }

    /// Whether the process is driven by `rate` (and so can ramp up).
    pub(crate) fn is_rate_driven(self) -> bool {
        matches!(
            self,
            ArrivalKind::Constant | ArrivalKind::Poisson | ArrivalKind::Gamma
        )
    }
}

impl fmt::Display for ArrivalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ArrivalKind {
    type Err = WorkloadError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let kinds = [
            ArrivalKind::Closed,
            ArrivalKind::Constant,
            ArrivalKind::Poisson,
            ArrivalKind::Gamma,
            ArrivalKind::Burst,
            ArrivalKind::Trace,
        ];
        kinds
            .into_iter()
            .find(|kind| kind.name() == text.trim())
            .ok_or_else(|| {
                WorkloadError::flag(
                    "--arrival",
                    format!("unknown arrival process `{text}` (accepted: {ARRIVAL_KINDS})"),
                )
            })
    }
}

/// Command-line flags that override the workload file (`None`: keep the
/// file's value).
///
/// Precedence:
/// - `--arrival KIND` replaces the file's process; file fields that do not
///   apply to the new process (a `ramp_up` under `--arrival closed`, say)
///   are ignored, and the fields it needs come from the flags or the file
///   (`--arrival gamma` takes the file's `rate` unless `--rate` is given);
/// - `--rate R` without `--arrival` turns a closed-loop file into Poisson at
///   `R` and replaces the rate of a constant, Poisson or gamma one; it is an
///   error on burst and trace arrivals, and with `--arrival closed`;
/// - `--concurrency N` is the closed loop's concurrency, or the cap on
///   requests in flight on top of an open-loop process; when the flags turn
///   a closed-loop file into an open loop, the file's `concurrency` is
///   dropped (no cap) unless `--concurrency` is given;
/// - `--max-requests` and `--duration` replace the file's stop conditions:
///   given either, the file's `max_requests` and `duration` are both
///   dropped;
/// - `--burstiness` (gamma only), `--warmup` and `--seed` replace the
///   file's values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `--concurrency N`
    pub concurrency: Option<usize>,
    /// `--rate R` (requests/s)
    pub rate: Option<f64>,
    /// `--arrival KIND`
    pub arrival: Option<ArrivalKind>,
    /// `--burstiness B` (gamma shape)
    pub burstiness: Option<f64>,
    /// `--max-requests N`
    pub max_requests: Option<u64>,
    /// `--duration D`
    pub duration: Option<Duration>,
    /// `--warmup N`
    pub warmup: Option<u64>,
    /// `--seed S`
    pub seed: Option<u64>,
}

/// `[load]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLoad {
    arrival: Option<ArrivalKind>,
    rate: Option<f64>,
    burstiness: Option<f64>,
    concurrency: Option<i64>,
    ramp_up: Option<HumanDuration>,
    burst_size: Option<RawLength>,
    burst_interval: Option<HumanDuration>,
    max_requests: Option<i64>,
    duration: Option<HumanDuration>,
    warmup: Option<i64>,
}

/// Whether the workload's dataset can drive `arrival = "trace"`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TraceTimestamps {
    /// The dataset is a trace and every record has a timestamp.
    Present,
    /// Why not: no trace dataset, or a record without a timestamp.
    Unavailable(String),
}

/// Bursts: their size in requests and the time between them.
#[derive(Debug, Clone)]
pub(crate) struct Bursts {
    pub(crate) size: LengthDistribution,
    pub(crate) interval: Duration,
}

/// The arrival process with everything it needs.
#[derive(Debug, Clone)]
pub(crate) enum Arrival {
    Closed,
    /// Constant, Poisson or gamma at `rate` requests/s, reached after `ramp_up`.
    Rate {
        kind: ArrivalKind,
        gaps: Gaps,
        rate: f64,
        ramp_up: Duration,
    },
    Burst(Bursts),
    Trace,
}

impl Arrival {
    pub(crate) fn kind(&self) -> ArrivalKind {
        match self {
            Arrival::Closed => ArrivalKind::Closed,
            Arrival::Rate { kind, .. } => *kind,
            Arrival::Burst(_) => ArrivalKind::Burst,
            Arrival::Trace => ArrivalKind::Trace,
        }
    }
}

/// The arrival fields given so far (the file's, then the flags'), kept so
/// that an override can switch to another process and still find, say, the
/// file's rate.
#[derive(Debug, Clone, Default)]
struct ArrivalValues {
    rate: Option<f64>,
    burstiness: Option<f64>,
    ramp_up: Option<Duration>,
    bursts: Option<Bursts>,
}

/// What an arrival process lacks.
enum Missing {
    Rate,
    Bursts,
    Timestamps(String),
}

impl ArrivalValues {
    fn resolve(&self, kind: ArrivalKind, trace: &TraceTimestamps) -> Result<Arrival, Missing> {
        Ok(match kind {
            ArrivalKind::Closed => Arrival::Closed,
            ArrivalKind::Constant | ArrivalKind::Poisson | ArrivalKind::Gamma => {
                let gaps = match kind {
                    ArrivalKind::Constant => Gaps::Constant,
                    ArrivalKind::Poisson => Gaps::Exponential,
                    // Burstiness is validated > 0 and finite, so this is a gamma law;
                    // an out-of-range value falls back to Poisson, its b = 1 case.
                    _ => Gaps::gamma(self.burstiness.unwrap_or(1.0)).unwrap_or(Gaps::Exponential),
                };
                Arrival::Rate {
                    kind,
                    gaps,
                    rate: self.rate.ok_or(Missing::Rate)?,
                    ramp_up: self.ramp_up.unwrap_or_default(),
                }
            }
            ArrivalKind::Burst => Arrival::Burst(self.bursts.clone().ok_or(Missing::Bursts)?),
            ArrivalKind::Trace => match trace {
                TraceTimestamps::Present => Arrival::Trace,
                TraceTimestamps::Unavailable(why) => return Err(Missing::Timestamps(why.clone())),
            },
        })
    }
}

/// The validated load settings.
#[derive(Debug, Clone)]
pub(crate) struct LoadSettings {
    pub(crate) arrival: Arrival,
    /// The closed loop's concurrency (default 1), or the cap on requests in
    /// flight on top of an open-loop process.
    pub(crate) concurrency: Option<usize>,
    pub(crate) max_requests: Option<u64>,
    pub(crate) duration: Option<Duration>,
    pub(crate) warmup: u64,
    given: ArrivalValues,
}

fn positive_number(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

impl LoadSettings {
    /// Validates `[load]`.
    pub(crate) fn from_raw(
        raw: &RawLoad,
        trace: &TraceTimestamps,
        context: &FileContext,
    ) -> Result<Self, WorkloadError> {
        let error = |field: &str, message: String| context.field_error(field, message);
        let count = |field: &str, value: Option<i64>, min: i64| match value {
            None => Ok(None),
            Some(value) if value >= min => Ok(Some(value.unsigned_abs())),
            Some(value) => Err(error(
                field,
                format!("must be an integer >= {min}, got {value}"),
            )),
        };
        if let Some(rate) = raw.rate.filter(|&rate| !positive_number(rate)) {
            return Err(error(
                "load.rate",
                format!("must be a number of requests/s > 0, got {rate}"),
            ));
        }
        if let Some(burstiness) = raw.burstiness.filter(|&b| !positive_number(b)) {
            return Err(error(
                "load.burstiness",
                format!("must be a number > 0 (1 = Poisson, < 1 burstier), got {burstiness}"),
            ));
        }
        for (field, duration) in [
            ("load.duration", raw.duration),
            ("load.burst_interval", raw.burst_interval),
        ] {
            if duration.is_some_and(|d| d.0.is_zero()) {
                return Err(error(field, "must be longer than 0s".to_string()));
            }
        }
        let kind = raw.arrival.unwrap_or(if raw.rate.is_some() {
            ArrivalKind::Poisson
        } else {
            ArrivalKind::Closed
        });
        let name = kind.name();
        let misplaced = [
            ("load.rate", raw.rate.is_some(), kind.is_rate_driven()),
            (
                "load.burstiness",
                raw.burstiness.is_some(),
                kind == ArrivalKind::Gamma,
            ),
            ("load.ramp_up", raw.ramp_up.is_some(), kind.is_rate_driven()),
            (
                "load.burst_size",
                raw.burst_size.is_some(),
                kind == ArrivalKind::Burst,
            ),
            (
                "load.burst_interval",
                raw.burst_interval.is_some(),
                kind == ArrivalKind::Burst,
            ),
        ];
        if let Some((field, ..)) = misplaced
            .iter()
            .find(|(_, present, fits)| *present && !fits)
        {
            return Err(error(
                field,
                format!("does not apply to arrival = \"{name}\""),
            ));
        }
        let bursts = match (&raw.burst_size, raw.burst_interval) {
            (Some(size), Some(interval)) => Some(Bursts {
                size: LengthDistribution::from_raw(size, "load.burst_size", context)?,
                interval: interval.0,
            }),
            _ => None,
        };
        let given = ArrivalValues {
            rate: raw.rate,
            burstiness: raw.burstiness,
            ramp_up: raw.ramp_up.map(|d| d.0),
            bursts,
        };
        let arrival = given.resolve(kind, trace).map_err(|missing| match missing {
            Missing::Rate => error(
                "load.rate",
                format!("arrival = \"{name}\" needs a rate in requests/s (e.g. rate = 10.0)"),
            ),
            Missing::Bursts => error(
                "load",
                "arrival = \"burst\" needs burst_size (e.g. { dist = \"uniform\", min = 8, max = 32 }) \
                 and burst_interval (e.g. \"2s\")"
                    .to_string(),
            ),
            Missing::Timestamps(why) => error("load.arrival", format!("arrival = \"trace\" {why}")),
        })?;
        Ok(LoadSettings {
            arrival,
            concurrency: count("load.concurrency", raw.concurrency, 1)?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_requests: count("load.max_requests", raw.max_requests, 1)?,
            duration: raw.duration.map(|d| d.0),
            warmup: count("load.warmup", raw.warmup, 0)?.unwrap_or(0),
            given,
        })
    }

    /// Applies command-line overrides (see [`Overrides`]); `file` is named
    /// in errors that point back at it.
    pub(crate) fn apply(
        &mut self,
        overrides: &Overrides,
        trace: &TraceTimestamps,
        file: &Path,
    ) -> Result<(), WorkloadError> {
        if overrides.concurrency == Some(0) {
            return Err(WorkloadError::flag("--concurrency", "must be >= 1"));
        }
        if let Some(rate) = overrides.rate.filter(|&rate| !positive_number(rate)) {
            return Err(WorkloadError::flag(
                "--rate",
                format!("must be a number of requests/s > 0, got {rate}"),
            ));
        }
        if let Some(burstiness) = overrides.burstiness.filter(|&b| !positive_number(b)) {
            return Err(WorkloadError::flag(
                "--burstiness",
                format!("must be a number > 0 (1 = Poisson, < 1 burstier), got {burstiness}"),
            ));
        }
        if overrides.max_requests == Some(0) {
            return Err(WorkloadError::flag("--max-requests", "must be >= 1"));
        }
        if overrides.duration.is_some_and(|d| d.is_zero()) {
            return Err(WorkloadError::flag("--duration", "must be longer than 0s"));
        }
        let current = self.arrival.kind();
        let kind = match (overrides.arrival, overrides.rate) {
            (Some(kind), _) => kind,
            (None, Some(_)) if current == ArrivalKind::Closed => ArrivalKind::Poisson,
            (None, _) => current,
        };
        let name = kind.name();
        if overrides.rate.is_some() && !kind.is_rate_driven() {
            return Err(WorkloadError::flag(
                "--rate",
                format!(
                    "does not apply to arrival = {name}; pass --arrival constant, poisson or gamma \
                     to send at a rate instead"
                ),
            ));
        }
        if overrides.burstiness.is_some() && kind != ArrivalKind::Gamma {
            return Err(WorkloadError::flag(
                "--burstiness",
                format!("only applies to arrival = gamma (this run's arrival is {name})"),
            ));
        }
        let values = ArrivalValues {
            rate: overrides.rate.or(self.given.rate),
            burstiness: overrides.burstiness.or(self.given.burstiness),
            ..self.given.clone()
        };
        let file = file.display();
        self.arrival = values.resolve(kind, trace).map_err(|missing| {
            let message = match missing {
                Missing::Rate => format!(
                    "arrival = {name} needs a rate: pass --rate R or set load.rate in {file}"
                ),
                Missing::Bursts => format!(
                    "arrival = burst needs load.burst_size and load.burst_interval in {file}"
                ),
                Missing::Timestamps(why) => format!("arrival = trace {why}"),
            };
            WorkloadError::flag("--arrival", message)
        })?;
        self.given = values;
        // The file's closed-loop concurrency is no cap for an open loop the
        // command line asked for: it would quietly close the loop again.
        let opened = current == ArrivalKind::Closed && kind != ArrivalKind::Closed;
        self.concurrency = match overrides.concurrency {
            Some(concurrency) => Some(concurrency),
            None if opened => None,
            None => self.concurrency,
        };
        // A stop condition on the command line replaces all of the file's:
        // `--duration 5s` must not end at the file's `max_requests`.
        if overrides.max_requests.is_some() || overrides.duration.is_some() {
            self.max_requests = overrides.max_requests;
            self.duration = overrides.duration;
        }
        self.warmup = overrides.warmup.unwrap_or(self.warmup);
        Ok(())
    }
}
