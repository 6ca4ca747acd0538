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

/// A loaded module and whether its device is a Hopper or later (compute
/// capability 9.0 or later: programmatic dependent launch, thread block
/// clusters).
#[derive(Clone)]
struct Loaded {
    cuda_module: Arc<CudaModule>,
    hopper: bool,
}

/// The modules loaded so far, by device.
static LOADED: Mutex<Vec<(DeviceId, Source, Loaded)>> = Mutex::new(Vec::new());

/// A kernel and the stream it launches on.
pub(crate) struct Kernel {
    pub function: CudaFunction,
    pub stream: Arc<CudaStream>,
    /// Whether its device is a Hopper or later: [`Launch`] may start it
    /// before its predecessor ends, and in clusters.
    hopper: bool,
}

impl Kernel {
    pub fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.function)
    }

    /// Whether [`Launch::clusters`] can group its blocks (compute
    /// capability 9.0 or later).
    pub fn takes_clusters(&self) -> bool {
        self.hopper
    }

    /// The launch attribute that groups a grid's blocks along x in
    /// clusters of `blocks`.
    fn cluster_attribute(&self, blocks: u32) -> Result<sys::CUlaunchAttribute> {
        if !self.hopper {
            bail!("CUDA kernels: thread block clusters need compute capability 9.0 or later");
        }
        // SAFETY: a zeroed attribute is a valid union value; its id and
        // field are set next.
        let mut cluster: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        cluster.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        cluster.value.clusterDim.x = blocks;
        cluster.value.clusterDim.y = 1;
        cluster.value.clusterDim.z = 1;
        Ok(cluster)
    }

    /// How many clusters of `blocks` blocks of `threads` threads (no
    /// dynamic shared memory) its device runs at once: its
    /// multiprocessors over the cluster size, less what its GPCs' sizes
    /// leave over (on an H200, 66 of 2, 30 of 4, 15 of 8).
    pub fn resident_clusters(&self, blocks: u32, threads: u32) -> Result<usize> {
        let mut cluster = self.cluster_attribute(blocks)?;
        let config = sys::CUlaunchConfig {
            gridDimX: blocks,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: self.stream.cu_stream(),
            attrs: &raw mut cluster,
            numAttrs: 1,
        };
        let mut clusters: std::ffi::c_int = 0;
        self.stream.context().bind_to_thread().w()?;
        // SAFETY: `config` and its attribute live until the call returns;
        // the driver writes one int.
        unsafe {
            sys::cuOccupancyMaxActiveClusters(
                &raw mut clusters,
                self.function.cu_function(),
                &raw const config,
            )
        }
        .result()
        .w()?;
        Ok(clusters.max(0) as usize)
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
                hopper: context.compute_capability().w()?.0 >= 9,
            };
            loaded.push((device.id(), source, found.clone()));
            found
        }
    };
    Ok(Kernel {
        function: found.cuda_module.load_function(name).w()?,
        stream: device.cuda_stream(),
        hopper: found.hopper,
    })
}

/// A launch of one of the kernels that wait for their predecessor
/// themselves (`wait_for_prerequisites` in kernels/common.cuh, before
/// they read anything an earlier kernel writes): its arguments, by value.
pub(crate) struct Launch<'a> {
    kernel: &'a Kernel,
    args: Vec<ArgValue>,
    /// Blocks per thread block cluster along x, if clustered.
    cluster: Option<u32>,
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
            cluster: None,
        }
    }

    /// Groups the grid's blocks along x in clusters of `blocks`, which
    /// share their shared memory; only where [`Kernel::takes_clusters`],
    /// and `blocks` (at most 8) divides the grid's x.
    pub fn clusters(mut self, blocks: u32) -> Self {
        self.cluster = Some(blocks);
        self
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
        let mut attributes = Vec::with_capacity(2);
        if self.kernel.hopper {
            // SAFETY: a zeroed attribute is a valid union value; its id and
            // field are set next.
            let mut overlap: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            overlap.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            overlap.value.programmaticStreamSerializationAllowed = 1;
            attributes.push(overlap);
        }
        if let Some(blocks) = self.cluster {
            attributes.push(self.kernel.cluster_attribute(blocks)?);
        }
        let launch = sys::CUlaunchConfig {
            gridDimX: config.grid_dim.0,
            gridDimY: config.grid_dim.1,
            gridDimZ: config.grid_dim.2,
            blockDimX: config.block_dim.0,
            blockDimY: config.block_dim.1,
            blockDimZ: config.block_dim.2,
            sharedMemBytes: config.shared_mem_bytes,
            hStream: self.kernel.stream.cu_stream(),
            attrs: attributes.as_mut_ptr(),
            numAttrs: attributes.len() as u32,
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
