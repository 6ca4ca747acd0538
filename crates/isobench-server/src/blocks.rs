//! The KV block pool: which cache blocks are free and who holds the others.
//!
//! The cache storage itself (per layer, `[num_blocks, block_size, ...]`) is
//! allocated once by the model crate; this module only hands out block ids.
//! A [`BlockPool`] has a free list and a reference count per block; a
//! sequence holds its blocks through a [`SeqBlocks`] guard (its block table)
//! that gives them back in `Drop`, so a sequence that finishes, fails, is
//! preempted or whose client disconnects frees its blocks by being dropped.
//! Each block has a reference count (DESIGN.md's pool): today a block has
//! one holder at most, since sharing blocks between sequences (prefix
//! caching) would need copy-on-write of a shared last block, which the
//! scheduler does not do; a block returns to the free list when its count
//! drops to zero.
//!
//! The pool lives on the engine thread only (`Rc<RefCell<..>>`, no lock).

use std::cell::RefCell;
use std::rc::Rc;

/// The pool could not give out the blocks asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBlocks {
    pub needed: u32,
    pub free: u32,
}

#[derive(Debug)]
struct PoolState {
    /// Free block ids; the next one handed out is at the end.
    free: Vec<u32>,
    /// Holders of each block; 0 exactly when the block is on the free list.
    refcounts: Vec<u32>,
}

/// Shared handle to the pool; clones refer to the same pool.
#[derive(Debug, Clone)]
pub struct BlockPool {
    state: Rc<RefCell<PoolState>>,
    block_size: u32,
}

impl BlockPool {
    /// A pool of `num_blocks` free blocks of `block_size` tokens.
    pub fn new(num_blocks: u32, block_size: u32) -> Self {
        let free = (0..num_blocks).rev().collect();
        Self {
            state: Rc::new(RefCell::new(PoolState {
                free,
                refcounts: vec![0; num_blocks as usize],
            })),
            block_size,
        }
    }

    pub fn num_blocks(&self) -> u32 {
        self.state.borrow().refcounts.len() as u32
    }

    pub fn num_free(&self) -> u32 {
        self.state.borrow().free.len() as u32
    }

    /// Blocks needed to hold `num_tokens` tokens.
    pub fn blocks_for(&self, num_tokens: usize) -> u32 {
        num_tokens.div_ceil(self.block_size as usize) as u32
    }

    /// An empty block table drawing from this pool.
    pub fn empty_table(&self) -> SeqBlocks {
        SeqBlocks {
            pool: self.clone(),
            blocks: Vec::new(),
        }
    }

    /// How many holders `block` has (0 when free).
    #[cfg(test)]
    pub fn refcount(&self, block: u32) -> u32 {
        self.state.borrow().refcounts[block as usize]
    }

    /// The free list, for invariant checks.
    #[cfg(test)]
    pub fn free_blocks(&self) -> Vec<u32> {
        self.state.borrow().free.clone()
    }
}

/// One sequence's block table: the blocks holding its tokens, in order.
/// Dropping it releases every block.
#[derive(Debug)]
pub struct SeqBlocks {
    pool: BlockPool,
    blocks: Vec<u32>,
}

impl SeqBlocks {
    /// Block ids in token order.
    pub fn table(&self) -> &[u32] {
        &self.blocks
    }

    /// Tokens these blocks can hold.
    #[cfg(test)]
    pub fn capacity_tokens(&self) -> usize {
        self.blocks.len() * self.pool.block_size as usize
    }

    /// Blocks still needed to hold `num_tokens` tokens.
    pub fn missing_for(&self, num_tokens: usize) -> u32 {
        self.pool
            .blocks_for(num_tokens)
            .saturating_sub(self.blocks.len() as u32)
    }

    /// Grows the table to hold `num_tokens` tokens: all the missing blocks or
    /// none.
    pub fn grow_to(&mut self, num_tokens: usize) -> Result<(), OutOfBlocks> {
        let needed = self.missing_for(num_tokens);
        if needed == 0 {
            return Ok(());
        }
        let mut state = self.pool.state.borrow_mut();
        let free = state.free.len() as u32;
        if needed > free {
            return Err(OutOfBlocks { needed, free });
        }
        for _ in 0..needed {
            let block = state.free.pop().expect("checked above");
            state.refcounts[block as usize] = 1;
            self.blocks.push(block);
        }
        Ok(())
    }

