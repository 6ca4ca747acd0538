//! ShareGPT conversation dumps: a JSON array of
//! `{ "conversations": [{ "from": "human", "value": "..." }, { "from": "gpt", "value": "..." }, ...] }`
//! (other fields are ignored).
//!
//! As in vLLM's serving benchmark, each conversation gives one request: its
//! first human turn (`from` = `human` or `user`) is the prompt, and the length
//! of the turn that follows it (the reply) is the output length.
//! Conversations without such a pair are skipped. Only those pairs are kept
//! in memory. Lengths are counted lazily while the plan is consumed, so a
//! large dump is not tokenised in full before the first request is sent.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::Rng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Deserializer};

use super::{LengthFilter, json_error};
use crate::error::WorkloadError;
use crate::tokens::TokenCounter;

const FORMAT: &str = "ShareGPT format: a JSON array of objects with \
    \"conversations\": [{\"from\": \"human\", \"value\": \"...\"}, {\"from\": \"gpt\", \"value\": \"...\"}]";

/// The prompt/reply pairs of a ShareGPT dump.
#[derive(Debug)]
pub(crate) struct ShareGpt {
    path: PathBuf,
    exchanges: Vec<Exchange>,
    filter: LengthFilter,
    shuffle: bool,
    repeat: bool,
}

/// The first human turn and the reply to it.
#[derive(Debug)]
struct Exchange {
    prompt: String,
    reply: String,
}

/// One dump entry, reduced to its first exchange while it is parsed.
struct Entry(Option<Exchange>);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct RawEntry {
            #[serde(default)]
            conversations: Vec<Turn>,
        }
        #[derive(Deserialize)]
        struct Turn {
            from: String,
            value: String,
        }
        let is_human = |turn: &Turn| matches!(turn.from.as_str(), "human" | "user");
        let mut turns = RawEntry::deserialize(deserializer)?
            .conversations
            .into_iter();
        let Some(question) = turns.by_ref().find(is_human) else {
            return Ok(Entry(None));
        };
        Ok(Entry(turns.next().filter(|turn| !is_human(turn)).map(
            |reply| Exchange {
                prompt: question.value,
                reply: reply.value,
            },
        )))
    }
}

impl ShareGpt {
    /// Parses a dump; errors give the line of the malformed JSON.
    pub(crate) fn read(
        path: &Path,
        reader: impl Read,
        filter: LengthFilter,
        shuffle: bool,
    ) -> Result<Self, WorkloadError> {
        let entries: Vec<Entry> = serde_json::from_reader(std::io::BufReader::new(reader))
            .map_err(|error| {
                let (line, message) = json_error(&error);
                WorkloadError::data(path, line, format!("{message}; {FORMAT}"))
            })?;
        let exchanges: Vec<Exchange> = entries.into_iter().filter_map(|entry| entry.0).collect();
        if exchanges.is_empty() {
            return Err(WorkloadError::data(
                path,
                None,
                format!("no conversation has a human turn followed by a reply; {FORMAT}"),
            ));
        }
        Ok(ShareGpt {
            path: path.to_path_buf(),
            exchanges,
            filter,
            shuffle,
            repeat: false,
        })
    }

    pub(crate) fn repeating(self, repeat: bool) -> Self {
        ShareGpt { repeat, ..self }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn repeats(&self) -> bool {
        self.repeat
    }
}

/// Replays a dump in a seeded shuffled order (or file order), counting
/// tokens and applying the filter as it goes.
#[derive(Debug)]
pub(crate) struct ShareGptReplay {
    data: Arc<ShareGpt>,
    order: Vec<usize>,
    position: usize,
    kept_this_pass: bool,
    counter: TokenCounter,
}

/// One kept exchange: the prompt text and both lengths in tokens.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub(crate) prompt: String,
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
}

impl ShareGptReplay {
    pub(crate) fn new<R: Rng + ?Sized>(
        data: Arc<ShareGpt>,
        counter: TokenCounter,
        rng: &mut R,
    ) -> Self {
        let mut order: Vec<usize> = (0..data.exchanges.len()).collect();
        if data.shuffle {
            order.shuffle(rng);
        }
        ShareGptReplay {
            data,
            order,
            position: 0,
            kept_this_pass: false,
            counter,
        }
    }

