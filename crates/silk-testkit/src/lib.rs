//! Synthetic sites for Silk's tests, README demo and benchmarks: there is no internet where
//! they run, so everything a crawler is tested against is served from here, on 127.0.0.0/8.
//!
//! - [`demo`]: a deterministic multi-host shop ([`DemoSite`]) with product pages, search
//!   pages, every kind of link a canonicaliser must collapse, robots.txt, redirects, 404s
//!   and a spider trap; it records hits so that tests can check what a crawler fetched,
//!   and it is fast enough (tens of thousands of pages a second on one core) for benchmarks.
//! - [`hostile`]: servers that misbehave on purpose (garbage, truncation, endless
//!   redirects, huge or slow bodies, bad encodings, hangs, arbitrary status codes).
//! - [`git`]: a real git server (git's `http-backend` behind basic auth) and a working
//!   repository to commit, tag and push to it.
//! - [`receiver`]: a webhook receiver that records what it gets and answers as told.
//! - [`containers`]: podman set up for these sandboxes, with a base image made on the spot.
//! - [`kafka`]: a real Kafka-protocol broker (tansu) on a loopback port of its own.
//! - [`redis_cluster`]: a real Redis Cluster (masters and replicas) on loopback ports.
//! - [`eventually`]: the one polling helper, for what no event announces.
//!
//! This crate must not depend on any other Silk crate (everything may depend on it in
//! tests), must never bind or connect outside 127.0.0.0/8, and prints nothing: callers
//! print what they want from the returned handles.

pub mod containers;
pub mod demo;
mod error;
mod eventually;
pub mod git;
pub mod hostile;
pub mod kafka;
pub mod mutate;
pub mod receiver;
pub mod redis_cluster;
mod rng;
mod server;

pub use demo::{DemoConfig, DemoSite, DemoStats, PageInfo};
pub use error::TestkitError;
pub use eventually::{POLL_EVERY, eventually, eventually_blocking};
pub use git::{GitServer, WorkRepo};
pub use hostile::{HostileKind, HostileServer};
pub use kafka::KafkaBroker;
pub use receiver::{Received, Receiver};
pub use redis_cluster::{RedisCluster, redis_cluster_for_test};

/// A TCP port that was free on `127.0.0.1` a moment ago, for a server a test starts.
///
/// It is picked below the kernel's ephemeral range (`ip_local_port_range`), so no outgoing
/// connection of any process takes it as its local port before the server binds it (the
/// kernel's own pick for port 0 comes from that range: a busy test could lose it, and a
/// server then failed with "address in use"), and never twice in one test process. Another
/// process may still bind it first; prefer `port: 0` in [`DemoConfig`] where possible.
///
/// # Panics
///
/// If no port on `127.0.0.1` can be bound at all (no loopback interface).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static HANDED_OUT: parking_lot::Mutex<Vec<u16>> = parking_lot::Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (low, high) = below_ephemeral_range();
    let mut handed_out = HANDED_OUT.lock();
    if high > low {
        let span = u64::from(high - low);
        // A different walk per process (its pid) and per call, so that two test processes
        // do not try the same ports in the same order.
        let start = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..span.min(4_096) {
            let step = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(7_919);
            let port = low + u16::try_from(start.wrapping_add(step) % span).unwrap_or(0);
            if handed_out.contains(&port) {
                continue;
            }
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                handed_out.push(port);
                return port;
            }
        }
    }
    loop {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("cannot bind 127.0.0.1:0 to find a free port");
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
}

/// The ports `free_port` picks from: from 15000 up to the start of the kernel's ephemeral
/// range (32768 by default), or an empty range where that is not known or too low.
fn below_ephemeral_range() -> (u16, u16) {
    const LOW: u16 = 15_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok());
    match ephemeral_low {
        Some(start) if start > LOW + 1_000 => (LOW, start),
        _ => (0, 0),
    }
}

/// The URL of a test service, or the path of a test tool, from the environment variable `var`
/// (`SILK_TEST_REDIS`, `SILK_TEST_PYTHON`, …), or
/// `None` after printing `skipped: VAR not set` when it is unset or empty.
///
/// # Panics
///
/// When the variable is unset under CI (`CI` set): CI must run every test.
pub fn service_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test: set {var}"
            );
            println!("skipped: {var} not set");
            None
        }
    }
}

/// Serves a demo site until Ctrl-C (or SIGTERM on Unix), for `silk demo-site`.
///
/// `on_ready` is called once the site is listening, so that the caller can print its
/// URLs (this crate prints nothing). The site is stopped, and its ports freed, before this
/// returns.
pub async fn serve_demo_forever<F>(cfg: DemoConfig, on_ready: F) -> Result<(), TestkitError>
where
    F: FnOnce(&DemoSite),
{
    // Listen before announcing readiness, so that a signal sent right after is not lost.
    let shutdown_signal = ShutdownSignal::listen()?;
    let site = DemoSite::start(cfg).await?;
    on_ready(&site);
    shutdown_signal.recv().await;
    site.shutdown().await;
    Ok(())
}

#[cfg(unix)]
struct ShutdownSignal {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl ShutdownSignal {
    fn listen() -> Result<Self, TestkitError> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(ShutdownSignal {
            interrupt: signal(SignalKind::interrupt()).map_err(TestkitError::Signal)?,
            terminate: signal(SignalKind::terminate()).map_err(TestkitError::Signal)?,
        })
    }

    async fn recv(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(not(unix))]
struct ShutdownSignal;

#[cfg(not(unix))]
impl ShutdownSignal {
    fn listen() -> Result<Self, TestkitError> {
        Ok(ShutdownSignal)
    }

    async fn recv(self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
