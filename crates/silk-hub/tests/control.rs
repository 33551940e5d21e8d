//! The control plane over real HTTP on loopback, with real agents on the in-process bus and
//! the demo site: jobs, triggers, logs, the event stream, items, restart, tokens, metrics,
//! OpenAPI; item sinks (SQL table, webhook); and the scheduler on an injected clock (cron
//! fires, misfires coalesced, time zones, overlap policies, retries).

mod common;

use common::*;
use serde_json::{Value, json};
use silk_api::ErrorCode;
use silk_api::client::Client;
use silk_api::jobs::{JobSpec, TriggerRequest};
use silk_api::logs::{EventParams, LogParams, LogSearchParams};
use silk_api::runs::{ItemsParams, RestartRequest, RunState, RunView, RunsParams};
use silk_api::tokens::TokenRequest;
use silk_core::{Clock, ManualClock, SystemClock};
use silk_hub::{Hub, HubHandle};
use silk_testkit::demo::DemoSite;
use std::collections::BTreeSet;
use std::sync::Arc;
use tempfile::TempDir;

/// A spider of the demo site whose start URL and hosts are job args.
const SPIDER: &str = "name: shop\nstart_urls: ['${args.start_url}']\nallowed_domains: [${args.hosts}]\n\
    follow: [{deny: ['/calendar/']}]\nitem_when: '/p/\\d+$'\nextract: {title: {css: 'h1.title'}}\n\
    per_host_concurrency: 8\nper_host_delay_ms: 0\n";

fn site_args(site: &DemoSite) -> Value {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    json!({"start_url": site.start_url(), "hosts": hosts.join(", ")})
}

/// The hub's API over HTTP, through the typed client of `silk-api`; `get`/`post` give the
/// status and the JSON body (an error answer as `{"code", "message"}`) for tests that look at
/// the wire. `http` and `token` are for what is not the JSON API (metrics, health) and for
/// bodies no client would send.
struct Api {
    base: String,
    client: Client,
    http: reqwest::Client,
    token: Option<String>,
}

impl Api {
    async fn serve(hub: &HubHandle) -> Api {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = hub.router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        let token = hub.ensure_admin_token().await.unwrap();
        Api::new(base, token)
    }

    fn new(base: String, token: Option<String>) -> Api {
        Api {
            client: Client::new(reqwest::Url::parse(&base).unwrap(), token.clone()).unwrap(),
            base,
            http: reqwest::Client::new(),
            token,
        }
    }

    fn with_token(&self, token: Option<String>) -> Api {
        Api::new(self.base.clone(), token)
    }

    /// A route that answers text (health, metrics): the status and the text.
    async fn text(&self, path: &str) -> (u16, String) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request");
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        match self.client.request(method, path, body.as_ref()).await {
            Ok(answer) => (answer.status, answer.value),
            Err(e) => match (e.status(), e.body()) {
                (Some(status), Some(body)) => (status, body),
                _ => panic!("no API answer from {path}: {e}"),
            },
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Reads the run's event stream to its end; the (event, data) pairs.
    async fn events(&self, run: &str) -> Vec<(String, Value)> {
        let params = EventParams {
            logs: Some(true),
            ..EventParams::default()
        };
        let resp = self.client.events(run, &params).await.expect("events");
        assert_eq!(resp.status().as_u16(), 200);
        let text = within("the event stream to end", 60, resp.text())
            .await
            .unwrap();
        let mut out = Vec::new();
        for block in text.split("\n\n") {
            let mut event = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event:") {
                    event = e.trim().to_owned();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            if !event.is_empty() {
                let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
                out.push((event, value));
            }
        }
        out
    }
}

/// A hub with one live agent (`a1`), its API over HTTP on loopback, and a demo site of
/// `pages` pages: the fixture of the control-plane tests below. Keep it whole while the test
/// runs (borrow its fields): a field moved out and dropped deletes the data dir or stops the
/// agent.
struct Served {
    _dir: TempDir,
    _agent: silk_agent::AgentHandle,
    site: DemoSite,
    hub: HubHandle,
    api: Api,
}

async fn served(pages: u32) -> Served {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(pages, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let api = Api::serve(&hub).await;
    Served {
        _dir: dir,
        _agent: agent,
        site,
        hub,
        api,
    }
}

/// An admin stops an agent over the API: the agent process ends and the hub sees it dead;
/// another token may not, and an unknown agent is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_stops_an_agent() {
    let served = served(1).await;
    let (hub, api) = (&served.hub, &served.api);
    let member = member(&api.client, &api.base).await;
    let refused = member.shutdown_agent("a1").await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(silk_api::ErrorCode::Forbidden),
        "{refused}"
    );
    let unknown = api.client.shutdown_agent("nobody").await.unwrap_err();
    assert_eq!(
        unknown.code(),
        Some(silk_api::ErrorCode::NotFound),
        "{unknown}"
    );
    let view = api.client.shutdown_agent("a1").await.unwrap();
    assert_eq!(view.id.as_str(), "a1");
    within("the agent stopped", 30, served._agent.stopped()).await;
    until("the agent dead on the hub", async || {
        hub.agents()
            .iter()
            .any(|a| a.id.as_str() == "a1" && !a.state.is_live())
            .then_some(())
    })
    .await;
}

