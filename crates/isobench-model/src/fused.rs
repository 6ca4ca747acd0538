//! Two of candle's elementwise ops fused, for the steps of several tokens
//! that run on candle's ops (single-token steps have kernels of their own,
//! [`crate::decode`]): SwiGLU's `silu(gate) * up` in one kernel instead of
//! two, and a residual add with the RMSNorm after it in one kernel that
//! writes both the sum and its norm (kernels/fused.cu). An eager decode
//! step of the 8B shape at batch 128 spent 0.54 ms in the SiLU and the
//! product and 0.62 ms in the adds and norms, of 8.7 (`ncu`); with the
//! fusions, four launches a layer fewer, graph-replayed decode steps at
//! batch 8 to 128 take 4-6% less (docs/performance.md).
//!
//! On CUDA with this crate's kernels, in bf16, f16 or f32, they run the
//! fused kernels; anywhere else (the CPU's candle path, `--plain`, other
//! dtypes) candle's ops, as before. A call that has the kernels but whose
//! tensors they cannot take (not contiguous, not 16-byte aligned, not
//! whole vectors) runs candle's ops too and is counted
//! ([`FusedOps::fallbacks`], a step's `StepStats::fused_fallbacks`), so
//! that `step_bench --check` can tell the model takes the fused path.

use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, Result, Tensor};

/// The fused ops of one network: its RMSNorm epsilon, and on CUDA the
/// kernels.
pub(crate) struct FusedOps {
    eps: f32,
    #[cfg(feature = "cuda")]
    kernels: Option<cuda::Kernels>,
    /// Calls that had the kernels and ran candle's ops instead.
    fallbacks: AtomicUsize,
}

impl FusedOps {
    /// `own_kernels` false keeps candle's ops everywhere (the plain path).
    pub(crate) fn new(device: &Device, dtype: DType, eps: f64, own_kernels: bool) -> Result<Self> {
        #[cfg(not(feature = "cuda"))]
        let _ = (device, dtype, own_kernels);
        Ok(Self {
            eps: eps as f32,
            #[cfg(feature = "cuda")]
            kernels: match device {
                Device::Cuda(cuda) if own_kernels => cuda::Kernels::load(cuda, dtype)?,
                _ => None,
            },
            fallbacks: AtomicUsize::new(0),
        })
    }

    /// How many calls so far had the fused kernels but ran candle's ops,
    /// the kernels not taking their tensors.
    pub(crate) fn fallbacks(&self) -> usize {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// `silu(gate) * up`, elementwise.
    pub(crate) fn silu_mul(&self, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(kernels) = &self.kernels {
            match kernels.silu_mul(gate, up)? {
                Some(out) => return Ok(out),
                None => self.count_fallback(),
            }
        }
        gate.silu()? * up
    }

    /// `(x + residual, RMSNorm(x + residual) * weight)`, rows along the
    /// last dim.
    pub(crate) fn add_rms_norm(
        &self,
        x: &Tensor,
        residual: &Tensor,
        weight: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        #[cfg(feature = "cuda")]
        if let Some(kernels) = &self.kernels {
            match kernels.add_rms_norm(x, residual, weight, self.eps)? {
                Some(out) => return Ok(out),
                None => self.count_fallback(),
            }
        }
        let sum = (x + residual)?;
        let normed = candle_nn::ops::rms_norm(&sum, weight, self.eps)?;
        Ok((sum, normed))
    }

    #[cfg(feature = "cuda")]
    fn count_fallback(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }
}

/// The fused kernels over plain CUDA tensors, for examples/gpu_kernels.rs
/// (checked against candle's ops); an error where they cannot take the
/// tensors, except in [`checks::silu_mul_counted`], which counts the
/// fallback. Not an API.
#[cfg(feature = "cuda")]
pub mod checks {
    use candle_core::{Result, Tensor, bail};

    use super::cuda::Kernels;

    fn kernels(tensor: &Tensor) -> Result<Kernels> {
        match Kernels::load(tensor.device().as_cuda_device()?, tensor.dtype())? {
            Some(kernels) => Ok(kernels),
            None => bail!("fused kernels: none for {:?}", tensor.dtype()),
        }
    }

    pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
        match kernels(gate)?.silu_mul(gate, up)? {
            Some(out) => Ok(out),
            None => bail!("fused kernels: silu_mul cannot take these tensors"),
        }
    }

    pub fn add_rms_norm(
        x: &Tensor,
        residual: &Tensor,
        weight: &Tensor,
        eps: f32,
    ) -> Result<(Tensor, Tensor)> {
        match kernels(x)?.add_rms_norm(x, residual, weight, eps)? {
            Some(out) => Ok(out),
            None => bail!("fused kernels: add_rms_norm cannot take these tensors"),
        }
    }

