//! `serve_demo_forever` serves until SIGTERM, then frees its ports. In its own test binary
//! because it installs process-wide signal handlers.

#![cfg(unix)]

use std::time::Duration;

use silk_testkit::{DemoConfig, serve_demo_forever};

#[tokio::test]
async fn serves_until_sigterm() {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(serve_demo_forever(
        DemoConfig {
            hosts: 2,
            pages: 10,
            ..DemoConfig::default()
        },
        move |site| {
            let _ = ready_tx.send((site.start_url(), site.port()));
        },
    ));
    let (start_url, port) = ready_rx.await.unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let resp = client.get(&start_url).send().await.unwrap();
    assert_eq!(resp.status(), 200);

    let killed = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("stops on SIGTERM")
        .unwrap()
        .unwrap();
    std::net::TcpListener::bind(("127.0.0.2", port)).unwrap();
}
