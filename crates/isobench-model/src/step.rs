//! A step's input as tensors: [`StepBatch`] checked against the model and
//! the cache, then laid out the way the attention kernels read it.
//!
//! For a step with `T` new tokens over `B` sequences:
//! `input_ids [T]`, `positions [T]`, `slot_mapping [T]`,
//! `block_tables [B, W]` (each row padded with block 0 to the cache's
//! [`crate::KvCache::max_blocks_per_seq`] `W`), `context_lens [B]`,
//! `query_starts [B + 1]` (where each sequence's new tokens start in the
//! flattened token list) and `last_token_rows [B]`. All are u32. A decode
//! step of batch `B` always has `T = B`, so every shape depends on `B`
//! alone: nothing the kernels read changes shape between steps, which is
//! what capturing decode steps into CUDA graphs needs.
//!
//! On the host a step's block tables are only as wide as its longest
//! table (`C` columns, [`HostStep::table_cols`]): `W` follows the model's
//! context length (8,192 blocks for a 131,072-token model), and a step's
//! sequences use a few of them. Only those `C` columns travel to the
//! device; the kernels read no entry past a sequence's context.

use candle_core::{Device, Tensor};

use crate::paged_attention::PADDING_SLOT;
use crate::{ModelError, StepBatch};

/// What a step is checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepLimits {
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    pub table_width: usize,
}

pub(crate) struct StepTensors {
    pub input_ids: Tensor,
    pub positions: Tensor,
    pub slot_mapping: Tensor,
    pub block_tables: Tensor,
    pub context_lens: Tensor,
    pub query_starts: Tensor,
    pub last_token_rows: Tensor,
}

impl StepTensors {
    pub(crate) fn new(
        batch: &StepBatch,
        limits: StepLimits,
        device: &Device,
    ) -> Result<Self, ModelError> {
        validate(batch, limits)?;
        Self::upload(
            HostStep::new(batch, batch.seqs.len()),
            limits.table_width,
            device,
        )
    }

    /// The tensors of a step laid out on the host, its block tables padded
    /// with zeros on `device` to `table_width` columns.
    pub(crate) fn upload(
        host: HostStep,
        table_width: usize,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let (tokens, rows, cols) = (
            host.input_ids.len(),
            host.context_lens.len(),
            host.table_cols,
        );
        let tables = Tensor::from_vec(host.block_tables, (rows, cols), device)?;
        Ok(Self {
            input_ids: Tensor::from_vec(host.input_ids, tokens, device)?,
            positions: Tensor::from_vec(host.positions, tokens, device)?,
            slot_mapping: Tensor::from_vec(host.slot_mapping, tokens, device)?,
            block_tables: tables.pad_with_zeros(1, 0, table_width.saturating_sub(cols))?,
            context_lens: Tensor::from_vec(host.context_lens, rows, device)?,
            query_starts: Tensor::from_vec(host.query_starts, rows + 1, device)?,
            last_token_rows: Tensor::from_vec(host.last_token_rows, rows, device)?,
        })
    }
}

/// A checked step laid out on the host, the same way [`StepTensors`] holds
/// it, optionally padded with rows that do nothing useful: a padded row is
/// one token (id 0, position 0) written to [`PADDING_SLOT`] (nowhere), with
/// context length 1 and a block table of zeros, so attention reads block 0
/// and produces finite values that nobody looks at. CUDA-graph buckets pad
/// a decode batch up to their size this way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostStep {
    pub input_ids: Vec<u32>,
    pub positions: Vec<u32>,
    pub slot_mapping: Vec<u32>,
    /// [rows, table_cols], row-major.
    pub block_tables: Vec<u32>,
    /// The longest block table of the step (at least 1): the tensors'
    /// `W` columns past it are never read.
    pub table_cols: usize,
    pub context_lens: Vec<u32>,
    pub query_starts: Vec<u32>,
    pub last_token_rows: Vec<u32>,
}

impl HostStep {
    /// `batch` (already validated) padded to `rows` sequences (at least
    /// its own number) of one token each: the padding of a decode step's
    /// graph. (A padded row's one token reads one block, whatever its size.)
    pub(crate) fn new(batch: &StepBatch, rows: usize) -> Self {
        let padding = rows.saturating_sub(batch.seqs.len());
        Self::padded(batch, rows, batch.token_ids.len() + padding, 1)
    }

