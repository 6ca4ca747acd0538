//! The `gpu` section of a run's report, read from the target's `/metrics`.
//!
//! An isobench server on a GPU (`isobench serve --device cuda`, or the
//! embedded server of `isobench run --device cuda`) describes its GPU
//! there (`isobench_gpu_info`) with NVML's memory and energy figures and
//! its step counters. Before the run the probe scrapes `/metrics` once: a
//! target without those series (a CPU server, another server, no
//! `/metrics`) gets no probe and its report no `gpu` section. Otherwise it
//! scrapes every [`SCRAPE_INTERVAL`] until the run ends, and the energy of
//! the measured window is the counter interpolated linearly at the
//! window's start and end between the scrapes around them. Embedded and
//! external targets go through the same path.

use std::time::{Duration, Instant};

use isobench_report::GpuMeasurement;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often `/metrics` is read during a run.
pub const SCRAPE_INTERVAL: Duration = Duration::from_millis(250);
/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The GPU figures of one `/metrics` answer.
#[derive(Debug, Clone, PartialEq)]
struct Scrape {
    /// When the answer arrived.
    at: Instant,
    name: String,
    index: u32,
    driver: String,
    memory_total_bytes: u64,
    memory_peak_bytes: u64,
    energy_j: Option<f64>,
    graph_replays: u64,
    eager_steps: u64,
}

/// Scrapes a target's `/metrics` while a run goes.
pub struct GpuProbe {
    first: Scrape,
    stop: CancellationToken,
    task: JoinHandle<Vec<Scrape>>,
}

impl GpuProbe {
    /// Scrapes `/metrics` of `target` (the base URL, with or without `/v1`)
    /// once; when it describes a GPU, keeps scraping in the background.
    pub async fn start(target: &str) -> Option<Self> {
        let base = target.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let url = format!("{base}/metrics");
        let client = reqwest::Client::builder()
            .timeout(SCRAPE_TIMEOUT)
            .build()
            .ok()?;
        let first = scrape(&client, &url).await?;
        tracing::debug!(gpu = %first.name, %url, "reading GPU figures from /metrics");
        let stop = CancellationToken::new();
        let task = tokio::spawn(scrape_until(client, url, stop.clone()));
        Some(Self { first, stop, task })
    }

    /// Stops scraping (with one last scrape) and measures the window that
    /// began `window.0` and ended `window.1` nanoseconds after `started`.
    pub async fn finish(self, started: Instant, window: Option<(u64, u64)>) -> GpuMeasurement {
        self.stop.cancel();
        let mut scrapes = vec![self.first];
        scrapes.extend(self.task.await.unwrap_or_default());
        let window = window.map(|(from, to)| {
            (
                started + Duration::from_nanos(from),
                started + Duration::from_nanos(to),
            )
        });
        measure(&scrapes, window)
    }
}

async fn scrape_until(
    client: reqwest::Client,
    url: String,
    stop: CancellationToken,
) -> Vec<Scrape> {
    let mut scrapes = Vec::new();
    loop {
        let stopped = tokio::select! {
            () = stop.cancelled() => true,
            () = tokio::time::sleep(SCRAPE_INTERVAL) => false,
        };
        scrapes.extend(scrape(&client, &url).await);
        if stopped {
            return scrapes;
        }
    }
}

async fn scrape(client: &reqwest::Client, url: &str) -> Option<Scrape> {
    let response = client.get(url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let text = response.text().await.ok()?;
    parse(&text, Instant::now())
}

/// The GPU figures of a Prometheus text, when it has `isobench_gpu_info`.
fn parse(text: &str, at: Instant) -> Option<Scrape> {
    let info = text
        .lines()
        .find_map(|line| line.strip_prefix("isobench_gpu_info{"))?;
    let value = |name: &str| -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    };
    let count = |name: &str| value(name).unwrap_or(0.0) as u64;
    Some(Scrape {
        at,
        name: label(info, "name")?,
        index: label(info, "gpu")?.parse().ok()?,
        driver: label(info, "driver")?,
        memory_total_bytes: count("isobench_gpu_memory_total_bytes"),
        memory_peak_bytes: count("isobench_gpu_memory_peak_bytes"),
        energy_j: value("isobench_gpu_energy_joules_total"),
        graph_replays: count("isobench_cuda_graph_replays_total"),
        eager_steps: count("isobench_eager_steps_total"),
    })
}

