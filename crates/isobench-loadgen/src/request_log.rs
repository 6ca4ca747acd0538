//! The per-request JSONL log, streamed to disk while the run goes.
//!
//! Workers move each finished record to a writer thread (one channel
//! message per request); the thread writes one line per record and flushes
//! whenever it has caught up, so a crash or Ctrl-C loses nothing that had
//! finished. File I/O never runs on the runtime's threads.
//!
//! One line per request, e.g.:
//! `{"index":3,"warmup":false,"scheduled_ns":..,"sent_ns":..,"end_ns":..,
//! "dispatch_lag_ms":0.012,"ttft_ms":20.1,"e2e_ms":52.3,"tpot_ms":2.01,
//! "input_tokens":24,"output_tokens":16,"token_source":"usage","events":16,
//! "retries":0,"error":null,"itl_ms":[2.0,...],"event_tokens":[1,...]}`
//! (`error` is `{"kind":"http_429","message":"..."}` for a failure;
//! `event_tokens` only when tokens per event are known).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use isobench_metrics::{RequestRecord, TokenSource};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::LoadgenError;

/// Lines written between two flushes at most, when records keep coming.
const FLUSH_EVERY: usize = 256;

/// The open log: a channel into its writer thread.
pub(crate) struct RequestLog {
    path: PathBuf,
    sender: Sender<RequestRecord>,
    writer: JoinHandle<std::io::Result<u64>>,
}

impl RequestLog {
    /// Creates (truncates) the file and starts its writer thread.
    pub fn create(path: &Path) -> Result<Self, LoadgenError> {
        let failed = |source| LoadgenError::RequestLog {
            path: path.to_owned(),
            source,
        };
        let file = File::create(path).map_err(failed)?;
        let (sender, receiver) = channel();
        let writer = std::thread::Builder::new()
            .name("isobench-log".into())
            .spawn(move || write_lines(BufWriter::new(file), receiver))
            .map_err(failed)?;
        Ok(Self {
            path: path.to_owned(),
            sender,
            writer,
        })
    }

    pub fn sender(&self) -> Sender<RequestRecord> {
        self.sender.clone()
    }

    /// Waits for every line to be written; returns how many were.
    /// Call once every other sender is dropped.
    pub fn finish(self) -> Result<u64, LoadgenError> {
        drop(self.sender);
        let path = self.path;
        match self.writer.join() {
            Ok(result) => result.map_err(|source| LoadgenError::RequestLog { path, source }),
            Err(_) => Err(LoadgenError::Thread("request log")),
        }
    }
}

fn write_lines(mut out: BufWriter<File>, records: Receiver<RequestRecord>) -> std::io::Result<u64> {
    let mut written = 0u64;
    let mut line = Vec::with_capacity(1024);
    while let Ok(first) = records.recv() {
        let mut next = Some(first);
        let mut batch = 0;
        while let Some(record) = next {
            line.clear();
            // A struct of numbers and strings always serializes.
            let _ = serde_json::to_writer(&mut line, &LogLine::from(&record));
            line.push(b'\n');
            out.write_all(&line)?;
            written += 1;
            batch += 1;
            next = if batch < FLUSH_EVERY {
                records.try_recv().ok()
            } else {
                None
            };
        }
        out.flush()?;
    }
    out.flush()?;
    Ok(written)
}

#[derive(serde::Serialize)]
struct LogLine<'a> {
    index: u64,
    warmup: bool,
    scheduled_ns: u64,
    sent_ns: u64,
    end_ns: u64,
    dispatch_lag_ms: f64,
    ttft_ms: Option<f64>,
    e2e_ms: f64,
    tpot_ms: Option<f64>,
    input_tokens: u32,
    output_tokens: u32,
    token_source: TokenSource,
    events: usize,
    retries: u32,
    error: Option<LogError<'a>>,
    itl_ms: Gaps<'a>,
    #[serde(skip_serializing_if = "<[u32]>::is_empty")]
    event_tokens: &'a [u32],
}

#[derive(serde::Serialize)]
struct LogError<'a> {
    kind: String,
    message: &'a str,
}

impl<'a> From<&'a RequestRecord> for LogLine<'a> {
    fn from(r: &'a RequestRecord) -> Self {
        Self {
            index: r.index,
            warmup: r.warmup,
            scheduled_ns: r.scheduled_ns,
            sent_ns: r.sent_ns,
            end_ns: r.end_ns,
            dispatch_lag_ms: ms(r.dispatch_lag_ns()),
            ttft_ms: r.ttft_ns().map(ms),
            e2e_ms: ms(r.e2e_ns()),
            tpot_ms: r.tpot_ns().map(ms),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            token_source: r.token_source,
            events: r.content_event_ns.len(),
            retries: r.retries,
            error: r.error.as_ref().map(|e| LogError {
                kind: e.kind.label(),
                message: &e.message,
            }),
            itl_ms: Gaps(&r.content_event_ns),
            event_tokens: &r.event_tokens,
        }
    }
}

/// The gaps between consecutive event times, in milliseconds.
struct Gaps<'a>(&'a [u64]);

impl Serialize for Gaps<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len().saturating_sub(1)))?;
        for pair in self.0.windows(2) {
            seq.serialize_element(&ms(pair[1].saturating_sub(pair[0])))?;
        }
        seq.end()
    }
}

/// Nanoseconds as milliseconds, kept to the microsecond.
fn ms(ns: u64) -> f64 {
    (ns / 1_000) as f64 / 1_000.0
}
