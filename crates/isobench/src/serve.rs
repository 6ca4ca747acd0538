//! `isobench serve`: the embedded model server until Ctrl-C (SIGINT) or
//! SIGTERM (what Docker, Kubernetes and systemd send). Both drain the same
//! way: stop accepting, let requests in flight finish within
//! `--shutdown-timeout`, end the rest with an error event, exit 0.

use std::process::ExitCode;

use anyhow::Context;
use isobench_server::{Server, ServerArgs};

pub async fn serve(args: ServerArgs) -> anyhow::Result<ExitCode> {
    let config = args.into_config()?;
    let model = config.model.display().to_string();
    let (device, block_size) = (config.device.clone(), config.block_size);
    let server = Server::start(config)
        .await
        .with_context(|| format!("starting the server for {model}"))?;
    let warm_up = server
        .warm_up_time()
        .map(|took| format!(", warm-up steps {:.2} s", took.as_secs_f64()))
        .unwrap_or_default();
    let graphs = server
        .graph_captures()
        .map(|(graphs, took)| {
            format!(
                ", {graphs} CUDA graphs captured in {:.2} s",
                took.as_secs_f64()
            )
        })
        .unwrap_or_default();
    eprintln!(
        "isobench serve: model {} on {device}, KV pool {} blocks of {block_size} tokens{warm_up}{graphs}, at {}/v1 (Ctrl-C or SIGTERM to stop)",
        server.model_name(),
        server.stats().kv_blocks_total,
        server.url()
    );
    crate::interrupt_or_terminate().await;
    eprintln!("shutting down: waiting for requests in flight");
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
