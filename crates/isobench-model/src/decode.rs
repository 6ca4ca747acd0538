//! Single-token steps on CUDA: a step of one token (a decode step of one
//! sequence) runs on this crate's own kernels (kernels/decode.cu) instead
//! of candle's ops and cuBLAS.
//!
//! Such a step reads every weight once and does almost no arithmetic, so
//! what it costs is bytes over memory bandwidth plus what the GPU spends
//! between and around the big reads. The kernels stream each weight row
//! once and fuse the small ops into the projections, so a layer is four
//! launches and the attention: `qkv_rope` (RMSNorm, the q/k/v
//! projections, RoPE and the K/V cache writes), the paged attention of
//! [`crate::paged_attention`], `residual` for `o_proj`, `swiglu` (RMSNorm,
//! gate and up, SiLU and the product) and `residual` for `down_proj`; then
//! `logits` (final RMSNorm and the LM head, f32 out). Steps of several
//! tokens stay on candle's ops: kernels for them were measured slower than
//! cuBLAS (kernels/decode.cu says which).
//!
//! The weights are the candle network's own tensors ([out, in], as in the
//! checkpoint), so nothing is stored twice. Launch shapes are fixed, every
//! input is a device tensor, and the temporaries come from the
//! stream-ordered allocator: the bucket-1 decode graph captures these
//! launches like any other. Kernels take raw device pointers (event
//! tracking is off on isobench's CUDA devices, see
//! [`crate::parse_device`]); every pointer points into a tensor that this
//! module holds for the launch. They launch with programmatic dependent
//! launch ([`crate::kernels`]), so every buffer of the step (q, the
//! attention's output and partials, the SwiGLU activations, the logits)
//! is allocated before its first kernel and reused by every layer.

use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::{DType, Module, Result, Tensor, bail};
use candle_nn::{Embedding, Linear};

use crate::KvCache;
use crate::kernels::{self, Arg, Source, device_ptr, dtype_name, empty};
use crate::paged_attention::Metadata;
use crate::paged_attention::cuda::{Buffers, attend_into, grid, int};
use crate::step::StepTensors;

/// Threads per block of every kernel (`THREADS` in kernels/decode.cu).
const THREADS: u32 = 256;
/// Row pairs per block: one per warp (`WARPS` in kernels/decode.cu).
const PAIRS_PER_BLOCK: usize = 8;

/// The kernels of kernels/decode.cu, each compiled per dtype as
/// `{name}_{dtype}`.
#[derive(Clone, Copy)]
enum Kernel {
    QkvRope,
    Residual,
    Swiglu,
    Logits,
}

impl Kernel {
    const ALL: [Kernel; 4] = [
        Kernel::QkvRope,
        Kernel::Residual,
        Kernel::Swiglu,
        Kernel::Logits,
    ];

    fn name(self) -> &'static str {
        match self {
            Kernel::QkvRope => "qkv_rope",
            Kernel::Residual => "residual",
            Kernel::Swiglu => "swiglu",
            Kernel::Logits => "logits",
        }
    }
}

/// A weight [out, in] and its optional bias [out].
pub(crate) struct Projection {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Projection {
    pub(crate) fn of(linear: &Linear) -> Self {
        Self {
            weight: linear.weight().clone(),
            bias: linear.bias().cloned(),
        }
    }

    /// Outputs `start..start + len` of `linear` (one part of a stacked
    /// projection): views of its weight's rows, [out, in] as on a GPU, and
    /// of its bias.
    pub(crate) fn rows(linear: &Linear, start: usize, len: usize) -> Result<Self> {
        Ok(Self {
            weight: linear.weight().narrow(0, start, len)?,
            bias: linear
                .bias()
                .map(|bias| bias.narrow(0, start, len))
                .transpose()?,
        })
    }

    fn outputs(&self) -> usize {
        self.weight.dims()[0]
    }

    fn inputs(&self) -> usize {
        self.weight.dims()[1]
    }
}

/// One decoder layer's tensors.
pub(crate) struct LayerWeights {
    pub input_norm: Tensor,
    pub q: Projection,
    pub k: Projection,
    pub v: Projection,
    pub o: Projection,
    pub post_attention_norm: Tensor,
    pub gate: Projection,
    pub up: Projection,
    pub down: Projection,
}

/// The model's sizes the kernels take.
#[derive(Clone, Copy)]
pub(crate) struct Dims {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
}

/// The single-token path: the network's tensors, viewed by the kernels.
pub(crate) struct SingleToken {
    layers: Vec<LayerWeights>,
    norm: Tensor,
    lm_head: Projection,
    /// The rotary tables [max_position_embeddings, head_dim / 2].
    cos: Tensor,
    sin: Tensor,
    dims: Dims,
    dtype: DType,
    /// Every kernel for `dtype`, in [`Kernel::ALL`] order.
    kernels: Vec<kernels::Kernel>,
}

impl SingleToken {
    /// `None` (the step keeps candle's ops) when the kernels cannot run
    /// this model: a dtype or a layout they do not take.
    pub(crate) fn new(
        layers: Vec<LayerWeights>,
        (norm, lm_head): (Tensor, Projection),
        (cos, sin): (Tensor, Tensor),
        dims: Dims,
    ) -> Option<Self> {
        let dtype = norm.dtype();
        let built = check(&layers, [&norm, &lm_head.weight, &cos, &sin], dims, dtype)
            .and_then(|()| load(&norm, dtype).map_err(|err| err.to_string()));
        match built {
            Ok(kernels) => Some(Self {
                layers,
                norm,
                lm_head,
                cos,
                sin,
                dims,
                dtype,
                kernels,
            }),
            Err(reason) => {
                tracing::info!(%reason, "single-token steps run on candle's ops");
                None
            }
        }
    }

