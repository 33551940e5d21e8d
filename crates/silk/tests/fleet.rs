//! The failure matrix of the download center with real processes: `silk hub` and `silk
//! agent`s over a test-owned `nats-server` (JetStream, file store, free port) on loopback,
//! crawling the demo site. Each test is one row of design §4's matrix where the point is a
//! process dying: an agent (SIGKILL), an agent of a chained run (both `on_agent_lost`
//! policies), the nats-server (SIGKILL and restart), the hub (SIGKILL and restart), one of
//! two hubs sharing a PostgreSQL store and a Redis for frontiers (SIGKILL: the other adopts
//! its run; it also needs `SILK_TEST_POSTGRES` and `SILK_TEST_REDIS`).
//!
//! `nats-server` must be on the PATH (`.ci/run` installs it); without it the tests print
//! "skipped: …" and pass, except under CI (`CI` set), where they fail.

mod cli_support;

use cli_support::Proc;
use serde_json::Value;
use silk_api::agents::{AgentState, AgentView};
use silk_api::client::Client;
use silk_api::runs::{RunState, RunView};
use silk_testkit::demo::{DemoConfig, DemoSite};
use silk_testkit::free_port;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Spawns `cmd` and waits until a line of its stdout or stderr contains `ready`.
fn spawn_ready(cmd: Command, name: &str, ready: &str, log: &Path) -> Proc {
    let mut proc = Proc::spawn(cmd, name, log);
    proc.wait_line(ready);
    proc
}

fn have_nats_server() -> bool {
    let found = Command::new("nats-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "nats-server is not installed, and CI must run the fleet tests"
        );
        println!("skipped: nats-server is not installed");
    }
    found
}

/// The cluster of one test: its dir, nats-server, hub, agents and demo site.
struct Fleet {
    dir: TempDir,
    nats_port: u16,
    nats: Option<Proc>,
    hub_port: u16,
    hub: Option<Proc>,
    agents: Vec<Proc>,
    site: DemoSite,
    /// Extra arguments of every `silk hub` of the test.
    hub_args: Vec<String>,
}

const DEAD_AFTER_S: u64 = 4;

impl Fleet {
    async fn start(agents: usize, pages: u32, latency_ms: u64) -> Fleet {
        Self::start_with(agents, pages, latency_ms, Vec::new()).await
    }

    async fn start_with(
        agents: usize,
        pages: u32,
        latency_ms: u64,
        hub_args: Vec<String>,
    ) -> Fleet {
        let dir = TempDir::new().unwrap();
        let site = DemoSite::start(DemoConfig {
            hosts: 3,
            pages,
            latency_ms: Some(latency_ms),
            ..DemoConfig::default()
        })
        .await
        .expect("demo site");
        let mut fleet = Fleet {
            nats_port: free_port(),
            hub_port: free_port(),
            dir,
            nats: None,
            hub: None,
            agents: Vec::new(),
            site,
            hub_args,
        };
        fleet.start_nats();
        fleet.start_hub();
        for k in 1..=agents {
            fleet.start_agent(&format!("a{k}"));
        }
        fleet.wait_agents_alive(agents).await;
        fleet
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn bus(&self) -> String {
        format!("nats://127.0.0.1:{}", self.nats_port)
    }

    fn server(&self) -> String {
        format!("http://127.0.0.1:{}", self.hub_port)
    }

    fn start_nats(&mut self) {
        let mut cmd = Command::new("nats-server");
        cmd.args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.nats_port.to_string())
            .arg("-sd")
            .arg(self.path("nats"));
        self.nats = Some(spawn_ready(
            cmd,
            "nats-server",
            "Server is ready",
            &self.path("nats.log"),
        ));
    }

    fn silk(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_silk"));
        cmd.env("RUST_LOG", "info");
        cmd
    }

    fn start_hub(&mut self) {
        self.hub = Some(self.spawn_hub("hub", self.hub_port));
    }

