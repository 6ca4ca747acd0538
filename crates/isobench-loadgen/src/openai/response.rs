//! Reading one answer into its record: the HTTP status, then either the SSE
//! stream (one arrival time per content event) or the whole body.
//!
//! The stream loop is the load generator's per-token hot path: each body
//! chunk is stamped once, pushed into a reused [`SseDecoder`], and each event
//! is parsed with the borrowed [`ChunkView`]; the record's event vector is
//! preallocated, so a stream costs no allocation, lock or channel message
//! per token in this code.
//!
//! How an answer can end:
//! - a status other than 2xx (3xx included: redirects are not followed):
//!   [`ErrorKind::HttpStatus`];
//! - a 2xx whose content type is not `text/event-stream` (streaming) or
//!   JSON (whole): [`ErrorKind::WrongContentType`];
//! - `data: [DONE]`, or the body ends after a `finish_reason`: success,
//!   when at least one event carried content; else [`ErrorKind::NoContent`]
//!   (nothing to time: vLLM's "Never received a valid chunk");
//! - the body ends (or breaks) before either: [`ErrorKind::StreamCut`];
//! - an event that is not JSON, or larger than the event size cap:
//!   [`ErrorKind::MalformedEvent`];
//! - an `{"error": ...}` event: [`ErrorKind::ServerError`].

use std::time::Duration;

use isobench_api::sse::SseDecoder;
use isobench_api::view::ChunkView;
use isobench_api::{ErrorResponse, Usage};
use isobench_metrics::{ErrorKind, RequestRecord, TokenSource};

use super::{HttpBackend, error_chain};
use crate::Clock;
use crate::backend::fail;

/// How long to read the rest of a finished body (normally just the end of
/// the chunked encoding) so that its connection goes back to the pool.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

/// How much of an error body is read for its message.
const ERROR_BODY_LIMIT: usize = 16 * 1024;

/// Sends `request` and reads the answer into `record`. Returns the response
/// when its body still has bytes after the answer was complete (after
/// `[DONE]`): the caller drains them outside the request's timeout.
pub(super) async fn exchange(
    backend: &HttpBackend,
    request: reqwest::Request,
    clock: Clock,
    record: &mut RequestRecord,
) -> Option<reqwest::Response> {
    let response = match send(backend, request, record).await {
        Ok(response) => response,
        Err(error) => {
            let kind = if error.is_timeout() {
                ErrorKind::Timeout
            } else {
                ErrorKind::Connect
            };
            fail(record, kind, &error_chain(&error), clock.now_ns());
            return None;
        }
    };
    let status = response.status();
    if !status.is_success() {
        let mut message = error_message(response.headers().clone(), response).await;
        if status.is_redirection() {
            message = format!("a redirect, not followed: {message}");
        }
        fail(
            record,
            ErrorKind::HttpStatus(status.as_u16()),
            &message,
            clock.now_ns(),
        );
        return None;
    }
    if let Err(message) = check_content_type(&response, backend.stream()) {
        let body = error_message(http::HeaderMap::new(), response).await;
        let message = format!("{message}; the body starts: {body}");
        fail(
            record,
            ErrorKind::WrongContentType,
            &message,
            clock.now_ns(),
        );
        return None;
    }
    if backend.stream() {
        read_stream(backend, response, clock, record).await
    } else {
        read_whole(backend, response, clock, record).await;
        None
    }
}

/// Sends `request` on the pooled client; when a reused connection loses it
/// before any byte of the answer, once more on a new connection
/// ([`super::retry`]).
async fn send(
    backend: &HttpBackend,
    request: reqwest::Request,
    record: &mut RequestRecord,
) -> Result<reqwest::Response, reqwest::Error> {
    let again = request.try_clone();
    let error = match backend.client().execute(request).await {
        Ok(response) => {
            backend.answered().note(&response);
            return Ok(response);
        }
        Err(error) => error,
    };
    match again {
        Some(again) if backend.answered().lost_on_reused(&error) => {
            record.retries += 1;
            backend.fresh_client().execute(again).await
        }
        _ => Err(error),
    }
}

/// Whether the answer's content type is the one asked for: SSE when
/// streaming, JSON (`application/json` or `+json`) otherwise. Parameters
/// (`; charset=utf-8`) and case do not matter.
fn check_content_type(response: &reqwest::Response, stream: bool) -> Result<(), String> {
    let given = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let essence = given
        .as_deref()
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let (accepted, expected) = if stream {
        (essence == "text/event-stream", "text/event-stream")
    } else {
        let json = essence == "application/json"
            || (essence.starts_with("application/") && essence.ends_with("+json"));
        (json, "application/json")
    };
    if accepted {
        return Ok(());
    }
    let what = if stream { "streamed" } else { "whole" };
    Err(match given {
        Some(given) => format!("a {what} answer must be {expected}, got `{given}`"),
        None => format!("a {what} answer must be {expected}, got no Content-Type"),
    })
}