/// Creates the job `shop` of the demo site; its id.
async fn create_shop_job(api: &Api, site: &DemoSite) -> String {
    let spec: JobSpec = serde_json::from_value(
        json!({"name": "shop", "spider": SPIDER, "args": site_args(site), "remarks": "daily"}),
    )
    .unwrap();
    api.client.create_job(&spec).await.unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_are_created_checked_read_patched_and_deleted_keeping_their_runs() {
    let served = served(10).await;
    let (site, hub, api) = (&served.site, &served.hub, &served.api);
    // Jobs: create, conflicts and bad input named, read by id and name, patch.
    let job_id = create_shop_job(api, site).await;
    let spec =
        json!({"name": "shop", "spider": SPIDER, "args": site_args(site), "remarks": "daily"});
    let job = api.client.job(&job_id).await.unwrap();
    assert_eq!(job.spider_name, "shop");
    assert!(job.spec.enabled);
    let dup = api
        .client
        .create_job(&serde_json::from_value(spec.clone()).unwrap())
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Some(ErrorCode::Conflict), "{dup}");
    assert_eq!(dup.status(), Some(409), "{dup}");
    let (status, bad) = api
        .post(
            "/api/v1/jobs",
            json!({"name": "x", "spider": SPIDER, "args": site_args(site), "cron": "61 * * * *"}),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    assert!(
        bad["message"].as_str().unwrap().contains("61 * * * *"),
        "{bad}"
    );
    let (status, bad) = api
        .post("/api/v1/jobs", json!({"name": "y", "spider": SPIDER}))
        .await;
    assert_eq!(status, 400);
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("${args.start_url}"),
        "{bad}"
    );
    let (status, bad) = api
        .post(
            "/api/v1/jobs",
            json!({"name": "z", "spider": SPIDER, "colour": 1}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(bad["message"].as_str().unwrap().contains("colour"), "{bad}");
    let by_name = api.client.job("shop").await.unwrap();
    assert_eq!(by_name.id, job_id);
    let patched = api
        .client
        .patch_job(&job_id, &json!({"remarks": "hourly", "cron": "0 * * * *"}))
        .await
        .unwrap();
    assert_eq!(patched.spec.remarks, "hourly");
    assert!(patched.next_fire_ms.is_some());
    assert_eq!(api.client.jobs().await.unwrap().len(), 1);

    let run = api
        .client
        .trigger_job(&job_id, &TriggerRequest::default())
        .await
        .unwrap();
    let run_id = run.id.to_string();
    within(
        "the run",
        30,
        hub.wait_run(&silk_core::RunId::new(run_id.clone())),
    )
    .await
    .unwrap();

    // Delete the job; its runs stay.
    api.client.delete_job(&job_id).await.unwrap();
    let gone = api.client.job(&job_id).await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::NotFound), "{gone}");
    assert_eq!(api.client.run(&run_id).await.unwrap().id, run.id);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_triggered_run_streams_its_events_and_pages_its_logs_and_items_then_restarts() {
    let served = served(30).await;
    let (site, hub, api) = (&served.site, &served.hub, &served.api);
    let job_id = create_shop_job(api, site).await;

    // Trigger: a run of the job; its event stream ends with it and carries logs.
    let run = api
        .client
        .trigger_job(&job_id, &TriggerRequest::default())
        .await
        .unwrap();
    let run_id = run.id.to_string();
    assert_eq!(run.job_id.as_deref(), Some(job_id.as_str()));
    assert_eq!(run.job_name.as_deref(), Some("shop"));
    let events = api.events(&run_id).await;
    let last_run = events
        .iter()
        .rev()
        .find(|(e, _)| e == "run")
        .expect("a run event");
    let last_view: RunView = serde_json::from_value(last_run.1.clone()).unwrap();
    assert_eq!(last_view.state, RunState::Succeeded, "{:?}", last_run.1);
    assert_eq!(events.last().unwrap().0, "end");
    let logged: Vec<&str> = events
        .iter()
        .filter(|(e, _)| e == "log")
        .filter_map(|(_, l)| l["message"].as_str())
        .collect();
    assert!(
        logged.iter().any(|m| m.contains("run started")),
        "{logged:?}"
    );
    assert!(
        logged.iter().any(|m| m.contains("run succeeded")),
        "{logged:?}"
    );

    let done = api.client.run(&run_id).await.unwrap();
    let stats = &done.stats;
    assert_eq!(stats.left, 0);
    assert_eq!(stats.in_flight, 0);
    assert!(stats.success > 30);
    assert_eq!(stats.total, stats.success + stats.failed + stats.dropped);

    // Logs: filters by level and text, both orders, paging.
    let logs = |params: LogParams| {
        let (client, run_id) = (&api.client, &run_id);
        async move { client.logs(run_id, &params).await }
    };
    let page = logs(LogParams {
        level: Some("info".into()),
        q: Some("STARTED".into()),
        ..LogParams::default()
    })
    .await
    .unwrap();
    assert!(
        !page.lines.is_empty()
            && page
                .lines
                .iter()
                .all(|l| l.message.to_lowercase().contains("started")),
        "{page:?}"
    );
    let errors = logs(LogParams {
        level: Some("error".into()),
        ..LogParams::default()
    })
    .await
    .unwrap();
    assert_eq!(errors.lines.len(), 0, "{errors:?}");
    let first = logs(LogParams {
        limit: Some(1),
        ..LogParams::default()
    })
    .await
    .unwrap();
    let next = logs(LogParams {
        limit: Some(1),
        after: first.next,
        ..LogParams::default()
    })
    .await
    .unwrap();
    assert!(next.lines[0].id > first.lines[0].id);
    let newest = logs(LogParams {
        order: Some("desc".into()),
        limit: Some(5),
        level: Some("info".into()),
        ..LogParams::default()
    })
    .await
    .unwrap();
    let ids: Vec<i64> = newest.lines.iter().map(|l| l.id).collect();
    assert!(
        ids.len() == 5 && ids.windows(2).all(|w| w[0] > w[1]),
        "{newest:?}"
    );
    let bad = logs(LogParams {
        level: Some("loud".into()),
        ..LogParams::default()
    })
    .await
    .unwrap_err();
    assert_eq!(bad.status(), Some(400), "{bad}");

    // Across runs (`GET /api/v1/logs`): the job's runs' lines by its name, newest first; an
    // unknown job is not found.
    let search = |params: LogSearchParams| {
        let client = &api.client;
        async move { client.search_logs(&params).await }
    };
    let found = search(LogSearchParams {
        job: Some("shop".into()),
        q: Some("RUN SUCCEEDED".into()),
        ..LogSearchParams::default()
    })
    .await
    .unwrap();
    assert!(
        !found.lines.is_empty()
            && found
                .lines
                .iter()
                .all(|l| l.run_id == run_id && l.message.contains("run succeeded")),
        "{found:?}"
    );
    let newest = search(LogSearchParams {
        limit: Some(3),
        ..LogSearchParams::default()
    })
    .await
    .unwrap();
    let ids: Vec<i64> = newest.lines.iter().map(|l| l.id).collect();
    assert!(
        ids.len() == 3 && ids.windows(2).all(|w| w[0] > w[1]),
        "{ids:?}"
    );
    let older = search(LogSearchParams {
        limit: Some(3),
        before: newest.next,
        ..LogSearchParams::default()
    })
    .await
    .unwrap();
    assert!(older.lines.iter().all(|l| l.id < ids[2]), "{older:?}");
    // A bound past what the store keeps is no bound (not a server error).
    let far = search(LogSearchParams {
        until_ms: Some(u64::MAX),
        limit: Some(3),
        ..LogSearchParams::default()
    })
    .await
    .unwrap();
    // (An agent's last lines may still arrive: the newest can only be newer.)
    assert!(far.lines.len() == 3 && far.lines[0].id >= ids[0], "{far:?}");
    let unknown = search(LogSearchParams {
        job: Some("no-such-job".into()),
        ..LogSearchParams::default()
    })
    .await
    .unwrap_err();
    assert_eq!(unknown.status(), Some(404), "{unknown}");

    // Items: paged through, every item once, as many as the run counted.
    let mut params = ItemsParams {
        cursor: Some(0),
        limit: Some(7),
    };
    let mut urls = BTreeSet::new();
    loop {
        let page = api.client.items(&run_id, &params).await.unwrap();
        for item in &page.items {
            assert!(
                urls.insert(item["url"].as_str().unwrap().to_owned()),
                "duplicate item"
            );
        }
        params.cursor = Some(page.next_cursor);
        if page.done {
            break;
        }
    }
    assert_eq!(urls.len() as u64, stats.items);
    assert_eq!(
        api.client.all_items(&run_id).await.unwrap().len(),
        urls.len()
    );

    // The job remembers its last run.
    until("the job's last run", async || {
        let j = api.client.job(&job_id).await.unwrap();
        (j.last_run.map(|r| r.state) == Some(RunState::Succeeded)).then_some(())
    })
    .await;
    assert_eq!(api.client.job_runs(&job_id, None).await.unwrap().len(), 1);

    // Restart keeping the frontier: nothing is fetched again.
    let again = api
        .client
        .restart_run(
            &run_id,
            &RestartRequest {
                keep_frontier: true,
            },
        )
        .await
        .unwrap();
    assert_eq!(again.restart_of.as_ref(), Some(&run.id));
    let again_id = again.id.to_string();
    let after = within(
        "the restarted run",
        30,
        hub.wait_run(&silk_core::RunId::new(again_id.clone())),
    )
    .await
    .unwrap();
    assert_eq!(after.state, RunState::Succeeded, "{:?}", after.reason);
    assert_eq!(after.stats.sent, 0, "what was fetched is not fetched again");
    assert_eq!(after.stats.success, stats.success);
    let listed = api
        .client
        .runs(&RunsParams {
            job: Some(job_id.clone()),
            state: Some("succeeded".into()),
            limit: None,
        })
        .await
        .unwrap();
    let listed: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        listed,
        vec![again_id.as_str(), run_id.as_str()],
        "newest first"
    );

    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_readiness_metrics_and_openapi_are_public_and_the_rest_is_not() {
    let served = served(10).await;
    let (hub, api) = (&served.hub, &served.api);
    // Health, readiness, metrics, OpenAPI (public).
    let public = api.with_token(None);
    assert_eq!(public.text("/healthz").await.0, 200);
    assert_eq!(public.text("/readyz").await.0, 200);
    let (_, metrics) = public.text("/metrics").await;
    assert!(
        metrics.contains("silk_agents{state=\"alive\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE silk_run_success gauge"),
        "{metrics}"
    );
    let (status, doc) = public.get("/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    for path in [
        "/api/v1/jobs",
        "/api/v1/jobs/{id}/runs",
        "/api/v1/runs/{id}/restart",
        "/api/v1/runs/{id}/events",
        "/api/v1/runs/{id}/items",
        "/api/v1/tokens",
    ] {
        assert!(
            doc["paths"].get(path).is_some(),
            "{path} missing from the OpenAPI document"
        );
    }
    assert!(doc["components"]["schemas"].get("RunView").is_some());
    assert_eq!(public.get("/api/v1/jobs").await.0, 401);

    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_makes_tokens_that_cannot_manage_tokens_and_deletes_them() {
    let served = served(10).await;
    let (hub, api) = (&served.hub, &served.api);
    // Tokens: an admin makes one; it works but cannot manage tokens; deleted, it is refused.
    let made = api
        .client
        .create_token(&TokenRequest {
            name: "ci".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let ci = api.with_token(Some(made.token.clone()));
    assert!(ci.client.jobs().await.is_ok());
    let refused = ci.client.tokens().await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden), "{refused}");
    let (_, tokens) = api.get("/api/v1/tokens").await;
    assert_eq!(api.client.tokens().await.unwrap().len(), 2);
    assert!(
        !tokens.to_string().contains(&made.token),
        "no secrets listed"
    );
    api.client.delete_token(&made.id).await.unwrap();
    let refused = ci.client.jobs().await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Unauthorized), "{refused}");

    hub.shutdown().await;
}

