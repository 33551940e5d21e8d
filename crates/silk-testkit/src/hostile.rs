//! Misbehaving servers, for tests of what a crawler does with bad input.
//!
//! Each [`HostileServer`] listens on its own free port of `127.0.0.1` and misbehaves in one
//! way ([`HostileKind`]); `/` shows the misbehaviour (for `Status`, use `/status/{code}`).
//! They are deliberately wrong, so they must stay cheap to the machine running them: no
//! server here buffers a body (the 5 GB body streams one static 64 KB chunk over and over),
//! and every connection is closed when the server is dropped. They must never bind outside
//! 127.0.0.0/8 and print nothing.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::TestkitError;
use crate::rng::Rng;
use crate::server::{ServerHandle, accept_loop, bind_any_loopback};

/// `Content-Length` announced by [`HostileKind::Truncated`].
pub const TRUNCATED_DECLARED_BYTES: u64 = 100_000;
/// Body bytes actually sent by [`HostileKind::Truncated`] before it closes.
pub const TRUNCATED_SENT_BYTES: usize = 1_000;
/// `Content-Length` announced (and, given days, sent) by [`HostileKind::HugeBody`].
pub const HUGE_BODY_DECLARED_BYTES: u64 = 5_000_000_000;
/// `Content-Length` announced by [`HostileKind::SlowDrip`], which sends one byte a second.
pub const SLOW_DRIP_DECLARED_BYTES: u64 = 100_000;
/// How often [`HostileKind::SlowDrip`] sends one body byte.
pub const SLOW_DRIP_INTERVAL: Duration = Duration::from_secs(1);
/// Title and `h1.title` of the [`HostileKind::Latin1`] page once decoded as ISO-8859-1.
pub const LATIN1_TITLE: &str = "Café Müller";
/// Bytes of random garbage [`HostileKind::Garbage`] writes before closing.
pub const GARBAGE_BYTES: usize = 512;

/// One way of misbehaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostileKind {
    /// Accepts, reads the request, writes random non-HTTP bytes, closes.
    Garbage,
    /// `200` with `Content-Length: 100000`, sends 1,000 bytes of HTML, closes.
    Truncated,
    /// `/` → `302 /a/0`; `/a/{n}` → `302 /a/{n+1}`, forever.
    EndlessRedirect,
    /// `200` with `Content-Length: 5000000000`, streams `<html><body><p>000…` for as long as
    /// the client reads; costs the server no memory.
    HugeBody,
    /// `200 text/html; charset=utf-8` whose body holds invalid UTF-8 sequences (`\xFF`,
    /// `\xC3\x28`, lone continuation, overlong, surrogate, truncated) and a link to `/next`.
    InvalidUtf8,
    /// `200 text/html` (no charset in the header) with `<meta charset="iso-8859-1">` and
    /// Latin-1 bytes: title and heading are [`LATIN1_TITLE`]; a link to `/next`.
    Latin1,
    /// Accepts and never answers (reads and discards until the client hangs up).
    Hang,
    /// Sends `200` headers with `Content-Length: 100000` at once, then one body byte a second.
    SlowDrip,
    /// `/status/{code}` answers with that status (200..=599, else 400) and a small HTML body
    /// (none for 204 and 304); 429 and 503 carry `Retry-After: 1`; `/` lists a few codes.
    Status,
    /// `200 text/html`: [`DEEP_NESTING_LEVELS`] nested `<div>` elements (about 5 MB; built
    /// once per process and shared), the page that makes an HTML tree builder quadratic;
    /// `/levels/{n}` nests `n` (at most as many).
    DeepNesting,
}

/// How deep [`HostileKind::DeepNesting`] nests its `<div>` elements.
pub const DEEP_NESTING_LEVELS: usize = 1_000_000;

fn deep_nesting_page(levels: usize) -> Bytes {
    let build = |levels: usize| {
        let mut page = String::with_capacity(levels * 11 + 64);
        page.push_str("<html><body>");
        page.push_str(&"<div>".repeat(levels));
        page.push_str("<h1 class=\"title\">deep</h1>");
        page.push_str(&"</div>".repeat(levels));
        page.push_str("</body></html>\n");
        Bytes::from(page)
    };
    if levels >= DEEP_NESTING_LEVELS {
        static PAGE: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
        return PAGE.get_or_init(|| build(DEEP_NESTING_LEVELS)).clone();
    }
    build(levels)
}

