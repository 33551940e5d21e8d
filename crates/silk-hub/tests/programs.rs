//! Program runs over real sockets: a project version (a shell program in a local git
//! repository, built by the projects feature) run as workers on two agents, its items pushed
//! with `curl` and its run token, its output in the run log; pause, resume and cancel reach
//! the processes, and nothing is left behind; the run's frontier and fetches through the
//! download center (the agent's session, proxies with a ban switched away from, trimming,
//! redirects) over the API, with the SDK and with Scrapy's download handler.

mod common;

use common::*;
use silk_api::ErrorCode;
use silk_api::client::Client;
use silk_api::logs::LogParams;
use silk_api::programs::{ProgramSpec, Runtime, WorkerState};
use silk_api::projects::{BuildKind, BuildRequest, BuildSpec, ProjectRequest, VersionState};
use silk_api::runs::{RunRequest, RunState, RunView, Strategy};
use silk_hub::{Hub, HubHandle};
use silk_testkit::WorkRepo;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;

/// A worker: says who it is, pushes one item per worker, checks that its token reaches
/// nothing else, and fails when asked to.
const WORKER: &str = r#"#!/bin/sh
echo "worker $SILK_WORKER of $SILK_WORKERS on $SILK_AGENT_ID, region $REGION"
echo "a line on stderr" >&2
echo '{"level": "error", "msg": "a structured error line"}'
body="{\"items\": [{\"url\": \"item-$SILK_WORKER\", \"region\": \"$REGION\"}]}"
curl -sf -X POST -H "Authorization: Bearer $SILK_RUN_TOKEN" -H 'Content-Type: application/json' \
  -d "$body" "$SILK_API_URL/api/v1/runs/$SILK_RUN_ID/items" || exit 3
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $SILK_RUN_TOKEN" "$SILK_API_URL/api/v1/runs")
[ "$code" = 403 ] || { echo "a run token listed runs: $code"; exit 4; }
if [ "$FAIL_WORKER" = "$SILK_WORKER" ]; then echo "giving up"; exit 7; fi
exit 0
"#;

/// A worker that ticks into a file until killed, deaf to SIGTERM.
const TICKER: &str = r#"#!/bin/sh
trap '' TERM
echo $$ > "$MARKS/pid-$SILK_WORKER"
while true; do
  echo tick >> "$MARKS/ticks-$SILK_WORKER"
  sleep 0.05
done
"#;

/// A worker that speaks the line protocol on its pipe.
const PIPER: &str = r#"#!/bin/sh
echo "ITM {\"url\": \"pipe-$SILK_WORKER\", \"via\": \"fifo\"}" > "$SILK_FIFO_PATH"
echo 'LOG {"level": 40, "message": "an error from the pipe"}' > "$SILK_FIFO_PATH"
echo 'not a message' > "$SILK_FIFO_PATH"
echo 'FIN {"outcome": "finished"}' > "$SILK_FIFO_PATH"
"#;

/// A worker that pushes two new items at a time until it is stopped.
const PUSHER: &str = r#"#!/bin/sh
i=0
while true; do
  i=$((i+1))
  curl -s -X POST -H "Authorization: Bearer $SILK_RUN_TOKEN" -H 'Content-Type: application/json' \
    -d "{\"items\": [{\"url\": \"w$SILK_WORKER-$i-a\"}, {\"url\": \"w$SILK_WORKER-$i-b\"}]}" \
    "$SILK_API_URL/api/v1/runs/$SILK_RUN_ID/items" >> "$MARKS/answers-$SILK_WORKER"
  echo >> "$MARKS/answers-$SILK_WORKER"
  sleep 0.01
done
"#;

/// A worker that waits for a file (while the test drives the run's frontier).
const WAITER: &str = r#"#!/bin/sh
while [ ! -e "$MARKS/stop" ]; do sleep 0.05; done
"#;

struct World {
    _dir: TempDir,
    hub: HubHandle,
    admin: Client,
    base: String,
    agents: Vec<silk_agent::AgentHandle>,
    bus: silk_bus::InProcessBus,
    config: silk_hub::HubConfig,
}

async fn world() -> World {
    let files = [
        ("run.sh", WORKER),
        ("tick.sh", TICKER),
        ("pipe.sh", PIPER),
        ("wait.sh", WAITER),
        ("push.sh", PUSHER),
        ("kw.txt", "shoes\nred hats\n\n"),
    ];
    let build = BuildSpec {
        kind: BuildKind::Command,
        command: None,
        containerfile: None,
        context: None,
        timeout_ms: Some(60_000),
        env: BTreeMap::new(),
    };
    start_world(
        tempfile::tempdir().unwrap(),
        "shop",
        &files,
        build,
        "1.0",
        None,
        |_| {},
    )
    .await
}

