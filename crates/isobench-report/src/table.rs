//! The terminal table: plain aligned text, no colours, so it reads the same
//! in a terminal, a CI log and a pasted issue.
//!
//! Sections, top to bottom: what was run; validity (an invalid run opens
//! with `!! INVALID RUN` lines, warnings with `warning:`); request counts and
//! errors by kind; one row per latency metric (n, p50, p90, p95, p99, mean,
//! max in ms); throughput and goodput; SLO pass/fail; the GPU (runs on one);
//! token-count sources.

use std::fmt::Write;

use isobench_metrics::{LatencyStats, OutputTokenSource, Summary};

use crate::gpu::GIB;
use crate::{PromptTokenSource, Report};

/// Renders the report as the table printed at the end of a run.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    header(&mut out, report);
    validity(&mut out, report);
    requests(&mut out, &report.summary);
    latencies(&mut out, &report.summary);
    rates(&mut out, &report.summary);
    slos(&mut out, &report.summary);
    gpu(&mut out, report);
    tokens(&mut out, report);
    out
}

/// One line about the GPU, when the run used one.
fn gpu(out: &mut String, report: &Report) {
    let Some(gpu) = &report.gpu else { return };
    let m = &gpu.measured;
    let energy = match (m.energy_j, gpu.energy_per_output_token_j, gpu.mean_power_w) {
        (Some(joules), per_token, power) => format!(
            " · energy {joules:.1} J, {} J/token, {} W mean",
            per_token.map_or("-".into(), |j| format!("{j:.4}")),
            power.map_or("-".into(), |w| format!("{w:.0}"))
        ),
        (None, ..) => " · energy not reported by this GPU".into(),
    };
    let busy = gpu.device_busy_share.map_or(String::new(), |share| {
        format!(", forwards {:.0}% of the window", share * 100.0)
    });
    let idle = gpu.engine_idle_share.map_or(String::new(), |share| {
        format!(", engine idle {:.0}%", share * 100.0)
    });
    let _ = writeln!(
        out,
        "gpu       {} (cuda:{}, driver {}) · peak memory {:.1} of {:.1} GiB{energy} · steps {} graph, {} eager{busy}{idle}",
        m.name,
        m.index,
        m.driver,
        m.peak_memory_bytes as f64 / GIB,
        m.memory_total_bytes as f64 / GIB,
        m.cuda_graph_replays,
        m.eager_steps
    );
}

fn header(out: &mut String, report: &Report) {
    let run = &report.run;
    let file = run
        .workload_file
        .as_deref()
        .map(|file| format!(" ({file})"))
        .unwrap_or_default();
    let streaming = if run.streaming {
        "streaming"
    } else {
        "non-streaming"
    };
    let seed = run.seed.map(|s| format!(", seed {s}")).unwrap_or_default();
    let _ = writeln!(
        out,
        "{} {} · workload {}{file}",
        report.tool, report.tool_version, run.workload
    );
    let _ = writeln!(
        out,
        "target    {} · model {} · {} API, {streaming}{seed}",
        run.target, run.model, run.api
    );
    let _ = writeln!(
        out,
        "load      {} · started {} · took {:.1} s",
        run.load, run.started_at, run.duration_s
    );
    if run.interrupted {
        let _ = writeln!(
            out,
            "          interrupted: the figures cover the requests that finished"
        );
    }
    out.push('\n');
}

fn validity(out: &mut String, report: &Report) {
    let validity = &report.validity;
    for reason in &validity.reasons {
        let _ = writeln!(out, "!! INVALID RUN: {reason}");
    }
    for warning in &validity.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    if !validity.reasons.is_empty() || !validity.warnings.is_empty() {
        out.push('\n');
    }
}

