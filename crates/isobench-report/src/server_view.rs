//! The report's `server_metrics` section: the endpoint's own view of the
//! run, scraped from its Prometheus `/metrics` at a fixed interval
//! (`isobench run --scrape-metrics`): requests running and waiting, the
//! share of the KV cache in use, and the mean batch between scrapes. The
//! binary fills it from the load generator's scraper; plots put it on the
//! run's time line beside the client's figures.

use serde::{Deserialize, Serialize};

/// The scraped series, one entry per scrape in time order; a figure the
/// server does not report is `null` in every entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerMetrics {
    /// The page scraped.
    pub url: String,
    /// Whose metric names it had: `isobench`, `vllm`, `tgi` or `sglang`.
    pub source: String,
    /// The interval asked for between scrapes, in seconds.
    pub interval_s: f64,
    /// When each answer arrived, seconds since the run's start (the scrape
    /// taken before the first request is slightly negative).
    pub t_s: Vec<f64>,
    /// Requests the server was running.
    pub running: Vec<Option<f64>>,
    /// Requests waiting for admission: the server's queue.
    pub waiting: Vec<Option<f64>>,
    /// The share of the KV cache in use, 0 to 1.
    pub kv_usage: Vec<Option<f64>>,
    /// Mean sequences per engine step since the scrape before (the
    /// isobench server's batch-size histogram); `null` for the first entry
    /// and for other servers.
    pub batch_size: Vec<Option<f64>>,
}

impl ServerMetrics {
    /// The largest value of a series, for tables.
    pub fn peak(series: &[Option<f64>]) -> Option<f64> {
        series.iter().flatten().copied().reduce(f64::max)
    }

    /// The mean of a series' values, for tables.
    pub fn mean(series: &[Option<f64>]) -> Option<f64> {
        let values: Vec<f64> = series.iter().flatten().copied().collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
}
