//! `out = x W^T` for a row-major weight matrix `W` [n, k] stored in f32,
//! f16 or bf16, with f32 activations `x` [rows, k] and f32 accumulation.
//!
//! The output columns are split evenly over the team (each thread streams
//! its own contiguous band of weight rows). Within a band, weights are taken
//! `NB` rows at a time; each such tile (a few KiB, in L1) is multiplied with
//! every activation row, `RB` rows at a time, before the next tile is read.
//! So a decode step of up to [`ROW_CHUNK`] rows reads every weight once from
//! memory however many sequences it holds; a longer prefill step is cut into
//! chunks of [`ROW_CHUNK`] rows, whose activations (at most a few hundred
//! KiB) stay in L2 while the weights stream past them.

use half::{bf16, f16};

use super::{Isa, team};

/// Which element type a [`Matrix`] holds, as a const generic of the tiles.
pub(crate) type WeightKind = u8;
pub(crate) const F32: WeightKind = 0;
pub(crate) const F16: WeightKind = 1;
pub(crate) const BF16: WeightKind = 2;

/// Activation rows multiplied with each weight tile before the next one.
pub(crate) const ROW_CHUNK: usize = 64;

pub(crate) const fn weight_size(kind: WeightKind) -> usize {
    if kind == F32 { 4 } else { 2 }
}

/// Element `i` of a weight row, as f32.
///
/// # Safety
/// `row` points at a row of at least `i + 1` elements of kind `WK`.
#[inline(always)]
pub(crate) unsafe fn weight_at<const WK: WeightKind>(row: *const u8, i: usize) -> f32 {
    // SAFETY: the caller's guarantee.
    unsafe {
        match WK {
            F32 => *row.cast::<f32>().add(i),
            F16 => f16::from_bits(*row.cast::<u16>().add(i)).to_f32(),
            _ => bf16::from_bits(*row.cast::<u16>().add(i)).to_f32(),
        }
    }
}

/// A weight matrix's elements.
#[derive(Debug, Clone)]
pub(crate) enum Elements {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// A row-major weight matrix [n, k]: row `j` is output feature `j`.
#[derive(Debug, Clone)]
pub(crate) struct Matrix {
    pub n: usize,
    pub k: usize,
    pub elements: Elements,
}

impl Matrix {
    fn kind_and_bytes(&self) -> (WeightKind, *const u8) {
        match &self.elements {
            Elements::F32(v) => (F32, v.as_ptr().cast()),
            Elements::F16(v) => (F16, v.as_ptr().cast()),
            Elements::BF16(v) => (BF16, v.as_ptr().cast()),
        }
    }

    /// Stacks matrices with the same `k` and element type row-wise (fused
    /// projections: q, k and v; gate and up). `None` if they differ.
    pub(crate) fn stack(parts: &[Matrix]) -> Option<Matrix> {
        let k = parts.first()?.k;
        if parts.iter().any(|p| p.k != k) {
            return None;
        }
        let n = parts.iter().map(|p| p.n).sum();
        macro_rules! concat {
            ($variant:ident) => {{
                let mut all = Vec::with_capacity(n * k);
                for part in parts {
                    match &part.elements {
                        Elements::$variant(v) => all.extend_from_slice(v),
                        _ => return None,
                    }
                }
                Elements::$variant(all)
            }};
        }
        let elements = match &parts[0].elements {
            Elements::F32(_) => concat!(F32),
            Elements::F16(_) => concat!(F16),
            Elements::BF16(_) => concat!(BF16),
        };
        Some(Matrix { n, k, elements })
    }
}

/// A raw output pointer shared by the team: each thread writes its own
/// columns only.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: threads write disjoint elements (see `matmul`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// `out[t * stride + j] = sum_i x[t * k + i] * w[j, i]` for `t < rows`
/// and `j < n`, on the whole team.
pub(crate) fn matmul(isa: Isa, x: &[f32], rows: usize, w: &Matrix, out: &mut [f32], stride: usize) {
    if rows == 0 {
        return;
    }
    assert!(
        x.len() >= rows * w.k && stride >= w.n && out.len() >= (rows - 1) * stride + w.n,
        "matmul shapes"
    );
    let out_ptr = OutPtr(out.as_mut_ptr());
    team::split(w.n, 8, |columns| {
        // SAFETY: the bounds were checked above; `split` hands each thread
        // a disjoint column range, so no element is written twice.
        unsafe { matmul_columns(isa, x, rows, w, columns, out_ptr.get(), stride) }
    });
}

/// One thread's part of [`matmul`]: output columns `columns` of every row.
///
/// # Safety
/// `x` holds `rows * w.k` floats, `out` points at `rows` rows of `stride`
/// floats (at least `w.n` each), and no other thread writes the same
/// columns.
pub(crate) unsafe fn matmul_columns(
    isa: Isa,
    x: &[f32],
    rows: usize,
    w: &Matrix,
    columns: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let (kind, bytes) = w.kind_and_bytes();
    let out = Out { ptr: out, stride };
    // SAFETY: forwarded from the caller.
    unsafe {
        match kind {
            F32 => columns_of::<F32>(isa, x, rows, w, bytes, columns, out),
            F16 => columns_of::<F16>(isa, x, rows, w, bytes, columns, out),
            _ => columns_of::<BF16>(isa, x, rows, w, bytes, columns, out),
        }
    }
}

/// Where a product goes: row `t` starts at `ptr + t * stride`.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    stride: usize,
}

