//! Server-Sent Events framing as OpenAI-compatible servers use it: each event
//! is one or more `data: <json>` lines ended by a blank line, and the stream
//! ends with `data: [DONE]`.
//!
//! [`SseDecoder`] is incremental: feed it the body chunks as they arrive (an
//! event may be split across chunks, or a chunk hold several events) and
//! take complete events out. It reuses its buffers, so a long stream costs
//! no allocation per event.
//!
//! Cost is linear in the stream's size: a search for an event's end resumes
//! where the previous one stopped, so an event that arrives in many chunks
//! is scanned once, not once per chunk. An event larger than the decoder's
//! cap ([`DEFAULT_MAX_EVENT_BYTES`], 1 MiB, unless set with
//! [`SseDecoder::with_max_event_bytes`]) is an error as soon as that many
//! bytes are pending, without waiting for its end: a completion chunk is a
//! few hundred bytes, and a server sending megabytes without a blank line is
//! broken or hostile.

/// The payload that ends an OpenAI stream.
pub const DONE: &[u8] = b"[DONE]";

/// What opens an event's data line.
pub const DATA_PREFIX: &[u8] = b"data: ";
/// What ends an event: its line's end and the blank line after it.
pub const EVENT_END: &[u8] = b"\n\n";

/// Frames one JSON payload as an SSE event.
pub fn encode_data(payload: &str) -> String {
    let mut out = String::with_capacity(payload.len() + 8);
    out.push_str("data: ");
    out.push_str(payload);
    out.push_str("\n\n");
    out
}

/// The default cap on one event's size (its lines, without the blank line
/// that ends it): 1 MiB, thousands of times a real completion chunk.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

/// An event passed the decoder's size cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTooLarge {
    /// The cap, in bytes.
    pub limit: usize,
    /// The event's bytes seen so far (the whole event when it had ended).
    pub seen: usize,
}

impl std::fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "an event passed the size cap of {} bytes ({} bytes without its end)",
            self.limit, self.seen
        )
    }
}

impl std::error::Error for EventTooLarge {}

/// One complete event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, when given.
    pub event: Option<&'a [u8]>,
    /// The `data:` lines, joined by `\n`.
    pub data: &'a [u8],
}

impl SseEvent<'_> {
    /// Whether this is the `[DONE]` sentinel.
    pub fn is_done(&self) -> bool {
        self.data == DONE
    }
}

/// Incremental SSE decoder.
#[derive(Debug)]
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Where the next undecoded byte is in `buf`.
    start: usize,
    /// How many bytes after `start` are known to hold no event end.
    scanned: usize,
    /// Scratch for events whose data spans several lines.
    joined: Vec<u8>,
    max_event_bytes: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder with the default cap, [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A decoder that refuses events larger than `max_event_bytes`.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            joined: Vec::new(),
            max_event_bytes,
        }
    }

    /// Appends bytes read from the body.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 4096 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet part of a complete event.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The next complete event, if one has arrived. Events without a `data:`
    /// line (comments, keep-alives) are skipped. An event (complete or not)
    /// larger than the cap is an error; the stream cannot go on after it.
    pub fn next_event(&mut self) -> Result<Option<SseEvent<'_>>, EventTooLarge> {
        loop {
            let rest = &self.buf[self.start..];
            let too_large = |seen| EventTooLarge {
                limit: self.max_event_bytes,
                seen,
            };
            let Some((block_len, sep_len)) = find_event_end(rest, self.scanned) else {
                // Up to 3 of the pending bytes may be the start of the
                // separator (`\r\n\r`), which is not part of the event.
                if rest.len() > self.max_event_bytes + 3 {
                    return Err(too_large(rest.len()));
                }
                // A newline in the last two bytes may still become a separator.
                self.scanned = rest.len().saturating_sub(2);
                return Ok(None);
            };
            if block_len > self.max_event_bytes {
                return Err(too_large(block_len));
            }
            let block_start = self.start;
            self.start += block_len + sep_len;
            self.scanned = 0;
            let block = &self.buf[block_start..block_start + block_len];

            let mut event = None;
            let mut first: Option<&[u8]> = None;
            let mut many = false;
            self.joined.clear();
            for line in block.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let (field, value) = split_field(line);
                match field {
                    b"data" => match first {
                        None => first = Some(value),
                        Some(f) => {
                            if !many {
                                self.joined.extend_from_slice(f);
                                many = true;
                            }
                            self.joined.push(b'\n');
                            self.joined.extend_from_slice(value);
                        }
                    },
                    b"event" => event = Some(value),
                    _ => {}
                }
            }
            let Some(first) = first else { continue };
            let data = if many { &self.joined[..] } else { first };
            return Ok(Some(SseEvent { event, data }));
        }
    }
}

