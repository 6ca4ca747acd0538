//! What the samplers need from a step's logits, brought to the host.
//!
//! The model returns f32 logits `[rows, vocab]` on its device. On the CPU
//! they are read as they are, and each sequence's sampler draws from its
//! row. On a GPU, copying them whole would cost a transfer of
//! `rows x vocab` floats per step (65 MB at batch 128 with a 128k
//! vocabulary) and the host's time over all of them: a batch-128 decode
//! step of a 1B model took 120 ms where the model took a few, and a
//! sampled token about a millisecond of host time a row. So there every
//! token is chosen on the device, and only the tokens come back: the greedy
//! choice of every row ([`isobench_model::greedy_tokens`]: ties go to the
//! lowest index), and for the rows whose sequences sample at random, the
//! token drawn with the sequence's parameters and its next uniform number
//! ([`isobench_model::sample_tokens`], which follows the host sampler's
//! rules: crate::sampler). A step whose rows all sample at random (a
//! sampled workload) skips the argmax and draws from the logits as they
//! are, with no gather of its rows.

use candle_core::Tensor;
use isobench_model::{Draw, HostBuffer};

/// The step's logits as the samplers read them.
pub(crate) enum StepLogits<'a> {
    /// Every row, `vocab` floats each.
    Host { logits: &'a [f32], vocab: usize },
    /// The argmax of every row (none when every row is in
    /// `random_rows`), and the tokens drawn for the rows listed in
    /// `random_rows` (in that order).
    Device {
        argmax: Vec<u32>,
        random_rows: Vec<u32>,
        drawn: Vec<u32>,
    },
}

/// How one row is to be sampled.
pub(crate) enum RowLogits<'a> {
    /// The token the device chose.
    Chosen(u32),
    /// The row's logits, for the sampler.
    Full(&'a [f32]),
}

/// The rows of a step that sample at random (ascending), and on a GPU
/// their draws (one per row, the sampler's RNG advanced by it).
pub(crate) struct RandomRows {
    pub rows: Vec<u32>,
    pub draws: Vec<Draw>,
}

impl<'a> StepLogits<'a> {
    /// Reads `logits` [rows, vocab] into `buffer` on the CPU; on a GPU,
    /// takes every row's token there.
    pub(crate) fn read(
        logits: &Tensor,
        random: RandomRows,
        buffer: &'a mut HostBuffer,
    ) -> Result<Self, isobench_model::ModelError> {
        let (rows, vocab) = logits.dims2()?;
        if logits.device().is_cpu() {
            return Ok(Self::Host {
                logits: buffer.read(logits)?,
                vocab,
            });
        }
        // `random.rows` ascend: as many as the rows are every row, in order,
        // and then no row reads an argmax nor needs gathering.
        let all_random = random.rows.len() == rows;
        let argmax = if all_random {
            Vec::new()
        } else {
            isobench_model::greedy_tokens(logits)?
        };
        let drawn = if random.rows.is_empty() {
            Vec::new()
        } else if all_random {
            isobench_model::sample_tokens(logits, &random.draws)?
        } else {
            let rows = Tensor::new(random.rows.as_slice(), logits.device())?;
            isobench_model::sample_tokens(&logits.index_select(&rows, 0)?, &random.draws)?
        };
        Ok(Self::Device {
            argmax,
            random_rows: random.rows,
            drawn,
        })
    }

    /// Row `index`: its logits, or the token the device chose for it.
    pub(crate) fn row(&self, index: usize) -> RowLogits<'_> {
        match self {
            Self::Host { logits, vocab } => {
                RowLogits::Full(&logits[index * vocab..(index + 1) * vocab])
            }
            Self::Device {
                argmax,
                random_rows,
                drawn,
            } => match random_rows.binary_search(&(index as u32)) {
                Ok(position) => RowLogits::Chosen(drawn[position]),
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
        let random = RandomRows {
            rows: vec![1],
            draws: Vec::new(),
        };
        let read = StepLogits::read(&logits, random, &mut buffer).unwrap();
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
    fn device_rows_take_their_argmax_or_their_draw() {
        // The device layout, built by hand (CI has no GPU): rows 0 and 2
        // greedy, row 1 sampled at random.
        let read = StepLogits::Device {
            argmax: vec![1, 0, 2],
            random_rows: vec![1],
            drawn: vec![7],
        };
        assert!(matches!(read.row(0), RowLogits::Chosen(1)));
        assert!(matches!(read.row(1), RowLogits::Chosen(7)));
        assert!(matches!(read.row(2), RowLogits::Chosen(2)));
    }
}
