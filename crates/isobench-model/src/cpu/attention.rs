//! The CPU step's paged attention, tiled: one work item is a run of up to
//! [`TILE`] consecutive new tokens of one sequence (a *query tile*) and
//! one KV head, with the query heads that share it (GQA).
//!
//! A work item walks the context the tile sees block by block of the
//! cache (its block table's order), reading each block's keys and values
//! once for all the tile's queries and heads (widened to f32 in the
//! scratch), and keeps an online softmax per query (running max, running
//! sum, output rescaled when the max grows), so no score row as long as
//! the context is ever stored:
//!
//! - scores are laid out key by key, one lane per query of the tile
//!   (`scores[j * TILE + lane]`). For a tile of [`TRANSPOSED_FROM`] or more
//!   queries they come from the queries transposed once per tile
//!   (`[head_dim][TILE]`): for each key and dimension one broadcast key
//!   element times a vector of the tile's queries, no horizontal sums. A
//!   tile of fewer queries (a decode token) takes one dot product per
//!   query and key instead;
//! - the causal mask applies only on the blocks that reach past the tile's
//!   first query: new token `n` of a chunk that starts at context position
//!   `p` sees positions `0 ..= p + n`;
//! - the softmax's exponentials are [`isobench_common::math::exp`], vectorised over the lanes;
//! - the weighted values accumulate in an f32 `[TILE][head_dim]` output per
//!   head, divided by the softmax's sum at the end.
//!
//! Work items are independent (each writes its own tokens' heads) and go
//! to the team costliest first (a tile's cost grows with its position).
//! The plain path's kernel (`crate::paged_attention::cpu`) is what the tests
//! compare this one with.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Result, bail};

use isobench_common::math::exp;

use super::{Isa, team};
use crate::paged_attention::cpu::{self as paged, CacheElem, Geometry};

/// Queries per tile: one per lane of a score row.
pub(crate) const TILE: usize = 16;
/// Queries per work item: tiles that share each block's keys and values
/// as it is read (the context is read once per item and KV head).
const SPAN: usize = 4 * TILE;
/// Tiles of at least this many queries compute scores from transposed
/// queries; smaller ones (decode) by dot products.
const TRANSPOSED_FROM: usize = 4;
/// Keys whose scores are accumulated at once (independent FMA chains).
const KEY_GROUP: usize = 8;

/// One work item: new tokens `first .. first + count` (indices into the
/// step's tokens) of sequence `seq`, a range of its KV heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    seq: u32,
    first: u32,
    count: u32,
    /// KV heads `kv_first .. kv_first + kv_count`.
    kv_first: u32,
    kv_count: u32,
    /// Queries times the keys the last one sees, times heads.
    cost: u64,
    /// A single token with all heads, on the plain path's per-token
    /// kernel (decode tokens; see [`TRANSPOSED_FROM`]).
    per_token: bool,
}

/// The step's work items, costliest first, into `work` (reused). A
/// sequence with fewer than [`TRANSPOSED_FROM`] new tokens gives one item
/// per token (the plain path's kernel: one dot product per key and head,
/// the slots' rows read in order). Longer runs give spans of [`SPAN`]
/// queries with all KV heads (each slot's keys one contiguous read),
/// unless the step has too few items to share among the team: then each
/// span's heads are split into up to `2 * threads` parts.
pub(crate) fn plan(g: &Geometry<'_>, work: &mut Vec<Work>) {
    work.clear();
    let seqs = g.context_lens.len();
    let new_tokens = |seq: usize| (g.query_starts[seq + 1] - g.query_starts[seq]) as usize;
    let items: usize = (0..seqs)
        .map(|seq| match new_tokens(seq) {
            n if n < TRANSPOSED_FROM => n,
            n => n.div_ceil(SPAN),
        })
        .sum();
    let kv_heads = g.num_kv_heads.max(1);
    let parts = (2 * team::threads())
        .div_ceil(items.max(1))
        .clamp(1, kv_heads);
    for seq in 0..seqs {
        let (start, end) = (g.query_starts[seq], g.query_starts[seq + 1]);
        let context = g.context_lens[seq];
        let past = context - (end - start);
        if new_tokens(seq) < TRANSPOSED_FROM {
            for token in start..end {
                work.push(Work {
                    seq: seq as u32,
                    first: token,
                    count: 1,
                    kv_first: 0,
                    kv_count: kv_heads as u32,
                    cost: u64::from(past + (token - start) + 1) * kv_heads as u64,
                    per_token: true,
                });
            }
            continue;
        }
        for first in (start..end).step_by(SPAN) {
            let count = (end - first).min(SPAN as u32);
            let last_position = past + (first - start) + count;
            for part in 0..parts {
                let heads = kv_heads * part / parts..kv_heads * (part + 1) / parts;
                work.push(Work {
                    seq: seq as u32,
                    first,
                    count,
                    kv_first: heads.start as u32,
                    kv_count: heads.len() as u32,
                    cost: u64::from(count) * u64::from(last_position) * heads.len() as u64,
                    per_token: false,
                });
            }
        }
    }
    work.sort_unstable_by_key(|w| std::cmp::Reverse(w.cost));
}

