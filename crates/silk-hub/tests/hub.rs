//! The hub with real agents on the in-process bus, crawling the demo site over loopback:
//! allocation (synchronous, with reasons), dispatch, results, every page exactly once,
//! chained affinity, agent loss under both policies, pause/resume/cancel, the HTTP API, a
//! hub restart in the middle of a run, and a run's lease in the store taken by another hub
//! and given back.

use silk_api::ErrorCode;
use silk_api::agents::AgentState;
use silk_api::client::Client;
use silk_api::runs::{OnAgentLost, RunRequest, RunState, RunView, Strategy};
use silk_core::AgentId;
use silk_hub::{HubError, HubHandle, RunQuery};
use silk_testkit::demo::DemoSite;
use std::collections::BTreeSet;
use std::path::Path;
use tempfile::TempDir;

mod common;
use common::*;

fn spider(site: &DemoSite) -> String {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    format!(
        "name: hubtest\nstart_urls: ['{}']\nallowed_domains: [{}]\nfollow: [{{deny: ['/calendar/']}}]\n\
         item_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\n\
         per_host_concurrency: 8\nper_host_delay_ms: 0\n",
        site.start_url(),
        hosts.join(", ")
    )
}

fn request(site: &DemoSite, strategy: Strategy, policy: OnAgentLost) -> RunRequest {
    RunRequest {
        spider: spider(site),
        program: None,
        strategy: Some(strategy),
        on_agent_lost: Some(policy),
        pools: Vec::new(),
        max_pending: Some(32),
        stall_timeout_ms: Some(20_000),
        downloader: None,
        sinks: None,
        fail_if: None,
    }
}

