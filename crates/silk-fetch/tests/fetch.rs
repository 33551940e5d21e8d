//! The fetcher against real servers on 127.0.0.1: the testkit's hostile servers and small
//! axum apps. Timeouts are the only waits, and they are what is under test.

mod common;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use bytes::Bytes;
use common::{RecordingProxy, serve};
use silk_core::{Method, Request};
use silk_fetch::{ErrorKind, FetchConfig, FetchError, Fetcher, Retry, decode_html};
use silk_testkit::hostile::{self, HUGE_BODY_DECLARED_BYTES, LATIN1_TITLE, TRUNCATED_SENT_BYTES};
use std::io::Write;
use std::time::{Duration, Instant};

fn fetcher(timeout_ms: u64, max_body_bytes: u64) -> Fetcher {
    Fetcher::new(FetchConfig {
        timeout_ms,
        max_body_bytes,
        ..FetchConfig::default()
    })
    .unwrap()
}

fn get_req(url: &str) -> Request {
    Request::from_canonical(url.to_owned())
}

const PAGE: &str = "<html><body><h1>Compressed page</h1><p>lorem ipsum dolor sit amet, lorem ipsum dolor sit amet</p></body></html>";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 9, 22);
        w.write_all(data).unwrap();
    }
    out
}

fn encoded(
    coding: &'static str,
    body: Vec<u8>,
) -> ([(header::HeaderName, &'static str); 2], Vec<u8>) {
    (
        [
            (header::CONTENT_ENCODING, coding),
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        ],
        body,
    )
}

#[tokio::test]
async fn compressed_bodies_are_decoded_and_wire_bytes_counted() {
    let big = PAGE.repeat(50);
    let (gz, br, zl) = (
        gzip(big.as_bytes()),
        brotli(big.as_bytes()),
        deflate(big.as_bytes()),
    );
    let app = Router::new()
        .route("/gzip", get(move || async move { encoded("gzip", gz) }))
        .route("/br", get(move || async move { encoded("br", br) }))
        .route(
            "/deflate",
            get(move || async move { encoded("deflate", zl) }),
        )
        .route(
            "/corrupt",
            get(|| async { encoded("gzip", b"definitely not gzip".to_vec()) }),
        )
        .route(
            "/accept",
            get(|h: HeaderMap| async move { format!("{:?}", h.get(header::ACCEPT_ENCODING)) }),
        );
    let addr = serve(app).await;
    let f = fetcher(5_000, 1 << 20);
    for path in ["gzip", "br", "deflate"] {
        let resp = f
            .fetch(&get_req(&format!("http://{addr}/{path}")))
            .await
            .unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, big.as_bytes(), "{path}");
        assert!(
            resp.wire_bytes > 0 && resp.wire_bytes < big.len() as u64 / 5,
            "{path}: wire {}",
            resp.wire_bytes
        );
        assert_eq!(
            resp.content_type.as_deref(),
            Some("text/html; charset=utf-8")
        );
    }
    let err = f
        .fetch(&get_req(&format!("http://{addr}/corrupt")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    let resp = f
        .fetch(&get_req(&format!("http://{addr}/accept")))
        .await
        .unwrap();
    assert_eq!(
        std::str::from_utf8(&resp.body).unwrap(),
        "Some(\"gzip, deflate, br\")"
    );
}

#[tokio::test]
async fn gzip_bomb_stops_at_the_limit() {
    let bomb = gzip(&vec![b'a'; 64 << 20]);
    let app = Router::new().route("/bomb", get(move || async move { encoded("gzip", bomb) }));
    let addr = serve(app).await;
    let err = fetcher(10_000, 1 << 20)
        .fetch(&get_req(&format!("http://{addr}/bomb")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BodyTooLarge, "{err}");
    assert_eq!(err.retry(), Retry::Permanent);
}

#[tokio::test]
async fn redirect_is_returned_not_followed() {
    let server = hostile::endless_redirect().await.unwrap();
    let f = fetcher(5_000, 1 << 20);
    let resp = f.fetch(&get_req(&server.url("/"))).await.unwrap();
    assert_eq!(resp.status, 302);
    assert!(resp.is_redirect());
    assert_eq!(resp.location.as_deref(), Some(server.url("/a/0").as_str()));
    assert_eq!(resp.retry(&[]), None);
    assert_eq!(server.requests(), 1, "the client must not follow");
    let next = f
        .fetch(&get_req(resp.location.as_deref().unwrap()))
        .await
        .unwrap();
    assert_eq!(next.location.as_deref(), Some(server.url("/a/1").as_str()));
}

#[tokio::test]
async fn announced_huge_body_fails_at_once() {
    let server = hostile::huge_body().await.unwrap();
    let started = Instant::now();
    let err = fetcher(10_000, 16 << 20)
        .fetch(&get_req(&server.url("/")))
        .await
        .unwrap_err();
    match &err {
        FetchError::BodyTooLarge {
            announced, limit, ..
        } => {
            assert_eq!(*announced, Some(HUGE_BODY_DECLARED_BYTES));
            assert_eq!(*limit, 16 << 20);
        }
        other => panic!("expected body_too_large, got {other}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn unannounced_endless_body_is_cut_at_the_limit() {
    // A chunked body that never ends: only streaming enforcement can stop it.
    let app = Router::new().route(
        "/endless",
        get(|| async {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let stream =
                futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
            axum::body::Body::from_stream(stream)
        }),
    );
    let addr = serve(app).await;
    let started = Instant::now();
    let err = fetcher(20_000, 4 << 20)
        .fetch(&get_req(&format!("http://{addr}/endless")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::BodyTooLarge {
                announced: None,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn truncated_body_is_an_error() {
    let server = hostile::truncated().await.unwrap();
    let err = fetcher(5_000, 1 << 20)
        .fetch(&get_req(&server.url("/")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Truncated, "{err}");
    assert_eq!(err.retry(), Retry::Retryable);
    if let FetchError::Truncated { received, .. } = err {
        assert!(received <= TRUNCATED_SENT_BYTES as u64);
    }
}

#[tokio::test]
async fn garbage_response_is_a_protocol_error() {
    let server = hostile::garbage().await.unwrap();
    let err = fetcher(5_000, 1 << 20)
        .fetch(&get_req(&server.url("/")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
}

#[tokio::test]
async fn hang_times_out() {
    let server = hostile::hang().await.unwrap();
    let started = Instant::now();
    let err = fetcher(300, 1 << 20)
        .fetch(&get_req(&server.url("/")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(err.retry(), Retry::Retryable);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn slow_drip_hits_the_total_timeout() {
    let server = hostile::slow_drip().await.unwrap();
    let started = Instant::now();
    let err = fetcher(1_500, 1 << 20)
        .fetch(&get_req(&server.url("/")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Timeout {
                after_ms: 1_500,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn invalid_utf8_and_latin1_pages_decode() {
    let f = fetcher(5_000, 1 << 20);
    let bad = hostile::invalid_utf8().await.unwrap();
    let resp = f.fetch(&get_req(&bad.url("/"))).await.unwrap();
    let text = decode_html(&resp.body, resp.content_type.as_deref());
    assert!(text.contains("Invalid \u{fffd}( UTF-8"), "{text}");
    assert!(text.contains("<a href=\"/next\">"));
    let latin1 = hostile::latin1().await.unwrap();
    let resp = f.fetch(&get_req(&latin1.url("/"))).await.unwrap();
    assert_eq!(resp.content_type.as_deref(), Some("text/html"));
    let text = decode_html(&resp.body, resp.content_type.as_deref());
    assert!(
        text.contains(&format!("<h1 class=\"title\">{LATIN1_TITLE}</h1>")),
        "{text}"
    );
}

#[tokio::test]
async fn statuses_classified_with_retry_after() {
    let server = hostile::status().await.unwrap();
    let f = fetcher(5_000, 1 << 20);
    let retry_statuses = [408, 429, 500, 502, 503, 504];
    let cases = [
        (200, None),
        (404, Some(Retry::Permanent)),
        (429, Some(Retry::After(Duration::from_secs(1)))),
        (503, Some(Retry::After(Duration::from_secs(1)))),
        (500, Some(Retry::Retryable)),
    ];
    for (code, want) in cases {
        let resp = f
            .fetch(&get_req(&server.url(&format!("/status/{code}"))))
            .await
            .unwrap();
        assert_eq!(resp.status, code);
        assert_eq!(resp.retry(&retry_statuses), want, "status {code}");
    }
    let resp = f.fetch(&get_req(&server.url("/status/204"))).await.unwrap();
    assert!(resp.body.is_empty());
}

#[tokio::test]
async fn connection_refused_is_a_retryable_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = fetcher(5_000, 1 << 20)
        .fetch(&get_req(&format!("http://127.0.0.1:{port}/")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert_eq!(err.retry(), Retry::Retryable);
}

#[tokio::test]
async fn head_and_post() {
    let app = Router::new()
        .route("/page", get(|| async { "a body that HEAD must not read" }))
        .route("/echo", post(|body: Bytes| async move { body }));
    let addr = serve(app).await;
    let f = fetcher(5_000, 1 << 20);
    let mut head = get_req(&format!("http://{addr}/page"));
    head.method = Method::Head;
    let resp = f.fetch(&head).await.unwrap();
    assert_eq!(resp.status, 200);
    assert!(resp.body.is_empty());
    let mut post = get_req(&format!("http://{addr}/echo"));
    post.method = Method::Post;
    post.body = Some(b"k=v".to_vec());
    let resp = f.fetch(&post).await.unwrap();
    assert_eq!(&resp.body[..], b"k=v");
}

fn cookie_app() -> Router {
    Router::new()
        .route(
            "/set",
            get(|| async { ([(header::SET_COOKIE, "sid=abc123; Path=/")], "set") }),
        )
        .route(
            "/echo",
            get(|h: HeaderMap| async move {
                h.get(header::COOKIE)
                    .map(|v| v.to_str().unwrap_or("").to_owned())
                    .unwrap_or_default()
            }),
        )
}

#[tokio::test]
async fn cookies_are_kept_per_fetcher() {
    let addr = serve(cookie_app()).await;
    let (set, echo) = (format!("http://{addr}/set"), format!("http://{addr}/echo"));
    let a = fetcher(5_000, 1 << 20);
    let b = fetcher(5_000, 1 << 20);
    a.fetch(&get_req(&set)).await.unwrap();
    assert_eq!(
        &a.fetch(&get_req(&echo)).await.unwrap().body[..],
        b"sid=abc123"
    );
    assert_eq!(
        &a.clone().fetch(&get_req(&echo)).await.unwrap().body[..],
        b"sid=abc123",
        "clones share the jar"
    );
    assert_eq!(
        &b.fetch(&get_req(&echo)).await.unwrap().body[..],
        b"",
        "another fetcher has its own jar"
    );
    let off = Fetcher::new(FetchConfig {
        cookies: false,
        ..FetchConfig::default()
    })
    .unwrap();
    off.fetch(&get_req(&set)).await.unwrap();
    assert_eq!(&off.fetch(&get_req(&echo)).await.unwrap().body[..], b"");
}

#[tokio::test]
async fn headers_and_user_agent_are_sent() {
    let app = Router::new().route(
        "/h",
        get(|h: HeaderMap| async move {
            format!(
                "{}|{}",
                h[header::USER_AGENT].to_str().unwrap(),
                h["x-run"].to_str().unwrap()
            )
        }),
    );
    let addr = serve(app).await;
    let mut config = FetchConfig {
        user_agent: "testbot/2".into(),
        ..FetchConfig::default()
    };
    config.headers.insert("X-Run".into(), "r1".into());
    let resp = Fetcher::new(config)
        .unwrap()
        .fetch(&get_req(&format!("http://{addr}/h")))
        .await
        .unwrap();
    assert_eq!(&resp.body[..], b"testbot/2|r1");
}

#[tokio::test]
async fn proxies_are_used_in_turn_and_bad_ones_skipped() {
    let app = Router::new().route("/p/{n}", get(|| async { (StatusCode::OK, "via proxy") }));
    let addr = serve(app).await;
    let (p1, p2) = (RecordingProxy::start().await, RecordingProxy::start().await);
    let config = FetchConfig {
        proxies: vec![p1.url(), p2.url()],
        ..FetchConfig::default()
    };
    let f = Fetcher::new(config).unwrap();
    for n in 0..4 {
        let resp = f
            .fetch(&get_req(&format!("http://{addr}/p/{n}")))
            .await
            .unwrap();
        assert_eq!(&resp.body[..], b"via proxy");
        assert_eq!(resp.proxy, Some(n % 2));
    }
    assert_eq!(
        p1.seen(),
        [
            format!("GET http://{addr}/p/0"),
            format!("GET http://{addr}/p/2")
        ]
    );
    assert_eq!(
        p2.seen(),
        [
            format!("GET http://{addr}/p/1"),
            format!("GET http://{addr}/p/3")
        ]
    );
    f.proxies().mark_bad(0);
    for n in 4..6 {
        let resp = f
            .fetch(&get_req(&format!("http://{addr}/p/{n}")))
            .await
            .unwrap();
        assert_eq!(resp.proxy, Some(1));
    }
    assert_eq!(p1.seen().len(), 2);
    assert_eq!(p2.seen().len(), 4);
}

#[tokio::test]
async fn dead_proxy_fails_as_proxy_and_leaves_rotation() {
    let app = Router::new().route("/", get(|| async { "ok" }));
    let addr = serve(app).await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://user:pw@{}", l.local_addr().unwrap())
    };
    let live = RecordingProxy::start().await;
    let config = FetchConfig {
        proxies: vec![dead, live.url()],
        proxy_max_failures: 1,
        ..FetchConfig::default()
    };
    let f = Fetcher::new(config).unwrap();
    let err = f
        .fetch(&get_req(&format!("http://{addr}/")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Proxy, "{err}");
    assert_eq!(err.retry(), Retry::Retryable);
    assert!(!err.to_string().contains("pw"), "credentials leaked: {err}");
    assert!(f.proxies().is_bad(0));
    for _ in 0..3 {
        assert_eq!(
            f.fetch(&get_req(&format!("http://{addr}/")))
                .await
                .unwrap()
                .proxy,
            Some(1)
        );
    }
}

#[tokio::test]
async fn tls_against_a_plain_http_port_is_a_permanent_tls_error() {
    let server = hostile::latin1().await.unwrap();
    let url = server.url("/").replacen("http:", "https:", 1);
    let err = fetcher(5_000, 1 << 20)
        .fetch(&get_req(&url))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert_eq!(err.retry(), Retry::Permanent);
}

#[tokio::test]
async fn unknown_host_is_a_dns_error() {
    // `.invalid` never resolves (RFC 6761).
    let err = fetcher(5_000, 1 << 20)
        .fetch(&get_req("http://no-such-host.invalid/"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Dns, "{err}");
}
