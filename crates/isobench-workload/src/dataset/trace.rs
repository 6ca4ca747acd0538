//! Request traces in JSONL, one request per line, in the style of the
//! Mooncake and BurstGPT traces:
//!
//! ```json
//! {"timestamp": 27482, "input_length": 6955, "output_length": 52}
//! ```
//!
//! `input_length` and `output_length` are token counts (integers >= 1);
//! `timestamp` (a number, in `timestamp_unit`, milliseconds by default as in
//! Mooncake) is needed only to replay the trace's own arrivals
//! (`arrival = "trace"`). Other fields (e.g. Mooncake's `hash_ids`) are
//! ignored, and prompts are synthesised to `input_length` tokens.
//!
//! Records are replayed in timestamp order (a stable sort, so ties keep file
//! order); the first record is sent at offset 0 and each later one at
//! `(timestamp - first timestamp) x unit x time_scale`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::{LengthFilter, TimestampUnit, json_error};
use crate::error::WorkloadError;

const FORMAT: &str = "trace format: one JSON object per line with \"input_length\" and \
                      \"output_length\" (integers >= 1) and \"timestamp\" (a number)";

/// A loaded trace.
#[derive(Debug)]
pub(crate) struct Trace {
    path: PathBuf,
    records: Vec<TraceRecord>,
    /// The line of the first record without a timestamp, if any.
    missing_timestamp: Option<usize>,
    repeat: bool,
}

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TraceRecord {
    /// Seconds after the first request, already scaled; `None` when the
    /// trace has no (complete) timestamps.
    pub(crate) offset: Option<f64>,
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
}

#[derive(Deserialize)]
struct RawRecord {
    timestamp: Option<f64>,
    input_length: u64,
    output_length: u64,
}

impl Trace {
    /// Reads and filters a trace line by line (only the kept records stay
    /// in memory); errors give the line of the bad record.
    pub(crate) fn read(
        path: &Path,
        reader: impl std::io::Read,
        unit: TimestampUnit,
        time_scale: f64,
        filter: &LengthFilter,
    ) -> Result<Self, WorkloadError> {
        let mut timed: Vec<(Option<f64>, TraceRecord)> = Vec::new();
        let mut missing_timestamp = None;
        crate::input::for_each_line(path, reader, |line_number, line| {
            if line.trim().is_empty() {
                return Ok(());
            }
            let bad = |message: String| {
                WorkloadError::data(path, Some(line_number), format!("{message}; {FORMAT}"))
            };
            let raw: RawRecord =
                serde_json::from_str(line).map_err(|error| bad(json_error(&error).1))?;
            let length = |name: &str, value: u64| match u32::try_from(value) {
                Ok(length) if length >= 1 => Ok(length),
                _ => Err(bad(format!(
                    "{name} must be from 1 to {}, got {value}",
                    u32::MAX
                ))),
            };
            let record = TraceRecord {
                offset: None,
                input_tokens: length("input_length", raw.input_length)?,
                output_tokens: length("output_length", raw.output_length)?,
            };
            match raw.timestamp {
                Some(timestamp) if !timestamp.is_finite() => {
                    return Err(bad(format!(
                        "timestamp must be a finite number, got {timestamp}"
                    )));
                }
                None if missing_timestamp.is_none() => missing_timestamp = Some(line_number),
                _ => {}
            }
            if filter.keeps(record.input_tokens, record.output_tokens) {
                timed.push((raw.timestamp, record));
            }
            Ok(())
        })?;
        if missing_timestamp.is_none() {
            timed.sort_by(|(a, _), (b, _)| a.unwrap_or(0.0).total_cmp(&b.unwrap_or(0.0)));
            let first = timed
                .first()
                .and_then(|(timestamp, _)| *timestamp)
                .unwrap_or(0.0);
            for (timestamp, record) in &mut timed {
                let relative = timestamp.unwrap_or(first) - first;
                record.offset = Some(relative * unit.seconds() * time_scale);
            }
        }
        Ok(Trace {
            path: path.to_path_buf(),
            records: timed.into_iter().map(|(_, record)| record).collect(),
            missing_timestamp,
            repeat: false,
        })
    }

