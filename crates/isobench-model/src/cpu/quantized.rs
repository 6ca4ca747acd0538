//! Quantized projections (a GGUF file's Q8_0, Q4_K, Q6_K, ... matrices) on
//! this crate's thread team, with candle's block types and dot products
//! (`candle_core::quantized::k_quants`, SIMD chosen at run time).
//!
//! As llama.cpp does: each activation row is quantized once per call to the
//! type's dot-product partner (Q8_0 for Q8_0 and Q4_0 weights, Q8_K for
//! the K-quants), then every output is one block-wise dot product of a
//! weight row with it, four weight rows at a time sharing the activation's
//! loads (`vec_dot_4`). Output columns are split over the team like the
//! dense projections', so a quantized model runs on one pool of threads.
//!
//! Q8_0 on an AVX-512 CPU takes a faster path instead: its blocks are
//! repacked at load into the dense kernels' 32-column panels ([`Q8Panels`]:
//! per 32-value block, 32 f32 scales and 32 x 32 int8 weights), and the
//! tiles widen the int8 weights to f32 as they load them, multiply with the
//! f32 activations, and scale each block's sums once: activations are not
//! quantized, and each weight byte is read once per step for every row.

use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, GgmlType,
};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, bail};

use super::matmul::{OutPtr, PANEL, Panels, run_panels};
use super::{Isa, team};

/// A quantized matrix [n, k] whose rows are `k / block` blocks.
pub(crate) struct QuantMatrix {
    pub n: usize,
    pub k: usize,
    rows: Box<dyn QuantRows>,
}

impl std::fmt::Debug for QuantMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QuantMatrix [{}, {}]", self.n, self.k)
    }
}

trait QuantRows: Send + Sync {
    fn apply(&self, x: &[f32], rows: usize, out: &mut [f32], stride: usize);
}

struct Typed<T: GgmlType> {
    n: usize,
    k: usize,
    blocks: Vec<T>,
}

impl QuantMatrix {
    /// The blocks of a 2-D quantized tensor.
    pub(crate) fn new(tensor: &QTensor) -> Result<Self> {
        Self::with_panels(tensor, true)
    }

    /// As [`QuantMatrix::new`]; `panels` false keeps Q8_0 on the dot
    /// products too (the tests compare both).
    pub(crate) fn with_panels(tensor: &QTensor, panels: bool) -> Result<Self> {
        let (n, k) = tensor.shape().dims2()?;
        let data = tensor.data()?;
        macro_rules! typed {
            ($block:ty) => {
                Box::new(Typed::<$block>::new(n, k, &data)?) as Box<dyn QuantRows>
            };
        }
        let rows = match tensor.dtype() {
            #[cfg(target_arch = "x86_64")]
            GgmlDType::Q8_0 if panels && Isa::detect() == Isa::Avx512 => {
                Box::new(Q8Panels::new(n, k, &data)?) as Box<dyn QuantRows>
            }
            GgmlDType::Q4_0 => typed!(BlockQ4_0),
            GgmlDType::Q4_1 => typed!(BlockQ4_1),
            GgmlDType::Q5_0 => typed!(BlockQ5_0),
            GgmlDType::Q5_1 => typed!(BlockQ5_1),
            GgmlDType::Q8_0 => typed!(BlockQ8_0),
            GgmlDType::Q2K => typed!(BlockQ2K),
            GgmlDType::Q3K => typed!(BlockQ3K),
            GgmlDType::Q4K => typed!(BlockQ4K),
            GgmlDType::Q5K => typed!(BlockQ5K),
            GgmlDType::Q6K => typed!(BlockQ6K),
            other => bail!(
                "quantized weights of type {other:?} are not supported; accepted: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"
            ),
        };
        Ok(Self { n, k, rows })
    }

    /// `out[t * stride + j] = x[t] . w[j]` for `t < rows`, `j < n`.
    pub(crate) fn apply(&self, x: &[f32], rows: usize, out: &mut [f32], stride: usize) {
        assert!(
            rows == 0 || (x.len() >= rows * self.k && out.len() >= (rows - 1) * stride + self.n),
            "quantized matmul shapes"
        );
        self.rows.apply(x, rows, out, stride)
    }
}

impl<T: GgmlType> Typed<T> {
    fn new(n: usize, k: usize, data: &[u8]) -> Result<Self> {
        if !k.is_multiple_of(T::BLCK_SIZE) || !k.is_multiple_of(T::VecDotType::BLCK_SIZE) {
            bail!("rows of {k} values are not whole {:?} blocks", T::DTYPE);
        }
        let count = n * k / T::BLCK_SIZE;
        if data.len() != count * std::mem::size_of::<T>() {
            bail!(
                "{:?} tensor [{n}, {k}] has {} bytes, expected {}",
                T::DTYPE,
                data.len(),
                count * std::mem::size_of::<T>()
            );
        }
        let mut blocks = vec![T::zeros(); count];
        // SAFETY: `T` is one of candle's `repr(C)` block structs of plain
        // integers and halves, and `data` holds exactly `count` of them in
        // GGUF's layout, which is theirs.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                blocks.as_mut_ptr().cast::<u8>(),
                data.len(),
            );
        }
        Ok(Self { n, k, blocks })
    }
}

