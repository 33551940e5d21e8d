//! The router's failure records in the hub's store (design §6): a router in the hub keeps
//! every failed task in the store; `GET /api/v1/router/failures` lists them (filters,
//! paging, admin only), and `POST /api/v1/router/failures/replay` submits them again — here
//! a task refused because its job did not exist yet is routed into the job's run once the
//! job is made.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use silk_api::jobs::JobSpec;
use silk_hub::{HubClasses, HubConfig};
use silk_router::{Config, Reason, Router, Vars};
use std::sync::Arc;
use std::time::Duration;

const CONFIG: &str = r#"
project: failures-test
server: {bind: 127.0.0.1, port: 0}
inbound:
  - {name: web, class: http.HttpInbound, convert: [{set: {via: web}}]}
outbound:
  - name: later
    class: silk.JobOutbound
    init: {job: later, idle_ms: 60000}
    selector: ["url != None"]
"#;

const SPIDER: &str = "name: later\nstart_urls: ['http://127.0.0.1:9/never-fetched']\nfollow: []\n\
    robots: false\nmax_retries: 0\nper_host_delay_ms: 0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_tasks_are_kept_listed_and_replayed_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let bus = bus();
    let classes = HubClasses::new();
    let config_path = path.join("router.yaml");
    std::fs::write(&config_path, CONFIG).unwrap();
    let config = Config::load_with(&[&config_path], &Vars::new(), &classes.registry())
        .unwrap_or_else(|e| panic!("config: {e:?}"));
    let hub = silk_hub::Hub::start(
        HubConfig {
            ..hub_config(&path)
        },
        Arc::new(bus.clone()),
        Arc::new(silk_core::SystemClock),
    )
    .await
    .expect("hub starts");
    let _agent = start_agent(&path, &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    assert!(classes.set_hub(hub.clone()));
    let (base, admin) = serve(&hub).await;

    // Before the router: nothing to replay with.
    let (status, e) = call(
        &admin,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 503, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("runs no router"),
        "{e}"
    );
    let (status, _) = call(&admin, Method::GET, "/api/v1/router", None).await;
    assert_eq!(status, 503);

    let router = Router::start_with(
        config,
        Arc::new(silk_core::SystemClock),
        Some(hub.router_failure_sink()),
    )
    .await
    .expect("router starts");
    assert!(hub.set_router(router.clone()));
    let web = router.http_inbound(Some("web")).unwrap();
    let site = site(3, 0).await;
    let urls: Vec<String> = (0..3).map(|i| site.page_url(1, i)).collect();
    // Three tasks for a job that does not exist (refused), one no outbound takes.
    for url in &urls {
        let outcome = router.submit(web, json!({"url": url})).await.unwrap();
        assert_eq!(outcome.reason, Reason::Refused, "{}", outcome.why);
    }
    let outcome = router.submit(web, json!({"kind": "lost"})).await.unwrap();
    assert_eq!(outcome.reason, Reason::NoRoute);

    // The router's status and a dry run (the Router page's calls).
    let (status, view) = call(&admin, Method::GET, "/api/v1/router", None).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["project"], "failures-test");
    assert_eq!(view["failures"], 4);
    assert_eq!(view["inbounds"][0]["name"], "web");
    assert_eq!(view["inbounds"][0]["received"], 4);
    assert_eq!(view["inbounds"][0]["counters"]["refused"], 3);
    assert_eq!(view["inbounds"][0]["counters"]["no_route"], 1);
    assert_eq!(view["outbounds"][0]["name"], "later");
    assert_eq!(view["outbounds"][0]["class"], "silk.JobOutbound");
    assert_eq!(view["outbounds"][0]["counters"]["refused"], 3);
    let (status, answer) = call(
        &admin,
        Method::POST,
        "/api/v1/router/check_task",
        Some(json!({"inbound": "web", "task": {"kind": "lost"}})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["decision"], "failed");
    assert_eq!(answer["reason"], "no_route");
    assert_eq!(answer["converted"]["via"], "web");
    let (status, e) = call(
        &admin,
        Method::POST,
        "/api/v1/router/check_task",
        Some(json!({"inbound": "nope", "task": {}})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e["message"].as_str().unwrap().contains("nope"), "{e}");

    let (status, page) = call(&admin, Method::GET, "/api/v1/router/failures", None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 4);
    let failures = page["failures"].as_array().unwrap();
    assert_eq!(failures[0]["reason"], "no_route", "newest first: {page}");
    assert_eq!(failures[0]["inbound"], "web");
    assert_eq!(failures[0]["project"], "failures-test");
    assert_eq!(failures[0]["task"]["via"], "web");
    assert_eq!(failures[1]["outbound"], "later");
    assert!(
        failures[1]["why"].as_str().unwrap().contains("later"),
        "{page}"
    );
    // Filters and paging.
    let (_, refused) = call(
        &admin,
        Method::GET,
        "/api/v1/router/failures?reason=refused&outbound=later&limit=2",
        None,
    )
    .await;
    assert_eq!(refused["total"], 3);
    assert_eq!(refused["failures"].as_array().unwrap().len(), 2);
    let next = refused["next"].as_str().expect("a next page").to_owned();
    let (_, rest) = call(
        &admin,
        Method::GET,
        &format!("/api/v1/router/failures?reason=refused&outbound=later&limit=2&after={next}"),
        None,
    )
    .await;
    assert_eq!(rest["failures"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next"], Value::Null);
    let (status, bad) = call(
        &admin,
        Method::GET,
        "/api/v1/router/failures?after=nonsense",
        None,
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    // Admin only.
    let member = member(&admin, &base).await;
    let (status, _) = call(&member, Method::GET, "/api/v1/router/failures", None).await;
    assert_eq!(status, 403);
    let (status, _) = call(&member, Method::GET, "/api/v1/router", None).await;
    assert_eq!(status, 403);
    let (status, _) = call(
        &member,
        Method::POST,
        "/api/v1/router/check_task",
        Some(json!({"inbound": "web", "task": {}})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = call(
        &member,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 403);

    // The job is made; the refused tasks are replayed and routed into its run.
    let spec: JobSpec = serde_json::from_value(json!({"name": "later", "spider": SPIDER})).unwrap();
    hub.create_job(spec).await.unwrap();
    let (status, answer) = call(
        &admin,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({"reason": "refused"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let replayed = answer["replayed"].as_array().unwrap();
    assert_eq!(replayed.len(), 3, "{answer}");
    for r in replayed {
        assert_eq!(r["decision"], "routed", "{answer}");
        assert_eq!(r["outbound"], "later");
    }
    // The job's run fetched them.
    let fed = until("the replayed tasks fetched", async || {
        let runs = hub.job_runs("later", None).await.ok()?;
        let run = runs.first()?;
        (run.stats.success >= 3).then_some(run.clone())
    })
    .await;
    assert_eq!(fed.stats.success, 3);
    // Marked replayed, and not replayed twice unless asked.
    let (_, done) = call(
        &admin,
        Method::GET,
        "/api/v1/router/failures?replayed=true",
        None,
    )
    .await;
    assert_eq!(done["total"], 3);
    let (_, again) = call(
        &admin,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({"reason": "refused"})),
    )
    .await;
    assert_eq!(again["replayed"].as_array().unwrap().len(), 0, "{again}");
    // A returning task whose retries are used up is replayed as a new task (a new uuid, so
    // the fed run fetches its page again; as it was, it would fail again at once).
    let outcome = router
        .submit(
            web,
            json!({"url": urls[0], "outbound": "later", "task_result": 1500, "task_uuid": "t-1"}),
        )
        .await
        .unwrap();
    assert_eq!(outcome.reason, Reason::RetriesExhausted, "{}", outcome.why);
    let (_, again) = call(
        &admin,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({"reason": "retries_exhausted"})),
    )
    .await;
    assert_eq!(again["replayed"][0]["decision"], "routed", "{again}");
    until("the page fetched again", async || {
        let runs = hub.job_runs("later", None).await.ok()?;
        (runs.first()?.stats.success >= 4).then_some(())
    })
    .await;
    // A task that fails again is a new record.
    let (_, lost) = call(
        &admin,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({"reason": "no_route"})),
    )
    .await;
    assert_eq!(lost["replayed"][0]["decision"], "failed", "{lost}");
    let (_, all) = call(
        &admin,
        Method::GET,
        "/api/v1/router/failures?reason=no_route",
        None,
    )
    .await;
    assert_eq!(all["total"], 2);
    // A body with an unknown key is refused, named.
    let (status, e) = call(
        &admin,
        Method::POST,
        "/api/v1/router/failures/replay",
        Some(json!({"reasons": "refused"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(e["message"].as_str().unwrap().contains("reasons"), "{e}");
    router.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(10), hub.shutdown()).await;
}