    pub(crate) fn repeating(self, repeat: bool) -> Self {
        Trace { repeat, ..self }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn repeats(&self) -> bool {
        self.repeat
    }

    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The line of the first record without a timestamp, if any.
    pub(crate) fn missing_timestamp(&self) -> Option<usize> {
        self.missing_timestamp
    }

    /// Seconds from the first to the last request, as replayed.
    pub(crate) fn span_seconds(&self) -> f64 {
        self.records.last().and_then(|r| r.offset).unwrap_or(0.0)
    }
}

/// Replays a trace's records in order, starting over if it repeats.
#[derive(Debug)]
pub(crate) struct TraceReplay {
    data: Arc<Trace>,
    position: usize,
}

impl TraceReplay {
    pub(crate) fn new(data: Arc<Trace>) -> Self {
        TraceReplay { data, position: 0 }
    }

    pub(crate) fn next_record(&mut self) -> Option<TraceRecord> {
        if self.position == self.data.records.len() {
            if !self.data.repeat || self.data.records.is_empty() {
                return None;
            }
            self.position = 0;
        }
        self.position += 1;
        Some(self.data.records[self.position - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "{\"timestamp\": 1000, \"input_length\": 30, \"output_length\": 5, \"hash_ids\": [1]}\n\
                         \n\
                         {\"timestamp\": 4000, \"input_length\": 10, \"output_length\": 2}\n\
                         {\"timestamp\": 2500, \"input_length\": 20, \"output_length\": 3}\n";

    fn parse(text: &str, unit: TimestampUnit, scale: f64) -> Result<Trace, WorkloadError> {
        Trace::read(
            Path::new("t.jsonl"),
            text.as_bytes(),
            unit,
            scale,
            &LengthFilter::none(),
        )
    }

    #[test]
    fn records_are_sorted_and_offsets_rescaled() {
        let trace = parse(TRACE, TimestampUnit::Milliseconds, 1.0).unwrap();
        let offsets: Vec<Option<f64>> = trace.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [Some(0.0), Some(1.5), Some(3.0)]);
        assert_eq!(trace.records[1].input_tokens, 20);
        let fast = parse(TRACE, TimestampUnit::Milliseconds, 0.5).unwrap();
        assert_eq!(fast.span_seconds(), 1.5);
        let seconds = parse(TRACE, TimestampUnit::Seconds, 1.0).unwrap();
        assert_eq!(seconds.span_seconds(), 3000.0);
        let micros = parse(TRACE, TimestampUnit::Microseconds, 2.0).unwrap();
        assert!((micros.span_seconds() - 0.006).abs() < 1e-12);
    }

    #[test]
    fn records_without_timestamps_are_a_length_source_only() {
        let text = "{\"input_length\": 3, \"output_length\": 4}\n{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 6}";
        let trace = parse(text, TimestampUnit::Milliseconds, 1.0).unwrap();
        assert_eq!(trace.missing_timestamp(), Some(1));
        assert!(trace.records.iter().all(|r| r.offset.is_none()));
        let mut replay = TraceReplay::new(Arc::new(trace.repeating(true)));
        let inputs: Vec<u32> = (0..5)
            .map(|_| replay.next_record().unwrap().input_tokens)
            .collect();
        assert_eq!(inputs, [3, 5, 3, 5, 3]);
    }

    #[test]
    fn filters_drop_records() {
        let filter = LengthFilter {
            min_input: 15,
            ..LengthFilter::none()
        };
        let trace = Trace::read(
            Path::new("t"),
            TRACE.as_bytes(),
            TimestampUnit::Milliseconds,
            1.0,
            &filter,
        )
        .unwrap();
        assert_eq!(trace.len(), 2);
        assert_eq!(trace.span_seconds(), 1.5);
    }

    #[test]
    fn malformed_records_give_the_line() {
        for (text, needle) in [
            (
                "{\"timestamp\": 1, \"input_length\": 3, \"output_length\": 4}\n{\"timestamp\": 2}",
                "t.jsonl:2: missing field `input_length`",
            ),
            (
                "{\"input_length\": 0, \"output_length\": 4}",
                "t.jsonl:1: input_length must be from 1",
            ),
            (
                "{\"input_length\": -3, \"output_length\": 4}",
                "t.jsonl:1: invalid value: integer `-3`",
            ),
            ("\n\nnot json", "t.jsonl:3: expected ident (column 2)"),
        ] {
            let error = parse(text, TimestampUnit::Milliseconds, 1.0)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(needle), "{error}");
            assert!(error.contains("trace format"), "{error}");
        }
    }
}
