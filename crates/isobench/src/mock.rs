//! `isobench mock`: the synthetic endpoint until Ctrl-C.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use isobench_mock::{MockConfig, MockServer};

#[derive(clap::Args)]
pub struct MockArgs {
    /// Address to listen on (loopback by default).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    host: IpAddr,
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 8001)]
    port: u16,
    #[command(flatten)]
    config: MockConfig,
}

pub async fn mock(args: MockArgs) -> anyhow::Result<ExitCode> {
    let mock = MockServer::start(args.config, SocketAddr::new(args.host, args.port)).await?;
    eprintln!(
        "isobench mock: serving at {}/v1 (Ctrl-C to stop)",
        mock.url()
    );
    crate::ctrl_c().await;
    mock.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