    /// Starts a `silk hub` named `name` (its data dir and log) on `port`.
    fn spawn_hub(&self, name: &str, port: u16) -> Proc {
        let mut cmd = self.silk();
        cmd.arg("hub")
            .arg("--bus")
            .arg(self.bus())
            .arg("--namespace")
            .arg("fleet")
            .arg("--data-dir")
            .arg(self.path(name))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--dead-after")
            .arg(format!("{DEAD_AFTER_S}s"))
            .args(&self.hub_args);
        spawn_ready(
            cmd,
            name,
            "silk hub: API on",
            &self.path(&format!("{name}.log")),
        )
    }

    fn start_agent(&mut self, id: &str) {
        let mut cmd = self.silk();
        cmd.arg("agent")
            .arg("--bus")
            .arg(self.bus())
            .arg("--namespace")
            .arg("fleet")
            .arg("--id")
            .arg(id)
            .arg("--capacity")
            .arg("16")
            .arg("--data-dir")
            .arg(self.path(id))
            .args(["--allow-network", "127.0.0.0/8"])
            .arg("--allow-programs");
        let log = self.path(&format!("{id}.log"));
        self.agents
            .push(spawn_ready(cmd, id, &format!("agent {id}"), &log));
    }

    fn kill_agent(&mut self, id: &str) -> Instant {
        let agent = self
            .agents
            .iter_mut()
            .find(|p| p.name == id)
            .unwrap_or_else(|| panic!("no agent {id}"));
        agent.kill();
        Instant::now()
    }

    /// The hub's admin token (written at its first start).
    fn token(&self) -> String {
        std::fs::read_to_string(self.path("hub").join("admin.token"))
            .map(|t| t.trim().to_owned())
            .unwrap_or_default()
    }

    /// The typed API client of the hub that answers now, with its admin token.
    fn client(&self) -> Client {
        let url = reqwest::Url::parse(&self.server()).unwrap();
        Client::new(url, Some(self.token()).filter(|t| !t.is_empty())).unwrap()
    }

    /// The agents as the hub lists them (none while it does not answer).
    async fn agents(&self) -> Vec<AgentView> {
        self.client().agents().await.unwrap_or_default()
    }

    async fn agent_states(&self) -> Vec<(String, AgentState)> {
        self.agents()
            .await
            .into_iter()
            .map(|a| (a.id.to_string(), a.state))
            .collect()
    }

    /// Polls the hub until `check` holds (60 s at most).
    async fn until<T>(&self, what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
        let every = Duration::from_millis(100);
        silk_testkit::eventually(Duration::from_secs(60), every, check)
            .await
            .unwrap_or_else(|| panic!("timed out waiting for {what}\n{}", self.logs()))
    }

    async fn wait_agents_alive(&self, n: usize) {
        self.until(&format!("{n} live agents"), async || {
            let alive = self.agents().await;
            (alive
                .iter()
                .filter(|a| a.state == AgentState::Alive)
                .count()
                >= n)
                .then_some(())
        })
        .await;
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                out.push_str(&format!("--- {} ---\n", p.display()));
                for l in tail.into_iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }

    fn spider(&self, concurrency: u32) -> PathBuf {
        let hosts: Vec<String> = self
            .site
            .host_ips()
            .iter()
            .map(|ip| ip.to_string())
            .collect();
        let yaml = format!(
            "name: fleet\nstart_urls: ['{}']\nallowed_domains: [{}]\nfollow: [{{deny: ['/calendar/']}}]\n\
             item_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\n\
             per_host_concurrency: {concurrency}\nper_host_delay_ms: 0\ntimeout_ms: 3000\nlease_timeout_ms: 6000\n",
            self.site.start_url(),
            hosts.join(", ")
        );
        let path = self.path("spider.yaml");
        std::fs::write(&path, yaml).unwrap();
        path
    }

