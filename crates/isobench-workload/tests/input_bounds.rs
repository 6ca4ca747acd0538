//! Input files are read with bounds (regression: `isobench run /dev/zero`
//! read until the out-of-memory killer stopped it at 23 GB). Devices and
//! folders are refused before reading, a workload file has a size cap, and
//! a trace's lines have a length cap.

use std::error::Error;
use std::path::Path;

use isobench_workload::{MAX_LINE_BYTES, MAX_WORKLOAD_BYTES, Workload, WorkloadError};

/// The error and its cause on one line, as the binary prints it.
fn full_message(error: &WorkloadError) -> String {
    match error.source() {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

#[cfg(unix)]
#[test]
fn a_device_as_workload_file_is_refused_without_reading() {
    let error = Workload::from_file(Path::new("/dev/zero")).unwrap_err();
    let message = full_message(&error);
    assert!(
        message.contains("`/dev/zero`") && message.contains("a device, not a regular file"),
        "{message}"
    );
    assert_eq!(error.kind(), "read");
}

#[test]
fn a_folder_as_workload_file_is_refused() {
    let folder = tempfile::tempdir().unwrap();
    let message = full_message(&Workload::from_file(folder.path()).unwrap_err());
    assert!(message.contains("a directory"), "{message}");
}

#[test]
fn a_workload_file_over_the_cap_is_refused() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("huge.toml");
    let mut text = String::from("[request]\ninput_tokens = 1\noutput_tokens = 1\n");
    text.push_str(&"# padding\n".repeat(MAX_WORKLOAD_BYTES as usize / 10 + 1));
    std::fs::write(&path, text).unwrap();
    let message = full_message(&Workload::from_file(&path).unwrap_err());
    assert!(
        message.contains("huge.toml") && message.contains("larger than 1048576 bytes"),
        "{message}"
    );
}

/// A workload in a fresh folder whose request section is `request`.
fn load(request: &str) -> (String, tempfile::TempDir) {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("w.toml");
    std::fs::write(&path, format!("[request]\n{request}\n")).unwrap();
    let message = Workload::from_file(&path).unwrap_err().to_string();
    (message, folder)
}

#[cfg(unix)]
#[test]
fn devices_as_data_files_are_refused_naming_the_field() {
    for request in [
        "dataset = { kind = \"trace\", path = \"/dev/zero\" }",
        "dataset = { kind = \"sharegpt\", path = \"/dev/zero\" }",
        "input_tokens = { dist = \"empirical\", path = \"/dev/zero\" }\noutput_tokens = 1",
    ] {
        let (message, _folder) = load(request);
        assert!(
            message.contains(".path: cannot read `/dev/zero`")
                && message.contains("a device, not a regular file; accepted: a regular file"),
            "{request}: {message}"
        );
    }
}

#[test]
fn an_overlong_trace_line_is_refused_at_its_line() {
    let folder = tempfile::tempdir().unwrap();
    let trace = folder.path().join("trace.jsonl");
    let mut text = String::from("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5}\n");
    text.push_str(&" ".repeat(MAX_LINE_BYTES + 1));
    std::fs::write(&trace, text).unwrap();
    let path = folder.path().join("w.toml");
    std::fs::write(
        &path,
        "[request]\ndataset = { kind = \"trace\", path = \"trace.jsonl\" }\n",
    )
    .unwrap();
    let error = Workload::from_file(&path).unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{}:2: line longer than", trace.display())),
        "{message}"
    );
    assert_eq!(error.kind(), "data_file");
}
