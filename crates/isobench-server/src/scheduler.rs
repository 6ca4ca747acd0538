//! The scheduler's state: the waiting queue, the running sequences and the
//! KV block pool, and how one engine step is planned from them.
//!
//! [`State`] knows nothing about the model, the sampler or HTTP: each
//! sequence carries an opaque payload `P` (the engine's per-request data;
//! `()` in the unit tests here). One step goes:
//!
//! 1. [`State::schedule`]: grow the running sequences' block tables to hold
//!    their next tokens, preempting the newest sequence when the pool runs
//!    out (its blocks are freed and it goes back to the front of the queue
//!    with its prompt and output so far, to be recomputed); ask the policy
//!    which waiting requests to admit; give every decoding sequence one
//!    token and the prefilling ones chunks within the step's token budget;
//!    and fill the reused [`StepBatch`].
//! 2. The engine runs the model on [`State::batch`], then
//!    [`State::finish_step`] marks the step's tokens computed.
//! 3. For each row of [`State::rows`] that `samples`, the engine samples a
//!    token and [`State::append_token`]s it.
//! 4. [`State::retain`] drops finished or cancelled sequences; dropping a
//!    sequence frees its blocks.

use std::collections::VecDeque;
use std::time::Instant;

use isobench_model::{SeqStep, StepBatch};

use crate::blocks::{BlockPool, SeqBlocks};
use crate::policy::{BatchingPolicy, QueueSnapshot, WaitingEntry};

/// One request's tokens and where its keys and values live.
#[derive(Debug)]
pub struct Sequence<P> {
    /// When the server received the request.
    pub arrived: Instant,
    /// Prompt followed by the tokens generated so far.
    pub tokens: Vec<u32>,
    pub num_prompt: usize,
    /// Leading tokens whose keys and values are in the cache.
    pub num_computed: usize,
    /// The block table while running; `None` while waiting.
    blocks: Option<SeqBlocks>,
    pub payload: P,
}

impl<P> Sequence<P> {
    pub fn new(arrived: Instant, prompt: Vec<u32>, payload: P) -> Self {
        Self {
            arrived,
            num_prompt: prompt.len(),
            tokens: prompt,
            num_computed: 0,
            blocks: None,
            payload,
        }
    }

    /// Tokens generated so far.
    pub fn output(&self) -> &[u32] {
        &self.tokens[self.num_prompt..]
    }

    fn pending(&self) -> usize {
        self.tokens.len() - self.num_computed
    }
}

/// One sequence's part of the planned step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Index into [`State::running`].
    pub running_index: usize,
    pub num_new_tokens: usize,
    /// The chunk reaches the sequence's last token, so the step's logits
    /// for this row are sampled.
    pub samples: bool,
}

