//! The engine's device flags and step metrics through the real server on
//! the CPU (the GPU side runs in scripts/gpu-bench.sh): every model step of
//! a CPU server counts as eager, none as a graph replay (the warm-up steps
//! before it listens are not counted), and asking for
//! CUDA on a build without it, or for a GPU memory share on the CPU, fails
//! to start with a message naming the flag.

mod common;

use isobench_server::{KvPoolSize, Server, ServerConfig};

/// The value of an unlabelled series in Prometheus text.
fn series(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn every_cpu_step_is_eager_and_none_replays_a_graph() {
    let server = common::start(|config| config.cuda_graphs = Some(true)).await;
    // The warm-up steps ran before the server listened, outside the
    // engine's counts.
    assert!(server.warm_up_time().is_some());
    // A CPU model replays no CUDA graphs, so none was captured.
    assert_eq!(server.graph_captures(), None);
    let before = server.metrics_text();
    assert_eq!(series(&before, "isobench_eager_steps_total"), 0);

    // One request alone: one prefill step, then a step per further token.
    let body = common::greedy(&server, "The quick brown fox", 6);
    let (_, tokens) = common::completion_text(&server, &body).await;
    assert_eq!(tokens, 6);
    let metrics = server.metrics_text();
    assert_eq!(
        series(&metrics, "isobench_eager_steps_total"),
        6,
        "{metrics}"
    );
    assert_eq!(series(&metrics, "isobench_cuda_graph_replays_total"), 0);
    assert_eq!(series(&metrics, "isobench_step_tokens_count"), 6);
    let prompt = series(&metrics, "isobench_prompt_tokens_total");
    assert_eq!(series(&metrics, "isobench_step_tokens_sum"), prompt + 5);
    assert!(
        metrics.contains("isobench_step_device_seconds_count{phase=\"decode\"} 0\n"),
        "no CUDA events on the CPU:\n{metrics}"
    );
    assert!(!metrics.contains("isobench_gpu_"), "{metrics}");
    server.shutdown().await;
}

async fn start_error(configure: impl FnOnce(&mut ServerConfig)) -> String {
    let mut config = ServerConfig::new(common::tiny_model());
    config.port = 0;
    configure(&mut config);
    Server::start(config)
        .await
        .expect_err("the server must not start")
        .to_string()
}

#[cfg(not(feature = "cuda"))]
#[tokio::test]
async fn cuda_without_the_feature_is_a_one_line_error_naming_the_flag() {
    let err = start_error(|config| config.device = "cuda:0".into()).await;
    assert_eq!(
        err,
        "--device: this isobench was built without CUDA support: rebuild with --features cuda (see docs/gpu.md)"
    );
}

#[tokio::test]
async fn bad_device_and_a_gpu_memory_share_on_the_cpu_are_refused() {
    let err = start_error(|config| config.device = "tpu".into()).await;
    assert!(
        err.starts_with("--device:") && err.contains("accepted: cpu, cuda, cuda:N"),
        "{err}"
    );
    let err = start_error(|config| config.kv_pool = KvPoolSize::DeviceFraction(0.5)).await;
    assert!(
        err.starts_with("--gpu-memory-fraction: applies only to --device cuda"),
        "{err}"
    );
}