/// Nothing a non-admin token sends runs a command: a raw proxy provider or redial command
/// in an ad-hoc run, a new job or a job patch is refused with `403` naming the field, and
/// nothing runs; a command the agent's admin defined may be named by any token; an admin's
/// raw command still runs (on an agent that allows raw commands, as `silk up`'s do).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raw_commands_need_an_admin_token() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let hub = start_hub(dir.path(), &bus).await;
    let named = dir.path().join("named-ran");
    let config = silk_agent::AgentConfig {
        commands: [(
            "one-proxy".to_owned(),
            silk_agent::CommandDef {
                shell: Some(format!(
                    "touch '{}'; echo http://127.0.0.1:9",
                    named.display()
                )),
                ..Default::default()
            },
        )]
        .into(),
        allow_raw_commands: true,
        ..agent_config(dir.path(), "a1")
    };
    let _a = start_agent_with(config, &bus).await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let admin = Api::serve(&hub).await;
    let (status, made) = admin.post("/api/v1/tokens", json!({"name": "team"})).await;
    assert_eq!(status, 201, "{made}");
    let member = admin.with_token(made["token"].as_str().map(str::to_owned));

    let pwned = dir.path().join("pwned");
    let spider = "name: x\nstart_urls: ['http://127.0.0.1:9/']\nmax_retries: 0\n";
    let raw_provider = json!({"proxies": {"provider":
        format!("touch '{}'; echo http://127.0.0.1:9", pwned.display())}});
    let refused = |(status, body): (u16, Value), field: &str| {
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{body}"
        );
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(field), "{field} not named in {message}");
        assert!(
            !message.contains("touch"),
            "the command is echoed back: {message}"
        );
    };
    // The issue's reproduction, as an ad-hoc run.
    refused(
        member
            .post(
                "/api/v1/runs",
                json!({"spider": spider, "downloader": raw_provider}),
            )
            .await,
        "downloader.proxies.provider",
    );
    // A job with a raw redial (a program and its arguments: no shell, still raw).
    refused(
        member
            .post(
                "/api/v1/jobs",
                json!({"name": "j", "spider": spider,
                    "downloader": {"redial": {"command": ["touch", pwned.display().to_string()]}}}),
            )
            .await,
        "downloader.redial.command",
    );
    assert_eq!(member.get("/api/v1/jobs/j").await.0, 404, "no job was made");
    // A job without commands, then a patch that adds one.
    let (status, job) = member
        .post("/api/v1/jobs", json!({"name": "j", "spider": spider}))
        .await;
    assert_eq!(status, 201, "{job}");
    refused(
        member
            .call(
                reqwest::Method::PATCH,
                "/api/v1/jobs/j",
                Some(json!({"downloader": raw_provider})),
            )
            .await,
        "downloader.proxies.provider",
    );
    let (_, job) = member.get("/api/v1/jobs/j").await;
    assert!(job.get("downloader").is_none_or(Value::is_null), "{job}");
    assert!(!pwned.exists(), "a refused command ran");

    // A named command: any token may use it; the agent runs its own definition.
    let (status, view) = member
        .post(
            "/api/v1/runs",
            json!({"spider": spider, "downloader": {"proxies": {"provider": {"command": "one-proxy"}}}}),
        )
        .await;
    assert_eq!(status, 201, "{view}");
    assert!(
        named.exists(),
        "the named provider ran before the allocation was confirmed"
    );

    // The admin's raw command runs.
    let (status, view) = admin
        .post(
            "/api/v1/runs",
            json!({"spider": spider, "downloader": raw_provider}),
        )
        .await;
    assert_eq!(status, 201, "{view}");
    assert!(pwned.exists(), "the admin's raw provider ran");
    hub.shutdown().await;
}

