//! The archive of finished requests (seed 002's "finish → archive"), with a real agent and a
//! site whose `/f/*` pages answer 503 until the test mends them: every request a run
//! finished is listed through the API (`GET /api/v1/runs/{id}/requests`) with its outcome,
//! status, error, attempts and agent, filtered and paged; failed ones are queued again
//! (`POST …/requests/requeue`) once each — into the run while it is active, into a run of
//! its job once it is over — and are fetched then.

mod common;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Html;
use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use silk_api::runs::{RequestOutcome, RequestsParams, RequeueRequest, RunRequest, RunState};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// The flaky site: `/` links to `/p/0..N`, each `/p/i` to `/f/i`; `/f/i` answers 503 while
/// `broken`; `/slow` answers once `release` is true.
#[derive(Clone)]
struct Site {
    broken: Arc<AtomicBool>,
    release: watch::Receiver<bool>,
    pages: u32,
}

async fn index(State(s): State<Site>) -> Html<String> {
    let links: String = (0..s.pages)
        .map(|i| format!("<a href=\"/p/{i}\">p{i}</a>"))
        .collect();
    Html(format!("<html><body>{links}</body></html>"))
}

async fn page(Path(i): Path<u32>) -> Html<String> {
    Html(format!(
        "<html><body><h1>p{i}</h1><a href=\"/f/{i}\">f</a></body></html>"
    ))
}

async fn flaky(State(s): State<Site>, Path(i): Path<u32>) -> (StatusCode, Html<String>) {
    if s.broken.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, Html("down".into()))
    } else {
        (StatusCode::OK, Html(format!("<h1>f{i}</h1>")))
    }
}

async fn slow(State(s): State<Site>) -> Html<String> {
    let mut release = s.release.clone();
    let _ = release.wait_for(|r| *r).await;
    Html("<h1>slow</h1>".into())
}

/// Starts the site: its base URL, its `broken` switch and the `/slow` release.
async fn flaky_site(pages: u32) -> (String, Arc<AtomicBool>, watch::Sender<bool>) {
    let broken = Arc::new(AtomicBool::new(true));
    let (release, rx) = watch::channel(false);
    let state = Site {
        broken: broken.clone(),
        release: rx,
        pages,
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(index))
        .route("/p/{i}", axum::routing::get(page))
        .route("/f/{i}", axum::routing::get(flaky))
        .route("/slow", axum::routing::get(slow))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, broken, release)
}

fn spider(name: &str, start: &[String]) -> String {
    let urls: Vec<String> = start.iter().map(|u| format!("'{u}'")).collect();
    format!(
        "name: {name}\nstart_urls: [{}]\nrobots: false\nmax_retries: 0\nper_host_delay_ms: 0\n\
         per_host_concurrency: 4\n",
        urls.join(", ")
    )
}

/// Every archived request of `run` that matches `params`, page after page of 2.
async fn all_archived(
    api: &silk_api::client::Client,
    run: &str,
    mut params: RequestsParams,
) -> Vec<silk_api::runs::ArchivedRequestView> {
    params.limit = Some(2);
    let mut rows = Vec::new();
    loop {
        let page = api.run_requests(run, &params).await.unwrap();
        rows.extend(page.requests);
        match page.next {
            Some(next) => params.after = Some(next),
            None => return rows,
        }
    }
}

