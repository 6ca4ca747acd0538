//! Did the client keep up? A load generator that falls behind its schedule
//! silently measures a lighter load than the one it reports; this module
//! decides from a summary whether the run measured what was offered.
//!
//! Rules (each failed rule is a human sentence in `reasons`, each concern
//! short of that one in `warnings`):
//! - **Send rate.** With an offered rate (open loop), the achieved send rate
//!   `(n - 1) / (last send - first send)` must be at least 99% of the rate
//!   the schedule itself asked for, `(n - 1) / (last scheduled - first
//!   scheduled)`. Comparing with the schedule, not the nominal rate, keeps
//!   the arrival process's own randomness (a Poisson schedule of 1,000
//!   requests is typically 3% off its nominal rate) from marking a run
//!   invalid; a shortfall against the nominal rate alone is a warning.
//! - **Dispatch lag.** The p99 of sent - scheduled must stay at or below
//!   [`DISPATCH_LAG_P99_INVALID_MS`] (10 ms); above
//!   [`DISPATCH_LAG_P99_WARN_MS`] (1 ms) it is a warning. 1 ms is below the
//!   resolution of the latencies that matter here (tens of milliseconds) and
//!   is what a Rust client on one core achieves; past 10 ms, the lag is as
//!   large as a whole decode step of a GPU server, so requests reach the
//!   server in different batches than the schedule meant and the latencies
//!   from the send no longer describe the offered load (those from the
//!   schedule still do). A concurrency cap that holds requests back shows
//!   up here too, deliberately: the offered rate was not delivered.
//! - **Errors.** A run in which every judged request failed, or in which
//!   the error rate `failed / (completed + failed)` passes the maximum
//!   ([`MAX_ERROR_RATE_DEFAULT`], 5%, or the caller's), is invalid
//!   (`too_many_errors`): the latency figures then describe the survivors,
//!   not the load. Cancelled requests are the run's doing, not the server's,
//!   and are left out. 5% because beyond it the failures outnumber the p95
//!   tail: if they are the slow requests (timeouts, overload), every
//!   percentile from p95 up is unknowable; below it a few transient
//!   failures (a 429 in a burst) do not void a long run.
//! - A run without measured requests is invalid; one where none completed
//!   (all cancelled), or where a latency had to be clamped, gets a warning.

use serde::{Deserialize, Serialize};

use crate::Summary;

/// Minimum achieved / scheduled send rate.
pub const SEND_RATE_RATIO_MIN: f64 = 0.99;
/// Dispatch-lag p99 above which a run gets a warning, in milliseconds.
pub const DISPATCH_LAG_P99_WARN_MS: f64 = 1.0;
/// Dispatch-lag p99 above which a run is invalid, in milliseconds.
pub const DISPATCH_LAG_P99_INVALID_MS: f64 = 10.0;
/// Share of judged requests (completed + failed) that may fail before a
/// run is invalid, unless the caller gives another maximum.
pub const MAX_ERROR_RATE_DEFAULT: f64 = 0.05;

/// Whether a run measured the load it claims, with the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validity {
    pub valid: bool,
    /// The nominal offered rate, requests/s; `None` for a closed loop.
    pub offered_rate: Option<f64>,
    pub achieved_send_rate: Option<f64>,
    /// Achieved send rate / the schedule's own rate.
    pub achieved_to_scheduled: Option<f64>,
    /// Achieved send rate / the nominal offered rate.
    pub achieved_to_offered: Option<f64>,
    pub dispatch_lag_p99_ms: Option<f64>,
    /// failed / (completed + failed); `None` when no request was judged.
    #[serde(default)]
    pub error_rate: Option<f64>,
    /// The maximum error rate the run was judged against.
    #[serde(default)]
    pub max_error_rate: Option<f64>,
    /// Every judged request failed, or the error rate passed the maximum.
    #[serde(default)]
    pub too_many_errors: bool,
    /// Why the run is invalid (empty when valid).
    pub reasons: Vec<String>,
    /// Concerns that do not invalidate the run.
    pub warnings: Vec<String>,
}

/// Judges a run from its summary and its nominal offered rate in
/// requests/s (`None` for a closed loop, where only the lag is checked),
/// with the default maximum error rate.
pub fn assess_validity(summary: &Summary, offered_rate: Option<f64>) -> Validity {
    assess_validity_with_max_error_rate(summary, offered_rate, MAX_ERROR_RATE_DEFAULT)
}