/// What [`State::schedule`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// A step is planned in [`State::batch`] and [`State::rows`].
    Step(StepSummary),
    /// Nothing to run now; `wake_at` is when the policy wants to be asked
    /// again without new arrivals.
    Idle { wake_at: Option<Instant> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepSummary {
    pub num_seqs: usize,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    /// Sequences that joined the running set in this step; they are the
    /// last `admitted` entries of [`State::running`].
    pub admitted: usize,
    pub preempted: usize,
}

pub struct State<P> {
    pool: BlockPool,
    policy: Box<dyn BatchingPolicy>,
    waiting: VecDeque<Sequence<P>>,
    running: Vec<Sequence<P>>,
    batch: StepBatch,
    rows: Vec<Row>,
    snapshot: Vec<WaitingEntry>,
}

impl<P> State<P> {
    pub fn new(pool: BlockPool, policy: Box<dyn BatchingPolicy>) -> Self {
        Self {
            pool,
            policy,
            waiting: VecDeque::new(),
            running: Vec::new(),
            batch: StepBatch::default(),
            rows: Vec::new(),
            snapshot: Vec::new(),
        }
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    pub fn push_waiting(&mut self, seq: Sequence<P>) {
        self.waiting.push_back(seq);
    }

    pub fn waiting(&self) -> &VecDeque<Sequence<P>> {
        &self.waiting
    }

    pub fn running(&self) -> &[Sequence<P>] {
        &self.running
    }

    /// Every sequence, running and then waiting.
    pub fn sequences_mut(&mut self) -> impl Iterator<Item = &mut Sequence<P>> {
        self.running.iter_mut().chain(self.waiting.iter_mut())
    }

    pub fn running_mut(&mut self) -> &mut [Sequence<P>] {
        &mut self.running
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// The planned step's model input.
    pub fn batch(&self) -> &StepBatch {
        &self.batch
    }

    /// The planned step's rows, in [`State::batch`] order.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Keeps only the sequences (waiting or running) whose payload passes
    /// `keep`; the others are dropped, freeing their blocks.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Sequence<P>) -> bool) {
        self.waiting.retain_mut(&mut keep);
        self.running.retain_mut(keep);
    }

    /// Plans the next step (see the module docs).
    pub fn schedule(&mut self, now: Instant) -> Schedule {
        let preempted = self.reserve_running_blocks();
        let admitted = self.admit(now);
        let mut summary = self.plan_rows();
        if self.rows.is_empty() {
            let wake_at = admitted.1;
            return Schedule::Idle { wake_at };
        }
        self.fill_batch();
        summary.admitted = admitted.0;
        summary.preempted = preempted;
        Schedule::Step(summary)
    }

    /// Marks the planned step's tokens as computed.
    pub fn finish_step(&mut self) {
        for row in &self.rows {
            self.running[row.running_index].num_computed += row.num_new_tokens;
        }
    }

    /// Appends a sampled token to a running sequence (its keys and values
    /// are computed in the next step).
    pub fn append_token(&mut self, running_index: usize, token: u32) {
        self.running[running_index].tokens.push(token);
    }

    /// Grows every running sequence's table to hold all its tokens,
    /// preempting the newest sequences while the pool is short. Returns how
    /// many were preempted.
    fn reserve_running_blocks(&mut self) -> usize {
        let mut preempted = 0;
        let mut index = 0;
        while index < self.running.len() {
            let seq = &mut self.running[index];
            let blocks = seq
                .blocks
                .as_mut()
                .expect("running sequences hold a block table");
            if blocks.grow_to(seq.tokens.len()).is_ok() {
                index += 1;
                continue;
            }
            let newest = self.running.pop().expect("index is in bounds");
            self.preempt(newest);
            preempted += 1;
        }
        preempted
    }

    /// Frees a sequence's blocks and puts it at the front of the queue; it
    /// recomputes its prompt and output when admitted again.
    fn preempt(&mut self, mut seq: Sequence<P>) {
        seq.blocks = None;
        seq.num_computed = 0;
        self.waiting.push_front(seq);
    }

    /// Moves the requests the policy admits to the running set. Returns how
    /// many, and the policy's wake-up time.
    fn admit(&mut self, now: Instant) -> (usize, Option<Instant>) {
        if self.waiting.is_empty() {
            return (0, None);
        }
        self.snapshot.clear();
        for seq in &self.waiting {
            self.snapshot.push(WaitingEntry {
                arrived: seq.arrived,
                blocks_needed: self.pool.blocks_for(seq.tokens.len()),
            });
        }
        let admission = self.policy.admit(&QueueSnapshot {
            now,
            waiting: &self.snapshot,
            running: self.running.len(),
            free_blocks: self.pool.num_free(),
            total_blocks: self.pool.num_blocks(),
        });
        let mut admitted = 0;
        while admitted < admission.count {
            let Some(mut seq) = self.waiting.pop_front() else {
                break;
            };
            let mut blocks = self.pool.empty_table();
            if blocks.grow_to(seq.tokens.len()).is_err() {
                self.waiting.push_front(seq);
                break;
            }
            seq.blocks = Some(blocks);
            self.running.push(seq);
            admitted += 1;
        }
        (admitted, admission.wake_at)
    }

    /// Decides each running sequence's new tokens: one for every decoding
    /// sequence first, then prefill chunks in admission order, within the
    /// policy's token budget.
    fn plan_rows(&mut self) -> StepSummary {
        self.rows.clear();
        let mut budget = self.policy.step_token_budget();
        let mut summary = StepSummary::default();
        for (running_index, seq) in self.running.iter().enumerate() {
            if budget == 0 {
                break;
            }
            if seq.pending() == 1 {
                self.rows.push(Row {
                    running_index,
                    num_new_tokens: 1,
                    samples: true,
                });
                budget -= 1;
                summary.decode_tokens += 1;
            }
        }
        for (running_index, seq) in self.running.iter().enumerate() {
            if budget == 0 {
                break;
            }
            let pending = seq.pending();
            if pending > 1 {
                let chunk = pending.min(budget);
                self.rows.push(Row {
                    running_index,
                    num_new_tokens: chunk,
                    samples: chunk == pending,
                });
                budget -= chunk;
                summary.prefill_tokens += chunk;
            }
        }
        summary.num_seqs = self.rows.len();
        summary
    }

    /// Writes the planned rows into the reused model input.
    fn fill_batch(&mut self) {
        let batch = &mut self.batch;
        batch.token_ids.clear();
        batch.positions.clear();
        batch.slot_mapping.clear();
        batch.seqs.truncate(self.rows.len());
        for (k, row) in self.rows.iter().enumerate() {
            let seq = &self.running[row.running_index];
            let blocks = seq
                .blocks
                .as_ref()
                .expect("running sequences hold a block table");
            let start = seq.num_computed;
            let end = start + row.num_new_tokens;
            batch.token_ids.extend_from_slice(&seq.tokens[start..end]);
            for position in start..end {
                batch.positions.push(position as u32);
                batch.slot_mapping.push(blocks.slot(position));
            }
            if k == batch.seqs.len() {
                batch.seqs.push(SeqStep {
                    num_new_tokens: 0,
                    context_len: 0,
                    block_table: Vec::new(),
                });
            }
            let step = &mut batch.seqs[k];
            step.num_new_tokens = row.num_new_tokens as u32;
            step.context_len = end as u32;
            step.block_table.clear();
            step.block_table.extend_from_slice(blocks.table());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{ContinuousBatching, StaticBatching};

    fn continuous(max_num_seqs: u32, budget: u32) -> Box<dyn BatchingPolicy> {
        Box::new(ContinuousBatching {
            max_num_seqs,
            max_num_batched_tokens: budget,
        })
    }

    fn static_batching(max_batch_size: u32, budget: u32) -> Box<dyn BatchingPolicy> {
        Box::new(StaticBatching {
            max_batch_size,
            max_num_batched_tokens: budget,
        })
    }

    fn seq(id: u32, prompt_len: u32) -> Sequence<u32> {
        Sequence::new(
            Instant::now(),
            (0..prompt_len).map(|t| t + 1000 * id).collect(),
            id,
        )
    }

    /// Runs one step with a fake model that samples `next` for every row.
    fn step(state: &mut State<u32>, next: u32) -> Schedule {
        let schedule = state.schedule(Instant::now());
        if let Schedule::Step(_) = schedule {
            state.finish_step();
            let rows = state.rows().to_vec();
            for row in rows.iter().filter(|r| r.samples) {
                state.append_token(row.running_index, next);
            }
        }
        schedule
    }

    fn summary(schedule: Schedule) -> StepSummary {
        match schedule {
            Schedule::Step(summary) => summary,
            Schedule::Idle { .. } => panic!("expected a step"),
        }
    }

    #[test]
    fn long_prompt_is_prefilled_in_chunks_beside_decodes() {
        let mut state = State::new(BlockPool::new(64, 4), continuous(8, 8));
        state.push_waiting(seq(0, 3));
        let first = summary(step(&mut state, 7));
        assert_eq!(
            (first.prefill_tokens, first.decode_tokens, first.admitted),
            (3, 0, 1)
        );
        state.push_waiting(seq(1, 20));
        // Decode of seq 0 (1 token) + a 7-token chunk of seq 1, three times.
        for expected_prefill in [7, 7, 6] {
            let s = summary(step(&mut state, 7));
            assert_eq!((s.decode_tokens, s.prefill_tokens), (1, expected_prefill));
        }
        assert_eq!(state.running()[1].num_computed, 20);
        assert_eq!(state.running()[1].output(), &[7]);
        assert_eq!(state.running()[0].output().len(), 4);
    }

    /// A static batch whose prompts exceed the step's token budget is
    /// prefilled over several steps; a sequence whose prompt is done
    /// decodes beside the rest's chunks, and no request joins meanwhile.
    #[test]
    fn static_batch_prefill_is_chunked_by_the_token_budget() {
        let mut state = State::new(BlockPool::new(64, 4), static_batching(3, 8));
        state.push_waiting(seq(0, 5));
        state.push_waiting(seq(1, 6));
        state.push_waiting(seq(2, 4));
        let first = summary(step(&mut state, 7));
        assert_eq!(
            (first.admitted, first.decode_tokens, first.prefill_tokens),
            (3, 0, 8)
        );
        state.push_waiting(seq(3, 2));
        // Seq 0's 5 tokens and 3 of seq 1's 6 are in: seq 0 decodes beside
        // the last 3 of seq 1 and seq 2's 4.
        let second = summary(step(&mut state, 7));
        assert_eq!(
            (second.admitted, second.decode_tokens, second.prefill_tokens),
            (0, 1, 7)
        );
        let third = summary(step(&mut state, 7));
        assert_eq!(
            (third.admitted, third.decode_tokens, third.prefill_tokens),
            (0, 3, 0)
        );
        for (running, output_len) in state.running().iter().zip([3, 2, 2]) {
            assert_eq!(running.num_computed, running.tokens.len() - 1);
            assert_eq!(running.output().len(), output_len);
        }
        assert_eq!(state.waiting().len(), 1);
    }

    #[test]
    fn batch_carries_positions_slots_and_block_tables() {
        let mut state = State::new(BlockPool::new(8, 4), continuous(8, 64));
        state.push_waiting(seq(0, 6));
        state.push_waiting(seq(1, 2));
        summary(state.schedule(Instant::now()));
        let batch = state.batch().clone();
        assert_eq!(batch.token_ids.len(), 8);
        assert_eq!(batch.positions, vec![0, 1, 2, 3, 4, 5, 0, 1]);
        let table0 = &batch.seqs[0].block_table;
        assert_eq!(table0.len(), 2);
        assert_eq!(batch.slot_mapping[5], table0[1] * 4 + 1);
        assert_eq!(batch.seqs[1].context_len, 2);
        assert_eq!(batch.slot_mapping[6], batch.seqs[1].block_table[0] * 4);
        state.finish_step();
        state.append_token(0, 9);
        state.append_token(1, 9);
        summary(state.schedule(Instant::now()));
        assert_eq!(state.batch().positions, vec![6, 2]);
        assert_eq!(state.batch().seqs[0].context_len, 7);
    }

    #[test]
    fn pool_exhaustion_preempts_the_newest_and_recomputes_it_later() {
        // 4 blocks of 2 tokens; two 3-token prompts take 2 blocks each.
        let mut state = State::new(BlockPool::new(4, 2), static_batching(2, 64));
        state.push_waiting(seq(0, 3));
        state.push_waiting(seq(1, 3));
        step(&mut state, 5); // prefill both; each now has 4 tokens in 2 blocks
        step(&mut state, 6); // decode both; 5 tokens need a 3rd block each
        assert_eq!(state.pool().num_free(), 0);
        let s = summary(step(&mut state, 7));
        assert_eq!(s.preempted, 1);
        assert_eq!(state.running().len(), 1);
        let preempted = &state.waiting()[0];
        assert_eq!((preempted.payload, preempted.num_computed), (1, 0));
        assert_eq!(preempted.output(), &[5, 6]);
        // Finish seq 0: the preempted one is readmitted and recomputes all 5 tokens.
        state.retain(|s| s.payload != 0);
        assert_eq!(state.pool().num_free(), 4);
        let s = summary(step(&mut state, 8));
        assert_eq!((s.admitted, s.prefill_tokens), (1, 5));
        assert_eq!(state.running()[0].output(), &[5, 6, 8]);
        state.retain(|_| false);
        assert_eq!(state.pool().num_free(), 4);
    }

    #[test]
    fn static_batch_runs_to_completion_before_the_next_is_admitted() {
        let mut state = State::new(BlockPool::new(16, 4), static_batching(2, 64));
        for id in 0..3 {
            state.push_waiting(seq(id, 2));
        }
        assert_eq!(summary(step(&mut state, 1)).admitted, 2);
        assert_eq!(summary(step(&mut state, 1)).admitted, 0);
        assert_eq!(state.waiting().len(), 1);
        state.retain(|s| s.payload == 2);
        assert_eq!(summary(step(&mut state, 1)).admitted, 1);
    }

    #[test]
    fn idle_state_reports_the_policy_timer() {
        let policy = Box::new(crate::policy::DynamicBatching {
            max_batch_size: 4,
            max_wait: Duration::from_secs(60),
            max_num_batched_tokens: 64,
        });
        let mut state: State<u32> = State::new(BlockPool::new(16, 4), policy);
        assert_eq!(
            state.schedule(Instant::now()),
            Schedule::Idle { wake_at: None }
        );
        state.push_waiting(seq(0, 2));
        match state.schedule(Instant::now()) {
            Schedule::Idle { wake_at: Some(at) } => assert!(at > Instant::now()),
            other => panic!("expected a timer, got {other:?}"),
        }
    }

    #[test]
    fn cancelled_sequences_free_their_blocks() {
        let mut state = State::new(BlockPool::new(8, 4), continuous(8, 64));
        state.push_waiting(seq(0, 9));
        state.push_waiting(seq(1, 2));
        step(&mut state, 1);
        assert_eq!(state.pool().num_free(), 4);
        state.retain(|s| s.payload != 0);
        assert_eq!(state.pool().num_free(), 7);
        assert!(!state.is_idle());
        state.retain(|_| false);
        assert!(state.is_idle());
        assert_eq!(state.pool().num_free(), 8);
    }
}