    /// `silu(gate) * up` as the model runs it, through `FusedOps` (the
    /// fused kernel, or candle's ops where it cannot take the tensors),
    /// with the calls that fell back to candle's ops: 0 or 1.
    pub fn silu_mul_counted(gate: &Tensor, up: &Tensor) -> Result<(Tensor, usize)> {
        let ops = super::FusedOps::new(gate.device(), gate.dtype(), 1e-5, true)?;
        let out = ops.silu_mul(gate, up)?;
        Ok((out, ops.fallbacks()))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
    use candle_core::{DType, Result, Tensor};

    use crate::kernels::{self, Launch, Source, device_ptr, dtype_name, empty};

    /// Threads per block (`THREADS` in kernels/fused.cu).
    const THREADS: u32 = 256;
    /// Blocks of a grid-strided `silu_mul` at most: 16 per SM of an H200.
    const MAX_BLOCKS: usize = 132 * 16;

    pub(super) struct Kernels {
        dtype: DType,
        silu_mul: kernels::Kernel,
        add_rms_norm: kernels::Kernel,
    }

    impl Kernels {
        /// The kernels for `dtype`; `None` for a dtype they lack.
        pub(super) fn load(device: &CudaDevice, dtype: DType) -> Result<Option<Self>> {
            if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32) {
                return Ok(None);
            }
            let name = dtype_name(dtype)?;
            let kernel = |op: &str| kernels::kernel(device, Source::Fused, &format!("{op}_{name}"));
            Ok(Some(Self {
                dtype,
                silu_mul: kernel("silu_mul")?,
                add_rms_norm: kernel("add_rms_norm")?,
            }))
        }

        /// Values per 16-byte vector.
        fn per_vector(&self) -> usize {
            16 / self.dtype.size_in_bytes()
        }

        /// The tensors' device addresses, if the kernels can take them:
        /// their dtype, contiguous, aligned to 16 bytes, `len` whole
        /// vectors.
        fn addresses<const N: usize>(
            &self,
            tensors: [&Tensor; N],
            len: usize,
        ) -> Result<Option<[u64; N]>> {
            let mut addresses = [0; N];
            for (address, tensor) in addresses.iter_mut().zip(tensors) {
                if tensor.dtype() != self.dtype || !tensor.is_contiguous() {
                    return Ok(None);
                }
                *address = device_ptr(tensor)?;
                if !address.is_multiple_of(16) {
                    return Ok(None);
                }
            }
            Ok(len.is_multiple_of(self.per_vector()).then_some(addresses))
        }

        pub(super) fn silu_mul(&self, gate: &Tensor, up: &Tensor) -> Result<Option<Tensor>> {
            let len = gate.elem_count();
            if gate.shape() != up.shape() {
                return Ok(None);
            }
            let Some([gate_address, up_address]) = self.addresses([gate, up], len)? else {
                return Ok(None);
            };
            let device = gate.device().as_cuda_device()?;
            let out = empty(device, self.dtype, (len, 1))?;
            let vectors = len / self.per_vector();
            let Ok(count) = u32::try_from(vectors) else {
                return Ok(None);
            };
            let blocks = vectors.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32;
            // SAFETY: gate, up and out hold `vectors` aligned 16-byte
            // vectors each (checked above); the kernel waits for its
            // predecessor before it reads.
            unsafe {
                Launch::new(&self.silu_mul)
                    .arg(&gate_address)
                    .arg(&up_address)
                    .arg(&device_ptr(&out)?)
                    .arg(&count)
                    .run(config(blocks))?;
            }
            out.reshape(gate.shape()).map(Some)
        }

        pub(super) fn add_rms_norm(
            &self,
            x: &Tensor,
            residual: &Tensor,
            weight: &Tensor,
            eps: f32,
        ) -> Result<Option<(Tensor, Tensor)>> {
            let cols = x.dims().last().copied().unwrap_or(0);
            let len = x.elem_count();
            if cols == 0 || x.shape() != residual.shape() || weight.dims() != [cols] {
                return Ok(None);
            }
            let Some([x_address, residual_address, weight_address]) =
                self.addresses([x, residual, weight], cols)?
            else {
                return Ok(None);
            };
            let rows = len / cols;
            let (Ok(cols_arg), Ok(grid)) = (u32::try_from(cols), u32::try_from(rows)) else {
                return Ok(None);
            };
            let device = x.device().as_cuda_device()?;
            let sum = empty(device, self.dtype, (rows, cols))?;
            let normed = empty(device, self.dtype, (rows, cols))?;
            // SAFETY: x, residual, sum and normed hold `rows` rows of
            // `cols` values, weight one row, all aligned whole vectors
            // (checked above); one block a row; the kernel waits for its
            // predecessor before it reads.
            unsafe {
                Launch::new(&self.add_rms_norm)
                    .arg(&x_address)
                    .arg(&residual_address)
                    .arg(&weight_address)
                    .arg(&device_ptr(&sum)?)
                    .arg(&device_ptr(&normed)?)
                    .arg(&cols_arg)
                    .arg(&eps)
                    .run(config(grid))?;
            }
            Ok(Some((sum.reshape(x.shape())?, normed.reshape(x.shape())?)))
        }
    }

    fn config(blocks: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}
