//! Shutdown drains: requests in flight finish within `--shutdown-timeout`,
//! new connections are refused, and requests still running at the timeout
//! end with a proper error (an SSE error event then `[DONE]`, or a 503).

mod common;

use std::time::Duration;

use common::{PROMPTS, greedy, json_body, post, read_stream, start};
use isobench_server::BatchingConfig;

#[tokio::test]
async fn requests_in_flight_finish_and_new_connections_are_refused() {
    let server = start(|c| c.limits.shutdown_timeout = Duration::from_secs(120)).await;
    let addr = server.addr();
    let mut body = greedy(&server, PROMPTS[1], 24);
    body["stream"] = true.into();
    let mut response = post(&server, "/v1/completions", &body).await;
    let first = response.chunk().await.unwrap().expect("the stream started");
    let shutdown = tokio::spawn(server.shutdown());
    let mut text = String::from_utf8(first.to_vec()).unwrap();
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(!text.contains("\"error\""), "{text}");
    tokio::time::timeout(Duration::from_secs(60), shutdown)
        .await
        .expect("shutdown returns once the stream ended")
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "a connection was accepted after shutdown"
    );
}

#[tokio::test]
async fn requests_still_running_at_the_timeout_end_with_an_error() {
    // A dynamic batch that waits an hour for a third request: the two
    // below stay queued until shutdown ends them.
    let server = start(|c| {
        c.batching = BatchingConfig::Dynamic {
            max_batch_size: 3,
            max_wait: Duration::from_secs(3600),
            max_num_batched_tokens: 8192,
        };
        c.limits.shutdown_timeout = Duration::from_millis(100);
    })
    .await;
    let mut streamed = greedy(&server, PROMPTS[0], 8);
    streamed["stream"] = true.into();
    let stream = post(&server, "/v1/completions", &streamed).await;
    let whole_body = greedy(&server, PROMPTS[2], 8);
    let whole = {
        let url = server.url();
        tokio::spawn(async move {
            common::client()
                .post(format!("{url}/v1/completions"))
                .header("content-type", "application/json")
                .body(whole_body.to_string())
                .send()
                .await
                .unwrap()
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.stats().requests_waiting < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            server.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::timeout(Duration::from_secs(60), server.shutdown())
        .await
        .expect("shutdown ends what is left");

    let (events, done) = read_stream(stream).await;
    assert!(done, "the stream ends with [DONE]");
    let error = &events.last().expect("an error event")["error"];
    assert_eq!(error["type"], "server_error", "{events:?}");
    assert!(
        error["message"].as_str().unwrap().contains("shutting down"),
        "{error}"
    );
    let whole = whole.await.unwrap();
    assert_eq!(whole.status(), 503);
    let body = json_body(whole).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--shutdown-timeout"),
        "{body}"
    );
}
