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

use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, GgmlType,
};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, bail};

use super::team;

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
        let (n, k) = tensor.shape().dims2()?;
        let data = tensor.data()?;
        macro_rules! typed {
            ($block:ty) => {
                Box::new(Typed::<$block>::new(n, k, &data)?) as Box<dyn QuantRows>
            };
        }
        let rows = match tensor.dtype() {
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

/// The output pointer shared by the team (disjoint columns per thread).
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: threads write disjoint columns.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    fn at(&self, index: usize) -> *mut f32 {
        // SAFETY: the caller checked the bounds (see `QuantMatrix::apply`).
        unsafe { self.0.add(index) }
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
                            unsafe { *out.at(t * stride + j + offset) = value };
                        }
                    }
                    j += 4;
                } else {
                    for (t, q) in xq.chunks_exact(per_activation).enumerate() {
                        // SAFETY: as above.
                        unsafe { *out.at(t * stride + j) = T::vec_dot(k, row(j), q) };
                    }
                    j += 1;
                }
            }
        });
    }
}
