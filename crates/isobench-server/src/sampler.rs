//! Token sampling, one [`Sampler`] per sequence.
//!
//! Temperature 0 is greedy (argmax, ties to the lowest id). Otherwise the
//! logits are divided by the temperature, cut to the `top_k` most likely
//! tokens and then to the smallest set whose probability reaches `top_p`
//! (heaviest first, equal weights in id order), and one token is drawn
//! with the sequence's own RNG, seeded from the request's `seed` when
//! given. Because every sequence draws from its own RNG, the same seed
//! gives the same tokens whatever else is in the batch.
//!
//! The cut sorts no vocabulary (sorting 128k tokens per row per step made
//! sampled chat on a GPU bound by the host): the softmax weights go into a
//! histogram of their leading bits, the walk down the buckets' counts or
//! mass finds the bucket where the kept set ends, and only that bucket's
//! tokens are ordered. The draw then walks the vocabulary in id order
//! over the tokens that rank at or before that boundary. Its buffers are
//! kept per thread between tokens: no allocation per token.
//!
//! On a GPU the device draws by the same rules
//! ([`isobench_model::sample_tokens`], with the uniform number from
//! [`Sampler::draw`]), so a seed gives the same tokens there, except where
//! two sums of weights differ by less than their rounding (the device sums
//! in fixed point, the host in f64).

use std::cell::RefCell;

use isobench_common::math::exp;
use isobench_model::{Draw, argmax};
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
}

thread_local! {
    /// The truncated draw's buffers, one set per thread rather than per
    /// sequence: a step's draws run on the threads of a pool, and one set
    /// for a 128k vocabulary (half a megabyte) stays in its thread's cache,
    /// where one per sequence would be read back from memory every step.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(rand::random);
        Self {
            params,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Whether this sampler takes the argmax (which a GPU can take for it).
    pub fn is_greedy(&self) -> bool {
        self.params.is_greedy()
    }

    /// The next token's draw for a device that samples
    /// ([`isobench_model::sample_tokens`]): the parameters and the next
    /// uniform number of this sequence's RNG, which [`Sampler::sample`]
    /// would have drawn. For a sampler that is not greedy.
    pub fn draw(&mut self) -> Draw {
        Draw {
            temperature: self.params.temperature,
            top_p: self.params.top_p,
            top_k: self.params.top_k,
            uniform: self.rng.random::<f32>(),
        }
    }

    /// Picks the next token from one sequence's logits over the vocabulary.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let keeps_all =
            self.params.top_k.is_none_or(|k| k >= logits.len()) && self.params.top_p >= 1.0;
        let uniform = self.rng.random::<f32>();
        if keeps_all {
            return sample_full(logits, self.params.temperature, uniform);
        }
        SCRATCH.with_borrow_mut(|scratch| scratch.draw(&self.params, logits, uniform))
    }
}

/// Softmax sampling over the whole vocabulary, without a buffer; `uniform`
/// is the draw in [0, 1).
fn sample_full(logits: &[f32], temperature: f32, uniform: f32) -> u32 {
    let inv_t = inverse(temperature);
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f32 = logits.iter().map(|&l| exp((l - max) * inv_t)).sum();
    let mut target = uniform * total;
    for (id, &logit) in (0_u32..).zip(logits) {
        target -= exp((logit - max) * inv_t);
        if target <= 0.0 {
            return id;
        }
    }
    argmax(logits)
}

/// 1 / T, at most the largest f32, as the device's draw takes it
/// ([`isobench_model::Draw::inverse_temperature`]).
fn inverse(temperature: f32) -> f32 {
    (1.0 / temperature).min(f32::MAX)
}

/// A token's place in the heaviest-first order: the larger weight first,
/// equal weights by the lower id.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rank {
    weight: f32,
    id: u32,
}

impl Rank {
    /// After every token: a cut here keeps them all.
    const LAST: Rank = Rank {
        weight: -1.0,
        id: u32::MAX,
    };

    fn is_before(self, other: Rank) -> bool {
        self.weight > other.weight || (self.weight == other.weight && self.id < other.id)
    }

    /// Whether a cut here keeps `token` (it ranks at or before the cut),
    /// without branches.
    fn keeps(self, token: Rank) -> bool {
        (token.weight > self.weight) | ((token.weight == self.weight) & (token.id <= self.id))
    }

    fn order(a: &Rank, b: &Rank) -> std::cmp::Ordering {
        b.weight.total_cmp(&a.weight).then(a.id.cmp(&b.id))
    }
}

/// What a cut counts as it walks down the order: tokens (top_k) or
/// probability mass (top_p).
#[derive(Debug, Clone, Copy)]
enum Measure {
    Count,
    Mass,
}

/// Bits of an f32 weight below the histogram's key: 8 exponent bits and 4
/// of the mantissa make the key, so a bucket spans 1/16 of an octave.
const BUCKET_SHIFT: u32 = 19;
/// Buckets of weights in [0, 1]; weight 1 (the largest) is in the last.
const BUCKETS: usize = (1.0f32.to_bits() >> BUCKET_SHIFT) as usize + 1;

