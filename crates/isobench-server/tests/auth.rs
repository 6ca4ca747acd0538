//! With an API key in the configured environment variable, `/v1/*` answers
//! 401 without the right bearer token; `/health` and `/metrics` stay open.
//! (Its own test binary: it sets an environment variable before any other
//! thread runs.)

mod common;

use serde_json::{Value, json};

const KEY_VAR: &str = "ISOBENCH_SERVER_TEST_API_KEY";

#[test]
fn api_key_is_required_when_set() {
    // SAFETY: the only test in this binary, run before the runtime starts
    // any thread, so nothing reads the environment concurrently.
    unsafe { std::env::set_var(KEY_VAR, "s3cret") };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = common::start(|c| c.api_key_env = KEY_VAR.into()).await;
        let client = common::client();
        let url = format!("{}/v1/completions", server.url());
        let body = json!({"model": server.model_name(), "prompt": "hi", "max_tokens": 2});

        for key in [None, Some("wrong"), Some("s3cret2")] {
            let mut request = client.post(&url).body(body.to_string());
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "key {key:?}");
            let error: Value = common::json_body(response).await;
            assert_eq!(error["error"]["type"], "authentication_error");
            let message = error["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(KEY_VAR) && message.contains("Bearer"),
                "{message}"
            );
            assert!(!message.contains("s3cret"), "the key must never be echoed");
        }
        let models = client
            .get(format!("{}/v1/models", server.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(models.status(), 401);

        let ok = client
            .post(&url)
            .bearer_auth("s3cret")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        let health = client
            .get(format!("{}/health", server.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let metrics = client
            .get(format!("{}/metrics", server.url()))
            .send()
            .await
            .unwrap();
        assert!(
            metrics
                .text()
                .await
                .unwrap()
                .contains("isobench_requests_total{status=\"authentication_error\"} 4\n")
        );
        server.shutdown().await;
    });
}