impl HostileKind {
    /// Every kind, in declaration order.
    pub const ALL: [HostileKind; 10] = [
        HostileKind::Garbage,
        HostileKind::Truncated,
        HostileKind::EndlessRedirect,
        HostileKind::HugeBody,
        HostileKind::InvalidUtf8,
        HostileKind::Latin1,
        HostileKind::Hang,
        HostileKind::SlowDrip,
        HostileKind::Status,
        HostileKind::DeepNesting,
    ];

    /// A short snake_case name, e.g. `huge_body`.
    pub fn name(self) -> &'static str {
        match self {
            HostileKind::Garbage => "garbage",
            HostileKind::Truncated => "truncated",
            HostileKind::EndlessRedirect => "endless_redirect",
            HostileKind::HugeBody => "huge_body",
            HostileKind::InvalidUtf8 => "invalid_utf8",
            HostileKind::Latin1 => "latin1",
            HostileKind::Hang => "hang",
            HostileKind::SlowDrip => "slow_drip",
            HostileKind::Status => "status",
            HostileKind::DeepNesting => "deep_nesting",
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
}

/// A running misbehaving server; stops on drop.
#[derive(Debug)]
pub struct HostileServer {
    kind: HostileKind,
    addr: SocketAddr,
    counters: Arc<Counters>,
    handle: ServerHandle,
}

impl HostileServer {
    /// Starts a server of `kind` on a free port of `127.0.0.1`, on the current runtime.
    pub async fn start(kind: HostileKind) -> Result<HostileServer, TestkitError> {
        let std_listener = bind_any_loopback()?;
        let addr = std_listener
            .local_addr()
            .map_err(|source| TestkitError::Bind {
                addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                source,
            })?;
        let listener = TcpListener::from_std(std_listener).map_err(TestkitError::Runtime)?;
        let counters = Arc::new(Counters::default());
        let (handle, signal) = ServerHandle::new();
        let conn_counters = counters.clone();
        tokio::spawn(accept_loop(listener, signal, move |stream| {
            conn_counters.connections.fetch_add(1, Ordering::Relaxed);
            serve(kind, stream, conn_counters.clone())
        }));
        Ok(HostileServer {
            kind,
            addr,
            counters,
            handle,
        })
    }

    /// What this server does wrong.
    pub fn kind(&self) -> HostileKind {
        self.kind
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT/`.
    pub fn base_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// `http://127.0.0.1:PORT{path}`; `path` starts with `/`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.counters.connections.load(Ordering::Relaxed)
    }

    /// Requests whose head was read so far (`Hang` reads none, by design).
    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::Relaxed)
    }

    /// Stops and waits until the listener and every connection are closed.
    pub async fn shutdown(mut self) {
        self.handle.stopped().await;
    }
}

/// Starts a [`HostileKind::Garbage`] server.
pub async fn garbage() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::Garbage).await
}
/// Starts a [`HostileKind::Truncated`] server.
pub async fn truncated() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::Truncated).await
}
/// Starts a [`HostileKind::EndlessRedirect`] server.
pub async fn endless_redirect() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::EndlessRedirect).await
}
/// Starts a [`HostileKind::HugeBody`] server.
pub async fn huge_body() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::HugeBody).await
}
/// Starts a [`HostileKind::InvalidUtf8`] server.
pub async fn invalid_utf8() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::InvalidUtf8).await
}
/// Starts a [`HostileKind::Latin1`] server.
pub async fn latin1() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::Latin1).await
}
/// Starts a [`HostileKind::Hang`] server.
pub async fn hang() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::Hang).await
}
/// Starts a [`HostileKind::SlowDrip`] server.
pub async fn slow_drip() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::SlowDrip).await
}
/// Starts a [`HostileKind::Status`] server.
pub async fn status() -> Result<HostileServer, TestkitError> {
    HostileServer::start(HostileKind::Status).await
}

