//! The flat keys of vLLM's `vllm bench serve` result, named exactly as
//! `vllm/benchmarks/serve.py` names them, so that scripts and dashboards
//! written for vLLM read isobench's JSON and CSV unchanged.
//!
//! Mapping (vLLM's conventions kept where they differ from isobench's own):
//! - `duration` is the measured window (what the rates divide by).
//! - `failed` counts every measured request that did not complete,
//!   cancelled ones included (vLLM has no separate cancelled count).
//! - `request_goodput` is `null` without SLOs, as in vLLM.
//! - `ttft`, `tpot`, `e2el` come from the send-time histograms; `itl` is the
//!   per-event view (vLLM's ITL is one gap per streamed chunk).
//! - `median_*` is p50; `std_*` the population standard deviation.
//! - A metric without samples reads 0, as vLLM writes it; the nested
//!   `summary.latency` has `null` there.
//!
//! Not provided: vLLM's per-request arrays (`ttfts`, `itls`, ...; isobench
//! writes a per-request JSONL log instead) and `max_output_tokens_per_s` /
//! `max_concurrent_requests`.

use isobench_metrics::{LatencyStats, Summary};
use serde_json::{Map, Value};

/// The run-level keys, in CSV column order.
const RUN_KEYS: [&str; 9] = [
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
];

/// The latency metrics, as vLLM names them.
const METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];

/// The statistic prefixes of each metric, as vLLM spells them
/// (`p99.9` for the 99.9th percentile).
const STATISTICS: [&str; 8] = ["mean", "median", "std", "p50", "p90", "p95", "p99", "p99.9"];

/// Every flat key, in CSV column order: the run-level keys, then for each
/// metric `mean_`, `median_`, `std_`, `p50_` ... `p99.9_` + metric + `_ms`.
pub fn key_names() -> Vec<String> {
    let latency_keys = METRICS.iter().flat_map(|metric| {
        STATISTICS
            .iter()
            .map(move |statistic| format!("{statistic}_{metric}_ms"))
    });
    RUN_KEYS
        .iter()
        .map(|key| key.to_string())
        .chain(latency_keys)
        .collect()
}

/// The flat keys' values for a summary.
pub fn flat_keys(summary: &Summary) -> Map<String, Value> {
    let requests = &summary.requests;
    let throughput = &summary.throughput;
    let mut keys = Map::new();
    let mut put = |key: &str, value: Value| {
        keys.insert(key.to_owned(), value);
    };
    put("duration", summary.window_s.into());
    put("completed", requests.completed.into());
    put("failed", (requests.failed + requests.cancelled).into());
    put("total_input_tokens", summary.tokens.input.into());
    put("total_output_tokens", summary.tokens.output.into());
    put("request_throughput", throughput.requests_per_s.into());
    put("request_goodput", throughput.goodput_requests_per_s.into());
    put("output_throughput", throughput.output_tokens_per_s.into());
    put(
        "total_token_throughput",
        throughput.total_tokens_per_s.into(),
    );

    let latency = &summary.latency;
    let by_metric = [
        &latency.ttft,
        &latency.tpot,
        &latency.itl_per_event,
        &latency.e2e,
    ];
    for (metric, stats) in METRICS.iter().zip(by_metric) {
        let values = stats.as_ref().map_or([0.0; 8], statistics);
        for (statistic, value) in STATISTICS.iter().zip(values) {
            put(&format!("{statistic}_{metric}_ms"), value.into());
        }
    }
    keys
}

/// The values for [`STATISTICS`], in its order.
fn statistics(stats: &LatencyStats) -> [f64; 8] {
    [
        stats.mean_ms,
        stats.p50_ms,
        stats.stddev_ms,
        stats.p50_ms,
        stats.p90_ms,
        stats.p95_ms,
        stats.p99_ms,
        stats.p99_9_ms,
    ]
}
