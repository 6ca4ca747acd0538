//! The OpenAI-compatible API answered to a real HTTP client: both
//! endpoints streaming and not, usage, stop strings, the informational
//! endpoints, and every error a client can cause with its status and message.

mod common;

use common::{PROMPTS, client, greedy, json_body, post, post_ok, read_stream, start};
use isobench_server::BatchingConfig;
use serde_json::{Value, json};

#[tokio::test]
async fn completions_whole_and_streamed_agree() {
    let server = start(|_| {}).await;
    let body = greedy(&server, PROMPTS[0], 12);
    let whole = post_ok(&server, "/v1/completions", &body).await;
    assert_eq!(whole["object"], "text_completion");
    assert_eq!(whole["model"], server.model_name());
    assert_eq!(whole["choices"][0]["finish_reason"], "length");
    let text = whole["choices"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty());
    let usage = &whole["usage"];
    assert_eq!(usage["completion_tokens"], 12);
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 0);
    assert_eq!(usage["total_tokens"], prompt_tokens + 12);

    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    streamed["stream_options"] = json!({"include_usage": true});
    let (events, done) = read_stream(post(&server, "/v1/completions", &streamed).await).await;
    assert!(done);
    let (last, rest) = events.split_last().unwrap();
    assert_eq!(last["choices"], json!([]), "the usage chunk has no choices");
    assert_eq!(last["usage"], *usage);
    let joined: String = rest
        .iter()
        .map(|e| e["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);
    assert_eq!(
        rest.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
    assert!(rest.len() > 2, "tokens arrive as separate events");
    server.shutdown().await;
}

#[tokio::test]
async fn chat_whole_and_streamed_agree() {
    let server = start(|_| {}).await;
    let body = json!({
        "model": server.model_name(),
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
        "max_completion_tokens": 10,
        "temperature": 0,
        "ignore_eos": true,
    });
    let whole = post_ok(&server, "/v1/chat/completions", &body).await;
    assert_eq!(whole["object"], "chat.completion");
    let message = &whole["choices"][0]["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(whole["usage"]["completion_tokens"], 10);

    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    let (events, done) = read_stream(post(&server, "/v1/chat/completions", &streamed).await).await;
    assert!(done);
    assert_eq!(events[0]["object"], "chat.completion.chunk");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        events.iter().all(|e| e.get("usage").is_none()),
        "no usage unless asked"
    );
    let joined: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(joined, message["content"].as_str().unwrap());
    assert_eq!(
        events.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn stop_string_ends_generation_and_is_cut_from_the_text() {
    let server = start(|_| {}).await;
    let free = post_ok(&server, "/v1/completions", &greedy(&server, PROMPTS[2], 24)).await;
    let text = free["choices"][0]["text"].as_str().unwrap().to_owned();
    // Stop at a piece of the text the model generates anyway.
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 8, "{text:?}");
    let stop: String = chars[5..8].iter().collect();
    let expected_prefix = &text[..text.find(&stop).unwrap()];

    for stream in [false, true] {
        let mut body = greedy(&server, PROMPTS[2], 24);
        body["stop"] = json!([stop, "never-generated-xyz"]);
        body["stream"] = stream.into();
        body["stream_options"] = json!({"include_usage": true});
        let (got, finish, completion_tokens) = if stream {
            let (events, _) = read_stream(post(&server, "/v1/completions", &body).await).await;
            let text: String = events
                .iter()
                .filter_map(|e| e["choices"][0]["text"].as_str())
                .collect();
            let finish = events[events.len() - 2]["choices"][0]["finish_reason"].clone();
            (
                text,
                finish,
                events.last().unwrap()["usage"]["completion_tokens"].clone(),
            )
        } else {
            let whole = post_ok(&server, "/v1/completions", &body).await;
            let text = whole["choices"][0]["text"].as_str().unwrap().to_owned();
            (
                text,
                whole["choices"][0]["finish_reason"].clone(),
                whole["usage"]["completion_tokens"].clone(),
            )
        };
        assert_eq!(got, expected_prefix, "stream: {stream}");
        assert_eq!(finish, "stop");
        assert!(completion_tokens.as_u64().unwrap() < 24);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn same_seed_same_sampled_text() {
    let server = start(|_| {}).await;
    let body = json!({
        "model": server.model_name(),
        "prompt": PROMPTS[0],
        "max_tokens": 16,
        "temperature": 1.0,
        "top_p": 0.9,
        "top_k": 50,
        "seed": 1234,
        "ignore_eos": true,
    });
    let a = post_ok(&server, "/v1/completions", &body).await;
    let b = post_ok(&server, "/v1/completions", &body).await;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    server.shutdown().await;
}

#[tokio::test]
async fn models_health_and_metrics() {
    let server = start(|_| {}).await;
    let client = client();
    let models = json_body(
        client
            .get(format!("{}/v1/models", server.url()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny-llama");
    assert!(models["data"][0]["max_model_len"].as_u64().unwrap() > 0);
    let health = client
        .get(format!("{}/health", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    post_ok(&server, "/v1/completions", &greedy(&server, PROMPTS[3], 4)).await;
    let expected = [
        "isobench_requests_running 0\n",
        "isobench_requests_waiting 0\n",
        "isobench_kv_blocks_total 256\n",
        "isobench_kv_blocks_free 256\n",
        "isobench_kv_blocks_used 0\n",
        "isobench_preemptions_total 0\n",
        "isobench_generation_tokens_total 4\n",
        "isobench_requests_total{status=\"length\"} 1\n",
        "isobench_time_to_first_token_seconds_count 1\n",
        "isobench_time_per_output_token_seconds_count 3\n",
        "isobench_step_seconds_count{phase=\"prefill\"} 1\n",
        "isobench_step_seconds_count{phase=\"decode\"} 3\n",
        "isobench_step_seconds_count{phase=\"logits\"} 4\n",
        "isobench_step_seconds_count{phase=\"sample\"} 4\n",
        "isobench_step_seconds_count{phase=\"send\"} 4\n",
        "isobench_batch_size_count 4\n",
    ];
    // The engine retires a sequence (and updates the gauges) just after it
    // sends the last token: poll briefly until the scrape has caught up.
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = client
            .get(format!("{}/metrics", server.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if expected.iter().all(|line| metrics.contains(line)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for line in expected {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    // The engine slept before the request came and has slept since.
    let idle: f64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("isobench_engine_idle_seconds_total "))
        .expect("the engine's idle time")
        .parse()
        .unwrap();
    assert!(idle > 0.0, "{metrics}");
    server.shutdown().await;
}

/// Asserts an OpenAI error body: status, `error.type`, and message parts.
async fn expect_error(
    response: reqwest::Response,
    status: u16,
    kind: &str,
    message_parts: &[&str],
) -> Value {
    assert_eq!(response.status(), status);
    let body = json_body(response).await;
    let error = &body["error"];
    assert_eq!(error["type"], kind, "{body}");
    let message = error["message"].as_str().unwrap();
    for part in message_parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    body
}

#[tokio::test]
async fn bad_requests_get_400_naming_the_field() {
    let server = start(|c| c.max_body_bytes = 64 * 1024).await;
    let model = server.model_name().to_owned();
    let long_prompt = "word ".repeat(5000);
    let cases: Vec<(Value, &str, Vec<&str>)> = vec![
        (
            json!({"model": model, "prompt": "hi", "temperature": -1}),
            "temperature",
            vec![">= 0"],
        ),
        (
            json!({"model": model, "prompt": "hi", "top_p": 0}),
            "top_p",
            vec!["(0, 1]"],
        ),
        (
            json!({"model": model, "prompt": "hi", "top_k": -2}),
            "top_k",
            vec!["-1 or 0"],
        ),
        (
            json!({"model": model, "prompt": "hi", "n": 3}),
            "n",
            vec!["accepted: 1"],
        ),
        (
            json!({"model": model, "prompt": "hi", "max_tokens": 0}),
            "max_tokens",
            vec!["at least 1"],
        ),
        (
            json!({"model": model, "prompt": "hi", "max_tokens": 1_000_000}),
            "max_tokens",
            vec!["accepted: at most"],
        ),
        (
            json!({"model": model, "prompt": long_prompt}),
            "prompt",
            vec!["context"],
        ),
        (
            json!({"model": model, "prompt": [1, 2, 999_999]}),
            "prompt",
            vec!["999999", "vocabulary"],
        ),
        (
            json!({"model": model, "prompt": ["a", "b"]}),
            "prompt",
            vec!["one prompt"],
        ),
        (
            json!({"model": model, "prompt": "hi", "temperature": "hot"}),
            "temperature",
            vec!["wrong type"],
        ),
        (
            json!({"model": model, "prompt": "hi", "stop": [""]}),
            "stop",
            vec!["non-empty"],
        ),
        (
            json!({"model": model, "prompt": "hi", "logprobs": 2}),
            "logprobs",
            vec!["not supported"],
        ),
        (json!({"model": model}), "prompt", vec!["missing"]),
        // Regression: an empty string was tokenized to a lone BOS and answered.
        (
            json!({"model": model, "prompt": ""}),
            "prompt",
            vec!["empty"],
        ),
        (
            json!({"model": model, "prompt": []}),
            "prompt",
            vec!["empty"],
        ),
        // Regression: serde's "untagged enum PromptInput" said nothing of ids.
        (
            json!({"model": model, "prompt": [5, -1]}),
            "prompt",
            vec!["token id -1", "integers from 0"],
        ),
    ];
    for (body, param, parts) in cases {
        let error = expect_error(
            post(&server, "/v1/completions", &body).await,
            400,
            "invalid_request_error",
            &parts,
        )
        .await;
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let chat = json!({"model": model, "messages": []});
    expect_error(
        post(&server, "/v1/chat/completions", &chat).await,
        400,
        "invalid_request_error",
        &["messages"],
    )
    .await;

    let malformed = client()
        .post(format!("{}/v1/completions", server.url()))
        .header("content-type", "application/json")
        .body("{\"model\": ")
        .send()
        .await
        .unwrap();
    expect_error(malformed, 400, "invalid_request_error", &["not valid JSON"]).await;

    let form = client()
        .post(format!("{}/v1/completions", server.url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(greedy(&server, "hi", 2).to_string())
        .send()
        .await
        .unwrap();
    expect_error(
        form,
        415,
        "invalid_request_error",
        &[
            "application/x-www-form-urlencoded",
            "accepted: Content-Type: application/json",
        ],
    )
    .await;

    let huge = json!({"model": model, "prompt": "x".repeat(100 * 1024)});
    expect_error(
        post(&server, "/v1/completions", &huge).await,
        413,
        "invalid_request_error",
        &["65536-byte limit", "--max-body"],
    )
    .await;

    let metrics = server.metrics_text();
    assert!(
        metrics.contains("isobench_requests_total{status=\"invalid_request_error\"} 20\n"),
        "{metrics}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_model_gets_404() {
    let server = start(|_| {}).await;
    let body = json!({"model": "gpt-17", "prompt": "hi"});
    let error = expect_error(
        post(&server, "/v1/completions", &body).await,
        404,
        "not_found_error",
        &["gpt-17", "tiny-llama"],
    )
    .await;
    assert_eq!(error["error"]["param"], "model");
    server.shutdown().await;
}

#[tokio::test]
async fn request_that_could_never_fit_the_pool_gets_400() {
    let server = start(|c| {
        c.block_size = 4;
        c.kv_pool = isobench_server::KvPoolSize::Blocks(4);
    })
    .await;
    let body = greedy(&server, PROMPTS[0], 40);
    expect_error(
        post(&server, "/v1/completions", &body).await,
        400,
        "invalid_request_error",
        &["KV-cache pool", "16 tokens"],
    )
    .await;
    server.shutdown().await;
}

/// `--max-model-len 48` (3 blocks of 16, where the model has 2,048
/// tokens): a request that fills those 48 tokens exactly gets every token,
/// the same text as on a server of the model's whole context; one token
/// more is refused naming the flag; `/v1/models` reports 48.
#[tokio::test]
async fn max_model_len_bounds_requests_and_serves_them_whole() {
    let full = start(|_| {}).await;
    let limited = start(|c| c.max_model_len = Some(48)).await;
    let models = json_body(
        client()
            .get(format!("{}/v1/models", limited.url()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(models["data"][0]["max_model_len"], 48);
    let probe = post_ok(&full, "/v1/completions", &greedy(&full, PROMPTS[2], 1)).await;
    let prompt_tokens = probe["usage"]["prompt_tokens"].as_u64().unwrap() as u32;
    assert!(prompt_tokens < 40, "{prompt_tokens}");
    let fill = 48 - prompt_tokens;
    let body = greedy(&limited, PROMPTS[2], fill);
    let answer = post_ok(&limited, "/v1/completions", &body).await;
    assert_eq!(answer["usage"]["completion_tokens"], fill);
    let reference = post_ok(&full, "/v1/completions", &greedy(&full, PROMPTS[2], fill)).await;
    assert_eq!(
        answer["choices"][0]["text"],
        reference["choices"][0]["text"]
    );
    let over = greedy(&limited, PROMPTS[2], fill + 1);
    expect_error(
        post(&limited, "/v1/completions", &over).await,
        400,
        "invalid_request_error",
        &[
            "max_tokens",
            "48 tokens",
            "--max-model-len",
            &format!("at most {fill}"),
        ],
    )
    .await;
    full.shutdown().await;
    limited.shutdown().await;
}

#[tokio::test]
async fn full_waiting_queue_gets_429_with_retry_after() {
    // One running at a time and one waiting place.
    let server = start(|c| {
        c.batching = BatchingConfig::Static {
            max_batch_size: 1,
            max_num_batched_tokens: 8192,
        };
        c.max_waiting = 1;
    })
    .await;
    let mut long = greedy(&server, PROMPTS[1], 1000);
    long["stream"] = true.into();
    long.as_object_mut().unwrap().remove("max_tokens");
    let mut running = post(&server, "/v1/completions", &long).await;
    running
        .chunk()
        .await
        .unwrap()
        .expect("the first request runs");
    // Streaming responses start once the request is queued.
    let waiting = post(&server, "/v1/completions", &long).await;
    assert_eq!(waiting.status(), 200);
    let refused = post(&server, "/v1/completions", &greedy(&server, "hi", 2)).await;
    assert_eq!(refused.headers()["retry-after"], "1");
    expect_error(refused, 429, "rate_limit_error", &["--max-waiting"]).await;
    drop((running, waiting));
    common::wait_until_all_blocks_free(&server).await;
    assert!(
        server
            .metrics_text()
            .contains("isobench_requests_total{status=\"rate_limit_error\"} 1\n")
    );
    server.shutdown().await;
}
