//! The mock's HTTP surface as any client sees it: routes, answer shapes,
//! and the OpenAI error bodies of refused requests.

use std::time::{Duration, Instant};

use isobench_mock::{MockConfig, MockHandle, MockServer};
use serde_json::{Value, json};

async fn start(config: MockConfig) -> MockHandle {
    MockServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

async fn post(mock: &MockHandle, path: &str, body: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", mock.url()))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn health_models_and_whole_answers() {
    let mock = start(MockConfig {
        models: vec!["a".into(), "b".into()],
        ..MockConfig::default()
    })
    .await;
    let health = reqwest::get(format!("{}/health", mock.url()))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let models = reqwest::get(format!("{}/v1/models", mock.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][1]["id"], "b");

    let request = json!({"model": "a", "prompt": "one two three", "max_tokens": 3});
    let (status, body) = post(&mock, "/v1/completions", &request.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["choices"][0]["text"], " tok tok tok");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6})
    );

    let chat = json!({"model": "b", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2});
    let (status, body) = post(&mock, "/v1/chat/completions", &chat.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["choices"][0]["message"]["content"], " tok tok");
    assert_eq!(mock.stats().completed, 2);
}

#[tokio::test]
async fn streams_end_with_usage_then_done() {
    let mock = start(MockConfig {
        output_len: Some("fixed:2".parse().unwrap()),
        ..MockConfig::default()
    })
    .await;
    let request = json!({
        "model": "mock", "prompt": "x", "max_tokens": 50, "stream": true,
        "stream_options": {"include_usage": true}
    });
    let (status, body) = post(&mock, "/v1/completions", &request.to_string()).await;
    assert_eq!(status, 200);
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.len(), 4, "{body}");
    let last_content: Value = serde_json::from_str(events[1]).unwrap();
    assert_eq!(last_content["choices"][0]["finish_reason"], "length");
    let usage: Value = serde_json::from_str(events[2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 2);
    assert_eq!(events[3], "[DONE]");
}

#[tokio::test]
async fn refused_requests_get_openai_error_bodies() {
    let mock = start(MockConfig::default()).await;
    let (status, body) = post(&mock, "/v1/completions", "{not json").await;
    assert_eq!(status, 400);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");

    let request = json!({"model": "nope", "prompt": "x"});
    let (status, body) = post(&mock, "/v1/completions", &request.to_string()).await;
    assert_eq!(status, 404);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this mock serves: mock")
    );
    assert_eq!(mock.stats().invalid, 2);
}

#[tokio::test]
async fn a_whole_answer_waits_for_its_last_token() {
    let mock = start(MockConfig {
        ttft: "fixed:30".parse().unwrap(),
        itl: "fixed:10".parse().unwrap(),
        ..MockConfig::default()
    })
    .await;
    let request = json!({"model": "mock", "prompt": "x", "max_tokens": 3});
    let started = Instant::now();
    let (status, _) = post(&mock, "/v1/completions", &request.to_string()).await;
    assert_eq!(status, 200);
    // 30 ms + 2 x 10 ms: never earlier (later only by scheduling).
    assert!(started.elapsed() >= Duration::from_millis(50));
}

/// `--max-running 2` with a 100 ms service time: six requests at once are
/// served two at a time, the others wait in the queue (shown on
/// `/metrics` under vLLM's names), and each wave starts only when the one
/// before it wrote its answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_max_running_wait_their_turn() {
    let mock = start(MockConfig {
        ttft: "fixed:100".parse().unwrap(),
        max_running: Some(2),
        record_writes: true,
        ..MockConfig::default()
    })
    .await;
    let url = mock.url();
    let requests: Vec<_> = (0..6)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let body = json!({"model": "mock", "prompt": format!("r{i}"), "max_tokens": 1});
                reqwest::Client::new()
                    .post(format!("{url}/v1/completions"))
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let mut seen_queue = None;
    for _ in 0..200 {
        let page = reqwest::get(format!("{url}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let gauge = |name: &str| -> f64 {
            page.lines()
                .find(|line| line.starts_with(name))
                .and_then(|line| line.rsplit(' ').next())
                .unwrap()
                .parse()
                .unwrap()
        };
        let (running, waiting) = (
            gauge("vllm:num_requests_running{"),
            gauge("vllm:num_requests_waiting{"),
        );
        assert!(running <= 2.0, "{page}");
        if waiting > 0.0 {
            seen_queue = Some((running, waiting));
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (running, waiting) = seen_queue.expect("/metrics showed the queue");
    assert_eq!(running, 2.0);
    assert!(waiting >= 1.0);
    for request in requests {
        assert_eq!(request.await.unwrap(), 200);
    }
    let stats = mock.stats();
    assert_eq!((stats.completed, stats.rejected), (6, 0));
    assert_eq!(stats.peak_waiting, 4);
    let mut written: Vec<Instant> = mock
        .take_write_log()
        .iter()
        .map(|answer| answer.events[0])
        .collect();
    written.sort();
    for wave in [2, 4] {
        let gap = written[wave] - written[wave - 2];
        assert!(
            gap >= Duration::from_millis(100),
            "wave {wave}: {gap:?} after the one before"
        );
    }
    mock.shutdown().await;
}

#[test]
fn max_running_0_is_refused_naming_the_flag() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let err = runtime
        .block_on(MockServer::start(
            MockConfig {
                max_running: Some(0),
                ..MockConfig::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("--max-running"), "{err}");
}
