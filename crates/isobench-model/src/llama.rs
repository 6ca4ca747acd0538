//! The Llama-family decoder (Llama 2/3, Mistral, Qwen2) over a paged KV
//! cache.
//!
//! Papers: "LLaMA: Open and Efficient Foundation Language Models" (Touvron
//! et al., 2023, arXiv:2302.13971), "Llama 2" (arXiv:2307.09288), "The Llama
//! 3 Herd of Models" (arXiv:2407.21783); grouped-query attention from "GQA"
//! (Ainslie et al., 2023, arXiv:2305.13245); Mistral 7B (arXiv:2310.06825)
//! and Qwen2 (arXiv:2407.10671) differ only in biases and tying, which
//! [`ModelConfig`] describes.
//!
//! A step runs all its new tokens, of every sequence, through each layer
//! together: one matmul per projection over `[T, hidden]` (q, k and v
//! stacked into one, gate and up into another), then paged attention per
//! token. Only the last new token of each sequence goes through the final
//! norm and the LM head. The same network is built in two forms: candle's
//! ops (`Network`: the GPU, and the CPU's plain path) and the CPU step of
//! [`crate::cpu`] (`CpuNetwork`, q/k/v and gate/up fused), from the same
//! checkpoint names. On CUDA, `Network` hands single-token steps to the
//! kernels of `crate::decode`, over views of its own tensors, and in the
//! other steps runs RoPE with the K/V cache writes, SwiGLU's product and
//! each residual add with the norm after it as one kernel each
//! (`crate::fused`).

use candle_core::{DType, Device, Module, Result, Shape, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm};

use crate::cpu::{CpuLayer, CpuNetwork, Isa, Matrix, Projection, Shapes};
use crate::fused::{FusedOps, QkvHeads};
use crate::paged_attention::paged_attention;
use crate::rope::RotaryEmbedding;
use crate::seeded::Init;
use crate::step::{HostStep, StepLimits, StepTensors};
use crate::timer::StepTimer;
use crate::weights::Weights;
use crate::{
    CausalLm, GraphShapes, KvCache, ModelConfig, ModelError, ModelOptions, StepBatch, StepStats,
};

/// A projection `y = x W^T + b`. On the CPU its `W` ([out, in]) is stored
/// transposed: `Linear` multiplies by `W^T`, and a contiguous right-hand
/// side saves gemm from repacking the weights on every call, which makes
/// small-batch steps up to twice as fast there. On a GPU it keeps the
/// checkpoint's layout, which the single-token kernels of `crate::decode`
/// stream row by row (and cuBLAS reads as a transposed operand).
fn linear(
    in_dim: usize,
    out_dim: usize,
    bias: bool,
    w: &Weights<'_>,
) -> std::result::Result<Linear, ModelError> {
    let weight = w.get((out_dim, in_dim), "weight", Init::Normal)?;
    let bias = bias
        .then(|| w.get(out_dim, "bias", Init::Zeros))
        .transpose()?;
    Ok(Linear::new(gemm_layout(weight)?, bias))
}

/// A weight [out, in] laid out for the device's `Linear`: column-major on
/// the CPU, as it is elsewhere.
fn gemm_layout(weight: Tensor) -> Result<Tensor> {
    if weight.device().is_cpu() {
        weight.t()?.contiguous()?.t()
    } else {
        Ok(weight)
    }
}

/// Projections that read the same input, as one: their weights `parts`
/// (name, outputs) stacked into one [sum of outputs, in] matrix, so a step
/// runs them as one matrix product, whose columns are the parts' outputs
/// in order (on a GPU, `decode::Projection::rows` views one part).
fn stacked_linear(
    in_dim: usize,
    parts: &[(&str, usize)],
    bias: bool,
    w: &Weights<'_>,
) -> std::result::Result<Linear, ModelError> {
    let shapes = |shape: &dyn Fn(usize) -> Shape| -> Vec<(&str, Shape)> {
        parts
            .iter()
            .map(|&(name, out)| (name, shape(out)))
            .collect()
    };
    let weight = w.stacked(&shapes(&|out| (out, in_dim).into()), "weight", Init::Normal)?;
    let bias = bias
        .then(|| w.stacked(&shapes(&|out| out.into()), "bias", Init::Zeros))
        .transpose()?;
    Ok(Linear::new(gemm_layout(weight)?, bias))
}

fn rms_norm(size: usize, eps: f64, w: &Weights<'_>) -> std::result::Result<RmsNorm, ModelError> {
    Ok(RmsNorm::new(w.get(size, "weight", Init::Ones)?, eps))
}

