//! The load engine's errors: what stops a run from starting or finishing.
//!
//! A failed *request* is not an error here: it is recorded in its
//! [`RequestRecord`](isobench_metrics::RequestRecord) and counted by kind.

use std::path::PathBuf;

/// Why the engine could not set up, check the endpoint, or finish a run.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// The target URL does not parse or is not http(s).
    #[error(
        "invalid target URL `{url}`: {reason}; expected http://HOST:PORT or https://HOST[:PORT], optionally ending in /v1"
    )]
    InvalidUrl { url: String, reason: String },

    /// An extra header's name or value is not valid HTTP.
    #[error(
        "invalid extra header `{name}`: {reason}; expected a token name (letters, digits, `-`) and a visible-ASCII value"
    )]
    InvalidHeader { name: String, reason: String },

    /// The API key holds characters an HTTP header cannot carry. The key
    /// itself is never part of the message.
    #[error(
        "the API key from the environment is not a valid HTTP header value (it must be visible ASCII)"
    )]
    InvalidApiKey,

    /// The HTTP client could not be built (TLS roots, resolver).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),

    /// Preflight: nothing answers at the target.
    #[error(
        "cannot reach the endpoint at {url}: {reason}; is the server running and is the target address right?"
    )]
    Unreachable { url: String, reason: String },

    /// Preflight: the server answered 401 or 403.
    #[error(
        "the endpoint at {url} refused the credentials (HTTP {status}: {message}); check the API key set in the environment (it is never taken from a flag)"
    )]
    KeyRefused {
        url: String,
        status: u16,
        message: String,
    },

    /// Preflight: the model is not among those the server lists, or the
    /// server rejected it.
    #[error("{}", unknown_model_message(model, url, available, server_message))]
    UnknownModel {
        model: String,
        url: String,
        /// What `GET /v1/models` lists; empty when the server does not serve it.
        available: Vec<String>,
        /// What the server said, when the probe request was rejected.
        server_message: Option<String>,
    },

    /// Preflight: the endpoint answered with a redirect, which isobench
    /// does not follow.
    #[error(
        "the endpoint at {url} redirects (HTTP {status} to {location}); isobench does not follow redirects (a POST replayed elsewhere would measure another endpoint): pass the final address as --target"
    )]
    Redirected {
        url: String,
        status: u16,
        location: String,
    },

    /// Preflight: any other unexpected answer.
    #[error("preflight request {method} {url} failed with HTTP {status}: {message}")]
    Preflight {
        method: &'static str,
        url: String,
        status: u16,
        message: String,
    },

    /// The per-request JSONL log could not be created or written.
    #[error("cannot write the per-request log {}: {source}", path.display())]
    RequestLog {
        path: PathBuf,
        source: std::io::Error,
    },

    /// `--scrape-metrics`: the URL given does not answer with Prometheus
    /// metrics isobench reads.
    #[error(
        "cannot scrape metrics from {url}: {reason}; expected a Prometheus text page (GET /metrics) of vLLM, TGI, SGLang or an isobench server, or pass --scrape-metrics none"
    )]
    Scrape { url: String, reason: String },

    /// A thread the engine needs could not be started, or died.
    #[error("the load engine's {0} thread failed")]
    Thread(&'static str),
}

impl LoadgenError {
    /// A stable label for the error's kind (metric label, JSON `error_type`).
    pub fn kind(&self) -> &'static str {
        match self {
            LoadgenError::InvalidUrl { .. } => "invalid_url",
            LoadgenError::InvalidHeader { .. } => "invalid_header",
            LoadgenError::InvalidApiKey => "invalid_api_key",
            LoadgenError::Client(_) => "client",
            LoadgenError::Unreachable { .. } => "unreachable",
            LoadgenError::KeyRefused { .. } => "key_refused",
            LoadgenError::UnknownModel { .. } => "unknown_model",
            LoadgenError::Redirected { .. } => "redirected",
            LoadgenError::Preflight { .. } => "preflight",
            LoadgenError::RequestLog { .. } => "request_log",
            LoadgenError::Scrape { .. } => "scrape",
            LoadgenError::Thread(_) => "thread",
        }
    }
}

fn unknown_model_message(
    model: &str,
    url: &str,
    available: &[String],
    server_message: &Option<String>,
) -> String {
    let mut out = format!("model `{model}` is not served by the endpoint at {url}");
    if !available.is_empty() {
        out.push_str(&format!(
            "; it serves: {} (pass one of these as the model)",
            available.join(", ")
        ));
    }
    if let Some(message) = server_message {
        out.push_str(&format!(" (the server said: {message})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_model_lists_what_the_server_offers() {
        let err = LoadgenError::UnknownModel {
            model: "gpt".into(),
            url: "http://h:1".into(),
            available: vec!["a".into(), "b".into()],
            server_message: None,
        };
        assert_eq!(err.kind(), "unknown_model");
        assert_eq!(
            err.to_string(),
            "model `gpt` is not served by the endpoint at http://h:1; it serves: a, b (pass one of these as the model)"
        );
    }
}
