//! One engine step's input: the new tokens of every scheduled sequence,
//! flattened, with where their keys and values go in the paged cache.

/// One sequence's part of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqStep {
    /// New tokens this sequence brings to the step: a prompt chunk, or 1 when decoding.
    pub num_new_tokens: u32,
    /// Tokens in the cache after this step, the new ones included.
    pub context_len: u32,
    /// Cache block ids holding this sequence's tokens, in order.
    pub block_table: Vec<u32>,
}

/// A step over several sequences. Token-level vectors are flattened in
/// sequence order and have the same length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepBatch {
    pub token_ids: Vec<u32>,
    /// Position of each new token in its sequence.
    pub positions: Vec<u32>,
    /// Cache slot of each new token: `block_id * block_size + offset_in_block`.
    pub slot_mapping: Vec<u32>,
    pub seqs: Vec<SeqStep>,
}
