//! The server's one error type. [`ServerError::kind`] is both the metric
//! label (`isobench_requests_total{status=...}`) and the OpenAI `error.type`;
//! its [`IntoResponse`] impl is the one place errors become HTTP responses.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use isobench_api::ErrorResponse;

/// Seconds a client told 429 should wait before retrying.
pub const RETRY_AFTER_SECS: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A flag or configuration field has a value the server cannot run with.
    #[error("{flag}: {message}")]
    Config { flag: &'static str, message: String },

    /// The model folder could not be loaded, or a step failed.
    #[error("model: {0}")]
    Model(#[from] isobench_model::ModelError),

    /// The chat template in tokenizer_config.json does not compile.
    #[error("chat template in {source_name}: {message}")]
    Template {
        source_name: String,
        message: String,
    },

    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },

    /// A request field has a value the server does not accept.
    #[error("{message}")]
    InvalidRequest {
        param: &'static str,
        message: String,
    },

    /// The body is not the JSON the endpoint expects.
    #[error("malformed request body: {0}")]
    MalformedJson(String),

    #[error("request body is larger than the {limit_bytes}-byte limit (--max-body)")]
    BodyTooLarge { limit_bytes: usize },

    #[error(
        "the request body is declared as `{content_type}`; accepted: Content-Type: application/json"
    )]
    UnsupportedMediaType { content_type: String },

    /// The client did not send the whole body in time.
    #[error(
        "the request body did not arrive within {} (--body-read-timeout)",
        humantime::format_duration(*timeout)
    )]
    BodyTimeout { timeout: std::time::Duration },

    #[error("the model `{requested}` does not exist; this server serves `{served}`")]
    ModelNotFound { requested: String, served: String },

    #[error(
        "missing or wrong API key: send `Authorization: Bearer <key>` with the key in the server's {env_var}"
    )]
    Unauthorized { env_var: String },

    #[error(
        "server is at capacity: {max_waiting} requests are already waiting (--max-waiting); retry later"
    )]
    QueueFull { max_waiting: usize },

    /// The engine thread has stopped (shutdown or a fatal model error).
    #[error("the inference engine is not running")]
    EngineStopped,

    /// Shutdown ended the request: it was still running at `--shutdown-timeout`.
    #[error(
        "the server is shutting down and ended this request (still running at --shutdown-timeout)"
    )]
    ShuttingDown,

    /// Generation failed after the request was admitted.
    #[error("generation failed: {0}")]
    Generation(String),
}

impl ServerError {
    /// A short stable name: the OpenAI `error.type` for request errors, and
    /// the `status` label of the requests counter.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerError::Config { .. } => "config_error",
            ServerError::Model(_) => "model_error",
            ServerError::Template { .. } => "template_error",
            ServerError::Bind { .. } => "bind_error",
            ServerError::InvalidRequest { .. }
            | ServerError::MalformedJson(_)
            | ServerError::BodyTooLarge { .. }
            | ServerError::UnsupportedMediaType { .. }
            | ServerError::BodyTimeout { .. } => "invalid_request_error",
            ServerError::ModelNotFound { .. } => "not_found_error",
            ServerError::Unauthorized { .. } => "authentication_error",
            ServerError::QueueFull { .. } => "rate_limit_error",
            ServerError::EngineStopped | ServerError::ShuttingDown | ServerError::Generation(_) => {
                "server_error"
            }
        }
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::InvalidRequest { .. } | ServerError::MalformedJson(_) => {
                StatusCode::BAD_REQUEST
            }
            ServerError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServerError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ServerError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ServerError::ModelNotFound { .. } => StatusCode::NOT_FOUND,
            ServerError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ServerError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            ServerError::EngineStopped | ServerError::ShuttingDown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ServerError::Config { .. }
            | ServerError::Model(_)
            | ServerError::Template { .. }
            | ServerError::Bind { .. }
            | ServerError::Generation(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI error body.
    pub fn to_body(&self) -> ErrorResponse {
        let body = ErrorResponse::new(self.kind(), self.to_string());
        match self {
            ServerError::InvalidRequest { param, .. } => body.with_param(*param),
            ServerError::ModelNotFound { .. } => body.with_param("model"),
            _ => body,
        }
    }

    /// Shorthand for a 400 about one field.
    pub(crate) fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        ServerError::InvalidRequest {
            param,
            message: message.into(),
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_string(&self.to_body()).unwrap_or_default();
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still come: the connection cannot be reused.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