    /// `batch` (already validated) padded to `rows` sequences and `tokens`
    /// tokens, in a cache of `block_size`-token blocks. Every padded row
    /// brings one token, but the last, which takes the tokens left over: it
    /// has them all as context (its tokens attend causally over slots of
    /// block 0: the tables are wide enough for it, its row all zeros, and
    /// its tokens must fit a row of the device's tables) and writes none
    /// of them. Needs `tokens - batch tokens >= rows - batch rows`, and at
    /// least one padded row when there are padded tokens
    /// ([`crate::graph_shapes::GraphShapes`] chooses such shapes).
    pub(crate) fn padded(batch: &StepBatch, rows: usize, tokens: usize, block_size: usize) -> Self {
        let padded_rows = rows.saturating_sub(batch.seqs.len());
        let rows = batch.seqs.len() + padded_rows;
        let padded_tokens = tokens.saturating_sub(batch.token_ids.len());
        debug_assert!(padded_tokens >= padded_rows && (padded_rows > 0 || padded_tokens == 0));
        let tokens = batch.token_ids.len() + padded_tokens;
        // The last padded row's context: the tokens the others leave.
        let padded_context = (padded_tokens + 1).saturating_sub(padded_rows);
        let table_cols = batch
            .seqs
            .iter()
            .map(|seq| seq.block_table.len())
            .max()
            .unwrap_or(0)
            .max(padded_context.div_ceil(block_size.max(1)))
            .max(1);
        let mut host = Self {
            input_ids: Vec::with_capacity(tokens),
            positions: Vec::with_capacity(tokens),
            slot_mapping: Vec::with_capacity(tokens),
            block_tables: vec![0u32; rows * table_cols],
            table_cols,
            context_lens: Vec::with_capacity(rows),
            query_starts: Vec::with_capacity(rows + 1),
            last_token_rows: Vec::with_capacity(rows),
        };
        host.input_ids.extend_from_slice(&batch.token_ids);
        host.positions.extend_from_slice(&batch.positions);
        host.slot_mapping.extend_from_slice(&batch.slot_mapping);
        host.input_ids.resize(tokens, 0);
        host.positions.resize(tokens, 0);
        host.slot_mapping.resize(tokens, PADDING_SLOT);
        let mut start = 0u32;
        host.query_starts.push(start);
        for (seq, row) in batch
            .seqs
            .iter()
            .zip(host.block_tables.chunks_exact_mut(table_cols))
        {
            row[..seq.block_table.len()].copy_from_slice(&seq.block_table);
            host.context_lens.push(seq.context_len);
            start += seq.num_new_tokens;
            host.query_starts.push(start);
            host.last_token_rows.push(start - 1);
        }
        for row in 0..padded_rows {
            let new = if row + 1 == padded_rows {
                padded_tokens - row
            } else {
                1
            } as u32;
            host.context_lens.push(new);
            start += new;
            host.query_starts.push(start);
            host.last_token_rows.push(start - 1);
        }
        host
    }

    /// Every field but the block tables, in the order of [`StepTensors`]'
    /// fields.
    #[cfg(feature = "cuda")]
    pub(crate) fn fields(&self) -> [&[u32]; 6] {
        [
            &self.input_ids,
            &self.positions,
            &self.slot_mapping,
            &self.context_lens,
            &self.query_starts,
            &self.last_token_rows,
        ]
    }
}

