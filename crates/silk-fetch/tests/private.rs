//! Private addresses under an [`AddressPolicy`]: a site on 127.0.0.1 is refused by literal
//! and by name (the name is refused where it resolves, and nothing reaches the site), through
//! a proxy on loopback, and a proxy's target in a private range is refused before the proxy
//! hears of it; an allowed range opens them. The failure is `private_address`, permanent.

mod common;

use axum::Router;
use axum::routing::get;
use common::{RecordingProxy, serve};
use silk_core::Request;
use silk_fetch::{AddressPolicy, ErrorKind, FetchConfig, FetchError, Fetcher, Retry};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn fetcher(policy: AddressPolicy, proxies: Vec<String>) -> Fetcher {
    Fetcher::new(FetchConfig {
        timeout_ms: 10_000,
        proxies,
        address_policy: Some(policy),
        ..FetchConfig::default()
    })
    .expect("fetcher")
}

fn loopback() -> AddressPolicy {
    AddressPolicy::new(vec![
        "127.0.0.0/8".parse().unwrap(),
        "::1/128".parse().unwrap(),
    ])
}

async fn counting_site() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().route(
        "/hello",
        get(move || {
            h.fetch_add(1, Ordering::SeqCst);
            async { "hello" }
        }),
    );
    (serve(app).await, hits)
}

fn refused(result: Result<silk_fetch::Response, FetchError>, what: &str) -> String {
    match result {
        Ok(r) => panic!("{what}: fetched ({})", r.status),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::PrivateAddress, "{what}: {e}");
            assert_eq!(e.kind().as_str(), "private_address");
            assert_eq!(e.retry(), Retry::Permanent);
            e.to_string()
        }
    }
}

#[tokio::test]
async fn loopback_sites_are_refused_by_literal_and_by_name_unless_allowed() {
    let (addr, hits) = counting_site().await;
    let port = addr.port();
    let f = fetcher(AddressPolicy::default(), Vec::new());
    let literal = refused(
        f.fetch(&Request::from_canonical(format!("http://{addr}/hello")))
            .await,
        "literal",
    );
    assert!(
        literal.contains("127.0.0.1 is a private address"),
        "{literal}"
    );
    let named = refused(
        f.fetch(&Request::from_canonical(format!(
            "http://localhost:{port}/hello"
        )))
        .await,
        "name",
    );
    assert!(
        named.contains("localhost resolves to a private address"),
        "{named}"
    );
    refused(
        f.fetch(&Request::from_canonical(format!(
            "http://[::ffff:127.0.0.1]:{port}/"
        )))
        .await,
        "v4-mapped literal",
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached the site");

    let open = fetcher(loopback(), Vec::new());
    for url in [
        format!("http://{addr}/hello"),
        format!("http://localhost:{port}/hello"),
    ] {
        let resp = open
            .fetch(&Request::from_canonical(url))
            .await
            .expect("allowed");
        assert_eq!(&resp.body[..], b"hello");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn proxies_on_private_addresses_and_private_targets_behind_a_proxy_are_refused() {
    let (addr, hits) = counting_site().await;
    let proxy = RecordingProxy::start().await;
    // A proxy on loopback, by literal and by name, under a policy that does not allow it.
    let by_name = proxy.url().replace("127.0.0.1", "localhost");
    for p in [proxy.url(), by_name] {
        let f = fetcher(AddressPolicy::default(), vec![p.clone()]);
        refused(
            f.fetch(&Request::from_canonical("http://93.184.215.14/".into()))
                .await,
            &p,
        );
    }
    assert!(
        proxy.seen().is_empty(),
        "the proxy heard nothing: {:?}",
        proxy.seen()
    );

    // The proxy allowed (loopback), a target in 10.0.0.0/8 is not: refused before sending.
    let f = fetcher(loopback(), vec![proxy.url()]);
    refused(
        f.fetch(&Request::from_canonical("http://10.20.30.40/admin".into()))
            .await,
        "private target",
    );
    assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
    // An allowed target goes through the allowed proxy.
    let resp = f
        .fetch(&Request::from_canonical(format!("http://{addr}/hello")))
        .await
        .expect("through the proxy");
    assert_eq!(&resp.body[..], b"hello");
    assert_eq!(proxy.seen(), [format!("GET http://{addr}/hello")]);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
