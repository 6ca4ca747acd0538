//! Every file shipped in `workloads/` loads and plans, with and without a
//! tokenizer, and plans what its comments promise.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{count_tokens, first, load_tokenizer, text, tiny_tokenizer, workloads};
use isobench_workload::{ApiKind, ArrivalKind, PromptTokens, Workload};

fn shipped_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(workloads())
        .expect("workloads/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

fn load(name: &str) -> Workload {
    Workload::from_file(&workloads().join(name)).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn every_shipped_workload_loads_and_plans() {
    let files = shipped_files();
    let names: Vec<String> = files
        .iter()
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in ["short", "long", "batched", "chat", "quickstart"] {
        assert!(
            names.iter().any(|name| name == expected),
            "{expected} missing from {names:?}"
        );
    }
    let tokenizer = load_tokenizer();
    let tokenizer_path = tiny_tokenizer();
    for file in &files {
        let workload = Workload::from_file(file).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(workload.name(), file.file_stem().unwrap().to_string_lossy());
        assert!(workload.description().is_some(), "{}", file.display());
        for tokenizer_override in [None, Some(tokenizer_path.as_path())] {
            let plan = workload
                .plan(tokenizer_override)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let exact = tokenizer_override.is_some();
            let expected_source = if exact {
                PromptTokens::Tokenizer
            } else {
                PromptTokens::Approximate
            };
            assert_eq!(plan.prompt_tokens, expected_source);
            let warmup = plan.shape.warmup;
            let requests = first(plan, 48);
            assert!(!requests.is_empty(), "{}", file.display());
            for (position, request) in requests.iter().enumerate() {
                assert_eq!(request.index, position as u64);
                assert_eq!(request.warmup, (position as u64) < warmup);
                assert!(request.input_tokens >= 1 && request.max_tokens >= 1);
                if exact {
                    assert_eq!(
                        count_tokens(&tokenizer, text(request)),
                        request.input_tokens,
                        "{}: request {position}",
                        file.display()
                    );
                }
            }
            assert!(requests.windows(2).all(|w| w[0].offset <= w[1].offset));
        }
    }
}

#[test]
fn quickstart_is_small_and_exact_with_the_model_tokenizer() {
    let workload = load("quickstart.toml");
    assert_eq!(
        workload.tokenizer(),
        None,
        "the binary passes the model's tokenizer"
    );
    let plan = workload.plan(Some(&tiny_tokenizer())).unwrap();
    assert_eq!(plan.shape.max_concurrency, Some(4));
    assert_eq!(plan.shape.max_requests, Some(40));
    let requests: Vec<_> = plan.requests.collect();
    assert_eq!(requests.len(), 44, "40 measured and 4 warm-up requests");
    assert!(requests.iter().all(|r| (28..=36).contains(&r.input_tokens)));
    assert!(
        requests
            .iter()
            .all(|r| r.max_tokens == 32 && r.offset.is_none())
    );
}

#[test]
fn chat_is_a_ramped_poisson_chat_service_with_slos() {
    let workload = load("chat.toml");
    assert_eq!(workload.api(), ApiKind::Chat);
    assert_eq!(workload.arrival(), ArrivalKind::Poisson);
    assert_eq!(workload.sampling().top_p, Some(0.95));
    let slo: Vec<(&str, &str)> = workload
        .slo()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(slo, [("ttft_p99", "500ms"), ("tpot_p99", "50ms")]);
    let plan = workload.plan(None).unwrap();
    assert_eq!(
        plan.shape.description,
        "poisson 4 req/s, ramp-up 10s, at most 64 in flight, 10 warm-up"
    );
    assert_eq!(plan.shape.offered_rate, Some(4.0));
    assert_eq!(plan.shape.duration, Some(Duration::from_secs(120)));
    let requests: Vec<_> = plan.requests.collect();
    // Poisson at 4/s for 120 s, minus the ramp's deficit of 20: about 460.
    assert!((400..520).contains(&requests.len()), "{}", requests.len());
    assert!(requests.last().unwrap().offset.unwrap() < Duration::from_secs(120));
}

#[test]
fn batched_sends_bursts_of_8_to_32() {
    let plan = load("batched.toml").plan(None).unwrap();
    assert_eq!(plan.shape.max_concurrency, None);
    assert_eq!(
        plan.shape.offered_rate,
        Some(4.0),
        "20 requests per burst / 5 s"
    );
    let requests: Vec<_> = plan.requests.collect();
    assert_eq!(requests.len(), 200);
    let mut bursts = std::collections::BTreeMap::new();
    for request in &requests {
        let offset = request.offset.unwrap();
        assert_eq!(offset.as_nanos() % 5_000_000_000, 0);
        *bursts.entry(offset).or_insert(0) += 1;
    }
    let sizes: Vec<u32> = bursts.values().copied().collect();
    // The last burst is cut by max_requests.
    assert!(
        sizes[..sizes.len() - 1]
            .iter()
            .all(|size| (8..=32).contains(size)),
        "{sizes:?}"
    );
}

#[test]
fn trace_replays_the_example_trace_at_its_timestamps() {
    let workload = load("trace.toml");
    let plan = workload.plan(None).unwrap();
    assert_eq!(plan.shape.max_requests, Some(120));
    let requests: Vec<_> = plan.requests.collect();
    assert_eq!(requests.len(), 120);
    let first_line = std::fs::read_to_string(workloads().join("data/example-trace.jsonl"))
        .unwrap()
        .lines()
        .next()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .unwrap();
    assert_eq!(requests[0].offset, Some(Duration::ZERO));
    assert_eq!(
        requests[0].input_tokens,
        first_line["input_length"].as_u64().unwrap() as u32
    );
    assert_eq!(
        requests[0].max_tokens,
        first_line["output_length"].as_u64().unwrap() as u32
    );
}

#[test]
fn sharegpt_sample_prompts_come_from_the_dump() {
    let workload = load("sharegpt.toml");
    let dump = std::fs::read_to_string(workloads().join("data/sharegpt-sample.json")).unwrap();
    let requests = first(workload.plan(Some(&tiny_tokenizer())).unwrap(), 30);
    assert_eq!(requests.len(), 30, "the sample repeats");
    for request in &requests {
        let escaped = serde_json::to_string(text(request)).unwrap();
        assert!(dump.contains(escaped.trim_matches('"')), "{escaped}");
    }
}
