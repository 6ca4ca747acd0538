//! The `gpu` section of a run's report, read from the target's `/metrics`.
//!
//! An isobench server on a GPU (`isobench serve --device cuda`, or the
//! embedded server of `isobench run --device cuda`) describes its GPU
//! there (`isobench_gpu_info`) with NVML's memory and energy figures and
//! its step counters. The run's scraper ([`crate::observe`]) reads each
//! page into a [`GpuScrape`] when it has those series (a CPU server,
//! another server, no `/metrics`: none, and no `gpu` section). The energy
//! of the measured window, the GPU time of its model forwards (the sum of
//! `isobench_step_device_seconds` over its phases) and its engine's idle
//! time (`isobench_engine_idle_seconds_total`) are those counters
//! interpolated linearly at the window's start and end between the scrapes
//! around them. Embedded and external targets go through the
//! same path.

use std::time::Instant;

use isobench_loadgen::scrape::Exposition;
use isobench_report::GpuMeasurement;

/// The GPU figures of one `/metrics` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuScrape {
    /// When the answer arrived.
    pub at: Instant,
    name: String,
    index: u32,
    driver: String,
    memory_total_bytes: u64,
    memory_peak_bytes: u64,
    energy_j: Option<f64>,
    graph_replays: u64,
    eager_steps: u64,
    device_busy_s: Option<f64>,
    engine_idle_s: Option<f64>,
}

impl GpuScrape {
    /// The GPU figures of a page, when it has `isobench_gpu_info`.
    pub fn of(page: &Exposition, at: Instant) -> Option<Self> {
        const INFO: &str = "isobench_gpu_info";
        let count = |name: &str| page.value(name).unwrap_or(0.0) as u64;
        Some(Self {
            at,
            name: page.label(INFO, "name")?.to_owned(),
            index: page.label(INFO, "gpu")?.parse().ok()?,
            driver: page.label(INFO, "driver")?.to_owned(),
            memory_total_bytes: count("isobench_gpu_memory_total_bytes"),
            memory_peak_bytes: count("isobench_gpu_memory_peak_bytes"),
            energy_j: page.value("isobench_gpu_energy_joules_total"),
            graph_replays: count("isobench_cuda_graph_replays_total"),
            eager_steps: count("isobench_eager_steps_total"),
            device_busy_s: page.sum("isobench_step_device_seconds_sum"),
            engine_idle_s: page.value("isobench_engine_idle_seconds_total"),
        })
    }
}

/// The measurement from scrapes in time order (at least one).
pub fn measure(scrapes: &[GpuScrape], window: Option<(Instant, Instant)>) -> GpuMeasurement {
    let first = &scrapes[0];
    let last = scrapes.last().unwrap_or(first);
    let over_window = |counter: fn(&GpuScrape) -> Option<f64>| {
        let (from, to) = window?;
        let at = |instant| counter_at(scrapes, instant, counter);
        Some((at(to)? - at(from)?).max(0.0))
    };
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
        energy_j: over_window(|s| s.energy_j),
        cuda_graph_replays: last.graph_replays.saturating_sub(first.graph_replays),
        eager_steps: last.eager_steps.saturating_sub(first.eager_steps),
        device_busy_s: over_window(|s| s.device_busy_s),
        engine_idle_s: over_window(|s| s.engine_idle_s),
    }
}

/// A counter of the scrapes at `at`, interpolated linearly between the
/// scrapes around it (the first or last scrape's value outside them).
fn counter_at(
    scrapes: &[GpuScrape],
    at: Instant,
    counter: fn(&GpuScrape) -> Option<f64>,
) -> Option<f64> {
    let points: Vec<(Instant, f64)> = scrapes
        .iter()
        .filter_map(|s| Some((s.at, counter(s)?)))
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
    use std::time::Duration;

    use super::*;

    const METRICS: &str = "# HELP isobench_eager_steps_total x\n\
        isobench_cuda_graph_replays_total 40\n\
        isobench_eager_steps_total 10\n\
        isobench_gpu_info{gpu=\"1\",name=\"NVIDIA \\\"H200\\\"\",driver=\"580.65.06\"} 1\n\
        isobench_gpu_memory_total_bytes 1000\n\
        isobench_gpu_memory_used_bytes 700\n\
        isobench_gpu_memory_peak_bytes 900\n\
        isobench_gpu_energy_joules_total 12.5\n\
        isobench_step_device_seconds_sum{phase=\"prefill\"} 0.25\n\
        isobench_step_device_seconds_sum{phase=\"decode\"} 1.5\n\
        isobench_engine_idle_seconds_total 3.25\n";

    fn parse(text: &str, at: Instant) -> Option<GpuScrape> {
        GpuScrape::of(&Exposition::parse(text), at)
    }

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
        // Forward time is summed over the step phases.
        assert_eq!(scrape.device_busy_s, Some(1.75));
        assert_eq!(scrape.engine_idle_s, Some(3.25));
    }

    #[test]
    fn metrics_without_a_gpu_give_no_scrape() {
        let cpu = "isobench_eager_steps_total 10\nisobench_gpu_memory_used_bytes 5\n";
        assert_eq!(parse(cpu, Instant::now()), None);
    }

    /// A scrape `ms` after `base`; the GPU was busy in forwards for 60% of
    /// the time since `base`, and the engine idle for 10%.
    fn at(base: Instant, ms: u64, energy: Option<f64>, eager: u64, peak: u64) -> GpuScrape {
        GpuScrape {
            at: base + Duration::from_millis(ms),
            energy_j: energy,
            device_busy_s: Some(0.6 * ms as f64 / 1000.0),
            engine_idle_s: Some(0.1 * ms as f64 / 1000.0),
            eager_steps: eager,
            memory_peak_bytes: peak,
            ..parse(METRICS, base).unwrap()
        }
    }

    #[test]
    fn window_energy_and_forward_time_are_interpolated_between_scrapes() {
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
        // 60% of the 500 ms window, interpolated the same way.
        let busy = m.device_busy_s.unwrap();
        assert!((busy - 0.3).abs() < 1e-9, "{busy}");
        let idle = m.engine_idle_s.unwrap();
        assert!((idle - 0.05).abs() < 1e-9, "{idle}");
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
        assert_eq!(measure(&scrapes, None).device_busy_s, None);
        let dark = [at(t, 0, None, 0, 1), at(t, 250, None, 1, 1)];
        assert_eq!(measure(&dark, Some(window)).energy_j, None);
        // A server that does not time its forwards or its idle engine:
        // neither figure.
        let untimed = dark.map(|s| GpuScrape {
            device_busy_s: None,
            engine_idle_s: None,
            ..s
        });
        let m = measure(&untimed, Some(window));
        assert_eq!((m.device_busy_s, m.engine_idle_s), (None, None));
    }
}
