//! The greedy token of a row of logits: the index of the row's largest
//! value, the lowest index on ties (-0 equals +0), NaN below every number
//! (a row of NaN only gives 0). [`argmax`] takes it on the host (the
//! server's sampler uses it), [`greedy_tokens`] for each row of a step's
//! logits on their device.
//!
//! On a GPU, [`greedy_tokens`] is one kernel of this crate
//! (kernels/argmax.cu, which says how) and a copy of 8 bytes a row to the host; candle's argmax,
//! which the server used before, reads a row with one block (93 us a row
//! of the 128k vocabulary on an H200). Elsewhere the rows are read on the
//! host.

use candle_core::{DType, Tensor};

use crate::ModelError;

/// The greedy token of each row of `logits` [rows, vocab].
pub fn greedy_tokens(logits: &Tensor) -> Result<Vec<u32>, ModelError> {
    let (_, vocab) = logits.dims2()?;
    if vocab == 0 || u32::try_from(vocab).is_err() {
        return Err(candle_core::Error::Msg(format!(
            "greedy tokens of logits with {vocab} columns; accepted: 1 to {} columns",
            u32::MAX
        ))
        .into());
    }
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(device) = logits.device() {
        return Ok(cuda::greedy_tokens(device, logits)?);
    }
    let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    Ok(rows.iter().map(|row| argmax(row)).collect())
}

/// The greedy token of one row of logits on the host.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (index, &value) in row.iter().enumerate() {
        if !value.is_nan() && best.is_none_or(|(_, best_value)| value > best_value) {
            best = Some((index, value));
        }
    }
    best.map_or(0, |(index, _)| index as u32)
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::{CudaDevice, WrapErr};
    use candle_core::{DType, Result, Storage, Tensor, bail};

    use crate::kernels::{Source, kernel};

    /// Threads per block (`THREADS` in kernels/argmax.cu).
    const THREADS: u32 = 256;
    /// Values of a row per block (`PER_BLOCK` in kernels/argmax.cu).
    const PER_BLOCK: usize = 4096;

    pub(super) fn greedy_tokens(device: &CudaDevice, logits: &Tensor) -> Result<Vec<u32>> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (rows, vocab) = logits.dims2()?;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let (Ok(rows_arg), Ok(vocab_arg)) = (u16::try_from(rows), i32::try_from(vocab)) else {
            bail!("argmax: {rows} rows of {vocab} logits exceed a launch (at most 65,535 rows)");
        };
        let (storage, layout) = logits.storage_and_layout();
        let Storage::Cuda(storage) = &*storage else {
            bail!("argmax: the logits are not on the GPU")
        };
        let values = storage
            .as_cuda_slice::<f32>()?
            .slice(layout.start_offset()..);
        let argmax = kernel(device, Source::Argmax, "argmax_f32")?;
        let mut keys = argmax.stream.alloc_zeros::<u64>(rows).w()?;
        let config = LaunchConfig {
            grid_dim: (vocab.div_ceil(PER_BLOCK) as u32, u32::from(rows_arg), 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = argmax.builder();
        launch.arg(&values).arg(&mut keys).arg(&vocab_arg);
        // SAFETY: `values` holds rows x vocab f32 (contiguous, from its
        // offset), `keys` rows zeroed u64s; the kernel reads and writes
        // nothing else.
        unsafe { launch.launch(config) }.w()?;
        let keys = argmax.stream.clone_dtoh(&keys).w()?;
        // The low word holds u32 max - index.
        Ok(keys.into_iter().map(|key| u32::MAX - key as u32).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn tokens(rows: &[&[f32]]) -> Vec<u32> {
        let width = rows[0].len();
        let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let logits = Tensor::from_vec(flat, (rows.len(), width), &Device::Cpu).unwrap();
        greedy_tokens(&logits).unwrap()
    }

    #[test]
    fn the_largest_value_wins_and_ties_go_to_the_lowest_index() {
        assert_eq!(
            tokens(&[
                &[0.5, 2.0, -1.0, 2.0],
                &[-3.0, -2.0, -2.5, -7.0],
                &[f32::NEG_INFINITY, -0.0, 0.0, -1.0],
                &[f32::NAN, f32::MAX, f32::INFINITY, f32::NAN],
                &[f32::NAN, f32::NAN, f32::NAN, f32::NAN],
            ]),
            vec![1, 1, 1, 2, 0]
        );
    }

    #[test]
    fn a_row_on_the_host_takes_the_first_maximum_and_never_nan() {
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(argmax(&[0.0, -0.0, 0.0]), 0);
        assert_eq!(argmax(&[f32::NAN]), 0);
    }

    #[test]
    fn logits_without_columns_are_an_error() {
        let logits = Tensor::zeros((2, 0), DType::F32, &Device::Cpu).unwrap();
        let err = greedy_tokens(&logits).unwrap_err().to_string();
        assert!(err.contains("0 columns"), "{err}");
    }
}