const INVALID_UTF8_PAGE: &[u8] = b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
<title>Broken \xFF\xFE bytes</title></head>\n<body><h1 class=\"title\">Invalid \xC3\x28 UTF-8</h1>\n\
<p>lone continuation \x80, overlong \xC0\xAF, surrogate \xED\xA0\x80, truncated \xE2\x82</p>\n\
<p><a href=\"/next\">next page</a></p>\n</body></html>\n";

const LATIN1_PAGE: &[u8] = b"<!DOCTYPE html>\n<html><head><meta charset=\"iso-8859-1\">\
<title>Caf\xE9 M\xFCller</title></head>\n<body><h1 class=\"title\">Caf\xE9 M\xFCller</h1>\n\
<p>Gr\xFC\xDFe aus K\xF6ln: \xA3 5, \xBD Preis, na\xEFve fa\xE7ade.</p>\n\
<p><a href=\"/next\">next page</a></p>\n</body></html>\n";

static ZEROS: [u8; 64 * 1024] = [b'0'; 64 * 1024];

async fn serve(kind: HostileKind, stream: TcpStream, counters: Arc<Counters>) {
    let result = match kind {
        HostileKind::Garbage => serve_garbage(stream, &counters).await,
        HostileKind::Truncated => serve_truncated(stream, &counters).await,
        HostileKind::HugeBody => serve_huge_body(stream, &counters).await,
        HostileKind::Hang => serve_hang(stream).await,
        HostileKind::SlowDrip => serve_slow_drip(stream, &counters).await,
        HostileKind::EndlessRedirect
        | HostileKind::InvalidUtf8
        | HostileKind::Latin1
        | HostileKind::Status
        | HostileKind::DeepNesting => {
            serve_http(kind, stream, counters).await;
            Ok(())
        }
    };
    if let Err(err) = result {
        tracing::debug!(%err, kind = kind.name(), "hostile connection ended");
    }
}

/// Reads up to the end of a request head (or EOF, or 16 KB). Returns whether a head was read.
async fn read_head(stream: &mut TcpStream, counters: &Counters) -> std::io::Result<bool> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while buf.len() < 16 * 1024 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(false);
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            counters.requests.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
    }
    Ok(false)
}

