//! A body that never ends costs at most about `max_body_bytes` of memory and fails fast.
//! Alone in its test binary so that the peak-RSS reading is not disturbed by other tests.

mod common;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use silk_core::Request;
use silk_fetch::{FetchConfig, FetchError, Fetcher};
use silk_testkit::hostile;
use std::time::{Duration, Instant};

fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[tokio::test]
async fn endless_and_huge_bodies_cost_bounded_memory() {
    let app = Router::new().route(
        "/endless",
        get(|| async {
            let chunk = Bytes::from(vec![b'0'; 256 * 1024]);
            axum::body::Body::from_stream(futures::stream::repeat_with(move || {
                Ok::<_, std::io::Error>(chunk.clone())
            }))
        }),
    );
    let addr = common::serve(app).await;
    let huge = hostile::huge_body().await.unwrap();
    let limit = 8 << 20;
    let f = Fetcher::new(FetchConfig {
        timeout_ms: 30_000,
        max_body_bytes: limit,
        ..FetchConfig::default()
    })
    .unwrap();
    let before = peak_rss_bytes();
    let started = Instant::now();
    for _ in 0..3 {
        let err = f
            .fetch(&Request::from_canonical(format!("http://{addr}/endless")))
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
        let err = f
            .fetch(&Request::from_canonical(huge.url("/")))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                FetchError::BodyTooLarge {
                    announced: Some(_),
                    ..
                }
            ),
            "{err}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    if let (Some(before), Some(after)) = (before, peak_rss_bytes()) {
        let grown = after.saturating_sub(before);
        assert!(
            grown < 6 * limit,
            "peak RSS grew by {grown} bytes for a {limit}-byte limit"
        );
    }
}
