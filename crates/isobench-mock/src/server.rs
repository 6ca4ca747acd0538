//! The HTTP side: binding, routes, authentication, the concurrency limit
//! (429) and the queue in front of the running answers (`--max-running`),
//! counters, `GET /metrics`, and the handle a caller stops the server with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use isobench_api::{ErrorResponse, ModelCard, ModelList, unix_now};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::Behaviour;
use crate::generate::{chat_completions, completions};
use crate::slots::{RunSlot, RunSlots, SlotCounts};
use crate::timer::PreciseTimer;
use crate::{MockConfig, MockError};

/// How long [`MockHandle::shutdown`] lets answers in progress finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Starts mock endpoints.
#[derive(Debug)]
pub struct MockServer;

impl MockServer {
    /// Validates `config`, binds `addr` (use `127.0.0.1:0` for a free port)
    /// and serves on the current tokio runtime until the handle is shut
    /// down or dropped.
    pub async fn start(config: MockConfig, addr: SocketAddr) -> Result<MockHandle, MockError> {
        let behaviour = config.validate()?;
        let timer = PreciseTimer::start().map_err(MockError::Timer)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| MockError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| MockError::Bind { addr, source })?;
        // Small SSE writes must leave at once, not wait for Nagle's algorithm.
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let running = behaviour.config.max_running.map(RunSlots::new);
        let state = Arc::new(MockState {
            behaviour,
            timer,
            running,
            active: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            counters: Counters::default(),
            write_log: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .route("/health", get(|| async { StatusCode::OK }))
            .route("/v1/models", get(models))
            .route("/metrics", get(metrics))
            .route("/v1/completions", post(completions))
            .route("/v1/chat/completions", post(chat_completions))
            .with_state(Arc::clone(&state));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(MockHandle {
            addr: local,
            stop: Some(stop),
            task: Some(task),
            state,
        })
    }
}

/// A running mock. Dropping it stops the server at once.
pub struct MockHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    state: Arc<MockState>,
}

impl std::fmt::Debug for MockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockHandle {
    /// The address the mock listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the base URL to point a client at.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the mock has answered so far.
    pub fn stats(&self) -> MockStats {
        self.state.counters.snapshot()
    }

