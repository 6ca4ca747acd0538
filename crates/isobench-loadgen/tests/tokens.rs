//! Output tokens are counted from the best source: the server's `usage`,
//! else a tokenizer hook, else one per content event; chunked events (k
//! tokens each) keep one arrival per event and, with per-event usage, the
//! tokens of each.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::written::*;
use common::*;
use isobench_loadgen::{RunOptions, TokenCounter};
use isobench_mock::MockConfig;
use isobench_workload::{ApiKind, PlannedRequest, Prompt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_events_count_every_token() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:2"),
        tokens_per_event: dist("fixed:4"),
        itl: dist("fixed:1"),
        record_writes: true,
        ..MockConfig::default()
    })
    .await;
    let plan = open_plan(4, Duration::from_millis(2), 16);
    let (_, lines, exchanges) =
        run_against_writes(plan, backend(&mock.url()), RunOptions::default(), &mock).await;
    assert_eq!(exchanges.len(), 4);
    for line in &lines {
        assert_eq!(line["events"], 4, "{line}");
        assert_eq!(line["output_tokens"], 16);
        assert_eq!(line["token_source"], "usage");
        assert!(
            line.get("event_tokens").is_none(),
            "unknown without per-event usage"
        );
        assert_eq!(line["itl_ms"].as_array().unwrap().len(), 3, "{line}");
    }
    // Four tokens per event: the mock wrote each event four ITLs after the
    // one before (or later), and the client measured the span from the
    // first event to the last as the mock wrote it.
    assert_never_early(&exchanges, 2.0, 4.0);
    let span_errors: Vec<f64> = exchanges.iter().map(|e| e.span_error_ms().abs()).collect();
    assert_small("|measured - written span|", &span_errors);

    let mut per_event = backend(&mock.url());
    per_event.continuous_usage = true;
    let plan = open_plan(2, Duration::from_millis(2), 10);
    let (_, lines) = run_logged(plan, per_event, RunOptions::default()).await;
    for line in &lines {
        assert_eq!(line["event_tokens"], serde_json::json!([4, 4, 2]), "{line}");
    }
}

/// One token per word, standing in for a real tokenizer.
struct Words;

impl TokenCounter for Words {
    fn token_ends(&self, text: &str) -> Option<Vec<usize>> {
        let mut ends = Vec::new();
        let mut in_word = false;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() && in_word {
                ends.push(i);
            }
            in_word = !c.is_whitespace();
        }
        if in_word {
            ends.push(text.len());
        }
        Some(ends)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_usage_tokens_come_from_the_tokenizer_or_the_events() {
    let stream = "data: {\"choices\":[{\"text\":\"one two\"}]}\n\n\
                  data: {\"choices\":[{\"text\":\" three\",\"finish_reason\":\"length\"}]}\n\n\
                  data: [DONE]\n\n"
        .to_owned();
    let url = canned_server(200, "text/event-stream", stream, &[]).await;
    let plan = open_plan(2, Duration::ZERO, 8);
    let (outcome, lines) = run_logged(plan, backend(&url), RunOptions::default()).await;
    assert_eq!(outcome.counts().completed, 2, "{lines:?}");
    assert_eq!(lines[0]["token_source"], "events");
    assert_eq!(lines[0]["output_tokens"], 2);

    let mut counted = backend(&url);
    counted.token_counter = Some(Arc::new(Words));
    let plan = open_plan(2, Duration::ZERO, 8);
    let (_, lines) = run_logged(plan, counted, RunOptions::default()).await;
    assert_eq!(lines[0]["token_source"], "tokenizer");
    assert_eq!(lines[0]["output_tokens"], 3);
    assert_eq!(
        lines[0]["event_tokens"],
        serde_json::json!([2, 1]),
        "split by the tokenizer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_conversations_reach_the_chat_endpoint() {
    let mock = mock(MockConfig::default()).await;
    let mut config = backend(&mock.url());
    config.api = ApiKind::Chat;
    let mut plan = open_plan(1, Duration::ZERO, 3);
    plan.requests = Box::new(std::iter::once(PlannedRequest {
        prompt: Prompt::Chat(vec![
            ("system".into(), "be brief".into()),
            ("user".into(), "hello there".into()),
        ]),
        ..planned(0, Some(Duration::ZERO), 3)
    }));
    let (outcome, lines) = run_logged(plan, config, RunOptions::default()).await;
    assert_eq!(outcome.counts().completed, 1, "{lines:?}");
    assert_eq!(lines[0]["output_tokens"], 3);
    // The server's usage replaces the plan's estimate (the mock counts words).
    assert_eq!(lines[0]["input_tokens"], 4);
}
