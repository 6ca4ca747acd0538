//! What the server allows each client: how long it may take to send a
//! request's headers and body, how long an idle connection stays open, how
//! many connections are open at once, and how long a shutdown waits for
//! requests in flight. [`ConnectionLimits`] is the validated form;
//! [`ConnectionArgs`] the flags of `isobench serve` (flattened into
//! [`crate::ServerArgs`]).

use std::time::Duration;

use crate::error::ServerError;

/// Default `--header-read-timeout`: from a request's first byte to the end
/// of its headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `--body-read-timeout`: from the end of the headers to the end of
/// the body.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `--idle-timeout`: a connection with no request in progress and
/// nothing received for this long is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `--max-connections`: connections served at once; more wait in
/// the kernel's accept queue.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default `--shutdown-timeout`: how long a shutdown lets requests in
/// flight finish before ending them with an error event.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Per-connection bounds, each with a documented default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}

impl ConnectionLimits {
    /// Refuses zero timeouts and a zero connection cap: each would make the
    /// server refuse every client.
    pub fn validate(&self) -> Result<(), ServerError> {
        let timeouts = [
            ("--header-read-timeout", self.header_read_timeout),
            ("--body-read-timeout", self.body_read_timeout),
            ("--idle-timeout", self.idle_timeout),
        ];
        for (flag, timeout) in timeouts {
            if timeout.is_zero() {
                return Err(ServerError::Config {
                    flag,
                    message: "got 0s; accepted: a duration above zero, e.g. 10s or 500ms".into(),
                });
            }
        }
        if self.max_connections == 0 {
            return Err(ServerError::Config {
                flag: "--max-connections",
                message: "got 0; accepted: at least 1 connection".into(),
            });
        }
        Ok(())
    }
}

/// The flags of [`ConnectionLimits`].
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Time a client has from a request's first byte to the end of its headers.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub header_read_timeout: Duration,
    /// Time a client has from the end of the headers to the end of the body (else 408).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub body_read_timeout: Duration,
    /// A connection with no request in progress and nothing received for this long is closed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub idle_timeout: Duration,
    /// Connections served at once; more wait in the kernel's accept queue.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// On SIGINT/SIGTERM, how long requests in flight may finish before they are ended with an error event.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub shutdown_timeout: Duration,
}

impl ConnectionArgs {
    pub fn into_limits(self) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: ConnectionArgs,
    }

    fn parse(args: &[&str]) -> Result<ConnectionLimits, String> {
        let argv = std::iter::once("serve").chain(args.iter().copied());
        let limits = Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .limits
            .into_limits();
        limits.validate().map_err(|e| e.to_string())?;
        Ok(limits)
    }

    #[test]
    fn flag_defaults_are_the_documented_constants() {
        assert_eq!(parse(&[]).unwrap(), ConnectionLimits::default());
    }

    #[test]
    fn flags_parse_durations_and_refuse_zero() {
        let limits = parse(&["--idle-timeout", "5s", "--max-connections", "8"]).unwrap();
        assert_eq!(limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(limits.max_connections, 8);
        let err = parse(&["--body-read-timeout", "0s"]).unwrap_err();
        assert!(
            err.contains("--body-read-timeout") && err.contains("above zero"),
            "{err}"
        );
        let err = parse(&["--max-connections", "0"]).unwrap_err();
        assert!(err.contains("--max-connections"), "{err}");
        let err = parse(&["--header-read-timeout", "soon"]).unwrap_err();
        assert!(err.contains("--header-read-timeout"), "{err}");
    }
}
