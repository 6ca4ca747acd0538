//! The mock's errors: a configuration it cannot honour, or an address it
//! cannot listen on.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// A flag's value is out of range.
    #[error("invalid value `{value}` for {flag}: expected {expected}")]
    InvalidConfig {
        flag: &'static str,
        value: String,
        expected: &'static str,
    },

    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },

    /// The precise timer's thread could not be started.
    #[error("cannot start the mock's timer thread: {0}")]
    Timer(std::io::Error),
}

impl MockError {
    /// A stable label for the error's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            MockError::InvalidConfig { .. } => "invalid_config",
            MockError::Bind { .. } => "bind",
            MockError::Timer(_) => "timer",
        }
    }
}
