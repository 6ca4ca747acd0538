//! One retry, on a new connection, for a request that a reused keep-alive
//! connection lost before any byte of the answer arrived.
//!
//! A server may close a kept-alive connection at any moment between two
//! answers (llama.cpp's `llama-server` does after each streamed answer; any
//! server does at its keep-alive timeout). A request the client wrote onto
//! such a connection in the meantime fails with "connection closed before
//! message completed" although the server never saw it as a request:
//! counting it as an endpoint failure would blame the server for a race of
//! the transport. Browsers and HTTP libraries retry such requests once; so
//! does isobench, under a criterion that cannot hide a real failure:
//!
//! - the failure came from sending on a pooled connection (not from
//!   connecting) and before the answer's status line;
//! - that connection had already carried an answer head to this client,
//!   i.e. it was reused. Connections are told apart by their local address
//!   (no two open connections to a server share one). The kernel may hand
//!   a closed connection's port to a new one: a new connection that fails
//!   at once on such a port is taken for the old one and gets the one
//!   retry too, which can only add a try, never hide a failure;
//! - the request is sent again once, on a client that never reuses a
//!   connection, so a failure of the retry is a failure of a fresh
//!   connection and is recorded as one.
//!
//! A fresh connection that fails is never retried. Latencies still count
//! from the first send, and the record counts the retry
//! ([`RequestRecord::retries`](isobench_metrics::RequestRecord::retries)).

use std::collections::HashSet;
use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Mutex;

use hyper_util::client::legacy::connect::HttpInfo;

/// The local addresses of the connections that have carried an answer.
#[derive(Debug, Default)]
pub(crate) struct AnsweredConnections {
    /// One entry per connection the run opened: bounded by the local port range.
    local: Mutex<HashSet<SocketAddr>>,
}

impl AnsweredConnections {
    /// Notes that `response`'s connection carried an answer head.
    pub fn note(&self, response: &reqwest::Response) {
        if let Some(info) = response.extensions().get::<HttpInfo>()
            && let Ok(mut local) = self.local.lock()
        {
            local.insert(info.local_addr());
        }
    }

    /// Whether `error`, returned before any answer, came from sending on a
    /// connection that had carried an answer before: then the request is
    /// worth one more try on a new connection.
    pub fn lost_on_reused(&self, error: &reqwest::Error) -> bool {
        if error.is_timeout() || error.is_connect() || error.is_builder() {
            return false;
        }
        let Some(client_error) = find::<hyper_util::client::legacy::Error>(error) else {
            return false;
        };
        if client_error.is_connect() {
            return false;
        }
        let Some(connected) = client_error.connect_info() else {
            return false;
        };
        let mut extensions = http::Extensions::new();
        connected.get_extras(&mut extensions);
        let Some(info) = extensions.get::<HttpInfo>() else {
            return false;
        };
        // That connection is gone: its address may come back for a new one.
        self.local
            .lock()
            .is_ok_and(|mut local| local.remove(&info.local_addr()))
    }
}

/// The first error of type `E` in `error`'s source chain.
fn find<E: std::error::Error + 'static>(error: &reqwest::Error) -> Option<&E> {
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(found) = cause.downcast_ref::<E>() {
            return Some(found);
        }
        source = cause.source();
    }
    None
}
