//! `isobench compare BASE.json NEW.json [MORE.json ...]`: each candidate
//! against the baseline, figure by figure. From the reports' per-request
//! samples: for TTFT, TPOT and E2E, the p50, p99 and mean of both runs,
//! the relative difference with a 95% bootstrap interval and a plain
//! verdict, a Mann-Whitney U test, and the IQR rule's outliers (reported,
//! never removed); statistics with too few samples are flagged, not
//! judged. Reports without samples (older isobench) are judged by their
//! percentiles' intervals. Then request and output-token throughput.
//! The statistics are in `isobench_report::comparison`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use isobench_report::{Report, comparison, tables};

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The baseline report (JSON written by `isobench run`, `sweep` or `plan`).
    baseline: PathBuf,
    /// The candidates, each compared with the baseline.
    #[arg(required = true)]
    candidates: Vec<PathBuf>,
}

pub fn compare(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let base = Report::read_json(&args.baseline)?;
    for path in &args.candidates {
        let new = Report::read_json(path)?;
        print!(
            "{}",
            render(&base, &name(&args.baseline), &new, &name(path))
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A report's name in verdicts: its file stem.
pub fn name(path: &Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |stem| stem.to_string_lossy().into_owned(),
    )
}

fn render(base: &Report, base_name: &str, new: &Report, new_name: &str) -> String {
    let mut out = format!(
        "baseline:  {base_name}: {} ({}, {})\ncandidate: {new_name}: {} ({}, {})\n\n",
        base.run.workload,
        base.run.target,
        base.run.load,
        new.run.workload,
        new.run.target,
        new.run.load
    );
    let comparisons = comparison::compare(base, new);
    out.push_str(&tables::comparison(new_name, &comparisons).text());
    out.push('\n');
    for metric in &comparisons {
        out.push_str(&format!(
            "{:<5} n = {} / {}; {}\n",
            metric.name,
            metric.baseline_n,
            metric.candidate_n,
            metric.mann_whitney_text()
        ));
        if let Some(outliers) = metric.outliers_text() {
            out.push_str(&format!("      {outliers}\n"));
        }
    }
    out.push('\n');
    for (name, b, n) in [
        (
            "req/s",
            base.summary.throughput.requests_per_s,
            new.summary.throughput.requests_per_s,
        ),
        (
            "output tok/s",
            base.summary.throughput.output_tokens_per_s,
            new.summary.throughput.output_tokens_per_s,
        ),
    ] {
        out.push_str(&format!(
            "{:<12} {:>12.2} {:>12.2} {:>9}\n",
            name,
            b,
            n,
            change(b, n)
        ));
    }
    out.push('\n');
    out
}

fn change(base: f64, new: f64) -> String {
    if base > 0.0 {
        format!("{:+.1}%", (new / base - 1.0) * 100.0)
    } else {
        "-".to_owned()
    }
}
