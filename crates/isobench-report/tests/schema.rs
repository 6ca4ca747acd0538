//! The JSON report against docs/report.schema.json, and its key set against
//! a checked-in snapshot, so that a schema change is always deliberate.
//!
//! The validator is a small one written here for the subset of JSON Schema
//! the schema file uses (type, enum, required, properties,
//! additionalProperties, items, minimum, $ref into $defs); it rejects any
//! other keyword, so the file cannot silently rely on an unchecked one.

mod common;

use std::path::PathBuf;

use isobench_metrics::{Recorder, assess_validity};
use isobench_report::{GpuMeasurement, Report, table};
use serde_json::Value;

fn workspace_file(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn schema() -> Value {
    let path = workspace_file("docs/report.schema.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Checks `value` against `schema`; returns one line per violation.
fn validate(root: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = schema.as_object().expect("a schema is an object");
    for (keyword, rule) in schema {
        match keyword.as_str() {
            "$schema" | "$id" | "title" | "description" | "$defs" => {}
            "$ref" => {
                let name = rule
                    .as_str()
                    .unwrap()
                    .strip_prefix("#/$defs/")
                    .expect("local $ref");
                validate(root, &root["$defs"][name], value, at, errors);
            }
            "type" => {
                let types: Vec<&str> = match rule {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
                    _ => panic!("bad type at {at}"),
                };
                if !types.iter().any(|t| has_type(value, t)) {
                    errors.push(format!("{at}: {value} is not of type {types:?}"));
                }
            }
            "enum" => {
                if !rule.as_array().unwrap().contains(value) {
                    errors.push(format!("{at}: {value} is not one of {rule}"));
                }
            }
            "minimum" => {
                if value.as_f64().is_some_and(|v| v < rule.as_f64().unwrap()) {
                    errors.push(format!("{at}: {value} is below {rule}"));
                }
            }
            "required" => {
                if let Some(object) = value.as_object() {
                    for key in rule.as_array().unwrap() {
                        if !object.contains_key(key.as_str().unwrap()) {
                            errors.push(format!("{at}: missing key {key}"));
                        }
                    }
                }
            }
            "properties" => {
                if let Some(object) = value.as_object() {
                    for (key, property) in rule.as_object().unwrap() {
                        if let Some(v) = object.get(key) {
                            validate(root, property, v, &format!("{at}.{key}"), errors);
                        }
                    }
                }
            }
            "additionalProperties" => {
                let Some(object) = value.as_object() else {
                    continue;
                };
                let declared = schema.get("properties").and_then(Value::as_object);
                for (key, v) in object {
                    if declared.is_some_and(|d| d.contains_key(key)) {
                        continue;
                    }
                    match rule {
                        Value::Bool(false) => errors.push(format!("{at}: undeclared key {key}")),
                        Value::Bool(true) => {}
                        extra => validate(root, extra, v, &format!("{at}.{key}"), errors),
                    }
                }
            }
            "items" => {
                if let Some(items) = value.as_array() {
                    for (i, item) in items.iter().enumerate() {
                        validate(root, rule, item, &format!("{at}[{i}]"), errors);
                    }
                }
            }
            other => panic!("the schema uses `{other}` at {at}, which this test does not check"),
        }
    }
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_u64() || value.is_i64(),
        other => panic!("unknown type {other}"),
    }
}

fn violations(report: &Value) -> Vec<String> {
    let schema = schema();
    let mut errors = Vec::new();
    validate(&schema, &schema, report, "$", &mut errors);
    errors
}

fn json_of(report: &Report) -> Value {
    serde_json::from_str(&report.to_json()).unwrap()
}

#[test]
fn a_real_report_matches_the_schema() {
    let errors = violations(&json_of(&common::sample_report()));
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn an_empty_run_without_slos_matches_the_schema() {
    let summary = Recorder::new().summarize(std::time::Duration::ZERO);
    let validity = assess_validity(&summary, None);
    let mut run = common::run_meta();
    run.workload_file = None;
    run.seed = None;
    let report = Report::new(run, summary, validity);
    let json = json_of(&report);
    assert_eq!(json["summary"]["latency"]["ttft"], Value::Null);
    assert_eq!(json["request_goodput"], Value::Null);
    let errors = violations(&json);
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn the_validator_catches_missing_undeclared_and_mistyped_keys() {
    let mut json = json_of(&common::sample_report());
    json.as_object_mut().unwrap().remove("p99_ttft_ms");
    json["summary"]["latency"]["ttft"]["p75_ms"] = 1.0.into();
    json["summary"]["requests"]["completed"] = "many".into();
    let errors = violations(&json);
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

#[test]
fn a_cpu_report_has_no_gpu_section() {
    let json = json_of(&common::sample_report());
    assert!(json.get("gpu").is_none(), "{json}");
}

#[test]
fn a_gpu_report_matches_the_schema_and_derives_energy_per_token_and_power() {
    let report = common::sample_report().with_gpu(common::h200(Some(1234.5)));
    let json = json_of(&report);
    let errors = violations(&json);
    assert!(errors.is_empty(), "{errors:#?}");
    let gpu = &json["gpu"];
    let mut keys: Vec<&str> = gpu
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cuda_graph_replays",
            "device_busy_s",
            "device_busy_share",
            "driver",
            "eager_steps",
            "energy_j",
            "energy_per_output_token_j",
            "engine_idle_s",
            "engine_idle_share",
            "index",
            "mean_power_w",
            "memory_total_bytes",
            "name",
            "peak_memory_bytes",
        ]
    );
    let output = report.summary.tokens.output as f64;
    assert!(output > 0.0);
    let close = |value: &Value, expected: f64| {
        let value = value.as_f64().unwrap();
        assert!(
            (value - expected).abs() <= 1e-9 * expected,
            "{value} != {expected}"
        );
    };
    close(&gpu["energy_per_output_token_j"], 1234.5 / output);
    close(&gpu["mean_power_w"], 1234.5 / report.summary.window_s);
    close(&gpu["device_busy_share"], 0.5 / report.summary.window_s);
    close(&gpu["engine_idle_share"], 0.25 / report.summary.window_s);
    let path = std::path::Path::new("gpu.json");
    let read = Report::from_json(&report.to_json(), path).unwrap();
    assert_eq!(read.gpu.unwrap().measured, report.gpu.unwrap().measured);

    let without_energy = common::sample_report().with_gpu(common::h200(None));
    let json = json_of(&without_energy);
    assert_eq!(json["gpu"]["energy_per_output_token_j"], Value::Null);
    assert_eq!(json["gpu"]["mean_power_w"], Value::Null);
    let errors = violations(&json);
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn a_gpu_report_written_before_forward_times_still_reads() {
    let mut json = json_of(&common::sample_report().with_gpu(common::h200(Some(1.0))));
    let gpu = json["gpu"].as_object_mut().unwrap();
    for key in [
        "device_busy_s",
        "device_busy_share",
        "engine_idle_s",
        "engine_idle_share",
    ] {
        gpu.remove(key);
    }
    let errors = violations(&json);
    assert!(errors.is_empty(), "{errors:#?}");
    let read = Report::from_json(&json.to_string(), std::path::Path::new("old.json")).unwrap();
    let gpu = read.gpu.unwrap();
    assert_eq!(
        (gpu.measured.device_busy_s, gpu.device_busy_share),
        (None, None)
    );
    assert_eq!(
        (gpu.measured.engine_idle_s, gpu.engine_idle_share),
        (None, None)
    );
    assert_eq!(gpu.measured.energy_j, Some(1.0));
}

#[test]
fn the_validator_catches_a_gpu_section_with_a_missing_key() {
    let mut json = json_of(&common::sample_report().with_gpu(common::h200(Some(1.0))));
    json["gpu"].as_object_mut().unwrap().remove("driver");
    json["gpu"]["watts"] = 1.0.into();
    assert_eq!(violations(&json).len(), 2);
}

/// Every key path of a JSON value, one per line, sorted; arrays as `[]`,
/// the error-kind map's dynamic keys as `<kind>`.
fn key_paths(value: &Value, at: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            for (key, v) in object {
                let key = if at == "summary.errors" || at == "steady_state.summary.errors" {
                    "<kind>"
                } else {
                    key.as_str()
                };
                let path = if at.is_empty() {
                    key.to_owned()
                } else {
                    format!("{at}.{key}")
                };
                out.push(path.clone());
                key_paths(v, &path, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                key_paths(item, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn a_step_with_samples_server_metrics_and_steady_state_matches_the_schema() {
    let report = common::sweep_steps("sweep-chat").remove(1);
    let json = json_of(&report);
    assert_eq!(json["samples"]["count"], 228);
    assert_eq!(json["server_metrics"]["source"], "isobench");
    assert_eq!(json["step"]["kind"], "sweep");
    let errors = violations(&json);
    assert!(errors.is_empty(), "{errors:#?}");
    // Read back, the new sections write the same JSON (samples are kept
    // to the microsecond).
    let read = Report::from_json(&report.to_json(), std::path::Path::new("step.json")).unwrap();
    let again = json_of(&read);
    for key in ["samples", "server_metrics", "step"] {
        assert!(again[key] == json[key], "{key} changed when read back");
    }
    assert_eq!(read.steady_state.map(|s| s.saturation.sent), Some(205));
    let mut broken = json.clone();
    broken["server_metrics"]["source"] = "triton".into();
    broken["samples"]["ttft_ms"][0] = "fast".into();
    assert_eq!(violations(&broken).len(), 2);
}

#[test]
fn a_plan_matches_its_schema() {
    use isobench_report::{ConfigurationPlan, PLAN_KIND, PlanResult, SCHEMA_VERSION, TrialRecord};
    let trial = |rate: f64, passed: bool| TrialRecord {
        rate,
        seed: 7,
        passed,
        inconclusive: false,
        reasons: if passed {
            vec![]
        } else {
            vec!["ttft_p99=500ms missed (620.0 ms)".into()]
        },
        report: "continuous/trial-00.json".into(),
        throughput_rps: rate * 0.99,
        goodput_rps: Some(rate * 0.98),
    };
    let plan = PlanResult {
        kind: PLAN_KIND.into(),
        schema_version: SCHEMA_VERSION,
        tool_version: "0.1.0".into(),
        workload: "chat".into(),
        target: "embedded".into(),
        slos: vec!["ttft_p99=500ms".into()],
        target_rps: Some(200.0),
        headroom: 0.2,
        trials_at_capacity: 3,
        tolerance: 0.1,
        trial_duration_s: 20.0,
        configurations: vec![ConfigurationPlan {
            name: "continuous".into(),
            server: Some("embedded models/small-llama, continuous batching (max 64 sequences, 512 tokens a step), KV pool 4096 blocks".into()),
            capacity_rps: Some(2.0),
            upper_rps: Some(2.2),
            goodput_rps: Some(1.96),
            replicas: ConfigurationPlan::replicas_for(200.0, 2.0, 0.2),
            converged: true,
            trials: vec![trial(2.0, true), trial(2.2, false)],
        }],
        best: Some("continuous".into()),
    };
    let root = schema();
    let value = serde_json::to_value(&plan).unwrap();
    let mut errors = Vec::new();
    validate(&root, &root["$defs"]["plan"], &value, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    let mut broken = value.clone();
    broken["configurations"][0]
        .as_object_mut()
        .unwrap()
        .remove("upper_rps");
    let mut errors = Vec::new();
    validate(&root, &root["$defs"]["plan"], &broken, "$", &mut errors);
    assert_eq!(errors.len(), 1, "{errors:#?}");
}

/// Compares the key set of `report` with the snapshot file `name`.
fn check_key_snapshot(report: &Report, name: &str) {
    let mut paths = Vec::new();
    key_paths(&json_of(report), "", &mut paths);
    paths.sort();
    paths.dedup();
    let actual = paths.join("\n") + "\n";
    let snapshot = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("ISOBENCH_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snapshot, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&snapshot).unwrap_or_default();
    assert!(
        actual == expected,
        "the report's keys changed. If that is deliberate, update docs/report-schema.md, \
         docs/report.schema.json (and SCHEMA_VERSION when a key is renamed, removed or changes \
         meaning), then run with ISOBENCH_UPDATE_SNAPSHOTS=1 to rewrite {}.\nactual:\n{actual}",
        snapshot.display()
    );
}

#[test]
fn the_key_set_matches_its_snapshot() {
    check_key_snapshot(&common::sample_report(), "report_keys.txt");
}

#[test]
fn the_key_set_of_a_step_matches_its_snapshot() {
    check_key_snapshot(&common::sweep_steps("s").remove(0), "step_report_keys.txt");
}

#[test]
fn the_table_s_gpu_line_shows_the_window_s_shares_in_forwards_and_idle() {
    let report = common::sample_report();
    let window_s = report.summary.window_s;
    let busy = GpuMeasurement {
        device_busy_s: Some(0.75 * window_s),
        engine_idle_s: Some(0.2 * window_s),
        ..common::h200(Some(1234.5))
    };
    let text = table::render(&report.clone().with_gpu(busy));
    let line = text.lines().find(|l| l.starts_with("gpu ")).unwrap();
    assert!(
        line.contains("NVIDIA H200 (cuda:0, driver 580.65.06)"),
        "{line}"
    );
    assert!(
        line.ends_with("steps 900 graph, 120 eager, forwards 75% of the window, engine idle 20%"),
        "{line}"
    );
    // A server that does not time its forwards or its idle engine: the
    // line says nothing of them.
    let untimed = GpuMeasurement {
        device_busy_s: None,
        engine_idle_s: None,
        ..common::h200(Some(1234.5))
    };
    let text = table::render(&report.with_gpu(untimed));
    assert!(!text.contains("forwards"), "{text}");
    assert!(!text.contains("idle"), "{text}");
}
