//! Reading an endpoint's Prometheus metrics while a run goes: one scraper,
//! one `GET /metrics` every interval, each page reduced at once to what
//! its caller keeps (the server's queue and batch, a GPU's energy), so a
//! long run holds a few numbers per scrape, not pages.
//!
//! [`Scraper::start`] scrapes once before it returns: a URL that does not
//! answer with a page the reducer recognises is an error the caller can
//! ignore (the target's own `/metrics`, tried by default) or report (a URL
//! the user named). Then a task scrapes every interval until
//! [`Scraper::finish`], which scrapes a last time and hands back every
//! reduced scrape with the instant its answer arrived.
//!
//! [`Exposition`] parses the text format; [`ServerSample`] reads the
//! server's view under the names of isobench, vLLM, TGI and SGLang.

mod prometheus;
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::LoadgenError;
pub use prometheus::{Exposition, Series};
pub use server::{ServerFlavour, ServerSample};

/// The default interval between scrapes.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(250);
/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// `/metrics` beside an endpoint's base URL (with or without `/v1`).
pub fn metrics_url(target: &str) -> String {
    let base = target.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    format!("{base}/metrics")
}

/// Turns one page into what is kept of it; `None` when the page has
/// nothing the caller reads.
pub type Reduce<R> = Arc<dyn Fn(&Exposition) -> Option<R> + Send + Sync>;

/// A running scraper of one URL; see the module docs. Dropping it stops
/// the scraping task.
pub struct Scraper<R> {
    url: String,
    first: (Instant, R),
    stop: DropGuard,
    task: JoinHandle<Vec<(Instant, R)>>,
}

impl<R: Send + 'static> Scraper<R> {
    /// Scrapes `url` once, and then every `interval` in the background.
    pub async fn start(
        url: &str,
        interval: Duration,
        reduce: Reduce<R>,
    ) -> Result<Self, LoadgenError> {
        let failed = |reason: String| LoadgenError::Scrape {
            url: url.to_owned(),
            reason,
        };
        let client = reqwest::Client::builder()
            .timeout(SCRAPE_TIMEOUT)
            .build()
            .map_err(|e| LoadgenError::Client(e.to_string()))?;
        let page = fetch(&client, url).await.map_err(failed)?;
        let first = reduce(&page)
            .ok_or_else(|| failed("the page has none of the metrics isobench reads".to_owned()))?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(scrape_until(
            client,
            url.to_owned(),
            interval,
            reduce,
            stop.clone(),
        ));
        Ok(Self {
            url: url.to_owned(),
            first: (Instant::now(), first),
            stop: stop.drop_guard(),
            task,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops scraping, after one last scrape, and returns every scrape in
    /// time order (the first one included).
    pub async fn finish(self) -> Vec<(Instant, R)> {
        drop(self.stop);
        let mut scrapes = vec![self.first];
        scrapes.extend(self.task.await.unwrap_or_default());
        scrapes
    }
}

async fn scrape_until<R>(
    client: reqwest::Client,
    url: String,
    interval: Duration,
    reduce: Reduce<R>,
    stop: CancellationToken,
) -> Vec<(Instant, R)> {
    let mut scrapes = Vec::new();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopped = tokio::select! {
            () = stop.cancelled() => true,
            _ = ticker.tick() => false,
        };
        if let Ok(page) = fetch(&client, &url).await
            && let Some(reduced) = reduce(&page)
        {
            scrapes.push((Instant::now(), reduced));
        }
        if stopped {
            return scrapes;
        }
    }
}

/// The largest metrics page read. vLLM's, with every histogram, is some
/// hundreds of kilobytes; a page larger than this is not one to sample
/// every 250 ms, and reading it whole could take the client's memory.
const MAX_PAGE_BYTES: usize = 8 << 20;

async fn fetch(client: &reqwest::Client, url: &str) -> Result<Exposition, String> {
    let too_large = || {
        format!(
            "the page is larger than {} MiB; accepted: a Prometheus text page",
            MAX_PAGE_BYTES >> 20
        )
    };
    let mut response = client.get(url).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|length| length > MAX_PAGE_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_PAGE_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Exposition::parse(&String::from_utf8_lossy(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_url_sits_beside_the_api() {
        assert_eq!(metrics_url("http://h:1/v1/"), "http://h:1/metrics");
        assert_eq!(metrics_url("http://h:1"), "http://h:1/metrics");
    }

    /// A page without end (chunked, no length) is refused once it passes
    /// the cap, not read until the client's memory runs out.
    #[tokio::test]
    async fn an_endless_page_is_refused_at_the_size_cap() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 1024];
            let _ = socket.read(&mut head).await;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            let line = "vllm:num_requests_running 1\n".repeat(2048);
            let chunk = format!("{:x}\r\n{line}\r\n", line.len());
            // Twice the cap at most: the test stays bounded either way.
            for _ in 0..(2 * MAX_PAGE_BYTES / line.len()) {
                if socket.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
        let reduce: Reduce<ServerSample> = Arc::new(ServerSample::of);
        let err = Scraper::start(&url, DEFAULT_INTERVAL, reduce)
            .await
            .err()
            .expect("an endless page is an error");
        assert!(err.to_string().contains("larger than 8 MiB"), "{err}");
        server.abort();
    }

    #[tokio::test]
    async fn nothing_listening_is_an_error_naming_the_url() {
        let reduce: Reduce<ServerSample> = Arc::new(ServerSample::of);
        let err = Scraper::start("http://127.0.0.1:9/metrics", DEFAULT_INTERVAL, reduce)
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("127.0.0.1:9/metrics"), "{err}");
    }
}
