//! The plots of `isobench report`, each an inline SVG ([`crate::plot`]):
//!
//! - **latency CDFs** of TTFT, TPOT and E2E, one line per run with
//!   per-request samples (log latency axis);
//! - **each run's time line** (of the first [`MAX_TIMELINES`]): every request's TTFT and E2E at the moment
//!   it was sent; the offered (scheduled), achieved (sent) and completed
//!   requests per second; and, when the endpoint's metrics were scraped,
//!   the server's running and waiting requests, mean batch and KV cache use;
//! - **sweep curves**: for each sweep (reports sharing a `step.series`),
//!   p50 and p99 TTFT and p99 TPOT against the achieved throughput of each
//!   step's steady window; for a capacity search, each trial's against its
//!   offered rate;
//! - **runs side by side**: p50 and p99 TTFT, TPOT and E2E, and output
//!   tokens/s, one bar per run (batching strategies, endpoints, days).

use std::collections::BTreeMap;

use isobench_metrics::{LatencyStats, SampleMetric};

use crate::plot::{self, Mark, Panel, Series};
use crate::server_view::ServerMetrics;
use crate::step::StepKind;
use crate::tables::{NamedReport, step_summary};

/// One plot of the page.
#[derive(Debug, Clone)]
pub struct Figure {
    /// A stable id (`cdf-ttft`, `timeline-2`, `sweep-chat`, ...).
    pub id: String,
    pub title: String,
    /// A sentence saying how to read it.
    pub caption: String,
    pub svg: String,
}

/// Points drawn per series at most (samples are thinned evenly beyond).
const MAX_POINTS: usize = 1_500;

/// Runs whose time lines a page draws at most (the first ones given), so
/// that a page of a long search stays a few megabytes.
pub const MAX_TIMELINES: usize = 12;

/// Every plot the runs allow, in page order.
pub fn figures(runs: &[NamedReport]) -> Vec<Figure> {
    let mut figures = Vec::new();
    figures.extend(cdfs(runs));
    figures.extend(sweeps(runs));
    if runs.len() >= 2 {
        figures.extend(side_by_side(runs));
    }
    for (index, run) in runs.iter().enumerate().take(MAX_TIMELINES) {
        figures.extend(timeline(index, run));
    }
    figures
}

fn thin<T: Copy>(points: &[T]) -> Vec<T> {
    let step = points.len().div_ceil(MAX_POINTS).max(1);
    let mut thinned: Vec<T> = points.iter().step_by(step).copied().collect();
    if let (Some(last), Some(kept)) = (points.last(), thinned.last_mut()) {
        *kept = *last;
    }
    thinned
}

fn cdfs(runs: &[NamedReport]) -> Vec<Figure> {
    let mut figures = Vec::new();
    for (metric, name) in [
        (SampleMetric::Ttft, "TTFT"),
        (SampleMetric::Tpot, "TPOT"),
        (SampleMetric::E2e, "E2E latency"),
    ] {
        let mut panel = Panel::new(
            &format!("{name}: cumulative distribution"),
            "ms (log scale)",
            "share of requests",
        );
        panel.log_x = true;
        for (index, run) in runs.iter().enumerate() {
            let Some(samples) = &run.report.samples else {
                continue;
            };
            let mut values = samples.values_ms(metric);
            values.sort_by(f64::total_cmp);
            let n = values.len() as f64;
            let points: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, (i + 1) as f64 / n))
                .collect();
            panel.series.push(Series {
                label: run.name.clone(),
                points: thin(&points),
                mark: Mark::Line,
                colour: index,
            });
        }
        if panel.has_data() {
            figures.push(Figure {
                id: format!("cdf-{}", metric.name()),
                title: format!("{name} distribution"),
                caption: format!(
                    "Share of completed requests (warm-up excluded) whose {name} is at most the value on the x axis; a line further left is faster, a long flat top is a tail."
                ),
                svg: plot::xy(&[panel]),
            });
        }
    }
    figures
}

