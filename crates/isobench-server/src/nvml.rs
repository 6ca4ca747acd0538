//! The NVML sampler (builds with the `cuda` feature): a thread that reads
//! the GPU's memory in use and its total-energy counter every
//! [`SAMPLE_INTERVAL`] into the server's [`GpuGauges`](crate::gpu::GpuGauges).
//!
//! nvml-wrapper opens `libnvidia-ml.so.1` (part of the NVIDIA driver) at
//! run time, so this builds on machines without a driver. Without NVML
//! (no driver, or a GPU NVML does not know) the server runs as before and
//! `/metrics` just has no `isobench_gpu_*` series; the reason is logged
//! once as a warning. The thread ends when the server's metrics are
//! dropped.

use std::sync::{Arc, Weak, mpsc};
use std::time::Duration;

use candle_core::DeviceLocation;
use isobench_model::Device;
use nvml_wrapper::Nvml;

use crate::gpu::GpuInfo;
use crate::metrics::Metrics;

/// How often the sampler reads NVML.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// How long the engine waits for NVML to describe the GPU before serving.
const INIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts sampling the GPU that `device` is (nothing on the CPU); returns
/// once the GPU is described in `metrics` (or NVML failed).
pub(crate) fn start_sampler(device: &Device, metrics: &Arc<Metrics>) {
    let DeviceLocation::Cuda { gpu_id } = device.location() else {
        return;
    };
    let index = gpu_id as u32;
    let metrics = Arc::downgrade(metrics);
    let (ready, wait) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("isobench-nvml".into())
        .spawn(move || {
            let result = sample_until_dropped(index, &metrics, &ready);
            if let Err(err) = result {
                tracing::warn!(
                    gpu = index,
                    "NVML: {err}; no GPU memory or energy figures on /metrics"
                );
            }
            let _ = ready.send(());
        });
    match spawned {
        Ok(_) => {
            let _ = wait.recv_timeout(INIT_TIMEOUT);
        }
        Err(err) => tracing::warn!("cannot start the NVML sampler thread: {err}"),
    }
}

/// Describes the GPU, signals `ready`, then samples until the metrics are gone.
fn sample_until_dropped(
    index: u32,
    metrics: &Weak<Metrics>,
    ready: &mpsc::Sender<()>,
) -> Result<(), nvml_wrapper::error::NvmlError> {
    let nvml = Nvml::init()?;
    let gpu = nvml.device_by_index(index)?;
    let memory = gpu.memory_info()?;
    // Energy is reported since the server started: NVML's counter runs
    // from the driver's load.
    let energy_start = gpu.total_energy_consumption().ok();
    let info = GpuInfo {
        index,
        name: gpu.name()?,
        driver: nvml.sys_driver_version()?,
        memory_total_bytes: memory.total,
    };
    tracing::info!(gpu = index, name = %info.name, driver = %info.driver, "NVML sampler started");
    let sample = |metrics: &Metrics| {
        let used = gpu.memory_info().map(|m| m.used).unwrap_or(0);
        let energy = energy_start.and_then(|start| {
            gpu.total_energy_consumption()
                .ok()
                .map(|now| now.saturating_sub(start))
        });
        metrics.gpu.record(used, energy);
    };
    match metrics.upgrade() {
        Some(metrics) => {
            sample(&metrics);
            metrics.gpu.set_info(info);
        }
        None => return Ok(()),
    }
    let _ = ready.send(());
    loop {
        std::thread::sleep(SAMPLE_INTERVAL);
        let Some(metrics) = metrics.upgrade() else {
            return Ok(());
        };
        sample(&metrics);
    }
}
