//! Tenants over real HTTP on loopback, with a real agent on the in-process bus and the demo
//! site: two tenants with their own tokens see and touch only their own jobs, runs, logs,
//! items, projects and tokens (another tenant's id answers `404`); roles (viewer reads,
//! owner manages its tenant's tokens, only an admin makes tenants and admin tokens); an admin
//! acts in a tenant with `X-Silk-Tenant`.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use silk_api::client::Client;
use silk_api::runs::RunState;
use silk_api::tokens::{Role, TokenRequest};

fn client(base: &str, token: &str) -> Client {
    Client::new(reqwest::Url::parse(base).unwrap(), Some(token.to_owned())).unwrap()
}

async fn token(by: &Client, name: &str, role: Role, tenant: Option<&str>) -> String {
    by.create_token(&TokenRequest {
        name: name.into(),
        role: Some(role),
        tenant: tenant.map(str::to_owned),
        admin: false,
    })
    .await
    .unwrap_or_else(|e| panic!("token {name}: {e}"))
    .token
}

fn job_spec(site: &silk_testkit::demo::DemoSite) -> Value {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    let spider = format!(
        "name: shop\nstart_urls: ['{}']\nallowed_domains: [{}]\nfollow: [{{deny: ['/calendar/']}}]\nitem_when: '/p/\\d+$'\n\
         extract: {{title: {{css: 'h1.title'}}}}\nper_host_delay_ms: 0\n",
        site.start_url(),
        hosts.join(", ")
    );
    json!({"name": "shop", "spider": spider})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tenants_see_and_touch_only_their_own_objects() {
    let dir = tempfile::TempDir::new().unwrap();
    let bus = bus();
    let site = site(6, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (base, admin) = serve(&hub).await;

    // Tenants: only an admin makes them; names are checked.
    for name in ["acme", "beta"] {
        let (status, body) = call(
            &admin,
            Method::POST,
            "/api/v1/tenants",
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "a b"})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "acme"})),
    )
    .await;
    assert_eq!(status, 409);
    let names: Vec<String> = admin
        .tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["acme", "beta", "default"]);

    // Owners, made by the admin; an owner makes its tenant's members and viewers.
    let acme_owner = client(
        &base,
        &token(&admin, "acme-owner", Role::Owner, Some("acme")).await,
    );
    let beta_owner = client(
        &base,
        &token(&admin, "beta-owner", Role::Owner, Some("beta")).await,
    );
    let acme = client(
        &base,
        &token(&acme_owner, "acme-ci", Role::Member, None).await,
    );
    let acme_viewer = client(
        &base,
        &token(&acme_owner, "acme-eyes", Role::Viewer, None).await,
    );
    let beta = client(
        &base,
        &token(&beta_owner, "beta-ci", Role::Member, None).await,
    );
    for (body, what) in [
        (json!({"name": "x", "role": "admin"}), "an admin token"),
        (
            json!({"name": "x", "tenant": "beta"}),
            "a token of another tenant",
        ),
    ] {
        let (status, e) = call(&acme_owner, Method::POST, "/api/v1/tokens", Some(body)).await;
        assert_eq!(status, 403, "an owner made {what}: {e}");
    }
    let (status, e) = call(
        &acme,
        Method::POST,
        "/api/v1/tokens",
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(status, 403, "a member made a token: {e}");
    let (status, e) = call(
        &acme,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(status, 403, "a member made a tenant: {e}");
    let acme_tokens = acme_owner.tokens().await.unwrap();
    assert_eq!(acme_tokens.len(), 3, "{acme_tokens:?}");
    assert!(acme_tokens.iter().all(|t| t.tenant == "acme"));
    let beta_tokens = beta_owner.tokens().await.unwrap();
    assert!(beta_tokens.iter().all(|t| t.tenant == "beta"));
    let acme_token_id = &acme_tokens[0].id;
    let (status, _) = call(
        &beta_owner,
        Method::DELETE,
        &format!("/api/v1/tokens/{acme_token_id}"),
        None,
    )
    .await;
    assert_eq!(status, 404, "another tenant's token is no token");

    // Jobs: the same name in both tenants; a run of acme's.
    let (status, acme_job) = call(&acme, Method::POST, "/api/v1/jobs", Some(job_spec(&site))).await;
    assert_eq!(status, 201, "{acme_job}");
    assert_eq!(acme_job["tenant"], "acme");
    let (status, beta_job) = call(&beta, Method::POST, "/api/v1/jobs", Some(job_spec(&site))).await;
    assert_eq!(status, 201, "names are per tenant: {beta_job}");
    let acme_job_id = acme_job["id"].as_str().unwrap().to_owned();
    let (status, run) = call(
        &acme,
        Method::POST,
        &format!("/api/v1/jobs/{acme_job_id}/runs"),
        None,
    )
    .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["tenant"], "acme");
    let run_id = silk_core::RunId::new(run["id"].as_str().unwrap());
    let done = within("acme's run", 60, hub.wait_run(&run_id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    assert!(done.stats.items > 0);

    // beta sees none of it, by any route: 404, or lists without it.
    let jobs = beta.jobs().await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].tenant, "beta");
    assert_eq!(
        beta.job("shop").await.unwrap().id,
        beta_job["id"].as_str().unwrap()
    );
    let run_path = format!("/api/v1/runs/{run_id}");
    let job_path = format!("/api/v1/jobs/{acme_job_id}");
    for (method, path, body) in [
        (Method::GET, job_path.clone(), None),
        (
            Method::PATCH,
            job_path.clone(),
            Some(json!({"remarks": "mine now"})),
        ),
        (Method::DELETE, job_path.clone(), None),
        (Method::GET, format!("{job_path}/runs"), None),
        (Method::POST, format!("{job_path}/runs"), None),
        (Method::GET, run_path.clone(), None),
        (Method::GET, format!("{run_path}/logs"), None),
        (Method::GET, format!("{run_path}/items"), None),
        (Method::GET, format!("{run_path}/events"), None),
        (Method::POST, format!("{run_path}/pause"), None),
        (Method::POST, format!("{run_path}/resume"), None),
        (Method::POST, format!("{run_path}/cancel"), None),
        (Method::POST, format!("{run_path}/restart"), None),
        (
            Method::POST,
            format!("{run_path}/items"),
            Some(json!({"items": [{"x": 1}]})),
        ),
        (
            Method::POST,
            format!("{run_path}/requests"),
            Some(json!({"requests": []})),
        ),
        (
            Method::POST,
            format!("{run_path}/lease"),
            Some(json!({"max": 1})),
        ),
        (
            Method::POST,
            format!("{run_path}/ack"),
            Some(json!({"acks": []})),
        ),
        (Method::GET, format!("/api/v1/runs?job={acme_job_id}"), None),
        (Method::GET, format!("/api/v1/logs?job={acme_job_id}"), None),
    ] {
        let (status, e) = call(&beta, method.clone(), &path, body).await;
        assert_eq!(status, 404, "{method} {path} across tenants: {e}");
        assert_eq!(e["code"], "not_found", "{method} {path}: {e}");
    }
    let (status, runs) = call(&beta, Method::GET, "/api/v1/runs", None).await;
    assert_eq!(status, 200);
    assert_eq!(runs, json!([]), "beta lists no run of acme's");
    assert_eq!(
        acme.job(&acme_job_id).await.unwrap().spec.remarks,
        "",
        "untouched"
    );
    // acme reads its run's log lines (stored within a fraction of a second of the run's end).
    let search = format!("/api/v1/logs?run={run_id}");
    until("acme's log lines in the search", async || {
        let (_, logs) = call(&acme, Method::GET, &search, None).await;
        (!logs["lines"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let (_, logs) = call(&beta, Method::GET, &search, None).await;
    assert_eq!(logs["lines"], json!([]), "beta searches no log of acme's");
    let (status, items) = call(&acme, Method::GET, &format!("{run_path}/items"), None).await;
    assert_eq!(status, 200);
    assert_eq!(
        items["items"].as_array().unwrap().len() as u64,
        done.stats.items
    );

    // A viewer reads and changes nothing.
    assert_eq!(acme_viewer.jobs().await.unwrap().len(), 1);
    let (status, _) = call(&acme_viewer, Method::GET, &run_path, None).await;
    assert_eq!(status, 200);
    for (method, path) in [
        (Method::POST, format!("{job_path}/runs")),
        (Method::DELETE, job_path.clone()),
        (Method::POST, format!("{run_path}/restart")),
    ] {
        let (status, e) = call(&acme_viewer, method.clone(), &path, None).await;
        assert_eq!(status, 403, "a viewer's {method} {path}: {e}");
    }

    // X-Silk-Tenant: an admin acts in a tenant; no other token leaves its own.
    let admin_in_acme = admin.clone().with_tenant("acme").unwrap();
    assert_eq!(admin_in_acme.jobs().await.unwrap()[0].id, acme_job_id);
    let (status, _) = call(&admin_in_acme, Method::GET, &run_path, None).await;
    assert_eq!(status, 200);
    let (status, _) = call(&admin, Method::GET, &run_path, None).await;
    assert_eq!(
        status, 404,
        "the admin acts in `default` unless it says otherwise"
    );
    let nowhere = admin.clone().with_tenant("nowhere").unwrap();
    let (status, e) = call(&nowhere, Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, 404, "{e}");
    let beta_into_acme = beta.clone().with_tenant("acme").unwrap();
    let (status, e) = call(&beta_into_acme, Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, 403, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("X-Silk-Tenant"),
        "{e}"
    );

    // Projects: the admin makes one in acme; beta does not see it.
    let project = json!({"name": "crawler", "git_url": "http://127.0.0.1:9/crawler.git",
        "build": {"kind": "command", "command": "true"}});
    let (status, made) = call(
        &admin_in_acme,
        Method::POST,
        "/api/v1/projects",
        Some(project),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["project"]["tenant"], "acme");
    assert_eq!(acme.projects().await.unwrap().len(), 1);
    assert!(beta.projects().await.unwrap().is_empty());
    for (method, path) in [
        (Method::GET, "/api/v1/projects/crawler"),
        (Method::GET, "/api/v1/projects/crawler/versions"),
        (Method::POST, "/api/v1/projects/crawler/builds"),
        (
            Method::GET,
            "/api/v1/projects/crawler/versions/1.0/artifact",
        ),
    ] {
        let body = (method == Method::POST).then(|| json!({"ref": "main", "version": "1.0"}));
        let (status, e) = call(&beta, method.clone(), path, body).await;
        assert_eq!(status, 404, "{method} {path} across tenants: {e}");
    }
    // A program run in beta (even an admin's) cannot name acme's project; in acme it can
    // (it then finds no ready version).
    let program = json!({"program": {"project": "crawler", "command": ["true"]}});
    let admin_in_beta = admin.clone().with_tenant("beta").unwrap();
    let (status, e) = call(
        &admin_in_beta,
        Method::POST,
        "/api/v1/runs",
        Some(program.clone()),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no project `crawler`"),
        "{e}"
    );
    let (status, e) = call(&admin_in_acme, Method::POST, "/api/v1/runs", Some(program)).await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("no ready version"),
        "{e}"
    );

    // A tenant that owns something stays; an empty one goes.
    let (status, e) = call(&admin, Method::DELETE, "/api/v1/tenants/acme", None).await;
    assert_eq!(status, 409, "{e}");
    let (status, _) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "gone"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(&admin, Method::DELETE, "/api/v1/tenants/gone", None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&acme, Method::GET, "/api/v1/tenants/beta", None).await;
    assert_eq!(status, 404, "a tenant sees only its own tenant");
    let mine = acme.tenants().await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].name, "acme");

    hub.shutdown().await;
}

/// Pool grants: a tenant granted `eu` runs only on agents labelled `pool=eu` — a run naming
/// no pool gets the granted ones, a job or run naming another pool is refused with `403`
/// naming `pools[i]` — until the admin lifts the grant; a tenant granted no pool runs
/// nothing; only an admin changes grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_runs_only_on_the_pools_granted_to_it() {
    let dir = tempfile::TempDir::new().unwrap();
    let bus = bus();
    let site = site(4, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _plain = start_agent(dir.path(), &bus, "a1").await;
    let mut eu = agent_config(dir.path(), "a2");
    eu.labels.insert("pool".into(), "eu".into());
    let _eu = start_agent_with(eu, &bus).await;
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    let (base, admin) = serve(&hub).await;

    let (status, made) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "acme", "pools": ["eu"]})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["pools"], json!(["eu"]));
    let acme_owner = client(&base, &token(&admin, "o", Role::Owner, Some("acme")).await);
    let acme = client(&base, &token(&acme_owner, "m", Role::Member, None).await);
    let spider = job_spec(&site)["spider"].clone();

    // No pool named: the granted ones, so only the eu agent.
    for _ in 0..3 {
        let (status, run) = call(
            &acme,
            Method::POST,
            "/api/v1/runs",
            Some(json!({"spider": spider, "strategy": "fixed:1"})),
        )
        .await;
        assert_eq!(status, 201, "{run}");
        assert_eq!(run["pools"], json!(["eu"]));
        assert_eq!(run["agents"], json!(["a2"]));
        let id = silk_core::RunId::new(run["id"].as_str().unwrap());
        let done = within("acme's run", 60, hub.wait_run(&id)).await.unwrap();
        assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    }
    // Another pool: refused, naming it, for runs and jobs alike.
    let (status, e) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider, "pools": ["eu", "us"]})),
    )
    .await;
    assert_eq!(status, 403, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("pools[1]: pool `us`"),
        "{e}"
    );
    let mut job = job_spec(&site);
    job["pools"] = json!(["us"]);
    let (status, e) = call(&acme, Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 403, "{e}");
    // Only an admin changes grants.
    let (status, _) = call(
        &acme_owner,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"pools": null})),
    )
    .await;
    assert_eq!(status, 403);
    // No pool granted: nothing runs.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"pools": []})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    let (status, e) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider})),
    )
    .await;
    assert_eq!(status, 403, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("granted no agent pool"),
        "{e}"
    );
    // The grant lifted: every agent again.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"pools": null})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    assert!(t.get("pools").is_none(), "{t}");
    let (status, run) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider, "strategy": "fixed:2"})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["pools"], json!([]));
    assert_eq!(run["agents"].as_array().unwrap().len(), 2, "{run}");
    let id = silk_core::RunId::new(run["id"].as_str().unwrap());
    within("acme's run", 60, hub.wait_run(&id)).await.unwrap();
    let (status, e) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"colour": 1})),
    )
    .await;
    assert_eq!(status, 400, "{e}");

    hub.shutdown().await;
}

