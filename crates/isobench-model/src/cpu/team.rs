//! The threads a CPU step runs on: candle's persistent barrier pool
//! (`candle_core::utils::barrier_pool`, one thread per core, the caller
//! included), the same pool candle's quantized matmuls use, so a GGUF
//! model's quantized projections and this crate's kernels never compete for
//! cores. Its workers spin for a while after each parallel section before
//! they park, so the many short sections of a step (a handful per layer)
//! start without a wake-up; only the first section after an idle pause pays
//! one.

use std::ops::Range;

/// How many threads a parallel section runs on (the caller included).
pub(crate) fn threads() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}

/// Runs `f(part)` on every thread, `part` in `0..threads()`.
pub(crate) fn run(f: impl Fn(usize) + Sync) {
    candle_core::utils::barrier_pool().execute(f)
}

/// Splits `0..n` into one contiguous range per thread, each a multiple of
/// `align` long (but the last), and runs `f` on each non-empty one.
pub(crate) fn split(n: usize, align: usize, f: impl Fn(Range<usize>) + Sync) {
    let parts = threads();
    if parts == 1 || n <= align {
        f(0..n);
        return;
    }
    run(|part| {
        let range = share(n, align, parts, part);
        if !range.is_empty() {
            f(range);
        }
    });
}

/// Part `part` of `parts` of `0..n`, cut at multiples of `align`.
pub(crate) fn share(n: usize, align: usize, parts: usize, part: usize) -> Range<usize> {
    let units = n.div_ceil(align);
    let cut = |p: usize| (units * p / parts * align).min(n);
    cut(part)..cut(part + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_range_once_at_aligned_cuts() {
        for n in [0, 1, 7, 8, 9, 100, 1377] {
            for parts in 1..5 {
                let ranges: Vec<_> = (0..parts).map(|p| share(n, 8, parts, p)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[parts - 1].end, n);
                for pair in ranges.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start);
                    assert!(pair[0].end == n || pair[0].end % 8 == 0);
                }
            }
        }
    }
}
