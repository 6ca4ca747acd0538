//! `isobench`: measure LLM inference serving.
//!
//! The binary only wires the library crates together:
//! - `isobench run WORKLOAD`: replay a workload against an endpoint (or, with
//!   no `--target`, against the embedded model server started in-process)
//!   and report latency and throughput ([`run`]);
//! - `isobench serve`: the embedded OpenAI-compatible model server ([`serve`]);
//! - `isobench mock`: the synthetic endpoint with injected latency ([`mock`]);
//! - `isobench sweep WORKLOAD`: one measured step per load level, each from
//!   its steady-state window, ending in a table and a throughput-latency
//!   curve ([`sweep`]);
//! - `isobench plan WORKLOAD --slo ...`: the highest rate one replica
//!   sustains within the SLOs, and the replicas a target rate needs
//!   ([`plan`]);
//! - `isobench compare BASE.json NEW.json...`: reports side by side, with a
//!   verdict on whether each difference is statistically real ([`compare`]);
//! - `isobench summary REPORT.json...`: many runs, one row each ([`summary`]);
//! - `isobench report REPORT.json... --html FILE`: tables and plots ([`report`]).
//!
//! The measuring shared by `run`, `sweep` and `plan` is in [`measure`]
//! (the target in [`target`], the scraped metrics in [`observe`]).
//!
//! Flags: one convention. A library that runs on its own from the command
//! line defines its flags next to its configuration, as clap `Args`
//! structs that turn into its validated config (`isobench-server`:
//! `ServerArgs`, with `EngineArgs` and `BatchingArgs`; `isobench-mock`:
//! `MockConfig`); a subcommand here flattens them and adds only the flags
//! of its own wiring (`run`'s workload, target, overrides and outputs), so
//! `isobench run` and `isobench serve` share one definition and one set of
//! defaults for the embedded server.
//!
//! Exit codes: 0 success; 1 an SLO given on the command line was missed;
//! 2 an error (bad input, an output that cannot be written, unreachable
//! endpoint); 3 the run is invalid for its errors (`--max-error-rate`);
//! 130 interrupted by Ctrl-C (the report of what finished is still written
//! for 1, 3 and 130). docs/cli.md has the table.

mod compare;
mod default_model;
mod gpu;
mod measure;
mod mock;
mod observe;
mod plan;
mod report;
mod run;
mod serve;
mod step;
mod summary;
mod sweep;
mod target;
mod tokens;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "isobench", version, about = "Measure LLM inference serving")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a workload against an OpenAI-compatible endpoint and report latency and throughput.
    Run(Box<run::RunArgs>),
    /// Serve a model folder behind an OpenAI-compatible API, with a chosen batching policy.
    Serve(Box<isobench_server::ServerArgs>),
    /// Serve a synthetic OpenAI-compatible endpoint with injected latency, errors and chunking.
    Mock(Box<mock::MockArgs>),
    /// One measured step per load level (rates, concurrencies, or found automatically): a table and a curve.
    Sweep(Box<sweep::SweepArgs>),
    /// The highest request rate one replica sustains within the SLOs, and the replicas a target rate needs.
    Plan(Box<plan::PlanArgs>),
    /// Compare JSON reports with a baseline: each figure side by side, with a significance verdict.
    Compare(compare::CompareArgs),
    /// Several JSON reports, one row each: throughput and TTFT/TPOT side by side.
    Summary(summary::SummaryArgs),
    /// Tables of several JSON reports, as text or Markdown, and an HTML page with plots.
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    raise_open_file_limit();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ISOBENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(*args).await,
            Command::Serve(args) => serve::serve(*args).await,
            Command::Mock(args) => mock::mock(*args).await,
            Command::Sweep(args) => sweep::sweep(*args).await,
            Command::Plan(args) => plan::plan(*args).await,
            Command::Compare(args) => compare::compare(&args),
            Command::Summary(args) => summary::summary(&args),
            Command::Report(args) => report::report(&args),
        }
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", describe(&err));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes on one line, each cause once: some errors
/// already quote their source in their own message.
fn describe(err: &anyhow::Error) -> String {
    let mut message = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !message.contains(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
    }
    message
}

/// Each request in flight holds a socket (and the servers one per client):
/// raise the soft limit on open files to the hard one, which is what load
/// generators otherwise ask users to do with `ulimit -n`. Without it, a
/// high-rate open-loop run fails with `connect` errors ("Too many open
/// files") well below what the machine can do.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    // An unlimited hard limit still stops at the kernel's `nr_open` (2^20 by default).
    let target = limit.maximum.unwrap_or(1 << 20);
    if limit.current.is_some_and(|current| current < target) {
        limit.current = Some(target);
        if let Err(err) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!("could not raise the open-file limit: {err}");
        }
    }
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM; a signal that cannot be
/// installed is never waited for.
async fn interrupt_or_terminate() {
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c() => {}
        () = terminate => {}
    }
}

/// Waits for Ctrl-C; if the signal cannot be installed, waits forever.
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