/// One thread's buffers, reused across work items and steps.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Per head of the group: the tile's queries, scaled by 1/sqrt(d),
    /// transposed: [head_dim][TILE].
    queries: Vec<f32>,
    /// A block's keys, then its values, as f32: [keys (padded to
    /// KEY_GROUP)][head_dim].
    keys: Vec<f32>,
    values: Vec<f32>,
    /// Scores, then softmax weights, of one head: [keys][TILE].
    scores: Vec<f32>,
    /// Per head: outputs [TILE][head_dim], running max and sum [TILE].
    out: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    /// The per-token kernel's buffers.
    token: paged::Scratch,
}

/// Where attention writes: row `t` of the step's `[tokens, heads * d]`.
#[derive(Clone, Copy)]
struct OutRows {
    ptr: *mut f32,
    row: usize,
}
// SAFETY: work items write disjoint (token, head) ranges (see `attend`).
unsafe impl Send for OutRows {}
unsafe impl Sync for OutRows {}

/// The queries of a step: token `t`'s heads start at `t * stride`.
#[derive(Clone, Copy)]
pub(crate) struct Queries<'a> {
    pub rows: &'a [f32],
    pub stride: usize,
}

/// Attention of every new token's queries into `out` ([tokens, heads *
/// head_dim]) over the cache's `keys` and `values`, on the team. `work` is
/// [`plan`]'s for `g`, which is checked against the cache here.
pub(crate) fn attend(
    isa: Isa,
    g: &Geometry<'_>,
    work: &[Work],
    q: Queries<'_>,
    (keys, values): (&CpuStorage, &CpuStorage),
    out: &mut [f32],
    scratch: &[Mutex<Scratch>],
) -> Result<()> {
    let row = g.num_heads * g.head_dim;
    let tokens = g.query_starts.last().map_or(0, |&t| t as usize);
    if out.len() < tokens * row
        || (tokens > 0 && q.rows.len() < (tokens - 1) * q.stride + row)
        || scratch.len() < team::threads()
    {
        bail!("CPU attention: buffers do not fit {tokens} tokens of {row}");
    }
    match (keys, values) {
        (CpuStorage::F32(k), CpuStorage::F32(v)) => run(isa, g, work, q, (k, v), out, scratch),
        (CpuStorage::F16(k), CpuStorage::F16(v)) => run(isa, g, work, q, (k, v), out, scratch),
        (CpuStorage::BF16(k), CpuStorage::BF16(v)) => run(isa, g, work, q, (k, v), out, scratch),
        (k, _) => bail!(
            "CPU attention: the cache ({:?}) must be f32, f16 or bf16",
            k.dtype()
        ),
    }
}

