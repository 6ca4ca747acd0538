//! Devices from user text (`cpu`, `cuda`, `cuda:N`) and what a device
//! reports about its memory.
//!
//! A CUDA device is made the one way CUDA-graph capture needs (see
//! docs/gpu.md): its own non-blocking stream
//! (`Device::new_cuda_with_stream`), cudarc's per-buffer event tracking
//! switched off before any tensor exists (everything runs on that one
//! stream, and recording events inside a capture is illegal), and a fixed
//! cuBLAS workspace so that cuBLAS never allocates one mid-capture. Eager
//! and captured steps then use the same workspace and so the same gemm
//! algorithms.
//!
//! Tensors come from the device's default memory pool (cudarc allocates
//! and frees them in stream order). By default that pool hands every byte
//! it does not hold for a live tensor back to the driver at each
//! synchronisation, and the engine synchronises once a step, so every
//! eager step would map its activations' memory afresh. The pool here
//! keeps what it has, as PyTorch's caching allocator does;
//! [`release_idle_memory`] returns the idle part to the driver: before
//! [`device_memory`] counts free memory, and after a step fails (one that
//! ran out of memory leaves what it did get idle in the pool, where
//! memory allocated outside it, a CUDA graph's own, cannot have it).

use candle_core::Device;

use crate::ModelError;

/// Free and total bytes of a device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub free: u64,
    pub total: u64,
}

const ACCEPTED: &str = "accepted: cpu, cuda, cuda:N (N the GPU's index, from 0)";

/// Parses a device spec: `cpu`, `cuda` (GPU 0) or `cuda:N`, and opens the
/// device. A CUDA spec on a build without the `cuda` feature, or on a
/// machine without a usable GPU, is a one-line error.
pub fn parse_device(spec: &str) -> Result<Device, ModelError> {
    let trimmed = spec.trim();
    if trimmed.eq_ignore_ascii_case("cpu") {
        return Ok(Device::Cpu);
    }
    let ordinal = if trimmed.eq_ignore_ascii_case("cuda") {
        0
    } else {
        match trimmed.split_once(':') {
            Some((kind, index)) if kind.eq_ignore_ascii_case("cuda") => {
                index.parse::<usize>().map_err(|_| {
                    ModelError::Device(format!(
                        "device `{spec}`: `{index}` is not a GPU index; {ACCEPTED}"
                    ))
                })?
            }
            _ => {
                return Err(ModelError::Device(format!(
                    "device `{spec}` is not known; {ACCEPTED}"
                )));
            }
        }
    };
    open_cuda(ordinal)
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_ordinal: usize) -> Result<Device, ModelError> {
    Err(ModelError::Device(
        "this isobench was built without CUDA support: rebuild with --features cuda (see docs/gpu.md)"
            .into(),
    ))
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> Result<Device, ModelError> {
    let failed = |err: &dyn std::fmt::Display| {
        let message = err.to_string();
        let first_line = message.lines().next().unwrap_or("unknown error").trim();
        ModelError::Device(format!("device cuda:{ordinal}: {first_line}"))
    };
    let device = Device::new_cuda_with_stream(ordinal).map_err(|err| failed(&err))?;
    let cuda = device.as_cuda_device()?;
    // SAFETY: no tensor exists on this device yet, and every operation of
    // this crate runs on the device's one stream, so no cross-stream
    // synchronisation is lost.
    unsafe { cuda.disable_event_tracking() };
    set_cublas_workspace(cuda).map_err(|err| failed(&err))?;
    keep_freed_memory(cuda).map_err(|err| failed(&err))?;
    Ok(device)
}

/// The memory pool that `cuMemAllocAsync` on `cuda`'s stream draws from.
#[cfg(feature = "cuda")]
fn default_pool(
    cuda: &candle_core::CudaDevice,
) -> Result<cudarc::driver::sys::CUmemoryPool, cudarc::driver::DriverError> {
    let context = cuda.cuda_stream().context().clone();
    context.bind_to_thread()?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid place for the handle; the device is the
    // context's own.
    unsafe { cudarc::driver::sys::cuDeviceGetDefaultMemPool(&raw mut pool, context.cu_device()) }
        .result()?;
    Ok(pool)
}

/// Sets the pool's release threshold to its maximum: memory freed by one
/// step stays in the pool for the next (module docs).
#[cfg(feature = "cuda")]
fn keep_freed_memory(cuda: &candle_core::CudaDevice) -> Result<(), String> {
    use cudarc::driver::sys::CUmemPool_attribute;

    let pool = default_pool(cuda).map_err(|err| format!("no default memory pool: {err}"))?;
    let mut threshold = u64::MAX;
    // SAFETY: the release threshold attribute takes a u64.
    unsafe {
        cudarc::driver::sys::cuMemPoolSetAttribute(
            pool,
            CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
    }
    .result()
    .map_err(|err| format!("cannot set the memory pool's release threshold: {err}"))
}

/// Bytes of the fixed cuBLAS workspace (what PyTorch gives Hopper GPUs).
#[cfg(feature = "cuda")]
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

#[cfg(feature = "cuda")]
fn set_cublas_workspace(cuda: &candle_core::CudaDevice) -> Result<(), String> {
    use cudarc::driver::DevicePtr;

    let stream = cuda.cuda_stream();
    let workspace = stream
        .alloc_zeros::<u8>(CUBLAS_WORKSPACE_BYTES)
        .map_err(|err| format!("cannot allocate the cuBLAS workspace: {err}"))?;
    let status = {
        let (pointer, _sync) = workspace.device_ptr(&stream);
        // SAFETY: the handle is the device's own; the workspace stays
        // allocated for the rest of the process (forgotten below), as long
        // as any clone of the device, and so the handle, can use it.
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *cuda.cublas_handle().handle(),
                pointer as *mut std::ffi::c_void,
                workspace.len(),
            )
        }
    };
    if status != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Err(format!("cublasSetWorkspace failed: {status:?}"));
    }
    std::mem::forget(workspace);
    Ok(())
}

