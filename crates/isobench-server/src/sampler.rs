//! Token sampling, one [`Sampler`] per sequence.
//!
//! Temperature 0 is greedy (argmax, ties to the lowest id). Otherwise the
//! logits are divided by the temperature, cut to the `top_k` most likely
//! tokens and then to the smallest set whose probability reaches `top_p`,
//! and one token is drawn with the sequence's own RNG, seeded from the
//! request's `seed` when given. Because every sequence draws from its own
//! RNG, the same seed gives the same tokens whatever else is in the batch.
//! The sampler keeps its scratch buffer between tokens: no allocation per
//! token.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Validated sampling parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// In (0, 1]; 1 keeps every token.
    pub top_p: f32,
    /// `None` keeps every token.
    pub top_k: Option<usize>,
    /// `None` seeds from the operating system.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    /// OpenAI's defaults: temperature 1, top_p 1.
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            seed: None,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == Some(1)
    }
}

#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// (scaled logit, token id) candidates, reused between tokens.
    scratch: Vec<(f32, u32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(rand::random);
        Self {
            params,
            rng: StdRng::seed_from_u64(seed),
            scratch: Vec::new(),
        }
    }

    /// Whether this sampler takes the argmax (which a GPU can take for it).
    pub fn is_greedy(&self) -> bool {
        self.params.is_greedy()
    }

    /// Picks the next token from one sequence's logits over the vocabulary.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let keeps_all =
            self.params.top_k.is_none_or(|k| k >= logits.len()) && self.params.top_p >= 1.0;
        if keeps_all {
            return self.sample_full(logits);
        }
        self.sample_truncated(logits)
    }

    /// Softmax sampling over the whole vocabulary, without a buffer.
    fn sample_full(&mut self, logits: &[f32]) -> u32 {
        let inv_t = 1.0 / self.params.temperature;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f32 = logits.iter().map(|&l| ((l - max) * inv_t).exp()).sum();
        let mut target = self.rng.random::<f32>() * total;
        for (id, &logit) in logits.iter().enumerate() {
            target -= ((logit - max) * inv_t).exp();
            if target <= 0.0 {
                return id as u32;
            }
        }
        argmax(logits)
    }

    /// Sampling among the top-k / top-p candidates.
    fn sample_truncated(&mut self, logits: &[f32]) -> u32 {
        let inv_t = 1.0 / self.params.temperature;
        self.scratch.clear();
        self.scratch.extend(
            logits
                .iter()
                .enumerate()
                .map(|(id, &l)| (l * inv_t, id as u32)),
        );
        let by_logit_desc =
            |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if let Some(k) = self.params.top_k.filter(|&k| k < self.scratch.len()) {
            self.scratch.select_nth_unstable_by(k - 1, by_logit_desc);
            self.scratch.truncate(k);
        }
        self.scratch.sort_unstable_by(by_logit_desc);
        let max = self.scratch[0].0;
        let mut total = 0.0f32;
        for candidate in &mut self.scratch {
            candidate.0 = (candidate.0 - max).exp();
            total += candidate.0;
        }
        // Smallest prefix whose probability reaches top_p (at least one token).
        let threshold = self.params.top_p * total;
        let mut kept = 0;
        let mut kept_mass = 0.0f32;
        for candidate in &self.scratch {
            kept += 1;
            kept_mass += candidate.0;
            if kept_mass >= threshold {
                break;
            }
        }
        let mut target = self.rng.random::<f32>() * kept_mass;
        for &(weight, id) in &self.scratch[..kept] {
            target -= weight;
            if target <= 0.0 {
                return id;
            }
        }
        self.scratch[kept - 1].1
    }
}

/// Index of the largest logit (the first of equals); NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_value = f32::NEG_INFINITY;
    for (id, &value) in logits.iter().enumerate() {
        if value > best_value {
            best = id;
            best_value = value;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_p: f32, top_k: Option<usize>, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: Some(seed),
        }
    }

    const LOGITS: [f32; 6] = [1.0, 3.0, 2.5, -1.0, 3.0, 0.0];

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut sampler = Sampler::new(params(0.0, 1.0, None, 1));
        assert_eq!(sampler.sample(&LOGITS), 1);
        assert_eq!(argmax(&[f32::NAN, 2.0, 1.0]), 1);
        let mut top1 = Sampler::new(params(5.0, 1.0, Some(1), 1));
        assert_eq!(top1.sample(&LOGITS), 1);
    }

    #[test]
    fn same_seed_same_tokens() {
        for (top_p, top_k) in [(1.0, None), (0.9, None), (1.0, Some(3)), (0.8, Some(4))] {
            let draw = |seed| {
                let mut sampler = Sampler::new(params(1.0, top_p, top_k, seed));
                (0..50).map(|_| sampler.sample(&LOGITS)).collect::<Vec<_>>()
            };
            assert_eq!(draw(7), draw(7));
            assert_ne!(draw(7), draw(8), "top_p {top_p} top_k {top_k:?}");
        }
    }

    #[test]
    fn top_k_and_top_p_restrict_the_candidates() {
        let mut top2 = Sampler::new(params(1.0, 1.0, Some(2), 3));
        for _ in 0..200 {
            assert!(matches!(top2.sample(&LOGITS), 1 | 4));
        }
        // Token 1 alone holds 36% of the mass, with token 4 71%: top_p 0.5 keeps those two.
        let mut nucleus = Sampler::new(params(1.0, 0.5, None, 3));
        for _ in 0..200 {
            assert!(matches!(nucleus.sample(&LOGITS), 1 | 4));
        }
    }

    #[test]
    fn high_temperature_reaches_every_token() {
        let mut sampler = Sampler::new(params(100.0, 1.0, None, 11));
        let mut seen = [false; 6];
        for _ in 0..500 {
            seen[sampler.sample(&LOGITS) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "{seen:?}");
    }
}