/// Honest outcomes: a run whose every request failed ends `failed`, and the reason names the
/// threshold and the figures; `fail_if` changes the thresholds (here: off, then a minimum
/// of items), and a bad one is refused naming its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_fails_when_its_health_says_so() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let api = Api::serve(&hub).await;
    // Two unreachable start URLs (nothing listens on port 9), no retries.
    let unreachable = "name: down\nstart_urls: ['http://127.0.0.1:9/a', 'http://127.0.0.1:9/b']\n\
        max_retries: 0\nper_host_delay_ms: 0\n";
    let (api, hub) = (&api, &hub);
    let run = |body: Value| async move {
        let (status, view) = api.post("/api/v1/runs", body).await;
        assert_eq!(status, 201, "{view}");
        let id = view["id"].as_str().unwrap().to_owned();
        within(
            "the run to end",
            30,
            hub.wait_run(&silk_core::RunId::new(&id)),
        )
        .await
        .unwrap()
    };
    let done = run(json!({"spider": unreachable})).await;
    assert_eq!(done.state, RunState::Failed, "{:?}", done.reason);
    assert_eq!(
        done.reason.as_deref(),
        Some("fail_if.all_failed: every request failed (2 of 2)")
    );
    assert_eq!((done.stats.failed, done.stats.success), (2, 0));
    let view = api.client.run(done.id.as_str()).await.unwrap();
    assert!(view.fail_if.all_failed, "{view:?}");

    let done = run(json!({"spider": unreachable, "fail_if": {"all_failed": false}})).await;
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);

    // A healthy site, but fewer items than asked for.
    let site = site(5, 0).await;
    let spider = format!(
        "name: few\nstart_urls: ['{}']\nallowed_domains: [{}]\nmax_pages: 3\nper_host_delay_ms: 0\n\
         item_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\n",
        site.start_url(),
        site.host_ips()[0]
    );
    let done = run(json!({"spider": spider, "fail_if": {"min_items": 1000}})).await;
    assert_eq!(done.state, RunState::Failed, "{:?}", done.reason);
    let reason = done.reason.unwrap();
    assert!(
        reason.starts_with("fail_if.min_items: ") && reason.ends_with(" items, fewer than 1000"),
        "{reason}"
    );

    // max_items: the run ends once that many items are written, and none past it is.
    let spider = format!(
        "name: capped\nstart_urls: ['{}']\nallowed_domains: [{}]\nmax_items: 2\nper_host_delay_ms: 0\n\
         per_host_concurrency: 4\nitem_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\n",
        site.start_url(),
        site.host_ips()[0]
    );
    let done = run(json!({"spider": spider})).await;
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_eq!(done.stats.items, 2, "{:?}", done.stats);
    assert_eq!(
        api.client.all_items(done.id.as_str()).await.unwrap().len(),
        2
    );

    let (status, bad) = api
        .post(
            "/api/v1/runs",
            json!({"spider": unreachable, "fail_if": {"failed_ratio": 2}}),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("fail_if.failed_ratio"),
        "{bad}"
    );
    let (status, bad) = api
        .post(
            "/api/v1/runs",
            json!({"spider": unreachable, "fail_if": {"min_itemz": 2}}),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    assert!(
        bad["message"].as_str().unwrap().contains("min_itemz"),
        "{bad}"
    );
    hub.shutdown().await;
}