fn bucket(weight: f32) -> usize {
    ((weight.to_bits() >> BUCKET_SHIFT) as usize).min(BUCKETS - 1)
}

/// The truncated draw's buffers.
#[derive(Debug, Default)]
struct Scratch {
    /// Every token's softmax weight, in [0, 1] (NaN read as 0).
    weights: Vec<f32>,
    /// Per bucket: how many weights fall in it, and their sum.
    counts: Vec<u32>,
    mass: Vec<f64>,
    /// One bucket's tokens, to order.
    members: Vec<Rank>,
}

impl Scratch {
    /// Draws among the top-k / top-p candidates of `logits`; `uniform` is
    /// the draw in [0, 1).
    fn draw(&mut self, params: &SamplingParams, logits: &[f32], uniform: f32) -> u32 {
        let (cut, kept_mass) = self.cut(params, logits);
        let mut target = f64::from(uniform) * kept_mass;
        let mut last_kept = None;
        // Whether a token is kept is a coin toss to the branch predictor:
        // it only selects what is subtracted.
        for (id, &weight) in (0_u32..).zip(&self.weights) {
            let kept = cut.keeps(Rank { weight, id });
            target -= f64::from(if kept { weight } else { 0.0 });
            last_kept = if kept { Some(id) } else { last_kept };
            if target <= 0.0 && kept {
                return id;
            }
        }
        last_kept.unwrap_or_else(|| argmax(logits))
    }

    /// Weighs `logits` and finds the last token kept by top_k and top_p,
    /// and the weight of all tokens kept.
    fn cut(&mut self, params: &SamplingParams, logits: &[f32]) -> (Rank, f64) {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        self.weigh(logits, max, inverse(params.temperature));
        let mut cut = (Rank::LAST, self.mass.iter().sum());
        if let Some(k) = params.top_k.filter(|&k| k < logits.len()) {
            cut = self.boundary(k as f64, Measure::Count);
        }
        if params.top_p < 1.0 {
            let by_mass = self.boundary(f64::from(params.top_p) * cut.1, Measure::Mass);
            if by_mass.0.is_before(cut.0) {
                cut = by_mass;
            }
        }
        cut
    }

    /// Stores the softmax weights `e^((logit - max) / T)` and their
    /// histogram.
    fn weigh(&mut self, logits: &[f32], max: f32, inv_t: f32) {
        self.weights.clear();
        self.weights.resize(logits.len(), 0.0);
        // A loop of arithmetic only, so that it vectorises.
        for (weight, &logit) in self.weights.iter_mut().zip(logits) {
            let w = exp((logit - max) * inv_t);
            *weight = if w >= 0.0 { w.min(1.0) } else { 0.0 };
        }
        self.counts.clear();
        self.counts.resize(BUCKETS, 0);
        self.mass.clear();
        self.mass.resize(BUCKETS, 0.0);
        for &weight in &self.weights {
            let index = bucket(weight);
            self.counts[index] += 1;
            self.mass[index] += f64::from(weight);
        }
    }

