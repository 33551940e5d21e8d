//! The router inside the hub: `silk.JobOutbound` feeds routed tasks to a job's run on real
//! agents (fetching real loopback servers), and `silk.RunResultsInbound` brings each
//! fetched request's outcome back as a task with `task_result`, which the router ends,
//! retries, routes again or records — the seed's taskHUB loop, closed by Silk.

mod common;

use common::*;
use serde_json::{Value, json};
use silk_api::jobs::JobSpec;
use silk_api::runs::{Feed, RunState};
use silk_hub::{FeedTask, HubClasses, HubConfig, HubHandle};
use silk_router::{Config, Reason, Router, Vars};
use silk_testkit::hostile::{self, HostileServer};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

/// A job that fetches what it is fed: no links followed, no retries of its own (the router
/// retries), one item per page.
const SPIDER: &str = "name: fetch\nstart_urls: ['http://127.0.0.1:9/never-fetched']\nfollow: []\n\
    robots: false\nmax_retries: 0\nper_host_delay_ms: 0\nper_host_concurrency: 8\n\
    extract: {title: {css: 'h1.title'}}\n";

fn router_config(dir: &Path, idle_ms: u64) -> String {
    format!(
        r#"
project: taskhub-test
server: {{bind: 127.0.0.1, port: 0}}
routing:
  limits: 10
  terminal_codes: [1000]
  failure: {{path: '{failures}', compress: False}}
inbound:
  - {{name: web, class: http.HttpInbound}}
  - name: results
    class: silk.RunResultsInbound
    threads: 4
    init: {{jobs: [fetch], requests: tasks}}
    convert: [{{class: common.ExtractTaskParams}}]
outbound:
  - name: fetch
    class: silk.JobOutbound
    init: {{job: fetch, idle_ms: {idle_ms}}}
    selector: ["url != None and task_result == None"]
    retry_limits: 2
    dont_retry_status: [404]
  - name: gone
    class: silk.JobOutbound
    init: {{job: fetch, idle_ms: {idle_ms}}}
    selector: ["task_result == 404"]
    retry_limits: 0
"#,
        failures = dir.join("failures.jsonl").display(),
    )
}

struct Setup {
    _dir: TempDir,
    dir: std::path::PathBuf,
    hub: HubHandle,
    router: Router,
    classes: HubClasses,
    _agents: Vec<silk_agent::AgentHandle>,
}

async fn setup(idle_ms: u64) -> Setup {
    setup_job(idle_ms, json!({"name": "fetch", "spider": SPIDER})).await
}

async fn setup_job(idle_ms: u64, job: Value) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let bus = bus();
    let classes = HubClasses::new();
    let config_path = path.join("router.yaml");
    std::fs::write(&config_path, router_config(&path, idle_ms)).unwrap();
    let config = Config::load_with(&[&config_path], &Vars::new(), &classes.registry())
        .unwrap_or_else(|e| panic!("config: {e:?}"));
    assert!(HubClasses::wants_outcomes(&config));
    let hub = silk_hub::Hub::start(
        HubConfig {
            record_outcomes: true,
            ..hub_config(&path)
        },
        Arc::new(bus.clone()),
        Arc::new(silk_core::SystemClock),
    )
    .await
    .expect("hub starts");
    let agents = vec![
        start_agent(&path, &bus, "a1").await,
        start_agent(&path, &bus, "a2").await,
    ];
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    let spec: JobSpec = serde_json::from_value(job).unwrap();
    hub.create_job(spec).await.unwrap();
    assert!(classes.set_hub(hub.clone()));
    let router = Router::start(config).await.expect("router starts");
    Setup {
        _dir: dir,
        dir: path,
        hub,
        router,
        classes,
        _agents: agents,
    }
}

impl Setup {
    /// Another router from the same config (the hub's classes already have the hub).
    async fn another_router(&self) -> Router {
        let config = Config::load_with(
            &[self.dir.join("router.yaml")],
            &Vars::new(),
            &self.classes.registry(),
        )
        .unwrap_or_else(|e| panic!("config: {e:?}"));
        Router::start(config).await.expect("router starts")
    }
}

