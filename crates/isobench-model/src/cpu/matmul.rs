//! `out = x W^T` for a weight matrix `W` [n, k] stored in f32, f16 or bf16,
//! with f32 activations `x` [rows, k] and f32 accumulation.
//!
//! Weights are loaded row-major ([`Matrix`]) and packed once, at load, into
//! panels of [`PANEL`] output columns ([`Packed`]): panel `p` holds, for
//! each `i < k` in turn, the 32 weights `W[32 p + j, i]`, so a panel is one
//! contiguous stream. A tile keeps `RB` activation rows x 32 columns of
//! output in registers and, for each `i`, multiplies the panel's 32 weights
//! (two AVX-512 or four AVX2 vectors, widened to f32 as they are loaded)
//! with each row's `x[r, i]` broadcast: no horizontal sums, and each weight
//! loaded once serves `RB` rows.
//!
//! The panels are split evenly over the team. Each thread takes its panels
//! one by one and runs every row of a chunk of [`ROW_CHUNK`] rows through a
//! panel (in L2 after its first row block) before the next: a decode step of
//! up to [`ROW_CHUNK`] sequences reads every weight once from memory; a
//! longer prefill is cut into chunks whose activations (at most a few
//! hundred KiB) stay in L2 while the panels stream past them.

use half::{bf16, f16};

use super::{Isa, team};

/// Output columns per packed panel.
pub(crate) const PANEL: usize = 32;

/// Which element type a [`Matrix`] holds, as a const generic of the tiles.
pub(crate) type WeightKind = u8;
pub(crate) const F32: WeightKind = 0;
pub(crate) const F16: WeightKind = 1;
pub(crate) const BF16: WeightKind = 2;

/// Activation rows run through a panel before the next panel.
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

/// A row-major weight matrix [n, k] (row `j` is output feature `j`): how
/// weights are loaded, stacked and looked up (embeddings).
#[derive(Debug, Clone)]
pub(crate) struct Matrix {
    pub n: usize,
    pub k: usize,
    pub elements: Elements,
}

impl Matrix {
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

/// A matrix packed into panels for [`matmul`] (see the module docs); the
/// last panel is padded with zero weights.
#[derive(Debug, Clone)]
pub(crate) struct Packed {
    pub n: usize,
    pub k: usize,
    elements: Elements,
}

impl Packed {
    pub(crate) fn new(m: &Matrix) -> Self {
        fn pack<T: Copy + Default>(v: &[T], n: usize, k: usize) -> Vec<T> {
            let panels = n.div_ceil(PANEL);
            let mut out = vec![T::default(); panels * PANEL * k];
            for (j, row) in v.chunks_exact(k).enumerate() {
                let base = (j / PANEL) * PANEL * k + j % PANEL;
                for (i, &value) in row.iter().enumerate() {
                    out[base + i * PANEL] = value;
                }
            }
            out
        }
        let elements = match &m.elements {
            Elements::F32(v) => Elements::F32(pack(v, m.n, m.k)),
            Elements::F16(v) => Elements::F16(pack(v, m.n, m.k)),
            Elements::BF16(v) => Elements::BF16(pack(v, m.n, m.k)),
        };
        Self {
            n: m.n,
            k: m.k,
            elements,
        }
    }

    fn kind_and_bytes(&self) -> (WeightKind, *const u8) {
        match &self.elements {
            Elements::F32(v) => (F32, v.as_ptr().cast()),
            Elements::F16(v) => (F16, v.as_ptr().cast()),
            Elements::BF16(v) => (BF16, v.as_ptr().cast()),
        }
    }
}

/// A raw output pointer shared by the team: each thread writes its own
/// columns only.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub *mut f32);
// SAFETY: threads write disjoint elements (see `matmul`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    pub(crate) fn get(&self) -> *mut f32 {
        self.0
    }
}

/// `out[t * stride + j] = sum_i x[t * k + i] * w[j, i]` for `t < rows`
/// and `j < n`, on the whole team.
pub(crate) fn matmul(isa: Isa, x: &[f32], rows: usize, w: &Packed, out: &mut [f32], stride: usize) {
    if rows == 0 {
        return;
    }
    assert!(
        x.len() >= rows * w.k && stride >= w.n && out.len() >= (rows - 1) * stride + w.n,
        "matmul shapes"
    );
    let out_ptr = OutPtr(out.as_mut_ptr());
    team::split(w.n.div_ceil(PANEL), 1, |panels| {
        // SAFETY: the bounds were checked above; `split` hands each thread
        // a disjoint range of panels, so no element is written twice.
        unsafe { matmul_panels(isa, x, rows, w, panels, out_ptr.get(), stride) }
    });
}

