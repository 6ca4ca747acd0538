//! The OpenAI-compatible HTTP backend: `POST /v1/completions` and
//! `/v1/chat/completions`, streamed (SSE) or not, over HTTP/1.1 or HTTP/2.
//!
//! [`HttpBackend::new`] validates the configuration once (URL, headers, API
//! key) and builds one connection-pooling client. [`Backend::prepare`]
//! serializes each body into a ready `reqwest::Request` on the pacing
//! thread; [`Backend::send`] stamps `sent_ns`, hands the request to the
//! client, and reads the answer into the record ([`response`]).
//!
//! Redirects are never followed: a 3xx is recorded as `http_3NN` (a POST
//! replayed as a GET elsewhere would measure another endpoint). A request
//! lost by a reused keep-alive connection before any byte of its answer is
//! sent once more on a new connection ([`retry`]).

mod response;
mod retry;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use isobench_api::{
    ChatCompletionRequest, ChatMessage, CompletionRequest, PromptInput, SamplingParams,
    StreamOptions,
};
use isobench_metrics::{ErrorKind, RequestRecord};
use isobench_workload::{ApiKind, PlannedRequest, Prompt};
use reqwest::{Method, Url};

use crate::backend::fail;
use crate::{Backend, Clock, LoadgenError, TokenCounter};

/// How to reach an OpenAI-compatible endpoint and what to ask it.
///
/// `Debug` never shows the API key.
#[derive(Clone)]
pub struct HttpBackendConfig {
    /// `http://HOST:PORT` or `https://HOST[:PORT]`, with or without a
    /// trailing `/v1` (or another path prefix the API lives under).
    pub base_url: String,
    /// The `model` field of every request.
    pub model: String,
    pub api: ApiKind,
    /// Stream the answer (SSE, with `stream_options.include_usage`).
    /// Default: true.
    pub stream: bool,
    /// Extra request headers, sent as given.
    pub headers: Vec<(String, String)>,
    /// Extra body fields, merged into every request body.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Sent as `Authorization: Bearer KEY`. The binary reads it from an
    /// environment variable; it is never printed or logged.
    pub api_key: Option<String>,
    /// Per-request limit from send to the end of the answer. Default: 300 s.
    pub timeout: Duration,
    /// The largest SSE event accepted, in bytes; a larger one fails the
    /// request as `malformed_event`. Default:
    /// [`DEFAULT_MAX_EVENT_BYTES`](isobench_api::sse::DEFAULT_MAX_EVENT_BYTES) (1 MiB).
    pub max_event_bytes: usize,
    /// HTTP/2: prior knowledge for `http://`, negotiated by ALPN for
    /// `https://`. Default: false (HTTP/1.1 only).
    pub http2: bool,
    /// Sampling parameters passed through (`temperature`, `top_p`, `top_k`,
    /// `seed`, `ignore_eos`, `stop`); `max_tokens` comes from each planned request.
    pub sampling: SamplingParams,
    /// Ask for `usage` in every chunk (vLLM's
    /// `stream_options.continuous_usage_stats`), so tokens are known per
    /// event. Default: false, as strict servers reject the unknown field.
    pub continuous_usage: bool,
    /// Counts output tokens when the server reports no `usage`; without it
    /// each content event counts as one token.
    pub token_counter: Option<Arc<dyn TokenCounter>>,
}

impl HttpBackendConfig {
    /// A streaming completions config for `model` at `base_url`, with the
    /// defaults documented on each field.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api: ApiKind::Completions,
            stream: true,
            headers: Vec::new(),
            extra_body: serde_json::Map::new(),
            api_key: None,
            timeout: Duration::from_secs(300),
            max_event_bytes: isobench_api::sse::DEFAULT_MAX_EVENT_BYTES,
            http2: false,
            sampling: SamplingParams::default(),
            continuous_usage: false,
            token_counter: None,
        }
    }
}

impl fmt::Debug for HttpBackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBackendConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api", &self.api)
            .field("stream", &self.stream)
            .field("headers", &self.headers)
            .field("extra_body", &self.extra_body)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("http2", &self.http2)
            .field("sampling", &self.sampling)
            .field("continuous_usage", &self.continuous_usage)
            .field(
                "token_counter",
                &self.token_counter.as_ref().map(|_| "<set>"),
            )
            .finish()
    }
}

/// The HTTP backend: one pooled client, one validated endpoint.
pub struct HttpBackend {
    client: reqwest::Client,
    /// A client that never reuses a connection, for retries.
    fresh_client: reqwest::Client,
    answered: retry::AnsweredConnections,
    max_event_bytes: usize,
    /// Where the API lives, without a trailing slash (`http://h:1/v1`).
    api_base: String,
    endpoint: Url,
    /// Content type, extra headers and the (sensitive) authorization header.
    headers: HeaderMap,
    model: String,
    api: ApiKind,
    stream: bool,
    extra_body: serde_json::Map<String, serde_json::Value>,
    sampling: SamplingParams,
    continuous_usage: bool,
    timeout: Duration,
    token_counter: Option<Arc<dyn TokenCounter>>,
}

impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `headers` may hold the key: only their names are shown.
        f.debug_struct("HttpBackend")
            .field("endpoint", &self.endpoint.as_str())
            .field("header_names", &self.headers.keys().collect::<Vec<_>>())
            .field("model", &self.model)
            .field("api", &self.api)
            .field("stream", &self.stream)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpBackend {
    /// Validates `config` and builds the client. Connects to nothing yet:
    /// call [`HttpBackend::preflight`] to check the endpoint.
    pub fn new(config: HttpBackendConfig) -> Result<Self, LoadgenError> {
        let api_base = api_base(&config.base_url)?;
        let path = match config.api {
            ApiKind::Completions => "completions",
            ApiKind::Chat => "chat/completions",
        };
        let endpoint = parse_url(&config.base_url, &format!("{api_base}/{path}"))?;
        let headers = build_headers(&config.headers, config.api_key.as_deref())?;
        let client = build_client(&config, &endpoint, usize::MAX)?;
        let fresh_client = build_client(&config, &endpoint, 0)?;

        Ok(Self {
            client,
            fresh_client,
            answered: retry::AnsweredConnections::default(),
            max_event_bytes: config.max_event_bytes,
            api_base,
            endpoint,
            headers,
            model: config.model,
            api: config.api,
            stream: config.stream,
            extra_body: config.extra_body,
            sampling: config.sampling,
            continuous_usage: config.continuous_usage,
            timeout: config.timeout,
            token_counter: config.token_counter,
        })
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub(crate) fn fresh_client(&self) -> &reqwest::Client {
        &self.fresh_client
    }

    pub(crate) fn answered(&self) -> &retry::AnsweredConnections {
        &self.answered
    }

    pub(crate) fn max_event_bytes(&self) -> usize {
        self.max_event_bytes
    }

    pub(crate) fn api_base(&self) -> &str {
        &self.api_base
    }

    pub(crate) fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn stream(&self) -> bool {
        self.stream
    }

    pub(crate) fn continuous_usage(&self) -> bool {
        self.continuous_usage
    }

    pub(crate) fn token_counter(&self) -> Option<&dyn TokenCounter> {
        self.token_counter.as_deref()
    }

    /// The JSON body for `prompt`, asking for at most `max_tokens`.
    pub(crate) fn body(&self, prompt: &Prompt, max_tokens: u32, stream: bool) -> Vec<u8> {
        let sampling = SamplingParams {
            max_tokens: Some(max_tokens),
            ..self.sampling.clone()
        };
        let stream_options = stream.then_some(StreamOptions {
            include_usage: true,
            continuous_usage_stats: self.continuous_usage,
        });
        let extra = self.extra_body.clone();
        let model = self.model.clone();
        let serialized = match self.api {
            ApiKind::Completions => serde_json::to_vec(&CompletionRequest {
                model,
                prompt: PromptInput::Text(prompt_text(prompt)),
                sampling,
                stream,
                stream_options,
                extra,
            }),
            ApiKind::Chat => serde_json::to_vec(&ChatCompletionRequest {
                model,
                messages: chat_messages(prompt),
                max_completion_tokens: None,
                sampling,
                stream,
                stream_options,
                extra,
            }),
        };
        // Plain structs of strings, numbers and JSON values always serialize.
        serialized.unwrap_or_default()
    }

    pub(crate) fn request(&self, body: Vec<u8>) -> reqwest::Request {
        let mut request = reqwest::Request::new(Method::POST, self.endpoint.clone());
        *request.headers_mut() = self.headers.clone();
        *request.body_mut() = Some(body.into());
        request
    }
}

impl Backend for HttpBackend {
    type Prepared = reqwest::Request;

    fn prepare(&self, planned: &PlannedRequest) -> reqwest::Request {
        self.request(self.body(&planned.prompt, planned.max_tokens, self.stream))
    }

    async fn send(&self, prepared: reqwest::Request, clock: Clock, record: &mut RequestRecord) {
        record.sent_ns = clock.now_ns();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let exchange = response::exchange(self, prepared, clock, record);
        let leftover = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(leftover) => leftover,
            Err(_) => {
                let message = format!("no complete answer within {:?}", self.timeout);
                fail(record, ErrorKind::Timeout, &message, clock.now_ns());
                None
            }
        };
        if let Some(body) = leftover {
            response::drain(body).await;
        }
    }
}