    /// The next exchange that passes the filter; `None` when the dump is
    /// exhausted (or, repeating, when a whole pass kept nothing).
    pub(crate) fn next_exchange(&mut self) -> Option<Replayed> {
        loop {
            if self.position == self.order.len() {
                if !(self.data.repeat && self.kept_this_pass) {
                    return None;
                }
                self.position = 0;
                self.kept_this_pass = false;
            }
            let exchange = &self.data.exchanges[self.order[self.position]];
            self.position += 1;
            let (Some(input_tokens), Some(output_tokens)) = (
                self.counter.count(&exchange.prompt),
                self.counter.count(&exchange.reply),
            ) else {
                continue;
            };
            if self.data.filter.keeps(input_tokens, output_tokens) {
                self.kept_this_pass = true;
                return Some(Replayed {
                    prompt: exchange.prompt.clone(),
                    input_tokens,
                    output_tokens,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    const DUMP: &str = r#"[
      {"id": "a", "conversations": [
        {"from": "human", "value": "What is the capital of France, and why?"},
        {"from": "gpt", "value": "Paris. It has been the seat of government for centuries."}]},
      {"id": "b", "conversations": [{"from": "gpt", "value": "a reply with no question"}]},
      {"id": "c", "conversations": []},
      {"id": "d", "conversations": [
        {"from": "system", "value": "be brief"},
        {"from": "user", "value": "Name three prime numbers, please, with care."},
        {"from": "assistant", "value": "Two, three and five are the first three primes."}]},
      {"id": "e", "conversations": [
        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "Hello! How can I help today?"}]}
    ]"#;

    fn replay_all(data: ShareGpt) -> Vec<Replayed> {
        let mut replay = ShareGptReplay::new(
            Arc::new(data),
            TokenCounter::Approximate,
            &mut StdRng::seed_from_u64(1),
        );
        std::iter::from_fn(|| replay.next_exchange())
            .take(100)
            .collect()
    }

    #[test]
    fn takes_the_first_human_turn_and_its_reply() {
        let data = ShareGpt::read(
            Path::new("d.json"),
            DUMP.as_bytes(),
            LengthFilter::none(),
            false,
        )
        .unwrap();
        let replayed = replay_all(data);
        let prompts: Vec<&str> = replayed.iter().map(|r| r.prompt.as_str()).collect();
        assert_eq!(
            prompts,
            [
                "What is the capital of France, and why?",
                "Name three prime numbers, please, with care.",
                "hi"
            ]
        );
        // 39 characters -> ceil(39 / 4) approximate tokens.
        assert_eq!(replayed[0].input_tokens, 10);
        assert_eq!(replayed[0].output_tokens, 14);
    }

    #[test]
    fn the_filter_drops_short_prompts_and_repeat_cycles() {
        let filter = LengthFilter {
            min_input: 4,
            ..LengthFilter::none()
        };
        let data = ShareGpt::read(Path::new("d.json"), DUMP.as_bytes(), filter, true).unwrap();
        assert_eq!(replay_all(data).len(), 2);
        let data = ShareGpt::read(Path::new("d.json"), DUMP.as_bytes(), filter, true).unwrap();
        let cycled = replay_all(data.repeating(true));
        assert_eq!(cycled.len(), 100);
        assert_eq!(cycled[0], cycled[2]);
        // A repeating dump that keeps nothing ends instead of spinning.
        let none = LengthFilter {
            min_input: 1000,
            ..LengthFilter::none()
        };
        let data = ShareGpt::read(Path::new("d.json"), DUMP.as_bytes(), none, true).unwrap();
        assert!(replay_all(data.repeating(true)).is_empty());
    }

    #[test]
    fn malformed_dumps_give_the_line() {
        let broken = "[\n  {\"conversations\": [\n    {\"from\": \"human\", \"value\": 7}]}\n]";
        let error = ShareGpt::read(
            Path::new("d.json"),
            broken.as_bytes(),
            LengthFilter::none(),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("d.json:3: invalid type: integer `7`"),
            "{error}"
        );
        assert!(error.contains("ShareGPT format"), "{error}");
        let error = ShareGpt::read(
            Path::new("d.json"),
            "{}".as_bytes(),
            LengthFilter::none(),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("expected a sequence"), "{error}");
        let error = ShareGpt::read(
            Path::new("d.json"),
            "[]".as_bytes(),
            LengthFilter::none(),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("no conversation has a human turn"),
            "{error}"
        );
    }
}