    /// Submits a run with `silk run` and returns its id.
    fn submit(&self, strategy: &str, policy: &str, concurrency: u32) -> String {
        let out = self
            .silk()
            .arg("run")
            .arg(self.spider(concurrency))
            .arg("--server")
            .arg(self.server())
            .arg("--strategy")
            .arg(strategy)
            .arg("--on-agent-lost")
            .arg(policy)
            .arg("--max-pending")
            .arg("64")
            .env("SILK_TOKEN", self.token())
            .output()
            .expect("silk run");
        assert!(
            out.status.success(),
            "silk run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    async fn run(&self, id: &str) -> RunView {
        self.client()
            .run(id)
            .await
            .unwrap_or_else(|e| panic!("run {id}: {e}\n{}", self.logs()))
    }

    async fn wait_run(&self, id: &str) -> RunView {
        self.until("the run to end", async || {
            let run = self.client().run(id).await.ok()?;
            run.is_terminal().then_some(run)
        })
        .await
    }

    /// The agent that fetched most of the run so far.
    async fn busiest_agent(&self, id: &str) -> String {
        let run = self.run(id).await;
        run.stats
            .by_agent
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(k, _)| k.clone())
            .expect("an agent fetched")
    }

    fn assert_every_page_once(&self, run: &RunView) {
        let path = run.items_path.as_ref().expect("items_path");
        let text = std::fs::read_to_string(path).expect("items file");
        let items: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        self.assert_items_are_every_page_once(&items);
    }

    /// A run's items as the hub's API pages them.
    async fn api_items(&self, id: &str) -> Vec<Value> {
        self.client().all_items(id).await.expect("the run's items")
    }

    fn assert_items_are_every_page_once(&self, items: &[Value]) {
        let urls: Vec<String> = items
            .iter()
            .map(|item| item["url"].as_str().expect("an item url").to_owned())
            .collect();
        let unique: BTreeSet<String> = urls.iter().cloned().collect();
        assert_eq!(urls.len(), unique.len(), "an item is in the output twice");
        let expected: BTreeSet<String> = self
            .site
            .expected_pages()
            .into_iter()
            .filter(|u| u.contains("/p/"))
            .collect();
        assert_eq!(unique, expected, "the output is not every content page");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_run_is_declared_dead_and_the_run_finishes_with_every_page_once() {
    if !have_nats_server() {
        return;
    }
    let mut fleet = Fleet::start(3, 150, 20).await;
    let id = fleet.submit("random", "fail", 2);
    fleet.site.wait_for_requests(120).await;
    let victim = fleet.busiest_agent(&id).await;
    assert_eq!(
        fleet.run(&id).await.state,
        RunState::Running,
        "killed mid-run"
    );
    let killed = fleet.kill_agent(&victim);
    fleet
        .until("the killed agent to be dead", async || {
            let states = fleet.agent_states().await;
            states
                .contains(&(victim.clone(), AgentState::Dead))
                .then_some(())
        })
        .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_millis(DEAD_AFTER_S * 1000 + 500),
        "declared dead after {took:?}, dead_after is {DEAD_AFTER_S} s"
    );
    let run = fleet.wait_run(&id).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}\n{}", fleet.logs());
    fleet.assert_every_page_once(&run);
    let states = fleet.agent_states().await;
    assert!(
        states.contains(&(victim.clone(), AgentState::Dead)),
        "{states:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chained_runs_keep_affinity_and_follow_on_agent_lost() {
    if !have_nats_server() {
        return;
    }
    // reassign: the dead agent's pages move to the other allocated agent; every page once.
    let mut fleet = Fleet::start(3, 150, 20).await;
    let id = fleet.submit("chained:2", "reassign", 2);
    let started = fleet.run(&id).await;
    let allocated: Vec<String> = started.agents.iter().map(ToString::to_string).collect();
    assert_eq!(allocated.len(), 2);
    fleet.site.wait_for_requests(120).await;
    let victim = fleet.busiest_agent(&id).await;
    assert!(allocated.contains(&victim));
    assert_eq!(
        fleet.run(&id).await.state,
        RunState::Running,
        "killed mid-run"
    );
    fleet.kill_agent(&victim);
    let run = fleet.wait_run(&id).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}\n{}", fleet.logs());
    fleet.assert_every_page_once(&run);
    let stats = &run.stats;
    assert_eq!(stats.affinity_broken, 0, "{stats:?}");
    assert!(stats.affinity_kept > 0, "{stats:?}");
    assert!(stats.reassigned > 0, "{stats:?}");
    let fetchers: Vec<String> = stats.by_agent.keys().cloned().collect();
    assert!(
        fetchers.iter().all(|f| allocated.contains(f)),
        "only the allocated agents fetch: {fetchers:?} vs {allocated:?}"
    );

