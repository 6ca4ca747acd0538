//! Synthetic prompts of a target length in tokens.
//!
//! A prompt is a sequence of common English words separated by single
//! spaces, drawn at random (seeded) from a pool, so prompts of different
//! requests share no prefix beyond chance and a server's prefix cache
//! cannot flatter it.
//!
//! With a tokenizer the count is exact: the pool is built once per plan from
//! the words (`words.txt`) that the tokenizer encodes as one token after a
//! space, and the words that are one token at the start of a text; when fewer
//! than [`MIN_POOL`] qualify (small or non-English vocabularies), alphabetic
//! tokens of the vocabulary itself are added. A prompt of `n` words is then
//! encoded once to check it; if the count differs (merges across a word
//! boundary, a first word that splits), words are dropped or appended until
//! it matches, which takes one more encoding in practice. The reported
//! length is always the tokenizer's count of the text sent.
//!
//! Without a tokenizer the prompt is `n` words from the same list: very
//! common words, most of which are a single token after a space in large
//! English BPE vocabularies; the count is then approximate.

use std::sync::{Arc, LazyLock};

use rand::Rng;
use rand::seq::IndexedRandom;
use tokenizers::Tokenizer;

use crate::tokens::TokenCounter;

/// The candidate words, most common first.
static WORDS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| include_str!("words.txt").split_whitespace().collect());

/// Below this many single-token words, vocabulary tokens are added to the pool.
const MIN_POOL: usize = 64;

/// How many vocabulary tokens are tried at most when the word list falls short.
const VOCABULARY_CANDIDATES: usize = 4096;

/// Attempts to correct a prompt's length before settling for the closest.
const MAX_ROUNDS: usize = 16;

/// Makes prompts of a target token count.
#[derive(Debug, Clone)]
pub(crate) enum PromptSynth {
    Exact(Arc<ExactSynth>),
    Approximate,
}

/// The tokenizer and its pools of single-token words.
pub(crate) struct ExactSynth {
    tokenizer: Arc<Tokenizer>,
    /// Words that are one token at the start of a text.
    start_words: Vec<String>,
    /// Words that are one token after a space.
    words: Vec<String>,
}

impl std::fmt::Debug for ExactSynth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactSynth")
            .field("start_words", &self.start_words.len())
            .field("words", &self.words.len())
            .finish_non_exhaustive()
    }
}

impl PromptSynth {
    /// Builds the pools for `counter`'s tokenizer. Fails (with the reason)
    /// when not a single word encodes to one token.
    pub(crate) fn new(counter: &TokenCounter) -> Result<Self, String> {
        match counter {
            TokenCounter::Approximate => Ok(PromptSynth::Approximate),
            TokenCounter::Exact(tokenizer) => {
                ExactSynth::new(tokenizer.clone()).map(|synth| PromptSynth::Exact(Arc::new(synth)))
            }
        }
    }

    /// A prompt of (with a tokenizer, exactly) `target` tokens, and its count.
    pub(crate) fn prompt<R: Rng + ?Sized>(&self, target: u32, rng: &mut R) -> (String, u32) {
        match self {
            PromptSynth::Approximate => {
                let words = (0..target).map(|_| *WORDS.choose(rng).unwrap_or(&"the"));
                (words.collect::<Vec<_>>().join(" "), target)
            }
            PromptSynth::Exact(synth) => synth.prompt(target, rng),
        }
    }
}

