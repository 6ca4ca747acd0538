//! The GPU's own figures on `/metrics`: which GPU, its memory in use (and
//! the peak since the server started) and the energy it has drawn since
//! then. A sampler (the `nvml` module, in builds with the `cuda` feature)
//! fills them from NVML every 100 ms; until it has, or on the
//! CPU, nothing is rendered, so a scraper that finds
//! `isobench_gpu_info` knows the other series are real.
//!
//! Memory figures are the whole device's, as `nvidia-smi` shows them (every
//! process on the GPU counts); energy is NVML's total-energy counter, so
//! it includes the idle draw.

use std::fmt::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// What NVML says about the GPU, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The `N` of `cuda:N` (NVML's index of the device).
    pub index: u32,
    /// e.g. `NVIDIA H200`.
    pub name: String,
    /// The driver version, e.g. `580.65.06`.
    pub driver: String,
    pub memory_total_bytes: u64,
}

/// The sampled GPU figures, shared by the sampler and `/metrics`.
#[derive(Debug, Default)]
pub struct GpuGauges {
    info: OnceLock<GpuInfo>,
    memory_used_bytes: AtomicU64,
    memory_peak_bytes: AtomicU64,
    /// Energy since the server started, in millijoules.
    energy_mj: AtomicU64,
    /// False when the GPU has no energy counter (before Volta).
    energy_supported: AtomicBool,
}

impl GpuGauges {
    /// Sets the GPU's identity, once; later calls are ignored.
    #[cfg(any(feature = "cuda", test))]
    pub fn set_info(&self, info: GpuInfo) {
        let _ = self.info.set(info);
    }

    /// Records one sample: device memory in use, and energy since start
    /// (`None` when the GPU cannot tell).
    #[cfg(any(feature = "cuda", test))]
    pub fn record(&self, memory_used_bytes: u64, energy_mj: Option<u64>) {
        self.memory_used_bytes.store(memory_used_bytes, Relaxed);
        self.memory_peak_bytes.fetch_max(memory_used_bytes, Relaxed);
        if let Some(energy) = energy_mj {
            self.energy_mj.store(energy, Relaxed);
            self.energy_supported.store(true, Relaxed);
        }
    }

    /// Appends the Prometheus series, when a GPU has been described.
    pub fn render(&self, out: &mut String) {
        let Some(info) = self.info.get() else { return };
        let _ = writeln!(
            out,
            "# HELP isobench_gpu_info The GPU the model runs on (value always 1).\n# TYPE isobench_gpu_info gauge\n\
             isobench_gpu_info{{gpu=\"{}\",name=\"{}\",driver=\"{}\"}} 1",
            info.index,
            escape_label(&info.name),
            escape_label(&info.driver)
        );
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        };
        gauge(
            out,
            "isobench_gpu_memory_total_bytes",
            "Memory of the GPU.",
            info.memory_total_bytes,
        );
        gauge(
            out,
            "isobench_gpu_memory_used_bytes",
            "Memory in use on the GPU (all processes), sampled every 100 ms.",
            self.memory_used_bytes.load(Relaxed),
        );
        gauge(
            out,
            "isobench_gpu_memory_peak_bytes",
            "Highest sampled isobench_gpu_memory_used_bytes since the server started.",
            self.memory_peak_bytes.load(Relaxed),
        );
        if self.energy_supported.load(Relaxed) {
            let joules = self.energy_mj.load(Relaxed) as f64 / 1000.0;
            let _ = writeln!(
                out,
                "# HELP isobench_gpu_energy_joules_total Energy the GPU drew since the server started (NVML), sampled every 100 ms.\n\
                 # TYPE isobench_gpu_energy_joules_total counter\nisobench_gpu_energy_joules_total {joules}"
            );
        }
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_renders_until_a_gpu_is_described() {
        let gauges = GpuGauges::default();
        gauges.record(5, Some(7));
        let mut out = String::new();
        gauges.render(&mut out);
        assert_eq!(out, "");
    }

    #[test]
    fn samples_render_with_the_peak_and_energy_in_joules() {
        let gauges = GpuGauges::default();
        gauges.set_info(GpuInfo {
            index: 0,
            name: "NVIDIA \"H200\"".into(),
            driver: "580.65.06".into(),
            memory_total_bytes: 1000,
        });
        gauges.record(300, None);
        let mut out = String::new();
        gauges.render(&mut out);
        assert!(!out.contains("energy"), "{out}");
        gauges.record(900, Some(1500));
        gauges.record(400, Some(2500));
        let mut out = String::new();
        gauges.render(&mut out);
        for line in [
            "isobench_gpu_info{gpu=\"0\",name=\"NVIDIA \\\"H200\\\"\",driver=\"580.65.06\"} 1\n",
            "isobench_gpu_memory_total_bytes 1000\n",
            "isobench_gpu_memory_used_bytes 400\n",
            "isobench_gpu_memory_peak_bytes 900\n",
            "isobench_gpu_energy_joules_total 2.5\n",
        ] {
            assert!(out.contains(line), "missing {line:?} in\n{out}");
        }
    }
}
