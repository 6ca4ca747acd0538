//! What the samplers need from a step's logits, brought to the host.
//!
//! The model returns f32 logits `[rows, vocab]` on its device. On the CPU
//! they are read as they are. On a GPU, copying them whole would cost a
//! transfer of `rows x vocab` floats per step (65 MB at batch 128 with a
//! 128k vocabulary) and a host argmax over all of them, which made a
//! batch-128 decode step of a 1B model take 120 ms where the model took a
//! few. So there the greedy choice of every row is taken on the device
//! ([`isobench_model::greedy_tokens`]: ties go to the lowest index), and
//! only the rows that sample at random come to the host, through the
//! engine's reused page-locked [`HostBuffer`] (a pageable copy of 64 such
//! rows took 11.7 ms per step on the H200's host).

use candle_core::Tensor;
use isobench_model::HostBuffer;

/// The step's logits as the samplers read them.
pub(crate) enum StepLogits<'a> {
    /// Every row, `vocab` floats each.
    Host { logits: &'a [f32], vocab: usize },
    /// The argmax of every row, and the full logits of the rows listed in
    /// `random_rows` (in that order).
    Device {
        argmax: Vec<u32>,
        random_rows: Vec<u32>,
        random_logits: &'a [f32],
        vocab: usize,
    },
}

/// How one row is to be sampled.
pub(crate) enum RowLogits<'a> {
    /// The device's greedy choice.
    Chosen(u32),
    /// The row's logits, for the sampler.
    Full(&'a [f32]),
}

impl<'a> StepLogits<'a> {
    /// Reads `logits` [rows, vocab] into `buffer`; `random_rows` are the
    /// rows (ascending) whose sequences sample at random.
    pub(crate) fn read(
        logits: &Tensor,
        random_rows: Vec<u32>,
        buffer: &'a mut HostBuffer,
    ) -> Result<Self, isobench_model::ModelError> {
        let (_, vocab) = logits.dims2()?;
        if logits.device().is_cpu() {
            return Ok(Self::Host {
                logits: buffer.read(logits)?,
                vocab,
            });
        }
        let argmax = isobench_model::greedy_tokens(logits)?;
        let random_logits = if random_rows.is_empty() {
            &[]
        } else {
            let rows = Tensor::new(random_rows.as_slice(), logits.device())?;
            buffer.read(&logits.index_select(&rows, 0)?)?
        };
        Ok(Self::Device {
            argmax,
            random_rows,
            random_logits,
            vocab,
        })
    }

    /// Row `index`: its logits, or the device's greedy choice when the row
    /// was not brought over (a greedy sequence on a GPU).
    pub(crate) fn row(&self, index: usize) -> RowLogits<'_> {
        match self {
            Self::Host { logits, vocab } => {
                RowLogits::Full(&logits[index * vocab..(index + 1) * vocab])
            }
            Self::Device {
                argmax,
                random_rows,
                random_logits,
                vocab,
            } => match random_rows.binary_search(&(index as u32)) {
                Ok(position) => {
                    RowLogits::Full(&random_logits[position * vocab..(position + 1) * vocab])
                }
                Err(_) => RowLogits::Chosen(argmax[index]),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn on_the_cpu_every_row_comes_whole() {
        let logits = Tensor::new(&[[0.0f32, 2.0, 1.0], [3.0, 0.0, 1.0]], &Device::Cpu).unwrap();
        let mut buffer = HostBuffer::default();
        let read = StepLogits::read(&logits, vec![1], &mut buffer).unwrap();
        match read.row(0) {
            RowLogits::Full(row) => assert_eq!(row, &[0.0, 2.0, 1.0]),
            RowLogits::Chosen(_) => panic!("the CPU path keeps every row"),
        }
        match read.row(1) {
            RowLogits::Full(row) => assert_eq!(row, &[3.0, 0.0, 1.0]),
            RowLogits::Chosen(_) => panic!("the CPU path keeps every row"),
        }
    }

    #[test]
    fn device_rows_are_chosen_or_brought_over() {
        // The device layout, built by hand (CI has no GPU): rows 0 and 2
        // greedy, row 1 sampled at random.
        let read = StepLogits::Device {
            argmax: vec![1, 0, 2],
            random_rows: vec![1],
            random_logits: &[3.0, 0.0, 1.0],
            vocab: 3,
        };
        assert!(matches!(read.row(0), RowLogits::Chosen(1)));
        assert!(matches!(read.row(2), RowLogits::Chosen(2)));
        match read.row(1) {
            RowLogits::Full(row) => assert_eq!(row, &[3.0, 0.0, 1.0]),
            RowLogits::Chosen(_) => panic!("a random row needs its logits"),
        }
    }
}