/// [`assess_validity`] with another maximum error rate, in [0, 1].
pub fn assess_validity_with_max_error_rate(
    summary: &Summary,
    offered_rate: Option<f64>,
    max_error_rate: f64,
) -> Validity {
    let offered_rate = offered_rate.filter(|rate| rate.is_finite() && *rate > 0.0);
    let achieved = summary.sending.achieved_send_rate;
    let scheduled = summary.sending.scheduled_send_rate;
    let dispatch_lag_p99_ms = summary.latency.dispatch_lag.as_ref().map(|lag| lag.p99_ms);
    let mut validity = Validity {
        valid: true,
        offered_rate,
        achieved_send_rate: achieved,
        achieved_to_scheduled: achieved.zip(scheduled).map(|(a, s)| a / s),
        achieved_to_offered: achieved.zip(offered_rate).map(|(a, o)| a / o),
        dispatch_lag_p99_ms,
        error_rate: None,
        max_error_rate: Some(max_error_rate),
        too_many_errors: false,
        reasons: Vec::new(),
        warnings: Vec::new(),
    };
    let measured = summary.requests.measured;
    validity.check_errors(summary, max_error_rate);
    if measured == 0 {
        validity
            .reasons
            .push("no measured request: the run has nothing to report".into());
    } else if summary.requests.completed == 0 && summary.requests.failed == 0 {
        validity.warnings.push(format!(
            "none of the {measured} measured requests completed: there are no latency figures"
        ));
    }
    if let Some(offered) = offered_rate {
        validity.check_send_rate(offered, measured);
    }
    if let Some(lag) = dispatch_lag_p99_ms {
        if lag > DISPATCH_LAG_P99_INVALID_MS {
            validity.reasons.push(format!(
                "dispatch lag p99 is {lag:.1} ms (over {DISPATCH_LAG_P99_INVALID_MS} ms): requests left well after their scheduled time, because the client was saturated or a concurrency cap held them back; latencies from the send understate what the offered load would see (read the from-schedule figures, or lower the load)"
            ));
        } else if lag > DISPATCH_LAG_P99_WARN_MS {
            validity.warnings.push(format!(
                "dispatch lag p99 is {lag:.2} ms (over {DISPATCH_LAG_P99_WARN_MS} ms): the client is close to its limit, or shares its CPU with the server (as with the embedded one)"
            ));
        }
    }
    if summary.clamped_samples > 0 {
        validity.warnings.push(format!(
            "{} latency samples were beyond the histograms' range and were clamped to its top",
            summary.clamped_samples
        ));
    }
    validity.valid = validity.reasons.is_empty();
    validity
}

impl Validity {
    fn check_errors(&mut self, summary: &Summary, max_error_rate: f64) {
        let (completed, failed) = (summary.requests.completed, summary.requests.failed);
        let judged = completed + failed;
        if judged == 0 {
            return;
        }
        let rate = failed as f64 / judged as f64;
        self.error_rate = Some(rate);
        if completed == 0 {
            self.too_many_errors = true;
            self.reasons.push(format!(
                "every one of the {failed} judged requests failed: there is nothing to measure (see `errors` for why)"
            ));
        } else if rate > max_error_rate {
            self.too_many_errors = true;
            self.reasons.push(format!(
                "{failed} of {judged} requests failed ({:.1}%, more than the {:.1}% allowed by --max-error-rate): the latencies describe the requests that survived, not the load",
                rate * 100.0,
                max_error_rate * 100.0,
            ));
        }
    }

    fn check_send_rate(&mut self, offered: f64, measured: u64) {
        let Some(achieved) = self.achieved_send_rate else {
            self.warnings.push(format!(
                "the send rate could not be checked against the offered {offered:.2} req/s: it needs two measured requests sent at different times"
            ));
            return;
        };
        let percent_short = |ratio: f64| (1.0 - ratio) * 100.0;
        match self.achieved_to_scheduled {
            Some(ratio) if ratio < SEND_RATE_RATIO_MIN => self.reasons.push(format!(
                "the client fell behind its schedule: requests left at {achieved:.2} req/s where the schedule asked for {:.2} req/s ({:.1}% short, more than {:.0}% allowed)",
                achieved / ratio,
                percent_short(ratio),
                percent_short(SEND_RATE_RATIO_MIN),
            )),
            Some(_) => {
                if let Some(ratio) = self.achieved_to_offered.filter(|r| *r < SEND_RATE_RATIO_MIN) {
                    self.warnings.push(format!(
                        "requests left at {achieved:.2} req/s, {:.1}% below the offered {offered:.2} req/s, but the schedule itself asked for no more: the arrival process's randomness (or a ramp) over {measured} requests, not a slow client",
                        percent_short(ratio),
                    ));
                }
            }
            None => {
                if let Some(ratio) = self.achieved_to_offered.filter(|r| *r < SEND_RATE_RATIO_MIN) {
                    self.reasons.push(format!(
                        "requests left at {achieved:.2} req/s, {:.1}% below the offered {offered:.2} req/s",
                        percent_short(ratio),
                    ));
                }
            }
        }
    }
}
