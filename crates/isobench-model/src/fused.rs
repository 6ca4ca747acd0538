//! Three fusions of candle's ops, and the logits' cast to f32, for the
//! steps of several tokens that run on candle's ops (single-token steps
//! have kernels of their own, [`crate::decode`]), over the outputs of the
//! merged projections (q, k and v in one matrix product, gate and up in
//! another; src/llama.rs):
//!
//! - `silu_mul`: SwiGLU's `silu(gate) * up` in one kernel instead of two,
//!   from the two halves of each row of the gate/up product;
//! - `add_rms_norm`: a residual add with the RMSNorm after it in one
//!   kernel that writes both the sum and its norm;
//! - `rope_write_kv`: the q/k/v product split into its parts, RoPE on q
//!   and k, and k and v written into their cache slots, in one kernel
//!   instead of six (kernels/fused.cu);
//! - `to_f32`: the LM head's logits widened from bf16 or f16 to f32 (exact)
//!   with 16-byte loads, where candle's cast of a decode step's 128 rows of
//!   a 128k vocabulary took 0.17 ms, 7.5% of the 1B shape's step (`ncu`);
//!   the kernel takes the step from 2.97 to 2.85 ms (docs/performance.md).
//!
//! An eager decode step of the 8B shape at batch 128 spent 0.54 ms in the
//! SiLU and the product, 0.62 ms in the adds and norms and 0.39 ms in RoPE
//! and the cache writes, of 8.7 (`ncu`; docs/performance.md).
//!
//! On CUDA with this crate's kernels, in bf16, f16 or f32, they run the
//! fused kernels; anywhere else (the CPU's candle path, `--plain`, other
//! dtypes) candle's ops and paged_attention's `write_kv`, as
//! before. A call that has the kernels but whose tensors they cannot take
//! (not contiguous, not 16-byte aligned, not whole vectors) runs candle's
//! ops too and is counted ([`FusedOps::fallbacks`], a step's
//! `StepStats::fused_fallbacks`), so that `step_bench --check` can tell
//! the model takes the fused path.

use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{D, DType, Device, Result, Tensor};

use crate::paged_attention::write_kv;
use crate::rope::rotate;