fn run<E: CacheElem>(
    isa: Isa,
    g: &Geometry<'_>,
    work: &[Work],
    q: Queries<'_>,
    (keys, values): (&[E], &[E]),
    out: &mut [f32],
    scratch: &[Mutex<Scratch>],
) -> Result<()> {
    let kv_row = g.num_kv_heads * g.head_dim;
    if kv_row == 0 || keys.len() != values.len() || !keys.len().is_multiple_of(kv_row) {
        bail!("CPU attention: the keys and values are not one cache of rows of {kv_row}");
    }
    let tokens = g.query_starts.last().map_or(0, |&t| t as usize);
    g.check(tokens, keys.len() / kv_row)?;
    let wide = paged::simd_available();
    let next = AtomicUsize::new(0);
    let out = OutRows {
        ptr: out.as_mut_ptr(),
        row: g.num_heads * g.head_dim,
    };
    team::per_part(|part| {
        let mut scratch = scratch[part].lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(&item) = work.get(index) else {
                break;
            };
            if item.per_token {
                let token = item.first as usize;
                let row = g.num_heads * g.head_dim;
                let work = paged::TokenWork {
                    g,
                    token,
                    q: &q.rows[token * q.stride..token * q.stride + row],
                    keys,
                    values,
                    // SAFETY: the token's row is in bounds (checked in
                    // `attend`) and this item's alone.
                    out: unsafe { std::slice::from_raw_parts_mut(out.ptr.add(token * row), row) },
                    scratch: &mut scratch.token,
                };
                if wide {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: simd_available() found AVX2 and FMA.
                    unsafe {
                        paged::attend_token_avx2(work)
                    }
                } else {
                    paged::attend_token(work)
                }
                continue;
            }
            let job = Job {
                g,
                item,
                q,
                keys,
                values,
                out,
            };
            // SAFETY: the ISA was detected on this CPU; each work item's
            // output (its tokens' rows, its KV heads' query heads) is
            // written by this thread alone, and `attend` checked the sizes.
            unsafe { tile(isa, job, &mut scratch) }
        }
    });
    Ok(())
}

/// One work item's inputs.
struct Job<'g, 'a, E> {
    g: &'g Geometry<'a>,
    item: Work,
    q: Queries<'g>,
    keys: &'g [E],
    values: &'g [E],
    out: OutRows,
}

/// `a * b + c`: fused where the tile is compiled with FMA, two operations
/// otherwise (`f32::mul_add` without FMA is a library call).
trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

struct Fused;
struct Separate;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// [`tile_body`] compiled for `isa`.
///
/// # Safety
/// The CPU runs `isa`; see [`tile_body`].
unsafe fn tile<E: CacheElem>(isa: Isa, job: Job<'_, '_, E>, scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
        unsafe fn avx512<E: CacheElem>(job: Job<'_, '_, E>, scratch: &mut Scratch) {
            // SAFETY: forwarded.
            unsafe { tile_body::<E, Fused>(job, scratch) }
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2<E: CacheElem>(job: Job<'_, '_, E>, scratch: &mut Scratch) {
            // SAFETY: forwarded.
            unsafe { tile_body::<E, Fused>(job, scratch) }
        }
        match isa {
            // SAFETY: the caller's guarantee.
            Isa::Avx512 => return unsafe { avx512(job, scratch) },
            // SAFETY: the caller's guarantee.
            Isa::Avx2 => return unsafe { avx2(job, scratch) },
            Isa::Portable => {}
        }
    }
    let _ = isa;
    // SAFETY: forwarded.
    unsafe { tile_body::<E, Separate>(job, scratch) }
}

fn sized(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    &mut buffer[..len]
}

