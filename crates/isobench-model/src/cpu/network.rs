//! The layers of a CPU step and the buffers they run in.
//!
//! A step of `T` new tokens over `B` sequences, per layer: RMSNorm into
//! `normed`, one fused q/k/v projection into `qkv` ([T, q + 2 kv]), rotary
//! embeddings on its q and k columns, the k and v columns written to their
//! cache slots, paged attention (`super::attention`) into `attended`, the
//! output projection into `projected` and added to the residual stream
//! `hidden`;
//! then RMSNorm, the fused gate/up projection into `gate_up`, SwiGLU into
//! `activated`, the down projection and the residual add. Only each
//! sequence's last token goes through the final norm and the LM head.

use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Device, InplaceOp1, Layout, Result, Storage, Tensor, bail};
use half::{bf16, f16};

use super::matmul::{Elements, Matrix};
use super::{Isa, Projection, attention, ops, team};
use crate::KvCache;
use crate::paged_attention::PADDING_SLOT;
use crate::paged_attention::cpu::Geometry;
use crate::step::HostStep;

pub(crate) struct CpuLayer {
    pub input_norm: Vec<f32>,
    /// q, k and v, side by side.
    pub qkv: Projection,
    pub o_proj: Projection,
    pub post_attention_norm: Vec<f32>,
    /// gate and up, side by side.
    pub gate_up: Projection,
    pub down_proj: Projection,
}

/// The shapes a step needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shapes {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub eps: f32,
}

pub(crate) struct CpuNetwork {
    pub isa: Isa,
    pub shapes: Shapes,
    /// [vocab, hidden].
    pub embeddings: Matrix,
    pub layers: Vec<CpuLayer>,
    pub norm: Vec<f32>,
    pub lm_head: Projection,
    /// cos and sin of every position's rotary angles, [positions, head_dim / 2].
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    pub workspace: Workspace,
}

/// A step's buffers, grown to the largest step so far and reused.
#[derive(Default)]
pub(crate) struct Workspace {
    hidden: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    attended: Vec<f32>,
    projected: Vec<f32>,
    gate_up: Vec<f32>,
    activated: Vec<f32>,
    last: Vec<f32>,
    /// One attention scratch per team thread.
    scratch: Vec<Mutex<attention::Scratch>>,
    /// The step's attention work items.
    work: Vec<attention::Work>,
}

/// `buffer` with at least `len` elements.
fn sized(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    &mut buffer[..len]
}

impl CpuNetwork {
    /// f32 logits [B, vocab] of each sequence's last new token; `host` is
    /// the validated step.
    pub(crate) fn run(&mut self, host: &HostStep, cache: &KvCache) -> Result<Tensor> {
        let s = self.shapes;
        let tokens = host.input_ids.len();
        let seqs = host.context_lens.len();
        let (q_dim, kv_dim) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let qkv_dim = q_dim + 2 * kv_dim;
        let ws = &mut self.workspace;
        if ws.scratch.len() < team::threads() {
            ws.scratch.resize_with(team::threads(), Default::default);
        }
        let hidden = sized(&mut ws.hidden, tokens * s.hidden);
        for (row, &id) in hidden.chunks_exact_mut(s.hidden).zip(&host.input_ids) {
            self.embeddings.row_into(id as usize, row);
        }
        let normed = sized(&mut ws.normed, tokens * s.hidden);
        let qkv = sized(&mut ws.qkv, tokens * qkv_dim);
        let attended = sized(&mut ws.attended, tokens * q_dim);
        let projected = sized(&mut ws.projected, tokens * s.hidden);
        let gate_up = sized(&mut ws.gate_up, tokens * 2 * s.intermediate);
        let activated = sized(&mut ws.activated, tokens * s.intermediate);
        let half = s.head_dim / 2;
        let g = geometry(&s, host, cache)?;
        attention::plan(&g, &mut ws.work);
        for (index, layer) in self.layers.iter().enumerate() {
            ops::rms_norm(hidden, &layer.input_norm, s.eps, normed);
            layer.qkv.apply(self.isa, normed, tokens, qkv)?;
            for (row, &position) in qkv.chunks_exact_mut(qkv_dim).zip(&host.positions) {
                let angles = position as usize * half..(position as usize + 1) * half;
                let (cos, sin) = (&self.cos[angles.clone()], &self.sin[angles]);
                ops::rotate_heads(&mut row[..q_dim + kv_dim], s.head_dim, cos, sin);
            }
            let (keys, values) = cache.layer(index);
            let columns = |offset| WriteSlots {
                rows: qkv,
                stride: qkv_dim,
                offset,
                width: kv_dim,
                slots: &host.slot_mapping,
            };
            keys.inplace_op1(&columns(q_dim))?;
            values.inplace_op1(&columns(q_dim + kv_dim))?;
            let plan = (&g, &ws.work[..]);
            attend(self.isa, plan, qkv, (keys, values), attended, &ws.scratch)?;
            layer.o_proj.apply(self.isa, attended, tokens, projected)?;
            ops::add(hidden, projected);
            ops::rms_norm(hidden, &layer.post_attention_norm, s.eps, normed);
            layer.gate_up.apply(self.isa, normed, tokens, gate_up)?;
            for (gate_up, out) in gate_up
                .chunks_exact(2 * s.intermediate)
                .zip(activated.chunks_exact_mut(s.intermediate))
            {
                ops::swiglu(gate_up, out);
            }
            layer
                .down_proj
                .apply(self.isa, activated, tokens, projected)?;
            ops::add(hidden, projected);
        }
        let last = sized(&mut ws.last, seqs * s.hidden);
        for (row, &token) in last.chunks_exact_mut(s.hidden).zip(&host.last_token_rows) {
            let token = token as usize;
            ops::rms_norm(
                &hidden[token * s.hidden..(token + 1) * s.hidden],
                &self.norm,
                s.eps,
                row,
            );
        }
        let mut logits = vec![0f32; seqs * s.vocab];
        self.lm_head.apply(self.isa, last, seqs, &mut logits)?;
        Tensor::from_vec(logits, (seqs, s.vocab), &Device::Cpu)
    }
}

