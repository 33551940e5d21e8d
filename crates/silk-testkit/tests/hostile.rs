//! Each hostile server misbehaves exactly as documented, over real sockets.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use silk_testkit::hostile::{
    self, GARBAGE_BYTES, HUGE_BODY_DECLARED_BYTES, LATIN1_TITLE, SLOW_DRIP_DECLARED_BYTES,
    TRUNCATED_DECLARED_BYTES, TRUNCATED_SENT_BYTES,
};
use silk_testkit::{HostileKind, HostileServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Sends a bare GET and reads until the server closes.
async fn raw_get(server: &HostileServer, path: &str) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr());
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    out
}

fn split_head(response: &[u8]) -> (String, &[u8]) {
    let end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    (
        String::from_utf8(response[..end].to_vec()).unwrap(),
        &response[end + 4..],
    )
}

#[tokio::test]
async fn garbage_is_not_http() {
    let server = hostile::garbage().await.unwrap();
    let bytes = raw_get(&server, "/").await;
    assert_eq!(bytes.len(), GARBAGE_BYTES);
    assert!(!bytes.starts_with(b"HTTP/"));
    assert!(client().get(server.base_url()).send().await.is_err());
    assert_eq!(server.connections(), 2);
}

#[tokio::test]
async fn truncated_sends_less_than_it_announces() {
    let server = hostile::truncated().await.unwrap();
    let bytes = raw_get(&server, "/").await;
    let (head, body) = split_head(&bytes);
    assert!(head.starts_with("HTTP/1.1 200 OK"));
    assert!(head.contains(&format!("Content-Length: {TRUNCATED_DECLARED_BYTES}")));
    assert_eq!(body.len(), TRUNCATED_SENT_BYTES);
    assert!(body.starts_with(b"<!DOCTYPE html>"));

    let resp = client().get(server.base_url()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(TRUNCATED_DECLARED_BYTES));
    assert!(
        resp.bytes().await.is_err(),
        "a truncated body must be an error"
    );
}

#[tokio::test]
async fn endless_redirect_never_ends() {
    let server = hostile::endless_redirect().await.unwrap();
    let raw = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let first = raw.get(server.base_url()).send().await.unwrap();
    assert_eq!(first.status(), 302);
    assert_eq!(first.headers()["location"], "/a/0");
    let hop = raw.get(server.url("/a/41")).send().await.unwrap();
    assert_eq!(hop.status(), 302);
    assert_eq!(hop.headers()["location"], "/a/42");

    let err = client().get(server.base_url()).send().await.unwrap_err();
    assert!(err.is_redirect(), "{err}");
    assert!(server.requests() > 10);
}

#[tokio::test]
async fn huge_body_streams_without_end() {
    let server = hostile::huge_body().await.unwrap();
    let mut resp = client().get(server.base_url()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(HUGE_BODY_DECLARED_BYTES));
    let mut read = 0usize;
    let mut first = true;
    while read < 10_000_000 {
        let chunk = resp.chunk().await.unwrap().expect("more body");
        if first {
            assert!(chunk.starts_with(b"<html><body><p>"));
            first = false;
        }
        read += chunk.len();
    }
    drop(resp);
    // The server survives the client hanging up and serves the next one.
    let again = client().get(server.base_url()).send().await.unwrap();
    assert_eq!(again.content_length(), Some(HUGE_BODY_DECLARED_BYTES));
}

#[tokio::test]
async fn invalid_utf8_declares_utf8_but_is_not() {
    let server = hostile::invalid_utf8().await.unwrap();
    let resp = client().get(server.url("/anything")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    let body = resp.bytes().await.unwrap();
    assert!(std::str::from_utf8(&body).is_err());
    assert!(body.windows(18).any(|w| w == b"<a href=\"/next\">ne"));
    let lossy = String::from_utf8_lossy(&body);
    assert!(lossy.contains('\u{FFFD}'));
}

#[tokio::test]
async fn latin1_page_needs_its_meta_charset() {
    let server = hostile::latin1().await.unwrap();
    let resp = client().get(server.base_url()).send().await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/html");
    let body = resp.bytes().await.unwrap();
    assert!(
        std::str::from_utf8(&body).is_err(),
        "Latin-1 bytes are not UTF-8"
    );
    assert!(body.windows(10).any(|w| w == b"iso-8859-1"));
    // ISO-8859-1 maps each byte to the code point of the same value.
    let decoded: String = body.iter().map(|&b| b as char).collect();
    assert!(decoded.contains(&format!("<title>{LATIN1_TITLE}</title>")));
    assert!(decoded.contains("href=\"/next\""));
}

#[tokio::test]
async fn hang_never_answers() {
    let server = hostile::hang().await.unwrap();
    let started = Instant::now();
    let err = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap()
        .get(server.base_url())
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(290));
    assert_eq!(server.connections(), 1);
    assert_eq!(server.requests(), 0);
}

#[tokio::test]
async fn slow_drip_sends_headers_then_a_byte_a_second() {
    let server = hostile::slow_drip().await.unwrap();
    let started = Instant::now();
    let mut resp = client().get(server.base_url()).send().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "headers come at once"
    );
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(SLOW_DRIP_DECLARED_BYTES));
    let mut body = Vec::new();
    let window = tokio::time::sleep(Duration::from_millis(2_500));
    tokio::pin!(window);
    loop {
        tokio::select! {
            _ = &mut window => break,
            chunk = resp.chunk() => body.extend_from_slice(&chunk.unwrap().unwrap()),
        }
    }
    assert!(
        (1..=3).contains(&body.len()),
        "{} bytes in 2.5 s",
        body.len()
    );
    assert!(b"<html>".starts_with(&body));
}

#[tokio::test]
async fn status_answers_any_code() {
    let server = hostile::status().await.unwrap();
    let c = client();
    for code in [200u16, 201, 204, 403, 404, 418, 429, 500, 502, 503, 599] {
        let resp = c
            .get(server.url(&format!("/status/{code}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), code);
        let retry_after = resp.headers().get("retry-after").cloned();
        assert_eq!(retry_after.is_some(), code == 429 || code == 503, "{code}");
        let body = resp.text().await.unwrap();
        assert_eq!(body.is_empty(), code == 204, "{code}");
    }
    for bad in ["/status/abc", "/status/99", "/status/600"] {
        let resp = c.get(server.url(bad)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{bad}");
    }
    assert_eq!(c.get(server.base_url()).send().await.unwrap().status(), 200);
    assert_eq!(server.requests(), 15);
}

#[tokio::test]
async fn every_kind_starts_on_its_own_port_and_shutdown_closes_it() {
    let mut ports = BTreeSet::new();
    let mut servers = Vec::new();
    for kind in HostileKind::ALL {
        let server = HostileServer::start(kind).await.unwrap();
        assert_eq!(server.kind(), kind);
        assert!(server.base_url().starts_with("http://127.0.0.1:"));
        ports.insert(server.port());
        servers.push(server);
    }
    assert_eq!(ports.len(), HostileKind::ALL.len());
    // A hanging connection must not keep the server alive.
    let hang = servers
        .iter()
        .find(|s| s.kind() == HostileKind::Hang)
        .unwrap();
    let _held = tokio::net::TcpStream::connect(hang.addr()).await.unwrap();
    for server in servers {
        let addr = server.addr();
        server.shutdown().await;
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{addr}"
        );
    }
}
