//! Preflight fails fast, saying why: unreachable endpoint, wrong model
//! (listing what is served), refused key; it falls back to a one-token
//! request when `/v1/models` is not served. The API key travels in the
//! Authorization header and never shows in `Debug` output.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use isobench_loadgen::{HttpBackend, PreflightCheck, RunOptions};
use isobench_mock::MockConfig;

const KEY: &str = "sk-test-9f8e7d";

fn keyed_mock() -> MockConfig {
    MockConfig {
        models: vec!["mock".into(), "other".into()],
        api_key: Some(KEY.into()),
        ..MockConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_sent_and_never_shown() {
    let mock = mock(keyed_mock()).await;
    let mut config = backend(&mock.url());
    config.api_key = Some(KEY.into());
    let backend = HttpBackend::new(config.clone()).unwrap();
    assert!(!format!("{config:?} {backend:?}").contains(KEY));

    let check = backend.preflight().await.unwrap();
    assert_eq!(check, PreflightCheck::ModelList);
    let plan = open_plan(3, Duration::ZERO, 2);
    let outcome = isobench_loadgen::run(plan, Arc::new(backend), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.counts().completed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_key_is_refused() {
    let mock = mock(keyed_mock()).await;
    for key in [None, Some("sk-wrong".to_owned())] {
        let mut config = backend(&mock.url());
        config.api_key = key.clone();
        let err = HttpBackend::new(config)
            .unwrap()
            .preflight()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "key_refused", "{err}");
        let message = err.to_string();
        assert!(
            message.contains("HTTP 401") && message.contains("API key"),
            "{message}"
        );
        assert!(!message.contains("sk-wrong"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_model_lists_the_served_ones() {
    let mock = mock(keyed_mock()).await;
    let mut config = backend(&mock.url());
    config.api_key = Some(KEY.into());
    config.model = "gpt-5".into();
    let err = HttpBackend::new(config)
        .unwrap()
        .preflight()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unknown_model");
    assert!(err.to_string().contains("it serves: mock, other"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_says_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = HttpBackend::new(backend(&url))
        .unwrap()
        .preflight()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unreachable");
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_list_one_token_is_asked_for() {
    let answer = r#"{"choices":[{"text":"x","finish_reason":"length"}]}"#.to_owned();
    let url = canned_server(200, "application/json", answer, &["/v1/models"]).await;
    let check = HttpBackend::new(backend(&url))
        .unwrap()
        .preflight()
        .await
        .unwrap();
    assert_eq!(check, PreflightCheck::ProbeRequest);

    let rejected =
        r#"{"error":{"message":"The model `mock` does not exist.","type":"NotFoundError"}}"#;
    let url = canned_server(404, "application/json", rejected.to_owned(), &[]).await;
    let err = HttpBackend::new(backend(&url))
        .unwrap()
        .preflight()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unknown_model");
    assert!(err.to_string().contains("does not exist"), "{err}");
}