    fn ranks(&self) -> impl Iterator<Item = Rank> + '_ {
        (0_u32..)
            .zip(&self.weights)
            .map(|(id, &weight)| Rank { weight, id })
    }

    /// The token at which the heaviest-first prefix's measure first reaches
    /// `target`, and the weight of that prefix ([`Rank::LAST`] and all the
    /// weight when nothing reaches it).
    fn boundary(&mut self, target: f64, measure: Measure) -> (Rank, f64) {
        let (mut reached, mut mass) = (0.0f64, 0.0f64);
        for index in (0..BUCKETS).rev() {
            let in_bucket = match measure {
                Measure::Count => f64::from(self.counts[index]),
                Measure::Mass => self.mass[index],
            };
            if in_bucket == 0.0 || reached + in_bucket < target {
                reached += in_bucket;
                mass += self.mass[index];
                continue;
            }
            let mut members = std::mem::take(&mut self.members);
            members.clear();
            members.extend(self.ranks().filter(|rank| bucket(rank.weight) == index));
            members.sort_unstable_by(Rank::order);
            let mut found = Rank::LAST;
            for member in &members {
                found = *member;
                mass += f64::from(member.weight);
                reached += match measure {
                    Measure::Count => 1.0,
                    Measure::Mass => f64::from(member.weight),
                };
                if reached >= target {
                    break;
                }
            }
            self.members = members;
            return (found, mass);
        }
        (Rank::LAST, mass)
    }
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

    /// The kept set by sorting the whole vocabulary, as the cut is defined.
    fn kept_by_sorting(
        logits: &[f32],
        temperature: f32,
        top_p: f32,
        top_k: Option<usize>,
    ) -> Vec<u32> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut ranked: Vec<Rank> = (0_u32..)
            .zip(logits)
            .map(|(id, &l)| Rank {
                weight: ((l - max) / temperature).exp(),
                id,
            })
            .collect();
        ranked.sort_by(Rank::order);
        ranked.truncate(top_k.unwrap_or(usize::MAX));
        let total: f64 = ranked.iter().map(|r| f64::from(r.weight)).sum();
        if top_p >= 1.0 {
            // Not cut by mass at all (a prefix sum can reach the total before
            // the smallest weights are added).
            let mut ids: Vec<u32> = ranked.iter().map(|r| r.id).collect();
            ids.sort_unstable();
            return ids;
        }
        let mut mass = 0.0;
        let kept = ranked
            .iter()
            .position(|r| {
                mass += f64::from(r.weight);
                mass >= f64::from(top_p) * total
            })
            .map_or(ranked.len(), |last| last + 1);
        let mut ids: Vec<u32> = ranked[..kept].iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn the_histogram_cut_keeps_what_a_full_sort_keeps() {
        let mut rng = StdRng::seed_from_u64(5);
        for case in 0..300 {
            let vocab = [1, 2, 7, 100, 4096, 32_000][case % 6];
            // Every third case draws from 5 values: many equal weights.
            let logits: Vec<f32> = (0..vocab)
                .map(|_| match case % 3 {
                    0 => f32::from(rng.random_range(0_u8..5)),
                    1 => rng.random_range(-30.0..30.0),
                    _ => rng.random_range(-2.0..2.0),
                })
                .collect();
            let temperature = [0.3, 0.7, 1.0, 2.5][case % 4];
            let top_p = [1.0, 0.95, 0.5, 0.1, 0.999][case % 5];
            let top_k = [None, Some(1), Some(3), Some(50), Some(vocab + 1)][(case / 5) % 5];
            let mut scratch = Scratch::default();
            let (cut, mass) = scratch.cut(&params(temperature, top_p, top_k, 1), &logits);
            let kept: Vec<u32> = scratch
                .ranks()
                .filter(|rank| cut.keeps(*rank))
                .map(|rank| rank.id)
                .collect();
            let expected = kept_by_sorting(&logits, temperature, top_p, top_k);
            assert_eq!(
                kept, expected,
                "case {case}: vocab {vocab}, T {temperature}, top_p {top_p}, top_k {top_k:?}"
            );
            let expected_mass: f64 = scratch
                .ranks()
                .filter(|r| expected.binary_search(&r.id).is_ok())
                .map(|r| f64::from(r.weight))
                .sum();
            assert!(
                (mass - expected_mass).abs() <= 1e-9 * expected_mass.max(1.0),
                "case {case}"
            );
        }
    }

    #[test]
    fn draws_follow_the_kept_tokens_probabilities() {
        // Weights e^0, e^-1, e^-2 (and a negligible rest) at T = 1 with
        // top_p 0.99: 66.5%, 24.5%, 9.0% of the kept mass.
        let logits = [0.0, -1.0, -2.0, -40.0, -40.0];
        let mut sampler = Sampler::new(params(1.0, 0.99, None, 9));
        let mut counts = [0u32; 5];
        for _ in 0..20_000 {
            counts[sampler.sample(&logits) as usize] += 1;
        }
        let share = |id: usize| f64::from(counts[id]) / 20_000.0;
        assert_eq!(counts[3] + counts[4], 0, "{counts:?}");
        for (id, expected) in [(0, 0.665), (1, 0.245), (2, 0.090)] {
            assert!(
                (share(id) - expected).abs() < 0.015,
                "token {id}: {counts:?}"
            );
        }
    }

    #[test]
    fn the_device_rules_draw_what_the_host_draws() {
        // isobench_model::sample_tokens' host path is the GPU kernel's
        // reference: from the same seed, Sampler::draw and it give what
        // Sampler::sample gives.
        let mut rng = StdRng::seed_from_u64(21);
        for case in 0..200 {
            let vocab = [5, 300, 4096][case % 3];
            let logits: Vec<f32> = (0..vocab)
                .map(|_| match case % 4 {
                    0 => rng.random_range(-20.0..20.0),
                    1 => f32::from(rng.random_range(0_u8..4)),
                    _ => rng.random_range(-2.0..2.0),
                })
                .collect();
            let p = params(
                [0.3, 0.7, 1.0, 2.5, 1e-45][case % 5],
                [1.0, 0.95, 0.5, 0.1][(case / 4) % 4],
                [None, Some(2), Some(40)][(case / 16) % 3],
                case as u64,
            );
            let on_host = Sampler::new(p).sample(&logits);
            let draw = Sampler::new(p).draw();
            let tensor =
                candle_core::Tensor::from_slice(&logits, (1, vocab), &candle_core::Device::Cpu)
                    .unwrap();
            let by_device_rules = isobench_model::sample_tokens(&tensor, &[draw]).unwrap();
            assert_eq!(by_device_rules, vec![on_host], "case {case}: {p:?}");
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
