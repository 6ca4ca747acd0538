//! Accepting and serving connections, bounded against hostile and careless
//! clients (HTTP/1.1 and HTTP/2 through hyper-util's auto builder).
//!
//! - **Connection cap**: the accept loop takes a semaphore permit before
//!   each `accept`, so at most `max_connections` are served at once; more
//!   wait in the kernel's accept queue, unread.
//! - **Idle and header timeouts**: each connection has a watchdog. With no
//!   request in progress, the connection is idle from its last response
//!   (or its accept); once a byte arrives it is reading headers. An idle
//!   connection is closed after `idle_timeout`, one reading headers after
//!   `header_read_timeout`. A request in progress is never cut by them.
//! - **Body timeout**: enforced where the body is read ([`crate::http`]).
//! - **Drain**: [`Phase::Draining`] stops the accept loop (new connections
//!   are refused once the listener is dropped) and shuts every connection
//!   down gracefully: idle ones close, busy ones close after their answer;
//!   [`Phase::Closing`] drops whatever is left. [`Listening::closed`]
//!   resolves once every connection is gone.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::time::Instant;

use crate::limits::ConnectionLimits;

/// Pause after a failed `accept` (out of file descriptors, typically), so
/// the loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Where the server is in its life; only ever moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    /// No new connections; open ones finish their answers and close.
    Draining,
    /// Every connection is closed now.
    Closing,
}

/// The accept loop and its connections.
#[derive(Debug)]
pub struct Listening {
    phase: watch::Sender<Phase>,
    /// Every connection task (and the accept loop) holds a sender; `recv`
    /// returns `None` once all are gone.
    open: mpsc::Receiver<()>,
}

impl Listening {
    /// Starts accepting on `listener` and serving `app`.
    pub fn start(listener: TcpListener, app: Router, limits: ConnectionLimits) -> Self {
        let (phase, phase_rx) = watch::channel(Phase::Serving);
        let (open_tx, open) = mpsc::channel(1);
        tokio::spawn(accept_loop(listener, app, limits, phase_rx, open_tx));
        Self { phase, open }
    }

    /// Moves to `phase` (never backwards).
    pub fn enter(&self, phase: Phase) {
        self.phase.send_if_modified(|now| {
            let later = phase > *now;
            if later {
                *now = phase;
            }
            later
        });
    }

    /// Resolves once the accept loop and every connection have ended.
    pub async fn closed(&mut self) {
        while self.open.recv().await.is_some() {}
    }
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    mut phase: watch::Receiver<Phase>,
    open: mpsc::Sender<()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = stop_serving(&mut phase) => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stop_serving(&mut phase) => return,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            activity: Arc::new(Activity::new()),
            limits,
            phase: phase.clone(),
        };
        let (app, builder, open) = (app.clone(), builder.clone(), open.clone());
        tokio::spawn(async move {
            connection.serve(stream, app, &builder).await;
            drop((permit, open));
        });
    }
}

/// Resolves once the server stops serving (or its handle is gone).
async fn stop_serving(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p != Phase::Serving).await;
}

/// One accepted connection.
struct Connection {
    activity: Arc<Activity>,
    limits: ConnectionLimits,
    phase: watch::Receiver<Phase>,
}

impl Connection {
    async fn serve(
        mut self,
        stream: TcpStream,
        app: Router,
        builder: &auto::Builder<TokioExecutor>,
    ) {
        let io = TokioIo::new(Watched {
            stream,
            activity: self.activity.clone(),
        });
        let tower = TowerToHyperService::new(app);
        let activity = self.activity.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let guard = activity.begin_request();
            let answer = hyper::service::Service::call(&tower, request);
            async move {
                let response = answer.await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| Tracked { body, guard }))
            }
        });
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        let mut draining = false;
        // Once the handle is gone (dropped without `shutdown`), drain.
        let mut handle_gone = false;
        loop {
            let phase = if handle_gone {
                Phase::Draining
            } else {
                *self.phase.borrow_and_update()
            };
            match phase {
                Phase::Closing => return,
                Phase::Draining if !draining => {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ => {}
            }
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(error = %err, "connection ended with an error");
                    }
                    return;
                }
                () = self.activity.expired(&self.limits) => {
                    tracing::debug!("closing a connection: idle or header timeout");
                    return;
                }
                changed = self.phase.changed(), if !handle_gone => {
                    handle_gone = changed.is_err();
                }
            }
        }
    }
}