/// The run `id` as the API shows it to `client`.
async fn run_of(client: &Client, id: &str) -> Value {
    let (status, run) = call(client, Method::GET, &format!("/api/v1/runs/{id}"), None).await;
    assert_eq!(status, 200, "{run}");
    run
}

/// Waits until `id` is paused by a quota whose reason contains `what`.
async fn quota_paused(client: &Client, id: &str, what: &str) -> Value {
    until(&format!("run {id} paused by {what}"), async || {
        let run = run_of(client, id).await;
        let reason = run["reason"].as_str().unwrap_or_default().to_owned();
        let paused = run["state"] == "paused"
            && reason.starts_with("quota_exhausted")
            && reason.contains(what)
            && run["stats"]["in_flight"] == 0;
        paused.then_some(run)
    })
    .await
}

async fn usage(client: &Client, tenant: &str) -> Value {
    let (status, usage) = call(
        client,
        Method::GET,
        &format!("/api/v1/tenants/{tenant}/usage"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{usage}");
    usage
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quotas_pause_runs_and_resume_them_across_a_hub_restart() {
    let dir = tempfile::TempDir::new().unwrap();
    let bus = bus();
    let site = site(80, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (base, admin) = serve(&hub).await;

    // Quotas are checked: a zone that is none, a field that is none.
    for bad in [
        json!({"time_zone": "Mars/Olympus"}),
        json!({"pages": 3}),
        json!({"concurrent_runs": 0}),
    ] {
        let (status, e) = call(
            &admin,
            Method::POST,
            "/api/v1/tenants",
            Some(json!({"name": "acme", "quotas": bad})),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {e}");
    }
    let (status, made) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "acme", "quotas": {"pages_per_day": 20, "time_zone": "Europe/Paris"}})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["quotas"]["pages_per_day"], 20);
    let acme_owner = client(&base, &token(&admin, "o", Role::Owner, Some("acme")).await);
    let acme = client(&base, &token(&acme_owner, "m", Role::Member, None).await);
    // Only an admin sets quotas; a tenant reads its own usage, not another's.
    let (status, _) = call(
        &acme_owner,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"quotas": null})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = call(&acme, Method::GET, "/api/v1/tenants/default/usage", None).await;
    assert_eq!(status, 404);
    let spider = job_spec(&site)["spider"].clone();

    // The day's 20 pages: the run pauses at exactly 20 (it leases within its slice).
    let (status, run) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider, "max_pending": 8})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let paused = quota_paused(&acme, &id, "pages_per_day of tenant `acme` (20)").await;
    assert_eq!(paused["stats"]["success"], 20, "{paused}");
    let used = until("the usage counted", async || {
        let u = usage(&acme, "acme").await;
        (u["pages"] == 20 && u["reserved"] == 0).then_some(u)
    })
    .await;
    assert_eq!(used["overshoot_pages"], 0, "{used}");
    assert_eq!(used["quota_paused_runs"], 1, "{used}");
    assert_eq!(used["time_zone"], "Europe/Paris", "{used}");
    assert!(used["bytes"].as_u64().unwrap() > 0, "{used}");
    // A user cannot resume it past the quota (it stays paused), but may pause it.
    let (status, e) = call(
        &acme,
        Method::POST,
        &format!("/api/v1/runs/{id}/resume"),
        None,
    )
    .await;
    assert!(status < 300, "{status} {e}");
    assert_eq!(run_of(&acme, &id).await["state"], "paused");

    // A hub restart: the counters and the pause hold.
    hub.shutdown().await;
    let hub = start_hub(dir.path(), &bus).await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (base, admin) = serve(&hub).await;
    let acme = client(
        &base,
        &token(&admin, "m2", Role::Member, Some("acme")).await,
    );
    let again = quota_paused(&acme, &id, "pages_per_day").await;
    assert_eq!(again["stats"]["success"], 20, "{again}");
    assert_eq!(usage(&acme, "acme").await["pages"], 20);

    // The quota raised: the run resumes by itself and pauses again at the new limit.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"quotas": {"pages_per_day": 35, "time_zone": "Europe/Paris"}})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    let paused = quota_paused(&acme, &id, "(35)").await;
    assert_eq!(paused["stats"]["success"], 35, "{paused}");
    let used = until("the usage counted", async || {
        let u = usage(&acme, "acme").await;
        (u["pages"] == 35 && u["reserved"] == 0).then_some(u)
    })
    .await;
    assert_eq!(used["overshoot_pages"], 0, "{used}");

    // One run at a time, no page limit: the paused run goes on to its end.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"quotas": {"concurrent_runs": 1}})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    let first = within(
        "the first run",
        60,
        hub.wait_run(&silk_core::RunId::new(&id)),
    )
    .await
    .unwrap();
    assert_eq!(first.state, RunState::Succeeded, "{first:?}");
    assert!(first.stats.success > 35, "{first:?}");
    // A run held by a server that never answers keeps running while a second one waits
    // for it, and the second starts when the first is cancelled.
    let hang = silk_testkit::hostile::hang().await.unwrap();
    let held = format!(
        "name: held\nstart_urls: ['{}']\ntimeout_ms: 600000\nmax_retries: 0\n",
        hang.url("/")
    );
    let (status, blocker) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": held})),
    )
    .await;
    assert_eq!(status, 201, "{blocker}");
    let blocker = blocker["id"].as_str().unwrap().to_owned();
    until("the held run fetching", async || {
        let run = run_of(&acme, &blocker).await;
        (run["state"] == "running" && run["stats"]["in_flight"] == 1).then_some(())
    })
    .await;
    let (status, second) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider})),
    )
    .await;
    assert_eq!(status, 201, "{second}");
    let second = second["id"].as_str().unwrap().to_owned();
    let waiting = quota_paused(&acme, &second, "concurrent_runs of tenant `acme` is 1").await;
    assert_eq!(waiting["stats"]["success"], 0, "{waiting}");
    let (status, e) = call(
        &acme,
        Method::POST,
        &format!("/api/v1/runs/{blocker}/cancel"),
        None,
    )
    .await;
    assert!(status < 300, "{status} {e}");
    let second = within(
        "the second run",
        60,
        hub.wait_run(&silk_core::RunId::new(&second)),
    )
    .await
    .unwrap();
    assert_eq!(second.state, RunState::Succeeded, "{second:?}");
    assert!(second.stats.success > 35, "{second:?}");

    // Pages per run: a spider's max_pages above it is lowered to it.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"quotas": {"pages_per_run": 4}})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    let (status, run) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let done = within(
        "a run of 4 pages",
        60,
        hub.wait_run(&silk_core::RunId::new(run["id"].as_str().unwrap())),
    )
    .await
    .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    assert_eq!(done.stats.success, 4, "{done:?}");

    // A job's pages per day: its run pauses at them, counted on the job's own counter.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"quotas": null})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    let mut job = job_spec(&site);
    job["max_pages_per_day"] = json!(3);
    let (status, made) = call(&acme, Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 201, "{made}");
    let (status, run) = call(&acme, Method::POST, "/api/v1/jobs/shop/runs", None).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let paused = quota_paused(&acme, &id, "max_pages_per_day of its job (3)").await;
    assert_eq!(paused["stats"]["success"], 3, "{paused}");
    let (status, _) = call(
        &acme,
        Method::POST,
        &format!("/api/v1/runs/{id}/cancel"),
        None,
    )
    .await;
    assert!(status < 300);
    let done = within(
        "the cancelled run",
        60,
        hub.wait_run(&silk_core::RunId::new(&id)),
    )
    .await
    .unwrap();
    assert_eq!(done.state, RunState::Cancelled, "{done:?}");
    hub.shutdown().await;
}

