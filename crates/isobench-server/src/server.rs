//! Starting and stopping the server: load the model and its KV pool
//! ([`crate::load`]), spawn the engine thread, bind the listener and serve until shut down.
//!
//! [`ServerHandle`] is the running server. [`ServerHandle::shutdown`] stops
//! accepting connections, lets requests in flight finish within
//! `--shutdown-timeout`, ends the rest with an error event, and joins the
//! engine thread; dropping the handle only starts the drain (mini-redis
//! style drop guard). Connections are served by [`crate::listen`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isobench_api::{ModelCard, unix_now};
use isobench_model::HostBuffer;
use tokio::net::TcpListener;

use crate::blocks::BlockPool;
use crate::config::ServerConfig;
use crate::engine::{self, Engine, EngineHandle};
use crate::error::ServerError;
use crate::http::{self, AppState};
use crate::listen::{Listening, Phase};
use crate::load::Loaded;
use crate::metrics::Metrics;
use crate::outbox::{EventTiming, Outbox};
use crate::policy;
use crate::scheduler::State;
use crate::validate::Validator;

/// After `--shutdown-timeout`, how long clients have to read the error
/// event that ends their request before their connections are closed.
const CUT_GRACE: Duration = Duration::from_secs(5);

/// The embedded model server.
#[derive(Debug)]
pub struct Server;

impl Server {
    /// Loads the model, runs the warm-up steps ([`isobench_model::warm_up`]) and
    /// serves it; returns once the listener is bound.
    /// Must be called inside a Tokio runtime.
    pub async fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
        config.validate()?;
        let loading = config.clone();
        let loaded = tokio::task::spawn_blocking(move || Loaded::load(&loading))
            .await
            .map_err(|err| ServerError::Generation(format!("model loading panicked: {err}")))??;

        let addr = SocketAddr::new(config.host, config.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Bind { addr, source })?;

        let metrics = loaded.metrics.clone();
        metrics
            .kv_blocks_total
            .store(loaded.num_blocks as u64, Ordering::Relaxed);
        metrics
            .kv_blocks_free
            .store(loaded.num_blocks as u64, Ordering::Relaxed);
        let model_name = config.model_name();
        let validator = Validator {
            model_name: model_name.clone(),
            tokenizer: loaded.tokenizer.clone(),
            chat_template: loaded.chat_template,
            template_has_special_tokens: loaded.template_from_model,
            max_model_len: loaded.max_model_len,
            vocab_size: loaded.vocab_size,
            pool_tokens: loaded.num_blocks as u64 * config.block_size as u64,
        };

        let engine_metrics = metrics.clone();
        let (num_blocks, block_size, batching) =
            (loaded.num_blocks, config.block_size, config.batching);
        let (model, cache, tokenizer) = (loaded.model, loaded.cache, loaded.tokenizer);
        let (engine, engine_thread) = engine::spawn(
            move || Engine {
                event_timing: EventTiming::for_model(model.as_ref(), &cache),
                model,
                cache,
                tokenizer,
                state: State::new(
                    BlockPool::new(num_blocks, block_size),
                    policy::from_config(&batching),
                ),
                metrics: engine_metrics,
                logits_buffer: HostBuffer::default(),
                outbox: Outbox::default(),
            },
            config.max_waiting,
        );

        let api_key = std::env::var(&config.api_key_env)
            .ok()
            .filter(|key| !key.is_empty());
        let shutting_down = Arc::new(AtomicBool::new(false));
        let state = Arc::new(AppState {
            validator,
            engine: engine.clone(),
            metrics: metrics.clone(),
            api_key,
            api_key_env: config.api_key_env.clone(),
            max_body_bytes: config.max_body_bytes,
            body_read_timeout: config.limits.body_read_timeout,
            shutting_down: shutting_down.clone(),
            model_card: ModelCard {
                id: model_name.clone(),
                object: "model".into(),
                created: unix_now(),
                owned_by: "isobench".into(),
                max_model_len: Some(loaded.max_model_len),
            },
        });
        let listening = Listening::start(listener, http::router(state), config.limits);
        tracing::info!(%addr, model = %model_name, batching = %config.batching.kind(), num_blocks, "serving");
        Ok(ServerHandle {
            addr,
            model_name,
            metrics,
            listening,
            shutdown_timeout: config.limits.shutdown_timeout,
            shutting_down,
            engine: Some(engine),
            engine_thread: Some(engine_thread),
            warm_up: loaded.warm_up,
            graph_captures: loaded.graph_captures,
        })
    }
}