/// Where a product goes: row `t` starts at `ptr + t * stride`.
#[derive(Clone, Copy)]
pub(crate) struct Out {
    pub ptr: *mut f32,
    pub stride: usize,
}

/// A tile: `rows` activation rows (row stride `x_stride`) through one
/// panel of `k` steps, writing the first `columns` (<= 32) columns.
pub(crate) type Tile = unsafe fn(*const f32, usize, *const u8, usize, Out, usize);

/// One thread's part of [`matmul`]: the output columns of `panels`.
///
/// # Safety
/// `x` holds `rows * w.k` floats, `out` points at `rows` rows of `stride`
/// floats (at least `w.n` each), and no other thread writes these panels'
/// columns.
unsafe fn matmul_panels(
    isa: Isa,
    x: &[f32],
    rows: usize,
    w: &Packed,
    panels: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let (kind, bytes) = w.kind_and_bytes();
    let tiles: &[Tile] = match (isa, kind) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, F32) => &super::x86::AVX512_F32,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, F16) => &super::x86::AVX512_F16,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, _) => &super::x86::AVX512_BF16,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, F32) => &super::x86::AVX2_F32,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, F16) => &super::x86::AVX2_F16,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => &super::x86::AVX2_BF16,
        (_, F32) => &[portable_tile::<F32> as Tile],
        (_, F16) => &[portable_tile::<F16> as Tile],
        (_, _) => &[portable_tile::<BF16> as Tile],
    };
    let panel_bytes = PANEL * w.k * weight_size(kind);
    let layout = Panels {
        bytes,
        panel_bytes,
        n: w.n,
        k: w.k,
    };
    // SAFETY: forwarded from the caller; `layout` describes `w`.
    unsafe { run_panels(tiles, &layout, x, rows, panels, out, stride) }
}

/// Where a matrix's panels are: `n` columns, panel `p` at `bytes + p *
/// panel_bytes`, `k` steps each.
pub(crate) struct Panels {
    pub bytes: *const u8,
    pub panel_bytes: usize,
    pub n: usize,
    pub k: usize,
}

// SAFETY: the panels are read only, by every thread of a section, while
// the matrix they point into is borrowed by the section's caller.
unsafe impl Sync for Panels {}

/// Runs `tiles` (indexed by rows - 1) over `panels` for every row, row
/// chunks outermost (see the module docs).
///
/// # Safety
/// `layout` describes a live matrix the tiles read; `x`, `out` and
/// `stride` as in [`matmul_panels`].
pub(crate) unsafe fn run_panels(
    tiles: &[Tile],
    layout: &Panels,
    x: &[f32],
    rows: usize,
    panels: std::ops::Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let k = layout.k;
    for chunk in (0..rows).step_by(ROW_CHUNK) {
        let chunk_end = rows.min(chunk + ROW_CHUNK);
        for panel in panels.clone() {
            let columns = PANEL.min(layout.n - panel * PANEL);
            // SAFETY: the panel lies within the matrix.
            let weights = unsafe { layout.bytes.add(panel * layout.panel_bytes) };
            let mut t = chunk;
            while t < chunk_end {
                let rb = tiles.len().min(chunk_end - t);
                let target = Out {
                    // SAFETY: row t, column panel * PANEL are in bounds.
                    ptr: unsafe { out.add(t * stride + panel * PANEL) },
                    stride,
                };
                // SAFETY: rows t..t + rb of x and of the output are in
                // bounds; the tile writes `columns` columns of each.
                unsafe { tiles[rb - 1](x.as_ptr().add(t * k), k, weights, k, target, columns) };
                t += rb;
            }
        }
    }
}

/// One activation row through one panel in plain Rust (the compiler
/// vectorises the 32 columns for the build's baseline: SSE2 on x86-64,
/// NEON on aarch64).
///
/// # Safety
/// As [`Tile`]: `x` holds `k` floats, `panel` `PANEL * k` weights of kind
/// `WK`, and `out.ptr` has `columns` writable floats.
unsafe fn portable_tile<const WK: WeightKind>(
    x: *const f32,
    _x_stride: usize,
    panel: *const u8,
    k: usize,
    out: Out,
    columns: usize,
) {
    let mut acc = [0f32; PANEL];
    for i in 0..k {
        // SAFETY: the caller's guarantee.
        let xi = unsafe { *x.add(i) };
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: element i * PANEL + j of the panel exists.
            *acc += xi * unsafe { weight_at::<WK>(panel, i * PANEL + j) };
        }
    }
    for (j, &value) in acc[..columns].iter().enumerate() {
        // SAFETY: the caller's guarantee.
        unsafe { *out.ptr.add(j) = value };
    }
}