/// One work item (see the module docs).
///
/// # Safety
/// `job.out` has the step's rows and no other thread writes this item's
/// tokens' columns of its heads.
#[inline(always)]
unsafe fn tile_body<E: CacheElem, M: MulAdd>(job: Job<'_, '_, E>, scratch: &mut Scratch) {
    let Job {
        g,
        item,
        q,
        keys,
        values,
        out,
    } = job;
    let d = g.head_dim;
    let group = g.num_heads / g.num_kv_heads;
    let seq = item.seq as usize;
    let (first, count) = (item.first as usize, item.count as usize);
    let seq_start = g.query_starts[seq] as usize;
    let new_tokens = g.query_starts[seq + 1] as usize - seq_start;
    // Context position of the item's first query.
    let first_position = g.context_lens[seq] as usize - new_tokens + (first - seq_start);
    let visible = first_position + count;
    let table = &g.block_tables[seq * g.table_width..(seq + 1) * g.table_width];
    let kv_row = g.num_kv_heads * d;
    let kv_offset = item.kv_first as usize * d;
    // The item's query heads, and the width of its slice of a slot's row.
    let first_head = item.kv_first as usize * group;
    let item_heads = item.kv_count as usize * group;
    let width = item.kv_count as usize * d;
    let scale = 1.0 / (d as f32).sqrt();
    let padded_keys = g.block_size.div_ceil(KEY_GROUP) * KEY_GROUP;
    // Sub-tiles of TILE queries, and (sub-tile, head) pairs: `pair = sub *
    // item_heads + h`.
    let tiles = count.div_ceil(TILE);
    let pairs = tiles * item_heads;
    let tile_count = |sub: usize| TILE.min(count - sub * TILE);

    let Scratch {
        queries,
        keys: block_keys,
        values: block_values,
        scores,
        out: outputs,
        max,
        sum,
        ..
    } = scratch;
    let queries = sized(queries, pairs * d * TILE);
    let block_keys = sized(block_keys, padded_keys * width);
    let block_values = sized(block_values, g.block_size * width);
    let scores = sized(scores, padded_keys * TILE);
    let outputs = sized(outputs, pairs * TILE * d);
    let max = sized(max, pairs * TILE);
    let sum = sized(sum, pairs * TILE);
    let query = |token: usize, head: usize| {
        let start = token * q.stride + head * d;
        &q.rows[start..start + d]
    };
    for sub in 0..tiles {
        if tile_count(sub) < TRANSPOSED_FROM {
            continue;
        }
        for h in 0..item_heads {
            let pair = sub * item_heads + h;
            let qt = &mut queries[pair * d * TILE..(pair + 1) * d * TILE];
            qt.fill(0.0);
            for lane in 0..tile_count(sub) {
                let row = query(first + sub * TILE + lane, first_head + h);
                for (i, &value) in row.iter().enumerate() {
                    qt[i * TILE + lane] = value * scale;
                }
            }
        }
    }
    outputs.fill(0.0);
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);

    // An f32 cache is read in place when the padding keys of the
    // transposed scores (up to a multiple of KEY_GROUP) stay in the block.
    let direct = E::as_f32(keys)
        .zip(E::as_f32(values))
        .filter(|_| g.block_size.is_multiple_of(KEY_GROUP));
    for (index, &block) in table[..visible.div_ceil(g.block_size)].iter().enumerate() {
        let block_start = index * g.block_size;
        let block_keys_visible = g.block_size.min(visible - block_start);
        let first_slot = block as usize * g.block_size;
        // The block's keys and values as f32 rows of `width` (the item's
        // KV heads) at a stride: the cache itself, or widened copies.
        let ((block_keys, block_values), stride) = match direct {
            Some((keys, values)) => {
                let from = first_slot * kv_row + kv_offset;
                ((&keys[from..], &values[from..]), kv_row)
            }
            None => {
                for j in 0..block_keys_visible {
                    let from = (first_slot + j) * kv_row + kv_offset;
                    let to = j * width..(j + 1) * width;
                    E::widen(&keys[from..from + width], &mut block_keys[to.clone()]);
                    E::widen(&values[from..from + width], &mut block_values[to]);
                }
                if block_keys_visible < padded_keys {
                    block_keys[block_keys_visible * width..].fill(0.0);
                }
                ((&block_keys[..], &block_values[..]), width)
            }
        };
        for sub in 0..tiles {
            let sub_count = tile_count(sub);
            let sub_position = first_position + sub * TILE;
            if block_start > sub_position + sub_count - 1 {
                continue; // the block starts after this sub-tile's last query
            }
            let kb = block_keys_visible.min(sub_position + sub_count - block_start);
            // Keys past a lane's query are masked; padding lanes take the
            // last query's mask.
            let masked = block_start + kb > sub_position + 1;
            for h in 0..item_heads {
                let pair = sub * item_heads + h;
                // This head's KV head's keys and values: rows of `d` at
                // `stride`.
                let kv = (h / group) * d;
                if sub_count >= TRANSPOSED_FROM {
                    transposed_scores::<M>(
                        &queries[pair * d * TILE..(pair + 1) * d * TILE],
                        (&block_keys[kv..], stride),
                        kb,
                        scores,
                    );
                } else {
                    for j in 0..kb {
                        let key = &block_keys[j * stride + kv..j * stride + kv + d];
                        let row = &mut scores[j * TILE..(j + 1) * TILE];
                        row.fill(0.0);
                        for (lane, score) in row[..sub_count].iter_mut().enumerate() {
                            let query = query(first + sub * TILE + lane, first_head + h);
                            *score = dot::<M>(query, key) * scale;
                        }
                    }
                }
                if masked {
                    for j in 0..kb {
                        let key_position = block_start + j;
                        for (lane, score) in scores[j * TILE..(j + 1) * TILE].iter_mut().enumerate()
                        {
                            if key_position > sub_position + lane.min(sub_count - 1) {
                                *score = f32::NEG_INFINITY;
                            }
                        }
                    }
                }
                let state = pair * TILE..(pair + 1) * TILE;
                let correction = softmax_block::<M>(
                    &mut scores[..kb * TILE],
                    &mut max[state.clone()],
                    &mut sum[state],
                );
                let outputs = &mut outputs[pair * TILE * d..(pair + 1) * TILE * d];
                let mut lane = 0;
                while lane < sub_count {
                    let lanes = if sub_count - lane >= 8 { 8 } else { 1 };
                    let weights = Weights {
                        scores: &scores[lane..],
                        correction: &correction[lane..],
                        keys: kb,
                    };
                    let out = &mut outputs[lane * d..(lane + lanes) * d];
                    let values = (&block_values[kv..], stride);
                    if lanes == 8 {
                        accumulate_values::<M, 8>(out, weights, values);
                    } else {
                        accumulate_values::<M, 1>(out, weights, values);
                    }
                    lane += lanes;
                }
            }
        }
    }
    for sub in 0..tiles {
        for h in 0..item_heads {
            let pair = sub * item_heads + h;
            for lane in 0..tile_count(sub) {
                let inverse = 1.0 / sum[pair * TILE + lane];
                let token = first + sub * TILE + lane;
                // SAFETY: the caller's guarantee: the token's row exists
                // and this head of it is this item's to write.
                let target = unsafe {
                    std::slice::from_raw_parts_mut(
                        out.ptr.add(token * out.row + (first_head + h) * d),
                        d,
                    )
                };
                let source = &outputs[(pair * TILE + lane) * d..(pair * TILE + lane + 1) * d];
                for (target, &value) in target.iter_mut().zip(source) {
                    *target = value * inverse;
                }
            }
        }
    }
}