/// Private networks (item 3 of tenants): with a hub and an agent that allow no private range
/// themselves, a tenant's run does not reach the loopback site (`private_address`, nothing
/// reaches it) nor a loopback webhook, until an admin allows the range for that tenant; the
/// other tenant's runs still do not reach it, and a run's own downloader settings cannot.
/// A tenant's `agent_slots` bound the requests its runs have out at once: on a slow site
/// the same run has at most that many in flight at the site, where a tenant without the
/// quota has many more; every page is still fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_slots_bound_a_tenants_requests_in_flight() {
    let dir = tempfile::TempDir::new().unwrap();
    let bus = bus();
    let site = silk_testkit::demo::DemoSite::start(silk_testkit::demo::DemoConfig {
        hosts: 1,
        pages: 40,
        latency_ms: Some(30),
        ..Default::default()
    })
    .await
    .unwrap();
    let hub = start_hub(dir.path(), &bus).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (base, admin) = serve(&hub).await;
    let (status, e) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "slim", "quotas": {"agent_slots": 0}})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("quotas.agent_slots"),
        "{e}"
    );
    let (status, made) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "slim", "quotas": {"agent_slots": 2}})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let spider = format!(
        "name: slow\nstart_urls: ['{}']\nfollow: [{{deny: ['/calendar/', '/s\\?']}}]\n\
         per_host_concurrency: 16\nper_host_delay_ms: 0\n",
        site.start_url()
    );
    let slim = client(&base, &token(&admin, "m", Role::Member, Some("slim")).await);
    let mut peaks = Vec::new();
    for who in [&slim, &admin] {
        site.reset_stats();
        let (status, run) = call(
            who,
            Method::POST,
            "/api/v1/runs",
            Some(json!({"spider": spider, "max_pending": 16})),
        )
        .await;
        assert_eq!(status, 201, "{run}");
        let id = silk_core::RunId::new(run["id"].as_str().unwrap());
        let done = within("the run", 60, hub.wait_run(&id)).await.unwrap();
        assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
        let stats = site.stats();
        assert_eq!(stats.hits_under("/p/"), 40, "every page is fetched");
        peaks.push(
            stats
                .per_host_max_in_flight
                .values()
                .copied()
                .max()
                .unwrap_or(0),
        );
    }
    assert!(
        peaks[0] <= 2,
        "slim had {} requests in flight at once",
        peaks[0]
    );
    assert!(peaks[1] > 2, "without agent_slots: {} at once", peaks[1]);

    // Two runs of the tenant at once share its slots: 1 each. (When the second starts, the
    // first may still have its 2 out until they come back: one more for that moment.)
    site.reset_stats();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, run) = call(
            &slim,
            Method::POST,
            "/api/v1/runs",
            Some(json!({"spider": spider, "max_pending": 16})),
        )
        .await;
        assert_eq!(status, 201, "{run}");
        ids.push(silk_core::RunId::new(run["id"].as_str().unwrap()));
    }
    for id in &ids {
        let done = within("the run", 60, hub.wait_run(id)).await.unwrap();
        assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    }
    let stats = site.stats();
    assert_eq!(stats.hits_under("/p/"), 80, "each run fetches every page");
    let peak = stats
        .per_host_max_in_flight
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    assert!(
        peak <= 3,
        "two runs of slim had {peak} requests in flight at once"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_networks_are_refused_to_tenants_unless_an_admin_allows_them() {
    let dir = tempfile::TempDir::new().unwrap();
    let bus = bus();
    let site = site(6, 0).await;
    let config = silk_hub::HubConfig {
        allow_networks: Vec::new(),
        ..hub_config(dir.path())
    };
    let hub = start_hub_with(config, &bus).await;
    let _agent = start_agent_with(
        silk_agent::AgentConfig {
            allow_networks: Vec::new(),
            ..agent_config(dir.path(), "a1")
        },
        &bus,
    )
    .await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let (base, admin) = serve(&hub).await;
    let hook = silk_testkit::receiver::Receiver::start().await.unwrap();

    // Ranges are checked, naming the one that is none.
    let (status, e) = call(
        &admin,
        Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "acme", "allow_networks": ["127.0.0.0/8", "intranet"]})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("allow_networks[1]"), "{e}");
    for name in ["acme", "beta"] {
        let (status, t) = call(
            &admin,
            Method::POST,
            "/api/v1/tenants",
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(status, 201, "{t}");
    }
    let acme = client(&base, &token(&admin, "a", Role::Owner, Some("acme")).await);
    let beta = client(&base, &token(&admin, "b", Role::Owner, Some("beta")).await);
    let spider = job_spec(&site)["spider"].clone();
    let start = async |who: &Client, body: Value| -> String {
        let (status, run) = call(who, Method::POST, "/api/v1/runs", Some(body)).await;
        assert_eq!(status, 201, "{run}");
        run["id"].as_str().unwrap().to_owned()
    };
    let ended = async |id: &str| {
        within("the run", 60, hub.wait_run(&silk_core::RunId::new(id)))
            .await
            .unwrap()
    };

    // Not allowed: the start page fails with private_address and nothing reaches the site;
    // a literal loopback webhook is refused when the run starts, naming the field; a tenant
    // cannot open the range itself (not through the run's downloader, not on its tenant).
    let refused = ended(&start(&acme, json!({"spider": spider})).await).await;
    assert_eq!(refused.stats.success, 0, "{:?}", refused.stats);
    assert!(refused.stats.failed >= 1, "{:?}", refused.stats);
    assert_eq!(site.stats().total_requests, 0, "nothing reached the site");
    // The agent's log lines come over the bus, after the run's end maybe.
    until("private_address in the run log", async || {
        let path = format!("/api/v1/runs/{}/logs?q=private_address", refused.id);
        let (status, page) = call(&acme, Method::GET, &path, None).await;
        assert_eq!(status, 200, "{page}");
        (!page["lines"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let (status, e) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider, "sinks": {"webhook": {"url": hook.url("/items")}}})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("sinks.webhook.url"), "{e}");
    let (status, e) = call(
        &acme,
        Method::POST,
        "/api/v1/runs",
        Some(json!({"spider": spider, "downloader": {"allow_networks": ["127.0.0.0/8"]}})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("allow_networks"), "{e}");
    let (status, _) = call(
        &acme,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"allow_networks": ["127.0.0.0/8"]})),
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(site.stats().total_requests, 0, "nothing reached the site");

    // An admin allows loopback for acme: its runs reach the site and the webhook; beta's
    // still do not.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"allow_networks": ["127.0.0.0/8", "::1"]})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(
        t["allow_networks"],
        json!(["127.0.0.0/8", "::1/128"]),
        "{t}"
    );
    let allowed = ended(
        &start(
            &acme,
            json!({"spider": spider, "sinks": {"webhook": {"url": hook.url("/items")}}}),
        )
        .await,
    )
    .await;
    assert_eq!(allowed.state, RunState::Succeeded, "{allowed:?}");
    assert!(allowed.stats.success > 0, "{:?}", allowed.stats);
    assert!(allowed.stats.items > 0, "{:?}", allowed.stats);
    until("the items at the webhook", async || {
        let items: usize = hook
            .received()
            .iter()
            .map(|r| r.json()["items"].as_array().map_or(0, Vec::len))
            .sum();
        (items as u64 == allowed.stats.items).then_some(())
    })
    .await;
    let reached = site.stats().total_requests;
    assert!(reached > 0);
    let other = ended(&start(&beta, json!({"spider": spider})).await).await;
    assert_eq!(other.stats.success, 0, "{:?}", other.stats);
    assert_eq!(site.stats().total_requests, reached, "beta reached nothing");

    // Taken back: runs started afterwards are refused again.
    let (status, t) = call(
        &admin,
        Method::PATCH,
        "/api/v1/tenants/acme",
        Some(json!({"allow_networks": null})),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    assert!(t.get("allow_networks").is_none(), "{t}");
    let again = ended(&start(&acme, json!({"spider": spider})).await).await;
    assert_eq!(again.stats.success, 0, "{:?}", again.stats);
    assert_eq!(site.stats().total_requests, reached);
    hub.shutdown().await;
}
