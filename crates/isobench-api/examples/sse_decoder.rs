//! Benchmark of the client's SSE decoder: one event of 1 KB to 10 MB fed in
//! 16 KiB reads (what a socket typically hands over), and a stream of
//! small completion chunks. Prints the decode time and throughput of each;
//! the cost per byte should not grow with the event's size.
//!
//! ```text
//! cargo run --release -p isobench-api --example sse_decoder
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use isobench_api::sse::SseDecoder;

/// Bytes per `push`, as a socket read delivers them.
const READ: usize = 16 * 1024;

/// Decodes `stream` in `READ`-sized pieces with a decoder capped at `cap`;
/// returns the events decoded (or `usize::MAX` when the cap stopped it).
fn decode(stream: &[u8], cap: usize) -> usize {
    let mut decoder = SseDecoder::with_max_event_bytes(cap);
    let mut events = 0;
    for piece in stream.chunks(READ) {
        decoder.push(piece);
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => {
                    black_box(event.data.len());
                    events += 1;
                }
                Ok(None) => break,
                Err(_) => return usize::MAX,
            }
        }
    }
    events
}

/// The best of a few runs of `f`, with at least 50 ms of work in total.
fn best_of(mut f: impl FnMut()) -> Duration {
    let mut best = Duration::MAX;
    let started = Instant::now();
    let mut runs = 0;
    while runs < 5 || (started.elapsed() < Duration::from_millis(50) && runs < 1000) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        runs += 1;
    }
    best
}

fn one_event(size: usize) -> Vec<u8> {
    let mut stream = b"data: {\"choices\":[{\"text\":\"".to_vec();
    stream.resize(stream.len() + size, b'x');
    stream.extend_from_slice(b"\"}]}\n\ndata: [DONE]\n\n");
    stream
}

fn main() {
    println!("one event of N bytes, read {READ} bytes at a time");
    println!(
        "{:>10} {:>12} {:>10} {:>12}",
        "event", "decode", "MB/s", "ns/byte"
    );
    for size in [1_000, 10_000, 100_000, 1_000_000, 10_000_000] {
        let stream = one_event(size);
        let took = best_of(|| assert_eq!(decode(&stream, 16 << 20), 2));
        let mb_s = stream.len() as f64 / took.as_secs_f64() / 1e6;
        let ns_byte = took.as_nanos() as f64 / stream.len() as f64;
        println!("{size:>10} {took:>12.2?} {mb_s:>10.0} {ns_byte:>12.3}");
    }

    let stream = one_event(10_000_000);
    let took = best_of(|| assert_eq!(decode(&stream, 1 << 20), usize::MAX));
    println!("10 MB event against the default 1 MiB cap: refused after {took:.2?}");

    let chunk = b"data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" token\",\"finish_reason\":null}]}\n\n";
    let stream: Vec<u8> = chunk.repeat(100_000);
    let took = best_of(|| assert_eq!(decode(&stream, 1 << 20), 100_000));
    println!(
        "100,000 completion chunks of {} bytes: {took:.2?} ({:.0} ns per event)",
        chunk.len(),
        took.as_nanos() as f64 / 100_000.0
    );
}
