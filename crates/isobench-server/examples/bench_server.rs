//! Server benchmark: for each batching policy and concurrency, start the
//! server in-process on 127.0.0.1:0, drive it over HTTP with closed-loop
//! streaming clients (reqwest, one task per concurrent client), and print
//! output tokens/s with p50/p99 TTFT and TPOT, against the same model
//! generating one request at a time (static batching, batch size 1),
//! measured first and again last so that drift in the machine's load shows.
//!
//! ```text
//! cargo run --release -p isobench-server --example bench_server -- \
//!     [--model models/small-llama] [--profile short|long] [--requests-per-client 2]
//! ```
//!
//! Figures are printed, never asserted (see scripts/bench-server.sh).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use isobench_server::{BatchingConfig, KvPoolSize, Server, ServerConfig, ServerHandle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// Prompt and output lengths of one benchmark profile (tokens).
#[derive(Debug, Clone, Copy)]
struct Profile {
    name: &'static str,
    prompt_len: (u32, u32),
    output_len: u32,
}

const SHORT: Profile = Profile {
    name: "short",
    prompt_len: (16, 32),
    output_len: 64,
};
const LONG: Profile = Profile {
    name: "long",
    prompt_len: (512, 1024),
    output_len: 128,
};

/// One request's timings, from the moment it was sent.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttft: Duration,
    e2e: Duration,
    output_tokens: u32,
}

struct Args {
    model: PathBuf,
    profile: Profile,
    requests_per_client: usize,
    only: Option<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        model: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/small-llama"),
        profile: SHORT,
        requests_per_client: 2,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => args.model = value.into(),
            "--profile" => {
                args.profile = match value.as_str() {
                    "short" => SHORT,
                    "long" => LONG,
                    other => panic!("--profile {other}: accepted: short, long"),
                }
            }
            "--requests-per-client" => args.requests_per_client = value.parse().expect("a number"),
            "--only" => args.only = Some(value),
            other => panic!(
                "unknown flag {other}; accepted: --model, --profile, --requests-per-client, --only"
            ),
        }
    }
    args
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let runs: Vec<(&str, BatchingConfig, usize)> = {
        let static_32 = BatchingConfig::Static { max_batch_size: 32 };
        let dynamic_32 = BatchingConfig::Dynamic {
            max_batch_size: 32,
            max_wait: Duration::from_millis(50),
        };
        let continuous = BatchingConfig::Continuous {
            max_num_seqs: 32,
            max_num_batched_tokens: 512,
        };
        let mut runs = vec![(
            "one-at-a-time",
            BatchingConfig::Static { max_batch_size: 1 },
            1,
        )];
        for (name, policy) in [
            ("static", static_32),
            ("dynamic", dynamic_32),
            ("continuous", continuous),
        ] {
            for concurrency in [1, 8, 32] {
                runs.push((name, policy, concurrency));
            }
        }
        // The baseline again: how much the machine's load drifted meanwhile.
        runs.push((
            "one-at-a-time",
            BatchingConfig::Static { max_batch_size: 1 },
            1,
        ));
        runs
    };
    println!(
        "profile {}: prompts {}-{} tokens, {} output tokens (ignore_eos), {} requests per client, model {}",
        args.profile.name,
        args.profile.prompt_len.0,
        args.profile.prompt_len.1,
        args.profile.output_len,
        args.requests_per_client,
        args.model.display()
    );
    println!(
        "{:<14} {:>4} {:>9} {:>10} {:>10} {:>10} {:>10} {:>7}  {:>6}  mean step ms: schedule/prefill/decode/sample",
        "policy",
        "conc",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "preempt",
        "batch"
    );
    let mut baseline = None;
    for (name, batching, concurrency) in runs {
        if args
            .only
            .as_deref()
            .is_some_and(|only| only != name && name != "one-at-a-time")
        {
            continue;
        }
        let mut config = ServerConfig::new(&args.model);
        config.port = 0;
        config.batching = batching;
        config.kv_pool = KvPoolSize::Memory("2GiB".parse().expect("a size"));
        let server = Server::start(config).await.expect("server starts");
        warm_up(&server).await;
        let started = Instant::now();
        let timings = drive(&server, args.profile, concurrency, args.requests_per_client).await;
        let wall = started.elapsed();
        let output_tokens: u32 = timings.iter().map(|t| t.output_tokens).sum();
        let throughput = output_tokens as f64 / wall.as_secs_f64();
        let baseline_throughput = *baseline.get_or_insert(throughput);
        let ttfts: Vec<f64> = timings.iter().map(|t| t.ttft.as_secs_f64() * 1e3).collect();
        let tpots: Vec<f64> = timings
            .iter()
            .filter(|t| t.output_tokens > 1)
            .map(|t| (t.e2e - t.ttft).as_secs_f64() * 1e3 / (t.output_tokens - 1) as f64)
            .collect();
        let metrics = server.metrics_text();
        let step_ms = |phase: &str| {
            let sum = metric(
                &metrics,
                &format!("isobench_step_seconds_sum{{phase=\"{phase}\"}}"),
            );
            let count = metric(
                &metrics,
                &format!("isobench_step_seconds_count{{phase=\"{phase}\"}}"),
            );
            if count > 0.0 { sum / count * 1e3 } else { 0.0 }
        };
        let mean_batch = metric(&metrics, "isobench_batch_size_sum")
            / metric(&metrics, "isobench_batch_size_count");
        println!(
            "{:<14} {:>4} {:>9.1} {:>8.1}ms {:>8.1}ms {:>8.2}ms {:>8.2}ms {:>7}  {:>6.1}  {:.2}/{:.1}/{:.1}/{:.2}   ({:.2}x one-at-a-time)",
            name,
            concurrency,
            throughput,
            percentile(&ttfts, 0.50),
            percentile(&ttfts, 0.99),
            percentile(&tpots, 0.50),
            percentile(&tpots, 0.99),
            server.stats().preemptions,
            mean_batch,
            step_ms("schedule"),
            step_ms("prefill"),
            step_ms("decode"),
            step_ms("sample"),
            throughput / baseline_throughput,
        );
        server.shutdown().await;
    }
}