/// One block's step of the online softmax for a tile: `scores` ([keys][TILE])
/// become `exp(score - new max)`, `max` and `sum` ([TILE]) are updated, and
/// the factor each lane's earlier output must be scaled by is returned.
#[inline(always)]
fn softmax_block<M: MulAdd>(scores: &mut [f32], max: &mut [f32], sum: &mut [f32]) -> [f32; TILE] {
    let max: &mut [f32; TILE] = max.try_into().expect("TILE lanes");
    let sum: &mut [f32; TILE] = sum.try_into().expect("TILE lanes");
    let mut block_max = [f32::NEG_INFINITY; TILE];
    for row in scores.chunks_exact(TILE) {
        let row: &[f32; TILE] = row.try_into().expect("TILE lanes");
        for (m, &s) in block_max.iter_mut().zip(row) {
            *m = m.max(s);
        }
    }
    let mut correction = [0f32; TILE];
    for lane in 0..TILE {
        let new_max = max[lane].max(block_max[lane]);
        correction[lane] = exp(max[lane] - new_max);
        max[lane] = new_max;
    }
    let mut block_sum = [0f32; TILE];
    for row in scores.chunks_exact_mut(TILE) {
        let row: &mut [f32; TILE] = row.try_into().expect("TILE lanes");
        for lane in 0..TILE {
            row[lane] = exp(row[lane] - max[lane]);
            block_sum[lane] += row[lane];
        }
    }
    for lane in 0..TILE {
        sum[lane] = M::mul_add(sum[lane], correction[lane], block_sum[lane]);
    }
    correction
}

