//! This crate's CUDA modules (kernels/*.cu, compiled by build.rs into
//! fatbins: sm_90 machine code and the PTX), each loaded once per device
//! at its first use, and a kernel of one with the device's stream; the
//! launch of the dependent ones ([`Launch`]), and the tensors and device
//! addresses their arguments are made of ([`empty`], [`device_ptr`]).
//!
//! A single-token step is a chain of about a hundred short kernels, each
//! waiting for the one before it. [`Launch`] starts the kernels of that
//! chain with programmatic dependent launch (Hopper and later): a kernel
//! may start while the one before it drains, issue the loads of what it
//! reads that nobody writes (weights, the step's metadata), and wait for
//! its predecessor (`griddepcontrol.wait`, kernels/common.cuh) only
//! before it reads that kernel's output. Every kernel launched this way
//! waits so; candle's kernels, launched the ordinary way, wait for the
//! whole stream as always.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaModule, CudaStream, DevicePtr, LaunchArgs, LaunchConfig, sys,
};
use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
use candle_core::cuda_backend::{CudaDevice, DeviceId, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, DType, Result, Storage, Tensor, bail};
use half::{bf16, f16};

/// One of kernels/*.cu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Argmax,
    Decode,
    Fused,
    PagedAttention,
    PrefillAttention,
    Sample,
}

impl Source {
    fn fatbin(self) -> &'static [u8] {
        match self {
            Source::Argmax => include_bytes!(concat!(env!("OUT_DIR"), "/argmax.fatbin")),
            Source::Decode => include_bytes!(concat!(env!("OUT_DIR"), "/decode.fatbin")),
            Source::Fused => include_bytes!(concat!(env!("OUT_DIR"), "/fused.fatbin")),
            Source::PagedAttention => {
                include_bytes!(concat!(env!("OUT_DIR"), "/paged_attention.fatbin"))
            }
            Source::PrefillAttention => {
                include_bytes!(concat!(env!("OUT_DIR"), "/prefill_attention.fatbin"))
            }
            Source::Sample => include_bytes!(concat!(env!("OUT_DIR"), "/sample.fatbin")),
        }
    }
}

/// A loaded module and whether its device takes programmatic dependent
/// launches (compute capability 9.0 or later).
#[derive(Clone)]
struct Loaded {
    cuda_module: Arc<CudaModule>,
    overlaps: bool,
}

/// The modules loaded so far, by device.
static LOADED: Mutex<Vec<(DeviceId, Source, Loaded)>> = Mutex::new(Vec::new());

/// A kernel and the stream it launches on.
pub(crate) struct Kernel {
    pub function: CudaFunction,
    pub stream: Arc<CudaStream>,
    /// Whether [`Launch`] may start it before its predecessor ends.
    overlaps: bool,
}

impl Kernel {
    pub fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.function)
    }
}

/// Kernel `name` of `source`'s module on `device`'s stream.
pub(crate) fn kernel(device: &CudaDevice, source: Source, name: &str) -> Result<Kernel> {
    let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
    let found = loaded
        .iter()
        .find(|(id, loaded_source, _)| *id == device.id() && *loaded_source == source)
        .map(|(_, _, found)| found.clone());
    let found = match found {
        Some(found) => found,
        None => {
            let context = device.cuda_stream().context().clone();
            let found = Loaded {
                cuda_module: context
                    .load_module(Ptx::from_binary(source.fatbin().to_vec()))
                    .w()?,
                overlaps: context.compute_capability().w()?.0 >= 9,
            };
            loaded.push((device.id(), source, found.clone()));
            found
        }
    };
    Ok(Kernel {
        function: found.cuda_module.load_function(name).w()?,
        stream: device.cuda_stream(),
        overlaps: found.overlaps,
    })
}

/// A launch of one of the kernels that wait for their predecessor
/// themselves (`wait_for_prerequisites` in kernels/common.cuh, before
/// they read anything an earlier kernel writes): its arguments, by value.
pub(crate) struct Launch<'a> {
    kernel: &'a Kernel,
    args: Vec<ArgValue>,
}

/// A kernel argument, by value (the launch borrows them all at once).
pub(crate) enum ArgValue {
    Pointer(u64),
    Int(i32),
    Uint(u32),
    Float(f32),
}

/// What can be a kernel argument here: a device address (`u64`) or a
/// 32-bit number.
pub(crate) trait Arg {
    fn value(&self) -> ArgValue;
}

impl Arg for u64 {
    fn value(&self) -> ArgValue {
        ArgValue::Pointer(*self)
    }
}

impl Arg for i32 {
    fn value(&self) -> ArgValue {
        ArgValue::Int(*self)
    }
}

impl Arg for u32 {
    fn value(&self) -> ArgValue {
        ArgValue::Uint(*self)
    }
}