fn sweeps(runs: &[NamedReport]) -> Vec<Figure> {
    let mut figures = Vec::new();
    for kind in [StepKind::Sweep, StepKind::Plan] {
        let mut series: BTreeMap<&str, Vec<&NamedReport>> = BTreeMap::new();
        for run in runs {
            if let Some(step) = run.report.step.as_ref().filter(|s| s.kind == kind) {
                series.entry(step.series.as_str()).or_default().push(run);
            }
        }
        let curves: Vec<(&str, Vec<&NamedReport>)> = series
            .into_iter()
            .filter(|(_, steps)| steps.len() >= 2)
            .map(|(name, mut steps)| {
                steps.sort_by(|a, b| x_of(kind, a).total_cmp(&x_of(kind, b)));
                (name, steps)
            })
            .collect();
        if !curves.is_empty() {
            figures.push(curve_figure(kind, &curves));
        }
    }
    figures
}

/// A step's place on the x axis: a sweep's achieved throughput (its
/// curve), a plan trial's offered rate (trials at one rate differ).
fn x_of(kind: StepKind, run: &NamedReport) -> f64 {
    match (kind, run.report.step.as_ref().and_then(|s| s.rate)) {
        (StepKind::Plan, Some(rate)) => rate,
        _ => step_summary(&run.report).throughput.requests_per_s,
    }
}

fn curve_figure(kind: StepKind, curves: &[(&str, Vec<&NamedReport>)]) -> Figure {
    let (x_label, mark, id, title, caption) = match kind {
        StepKind::Sweep => (
            "achieved requests/s (steady window)",
            Mark::LineAndDots,
            "sweep",
            "Throughput against latency",
            "One point per load step, from its steady window (ramp-up and drain left out): where the curve turns up, queueing starts; a step whose throughput stops growing while latency climbs is past saturation.",
        ),
        StepKind::Plan => (
            "offered requests/s",
            Mark::Markers,
            "plan",
            "The search's trials: latency against the offered rate",
            "One point per trial of the capacity search, from its steady window; trials repeated at one rate show how much one measurement varies.",
        ),
    };
    let mut ttft = Panel::new("TTFT", x_label, "TTFT ms");
    let mut tpot = Panel::new("TPOT", x_label, "TPOT p99 ms");
    for (index, (name, steps)) in curves.iter().enumerate() {
        let curve = |pick: fn(&LatencyStats) -> f64, tpot: bool| -> Vec<(f64, f64)> {
            steps
                .iter()
                .filter_map(|run| {
                    let latency = &step_summary(&run.report).latency;
                    let stats = if tpot { &latency.tpot } else { &latency.ttft };
                    Some((x_of(kind, run), pick(stats.as_ref()?)))
                })
                .collect()
        };
        let colour = index * 2;
        ttft.series.push(Series {
            label: format!("{name} p99"),
            points: curve(|s| s.p99_ms, false),
            mark,
            colour,
        });
        ttft.series.push(Series {
            label: format!("{name} p50"),
            points: curve(|s| s.p50_ms, false),
            mark,
            colour: colour + 1,
        });
        tpot.series.push(Series {
            label: format!("{name} p99"),
            points: curve(|s| s.p99_ms, true),
            mark,
            colour,
        });
    }
    Figure {
        id: id.to_owned(),
        title: title.to_owned(),
        caption: caption.to_owned(),
        svg: plot::xy(&[ttft, tpot]),
    }
}

