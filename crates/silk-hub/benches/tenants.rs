//! Tenants sharing a fleet (issue 15 items 5 and 6), measured on a real hub with two real
//! agents (in-process bus, 16 slots each) and the demo site on loopback (50 ms per page).
//!
//! Fair share:
//! 1. a small run of tenant `small` (weight 1, 150 pages, `max_pending` 8) alone: its time on
//!    an idle fleet;
//! 2. runs of `light` (weight 1) and `heavy` (weight 3) that saturate the agents; over a
//!    window of `WINDOW_S` seconds after a warm-up, the share of pages each fetched (expected
//!    25 % / 75 % ± 5);
//! 3. during both, the same small run again: its time, as a multiple of its idle time
//!    (expected at most 2×).
//!
//! Quota overshoot: four runs of tenant `capped` (`pages_per_day` `QUOTA`) at once, the hub
//! stopped and started again once half the quota is used; once every run is paused by the
//! quota, the pages they fetched (from their own counters) against the quota, and the
//! overshoot the counters recorded.
//!
//! `cargo bench -p silk-hub --bench tenants` (env `WINDOW_S`, default 10; `QUOTA`, default
//! 2000). Figures in docs/benchmarks.md.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use silk_api::runs::{RunRequest, RunState};
use silk_api::tenants::TenantRequest;
use silk_core::RunId;
use silk_hub::HubHandle;
use std::time::{Duration, Instant};

fn spider(site: &silk_testkit::demo::DemoSite, name: &str, max_pages: Option<u64>) -> String {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    let limit = max_pages.map_or(String::new(), |m| format!("max_pages: {m}\n"));
    format!(
        "name: {name}\nstart_urls: ['{}']\nallowed_domains: [{}]\nfollow: [{{deny: ['/calendar/']}}]\n\
         per_host_delay_ms: 0\nper_host_concurrency: 256\n{limit}",
        site.start_url(),
        hosts.join(", ")
    )
}

async fn submit(hub: &HubHandle, tenant: &str, spider: String, max_pending: u64) -> RunId {
    let mut request = RunRequest::spider(spider);
    request.max_pending = Some(max_pending);
    hub.submit_in(tenant, request)
        .await
        .unwrap_or_else(|e| panic!("run of {tenant}: {e}"))
        .id
}

async fn success(hub: &HubHandle, id: &RunId) -> u64 {
    hub.run(id).await.expect("run").stats.success
}

/// The small run from start to end, seconds.
async fn small_run(hub: &HubHandle, site: &silk_testkit::demo::DemoSite) -> f64 {
    let started = Instant::now();
    let id = submit(hub, "small", spider(site, "small", Some(150)), 8).await;
    let done = hub.wait_run(&id).await.expect("small run");
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    assert_eq!(done.stats.success, 150, "{done:?}");
    started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let window_s: u64 = std::env::var("WINDOW_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::TempDir::new().expect("temp dir");
    let bus = bus();
    let site = silk_testkit::demo::DemoSite::start(silk_testkit::demo::DemoConfig {
        hosts: 3,
        pages: 20_000,
        latency_ms: Some(50),
        ..silk_testkit::demo::DemoConfig::default()
    })
    .await
    .expect("demo site");
    let hub = start_hub(dir.path(), &bus).await;
    let _a1 = start_agent(dir.path(), &bus, "a1").await;
    let _a2 = start_agent(dir.path(), &bus, "a2").await;
    hub.wait_for_live_agents(2).await;
    for (name, weight) in [("light", 1), ("heavy", 3), ("small", 1)] {
        hub.create_tenant(&TenantRequest {
            name: name.into(),
            description: None,
            pools: None,
            quotas: None,
            weight: Some(weight),
            allow_networks: Vec::new(),
            sink_targets: None,
        })
        .await
        .expect("tenant");
    }

    let idle_s = small_run(&hub, &site).await;
    println!("small run on an idle fleet: {idle_s:.2} s");

    let light = submit(&hub, "light", spider(&site, "light", None), 64).await;
    let heavy = submit(&hub, "heavy", spider(&site, "heavy", None), 64).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (l0, h0) = (success(&hub, &light).await, success(&hub, &heavy).await);
    let window = Instant::now();
    let small = tokio::spawn({
        let hub = hub.clone();
        let site_spider = spider(&site, "small", Some(150));
        async move {
            let started = Instant::now();
            let id = submit(&hub, "small", site_spider, 8).await;
            let done = hub.wait_run(&id).await.expect("small run");
            assert_eq!(done.state, RunState::Succeeded, "{done:?}");
            started.elapsed().as_secs_f64()
        }
    });
    tokio::time::sleep(Duration::from_secs(window_s)).await;
    let (l1, h1) = (success(&hub, &light).await, success(&hub, &heavy).await);
    let elapsed = window.elapsed().as_secs_f64();
    let busy_s = small.await.expect("small run");
    let (dl, dh) = ((l1 - l0) as f64, (h1 - h0) as f64);
    println!(
        "window {elapsed:.1} s: light (weight 1) {dl} pages = {:.1} %, heavy (weight 3) {dh} pages = {:.1} % ({:.0} pages/s together)",
        100.0 * dl / (dl + dh),
        100.0 * dh / (dl + dh),
        (dl + dh) / elapsed
    );
    println!(
        "small run during both: {busy_s:.2} s = {:.2}x its idle time",
        busy_s / idle_s
    );
    for id in [&light, &heavy] {
        let _ = hub.cancel(id).await;
        let _ = hub.wait_run(id).await;
    }

    // Quota overshoot, across a hub restart.
    let quota: u64 = std::env::var("QUOTA")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    hub.create_tenant(&TenantRequest {
        name: "capped".into(),
        description: None,
        pools: None,
        quotas: Some(silk_api::tenants::Quotas {
            pages_per_day: Some(quota),
            ..Default::default()
        }),
        weight: None,
        allow_networks: Vec::new(),
        sink_targets: None,
    })
    .await
    .expect("tenant");
    let mut runs = Vec::new();
    for i in 0..4 {
        runs.push(
            submit(
                &hub,
                "capped",
                spider(&site, &format!("capped{i}"), None),
                16,
            )
            .await,
        );
    }
    loop {
        let usage = hub.tenant_usage("capped").await.expect("usage");
        if usage.pages >= quota / 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    hub.shutdown().await;
    let hub = start_hub(dir.path(), &bus).await;
    hub.wait_for_live_agents(2).await;
    let started = Instant::now();
    let fetched = loop {
        let mut paused = 0;
        let mut fetched = 0;
        for id in &runs {
            let view = hub.run(id).await.expect("run");
            fetched += view.stats.success;
            let by_quota = view
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("quota_exhausted"));
            if view.state == RunState::Paused && by_quota && view.stats.in_flight == 0 {
                paused += 1;
            }
        }
        if paused == runs.len() {
            break fetched;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the capped runs never all paused"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The last pages are added to the counters within 2 s.
    let usage = loop {
        let usage = hub.tenant_usage("capped").await.expect("usage");
        if usage.reserved == 0 && usage.pages >= fetched.min(quota)
            || started.elapsed() > Duration::from_secs(130)
        {
            break usage;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "quota {quota} pages/day, 4 runs, hub restarted at half: the runs fetched {fetched} pages \
         ({:+} against the quota); counters: {} pages, {} reserved, {} overshoot",
        fetched as i64 - quota as i64,
        usage.pages,
        usage.reserved,
        usage.overshoot_pages
    );
    for id in &runs {
        let _ = hub.cancel(id).await;
    }
    hub.shutdown().await;
}
