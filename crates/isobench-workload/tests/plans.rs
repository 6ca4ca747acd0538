//! What plans contain: seeded determinism, stop conditions, warm-ups,
//! datasets and traces, exact prompt lengths with a real tokenizer.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{count_tokens, first, load_tokenizer, text, tiny_tokenizer, workload, workload_in};
use isobench_workload::{Overrides, PlannedRequest, PromptTokens, Workload};

const SYNTHETIC: &str = "seed = 7\n[request]\ninput_tokens = { dist = \"uniform\", min = 8, max = 64 }\n\
                         output_tokens = { dist = \"lognormal\", mean = 40, std_dev = 20 }\n";

fn poisson(rate: f64) -> Workload {
    workload(&format!(
        "{SYNTHETIC}[load]\nrate = {rate:?}\nmax_requests = 40\n"
    ))
}

fn contents(requests: &[PlannedRequest]) -> Vec<(String, u32, u32)> {
    requests
        .iter()
        .map(|r| (text(r).to_string(), r.input_tokens, r.max_tokens))
        .collect()
}

#[test]
fn the_same_seed_plans_the_same_requests_at_the_same_offsets() {
    let a: Vec<_> = poisson(10.0).plan(None).unwrap().requests.collect();
    let b: Vec<_> = poisson(10.0).plan(None).unwrap().requests.collect();
    assert_eq!(a, b);
    let mut reseeded = poisson(10.0);
    reseeded
        .apply(&Overrides {
            seed: Some(8),
            ..Overrides::default()
        })
        .unwrap();
    let c: Vec<_> = reseeded.plan(None).unwrap().requests.collect();
    assert_ne!(contents(&a), contents(&c));
    assert_ne!(a[1].offset, c[1].offset);
}

#[test]
fn prompts_and_lengths_do_not_depend_on_the_load() {
    let slow: Vec<_> = poisson(1.0).plan(None).unwrap().requests.collect();
    let fast: Vec<_> = poisson(50.0).plan(None).unwrap().requests.collect();
    let closed: Vec<_> = workload(&format!(
        "{SYNTHETIC}[load]\nconcurrency = 4\nmax_requests = 40\n"
    ))
    .plan(None)
    .unwrap()
    .requests
    .collect();
    assert_eq!(contents(&slow), contents(&fast));
    assert_eq!(contents(&slow), contents(&closed));
    assert!(slow[39].offset > fast[39].offset);
}

#[test]
fn prompts_differ_between_requests() {
    let requests = first(poisson(10.0).plan(None).unwrap(), 40);
    let distinct: HashSet<&str> = requests.iter().map(text).collect();
    assert_eq!(distinct.len(), 40);
    let openings: HashSet<String> = requests
        .iter()
        .map(|r| text(r).split(' ').take(3).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        openings.len(),
        40,
        "no two prompts share their first three words"
    );
}

#[test]
fn warmups_come_first_and_are_not_counted_in_max_requests() {
    let plan = workload(&format!(
        "{SYNTHETIC}[load]\nconcurrency = 2\nmax_requests = 5\nwarmup = 3\n"
    ))
    .plan(None)
    .unwrap();
    assert_eq!((plan.shape.warmup, plan.shape.max_requests), (3, Some(5)));
    let flags: Vec<bool> = plan.requests.map(|r| r.warmup).collect();
    assert_eq!(flags, [true, true, true, false, false, false, false, false]);
}

#[test]
fn an_open_loop_with_a_duration_ends_at_the_duration() {
    let plan = workload(&format!(
        "{SYNTHETIC}[load]\narrival = \"constant\"\nrate = 10.0\nduration = \"2s\"\nwarmup = 5\n"
    ))
    .plan(None)
    .unwrap();
    assert_eq!(plan.shape.max_requests, None);
    let requests: Vec<_> = plan.requests.collect();
    assert_eq!(requests.len(), 20, "offsets 0, 0.1, ..., 1.9 s");
    assert_eq!(
        requests.last().unwrap().offset,
        Some(Duration::from_millis(1900))
    );
}

#[test]
fn a_closed_loop_with_a_duration_is_unbounded() {
    let plan = workload(&format!(
        "{SYNTHETIC}[load]\nconcurrency = 2\nduration = \"1s\"\n"
    ))
    .plan(None)
    .unwrap();
    assert_eq!(plan.requests.take(500).count(), 500);
}

#[test]
fn synthetic_prompts_have_exact_lengths_with_a_tokenizer() {
    let tokenizer = load_tokenizer();
    let plan = poisson(10.0).plan(Some(&tiny_tokenizer())).unwrap();
    assert_eq!(plan.prompt_tokens, PromptTokens::Tokenizer);
    for request in plan.requests {
        assert!((8..=64).contains(&request.input_tokens));
        assert_eq!(
            count_tokens(&tokenizer, text(&request)),
            request.input_tokens
        );
    }
    // The same seed gives the same lengths with or without a tokenizer.
    let approximate = first(poisson(10.0).plan(None).unwrap(), 40);
    let exact = first(poisson(10.0).plan(Some(&tiny_tokenizer())).unwrap(), 40);
    let lengths = |requests: &[PlannedRequest]| {
        requests
            .iter()
            .map(|r| (r.input_tokens, r.max_tokens))
            .collect::<Vec<_>>()
    };
    assert_eq!(lengths(&approximate), lengths(&exact));
}

