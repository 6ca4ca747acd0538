//! The tables of `isobench report`, built once and written three ways:
//! Markdown (for a pull request), HTML (the report page) and aligned text.
//!
//! - [`runs`]: one row per run (completed, failed, throughput, TTFT, TPOT
//!   and E2E percentiles, and when any run used a GPU its energy per
//!   output token, peak memory and share of the window in forwards; the
//!   server's peak queue, notes);
//! - [`sweep`]: one row per step of a sweep or search, from each step's
//!   steady window;
//! - [`comparison`]: each figure of a run against the baseline, with its
//!   verdict.

use std::fmt::Write;

use isobench_metrics::{LatencyStats, Summary};

use crate::Report;
use crate::comparison::MetricComparison;
use crate::gpu::GIB;
use crate::server_view::ServerMetrics;

/// A report with the name it is shown by (its file stem).
#[derive(Debug, Clone)]
pub struct NamedReport {
    pub name: String,
    pub report: Report,
}

/// A table of text cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// GitHub-flavoured Markdown (pipes in cells escaped).
    pub fn markdown(&self) -> String {
        let cell = |text: &String| text.replace('|', "\\|");
        let line = |cells: &[String]| {
            format!(
                "| {} |\n",
                cells.iter().map(cell).collect::<Vec<_>>().join(" | ")
            )
        };
        let mut out = line(&self.headers);
        out.push_str(&format!("|{}\n", "---|".repeat(self.headers.len())));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }

    /// An HTML `<table>`, cells escaped.
    pub fn html(&self) -> String {
        let mut out = String::from("<table>\n<thead><tr>");
        for header in &self.headers {
            let _ = write!(out, "<th>{}</th>", escape(header));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for cell in row {
                let _ = write!(out, "<td>{}</td>", escape(cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
        out
    }

    /// Columns padded to their widest cell.
    pub fn text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                std::iter::once(&self.headers[i])
                    .chain(self.rows.iter().map(|r| &r[i]))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_owned() + "\n"
        };
        let mut out = line(&self.headers);
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// `&`, `<`, `>` and `"` as HTML entities.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(stats: &Option<LatencyStats>, pick: fn(&LatencyStats) -> f64) -> String {
    stats
        .as_ref()
        .map_or("-".to_owned(), |s| format!("{:.1}", pick(s)))
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// One row per run; the GPU's columns only when a run has a `gpu` section
/// (a run without one shows `-` there).
pub fn runs(runs: &[NamedReport]) -> Table {
    let with_gpu = runs.iter().any(|run| run.report.gpu.is_some());
    let mut headers = vec![
        "run",
        "done",
        "failed",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "E2E p99",
    ];
    if with_gpu {
        headers.extend(["J/token", "peak GiB", "busy %", "idle %"]);
    }
    headers.extend(["queue peak", "notes"]);
    let mut table = Table::new(&headers);
    for NamedReport { name, report } in runs {
        let s = &report.summary;
        let mut notes = Vec::new();
        if !report.validity.valid {
            notes.push("INVALID".to_owned());
        }
        if report.run.interrupted {
            notes.push("interrupted".to_owned());
        }
        if let Some(server) = &report.run.server {
            notes.push(server.clone());
        }
        let queue = report
            .server_metrics
            .as_ref()
            .and_then(|m| ServerMetrics::peak(&m.waiting));
        let mut row = vec![
            name.clone(),
            s.requests.completed.to_string(),
            s.requests.failed.to_string(),
            format!("{:.2}", s.throughput.requests_per_s),
            format!("{:.1}", s.throughput.output_tokens_per_s),
            ms(&s.latency.ttft, |l| l.p50_ms),
            ms(&s.latency.ttft, |l| l.p99_ms),
            ms(&s.latency.tpot, |l| l.p50_ms),
            ms(&s.latency.tpot, |l| l.p99_ms),
            ms(&s.latency.e2e, |l| l.p99_ms),
        ];
        if with_gpu {
            let gpu = report.gpu.as_ref();
            row.extend([
                optional(gpu.and_then(|g| g.energy_per_output_token_j), 4),
                optional(gpu.map(|g| g.measured.peak_memory_bytes as f64 / GIB), 1),
                optional(gpu.and_then(|g| g.device_busy_share).map(|b| b * 100.0), 0),
                optional(gpu.and_then(|g| g.engine_idle_share).map(|i| i * 100.0), 0),
            ]);
        }
        row.extend([optional(queue, 0), notes.join("; ")]);
        table.rows.push(row);
    }
    table
}

/// The summary a step is judged by: its steady window's, else the whole run's.
pub fn step_summary(report: &Report) -> &Summary {
    report
        .steady_state
        .as_ref()
        .map_or(&report.summary, |steady| &steady.summary)
}

/// One row per step of one series (steps in their order), from each
/// step's steady window.
pub fn sweep(steps: &[&NamedReport]) -> Table {
    let mut table = Table::new(&[
        "step",
        "load",
        "window s",
        "sent/s",
        "done/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p99",
        "E2E p99",
        "queue mean",
        "kept up",
    ]);
    for NamedReport { name, report } in steps {
        let s = step_summary(report);
        let load = match report.step.as_ref() {
            Some(step) => match (step.rate, step.concurrency) {
                (Some(rate), _) => format!("{rate:.2} req/s"),
                (None, Some(c)) => format!("concurrency {c}"),
                _ => report.run.load.clone(),
            },
            None => report.run.load.clone(),
        };
        let kept_up = match report.steady_state.as_ref().map(|st| &st.saturation) {
            Some(sat) if sat.saturated => "no: saturated".to_owned(),
            Some(_) => "yes".to_owned(),
            None => "-".to_owned(),
        };
        let sent_per_s = report.steady_state.as_ref().and_then(|st| {
            let window = st.end_s - st.start_s;
            (window > 0.0).then(|| st.saturation.sent as f64 / window)
        });
        let queue = report
            .server_metrics
            .as_ref()
            .and_then(|m| ServerMetrics::mean(&m.waiting));
        table.rows.push(vec![
            name.clone(),
            load,
            format!("{:.1}", s.window_s),
            optional(sent_per_s, 2),
            format!("{:.2}", s.throughput.requests_per_s),
            format!("{:.1}", s.throughput.output_tokens_per_s),
            ms(&s.latency.ttft, |l| l.p50_ms),
            ms(&s.latency.ttft, |l| l.p99_ms),
            ms(&s.latency.tpot, |l| l.p99_ms),
            ms(&s.latency.e2e, |l| l.p99_ms),
            optional(queue, 1),
            kept_up,
        ]);
    }
    table
}

/// Each figure of `candidate` against `baseline`.
pub fn comparison(candidate: &str, comparisons: &[MetricComparison]) -> Table {
    let mut table = Table::new(&["figure", "baseline ms", "candidate ms", "verdict"]);
    for metric in comparisons {
        for stat in &metric.statistics {
            table.rows.push(vec![
                format!("{} {}", stat.statistic.name(), metric.name),
                optional(stat.baseline_ms, 2),
                optional(stat.candidate_ms, 2),
                stat.verdict(metric.name, candidate),
            ]);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_renders_three_ways() {
        let mut table = Table::new(&["a", "b"]);
        table.rows.push(vec!["x|y".into(), "<1>".into()]);
        assert_eq!(table.markdown(), "| a | b |\n|---|---|\n| x\\|y | <1> |\n");
        assert!(table.html().contains("<td>&lt;1&gt;</td>"));
        assert_eq!(table.text(), "a    b\nx|y  <1>\n");
    }
}