/// Length of the first event block and of the blank-line separator after
/// it, searching from `from` (every separator that starts before it is
/// known to be absent).
fn find_event_end(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i < bytes.len() {
        let nl = i + memchr_newline(&bytes[i..])?;
        let after = nl + 1;
        if bytes.get(after) == Some(&b'\n') {
            return Some((nl, 2));
        }
        if bytes.get(after..after + 2) == Some(b"\r\n") {
            let end = if nl > 0 && bytes[nl - 1] == b'\r' {
                nl - 1
            } else {
                nl
            };
            return Some((end, after + 2 - end));
        }
        i = after;
    }
    None
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Splits `field: value` (one optional space after the colon is dropped).
/// A comment line (starting with `:`) has an empty field.
fn split_field(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b':') {
        Some(colon) => {
            let value = &line[colon + 1..];
            (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(dec: &mut SseDecoder) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(ev) = dec.next_event().unwrap() {
            out.push(String::from_utf8(ev.data.to_vec()).unwrap());
        }
        out
    }

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n: keep-alive\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut dec = SseDecoder::new();
            dec.push(&stream[..split]);
            let mut got = drain(&mut dec);
            dec.push(&stream[split..]);
            got.extend(drain(&mut dec));
            assert_eq!(
                got,
                vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"],
                "split at {split}"
            );
            assert!(dec.pending().is_empty());
        }
    }

    #[test]
    fn crlf_multiline_data_and_event_names() {
        let mut dec = SseDecoder::new();
        dec.push(b"event: error\r\ndata: line1\r\ndata:line2\r\n\r\ndata: x\n\n");
        let ev = dec.next_event().unwrap().unwrap();
        assert_eq!(ev.event, Some(&b"error"[..]));
        assert_eq!(ev.data, b"line1\nline2");
        let ev = dec.next_event().unwrap().unwrap();
        assert_eq!(ev.data, b"x");
        assert!(!ev.is_done());
        assert!(dec.next_event().unwrap().is_none());
    }

    #[test]
    fn incomplete_event_stays_pending() {
        let mut dec = SseDecoder::new();
        dec.push(b"data: {\"partial\":");
        assert!(dec.next_event().unwrap().is_none());
        assert_eq!(dec.pending(), b"data: {\"partial\":");
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let mut dec = SseDecoder::new();
        dec.push(encode_data("{\"k\":\"v\"}").as_bytes());
        dec.push(encode_data("[DONE]").as_bytes());
        assert_eq!(dec.next_event().unwrap().unwrap().data, b"{\"k\":\"v\"}");
        assert!(dec.next_event().unwrap().unwrap().is_done());
    }

    #[test]
    fn an_event_over_the_cap_fails_before_its_end_arrives() {
        let mut dec = SseDecoder::with_max_event_bytes(64);
        dec.push(b"data: small\n\n");
        assert_eq!(dec.next_event().unwrap().unwrap().data, b"small");
        dec.push(&[b'x'; 60]);
        assert!(dec.next_event().unwrap().is_none());
        dec.push(&[b'x'; 10]);
        assert_eq!(
            dec.next_event().unwrap_err(),
            EventTooLarge {
                limit: 64,
                seen: 70
            }
        );
        // A complete event over the cap, in one piece, fails too.
        let mut dec = SseDecoder::with_max_event_bytes(8);
        dec.push(b"data: 0123456789\n\n");
        assert_eq!(dec.next_event().unwrap_err().seen, 16);
    }

    #[test]
    fn a_separator_split_over_pushes_after_a_long_scan_is_found() {
        // The resumed search must re-read the newline at the end of a chunk.
        for tail in [&b"\n"[..], b"\r\n", b"\r"] {
            let mut dec = SseDecoder::new();
            dec.push(b"data: ");
            dec.push(&[b'a'; 5000]);
            dec.push(tail);
            assert!(dec.next_event().unwrap().is_none());
            dec.push(if tail == b"\r" { b"\n\r\n" } else { b"\n" });
            assert_eq!(dec.next_event().unwrap().unwrap().data.len(), 5000);
        }
    }
}