#[test]
fn request_fields_pass_through() {
    let workload = workload(
        "api = \"chat\"\nstream = false\ntimeout = \"90s\"\n\
         [request]\ninput_tokens = 4\noutput_tokens = 4\nignore_eos = true\ntemperature = 0.5\ntop_k = 40\n\
         [request.headers]\nX-Team = \"perf\"\n\
         [request.extra_body]\nseed = 3\nlogit_bias = { \"50256\" = -100 }\nwhen = 2024-05-01T10:00:00Z\n",
    );
    assert!(!workload.stream());
    assert!(workload.ignore_eos());
    assert_eq!(workload.timeout(), Duration::from_secs(90));
    assert_eq!(workload.sampling().temperature, Some(0.5));
    assert_eq!(workload.sampling().top_k, Some(40));
    assert_eq!(
        workload.headers().get("X-Team").map(String::as_str),
        Some("perf")
    );
    assert_eq!(
        serde_json::Value::Object(workload.extra_body().clone()),
        serde_json::json!({"seed": 3, "logit_bias": {"50256": -100}, "when": "2024-05-01T10:00:00Z"})
    );
}

fn trace_folder() -> tempfile::TempDir {
    let folder = tempfile::tempdir().unwrap();
    let records: String = (0..10)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}}}\n",
                1000 + i * 500,
                10 + i,
                20 + i
            )
        })
        .collect();
    std::fs::write(folder.path().join("trace.jsonl"), records).unwrap();
    folder
}

#[test]
fn traces_replay_at_their_timestamps_rescaled() {
    let folder = trace_folder();
    let workload = workload_in(
        folder.path(),
        "trace.toml",
        "[request]\ndataset = { kind = \"trace\", path = \"trace.jsonl\", time_scale = 0.5 }\n\
         [load]\narrival = \"trace\"\n",
    );
    let plan = workload.plan(Some(&tiny_tokenizer())).unwrap();
    // 9 gaps of 250 ms after scaling.
    assert_eq!(plan.shape.offered_rate, Some(4.0));
    let requests: Vec<_> = plan.requests.collect();
    assert_eq!(requests.len(), 10, "a finite trace stops the run by itself");
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(request.offset, Some(Duration::from_millis(250 * i as u64)));
        assert_eq!(
            (request.input_tokens, request.max_tokens),
            (10 + i as u32, 20 + i as u32)
        );
    }
}

#[test]
fn traces_can_feed_lengths_to_another_arrival_process() {
    let folder = trace_folder();
    let workload = workload_in(
        folder.path(),
        "lengths.toml",
        "[request]\ndataset = { kind = \"trace\", path = \"trace.jsonl\", repeat = true }\n\
         output_tokens = 7\n[load]\nrate = 100.0\nmax_requests = 25\n",
    );
    let requests: Vec<_> = workload.plan(None).unwrap().requests.collect();
    assert_eq!(requests.len(), 25);
    let inputs: Vec<u32> = requests.iter().map(|r| r.input_tokens).collect();
    assert_eq!(
        &inputs[..12],
        &[10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 10, 11]
    );
    assert!(
        requests.iter().all(|r| r.max_tokens == 7),
        "output_tokens replaces the trace's"
    );
    // A repeating trace cannot set the arrivals.
    let refused = Workload::from_toml(
        "[request]\ndataset = { kind = \"trace\", path = \"trace.jsonl\", repeat = true }\n\
         [load]\narrival = \"trace\"\n",
        &folder.path().join("w.toml"),
    )
    .unwrap_err();
    assert!(refused.to_string().contains("repeat = true"), "{refused}");
}

#[test]
fn sharegpt_lengths_are_counted_with_the_tokenizer_and_filtered() {
    let folder = tempfile::tempdir().unwrap();
    let long_reply = "word ".repeat(300);
    let dump = serde_json::json!([
        {"conversations": [{"from": "human", "value": "Tell me a story about a lighthouse keeper."},
                           {"from": "gpt", "value": "Once there was a keeper who counted ships at night."}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello there, how are you?"}]},
        {"conversations": [{"from": "human", "value": "Write a long essay about the sea and its moods."},
                           {"from": "gpt", "value": long_reply}]}
    ]);
    std::fs::write(folder.path().join("dump.json"), dump.to_string()).unwrap();
    let workload = workload_in(
        folder.path(),
        "sharegpt.toml",
        "api = \"chat\"\n[request.dataset]\nkind = \"sharegpt\"\npath = \"dump.json\"\nmax_output_tokens = 100\n",
    );
    let tokenizer = load_tokenizer();
    let plan = workload.plan(Some(&tiny_tokenizer())).unwrap();
    assert_eq!(
        plan.shape.max_requests, None,
        "known only once the dump is replayed"
    );
    let requests: Vec<_> = plan.requests.collect();
    // "Hi" is under 4 tokens, the essay's reply over 100.
    assert_eq!(requests.len(), 1);
    assert_eq!(
        text(&requests[0]),
        "Tell me a story about a lighthouse keeper."
    );
    assert_eq!(
        requests[0].input_tokens,
        count_tokens(&tokenizer, text(&requests[0]))
    );
    assert_eq!(
        requests[0].max_tokens,
        count_tokens(
            &tokenizer,
            "Once there was a keeper who counted ships at night."
        )
    );
    let none = workload_in(
        folder.path(),
        "none.toml",
        "[request.dataset]\nkind = \"sharegpt\"\npath = \"dump.json\"\nmin_input_tokens = 500\n",
    );
    let error = none.plan(None).unwrap_err().to_string();
    assert!(
        error.contains("no record passes the length filters"),
        "{error}"
    );
}
