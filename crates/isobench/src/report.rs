//! `isobench report RESULT.json [...]`: the tables of several runs (one
//! row each, each sweep's or search's steps from their steady windows,
//! each run against the first) as text or, with `--markdown`, Markdown; and
//! with `--html FILE`, one self-contained page with the tables and SVG
//! plots (latency CDFs, each run's time line with the server's metrics,
//! sweep curves, runs side by side), and with `--svg-dir DIR` each plot as
//! its own SVG file. The page and plots are made in `isobench_report::html`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use isobench_report::{NamedReport, Report, figures, html, tables};

use crate::compare::name;
use crate::run::precheck;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// JSON reports written by `isobench run`, `sweep` or `plan`.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    /// Write one self-contained HTML page (tables and SVG plots) here.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the tables as Markdown (for a pull request) instead of text.
    #[arg(long)]
    markdown: bool,
    /// Also write each plot as its own SVG file in this folder (ID.svg),
    /// to embed in documents.
    #[arg(long, value_name = "DIR")]
    svg_dir: Option<PathBuf>,
}

pub fn report(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.html {
        precheck::writable("--html", path)?;
    }
    if let Some(dir) = &args.svg_dir {
        precheck::writable("--svg-dir", &dir.join("plot.svg"))?;
    }
    let runs = args
        .reports
        .iter()
        .map(|path| {
            Ok(NamedReport {
                name: name(path),
                report: Report::read_json(path)?,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.markdown {
        print!("{}", html::markdown(&runs));
    } else {
        print!("{}", tables::runs(&runs).text());
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html::page(&runs))
            .with_context(|| format!("--html {}: cannot write it", path.display()))?;
        eprintln!("html report: {}", path.display());
    }
    if let Some(dir) = &args.svg_dir {
        for figure in figures::figures(&runs) {
            let path = dir.join(format!("{}.svg", figure.id));
            std::fs::write(&path, &figure.svg)
                .with_context(|| format!("--svg-dir: cannot write {}", path.display()))?;
            eprintln!("plot: {} ({})", path.display(), figure.title);
        }
    }
    Ok(ExitCode::SUCCESS)
}