/// A snapshot of the engine's state, for tests and embedding programs
/// (the same figures `/metrics` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    pub kv_blocks_total: u64,
    pub kv_blocks_free: u64,
    pub requests_running: u64,
    pub requests_waiting: u64,
    pub preemptions: u64,
}

/// A running server. Dropping it signals shutdown without waiting.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    model_name: String,
    metrics: Arc<Metrics>,
    listening: Listening,
    shutdown_timeout: Duration,
    /// Set when requests still running at `--shutdown-timeout` are ended.
    shutting_down: Arc<AtomicBool>,
    engine: Option<EngineHandle>,
    engine_thread: Option<std::thread::JoinHandle<()>>,
    warm_up: Option<Duration>,
    graph_captures: Option<(usize, Duration)>,
}

impl ServerHandle {
    /// The bound address (the real port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the base URL of the OpenAI API (append `/v1/...`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The name clients send in `model`.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// How long the warm-up steps before listening took (see
    /// [`isobench_model::warm_up`]); `None` when the pool was too small to
    /// run them.
    pub fn warm_up_time(&self) -> Option<Duration> {
        self.warm_up
    }

    /// How many CUDA graphs were captured before listening (see
    /// [`isobench_model::capture_graphs`]) and how long that took; `None`
    /// when the model replays none (the CPU, `--cuda-graphs off`).
    pub fn graph_captures(&self) -> Option<(usize, Duration)> {
        self.graph_captures
    }

    pub fn stats(&self) -> ServerStats {
        let m = &self.metrics;
        ServerStats {
            kv_blocks_total: m.kv_blocks_total.load(Ordering::Relaxed),
            kv_blocks_free: m.kv_blocks_free.load(Ordering::Relaxed),
            requests_running: m.requests_running.load(Ordering::Relaxed),
            requests_waiting: m.requests_waiting.load(Ordering::Relaxed),
            preemptions: m.preemptions_total.load(Ordering::Relaxed),
        }
    }

    /// The Prometheus text `/metrics` serves.
    pub fn metrics_text(&self) -> String {
        self.metrics.render()
    }

    /// Stops accepting connections and closes idle ones; lets requests in
    /// flight finish within `--shutdown-timeout`; then ends the rest with
    /// an error (an SSE error event and `[DONE]`, or a 503), closes what is
    /// left after a few seconds more, and stops the engine.
    pub async fn shutdown(mut self) {
        self.listening.enter(Phase::Draining);
        let timeout = self.shutdown_timeout;
        if tokio::time::timeout(timeout, self.listening.closed())
            .await
            .is_err()
        {
            tracing::warn!(
                ?timeout,
                "requests still in flight after --shutdown-timeout; ending them"
            );
            self.shutting_down.store(true, Ordering::Relaxed);
            self.stop_engine();
            if tokio::time::timeout(CUT_GRACE, self.listening.closed())
                .await
                .is_err()
            {
                self.listening.enter(Phase::Closing);
                self.listening.closed().await;
            }
        }
        self.stop_engine();
        if let Some(engine) = self.engine_thread.take() {
            let _ = tokio::task::spawn_blocking(move || engine.join()).await;
        }
    }

    /// Stops the engine thread at its next step; every sequence still
    /// there ends (its stream gets an error event).
    fn stop_engine(&mut self) {
        if let Some(engine) = self.engine.take() {
            engine.stop();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.listening.enter(Phase::Draining);
    }
}
