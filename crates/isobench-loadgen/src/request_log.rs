//! Where every finished record goes besides its worker's recorder: the
//! per-request JSONL log, streamed to disk while the run goes, and the
//! run's [`Samples`] (and, when asked, the whole records, for a steady-state
//! summary afterwards).
//!
//! Workers move each finished record to a sink thread (one channel
//! message per request); the thread writes one line per record and flushes
//! whenever it has caught up, so a crash or Ctrl-C loses nothing that had
//! finished. File I/O and the samples' growth never run on the runtime's
//! threads.
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

use isobench_metrics::{RequestRecord, RequestSample, Samples, TokenSource};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::LoadgenError;

/// Lines written between two flushes at most, when records keep coming.
const FLUSH_EVERY: usize = 256;

/// What the sink kept, handed back at the end of the run.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// Lines written to the log (0 without one).
    pub logged: u64,
    /// One sample per measured request, in the order they finished.
    pub samples: Samples,
    /// The measured requests' whole records, when asked for.
    pub records: Vec<RequestRecord>,
}

/// The open sink: a channel into its thread.
pub(crate) struct RequestLog {
    path: Option<PathBuf>,
    sender: Sender<RequestRecord>,
    thread: JoinHandle<std::io::Result<Kept>>,
}

impl RequestLog {
    /// Creates (truncates) the log file, when there is one, and starts the
    /// sink's thread; `keep_records` keeps every measured record too.
    pub fn create(path: Option<&Path>, keep_records: bool) -> Result<Self, LoadgenError> {
        let failed = |source| LoadgenError::RequestLog {
            path: path.map_or_else(PathBuf::new, Path::to_owned),
            source,
        };
        let file = path
            .map(|path| File::create(path).map(BufWriter::new))
            .transpose()
            .map_err(failed)?;
        let (sender, receiver) = channel();
        let thread = std::thread::Builder::new()
            .name("isobench-log".into())
            .spawn(move || keep_all(file, receiver, keep_records))
            .map_err(failed)?;
        Ok(Self {
            path: path.map(Path::to_owned),
            sender,
            thread,
        })
    }

    pub fn sender(&self) -> Sender<RequestRecord> {
        self.sender.clone()
    }

    /// Waits for every record to be written and kept.
    /// Call once every other sender is dropped.
    pub fn finish(self) -> Result<Kept, LoadgenError> {
        drop(self.sender);
        let path = self.path.unwrap_or_default();
        match self.thread.join() {
            Ok(result) => result.map_err(|source| LoadgenError::RequestLog { path, source }),
            Err(_) => Err(LoadgenError::Thread("request log")),
        }
    }
}

fn keep_all(
    mut out: Option<BufWriter<File>>,
    records: Receiver<RequestRecord>,
    keep_records: bool,
) -> std::io::Result<Kept> {
    let mut kept = Kept::default();
    let mut line = Vec::with_capacity(1024);
    while let Ok(first) = records.recv() {
        let mut next = Some(first);
        let mut batch = 0;
        while let Some(record) = next {
            if let Some(out) = &mut out {
                line.clear();
                // A struct of numbers and strings always serializes.
                let _ = serde_json::to_writer(&mut line, &LogLine::from(&record));
                line.push(b'\n');
                out.write_all(&line)?;
                kept.logged += 1;
            }
            if !record.warmup {
                kept.samples.0.push(RequestSample::of(&record));
                if keep_records {
                    kept.records.push(record);
                }
            }
            batch += 1;
            next = if batch < FLUSH_EVERY {
                records.try_recv().ok()
            } else {
                None
            };
        }
        if let Some(out) = &mut out {
            out.flush()?;
        }
    }
    if let Some(out) = &mut out {
        out.flush()?;
    }
    Ok(kept)
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
