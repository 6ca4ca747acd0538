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
//! Bodies are read as bytes under the `--max-body` limit and parsed here,
//! so that malformed JSON gets an OpenAI error body naming the field. A
//! handler validates the request into a [`crate::validate::ValidRequest`],
//! submits it to the engine and answers from the engine's events
//! ([`crate::respond`]). Every refused request is counted by error kind.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use isobench_api::{ChatCompletionRequest, CompletionRequest, ModelCard, ModelList};
use serde::de::DeserializeOwned;

use crate::engine::EngineHandle;
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::respond::{self, Endpoint};
use crate::validate::Validator;

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
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
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
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if given.is_some_and(|key| constant_time_eq(key.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    refuse(
        &state,
        ServerError::Unauthorized {
            env_var: state.api_key_env.clone(),
        },
    )
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refuse(state: &AppState, error: ServerError) -> Response {
    state.metrics.count_request(error.kind());
    error.into_response()
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let arrived = Instant::now();
    let result = async {
        let request: CompletionRequest = parse_body(body, &state, COMPLETION_FIELDS)?;
        let valid = state.validator.completion(&request)?;
        respond::generate(&state, Endpoint::Completions, valid, arrived).await
    };
    result.await.unwrap_or_else(|error| refuse(&state, error))
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let arrived = Instant::now();
    let result = async {
        let request: ChatCompletionRequest = parse_body(body, &state, CHAT_FIELDS)?;
        let valid = state.validator.chat(&request)?;
        respond::generate(&state, Endpoint::Chat, valid, arrived).await
    };
    result.await.unwrap_or_else(|error| refuse(&state, error))
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
const COMPLETION_FIELDS: &[FieldCheck] = &[("prompt", check::<isobench_api::PromptInput>)];
const CHAT_FIELDS: &[FieldCheck] = &[("messages", check::<Vec<isobench_api::ChatMessage>>)];

/// Reads and parses a request body; errors name the offending field.
fn parse_body<T: DeserializeOwned>(
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
    state: &AppState,
    endpoint_fields: &[FieldCheck],
) -> Result<T, ServerError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServerError::BodyTooLarge {
                limit_bytes: state.max_body_bytes,
            }
        } else {
            ServerError::MalformedJson(rejection.body_text())
        }
    })?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
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
    fn api_keys_compare_by_content() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