impl Matrix {
    /// Row `row` as f32 (an embedding lookup).
    fn row_into(&self, row: usize, out: &mut [f32]) {
        let range = row * self.k..(row + 1) * self.k;
        match &self.elements {
            Elements::F32(v) => out.copy_from_slice(&v[range]),
            Elements::F16(v) => {
                for (out, x) in out.iter_mut().zip(&v[range]) {
                    *out = x.to_f32();
                }
            }
            Elements::BF16(v) => {
                for (out, x) in out.iter_mut().zip(&v[range]) {
                    *out = x.to_f32();
                }
            }
        }
    }

    /// The f32, f16 or bf16 elements of a 2-D tensor.
    pub(crate) fn from_tensor(tensor: &Tensor) -> Result<Self> {
        let (n, k) = tensor.dims2()?;
        let flat = tensor.flatten_all()?;
        let elements = match tensor.dtype() {
            DType::F32 => Elements::F32(flat.to_vec1()?),
            DType::F16 => Elements::F16(flat.to_vec1()?),
            DType::BF16 => Elements::BF16(flat.to_vec1()?),
            other => bail!("weights must be f32, f16 or bf16, not {other:?}"),
        };
        Ok(Self { n, k, elements })
    }
}

/// The step's attention geometry over `cache`, its block size
/// read from the cache's shape.
fn geometry<'a>(s: &Shapes, host: &'a HostStep, cache: &KvCache) -> Result<Geometry<'a>> {
    let (keys, _) = cache.layer(0);
    let (_, layout) = keys.storage_and_layout();
    let [_, block_size, _, _] = *layout.dims() else {
        bail!("CPU step: the KV cache must be 4-dimensional")
    };
    Ok(Geometry {
        block_tables: &host.block_tables,
        table_width: host.table_cols,
        context_lens: &host.context_lens,
        query_starts: &host.query_starts,
        num_heads: s.heads,
        num_kv_heads: s.kv_heads,
        head_dim: s.head_dim,
        block_size,
    })
}

/// Paged attention of every token's queries (the first `q_dim` columns of
/// its `qkv` row) into `attended`, over one layer's cache.
fn attend(
    isa: Isa,
    (g, work): (&Geometry<'_>, &[attention::Work]),
    qkv: &[f32],
    (keys, values): (&Tensor, &Tensor),
    attended: &mut [f32],
    scratch: &[Mutex<attention::Scratch>],
) -> Result<()> {
    let (key_storage, key_layout) = keys.storage_and_layout();
    let (value_storage, value_layout) = values.storage_and_layout();
    let (Storage::Cpu(key_storage), Storage::Cpu(value_storage)) = (&*key_storage, &*value_storage)
    else {
        bail!("CPU step: the KV cache is not on the CPU")
    };
    if key_layout.dims() != value_layout.dims()
        || !key_layout.is_contiguous()
        || !value_layout.is_contiguous()
        || key_layout.start_offset() != 0
        || value_layout.start_offset() != 0
    {
        bail!("CPU step: the layer's keys and values must be contiguous tensors of one shape");
    }
    let queries = attention::Queries {
        rows: qkv,
        stride: (g.num_heads + 2 * g.num_kv_heads) * g.head_dim,
    };
    attention::attend(
        isa,
        g,
        work,
        queries,
        (key_storage, value_storage),
        attended,
        scratch,
    )
}

/// Writes columns `offset..offset + width` of each token's row of `rows`
/// (row stride `stride`) to the token's cache slot, converted to the
/// cache's dtype. [`PADDING_SLOT`] writes nowhere.
struct WriteSlots<'a> {
    rows: &'a [f32],
    stride: usize,
    offset: usize,
    width: usize,
    slots: &'a [u32],
}

impl WriteSlots<'_> {
    fn write<E: Copy>(&self, cache: &mut [E], convert: impl Fn(f32) -> E) -> Result<()> {
        for (token, &slot) in self.slots.iter().enumerate() {
            if slot == PADDING_SLOT {
                continue;
            }
            let start = slot as usize * self.width;
            let Some(target) = cache.get_mut(start..start + self.width) else {
                bail!("CPU step: slot {slot} is outside the cache");
            };
            let from = token * self.stride + self.offset;
            for (target, &value) in target.iter_mut().zip(&self.rows[from..from + self.width]) {
                *target = convert(value);
            }
        }
        Ok(())
    }
}

impl InplaceOp1 for WriteSlots<'_> {
    fn name(&self) -> &'static str {
        "cpu-write-kv"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("CPU step: the KV cache must be contiguous")
        };
        match storage {
            CpuStorage::F32(cache) => self.write(&mut cache[start..end], |v| v),
            CpuStorage::F16(cache) => self.write(&mut cache[start..end], f16::from_f32),
            CpuStorage::BF16(cache) => self.write(&mut cache[start..end], bf16::from_f32),
            other => bail!(
                "CPU step: the KV cache must be f32, f16 or bf16, not {:?}",
                other.dtype()
            ),
        }
    }
}