/// The counts per outcome of `run`'s archive once they are `want` (the archive is written
/// shortly after the run's results).
async fn counts_reach(api: &silk_api::client::Client, run: &str, want: Value) {
    until(&format!("run {run}'s archive to hold {want}"), async || {
        let page = api
            .run_requests(run, &RequestsParams::default())
            .await
            .unwrap();
        (serde_json::to_value(&page.counts).unwrap() == want).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finished_requests_are_archived_listed_and_failed_ones_requeued_into_the_jobs_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let hub = start_hub(dir.path(), &bus).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (base, admin) = serve(&hub).await;
    let (site, broken, _release) = flaky_site(5).await;

    let spec: silk_api::jobs::JobSpec = serde_json::from_value(json!({
        "name": "flaky", "spider": spider("flaky", &[format!("{site}/")])
    }))
    .unwrap();
    let job = hub.create_job(spec).await.unwrap();
    let run = hub.trigger(&job.id, Default::default()).await.unwrap();
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let id = run.id.to_string();
    // `/` and five `/p/i` done, five `/f/i` failed (503, no retries).
    counts_reach(&admin, &id, json!({"done": 6, "failed": 5})).await;

    let failed = all_archived(
        &admin,
        &id,
        RequestsParams {
            outcome: Some(RequestOutcome::Failed),
            ..RequestsParams::default()
        },
    )
    .await;
    let urls: BTreeSet<String> = failed.iter().map(|r| r.url.clone()).collect();
    let want: BTreeSet<String> = (0..5).map(|i| format!("{site}/f/{i}")).collect();
    assert_eq!(failed.len(), 5, "{failed:?}");
    assert_eq!(urls, want, "paged by 2, each failed request once");
    for r in &failed {
        assert_eq!(r.status, Some(503), "{r:?}");
        assert_eq!(r.error_code.as_deref(), Some("http_503"), "{r:?}");
        assert_eq!(r.attempts, 1, "{r:?}");
        assert_eq!(r.agent.as_deref(), Some("a1"), "{r:?}");
        assert_eq!(r.depth, 2, "{r:?}");
        assert_eq!(r.method, "GET");
        assert!(r.time_ms >= run.created_ms, "{r:?}");
        assert_eq!(r.requeued_ms, None);
    }
    let ok = all_archived(
        &admin,
        &id,
        RequestsParams {
            status: Some(200),
            ..RequestsParams::default()
        },
    )
    .await;
    assert_eq!(ok.len(), 6);
    assert!(ok.iter().all(|r| r.outcome == RequestOutcome::Done));
    // The wire form of the filter and a bad cursor.
    let (status, page) = call(
        &admin,
        Method::GET,
        &format!("/api/v1/runs/{id}/requests?outcome=failed&error_code=http_503&limit=3"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["requests"].as_array().unwrap().len(), 3);
    assert_eq!(page["counts"], json!({"failed": 5}));
    assert!(page["next"].is_string());
    let (status, second) = call(
        &admin,
        Method::GET,
        &format!(
            "/api/v1/runs/{id}/requests?outcome=failed&limit=3&after={}",
            page["next"].as_str().unwrap()
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["requests"].as_array().unwrap().len(), 2);
    assert_eq!(
        second["counts"],
        Value::Null,
        "counted on the first page only"
    );
    assert_eq!(second["next"], Value::Null);
    let (status, e) = call(
        &admin,
        Method::GET,
        &format!("/api/v1/runs/{id}/requests?after=nonsense"),
        None,
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e["message"].as_str().unwrap().contains("`after`"), "{e}");

    // Mended; the failed requests go again, into a new run of the job (this one is over).
    broken.store(false, Ordering::SeqCst);
    let requeued = admin
        .requeue_requests(&id, &RequeueRequest::default())
        .await
        .unwrap();
    assert_eq!(requeued.requeued, 5, "{requeued:?}");
    assert!(requeued.refused.is_empty(), "{requeued:?}");
    let next = requeued.run.clone().expect("the run that takes them");
    assert_ne!(next, run.id);
    let view = hub.run(&next).await.unwrap();
    assert_eq!(view.job_id.as_deref(), Some(job.id.as_str()));
    counts_reach(&admin, next.as_str(), json!({"done": 5})).await;
    let again = all_archived(&admin, next.as_str(), RequestsParams::default()).await;
    let urls: BTreeSet<String> = again.iter().map(|r| r.url.clone()).collect();
    assert_eq!(
        urls, want,
        "the requeued requests were fetched, and only they"
    );
    // Marked, and not queued twice.
    let marked = all_archived(
        &admin,
        &id,
        RequestsParams {
            requeued: Some(true),
            ..RequestsParams::default()
        },
    )
    .await;
    assert_eq!(marked.len(), 5);
    assert!(marked.iter().all(|r| r.requeued_ms.is_some()));
    let (status, twice) = call(
        &admin,
        Method::POST,
        &format!("/api/v1/runs/{id}/requests/requeue"),
        None,
    )
    .await;
    assert_eq!(status, 200, "no body: the failed ones; {twice}");
    assert_eq!(twice, json!({"requeued": 0, "run": null, "refused": []}));
    // Named keys: whatever their outcome; one that is not there is named.
    let named = admin
        .requeue_requests(
            &id,
            &RequeueRequest {
                keys: Some(vec![
                    ok[0].key.clone(),
                    "nope".into(),
                    failed[0].key.clone(),
                ]),
                ..RequeueRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(named.requeued, 1, "{named:?}");
    assert_eq!(
        named.run.as_ref(),
        Some(&next),
        "the job's fed run takes it"
    );
    assert_eq!(named.refused.len(), 2, "{named:?}");
    assert!(
        named.refused.iter().any(|r| r.starts_with("nope:")),
        "{named:?}"
    );

    // Bad asks name what is wrong; another tenant's token sees no such run.
    let (status, e) = call(
        &admin,
        Method::POST,
        &format!("/api/v1/runs/{id}/requests/requeue"),
        Some(json!({"limit": 0})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e["message"].as_str().unwrap().contains("`limit`"), "{e}");
    let (status, e) = call(
        &admin,
        Method::POST,
        &format!("/api/v1/runs/{id}/requests/requeue"),
        Some(json!({"outcome": "lost"})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    let (status, _) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "other"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, made) = call(
        &admin,
        Method::POST,
        "/api/v1/tokens",
        Some(json!({"name": "o", "tenant": "other"})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let other = silk_api::client::Client::new(
        reqwest::Url::parse(&base).unwrap(),
        Some(made["token"].as_str().unwrap().to_owned()),
    )
    .unwrap();
    let (status, _) = call(
        &other,
        Method::GET,
        &format!("/api/v1/runs/{id}/requests"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &other,
        Method::POST,
        &format!("/api/v1/runs/{id}/requests/requeue"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 404);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_requests_are_requeued_into_their_run_while_it_is_active() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let hub = start_hub(dir.path(), &bus).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (_base, admin) = serve(&hub).await;
    let (site, broken, release) = flaky_site(0).await;

    // Two failures and a page that holds the run open until released.
    let start = [
        format!("{site}/f/0"),
        format!("{site}/f/1"),
        format!("{site}/slow"),
    ];
    let run = hub
        .submit(RunRequest::spider(spider("held", &start)))
        .await
        .unwrap();
    let id = run.id.to_string();
    counts_reach(&admin, &id, json!({"failed": 2})).await;
    broken.store(false, Ordering::SeqCst);
    let requeued = admin
        .requeue_requests(&id, &RequeueRequest::default())
        .await
        .unwrap();
    assert_eq!(requeued.requeued, 2, "{requeued:?}");
    assert_eq!(requeued.run.as_ref(), Some(&run.id), "into the run itself");
    counts_reach(&admin, &id, json!({"done": 2, "failed": 2})).await;
    release.send(true).unwrap();
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    counts_reach(&admin, &id, json!({"done": 3, "failed": 2})).await;
    let rows = all_archived(&admin, &id, RequestsParams::default()).await;
    let by_url = |url: &str| rows.iter().filter(|r| r.url == url).count();
    assert_eq!(by_url(&start[0]), 2, "the failure and the requeued fetch");
    assert_eq!(by_url(&start[2]), 1);

    // A run that is over and belongs to no job has nowhere to take them.
    let (status, e) = call(
        &admin,
        Method::POST,
        &format!("/api/v1/runs/{id}/requests/requeue"),
        Some(json!({"outcome": "done"})),
    )
    .await;
    assert_eq!(status, 409, "{e}");
    assert!(e["message"].as_str().unwrap().contains("no job"), "{e}");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_archive_off_runs_write_no_outcome_lines_and_list_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let hub = start_hub_with(
        silk_hub::HubConfig {
            archive_retention_ms: 0,
            ..hub_config(dir.path())
        },
        &bus,
    )
    .await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (_base, admin) = serve(&hub).await;
    let (site, _broken, _release) = flaky_site(2).await;
    let run = hub
        .submit(RunRequest::spider(spider("off", &[format!("{site}/")])))
        .await
        .unwrap();
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.stats.success, 3, "{done:?}");
    assert_eq!(done.stats.failed, 2, "{done:?}");
    let page = admin
        .run_requests(run.id.as_str(), &RequestsParams::default())
        .await
        .unwrap();
    assert!(page.requests.is_empty(), "{page:?}");
    assert_eq!(page.counts, Some(Default::default()));
    let run_dir = hub.data_dir().join("runs").join(run.id.as_str());
    assert!(
        run_dir.join("items.jsonl").exists(),
        "{}",
        run_dir.display()
    );
    let lines = run_dir.join("outcomes.jsonl");
    assert!(!lines.exists(), "{} is written", lines.display());
    hub.shutdown().await;
}
