//! A top-level JSON array read as a stream of its elements: each element's
//! bytes, byte offset and line, one at a time, so that a 670 MB dump is
//! never held in memory whole. The splitter only tracks strings (with their
//! escapes) and bracket depth; each element is then parsed on its own.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::WorkloadError;

/// The largest single element accepted: 16 MiB.
pub(crate) const MAX_ELEMENT_BYTES: usize = 16 << 20;

/// One element of the array.
pub(crate) struct Element<'a> {
    /// Byte offset of its first byte in the file.
    pub(crate) offset: u64,
    /// 1-based line of its first byte.
    pub(crate) line: usize,
    pub(crate) bytes: &'a [u8],
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Before the opening `[`.
    Start,
    /// Between elements (after `[` or a `,`).
    Between,
    /// Inside an element.
    Element,
    /// After the closing `]`.
    Done,
}

/// Calls `each` with every element of the JSON array in `reader`, in order.
pub(crate) fn for_each_element(
    path: &Path,
    reader: impl Read,
    format: &str,
    mut each: impl FnMut(Element<'_>) -> Result<(), WorkloadError>,
) -> Result<(), WorkloadError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let mut state = State::Start;
    let (mut offset, mut line) = (0u64, 1usize);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut element = Vec::new();
    let (mut element_offset, mut element_line) = (0u64, 1usize);
    let bad = |line: usize, message: String| WorkloadError::data(path, Some(line), message);
    loop {
        let chunk = reader
            .fill_buf()
            .map_err(|error| bad(line, error.to_string()))?;
        if chunk.is_empty() {
            break;
        }
        let length = chunk.len();
        for &byte in chunk {
            let here = offset;
            offset += 1;
            if byte == b'\n' {
                line += 1;
            }
            match state {
                State::Start | State::Between | State::Done if byte.is_ascii_whitespace() => {}
                State::Start if byte == b'[' => state = State::Between,
                State::Start => {
                    return Err(bad(line, format!("expected a JSON array (`[`); {format}")));
                }
                State::Between if byte == b']' => state = State::Done,
                State::Between if byte == b',' => {}
                State::Between => {
                    state = State::Element;
                    element.clear();
                    (element_offset, element_line) = (here, line);
                    element.push(byte);
                    (depth, in_string, escaped) = (0, byte == b'"', false);
                    if matches!(byte, b'{' | b'[') {
                        depth = 1;
                    }
                }
                State::Element => {
                    let ends = !in_string && depth == 0 && matches!(byte, b',' | b']');
                    if ends {
                        each(Element {
                            offset: element_offset,
                            line: element_line,
                            bytes: element.trim_ascii_end(),
                        })?;
                        state = if byte == b']' {
                            State::Done
                        } else {
                            State::Between
                        };
                        continue;
                    }
                    if element.len() == MAX_ELEMENT_BYTES {
                        return Err(bad(
                            element_line,
                            format!(
                                "an entry larger than {MAX_ELEMENT_BYTES} bytes; accepted: entries \
                                 of at most 16 MiB each"
                            ),
                        ));
                    }
                    element.push(byte);
                    if in_string {
                        match (escaped, byte) {
                            (true, _) => escaped = false,
                            (false, b'\\') => escaped = true,
                            (false, b'"') => in_string = false,
                            _ => {}
                        }
                    } else {
                        match byte {
                            b'"' => in_string = true,
                            b'{' | b'[' => depth += 1,
                            b'}' | b']' => depth = depth.saturating_sub(1),
                            _ => {}
                        }
                    }
                }
                State::Done => {
                    return Err(bad(
                        line,
                        format!("trailing characters after the array; {format}"),
                    ));
                }
            }
        }
        reader.consume(length);
    }
    if state != State::Done {
        return Err(bad(
            line,
            format!("the file ends before the JSON array is closed (`]`); {format}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Result<Vec<(u64, usize, String)>, String> {
        let mut out = Vec::new();
        for_each_element(Path::new("a.json"), text.as_bytes(), "F", |e| {
            out.push((
                e.offset,
                e.line,
                String::from_utf8(e.bytes.to_vec()).unwrap(),
            ));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok(out)
    }

    #[test]
    fn elements_with_offsets_and_lines() {
        let text = "[\n {\"a\": \"],}\\\"\"}, [1, [2]],\n 3 ,\"x\"]\n";
        let elements = split(text).unwrap();
        let bodies: Vec<&str> = elements.iter().map(|(_, _, b)| b.as_str()).collect();
        assert_eq!(bodies, ["{\"a\": \"],}\\\"\"}", "[1, [2]]", "3", "\"x\""]);
        for (offset, _, body) in &elements {
            assert!(text[*offset as usize..].starts_with(body.as_str()));
        }
        assert_eq!(elements[0].1, 2);
        assert_eq!(elements[2].1, 3);
        assert_eq!(split("[]").unwrap(), []);
    }

    #[test]
    fn not_an_array_is_an_error_with_its_line() {
        assert!(
            split("{}")
                .unwrap_err()
                .starts_with("a.json:1: expected a JSON array")
        );
        assert!(
            split("[{}")
                .unwrap_err()
                .contains("ends before the JSON array is closed")
        );
        assert!(
            split("[1]\n x")
                .unwrap_err()
                .starts_with("a.json:2: trailing characters")
        );
    }
}