/// A client for `endpoint` that keeps at most `max_idle` idle connections
/// (0: a new connection for every request) and follows no redirect.
fn build_client(
    config: &HttpBackendConfig,
    endpoint: &Url,
    max_idle: usize,
) -> Result<reqwest::Client, LoadgenError> {
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("isobench/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(max_idle)
        .pool_idle_timeout(Duration::from_secs(90))
        .connect_timeout(config.timeout.min(Duration::from_secs(10)));
    builder = match (config.http2, endpoint.scheme()) {
        (true, "http") => builder.http2_prior_knowledge(),
        (true, _) => builder,
        (false, _) => builder.http1_only(),
    };
    builder
        .build()
        .map_err(|e| LoadgenError::Client(error_chain(&e)))
}

/// The API base URL: `base_url` without its trailing slash, with `/v1`
/// appended unless it already ends in a version segment.
fn api_base(base_url: &str) -> Result<String, LoadgenError> {
    let url = parse_url(base_url, base_url)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LoadgenError::InvalidUrl {
            url: base_url.to_owned(),
            reason: format!("scheme `{}` is not supported", url.scheme()),
        });
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(LoadgenError::InvalidUrl {
            url: base_url.to_owned(),
            reason: "a query or fragment is not allowed".to_owned(),
        });
    }
    let trimmed = url.as_str().trim_end_matches('/');
    let has_version = url
        .path_segments()
        .and_then(|mut segments| segments.rfind(|s| !s.is_empty()))
        .is_some_and(|last| last.starts_with('v') && last[1..].parse::<u32>().is_ok());
    Ok(if has_version {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1")
    })
}

fn parse_url(given: &str, url: &str) -> Result<Url, LoadgenError> {
    Url::parse(url).map_err(|e| LoadgenError::InvalidUrl {
        url: given.to_owned(),
        reason: e.to_string(),
    })
}

fn build_headers(
    extra: &[(String, String)],
    api_key: Option<&str>,
) -> Result<HeaderMap, LoadgenError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in extra {
        let invalid = |reason: String| LoadgenError::InvalidHeader {
            name: name.clone(),
            reason,
        };
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| invalid(e.to_string()))?;
        let header_value = HeaderValue::from_str(value).map_err(|e| invalid(e.to_string()))?;
        headers.append(header_name, header_value);
    }
    if let Some(key) = api_key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| LoadgenError::InvalidApiKey)?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

/// The prompt as completions text: a conversation's contents, one per line.
fn prompt_text(prompt: &Prompt) -> String {
    match prompt {
        Prompt::Text(text) => text.clone(),
        Prompt::Chat(turns) => turns
            .iter()
            .map(|(_, content)| content.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The prompt as chat messages: plain text becomes one user message.
fn chat_messages(prompt: &Prompt) -> Vec<ChatMessage> {
    match prompt {
        Prompt::Text(text) => vec![ChatMessage::new("user", text.clone())],
        Prompt::Chat(turns) => turns
            .iter()
            .map(|(role, content)| ChatMessage::new(role.clone(), content.clone()))
            .collect(),
    }
}

/// An error and its sources, joined: reqwest's own message alone is terse.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_base_appends_v1_only_when_missing() {
        assert_eq!(api_base("http://h:1").unwrap(), "http://h:1/v1");
        assert_eq!(api_base("http://h:1/").unwrap(), "http://h:1/v1");
        assert_eq!(api_base("https://h/v1/").unwrap(), "https://h/v1");
        assert_eq!(
            api_base("https://h/openai/v2").unwrap(),
            "https://h/openai/v2"
        );
        assert_eq!(api_base("http://h:1/proxy").unwrap(), "http://h:1/proxy/v1");
    }

    #[test]
    fn bad_urls_and_headers_name_what_is_wrong() {
        let err = api_base("ftp://h").unwrap_err();
        assert_eq!(err.kind(), "invalid_url");
        assert!(err.to_string().contains("scheme `ftp`"), "{err}");
        assert!(api_base("localhost:8000").is_err());
        let err = build_headers(&[("bad header".into(), "v".into())], None).unwrap_err();
        assert!(err.to_string().contains("`bad header`"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let mut config = HttpBackendConfig::new("http://127.0.0.1:1", "m");
        config.api_key = Some("sk-secret-123".into());
        assert!(!format!("{config:?}").contains("sk-secret-123"));
        let backend = HttpBackend::new(config).unwrap();
        assert!(!format!("{backend:?}").contains("sk-secret-123"));
        let request = backend.request(Vec::new());
        assert!(!format!("{request:?}").contains("sk-secret-123"));
    }

    #[test]
    fn bodies_carry_prompt_limits_and_extra_fields() {
        let mut config = HttpBackendConfig::new("http://127.0.0.1:1", "m");
        config.api = ApiKind::Chat;
        config.extra_body.insert("priority".into(), 3.into());
        config.sampling.ignore_eos = Some(true);
        let backend = HttpBackend::new(config).unwrap();
        let prompt = Prompt::Chat(vec![
            ("system".into(), "s".into()),
            ("user".into(), "u".into()),
        ]);
        let body: serde_json::Value =
            serde_json::from_slice(&backend.body(&prompt, 7, true)).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["priority"], 3);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["messages"][1]["content"], "u");
        assert!(backend.endpoint().ends_with("/v1/chat/completions"));
    }
}