    /// Whether `step` is a single-token step.
    pub(crate) fn takes(&self, step: &StepTensors) -> bool {
        step.input_ids.dim(0).is_ok_and(|tokens| tokens == 1)
    }

    /// f32 logits [1, vocab] of the step's token, as
    /// [`crate::llama::Network::run`] computes them.
    pub(crate) fn run(
        &self,
        embed: &Embedding,
        step: &StepTensors,
        cache: &KvCache,
    ) -> Result<Tensor> {
        let tokens = step.input_ids.dim(0)?;
        if tokens != 1 {
            bail!("decode kernels: a step of {tokens} tokens; they run single tokens");
        }
        let Dims {
            heads,
            kv_heads,
            head_dim,
            eps,
        } = self.dims;
        let device = self.norm.device().as_cuda_device()?.clone();
        // Every buffer of the step first, reused by every layer: an
        // allocation between two kernels would keep the second from
        // starting before the first ends (`crate::kernels`).
        let q = empty(&device, self.dtype, (1, heads * head_dim))?;
        let intermediate = self.layers.first().map_or(0, |layer| layer.gate.outputs());
        let act = empty(&device, self.dtype, (1, intermediate))?;
        let vocab = self.lm_head.outputs();
        let logits = empty(&device, DType::F32, (1, vocab))?;
        let queries = q.reshape((1, 1, heads, head_dim))?;
        let metadata = Metadata::of(step);
        let attention = Buffers::new(&queries, cache.layer(0), &metadata, heads)?;
        let h = embed.forward(&step.input_ids)?;
        let hidden = h.dim(1)?;
        let num_slots = u32::try_from(cache.num_blocks() * cache.block_size()).unwrap_or(u32::MAX);
        let input = |x: &Tensor, norm: Option<&Tensor>, k: usize| Input {
            x: x.clone(),
            norm: norm.cloned(),
            eps,
            k,
        };
        for (index, layer) in self.layers.iter().enumerate() {
            let (key_cache, value_cache) = cache.layer(index);
            self.launch(Kernel::QkvRope, (heads + 2 * kv_heads) * head_dim / 2)
                .arg(&device_ptr(&q)?)
                .arg(&device_ptr(key_cache)?)
                .arg(&device_ptr(value_cache)?)
                .arg(&device_ptr(&layer.q.weight)?)
                .arg(&device_ptr(&layer.k.weight)?)
                .arg(&device_ptr(&layer.v.weight)?)
                .arg(&bias_ptr(&layer.q)?)
                .arg(&bias_ptr(&layer.k)?)
                .arg(&bias_ptr(&layer.v)?)
                .arg(&device_ptr(&self.cos)?)
                .arg(&device_ptr(&self.sin)?)
                .arg(&device_ptr(&step.positions)?)
                .arg(&device_ptr(&step.slot_mapping)?)
                .arg(&num_slots)
                .arg(&int(hidden, "hidden_size")?)
                .arg(&int(heads, "the head count")?)
                .arg(&int(kv_heads, "the KV head count")?)
                .arg(&int(head_dim, "head_dim")?)
                .input(&input(&h, Some(&layer.input_norm), hidden))?
                .run()?;
            attend_into(
                &queries,
                (key_cache, value_cache),
                &metadata,
                heads,
                &attention,
            )?;
            self.residual(&h, &layer.o, &input(&attention.out, None, heads * head_dim))?;
            if layer.gate.outputs() != intermediate {
                bail!("decode kernels: the layers' intermediate sizes differ");
            }
            self.launch(Kernel::Swiglu, intermediate)
                .arg(&device_ptr(&act)?)
                .arg(&device_ptr(&layer.gate.weight)?)
                .arg(&device_ptr(&layer.up.weight)?)
                .arg(&bias_ptr(&layer.gate)?)
                .arg(&bias_ptr(&layer.up)?)
                .arg(&int(intermediate, "intermediate_size")?)
                .input(&input(&h, Some(&layer.post_attention_norm), hidden))?
                .run()?;
            self.residual(&h, &layer.down, &input(&act, None, intermediate))?;
        }
        // The step's one token is its one sequence's last.
        self.launch(Kernel::Logits, vocab.div_ceil(2))
            .arg(&device_ptr(&logits)?)
            .arg(&device_ptr(&self.lm_head.weight)?)
            .arg(&int(vocab, "vocab_size")?)
            .input(&input(&h, Some(&self.norm), hidden))?
            .run()?;
        Ok(logits)
    }

