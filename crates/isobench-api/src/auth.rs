//! The API-key check both servers (the embedded one and the mock) make:
//! `Authorization: Bearer <key>`, compared in constant time so that the
//! time to refuse a guess says nothing about how much of it was right.

/// Whether an `Authorization` header value carries `Bearer <expected>`.
pub fn bearer_matches(authorization: Option<&str>, expected: &str) -> bool {
    authorization
        .and_then(|value| value.strip_prefix("Bearer "))
        .is_some_and(|key| constant_time_eq(key.as_bytes(), expected.as_bytes()))
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_key_matches() {
        assert!(bearer_matches(Some("Bearer s3cret"), "s3cret"));
        for wrong in [
            None,
            Some("s3cret"),
            Some("Bearer s3cre"),
            Some("Bearer s3cret "),
            Some("Bearer S3cret"),
            Some("bearer s3cret"),
            Some("Basic s3cret"),
        ] {
            assert!(!bearer_matches(wrong, "s3cret"), "{wrong:?}");
        }
    }
}
