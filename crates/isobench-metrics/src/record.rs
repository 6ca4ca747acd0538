//! The contract between a backend and the metrics: one request's timeline.

use serde::{Deserialize, Serialize};

/// Why a request failed. Errors are counted by kind, never by message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "status")]
pub enum ErrorKind {
    /// The connection could not be made (refused, DNS, TLS).
    Connect,
    /// The per-request timeout expired.
    Timeout,
    /// The server answered with a non-success status.
    HttpStatus(u16),
    /// The stream or body ended before the response was complete
    /// (no `[DONE]`, connection reset mid-body).
    StreamCut,
    /// An event or body that is not the JSON the API defines.
    MalformedEvent,
    /// The server sent an error object inside a 200 stream.
    ServerError,
    /// A 200 answer ended without any completion chunk with content
    /// (only `data: [DONE]`, or JSON that is not a completion chunk): vLLM's
    /// "Never received a valid chunk".
    NoContent,
    /// A 200 answer whose content type is not the one asked for
    /// (`text/event-stream` when streaming, JSON otherwise).
    WrongContentType,
    /// Interrupted by the user (Ctrl-C) or the end of the run's duration
    /// before it finished.
    Cancelled,
}

impl ErrorKind {
    /// A stable label, used as JSON key and in the terminal table:
    /// `connect`, `timeout`, `http_429`, `stream_cut`, `malformed_event`,
    /// `server_error`, `no_content`, `wrong_content_type`, `cancelled`.
    pub fn label(&self) -> String {
        match self {
            ErrorKind::Connect => "connect".into(),
            ErrorKind::Timeout => "timeout".into(),
            ErrorKind::HttpStatus(code) => format!("http_{code}"),
            ErrorKind::StreamCut => "stream_cut".into(),
            ErrorKind::MalformedEvent => "malformed_event".into(),
            ErrorKind::ServerError => "server_error".into(),
            ErrorKind::NoContent => "no_content".into(),
            ErrorKind::WrongContentType => "wrong_content_type".into(),
            ErrorKind::Cancelled => "cancelled".into(),
        }
    }

    /// The kind a [`label`](Self::label) names; `None` for any other text.
    pub fn from_label(label: &str) -> Option<Self> {
        Some(match label {
            "connect" => ErrorKind::Connect,
            "timeout" => ErrorKind::Timeout,
            "stream_cut" => ErrorKind::StreamCut,
            "malformed_event" => ErrorKind::MalformedEvent,
            "server_error" => ErrorKind::ServerError,
            "no_content" => ErrorKind::NoContent,
            "wrong_content_type" => ErrorKind::WrongContentType,
            "cancelled" => ErrorKind::Cancelled,
            other => ErrorKind::HttpStatus(other.strip_prefix("http_")?.parse().ok()?),
        })
    }
}

/// A failed request's error: its kind, and the first words of what went
/// wrong for the per-request log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestError {
    pub kind: ErrorKind,
    pub message: String,
}

/// Where a request's output token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage.completion_tokens`.
    Usage,
    /// The workload's tokenizer, counting the streamed text.
    Tokenizer,
    /// One token per streamed content event (the fallback when neither is known).
    Events,
}

/// One request, as the backend observed it. All times are nanoseconds since
/// the run's start instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The planned request's index.
    pub index: u64,
    pub warmup: bool,
    /// When the arrival process meant it to be sent. In a closed loop, the
    /// moment its slot became free.
    pub scheduled_ns: u64,
    /// When the request left the client.
    pub sent_ns: u64,
    /// When the last byte arrived, or the failure was seen.
    pub end_ns: u64,
    /// Arrival time of every streamed event that carried non-empty content,
    /// in order; the first is the TTFT event. A non-streamed response has one
    /// entry: the arrival of the whole body. Preallocate it to the expected
    /// output length so that a stream costs no allocation per token.
    pub content_event_ns: Vec<u64>,
    /// Tokens carried by each content event, when known (usage deltas or the
    /// tokenizer); empty when unknown. Same length as `content_event_ns` otherwise.
    pub event_tokens: Vec<u32>,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub token_source: TokenSource,
    pub error: Option<RequestError>,
    /// Times the request was sent again, on a new connection, after a
    /// reused keep-alive connection failed before any byte of the answer
    /// (0 or 1). The latencies still count from the first send.
    #[serde(default)]
    pub retries: u32,
}

