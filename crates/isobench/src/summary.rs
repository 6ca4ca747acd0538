//! `isobench summary REPORT.json...`: several runs, one row each, so that
//! batching policies, concurrencies or endpoints can be read side by side.
//! Each row is named by its file's stem; `--baseline STEM` adds the ratio of
//! each run's output tokens/s to that run's.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use isobench_metrics::LatencyStats;
use isobench_report::Report;

#[derive(clap::Args)]
pub struct SummaryArgs {
    /// JSON reports written by `isobench run`.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    /// The file stem of the run the others are compared with (output tokens/s ratio).
    #[arg(long, value_name = "STEM")]
    baseline: Option<String>,
}

struct Row {
    name: String,
    report: Report,
}

pub fn summary(args: &SummaryArgs) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::with_capacity(args.reports.len());
    for path in &args.reports {
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        rows.push(Row {
            name,
            report: Report::read_json(path)?,
        });
    }
    let baseline = match &args.baseline {
        None => None,
        Some(stem) => match rows.iter().find(|row| &row.name == stem) {
            Some(row) => Some(row.report.summary.throughput.output_tokens_per_s),
            None => bail!("--baseline {stem}: no report of that file stem among the files given"),
        },
    };
    print!("{}", render(&rows, baseline));
    Ok(ExitCode::SUCCESS)
}

fn render(rows: &[Row], baseline: Option<f64>) -> String {
    let width = rows
        .iter()
        .map(|row| row.name.len())
        .max()
        .unwrap_or(0)
        .max(3);
    let mut out = format!(
        "{:<width$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}  {}\n",
        "run",
        "done",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "vs base",
        "notes"
    );
    for Row { name, report } in rows {
        let summary = &report.summary;
        let tokens_per_s = summary.throughput.output_tokens_per_s;
        let ratio = baseline
            .filter(|base| *base > 0.0)
            .map_or("-".to_owned(), |base| {
                format!("{:.2}x", tokens_per_s / base)
            });
        let mut notes = Vec::new();
        if !report.validity.valid {
            notes.push("INVALID".to_owned());
        }
        if report.run.interrupted {
            notes.push("interrupted".to_owned());
        }
        let failed = summary.requests.failed;
        if failed > 0 {
            notes.push(format!("{failed} failed"));
        }
        out.push_str(&format!(
            "{:<width$} {:>5} {:>10.1} {:>10} {:>10} {:>10} {:>10} {:>8}  {}\n",
            name,
            summary.requests.completed,
            tokens_per_s,
            ms(&summary.latency.ttft, |s| s.p50_ms),
            ms(&summary.latency.ttft, |s| s.p99_ms),
            ms(&summary.latency.tpot, |s| s.p50_ms),
            ms(&summary.latency.tpot, |s| s.p99_ms),
            ratio,
            notes.join(", ")
        ));
    }
    out
}

fn ms(stats: &Option<LatencyStats>, pick: fn(&LatencyStats) -> f64) -> String {
    stats
        .as_ref()
        .map_or("-".to_owned(), |s| format!("{:.1}", pick(s)))
}
