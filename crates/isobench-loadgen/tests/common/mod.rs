//! Helpers shared by the integration tests: plans, a mock endpoint, a run
//! that returns the per-request log, and a canned raw-HTTP server for
//! answers the mock never gives (malformed events, no usage).

#![allow(dead_code)] // each test binary uses its own subset

pub mod faults;
pub mod written;

use std::sync::Arc;
use std::time::Duration;

use isobench_loadgen::{HttpBackend, HttpBackendConfig, RunOptions, RunOutcome, run};
use isobench_mock::{MockConfig, MockHandle, MockServer};
use isobench_workload::{LoadShape, Plan, PlannedRequest, Prompt, PromptTokens};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use written::{Capture, Exchange, match_writes};

pub const MODEL: &str = "mock";

pub fn dist(text: &str) -> isobench_workload::Distribution {
    text.parse().unwrap()
}

pub async fn mock(config: MockConfig) -> MockHandle {
    MockServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

pub fn backend(url: &str) -> HttpBackendConfig {
    let mut config = HttpBackendConfig::new(url, MODEL);
    config.timeout = Duration::from_secs(5);
    config
}

pub fn planned(index: u64, offset: Option<Duration>, max_tokens: u32) -> PlannedRequest {
    PlannedRequest {
        index,
        warmup: false,
        offset,
        prompt: Prompt::Text(format!("request {index}")),
        input_tokens: 2,
        max_tokens,
    }
}

/// `count` requests, one every `interval` from 0.
pub fn open_plan(count: u64, interval: Duration, max_tokens: u32) -> Plan {
    let requests = (0..count).map(move |i| planned(i, Some(interval * i as u32), max_tokens));
    Plan {
        shape: LoadShape {
            max_requests: Some(count),
            offered_rate: Some(1.0 / interval.as_secs_f64().max(1e-9)),
            description: "test open loop".into(),
            ..LoadShape::default()
        },
        prompt_tokens: PromptTokens::Approximate,
        requests: Box::new(requests),
    }
}

/// `count` requests sent by `concurrency` closed-loop slots.
pub fn closed_plan(count: u64, concurrency: usize, max_tokens: u32) -> Plan {
    let requests = (0..count).map(move |i| planned(i, None, max_tokens));
    Plan {
        shape: LoadShape {
            max_concurrency: Some(concurrency),
            max_requests: Some(count),
            description: "test closed loop".into(),
            ..LoadShape::default()
        },
        prompt_tokens: PromptTokens::Approximate,
        requests: Box::new(requests),
    }
}

/// Runs `plan` with a JSONL log and returns the outcome and the log's lines.
pub async fn run_logged(
    plan: Plan,
    config: HttpBackendConfig,
    options: RunOptions,
) -> (RunOutcome, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("requests.jsonl");
    let backend = Arc::new(HttpBackend::new(config).unwrap());
    let options = RunOptions {
        jsonl: Some(path.clone()),
        ..options
    };
    let outcome = run(plan, backend, options).await.unwrap();
    (outcome, read_log(&path))
}

/// Runs `plan` against `mock` (started with `record_writes`) with a JSONL
/// log; returns the outcome, the log's lines and every successful request
/// matched with the instants the mock wrote its events.
pub async fn run_against_writes(
    plan: Plan,
    config: HttpBackendConfig,
    options: RunOptions,
    mock: &MockHandle,
) -> (RunOutcome, Vec<Value>, Vec<Exchange>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("requests.jsonl");
    let backend = Arc::new(Capture::new(HttpBackend::new(config).unwrap()));
    let options = RunOptions {
        jsonl: Some(path.clone()),
        ..options
    };
    let outcome = run(plan, Arc::clone(&backend), options).await.unwrap();
    let lines = read_log(&path);
    let records = backend.records.lock().unwrap().clone();
    let exchanges = match_writes(&outcome, &records, mock);
    (outcome, lines, exchanges)
}

/// Timing checks hold this while they run, so that two of them never share
/// the machine's cores with each other (the tests of one binary run in
/// parallel).
pub async fn timing_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TIMING.lock().await
}

fn read_log(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A field of every line, as numbers (lines without it are skipped).
pub fn field(lines: &[Value], name: &str) -> Vec<f64> {
    lines.iter().filter_map(|l| l[name].as_f64()).collect()
}

/// Error labels of the lines, in order.
pub fn error_kinds(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l["error"]["kind"].as_str().map(str::to_owned))
        .collect()
}

/// A server on 127.0.0.1:0 that answers every request with `status`,
/// `content_type` and `body`, except paths starting with one of `not_found`
/// (404), then closes the connection.
pub async fn canned_server(
    status: u16,
    content_type: &'static str,
    body: String,
    not_found: &'static [&'static str],
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let head = read_request(&mut socket).await;
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, body) = if not_found.iter().any(|p| path.starts_with(p)) {
                    (
                        404,
                        r#"{"error":{"message":"no such route","type":"not_found"}}"#.to_owned(),
                    )
                } else {
                    (status, body)
                };
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

/// Reads one request (head and a content-length body); returns the head.
async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return text[..end].to_owned();
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}
