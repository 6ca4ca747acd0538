//! Commands given inputs that are not their files (regression: `isobench
//! run /dev/zero` read until the out-of-memory killer stopped it at 23 GB;
//! `isobench report /dev/zero` and `compare` read reports the same way).
//! The child is always reaped.

mod common;

use common::Reaped;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[cfg(unix)]
#[test]
fn run_on_a_device_fails_at_once_naming_it() {
    let mut child = Reaped(
        Command::new(env!("CARGO_BIN_EXE_isobench"))
            .args([
                "run",
                "/dev/zero",
                "--target",
                "http://127.0.0.1:9",
                "--model",
                "m",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn isobench run"),
    );
    // Far longer than refusing the file takes; /dev/zero would never end.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "isobench run /dev/zero kept reading"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/zero") && stderr.contains("a device, not a regular file"),
        "{stderr}"
    );
}

/// Reports are read by `compare`, `summary` and `report`: a device is
/// refused at once, by name.
#[cfg(unix)]
#[test]
fn report_commands_refuse_a_device_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    for args in [
        vec!["report", "/dev/zero", "--html", html.to_str().unwrap()],
        vec!["compare", "/dev/zero", "/dev/zero"],
        vec!["summary", "/dev/zero"],
    ] {
        let mut child = Reaped(
            Command::new(env!("CARGO_BIN_EXE_isobench"))
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn isobench"),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "{args:?} kept reading");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("/dev/zero is not a regular file"),
            "{args:?}: {stderr}"
        );
    }
}