/// A hub (on loopback, with its public URL), two agents that run programs (their config
/// changed by `agent`), and `project` made of `files` and built as `version`; with `engine`,
/// builds and programs use that container engine.
async fn start_world(
    dir: TempDir,
    project: &str,
    files: &[(&str, &str)],
    build: BuildSpec,
    version: &str,
    engine: Option<&silk_testkit::containers::TestEngine>,
    agent: fn(&mut silk_agent::AgentConfig),
) -> World {
    let repo = WorkRepo::init(&dir.path().join("work"), &dir.path().join("git"), project);
    repo.commit(files, "first");
    repo.push();
    let bus = bus();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut config = silk_hub::HubConfig {
        public_url: Some(base.clone()),
        ..hub_config(dir.path())
    };
    if let Some(engine) = engine {
        config.builds.engine = silk_projects::build::Engine {
            cli: engine.cli.clone(),
            global_args: engine.global_args.clone(),
            build_args: engine.build_args.clone(),
            registry: None,
        };
    }
    let hub = Hub::start(
        config.clone(),
        std::sync::Arc::new(bus.clone()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap();
    let router = hub.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let token = hub.ensure_admin_token().await.unwrap();
    let admin = Client::new(reqwest::Url::parse(&base).unwrap(), token).unwrap();
    let mut agents = Vec::new();
    for id in ["p1", "p2"] {
        let mut config = agent_config(dir.path(), id);
        config.allow_programs = true;
        agent(&mut config);
        if let Some(engine) = engine {
            config.container_cli = engine.cli.clone();
            config.container_args = engine.global_args.clone();
        }
        agents.push(start_agent_with(config, &bus).await);
    }
    admin
        .create_project(&ProjectRequest {
            name: project.into(),
            git_url: format!("file://{}", repo.bare().display()),
            username: None,
            password: None,
            branch: Some("main".into()),
            tag_pattern: None,
            build,
            webhook_secret: None,
        })
        .await
        .unwrap();
    admin
        .build_project(
            project,
            &BuildRequest {
                git_ref: "main".into(),
                version: Some(version.into()),
            },
        )
        .await
        .unwrap();
    within("the version is built", 120, async {
        loop {
            let v = admin.version(project, version).await.unwrap();
            if v.state.is_final() {
                assert_eq!(v.state, VersionState::Ready, "{v:?}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    World {
        _dir: dir,
        hub,
        admin,
        base,
        agents,
        bus,
        config,
    }
}

fn program(command: &[&str], workers: u32, env: &[(&str, String)]) -> RunRequest {
    RunRequest {
        program: Some(ProgramSpec {
            project: "shop".into(),
            version: "latest".into(),
            runtime: Runtime::Process,
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            workers,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            stop_grace_ms: Some(500),
        }),
        strategy: Some(Strategy::Fixed(2)),
        ..RunRequest::spider("")
    }
}

async fn until_state(client: &Client, id: &str, pred: impl Fn(&RunView) -> bool) -> RunView {
    within("the run's state", 60, async {
        loop {
            let v = client.run(id).await.unwrap();
            if pred(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn log_text(client: &Client, id: &str) -> String {
    let page = client
        .logs(
            id,
            &LogParams {
                limit: Some(1000),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    page.lines
        .iter()
        .map(|l| format!("{} {} {}", l.level.as_str(), l.source, l.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_runs_its_workers_on_the_agents_and_pushes_items_with_its_run_token() {
    let w = world().await;
    // Only an admin runs a program: its command runs on the agents.
    let member = member(&w.admin, &w.base).await;
    let request = program(&["sh", "run.sh"], 3, &[("REGION", "eu".into())]);
    let refused = member.start_run(&request).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden), "{refused}");
    assert!(refused.message().unwrap_or("").contains("program"));

    let run = w.admin.start_run(&request).await.unwrap();
    let done = until_state(&w.admin, run.id.as_str(), |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    let p = done.program.clone().unwrap();
    assert_eq!(p.version, "1.0");
    assert_eq!(p.workers.len(), 3);
    assert!(p.workers.iter().all(|w| w.state == WorkerState::Succeeded));
    let agents: std::collections::BTreeSet<String> =
        p.workers.iter().map(|w| w.agent.to_string()).collect();
    assert_eq!(agents.len(), 2, "spread over both agents: {p:?}");
    // Each worker's item, once, with the job's env.
    let items = w.admin.all_items(run.id.as_str()).await.unwrap();
    let mut urls: Vec<String> = items
        .iter()
        .map(|i| {
            assert_eq!(i["region"], "eu");
            i["url"].as_str().unwrap().to_owned()
        })
        .collect();
    urls.sort();
    assert_eq!(urls, ["item-0", "item-1", "item-2"]);
    assert_eq!(done.stats.items, 3);
    // Their output is in the run log: stdout at info, stderr at warn, JSON lines with
    // their own level.
    let needles = [
        "info agent:p1 [worker 0] worker 0 of 3 on p1, region eu",
        "warn agent:p1 [worker 0] a line on stderr",
        "error agent:p1 [worker 0] a structured error line",
        "[worker 1] worker 1 of 3 on p2",
    ];
    within("the workers' lines are in the run log", 10, async {
        loop {
            let text = log_text(&w.admin, run.id.as_str()).await;
            if needles.iter().all(|n| text.contains(n)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // The run's token stops working when the run ends.
    let token = silk_hub_token(&w.hub, &run.id).await;
    let after = reqwest::Client::new()
        .post(format!("{}/api/v1/runs/{}/items", w.base, run.id))
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .body(r#"{"items": [{"url": "late"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status().as_u16(), 401);

    // A worker that exits non-zero fails the run, naming it, its code and its last lines.
    let failing = program(
        &["sh", "run.sh"],
        2,
        &[("REGION", "us".into()), ("FAIL_WORKER", "1".into())],
    );
    let run = w.admin.start_run(&failing).await.unwrap();
    let done = until_state(&w.admin, run.id.as_str(), |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Failed, "{done:?}");
    let reason = done.reason.unwrap_or_default();
    for needle in ["worker 1", "exit code 7", "giving up"] {
        assert!(reason.contains(needle), "`{needle}` not in {reason}");
    }
}

/// The run token a worker of `run` got (as the agents do: from the hub's key).
async fn silk_hub_token(hub: &HubHandle, run: &silk_core::RunId) -> String {
    hub.run_token(run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_cancel_reach_the_processes_and_leave_nothing_behind() {
    let w = world().await;
    let marks = tempfile::tempdir().unwrap();
    let request = program(
        &["sh", "tick.sh"],
        2,
        &[("MARKS", marks.path().display().to_string())],
    );
    let run = w.admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();
    let ticks = |n: u32| count_lines(&marks.path().join(format!("ticks-{n}")));
    within("both workers tick", 30, async {
        while ticks(0) < 3 || ticks(1) < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    until_all_running(&w.admin, &id).await;

    w.admin.pause_run(&id).await.unwrap();
    // Paused: the counts settle and stay (a window is the point here: nothing must happen).
    let settled = within("the workers stop", 10, async {
        loop {
            let before = (ticks(0), ticks(1));
            tokio::time::sleep(Duration::from_millis(300)).await;
            if (ticks(0), ticks(1)) == before {
                return before;
            }
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!((ticks(0), ticks(1)), settled, "a paused worker went on");

    w.admin.resume_run(&id).await.unwrap();
    within("the workers tick again", 10, async {
        while ticks(0) <= settled.0 || ticks(1) <= settled.1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // Cancel: they ignore SIGTERM, so SIGKILL after the grace period ends them.
    w.admin.cancel_run(&id).await.unwrap();
    let done = until_state(&w.admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Cancelled, "{done:?}");
    for n in 0..2 {
        let pid: i32 = std::fs::read_to_string(marks.path().join(format!("pid-{n}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        until_gone(pid, 10).await;
    }
    within("the stop is in the run log", 10, async {
        while !log_text(&w.admin, &id)
            .await
            .contains("SIGKILL after 500 ms")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_detaches_stops_its_workers_and_a_hub_back_starts_them_again() {
    let files = [("tick.sh", TICKER)];
    let build = BuildSpec {
        kind: BuildKind::Command,
        command: None,
        containerfile: None,
        context: None,
        timeout_ms: Some(60_000),
        env: BTreeMap::new(),
    };
    let w = start_world(
        tempfile::tempdir().unwrap(),
        "shop",
        &files,
        build,
        "1.0",
        None,
        |c| c.detach_after_ms = 1_000,
    )
    .await;
    let marks = tempfile::tempdir().unwrap();
    let request = program(
        &["sh", "tick.sh"],
        2,
        &[("MARKS", marks.path().display().to_string())],
    );
    let run = w.admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();
    let ticks = |n: u32| count_lines(&marks.path().join(format!("ticks-{n}")));
    let pid = |n: u32| -> i32 {
        std::fs::read_to_string(marks.path().join(format!("pid-{n}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    until_all_running(&w.admin, &id).await;
    // A worker is running once its process is; its script writes its pid, then ticks.
    within("the workers tick", 30, async {
        while ticks(0) == 0 || ticks(1) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let first = (pid(0), pid(1));

    // The hub goes: the agents detach and stop the workers (deaf to SIGTERM: SIGKILL).
    w.hub.shutdown().await;
    for pid in [first.0, first.1] {
        until_gone(pid, 30).await;
    }
    for agent in &w.agents {
        assert!(agent.stats().detached, "{} is not detached", agent.id());
    }
    let stopped = (ticks(0), ticks(1));

    // A hub again (same store and key): the workers' detached ends come, and they start again.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hub = Hub::start(
        silk_hub::HubConfig {
            public_url: Some(base.clone()),
            ..w.config.clone()
        },
        std::sync::Arc::new(w.bus.clone()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap();
    let router = hub.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let token = std::fs::read_to_string(hub.data_dir().join(silk_hub::ADMIN_TOKEN_FILE)).unwrap();
    let admin = Client::new(
        reqwest::Url::parse(&base).unwrap(),
        Some(token.trim().to_owned()),
    )
    .unwrap();
    within("the workers tick again", 60, async {
        while ticks(0) <= stopped.0 || ticks(1) <= stopped.1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_ne!((pid(0), pid(1)), first, "new processes");
    for agent in &w.agents {
        assert!(!agent.stats().detached);
    }
    let view = until_all_running(&admin, &id).await;
    assert_eq!(view.state, RunState::Running);
    // The agent says why in the run log. (The hub starts the workers again either when their
    // detached ends come, or, when those are read before it adopted the run, at adoption.)
    within("the detach is in the run log", 30, async {
        while !log_text(&admin, &id).await.contains("heard from no hub") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    admin.cancel_run(&id).await.unwrap();
    let done = until_state(&admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Cancelled, "{done:?}");
    hub.shutdown().await;
}

/// Waits until the run's workers all run.
async fn until_all_running(client: &Client, id: &str) -> RunView {
    until_state(client, id, |v| {
        v.program
            .as_ref()
            .is_some_and(|p| p.workers.iter().all(|w| w.state == WorkerState::Running))
    })
    .await
}

/// Waits (at most `secs`) until process `pid` is gone (or a zombie).
async fn until_gone(pid: i32, secs: u64) {
    within(&format!("process {pid} gone"), secs, async {
        while Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2) == Some("Z"))
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_without_an_sdk_speaks_the_line_protocol_on_its_pipe() {
    let w = world().await;
    let run = w
        .admin
        .start_run(&program(&["sh", "pipe.sh"], 2, &[]))
        .await
        .unwrap();
    let done = until_state(&w.admin, run.id.as_str(), |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    let mut urls: Vec<String> = w
        .admin
        .all_items(run.id.as_str())
        .await
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["via"], "fifo");
            i["url"].as_str().unwrap().to_owned()
        })
        .collect();
    urls.sort();
    assert_eq!(urls, ["pipe-0", "pipe-1"]);
    within("the pipe's lines are in the run log", 10, async {
        loop {
            let text = log_text(&w.admin, run.id.as_str()).await;
            if text.contains("error agent:p1 [worker 0] an error from the pipe")
                && text.contains("`not a message")
                && text.contains("FIN {\"outcome\":\"finished\"}")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// `POST url` with `token` and a JSON body; the status and the JSON answer.
async fn call(token: &str, url: String, body: serde_json::Value) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let bytes = r.bytes().await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_drives_its_runs_frontier_over_the_api_with_its_run_token() {
    let w = world().await;
    let marks = tempfile::tempdir().unwrap();
    let mut request = program(
        &["sh", "wait.sh"],
        1,
        &[("MARKS", marks.path().display().to_string())],
    );
    request.spider =
        "name: shop\nstart_urls: []\nper_host_concurrency: 8\nper_host_delay_ms: 0\n".into();
    let run = w.admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();
    let token = w.hub.run_token(&run.id);
    let url = |path: &str| format!("{}/api/v1/runs/{id}/{path}", w.base);

    // Enqueue: deduplicated on Silk's canonical key (a fragment is no new page).
    let (status, added) = call(
        &token,
        url("requests"),
        serde_json::json!({"requests": [
            {"url": "http://127.0.0.1:9/a", "meta": {"callback": "parse"}, "priority": 1},
            {"url": "http://127.0.0.1:9/a#top"},
            {"url": "http://127.0.0.1:9/b", "method": "POST", "body": "aGk=", "headers": {"X-A": "1"}}]}),
    )
    .await;
    assert_eq!(status, 200, "{added}");
    assert_eq!(added, serde_json::json!({"added": 2, "duplicates": 1}));
    // Bad input names the field.
    let (status, bad) = call(
        &token,
        url("requests"),
        serde_json::json!({"requests": [{"url": "http://127.0.0.1:9/c"}, {"url": "not a url"}]}),
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    assert!(
        bad["message"].as_str().unwrap().contains("requests[1].url"),
        "{bad}"
    );

    // Lease: both, with what they were enqueued with.
    let (status, leased) = call(&token, url("lease"), serde_json::json!({"max": 10})).await;
    assert_eq!(status, 200, "{leased}");
    let leases = leased["leases"].as_array().unwrap().clone();
    assert_eq!(leases.len(), 2, "{leased}");
    let a = leases
        .iter()
        .find(|l| l["url"] == "http://127.0.0.1:9/a")
        .unwrap();
    let b = leases
        .iter()
        .find(|l| l["url"] == "http://127.0.0.1:9/b")
        .unwrap();
    assert_eq!(a["meta"]["callback"], "parse");
    assert_eq!(
        (b["method"].as_str(), b["body"].as_str()),
        (Some("POST"), Some("aGk="))
    );
    assert_eq!(b["headers"]["X-A"], "1");
    assert_eq!(leased["left"], 2);
    // Nothing more may start: an empty answer after the wait.
    let (_, none) = call(
        &token,
        url("lease"),
        serde_json::json!({"max": 10, "wait_ms": 200}),
    )
    .await;
    assert_eq!(none["leases"].as_array().unwrap().len(), 0, "{none}");

    // Ack: a done with a new request (one write), b failed.
    let (status, acked) = call(
        &token,
        url("ack"),
        serde_json::json!({"acks": [
            {"lease_id": a["lease_id"], "outcome": "done", "requests": [{"url": "http://127.0.0.1:9/c"}]},
            {"lease_id": b["lease_id"], "outcome": "failed", "reason": "http_500"}]}),
    )
    .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(
        acked,
        serde_json::json!({"acked": 2, "late": 0, "added": 1, "duplicates": 0})
    );
    let view = w.admin.run(&id).await.unwrap();
    assert_eq!(
        (
            view.stats.total,
            view.stats.success,
            view.stats.failed,
            view.stats.left
        ),
        (3, 1, 1, 1)
    );

    // Paused: nothing is leased, and the answer says why.
    w.admin.pause_run(&id).await.unwrap();
    let (_, paused) = call(&token, url("lease"), serde_json::json!({"max": 10})).await;
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["leases"].as_array().unwrap().len(), 0);
    w.admin.resume_run(&id).await.unwrap();
    let (_, got) = call(&token, url("lease"), serde_json::json!({"max": 10})).await;
    assert_eq!(got["leases"][0]["url"], "http://127.0.0.1:9/c", "{got}");
    // A lease call that waits is answered as soon as a request is enqueued.
    let (t, u) = (token.clone(), url("lease"));
    let waiting =
        tokio::spawn(
            async move { call(&t, u, serde_json::json!({"max": 10, "wait_ms": 20000})).await },
        );
    let (status, _) = call(
        &token,
        url("requests"),
        serde_json::json!({"requests": [{"url": "http://127.0.0.1:9/d"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, got) = within("the waiting lease call", 10, waiting).await.unwrap();
    assert_eq!(got["leases"][0]["url"], "http://127.0.0.1:9/d", "{got}");

    // The token reaches nothing else, and another run's token does not reach this run.
    let other = w.hub.run_token(&silk_core::RunId::new("0000"));
    let (status, _) = call(&other, url("lease"), serde_json::json!({})).await;
    assert_eq!(status, 401, "a token of a run that does not exist");
    let (status, _) = call(
        &token,
        format!("{}/api/v1/runs", w.base),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(status, 403);
    std::fs::write(marks.path().join("stop"), "").unwrap();
    let done = until_state(&w.admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
}

/// A program run's spider may expand its start requests from a file of its project version:
/// the hub reads it out of the version's packed directory, and the program leases the
/// requests with their parameters; a file that is not in the version is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_runs_expansion_reads_its_file_from_the_version() {
    let w = world().await;
    let marks = tempfile::tempdir().unwrap();
    let mut request = program(
        &["sh", "wait.sh"],
        1,
        &[("MARKS", marks.path().display().to_string())],
    );
    // (Canonical URLs sort their query parameters.)
    let spider = "name: shop\nper_host_concurrency: 8\nper_host_delay_ms: 0\n\
                  expand: {template: 'http://127.0.0.1:9/s?q={kw}&p={p}', params: {kw: {file: kw.txt}, p: {range: [1, 2]}}}\n";
    request.spider = spider.replace("kw.txt", "gone.txt");
    let refused = w.admin.start_run(&request).await.unwrap_err();
    assert_eq!(refused.status(), Some(400), "{refused}");
    assert!(
        refused.to_string().contains(
            "expand.params.kw.file: cannot read `gone.txt`: not a file of the project version"
        ),
        "{refused}"
    );
    request.spider = spider.into();
    let run = w.admin.start_run(&request).await.unwrap();
    assert_eq!(
        run.expand,
        Some(silk_api::runs::ExpandProgress { fed: 0, total: 4 })
    );
    let id = run.id.to_string();
    let token = w.hub.run_token(&run.id);
    let (status, leased) = call(
        &token,
        format!("{}/api/v1/runs/{id}/lease", w.base),
        serde_json::json!({"max": 10}),
    )
    .await;
    assert_eq!(status, 200, "{leased}");
    let mut got: Vec<(String, serde_json::Value)> = leased["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["url"].as_str().unwrap().to_owned(),
                l["meta"]["params"].clone(),
            )
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            (
                "http://127.0.0.1:9/s?p=1&q=red%20hats".to_owned(),
                serde_json::json!({"kw": "red hats", "p": 1})
            ),
            (
                "http://127.0.0.1:9/s?p=1&q=shoes".to_owned(),
                serde_json::json!({"kw": "shoes", "p": 1})
            ),
            (
                "http://127.0.0.1:9/s?p=2&q=red%20hats".to_owned(),
                serde_json::json!({"kw": "red hats", "p": 2})
            ),
            (
                "http://127.0.0.1:9/s?p=2&q=shoes".to_owned(),
                serde_json::json!({"kw": "shoes", "p": 2})
            ),
        ]
    );
    assert_eq!(leased["left"], 4, "{leased}");
    let view = w.admin.run(&id).await.unwrap();
    assert_eq!(
        view.expand,
        Some(silk_api::runs::ExpandProgress { fed: 4, total: 4 })
    );
    std::fs::write(marks.path().join("stop"), "").unwrap();
    let done = until_state(&w.admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
}

/// A program run's fetches through the download center are its tenant's pages: when the
/// day's pages are used up, the next fetch is answered `503` naming the quota and the run is
/// paused with `quota_exhausted`; a larger quota resumes it, and it fetches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_programs_fetches_are_its_tenants_pages_and_a_used_up_quota_pauses_it() {
    let w = world().await;
    let site = silk_testkit::demo::DemoSite::start(silk_testkit::demo::DemoConfig {
        port: 0,
        hosts: 1,
        pages: 20,
        ..Default::default()
    })
    .await
    .unwrap();
    let quota = |pages: u64| {
        let admin = &w.admin;
        async move {
            admin
                .request(
                    reqwest::Method::PATCH,
                    "/api/v1/tenants/default",
                    Some(&serde_json::json!({"quotas": {"pages_per_day": pages}})),
                )
                .await
                .unwrap();
        }
    };
    quota(3).await;
    let marks = tempfile::tempdir().unwrap();
    let mut request = program(
        &["sh", "wait.sh"],
        1,
        &[("MARKS", marks.path().display().to_string())],
    );
    request.spider =
        "name: shop\nrobots: false\nper_host_concurrency: 8\nper_host_delay_ms: 0\n".into();
    let run = w.admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();
    let token = w.hub.run_token(&run.id);
    let fetch = |i: u32| {
        let (token, url, page) = (
            token.clone(),
            format!("{}/api/v1/runs/{id}/fetch", w.base),
            site.page_url(1, i),
        );
        async move { call(&token, url, serde_json::json!({"url": page})).await }
    };
    for i in 0..3 {
        let (status, page) = fetch(i).await;
        assert_eq!(
            (status, page["status"].as_u64()),
            (200, Some(200)),
            "{page}"
        );
    }
    let (status, refused) = fetch(3).await;
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("quota_exhausted: pages_per_day of tenant `default` (3)"),
        "{refused}"
    );
    let paused = until_state(&w.admin, &id, |v| v.state == RunState::Paused).await;
    assert!(
        paused
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("quota_exhausted")),
        "{paused:?}"
    );
    assert_eq!(
        site.stats().hits_under("/p/"),
        3,
        "nothing past the quota reached the site"
    );
    // A user's pause and resume do not get it past the quota: paused by it again.
    w.admin.pause_run(&id).await.unwrap();
    w.admin.resume_run(&id).await.unwrap();
    until_state(&w.admin, &id, |v| {
        v.state == RunState::Paused
            && v.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("quota_exhausted"))
    })
    .await;
    let (status, refused) = fetch(3).await;
    assert_eq!(status, 503, "{refused}");
    assert_eq!(site.stats().hits_under("/p/"), 3);
    let usage = within("the usage to be counted", 30, async {
        loop {
            let answer = w
                .admin
                .request(reqwest::Method::GET, "/api/v1/tenants/default/usage", None)
                .await
                .unwrap();
            if answer.value["pages"] == 3 {
                return answer.value;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(usage["overshoot_pages"], 0, "{usage}");

    // More pages for the day: the run resumes by itself and fetches again.
    quota(10).await;
    until_state(&w.admin, &id, |v| v.state == RunState::Running).await;
    let (status, page) = fetch(4).await;
    assert_eq!(
        (status, page["status"].as_u64()),
        (200, Some(200)),
        "{page}"
    );
    std::fs::write(marks.path().join("stop"), "").unwrap();
    let done = until_state(&w.admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_serves_the_python_sdk_as_a_wheel_that_pip_installs() {
    let python = std::env::var("SILK_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    if std::process::Command::new(&python)
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "CI must have a Python");
        println!("skipped: no {python}");
        return;
    }
    let w = world().await;
    let http = reqwest::Client::new();
    let index = http
        .get(format!("{}/sdk/python/", w.base))
        .send()
        .await
        .unwrap();
    assert_eq!(index.status().as_u16(), 200);
    let index = index.text().await.unwrap();
    let name = silk_hub::sdk::wheel_name();
    assert!(index.contains(&format!("href=\"{name}#sha256=")), "{index}");
    let wheel = http
        .get(format!("{}/sdk/python/{name}", w.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(&name);
    std::fs::write(&file, &wheel).unwrap();
    let venv = dir.path().join("venv");
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(std::process::Command::new(&python)
        .args(["-m", "venv"])
        .arg(&venv));
    run(std::process::Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--no-deps", "--no-index"])
        .arg(&file));
    // Installed without its dependencies (no index here): its metadata and files are there.
    let shown = run(std::process::Command::new(venv.join("bin/python")).args([
        "-c",
        "import importlib.metadata as m; \
         print(m.version('silk-sdk')); print(m.requires('silk-sdk')); \
         print(any(str(f).endswith('silk_sdk/scrapy.py') for f in m.files('silk-sdk')))",
    ]));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], silk_hub::sdk::VERSION, "{shown}");
    assert!(lines[1].contains("httpx>=0.23"), "{shown}");
    assert_eq!(lines[2], "True", "{shown}");
}

/// A container version runs as a program with the container runtime: one container per
/// worker on the host's network, the line protocol's pipe mounted into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_version_runs_its_workers_as_containers() {
    let Some(engine) = silk_testkit::containers::TestEngine::podman() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = engine.base_image(dir.path());
    let job = "echo \"in a container, worker $SILK_WORKER of $SILK_WORKERS\"\n\
               echo \"ITM {\\\"url\\\": \\\"box-$SILK_WORKER\\\"}\" > \"$SILK_FIFO_PATH\"\n";
    let containerfile = format!("FROM {base}\nCOPY job.sh /job.sh\n");
    let build = BuildSpec {
        kind: BuildKind::Container,
        command: None,
        containerfile: Some("Containerfile".into()),
        context: None,
        timeout_ms: Some(120_000),
        env: BTreeMap::new(),
    };
    // Images outlive the test's directory: a version of this process's own.
    let version = format!("1.{}", std::process::id());
    let files = [("job.sh", job), ("Containerfile", containerfile.as_str())];
    let w = start_world(dir, "boxed", &files, build, &version, Some(&engine), |_| {}).await;
    let (hub, admin) = (&w.hub, &w.admin);
    // A container version does not run as a process, and the answer says why.
    let mut request = program(&["sh", "/job.sh"], 2, &[]);
    if let Some(p) = &mut request.program {
        p.project = "boxed".into();
    }
    let refused = admin.start_run(&request).await.unwrap_err();
    assert!(
        refused
            .message()
            .unwrap_or("")
            .contains("runtime: container"),
        "{refused}"
    );
    if let Some(p) = &mut request.program {
        p.runtime = Runtime::Container;
    }
    let run = admin.start_run(&request).await.unwrap();
    let done = within("the containers end", 120, async {
        loop {
            let v = admin.run(run.id.as_str()).await.unwrap();
            if v.state.is_terminal() {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    let mut urls: Vec<String> = admin
        .all_items(run.id.as_str())
        .await
        .unwrap()
        .iter()
        .map(|i| i["url"].as_str().unwrap().to_owned())
        .collect();
    urls.sort();
    assert_eq!(urls, ["box-0", "box-1"]);
    within("the containers' output is in the run log", 10, async {
        while !log_text(admin, run.id.as_str())
            .await
            .contains("in a container, worker 1 of 2")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    admin.delete_project("boxed").await.unwrap();
    hub.shutdown().await;
}

/// What the fetch test's site saw: path, `Cookie` header, and whether it came through the
/// forwarding proxy.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, bool)>>>;

/// The fetch test's site: a login that sets a cookie, a page that shows it, a redirect, a
/// page to trim, a binary body and an echo of a POST.
async fn fetch_site(seen: Seen) -> String {
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::routing::{get, post};
    let record = move |path: &'static str| {
        let seen = seen.clone();
        move |headers: HeaderMap| {
            let cookie = headers
                .get(header::COOKIE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            seen.lock().unwrap().push((
                path.to_owned(),
                cookie.clone(),
                headers.contains_key("x-via"),
            ));
            cookie
        }
    };
    let login = record("/login");
    let me = record("/me");
    let page = record("/page");
    let app = axum::Router::new()
        .route(
            "/login",
            get(move |h: HeaderMap| async move {
                login(h);
                ([(header::SET_COOKIE, "sid=s3cret; Path=/")], "in")
            }),
        )
        .route(
            "/me",
            get(move |h: HeaderMap| async move {
                let cookie = me(h);
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    format!(
                        "<html><head><title>Me</title></head><body>cookie=[{cookie}]</body></html>"
                    ),
                )
            }),
        )
        .route(
            "/moved",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/me")], "") }),
        )
        .route(
            "/page",
            get(move |h: HeaderMap| async move {
                page(h);
                axum::response::Html(
                    "<html><head><title>Page</title></head><body>\
                     <div id=\"main\">keep this</div><p>drop this</p></body></html>",
                )
            }),
        )
        .route(
            "/bin",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    vec![0u8, 159, 146, 150, 255],
                )
            }),
        )
        .route("/echo", post(|body: axum::body::Bytes| async move { body }));
    serve_app(app).await
}

/// An HTTP proxy that forwards each request to its target (marking it `X-Via: fwd`) and
/// answers with the target's response as it is.
async fn forwarding_proxy() -> String {
    use axum::extract::Request;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    let app = axum::Router::new().fallback(move |request: Request| {
        let http = http.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
            let mut out = http
                .request(parts.method, parts.uri.to_string())
                .header("x-via", "fwd")
                .body(body);
            if let Some(cookie) = parts.headers.get("cookie") {
                out = out.header("cookie", cookie);
            }
            let got = out.send().await.unwrap();
            let mut answer = axum::http::Response::builder().status(got.status());
            for (k, v) in got.headers() {
                answer = answer.header(k, v);
            }
            answer
                .body(axum::body::Body::from(got.bytes().await.unwrap()))
                .unwrap()
        }
    });
    serve_app(app).await
}

/// A proxy that bans everyone (403).
async fn banning_proxy() -> String {
    let app = axum::Router::new()
        .fallback(|| async { (axum::http::StatusCode::FORBIDDEN, "<p>forbidden</p>") });
    serve_app(app).await
}

async fn serve_app(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_fetches_through_the_download_center_with_its_agents_downloader() {
    use base64::Engine;
    let b64 = |s: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(s.as_str().unwrap_or_default())
            .unwrap()
    };
    let w = world().await;
    let seen: Seen = Default::default();
    let site = fetch_site(seen.clone()).await;
    let (banning, forwarding) = (banning_proxy().await, forwarding_proxy().await);
    let marks = tempfile::tempdir().unwrap();
    let mut request = program(
        &["sh", "wait.sh"],
        1,
        &[("MARKS", marks.path().display().to_string())],
    );
    request.spider = "name: shop\nstart_urls: []\nrobots: false\n".into();
    request.downloader = Some(
        serde_json::json!({
            "proxies": {"list": [banning, forwarding], "switch_on_status": [403]},
            "trim": {"rules": [{"css": "#main"}]},
        })
        .as_object()
        .unwrap()
        .clone(),
    );
    let run = w.admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();
    let token = w.hub.run_token(&run.id);
    let fetch_url = format!("{}/api/v1/runs/{id}/fetch", w.base);
    // A fetch on `agent`, asked again while the run's banning proxy answers (it is switched
    // away from after its first ban on that agent).
    let banned = std::sync::atomic::AtomicU32::new(0);
    // The proxy a fetch went through, as the run's list names it.
    let via = |got: &serde_json::Value| {
        got["proxy"]
            .as_str()
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_owned()
    };
    let fetch = |ask: serde_json::Value| {
        let (token, fetch_url, banned, banning) = (&token, &fetch_url, &banned, &banning);
        async move {
            for _ in 0..3 {
                let (status, got) = call(token, fetch_url.clone(), ask.clone()).await;
                assert_eq!(status, 200, "{ask} → {got}");
                if got["error"]["code"] == "proxy_banned" {
                    assert_eq!(&via(&got), banning, "{got}");
                    banned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    continue;
                }
                return got;
            }
            panic!("{ask}: banned three times");
        }
    };

    // The agent's session: the cookie set on p1 is sent by p1, not by p2.
    let login = fetch(serde_json::json!({"url": format!("{site}/login"), "agent": "p1"})).await;
    assert_eq!(login["status"], 200, "{login}");
    assert_eq!(login["agent"], "p1");
    assert_eq!(via(&login), forwarding, "{login}");
    assert!(
        login["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "set-cookie" && h[1].as_str().unwrap().starts_with("sid=s3cret")),
        "{login}"
    );
    let me = fetch(serde_json::json!({"url": format!("{site}/me"), "agent": "p1"})).await;
    let text = String::from_utf8(b64(&me["body"])).unwrap();
    assert!(text.contains("cookie=[sid=s3cret]"), "{text}");
    let other = fetch(serde_json::json!({"url": format!("{site}/me"), "agent": "p2"})).await;
    assert_eq!(other["agent"], "p2");
    let text = String::from_utf8(b64(&other["body"])).unwrap();
    assert!(text.contains("cookie=[]"), "{text}");
    // The banning proxy was switched away from: at most one ban per agent.
    assert!(banned.load(std::sync::atomic::Ordering::SeqCst) <= 2);

    // Redirects: as they are, or followed.
    let moved = fetch(serde_json::json!({"url": format!("{site}/moved"), "agent": "p1"})).await;
    assert_eq!(moved["status"], 302, "{moved}");
    let followed = fetch(serde_json::json!(
        {"url": format!("{site}/moved"), "agent": "p1", "follow_redirects": true}))
    .await;
    assert_eq!(
        (followed["status"].as_u64(), followed["url"].as_str()),
        (Some(200), Some(format!("{site}/me").as_str())),
        "{followed}"
    );
    assert_eq!(
        followed["redirects"],
        serde_json::json!([format!("{site}/moved")])
    );

    // Trimming by the run's rules, on request; bodies byte for byte otherwise.
    let trimmed = fetch(serde_json::json!({"url": format!("{site}/page"), "trim": true})).await;
    assert_eq!(trimmed["trimmed"], true, "{trimmed}");
    let text = String::from_utf8(b64(&trimmed["body"])).unwrap();
    assert!(
        text.contains("keep this") && !text.contains("drop this"),
        "{text}"
    );
    let whole = fetch(serde_json::json!({"url": format!("{site}/page")})).await;
    assert!(
        String::from_utf8(b64(&whole["body"]))
            .unwrap()
            .contains("drop this")
    );
    let bin = fetch(serde_json::json!({"url": format!("{site}/bin")})).await;
    assert_eq!(b64(&bin["body"]), vec![0u8, 159, 146, 150, 255], "{bin}");
    let echo = fetch(serde_json::json!(
        {"url": format!("{site}/echo"), "method": "POST", "body": "aGVsbG8="}))
    .await;
    assert_eq!(b64(&echo["body"]), b"hello", "{echo}");

    // Bad input names the field.
    for (ask, field) in [
        (serde_json::json!({"url": "ftp://127.0.0.1/x"}), "url"),
        (
            serde_json::json!({"url": format!("{site}/me"), "method": "PUT"}),
            "method",
        ),
        (
            serde_json::json!({"url": format!("{site}/me"), "body": "%%"}),
            "body",
        ),
    ] {
        let (status, got) = call(&token, fetch_url.clone(), ask.clone()).await;
        assert_eq!(status, 400, "{ask} → {got}");
        assert!(
            got["message"].as_str().unwrap().contains(field),
            "{ask} → {got}"
        );
    }
    // Every page the site saw came through the run's forwarding proxy.
    assert!(seen.lock().unwrap().iter().all(|(_, _, via)| *via));

    // The SDK, and Scrapy with Silk's download handler: a redirect followed by Scrapy, the
    // cookie of the worker's agent, items in the run's item log.
    if let Some(python) = silk_testkit::service_url("SILK_TEST_PYTHON") {
        sdk_fetches(&python, &w, &run.id, &token, &site).await;
        let got = seen.lock().unwrap().clone();
        assert!(
            got.iter()
                .any(|(path, cookie, via)| path == "/me" && cookie == "sid=s3cret" && *via),
            "{got:?}"
        );
    }
    std::fs::write(marks.path().join("stop"), "").unwrap();
    let done = until_state(&w.admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    // A token of an ended run fetches nothing.
    let (status, _) = call(
        &token,
        fetch_url.clone(),
        serde_json::json!({"url": format!("{site}/me")}),
    )
    .await;
    assert_eq!(status, 401);
}

/// A Scrapy spider on the run (Silk's scheduler, item pipeline and download handler).
const FETCH_SPIDER: &str = r#"
import os, scrapy

class Spider(scrapy.Spider):
    name = "fetcher"
    custom_settings = {
        "SCHEDULER": "silk_sdk.scrapy.Scheduler",
        "DUPEFILTER_CLASS": "silk_sdk.scrapy.DupeFilter",
        "ITEM_PIPELINES": {"silk_sdk.scrapy.ItemPipeline": 300},
        "DOWNLOAD_HANDLERS": {"http": "silk_sdk.scrapy.DownloadHandler",
                              "https": "silk_sdk.scrapy.DownloadHandler"},
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_TIMES": 3,
    }

    async def start(self):
        for path in ("/moved", "/page"):
            yield scrapy.Request(os.environ["SITE"] + path)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get(),
               "body": response.text, "flags": response.flags}
"#;

/// The output of `python ARGS` run in `dir` with `env`, off the runtime's threads.
async fn python_output(
    python: &str,
    args: &[&str],
    env: &[(&str, String)],
    dir: &Path,
) -> std::process::Output {
    let mut cmd = std::process::Command::new(python);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(dir);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

async fn sdk_fetches(python: &str, w: &World, run: &silk_core::RunId, token: &str, site: &str) {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("SILK_API_URL", w.base.clone()),
        ("SILK_RUN_ID", run.to_string()),
        ("SILK_RUN_TOKEN", token.to_owned()),
        ("SILK_AGENT_ID", "p1".to_owned()),
        ("SITE", site.to_owned()),
    ];
    let script = r#"
import json, os, silk_sdk
run = silk_sdk.Run.from_env()
r = run.fetch(os.environ["SITE"] + "/me")
print(json.dumps({"status": r.status, "agent": r.agent, "text": r.text, "ok": r.ok,
                  "type": r.header("content-type")}))
"#;
    let out = python_output(python, &["-c", script], &env, dir.path()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&got["status"], &got["agent"], &got["ok"]),
        (
            &serde_json::json!(200),
            &serde_json::json!("p1"),
            &serde_json::json!(true)
        ),
        "{got}"
    );
    assert!(
        got["text"]
            .as_str()
            .unwrap()
            .contains("cookie=[sid=s3cret]"),
        "{got}"
    );
    assert_eq!(got["type"], "text/html; charset=utf-8");

    std::fs::write(dir.path().join("spider.py"), FETCH_SPIDER).unwrap();
    let out = python_output(
        python,
        &["-m", "scrapy", "runspider", "spider.py"],
        &env,
        dir.path(),
    )
    .await;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    assert!(log.contains("'silk/fetched'"), "{log}");
    let items = w.admin.all_items(run.as_str()).await.unwrap();
    let by_url: BTreeMap<String, serde_json::Value> = items
        .iter()
        .map(|i| (i["url"].as_str().unwrap().to_owned(), i.clone()))
        .collect();
    let me = &by_url[&format!("{site}/me")];
    assert!(
        me["body"].as_str().unwrap().contains("cookie=[sid=s3cret]"),
        "{me}"
    );
    assert_eq!(me["flags"], serde_json::json!(["silk"]), "{me}");
    assert_eq!(
        by_url[&format!("{site}/page")]["title"],
        "Page",
        "{by_url:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_programs_items_stop_at_max_items_and_its_workers_are_stopped() {
    let w = world().await;
    let marks = tempfile::tempdir().unwrap();
    let mut request = program(
        &["sh", "push.sh"],
        2,
        &[("MARKS", marks.path().display().to_string())],
    );
    request.spider = "name: shop\nstart_urls: []\nmax_items: 25\n".into();
    let run = w.admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();
    let done = until_state(&w.admin, &id, |v| v.state.is_terminal()).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    assert_eq!(done.stats.items, 25, "{:?}", done.stats);
    assert_eq!(w.admin.all_items(&id).await.unwrap().len(), 25);
    within("the hub's log line", 10, async {
        while !log_text(&w.admin, &id)
            .await
            .contains("max_items reached (25): stopping the workers")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // The push that crossed the limit (25 is odd, pushes are pairs) was told so, once — unless
    // the hub's stop of the workers, which races that answer, killed its `curl` first. A
    // killed worker may also leave its last answer cut off (its file is read as a stream of
    // JSON values: a cut-off one ends it), so the answers recorded add up to at most 25.
    // Items: exactly 25, above.
    let mut answers = Vec::new();
    for wk in 0..2 {
        let text =
            std::fs::read_to_string(marks.path().join(format!("answers-{wk}"))).unwrap_or_default();
        answers.extend(
            serde_json::Deserializer::from_str(&text)
                .into_iter::<serde_json::Value>()
                .map_while(Result::ok),
        );
    }
    let added: u64 = answers.iter().filter_map(|a| a["added"].as_u64()).sum();
    let told = answers.iter().filter(|a| a["over_limit"] == 1).count();
    assert!(added <= 25 && told <= 1, "{answers:?}");
    assert!(added >= 20, "most pushes are answered: {answers:?}");
    // Both workers are over (stopped by the hub, not by themselves).
    let program = done.program.unwrap();
    assert!(
        program.workers.iter().all(|wk| wk.state.is_final()),
        "{program:?}"
    );
}