impl Arg for f32 {
    fn value(&self) -> ArgValue {
        ArgValue::Float(*self)
    }
}

impl<'a> Launch<'a> {
    pub fn new(kernel: &'a Kernel) -> Self {
        Self {
            kernel,
            args: Vec::with_capacity(24),
        }
    }

    pub fn arg(mut self, value: &impl Arg) -> Self {
        self.args.push(value.value());
        self
    }

    /// Launches the kernel on its stream, allowed to start as soon as
    /// every block of the kernel before it has started (or finished),
    /// where the device takes that.
    ///
    /// # Safety
    ///
    /// The arguments follow the kernel's signature; every pointer is into
    /// live device memory of the size the kernel reads or writes for this
    /// grid; and the kernel waits for its predecessor before it reads
    /// anything another kernel writes, or writes anything.
    pub unsafe fn run(self, config: LaunchConfig) -> Result<()> {
        let mut params: Vec<*mut c_void> = self
            .args
            .iter()
            .map(|arg| match arg {
                ArgValue::Pointer(value) => std::ptr::from_ref(value).cast_mut().cast(),
                ArgValue::Int(value) => std::ptr::from_ref(value).cast_mut().cast(),
                ArgValue::Uint(value) => std::ptr::from_ref(value).cast_mut().cast(),
                ArgValue::Float(value) => std::ptr::from_ref(value).cast_mut().cast(),
            })
            .collect();
        // SAFETY: a zeroed attribute is a valid union value; its id and
        // field are set below.
        let mut overlap: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        overlap.id =
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        overlap.value.programmaticStreamSerializationAllowed = 1;
        let launch = sys::CUlaunchConfig {
            gridDimX: config.grid_dim.0,
            gridDimY: config.grid_dim.1,
            gridDimZ: config.grid_dim.2,
            blockDimX: config.block_dim.0,
            blockDimY: config.block_dim.1,
            blockDimZ: config.block_dim.2,
            sharedMemBytes: config.shared_mem_bytes,
            hStream: self.kernel.stream.cu_stream(),
            attrs: &raw mut overlap,
            numAttrs: u32::from(self.kernel.overlaps),
        };
        self.kernel.stream.context().bind_to_thread().w()?;
        // SAFETY: `params` points at one value per argument, all alive
        // until the call returns (the driver copies them); the caller
        // vouches for what they point to (above).
        unsafe {
            sys::cuLaunchKernelEx(
                &raw const launch,
                self.kernel.function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .w()
    }
}

/// The suffix of a kernel compiled for `dtype` (`{name}_{suffix}`).
pub(crate) fn dtype_name(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        other => bail!("CUDA kernels: no kernels for {other:?}"),
    })
}

/// An uninitialised tensor on `device`; the kernel that receives it
/// writes every element it later reads.
pub(crate) fn empty(device: &CudaDevice, dtype: DType, shape: (usize, usize)) -> Result<Tensor> {
    let len = shape.0 * shape.1;
    // SAFETY: see above: every element is written by the launch that takes
    // the tensor as its output, before any other launch reads it.
    let storage = unsafe {
        match dtype {
            DType::F32 => CudaStorage::wrap_cuda_slice(device.alloc::<f32>(len)?, device.clone()),
            DType::F16 => CudaStorage::wrap_cuda_slice(device.alloc::<f16>(len)?, device.clone()),
            DType::BF16 => CudaStorage::wrap_cuda_slice(device.alloc::<bf16>(len)?, device.clone()),
            other => bail!("CUDA kernels: no kernels for {other:?}"),
        }
    };
    Ok(Tensor::from_storage(
        Storage::Cuda(storage),
        shape,
        BackpropOp::none(),
        false,
    ))
}

/// The device address of a contiguous tensor's first element.
pub(crate) fn device_ptr(tensor: &Tensor) -> Result<u64> {
    let (storage, layout) = tensor.storage_and_layout();
    let Storage::Cuda(storage) = &*storage else {
        bail!("CUDA kernels: a tensor is not on the GPU")
    };
    if !layout.is_contiguous() {
        bail!("CUDA kernels: a tensor is not contiguous");
    }
    let offset = (layout.start_offset() * storage.dtype().size_in_bytes()) as u64;
    let stream = storage.device().cuda_stream();
    let base = match storage.dtype() {
        DType::F32 => storage.as_cuda_slice::<f32>()?.device_ptr(&stream).0,
        DType::F16 => storage.as_cuda_slice::<f16>()?.device_ptr(&stream).0,
        DType::BF16 => storage.as_cuda_slice::<bf16>()?.device_ptr(&stream).0,
        DType::U32 => storage.as_cuda_slice::<u32>()?.device_ptr(&stream).0,
        other => bail!("CUDA kernels: no kernels for {other:?}"),
    };
    Ok(base + offset)
}
