//! The one error type of this crate.
//!
//! Only failures to *start* a server live here (bad config, a port that cannot be bound, a
//! runtime that cannot be built). A server that is running never reports errors to its
//! owner: a misbehaving client is logged at `debug` level and dropped. This module must not
//! grow variants for conditions that tests provoke on purpose.

use std::io;
use std::net::SocketAddr;

/// Why a synthetic site could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A `DemoConfig` field is out of range.
    #[error("invalid demo config: {field}: {reason}")]
    InvalidConfig {
        /// The offending field, e.g. `hosts`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A listener could not be bound to an explicitly requested address.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address that was asked for.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// With `port: 0`, no port was found that is free on every `127.0.0.k` host.
    #[error("no port free on all {hosts} hosts after {attempts} attempts")]
    NoCommonPort {
        /// Number of hosts that needed the same port.
        hosts: u32,
        /// How many ports were tried.
        attempts: u32,
    },
    /// The dedicated server thread or its tokio runtime could not be created.
    #[error("cannot start server thread: {0}")]
    Runtime(#[source] io::Error),
    /// A server that runs as its own process (the Kafka broker) could not be started.
    #[error("cannot start {what}: {message}")]
    Process {
        /// What was started.
        what: &'static str,
        /// Why it is not running.
        message: String,
    },
    /// Waiting for Ctrl-C / SIGTERM failed in `serve_demo_forever`.
    #[error("cannot listen for shutdown signals: {0}")]
    Signal(#[source] io::Error),
}