/// `scores[j * TILE + lane] = keys[j] . queries[.., lane]` for `j < kb`
/// (rounded up to [`KEY_GROUP`]; the padding keys are zero), from
/// transposed queries `[d][TILE]`; key `j` starts at `keys[j * stride]`.
#[inline(always)]
fn transposed_scores<M: MulAdd>(
    queries: &[f32],
    (keys, stride): (&[f32], usize),
    kb: usize,
    scores: &mut [f32],
) {
    let d = queries.len() / TILE;
    let rows = kb.next_multiple_of(KEY_GROUP);
    assert!(rows == 0 || (keys.len() >= (rows - 1) * stride + d && scores.len() >= rows * TILE));
    for j0 in (0..kb).step_by(KEY_GROUP) {
        let mut acc = [[0f32; TILE]; KEY_GROUP];
        let keys = keys[j0 * stride..].as_ptr();
        for (i, q) in queries.chunks_exact(TILE).enumerate() {
            let q: &[f32; TILE] = q.try_into().expect("TILE lanes");
            for (jj, acc) in acc.iter_mut().enumerate() {
                // SAFETY: key j0 + jj < kb rounded up to KEY_GROUP, i < d
                // (asserted above).
                let k = unsafe { *keys.add(jj * stride + i) };
                for (a, &q) in acc.iter_mut().zip(q) {
                    *a = M::mul_add(k, q, *a);
                }
            }
        }
        for (jj, acc) in acc.iter().enumerate() {
            scores[(j0 + jj) * TILE..(j0 + jj + 1) * TILE].copy_from_slice(acc);
        }
    }
}

/// Sixteen independent partial sums, so the loop vectorises.
#[inline(always)]
fn dot<M: MulAdd>(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut a_chunks = a.chunks_exact(16);
    let mut b_chunks = b.chunks_exact(16);
    for (a, b) in (&mut a_chunks).zip(&mut b_chunks) {
        for lane in 0..16 {
            lanes[lane] = M::mul_add(a[lane], b[lane], lanes[lane]);
        }
    }
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(a, b)| a * b)
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// The softmax weights of some consecutive lanes of a tile: lane `n`'s
/// weight of key `j` is `scores[j * TILE + n]`.
#[derive(Clone, Copy)]
struct Weights<'a> {
    scores: &'a [f32],
    correction: &'a [f32],
    keys: usize,
}

/// For each of `N` lanes (rows of `d = out.len() / N`): `out = out *
/// correction + sum_j weight_j * values[j]`, value `j` at `j * stride`. The lanes share each value
/// load; chunks of 16 dimensions stay in registers over the keys.
#[inline(always)]
fn accumulate_values<M: MulAdd, const N: usize>(
    out: &mut [f32],
    w: Weights<'_>,
    (values, stride): (&[f32], usize),
) {
    const CHUNK: usize = 16;
    let d = out.len() / N;
    assert!(
        w.keys == 0
            || (values.len() >= (w.keys - 1) * stride + d
                && w.scores.len() > (w.keys - 1) * TILE + N - 1
                && w.correction.len() >= N)
    );
    let mut start = 0;
    while start + CHUNK <= d {
        let mut acc = [[0f32; CHUNK]; N];
        for (n, acc) in acc.iter_mut().enumerate() {
            for (a, &o) in acc
                .iter_mut()
                .zip(&out[n * d + start..n * d + start + CHUNK])
            {
                *a = o * w.correction[n];
            }
        }
        for j in 0..w.keys {
            // SAFETY: j < keys, start + CHUNK <= d and n < N (asserted
            // above): in bounds, and no panic path keeps `acc` in memory.
            let v = unsafe {
                &*values
                    .as_ptr()
                    .add(j * stride + start)
                    .cast::<[f32; CHUNK]>()
            };
            for (n, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let weight = unsafe { *w.scores.as_ptr().add(j * TILE + n) };
                for (a, &v) in acc.iter_mut().zip(v) {
                    *a = M::mul_add(weight, v, *a);
                }
            }
        }
        for (n, acc) in acc.iter().enumerate() {
            out[n * d + start..n * d + start + CHUNK].copy_from_slice(acc);
        }
        start += CHUNK;
    }
    if start < d {
        for n in 0..N {
            let out = &mut out[n * d + start..(n + 1) * d];
            for o in out.iter_mut() {
                *o *= w.correction[n];
            }
            for j in 0..w.keys {
                let weight = w.scores[j * TILE + n];
                for (o, &v) in out
                    .iter_mut()
                    .zip(&values[j * stride + start..j * stride + d])
                {
                    *o = M::mul_add(weight, v, *o);
                }
            }
        }
    }
}
