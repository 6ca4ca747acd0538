//! The x86-64 tiles of [`super::matmul`]: `RB` activation rows times one
//! panel of 32 output columns, accumulated in f32 registers (`RB x 2`
//! AVX-512 vectors, or `RB x 4` AVX2 ones), the panel's weights widened
//! from f32, f16 or bf16 as they are loaded and each row's activation
//! broadcast. AVX-512 tiles take up to 12 rows (24 accumulators), AVX2 ones
//! up to 2 (8 of 16 registers). Chosen at run time by [`super::Isa`].
//!
//! Safety (every tile): `x` holds `RB` rows of `k` floats (row stride
//! `x_stride`), `panel` holds `32 * k` weights, `out.ptr` has `RB` rows
//! (stride `out.stride`) of `columns` (<= 32) writable floats, and the CPU
//! has the features the tile is compiled for.

use std::arch::x86_64::*;

use super::matmul::{BF16, F16, F32, Out, PANEL, Tile, WeightKind};

/// 16 weights from element `i` of a panel, as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn load16<const WK: WeightKind>(w: *const u8, i: usize) -> __m512 {
    // SAFETY: the caller keeps `i + 16` within the panel.
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

/// See the module docs.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
unsafe fn tile_avx512<const RB: usize, const WK: WeightKind>(
    x: *const f32,
    x_stride: usize,
    panel: *const u8,
    k: usize,
    out: Out,
    columns: usize,
) {
    let size = super::matmul::weight_size(WK);
    let mut acc = [[_mm512_setzero_ps(); 2]; RB];
    // SAFETY: see the module docs.
    unsafe {
        for i in 0..k {
            let w = panel.add(i * PANEL * size);
            let w0 = load16::<WK>(w, 0);
            let w1 = load16::<WK>(w, 16);
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = _mm512_set1_ps(*x.add(r * x_stride + i));
                acc[0] = _mm512_fmadd_ps(xv, w0, acc[0]);
                acc[1] = _mm512_fmadd_ps(xv, w1, acc[1]);
            }
        }
        let low = if columns >= 16 {
            u16::MAX
        } else {
            ((1u32 << columns) - 1) as u16
        };
        let high = if columns >= PANEL {
            u16::MAX
        } else if columns <= 16 {
            0
        } else {
            ((1u32 << (columns - 16)) - 1) as u16
        };
        for (r, acc) in acc.iter().enumerate() {
            let row = out.ptr.add(r * out.stride);
            _mm512_mask_storeu_ps(row, low, acc[0]);
            _mm512_mask_storeu_ps(row.add(16), high, acc[1]);
        }
    }
}

/// 8 weights from element `i` of a panel, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const WK: WeightKind>(w: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the panel.
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

/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2<const RB: usize, const WK: WeightKind>(
    x: *const f32,
    x_stride: usize,
    panel: *const u8,
    k: usize,
    out: Out,
    columns: usize,
) {
    let size = super::matmul::weight_size(WK);
    let mut acc = [[_mm256_setzero_ps(); 4]; RB];
    // SAFETY: see the module docs.
    unsafe {
        for i in 0..k {
            let w = panel.add(i * PANEL * size);
            let wv = [
                load8::<WK>(w, 0),
                load8::<WK>(w, 8),
                load8::<WK>(w, 16),
                load8::<WK>(w, 24),
            ];
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = _mm256_set1_ps(*x.add(r * x_stride + i));
                for (acc, &w) in acc.iter_mut().zip(&wv) {
                    *acc = _mm256_fmadd_ps(xv, w, *acc);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let row = out.ptr.add(r * out.stride);
            if columns == PANEL {
                for (v, &value) in acc.iter().enumerate() {
                    _mm256_storeu_ps(row.add(8 * v), value);
                }
            } else {
                let mut all = [0f32; PANEL];
                for (v, &value) in acc.iter().enumerate() {
                    _mm256_storeu_ps(all.as_mut_ptr().add(8 * v), value);
                }
                std::ptr::copy_nonoverlapping(all.as_ptr(), row, columns);
            }
        }
    }
}

/// A Q8_0 tile (see `super::quantized`): `panel` is `k / 32` blocks of 32
/// f32 scales and 32 x 32 int8 weights.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
unsafe fn tile_q8_avx512<const RB: usize>(
    x: *const f32,
    x_stride: usize,
    panel: *const u8,
    k: usize,
    out: Out,
    columns: usize,
) {
    let mut total = [[_mm512_setzero_ps(); 2]; RB];
    // SAFETY: see the module docs, with the Q8_0 panel layout.
    unsafe {
        for block in 0..k / 32 {
            let base = panel.add(block * super::quantized::Q8_PANEL_BLOCK);
            let weights = base.add(PANEL * 4);
            let mut sums = [[_mm512_setzero_ps(); 2]; RB];
            for i in 0..32 {
                let q = weights.add(i * PANEL);
                let w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q.cast())));
                let w1 =
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q.add(16).cast())));
                for (r, sums) in sums.iter_mut().enumerate() {
                    let xv = _mm512_set1_ps(*x.add(r * x_stride + block * 32 + i));
                    sums[0] = _mm512_fmadd_ps(xv, w0, sums[0]);
                    sums[1] = _mm512_fmadd_ps(xv, w1, sums[1]);
                }
            }
            let d0 = _mm512_loadu_ps(base.cast::<f32>());
            let d1 = _mm512_loadu_ps(base.cast::<f32>().add(16));
            for (total, sums) in total.iter_mut().zip(&sums) {
                total[0] = _mm512_fmadd_ps(sums[0], d0, total[0]);
                total[1] = _mm512_fmadd_ps(sums[1], d1, total[1]);
            }
        }
        let low = if columns >= 16 {
            u16::MAX
        } else {
            ((1u32 << columns) - 1) as u16
        };
        let high = if columns >= PANEL {
            u16::MAX
        } else if columns <= 16 {
            0
        } else {
            ((1u32 << (columns - 16)) - 1) as u16
        };
        for (r, total) in total.iter().enumerate() {
            let row = out.ptr.add(r * out.stride);
            _mm512_mask_storeu_ps(row, low, total[0]);
            _mm512_mask_storeu_ps(row.add(16), high, total[1]);
        }
    }
}

macro_rules! tiles {
    ($tile:ident, $wk:ident, [$($rb:literal),*]) => {
        [$($tile::<$rb, $wk> as Tile),*]
    };
}

/// Indexed by rows - 1.
pub(super) static AVX512_F32: [Tile; 12] =
    tiles!(tile_avx512, F32, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
pub(super) static AVX512_F16: [Tile; 12] =
    tiles!(tile_avx512, F16, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
pub(super) static AVX512_BF16: [Tile; 12] =
    tiles!(tile_avx512, BF16, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
pub(super) static AVX2_F32: [Tile; 2] = tiles!(tile_avx2, F32, [1, 2]);
pub(super) static AVX2_F16: [Tile; 2] = tiles!(tile_avx2, F16, [1, 2]);
pub(super) static AVX2_BF16: [Tile; 2] = tiles!(tile_avx2, BF16, [1, 2]);
pub(super) static AVX512_Q8_0: [Tile; 6] = [
    tile_q8_avx512::<1> as Tile,
    tile_q8_avx512::<2> as Tile,
    tile_q8_avx512::<3> as Tile,
    tile_q8_avx512::<4> as Tile,
    tile_q8_avx512::<5> as Tile,
    tile_q8_avx512::<6> as Tile,
];