    // fail: losing an allocated agent fails the run, naming it.
    let survivor_count = 2;
    fleet.wait_agents_alive(survivor_count).await;
    let id = fleet.submit("chained:2", "fail", 2);
    let started = fleet.run(&id).await;
    let allocated: Vec<String> = started.agents.iter().map(ToString::to_string).collect();
    fleet
        .site
        .wait_for_requests(fleet.site.stats().total_requests + 60)
        .await;
    let victim = fleet.busiest_agent(&id).await;
    assert!(allocated.contains(&victim));
    assert_eq!(
        fleet.run(&id).await.state,
        RunState::Running,
        "killed mid-run"
    );
    fleet.kill_agent(&victim);
    let run = fleet.wait_run(&id).await;
    assert_eq!(run.state, RunState::Failed, "{run:?}");
    let reason = run.reason.as_deref().unwrap();
    assert!(
        reason.contains(&victim) && reason.contains("on_agent_lost"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_killed_and_restarted_mid_run_loses_nothing() {
    if !have_nats_server() {
        return;
    }
    let mut fleet = Fleet::start(2, 150, 20).await;
    let id = fleet.submit("random", "fail", 2);
    fleet.site.wait_for_requests(120).await;
    assert_eq!(
        fleet.run(&id).await.state,
        RunState::Running,
        "killed mid-run"
    );
    fleet.nats.as_mut().unwrap().kill();
    // An outage: agents and hub see the bus down (their reconnects run meanwhile).
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.start_nats();
    let run = fleet.wait_run(&id).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}\n{}", fleet.logs());
    fleet.assert_every_page_once(&run);
    fleet.wait_agents_alive(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_killed_and_restarted_resumes_the_run_and_processes_registrations() {
    if !have_nats_server() {
        return;
    }
    let mut fleet = Fleet::start(2, 150, 20).await;
    let id = fleet.submit("random", "fail", 2);
    fleet.site.wait_for_requests(120).await;
    assert_eq!(
        fleet.run(&id).await.state,
        RunState::Running,
        "killed mid-run"
    );
    fleet.hub.as_mut().unwrap().kill();
    // While the hub is down a new agent registers: its registration waits on the bus.
    fleet.start_agent("a3");
    fleet.start_hub();
    let run = fleet.wait_run(&id).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}\n{}", fleet.logs());
    fleet.assert_every_page_once(&run);
    fleet.wait_agents_alive(3).await;
    let states = fleet.agent_states().await;
    assert!(states.iter().any(|(id, _)| id == "a3"), "{states:?}");
}

/// Design §4, "one of two hubs dies → the other carries on; no run is lost": two `silk hub`
/// processes share one PostgreSQL store, one Redis (run frontiers) and the bus. The hub that
/// drives a run is SIGKILLed mid-run; the other adopts the run once its lease expires and
/// finishes it, with every page once in the run's items (kept in the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_hubs_killed_mid_run_the_other_adopts_the_run_and_finishes_it() {
    if !have_nats_server() {
        return;
    }
    let Some(redis) = silk_testkit::service_url("SILK_TEST_REDIS") else {
        return;
    };
    two_hubs_one_killed(redis).await;
}

/// The same with the run frontiers on a Redis Cluster of the test's own (3 masters with a
/// replica each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hubs_share_run_frontiers_on_a_redis_cluster() {
    if !have_nats_server() {
        return;
    }
    let Some(cluster) = silk_testkit::redis_cluster_for_test(3, 1) else {
        return;
    };
    two_hubs_one_killed(cluster.url()).await;
}

async fn two_hubs_one_killed(redis: String) {
    let Some(pg) = silk_store::testing::PgTestSchema::from_env() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the two-hub test: set SILK_TEST_POSTGRES"
        );
        return;
    };
    pg.create().await.expect("test schema");
    let args = vec![
        "--store".to_owned(),
        pg.url.clone(),
        "--frontier".to_owned(),
        redis,
        "--ownership-ttl".to_owned(),
        "3s".to_owned(),
        "--no-auth".to_owned(),
        // Hubs sharing a store share the key of its secrets (a hub with another key refuses
        // to start).
        "--secret-key".to_owned(),
        "ab".repeat(32),
    ];
    let mut fleet = Fleet::start_with(
        2,
        150,
        20,
        [args.clone(), vec!["--id".into(), "hub-a".into()]].concat(),
    )
    .await;
    let port_b = free_port();
    fleet.hub_args = [args, vec!["--id".into(), "hub-b".into()]].concat();
    let _hub_b = fleet.spawn_hub("hub-b", port_b);
    let id = fleet.submit("random", "fail", 2);
    let started = fleet.run(&id).await;
    assert_eq!(
        started.hub.as_ref().map(|h| h.as_str()),
        Some("hub-a"),
        "{started:?}"
    );
    assert_eq!(started.frontier, "redis", "{started:?}");
    fleet.site.wait_for_requests(120).await;
    assert_eq!(
        fleet.run(&id).await.state,
        RunState::Running,
        "killed mid-run"
    );
    fleet.hub.as_mut().unwrap().kill();
    // From now on the API of the surviving hub answers.
    fleet.hub_port = port_b;
    fleet
        .until("hub-b to adopt the run", async || {
            let run = fleet.client().run(&id).await.ok()?;
            (run.hub.as_ref().map(|h| h.as_str()) == Some("hub-b")).then_some(())
        })
        .await;
    let run = fleet.wait_run(&id).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}\n{}", fleet.logs());
    let items = fleet.api_items(&id).await;
    fleet.assert_items_are_every_page_once(&items);
    assert_eq!(run.stats.items, items.len() as u64, "{run:?}");
    let log = std::fs::read_to_string(fleet.path("hub-b.log")).unwrap();
    assert!(log.contains("adopted from hub `hub-a`"), "{}", fleet.logs());
    pg.drop_schema().await;
}

