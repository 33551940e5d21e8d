//! Plumbing shared by every synthetic server: binding loopback listeners, the accept loop,
//! and stop-on-drop.
//!
//! A server here is a set of accept loops that each own their connections (in a `JoinSet`),
//! so that stopping an accept loop also aborts every connection it accepted. The owner holds
//! a [`ServerHandle`]; dropping it stops everything without blocking, and
//! [`ServerHandle::stopped`] waits until every listener and connection is gone (ports free).
//! This module must not know about HTTP or about what a server answers, and must never bind
//! anything outside 127.0.0.0/8.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::TestkitError;

/// Owner side of a running server: stop on drop, or stop and wait.
#[derive(Debug)]
pub(crate) struct ServerHandle {
    stop_tx: Option<watch::Sender<()>>,
    done_rx: mpsc::Receiver<()>,
}

/// Server side: every accept loop and every connection holds a clone; the owner knows all
/// are gone when the `alive` channel closes.
#[derive(Debug, Clone)]
pub(crate) struct StopSignal {
    stop_rx: watch::Receiver<()>,
    alive: mpsc::Sender<()>,
}

impl ServerHandle {
    pub(crate) fn new() -> (ServerHandle, StopSignal) {
        let (stop_tx, stop_rx) = watch::channel(());
        let (alive, done_rx) = mpsc::channel(1);
        (
            ServerHandle {
                stop_tx: Some(stop_tx),
                done_rx,
            },
            StopSignal { stop_rx, alive },
        )
    }

    /// Asks every accept loop to stop; does not wait.
    pub(crate) fn stop(&mut self) {
        self.stop_tx = None;
    }

    /// Stops and waits until every listener and connection of this server is dropped.
    pub(crate) async fn stopped(&mut self) {
        self.stop();
        while self.done_rx.recv().await.is_some() {}
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binds `ip:port` with the standard library (so it works outside a runtime), non-blocking.
pub(crate) fn bind_std(ip: Ipv4Addr, port: u16) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(SocketAddrV4::new(ip, port))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Binds `127.0.0.1:0`, for servers that only need some free port.
pub(crate) fn bind_any_loopback() -> Result<std::net::TcpListener, TestkitError> {
    bind_std(Ipv4Addr::LOCALHOST, 0).map_err(|source| TestkitError::Bind {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        source,
    })
}

/// Accepts connections until the owner stops the server, running `on_conn` for each one in
/// a task owned by this loop. When the loop ends, the listener is closed first, then every
/// connection is aborted and awaited.
pub(crate) async fn accept_loop<F, Fut>(listener: TcpListener, signal: StopSignal, on_conn: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let StopSignal { mut stop_rx, alive } = signal;
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            // Ok (never sent) or Err (owner dropped): either way, stop.
            _ = stop_rx.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = on_conn(stream);
                    let alive = alive.clone();
                    conns.spawn(async move {
                        conn.await;
                        drop(alive);
                    });
                }
                Err(err) => {
                    // Typically EMFILE under a benchmark: back off instead of spinning.
                    tracing::debug!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
    drop(alive);
}