/// One short request so that lazy initialisation is not measured.
async fn warm_up(server: &ServerHandle) {
    let body = json!({"model": server.model_name(), "prompt": "warm up", "max_tokens": 2});
    let response = reqwest::Client::new()
        .post(format!("{}/v1/completions", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("warm-up request");
    assert!(response.status().is_success());
    let _ = response.bytes().await;
}

/// `concurrency` clients, each sending `per_client` requests back to back.
async fn drive(
    server: &ServerHandle,
    profile: Profile,
    concurrency: usize,
    per_client: usize,
) -> Vec<Timing> {
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.url());
    let clients = (0..concurrency).map(|worker| {
        let (client, url, model) = (client.clone(), url.clone(), server.model_name().to_owned());
        async move {
            let mut rng = StdRng::seed_from_u64(worker as u64);
            let mut timings = Vec::new();
            for _ in 0..per_client {
                let prompt_len = rng.random_range(profile.prompt_len.0..=profile.prompt_len.1);
                let prompt: Vec<u32> = (0..prompt_len)
                    .map(|_| rng.random_range(100..8000))
                    .collect();
                let body = json!({
                    "model": model, "prompt": prompt, "max_tokens": profile.output_len,
                    "temperature": 0, "ignore_eos": true, "stream": true,
                    "stream_options": {"include_usage": true},
                });
                timings.push(stream_one(&client, &url, body.to_string()).await);
            }
            timings
        }
    });
    join_all(clients).await.into_iter().flatten().collect()
}

/// Sends one streaming request and times its first content and its end.
async fn stream_one(client: &reqwest::Client, url: &str, body: String) -> Timing {
    let sent = Instant::now();
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request sent");
    assert!(
        response.status().is_success(),
        "status {}",
        response.status()
    );
    let mut ttft = None;
    let mut buffer = Vec::new();
    let mut output_tokens = 0;
    while let Some(chunk) = response.chunk().await.expect("stream readable") {
        buffer.extend_from_slice(&chunk);
        while let Some(end) = find_event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let data = event.strip_prefix(b"data: ").unwrap_or(&event);
            let data = &data[..data.len() - 2];
            if data == b"[DONE]" {
                continue;
            }
            let value: serde_json::Value = serde_json::from_slice(data).expect("a JSON chunk");
            let has_text = value["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty());
            if has_text && ttft.is_none() {
                ttft = Some(sent.elapsed());
            }
            if let Some(tokens) = value["usage"]["completion_tokens"].as_u64() {
                output_tokens = tokens as u32;
            }
        }
    }
    let e2e = sent.elapsed();
    Timing {
        ttft: ttft.unwrap_or(e2e),
        e2e,
        output_tokens,
    }
}

fn find_event_end(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|w| w == b"\n\n")
}

/// The value of one sample line of Prometheus text (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The `q` quantile by nearest rank.
fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