/// A Scrapy project of the test's own: one spider over the demo site, on Silk by the three
/// settings lines of `silk_sdk.scrapy`.
const SCRAPY_FILES: &[(&str, &str)] = &[
    ("scrapy.cfg", "[settings]\ndefault = shop.settings\n"),
    ("shop/__init__.py", ""),
    (
        "shop/settings.py",
        r#"BOT_NAME = "shop"
SPIDER_MODULES = ["shop.spiders"]
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = 8
# Silk:
SCHEDULER = "silk_sdk.scrapy.Scheduler"
DUPEFILTER_CLASS = "silk_sdk.scrapy.DupeFilter"
ITEM_PIPELINES = {"silk_sdk.scrapy.ItemPipeline": 300}
"#,
    ),
    ("shop/spiders/__init__.py", ""),
    (
        "shop/spiders/demo.py",
        include_str!("../../../examples/scrapy/demo_spider.py"),
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrapy_project_runs_on_two_agents_pauses_and_loses_nothing_when_an_agent_is_killed() {
    if !have_nats_server() {
        return;
    }
    let Some(python) = silk_testkit::service_url("SILK_TEST_PYTHON") else {
        return;
    };
    let mut fleet = Fleet::start(2, 120, 30).await;
    let admin = fleet.client();
    // The project: a local git repository, built as a `command` version (the checkout).
    let repo = silk_testkit::WorkRepo::init(&fleet.path("work"), &fleet.path("git"), "shop");
    repo.commit(SCRAPY_FILES, "the spider");
    repo.push();
    let project: silk_api::projects::ProjectRequest = serde_json::from_value(serde_json::json!({
        "name": "shop", "git_url": format!("file://{}", repo.bare().display()),
        "branch": "main", "build": {"kind": "command"}}))
    .unwrap();
    admin.create_project(&project).await.unwrap();
    let build = silk_api::projects::BuildRequest {
        git_ref: "main".into(),
        version: Some("1.0".into()),
    };
    admin.build_project("shop", &build).await.unwrap();
    fleet
        .until("the version is built", async || {
            let v = admin.version("shop", "1.0").await.ok()?;
            v.state.is_final().then_some(v)
        })
        .await;
    let request: silk_api::runs::RunRequest = serde_json::from_value(serde_json::json!({
        // A killed worker's leases come back after max(lease_timeout_ms, 2 x timeout_ms). The
        // pause below (quiet, then 3 s) must stay shorter than the lease timeout: a paused
        // (SIGSTOPped) worker's leases that expire meanwhile are leased again by the other
        // worker and fetched twice after the resume, which the count of duplicates at the end
        // does not allow for (4 s was too short on a loaded CI machine).
        "spider": "name: shop\nstart_urls: []\nper_host_concurrency: 4\nper_host_delay_ms: 0\ntimeout_ms: 2000\nlease_timeout_ms: 10000\n",
        "program": {"project": "shop", "command": [python, "-m", "scrapy", "crawl", "demo",
                    "-a", format!("start_url={}", fleet.site.start_url())],
                    "workers": 2, "env": {"PYTHONUNBUFFERED": "1"}},
        "strategy": "fixed:2", "on_agent_lost": "reassign"}))
    .unwrap();
    let run = admin.start_run(&request).await.unwrap();
    let id = run.id.to_string();

    // Pause: once what was in flight is done, the site sees nothing for 3 s.
    fleet.site.wait_for_requests(60).await;
    admin.pause_run(&id).await.unwrap();
    let quiet_from = fleet
        .until("the paused workers to go quiet", async || {
            let before = fleet.site.stats().total_requests;
            tokio::time::sleep(Duration::from_millis(500)).await;
            (fleet.site.stats().total_requests == before).then_some(before)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fleet.site.stats().total_requests,
        quiet_from,
        "the site saw requests while the run was paused"
    );
    admin.resume_run(&id).await.unwrap();

    // An agent SIGKILLed mid-run: its worker dies with it, its leases come back, the worker
    // starts again on the other agent.
    fleet.site.wait_for_requests(quiet_from + 60).await;
    fleet.kill_agent("a1");
    // Read after the kill: the dead worker's leases are still out (until they expire).
    let leased_at_kill = fleet.run(&id).await.stats.in_flight;
    let done = match silk_testkit::eventually(
        Duration::from_secs(90),
        Duration::from_millis(200),
        async || {
            let run = admin.run(&id).await.ok()?;
            run.is_terminal().then_some(run)
        },
    )
    .await
    {
        Some(done) => done,
        None => {
            let page = admin
                .logs(
                    &id,
                    &silk_api::logs::LogParams {
                        order: Some("desc".into()),
                        limit: Some(80),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            let lines: Vec<String> = page
                .lines
                .iter()
                .rev()
                .map(|l| format!("{} {} {}", l.level.as_str(), l.source, l.message))
                .collect();
            panic!(
                "the run did not end: {:?}\n{}\n{}",
                fleet.run(&id).await,
                lines.join("\n"),
                fleet.logs()
            );
        }
    };
    assert_eq!(
        done.state,
        RunState::Succeeded,
        "{done:?}\n{}",
        fleet.logs()
    );
    let items = fleet.api_items(&id).await;
    fleet.assert_items_are_every_page_once(&items);
    let stats = fleet.site.stats();
    let repeated: u32 = stats
        .repeated()
        .iter()
        .filter(|(url, _)| url.contains("/p/"))
        .map(|(_, n)| n - 1)
        .sum();
    if u64::from(repeated) > leased_at_kill {
        let page = admin
            .logs(
                &id,
                &silk_api::logs::LogParams {
                    limit: Some(1000),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        for l in page.lines.iter().filter(|l| {
            !l.message.contains("DEBUG: Crawled") && !l.message.contains("DEBUG: Scraped")
        }) {
            eprintln!("{} {} {}", l.level.as_str(), l.source, l.message);
        }
        eprintln!("STATS {:?}", done.stats);
    }
    assert!(
        u64::from(repeated) <= leased_at_kill,
        "{repeated} duplicate fetches, {leased_at_kill} requests were leased at the kill: {:?}",
        stats.repeated().iter().take(20).collect::<Vec<_>>()
    );
    // Scrapy's own log lines are in the run's log.
    let logs = admin
        .logs(
            &id,
            &silk_api::logs::LogParams {
                q: Some("Spider opened".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!logs.lines.is_empty(), "no Scrapy line in the run log");
}
