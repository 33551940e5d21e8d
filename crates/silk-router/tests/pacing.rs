//! Token buckets and inbound weights, end to end through the router with tokio's paused
//! clock: the router's injected `Clock` reads tokio time, so the measured rates are exact
//! and the tests take no wall time.

mod common;

use std::sync::Arc;

use serde_json::json;
use silk_core::{Clock, TokioClock};
use silk_router::Router;
use tokio::time::Instant;

fn clock() -> Arc<dyn Clock> {
    Arc::new(TokioClock::starting_at(1_700_000_000_000))
}

async fn submit_many(
    router: &Router,
    inbound: Option<usize>,
    tasks: Vec<serde_json::Value>,
) -> Vec<tokio::task::JoinHandle<()>> {
    tasks
        .into_iter()
        .map(|task| {
            let router = router.clone();
            tokio::spawn(async move {
                router.submit(inbound, task).await.expect("delivered");
            })
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn token_per_second_paces_an_outbound_over_a_window() {
    let sink_name = common::unique("rate");
    let (_dir, config) = common::load_ok(&format!(
        "outbound:\n  - {{name: slow, selector: ['True'], token_per_second: 20, class: test.MemoryOutbound, init: {{sink: {sink_name}}}}}\n"
    ));
    let router = Router::start_with_clock(config, clock())
        .await
        .expect("starts");
    let start = Instant::now();
    let tasks = (0..120).map(|n| json!({"n": n})).collect();
    for handle in submit_many(&router, None, tasks).await {
        handle.await.expect("joined");
    }
    let elapsed_ms = start.elapsed().as_millis();
    // A full bucket (one second: 20 tokens) goes at once; the other 100 at 20/s = 5 s.
    assert!((4_900..=5_200).contains(&elapsed_ms), "{elapsed_ms} ms");
    assert_eq!(common::sink(&sink_name).lock().expect("sink").len(), 120);
    let status = router.outbound_status("slow").await;
    assert!(
        status[0].rate_per_second > 5.0,
        "{:?}",
        status[0].rate_per_second
    );
    router.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn outbounds_sharing_a_token_scope_share_one_bucket() {
    let sink_name = common::unique("scope");
    let (_dir, config) = common::load_ok(&format!(
        "
outbound:
  - {{name: x, selector: [\"k == 'x'\"], token_scope: site, token_per_second: 10, class: test.MemoryOutbound, init: {{sink: {sink_name}}}}}
  - {{name: y, selector: [\"k == 'y'\"], token_scope: site, token_per_second: 10, class: test.MemoryOutbound, init: {{sink: {sink_name}}}}}
  - {{name: z, selector: [\"k == 'z'\"], token_per_second: 10, class: test.MemoryOutbound, init: {{sink: {sink_name}}}}}
"
    ));
    let router = Router::start_with_clock(config, clock())
        .await
        .expect("starts");
    let start = Instant::now();
    let tasks: Vec<_> = (0..20)
        .flat_map(|_| [json!({"k": "x"}), json!({"k": "y"})])
        .collect();
    let mut handles = submit_many(&router, None, tasks).await;
    // `z` has a bucket of its own: 10 at once, 10 more in 1 s.
    let z_start = Instant::now();
    let z = submit_many(&router, None, (0..20).map(|_| json!({"k": "z"})).collect()).await;
    for handle in z {
        handle.await.expect("joined");
    }
    let z_ms = z_start.elapsed().as_millis();
    for handle in handles.drain(..) {
        handle.await.expect("joined");
    }
    let shared_ms = start.elapsed().as_millis();
    // 40 tasks through one 10/s bucket: 10 at once, 30 in 3 s.
    assert!(
        (2_900..=3_200).contains(&shared_ms),
        "shared scope took {shared_ms} ms"
    );
    assert!((900..=1_200).contains(&z_ms), "own bucket took {z_ms} ms");
    router.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn inbound_weight_shares_a_paced_outbound() {
    let sink_name = common::unique("weight");
    let (_dir, config) = common::load_ok(&format!(
        "
inbound:
  - {{name: heavy, weight: 3, class: http.HttpInbound, convert: [{{set: {{from: heavy}}}}]}}
  - {{name: light, weight: 1, class: http.HttpInbound, convert: [{{set: {{from: light}}}}]}}
outbound:
  - {{name: paced, selector: ['True'], token_per_second: 10, class: test.MemoryOutbound, init: {{sink: {sink_name}}}}}
"
    ));
    let router = Router::start_with_clock(config, clock())
        .await
        .expect("starts");
    let mut handles =
        submit_many(&router, Some(0), (0..40).map(|n| json!({"n": n})).collect()).await;
    handles.extend(submit_many(&router, Some(1), (0..40).map(|n| json!({"n": n})).collect()).await);
    for handle in handles {
        handle.await.expect("joined");
    }
    let got = common::sink(&sink_name).lock().expect("sink").clone();
    assert_eq!(got.len(), 80);
    // After the first bucketful, while both lanes are full, 3 of every 4 pushes are `heavy`.
    let window = &got[10..30];
    let heavy = window.iter().filter(|(_, t)| t["from"] == "heavy").count();
    assert!((14..=16).contains(&heavy), "heavy {heavy} of 20");
    router.shutdown().await;
}
