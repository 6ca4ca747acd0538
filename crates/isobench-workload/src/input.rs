//! Reading input files with bounds: `isobench run /dev/zero` must fail at
//! once, not read until the machine runs out of memory.
//!
//! Every input (workload file, empirical length file, trace, dataset) must
//! be a regular file: a directory, FIFO, socket or device is refused before
//! it is opened for reading (opening a FIFO would block). The workload file
//! is read whole, under [`MAX_WORKLOAD_BYTES`]; line files (traces,
//! empirical lengths) are read as a stream of lines, each under
//! [`MAX_LINE_BYTES`], so memory follows what is kept, not the file's size;
//! a ShareGPT dump is parsed as a stream (see `dataset::sharegpt`).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::WorkloadError;

/// The largest workload file (TOML) accepted: 1 MiB.
pub const MAX_WORKLOAD_BYTES: u64 = 1 << 20;
/// The longest line of a trace or an empirical length file: 1 MiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Opens `path` if it is a regular file; otherwise says what it is.
pub(crate) fn open_regular(path: &Path) -> Result<File, String> {
    // `metadata` does not block on a FIFO, where `File::open` would.
    let metadata = std::fs::metadata(path).map_err(|error| error.to_string())?;
    if !metadata.is_file() {
        return Err(format!(
            "it is {}, not a regular file; accepted: a regular file",
            describe(&metadata.file_type())
        ));
    }
    File::open(path).map_err(|error| error.to_string())
}

fn describe(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Reads a workload file: a regular file of at most [`MAX_WORKLOAD_BYTES`].
pub(crate) fn read_workload(path: &Path) -> Result<String, WorkloadError> {
    let failed = |message: String| WorkloadError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::other(message),
    };
    let file = open_regular(path).map_err(failed)?;
    let too_large = || {
        failed(format!(
            "it is larger than {MAX_WORKLOAD_BYTES} bytes (1 MiB), the limit for a workload file; \
             accepted: a TOML workload file (datasets and traces go in separate files)"
        ))
    };
    if file.metadata().map_err(|e| failed(e.to_string()))?.len() > MAX_WORKLOAD_BYTES {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(MAX_WORKLOAD_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| failed(e.to_string()))?;
    if text.len() as u64 > MAX_WORKLOAD_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

/// Calls `each` with every line of `reader` (1-based number, without its
/// line ending); a line longer than [`MAX_LINE_BYTES`] or not UTF-8 is an
/// error at its line of `path`.
pub(crate) fn for_each_line(
    path: &Path,
    reader: impl Read,
    mut each: impl FnMut(usize, &str) -> Result<(), WorkloadError>,
) -> Result<(), WorkloadError> {
    let mut reader = BufReader::new(reader);
    let mut buffer = Vec::new();
    for number in 1.. {
        buffer.clear();
        let read = reader
            .by_ref()
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .map_err(|error| WorkloadError::data(path, Some(number), error.to_string()))?;
        if read == 0 {
            break;
        }
        let line = buffer.strip_suffix(b"\n").unwrap_or(&buffer[..]);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > MAX_LINE_BYTES {
            return Err(WorkloadError::data(
                path,
                Some(number),
                format!(
                    "line longer than {MAX_LINE_BYTES} bytes; accepted: a text file of short lines"
                ),
            ));
        }
        let line = std::str::from_utf8(line).map_err(|_| {
            WorkloadError::data(
                path,
                Some(number),
                "not UTF-8 text; accepted: a UTF-8 text file",
            )
        })?;
        each(number, line)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_bounded() {
        let mut seen = Vec::new();
        for_each_line(Path::new("t"), "a\r\n\nb".as_bytes(), |n, line| {
            seen.push((n, line.to_owned()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [(1, "a".to_owned()), (2, String::new()), (3, "b".to_owned())]
        );
        let long = vec![b'x'; MAX_LINE_BYTES + 1];
        let error = for_each_line(Path::new("t"), &long[..], |_, _| Ok(())).unwrap_err();
        assert!(
            error.to_string().starts_with("t:1: line longer than"),
            "{error}"
        );
        let error = for_each_line(Path::new("t"), &b"ok\n\xff\n"[..], |_, _| Ok(())).unwrap_err();
        assert!(error.to_string().starts_with("t:2: not UTF-8"), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_directories_are_refused() {
        let error = open_regular(Path::new("/dev/zero")).unwrap_err();
        assert!(error.contains("a device, not a regular file"), "{error}");
        let error = open_regular(Path::new("/")).unwrap_err();
        assert!(error.contains("a directory"), "{error}");
    }
}
