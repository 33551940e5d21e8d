//! Small real servers on 127.0.0.1 for the integration tests: an axum app on a free port,
//! and a recording HTTP forward proxy.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves `app` on a free port of 127.0.0.1 until the test's runtime ends.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A CONNECT-less HTTP forward proxy that records the request line of every request it
/// forwards (`GET http://127.0.0.1:1234/path`), one request per client connection.
pub struct RecordingProxy {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl RecordingProxy {
    pub async fn start() -> RecordingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, record.clone()));
            }
        });
        RecordingProxy { addr, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

async fn forward(mut client: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("").to_owned();
    let mut parts = request_line.split(' ');
    let (method, uri) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    seen.lock().unwrap().push(format!("{method} {uri}"));
    let Ok(target) = url::Url::parse(uri) else {
        return;
    };
    let origin_form = &uri[uri.find(target.path()).unwrap_or(uri.len())..];
    let mut out = format!("{method} {origin_form} HTTP/1.1\r\n");
    let mut body_len = 0usize;
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if name == "content-length" {
            body_len = line
                .split(':')
                .nth(1)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
        }
        if name != "connection" && name != "proxy-connection" {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut body = buf[head_end..].to_vec();
    while body.len() < body_len {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let host = format!(
        "{}:{}",
        target.host_str().unwrap_or(""),
        target.port_or_known_default().unwrap_or(80)
    );
    let Ok(mut upstream) = TcpStream::connect(host).await else {
        return;
    };
    if upstream.write_all(out.as_bytes()).await.is_err() || upstream.write_all(&body).await.is_err()
    {
        return;
    }
    let mut response = Vec::new();
    let _ = upstream.read_to_end(&mut response).await;
    let _ = client.write_all(&response).await;
    let _ = client.shutdown().await;
}
