//! Batching must not change what a request generates: for every policy,
//! concurrent greedy requests produce exactly the text each produces alone,
//! also when the KV pool is so small that sequences are preempted and
//! recomputed; and every block is back on the free list afterwards. And
//! they really were batched: the engine's batch-size histogram shows steps
//! of several sequences, never more than the policy allows.

mod common;

use std::time::Duration;

use common::{PROMPTS, completion_text, greedy, start, wait_until_all_blocks_free};
use futures_util::future::join_all;
use isobench_server::{BatchingConfig, KvPoolSize, ServerConfig, ServerHandle};

/// Output lengths differ so that sequences finish at different steps;
/// `base` sets how long they run.
fn max_tokens(base: u32, index: usize) -> u32 {
    base + 3 * index as u32
}

/// Each prompt's (text, completion tokens), sent one after another.
async fn one_at_a_time(server: &ServerHandle, base: u32) -> Vec<(String, u64)> {
    let mut outputs = Vec::new();
    for (i, prompt) in PROMPTS.iter().enumerate() {
        outputs.push(completion_text(server, &greedy(server, prompt, max_tokens(base, i))).await);
    }
    outputs
}

/// The same prompts, all at once.
async fn all_at_once(server: &ServerHandle, base: u32) -> Vec<(String, u64)> {
    let requests = PROMPTS.iter().enumerate().map(|(i, prompt)| async move {
        completion_text(server, &greedy(server, prompt, max_tokens(base, i))).await
    });
    join_all(requests).await
}

async fn check_batching_keeps_solo_outputs(
    configure: impl FnOnce(&mut ServerConfig),
) -> ServerHandle {
    check_solo_outputs_with_lengths(configure, 10, 4).await
}

/// The value of the `/metrics` line that starts with `prefix`.
fn metric(server: &ServerHandle, prefix: &str) -> u64 {
    let text = server.metrics_text();
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` in /metrics:\n{text}"))
}

/// Engine steps so far: (all, of one sequence, of at most `limit`), from
/// the `isobench_batch_size` histogram of `/metrics`.
fn batch_steps(server: &ServerHandle, limit: usize) -> (u64, u64, u64) {
    (
        metric(server, "isobench_batch_size_count "),
        metric(server, "isobench_batch_size_bucket{le=\"1\"} "),
        metric(
            server,
            &format!("isobench_batch_size_bucket{{le=\"{limit}\"}} "),
        ),
    )
}

/// Runs the prompts alone, then all at once, on a server that `configure`
/// sets up to run at most `most` sequences a step.
async fn check_solo_outputs_with_lengths(
    configure: impl FnOnce(&mut ServerConfig),
    base: u32,
    most: u32,
) -> ServerHandle {
    let server = start(configure).await;
    // The histogram's buckets are powers of two.
    let limit = most.next_power_of_two() as usize;
    let alone = one_at_a_time(&server, base).await;
    for (i, (text, tokens)) in alone.iter().enumerate() {
        assert_eq!(*tokens, max_tokens(base, i) as u64, "request {i}: {text:?}");
    }
    let (steps_alone, single_alone, _) = batch_steps(&server, limit);
    assert_eq!(
        steps_alone, single_alone,
        "one at a time: one sequence a step"
    );
    let together = all_at_once(&server, base).await;
    assert_eq!(together, alone);
    let (steps, single, within_limit) = batch_steps(&server, limit);
    assert!(
        steps - single > 0,
        "{} steps for the concurrent requests, none with more than one sequence",
        steps - steps_alone
    );
    assert_eq!(
        within_limit, steps,
        "a step ran more than {limit} sequences"
    );
    wait_until_all_blocks_free(&server).await;
    server
}

#[tokio::test]
async fn static_batching_keeps_solo_outputs() {
    // 8 tokens a step: every batch's prompts (the second alone is more
    // than 8 tokens) are prefilled over several steps, beside the decodes
    // of those whose prompts are done.
    let server = check_batching_keeps_solo_outputs(|c| {
        c.batching = BatchingConfig::Static {
            max_batch_size: 4,
            max_num_batched_tokens: 8,
        }
    })
    .await;
    assert_eq!(
        metric(&server, "isobench_step_tokens_bucket{le=\"8\"} "),
        metric(&server, "isobench_step_tokens_count "),
        "a step computed more than 8 tokens"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn dynamic_batching_keeps_solo_outputs() {
    let server = check_batching_keeps_solo_outputs(|c| {
        c.batching = BatchingConfig::Dynamic {
            max_batch_size: 4,
            max_wait: Duration::from_millis(20),
            max_num_batched_tokens: 8192,
        }
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn continuous_batching_with_chunked_prefill_keeps_solo_outputs() {
    // A 16-token budget splits the longer prompts into chunks mixed with decodes.
    let server = check_batching_keeps_solo_outputs(|c| {
        c.batching = BatchingConfig::Continuous {
            max_num_seqs: 4,
            max_num_batched_tokens: 16,
        }
    })
    .await;
    server.shutdown().await;
}

/// A pool of 20 blocks of 4 tokens: each request (at most 20 prompt tokens
/// and 45 generated) fits alone, but not all at once.
fn tiny_pool(config: &mut ServerConfig) {
    config.block_size = 4;
    config.kv_pool = KvPoolSize::Blocks(20);
}

#[tokio::test]
async fn preemption_under_continuous_batching_keeps_outputs_and_frees_every_block() {
    let server = check_solo_outputs_with_lengths(
        |c| {
            tiny_pool(c);
            c.batching = BatchingConfig::Continuous {
                max_num_seqs: 6,
                max_num_batched_tokens: 64,
            };
        },
        30,
        6,
    )
    .await;
    let stats = server.stats();
    assert!(stats.preemptions > 0, "the pool never ran out: {stats:?}");
    assert_eq!(stats.kv_blocks_free, 20);
    assert!(
        server
            .metrics_text()
            .contains(&format!("isobench_preemptions_total {}", stats.preemptions))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn preemption_under_static_batching_keeps_outputs_and_frees_every_block() {
    let server = check_solo_outputs_with_lengths(
        |c| {
            tiny_pool(c);
            c.batching = BatchingConfig::Static {
                max_batch_size: 6,
                max_num_batched_tokens: 16,
            };
        },
        30,
        6,
    )
    .await;
    let stats = server.stats();
    assert!(stats.preemptions > 0, "the pool never ran out: {stats:?}");
    assert_eq!(stats.kv_blocks_free, 20);
    server.shutdown().await;
}

#[tokio::test]
async fn client_that_disconnects_mid_stream_frees_its_blocks() {
    let server = start(|_| {}).await;
    let mut body = greedy(&server, PROMPTS[1], 1000);
    body["stream"] = true.into();
    body.as_object_mut().unwrap().remove("max_tokens");
    let mut response = common::post(&server, "/v1/completions", &body).await;
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().expect("a first chunk");
    assert!(first.starts_with(b"data: "));
    // A second chunk comes a step later, after the gauges were published.
    response.chunk().await.unwrap().expect("a second chunk");
    let stats = server.stats();
    assert_eq!(stats.requests_running, 1);
    assert!(stats.kv_blocks_free < stats.kv_blocks_total, "{stats:?}");
    drop(response);
    wait_until_all_blocks_free(&server).await;
    assert!(
        server
            .metrics_text()
            .contains("isobench_requests_total{status=\"cancelled\"} 1\n")
    );
    server.shutdown().await;
}
