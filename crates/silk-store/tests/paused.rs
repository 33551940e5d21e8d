//! A store on paused time: tokio's clock does not jump while a call runs on sqlx's own thread
//! (see `held`), so code timed by tokio over a real store gets exact virtual timings.

use silk_store::JobRow;
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn the_clock_stands_still_while_a_store_call_runs() {
    let root = tempfile::tempdir().expect("temp dir");
    // Opening runs migrations on the pool's thread: on paused time, without the hold, the
    // pool's acquire timeout would fire at once.
    let store = silk_store::open_sqlite(&root.path().join("meta.db"))
        .await
        .expect("opens on paused time");
    // A timer waits: an idle runtime would jump to it.
    let timer = tokio::spawn(tokio::time::sleep(Duration::from_secs(3_600)));
    let start = Instant::now();
    for i in 0..50u64 {
        let job = JobRow {
            id: format!("j{i}"),
            name: format!("job-{i}"),
            enabled: true,
            spec: serde_json::json!({"n": i}),
            created_ms: i,
            updated_ms: i,
            next_fire_ms: None,
            last_fire_ms: None,
            queued: 0,
            tenant: silk_store::DEFAULT_TENANT.to_owned(),
        };
        store.create_job(&job).await.expect("create");
        assert_eq!(store.list_jobs().await.expect("list").len() as u64, i + 1);
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "virtual time moved during store calls"
    );
    // With nothing else to do, it does jump to the timer.
    timer.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3_600));
    store.close().await;
}
