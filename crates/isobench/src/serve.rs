//! `isobench serve`: the embedded model server until Ctrl-C.

use std::process::ExitCode;

use anyhow::Context;
use isobench_server::{Server, ServerArgs};

pub async fn serve(args: ServerArgs) -> anyhow::Result<ExitCode> {
    let config = args.into_config()?;
    let model = config.model.display().to_string();
    let server = Server::start(config)
        .await
        .with_context(|| format!("starting the server for {model}"))?;
    eprintln!(
        "isobench serve: model {} at {}/v1 (Ctrl-C to stop)",
        server.model_name(),
        server.url()
    );
    crate::ctrl_c().await;
    eprintln!("shutting down");
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
