//! What could fail after a run, checked before its first request: a run
//! must never end with its report lost, nor a flag's impossible value show
//! up as a failure of the endpoint.
//!
//! - [`writable`]: the report, log and CSV paths can be written (an
//!   existing file is opened for writing without being changed; for a new
//!   one, a probe file is created and removed in its folder), and an
//!   existing CSV file has isobench's header;
//! - value parsers for the flags whose impossible values clap's types let
//!   through (`--timeout 0s`, `--max-error-rate 2`, `--max-event-bytes 0`).

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

/// Checks that `path`, given by `flag`, can be written, creating its folder
/// when missing; leaves an existing file unchanged.
pub fn writable(flag: &str, path: &Path) -> anyhow::Result<()> {
    let fix = "pass a path in a folder you can write to";
    if path.is_dir() {
        bail!("{flag} {}: is a folder; pass a file path", path.display());
    }
    if path.exists() {
        OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("{flag} {}: cannot write it; {fix}", path.display()))?;
        return Ok(());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "{flag} {}: cannot create the folder {}; {fix}",
            path.display(),
            dir.display()
        )
    })?;
    let probe = dir.join(format!(".isobench-write-check-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| {
            format!(
                "{flag} {}: cannot create files in {}; {fix}",
                path.display(),
                dir.display()
            )
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The most of an existing CSV file read to check its header.
const MAX_HEADER_BYTES: u64 = 64 * 1024;

/// Checks that rows can be appended to the CSV file at `path`: writable,
/// and, when it already has a header, isobench's.
///
/// Only a regular file's first line is read (at most [`MAX_HEADER_BYTES`]):
/// a device such as `/dev/null` is appended to as it is, and a large CSV
/// file is not read whole.
pub fn csv_appendable(path: &Path) -> anyhow::Result<()> {
    writable("--csv", path)?;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(());
    };
    let mut first_line = String::new();
    // A header of another tool's, or not text at all, fails the comparison below.
    let _ = BufReader::new(file.take(MAX_HEADER_BYTES)).read_line(&mut first_line);
    let first_line = first_line.trim_end_matches(['\n', '\r']);
    if !first_line.is_empty() && first_line != isobench_report::csv::header() {
        bail!(
            "--csv {}: its header is not the one isobench writes (another tool's file, or an older isobench's); pass a new file",
            path.display()
        );
    }
    Ok(())
}

/// `--timeout`: a duration longer than zero.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be longer than 0s, e.g. 30s".to_owned());
    }
    Ok(duration)
}

/// `--max-error-rate`: a share of requests in [0, 1].
pub fn error_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number; expected a share in [0, 1], e.g. 0.05"))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!(
            "{rate} is not a share of requests; expected a number in [0, 1], e.g. 0.05 for 5%"
        ));
    }
    Ok(rate)
}

/// `--max-event-bytes`: a size of at least 1 KiB (a completion chunk is a
/// few hundred bytes).
pub fn event_bytes(text: &str) -> Result<usize, String> {
    let bytes: usize = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of bytes, e.g. 4194304"))?;
    if bytes < 1024 {
        return Err(format!(
            "{bytes} bytes is less than one completion chunk can take; expected at least 1024"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_flag_values_are_refused_with_what_works() {
        assert!(
            positive_duration("0s")
                .unwrap_err()
                .contains("longer than 0s")
        );
        assert_eq!(positive_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(error_rate("1.5").unwrap_err().contains("[0, 1]"));
        assert!(error_rate("NaN").unwrap_err().contains("[0, 1]"));
        assert!(error_rate("x").unwrap_err().contains("not a number"));
        assert_eq!(error_rate("0"), Ok(0.0));
        assert!(event_bytes("0").unwrap_err().contains("at least 1024"));
        assert_eq!(event_bytes("1048576"), Ok(1 << 20));
    }

    #[test]
    fn writable_paths_are_left_unchanged_and_folders_refused() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("r.json");
        std::fs::write(&existing, "keep").unwrap();
        writable("--output", &existing).unwrap();
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep");
        let new = dir.path().join("sub/new.json");
        writable("--output", &new).unwrap();
        assert!(!new.exists());
        assert_eq!(
            std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
            0
        );
        let err = writable("--log", dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("--log "), "{err}");
    }

    #[test]
    fn a_csv_with_another_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("runs.csv");
        std::fs::write(&csv, "a,b,c\n1,2,3\n").unwrap();
        let err = csv_appendable(&csv).unwrap_err().to_string();
        assert!(err.contains("header"), "{err}");
        std::fs::write(&csv, "").unwrap();
        csv_appendable(&csv).unwrap();
        let ours = format!("{}\r\n1,2\n", isobench_report::csv::header());
        std::fs::write(&csv, ours).unwrap();
        csv_appendable(&csv).unwrap();
    }

    /// Regression: the header check read the whole file, and `--csv
    /// /dev/zero` without end. A device is appended to unchecked.
    #[cfg(unix)]
    #[test]
    fn a_device_is_appended_to_without_reading_it() {
        csv_appendable(Path::new("/dev/zero")).unwrap();
        csv_appendable(Path::new("/dev/null")).unwrap();
    }
}
