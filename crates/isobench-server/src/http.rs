//! The OpenAI-compatible HTTP API on axum.
//!
//! | route | |
//! |---|---|
//! | `POST /v1/completions` | text or token-id prompt |
//! | `POST /v1/chat/completions` | messages through the chat template |
//! | `GET /v1/models` | the one served model |
//! | `GET /health` | 200 while the engine runs, 503 after |
//! | `GET /metrics` | Prometheus text |
//!
//! `/v1/*` requires `Authorization: Bearer <key>` when an API key is set.
//! A body declared as anything but JSON gets 415. Bodies are read as bytes
//! under the `--max-body` limit (413) within `--body-read-timeout` (408)
//! and parsed here, so that malformed JSON gets an OpenAI error body naming
//! the field. A
//! handler validates the request into a [`crate::validate::ValidRequest`],
//! submits it to the engine and answers from the engine's events
//! ([`crate::respond`]). Every refused request is counted by error kind.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures_util::StreamExt;
use isobench_api::{ModelCard, ModelList};
use serde::de::DeserializeOwned;

use crate::engine::EngineHandle;
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::respond::{self, Endpoint};
use crate::validate::{ValidRequest, Validator};

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    pub validator: Validator,
    pub engine: EngineHandle,
    pub metrics: Arc<Metrics>,
    /// The key clients must send; `None` disables the check.
    pub api_key: Option<String>,
    pub api_key_env: String,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    /// Set once shutdown ends the requests still running.
    pub shutting_down: Arc<AtomicBool>,
    pub model_card: ModelCard,
}

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    Router::new()
        .merge(api)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn require_api_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &state.api_key else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    if isobench_api::auth::bearer_matches(given, expected) {
        return next.run(request).await;
    }
    refuse(
        &state,
        ServerError::Unauthorized {
            env_var: state.api_key_env.clone(),
        },
    )
}

fn refuse(state: &AppState, error: ServerError) -> Response {
    state.metrics.count_request(error.kind());
    error.into_response()
}

async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(
        &state,
        &headers,
        body,
        Endpoint::Completions,
        COMPLETION_FIELDS,
        Validator::completion,
    )
    .await
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(
        &state,
        &headers,
        body,
        Endpoint::Chat,
        CHAT_FIELDS,
        Validator::chat,
    )
    .await
}

/// Reads a body of `T` for `endpoint` (naming one of `fields` when it
/// fails to parse), validates it, submits it and answers from the
/// engine's events; a refused request gets its error, counted.
async fn answer<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    endpoint: Endpoint,
    fields: &[FieldCheck],
    validate: fn(&Validator, &T) -> Result<ValidRequest, ServerError>,
) -> Response {
    let arrived = Instant::now();
    let result = async {
        let body = read_body(state, headers, body).await?;
        let request: T = parse_body(&body, fields)?;
        let valid = validate(&state.validator, &request)?;
        respond::generate(state, endpoint, valid, arrived).await
    };
    result.await.unwrap_or_else(|error| refuse(state, error))
}

async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    Json(ModelList::new(vec![state.model_card.clone()]))
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.engine.is_running() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        ServerError::EngineStopped.into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// A typed field of a request body, checked on its own when the whole body
/// fails to parse, to say which field is wrong.
type FieldCheck = (
    &'static str,
    fn(&serde_json::Value) -> Result<(), serde_json::Error>,
);

fn check<T: DeserializeOwned>(value: &serde_json::Value) -> Result<(), serde_json::Error> {
    T::deserialize(value).map(drop)
}

const SAMPLING_FIELDS: [FieldCheck; 12] = [
    ("model", check::<String>),
    ("max_tokens", check::<Option<u32>>),
    ("temperature", check::<Option<f32>>),
    ("top_p", check::<Option<f32>>),
    ("top_k", check::<Option<i32>>),
    ("seed", check::<Option<u64>>),
    ("stop", check::<Option<isobench_api::StopSpec>>),
    ("ignore_eos", check::<Option<bool>>),
    ("n", check::<Option<u32>>),
    ("stream", check::<bool>),
    (
        "stream_options",
        check::<Option<isobench_api::StreamOptions>>,
    ),
    ("max_completion_tokens", check::<Option<u32>>),
];
const COMPLETION_FIELDS: &[FieldCheck] = &[("prompt", check_prompt)];
const CHAT_FIELDS: &[FieldCheck] = &[("messages", check::<Vec<isobench_api::ChatMessage>>)];

