//! Jobs that expand into requests (seed 003 F4–F5): a job's spider gives its start requests
//! as a template and parameters (an integer range, the trigger's args); the hub feeds them to
//! the run's frontier in batches as it runs short, stores the cursor, and a restarted hub
//! goes on from it — every request fetched, each item written once. Over real sockets: a real
//! agent on the in-process bus and the demo site on loopback.

use reqwest::Method;
use serde_json::{Value, json};
use silk_api::runs::{ExpandProgress, RunState};
use tempfile::TempDir;

mod common;
use common::*;

/// A spider of 2 hosts × 1,500 pages of the demo site, given as a template: the hosts come
/// from the trigger's `hosts` argument, the pages from a range.
fn spider() -> String {
    "name: expanded\nfollow: []\nrobots: false\nitem_when: '/p/\\d+$'\n\
     extract: {title: {css: 'h1.title'}}\nper_host_concurrency: 8\nper_host_delay_ms: 0\n\
     expand:\n  template: 'http://{+host}/p/{page}'\n  params:\n    host: {arg: hosts}\n    page: {range: [0, 1499]}\n"
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_expands_into_requests_fed_in_batches_and_a_restarted_hub_goes_on_from_the_cursor() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = silk_testkit::demo::DemoSite::start(silk_testkit::demo::DemoConfig {
        hosts: 2,
        pages: 1_500,
        latency_ms: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let hosts: Vec<String> = site
        .host_ips()
        .iter()
        .map(|ip| format!("{ip}:{}", site.port()))
        .collect();
    let hub = start_hub(dir.path(), &bus).await;
    let (_base, admin) = serve(&hub).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;

    let (status, job) = call(
        &admin,
        Method::POST,
        "/api/v1/jobs",
        Some(json!({"name": "search", "spider": spider(), "max_pending": 32})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let job = job["id"].as_str().unwrap().to_owned();

    // The template's arg is the trigger's: without it the run is refused, naming it.
    let (status, refused) = call(
        &admin,
        Method::POST,
        &format!("/api/v1/jobs/{job}/runs"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("expand.params.host.arg: the run has no argument `hosts`"),
        "{message}"
    );
    // A spider run has no project to read a file parameter from.
    let file_spider = spider().replace("{arg: hosts}", "{file: hosts.txt}");
    let (status, refused) = call(
        &admin,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": file_spider})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains(
            "expand.params.host.file: cannot read `hosts.txt`: a spider run has no project"
        ),
        "{message}"
    );

    let (status, run) = call(
        &admin,
        Method::POST,
        &format!("/api/v1/jobs/{job}/runs"),
        Some(json!({"args": {"hosts": hosts.join(",")}})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let run_id = silk_core::RunId::new(id.clone());
    within("some pages", 60, site.wait_for_requests(300)).await;
    // Fed in batches of 1,000 as the frontier runs short, not all 3,000 at once.
    let view = admin.run(&id).await.unwrap();
    let fed = view.expand.expect("the run shows its expansion");
    assert_eq!(fed.total, 3_000);
    assert!(
        (1_000..3_000).contains(&fed.fed),
        "fed {} of 3,000 after 300 pages",
        fed.fed
    );
    assert!(view.stats.total <= fed.fed, "{:?}", view.stats);
    hub.shutdown().await;

    // A restarted hub goes on from the stored cursor.
    let hub = start_hub(dir.path(), &bus).await;
    let done = within("the resumed run", 120, hub.wait_run(&run_id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_eq!(
        done.expand,
        Some(ExpandProgress {
            fed: 3_000,
            total: 3_000
        })
    );
    let items = items_once(&done);
    assert_eq!(items.len(), 3_000);
    let stats = site.stats();
    assert_eq!(
        stats.hits.keys().filter(|u| u.contains("/p/")).count(),
        3_000,
        "every expanded page is fetched"
    );
    assert_eq!(done.stats.success, 3_000, "{:?}", done.stats);
    hub.shutdown().await;
}

/// The Python SDK runs a job with parameters (`silk_sdk.Hub.run_job`) and follows the run
/// to its end: the job's template takes the values of the trigger's args.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_sdk_runs_a_job_with_parameters() {
    let Some(python) = silk_testkit::service_url("SILK_TEST_PYTHON") else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = silk_testkit::demo::DemoSite::start(silk_testkit::demo::DemoConfig {
        hosts: 2,
        pages: 1_500,
        ..Default::default()
    })
    .await
    .unwrap();
    let hub = start_hub(dir.path(), &bus).await;
    let (base, admin) = serve(&hub).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (status, job) = call(
        &admin,
        Method::POST,
        "/api/v1/jobs",
        Some(json!({"name": "search", "spider": spider().replace("[0, 1499]", "[10, 19]")})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let token = admin
        .create_token(&silk_api::tokens::TokenRequest {
            name: "sdk".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .token;
    let hosts = format!("127.0.0.2:{0}, 127.0.0.1:{0}", site.port());
    let script = "import json, sys, silk_sdk\n\
                  with silk_sdk.Hub(sys.argv[1], sys.argv[2]) as hub:\n\
                  \x20   run = hub.run_job('search', args={'hosts': sys.argv[3]})\n\
                  \x20   done = hub.wait_run(run['id'], timeout=60, every=0.1)\n\
                  \x20   print(json.dumps({'state': done['state'], 'expand': done['expand'], 'args': done['args']}))\n\
                  \x20   try:\n\
                  \x20       hub.run_job('search')\n\
                  \x20   except silk_sdk.SilkError as e:\n\
                  \x20       print(json.dumps({'status': e.status, 'message': e.message}))\n";
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .args(["-c", script, &base, &token, &hosts])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let done = lines.next().unwrap();
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["expand"], json!({"fed": 20, "total": 20}));
    let refused = lines.next().unwrap();
    assert_eq!(refused["status"], 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("expand.params.host.arg"),
        "{refused}"
    );
    let fetched: Vec<String> = site
        .stats()
        .hits
        .keys()
        .filter(|u| u.contains("/p/"))
        .cloned()
        .collect();
    assert_eq!(fetched.len(), 20, "{fetched:?}");
    hub.shutdown().await;
}
