//! Which CUDA graph a step replays: its rows (sequences) and tokens,
//! padded up to captured sizes.
//!
//! A decode step (one token per sequence) of `n` sequences replays the
//! graph of the smallest row bucket `b >= n`, padded to `b` rows of one
//! token. A step that carries prompt tokens (a prefill chunk, alone or
//! among decoding sequences) has more tokens than rows, and its shapes
//! depend on both: it replays the graph of the smallest token bucket that
//! holds its tokens and the padding rows its row bucket adds. Each padded
//! row brings one token, but the last, which takes every token left over
//! (see [`crate::step::HostStep::padded`]); so a step with padded tokens
//! needs at least one padded row, and a padded shape always keeps more
//! tokens than rows, as the attention kernels' choice of launch needs for
//! such a step. Its row buckets are therefore the decode buckets plus one
//! (`b + 1`): `n <= b` sequences always leave that row, where with `b`
//! rows a step of exactly `b` sequences (every slot of a full server,
//! one of them prefilling) would have to pad to the next bucket, `2b`
//! rows, and `b` more tokens.
//!
//! Graphs pay where a step's host-side launches take longer than its GPU
//! work: a step of a few hundred tokens on a small model. They also pay
//! for steps of a server's full token budget (2,048 on CUDA), whose GPU
//! work outlasts their launches on average: launched eagerly under serving
//! load, where the host also runs the clients and the HTTP server, such
//! steps took at least 10% more GPU time on the 1B shape than step_bench
//! gives the largest of them alone, and replaying them raised continuous
//! batching's output by 4% (docs/performance.md, "Graphs for prompt
//! chunks up to 2,048 tokens, and the logits' cast on a kernel of our
//! own"). Past the largest token bucket a step runs eagerly. The
//! buckets grow by at most half past 64 tokens (and by a quarter past
//! 1,024), so padding adds about half a step's tokens at most.

/// Token counts a step with prompt tokens is captured for by default.
pub const DEFAULT_GRAPH_TOKEN_BUCKETS: [usize; 15] = [
    16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1280, 1536, 1792, 2048,
];

/// The padded size of a captured step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphShape {
    pub rows: usize,
    pub tokens: usize,
}

/// The row and token buckets graphs are captured for, both sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphShapes {
    pub rows: Vec<usize>,
    pub tokens: Vec<usize>,
}

impl GraphShapes {
    /// The row buckets of steps with prompt tokens: each decode bucket
    /// plus the padded row that takes the padded tokens (see the module
    /// docs).
    pub fn prompt_rows(&self) -> impl Iterator<Item = usize> + '_ {
        self.rows.iter().map(|&rows| rows + 1)
    }

    /// Every shape a step can replay: each row bucket's decode shape, and
    /// each pair of a prompt row bucket and a larger token bucket.
    pub fn all(&self) -> Vec<GraphShape> {
        let decode = self
            .rows
            .iter()
            .map(|&rows| GraphShape { rows, tokens: rows });
        let prompt = self.tokens.iter().flat_map(|&tokens| {
            self.prompt_rows()
                .filter(move |&rows| rows < tokens)
                .map(move |rows| GraphShape { rows, tokens })
        });
        decode.chain(prompt).collect()
    }

    /// The shape that a step of `seqs` sequences and `tokens` tokens
    /// replays, or `None` when it runs eagerly: larger than every bucket,
    /// or its last padded row would need more than `max_padded_context`
    /// tokens (what a block table holds).
    pub fn of(&self, seqs: usize, tokens: usize, max_padded_context: usize) -> Option<GraphShape> {
        if tokens == seqs {
            let rows = self.rows.iter().copied().find(|&b| b >= seqs)?;
            return Some(GraphShape { rows, tokens: rows });
        }
        let row_bucket = |at_least: usize| self.prompt_rows().find(|&b| b >= at_least);
        self.tokens
            .iter()
            .copied()
            .filter(|&bucket| bucket >= tokens)
            .find_map(|bucket| {
                let padded_tokens = bucket - tokens;
                let rows = row_bucket(seqs + usize::from(padded_tokens > 0))?;
                let padded_rows = rows - seqs;
                let fits = if padded_rows == 0 {
                    padded_tokens == 0
                } else {
                    padded_tokens >= padded_rows
                        && padded_tokens - (padded_rows - 1) <= max_padded_context
                };
                fits.then_some(GraphShape {
                    rows,
                    tokens: bucket,
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes() -> GraphShapes {
        GraphShapes {
            rows: vec![1, 2, 4, 8],
            tokens: vec![16, 32, 64],
        }
    }

    fn shape(rows: usize, tokens: usize) -> Option<GraphShape> {
        Some(GraphShape { rows, tokens })
    }

    #[test]
    fn a_decode_step_pads_its_rows_alone() {
        assert_eq!(shapes().of(3, 3, 1024), shape(4, 4));
        assert_eq!(shapes().of(8, 8, 1024), shape(8, 8));
        assert_eq!(shapes().of(9, 9, 1024), None);
    }

    #[test]
    fn a_step_with_prompt_tokens_pads_both() {
        // Its row buckets are 2, 3, 5 and 9. Two padded rows take the 6
        // tokens left over.
        assert_eq!(shapes().of(3, 10, 1024), shape(5, 16));
        // Exactly a bucket of each: nothing to pad.
        assert_eq!(shapes().of(3, 16, 1024), shape(3, 16));
        // 16 tokens over 4 rows: a padded row is needed, so 32 tokens.
        assert_eq!(shapes().of(4, 16, 1024), shape(5, 32));
        // 4 rows and 15 tokens: the padded token has the fifth row.
        assert_eq!(shapes().of(4, 15, 1024), shape(5, 16));
        // 6 rows in 9 leave 3 padded rows, each needing a token: 14 real
        // tokens leave only 2 in a bucket of 16.
        assert_eq!(shapes().of(6, 14, 1024), shape(9, 32));
    }

    #[test]
    fn a_full_bucket_of_sequences_pads_one_row_not_a_bucket() {
        // Every slot of the largest decode bucket busy, one of them
        // prefilling: one padded row, not the next bucket's 8 more rows and
        // tokens (and there is none above 8).
        assert_eq!(shapes().of(8, 20, 1024), shape(9, 32));
        assert_eq!(shapes().of(4, 12, 1024), shape(5, 16));
    }

    #[test]
    fn every_shape_is_listed_once_and_is_its_own_shape() {
        let all = shapes().all();
        // 4 decode shapes; 16 tokens over 2 to 9 rows, 32 and 64 likewise.
        assert_eq!(all.len(), 4 + 3 * 4);
        for shape in all {
            assert_eq!(shapes().of(shape.rows, shape.tokens, 1024), Some(shape));
        }
    }

    #[test]
    fn what_no_bucket_holds_runs_eagerly() {
        assert_eq!(shapes().of(3, 65, 1024), None);
        assert_eq!(shapes().of(9, 20, 1024), None, "no row bucket above 9");
        // 2 tokens in 16: the padded row attends over the other 14.
        assert_eq!(shapes().of(1, 2, 13), None);
        assert_eq!(shapes().of(1, 2, 14), shape(2, 16));
        let no_tokens = GraphShapes {
            tokens: vec![],
            ..shapes()
        };
        assert_eq!(no_tokens.of(2, 5, 1024), None);
        assert_eq!(no_tokens.of(2, 2, 1024), shape(2, 2));
    }
}