    /// The requests written since the last call, with the instant of each
    /// event, when [`MockConfig::record_writes`] is set.
    pub fn take_write_log(&self) -> Vec<WrittenAnswer> {
        std::mem::take(
            &mut *self
                .state
                .write_log
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Stops accepting, lets answers in progress finish for up to a second,
    /// then stops.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for MockHandle {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Counts of answers by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MockStats {
    /// Answers that ran to their end (`[DONE]` or a whole body).
    pub completed: u64,
    /// Injected HTTP 500s.
    pub errors: u64,
    /// 429s for the concurrency limit.
    pub rejected: u64,
    /// Answers cut off on purpose.
    pub cut: u64,
    /// 4xx for a bad request, unknown model or missing key.
    pub invalid: u64,
    /// The most answers in progress at once (queued ones included).
    pub peak_concurrency: u64,
    /// The most answers waiting in the `--max-running` queue at once.
    pub peak_waiting: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub completed: AtomicU64,
    pub errors: AtomicU64,
    pub rejected: AtomicU64,
    pub cut: AtomicU64,
    pub invalid: AtomicU64,
    pub peak_concurrency: AtomicU64,
    pub peak_waiting: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> MockStats {
        MockStats {
            completed: self.completed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            cut: self.cut.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            peak_concurrency: self.peak_concurrency.load(Ordering::Relaxed),
            peak_waiting: self.peak_waiting.load(Ordering::Relaxed),
        }
    }
}

/// When each event of one answer was handed to the connection.
#[derive(Debug, Clone)]
pub struct WrittenAnswer {
    /// The prompt (completions) or the last message (chat), to match the
    /// answer with the client's request.
    pub prompt: String,
    /// When the handler received the request.
    pub received: Instant,
    /// When each content event (or the whole body) was written.
    pub events: Vec<Instant>,
}

pub(crate) struct MockState {
    pub behaviour: Behaviour,
    pub timer: PreciseTimer,
    /// The running slots of `--max-running` and their queue.
    running: Option<Arc<RunSlots>>,
    /// Answers in progress (waiting or running), for the concurrency limit.
    pub active: AtomicUsize,
    /// Requests taken so far: each one's draws are seeded by its number.
    pub served: AtomicU64,
    pub counters: Counters,
    pub write_log: Mutex<Vec<WrittenAnswer>>,
}

impl MockState {
    /// Refuses a request without the configured key.
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(key) = &self.behaviour.config.api_key else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if isobench_api::auth::bearer_matches(given, key) {
            return Ok(());
        }
        self.counters.invalid.fetch_add(1, Ordering::Relaxed);
        Err(Refusal::Unauthorized)
    }

    /// Takes a concurrency slot, or refuses (429).
    pub fn admit(self: &Arc<Self>) -> Result<ActiveGuard, Refusal> {
        let active = self.active.fetch_add(1, Ordering::AcqRel);
        let guard = ActiveGuard(Arc::clone(self));
        let config = &self.behaviour.config;
        match config.max_concurrency {
            Some(limit) if active >= limit => {
                drop(guard);
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                Err(Refusal::Busy {
                    limit,
                    retry_after: config.retry_after,
                })
            }
            _ => {
                let now_active = u64::try_from(active + 1).unwrap_or(u64::MAX);
                self.counters
                    .peak_concurrency
                    .fetch_max(now_active, Ordering::Relaxed);
                Ok(guard)
            }
        }
    }

    /// Waits for a running slot (at once without `--max-running`); the
    /// answer's timing starts when this returns.
    pub async fn run_slot(&self) -> Option<RunSlot> {
        let running = self.running.as_ref()?;
        let slot = running
            .acquire(|waiting| {
                self.counters.peak_waiting.fetch_max(
                    u64::try_from(waiting).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            })
            .await;
        Some(slot)
    }

    /// Refuses (404) a model the mock does not serve.
    pub fn check_model(&self, model: &str) -> Result<(), Refusal> {
        let models = &self.behaviour.config.models;
        if models.iter().any(|m| m == model) {
            return Ok(());
        }
        self.counters.invalid.fetch_add(1, Ordering::Relaxed);
        Err(Refusal::UnknownModel(format!(
            "The model `{model}` does not exist; this mock serves: {}",
            models.join(", ")
        )))
    }

    pub fn log_written(&self, answer: WrittenAnswer) {
        self.write_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(answer);
    }
}

/// Why the mock does not answer a request normally; each becomes an
/// OpenAI-style error answer.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// 400: the body is not a valid request.
    BadRequest(String),
    /// 401: the key is missing or wrong.
    Unauthorized,
    /// 404: a model the mock does not serve.
    UnknownModel(String),
    /// 429: the concurrency limit is reached.
    Busy { limit: usize, retry_after: u64 },
    /// 500: an injected failure.
    Injected,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, kind, message) = match self {
            Refusal::BadRequest(message) => {
                (StatusCode::BAD_REQUEST, "invalid_request_error", message)
            }
            Refusal::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "missing or wrong API key in the Authorization header".to_owned(),
            ),
            Refusal::UnknownModel(message) => (StatusCode::NOT_FOUND, "not_found_error", message),
            Refusal::Busy { limit, retry_after } => {
                let message = format!("the mock serves at most {limit} requests at once");
                let body = axum::Json(ErrorResponse::new("rate_limit_error", message));
                let retry = [(header::RETRY_AFTER, HeaderValue::from(retry_after))];
                return (StatusCode::TOO_MANY_REQUESTS, retry, body).into_response();
            }
            Refusal::Injected => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "injected server error (--error-rate)".to_owned(),
            ),
        };
        (status, axum::Json(ErrorResponse::new(kind, message))).into_response()
    }
}

/// Holds one concurrency slot while an answer is in progress (including
/// its stream); a client that disconnects drops it.
pub(crate) struct ActiveGuard(Arc<MockState>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `GET /metrics`: the running and waiting answers under vLLM's names, so a
/// scraper reads the mock as it would a vLLM server.
async fn metrics(State(state): State<Arc<MockState>>) -> impl IntoResponse {
    // With `--max-running`, both counts are read under the slots' lock: a
    // queue is never shown beside a free slot.
    let SlotCounts { running, waiting } = match &state.running {
        Some(slots) => slots.counts(),
        None => SlotCounts {
            running: state.active.load(Ordering::Acquire),
            waiting: 0,
        },
    };
    let model = &state.behaviour.config.models[0];
    let body = format!(
        "# HELP vllm:num_requests_running Answers being generated.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{model_name=\"{model}\"}} {running}\n\
         # HELP vllm:num_requests_waiting Answers queued for a running slot (--max-running).\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{model_name=\"{model}\"}} {waiting}\n"
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

async fn models(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
) -> Result<axum::Json<ModelList>, Refusal> {
    state.authorize(&headers)?;
    let created = unix_now();
    let cards = state
        .behaviour
        .config
        .models
        .iter()
        .map(|id| ModelCard {
            id: id.clone(),
            object: "model".to_owned(),
            created,
            owned_by: "isobench-mock".to_owned(),
            max_model_len: None,
        })
        .collect();
    Ok(axum::Json(ModelList::new(cards)))
}