/// The tile function of one ISA: see [`super::x86`]'s module docs.
type Tile = unsafe fn(*const f32, usize, *const u8, usize, usize, *mut f32, usize);

/// The tiles of one ISA and weight kind (see [`super::x86`]).
struct Tiles {
    /// One activation row: the tile's width and function.
    single: (usize, Tile),
    /// Indexed by rows - 1 (up to the ISA's most rows per tile): tiles
    /// [`MULTI_WIDTH`] weight rows wide.
    multi: &'static [Tile],
    /// Indexed by rows - 1: one weight row wide, for the last columns.
    narrow: &'static [Tile],
}

/// Weight rows per tile when the step has several activation rows.
const MULTI_WIDTH: usize = 4;

macro_rules! tiles {
    ($tile:ident, $wk:ident, [$($rb:literal),*]) => {
        Tiles {
            single: (8, super::x86::$tile::<1, 8, $wk> as Tile),
            multi: &[$(super::x86::$tile::<$rb, MULTI_WIDTH, $wk> as Tile),*],
            narrow: &[$(super::x86::$tile::<$rb, 1, $wk> as Tile),*],
        }
    };
}

#[cfg(target_arch = "x86_64")]
fn tiles<const WK: WeightKind>(isa: Isa) -> Option<Tiles> {
    match (isa, WK) {
        (Isa::Avx512, F32) => Some(tiles!(tile_avx512, F32, [1, 2, 3, 4])),
        (Isa::Avx512, F16) => Some(tiles!(tile_avx512, F16, [1, 2, 3, 4])),
        (Isa::Avx512, _) => Some(tiles!(tile_avx512, BF16, [1, 2, 3, 4])),
        (Isa::Avx2, F32) => Some(tiles!(tile_avx2, F32, [1, 2])),
        (Isa::Avx2, F16) => Some(tiles!(tile_avx2, F16, [1, 2])),
        (Isa::Avx2, _) => Some(tiles!(tile_avx2, BF16, [1, 2])),
        (Isa::Portable, _) => None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn tiles<const WK: WeightKind>(_isa: Isa) -> Option<Tiles> {
    None
}

/// # Safety
/// As [`matmul_columns`]; `bytes` is `w`'s element storage.
unsafe fn columns_of<const WK: WeightKind>(
    isa: Isa,
    x: &[f32],
    rows: usize,
    w: &Matrix,
    bytes: *const u8,
    columns: std::ops::Range<usize>,
    out: Out,
) {
    let k = w.k;
    let size = weight_size(WK);
    let Some(tiles) = tiles::<WK>(isa) else {
        // SAFETY: forwarded.
        unsafe { portable_columns::<WK>(x, rows, k, bytes, columns, out) };
        return;
    };
    let max_rows = tiles.multi.len();
    for chunk in (0..rows).step_by(ROW_CHUNK) {
        let chunk_end = rows.min(chunk + ROW_CHUNK);
        let width = if chunk_end - chunk == 1 {
            tiles.single.0
        } else {
            MULTI_WIDTH
        };
        let mut j = columns.start;
        while j < columns.end {
            let wide = j + width <= columns.end;
            let mut t = chunk;
            while t < chunk_end {
                let rb = max_rows.min(chunk_end - t);
                let tile = match (wide, rb == chunk_end - chunk && rb == 1) {
                    (false, _) => tiles.narrow[rb - 1],
                    (true, true) => tiles.single.1,
                    (true, false) => tiles.multi[rb - 1],
                };
                // SAFETY: rows t..t + rb and the tile's columns from j are
                // in bounds (see the caller's contract).
                unsafe {
                    tile(
                        x.as_ptr().add(t * k),
                        k,
                        bytes.add(j * k * size),
                        k,
                        k,
                        out.ptr.add(t * out.stride + j),
                        out.stride,
                    );
                }
                t += rb;
            }
            j += if wide { width } else { 1 };
        }
    }
}

/// The same product in plain Rust (eight independent lanes, which the
/// compiler vectorises for the build's baseline: SSE2 on x86-64, NEON on
/// aarch64).
///
/// # Safety
/// As [`columns_of`].
unsafe fn portable_columns<const WK: WeightKind>(
    x: &[f32],
    rows: usize,
    k: usize,
    bytes: *const u8,
    columns: std::ops::Range<usize>,
    out: Out,
) {
    let size = weight_size(WK);
    let mut row = vec![0f32; k];
    for j in columns {
        // SAFETY: row j of the weights holds k elements.
        unsafe {
            let w = bytes.add(j * k * size);
            for (i, value) in row.iter_mut().enumerate() {
                *value = weight_at::<WK>(w, i);
            }
        }
        for t in 0..rows {
            let dot = super::ops::dot(&x[t * k..(t + 1) * k], &row);
            // SAFETY: element (t, j) is in bounds and this thread's.
            unsafe { *out.ptr.add(t * out.stride + j) = dot };
        }
    }
}
