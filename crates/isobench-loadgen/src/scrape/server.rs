//! The server's own view of a run, read from its Prometheus metrics: how
//! many requests it runs and queues, how full its KV cache is, and how big
//! its batches are. Each server names these its own way:
//!
//! | | running | waiting | KV cache in use (0-1) | batch |
//! |---|---|---|---|---|
//! | isobench | `isobench_requests_running` | `isobench_requests_waiting` | `isobench_kv_blocks_used` / `isobench_kv_blocks_total` | `isobench_batch_size` histogram |
//! | vLLM | `vllm:num_requests_running` | `vllm:num_requests_waiting` | `vllm:kv_cache_usage_perc` (older `vllm:gpu_cache_usage_perc`) | - |
//! | TGI | `tgi_batch_current_size` | `tgi_queue_size` | - | - |
//! | SGLang | `sglang:num_running_reqs` | `sglang:num_queue_reqs` | `sglang:token_usage` | - |
//!
//! Gauges of several series (vLLM's per-engine or per-model labels) are
//! summed, the KV fraction averaged. The batch histogram is cumulative:
//! the mean batch between two scrapes is the difference of its sums over
//! the difference of its counts ([`ServerSample::mean_batch_since`]).

use serde::{Deserialize, Serialize};

use super::prometheus::Exposition;

/// Which server's names a page used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerFlavour {
    Isobench,
    Vllm,
    Tgi,
    Sglang,
}

/// The names one server uses, in the table's order.
struct Names {
    flavour: ServerFlavour,
    running: &'static str,
    waiting: &'static str,
    kv_usage: &'static [&'static str],
}

const FLAVOURS: [Names; 4] = [
    Names {
        flavour: ServerFlavour::Isobench,
        running: "isobench_requests_running",
        waiting: "isobench_requests_waiting",
        kv_usage: &[],
    },
    Names {
        flavour: ServerFlavour::Vllm,
        running: "vllm:num_requests_running",
        waiting: "vllm:num_requests_waiting",
        kv_usage: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    },
    Names {
        flavour: ServerFlavour::Tgi,
        running: "tgi_batch_current_size",
        waiting: "tgi_queue_size",
        kv_usage: &[],
    },
    Names {
        flavour: ServerFlavour::Sglang,
        running: "sglang:num_running_reqs",
        waiting: "sglang:num_queue_reqs",
        kv_usage: &["sglang:token_usage"],
    },
];

/// One scrape's server view. Every figure is optional: servers differ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerSample {
    pub flavour: ServerFlavour,
    /// Requests (sequences) the server is running.
    pub running: Option<f64>,
    /// Requests waiting to be admitted.
    pub waiting: Option<f64>,
    /// The share of the KV cache in use, 0 to 1.
    pub kv_usage: Option<f64>,
    /// The isobench server's batch-size histogram: cumulative sum and count.
    batch_sum: Option<f64>,
    batch_count: Option<f64>,
}

impl ServerSample {
    /// The server view of a page; `None` when it has none of the names.
    pub fn of(page: &Exposition) -> Option<Self> {
        let names = FLAVOURS.iter().find(|names| {
            page.value(names.running).is_some() || page.value(names.waiting).is_some()
        })?;
        let mut kv_usage = names.kv_usage.iter().find_map(|name| page.mean(name));
        if names.flavour == ServerFlavour::Isobench {
            kv_usage = page
                .value("isobench_kv_blocks_used")
                .zip(page.value("isobench_kv_blocks_total"))
                .filter(|(_, total)| *total > 0.0)
                .map(|(used, total)| used / total);
        }
        Some(Self {
            flavour: names.flavour,
            running: page.sum(names.running),
            waiting: page.sum(names.waiting),
            kv_usage,
            batch_sum: page.value("isobench_batch_size_sum"),
            batch_count: page.value("isobench_batch_size_count"),
        })
    }

    /// The mean sequences per engine step since `earlier`; `None` without
    /// a batch histogram or without a step in between.
    pub fn mean_batch_since(&self, earlier: &ServerSample) -> Option<f64> {
        let steps = self.batch_count? - earlier.batch_count?;
        let sum = self.batch_sum? - earlier.batch_sum?;
        (steps > 0.0).then(|| sum / steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_servers_names_are_read() {
        let vllm = Exposition::parse(
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
             vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n\
             vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 7.0\n\
             vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n",
        );
        let s = ServerSample::of(&vllm).unwrap();
        assert_eq!(s.flavour, ServerFlavour::Vllm);
        assert_eq!(
            (s.running, s.waiting, s.kv_usage),
            (Some(5.0), Some(7.0), Some(0.25))
        );

        let tgi = Exposition::parse("tgi_queue_size 4\ntgi_batch_current_size 8\n");
        let s = ServerSample::of(&tgi).unwrap();
        assert_eq!(
            (s.flavour, s.running, s.waiting, s.kv_usage),
            (ServerFlavour::Tgi, Some(8.0), Some(4.0), None)
        );

        let sglang = Exposition::parse(
            "sglang:num_running_reqs 2\nsglang:num_queue_reqs 0\nsglang:token_usage 0.5\n",
        );
        assert_eq!(ServerSample::of(&sglang).unwrap().kv_usage, Some(0.5));

        let isobench = |steps: u64, sum: u64| {
            Exposition::parse(&format!(
                "isobench_requests_running 4\nisobench_requests_waiting 1\n\
                 isobench_kv_blocks_total 200\nisobench_kv_blocks_used 50\n\
                 isobench_batch_size_sum {sum}\nisobench_batch_size_count {steps}\n"
            ))
        };
        let early = ServerSample::of(&isobench(10, 20)).unwrap();
        let late = ServerSample::of(&isobench(30, 100)).unwrap();
        assert_eq!(late.kv_usage, Some(0.25));
        assert_eq!(late.mean_batch_since(&early), Some(4.0));
        assert_eq!(early.mean_batch_since(&early), None);

        assert_eq!(
            ServerSample::of(&Exposition::parse("process_cpu_seconds_total 1\n")),
            None
        );
    }
}
