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
    http: reqwest::Client,
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
            http: reqwest::Client::new(),
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
            .arg(self.path(id));
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

    async fn get(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.server());
        let resp = self.http.get(&url).bearer_auth(self.token()).send().await;
        match resp {
            Ok(r) => serde_json::from_slice(&r.bytes().await.unwrap()).unwrap(),
            Err(_) => Value::Null,
        }
    }

    async fn agent_states(&self) -> Vec<(String, String)> {
        let agents = self.get("/api/v1/agents").await;
        agents
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        (
                            x["id"].as_str().unwrap_or("").to_owned(),
                            x["state"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Polls the hub until `check` holds (each poll is an HTTP request; 30 s at most).
    async fn until<F: Fn(&Value) -> bool>(&self, what: &str, path: &str, check: F) -> Value {
        let mut last = Value::Null;
        let every = Duration::from_millis(100);
        let passed = silk_testkit::eventually(Duration::from_secs(60), every, async || {
            last = self.get(path).await;
            check(&last).then(|| last.clone())
        })
        .await;
        passed.unwrap_or_else(|| {
            panic!(
                "timed out waiting for {what}; last answer: {last}\n{}",
                self.logs()
            )
        })
    }

    async fn wait_agents_alive(&self, n: usize) {
        self.until(&format!("{n} live agents"), "/api/v1/agents", |v| {
            v.as_array()
                .is_some_and(|a| a.iter().filter(|x| x["state"] == "alive").count() >= n)
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

    async fn run(&self, id: &str) -> Value {
        self.get(&format!("/api/v1/runs/{id}")).await
    }

    async fn wait_run(&self, id: &str) -> Value {
        self.until("the run to end", &format!("/api/v1/runs/{id}"), |v| {
            matches!(
                v["state"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            )
        })
        .await
    }

    /// The agent that fetched most of the run so far.
    async fn busiest_agent(&self, id: &str) -> String {
        let run = self.run(id).await;
        run["stats"]["by_agent"]
            .as_object()
            .and_then(|m| {
                m.iter()
                    .max_by_key(|(_, n)| n.as_u64())
                    .map(|(k, _)| k.clone())
            })
            .expect("an agent fetched")
    }

    fn assert_every_page_once(&self, run: &Value) {
        let path = run["items_path"].as_str().expect("items_path");
        let text = std::fs::read_to_string(path).expect("items file");
        let items: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        self.assert_items_are_every_page_once(&items);
    }

    /// A run's items as the hub's API pages them.
    async fn api_items(&self, id: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut cursor = 0;
        loop {
            let page = self
                .get(&format!(
                    "/api/v1/runs/{id}/items?cursor={cursor}&limit=1000"
                ))
                .await;
            items.extend(
                page["items"]
                    .as_array()
                    .expect("an items page")
                    .iter()
                    .cloned(),
            );
            cursor = page["next_cursor"].as_u64().expect("next_cursor");
            if page["done"] == true {
                return items;
            }
        }
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
    assert_eq!(fleet.run(&id).await["state"], "running", "killed mid-run");
    let killed = fleet.kill_agent(&victim);
    fleet
        .until("the killed agent to be dead", "/api/v1/agents", |v| {
            v.as_array().is_some_and(|a| {
                a.iter()
                    .any(|x| x["id"] == victim.as_str() && x["state"] == "dead")
            })
        })
        .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_millis(DEAD_AFTER_S * 1000 + 500),
        "declared dead after {took:?}, dead_after is {DEAD_AFTER_S} s"
    );
    let run = fleet.wait_run(&id).await;
    assert_eq!(run["state"], "succeeded", "{run}\n{}", fleet.logs());
    fleet.assert_every_page_once(&run);
    let states = fleet.agent_states().await;
    assert!(
        states.contains(&(victim.clone(), "dead".into())),
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
    let allocated: Vec<String> = serde_json::from_value(started["agents"].clone()).unwrap();
    assert_eq!(allocated.len(), 2);
    fleet.site.wait_for_requests(120).await;
    let victim = fleet.busiest_agent(&id).await;
    assert!(allocated.contains(&victim));
    assert_eq!(fleet.run(&id).await["state"], "running", "killed mid-run");
    fleet.kill_agent(&victim);
    let run = fleet.wait_run(&id).await;
    assert_eq!(run["state"], "succeeded", "{run}\n{}", fleet.logs());
    fleet.assert_every_page_once(&run);
    let stats = &run["stats"];
    assert_eq!(stats["affinity_broken"], 0, "{stats}");
    assert!(stats["affinity_kept"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["reassigned"].as_u64().unwrap() > 0, "{stats}");
    let fetchers: Vec<String> = stats["by_agent"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert!(
        fetchers.iter().all(|f| allocated.contains(f)),
        "only the allocated agents fetch: {fetchers:?} vs {allocated:?}"
    );

    // fail: losing an allocated agent fails the run, naming it.
    let survivor_count = 2;
    fleet.wait_agents_alive(survivor_count).await;
    let id = fleet.submit("chained:2", "fail", 2);
    let started = fleet.run(&id).await;
    let allocated: Vec<String> = serde_json::from_value(started["agents"].clone()).unwrap();
    fleet
        .site
        .wait_for_requests(fleet.site.stats().total_requests + 60)
        .await;
    let victim = fleet.busiest_agent(&id).await;
    assert!(allocated.contains(&victim));
    assert_eq!(fleet.run(&id).await["state"], "running", "killed mid-run");
    fleet.kill_agent(&victim);
    let run = fleet.wait_run(&id).await;
    assert_eq!(run["state"], "failed", "{run}");
    let reason = run["reason"].as_str().unwrap();
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
    assert_eq!(fleet.run(&id).await["state"], "running", "killed mid-run");
    fleet.nats.as_mut().unwrap().kill();
    // An outage: agents and hub see the bus down (their reconnects run meanwhile).
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.start_nats();
    let run = fleet.wait_run(&id).await;
    assert_eq!(run["state"], "succeeded", "{run}\n{}", fleet.logs());
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
    assert_eq!(fleet.run(&id).await["state"], "running", "killed mid-run");
    fleet.hub.as_mut().unwrap().kill();
    // While the hub is down a new agent registers: its registration waits on the bus.
    fleet.start_agent("a3");
    fleet.start_hub();
    let run = fleet.wait_run(&id).await;
    assert_eq!(run["state"], "succeeded", "{run}\n{}", fleet.logs());
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
    assert_eq!(started["hub"], "hub-a", "{started}");
    assert_eq!(started["frontier"], "redis", "{started}");
    fleet.site.wait_for_requests(120).await;
    assert_eq!(fleet.run(&id).await["state"], "running", "killed mid-run");
    fleet.hub.as_mut().unwrap().kill();
    // From now on the API of the surviving hub answers.
    fleet.hub_port = port_b;
    fleet
        .until(
            "hub-b to adopt the run",
            &format!("/api/v1/runs/{id}"),
            |v| v["hub"] == "hub-b",
        )
        .await;
    let run = fleet.wait_run(&id).await;
    assert_eq!(run["state"], "succeeded", "{run}\n{}", fleet.logs());
    let items = fleet.api_items(&id).await;
    fleet.assert_items_are_every_page_once(&items);
    assert_eq!(
        run["stats"]["items"].as_u64(),
        Some(items.len() as u64),
        "{run}"
    );
    let log = std::fs::read_to_string(fleet.path("hub-b.log")).unwrap();
    assert!(log.contains("adopted from hub `hub-a`"), "{}", fleet.logs());
    pg.drop_schema().await;
}