/// Reads what is left of a body whose answer is complete, for at most
/// [`DRAIN_LIMIT`]; a body that does not end then is dropped (closing its
/// connection).
pub(super) async fn drain(mut response: reqwest::Response) {
    let rest = async { while let Ok(Some(_)) = response.chunk().await {} };
    let _ = tokio::time::timeout(DRAIN_LIMIT, rest).await;
}

/// What a stream has said so far.
#[derive(Default)]
struct StreamState {
    /// `data: [DONE]` arrived.
    done: bool,
    /// A choice carried a `finish_reason`.
    finished: bool,
    /// The latest `usage` seen.
    usage: Option<Usage>,
    /// Output tokens the previous usage-carrying event counted, for deltas.
    usage_tokens_before: u32,
    /// Whether every content event so far carried `usage`.
    usage_per_event: bool,
    /// The streamed text, kept only when a tokenizer will count it.
    text: Option<String>,
    /// Where each content event's text ends in `text`.
    event_ends: Vec<usize>,
}

/// Why an event ends the request: its error kind and message.
type Failure = (ErrorKind, String);

async fn read_stream(
    backend: &HttpBackend,
    mut response: reqwest::Response,
    clock: Clock,
    record: &mut RequestRecord,
) -> Option<reqwest::Response> {
    let mut decoder = SseDecoder::with_max_event_bytes(backend.max_event_bytes());
    if backend.continuous_usage() {
        let expected = record.content_event_ns.capacity();
        record.event_tokens.reserve(expected);
    }
    let mut state = StreamState {
        usage_per_event: true,
        text: backend
            .token_counter()
            .map(|_| String::with_capacity(record.content_event_ns.capacity() * 8)),
        event_ends: Vec::with_capacity(if backend.token_counter().is_some() {
            record.content_event_ns.capacity()
        } else {
            0
        }),
        ..StreamState::default()
    };
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => {
                if state.finished {
                    break;
                }
                let message = format!("the stream broke: {}", error_chain(&error));
                fail(record, ErrorKind::StreamCut, &message, clock.now_ns());
                return None;
            }
        };
        let now = clock.now_ns();
        decoder.push(&chunk);
        loop {
            let event = match decoder.next_event() {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(too_large) => {
                    let message = format!("{too_large}; raise it with --max-event-bytes");
                    fail(record, ErrorKind::MalformedEvent, &message, now);
                    return None;
                }
            };
            if event.is_done() {
                state.done = true;
                break;
            }
            if let Err((kind, message)) = on_event(event.data, now, &mut state, record) {
                fail(record, kind, &message, now);
                return None;
            }
        }
        if state.done {
            return complete_stream(backend, &state, record, now).then_some(response);
        }
    }
    let now = clock.now_ns();
    if !state.finished {
        let message = "the stream ended before `data: [DONE]` or a finish_reason";
        fail(record, ErrorKind::StreamCut, message, now);
        return None;
    }
    complete_stream(backend, &state, record, now);
    None
}

/// Ends a stream that finished at `now`: a success when an event carried
/// content, else [`ErrorKind::NoContent`]. Returns whether it succeeded.
fn complete_stream(
    backend: &HttpBackend,
    state: &StreamState,
    record: &mut RequestRecord,
    now: u64,
) -> bool {
    if record.content_event_ns.is_empty() {
        let message = "the stream ended without a completion chunk carrying text (never received a valid chunk)";
        fail(record, ErrorKind::NoContent, message, now);
        return false;
    }
    record.end_ns = now;
    finish_tokens(backend, state, record);
    true
}

/// Parses one event's payload (or a whole body), turning an in-band error
/// into a failure.
fn parse_view(data: &[u8]) -> Result<ChunkView<'_>, Failure> {
    let view = ChunkView::parse(data).map_err(|e| {
        let shown = String::from_utf8_lossy(&data[..data.len().min(120)]).into_owned();
        let message = format!("not a completion chunk ({e}): {shown}");
        (ErrorKind::MalformedEvent, message)
    })?;
    if let Some(error) = &view.error {
        let message = error
            .message
            .as_deref()
            .unwrap_or("an error event without a message");
        return Err((ErrorKind::ServerError, message.to_owned()));
    }
    Ok(view)
}

/// Applies one event's payload, which arrived at `now`.
fn on_event(
    data: &[u8],
    now: u64,
    state: &mut StreamState,
    record: &mut RequestRecord,
) -> Result<(), Failure> {
    let view = parse_view(data)?;
    let content = view.content();
    if !content.is_empty() {
        record.content_event_ns.push(now);
        match (&view.usage, state.usage_per_event) {
            (Some(usage), true) => {
                let delta = usage
                    .completion_tokens
                    .saturating_sub(state.usage_tokens_before);
                record.event_tokens.push(delta);
                state.usage_tokens_before = usage.completion_tokens;
            }
            _ => state.usage_per_event = false,
        }
        if let Some(text) = &mut state.text {
            text.push_str(content);
            state.event_ends.push(text.len());
        }
    }
    if view.finish_reason().is_some() {
        state.finished = true;
    }
    if view.usage.is_some() {
        state.usage = view.usage;
    }
    Ok(())
}