impl<T: GgmlType> QuantRows for Typed<T> {
    fn apply(&self, x: &[f32], rows: usize, out: &mut [f32], stride: usize) {
        let (n, k) = (self.n, self.k);
        let per_row = k / T::BLCK_SIZE;
        let per_activation = k / T::VecDotType::BLCK_SIZE;
        let mut xq = vec![T::VecDotType::zeros(); rows * per_activation];
        for (x, q) in x.chunks_exact(k).zip(xq.chunks_exact_mut(per_activation)) {
            T::VecDotType::from_float(x, q);
        }
        let row = |j: usize| &self.blocks[j * per_row..(j + 1) * per_row];
        let out = OutPtr(out.as_mut_ptr());
        team::split(n, 4, |columns| {
            let mut j = columns.start;
            while j < columns.end {
                if j + 4 <= columns.end {
                    for (t, q) in xq.chunks_exact(per_activation).enumerate() {
                        let (a, b, c, d) =
                            T::vec_dot_4(k, row(j), row(j + 1), row(j + 2), row(j + 3), q);
                        for (offset, value) in [a, b, c, d].into_iter().enumerate() {
                            // SAFETY: (t, j + offset) is in bounds and ours.
                            unsafe { *out.get().add(t * stride + j + offset) = value };
                        }
                    }
                    j += 4;
                } else {
                    for (t, q) in xq.chunks_exact(per_activation).enumerate() {
                        // SAFETY: as above.
                        unsafe { *out.get().add(t * stride + j) = T::vec_dot(k, row(j), q) };
                    }
                    j += 1;
                }
            }
        });
    }
}

/// Q8_0 blocks repacked into panels (see the module docs): per panel, per
/// block of 32 `k` steps, the 32 columns' scales as f32, then for each
/// step the 32 columns' int8 weights.
#[cfg(target_arch = "x86_64")]
struct Q8Panels {
    n: usize,
    k: usize,
    data: Vec<u8>,
}

/// Bytes of one 32-step block of one panel: scales, then weights.
pub(crate) const Q8_PANEL_BLOCK: usize = PANEL * 4 + PANEL * 32;

#[cfg(target_arch = "x86_64")]
impl Q8Panels {
    /// From GGUF's Q8_0 blocks: per row, `k / 32` blocks of an f16 scale
    /// and 32 int8 values.
    fn new(n: usize, k: usize, data: &[u8]) -> Result<Self> {
        const BLOCK: usize = 34;
        let blocks = k / 32;
        if !k.is_multiple_of(32) || data.len() != n * blocks * BLOCK {
            bail!(
                "Q8_0 tensor [{n}, {k}] has {} bytes, expected {}",
                data.len(),
                n * blocks * BLOCK
            );
        }
        let panels = n.div_ceil(PANEL);
        let mut out = vec![0u8; panels * blocks * Q8_PANEL_BLOCK];
        for j in 0..n {
            let (panel, column) = (j / PANEL, j % PANEL);
            for b in 0..blocks {
                let source = &data[(j * blocks + b) * BLOCK..(j * blocks + b + 1) * BLOCK];
                let scale = half::f16::from_le_bytes([source[0], source[1]]).to_f32();
                let base = (panel * blocks + b) * Q8_PANEL_BLOCK;
                out[base + column * 4..base + column * 4 + 4].copy_from_slice(&scale.to_le_bytes());
                for (i, &q) in source[2..].iter().enumerate() {
                    out[base + PANEL * 4 + i * PANEL + column] = q;
                }
            }
        }
        Ok(Self { n, k, data: out })
    }
}

#[cfg(target_arch = "x86_64")]
impl QuantRows for Q8Panels {
    fn apply(&self, x: &[f32], rows: usize, out: &mut [f32], stride: usize) {
        let layout = Panels {
            bytes: self.data.as_ptr(),
            panel_bytes: self.k / 32 * Q8_PANEL_BLOCK,
            n: self.n,
            k: self.k,
        };
        let out = OutPtr(out.as_mut_ptr());
        team::split(self.n.div_ceil(PANEL), 1, |panels| {
            // SAFETY: `layout` is this matrix; the caller checked the
            // bounds; threads get disjoint panels.
            unsafe {
                run_panels(
                    &super::x86::AVX512_Q8_0,
                    &layout,
                    x,
                    rows,
                    panels,
                    out.get(),
                    stride,
                )
            }
        });
    }
}