impl ExactSynth {
    fn new(tokenizer: Arc<Tokenizer>) -> Result<Self, String> {
        let count = |text: &str| tokenizer.encode_fast(text, false).ok().map(|e| e.len());
        let single_token_words = |candidates: &[String]| {
            let start_words: Vec<String> = candidates
                .iter()
                .filter(|word| count(word) == Some(1))
                .cloned()
                .collect();
            let reference = start_words.first().map_or("the", String::as_str);
            let base = count(reference).unwrap_or(0);
            let words: Vec<String> = candidates
                .iter()
                .filter(|word| count(&format!("{reference} {word}")) == Some(base + 1))
                .cloned()
                .collect();
            (start_words, words)
        };
        let mut candidates: Vec<String> = WORDS.iter().map(|word| word.to_string()).collect();
        let (mut start_words, mut words) = single_token_words(&candidates);
        if words.len() < MIN_POOL {
            candidates.extend(vocabulary_words(&tokenizer, &candidates));
            (start_words, words) = single_token_words(&candidates);
        }
        if words.is_empty() {
            return Err(
                "no English word or alphabetic vocabulary token encodes to a single \
                        token after a space, so prompts of an exact length cannot be built"
                    .to_string(),
            );
        }
        Ok(ExactSynth {
            tokenizer,
            start_words,
            words,
        })
    }

    fn count(&self, text: &str) -> Option<u32> {
        let encoding = self.tokenizer.encode_fast(text, false).ok()?;
        u32::try_from(encoding.len()).ok()
    }

    fn pick<'a, R: Rng + ?Sized>(&'a self, pool: &'a [String], rng: &mut R) -> &'a str {
        pool.choose(rng)
            .or_else(|| self.words.first())
            .map_or("", String::as_str)
    }

    fn prompt<R: Rng + ?Sized>(&self, target: u32, rng: &mut R) -> (String, u32) {
        let start_pool = if self.start_words.is_empty() {
            &self.words
        } else {
            &self.start_words
        };
        let target_words = usize::try_from(target).unwrap_or(usize::MAX);
        let mut chosen: Vec<&str> = Vec::with_capacity(target_words.saturating_add(4));
        chosen.push(self.pick(start_pool, rng));
        while chosen.len() < target_words {
            chosen.push(self.pick(&self.words, rng));
        }
        let mut closest: Option<(String, u32)> = None;
        for _ in 0..MAX_ROUNDS {
            let text = chosen.join(" ");
            let Some(count) = self.count(&text) else {
                break;
            };
            if count == target {
                return (text, count);
            }
            let excess = count.saturating_sub(target) as usize;
            let missing = target.saturating_sub(count) as usize;
            if closest
                .as_ref()
                .is_none_or(|(_, best)| best.abs_diff(target) > count.abs_diff(target))
            {
                closest = Some((text, count));
            }
            if excess >= chosen.len() {
                // Only the first word is too long: draw another one.
                chosen.truncate(1);
                chosen[0] = self.pick(start_pool, rng);
            } else if excess > 0 {
                chosen.truncate(chosen.len() - excess);
            } else {
                for _ in 0..missing {
                    chosen.push(self.pick(&self.words, rng));
                }
            }
        }
        closest.unwrap_or_else(|| {
            let text = chosen.join(" ");
            (text, target)
        })
    }
}