/// `prompt` as a string, a list of token ids, or a list of one of those;
/// says which token id is not one (serde's untagged enum error does not).
fn check_prompt(value: &serde_json::Value) -> Result<(), serde_json::Error> {
    use serde::de::Error;
    let lists = match value {
        serde_json::Value::Array(items) if items.iter().all(|item| item.is_array()) => {
            items.iter().filter_map(|item| item.as_array()).collect()
        }
        serde_json::Value::Array(items) if !items.iter().any(|item| item.is_string()) => {
            vec![items]
        }
        _ => vec![],
    };
    for token in lists.into_iter().flatten() {
        if token.as_u64().is_none_or(|id| id > u32::MAX as u64) {
            return Err(serde_json::Error::custom(format!(
                "token id {token} is out of range; accepted: token ids are integers from 0 to {}",
                u32::MAX
            )));
        }
    }
    check::<isobench_api::PromptInput>(value).map_err(|_| {
        serde_json::Error::custom(
            "accepted: a string, a list of token ids, or a list holding one of those",
        )
    })
}

/// Whether a `Content-Type` declares JSON (`application/json`, or a
/// `+json` type), whatever its parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let essence = essence.to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads a request body: refuses a declared type other than JSON (415, a
/// body without `Content-Type` is read as JSON), one larger than
/// `--max-body` (413), and one that does not arrive within
/// `--body-read-timeout` (408).
async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ServerError> {
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        let text = content_type.to_str().unwrap_or("");
        if !is_json(text) {
            return Err(ServerError::UnsupportedMediaType {
                content_type: String::from_utf8_lossy(content_type.as_bytes()).into_owned(),
            });
        }
    }
    let limit = state.max_body_bytes;
    let too_large = ServerError::BodyTooLarge { limit_bytes: limit };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large);
    }
    let read = async {
        let mut bytes = Vec::with_capacity(declared.map_or(0, |length| length as usize));
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|err| {
                ServerError::MalformedJson(format!("the body could not be read: {err}"))
            })?;
            if bytes.len() + chunk.len() > limit {
                return Err(ServerError::BodyTooLarge { limit_bytes: limit });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(bytes))
    };
    tokio::time::timeout(state.body_read_timeout, read)
        .await
        .map_err(|_| ServerError::BodyTimeout {
            timeout: state.body_read_timeout,
        })?
}

/// Parses a request body; errors name the offending field.
fn parse_body<T: DeserializeOwned>(
    bytes: &[u8],
    endpoint_fields: &[FieldCheck],
) -> Result<T, ServerError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|err| ServerError::MalformedJson(format!("the body is not valid JSON: {err}")))?;
    let Some(object) = value.as_object() else {
        return Err(ServerError::MalformedJson(
            "the body must be a JSON object".into(),
        ));
    };
    for (field, check) in endpoint_fields.iter().chain(SAMPLING_FIELDS.iter()) {
        match object.get(*field) {
            Some(field_value) => check(field_value).map_err(|err| {
                ServerError::invalid(field, format!("`{field}` has the wrong type: {err}"))
            })?,
            None if *field == "model" || endpoint_fields.iter().any(|(name, _)| name == field) => {
                return Err(ServerError::invalid(
                    field,
                    format!("`{field}` is missing; it is required"),
                ));
            }
            None => {}
        }
    }
    T::deserialize(value).map_err(|err| ServerError::MalformedJson(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/vnd.api+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json("multipart/form-data; boundary=x"));
    }

    #[test]
    fn prompt_errors_name_token_ids() {
        let message = |value: serde_json::Value| check_prompt(&value).unwrap_err().to_string();
        assert!(message(serde_json::json!([1, -1])).contains("token id -1"));
        assert!(message(serde_json::json!([[1, 2.5]])).contains("token id 2.5"));
        assert!(message(serde_json::json!([1, 5_000_000_000u64])).contains("token id 5000000000"));
        assert!(message(serde_json::json!(7)).contains("a string, a list of token ids"));
        assert!(message(serde_json::json!(["a", 1])).contains("a string, a list of token ids"));
        assert!(check_prompt(&serde_json::json!([[1, 2]])).is_ok());
        assert!(check_prompt(&serde_json::json!("hi")).is_ok());
        assert!(check_prompt(&serde_json::json!([])).is_ok());
    }
}