/// A label's value in `a="x",b="y"} 1`, with `\"`, `\\` and `\n` unescaped.
fn label(labels: &str, name: &str) -> Option<String> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let mut value = String::new();
    let mut chars = labels[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

/// The measurement from scrapes in time order (at least one).
fn measure(scrapes: &[Scrape], window: Option<(Instant, Instant)>) -> GpuMeasurement {
    let first = &scrapes[0];
    let last = scrapes.last().unwrap_or(first);
    let energy_j =
        window.and_then(|(from, to)| Some(energy_at(scrapes, to)? - energy_at(scrapes, from)?));
    GpuMeasurement {
        name: last.name.clone(),
        index: last.index,
        driver: last.driver.clone(),
        memory_total_bytes: last.memory_total_bytes,
        peak_memory_bytes: scrapes
            .iter()
            .map(|s| s.memory_peak_bytes)
            .max()
            .unwrap_or(0),
        energy_j: energy_j.map(|joules| joules.max(0.0)),
        cuda_graph_replays: last.graph_replays.saturating_sub(first.graph_replays),
        eager_steps: last.eager_steps.saturating_sub(first.eager_steps),
    }
}

/// The energy counter at `at`, interpolated linearly between the scrapes
/// around it (the first or last scrape's value outside them).
fn energy_at(scrapes: &[Scrape], at: Instant) -> Option<f64> {
    let points: Vec<(Instant, f64)> = scrapes
        .iter()
        .filter_map(|s| Some((s.at, s.energy_j?)))
        .collect();
    let after = points.partition_point(|(t, _)| *t <= at);
    match (after.checked_sub(1).map(|i| points[i]), points.get(after)) {
        (Some((t0, e0)), Some(&(t1, e1))) => {
            let span = (t1 - t0).as_secs_f64();
            let part = if span > 0.0 {
                (at - t0).as_secs_f64() / span
            } else {
                0.0
            };
            Some(e0 + (e1 - e0) * part)
        }
        (Some((_, e)), None) | (None, Some(&(_, e))) => Some(e),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# HELP isobench_eager_steps_total x\n\
        isobench_cuda_graph_replays_total 40\n\
        isobench_eager_steps_total 10\n\
        isobench_gpu_info{gpu=\"1\",name=\"NVIDIA \\\"H200\\\"\",driver=\"580.65.06\"} 1\n\
        isobench_gpu_memory_total_bytes 1000\n\
        isobench_gpu_memory_used_bytes 700\n\
        isobench_gpu_memory_peak_bytes 900\n\
        isobench_gpu_energy_joules_total 12.5\n";

    #[test]
    fn a_gpu_server_s_metrics_parse() {
        let at = Instant::now();
        let scrape = parse(METRICS, at).unwrap();
        assert_eq!(scrape.name, "NVIDIA \"H200\"");
        assert_eq!(scrape.index, 1);
        assert_eq!(scrape.driver, "580.65.06");
        assert_eq!(scrape.memory_total_bytes, 1000);
        assert_eq!(scrape.memory_peak_bytes, 900);
        assert_eq!(scrape.energy_j, Some(12.5));
        assert_eq!((scrape.graph_replays, scrape.eager_steps), (40, 10));
    }

    #[test]
    fn metrics_without_a_gpu_give_no_scrape() {
        let cpu = "isobench_eager_steps_total 10\nisobench_gpu_memory_used_bytes 5\n";
        assert_eq!(parse(cpu, Instant::now()), None);
    }

    fn at(base: Instant, ms: u64, energy: Option<f64>, eager: u64, peak: u64) -> Scrape {
        Scrape {
            at: base + Duration::from_millis(ms),
            energy_j: energy,
            eager_steps: eager,
            memory_peak_bytes: peak,
            ..parse(METRICS, base).unwrap()
        }
    }

    /// A `/metrics` endpoint on 127.0.0.1 whose GPU drew 100 J more and
    /// ran 10 more eager steps at each scrape.
    async fn fake_gpu_server() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for scrape in 0u64.. {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                let body = format!(
                    "isobench_eager_steps_total {}\n\
                     isobench_cuda_graph_replays_total 0\n\
                     isobench_gpu_info{{gpu=\"0\",name=\"NVIDIA H200\",driver=\"580.1\"}} 1\n\
                     isobench_gpu_memory_total_bytes 1000\n\
                     isobench_gpu_memory_peak_bytes {}\n\
                     isobench_gpu_energy_joules_total {}\n",
                    10 * scrape,
                    500 + scrape,
                    100 * scrape
                );
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn a_probe_reads_a_gpu_server_s_metrics_over_http() {
        let url = fake_gpu_server().await;
        let started = Instant::now();
        let probe = GpuProbe::start(&url)
            .await
            .expect("the endpoint describes a GPU");
        tokio::time::sleep(SCRAPE_INTERVAL * 3).await;
        let window = started.elapsed().as_nanos() as u64;
        let m = probe.finish(started, Some((0, window))).await;
        assert_eq!(
            (m.name.as_str(), m.driver.as_str(), m.index),
            ("NVIDIA H200", "580.1", 0)
        );
        assert!(m.eager_steps >= 20, "{m:?}");
        assert!(m.peak_memory_bytes >= 502, "{m:?}");
        let energy = m.energy_j.unwrap();
        assert!(
            energy > 0.0 && energy <= 100.0 * m.eager_steps as f64 / 10.0,
            "{m:?}"
        );
    }

    #[tokio::test]
    async fn no_probe_for_a_target_without_gpu_metrics() {
        assert!(GpuProbe::start("http://127.0.0.1:9").await.is_none());
    }

    #[test]
    fn window_energy_is_interpolated_between_scrapes() {
        let t = Instant::now();
        // 100 W: 0.1 J per ms, from 0 J at t.
        let scrapes = [
            at(t, 0, Some(0.0), 0, 500),
            at(t, 250, Some(25.0), 3, 800),
            at(t, 500, Some(50.0), 9, 700),
            at(t, 750, Some(75.0), 12, 700),
        ];
        let window = (
            t + Duration::from_millis(100),
            t + Duration::from_millis(600),
        );
        let m = measure(&scrapes, Some(window));
        let energy = m.energy_j.unwrap();
        assert!((energy - 50.0).abs() < 1e-9, "{energy}");
        assert_eq!(m.eager_steps, 12);
        assert_eq!(m.peak_memory_bytes, 800);
        // A window past the last scrape holds the last value.
        let late = (
            t + Duration::from_millis(700),
            t + Duration::from_millis(900),
        );
        let energy = measure(&scrapes, Some(late)).energy_j.unwrap();
        assert!((energy - 5.0).abs() < 1e-9, "{energy}");
        // No window (nothing measured), or no energy counter: no energy.
        assert_eq!(measure(&scrapes, None).energy_j, None);
        let dark = [at(t, 0, None, 0, 1), at(t, 250, None, 1, 1)];
        assert_eq!(measure(&dark, Some(window)).energy_j, None);
    }
}
