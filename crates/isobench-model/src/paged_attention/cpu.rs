//! The CPU kernels: plain slice code, parallel over tokens (rayon), with
//! f32 accumulation for f32, f16 and bf16 caches; work per token is
//! proportional to its context, and the cache is read in slot order. On
//! x86-64 CPUs with AVX2 the same code runs compiled for AVX2 (picked at
//! run time; the portable build targets SSE2).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout, Result, Shape, Storage, bail};
use half::{bf16, f16};
use rayon::prelude::*;

use super::{Metadata, PADDING_SLOT};

/// Element types the cache can hold; arithmetic is done in f32.
pub(crate) trait CacheElem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    fn from_f32(value: f32) -> Self;
    /// `out[i] = from[i].to_f32()` (same lengths).
    #[inline(always)]
    fn widen(from: &[Self], out: &mut [f32]) {
        for (out, &x) in out.iter_mut().zip(from) {
            *out = x.to_f32();
        }
    }
    /// The elements as f32 when they are f32 (no widening needed).
    #[inline(always)]
    fn as_f32(_elements: &[Self]) -> Option<&[f32]> {
        None
    }
}

impl CacheElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn as_f32(elements: &[Self]) -> Option<&[f32]> {
        Some(elements)
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl CacheElem for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn widen(from: &[Self], out: &mut [f32]) {
        // F16C when the CPU has it, checked once per call.
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(from, out)
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl CacheElem for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

/// The contiguous elements of a tensor's storage.
fn contiguous<'a, T>(data: &'a [T], layout: &Layout, what: &str) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("paged attention: {what} must be contiguous"),
    }
}

/// The CPU side of `WriteKv`.
pub(super) fn write_kv(
    (cache, cache_layout): (&mut CpuStorage, &Layout),
    (new, new_layout): (&CpuStorage, &Layout),
    (slots, slots_layout): (&CpuStorage, &Layout),
) -> Result<()> {
    let slots = contiguous(slots.as_slice::<u32>()?, slots_layout, "slot_mapping")?;
    let row = match cache_layout.dims() {
        [_, _, kv_heads, head_dim] => kv_heads * head_dim,
        dims => bail!("paged attention: cache must be 4-dimensional, not {dims:?}"),
    };
    match (cache, new) {
        (CpuStorage::F32(cache), CpuStorage::F32(new)) => {
            write_rows(cache, cache_layout, new, new_layout, slots, row)
        }
        (CpuStorage::F16(cache), CpuStorage::F16(new)) => {
            write_rows(cache, cache_layout, new, new_layout, slots, row)
        }
        (CpuStorage::BF16(cache), CpuStorage::BF16(new)) => {
            write_rows(cache, cache_layout, new, new_layout, slots, row)
        }
        (cache, new) => bail!(
            "paged attention: cache ({:?}) and new entries ({:?}) must have one float dtype",
            cache.dtype(),
            new.dtype()
        ),
    }
}

fn write_rows<E: Copy>(
    cache: &mut [E],
    cache_layout: &Layout,
    new: &[E],
    new_layout: &Layout,
    slots: &[u32],
    row: usize,
) -> Result<()> {
    let (start, end) = match cache_layout.contiguous_offsets() {
        Some(range) => range,
        None => bail!("paged attention: cache must be contiguous"),
    };
    let cache = &mut cache[start..end];
    let new = contiguous(new, new_layout, "new keys/values")?;
    if new.len() != slots.len() * row {
        bail!(
            "paged attention: {} new entries for {} slots of {row}",
            new.len(),
            slots.len()
        );
    }
    for (&slot, entry) in slots.iter().zip(new.chunks_exact(row)) {
        if slot == PADDING_SLOT {
            continue;
        }
        let offset = slot as usize * row;
        match cache.get_mut(offset..offset + row) {
            Some(target) => target.copy_from_slice(entry),
            None => bail!("paged attention: slot {slot} is outside the cache"),
        }
    }
    Ok(())
}

/// The step's metadata as slices, and the shapes the kernel needs.
pub(crate) struct Geometry<'a> {
    pub block_tables: &'a [u32],
    pub table_width: usize,
    pub context_lens: &'a [u32],
    pub query_starts: &'a [u32],
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