/// Checks that the batch is self-consistent and fits the model and cache:
/// a scheduler bug shows up as an error here rather than as wrong attention.
pub(crate) fn validate(batch: &StepBatch, limits: StepLimits) -> Result<(), ModelError> {
    let invalid = |message: String| Err(ModelError::InvalidBatch(message));
    if batch.seqs.is_empty() {
        return invalid("no sequences".into());
    }
    let tokens = batch.token_ids.len();
    let declared: u64 = batch.seqs.iter().map(|s| u64::from(s.num_new_tokens)).sum();
    if declared != tokens as u64
        || batch.positions.len() != tokens
        || batch.slot_mapping.len() != tokens
    {
        return invalid(format!(
            "token_ids ({tokens}), positions ({}), slot_mapping ({}) and the sequences' num_new_tokens (sum {declared}) must all agree",
            batch.positions.len(),
            batch.slot_mapping.len()
        ));
    }
    let mut first_token = 0usize;
    for (index, seq) in batch.seqs.iter().enumerate() {
        let new = seq.num_new_tokens as usize;
        let context = seq.context_len as usize;
        if new == 0 || new > context {
            return invalid(format!(
                "sequence {index}: num_new_tokens ({new}) must be between 1 and context_len ({context})"
            ));
        }
        let needed_blocks = context.div_ceil(limits.block_size);
        if seq.block_table.len() < needed_blocks || seq.block_table.len() > limits.table_width {
            return invalid(format!(
                "sequence {index}: block table has {} blocks; context_len {context} needs {needed_blocks} (at most {} fit a row)",
                seq.block_table.len(),
                limits.table_width
            ));
        }
        if let Some(block) = seq
            .block_table
            .iter()
            .find(|&&b| b as usize >= limits.num_blocks)
        {
            return invalid(format!(
                "sequence {index}: block {block} is outside the cache ({} blocks)",
                limits.num_blocks
            ));
        }
        for offset in 0..new {
            let token = first_token + offset;
            let context_index = context - new + offset;
            let expected_slot = seq.block_table[context_index / limits.block_size] as usize
                * limits.block_size
                + context_index % limits.block_size;
            if batch.slot_mapping[token] as usize != expected_slot {
                return invalid(format!(
                    "token {token} (sequence {index}, context index {context_index}): slot {} but its block table puts it in slot {expected_slot}",
                    batch.slot_mapping[token]
                ));
            }
            if batch.token_ids[token] as usize >= limits.vocab_size {
                return invalid(format!(
                    "token {token}: id {} is outside the vocabulary ({} ids)",
                    batch.token_ids[token], limits.vocab_size
                ));
            }
            if batch.positions[token] as usize >= limits.max_position_embeddings {
                return invalid(format!(
                    "token {token}: position {} is beyond max_position_embeddings ({})",
                    batch.positions[token], limits.max_position_embeddings
                ));
            }
        }
        first_token += new;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeqStep;

    const LIMITS: StepLimits = StepLimits {
        vocab_size: 100,
        max_position_embeddings: 64,
        num_blocks: 8,
        block_size: 4,
        table_width: 16,
    };

    /// Sequence A decodes its 6th token (blocks 3, 1); B prefills 3 tokens (block 5).
    fn mixed_batch() -> StepBatch {
        StepBatch {
            token_ids: vec![7, 1, 2, 3],
            positions: vec![5, 0, 1, 2],
            slot_mapping: vec![5, 20, 21, 22],
            seqs: vec![
                SeqStep {
                    num_new_tokens: 1,
                    context_len: 6,
                    block_table: vec![3, 1],
                },
                SeqStep {
                    num_new_tokens: 3,
                    context_len: 3,
                    block_table: vec![5],
                },
            ],
        }
    }

    #[test]
    fn builds_padded_tables_and_offsets() {
        let step = StepTensors::new(&mixed_batch(), LIMITS, &Device::Cpu).unwrap();
        assert_eq!(step.block_tables.dims(), &[2, 16]);
        let tables = step.block_tables.to_vec2::<u32>().unwrap();
        assert_eq!(&tables[0][..3], &[3, 1, 0]);
        assert_eq!(step.query_starts.to_vec1::<u32>().unwrap(), vec![0, 1, 4]);
        assert_eq!(step.last_token_rows.to_vec1::<u32>().unwrap(), vec![0, 3]);
        assert_eq!(step.context_lens.to_vec1::<u32>().unwrap(), vec![6, 3]);
    }

    #[test]
    fn pads_rows_that_write_nowhere() {
        let mut batch = mixed_batch();
        batch.seqs[1] = SeqStep {
            num_new_tokens: 1,
            context_len: 3,
            block_table: vec![5],
        };
        batch.token_ids.truncate(2);
        batch.positions = vec![5, 2];
        batch.slot_mapping = vec![5, 22];
        validate(&batch, LIMITS).unwrap();
        let host = HostStep::new(&batch, 4);
        assert_eq!(host.input_ids, [7, 1, 0, 0]);
        assert_eq!(host.positions, [5, 2, 0, 0]);
        assert_eq!(host.slot_mapping, [5, 22, PADDING_SLOT, PADDING_SLOT]);
        assert_eq!(host.context_lens, [6, 3, 1, 1]);
        assert_eq!(host.query_starts, [0, 1, 2, 3, 4]);
        assert_eq!(host.last_token_rows, [0, 1, 2, 3]);
        // As wide as the longest table; padded rows read block 0.
        assert_eq!(host.table_cols, 2);
        assert_eq!(host.block_tables, [3, 1, 5, 0, 0, 0, 0, 0]);
        // Without padding it is exactly the batch.
        assert_eq!(HostStep::new(&batch, 2).slot_mapping, [5, 22]);
        // Padded to 4 rows and 12 tokens: the last padded row has 9 tokens
        // of context, 3 blocks of 4, all of them block 0.
        let host = HostStep::padded(&batch, 4, 12, 4);
        assert_eq!(host.context_lens, [6, 3, 1, 9]);
        assert_eq!(host.table_cols, 3);
        assert_eq!(host.block_tables, [3, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn rejects_inconsistent_batches() {
        type Breakage = Box<dyn Fn(&mut StepBatch)>;
        let cases: Vec<(&str, Breakage)> = vec![
            (
                "must all agree",
                Box::new(|b| b.positions.pop().map(drop).unwrap()),
            ),
            ("slot 6 but", Box::new(|b| b.slot_mapping[0] = 6)),
            (
                "outside the cache",
                Box::new(|b| b.seqs[1].block_table[0] = 8),
            ),
            ("needs 2", Box::new(|b| b.seqs[0].block_table.truncate(1))),
            ("outside the vocabulary", Box::new(|b| b.token_ids[2] = 100)),
            ("max_position_embeddings", Box::new(|b| b.positions[0] = 64)),
            (
                "between 1 and context_len",
                Box::new(|b| b.seqs[0].context_len = 0),
            ),
        ];
        for (expected, break_it) in cases {
            let mut batch = mixed_batch();
            break_it(&mut batch);
            let err = validate(&batch, LIMITS).unwrap_err();
            assert_eq!(err.kind(), "invalid_batch");
            assert!(err.to_string().contains(expected), "{expected}: {err}");
        }
    }
}
