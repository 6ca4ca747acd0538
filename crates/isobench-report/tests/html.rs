//! The HTML report and its Markdown tables, from runs with samples, the
//! server's metrics and sweep steps; and the page opened in headless
//! Chromium (Debian's package, installed when absent), every plot's SVG
//! checked in the DOM the browser built.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use isobench_report::{NamedReport, figures, html};

fn runs() -> Vec<NamedReport> {
    let mut runs = vec![
        NamedReport {
            name: "static".into(),
            report: common::report_with_samples(3, 1.0),
        },
        NamedReport {
            name: "continuous".into(),
            report: common::report_with_samples(5, 0.8),
        },
    ];
    for (i, report) in common::sweep_steps("sweep-chat").into_iter().enumerate() {
        runs.push(NamedReport {
            name: format!("step-{i:02}"),
            report,
        });
    }
    runs
}

/// Colours the plots draw data in (the palette), as SVG writes them.
const DATA_COLOURS: [&str; 8] = [
    "#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F",
];

/// The figures of a page (or a DOM dump of it): each `<figure class="plot"`
/// element's text.
fn figure_blocks(page: &str) -> Vec<&str> {
    page.split("<figure class=\"plot\"")
        .skip(1)
        .map(|rest| &rest[..rest.find("</figure>").unwrap_or(rest.len())])
        .collect()
}

fn assert_plots_drawn(page: &str, expected: usize) {
    let blocks = figure_blocks(page);
    assert_eq!(blocks.len(), expected, "figures in the page");
    for block in blocks {
        let id = block.split('"').nth(1).unwrap_or("?");
        assert!(block.contains("<svg"), "figure {id} has no SVG");
        let data = DATA_COLOURS
            .iter()
            .map(|c| block.matches(&format!("=\"{c}\"")).count())
            .sum::<usize>();
        assert!(
            data >= 2,
            "figure {id} draws no data ({data} coloured marks)"
        );
    }
}

#[test]
fn the_page_holds_every_table_and_plot_and_fetches_nothing() {
    let runs = runs();
    let page = html::page(&runs);
    let expected = figures::figures(&runs).len();
    // 3 CDFs, the sweep curve, 2 side-by-side charts, a time line per run.
    assert_eq!(expected, 3 + 1 + 2 + runs.len());
    assert_plots_drawn(&page, expected);
    for needle in [
        "<h2>Runs</h2>",
        "Steps of sweep-chat (steady windows)",
        "continuous against static",
        "waiting (queue)",
        "KV cache in use",
        "Throughput against latency",
    ] {
        assert!(page.contains(needle), "no {needle:?} in the page");
    }
    // The planted 20% TTFT difference is found by the comparison table.
    assert!(page.contains("continuous's p50 TTFT is"), "no verdict");
    for external in [
        "<script",
        "<link",
        "src=\"http",
        "href=\"http",
        "@import",
        "url(",
    ] {
        assert!(!page.contains(external), "the page refers to {external}");
    }
    let markdown = html::markdown(&runs);
    assert!(markdown.starts_with("# isobench report\n"));
    assert!(markdown.contains("| run | done |"), "{markdown}");
    assert!(
        markdown.contains("## Steps of sweep-chat (steady windows)"),
        "{markdown}"
    );
}

const CHROMIUM: &str = "/usr/bin/chromium";

/// Debian's chromium, installed with apt-get when absent (CI runs as root).
fn ensure_chromium() -> PathBuf {
    let path = PathBuf::from(CHROMIUM);
    if path.exists() {
        return path;
    }
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_owned();
    assert_eq!(
        uid, "0",
        "{CHROMIUM} is missing and this test installs Debian's chromium package itself, which needs root \
         (uid {uid}): run `apt-get install chromium` as root, or run the tests as root"
    );
    for args in [
        &["update", "-qq"][..],
        &[
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "chromium",
        ][..],
    ] {
        let status = Command::new("timeout")
            .arg("900")
            .arg("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .expect("apt-get runs");
        assert!(
            status.success(),
            "apt-get {args:?} failed ({status}): chromium could not be installed"
        );
    }
    assert!(
        path.exists(),
        "apt-get installed chromium, but {CHROMIUM} is not there"
    );
    path
}

/// Runs chromium headless on `page`, printing the DOM it built; killed
/// after `limit`.
fn dump_dom(chromium: &Path, page: &Path, profile: &Path, limit: Duration) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        let _ = stdout.read_to_string(&mut dom);
        dom
    });
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

#[test]
fn headless_chromium_renders_every_plot() {
    let chromium = ensure_chromium();
    let runs = runs();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, html::page(&runs)).unwrap();
    let profile = dir.path().join("profile");
    let dom = dump_dom(&chromium, &page, &profile, Duration::from_secs(120));
    assert!(
        dom.contains("<h1>isobench report</h1>"),
        "the DOM is not the page: {}",
        &dom[..dom.len().min(500)]
    );
    assert_plots_drawn(&dom, figures::figures(&runs).len());
    // The browser parsed the SVGs as SVG: their polylines kept their points.
    assert!(dom.matches("<polyline").count() > 20);
}