async fn serve_garbage(mut stream: TcpStream, counters: &Counters) -> std::io::Result<()> {
    // Read first so that closing does not reset the connection under unread request bytes;
    // a client that sends nothing gets garbage after a short wait.
    let _ = tokio::time::timeout(Duration::from_secs(2), read_head(&mut stream, counters)).await;
    let mut rng = Rng::for_page(
        0xBAD,
        0,
        counters.connections.load(Ordering::Relaxed) as u32,
        0,
    );
    let mut garbage = Vec::with_capacity(GARBAGE_BYTES);
    while garbage.len() < GARBAGE_BYTES {
        garbage.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    garbage.truncate(GARBAGE_BYTES);
    garbage[0] = 0; // never starts like "HTTP/"
    stream.write_all(&garbage).await?;
    stream.shutdown().await
}

async fn serve_truncated(mut stream: TcpStream, counters: &Counters) -> std::io::Result<()> {
    if !read_head(&mut stream, counters).await? {
        return Ok(());
    }
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
Content-Length: {TRUNCATED_DECLARED_BYTES}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    let head_len = response.len();
    response.extend_from_slice(
        b"<!DOCTYPE html>\n<html><head><title>Truncated</title></head><body>\
<h1 class=\"title\">Truncated</h1><p><a href=\"/next\">next page</a></p><p>",
    );
    response.resize(head_len + TRUNCATED_SENT_BYTES, b'x');
    stream.write_all(&response).await?;
    stream.shutdown().await
}

async fn serve_huge_body(mut stream: TcpStream, counters: &Counters) -> std::io::Result<()> {
    if !read_head(&mut stream, counters).await? {
        return Ok(());
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
Content-Length: {HUGE_BODY_DECLARED_BYTES}\r\n\r\n<html><body><p>"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut left = HUGE_BODY_DECLARED_BYTES - "<html><body><p>".len() as u64;
    while left > 0 {
        let n = left.min(ZEROS.len() as u64) as usize;
        stream.write_all(&ZEROS[..n]).await?;
        left -= n as u64;
    }
    stream.shutdown().await
}

async fn serve_hang(mut stream: TcpStream) -> std::io::Result<()> {
    let mut sink = [0u8; 1024];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

async fn serve_slow_drip(mut stream: TcpStream, counters: &Counters) -> std::io::Result<()> {
    if !read_head(&mut stream, counters).await? {
        return Ok(());
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
Content-Length: {SLOW_DRIP_DECLARED_BYTES}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let body = b"<html><body><p>slow</p>";
    for k in 0..SLOW_DRIP_DECLARED_BYTES as usize {
        tokio::time::sleep(SLOW_DRIP_INTERVAL).await;
        let byte = body.get(k).copied().unwrap_or(b'.');
        stream.write_all(&[byte]).await?;
    }
    stream.shutdown().await
}

async fn serve_http(kind: HostileKind, stream: TcpStream, counters: Arc<Counters>) {
    let service = service_fn(move |req: Request<Incoming>| {
        counters.requests.fetch_add(1, Ordering::Relaxed);
        let resp = answer(kind, req.uri().path());
        async move { Ok::<_, Infallible>(resp) }
    });
    if let Err(err) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%err, kind = kind.name(), "hostile http connection ended");
    }
}

fn response(status: u16, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn redirect(to: String) -> Response<Full<Bytes>> {
    let mut resp = response(
        302,
        "text/html; charset=utf-8",
        Bytes::from_static(b"Found\n"),
    );
    if let Ok(location) = HeaderValue::from_str(&to) {
        resp.headers_mut().insert(header::LOCATION, location);
    }
    resp
}

fn answer(kind: HostileKind, path: &str) -> Response<Full<Bytes>> {
    const HTML: &str = "text/html; charset=utf-8";
    let not_found = || {
        response(
            404,
            HTML,
            Bytes::from_static(b"<html><body>404</body></html>\n"),
        )
    };
    match kind {
        HostileKind::EndlessRedirect => match path {
            "/" => redirect("/a/0".into()),
            _ => match path.strip_prefix("/a/").and_then(|n| n.parse::<u64>().ok()) {
                Some(n) => redirect(format!("/a/{}", n.saturating_add(1))),
                None => not_found(),
            },
        },
        HostileKind::InvalidUtf8 => response(200, HTML, Bytes::from_static(INVALID_UTF8_PAGE)),
        HostileKind::Latin1 => response(200, "text/html", Bytes::from_static(LATIN1_PAGE)),
        HostileKind::DeepNesting => {
            let levels = match path.strip_prefix("/levels/") {
                Some(n) => match n.parse::<usize>() {
                    Ok(n) => n.min(DEEP_NESTING_LEVELS),
                    Err(_) => return not_found(),
                },
                None => DEEP_NESTING_LEVELS,
            };
            response(200, HTML, deep_nesting_page(levels))
        }
        HostileKind::Status => {
            if path == "/" {
                return response(
                    200,
                    HTML,
                    Bytes::from_static(
                        b"<html><body><a href=\"/status/200\">200</a> <a href=\"/status/404\">404</a> \
<a href=\"/status/429\">429</a> <a href=\"/status/500\">500</a> <a href=\"/status/503\">503</a>\
</body></html>\n",
                    ),
                );
            }
            let Some(code) = path.strip_prefix("/status/") else {
                return not_found();
            };
            let code = code
                .parse::<u16>()
                .ok()
                .filter(|c| (200..=599).contains(c))
                .unwrap_or(400);
            let body = if code == 204 || code == 304 {
                Bytes::new()
            } else {
                Bytes::from(format!(
                    "<html><body><h1 class=\"title\">status {code}</h1></body></html>\n"
                ))
            };
            let mut resp = response(code, HTML, body);
            if code == 429 || code == 503 {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            resp
        }
        // Served over raw TCP, never through here.
        HostileKind::Garbage
        | HostileKind::Truncated
        | HostileKind::HugeBody
        | HostileKind::Hang
        | HostileKind::SlowDrip => not_found(),
    }
}