struct Mlp {
    /// gate_proj and up_proj stacked: [T, 2 * intermediate] out.
    gate_up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn new(cfg: &ModelConfig, w: &Weights<'_>) -> std::result::Result<Self, ModelError> {
        let (h, i, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
        Ok(Self {
            gate_up_proj: stacked_linear(h, &[("gate_proj", i), ("up_proj", i)], bias, w)?,
            down_proj: linear(i, h, bias, &w.pp("down_proj"))?,
        })
    }

    fn forward(&self, xs: &Tensor, fused: &FusedOps) -> Result<Tensor> {
        let gate_up = xs.apply(&self.gate_up_proj)?;
        fused.silu_mul(&gate_up)?.apply(&self.down_proj)
    }
}

/// What every layer of one step shares.
struct StepContext<'a> {
    step: &'a StepTensors,
    fused: &'a FusedOps,
    /// cos and sin of the tokens' rotary angles, [T, head_dim / 2] each.
    angles: (Tensor, Tensor),
}

struct Attention {
    /// q_proj, k_proj and v_proj stacked: [T, (heads + 2 kv_heads) * head_dim] out.
    qkv_proj: Linear,
    o_proj: Linear,
    heads: QkvHeads,
}

impl Attention {
    fn new(cfg: &ModelConfig, w: &Weights<'_>) -> std::result::Result<Self, ModelError> {
        let h = cfg.hidden_size;
        let q_dim = cfg.num_attention_heads * cfg.head_dim;
        let kv_dim = cfg.num_key_value_heads * cfg.head_dim;
        let parts = [("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)];
        Ok(Self {
            qkv_proj: stacked_linear(h, &parts, cfg.qkv_bias, w)?,
            o_proj: linear(q_dim, h, cfg.o_proj_bias, &w.pp("o_proj"))?,
            heads: QkvHeads {
                heads: cfg.num_attention_heads,
                kv_heads: cfg.num_key_value_heads,
                dim: cfg.head_dim,
            },
        })
    }

    /// `xs` [T, hidden] -> [T, hidden]; writes the tokens' keys and values
    /// into the layer's cache first.
    fn forward(
        &self,
        xs: &Tensor,
        ctx: &StepContext<'_>,
        (key_cache, value_cache): (&Tensor, &Tensor),
    ) -> Result<Tensor> {
        let qkv = xs.apply(&self.qkv_proj)?;
        let caches = (key_cache, value_cache);
        let q = ctx.fused.rope_write_kv(
            &qkv,
            &ctx.angles,
            caches,
            &ctx.step.slot_mapping,
            self.heads,
        )?;
        paged_attention(&q, key_cache, value_cache, ctx.step, self.heads.heads)?.apply(&self.o_proj)
    }
}

struct DecoderLayer {
    self_attn: Attention,
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn new(cfg: &ModelConfig, w: &Weights<'_>) -> std::result::Result<Self, ModelError> {
        Ok(Self {
            self_attn: Attention::new(cfg, &w.pp("self_attn"))?,
            mlp: Mlp::new(cfg, &w.pp("mlp"))?,
            input_layernorm: rms_norm(cfg.hidden_size, cfg.rms_norm_eps, &w.pp("input_layernorm"))?,
            post_attention_layernorm: rms_norm(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                &w.pp("post_attention_layernorm"),
            )?,
        })
    }

    /// The residual stream `xs` after this layer, and with `next_norm`
    /// (the next layer's input norm, applied by this layer's last add) the
    /// stream through it. `normed` is `xs` through this layer's input norm
    /// when the layer before made it so.
    fn forward(
        &self,
        (xs, normed): (&Tensor, Option<Tensor>),
        ctx: &StepContext<'_>,
        cache: (&Tensor, &Tensor),
        next_norm: Option<&RmsNorm>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let normed = match normed {
            Some(normed) => normed,
            None => xs.apply(&self.input_layernorm)?,
        };
        let attended = self.self_attn.forward(&normed, ctx, cache)?;
        let (xs, normed) =
            ctx.fused
                .add_rms_norm(&attended, xs, self.post_attention_layernorm.weight())?;
        let mlp_out = self.mlp.forward(&normed, ctx.fused)?;
        match next_norm {
            Some(norm) => {
                let (xs, normed) = ctx.fused.add_rms_norm(&mlp_out, &xs, norm.weight())?;
                Ok((xs, Some(normed)))
            }
            None => Ok(((mlp_out + xs)?, None)),
        }
    }
}

/// The network's layers and weights: what a step computes, eagerly or
/// inside a CUDA-graph capture.
pub(crate) struct Network {
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    rotary: RotaryEmbedding,
    /// SwiGLU's product, and each residual add with the norm after it.
    fused: FusedOps,
    /// On CUDA, the kernels that run single-token steps.
    #[cfg(feature = "cuda")]
    single_token: Option<crate::decode::SingleToken>,
}

impl Network {
    /// f32 logits [B, vocab] of each sequence's last new token. Reads the
    /// step only through its tensors, so it can be captured.
    pub(crate) fn run(&self, step: &StepTensors, cache: &KvCache) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(single) = self.single_token.as_ref().filter(|s| s.takes(step)) {
            return single.run(&self.embed_tokens, step, cache);
        }
        let ctx = StepContext {
            step,
            fused: &self.fused,
            angles: self.rotary.angles(&step.positions)?,
        };
        let mut xs = self.embed_tokens.forward(&step.input_ids)?;
        let mut normed = None;
        for (index, layer) in self.layers.iter().enumerate() {
            let next_norm = self.layers.get(index + 1).map(|next| &next.input_layernorm);
            (xs, normed) = layer.forward((&xs, normed), &ctx, cache.layer(index), next_norm)?;
        }
        let logits = xs
            .index_select(&step.last_token_rows, 0)?
            .apply(&self.norm)?
            .apply(&self.lm_head)?;
        self.fused.to_f32(&logits)
    }
}

/// What runs a step: candle's graph of ops (GPU, and the CPU's plain
/// path), or the CPU step of [`crate::cpu`].
enum Engine {
    Candle(Box<Network>),
    Cpu(Box<CpuNetwork>),
}

impl Engine {
    /// [`FusedOps::fallbacks`] so far (none on the CPU step).
    fn fused_fallbacks(&self) -> usize {
        match self {
            Engine::Candle(net) => net.fused.fallbacks(),
            Engine::Cpu(_) => 0,
        }
    }
}

/// A Llama-family causal LM; build it with [`crate::load_model_with`].
pub(crate) struct Llama {
    engine: Engine,
    config: ModelConfig,
    device: Device,
    dtype: DType,
    timer: Option<StepTimer>,
    #[cfg(feature = "cuda")]
    graphs: Option<crate::graph::GraphRunner>,
    last: StepStats,
}

impl Llama {
    pub(crate) fn new(
        cfg: &ModelConfig,
        w: &Weights<'_>,
        options: &ModelOptions,
    ) -> std::result::Result<Self, ModelError> {
        let buckets = options.buckets()?;
        let device = w.device().clone();
        let engine = if device.is_cpu() && options.own_kernels {
            Engine::Cpu(Box::new(cpu_network(cfg, w)?))
        } else {
            Engine::Candle(Box::new(candle_network(cfg, w, options.own_kernels)?))
        };
        #[cfg(not(feature = "cuda"))]
        let _ = buckets;
        Ok(Self {
            engine,
            config: cfg.clone(),
            timer: StepTimer::for_device(&device)?,
            #[cfg(feature = "cuda")]
            graphs: (options.cuda_graphs && device.is_cuda())
                .then(|| crate::graph::GraphRunner::new(buckets, cfg.vocab_size)),
            device,
            dtype: w.dtype(),
            last: StepStats::default(),
        })
    }