/// Browser-side safety: the API sends no CORS headers (a page elsewhere cannot read it), and
/// without tokens (`--no-auth`) a state-changing request from another site's page (its
/// `Origin`, or `Sec-Fetch-Site: cross-site`) is refused; the hub's own pages, reads and
/// non-browser clients still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_tokens_other_sites_cannot_change_anything() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let hub = start_hub(dir.path(), &bus).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let router = hub.router_with(silk_hub::ApiOptions { auth: false });
    tokio::spawn(async move { axum::serve(listener, router).await });
    let http = reqwest::Client::new();
    let job = json!({"name": "j", "spider": "name: j\nstart_urls: ['http://127.0.0.1:9/']\n"});
    let post = |origin: Option<&str>, site: Option<&str>| {
        let mut req = http
            .post(format!("http://{host}/api/v1/jobs"))
            .header("content-type", "text/plain")
            .body(job.to_string());
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(s) = site {
            req = req.header("sec-fetch-site", s);
        }
        req.send()
    };
    for (origin, site) in [
        (Some("http://evil.example"), None),
        (Some("http://127.0.0.1:1"), None),
        (Some("null"), None),
        (None, Some("cross-site")),
    ] {
        let resp = post(origin, site).await.unwrap();
        assert_eq!(resp.status(), 403, "{origin:?} {site:?}");
        assert!(resp.headers().get("access-control-allow-origin").is_none());
        let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("cross-site request refused"),
            "{body}"
        );
    }
    assert!(
        hub.jobs().await.unwrap().is_empty(),
        "a refused request made a job"
    );
    // A read from anywhere is answered (without CORS headers, a browser keeps it from the page).
    let resp = http
        .get(format!("http://{host}/api/v1/jobs"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("access-control-allow-origin").is_none());
    // The hub's own page, and a client that is not a browser.
    let own = format!("http://{host}");
    assert_eq!(
        post(Some(&own), Some("same-origin"))
            .await
            .unwrap()
            .status(),
        201
    );
    let resp = http
        .delete(format!("http://{host}/api/v1/jobs/j"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    hub.shutdown().await;
}

/// Bad input never hurts: an oversized body is `413 too_large`, a deeply nested, malformed
/// or mistyped one `400` naming what is wrong, a YAML alias bomb in a spider `400`, a bad id
/// `404`; every answer is JSON, and the hub goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_bodies_get_clear_4xx_answers_and_the_hub_stays_up() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let hub = start_hub(dir.path(), &bus).await;
    let api = Api::serve(&hub).await;
    let raw = |method: reqwest::Method, path: &str, body: Vec<u8>| {
        let mut req = api
            .http
            .request(method, format!("{}{path}", api.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = &api.token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.expect("request");
            let status = resp.status().as_u16();
            let body: Value =
                serde_json::from_slice(&resp.bytes().await.unwrap()).expect("every answer is JSON");
            (status, body)
        }
    };
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(3 << 20)).into_bytes();
    let (status, body) = raw(reqwest::Method::POST, "/api/v1/jobs", huge).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("too_large")),
        "{body}"
    );
    // The unread rest of the body ends the connection, and the answer says so: a client
    // must not send its next request on it.
    let mut req = api
        .http
        .post(format!("{}/api/v1/jobs", api.base))
        .body(vec![b' '; 3 << 20]);
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    assert_eq!(resp.status().as_u16(), 413);
    assert_eq!(
        resp.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    let deep = format!(
        "{{\"spider\": \"x\", \"downloader\": {{\"a\": {}{}}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    )
    .into_bytes();
    let (status, body) = raw(reqwest::Method::POST, "/api/v1/runs", deep).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("recursion limit"),
        "{body}"
    );
    let (status, body) = raw(
        reqwest::Method::POST,
        "/api/v1/jobs",
        b"{\"name\": ".to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = raw(
        reqwest::Method::POST,
        "/api/v1/jobs",
        br#"{"name": "j", "spider": 3}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("`spider`"),
        "{body}"
    );
    let bomb = "name: bomb\nstart_urls: ['http://127.0.0.1:9/']\n\
        a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
        c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
        e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
        g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n";
    let (status, body) = raw(
        reqwest::Method::POST,
        "/api/v1/runs",
        json!({"spider": bomb}).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    for path in [
        "/api/v1/runs/..%2F..%2Fetc",
        "/api/v1/runs/a%00b",
        "/api/v1/jobs/nope",
    ] {
        let (status, body) = raw(reqwest::Method::GET, path, Vec::new()).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    assert_eq!(api.get("/api/v1/jobs").await.0, 200, "the hub still serves");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_and_webhook_sinks_get_every_item_once() {
    sinks_get_every_item_once(None).await;
}

/// A run whose frontier is in Redis (`HubConfig::frontier_url`, the cluster mode) keeps its
/// items in the store before each ack: the SQL table has them without the SQL sink, the
/// webhook sink tails the table, and the items route reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_with_a_redis_frontier_keeps_its_items_in_the_store_for_its_sinks() {
    let Some(redis) = silk_testkit::service_url("SILK_TEST_REDIS") else {
        return;
    };
    sinks_get_every_item_once(Some(redis)).await;
}

/// A hub that does not allow loopback keeps webhook sinks off it: a literal address is
/// refused when the run starts (400, naming the field), a name that resolves to loopback at
/// each delivery (the run log says why); the receiver hears nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_sinks_do_not_reach_private_addresses_the_hub_does_not_allow() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(5, 0).await;
    let config = silk_hub::HubConfig {
        allow_networks: Vec::new(),
        ..hub_config(dir.path())
    };
    let hub = start_hub_with(config, &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { axum::http::StatusCode::OK }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let job = |name: &str, hook: String| {
        serde_json::from_value::<JobSpec>(json!({
            "name": name, "spider": SPIDER, "args": site_args(&site),
            "sinks": {"webhook": {"url": hook}}
        }))
        .unwrap()
    };
    let literal = hub
        .create_job(job("literal", format!("http://127.0.0.1:{port}/hook")))
        .await
        .unwrap();
    let refused = hub
        .trigger(&literal.id, Default::default())
        .await
        .unwrap_err();
    let said = refused.to_string();
    assert!(
        said.contains("sinks.webhook.url: 127.0.0.1 is a private address"),
        "{said}"
    );
    let named = hub
        .create_job(job("named", format!("http://localhost:{port}/hook")))
        .await
        .unwrap();
    let run = hub.trigger(&named.id, Default::default()).await.unwrap();
    let api = Api::serve(&hub).await;
    until("the refusal in the run log", async || {
        let page = api
            .client
            .logs(
                run.id.as_str(),
                &LogParams {
                    q: Some("POST refused".into()),
                    ..LogParams::default()
                },
            )
            .await
            .ok()?;
        page.lines
            .iter()
            .any(|l| {
                l.message
                    .contains("localhost resolves to a private address")
            })
            .then_some(())
    })
    .await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    hub.shutdown().await;
}

async fn sinks_get_every_item_once(frontier_url: Option<String>) {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(20, 0).await;
    let mut config = hub_config(dir.path());
    config.frontier_prefix = format!("hubtest-{}", std::process::id());
    config.frontier_url = frontier_url.clone();
    let hub = start_hub_with(config, &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    // A webhook receiver that fails its first call (the sink retries) and records keys.
    /// Calls seen, item keys delivered, header values received.
    type Received = (u32, Vec<String>, Vec<String>);
    let received: Arc<std::sync::Mutex<Received>> = Arc::default();
    let state = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::Json<Value>| {
                let state = state.clone();
                async move {
                    let mut s = state.lock().unwrap();
                    s.0 += 1;
                    if s.0 == 1 {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    s.2.push(
                        headers
                            .get("x-secret")
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default(),
                    );
                    for item in body["items"].as_array().unwrap() {
                        s.1.push(item["key"].as_str().unwrap().to_owned());
                    }
                    axum::http::StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let spec: silk_api::jobs::JobSpec = serde_json::from_value(json!({
        "name": "sinks", "spider": SPIDER, "args": site_args(&site),
        "sinks": {"sql": true, "webhook": {"url": hook, "batch": 5, "headers": {"x-secret": "s3cr3t"}}}
    }))
    .unwrap();
    let job = hub.create_job(spec).await.unwrap();
    let run = hub.trigger(&job.id, Default::default()).await.unwrap();
    assert_eq!(
        run.sinks.webhook.as_ref().unwrap().headers["x-secret"],
        "***",
        "secrets are not shown"
    );
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let items = done.stats.items;
    assert!(items > 0);
    until("the SQL sink", async || {
        (hub.store().count_items(run.id.as_str()).await.unwrap() == items).then_some(())
    })
    .await;
    let keys = until("the webhook sink", async || {
        let s = received.lock().unwrap();
        (s.1.len() as u64 >= items).then(|| (s.1.clone(), s.2.clone()))
    })
    .await;
    let unique: BTreeSet<&String> = keys.0.iter().collect();
    assert_eq!(unique.len() as u64, items, "every item delivered");
    assert_eq!(
        keys.0.len() as u64,
        items,
        "each once (the failed call delivered nothing)"
    );
    assert!(keys.1.iter().all(|h| h == "s3cr3t"), "headers sent");
    let expected = if frontier_url.is_some() {
        "redis"
    } else {
        "embedded"
    };
    assert_eq!(done.frontier, expected);
    let api = Api::serve(&hub).await;
    let (status, page) = api
        .get(&format!("/api/v1/runs/{}/items?limit=1000", run.id))
        .await;
    assert_eq!(status, 200, "{page}");
    let urls: BTreeSet<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls.len() as u64,
        items,
        "the items route has every item once"
    );
    hub.shutdown().await;
}

/// 2026-01-05T00:00:00Z, a Monday.
const T0: u64 = 1_767_571_200_000;
const HOUR: u64 = 3_600_000;

/// A hub whose schedule runs on a manual clock at `T0 + 1 s`, one live agent, a small site.
async fn scheduled() -> (
    TempDir,
    DemoSite,
    ManualClock,
    HubHandle,
    silk_agent::AgentHandle,
) {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(5, 0).await;
    let clock = ManualClock::new(T0 + 1_000);
    let mut config = hub_config(dir.path());
    config.schedule_tick_ms = 20;
    let hub = Hub::start_with_schedule_clock(
        config,
        Arc::new(bus.clone()),
        Arc::new(SystemClock),
        Arc::new(clock.clone()),
    )
    .await
    .expect("hub starts");
    let agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    (dir, site, clock, hub, agent)
}

async fn runs_of(hub: &HubHandle, job: &str) -> Vec<silk_api::runs::RunView> {
    hub.job_runs(job, None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_schedule_fires_on_its_clock_coalesces_misfires_and_keeps_time_zones() {
    let (_dir, site, clock, hub, _agent) = scheduled().await;
    let job = |name: &str, cron: &str, tz: &str| -> silk_api::jobs::JobSpec {
        serde_json::from_value(json!({"name": name, "spider": SPIDER, "args": site_args(&site), "cron": cron, "timezone": tz})).unwrap()
    };
    let hourly = hub
        .create_job(job("hourly", "0 * * * *", "UTC"))
        .await
        .unwrap();
    assert_eq!(hourly.next_fire_ms, Some(T0 + HOUR));
    // 02:30 in Shanghai (UTC+8) is 18:30 UTC the day before.
    let tz = hub
        .create_job(job("shanghai", "30 2 * * *", "Asia/Shanghai"))
        .await
        .unwrap();
    assert_eq!(tz.next_fire_ms, Some(T0 + 18 * HOUR + 30 * 60_000));

    // Not yet: a minute before the hour nothing fires.
    clock.set(T0 + HOUR - 60_000);
    hub.wait_schedule_ticks(2).await;
    assert!(runs_of(&hub, "hourly").await.is_empty());
    // The hour: one run.
    clock.set(T0 + HOUR + 1_000);
    hub.wait_schedule_ticks(2).await;
    let runs = runs_of(&hub, "hourly").await;
    assert_eq!(runs.len(), 1);
    within("the run", 30, hub.wait_run(&runs[0].id))
        .await
        .unwrap();
    // Three hours "down": the missed fires run once, not three times.
    clock.set(T0 + 4 * HOUR + 1_000);
    hub.wait_schedule_ticks(3).await;
    assert_eq!(runs_of(&hub, "hourly").await.len(), 2);
    let j = hub.job("hourly").await.unwrap();
    assert_eq!(j.last_fire_ms, Some(T0 + 4 * HOUR));
    assert_eq!(j.next_fire_ms, Some(T0 + 5 * HOUR));
    assert!(runs_of(&hub, "shanghai").await.is_empty());
    // The Shanghai job at its local time.
    clock.set(T0 + 18 * HOUR + 30 * 60_000 + 1);
    hub.wait_schedule_ticks(2).await;
    assert_eq!(runs_of(&hub, "shanghai").await.len(), 1);
    // Disabled: no fire; re-enabled: no catching up.
    hub.update_job("hourly", &json!({"enabled": false}))
        .await
        .unwrap();
    clock.set(T0 + 30 * HOUR);
    hub.wait_schedule_ticks(2).await;
    let before = runs_of(&hub, "hourly").await.len();
    let j = hub
        .update_job("hourly", &json!({"enabled": true}))
        .await
        .unwrap();
    assert_eq!(j.next_fire_ms, Some(T0 + 31 * HOUR));
    hub.wait_schedule_ticks(2).await;
    assert_eq!(runs_of(&hub, "hourly").await.len(), before);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_policies_and_retries_follow_the_job() {
    let (_dir, site, clock, hub, _agent) = scheduled().await;
    let spec: silk_api::jobs::JobSpec = serde_json::from_value(
        json!({"name": "o", "spider": SPIDER, "args": site_args(&site), "cron": "0 * * * *", "overlap": "skip"}),
    )
    .unwrap();
    hub.create_job(spec).await.unwrap();
    // An active run: triggered and paused.
    let first = hub.trigger("o", Default::default()).await.unwrap();
    hub.pause(&first.id).await.unwrap();
    // skip: the fire starts nothing.
    clock.set(T0 + HOUR + 1_000);
    hub.wait_schedule_ticks(2).await;
    assert_eq!(runs_of(&hub, "o").await.len(), 1);
    // queue: the fire waits for the active run, then starts.
    hub.update_job("o", &json!({"overlap": "queue"}))
        .await
        .unwrap();
    let from = clock.now_ms();
    clock.set(from + HOUR);
    hub.wait_schedule_ticks(2).await;
    assert_eq!(runs_of(&hub, "o").await.len(), 1);
    assert_eq!(hub.job("o").await.unwrap().queued, 1);
    hub.cancel(&first.id).await.unwrap();
    let queued = until("the queued run", async || {
        let runs = runs_of(&hub, "o").await;
        (runs.len() == 2).then(|| runs[0].clone())
    })
    .await;
    until("the queue to empty", async || {
        (hub.job("o").await.unwrap().queued == 0).then_some(())
    })
    .await;
    within("the queued run", 30, hub.wait_run(&queued.id))
        .await
        .unwrap();
    // replace: the active run is cancelled and a new one starts.
    hub.update_job("o", &json!({"overlap": "replace"}))
        .await
        .unwrap();
    let third = hub.trigger("o", Default::default()).await.unwrap();
    hub.pause(&third.id).await.unwrap();
    let from = clock.now_ms();
    clock.set(from + HOUR);
    let replaced = until("the replacing run", async || {
        let runs = runs_of(&hub, "o").await;
        (runs.len() == 4).then(|| runs[0].clone())
    })
    .await;
    assert_eq!(hub.run(&third.id).await.unwrap().state, RunState::Cancelled);
    within("the replacing run", 30, hub.wait_run(&replaced.id))
        .await
        .unwrap();

    // Retries: a run that cannot be allocated fails; the job retries it once after the delay.
    let spec: silk_api::jobs::JobSpec = serde_json::from_value(json!({
        "name": "r", "spider": SPIDER, "args": site_args(&site), "strategy": "fixed:3",
        "retry": {"max_retries": 1, "delay_ms": 60000}
    }))
    .unwrap();
    hub.create_job(spec).await.unwrap();
    assert!(hub.trigger("r", Default::default()).await.is_err());
    let planned = until("the planned retry", async || {
        hub.job("r").await.unwrap().retry_pending
    })
    .await;
    assert_eq!(planned.attempt, 1);
    assert_eq!(planned.at_ms, clock.now_ms() + 60_000);
    hub.wait_schedule_ticks(2).await;
    assert_eq!(runs_of(&hub, "r").await.len(), 1, "not before its time");
    clock.set(planned.at_ms);
    let retried = until("the retry", async || {
        let runs = runs_of(&hub, "r").await;
        (runs.len() == 2).then(|| runs[0].clone())
    })
    .await;
    assert_eq!(retried.attempt, 1);
    assert_eq!(retried.state, RunState::Failed);
    hub.wait_schedule_ticks(3).await;
    let j = hub.job("r").await.unwrap();
    assert!(j.retry_pending.is_none(), "no retry left: {j:?}");
    clock.set(clock.now_ms() + 10 * 60_000);
    hub.wait_schedule_ticks(2).await;
    assert_eq!(runs_of(&hub, "r").await.len(), 2);
    hub.shutdown().await;
}

/// The hub on PostgreSQL (`store_url`): a job runs, its logs and run are stored, and a hub
/// restarted on the same store finds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_hub_runs_on_postgresql() {
    let Some(pg) = silk_store::testing::PgTestSchema::from_env() else {
        return;
    };
    pg.create().await.expect("test schema");
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(10, 0).await;
    let start = || async {
        let mut config = hub_config(dir.path());
        config.store_url = Some(pg.url.clone());
        Hub::start(config, Arc::new(bus.clone()), Arc::new(SystemClock))
            .await
            .expect("hub starts on postgres")
    };
    let hub = start().await;
    assert_eq!(hub.store().backend(), "postgres");
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let spec: silk_api::jobs::JobSpec =
        serde_json::from_value(json!({"name": "pg", "spider": SPIDER, "args": site_args(&site)}))
            .unwrap();
    hub.create_job(spec).await.unwrap();
    let run = hub.trigger("pg", Default::default()).await.unwrap();
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let lines = until("the run's last log line", async || {
        let mut q = silk_store::LogQuery::new(run.id.as_str());
        q.text = Some("run succeeded".into());
        let lines = hub.store().query_logs(&q).await.unwrap();
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    assert_eq!(lines[0].source, "hub");
    hub.shutdown().await;
    let again = start().await;
    let stored = again.run(&run.id).await.unwrap();
    assert_eq!(stored.state, RunState::Succeeded);
    assert_eq!(stored.stats.success, done.stats.success);
    assert_eq!(again.job("pg").await.unwrap().last_run.unwrap().id, run.id);
    again.shutdown().await;
    pg.drop_schema().await;
}

const DAY: u64 = 24 * HOUR;

/// The run once it has ended (stored or active, on this hub or not).
async fn run_end(hub: &HubHandle, id: &silk_core::RunId, what: &str) -> RunView {
    until(what, async || {
        let view = hub.run(id).await.ok()?;
        view.state.is_terminal().then_some(view)
    })
    .await
}

/// Seed 002's incremental crawl: a daily job whose runs share its frontier (`frontier: job`)
/// with `recrawl_segment: 1d`, over ten days of a manual clock. Each day's run fetches every
/// page once (what it fetched yesterday is fetched again today, nothing twice in a day); a
/// second run on the same day fetches nothing; two runs of the job at once share the work and
/// still fetch each page once; a run stopped with its hub in the middle of the day resumes
/// in that day's segment when the hub is back; and the frontier does not grow from day to day
/// (yesterday's seen set is pruned after `segment_retention`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daily_job_on_its_own_frontier_fetches_each_page_once_a_day() {
    ten_daily_runs(None).await;
}

/// The same with the job's frontier in Redis (the cluster mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daily_job_on_a_redis_job_frontier_fetches_each_page_once_a_day() {
    let Some(redis) = silk_testkit::service_url("SILK_TEST_REDIS") else {
        return;
    };
    ten_daily_runs(Some(redis)).await;
}

/// With the hub's Redis down, a job that never had a job frontier is still deleted; one with
/// `frontier: job` is not (its keys could not be deleted), and the error says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_job_while_redis_is_down_keeps_only_a_job_with_a_job_frontier() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let mut config = hub_config(dir.path());
    // Nothing listens there.
    config.frontier_url = Some(format!("redis://127.0.0.1:{}", silk_testkit::free_port()));
    let hub = start_hub_with(config, &bus).await;
    let spec = |name: &str, frontier: &str| -> JobSpec {
        serde_json::from_value(json!({
            "name": name, "spider": SPIDER, "frontier": frontier, "enabled": false,
            "args": {"start_url": "http://127.0.0.1:9/", "hosts": "127.0.0.1"},
        }))
        .unwrap()
    };
    hub.create_job(spec("per-run", "run")).await.unwrap();
    hub.create_job(spec("kept", "job")).await.unwrap();
    within("the delete", 30, hub.delete_job("per-run"))
        .await
        .expect("a job without a job frontier is deleted");
    let refused = within("the delete", 30, hub.delete_job("kept"))
        .await
        .expect_err("its frontier's keys cannot be deleted");
    assert!(
        refused.to_string().contains("the frontier of job"),
        "{refused}"
    );
    let names: Vec<String> = hub
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.spec.name)
        .collect();
    assert_eq!(names, ["kept"]);
    hub.shutdown().await;
}

/// What the job frontier stores between runs: its seen sets (how many, and the URLs in
/// them), its pending requests, and for Redis the memory of its keys. The embedded one is
/// opened as the hub opens it, once the hub has closed it after the run.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stored {
    seen_segments: u64,
    seen_urls: u64,
    pending: u64,
    redis_bytes: u64,
}

async fn job_frontier_stored(
    hub: &HubHandle,
    job_id: &str,
    redis: Option<&str>,
    clock: &ManualClock,
) -> Stored {
    match redis {
        None => {
            let dir = hub.data_dir().join("jobs").join(job_id).join("frontier");
            let config = silk_frontier::FrontierConfig {
                segment_ms: Some(DAY),
                segment_retention_ms: DAY,
                ..Default::default()
            };
            // The hub closes the frontier just after the run's end is stored.
            let frontier = until("the job frontier closed by the hub", async || {
                silk_frontier::EmbeddedFrontier::open(&dir, config.clone(), Arc::new(clock.clone()))
                    .ok()
            })
            .await;
            let stats = silk_frontier::FrontierStore::stats(&frontier)
                .await
                .unwrap();
            silk_frontier::FrontierStore::close(&frontier)
                .await
                .unwrap();
            Stored {
                seen_segments: stats.seen_segments,
                seen_urls: stats.seen_urls,
                pending: stats.pending,
                redis_bytes: 0,
            }
        }
        Some(url) => {
            let client = redis::Client::open(url).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("*:job:{job_id}}}*"))
                .query_async(&mut c)
                .await
                .unwrap();
            let mut stored = Stored {
                seen_segments: 0,
                seen_urls: 0,
                pending: 0,
                redis_bytes: 0,
            };
            for k in &keys {
                let used: Option<u64> = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(k)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                stored.redis_bytes += used.unwrap_or(0);
                if k.contains("}:seen:") {
                    let n: u64 = redis::cmd("SCARD")
                        .arg(k)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    stored.seen_segments += 1;
                    stored.seen_urls += n;
                }
                if k.ends_with("}:requests") {
                    let n: u64 = redis::cmd("HLEN").arg(k).query_async(&mut c).await.unwrap();
                    stored.pending += n;
                }
            }
            stored
        }
    }
}

async fn ten_daily_runs(frontier_url: Option<String>) {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(5, 50).await;
    // Days after today: what the hub sends is then never stale to the bus (on the system
    // clock), whatever day the test is on.
    let day0 = (SystemClock.now_ms() / DAY + 2) * DAY;
    let clock = ManualClock::new(day0);
    let mut config = hub_config(dir.path());
    config.schedule_tick_ms = 20;
    // Heartbeats are judged on the hub's clock, which jumps a day between runs.
    config.phi.acceptable_heartbeat_pause_ms = 3 * DAY;
    config.phi.dead_after_ms = 4 * DAY;
    config.frontier_url = frontier_url.clone();
    config.frontier_prefix = format!(
        "silk-test-{}",
        dir.path().file_name().unwrap().to_string_lossy()
    );
    let start = async |config: silk_hub::HubConfig| {
        let hub = Hub::start(config, Arc::new(bus.clone()), Arc::new(clock.clone()))
            .await
            .expect("hub starts");
        within("a live agent", 10, hub.wait_for_live_agents(1)).await;
        hub
    };
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    let mut hub = start(config.clone()).await;
    let spider = SPIDER.replace("per_host_concurrency: 8", "per_host_concurrency: 2")
        + "recrawl_segment: 1d\n";
    let spec: JobSpec = serde_json::from_value(json!({
        "name": "daily", "spider": spider, "args": site_args(&site),
        "cron": "0 3 * * *", "frontier": "job", "max_pending": 4,
    }))
    .unwrap();
    let job = hub.create_job(spec).await.unwrap();
    let pages = site.expected_pages();
    let fetched_once = |day: u64| {
        let hits = site.stats();
        for url in &pages {
            assert_eq!(hits.hits_on(url), 1, "day {day}: {url}");
        }
    };
    let mut runs_made = 0;
    let mut sizes = Vec::new();
    let mut daily = None;
    for day in 0..10u64 {
        site.reset_stats();
        clock.set(day0 + day * DAY + 3 * HOUR);
        runs_made += 1;
        let run = until("the day's run", async || {
            let runs = hub.job_runs("daily", None).await.ok()?;
            (runs.len() == runs_made).then(|| runs[0].clone())
        })
        .await;
        assert!(run.job_frontier, "{run:?}");
        match day {
            // Two runs of the job at once: the first waits (paused) while the second starts,
            // then both lease from the one frontier.
            3 => {
                until("the first run running", async || {
                    let view = hub.run(&run.id).await.ok()?;
                    (view.state == RunState::Running).then_some(())
                })
                .await;
                hub.pause(&run.id).await.unwrap();
                // A job whose run has not ended keeps its frontier: not deleted.
                let refused = hub.delete_job("daily").await;
                assert!(
                    matches!(&refused, Err(silk_hub::HubError::Conflict(e)) if e.contains(run.id.as_str())),
                    "{refused:?}"
                );
                let second = hub.trigger("daily", Default::default()).await.unwrap();
                runs_made += 1;
                site.wait_for_requests(5).await;
                hub.resume(&run.id).await.unwrap();
                for id in [&run.id, &second.id] {
                    let done = run_end(&hub, id, "a run of day 3").await;
                    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
                }
                fetched_once(day);
            }
            // The hub stops in the middle of the run; back, it resumes the run in the same
            // segment: what was fetched is not fetched again (but for the few requests out
            // when it stopped, at most `max_pending`).
            5 => {
                site.wait_for_requests(pages.len() as u64 / 3).await;
                hub.shutdown().await;
                let before = site.stats();
                assert!(
                    (before.total_requests as usize) < pages.len(),
                    "the run had ended before its hub stopped: {}",
                    before.total_requests
                );
                hub = start(config.clone()).await;
                let done = run_end(&hub, &run.id, "the resumed run").await;
                assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
                assert_eq!(Some(done.stats.success), daily, "{:?}", done.stats);
                let hits = site.stats();
                let mut again = 0;
                for url in &pages {
                    let n = hits.hits_on(url);
                    assert!(n >= 1, "day 5: {url} not fetched");
                    again += n - 1;
                }
                assert!(again <= 4, "day 5: {again} pages fetched twice");
            }
            _ => {
                let done = run_end(&hub, &run.id, "the day's run").await;
                assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
                // The same requests every day (pages, redirects, robots-denied ones …).
                assert!(done.stats.success >= pages.len() as u64, "{:?}", done.stats);
                assert_eq!(*daily.get_or_insert(done.stats.success), done.stats.success);
                fetched_once(day);
            }
        }
        if day == 1 {
            // A second run the same day: every page was seen in this segment.
            site.reset_stats();
            let again = hub.trigger("daily", Default::default()).await.unwrap();
            runs_made += 1;
            let done = run_end(&hub, &again.id, "the same-day run").await;
            assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
            assert_eq!(
                (done.stats.total, done.stats.success),
                (0, 0),
                "{:?}",
                done.stats
            );
            assert!(done.stats.duplicates > 0, "{:?}", done.stats);
            assert_eq!(site.stats().total_requests, 0);
        }
        let stored = job_frontier_stored(&hub, &job.id, frontier_url.as_deref(), &clock).await;
        // Nothing left, today's seen set, and yesterday's (kept a day, `segment_retention`).
        assert_eq!(stored.pending, 0, "day {day}: {stored:?}");
        assert_eq!(
            stored.seen_segments,
            day.min(1) + 1,
            "day {day}: {stored:?}"
        );
        sizes.push(stored);
    }
    // Deleting the job deletes its frontier.
    hub.delete_job("daily").await.unwrap();
    match frontier_url.as_deref() {
        None => {
            let dir = hub.data_dir().join("jobs").join(&job.id);
            assert!(!dir.exists(), "{} left", dir.display());
        }
        Some(url) => {
            let client = redis::Client::open(url).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("*:job:{}}}*", job.id))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(keys, Vec::<String>::new());
        }
    }
    eprintln!("the job frontier after each day: {sizes:?}");
    // Flat: from the second day on, the same seen URLs (two days' worth) and the same memory.
    for s in &sizes[2..] {
        assert_eq!(s.seen_urls, sizes[1].seen_urls, "{sizes:?}");
        assert!(
            s.redis_bytes <= sizes[1].redis_bytes + sizes[1].redis_bytes / 10,
            "{sizes:?}"
        );
    }
    hub.shutdown().await;
}

/// Several hubs of one store and one job frontier in Redis: one hub drives it at a time. While
/// a run of the job is on hub A, hub B refuses another (`409` naming hub A); hub A stops in the
/// middle of the run and hub B adopts it, resuming where it was (what was fetched is not
/// fetched again); later runs of the job, on either hub, find every page seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hubs_of_one_store_share_a_job_frontier_in_redis_one_at_a_time() {
    let Some(redis) = silk_testkit::service_url("SILK_TEST_REDIS") else {
        return;
    };
    let Some(pg) = silk_store::testing::PgTestSchema::from_env() else {
        return;
    };
    pg.create().await.expect("test schema");
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(5, 50).await;
    let prefix = format!(
        "silk-test-{}",
        dir.path().file_name().unwrap().to_string_lossy()
    );
    let start = |name: &'static str| {
        let mut config = hub_config(&dir.path().join(name));
        config.store_url = Some(pg.url.clone());
        config.secret_key = Some("5a".repeat(32));
        config.hub_id = Some(name.into());
        config.frontier_url = Some(redis.clone());
        config.frontier_prefix = prefix.clone();
        config.ownership_ttl_ms = 1_500;
        let bus = bus.clone();
        async move {
            let hub = Hub::start(config, Arc::new(bus), Arc::new(SystemClock))
                .await
                .expect("hub starts on postgres");
            within("a live agent", 10, hub.wait_for_live_agents(1)).await;
            hub
        }
    };
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    let a = start("hub-a").await;
    let b = start("hub-b").await;
    let spider = SPIDER.replace("per_host_concurrency: 8", "per_host_concurrency: 2")
        + "recrawl_segment: none\n";
    let spec: JobSpec = serde_json::from_value(json!({
        "name": "shared", "spider": spider, "args": site_args(&site),
        "frontier": "job", "max_pending": 4,
    }))
    .unwrap();
    a.create_job(spec).await.unwrap();
    let pages = site.expected_pages();

    let first = a.trigger("shared", Default::default()).await.unwrap();
    site.wait_for_requests(5).await;
    let refused = b
        .trigger("shared", Default::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("driven by hub `hub-a`"),
        "hub-b must refuse a run of the job: {refused}"
    );
    a.shutdown().await;
    assert!(
        (site.stats().total_requests as usize) < pages.len(),
        "the run had ended before hub-a stopped"
    );
    let done = run_end(&b, &first.id, "the run adopted and ended by hub-b").await;
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_eq!(done.hub.as_ref().map(|h| h.as_str()), Some("hub-b"));
    assert!(done.stats.success >= pages.len() as u64, "{:?}", done.stats);
    let hits = site.stats();
    let mut again = 0;
    for url in &pages {
        let n = hits.hits_on(url);
        assert!(n >= 1, "{url} not fetched");
        again += n - 1;
    }
    assert!(again <= 4, "{again} pages fetched twice");

    // Later runs, on hub-b and on hub-a back, find every page seen.
    site.reset_stats();
    let a = start("hub-a").await;
    for hub in [&b, &a] {
        let run = hub.trigger("shared", Default::default()).await.unwrap();
        let done = run_end(hub, &run.id, "a later run").await;
        assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
        assert_eq!(
            (done.stats.total, done.stats.success),
            (0, 0),
            "{:?}",
            done.stats
        );
    }
    assert_eq!(site.stats().total_requests, 0);
    a.shutdown().await;
    b.shutdown().await;
    pg.drop_schema().await;
}