async fn submit(router: &Router, task: Value) -> silk_router::Outcome {
    let web = router.http_inbound(Some("web")).unwrap();
    router.submit(web, task).await.expect("task taken")
}

async fn settle(router: &Router, what: &str, mut done: impl FnMut(&Router) -> bool) {
    let ok = router
        .wait_until(Duration::from_secs(30), |r| done(r))
        .await;
    assert!(
        ok,
        "timed out waiting for {what}; decisions:\n{}",
        router
            .metrics_text()
            .lines()
            .filter(|l| l.starts_with("silk_router_decisions_total") && !l.ends_with(" 0"))
            .collect::<Vec<_>>()
            .join("\n")
            + "\nfailures:\n"
            + &router
                .failure_path()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default()
    );
}

fn failure_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("failures.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("failure line is JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routed_tasks_are_fetched_by_the_job_and_come_back_with_their_result() {
    let site = site(20, 0).await;
    let status: HostileServer = hostile::status().await.unwrap();
    let s = setup(60_000).await;
    let router = &s.router;

    // Ten good pages, one that always answers 503, one that is gone (404), one without a URL.
    let good: Vec<String> = (0..10).map(|i| site.page_url(1, i)).collect();
    for (i, url) in good.iter().enumerate() {
        let o = submit(router, json!({"url": url, "n": i})).await;
        assert_eq!(o.reason, Reason::Matched, "{o:?}");
        assert_eq!(o.outbound.as_deref(), Some("fetch"));
    }
    submit(
        router,
        json!({"url": status.url("/status/503"), "kind": "flaky"}),
    )
    .await;
    submit(
        router,
        json!({"url": status.url("/status/404"), "kind": "gone"}),
    )
    .await;
    let bad = submit(router, json!({"url": "not a url", "kind": "bad"})).await;
    assert_eq!(bad.reason, Reason::Refused, "{bad:?}");

    // Good pages end as succeeded; the 503 is retried twice on `fetch` and then fails; the
    // 404 is not retried but routed again by the rules, to `gone`, where it fails.
    settle(router, "every task to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 10
            && r.count(Some("fetch"), Reason::RetriesExhausted) == 1
            && r.count(Some("gone"), Reason::RetriesExhausted) == 1
    })
    .await;
    assert_eq!(router.count(Some("fetch"), Reason::Retry), 2);
    // A decision is counted on the outbound that takes the task: `gone`.
    assert_eq!(router.count(Some("gone"), Reason::DontRetry), 1);
    assert_eq!(router.count(Some("fetch"), Reason::Refused), 1);

    // Each good page was fetched once; the 503 once per routing (1 + 2 retries: the
    // delivery id salts the dedup key), the 404 twice (on `fetch`, then on `gone`).
    let hits = site.stats();
    for url in &good {
        assert_eq!(hits.hits_on(url), 1, "{url}");
    }
    assert_eq!(status.requests(), 3 + 2, "503 three times, 404 twice");

    // One fed run of the job did it all, with the items of the good pages.
    let runs = s.hub.job_runs("fetch", None).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(
        run.feed.as_ref().map(|f| f.outbound.as_str()),
        Some("fetch")
    );
    assert_eq!(run.state, RunState::Running);
    let items = items_once(run);
    assert_eq!(items.len(), 10);
    assert_eq!(run.stats.success, 10);

    router.shutdown().await;
    let failures = failure_lines(&s.dir);
    let reasons: Vec<(&str, &str)> = failures
        .iter()
        .map(|f| {
            (
                f["reason"].as_str().unwrap_or(""),
                f["outbound"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(reasons.contains(&("refused", "fetch")), "{reasons:?}");
    assert!(
        reasons.contains(&("retries_exhausted", "fetch")),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("retries_exhausted", "gone")),
        "{reasons:?}"
    );
    let flaky = failures
        .iter()
        .find(|f| f["reason"] == "retries_exhausted" && f["outbound"] == "fetch")
        .unwrap();
    let task = &flaky["task"];
    assert_eq!(task["task_result"], 503, "{flaky}");
    assert_eq!(task["retry_times"], 2, "{flaky}");
    assert_eq!(task["kind"], "flaky");
    s.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_fed_run_ends_and_the_next_task_starts_another_and_the_backlog_counts() {
    let site = site(5, 0).await;
    let s = setup(300).await;
    let router = &s.router;
    submit(router, json!({"url": site.page_url(1, 0)})).await;
    settle(router, "the first task to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 1
    })
    .await;
    let runs = s.hub.job_runs("fetch", None).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let first = within("the idle fed run to end", 20, s.hub.wait_run(&runs[0].id))
        .await
        .unwrap();
    assert_eq!(first.state, RunState::Succeeded, "{first:?}");
    assert_eq!(s.hub.job_backlog("fetch").await.unwrap(), 0);

    submit(router, json!({"url": site.page_url(1, 1)})).await;
    settle(router, "the second task to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 2
    })
    .await;
    let runs = s.hub.job_runs("fetch", None).await.unwrap();
    assert_eq!(runs.len(), 2, "a second fed run: {runs:?}");
    assert_ne!(runs[0].id, first.id);
    assert_eq!(items_once(&runs[0]).len(), 1);
    router.shutdown().await;
    s.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_results_resume_from_their_stored_offset_when_the_router_restarts() {
    let site = site(10, 0).await;
    let s = setup(60_000).await;
    for i in 0..3 {
        submit(&s.router, json!({"url": site.page_url(1, i)})).await;
    }
    settle(&s.router, "three tasks to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 3
    })
    .await;
    s.router.shutdown().await;

    // With no router running, the job's run fetches four more routed tasks.
    let tasks = (3..7)
        .map(|i| FeedTask {
            url: site.page_url(1, i),
            priority: 0,
            task: json!({"url": site.page_url(1, i), "outbound": "fetch", "task_uuid": format!("t{i}")})
                .as_object()
                .unwrap()
                .clone(),
            delivery_id: format!("t{i}:1"),
            depth: 0,
        })
        .collect();
    let feed = Feed {
        outbound: "fetch".into(),
        idle_ms: 60_000,
    };
    let answers = s.hub.feed_job("fetch", feed, tasks).await.unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");

    // A new router takes the four outcomes it missed, and not the three routed before.
    let router = s.another_router().await;
    settle(&router, "the four missed outcomes", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 4
    })
    .await;
    // One more task through this router: outcomes of a run are read in order, so any
    // repeat of the first three would be counted before this one ends.
    submit(&router, json!({"url": site.page_url(1, 7)})).await;
    settle(&router, "the fifth task to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 5
    })
    .await;
    assert_eq!(router.count(Some("fetch"), Reason::TerminalCode), 5);
    let hits = site.stats();
    for i in 0..8 {
        assert_eq!(hits.hits_on(&site.page_url(1, i)), 1, "page {i}");
    }
    router.shutdown().await;
    s.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_of_a_cancelled_fed_run_go_on_in_the_next_one() {
    // One request out at a time, slow pages: tasks wait in the fed run's frontier.
    let site = site(10, 150).await;
    let s = setup_job(
        60_000,
        json!({"name": "fetch", "spider": SPIDER, "max_pending": 1}),
    )
    .await;
    for i in 0..5 {
        submit(&s.router, json!({"url": site.page_url(1, i)})).await;
    }
    settle(&s.router, "the first task to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) >= 1
    })
    .await;
    let runs = s.hub.job_runs("fetch", None).await.unwrap();
    assert_eq!(runs.len(), 1);
    let first = runs[0].id.clone();
    s.hub.cancel(&first).await.unwrap();
    let ended = within("the cancel", 20, s.hub.wait_run(&first))
        .await
        .unwrap();
    assert_eq!(ended.state, RunState::Cancelled);
    assert!(ended.stats.left > 0, "tasks were left: {:?}", ended.stats);

    // The next task starts a fed run that takes over what the cancelled one had accepted.
    submit(&s.router, json!({"url": site.page_url(1, 5)})).await;
    settle(&s.router, "all six tasks to end", |r| {
        r.count(Some("fetch"), Reason::TerminalCode) == 6
    })
    .await;
    let runs = s.hub.job_runs("fetch", None).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_ne!(runs[0].id, first);
    s.router.shutdown().await;
    s.hub.shutdown().await;
}
