//! The server's view of a run: one scraper of the endpoint's Prometheus
//! metrics (`--scrape-metrics`, by default the target's `/metrics`) every
//! `--scrape-interval`, each page read at once into the server's queue,
//! batch and KV cache (the report's `server_metrics` time line) and, from
//! an isobench server on a GPU, its memory and energy (the `gpu` section,
//! [`crate::gpu`]). The queue also feeds the live progress line.
//!
//! The default URL is tried quietly: a target without metrics isobench
//! reads is measured without them. A URL the user named that does not
//! answer so is an error before the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use isobench_loadgen::LiveGauge;
use isobench_loadgen::scrape::{self, Reduce, Scraper, ServerFlavour, ServerSample};
use isobench_report::{GpuMeasurement, ServerMetrics};

use crate::gpu::{self, GpuScrape};
use crate::target::EndpointArgs;

/// What one scrape kept.
struct Point {
    server: Option<ServerSample>,
    gpu: Option<GpuScrape>,
}

/// A running scraper of one run.
pub struct Observer {
    scraper: Scraper<Point>,
    interval: Duration,
}

/// What a run's scrapes gave.
pub struct Observed {
    pub gpu: Option<GpuMeasurement>,
    pub server: Option<ServerMetrics>,
}

impl Observer {
    /// Starts scraping for a run against `target`, setting `queue` to the
    /// server's waiting requests at each scrape; `None` when nothing is to
    /// be scraped.
    pub async fn start(
        args: &EndpointArgs,
        target: &str,
        queue: &LiveGauge,
    ) -> anyhow::Result<Option<Self>> {
        let (url, named) = match args.scrape_metrics.as_deref().map(str::trim) {
            Some("none") => return Ok(None),
            Some(url) => (url.to_owned(), true),
            None => (scrape::metrics_url(target), false),
        };
        let queue = queue.clone();
        let reduce: Reduce<Point> = Arc::new(move |page| {
            let server = ServerSample::of(page);
            if let Some(waiting) = server.and_then(|s| s.waiting) {
                queue.set(waiting);
            }
            let gpu = GpuScrape::of(page, Instant::now());
            (server.is_some() || gpu.is_some()).then_some(Point { server, gpu })
        });
        match Scraper::start(&url, args.scrape_interval, reduce).await {
            Ok(scraper) => {
                tracing::debug!(%url, "scraping metrics during the run");
                Ok(Some(Self {
                    scraper,
                    interval: args.scrape_interval,
                }))
            }
            Err(err) if named => Err(anyhow::Error::new(err).context("--scrape-metrics")),
            Err(err) => {
                tracing::debug!(%err, "no metrics scraped");
                Ok(None)
            }
        }
    }

    /// Stops scraping and turns the scrapes into the report's sections: the
    /// GPU's over the measured window (`window.0` to `window.1` ns after
    /// `started`), the server's time line from `started`.
    pub async fn finish(self, started: Instant, window: Option<(u64, u64)>) -> Observed {
        let url = self.scraper.url().to_owned();
        let points = self.scraper.finish().await;
        let gpu_scrapes: Vec<GpuScrape> =
            points.iter().filter_map(|(_, p)| p.gpu.clone()).collect();
        let gpu = (!gpu_scrapes.is_empty()).then(|| {
            let window = window.map(|(from, to)| {
                (
                    started + Duration::from_nanos(from),
                    started + Duration::from_nanos(to),
                )
            });
            gpu::measure(&gpu_scrapes, window)
        });
        let server_points: Vec<(Instant, ServerSample)> = points
            .iter()
            .filter_map(|(at, p)| Some((*at, p.server?)))
            .collect();
        let server = server_metrics(&server_points, started, url, self.interval);
        Observed { gpu, server }
    }
}