fn requests(out: &mut String, summary: &Summary) {
    let r = &summary.requests;
    let _ = writeln!(
        out,
        "requests  {} completed, {} failed, {} cancelled ({} warm-up, excluded)",
        r.completed, r.failed, r.cancelled, r.warmup
    );
    if r.retries > 0 {
        let _ = writeln!(
            out,
            "          {} sent again on a new connection after a reused one closed (docs/reliability.md)",
            r.retries
        );
    }
    if !summary.errors.is_empty() {
        let errors: Vec<String> = summary
            .errors
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        let _ = writeln!(out, "errors    {}", errors.join(", "));
    }
    out.push('\n');
}

fn latencies(out: &mut String, summary: &Summary) {
    let _ = writeln!(
        out,
        "{:<20} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "latency (ms)", "n", "p50", "p90", "p95", "p99", "mean", "max"
    );
    let l = &summary.latency;
    let rows: [(&str, &Option<LatencyStats>); 8] = [
        ("TTFT", &l.ttft),
        ("TTFT from schedule", &l.ttft_from_schedule),
        ("ITL per event", &l.itl_per_event),
        ("ITL per token", &l.itl_per_token),
        ("TPOT", &l.tpot),
        ("E2E", &l.e2e),
        ("E2E from schedule", &l.e2e_from_schedule),
        ("dispatch lag", &l.dispatch_lag),
    ];
    for (name, stats) in rows {
        match stats {
            Some(s) => {
                let _ = writeln!(
                    out,
                    "{name:<20} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                    s.count, s.p50_ms, s.p90_ms, s.p95_ms, s.p99_ms, s.mean_ms, s.max_ms
                );
            }
            None => {
                let _ = writeln!(out, "{name:<20} {:>8} {:>9}", 0, "-");
            }
        }
    }
    if l.itl_per_token_unsplit_requests > 0 {
        let _ = writeln!(
            out,
            "({} requests had no per-event token counts: their ITL per token is per event)",
            l.itl_per_token_unsplit_requests
        );
    }
    out.push('\n');
}

fn rates(out: &mut String, summary: &Summary) {
    let t = &summary.throughput;
    let _ = writeln!(
        out,
        "throughput  {:.2} req/s · {:.1} output tok/s · {:.1} total tok/s (over {:.2} s)",
        t.requests_per_s, t.output_tokens_per_s, t.total_tokens_per_s, summary.window_s
    );
    if let Some(goodput) = t.goodput_requests_per_s {
        let share = t
            .good_fraction
            .map(|f| {
                format!(
                    " ({:.1}% of completed and failed requests met every SLO)",
                    f * 100.0
                )
            })
            .unwrap_or_default();
        let _ = writeln!(out, "goodput     {goodput:.2} req/s{share}");
    }
}

fn slos(out: &mut String, summary: &Summary) {
    for (i, result) in summary.slos.iter().enumerate() {
        let label = if i == 0 { "SLOs" } else { "" };
        let verdict = if result.passed { "PASS" } else { "FAIL" };
        let measured = result
            .measured_ms
            .map(|m| format!("measured {m:.2} ms"))
            .unwrap_or_else(|| "no samples".to_owned());
        let _ = writeln!(
            out,
            "{label:<11} {verdict} {:<22} {measured}",
            result.slo.to_string()
        );
    }
}

fn tokens(out: &mut String, report: &Report) {
    let prompt = match report.run.prompt_token_source {
        PromptTokenSource::Tokenizer => "exact (tokenizer)",
        PromptTokenSource::Approximate => "approximate (no tokenizer)",
    };
    let by = &report.summary.tokens.by_source;
    let output = match report.summary.tokens.output_source {
        OutputTokenSource::Usage => "server usage".to_owned(),
        OutputTokenSource::Tokenizer => "tokenizer".to_owned(),
        OutputTokenSource::Events => "one per streamed event (approximate)".to_owned(),
        OutputTokenSource::Mixed => format!(
            "mixed (requests counted by server usage {}, tokenizer {}, one per event {})",
            by.usage.requests, by.tokenizer.requests, by.events.requests
        ),
        OutputTokenSource::None => "none (no request completed)".to_owned(),
    };
    let _ = writeln!(
        out,
        "tokens      prompt lengths: {prompt} · output counts: {output}"
    );
}
