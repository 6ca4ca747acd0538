//! The engine flags of `isobench serve` and `isobench run` in a build
//! without the `cuda` feature (what CI builds): asking for CUDA is a
//! one-line error with exit code 2, bad values name the flag, and a CPU
//! run of the embedded server writes a report without a `gpu` section.

mod common;

use std::process::Output;

use common::{isobench, stderr};
use isobench_report::Report;

/// The only line on stderr that says `error:`.
fn error_line(output: &Output) -> String {
    let text = stderr(output);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line expected:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    errors[0].to_owned()
}

#[cfg(not(feature = "cuda"))]
const NO_CUDA: &str = "--device: this isobench was built without CUDA support: rebuild with --features cuda (see docs/gpu.md)";

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_on_a_build_without_it_is_a_one_line_error() {
    let output = isobench()
        .args(["serve", "--model", "models/tiny-llama", "--port", "0"])
        .args(["--device", "cuda:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        error_line(&output).ends_with(NO_CUDA),
        "{}",
        stderr(&output)
    );

    let dir = tempfile::tempdir().unwrap();
    let output = isobench()
        .args(["run", "workloads/quickstart.toml", "--quiet"])
        .args(["--server-model", "models/tiny-llama", "--max-requests", "2"])
        .args(["-o", dir.path().join("r.json").to_str().unwrap()])
        .env("ISOBENCH_DEVICE", "cuda")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        error_line(&output).ends_with(NO_CUDA),
        "{}",
        stderr(&output)
    );
}

#[test]
fn bad_engine_flags_name_the_flag_and_what_is_accepted() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--gpu-memory-fraction", "1.5"],
            "--gpu-memory-fraction: got 1.5; accepted: a number above 0 and at most 0.95",
        ),
        (&["--device", "gpu"], "accepted: cpu, cuda, cuda:N"),
        (
            &["--gpu-memory-fraction", "0.5"],
            "--gpu-memory-fraction: applies only to --device cuda",
        ),
        (
            &["--cuda-graphs", "sometimes"],
            "[possible values: on, off]",
        ),
    ];
    for (flags, expected) in cases {
        let output = isobench()
            .args(["serve", "--model", "models/tiny-llama", "--port", "0"])
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{flags:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(expected),
            "{flags:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn engine_and_batching_flags_with_an_external_target_are_refused() {
    for flags in [
        ["--device", "cpu"],
        ["--max-num-seqs", "4"],
        ["--max-model-len", "64"],
    ] {
        let output = isobench()
            .args(["run", "workloads/quickstart.toml", "--quiet"])
            .args(["--target", "http://127.0.0.1:9"])
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            error_line(&output).contains("apply to the embedded server only"),
            "{flags:?}: {}",
            stderr(&output)
        );
    }
}

/// `isobench run` takes `isobench serve`'s batching flags, with the same
/// checks: a knob of another policy is an error before anything starts.
#[test]
fn a_batching_knob_of_another_policy_is_refused_by_name() {
    let output = isobench()
        .args(["run", "workloads/quickstart.toml", "--quiet"])
        .args(["--server-model", "models/tiny-llama"])
        .args(["--batching", "static", "--max-wait", "5ms"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let line = error_line(&output);
    assert!(
        line.contains("--max-wait") && line.contains("--batching dynamic"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_cpu_run_of_the_embedded_server_has_no_gpu_section() {
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("r.json");
    let output = isobench()
        .args(["run", "workloads/quickstart.toml", "--quiet"])
        .args(["--server-model", "models/tiny-llama"])
        .args(["--max-requests", "3", "--warmup", "0"])
        .args([
            "--device",
            "cpu",
            "--cuda-graphs",
            "on",
            "--kv-blocks",
            "64",
        ])
        .args(["-o", report_path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let report = Report::read_json(&report_path).unwrap();
    assert_eq!(report.summary.requests.completed, 3);
    assert_eq!(report.gpu, None);
    let json = std::fs::read_to_string(&report_path).unwrap();
    assert!(!json.contains("\"gpu\""), "{json}");
}

/// `--max-model-len` reaches `isobench run`'s embedded server: quickstart's
/// requests (28-36 prompt tokens, a BOS, and 32 out) fit 72 tokens, none
/// fits 40 (each is refused with 400 naming the flag, as the request log
/// shows), and more than the model's 2,048 stops the run before it
/// starts, naming the flag.
#[test]
fn max_model_len_reaches_the_embedded_server() {
    let dir = tempfile::tempdir().unwrap();
    let run = |limit: &str| {
        let report_path = dir.path().join(format!("r-{limit}.json"));
        let output = isobench()
            .args(["run", "workloads/quickstart.toml", "--quiet"])
            .args(["--server-model", "models/tiny-llama"])
            .args(["--max-requests", "3", "--warmup", "0"])
            .args(["--max-model-len", limit])
            .args(["-o", report_path.to_str().unwrap()])
            .output()
            .unwrap();
        (output, report_path)
    };
    let (output, path) = run("72");
    assert!(output.status.success(), "{}", stderr(&output));
    let report = Report::read_json(&path).unwrap();
    assert_eq!(report.summary.requests.completed, 3);
    let (output, path) = run("40");
    let report = Report::read_json(&path).unwrap();
    assert_eq!(report.summary.requests.completed, 0, "{}", stderr(&output));
    assert_eq!(report.summary.requests.failed, 3);
    assert_eq!(report.summary.errors.get("http_400"), Some(&3));
    let log = std::fs::read_to_string(path.with_extension("requests.jsonl")).unwrap();
    assert_eq!(
        log.matches("(--max-model-len, by default the model's)")
            .count(),
        3,
        "{log}"
    );
    let (output, _) = run("4096");
    assert!(!output.status.success());
    for expected in ["--max-model-len", "got 4096", "at most 2048"] {
        assert!(stderr(&output).contains(expected), "{}", stderr(&output));
    }
}
