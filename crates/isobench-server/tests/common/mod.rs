//! Shared helpers: start a server on 127.0.0.1:0 with models/tiny-llama,
//! and send requests to it with reqwest.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;
use std::time::{Duration, Instant};

use isobench_server::{Server, ServerConfig, ServerHandle};
use serde_json::{Value, json};

pub fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny-llama")
}

/// A server on a free port with the tiny model and `configure`'s changes.
pub async fn start(configure: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut config = ServerConfig::new(tiny_model());
    config.port = 0;
    config.kv_pool = isobench_server::KvPoolSize::Blocks(256);
    configure(&mut config);
    Server::start(config).await.expect("server starts")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A greedy completion request of exactly `max_tokens` tokens.
pub fn greedy(server: &ServerHandle, prompt: &str, max_tokens: u32) -> Value {
    json!({
        "model": server.model_name(),
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
    })
}

pub async fn post(server: &ServerHandle, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// The response body as JSON.
pub async fn json_body(response: reqwest::Response) -> Value {
    let text = response.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"))
}

/// POSTs and returns the JSON body, asserting 200.
pub async fn post_ok(server: &ServerHandle, path: &str, body: &Value) -> Value {
    let response = post(server, path, body).await;
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The generated text and completion token count of a completion.
pub async fn completion_text(server: &ServerHandle, body: &Value) -> (String, u64) {
    let response = post_ok(server, "/v1/completions", body).await;
    let text = response["choices"][0]["text"].as_str().unwrap().to_owned();
    let tokens = response["usage"]["completion_tokens"].as_u64().unwrap();
    (text, tokens)
}

/// Reads a whole SSE stream; returns the `data:` payloads (without `[DONE]`)
/// and whether `[DONE]` ended it.
pub async fn read_stream(response: reqwest::Response) -> (Vec<Value>, bool) {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = response.text().await.unwrap();
    let mut events = Vec::new();
    let mut done = false;
    for block in body.split("\n\n").filter(|b| !b.is_empty()) {
        let data = block
            .strip_prefix("data: ")
            .expect("every event is a data line");
        if data == "[DONE]" {
            done = true;
        } else {
            assert!(!done, "event after [DONE]");
            events.push(serde_json::from_str(data).unwrap());
        }
    }
    (events, done)
}

/// Waits (up to 10 s) until the engine is idle with every block free.
pub async fn wait_until_all_blocks_free(server: &ServerHandle) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = server.stats();
        if stats.kv_blocks_free == stats.kv_blocks_total
            && stats.requests_running == 0
            && stats.requests_waiting == 0
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "blocks never came back: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub const PROMPTS: [&str; 6] = [
    "The quick brown fox",
    "Once upon a time, in a land far away, there lived",
    "Rust is a language",
    "1, 2, 3, 4,",
    "In the beginning the Universe was created. This has made a lot of people very angry",
    "Hello",
];