/// What a connection is waiting for, and since when.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// No request in progress and nothing received since this instant.
    Idle(Instant),
    /// The first byte of a request arrived at this instant.
    Head(Instant),
    /// At least one request is in progress: no timeout applies here.
    Busy,
}

#[derive(Debug)]
struct ConnState {
    in_flight: usize,
    waiting: Waiting,
}

/// A connection's state, shared by its reader, its requests and its watchdog.
#[derive(Debug)]
struct Activity {
    state: Mutex<ConnState>,
    /// `waiting` is `Idle`: read without the lock on every read.
    idle: AtomicBool,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            state: Mutex::new(ConnState {
                in_flight: 0,
                waiting: Waiting::Idle(Instant::now()),
            }),
            idle: AtomicBool::new(true),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ConnState> {
        // The state stays consistent even if a holder panicked.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn bytes_received(&self) {
        if !self.idle.load(Ordering::Relaxed) {
            return;
        }
        let mut state = self.lock();
        if let Waiting::Idle(_) = state.waiting {
            state.waiting = Waiting::Head(Instant::now());
            self.idle.store(false, Ordering::Relaxed);
            self.changed.notify_one();
        }
    }

    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        let mut state = self.lock();
        state.in_flight += 1;
        state.waiting = Waiting::Busy;
        self.idle.store(false, Ordering::Relaxed);
        RequestGuard(self.clone())
    }

    /// When the watchdog closes the connection, if nothing changes.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match self.lock().waiting {
            Waiting::Idle(since) => Some(since + limits.idle_timeout),
            Waiting::Head(since) => Some(since + limits.header_read_timeout),
            Waiting::Busy => None,
        }
    }

    /// Resolves once the connection has been idle, or reading headers, for
    /// longer than its limit.
    async fn expired(&self, limits: &ConnectionLimits) {
        loop {
            match self.deadline(limits) {
                Some(deadline) if deadline <= Instant::now() => return,
                Some(deadline) => tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = self.changed.notified() => {}
                },
                None => self.changed.notified().await,
            }
        }
    }
}

/// A request in progress; dropped with its response body (sent, or the
/// client gone).
#[derive(Debug)]
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.waiting = Waiting::Idle(Instant::now());
            self.0.idle.store(true, Ordering::Relaxed);
        }
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request counted as in progress.
struct Tracked {
    body: axum::body::Body,
    guard: RequestGuard,
}

impl Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked")
            .field("guard", &self.guard)
            .finish()
    }
}

/// The socket, noting when bytes arrive on an idle connection.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_received();
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
            ..ConnectionLimits::default()
        }
    }

    /// Asserts `deadline` is `wait` after an instant between `before` and now.
    fn assert_deadline(deadline: Option<Instant>, before: Instant, wait: Duration) {
        let deadline = deadline.expect("a deadline");
        assert!(deadline >= before + wait && deadline <= Instant::now() + wait);
    }

    #[test]
    fn idle_then_head_then_busy_deadlines() {
        let limits = limits();
        let before = Instant::now();
        let activity = Arc::new(Activity::new());
        assert_deadline(activity.deadline(&limits), before, limits.idle_timeout);
        let before = Instant::now();
        activity.bytes_received();
        let head = activity.deadline(&limits);
        assert_deadline(head, before, limits.header_read_timeout);
        activity.bytes_received();
        assert_eq!(
            activity.deadline(&limits),
            head,
            "more bytes keep the deadline"
        );
        let first = activity.begin_request();
        let second = activity.begin_request();
        assert_eq!(activity.deadline(&limits), None);
        drop(first);
        assert_eq!(activity.deadline(&limits), None, "one request still runs");
        activity.bytes_received();
        assert_eq!(
            activity.deadline(&limits),
            None,
            "bytes of a running request"
        );
        let before = Instant::now();
        drop(second);
        assert_deadline(activity.deadline(&limits), before, limits.idle_timeout);
    }

    #[tokio::test]
    async fn a_busy_connection_never_expires() {
        let limits = ConnectionLimits {
            idle_timeout: Duration::from_millis(1),
            header_read_timeout: Duration::from_millis(1),
            ..ConnectionLimits::default()
        };
        let activity = Arc::new(Activity::new());
        let guard = activity.begin_request();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let expired = activity.expired(&limits);
        tokio::pin!(expired);
        assert!((&mut expired).now_or_never().is_none());
        drop(guard);
        expired.await;
    }
}
