//! `isobench compare BASE.json NEW.json`: two reports side by side. For
//! each latency figure, p50 and p99 of both runs, the relative change, and
//! whether the change is beyond the runs' 95% confidence intervals (a
//! difference inside them may be noise).

use std::path::PathBuf;
use std::process::ExitCode;

use isobench_metrics::{Comparison, Percentile, Verdict, compare_percentile};
use isobench_report::Report;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The baseline report (JSON written by `isobench run`).
    baseline: PathBuf,
    /// The candidate report.
    candidate: PathBuf,
}

pub fn compare(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let base = Report::read_json(&args.baseline)?;
    let new = Report::read_json(&args.candidate)?;
    print!("{}", render(&base, &new));
    Ok(ExitCode::SUCCESS)
}

fn render(base: &Report, new: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "baseline:  {} ({}, {})\ncandidate: {} ({}, {})\n\n",
        base.run.workload,
        base.run.target,
        base.run.load,
        new.run.workload,
        new.run.target,
        new.run.load
    ));
    out.push_str(&format!(
        "{:<12} {:>12} {:>12} {:>9}  {}\n",
        "figure", "baseline", "candidate", "change", "verdict (95% CI)"
    ));
    let latencies = [
        (
            "ttft",
            &base.summary.latency.ttft,
            &new.summary.latency.ttft,
        ),
        (
            "tpot",
            &base.summary.latency.tpot,
            &new.summary.latency.tpot,
        ),
        (
            "itl",
            &base.summary.latency.itl_per_event,
            &new.summary.latency.itl_per_event,
        ),
        ("e2el", &base.summary.latency.e2e, &new.summary.latency.e2e),
    ];
    for (name, b, n) in latencies {
        for (label, percentile) in [("p50", Percentile::P50), ("p99", Percentile::P99)] {
            let comparison = compare_percentile(b.as_ref(), n.as_ref(), percentile);
            out.push_str(&latency_row(&format!("{label} {name} ms"), &comparison));
        }
    }
    let throughput = [
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
    ];
    for (name, b, n) in throughput {
        out.push_str(&format!(
            "{:<12} {:>12.2} {:>12.2} {:>9}\n",
            name,
            b,
            n,
            change(Some(b), Some(n))
        ));
    }
    out
}

fn latency_row(name: &str, comparison: &Comparison) -> String {
    let value = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    let verdict = match comparison.verdict {
        Verdict::Lower => "lower: a real improvement",
        Verdict::Higher => "higher: a real regression",
        Verdict::NoSignificantDifference => "no significant difference",
        Verdict::NotEnoughSamples => "not enough samples to tell",
    };
    format!(
        "{:<12} {:>12} {:>12} {:>9}  {}\n",
        name,
        value(comparison.baseline_ms),
        value(comparison.candidate_ms),
        change(comparison.baseline_ms, comparison.candidate_ms),
        verdict
    )
}

fn change(base: Option<f64>, new: Option<f64>) -> String {
    match (base, new) {
        (Some(b), Some(n)) if b > 0.0 => format!("{:+.1}%", (n / b - 1.0) * 100.0),
        _ => "-".to_owned(),
    }
}