/// Alphabetic tokens of the vocabulary (as they decode, without their
/// leading space), in id order, that are not already `known`.
fn vocabulary_words(tokenizer: &Tokenizer, known: &[String]) -> Vec<String> {
    let mut vocabulary: Vec<(String, u32)> = tokenizer.get_vocab(false).into_iter().collect();
    vocabulary.sort_unstable_by_key(|&(_, id)| id);
    let mut found = Vec::new();
    for (_, id) in vocabulary.into_iter().take(VOCABULARY_CANDIDATES) {
        let Ok(text) = tokenizer.decode(&[id], true) else {
            continue;
        };
        let word = text.trim();
        let alphabetic = word.len() >= 2 && word.chars().all(|c| c.is_ascii_alphabetic());
        if alphabetic && !known.iter().any(|k| k == word) && !found.iter().any(|f| f == word) {
            found.push(word.to_string());
        }
    }
    found
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashSet;
    use std::str::FromStr;

    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use tokenizers::models::TrainerWrapper;
    use tokenizers::models::bpe::{BPE, BpeTrainer};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{DecoderWrapper, ModelWrapper, PreTokenizerWrapper};

    use super::*;

    /// A byte-level BPE (GPT-2/Llama-3 style) trained on English-like text
    /// with a small vocabulary, so many words split into several tokens.
    pub(crate) fn trained_bpe(vocab_size: usize) -> Arc<Tokenizer> {
        let folder = tempfile::tempdir().expect("temporary folder");
        let corpus = folder.path().join("corpus.txt");
        let text: String = WORDS
            .iter()
            .enumerate()
            .map(|(i, w)| format!("{w} {} ", w.repeat(1 + i % 2)))
            .collect();
        std::fs::write(&corpus, text.repeat(3)).expect("corpus written");
        let mut tokenizer = Tokenizer::new(ModelWrapper::from(BPE::default()));
        tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::from(ByteLevel::default())));
        tokenizer.with_decoder(Some(DecoderWrapper::from(ByteLevel::default())));
        let mut trainer = TrainerWrapper::from(
            BpeTrainer::builder()
                .vocab_size(vocab_size)
                .show_progress(false)
                .initial_alphabet(ByteLevel::alphabet().into_iter().collect::<HashSet<char>>())
                .build(),
        );
        tokenizer
            .train_from_files(&mut trainer, vec![corpus.display().to_string()])
            .expect("BPE trains");
        Arc::new(tokenizer)
    }

    /// A whitespace-split word-level tokenizer over exactly `words`.
    fn word_level(words: &[&str]) -> Arc<Tokenizer> {
        let vocab: serde_json::Map<String, serde_json::Value> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.to_string(), i.into()))
            .collect();
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": null,
            "pre_tokenizer": { "type": "Whitespace" },
            "post_processor": null,
            "decoder": null,
            "model": { "type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]" }
        });
        Arc::new(Tokenizer::from_str(&json.to_string()).expect("word level tokenizer"))
    }

    fn exact(tokenizer: Arc<Tokenizer>) -> PromptSynth {
        PromptSynth::new(&TokenCounter::Exact(tokenizer)).expect("pools built")
    }

    #[test]
    fn prompts_have_exactly_the_target_length() {
        let tokenizer = trained_bpe(600);
        let synth = exact(tokenizer.clone());
        let mut rng = StdRng::seed_from_u64(9);
        for target in [1, 2, 3, 5, 16, 31, 100, 513, 1024] {
            let (text, count) = synth.prompt(target, &mut rng);
            assert_eq!(count, target, "{text}");
            let encoded = tokenizer.encode(text.as_str(), false).unwrap();
            assert_eq!(encoded.len() as u32, target);
        }
    }

    #[test]
    fn small_vocabularies_fall_back_to_vocabulary_tokens() {
        let words = ["zorb", "quix", "vlam", "prex", "dunt", "mo"];
        let synth = exact(word_level(&words));
        let PromptSynth::Exact(pools) = &synth else {
            panic!("a tokenizer gives exact prompts");
        };
        assert_eq!(pools.words.len(), words.len());
        let (text, count) = synth.prompt(40, &mut StdRng::seed_from_u64(1));
        assert_eq!(count, 40);
        assert!(text.split(' ').all(|w| words.contains(&w)), "{text}");
    }

    #[test]
    fn a_vocabulary_without_words_is_refused() {
        let error = PromptSynth::new(&TokenCounter::Exact(word_level(&["1", "2"]))).unwrap_err();
        assert!(error.contains("single token"), "{error}");
    }

    #[test]
    fn prompts_differ_and_repeat_with_the_seed() {
        let synth = exact(trained_bpe(600));
        let batch = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..20)
                .map(|_| synth.prompt(32, &mut rng).0)
                .collect::<Vec<_>>()
        };
        let first = batch(4);
        assert_eq!(first, batch(4));
        let mut openings: Vec<&str> = first.iter().map(|p| &p[..p.find(' ').unwrap()]).collect();
        openings.sort_unstable();
        openings.dedup();
        assert!(
            openings.len() > 10,
            "first words repeat too often: {openings:?}"
        );
    }

    #[test]
    fn approximate_prompts_have_one_word_per_token() {
        let (text, count) = PromptSynth::Approximate.prompt(25, &mut StdRng::seed_from_u64(2));
        assert_eq!(count, 25);
        assert_eq!(text.split(' ').count(), 25);
    }
}