impl RequestRecord {
    /// A record for a request about to be sent, with room for `expected_events`.
    pub fn new(index: u64, warmup: bool, scheduled_ns: u64, expected_events: usize) -> Self {
        Self {
            index,
            warmup,
            scheduled_ns,
            sent_ns: scheduled_ns,
            end_ns: scheduled_ns,
            content_event_ns: Vec::with_capacity(expected_events),
            event_tokens: Vec::new(),
            input_tokens: 0,
            output_tokens: 0,
            token_source: TokenSource::Events,
            error: None,
            retries: 0,
        }
    }

    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }

    /// Time to first token from the send, in nanoseconds.
    pub fn ttft_ns(&self) -> Option<u64> {
        self.content_event_ns
            .first()
            .map(|t| t.saturating_sub(self.sent_ns))
    }

    /// End-to-end latency from the send, in nanoseconds.
    pub fn e2e_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.sent_ns)
    }

    /// Time per output token after the first: (E2E - TTFT) / (tokens - 1),
    /// defined for successful requests with more than one output token.
    pub fn tpot_ns(&self) -> Option<u64> {
        if self.output_tokens < 2 || !self.succeeded() {
            return None;
        }
        let ttft = self.ttft_ns()?;
        Some(self.e2e_ns().saturating_sub(ttft) / u64::from(self.output_tokens - 1))
    }

    /// Dispatch lag: how late the request left compared with its schedule.
    pub fn dispatch_lag_ns(&self) -> u64 {
        self.sent_ns.saturating_sub(self.scheduled_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sent: u64, events: &[u64], end: u64, tokens: u32) -> RequestRecord {
        let mut r = RequestRecord::new(0, false, 0, events.len());
        r.sent_ns = sent;
        r.content_event_ns.extend_from_slice(events);
        r.end_ns = end;
        r.output_tokens = tokens;
        r
    }

    #[test]
    fn derived_latencies_follow_the_definitions() {
        let r = record(1_000, &[11_000, 13_000, 15_000], 16_000, 3);
        assert_eq!(r.ttft_ns(), Some(10_000));
        assert_eq!(r.e2e_ns(), 15_000);
        assert_eq!(r.tpot_ns(), Some(2_500));
        assert_eq!(r.dispatch_lag_ns(), 1_000);
    }

    #[test]
    fn tpot_needs_two_tokens_and_success() {
        assert_eq!(record(0, &[5], 5, 1).tpot_ns(), None);
        let mut failed = record(0, &[5, 6], 7, 2);
        failed.error = Some(RequestError {
            kind: ErrorKind::StreamCut,
            message: String::new(),
        });
        assert_eq!(failed.tpot_ns(), None);
    }

    #[test]
    fn error_labels_are_stable() {
        assert_eq!(ErrorKind::HttpStatus(429).label(), "http_429");
        assert_eq!(ErrorKind::MalformedEvent.label(), "malformed_event");
        assert_eq!(ErrorKind::NoContent.label(), "no_content");
        assert_eq!(ErrorKind::WrongContentType.label(), "wrong_content_type");
        for kind in [
            ErrorKind::HttpStatus(503),
            ErrorKind::Cancelled,
            ErrorKind::NoContent,
        ] {
            assert_eq!(ErrorKind::from_label(&kind.label()), Some(kind));
        }
        assert_eq!(ErrorKind::from_label("http_x"), None);
    }
}
