//! The boundary between the scheduler and whatever answers the requests.
//!
//! The scheduler decides *when* a request goes; a [`Backend`] decides *how*:
//! it turns a planned request into something ready to send ahead of its
//! instant ([`Backend::prepare`], on the pacing thread, so that dispatch is
//! cheap), then sends it and fills the request's timeline
//! ([`Backend::send`]).

use std::future::Future;

use isobench_metrics::{ErrorKind, RequestError, RequestRecord};
use isobench_workload::PlannedRequest;

use crate::Clock;

/// Sends one request and records what happened to it.
pub trait Backend: Send + Sync + 'static {
    /// A request with all its costly preparation (serialization) done.
    type Prepared: Send + 'static;

    /// Prepares a planned request. Called on the pacing thread before the
    /// request's scheduled instant; must not block for long.
    fn prepare(&self, planned: &PlannedRequest) -> Self::Prepared;

    /// Sends a prepared request and fills `record`: `sent_ns` right before
    /// the request is handed to the transport, then the content events,
    /// token counts, `end_ns`, and `error` when it failed. Failures are
    /// written into the record, never returned or panicked. The engine may
    /// drop the future at any point (cancellation): the record then keeps
    /// what was filled so far.
    fn send(
        &self,
        prepared: Self::Prepared,
        clock: Clock,
        record: &mut RequestRecord,
    ) -> impl Future<Output = ()> + Send;
}

/// Tokenizes generated text with the endpoint's tokenizer: it counts the
/// output when the server reports no `usage`, and splits a stream's tokens
/// over its events for the per-token ITL view when the server reports no
/// usage per event. The binary supplies one when it knows the tokenizer.
pub trait TokenCounter: Send + Sync {
    /// The byte offset in `text` at which each token ends, in order (their
    /// number is the token count); `None` when the tokenizer cannot encode
    /// the text, and the count falls back to one token per event.
    fn token_ends(&self, text: &str) -> Option<Vec<usize>>;
}

/// Marks `record` failed at `end_ns` with a message cut to a readable length.
pub(crate) fn fail(record: &mut RequestRecord, kind: ErrorKind, message: &str, end_ns: u64) {
    record.end_ns = end_ns;
    record.error = Some(RequestError {
        kind,
        message: truncate(message, MAX_MESSAGE_CHARS),
    });
}

/// The per-request log keeps the first words of an error, not whole bodies.
const MAX_MESSAGE_CHARS: usize = 300;

fn truncate(message: &str, max_chars: usize) -> String {
    let trimmed = message.trim();
    match trimmed.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("  short \n", 10), "short");
        assert_eq!(truncate("ééééé", 3), "ééé...");
    }
}