fn server_metrics(
    points: &[(Instant, ServerSample)],
    started: Instant,
    url: String,
    interval: Duration,
) -> Option<ServerMetrics> {
    let (_, first) = points.first()?;
    let since_start = |at: Instant| match at.checked_duration_since(started) {
        Some(after) => after.as_secs_f64(),
        None => -started.duration_since(at).as_secs_f64(),
    };
    let source = match first.flavour {
        ServerFlavour::Isobench => "isobench",
        ServerFlavour::Vllm => "vllm",
        ServerFlavour::Tgi => "tgi",
        ServerFlavour::Sglang => "sglang",
    };
    Some(ServerMetrics {
        url,
        source: source.to_owned(),
        interval_s: interval.as_secs_f64(),
        t_s: points.iter().map(|(at, _)| since_start(*at)).collect(),
        running: points.iter().map(|(_, s)| s.running).collect(),
        waiting: points.iter().map(|(_, s)| s.waiting).collect(),
        kv_usage: points.iter().map(|(_, s)| s.kv_usage).collect(),
        batch_size: std::iter::once(None)
            .chain(
                points
                    .windows(2)
                    .map(|pair| pair[1].1.mean_batch_since(&pair[0].1)),
            )
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        endpoint: EndpointArgs,
    }

    fn args(extra: &[&str]) -> EndpointArgs {
        let mut argv = vec!["test"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).endpoint
    }

    /// A `/metrics` endpoint on 127.0.0.1 serving `page(n)` at the n-th scrape.
    async fn metrics_server(page: fn(u64) -> String) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for scrape in 0u64.. {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                let body = page(scrape);
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        url
    }

    /// A GPU server whose GPU drew 100 J more, ran 10 more eager steps,
    /// spent 5 ms more in forwards and whose engine slept 1 ms more at
    /// each scrape.
    fn gpu_page(scrape: u64) -> String {
        format!(
            "isobench_eager_steps_total {}\n\
             isobench_cuda_graph_replays_total 0\n\
             isobench_gpu_info{{gpu=\"0\",name=\"NVIDIA H200\",driver=\"580.1\"}} 1\n\
             isobench_gpu_memory_total_bytes 1000\n\
             isobench_gpu_memory_peak_bytes {}\n\
             isobench_gpu_energy_joules_total {}\n\
             isobench_step_device_seconds_sum{{phase=\"decode\"}} {}\n\
             isobench_engine_idle_seconds_total {}\n",
            10 * scrape,
            500 + scrape,
            100 * scrape,
            0.005 * scrape as f64,
            0.001 * scrape as f64
        )
    }

    #[tokio::test]
    async fn a_gpu_server_s_metrics_are_read_over_http() {
        let url = metrics_server(gpu_page).await;
        let started = Instant::now();
        let queue = LiveGauge::default();
        let observer = Observer::start(&args(&[]), &url, &queue)
            .await
            .unwrap()
            .expect("the endpoint describes a GPU");
        tokio::time::sleep(scrape::DEFAULT_INTERVAL * 3).await;
        let window = started.elapsed().as_nanos() as u64;
        let observed = observer.finish(started, Some((0, window))).await;
        assert!(observed.server.is_none(), "no server gauges on that page");
        let m = observed.gpu.unwrap();
        assert_eq!(
            (m.name.as_str(), m.driver.as_str(), m.index),
            ("NVIDIA H200", "580.1", 0)
        );
        assert!(m.eager_steps >= 20, "{m:?}");
        assert!(m.peak_memory_bytes >= 502, "{m:?}");
        let energy = m.energy_j.unwrap();
        assert!(
            energy > 0.0 && energy <= 100.0 * m.eager_steps as f64 / 10.0,
            "{m:?}"
        );
        // Forward time grows with the energy, 5 ms for each 100 J.
        let busy = m.device_busy_s.unwrap();
        assert!((busy - energy / 100.0 * 0.005).abs() < 1e-9, "{m:?}");
        // And the engine's idle time, 1 ms for each 100 J.
        let idle = m.engine_idle_s.unwrap();
        assert!((idle - energy / 100.0 * 0.001).abs() < 1e-9, "{m:?}");
    }

    /// A page as vLLM 0.10 writes it (abridged, other families left in):
    /// the scraper's time line and the live queue come from its gauges.
    fn vllm_page(scrape: u64) -> String {
        format!(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {}.0\n\
             # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {}.0\n\
             # HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
             # TYPE vllm:kv_cache_usage_perc gauge\n\
             vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} 0.{}\n\
             # HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
             # TYPE vllm:prompt_tokens_total counter\n\
             vllm:prompt_tokens_total{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} 123456.0\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.001\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} 0.0\n\
             python_gc_objects_collected_total{{generation=\"0\"}} 12345.0\n",
            8 + scrape,
            scrape,
            (scrape % 9) + 1
        )
    }

    #[tokio::test]
    async fn a_canned_vllm_page_gives_the_servers_time_line() {
        let url = metrics_server(vllm_page).await;
        let started = Instant::now();
        let queue = LiveGauge::default();
        let observer = Observer::start(&args(&["--scrape-interval", "50ms"]), &url, &queue)
            .await
            .unwrap()
            .expect("a vLLM page is read");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let observed = observer.finish(started, None).await;
        assert!(observed.gpu.is_none());
        let server = observed.server.unwrap();
        assert_eq!(server.source, "vllm");
        assert!(server.url.ends_with("/metrics"));
        let n = server.t_s.len();
        assert!(n >= 3, "{server:?}");
        // Scrape k served running 8 + k, waiting k, KV 0.(k % 9 + 1).
        for (k, ((running, waiting), kv)) in server
            .running
            .iter()
            .zip(&server.waiting)
            .zip(&server.kv_usage)
            .enumerate()
        {
            let k = k as f64;
            assert_eq!(*running, Some(8.0 + k));
            assert_eq!(*waiting, Some(k));
            assert!(kv.is_some_and(|kv| kv > 0.0 && kv < 1.0));
        }
        assert!(
            server.t_s.windows(2).all(|w| w[0] < w[1]),
            "{:?}",
            server.t_s
        );
        assert!(server.batch_size.iter().all(Option::is_none));
        assert_eq!(queue.get(), server.waiting.last().copied().flatten());
    }

    #[tokio::test]
    async fn a_named_url_without_metrics_is_an_error_and_the_default_is_quiet() {
        let err = Observer::start(
            &args(&["--scrape-metrics", "http://127.0.0.1:9/metrics"]),
            "http://127.0.0.1:9",
            &LiveGauge::default(),
        )
        .await
        .err()
        .unwrap();
        let message = format!("{err:#}");
        assert!(
            message.contains("--scrape-metrics") && message.contains("127.0.0.1:9/metrics"),
            "{message}"
        );
        let quiet = Observer::start(&args(&[]), "http://127.0.0.1:9", &LiveGauge::default())
            .await
            .unwrap();
        assert!(quiet.is_none());
        let off = Observer::start(
            &args(&["--scrape-metrics", "none"]),
            "http://127.0.0.1:9",
            &LiveGauge::default(),
        )
        .await
        .unwrap();
        assert!(off.is_none());
    }
}