/// The CPU side of `PagedAttention`: checks the step, then runs the
/// kernel for the storage's dtype.
pub(super) fn attend(
    metadata: &Metadata,
    num_heads: usize,
    (q, q_layout): (&CpuStorage, &Layout),
    (keys, keys_layout): (&CpuStorage, &Layout),
    (values, values_layout): (&CpuStorage, &Layout),
) -> Result<(CpuStorage, Shape)> {
    let (tables_storage, tables_layout) = metadata.block_tables.storage_and_layout();
    let (lens_storage, lens_layout) = metadata.context_lens.storage_and_layout();
    let (starts_storage, starts_layout) = metadata.query_starts.storage_and_layout();
    let (Storage::Cpu(tables), Storage::Cpu(lens), Storage::Cpu(starts)) =
        (&*tables_storage, &*lens_storage, &*starts_storage)
    else {
        bail!("paged attention: step metadata must be on the CPU with the cache")
    };
    let (block_size, num_kv_heads, head_dim) = match keys_layout.dims() {
        [_, block_size, kv_heads, head_dim] => (*block_size, *kv_heads, *head_dim),
        dims => bail!("paged attention: cache must be 4-dimensional, not {dims:?}"),
    };
    let tokens = q_layout.shape().elem_count() / (num_heads * head_dim);
    let geometry = Geometry {
        block_tables: contiguous(tables.as_slice::<u32>()?, tables_layout, "block_tables")?,
        table_width: tables_layout.dims()[1],
        context_lens: contiguous(lens.as_slice::<u32>()?, lens_layout, "context_lens")?,
        query_starts: contiguous(starts.as_slice::<u32>()?, starts_layout, "query_starts")?,
        num_heads,
        num_kv_heads,
        head_dim,
        block_size,
    };
    if q_layout.shape().elem_count() != tokens * num_heads * head_dim
        || geometry.query_starts.last().copied() != Some(tokens as u32)
    {
        bail!(
            "paged attention: queries {:?} do not match {} heads of {head_dim} and the step's {} tokens",
            q_layout.dims(),
            num_heads,
            geometry.query_starts.last().copied().unwrap_or(0)
        );
    }
    if num_kv_heads == 0 || !num_heads.is_multiple_of(num_kv_heads) {
        bail!(
            "paged attention: {} heads do not group over {num_kv_heads} KV heads",
            num_heads
        );
    }
    let shape = Shape::from((tokens, num_heads * head_dim));
    let storage = match (q, keys, values) {
        (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
            CpuStorage::F32(attend_all(
                &geometry,
                (q, q_layout),
                (k, keys_layout),
                (v, values_layout),
            )?)
        }
        (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => {
            CpuStorage::F16(attend_all(
                &geometry,
                (q, q_layout),
                (k, keys_layout),
                (v, values_layout),
            )?)
        }
        (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => {
            CpuStorage::BF16(attend_all(
                &geometry,
                (q, q_layout),
                (k, keys_layout),
                (v, values_layout),
            )?)
        }
        (q, k, _) => bail!(
            "paged attention: queries ({:?}) and cache ({:?}) must have one float dtype",
            q.dtype(),
            k.dtype()
        ),
    };
    Ok((storage, shape))
}

impl Geometry<'_> {
    /// Checks that every read the kernel will make is in bounds.
    pub(crate) fn check(&self, tokens: usize, num_slots: usize) -> Result<()> {
        let seqs = self.context_lens.len();
        if self.query_starts.len() != seqs + 1
            || self.query_starts[0] != 0
            || self.query_starts[seqs] as usize != tokens
            || self.block_tables.len() != seqs * self.table_width
        {
            bail!(
                "paged attention: step metadata does not describe {seqs} sequences of {tokens} tokens"
            );
        }
        for seq in 0..seqs {
            let context = self.context_lens[seq] as usize;
            let new_tokens = self.query_starts[seq + 1].checked_sub(self.query_starts[seq]);
            let blocks = context.div_ceil(self.block_size);
            let table = &self.block_tables[seq * self.table_width..(seq + 1) * self.table_width];
            if new_tokens.is_none_or(|n| n == 0 || n as usize > context)
                || blocks > self.table_width
                || table[..blocks]
                    .iter()
                    .any(|&block| (block as usize + 1) * self.block_size > num_slots)
            {
                bail!(
                    "paged attention: sequence {seq}'s tokens, context of {context} and block table do not fit the cache"
                );
            }
        }
        Ok(())
    }
}

/// Per-worker buffers, reused across the tokens a worker handles.
#[derive(Default)]
pub(crate) struct Scratch {
    /// The token's queries, scaled by 1/sqrt(head_dim): [heads, head_dim].
    queries: Vec<f32>,
    /// Scores, then softmax weights: [heads, visible].
    scores: Vec<f32>,
    /// Weighted value sums: [heads, head_dim].
    sums: Vec<f32>,
    /// 1 / softmax denominator per head.
    inverse_sums: Vec<f32>,
}

fn attend_all<E: CacheElem>(
    g: &Geometry<'_>,
    (q, q_layout): (&[E], &Layout),
    (keys, keys_layout): (&[E], &Layout),
    (values, values_layout): (&[E], &Layout),
) -> Result<Vec<E>> {
    let q = contiguous(q, q_layout, "queries")?;
    let keys = contiguous(keys, keys_layout, "key cache")?;
    let values = contiguous(values, values_layout, "value cache")?;
    let row = g.num_heads * g.head_dim;
    let tokens = q.len() / row;
    g.check(tokens, keys.len() / (g.num_kv_heads * g.head_dim))?;
    let wide = simd_available();
    let mut out = vec![E::from_f32(0.0); tokens * row];
    out.par_chunks_mut(row)
        .zip(q.par_chunks(row))
        .enumerate()
        .for_each_init(Scratch::default, |scratch, (token, (out, q))| {
            let token = TokenWork {
                g,
                token,
                q,
                keys,
                values,
                out,
                scratch,
            };
            if wide {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: simd_available() checked that this CPU has AVX2 and FMA.
                unsafe {
                    attend_token_avx2(token)
                }
            } else {
                attend_token(token)
            }
        });
    Ok(out)
}

/// Whether the CPU can run [`attend_token_avx2`].
pub(crate) fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`attend_token`] compiled for AVX2 (8 floats per instruction instead of
/// the baseline's 4); chosen at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn attend_token_avx2<Q: CacheElem, E: CacheElem>(work: TokenWork<'_, '_, Q, E>) {
    attend_token(work)
}