fn side_by_side(runs: &[NamedReport]) -> Vec<Figure> {
    let groups: Vec<String> = [
        "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p50", "E2E p99",
    ]
    .map(str::to_owned)
    .to_vec();
    let latency: Vec<(String, Vec<Option<f64>>)> = runs
        .iter()
        .map(|run| {
            let l = &step_summary(&run.report).latency;
            let pick = |s: &Option<LatencyStats>, p99: bool| {
                s.as_ref().map(|s| if p99 { s.p99_ms } else { s.p50_ms })
            };
            (
                run.name.clone(),
                vec![
                    pick(&l.ttft, false),
                    pick(&l.ttft, true),
                    pick(&l.tpot, false),
                    pick(&l.tpot, true),
                    pick(&l.e2e, false),
                    pick(&l.e2e, true),
                ],
            )
        })
        .collect();
    let throughput: Vec<(String, Vec<Option<f64>>)> = runs
        .iter()
        .map(|run| {
            let t = &step_summary(&run.report).throughput;
            (run.name.clone(), vec![Some(t.output_tokens_per_s)])
        })
        .collect();
    vec![
        Figure {
            id: "side-by-side-latency".to_owned(),
            title: "Latency side by side".to_owned(),
            caption: "p50 and p99 of each run, in milliseconds (steady window for sweep steps); lower is better.".to_owned(),
            svg: plot::bars("Latency percentiles", "ms", &groups, &latency),
        },
        Figure {
            id: "side-by-side-throughput".to_owned(),
            title: "Throughput side by side".to_owned(),
            caption: "Output tokens per second of each run's measured window; higher is better.".to_owned(),
            svg: plot::bars("Output throughput", "tokens/s", &["output tokens/s".to_owned()], &throughput),
        },
    ]
}

/// Requests per second in buckets of `width_s` over `[0, end_s]`; a last
/// bucket narrower than half the others is left out (a few requests over
/// a sliver of time would read as a spike).
fn per_second(times_s: impl Iterator<Item = f64>, width_s: f64, end_s: f64) -> Vec<(f64, f64)> {
    let buckets = ((end_s / width_s).ceil() as usize).max(1);
    let mut counts = vec![0u64; buckets];
    for t in times_s {
        if t >= 0.0 {
            let bucket = ((t / width_s) as usize).min(buckets - 1);
            counts[bucket] += 1;
        }
    }
    counts
        .iter()
        .enumerate()
        .filter_map(|(i, &n)| {
            let start = i as f64 * width_s;
            let width = width_s.min(end_s - start);
            (width >= width_s / 2.0).then(|| (start + width / 2.0, n as f64 / width))
        })
        .collect()
}

/// Rate buckets: a sixtieth of the run, at least 0.25 s.
fn bucket_width(end_s: f64) -> f64 {
    (end_s / 60.0).max(0.25)
}

