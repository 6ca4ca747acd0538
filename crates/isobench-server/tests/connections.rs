//! Hostile and careless clients over raw TCP: idle sockets, a header
//! trickle and a body trickle are closed by their timeouts, and the
//! connection cap keeps extra connections waiting in the accept queue.
//! Timeouts are set short here; every wait for the server is bounded by
//! [`PATIENCE`], far above them, so the tests fail rather than hang.

mod common;

use std::time::Duration;

use common::start;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Far longer than any timeout configured here.
const PATIENCE: Duration = Duration::from_secs(20);
const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(3600);

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n";

/// Reads until the server closes the connection; fails after [`PATIENCE`].
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    match tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out)).await {
        Ok(Ok(_)) => {}
        // A reset also means the server closed it.
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(Err(err)) => panic!("read failed: {err}"),
        Err(_) => panic!(
            "the server kept the connection open for {PATIENCE:?}; got {:?}",
            String::from_utf8_lossy(&out)
        ),
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one `/health` answer (it ends with `ok\n`).
async fn read_health(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    while !out.ends_with(b"ok\n") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(n > 0, "closed before the answer: {out:?}");
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(out).unwrap()
}

/// Sends `head`, then `byte` every 20 ms until a write fails.
async fn trickle(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    head: &'static [u8],
    byte: &'static [u8],
) -> std::io::Error {
    if let Err(err) = writer.write_all(head).await {
        return err;
    }
    loop {
        if let Err(err) = writer.write_all(byte).await {
            return err;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    let server = start(|c| {
        c.limits.idle_timeout = SHORT;
        c.limits.header_read_timeout = LONG;
    })
    .await;
    // A connection that never sends anything.
    let mut silent = TcpStream::connect(server.addr()).await.unwrap();
    // A kept-alive connection after one answer.
    let mut kept = TcpStream::connect(server.addr()).await.unwrap();
    kept.write_all(HEALTH).await.unwrap();
    assert!(read_health(&mut kept).await.starts_with("HTTP/1.1 200"));
    assert_eq!(read_until_closed(&mut silent).await, "");
    assert_eq!(read_until_closed(&mut kept).await, "");
    server.shutdown().await;
}

#[tokio::test]
async fn a_header_trickle_is_cut_at_the_header_timeout() {
    let server = start(|c| {
        c.limits.header_read_timeout = SHORT;
        c.limits.idle_timeout = LONG;
    })
    .await;
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let (mut reader, writer) = stream.into_split();
    // One byte at a time, never ending the headers.
    let trickle = tokio::spawn(trickle(writer, b"POST /v1/completions HTTP/1.1\r\n", b"x"));
    let mut out = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, reader.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "the trickle kept its connection open");
    let stopped = tokio::time::timeout(PATIENCE, trickle).await;
    assert!(
        stopped.is_ok(),
        "the trickle's writes fail once the server closed"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_body_trickle_gets_408_at_the_body_timeout() {
    let server = start(|c| {
        c.limits.body_read_timeout = SHORT;
        c.limits.idle_timeout = LONG;
        c.limits.header_read_timeout = LONG;
    })
    .await;
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let (mut reader, writer) = stream.into_split();
    let head = b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{";
    let trickle = tokio::spawn(trickle(writer, head, b" "));
    let mut out = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, reader.read_to_end(&mut out)).await;
    let answer = String::from_utf8_lossy(&out);
    assert!(
        closed.is_ok(),
        "the trickle kept its connection open: {answer}"
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-read-timeout"), "{answer}");
    assert!(answer.contains("\"invalid_request_error\""), "{answer}");
    trickle.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn connections_above_the_cap_wait_until_one_closes() {
    let server = start(|c| {
        c.limits.max_connections = 2;
        c.limits.idle_timeout = LONG;
    })
    .await;
    let mut first = TcpStream::connect(server.addr()).await.unwrap();
    let mut second = TcpStream::connect(server.addr()).await.unwrap();
    for stream in [&mut first, &mut second] {
        stream.write_all(HEALTH).await.unwrap();
        read_health(stream).await;
    }
    // The kernel completes the handshake, but the server does not accept it.
    let mut third = TcpStream::connect(server.addr()).await.unwrap();
    third.write_all(HEALTH).await.unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "a third connection was served beside two open ones: {early:?}"
    );
    drop(first);
    assert!(read_health(&mut third).await.starts_with("HTTP/1.1 200"));
    server.shutdown().await;
}
