//! `isobench serve` under SIGTERM (what Docker, Kubernetes and systemd
//! send): it drains like Ctrl-C, so a stream in flight ends with its
//! `finish_reason` and `[DONE]`, and the process exits 0. The child is
//! always reaped, even when an assertion fails.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Reaped;
use rustix::process::{Pid, Signal, kill_process};

/// Far longer than anything here should take.
const PATIENCE: Duration = Duration::from_secs(60);

impl Reaped {
    fn signal(&self, signal: Signal) {
        let pid = Pid::from_child(&self.0);
        kill_process(pid, signal).expect("signal the child");
    }

    /// Waits for the exit, polling; fails after [`PATIENCE`].
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny-llama")
}

/// Starts `isobench serve` on a free port; returns it and its address.
fn serve(extra: &[&str]) -> (Reaped, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_isobench"))
        .arg("serve")
        .arg("--model")
        .arg(tiny_model())
        .args(["--port", "0", "--kv-blocks", "256"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn isobench serve");
    let stderr = child.stderr.take().unwrap();
    let server = Reaped(child);
    let (lines_tx, lines) = mpsc::channel();
    // Drains stderr until the child exits, so it never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let deadline = Instant::now() + PATIENCE;
    loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the server announces its address");
        if let Some(url) = line.split(" at http://").nth(1) {
            let addr = url.split('/').next().unwrap().to_owned();
            return (server, addr);
        }
    }
}

#[test]
fn sigterm_drains_a_stream_in_flight_and_exits_0() {
    let (mut server, addr) = serve(&["--shutdown-timeout", "60s"]);
    let body = serde_json::json!({
        "model": "tiny-llama",
        "prompt": "Once upon a time",
        "max_tokens": 400,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
    })
    .to_string();
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Wait for the first token event, then SIGTERM mid-stream.
    while !String::from_utf8_lossy(&answer).contains("\"text\"") {
        let n = stream.read(&mut buf).expect("the stream starts");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    server.signal(Signal::TERM);
    stream
        .read_to_end(&mut answer)
        .expect("the rest of the stream");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"finish_reason\":\"length\""), "{answer}");
    assert!(answer.contains("data: [DONE]"), "{answer}");
    assert!(!answer.contains("\"error\""), "{answer}");
    let status = server.wait();
    assert!(status.success(), "exit status {status:?}");
}