/// One new token's inputs and output: queries and output of type `Q`
/// over a cache of `E`.
pub(crate) struct TokenWork<'g, 'a, Q, E> {
    pub g: &'g Geometry<'a>,
    pub token: usize,
    pub q: &'g [Q],
    pub keys: &'g [E],
    pub values: &'g [E],
    pub out: &'g mut [Q],
    pub scratch: &'g mut Scratch,
}

/// All heads of one new token. The context is walked block by block, and
/// within a block slot by slot: each slot's keys (or values) for all KV
/// heads are one contiguous row, so the cache is read sequentially.
#[inline(always)]
pub(crate) fn attend_token<Q: CacheElem, E: CacheElem>(work: TokenWork<'_, '_, Q, E>) {
    let TokenWork {
        g,
        token,
        q,
        keys,
        values,
        out,
        scratch,
    } = work;
    let d = g.head_dim;
    let heads = g.num_heads;
    let group = heads / g.num_kv_heads;
    let seq = g
        .query_starts
        .partition_point(|&start| start as usize <= token)
        - 1;
    let new_tokens = (g.query_starts[seq + 1] - g.query_starts[seq]) as usize;
    let context = g.context_lens[seq] as usize;
    let visible = context - new_tokens + (token - g.query_starts[seq] as usize) + 1;
    let table = &g.block_tables[seq * g.table_width..(seq + 1) * g.table_width];
    let kv_row = g.num_kv_heads * d;
    // Slot ranges of the visible context, one per block.
    let blocks = table[..visible.div_ceil(g.block_size)]
        .iter()
        .enumerate()
        .map(|(index, &block)| {
            let first = block as usize * g.block_size;
            first..first + g.block_size.min(visible - index * g.block_size)
        });

    let scale = 1.0 / (d as f32).sqrt();
    scratch.queries.clear();
    scratch
        .queries
        .extend(q.iter().map(|&x| x.to_f32() * scale));
    scratch.scores.resize(heads * visible, 0.0);
    let mut position = 0;
    for slots in blocks.clone() {
        for slot in slots {
            let key_row = &keys[slot * kv_row..(slot + 1) * kv_row];
            for head in 0..heads {
                let key = &key_row[(head / group) * d..(head / group + 1) * d];
                scratch.scores[head * visible + position] =
                    dot(&scratch.queries[head * d..(head + 1) * d], key);
            }
            position += 1;
        }
    }
    // Softmax per head, unnormalised; the output is divided by the sum.
    scratch.inverse_sums.clear();
    for scores in scratch.scores.chunks_exact_mut(visible) {
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for score in scores.iter_mut() {
            *score = (*score - max).exp();
            sum += *score;
        }
        scratch.inverse_sums.push(1.0 / sum);
    }
    scratch.sums.clear();
    scratch.sums.resize(heads * d, 0.0);
    let mut position = 0;
    for slots in blocks {
        for slot in slots {
            let value_row = &values[slot * kv_row..(slot + 1) * kv_row];
            for head in 0..heads {
                let weight = scratch.scores[head * visible + position];
                let value = &value_row[(head / group) * d..(head / group + 1) * d];
                for (sum, &v) in scratch.sums[head * d..(head + 1) * d].iter_mut().zip(value) {
                    *sum += weight * v.to_f32();
                }
            }
            position += 1;
        }
    }
    for ((out, sums), inverse_sum) in out
        .chunks_exact_mut(d)
        .zip(scratch.sums.chunks_exact(d))
        .zip(&scratch.inverse_sums)
    {
        for (out, &sum) in out.iter_mut().zip(sums) {
            *out = Q::from_f32(sum * inverse_sum);
        }
    }
}

/// Dot product with eight independent accumulators, so it vectorises.
#[inline(always)]
fn dot<E: CacheElem>(query: &[f32], key: &[E]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut q_chunks = query.chunks_exact(8);
    let mut k_chunks = key.chunks_exact(8);
    for (q, k) in (&mut q_chunks).zip(&mut k_chunks) {
        for lane in 0..8 {
            lanes[lane] += q[lane] * k[lane].to_f32();
        }
    }
    let tail: f32 = q_chunks
        .remainder()
        .iter()
        .zip(k_chunks.remainder())
        .map(|(&q, &k)| q * k.to_f32())
        .sum();
    lanes.iter().sum::<f32>() + tail
}