/// Waits for the device's stream, then hands the memory pool's idle memory
/// (what no live tensor holds) back to the driver; nothing on the CPU.
pub fn release_idle_memory(device: &Device) -> Result<(), ModelError> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => {
            let cuda_error = |err: cudarc::driver::DriverError| ModelError::Cuda(err.to_string());
            cuda.cuda_stream().synchronize().map_err(cuda_error)?;
            let pool = default_pool(cuda).map_err(cuda_error)?;
            // SAFETY: the pool is the device's own; trimming releases only
            // memory that no allocation holds.
            unsafe { cudarc::driver::sys::cuMemPoolTrimTo(pool, 0) }
                .result()
                .map_err(cuda_error)
        }
        _ => Ok(()),
    }
}

/// Free and total memory of `device`; `None` on the CPU (or if the driver
/// cannot say). On a GPU it first hands the memory pool's idle memory back
/// to the driver ([`release_idle_memory`]), so that memory freed by earlier
/// steps (or by loading) counts as free.
pub fn device_memory(device: &Device) -> Option<DeviceMemory> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => {
            release_idle_memory(device).ok()?;
            let (free, total) = cuda.cuda_stream().context().mem_get_info().ok()?;
            Some(DeviceMemory {
                free: free as u64,
                total: total as u64,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_parses_and_has_no_device_memory() {
        for spec in ["cpu", "CPU", " cpu "] {
            let device = parse_device(spec).unwrap();
            assert!(device.is_cpu());
            assert_eq!(device_memory(&device), None);
        }
    }

    #[test]
    fn bad_specs_name_the_spec_and_what_is_accepted() {
        for (spec, expected) in [
            (
                "gpu",
                "device `gpu` is not known; accepted: cpu, cuda, cuda:N",
            ),
            (
                "cuda:x",
                "device `cuda:x`: `x` is not a GPU index; accepted",
            ),
            ("cuda:-1", "`-1` is not a GPU index"),
            ("metal:0", "device `metal:0` is not known"),
        ] {
            let err = parse_device(spec).unwrap_err();
            assert_eq!(err.kind(), "device");
            assert!(err.to_string().contains(expected), "{spec}: {err}");
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_a_one_line_error() {
        for spec in ["cuda", "cuda:0", "CUDA:3"] {
            let err = parse_device(spec).unwrap_err().to_string();
            assert_eq!(
                err,
                "this isobench was built without CUDA support: rebuild with --features cuda (see docs/gpu.md)"
            );
        }
    }
}