/// The heads of a merged q/k/v product: `[T, (heads + 2 kv_heads) * dim]`.
#[derive(Clone, Copy)]
pub(crate) struct QkvHeads {
    pub heads: usize,
    pub kv_heads: usize,
    pub dim: usize,
}

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

    /// `silu(gate) * up`, elementwise, where `gate_up` [.., 2n] holds gate
    /// in the first n columns of each row and up in the last n.
    pub(crate) fn silu_mul(&self, gate_up: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(kernels) = &self.kernels {
            match kernels.silu_mul(gate_up)? {
                Some(out) => return Ok(out),
                None => self.count_fallback(),
            }
        }
        let half = gate_up.dim(D::Minus1)? / 2;
        gate_up.narrow(D::Minus1, 0, half)?.silu()? * gate_up.narrow(D::Minus1, half, half)?
    }

    /// Splits `qkv` [T, (heads + 2 kv_heads) * dim] into q, k and v,
    /// rotates q and k by the step's `angles` (cos and sin, [T, dim / 2]),
    /// writes k and v into `caches` at `slot_mapping` ([T], u32; padding
    /// slots write nowhere) and returns q, [1, T, heads, dim].
    pub(crate) fn rope_write_kv(
        &self,
        qkv: &Tensor,
        angles: &(Tensor, Tensor),
        caches: (&Tensor, &Tensor),
        slot_mapping: &Tensor,
        shape: QkvHeads,
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(kernels) = &self.kernels {
            match kernels.rope_write_kv(qkv, angles, caches, slot_mapping, shape)? {
                Some(q) => return Ok(q),
                None => self.count_fallback(),
            }
        }
        let (tokens, dim) = (qkv.dim(0)?, shape.dim);
        let part = |first_head: usize, count: usize| -> Result<Tensor> {
            qkv.narrow(1, first_head * dim, count * dim)?
                .contiguous()?
                .reshape((1, tokens, count, dim))
        };
        let (heads, kv_heads) = (shape.heads, shape.kv_heads);
        let (q, k) = rotate(&part(0, heads)?, &part(heads, kv_heads)?, angles)?;
        write_kv(caches.0, &k, slot_mapping)?;
        write_kv(caches.1, &part(heads + kv_heads, kv_heads)?, slot_mapping)?;
        Ok(q)
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

    /// `logits` in f32: the same tensor if it is f32 already.
    pub(crate) fn to_f32(&self, logits: &Tensor) -> Result<Tensor> {
        if logits.dtype() == DType::F32 {
            return Ok(logits.clone());
        }
        #[cfg(feature = "cuda")]
        if let Some(kernels) = &self.kernels {
            match kernels.to_f32(logits)? {
                Some(out) => return Ok(out),
                None => self.count_fallback(),
            }
        }
        logits.to_dtype(DType::F32)
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

    pub fn silu_mul(gate_up: &Tensor) -> Result<Tensor> {
        match kernels(gate_up)?.silu_mul(gate_up)? {
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

    /// `x` widened to f32 as the model runs it, through `FusedOps` (the
    /// kernel, or candle's cast where it cannot take the tensor), with the
    /// calls that fell back to candle's cast: 0 or 1.
    pub fn to_f32_counted(x: &Tensor) -> Result<(Tensor, usize)> {
        let ops = super::FusedOps::new(x.device(), x.dtype(), 1e-5, true)?;
        let out = ops.to_f32(x)?;
        Ok((out, ops.fallbacks()))
    }

    /// `silu(gate) * up` as the model runs it, through `FusedOps` (the
    /// fused kernel, or candle's ops where it cannot take the tensors),
    /// with the calls that fell back to candle's ops: 0 or 1.
    pub fn silu_mul_counted(gate_up: &Tensor) -> Result<(Tensor, usize)> {
        let ops = super::FusedOps::new(gate_up.device(), gate_up.dtype(), 1e-5, true)?;
        let out = ops.silu_mul(gate_up)?;
        Ok((out, ops.fallbacks()))
    }

    /// `rope_write_kv` as the model runs it (`heads`, `kv_heads`, `dim`),
    /// on the kernel with `fused` and on candle's ops and `write_kv`
    /// without; with the calls that fell back to candle's ops.
    pub fn rope_write_kv(
        qkv: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        caches: (&Tensor, &Tensor),
        slot_mapping: &Tensor,
        (heads, kv_heads, dim): (usize, usize, usize),
        fused: bool,
    ) -> Result<(Tensor, usize)> {
        let ops = super::FusedOps::new(qkv.device(), qkv.dtype(), 1e-5, fused)?;
        let shape = super::QkvHeads {
            heads,
            kv_heads,
            dim,
        };
        let angles = (cos.clone(), sin.clone());
        let q = ops.rope_write_kv(qkv, &angles, caches, slot_mapping, shape)?;
        Ok((q, ops.fallbacks()))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
    use candle_core::{DType, Result, Tensor};

    use super::QkvHeads;
    use crate::kernels::{self, Launch, Source, device_ptr, dtype_name, empty};

    /// Threads per block (`THREADS` in kernels/fused.cu).
    const THREADS: u32 = 256;
    /// Blocks of a grid-strided `silu_mul` at most: 16 per SM of an H200.
    const MAX_BLOCKS: usize = 132 * 16;

    pub(super) struct Kernels {
        dtype: DType,
        silu_mul: kernels::Kernel,
        add_rms_norm: kernels::Kernel,
        rope_write_kv: kernels::Kernel,
        to_f32: kernels::Kernel,
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
                rope_write_kv: kernel("rope_write_kv")?,
                to_f32: kernel("to_f32")?,
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

        pub(super) fn silu_mul(&self, gate_up: &Tensor) -> Result<Option<Tensor>> {
            let (cols, len) = (
                gate_up.dims().last().copied().unwrap_or(0),
                gate_up.elem_count(),
            );
            let half = cols / 2;
            if !cols.is_multiple_of(2) || !half.is_multiple_of(self.per_vector()) {
                return Ok(None);
            }
            let Some([address]) = self.addresses([gate_up], len)? else {
                return Ok(None);
            };
            let device = gate_up.device().as_cuda_device()?;
            let out = empty(device, self.dtype, (len / 2, 1))?;
            let vectors = len / 2 / self.per_vector();
            let (Ok(count), Ok(half_vectors)) = (
                u32::try_from(vectors),
                u32::try_from(half / self.per_vector()),
            ) else {
                return Ok(None);
            };
            let blocks = vectors.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32;
            // SAFETY: gate_up holds rows of 2 * half_vectors aligned 16-byte
            // vectors, out `vectors` of them, half a row each (checked
            // above); the kernel waits for its predecessor before it reads.
            unsafe {
                Launch::new(&self.silu_mul)
                    .arg(&address)
                    .arg(&device_ptr(&out)?)
                    .arg(&count)
                    .arg(&half_vectors)
                    .run(config(blocks))?;
            }
            let mut dims = gate_up.dims().to_vec();
            if let Some(last) = dims.last_mut() {
                *last = half;
            }
            out.reshape(dims).map(Some)
        }

        /// `x` widened to f32, in its shape; `None` where the kernel
        /// cannot take it (not this dtype, contiguous, 16-byte aligned and
        /// whole vectors).
        pub(super) fn to_f32(&self, x: &Tensor) -> Result<Option<Tensor>> {
            let len = x.elem_count();
            let Some([address]) = self.addresses([x], len)? else {
                return Ok(None);
            };
            let vectors = len / self.per_vector();
            let Ok(count) = u32::try_from(vectors) else {
                return Ok(None);
            };
            let device = x.device().as_cuda_device()?;
            let out = empty(device, DType::F32, (len, 1))?;
            let blocks = vectors.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32;
            // SAFETY: x holds `vectors` aligned 16-byte vectors (checked
            // above), out as many values in f32, 16-byte aligned as every
            // allocation; the kernel waits for its predecessor before it
            // reads.
            unsafe {
                Launch::new(&self.to_f32)
                    .arg(&address)
                    .arg(&device_ptr(&out)?)
                    .arg(&count)
                    .run(config(blocks))?;
            }
            out.reshape(x.shape()).map(Some)
        }

        /// See `FusedOps::rope_write_kv`; `None` where the kernel cannot
        /// take the tensors (not contiguous, another dtype, shapes that do
        /// not match).
        pub(super) fn rope_write_kv(
            &self,
            qkv: &Tensor,
            (cos, sin): &(Tensor, Tensor),
            (key_cache, value_cache): (&Tensor, &Tensor),
            slot_mapping: &Tensor,
            shape: QkvHeads,
        ) -> Result<Option<Tensor>> {
            let QkvHeads {
                heads,
                kv_heads,
                dim,
            } = shape;
            let tokens = qkv.dim(0)?;
            let cache_dims = key_cache.dims();
            let fits = qkv.dims() == [tokens, (heads + 2 * kv_heads) * dim]
                && dim.is_multiple_of(2)
                && cos.dims() == [tokens, dim / 2]
                && sin.dims() == [tokens, dim / 2]
                && slot_mapping.dims() == [tokens]
                && slot_mapping.dtype() == DType::U32
                && slot_mapping.is_contiguous()
                && cache_dims.len() == 4
                && cache_dims[2..] == [kv_heads, dim]
                && value_cache.dims() == cache_dims;
            let tensors = [qkv, cos, sin, key_cache, value_cache];
            if !fits
                || tensors
                    .iter()
                    .any(|t| t.dtype() != self.dtype || !t.is_contiguous())
            {
                return Ok(None);
            }
            let pairs = tokens * (heads + 2 * kv_heads) * dim / 2;
            let args = [tokens, heads, kv_heads, dim, cache_dims[0] * cache_dims[1]]
                .map(|value| u32::try_from(value).ok());
            let [
                Some(tokens),
                Some(heads_arg),
                Some(kv_heads),
                Some(dim_arg),
                Some(slots),
            ] = args
            else {
                return Ok(None);
            };
            let device = qkv.device().as_cuda_device()?;
            let q = empty(device, self.dtype, (tokens as usize * heads, dim))?;
            let blocks = pairs.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32;
            // SAFETY: qkv holds `tokens` rows of (heads + 2 kv_heads) * dim
            // values, cos and sin `tokens` rows of dim / 2, slot_mapping
            // `tokens` slots, q `tokens * heads` rows of dim, each cache
            // `slots` rows of kv_heads * dim (checked above); the kernel
            // skips slots past the cache and waits for its predecessor
            // before it reads or writes.
            unsafe {
                Launch::new(&self.rope_write_kv)
                    .arg(&device_ptr(qkv)?)
                    .arg(&device_ptr(cos)?)
                    .arg(&device_ptr(sin)?)
                    .arg(&device_ptr(slot_mapping)?)
                    .arg(&device_ptr(&q)?)
                    .arg(&device_ptr(key_cache)?)
                    .arg(&device_ptr(value_cache)?)
                    .arg(&tokens)
                    .arg(&heads_arg)
                    .arg(&kv_heads)
                    .arg(&dim_arg)
                    .arg(&slots)
                    .run(config(blocks))?;
            }
            q.reshape((1, tokens as usize, heads, dim)).map(Some)
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