/// Asserts the run's item file holds every content page of `site` exactly once.
fn assert_every_page_once(view: &RunView, site: &DemoSite) {
    let unique = items_once(view);
    let expected: BTreeSet<String> = site
        .expected_pages()
        .into_iter()
        .filter(|u| u.contains("/p/"))
        .collect();
    assert_eq!(unique, expected, "the output is not every content page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_random_run_over_two_agents_writes_every_page_once() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(80, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    let _b = start_agent(dir.path(), &bus, "a2").await;
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    let run = hub
        .submit(request(&site, Strategy::Random, OnAgentLost::Fail))
        .await
        .expect("run starts");
    assert_eq!(run.state, RunState::Running);
    assert_eq!(
        run.agents.len(),
        2,
        "random allocates the run on every live agent"
    );
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    let s = &done.stats;
    assert_eq!(s.left, 0);
    assert_eq!(s.success + s.failed + s.dropped, s.total);
    assert_eq!(s.late_results, 0);
    assert_eq!(
        done.stats.by_agent.len(),
        2,
        "both agents fetched: {:?}",
        done.stats.by_agent
    );
    // The API lists it with the same state.
    let listed = hub.runs(&silk_hub::RunQuery::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, RunState::Succeeded);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_that_cannot_be_allocated_fails_to_start_with_the_reason() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(5, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let err = hub
        .submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
        .await
        .expect_err("fixed:2 with one agent cannot start");
    let HubError::AllocationFailed { run, reason } = &err else {
        panic!("unexpected error {err}");
    };
    assert!(
        reason.contains("fixed:2 needs 2 live agents") && reason.contains("a1"),
        "{reason}"
    );
    let stored = hub.run(run).await.unwrap();
    assert_eq!(stored.state, RunState::Failed);
    assert_eq!(stored.reason.as_deref(), Some(reason.as_str()));

    // A downloader config the schema refuses is refused at submit, naming the key; no run
    // is created for it.
    let before = hub.runs(&RunQuery::default()).await.unwrap().len();
    for (config, named) in [
        (r#"{"qps": -1}"#, "downloader.qps: must be at least 0.001"),
        (r#"{"qpss": 1}"#, "downloader.qpss: unknown field `qpss`"),
        (
            r#"{"proxies": {"switch_on_status": [42]}}"#,
            "downloader.proxies.switch_on_status[0]: 42 is not an HTTP status",
        ),
        (
            r#"{"proxies": {"cooldown_ms": "soon"}}"#,
            "downloader.proxies.cooldown_ms: invalid type",
        ),
    ] {
        let mut bad = request(&site, Strategy::Fixed(1), OnAgentLost::Fail);
        bad.downloader = Some(serde_json::from_str(config).unwrap());
        let err = hub.submit(bad).await.expect_err("a bad config");
        assert!(
            matches!(&err, HubError::BadRun(m) if m.contains(named)),
            "{config}: {err}"
        );
    }
    assert_eq!(hub.runs(&RunQuery::default()).await.unwrap().len(), before);

    // An agent that refuses the downloader config (what only an agent judges: a selector):
    // the refusal names the problem.
    let mut bad = request(&site, Strategy::Fixed(1), OnAgentLost::Fail);
    bad.downloader =
        Some(serde_json::from_str(r#"{"trim": {"rules": [{"css": "[[["}]}}"#).unwrap());
    let err = hub.submit(bad).await.expect_err("a refused allocation");
    let text = err.to_string();
    assert!(
        text.contains("agent `a1`") && text.contains("trim.rules[0].css"),
        "{text}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chained_runs_keep_pages_on_the_agent_that_discovered_them() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(60, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    let _b = start_agent(dir.path(), &bus, "a2").await;
    let _c = start_agent(dir.path(), &bus, "a3").await;
    within("three live agents", 10, hub.wait_for_live_agents(3)).await;
    // robots.txt is not read (the spider denies its one rule, `/private/`, itself): the seed's
    // only unbound result is its page (each agent's read of a host's robots.txt gives a request
    // back, `robots_fetched`, and the seed would come back unbound once per agent that reads it).
    let mut chained = request(&site, Strategy::Chained(2), OnAgentLost::Fail);
    chained.spider = chained
        .spider
        .replace("deny: ['/calendar/']", "deny: ['/calendar/', '/private/']")
        + "robots: false\n";
    let run = hub.submit(chained).await.expect("run starts");
    assert_eq!(run.agents.len(), 2);
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    let s = &done.stats;
    assert_eq!(s.affinity_broken, 0);
    assert_eq!(
        s.affinity_kept + 1,
        s.returned,
        "every request but the seed is bound: {s:?}"
    );
    let fetchers: BTreeSet<&String> = s.by_agent.keys().collect();
    let allocated: BTreeSet<String> = run.agents.iter().map(|a| a.to_string()).collect();
    assert!(
        fetchers.iter().all(|f| allocated.contains(*f)),
        "only allocated agents fetch: {s:?}"
    );
    hub.shutdown().await;
}

/// A `hash:2` run fetches every page once, on its two allocated agents only (which agent
/// takes which host is `allocation`'s unit tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hash_run_fetches_every_page_once_on_its_agents() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(40, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    let _b = start_agent(dir.path(), &bus, "a2").await;
    let _c = start_agent(dir.path(), &bus, "a3").await;
    within("three live agents", 10, hub.wait_for_live_agents(3)).await;
    let run = hub
        .submit(request(&site, Strategy::Hashed(2), OnAgentLost::Fail))
        .await
        .expect("run starts");
    assert_eq!(run.strategy.to_string(), "hash:2");
    assert_eq!(run.agents.len(), 2);
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    let allocated: BTreeSet<String> = run.agents.iter().map(|a| a.to_string()).collect();
    assert!(
        done.stats.by_agent.keys().all(|f| allocated.contains(f)),
        "only allocated agents fetch: {:?}",
        done.stats
    );
    hub.shutdown().await;
}

/// Starts a chained:2 run on a slow site, stops one of its agents mid-run and returns the
/// finished run and the agent that was stopped.
async fn lose_an_agent_of_a_chained_run(
    dir: &Path,
    policy: OnAgentLost,
) -> (RunView, AgentId, DemoSite, HubHandle) {
    let bus = bus();
    let site = site(60, 20).await;
    let hub = start_hub(dir, &bus).await;
    let mut agents = Vec::new();
    for id in ["a1", "a2", "a3"] {
        agents.push(start_agent(dir, &bus, id).await);
    }
    within("three live agents", 10, hub.wait_for_live_agents(3)).await;
    let run = hub
        .submit(request(&site, Strategy::Chained(2), policy))
        .await
        .expect("run starts");
    within("some pages", 30, site.wait_for_requests(40)).await;
    // The seed's agent: with chained affinity, every page discovered from it is bound to it.
    let busy = hub.run(&run.id).await.unwrap().stats.by_agent;
    let victim = busy
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(id, _)| AgentId::new(id.as_str()))
        .expect("an agent fetched");
    assert!(run.agents.contains(&victim));
    for agent in &agents {
        if agent.id() == &victim {
            agent.shutdown().await;
        }
    }
    within("the agent declared dead", 10, hub.wait_for_dead(&victim)).await;
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    (done, victim, site, hub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_an_agent_of_a_chained_run_fails_it_under_the_fail_policy() {
    let dir = TempDir::new().unwrap();
    let (done, victim, _site, hub) =
        lose_an_agent_of_a_chained_run(dir.path(), OnAgentLost::Fail).await;
    assert_eq!(done.state, RunState::Failed);
    let reason = done.reason.unwrap_or_default();
    assert!(
        reason.contains(victim.as_str()) && reason.contains("on_agent_lost"),
        "{reason}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_an_agent_of_a_chained_run_reassigns_its_pages_under_reassign() {
    let dir = TempDir::new().unwrap();
    let (done, victim, site, hub) =
        lose_an_agent_of_a_chained_run(dir.path(), OnAgentLost::Reassign).await;
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    assert_eq!(done.stats.affinity_broken, 0);
    assert!(done.stats.reassigned > 0, "{:?}", done.stats);
    assert!(
        done.stats.by_agent.len() >= 2,
        "another agent took over: {:?}",
        done.stats
    );
    let agents = hub.agents();
    let dead = agents.iter().find(|a| a.id == victim).unwrap();
    assert_eq!(dead.state.as_str(), "dead");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_resume_and_cancel() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(400, 50).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let mut slow = request(&site, Strategy::Fixed(1), OnAgentLost::Fail);
    slow.max_pending = Some(4);
    let run = hub.submit(slow).await.unwrap();
    within("some pages", 30, site.wait_for_requests(20)).await;
    let paused = hub.pause(&run.id).await.unwrap();
    assert_eq!(paused.state, RunState::Paused);
    assert!(matches!(
        hub.pause(&run.id).await,
        Err(HubError::WrongState { .. })
    ));
    let resumed = hub.resume(&run.id).await.unwrap();
    assert_eq!(resumed.state, RunState::Running);
    let cancelled = within("the cancel", 30, hub.cancel(&run.id)).await.unwrap();
    assert_eq!(cancelled.state, RunState::Cancelled);
    assert!(cancelled.stats.left > 0, "cancelled before the end");
    assert!(matches!(
        hub.resume(&run.id).await,
        Err(HubError::WrongState { .. })
    ));
    hub.shutdown().await;
}

/// A run limited to pools is allocated and sent requests only on agents whose `pool` label
/// is one of them; a pool without enough agents is named in the refusal; a bad pool name is
/// refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_of_pools_uses_only_the_agents_of_its_pools() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(30, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let mut agents = Vec::new();
    for (id, pool) in [("a1", "eu"), ("a2", "eu"), ("a3", "us")] {
        let mut config = agent_config(dir.path(), id);
        config.labels.insert("pool".into(), pool.into());
        agents.push(start_agent_with(config, &bus).await);
    }
    within("three live agents", 10, hub.wait_for_live_agents(3)).await;
    let in_pools = |strategy: Strategy, pools: &[&str]| RunRequest {
        pools: pools.iter().map(|p| (*p).to_owned()).collect(),
        ..request(&site, strategy, OnAgentLost::Fail)
    };

    let us = hub
        .submit(in_pools(Strategy::Random, &["us"]))
        .await
        .unwrap();
    assert_eq!(us.pools, ["us"]);
    let eu = hub
        .submit(in_pools(Strategy::Fixed(2), &["eu"]))
        .await
        .unwrap();
    let mut eu_agents: Vec<&str> = eu.agents.iter().map(AgentId::as_str).collect();
    eu_agents.sort();
    assert_eq!(eu_agents, ["a1", "a2"]);
    for (id, only) in [(&us.id, vec!["a3"]), (&eu.id, vec!["a1", "a2"])] {
        let done = within("a run", 60, hub.wait_run(id)).await.unwrap();
        assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
        assert_every_page_once(&done, &site);
        let used: Vec<&str> = done.stats.by_agent.keys().map(String::as_str).collect();
        assert!(used.iter().all(|a| only.contains(a)), "{id}: {used:?}");
    }

    let short = hub
        .submit(in_pools(Strategy::Fixed(2), &["us"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        short.contains("in pools us") && short.contains("alive (a3)"),
        "{short}"
    );
    let bad = hub
        .submit(in_pools(Strategy::Random, &["eu", "no pool"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&bad, HubError::BadRun(m) if m.starts_with("pools[1]:")),
        "{bad}"
    );
    let both = hub
        .submit(in_pools(Strategy::Fixed(3), &["eu", "us"]))
        .await
        .unwrap();
    assert_eq!(both.agents.len(), 3);
    within("the last run", 60, hub.wait_run(&both.id))
        .await
        .unwrap();
    hub.shutdown().await;
}

/// A drained agent takes no new work — new runs are not allocated on it, `random` runs send it
/// nothing — but finishes the run that holds it; the drain is stored (a restarted hub keeps
/// it), is admin-only, and ends with `undrain`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drained_agent_takes_no_new_work_and_finishes_its_runs() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(300, 30).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    let _b = start_agent(dir.path(), &bus, "a2").await;
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    let (base, admin) = serve(&hub).await;
    // Slow enough to be running still when a1 is drained.
    let mut slow = request(&site, Strategy::Fixed(2), OnAgentLost::Fail);
    slow.max_pending = Some(4);
    let held = hub.submit(slow).await.unwrap();
    within("some pages", 30, site.wait_for_requests(10)).await;

    let refused = member(&admin, &base)
        .await
        .drain_agent("a1")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden), "{refused}");
    let unknown = admin.drain_agent("nobody").await.unwrap_err();
    assert_eq!(unknown.code(), Some(ErrorCode::NotFound), "{unknown}");
    let view = admin.drain_agent("a1").await.unwrap();
    assert!(view.draining);
    let by_a1 = |v: &RunView| v.stats.by_agent.get("a1").copied().unwrap_or(0);
    let before = by_a1(&hub.run(&held.id).await.unwrap());

    // No new run on a1: two agents are needed, one is open.
    let err = hub
        .submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
        .await
        .unwrap_err();
    assert!(
        // (Run ids are hex and may hold "a1": the alive list is in parentheses.)
        err.to_string().contains("alive (a2)"),
        "{err}"
    );
    let fixed = hub
        .submit(request(&site, Strategy::Fixed(1), OnAgentLost::Fail))
        .await
        .unwrap();
    assert_eq!(fixed.agents, [AgentId::new("a2")]);
    let random = hub
        .submit(request(&site, Strategy::Random, OnAgentLost::Fail))
        .await
        .unwrap();

    // The run that holds a1 goes on with it and ends; the random run never used it.
    let done = within("the held run", 60, hub.wait_run(&held.id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    assert!(by_a1(&done) > before, "a drained agent finishes its run");
    for id in [&fixed.id, &random.id] {
        let done = within("a run", 60, hub.wait_run(id)).await.unwrap();
        assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
        assert_eq!(by_a1(&done), 0, "{id}: sent to the drained agent");
    }

    // Stored: a restarted hub keeps the drain; undrain opens the agent again.
    hub.shutdown().await;
    let hub = start_hub(dir.path(), &bus).await;
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    assert!(
        hub.agents()
            .iter()
            .any(|a| a.id.as_str() == "a1" && a.draining),
        "{:?}",
        hub.agents()
    );
    assert!(
        hub.submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
            .await
            .is_err()
    );
    let view = hub.drain_agent(&AgentId::new("a1"), false).await.unwrap();
    assert!(!view.draining);
    let both = hub
        .submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
        .await
        .unwrap();
    assert_eq!(both.agents.len(), 2);
    within("the last run", 60, hub.wait_run(&both.id))
        .await
        .unwrap();
    hub.shutdown().await;
}

/// A drain made through one hub holds on another hub of the same store within seconds (it
/// re-reads the drained agents), and so does its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_through_one_hub_holds_on_another_hub_of_the_store() {
    let Some(pg) = silk_store::testing::PgTestSchema::from_env() else {
        return;
    };
    pg.create().await.expect("test schema");
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(10, 0).await;
    let start = |name: &'static str| {
        let mut config = hub_config(&dir.path().join(name));
        config.store_url = Some(pg.url.clone());
        config.secret_key = Some("5a".repeat(32));
        config.hub_id = Some(name.into());
        let bus = bus.clone();
        async move {
            silk_hub::Hub::start(
                config,
                std::sync::Arc::new(bus),
                std::sync::Arc::new(silk_core::SystemClock),
            )
            .await
            .expect("hub starts on postgres")
        }
    };
    let a = start("hub-a").await;
    let b = start("hub-b").await;
    let _x = start_agent(dir.path(), &bus, "a1").await;
    let _y = start_agent(dir.path(), &bus, "a2").await;
    within("two live agents on hub-a", 10, a.wait_for_live_agents(2)).await;
    within("two live agents on hub-b", 10, b.wait_for_live_agents(2)).await;
    let a1 = AgentId::new("a1");
    let draining_on_b = |draining: bool| {
        let b = &b;
        async move {
            until("hub-b sees the drain change", async || {
                b.agents()
                    .iter()
                    .any(|v| v.id.as_str() == "a1" && v.draining == draining)
                    .then_some(())
            })
            .await;
        }
    };
    a.drain_agent(&a1, true).await.unwrap();
    draining_on_b(true).await;
    let refused = b
        .submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("alive (a2)"), "{refused}");
    a.drain_agent(&a1, false).await.unwrap();
    draining_on_b(false).await;
    let run = b
        .submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
        .await
        .unwrap();
    assert_eq!(run.agents.len(), 2);
    within("the run", 60, b.wait_run(&run.id)).await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
    pg.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hub_restarted_mid_run_resumes_it_and_every_page_is_written_once() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(80, 10).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    let _b = start_agent(dir.path(), &bus, "a2").await;
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    let run = hub
        .submit(request(&site, Strategy::Fixed(2), OnAgentLost::Fail))
        .await
        .unwrap();
    within("some pages", 30, site.wait_for_requests(60)).await;
    hub.shutdown().await;
    let before = hub.run(&run.id).await.unwrap();
    assert_eq!(
        before.state,
        RunState::Running,
        "a stopped hub leaves the run running"
    );

    let hub = start_hub(dir.path(), &bus).await;
    let resumed = hub
        .run(&run.id)
        .await
        .expect("the run is known after a restart");
    assert_eq!(resumed.state, RunState::Running);
    assert_eq!(resumed.agents, run.agents, "the allocation is stored");
    let done = within("the resumed run", 60, hub.wait_run(&run.id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    // The count goes on from the item log: the items written before the restart count.
    assert_eq!(done.stats.items, items_once(&done).len() as u64);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_api_answers_json_with_codes() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(10, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = hub.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let token = hub
        .ensure_admin_token()
        .await
        .unwrap()
        .expect("first start makes a token");
    assert!(
        hub.ensure_admin_token().await.unwrap().is_none(),
        "only once"
    );
    let url = reqwest::Url::parse(&base).unwrap();
    let anonymous = Client::new(url.clone(), None).unwrap();
    let e = anonymous.agents().await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(401), Some(ErrorCode::Unauthorized))
    );
    let wrong = Client::new(url.clone(), Some(format!("{token}x"))).unwrap();
    assert_eq!(wrong.agents().await.unwrap_err().status(), Some(401));
    let http = Client::new(url, Some(token)).unwrap();

    let agents = http.agents().await.unwrap();
    assert_eq!(agents[0].id.as_str(), "a1");
    assert_eq!(agents[0].state, AgentState::Alive);

    // A body no typed client would send.
    let e = http
        .request(
            reqwest::Method::POST,
            "/api/v1/runs",
            Some(&serde_json::json!({"spider": 1})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(400), Some(ErrorCode::BadRequest))
    );
    assert!(e.message().unwrap().contains("spider"), "{e}");

    let mut fixed = RunRequest {
        spider: spider(&site),
        program: None,
        strategy: Some(Strategy::Fixed(3)),
        on_agent_lost: None,
        pools: Vec::new(),
        max_pending: None,
        stall_timeout_ms: None,
        downloader: None,
        sinks: None,
        fail_if: None,
    };
    let refused = http.start_run(&fixed).await.unwrap_err();
    assert_eq!(refused.status(), Some(409));
    assert_eq!(refused.code(), Some(ErrorCode::AllocationFailed));

    fixed.strategy = Some(Strategy::Random);
    let created = http.start_run(&fixed).await.unwrap();
    assert_eq!(created.agents, vec![silk_core::AgentId::from("a1")]);
    within("the run", 30, hub.wait_run(&created.id))
        .await
        .unwrap();
    let got = http.run(created.id.as_str()).await.unwrap();
    assert_eq!(got.state, RunState::Succeeded, "{got:?}");
    assert!(got.stats.success > 0);

    let e = http.run("nope").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotFound));
    let e = http.pause_run(created.id.as_str()).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(409), Some(ErrorCode::WrongState))
    );
    hub.shutdown().await;
}

/// Run ownership (`ownership`): when another hub holds a run's lease (this hub was away
/// longer than `ownership_ttl_ms`), the hub stops driving the run without writing anything,
/// and control calls name the hub that drives it; once the lease is free again the hub
/// adopts the run back and finishes it, every page once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hub_that_loses_a_runs_lease_lets_the_run_go_and_adopts_it_when_it_is_free() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(200, 20).await;
    let mut config = hub_config(dir.path());
    config.ownership_ttl_ms = 600;
    let hub = start_hub_with(config, &bus).await;
    let _a = start_agent(dir.path(), &bus, "a1").await;
    let _b = start_agent(dir.path(), &bus, "a2").await;
    within("two live agents", 10, hub.wait_for_live_agents(2)).await;
    let mut slow = request(&site, Strategy::Fixed(2), OnAgentLost::Fail);
    slow.max_pending = Some(4);
    let run = hub.submit(slow).await.unwrap();
    assert_eq!(run.hub.as_ref(), Some(hub.hub_id()));
    assert_eq!(run.frontier, "embedded");
    within("some pages", 30, site.wait_for_requests(30)).await;

    // Another hub takes the lease, as if this one had been away longer than its TTL.
    let store = hub.store().clone();
    let lease = format!("run:{}", run.id);
    assert!(
        store
            .release_lease(&lease, hub.hub_id().as_str())
            .await
            .unwrap()
    );
    assert!(
        store
            .acquire_lease(&lease, "hub-other", 60_000)
            .await
            .unwrap()
    );
    let let_go = within("the hub to let the run go", 10, hub.wait_run(&run.id))
        .await
        .unwrap();
    assert_eq!(
        let_go.state,
        RunState::Running,
        "nothing written: {let_go:?}"
    );
    assert_eq!(let_go.hub.as_ref(), Some(hub.hub_id()));
    match hub.pause(&run.id).await {
        Err(HubError::OwnedElsewhere { hub: other, .. }) => assert_eq!(other, "hub-other"),
        other => panic!("expected owned_elsewhere, got {other:?}"),
    }

    // The other hub gives it back (or its lease expires): this hub adopts the run again.
    assert!(store.release_lease(&lease, "hub-other").await.unwrap());
    within("the run to be adopted back", 10, hub.wait_driving(&run.id)).await;
    let done = within("the adopted run", 60, hub.wait_run(&run.id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_every_page_once(&done, &site);
    assert_eq!(
        store.get_lease(&lease).await.unwrap(),
        None,
        "an ended run's lease is given back"
    );
    hub.shutdown().await;
}

/// An agent that does not allow loopback refuses a run's loopback site: the start page fails
/// with `private_address` (for good, no retries) and nothing reaches the site.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_does_not_reach_private_addresses_it_does_not_allow() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(5, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let config = silk_agent::AgentConfig {
        allow_networks: Vec::new(),
        ..agent_config(dir.path(), "a1")
    };
    let _a = start_agent_with(config, &bus).await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let run = hub
        .submit(request(&site, Strategy::Fixed(1), OnAgentLost::Fail))
        .await
        .unwrap();
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.stats.success, 0, "{:?}", done.stats);
    assert!(done.stats.failed >= 1, "{:?}", done.stats);
    assert_eq!(done.stats.retries, 0, "a private address is not retried");
    assert_eq!(site.stats().total_requests, 0, "nothing reached the site");
    hub.shutdown().await;
}
