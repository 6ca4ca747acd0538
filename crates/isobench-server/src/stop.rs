//! Stop strings: generation ends where one appears, and the output is cut
//! just before it.
//!
//! Text arrives in pieces (one per token). A piece may end with the start
//! of a stop string that the next piece completes, so [`StopMatcher`] holds
//! back the shortest tail that could still grow into a stop string and
//! releases it once it cannot. With no stop strings, text passes straight
//! through.

/// What to send after a piece of text.
#[derive(Debug, PartialEq, Eq)]
pub enum StopOutcome<'a> {
    /// Send this text (possibly empty: all of it is held back) and go on.
    Continue(&'a str),
    /// A stop string appeared: send this text, then finish.
    Stopped(&'a str),
}

#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released.
    held: String,
    /// Bytes of `held` released by the last call, removed on the next one.
    released: usize,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            held: String::new(),
            released: 0,
        }
    }

    /// Whether any stop string is set (without one, text needs no matching).
    pub fn has_stops(&self) -> bool {
        !self.stops.is_empty()
    }

    /// Feeds the next piece of text.
    pub fn push<'a>(&'a mut self, piece: &'a str) -> StopOutcome<'a> {
        if self.stops.is_empty() {
            return StopOutcome::Continue(piece);
        }
        self.held.drain(..self.released);
        self.released = 0;
        self.held.push_str(piece);
        let first_match = self
            .stops
            .iter()
            .filter_map(|stop| self.held.find(stop.as_str()))
            .min();
        if let Some(at) = first_match {
            return StopOutcome::Stopped(&self.held[..at]);
        }
        self.released = self.releasable();
        StopOutcome::Continue(&self.held[..self.released])
    }

    /// Text still held back when generation ends for another reason.
    pub fn flush(&mut self) -> &str {
        let rest = &self.held[self.released..];
        self.released = self.held.len();
        rest
    }

    /// Length of the prefix of `held` that cannot be the start of a stop
    /// string: everything before the earliest suffix that is a stop-string
    /// prefix.
    fn releasable(&self) -> usize {
        let held = self.held.as_str();
        for (start, _) in held.char_indices() {
            let tail = &held[start..];
            if self.stops.iter().any(|stop| stop.starts_with(tail)) {
                return start;
            }
        }
        held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut matcher = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for piece in pieces {
            match matcher.push(piece) {
                StopOutcome::Continue(text) => out.push_str(text),
                StopOutcome::Stopped(text) => {
                    out.push_str(text);
                    return (out, true);
                }
            }
        }
        out.push_str(matcher.flush());
        (out, false)
    }

    #[test]
    fn stop_split_across_pieces_is_trimmed() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D more"]),
            ("hello ".into(), true)
        );
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn held_text_is_released_once_it_cannot_match() {
        let mut matcher = StopMatcher::new(vec!["stop".into()]);
        assert_eq!(matcher.push("a st"), StopOutcome::Continue("a "));
        assert_eq!(matcher.push("ar"), StopOutcome::Continue("star"));
        assert_eq!(matcher.push("s"), StopOutcome::Continue(""));
        assert_eq!(matcher.flush(), "s");
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_text_is_kept_whole() {
        assert_eq!(run(&["b", "a"], &["xxab"]), ("xx".into(), true));
        assert_eq!(run(&["éé"], &["café", "!é", "é"]), ("café!".into(), true));
        assert_eq!(run(&[], &["no ", "stops"]), ("no stops".into(), false));
        assert_eq!(run(&["zz"], &["ab", "z"]), ("abz".into(), false));
    }
}
