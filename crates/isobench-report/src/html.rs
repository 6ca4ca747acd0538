//! `isobench report --html`: one self-contained page (no script, no
//! stylesheet or font to fetch, every plot an inline SVG) holding the
//! tables ([`crate::tables`]) and the plots ([`crate::figures`]) of the
//! runs given, and, with two runs or more, each run compared with the
//! first ([`crate::comparison`]). [`markdown`] gives the same tables for a
//! pull request.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::comparison;
use crate::figures::figures;
use crate::tables::{self, NamedReport, Table, escape};

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:960px;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:13px}\
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}\
th:first-child,td:first-child,td:last-child{text-align:left}\
figure{margin:2em 0}figcaption{font-size:13px;color:#555;margin:.4em 0}\
h2{border-bottom:1px solid #ddd;padding-bottom:.2em}";

/// The sections of the page and of the Markdown, as (title, table) pairs.
fn sections(runs: &[NamedReport]) -> Vec<(String, Table)> {
    let mut sections = vec![("Runs".to_owned(), tables::runs(runs))];
    let mut series: BTreeMap<&str, Vec<&NamedReport>> = BTreeMap::new();
    for run in runs {
        if let Some(step) = &run.report.step {
            series.entry(step.series.as_str()).or_default().push(run);
        }
    }
    for (name, mut steps) in series {
        steps.sort_by_key(|run| run.report.step.as_ref().map_or(0, |s| s.index));
        sections.push((
            format!("Steps of {name} (steady windows)"),
            tables::sweep(&steps),
        ));
    }
    if let Some((baseline, candidates)) = runs.split_first() {
        for candidate in candidates {
            let comparisons = comparison::compare(&baseline.report, &candidate.report);
            sections.push((
                format!("{} against {}", candidate.name, baseline.name),
                tables::comparison(&candidate.name, &comparisons),
            ));
        }
    }
    sections
}

/// The runs' tables in Markdown, one `##` section each.
pub fn markdown(runs: &[NamedReport]) -> String {
    let mut out = String::from("# isobench report\n\n");
    for (title, table) in sections(runs) {
        let _ = write!(out, "## {title}\n\n{}\n", table.markdown());
    }
    out
}

/// The whole page.
pub fn page(runs: &[NamedReport]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>isobench report</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>isobench report</h1>\n"
    );
    out.push_str("<ul>\n");
    for run in runs {
        let r = &run.report.run;
        let _ = writeln!(
            out,
            "<li><b>{}</b>: workload {}, {} at {} (model {}), started {}</li>",
            escape(&run.name),
            escape(&r.workload),
            escape(&r.load),
            escape(&r.target),
            escape(&r.model),
            escape(&r.started_at)
        );
    }
    out.push_str("</ul>\n");
    for (title, table) in sections(runs) {
        let _ = write!(out, "<h2>{}</h2>\n{}", escape(&title), table.html());
    }
    out.push_str("<h2>Plots</h2>\n");
    if runs.len() > crate::figures::MAX_TIMELINES {
        let _ = writeln!(
            out,
            "<p>Time lines are drawn for the first {} runs given; pass fewer reports to see the others'.</p>",
            crate::figures::MAX_TIMELINES
        );
    }
    for figure in figures(runs) {
        let _ = write!(
            out,
            "<figure class=\"plot\" id=\"{}\">\n<h3>{}</h3>\n{}<figcaption>{}</figcaption>\n</figure>\n",
            escape(&figure.id),
            escape(&figure.title),
            figure.svg,
            escape(&figure.caption)
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}
