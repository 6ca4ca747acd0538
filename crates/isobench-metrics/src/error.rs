//! The metrics crate's errors: only SLO specifications can be wrong, since
//! everything else comes from the load engine, not from the user.

use thiserror::Error;

/// An SLO a user wrote (on the command line or in a workload file) that
/// cannot be understood. Each message quotes the input and says what would be
/// accepted; the caller adds where it came from (`--slo`, the file's `[slo]`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetricsError {
    #[error("`{input}` is not an SLO: write METRIC_STATISTIC=VALUE, for example ttft_p99=500ms")]
    SloSyntax { input: String },

    #[error(
        "unknown metric `{metric}` in SLO `{input}`: expected ttft, tpot, itl or e2el (or its alias e2e)"
    )]
    SloMetric { input: String, metric: String },

    #[error(
        "unknown statistic `{statistic}` in SLO `{input}`: expected mean, median, or pN with 0 < N < 100 (p50, p90, p95, p99, p99.9)"
    )]
    SloStatistic { input: String, statistic: String },

    #[error(
        "bad threshold `{value}` in SLO `{input}`: expected a number greater than zero with a unit us, ms or s, for example 500ms or 1.5s"
    )]
    SloValue { input: String, value: String },
}

impl MetricsError {
    /// A stable label for logs and JSON `error_type`.
    pub fn kind(&self) -> &'static str {
        match self {
            MetricsError::SloSyntax { .. } => "slo_syntax",
            MetricsError::SloMetric { .. } => "slo_metric",
            MetricsError::SloStatistic { .. } => "slo_statistic",
            MetricsError::SloValue { .. } => "slo_value",
        }
    }
}
