//! Helpers of the NATS tests: the shared server from `SILK_TEST_NATS`, and a private
//! `nats-server` process that a test can kill with SIGKILL and start again.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `nats-server` binary for the kill/restart tests: on `PATH`, or in `/usr/sbin`.
pub fn nats_server_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|bin| bin.is_file())
}

/// The shared server's URL, or `None` after printing the skip line.
pub fn shared_nats_url() -> Option<String> {
    match std::env::var("SILK_TEST_NATS") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            println!("skipped: SILK_TEST_NATS not set");
            None
        }
    }
}

/// A port nothing listens on (bound and released; good enough for a test).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// A `nats-server -js` child process on 127.0.0.1 with its own store directory.
pub struct NatsServer {
    binary: PathBuf,
    child: Option<Child>,
    pub port: u16,
    pub store: PathBuf,
}

impl NatsServer {
    /// Starts a server on a free port with a store under `store`, or `None` (after printing
    /// the skip line) when the binary is not installed.
    pub fn start(store: &Path) -> Option<NatsServer> {
        let mut server = Self::stopped(store)?;
        server.restart();
        Some(server)
    }

    /// A server on a free port that is not started yet (`restart` starts it), or `None`
    /// (after printing the skip line) when the binary is not installed.
    pub fn stopped(store: &Path) -> Option<NatsServer> {
        let Some(binary) = nats_server_binary() else {
            println!("skipped: nats-server not installed");
            return None;
        };
        Some(NatsServer {
            binary,
            child: None,
            port: free_port(),
            store: store.to_owned(),
        })
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the process (same port, same store) and waits until it says it is ready.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let mut child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nats-server");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        // Reads the log until the ready line, then keeps draining it so the server never
        // blocks on a full pipe.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("Server is ready")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("nats-server became ready");
        self.child = Some(child);
    }

    /// Uses another store directory from the next `restart` on (a server that lost its data).
    pub fn set_store(&mut self, store: &Path) {
        self.store = store.to_owned();
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL nats-server");
            child.wait().expect("reap nats-server");
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill9();
    }
}