    /// The cache slot of the token at `position`: `block * block_size + offset`.
    /// The table must already hold that position.
    pub fn slot(&self, position: usize) -> u32 {
        let block_size = self.pool.block_size as usize;
        self.blocks[position / block_size] * block_size as u32 + (position % block_size) as u32
    }

    /// Releases every block; the table is empty afterwards.
    pub fn release(&mut self) {
        let mut state = self.pool.state.borrow_mut();
        for block in self.blocks.drain(..) {
            let count = &mut state.refcounts[block as usize];
            *count -= 1;
            if *count == 0 {
                state.free.push(block);
            }
        }
    }
}

impl Drop for SeqBlocks {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn grow_is_all_or_nothing_and_drop_frees() {
        let pool = BlockPool::new(4, 16);
        let mut a = pool.empty_table();
        a.grow_to(33).unwrap();
        assert_eq!(a.table().len(), 3);
        assert_eq!(a.slot(17), a.table()[1] * 16 + 1);
        let mut b = pool.empty_table();
        assert_eq!(b.grow_to(40), Err(OutOfBlocks { needed: 3, free: 1 }));
        assert!(b.table().is_empty());
        assert_eq!(pool.num_free(), 1);
        drop(a);
        assert_eq!(pool.num_free(), 4);
        b.grow_to(64).unwrap();
        assert_eq!(pool.num_free(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Start a table and grow it to this many tokens.
        Start(usize),
        /// Grow table `i % len` by this many tokens.
        Grow(usize, usize),
        Drop(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1usize..80).prop_map(Op::Start),
            (any::<usize>(), 1usize..40).prop_map(|(i, n)| Op::Grow(i, n)),
            any::<usize>().prop_map(Op::Drop),
        ]
    }

    /// No block is free and held at once, no block is on the free list
    /// twice, every block's count equals its holders, free + used = total.
    fn check_invariants(pool: &BlockPool, tables: &[(SeqBlocks, usize)]) {
        let total = pool.num_blocks() as usize;
        let mut holders = vec![0u32; total];
        for (table, tokens) in tables {
            assert!(table.capacity_tokens() >= *tokens);
            let mut seen = std::collections::HashSet::new();
            for &block in table.table() {
                assert!(seen.insert(block), "block {block} twice in one table");
                holders[block as usize] += 1;
            }
        }
        let free = pool.free_blocks();
        let mut on_free_list = vec![false; total];
        for &block in &free {
            assert!(
                !on_free_list[block as usize],
                "block {block} on the free list twice"
            );
            on_free_list[block as usize] = true;
        }
        for block in 0..total {
            assert_eq!(
                pool.refcount(block as u32),
                holders[block],
                "refcount of block {block}"
            );
            assert_eq!(
                on_free_list[block],
                holders[block] == 0,
                "block {block} free and held"
            );
        }
        let used = holders.iter().filter(|&&h| h > 0).count();
        assert_eq!(free.len() + used, total);
    }

    proptest! {
        #[test]
        fn allocator_invariants_hold(ops in proptest::collection::vec(op(), 1..60)) {
            let pool = BlockPool::new(12, 8);
            let mut tables: Vec<(SeqBlocks, usize)> = Vec::new();
            for op in ops {
                match op {
                    Op::Start(tokens) => {
                        let mut table = pool.empty_table();
                        let free_before = pool.num_free();
                        match table.grow_to(tokens) {
                            Ok(()) => tables.push((table, tokens)),
                            Err(err) => {
                                prop_assert_eq!(err.free, free_before);
                                prop_assert_eq!(pool.num_free(), free_before);
                            }
                        }
                    }
                    Op::Grow(i, extra) if !tables.is_empty() => {
                        let index = i % tables.len();
                        let (table, tokens) = &mut tables[index];
                        if table.grow_to(*tokens + extra).is_ok() {
                            *tokens += extra;
                        }
                    }
                    Op::Drop(i) if !tables.is_empty() => {
                        let index = i % tables.len();
                        tables.swap_remove(index);
                    }
                    _ => {}
                }
                check_invariants(&pool, &tables);
            }
            tables.clear();
            prop_assert_eq!(pool.num_free(), pool.num_blocks());
        }
    }
}
