//! Property-based fuzzing of the parsers users feed by hand: a workload
//! file, an empirical length file and a compact distribution string. Any
//! input gives an error or a plan, never a panic. Bounded: a few hundred
//! cases each, inside `cargo test`.

mod common;

use std::path::Path;

use isobench_workload::{Distribution, Workload};
use proptest::prelude::*;

/// Values a field may get: numbers around the edges, strings, durations,
/// tables of a length distribution, and junk.
/// A value with no large number in it.
fn small(text: String) -> (String, bool) {
    (text, true)
}

fn value() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        (-3i64..200).prop_map(|n| small(n.to_string())),
        prop_oneof![Just(0i64), Just(i64::MAX), Just(i64::MIN), Just(4_294_967_296)]
            .prop_map(|n| (n.to_string(), false)),
        prop_oneof![Just(-0.5f64), Just(0.0), Just(0.25), Just(1e300), Just(3.5)]
            .prop_map(|x| (format!("{x:?}"), x.abs() < 1e3)),
        Just(small("nan".into())),
        Just(small("inf".into())),
        prop_oneof![
            Just("\"1s\""),
            Just("\"0s\""),
            Just("\"soon\""),
            Just("\"poisson\""),
            Just("\"closed\""),
            Just("\"gamma\""),
            Just("\"burst\""),
            Just("\"trace\""),
            Just("\"constant\""),
            Just("\"chat\""),
            Just("\"completions\""),
            Just("true"),
            Just("[]"),
            Just("{}"),
        ]
        .prop_map(|text: &str| small(text.to_owned())),
        (prop_oneof![
            Just("uniform"),
            Just("normal"),
            Just("lognormal"),
            Just("fixed"),
            Just("empirical"),
            Just("zipf")
        ], -2i64..100, -2i64..100)
            .prop_map(|(dist, a, b)| small(format!(
                "{{ dist = \"{dist}\", min = {a}, max = {b}, mean = {a}, std_dev = {b}, value = {a} }}"
            ))),
        "[ -~]{0,12}".prop_map(|junk| small(format!("\"{}\"", junk.replace(['"', '\\'], "")))),
    ]
}

const REQUEST_KEYS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "ignore_eos",
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
];
const LOAD_KEYS: &[&str] = &[
    "arrival",
    "rate",
    "burstiness",
    "concurrency",
    "ramp_up",
    "burst_size",
    "burst_interval",
    "max_requests",
    "duration",
    "warmup",
    "cap",
];
const TOP_KEYS: &[&str] = &["api", "stream", "seed", "timeout", "name"];

/// A workload file built from random fields of each section; `small` when
/// every number in it is small enough to plan a few requests quickly.
fn workload_text() -> impl Strategy<Value = (String, bool)> {
    let field = |keys: &'static [&'static str]| (proptest::sample::select(keys), value());
    (
        proptest::collection::vec(field(TOP_KEYS), 0..3),
        proptest::collection::vec(field(REQUEST_KEYS), 0..5),
        proptest::collection::vec(field(LOAD_KEYS), 0..6),
    )
        .prop_map(|(top, request, load)| {
            let mut small = true;
            let mut text = String::new();
            let mut section = |header: &str, fields: Vec<(&str, (String, bool))>| {
                text.push_str(header);
                let mut seen = std::collections::HashSet::new();
                for (key, (value, is_small)) in fields {
                    if seen.insert(key) {
                        small &= is_small;
                        text.push_str(&format!("{key} = {value}\n"));
                    }
                }
            };
            section("", top);
            section("[request]\n", request);
            section("[load]\n", load);
            (text, small)
        })
}

/// Plans a workload and draws a few requests; panics are the failure.
fn exercise(text: &str, small: bool) {
    let Ok(workload) = Workload::from_toml(text, Path::new("fuzz.toml")) else {
        return;
    };
    if let Ok(plan) = workload.plan(None)
        && small
    {
        for request in plan.requests.take(3) {
            assert!(request.input_tokens >= 1, "{text}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_workload_text_is_an_error_or_a_plan(text in "\\PC{0,200}") {
        exercise(&text, true);
    }

    #[test]
    fn any_workload_fields_are_an_error_or_a_plan((text, small) in workload_text()) {
        exercise(&text, small);
    }

    #[test]
    fn any_distribution_string_is_an_error_or_a_distribution(text in "[a-z]{0,12}:?[-0-9.,e]{0,16}") {
        let _ = text.parse::<Distribution>();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn any_empirical_length_file_is_an_error_or_a_distribution(
        lines in proptest::collection::vec("[ -~]{0,20}|[0-9]{1,6}(,[0-9.]{1,5})?", 0..12),
    ) {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("lengths.csv"), lines.join("\n")).unwrap();
        let path = folder.path().join("w.toml");
        let text = "[request]\ninput_tokens = { dist = \"empirical\", path = \"lengths.csv\", max = 64 }\n\
                    output_tokens = 4\n[load]\nmax_requests = 3\n";
        if let Ok(workload) = Workload::from_toml(text, &path)
            && let Ok(plan) = workload.plan(None)
        {
            let mut requests = plan.requests;
            prop_assert!(requests.all(|r| (1..=64).contains(&r.input_tokens)));
        }
    }
}