/// Sets the output token count from the best source available (usage, then
/// the tokenizer, then one per event), and the tokens of each event: usage
/// deltas when every event carried usage, else the tokenizer's split.
fn finish_tokens(backend: &HttpBackend, state: &StreamState, record: &mut RequestRecord) {
    let usage_per_event =
        state.usage_per_event && record.event_tokens.len() == record.content_event_ns.len();
    // Tokenize only when the server's usage leaves something unknown.
    let needs_tokenizer = !usage_per_event || state.usage.is_none();
    let token_ends = match (backend.token_counter(), state.text.as_deref()) {
        (Some(counter), Some(text)) if needs_tokenizer => counter.token_ends(text),
        _ => None,
    };
    if !usage_per_event {
        record.event_tokens.clear();
        if let Some(ends) = &token_ends {
            split_over_events(ends, &state.event_ends, &mut record.event_tokens);
        }
    }
    let events = u32::try_from(record.content_event_ns.len()).unwrap_or(u32::MAX);
    let counted = match (state.usage, token_ends) {
        (Some(usage), _) => {
            record.input_tokens = usage.prompt_tokens;
            (usage.completion_tokens, TokenSource::Usage)
        }
        (None, Some(ends)) => (saturating_u32(ends.len()), TokenSource::Tokenizer),
        (None, None) => (events, TokenSource::Events),
    };
    (record.output_tokens, record.token_source) = counted;
}

/// Tokens per event: a token belongs to the event whose text completes it.
/// `token_ends` and `event_ends` are byte offsets into the same text.
fn split_over_events(token_ends: &[usize], event_ends: &[usize], per_event: &mut Vec<u32>) {
    per_event.resize(event_ends.len(), 0);
    let mut event = 0;
    for &end in token_ends {
        while event + 1 < event_ends.len() && event_ends[event] < end {
            event += 1;
        }
        if let Some(count) = per_event.get_mut(event) {
            *count += 1;
        }
    }
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

async fn read_whole(
    backend: &HttpBackend,
    response: reqwest::Response,
    clock: Clock,
    record: &mut RequestRecord,
) {
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(error) => {
            let message = format!("the body broke: {}", error_chain(&error));
            fail(record, ErrorKind::StreamCut, &message, clock.now_ns());
            return;
        }
    };
    let now = clock.now_ns();
    let view = match parse_view(&body) {
        Ok(view) => view,
        Err((kind, message)) => return fail(record, kind, &message, now),
    };
    if view.content().is_empty() {
        let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        let message = format!("the answer carries no completion text: {shown}");
        return fail(record, ErrorKind::NoContent, &message, now);
    }
    record.content_event_ns.push(now);
    record.end_ns = now;
    let token_ends = match (view.usage, backend.token_counter()) {
        (None, Some(counter)) => counter.token_ends(view.content()),
        _ => None,
    };
    let counted = match (view.usage, token_ends) {
        (Some(usage), _) => {
            record.input_tokens = usage.prompt_tokens;
            (usage.completion_tokens, TokenSource::Usage)
        }
        (None, Some(ends)) => (saturating_u32(ends.len()), TokenSource::Tokenizer),
        // Without usage or a tokenizer (or one that cannot encode the
        // text) a whole answer is one "event".
        (None, None) => (1, TokenSource::Events),
    };
    (record.output_tokens, record.token_source) = counted;
}

/// The message of an error answer: the OpenAI error body's `message` when
/// there is one, else the start of the body; from `headers`, `Retry-After`
/// and `Location` when given.
async fn error_message(headers: http::HeaderMap, mut response: reqwest::Response) -> String {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header(http::header::RETRY_AFTER);
    let location = header(http::header::LOCATION);
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let mut message = match serde_json::from_slice::<ErrorResponse>(&body) {
        Ok(parsed) => parsed.error.message,
        Err(_) => String::from_utf8_lossy(&body).trim().to_owned(),
    };
    if message.is_empty() {
        message.push_str("(empty body)");
    }
    if let Some(seconds) = retry_after {
        message.push_str(&format!(" (Retry-After: {seconds})"));
    }
    if let Some(location) = location {
        message.push_str(&format!(" (Location: {location})"));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::split_over_events;

    #[test]
    fn tokens_go_to_the_event_that_completes_them() {
        // Events "ab|cde|f" end at 2, 5, 6; tokens "a|bc|de|f" end at 1, 3, 5, 6:
        // "bc" straddles the first two events and belongs to the second.
        let mut per_event = Vec::new();
        split_over_events(&[1, 3, 5, 6], &[2, 5, 6], &mut per_event);
        assert_eq!(per_event, [1, 2, 1]);
    }

    #[test]
    fn an_event_without_a_whole_token_gets_none() {
        let mut per_event = Vec::new();
        split_over_events(&[4], &[2, 4], &mut per_event);
        assert_eq!(per_event, [0, 1]);
    }
}
