//! The x86-64 tiles of [`super::matmul`]: `RB` rows of activations times
//! `NB` weight rows, dot products over the whole `k`, accumulated in f32
//! registers. One version for AVX-512 (16 lanes, masked tail loads) and one
//! for AVX2 + FMA (8 lanes, scalar tail); both read f32, f16 or bf16
//! weights, widening them to f32 as they are loaded. Chosen at run time by
//! [`super::Isa::detect`].
//!
//! Safety: every function here reads `RB` rows of `k` f32 from `x` (row
//! stride `x_stride`), `NB` rows of `k` weights from `w` (row stride
//! `w_stride` elements) and writes `RB x NB` floats to `out` (row stride
//! `out_stride`); the caller guarantees those ranges are in bounds, and
//! that the CPU has the features the function is compiled for.

use std::arch::x86_64::*;

use super::matmul::{F16, F32, WeightKind};

/// 16 weights from `w + i` (element offset) as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn load16<const WK: WeightKind>(w: *const u8, i: usize) -> __m512 {
    // SAFETY: the caller keeps `i + 16` within the row.
    unsafe {
        match WK {
            F32 => _mm512_loadu_ps(w.cast::<f32>().add(i)),
            F16 => _mm512_cvtph_ps(_mm256_loadu_si256(w.cast::<u16>().add(i).cast())),
            _ => {
                let half = _mm256_loadu_si256(w.cast::<u16>().add(i).cast());
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16))
            }
        }
    }
}

/// The first `count` (< 16) weights from `w + i` as f32, the rest 0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn load16_masked<const WK: WeightKind>(w: *const u8, i: usize, mask: u16) -> __m512 {
    // SAFETY: masked-off lanes are not read.
    unsafe {
        match WK {
            F32 => _mm512_maskz_loadu_ps(mask, w.cast::<f32>().add(i)),
            F16 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                mask,
                w.cast::<u16>().add(i).cast(),
            )),
            _ => {
                let half = _mm256_maskz_loadu_epi16(mask, w.cast::<u16>().add(i).cast());
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16))
            }
        }
    }
}

/// See the module docs.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
pub(super) unsafe fn tile_avx512<const RB: usize, const NB: usize, const WK: WeightKind>(
    x: *const f32,
    x_stride: usize,
    w: *const u8,
    w_stride: usize,
    k: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let size = super::matmul::weight_size(WK);
    let mut acc = [[_mm512_setzero_ps(); NB]; RB];
    let mut wv = [_mm512_setzero_ps(); NB];
    let mut i = 0;
    // SAFETY: see the module docs; every offset stays below `k` per row.
    unsafe {
        while i + 16 <= k {
            for (j, v) in wv.iter_mut().enumerate() {
                *v = load16::<WK>(w.add(j * w_stride * size), i);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_ps(x.add(r * x_stride + i));
                for j in 0..NB {
                    acc[j] = _mm512_fmadd_ps(xv, wv[j], acc[j]);
                }
            }
            i += 16;
        }
        if i < k {
            let mask = ((1u32 << (k - i)) - 1) as u16;
            for (j, v) in wv.iter_mut().enumerate() {
                *v = load16_masked::<WK>(w.add(j * w_stride * size), i, mask);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = _mm512_maskz_loadu_ps(mask, x.add(r * x_stride + i));
                for j in 0..NB {
                    acc[j] = _mm512_fmadd_ps(xv, wv[j], acc[j]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, &sum) in acc.iter().enumerate() {
                *out.add(r * out_stride + j) = _mm512_reduce_add_ps(sum);
            }
        }
    }
}

/// 8 weights from `w + i` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const WK: WeightKind>(w: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the row.
    unsafe {
        match WK {
            F32 => _mm256_loadu_ps(w.cast::<f32>().add(i)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(w.cast::<u16>().add(i).cast())),
            _ => {
                let half = _mm_loadu_si128(w.cast::<u16>().add(i).cast());
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16))
            }
        }
    }
}

/// The sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn reduce8(v: __m256) -> f32 {
    let pair = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let quad = _mm_add_ps(pair, _mm_movehl_ps(pair, pair));
    _mm_cvtss_f32(_mm_add_ss(quad, _mm_shuffle_ps(quad, quad, 1)))
}

/// See the module docs.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_avx2<const RB: usize, const NB: usize, const WK: WeightKind>(
    x: *const f32,
    x_stride: usize,
    w: *const u8,
    w_stride: usize,
    k: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let size = super::matmul::weight_size(WK);
    let mut acc = [[_mm256_setzero_ps(); NB]; RB];
    let mut wv = [_mm256_setzero_ps(); NB];
    let mut i = 0;
    // SAFETY: see the module docs; every offset stays below `k` per row.
    unsafe {
        while i + 8 <= k {
            for (j, v) in wv.iter_mut().enumerate() {
                *v = load8::<WK>(w.add(j * w_stride * size), i);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(x.add(r * x_stride + i));
                for j in 0..NB {
                    acc[j] = _mm256_fmadd_ps(xv, wv[j], acc[j]);
                }
            }
            i += 8;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, &sum) in acc.iter().enumerate() {
                let row = w.add(j * w_stride * size);
                let mut total = reduce8(sum);
                for t in i..k {
                    total += *x.add(r * x_stride + t) * super::matmul::weight_at::<WK>(row, t);
                }
                *out.add(r * out_stride + j) = total;
            }
        }
    }
}
