//! Results go back to the hub that sent the download: `results.{reply_to}`, or `results`
//! for a download that names no hub (hubs of older builds) or names one that is no valid
//! hub id.

use crate::support::*;
use silk_agent::DownloaderConfig;
use silk_bus::Subject;
use std::sync::Arc;

#[tokio::test]
async fn results_go_to_the_hub_named_by_reply_to() {
    let site = small_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-reply"), &bus).await;
    // `hub` reads `results` (downloads without reply_to); hub-a and hub-b their own subjects.
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-reply").await;
    let mut hub_a = hub_results(&bus, "hub-a", "hub-a-results").await;
    let mut hub_b = hub_results(&bus, "hub-b", "hub-b-results").await;
    let spider =
        DownloaderConfig::for_spider_yaml(spider_yaml(&site.start_url(), "robots: false\n"));
    hub.allocate("r1", &spider).await;
    let page = |i| vec![site.page_url(1, i)];

    let to_b = hub
        .download_replying_to("r1", &page(0), Some("hub-b"))
        .await;
    let (subject, result) = next_result(&mut hub_b).await;
    assert_eq!(subject, Subject::hub_results("hub-b").unwrap());
    assert_eq!(subject.as_str(), "results.hub-b");
    assert_eq!(result.lease_id, to_b[0]);
    assert_eq!(result.outcome.status, Some(200), "{result:?}");

    // Without reply_to: on `results`, and the first result there (hub-b's did not go there).
    let to_any = hub.download("r1", &page(1)).await;
    let result = hub.result().await;
    assert_eq!(result.lease_id, to_any[0], "the first result on `results`");
    assert_eq!(result.outcome.status, Some(200), "{result:?}");

    // hub-a gets only its own: its first result is the one it asked for.
    let to_a = hub
        .download_replying_to("r1", &page(2), Some("hub-a"))
        .await;
    let (subject, result) = next_result(&mut hub_a).await;
    assert_eq!(subject.as_str(), "results.hub-a");
    assert_eq!(
        result.lease_id, to_a[0],
        "the first result on `results.hub-a`"
    );

    // A reply_to that is no hub id: the result goes to `results`, the agent goes on.
    let bad = hub
        .download_replying_to("r1", &page(3), Some("a.b *"))
        .await;
    let result = hub.result().await;
    assert_eq!(
        result.lease_id, bad[0],
        "an invalid reply_to falls back to `results`"
    );
    assert_eq!(result.outcome.status, Some(200), "{result:?}");

    // hub-b's next result is its next download's: nothing else was sent there.
    let to_b2 = hub
        .download_replying_to("r1", &page(4), Some("hub-b"))
        .await;
    let (subject, result) = next_result(&mut hub_b).await;
    assert_eq!(subject.as_str(), "results.hub-b");
    assert_eq!(result.lease_id, to_b2[0]);

    let stats = agent.stats();
    assert_eq!(
        (stats.results_published, stats.results_dropped),
        (5, 0),
        "{stats:?}"
    );
    assert!(!agent.is_stopped());
    agent.shutdown().await;
}