    /// `kernel` over `pairs` row pairs, one per warp.
    fn launch(&self, kernel: Kernel, pairs: usize) -> Launch<'_> {
        Launch {
            launch: kernels::Launch::new(&self.kernels[kernel as usize]),
            blocks: pairs.div_ceil(PAIRS_PER_BLOCK),
        }
    }

    /// `h += x W^T (+ b)`.
    fn residual(&self, h: &Tensor, projection: &Projection, input: &Input) -> Result<()> {
        let out = projection.outputs();
        self.launch(Kernel::Residual, out.div_ceil(2))
            .arg(&device_ptr(h)?)
            .arg(&device_ptr(&projection.weight)?)
            .arg(&bias_ptr(projection)?)
            .arg(&int(out, "a projection's outputs")?)
            .input(input)?
            .run()
    }
}

/// What a projection reads: the token's activations `x` [k], normed by
/// RMSNorm with weight `norm` first if given.
struct Input {
    x: Tensor,
    norm: Option<Tensor>,
    eps: f32,
    k: usize,
}

/// The kernels of kernels/decode.cu for `dtype` on `anchor`'s device, in
/// [`Kernel::ALL`] order.
fn load(anchor: &Tensor, dtype: DType) -> Result<Vec<kernels::Kernel>> {
    let device = anchor.device().as_cuda_device()?;
    let dtype = dtype_name(dtype)?;
    Kernel::ALL
        .iter()
        .map(|k| kernels::kernel(device, Source::Decode, &format!("{}_{dtype}", k.name())))
        .collect()
}

/// Why the kernels cannot run this model, if they cannot.
fn check(
    layers: &[LayerWeights],
    others: [&Tensor; 4],
    dims: Dims,
    dtype: DType,
) -> std::result::Result<(), String> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(format!("no kernels for {dtype:?}"));
    }
    if !dims.head_dim.is_multiple_of(2) {
        return Err(format!("head_dim {} is odd", dims.head_dim));
    }
    let per_load = 16 / dtype.size_in_bytes();
    let mut tensors = others.to_vec();
    for layer in layers {
        tensors.extend([&layer.input_norm, &layer.post_attention_norm]);
        for p in [
            &layer.q,
            &layer.k,
            &layer.v,
            &layer.o,
            &layer.gate,
            &layer.up,
            &layer.down,
        ] {
            // Lanes read rows in 16-byte loads.
            if !p.inputs().is_multiple_of(per_load) {
                return Err(format!(
                    "a projection has {} inputs, not a multiple of {per_load}",
                    p.inputs()
                ));
            }
            tensors.push(&p.weight);
            tensors.extend(p.bias.as_ref());
        }
    }
    for tensor in tensors {
        if tensor.dtype() != dtype || !tensor.is_contiguous() {
            return Err(format!(
                "a weight is {:?} (contiguous: {}), the step computes in {dtype:?}",
                tensor.dtype(),
                tensor.is_contiguous(),
            ));
        }
        let pointer = device_ptr(tensor).map_err(|err| err.to_string())?;
        if !pointer.is_multiple_of(16) {
            return Err("a weight does not start 16-byte aligned".into());
        }
    }
    Ok(())
}

/// A projection kernel's launch being built: its arguments and blocks.
struct Launch<'a> {
    launch: kernels::Launch<'a>,
    blocks: usize,
}

impl Launch<'_> {
    fn arg(mut self, value: &impl Arg) -> Self {
        self.launch = self.launch.arg(value);
        self
    }

    /// The arguments every kernel ends with: (x, norm, eps, k).
    fn input(self, input: &Input) -> Result<Self> {
        Ok(self
            .arg(&device_ptr(&input.x)?)
            .arg(&input.norm.as_ref().map_or(Ok(0), device_ptr)?)
            .arg(&input.eps)
            .arg(&int(input.k, "a projection's inputs")?))
    }

    fn run(self) -> Result<()> {
        let config = LaunchConfig {
            grid_dim: (grid(self.blocks, "a projection's blocks")?, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments follow the kernel's signature in
        // kernels/decode.cu (built in that order by the callers above);
        // every pointer is into a live tensor of the expected dtype and
        // size (checked at construction and by the step's validation),
        // and the grid is what the kernel's indexing expects. Each kernel
        // waits for its predecessor before it reads activations or the
        // step's inputs, or writes.
        unsafe { self.launch.run(config) }
    }
}

/// The bias's address, or null.
fn bias_ptr(projection: &Projection) -> Result<u64> {
    projection.bias.as_ref().map_or(Ok(0), device_ptr)
}