    fn check_cache(&self, cache: &KvCache) -> std::result::Result<(), ModelError> {
        let cfg = &self.config;
        let expected = (cfg.num_key_value_heads, cfg.head_dim);
        if cache.num_layers() != cfg.num_hidden_layers || cache.kv_shape() != expected {
            return Err(ModelError::CacheMismatch(format!(
                "cache has {} layers of {:?} (kv heads, head dim); the model has {} of {expected:?}",
                cache.num_layers(),
                cache.kv_shape(),
                cfg.num_hidden_layers
            )));
        }
        if cache.dtype() != self.dtype || !cache.device().same_device(&self.device) {
            return Err(ModelError::CacheMismatch(format!(
                "cache is {:?} on {:?}; the model computes in {:?} on {:?}",
                cache.dtype(),
                cache.device().location(),
                self.dtype,
                self.device.location()
            )));
        }
        Ok(())
    }

    /// Runs the step, from a graph when one fits; returns the logits and
    /// the rows run and whether a graph replayed them.
    fn step(
        &mut self,
        batch: &StepBatch,
        limits: StepLimits,
        cache: &KvCache,
    ) -> std::result::Result<(Tensor, usize, bool), ModelError> {
        #[cfg(feature = "cuda")]
        if let Some(graphs) = self.graphs.as_mut() {
            crate::step::validate(batch, limits)?;
            let Engine::Candle(net) = &self.engine else {
                unreachable!("CUDA graphs run candle's network")
            };
            if let Some((logits, bucket)) = graphs.run(net, batch, limits, cache)? {
                return Ok((logits, bucket, true));
            }
        }
        let logits = match &mut self.engine {
            Engine::Cpu(net) => {
                crate::step::validate(batch, limits)?;
                net.run(&HostStep::new(batch, batch.seqs.len()), cache)?
            }
            Engine::Candle(net) => {
                let step = StepTensors::new(batch, limits, &self.device)?;
                // On the CPU this runs the step inside candle's own thread
                // pool, so the many short parallel sections of a step
                // (every matmul, the attention kernel) start on warm
                // workers instead of waking them from this thread each time.
                self.device.with_context(|| net.run(&step, cache))?
            }
        };
        Ok((logits, batch.seqs.len(), false))
    }
}

/// The candle graph of the network; on CUDA with `own_kernels`,
/// single-token steps on the kernels of [`crate::decode`] and the fused
/// ops of [`crate::fused`] in the others.
fn candle_network(
    cfg: &ModelConfig,
    w: &Weights<'_>,
    own_kernels: bool,
) -> std::result::Result<Network, ModelError> {
    let model = w.pp("model");
    let embeddings =
        model
            .pp("embed_tokens")
            .get((cfg.vocab_size, cfg.hidden_size), "weight", Init::Normal)?;
    let layers = (0..cfg.num_hidden_layers)
        .map(|index| DecoderLayer::new(cfg, &model.pp("layers").pp(index)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let lm_head = if cfg.tie_word_embeddings {
        Linear::new(gemm_layout(embeddings.clone())?, None)
    } else {
        linear(cfg.hidden_size, cfg.vocab_size, false, &w.pp("lm_head"))?
    };
    let network = Network {
        embed_tokens: Embedding::new(embeddings, cfg.hidden_size),
        layers,
        norm: rms_norm(cfg.hidden_size, cfg.rms_norm_eps, &model.pp("norm"))?,
        lm_head,
        rotary: RotaryEmbedding::new(cfg, w.dtype(), w.device())?,
        fused: FusedOps::new(w.device(), w.dtype(), cfg.rms_norm_eps, own_kernels)?,
        #[cfg(feature = "cuda")]
        single_token: None,
    };
    #[cfg(feature = "cuda")]
    let network = Network {
        single_token: if own_kernels && w.device().is_cuda() {
            single_token(&network, cfg)?
        } else {
            None
        },
        ..network
    };
    Ok(network)
}

/// The network's tensors as the single-token kernels see them: the
/// stacked projections' parts as views of their rows.
#[cfg(feature = "cuda")]
fn single_token(net: &Network, cfg: &ModelConfig) -> Result<Option<crate::decode::SingleToken>> {
    use crate::decode::{Dims, LayerWeights, Projection, SingleToken};
    let q_dim = cfg.num_attention_heads * cfg.head_dim;
    let kv_dim = cfg.num_key_value_heads * cfg.head_dim;
    let i = cfg.intermediate_size;
    let layers = net
        .layers
        .iter()
        .map(|layer| {
            let (attn, mlp) = (&layer.self_attn, &layer.mlp);
            let part = Projection::rows;
            Ok(LayerWeights {
                input_norm: layer.input_layernorm.weight().clone(),
                q: part(&attn.qkv_proj, 0, q_dim)?,
                k: part(&attn.qkv_proj, q_dim, kv_dim)?,
                v: part(&attn.qkv_proj, q_dim + kv_dim, kv_dim)?,
                o: Projection::of(&attn.o_proj),
                post_attention_norm: layer.post_attention_layernorm.weight().clone(),
                gate: part(&mlp.gate_up_proj, 0, i)?,
                up: part(&mlp.gate_up_proj, i, i)?,
                down: Projection::of(&mlp.down_proj),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let dims = Dims {
        heads: cfg.num_attention_heads,
        kv_heads: cfg.num_key_value_heads,
        head_dim: cfg.head_dim,
        eps: cfg.rms_norm_eps as f32,
    };
    Ok(SingleToken::new(
        layers,
        (net.norm.weight().clone(), Projection::of(&net.lm_head)),
        net.rotary.tables(),
        dims,
    ))
}

/// A projection's weight and optional bias for the CPU step.
fn cpu_parts(
    w: &Weights<'_>,
    parts: &[(&str, usize)],
    k: usize,
    bias: bool,
) -> std::result::Result<Projection, ModelError> {
    let weights = parts
        .iter()
        .map(|&(name, n)| w.pp(name).matrix((n, k), "weight"))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let bias = if bias {
        let mut all = Vec::new();
        for &(name, n) in parts {
            all.extend(w.pp(name).vector(n, "bias", Init::Zeros)?);
        }
        Some(all)
    } else {
        None
    };
    Ok(Projection::new(weights, bias)?)
}

/// The network for the CPU step (see [`crate::cpu`]): the same weights,
/// q/k/v and gate/up fused.
fn cpu_network(cfg: &ModelConfig, w: &Weights<'_>) -> std::result::Result<CpuNetwork, ModelError> {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let q_dim = cfg.num_attention_heads * cfg.head_dim;
    let kv_dim = cfg.num_key_value_heads * cfg.head_dim;
    let model = w.pp("model");
    let layer = |index: usize| -> std::result::Result<CpuLayer, ModelError> {
        let l = model.pp("layers").pp(index);
        let (attn, mlp) = (l.pp("self_attn"), l.pp("mlp"));
        Ok(CpuLayer {
            input_norm: l.pp("input_layernorm").vector(h, "weight", Init::Ones)?,
            qkv: cpu_parts(
                &attn,
                &[("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)],
                h,
                cfg.qkv_bias,
            )?,
            o_proj: cpu_parts(&attn, &[("o_proj", h)], q_dim, cfg.o_proj_bias)?,
            post_attention_norm: l.pp("post_attention_layernorm").vector(
                h,
                "weight",
                Init::Ones,
            )?,
            gate_up: cpu_parts(&mlp, &[("gate_proj", i), ("up_proj", i)], h, cfg.mlp_bias)?,
            down_proj: cpu_parts(&mlp, &[("down_proj", h)], i, cfg.mlp_bias)?,
        })
    };
    let layers = (0..cfg.num_hidden_layers)
        .map(layer)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let embed = model.pp("embed_tokens");
    let table = embed.get((cfg.vocab_size, h), "weight", Init::Normal)?;
    let embeddings = Matrix::from_tensor(&table)?;
    let lm_head = if cfg.tie_word_embeddings {
        // The table as stored (quantized in a GGUF file), read as a matrix.
        Projection::new(vec![embed.matrix((cfg.vocab_size, h), "weight")?], None)?
    } else {
        cpu_parts(w, &[("lm_head", cfg.vocab_size)], h, false)?
    };
    let (cos, sin) = crate::rope::tables(cfg);
    Ok(CpuNetwork {
        isa: Isa::detect(),
        shapes: Shapes {
            hidden: h,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            intermediate: i,
            vocab: cfg.vocab_size,
            eps: cfg.rms_norm_eps as f32,
        },
        embeddings,
        layers,
        norm: model.pp("norm").vector(h, "weight", Init::Ones)?,
        lm_head,
        cos,
        sin,
        workspace: Default::default(),
    })
}

impl CausalLm for Llama {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn forward(
        &mut self,
        batch: &StepBatch,
        cache: &mut KvCache,
    ) -> std::result::Result<Tensor, ModelError> {
        self.check_cache(cache)?;
        let limits = StepLimits {
            vocab_size: self.config.vocab_size,
            max_position_embeddings: self.config.max_position_embeddings,
            num_blocks: cache.num_blocks(),
            block_size: cache.block_size(),
            table_width: cache.max_blocks_per_seq(),
        };
        self.last = StepStats::default();
        let fallbacks_before = self.engine.fused_fallbacks();
        if let Some(timer) = self.timer.as_mut() {
            timer.start()?;
        }
        let (logits, padded_batch, graph_replayed) = self.step(batch, limits, cache)?;
        if let Some(timer) = self.timer.as_mut() {
            timer.stop()?;
        }
        self.last = StepStats {
            graph_replayed,
            padded_batch,
            device_time: None,
            fused_fallbacks: self.engine.fused_fallbacks() - fallbacks_before,
        };
        Ok(logits)
    }

    fn last_step(&self) -> StepStats {
        StepStats {
            device_time: self.timer.as_ref().and_then(StepTimer::elapsed),
            ..self.last
        }
    }

    fn graph_shapes(&self) -> Option<GraphShapes> {
        #[cfg(feature = "cuda")]
        if let Some(graphs) = &self.graphs {
            return Some(graphs.shapes().clone());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paged_attention::PADDING_SLOT;
    use crate::{ModelFolder, SeqStep};

    const BLOCK_SIZE: usize = 4;

    /// models/tiny-llama on candle's ops (the network CUDA graphs capture),
    /// on the CPU.
    fn plain_network() -> (Network, ModelConfig) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/tiny-llama");
        let folder = ModelFolder::open(path).unwrap();
        let source = folder.weight_source().unwrap();
        let weights = Weights::new(&source, DType::F32, &Device::Cpu, None);
        let net = candle_network(folder.config(), &weights, false).unwrap();
        (net, folder.config().clone())
    }

    /// One sequence's tokens `first..first + new` in the blocks of `table`.
    fn seq_step(batch: &mut StepBatch, table: &[u32], first: usize, new: usize) {
        for position in first..first + new {
            batch
                .token_ids
                .push((position * 31 + table[0] as usize) as u32 % 8000);
            batch.positions.push(position as u32);
            let block = table[position / BLOCK_SIZE] as usize;
            batch
                .slot_mapping
                .push((block * BLOCK_SIZE + position % BLOCK_SIZE) as u32);
        }
        batch.seqs.push(SeqStep {
            num_new_tokens: new as u32,
            context_len: (first + new) as u32,
            block_table: table.to_vec(),
        });
    }

    /// Runs `host` on `cache`; the logits of its first `rows` rows.
    fn run(net: &Network, host: HostStep, cache: &KvCache, rows: usize) -> Vec<Vec<f32>> {
        let width = cache.max_blocks_per_seq();
        let step = StepTensors::upload(host, width, &Device::Cpu).unwrap();
        let logits = net.run(&step, cache).unwrap().to_vec2::<f32>().unwrap();
        logits[..rows].to_vec()
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    /// What a CUDA graph of a step with prompt tokens replays: the step
    /// padded with rows and tokens that write nowhere. Its sequences' logits
    /// and the cache it leaves are the unpadded step's.
    #[test]
    fn padding_a_step_changes_none_of_its_rows_nor_the_cache() {
        let (net, cfg) = plain_network();
        let cache = || KvCache::new(&cfg, 16, BLOCK_SIZE, &Device::Cpu, DType::F32).unwrap();
        let (plain, padded) = (cache(), cache());
        // Sequence A prefills 5 tokens into blocks 3 and 1.
        let mut prefill = StepBatch::default();
        seq_step(&mut prefill, &[3, 1], 0, 5);
        for cache in [&plain, &padded] {
            run(&net, HostStep::new(&prefill, 1), cache, 1);
        }
        // Then A decodes its 6th token while B prefills 3 into block 5.
        let mut mixed = StepBatch::default();
        seq_step(&mut mixed, &[3, 1], 5, 1);
        seq_step(&mut mixed, &[5], 0, 3);
        let want = run(&net, HostStep::new(&mixed, 2), &plain, 2);
        // Padded to 4 rows and 11 tokens: one padded row of 1 token, the
        // last of 6, attending over block 0.
        let host = HostStep::padded(&mixed, 4, 11, BLOCK_SIZE);
        assert_eq!(host.query_starts, [0, 1, 4, 5, 11]);
        assert_eq!(host.context_lens, [6, 3, 1, 6]);
        assert_eq!(host.last_token_rows, [0, 3, 4, 10]);
        assert_eq!(&host.slot_mapping[4..], [PADDING_SLOT; 7]);
        let got = run(&net, host, &padded, 2);
        for (row, (got, want)) in got.iter().zip(&want).enumerate() {
            let diff = got
                .iter()
                .zip(want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0f32, f32::max);
            assert!(diff < 1e-5, "row {row}: logits differ by {diff}");
        }
        for layer in 0..cfg.num_hidden_layers {
            let (keys, values) = padded.layer(layer);
            let (plain_keys, plain_values) = plain.layer(layer);
            assert!(max_abs_diff(keys, plain_keys) < 1e-6, "layer {layer} keys");
            assert!(
                max_abs_diff(values, plain_values) < 1e-6,
                "layer {layer} values"
            );
            // Block 0, which the padded tokens read, is still empty.
            let block0 = keys.narrow(0, 0, 1).unwrap().abs().unwrap();
            assert_eq!(block0.max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
        }
    }
}
