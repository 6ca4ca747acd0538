//! Misbehaving servers for the fault tests, each a raw TCP listener on
//! 127.0.0.1:0 (the mock never misbehaves this way), and a closed-loop run
//! that returns the per-request log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use isobench_loadgen::{HttpBackendConfig, RunOptions, RunOutcome};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A streaming completions config for `url`, with a 30 s timeout (far
/// beyond what any answer here takes; a test that hits it has failed).
pub fn config(url: &str) -> HttpBackendConfig {
    let mut config = HttpBackendConfig::new(url, "m");
    config.timeout = Duration::from_secs(30);
    config
}

/// Runs `count` requests (3 tokens each) at `concurrency` closed-loop
/// slots against `config`'s endpoint; returns the outcome and the
/// per-request log's lines.
pub async fn run_closed(
    config: HttpBackendConfig,
    count: u64,
    concurrency: usize,
) -> (RunOutcome, Vec<Value>) {
    super::run_logged(
        super::closed_plan(count, concurrency, 3),
        config,
        RunOptions::default(),
    )
    .await
}

/// What the closing server did.
#[derive(Debug, Default)]
pub struct Served {
    pub connections: AtomicU64,
    pub answers: AtomicU64,
    /// Requests read and dropped unanswered.
    pub dropped: AtomicU64,
}

/// When the closing server closes a connection.
#[derive(Debug, Clone, Copy)]
pub enum Close {
    /// Once it has read the request, without a word: a fresh connection
    /// that fails after carrying its request.
    BeforeAnswer,
    /// Right after the answer's last byte.
    AfterAnswer,
    /// When the client sends its next request on the connection: the
    /// worst moment of the same race, made certain.
    OnNextRequest,
}

/// A server that streams a three-token completion for each request and
/// then closes the connection without saying so (no `Connection: close`):
/// llama.cpp's `llama-server` after a streamed answer. With
/// [`Close::BeforeAnswer`] it answers nothing.
pub async fn closing_server(close: Close) -> (String, Arc<Served>) {
    let served = Arc::new(Served::default());
    let stats = Arc::clone(&served);
    let url = serve_each(move |mut socket| {
        let stats = Arc::clone(&stats);
        async move {
            stats.connections.fetch_add(1, Ordering::Relaxed);
            if read_request(&mut socket).await.is_none() {
                return;
            }
            if let Close::BeforeAnswer = close {
                // Nothing is left unread: dropping the socket closes it.
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let _ = socket.write_all(&streamed_answer()).await;
            stats.answers.fetch_add(1, Ordering::Relaxed);
            if let Close::OnNextRequest = close
                && read_request(&mut socket).await.is_some()
            {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // Dropping the socket closes it.
        }
    })
    .await;
    (url, served)
}

/// Listens on 127.0.0.1:0 and runs `handle` on each connection, in a task
/// of its own; returns the server's URL.
async fn serve_each<F, Fut>(handle: F) -> String
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(handle(socket));
        }
    });
    url
}

/// A chunked SSE answer of three content events, usage and `[DONE]`, with
/// keep-alive implied (HTTP/1.1, no `Connection` header).
fn streamed_answer() -> Vec<u8> {
    let mut body = String::new();
    for text in ["a", "b", "c"] {
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":null}}]}}\n\n"
        ));
    }
    body.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3,\"total_tokens\":5}}\n\n");
    body.push_str("data: [DONE]\n\n");
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    out.extend_from_slice(format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes());
    out
}

/// A server that answers every request with `head` (status line and
/// headers, without the blank line) and `body`, then closes.
pub async fn canned(head: &'static str, body: Vec<u8>) -> String {
    let body = Arc::new(body);
    serve_each(move |mut socket| {
        let body = Arc::clone(&body);
        async move {
            if read_request(&mut socket).await.is_none() {
                return;
            }
            let head = format!(
                "{head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
            let _ = socket.shutdown().await;
        }
    })
    .await
}

/// A streaming server that sends `prefix` and then `size` bytes of `x`
/// without ever ending the event, and keeps the connection open.
pub async fn endless_event(prefix: &'static str, size: usize) -> String {
    serve_each(move |mut socket| async move {
        if read_request(&mut socket).await.is_none() {
            return;
        }
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let _ = socket.write_all(head.as_bytes()).await;
        let _ = socket.write_all(prefix.as_bytes()).await;
        let _ = socket.write_all(&vec![b'x'; size]).await;
        // Hold the connection until the client gives up on it.
        let mut sink = [0u8; 64];
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await
}

/// Reads one request (head and a content-length body); `None` at the end
/// of the connection.
async fn read_request(socket: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
            })
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return Some(head);
        }
    }
}

/// A server that reads each request and then says nothing more: not even
/// the status line, or (`send_head`) only the head of a streamed answer.
/// It holds the connection until the client closes it.
pub async fn silent_server(send_head: bool) -> String {
    serve_each(move |mut socket| async move {
        if read_request(&mut socket).await.is_none() {
            return;
        }
        if send_head {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let _ = socket.write_all(head.as_bytes()).await;
        }
        let mut sink = [0u8; 64];
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await
}