fn timeline(index: usize, run: &NamedReport) -> Option<Figure> {
    let samples = run.report.samples.as_ref()?;
    if samples.is_empty() {
        return None;
    }
    let x = "seconds since the run's start";
    let mut latency = Panel::new("Latency of each request, at its send", x, "ms");
    let point = |pick: SampleMetric| -> Vec<(f64, f64)> {
        let points: Vec<(f64, f64)> = samples
            .0
            .iter()
            .filter_map(|s| Some((s.sent_ns as f64 / 1e9, s.value_ns(pick)? as f64 / 1e6)))
            .collect();
        thin(&points)
    };
    latency.series.push(Series {
        label: "E2E".into(),
        points: point(SampleMetric::E2e),
        mark: Mark::Dots,
        colour: 1,
    });
    latency.series.push(Series {
        label: "TTFT".into(),
        points: point(SampleMetric::Ttft),
        mark: Mark::Dots,
        colour: 0,
    });

    let end_s = samples.0.iter().map(|s| s.end_ns).max().unwrap_or(0) as f64 / 1e9;
    let width_s = bucket_width(end_s);
    let mut rates = Panel::new("Offered, achieved and completed rate", x, "requests/s");
    let times = |pick: fn(&isobench_metrics::RequestSample) -> Option<u64>| {
        samples.0.iter().filter_map(pick).map(|ns| ns as f64 / 1e9)
    };
    for (label, colour, pick) in [
        (
            "offered (scheduled)",
            7,
            (|s| Some(s.scheduled_ns)) as fn(&isobench_metrics::RequestSample) -> Option<u64>,
        ),
        ("achieved (sent)", 0, |s| Some(s.sent_ns)),
        ("completed", 2, |s| s.completed().then_some(s.end_ns)),
    ] {
        rates.series.push(Series {
            label: label.into(),
            points: per_second(times(pick), width_s, end_s),
            mark: Mark::Line,
            colour,
        });
    }
    let mut panels = vec![latency, rates];
    if let Some(server) = &run.report.server_metrics {
        panels.extend(server_panels(server, x));
    }
    let start_s = run
        .report
        .server_metrics
        .as_ref()
        .and_then(|server| server.t_s.first().copied())
        .unwrap_or(0.0)
        .min(0.0);
    let last_s = run
        .report
        .server_metrics
        .as_ref()
        .and_then(|server| server.t_s.last().copied())
        .unwrap_or(end_s)
        .max(end_s);
    for panel in &mut panels {
        panel.x_range = Some((start_s, last_s));
    }
    let steady = run
        .report
        .steady_state
        .as_ref()
        .map(|s| {
            format!(
                " The steady window runs from {:.1} s to {:.1} s.",
                s.start_s, s.end_s
            )
        })
        .unwrap_or_default();
    Some(Figure {
        id: format!("timeline-{index}"),
        title: format!("{}: the run's time line", run.name),
        caption: format!(
            "Each completed request's latency at the moment it was sent, the request rates per {width_s:.2} s, and what the server reported on /metrics when it was scraped: a queue that grows while the completed rate stays flat is saturation.{steady}"
        ),
        svg: plot::xy(&panels),
    })
}

fn server_panels(server: &ServerMetrics, x: &str) -> Vec<Panel> {
    let series = |values: &[Option<f64>], scale: f64| -> Vec<(f64, f64)> {
        server
            .t_s
            .iter()
            .zip(values)
            .filter_map(|(&t, v)| Some((t, (*v)? * scale)))
            .collect()
    };
    let mut queue = Panel::new(
        &format!("Server ({}): batch and queue", server.source),
        x,
        "requests",
    );
    for (label, values, colour) in [
        ("running", &server.running, 2),
        ("waiting (queue)", &server.waiting, 3),
        ("mean batch since last scrape", &server.batch_size, 4),
    ] {
        queue.series.push(Series {
            label: label.into(),
            points: series(values, 1.0),
            mark: Mark::Line,
            colour,
        });
    }
    let mut kv = Panel::new("Server: KV cache in use", x, "% of the KV cache");
    kv.series.push(Series {
        label: "KV cache in use".into(),
        points: series(&server.kv_usage, 100.0),
        mark: Mark::Line,
        colour: 5,
    });
    vec![queue, kv]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_count_per_bucket() {
        let rates = per_second([0.1, 0.2, 1.5, 2.9].into_iter(), 1.0, 3.0);
        assert_eq!(rates, vec![(0.5, 2.0), (1.5, 1.0), (2.5, 1.0)]);
        // A last bucket of half a second counts per half second; a sliver is left out.
        let rates = per_second([0.1, 1.2].into_iter(), 1.0, 1.5);
        assert_eq!(rates, vec![(0.5, 1.0), (1.25, 2.0)]);
        assert_eq!(
            per_second([0.1, 1.05].into_iter(), 1.0, 1.1),
            vec![(0.5, 1.0)]
        );
        assert_eq!(bucket_width(6.0), 0.25);
        assert_eq!(bucket_width(120.0), 2.0);
    }

    #[test]
    fn thinning_keeps_the_last_point() {
        let points: Vec<u32> = (0..10_000).collect();
        let thinned = thin(&points);
        assert!(thinned.len() <= MAX_POINTS);
        assert_eq!(*thinned.last().unwrap(), 9_999);
        assert_eq!(thin(&[1, 2, 3]), vec![1, 2, 3]);
    }
}
