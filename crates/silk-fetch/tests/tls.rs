//! The fetcher over HTTPS: a TLS server on 127.0.0.1 with a self-signed certificate (made
//! here with rcgen) that offers `h2` and `http/1.1` by ALPN. Trusted through
//! `extra_root_certs_pem`, the page comes back over HTTP/2; without it the handshake fails
//! as `tls`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use silk_core::Request;
use silk_fetch::{ErrorKind, FetchConfig, Fetcher, decode_html};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types::PrivateKeyDer};

/// Serves a small page over TLS on 127.0.0.1 (HTTP/1.1 or HTTP/2, as ALPN decides); returns
/// the address and the certificate's PEM.
async fn serve_tls() -> (SocketAddr, String) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(signing_key.serialize_der().into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that rejects the certificate ends the handshake: nothing to serve.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(|req: hyper::Request<Incoming>| async move {
                    let page = format!(
                        "<html><head><title>Secure</title></head>\
                         <body><p>caf\u{e9} over {:?}</p></body></html>",
                        req.version()
                    );
                    let resp = hyper::Response::builder()
                        .header("content-type", "text/html; charset=utf-8")
                        .body(Full::new(Bytes::from(page)))
                        .unwrap();
                    Ok::<_, Infallible>(resp)
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, cert.pem())
}

fn config(extra_root_certs_pem: Vec<String>) -> FetchConfig {
    FetchConfig {
        timeout_ms: 10_000,
        extra_root_certs_pem,
        ..FetchConfig::default()
    }
}

#[tokio::test]
async fn https_with_an_extra_root_speaks_http2() {
    let (addr, pem) = serve_tls().await;
    let f = Fetcher::new(config(vec![pem])).unwrap();
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("https://{host}:{}/", addr.port());
        let resp = f
            .fetch(&Request::from_canonical(url.clone()))
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{url}");
        assert_eq!(resp.version, reqwest::Version::HTTP_2, "{url}");
        let text = decode_html(&resp.body, resp.content_type.as_deref());
        assert!(text.contains("café over HTTP/2.0"), "{url}: {text}");
        assert!(text.contains("<title>Secure</title>"), "{url}: {text}");
    }
}

#[tokio::test]
async fn https_without_the_root_fails_as_tls() {
    let (addr, _pem) = serve_tls().await;
    let f = Fetcher::new(config(Vec::new())).unwrap();
    let url = format!("https://127.0.0.1:{}/", addr.port());
    let err = f.fetch(&Request::from_canonical(url)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
}

#[test]
fn invalid_extra_roots_are_config_errors() {
    let garbage = "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n";
    let err = Fetcher::new(config(vec!["not a certificate".into(), garbage.into()])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let msg = err.to_string();
    for needle in ["extra_root_certs_pem[0]", "extra_root_certs_pem[1]"] {
        assert!(msg.contains(needle), "{needle} missing in {msg}");
    }
}
