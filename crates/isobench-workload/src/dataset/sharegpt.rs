//! ShareGPT conversation dumps: a JSON array of
//! `{ "conversations": [{ "from": "human", "value": "..." }, { "from": "gpt", "value": "..." }, ...] }`
//! (other fields are ignored).
//!
//! As in vLLM's serving benchmark, each conversation gives one request: its
//! first human turn (`from` = `human` or `user`) is the prompt, and the length
//! of the turn that follows it (the reply) is the output length.
//! Conversations without such a pair are skipped.
//!
//! The dump is read once as a stream of entries ([`super::json_array`]),
//! each parsed and checked, and only the byte range of each usable entry is
//! kept (12 bytes an entry, about 1 MB for ShareGPT's 670 MB dump); a
//! replayed entry is read back from the file when the plan reaches it.
//! Lengths are counted lazily too, so a large dump is not tokenised in
//! full before the first request is sent.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::Rng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Deserializer};

use super::json_array::for_each_element;
use super::{LengthFilter, json_error};
use crate::error::WorkloadError;
use crate::tokens::TokenCounter;

const FORMAT: &str = "ShareGPT format: a JSON array of objects with \
    \"conversations\": [{\"from\": \"human\", \"value\": \"...\"}, {\"from\": \"gpt\", \"value\": \"...\"}]";

/// The usable entries of a ShareGPT dump, as byte ranges of its file.
#[derive(Debug)]
pub(crate) struct ShareGpt {
    path: PathBuf,
    file: File,
    /// Offset and length of every entry with a prompt and a reply.
    entries: Vec<(u64, u32)>,
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
    /// Reads a dump entry by entry, keeping where the usable ones are;
    /// errors give the line of the malformed JSON.
    pub(crate) fn read(
        path: &Path,
        file: File,
        filter: LengthFilter,
        shuffle: bool,
    ) -> Result<Self, WorkloadError> {
        let mut entries = Vec::new();
        for_each_element(path, &file, FORMAT, |element| {
            let entry: Entry = serde_json::from_slice(element.bytes).map_err(|error| {
                let (line, message) = json_error(&error);
                let line = line.map_or(element.line, |line| element.line + line - 1);
                WorkloadError::data(path, Some(line), format!("{message}; {FORMAT}"))
            })?;
            if entry.0.is_some() {
                // Elements are at most 16 MiB, so their length fits a u32.
                entries.push((element.offset, element.bytes.len() as u32));
            }
            Ok(())
        })?;
        if entries.is_empty() {
            return Err(WorkloadError::data(
                path,
                None,
                format!("no conversation has a human turn followed by a reply; {FORMAT}"),
            ));
        }
        Ok(ShareGpt {
            path: path.to_path_buf(),
            file,
            entries,
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

    /// Reads entry `index` back from the file; `None` if the file changed
    /// since it was read (the entry is then skipped).
    fn exchange(&self, index: usize) -> Option<Exchange> {
        let (offset, length) = self.entries[index];
        let mut bytes = vec![0; length as usize];
        self.file.read_exact_at(&mut bytes, offset).ok()?;
        serde_json::from_slice::<Entry>(&bytes).ok()?.0
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
        let mut order: Vec<usize> = (0..data.entries.len()).collect();
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
            let Some(exchange) = self.data.exchange(self.order[self.position]) else {
                self.position += 1;
                continue;
            };
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
                    prompt: exchange.prompt,
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

    /// An anonymous file holding `text`, positioned at its start.
    fn dump(text: &str) -> File {
        use std::io::{Seek, Write};
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file.rewind().unwrap();
        file
    }

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
        let data =
            ShareGpt::read(Path::new("d.json"), dump(DUMP), LengthFilter::none(), false).unwrap();
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
        let data = ShareGpt::read(Path::new("d.json"), dump(DUMP), filter, true).unwrap();
        assert_eq!(replay_all(data).len(), 2);
        let data = ShareGpt::read(Path::new("d.json"), dump(DUMP), filter, true).unwrap();
        let cycled = replay_all(data.repeating(true));
        assert_eq!(cycled.len(), 100);
        assert_eq!(cycled[0], cycled[2]);
        // A repeating dump that keeps nothing ends instead of spinning.
        let none = LengthFilter {
            min_input: 1000,
            ..LengthFilter::none()
        };
        let data = ShareGpt::read(Path::new("d.json"), dump(DUMP), none, true).unwrap();
        assert!(replay_all(data.repeating(true)).is_empty());
    }

    #[test]
    fn malformed_dumps_give_the_line() {
        let broken = "[\n  {\"conversations\": [\n    {\"from\": \"human\", \"value\": 7}]}\n]";
        let error = ShareGpt::read(
            Path::new("d.json"),
            dump(broken),
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
        let error = ShareGpt::read(Path::new("d.json"), dump("{}"), LengthFilter::none(), true)
            .unwrap_err()
            .to_string();
        assert!(error.contains("expected a JSON array"), "{error}");
        let error = ShareGpt::read(Path::new("d.json"), dump("[]"), LengthFilter::none(), true)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no conversation has a human turn"),
            "{error}"
        );
    }
}
