//! The hub's web UI in a real browser: `silk up` (hub + two local agents) and `silk demo-site`
//! as processes on loopback, Chromium driven over WebDriver (`chromedriver`, through the
//! `fantoccini` client). A user's scenarios, one test per feature over a shared fixture
//! (`signed_in`: platform, API client, browser signed in with the link that carries the
//! token): jobs — create one by pasting a spider, toggle and edit it, see a clear error for a
//! duplicate name, check the agents page, sign out and in again; runs — trigger one, pause it
//! on its page (the API confirms nothing is fetched while paused), look at the dashboard,
//! resume, watch it finish with its log and items, find it in the runs list. One browser runs
//! at a time.
//!
//! Screenshots of each page land in `CARGO_TARGET_TMPDIR/ui-screenshots/` (the path is
//! printed). Debian's `chromium` and `chromium-driver` must be installed (`.ci/run` installs
//! them); without `/usr/bin/chromedriver` the test prints "skipped: …" and passes, except under
//! CI (`CI` set), where it fails.

mod cli_support;

use cli_support::{DEADLINE, Platform, Proc};
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use silk_api::client::Client as ApiClient;
use silk_api::jobs::{Job, JobSpec, Overlap};
use silk_api::runs::{RunState, RunView};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a whole run may take.
const RUN_DEADLINE: Duration = Duration::from_secs(180);
/// How long a paused run is watched for fetches that should not happen.
const PAUSE_WINDOW: Duration = Duration::from_secs(2);
/// Content pages per host of the demo site: the job's run fetches some eight hundred pages.
const PAGES: u32 = 120;
const JOB: &str = "ui-demo";

/// chromedriver, leading its own process group: dropping it kills the group, so the
/// browsers it started die with it even when the test fails before closing its session.
struct Driver {
    proc: Proc,
    port: u16,
}

impl Driver {
    fn start(dir: &Path) -> Driver {
        let port = silk_testkit::free_port();
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}")).process_group(0);
        let mut proc = Proc::spawn(cmd, "chromedriver", &dir.join("chromedriver.log"));
        proc.wait_line("started successfully");
        Driver { proc, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.proc.child.try_wait().ok().flatten().is_none() {
            let group = rustix::process::Pid::from_child(&self.proc.child);
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        // `proc` is dropped next: it reaps chromedriver.
    }
}

/// The hub's API with the admin token (the typed client of `silk-api`): what the test
/// checks beside the page.
struct Api {
    client: ApiClient,
    token: String,
    hub_log: PathBuf,
}

impl Api {
    /// Reads the admin token the hub made at its first start (never printed).
    async fn connect(p: &Platform) -> Api {
        let token_file = p.path(".silk/hub/admin.token");
        let token = std::fs::read_to_string(&token_file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", token_file.display()))
            .trim()
            .to_owned();
        let url = reqwest::Url::parse(&p.server).unwrap();
        let api = Api {
            client: ApiClient::new(url, Some(token.clone())).unwrap(),
            token,
            hub_log: p.up.log.clone(),
        };
        api.until("the admin token to be accepted", async || {
            api.client.agents().await.ok()
        })
        .await;
        api
    }

    /// The job, if the hub answers with it.
    async fn job(&self, name: &str) -> Option<Job> {
        self.client.job(name).await.ok()
    }

    /// The run, if the hub answers with it.
    async fn run(&self, id: &str) -> Option<RunView> {
        self.client.run(id).await.ok()
    }

    /// Polls `check` until it holds; what it gave.
    async fn until<T>(&self, what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
        let every = Duration::from_millis(100);
        silk_testkit::eventually(DEADLINE, every, check)
            .await
            .unwrap_or_else(|| {
                panic!(
                    "timed out waiting for {what}\n--- silk up ---\n{}",
                    tail(&self.hub_log, 40)
                )
            })
    }
}

/// The job's spider, as pasted: the demo site's three hosts, polite enough (one request at a
/// time per host, 30 ms apart) that the run lasts some seconds.
fn spider_text(p: &Platform) -> String {
    let path = p.spider(
        "ui-demo.yaml",
        JOB,
        "per_host_concurrency: 1\nper_host_delay_ms: 30\n",
    );
    std::fs::read_to_string(path).unwrap()
}

/// Chromium under chromedriver, and where the screenshots go.
struct Browser {
    client: Client,
    shots: PathBuf,
    server: String,
    hub_log: PathBuf,
    _driver: Driver,
}

impl Browser {
    async fn start(dir: &Path, server: &str, hub_log: PathBuf) -> Browser {
        let driver = Driver::start(dir);
        let profile = dir.join("chromium-profile");
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    format!("--user-data-dir={}", profile.display()),
                    "--window-size=1400,1000",
                ],
            },
        });
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        // chromedriver speaks plain HTTP on loopback: a plain connector, no TLS stack (with
        // fantoccini's rustls one, the test binary links two rustls crypto providers and
        // rustls refuses to pick one).
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start a Chromium session: {e}\n--- chromedriver ---\n{}",
                    tail(&driver.proc.log, 40)
                )
            });
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        Browser {
            client,
            shots,
            server: server.to_owned(),
            hub_log,
            _driver: driver,
        }
    }

    /// Saves a screenshot of the window as `NAME.png`.
    async fn shot(&self, name: &str) {
        match self.client.screenshot().await {
            Ok(png) => std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap(),
            Err(e) => eprintln!("screenshot {name}: {e}"),
        }
    }

    /// Fails the test with `message`, a screenshot of the page (`failure.png`), the page's
    /// error line and the hub's last lines.
    async fn fail(&self, message: &str) -> ! {
        self.shot("failure").await;
        let error = self.text("[data-testid=error]").await.unwrap_or_default();
        let url = self
            .client
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default();
        panic!(
            "{message}\n  page: {}\n  error line: {error:?}\n  screenshot: {}\n--- silk up ---\n{}",
            redact(&url),
            self.shots.join("failure.png").display(),
            tail(&self.hub_log, 40)
        );
    }

    async fn find(&self, css: &str) -> Option<Element> {
        self.client.find(Locator::Css(css)).await.ok()
    }

    /// The visible text of the first element matching `css`.
    async fn text(&self, css: &str) -> Option<String> {
        self.find(css).await?.text().await.ok()
    }

    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// Polls `probe` (every 100 ms) until it gives a value; fails past `deadline`.
    async fn until_within<T>(
        &self,
        what: &str,
        deadline: Duration,
        probe: impl AsyncFnMut() -> Option<T>,
    ) -> T {
        match silk_testkit::eventually(deadline, Duration::from_millis(100), probe).await {
            Some(v) => v,
            None => self.fail(&format!("timed out waiting for {what}")).await,
        }
    }

    async fn until<T>(&self, what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
        self.until_within(what, DEADLINE, probe).await
    }

    /// Waits until `css` shows `text` exactly.
    async fn until_text(&self, css: &str, text: &str) {
        self.until(&format!("{css} to show {text:?}"), async || {
            self.text(css).await.filter(|t| t == text)
        })
        .await;
    }

    /// Clicks the first element matching `css` once it is there and enabled (found again
    /// if the page re-rendered it meanwhile).
    async fn click(&self, css: &str) {
        self.until(&format!("{css} to be clicked"), async || {
            let el = self.find(css).await?;
            if !el.is_enabled().await.ok()? {
                return None;
            }
            el.click().await.ok()
        })
        .await;
    }

    /// Types `text` into the field `css` (after clearing it).
    async fn type_into(&self, css: &str, text: &str) {
        let el = self
            .until(&format!("{css} to be there"), async || self.find(css).await)
            .await;
        let typed = async {
            el.clear().await?;
            el.send_keys(text).await
        };
        if let Err(e) = typed.await {
            self.fail(&format!("cannot type into {css}: {e}")).await;
        }
    }

    /// The hash part of the page's URL (`#/runs/ID`).
    async fn hash(&self) -> String {
        self.client
            .current_url()
            .await
            .ok()
            .and_then(|u| u.fragment().map(str::to_owned))
            .unwrap_or_default()
    }

    /// A number the page shows (`1,234` → 1234).
    async fn number(&self, css: &str) -> Option<u64> {
        let text = self.text(css).await?;
        let digits: String = text.chars().filter(char::is_ascii_digit).collect();
        digits.parse().ok()
    }

    async fn percent(&self) -> Option<f64> {
        self.find("[data-testid=run-progress]")
            .await?
            .attr("data-percent")
            .await
            .ok()??
            .parse()
            .ok()
    }

    async fn enabled(&self, css: &str) -> bool {
        match self.find(css).await {
            Some(el) => el.is_enabled().await.unwrap_or(false),
            None => false,
        }
    }
}

/// `text` without what follows a `#token=` (the hub prints the admin token in a link).
fn redact(text: &str) -> String {
    match text.split_once("#token=") {
        Some((base, _)) => format!("{base}#token=…"),
        None => text.to_owned(),
    }
}

/// The last `n` lines of a log file, tokens redacted.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<String> = text.lines().map(redact).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn have_chromedriver() -> bool {
    let found = Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium-driver is not installed, and CI must run the UI test"
        );
        println!("skipped: chromium-driver is not installed");
    }
    found
}

/// The router `silk up` runs in the UI tests: tasks posted to `web` for a job that does not
/// exist are refused, others have no route; both are failure records.
const ROUTER_CONFIG: &str = r#"
project: ui-router
server: {bind: 127.0.0.1, port: 0}
inbound:
  - {name: web, class: http.HttpInbound, convert: [{set: {via: web}}]}
outbound:
  - name: to_job
    class: silk.JobOutbound
    init: {job: no-such-job}
    selector: ["kind == 'fetch'"]
"#;

/// The `POST /task/` URL of the router `silk up` runs (from its output).
fn router_task_url(p: &Platform) -> String {
    let log = std::fs::read_to_string(&p.up.log).unwrap_or_default();
    log.lines()
        .find_map(|l| {
            let rest = l.split("router `ui-router`: ").nth(1)?;
            Some(rest.split_whitespace().next()?.to_owned())
        })
        .unwrap_or_else(|| panic!("no router line in the output:\n{log}"))
}

/// One browser at a time: each test runs a platform and a Chromium of its own.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A platform, its API with the admin token, and a browser signed in with the link the hub
/// prints: the token is taken, stored and removed from the URL, and the dashboard shows the
/// two local agents. `None` when Chromium is not installed (outside CI).
async fn signed_in() -> Option<(Platform, Api, Browser)> {
    if !have_chromedriver() {
        return None;
    }
    // A declared pool of agents labelled pool=eu, which the two local agents are not: its
    // deficit shows on the Agents page.
    let dir = tempfile::TempDir::new().unwrap();
    let pools = dir.path().join("pools.toml");
    std::fs::write(&pools, "[eu]\nagents = 2\n").unwrap();
    let pools = pools.display().to_string();
    // The router in the hub: its page (inbounds, outbounds, failures, check_task).
    let router = dir.path().join("router.yaml");
    std::fs::write(&router, ROUTER_CONFIG).unwrap();
    let router = router.display().to_string();
    let p = Platform::start_in(dir, PAGES, &["--pools", &pools, "--router", &router]);
    let api = Api::connect(&p).await;
    let b = Browser::start(p.dir.path(), &p.server, p.up.log.clone()).await;
    println!("screenshots: {}", b.shots.display());

    // The link the hub prints: the token is taken, stored and removed from the URL.
    let link = format!("{}/#token={}", b.server, api.token);
    if let Err(e) = b.client.goto(&link).await {
        b.fail(&format!("cannot open the UI: {e}")).await;
    }
    b.until("the token to leave the URL", async || {
        let url = b.client.current_url().await.ok()?;
        (!url.as_str().contains("token=")).then_some(())
    })
    .await;
    b.until("the dashboard with two agent cards", async || {
        (b.count("[data-testid=agent-card]").await == 2).then_some(())
    })
    .await;
    let stored = b
        .client
        .execute("return localStorage.getItem('silk.token')", vec![])
        .await
        .ok();
    if stored.as_ref().and_then(Value::as_str) != Some(api.token.as_str()) {
        b.fail("the token is not in localStorage").await;
    }

    Some((p, api, b))
}

/// Jobs in the browser: a job made from a pasted spider is saved as typed (cron, zone,
/// remarks, overlap, the spider text); the enabled switch and the edit form change it; a second
/// job with its name gets the API's message on one line and the form stays; the agents page;
/// signing out, a refused token, signing in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_in_the_browser_is_saved_as_typed_and_edited() {
    let _one = ONE_BROWSER.lock().await;
    let Some((p, api, b)) = signed_in().await else {
        return;
    };
    let spider = spider_text(&p);

    // A new job from a pasted spider.
    b.click("[data-testid=nav-jobs]").await;
    b.click("[data-testid=new-job]").await;
    b.type_into("#job-name", JOB).await;
    b.type_into("#job-spider", &spider).await;
    b.type_into("#job-cron", "0 3 * * *").await;
    b.type_into("#job-timezone", "Europe/Paris").await;
    b.type_into("#job-remarks", "made in the browser").await;
    if let Some(overlap) = b.find("#job-overlap").await {
        let _ = overlap.select_by_value("skip").await;
    }
    let _ = b.client.execute("window.scrollTo(0, 0)", vec![]).await;
    b.shot("job-form").await;
    b.click("#job-save").await;
    let row = format!("tr[data-testid=job-row][data-name='{JOB}']");
    b.until("the job in the list", async || b.find(&row).await)
        .await;
    let job = api
        .until("the job in the API", async || api.job(JOB).await)
        .await;
    let spec = &job.spec;
    assert_eq!(spec.cron.as_deref(), Some("0 3 * * *"), "{job:?}");
    assert_eq!(spec.timezone.as_deref(), Some("Europe/Paris"), "{job:?}");
    assert_eq!(spec.remarks, "made in the browser", "{job:?}");
    assert_eq!(spec.overlap, Overlap::Skip, "{job:?}");
    assert!(
        spec.spider.contains("per_host_delay_ms: 30"),
        "the spider is the pasted text: {job:?}"
    );
    assert!(
        job.next_fire_ms.is_some(),
        "a cron job has a next fire: {job:?}"
    );

    // The enabled switch (PATCH), and the edit form (PATCH).
    b.click(&format!("{row} [data-testid=job-enabled]")).await;
    api.until("the job disabled", async || {
        (!api.job(JOB).await?.spec.enabled).then_some(())
    })
    .await;
    b.click(&format!("{row} [data-testid=job-edit]")).await;
    b.until("the form filled from the job", async || {
        let name = b.find("#job-name").await?.prop("value").await.ok()??;
        (name == JOB).then_some(())
    })
    .await;
    b.type_into("#job-remarks", "edited in the browser").await;
    b.click("#job-save").await;
    api.until("the job edited", async || {
        let spec = api.job(JOB).await?.spec;
        (spec.remarks == "edited in the browser" && !spec.enabled).then_some(())
    })
    .await;

    // A second job with the same name: the API's message on one line, the form stays.
    b.until("the jobs list again", async || b.find(&row).await)
        .await;
    b.click("[data-testid=new-job]").await;
    b.type_into("#job-name", JOB).await;
    b.type_into("#job-spider", &spider).await;
    b.click("#job-save").await;
    let error = b
        .until("the error line", async || {
            let el = b.find("[data-testid=error]").await?;
            if !el.is_displayed().await.ok()? {
                return None;
            }
            el.text().await.ok().filter(|t| !t.trim().is_empty())
        })
        .await;
    assert!(!error.contains('\n'), "one line: {error:?}");
    let _ = b.client.execute("window.scrollTo(0, 0)", vec![]).await;
    b.shot("job-error").await;
    assert_eq!(b.hash().await, "/jobs/new", "the form stays open");

    // The agents page: both local agents alive.
    b.click("[data-testid=nav-agents]").await;
    b.until("two alive agents in the table", async || {
        let rows = b
            .client
            .find_all(Locator::Css("tr[data-testid=agent-row]"))
            .await
            .ok()?;
        let mut alive = 0;
        for row in &rows {
            let state = row
                .find(Locator::Css("[data-testid=agent-state]"))
                .await
                .ok()?;
            if state.text().await.ok()? == "alive" {
                alive += 1;
            }
        }
        (rows.len() == 2 && alive == 2).then_some(())
    })
    .await;
    // The declared pool: none of its 2 agents is there.
    b.until("the pool eu short of 2 agents", async || {
        let row = b.text("tr[data-testid=pool-row]").await?;
        let deficit = b.text("[data-testid=pool-deficit]").await?;
        (row.contains("eu") && row.contains("0 of 2") && deficit == "2").then_some(())
    })
    .await;
    b.shot("agents").await;

    // The router: two tasks posted to it fail (a job that does not exist, no route); the
    // page shows its inbound and outbound with their counters, the two failure records, and
    // check_task answers from the page.
    let task_url = router_task_url(&p);
    let http = reqwest::Client::new();
    for task in [
        serde_json::json!({"kind": "fetch", "url": "http://127.0.0.1:9/x"}),
        serde_json::json!({"kind": "other"}),
    ] {
        let answer = http
            .post(&task_url)
            .header("content-type", "application/json")
            .body(task.to_string())
            .send()
            .await
            .unwrap();
        assert!(
            answer.status().is_success(),
            "{}",
            answer.text().await.unwrap_or_default()
        );
    }
    b.click("[data-testid=nav-router]").await;
    b.until("the router's inbound with 2 tasks received", async || {
        let n = b
            .text("tr[data-testid=router-inbound-row][data-name=web] [data-testid=router-inbound-received]")
            .await?;
        (n == "2").then_some(())
    })
    .await;
    b.until("the outbound and its refused task", async || {
        let row = b
            .text("tr[data-testid=router-outbound-row][data-name=to_job]")
            .await?;
        (row.contains("silk.JobOutbound") && row.contains("refused 1")).then_some(())
    })
    .await;
    b.until("two failure records", async || {
        (b.count("tr[data-testid=router-failure-row]").await == 2
            && b.count("tr[data-testid=router-failure-row][data-reason=no_route]")
                .await
                == 1)
            .then_some(())
    })
    .await;
    b.type_into("[data-testid=router-check-task]", r#"{"kind": "other"}"#)
        .await;
    b.click("[data-testid=router-check-run]").await;
    b.until_text("[data-testid=router-check-verdict]", "failed (no_route)")
        .await;
    b.type_into(
        "[data-testid=router-check-task]",
        r#"{"kind": "fetch", "url": "http://127.0.0.1:9/y"}"#,
    )
    .await;
    b.click("[data-testid=router-check-run]").await;
    b.until_text(
        "[data-testid=router-check-verdict]",
        "routed (matched) → to_job",
    )
    .await;
    b.until("the converted task in the answer", async || {
        let shown = b.text("[data-testid=router-check-answer]").await?;
        shown.contains("\"via\": \"web\"").then_some(())
    })
    .await;
    b.shot("router").await;
    b.click("[data-testid=nav-agents]").await;

    // Sign out: the sign-in box; a wrong token is refused; the right one lets in.
    b.click("[data-testid=sign-out]").await;
    b.until("the sign-in box", async || {
        b.find("[data-testid=login]")
            .await?
            .is_displayed()
            .await
            .ok()?
            .then_some(())
    })
    .await;
    b.type_into("#login-token", "silk_nope_nope").await;
    b.click("#login-submit").await;
    b.until("the refusal", async || {
        let el = b.find("[data-testid=login-message]").await?;
        el.is_displayed().await.ok()?.then_some(())
    })
    .await;
    b.shot("sign-in").await;
    b.type_into("#login-token", &api.token).await;
    b.click("#login-submit").await;
    b.until("the agents page again", async || {
        (b.count("tr[data-testid=agent-row]").await == 2).then_some(())
    })
    .await;

    let _ = b.client.clone().close().await;
}

/// A run in the browser: triggered from the jobs list, followed on its page (state, counts,
/// chart), paused (the hub fetches nothing more), found on the dashboard, resumed and followed
/// to its end (progress at 100 %, final counts, log tail, items preview), in the runs list
/// and its filter, and as the job's last run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_followed_paused_resumed_and_finished_in_the_browser() {
    let _one = ONE_BROWSER.lock().await;
    let Some((p, api, b)) = signed_in().await else {
        return;
    };
    // A daily page quota well above the run: the dashboard shows the tenant's usage bar.
    api.client
        .update_tenant(
            "default",
            &json!({"quotas": {"pages_per_day": 1_000_000, "concurrent_runs": 4}}),
        )
        .await
        .expect("quotas");
    let spec: JobSpec = serde_json::from_value(json!({"name": JOB, "spider": spider_text(&p)}))
        .expect("a job spec");
    api.client.create_job(&spec).await.expect("the job");
    b.click("[data-testid=nav-jobs]").await;
    let row = format!("tr[data-testid=job-row][data-name='{JOB}']");
    b.until("the job in the list", async || b.find(&row).await)
        .await;

    // Trigger: the run page opens.
    b.click(&format!("{row} [data-testid=job-trigger]")).await;
    let run_id = b
        .until("the run page", async || {
            b.hash().await.strip_prefix("/runs/").map(str::to_owned)
        })
        .await;
    // Running for a while (some hundred pages of some eight hundred), the chart drawn.
    b.until("the run to be running with pages fetched", async || {
        let state = b.text("[data-testid=run-state]").await?;
        let success = b.number("[data-testid=stat-success]").await?;
        let points: u32 = b
            .find("[data-testid=run-chart]")
            .await?
            .attr("data-points")
            .await
            .ok()??
            .parse()
            .ok()?;
        (state == "running" && success >= 100 && points >= 2).then_some(())
    })
    .await;
    if !b.enabled("#run-pause").await || b.enabled("#run-resume").await {
        b.fail("a running run can be paused, not resumed").await;
    }
    b.shot("run-running").await;

    // Pause: the badge says so, and the hub fetches nothing more while paused.
    b.click("#run-pause").await;
    b.until_text("[data-testid=run-state]", "paused").await;
    let paused = api
        .until(
            "the paused run's requests in flight to finish",
            async || {
                let v = api.run(&run_id).await?;
                (v.state == RunState::Paused && v.stats.in_flight == 0).then_some(v)
            },
        )
        .await;
    let success = paused.stats.success;
    let watched = Instant::now();
    while watched.elapsed() < PAUSE_WINDOW {
        let v = api.client.run(&run_id).await.unwrap();
        assert_eq!(v.state, RunState::Paused, "{v:?}");
        assert_eq!(
            v.stats.success, success,
            "pages were fetched while paused: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.until("the page to show the paused count", async || {
        (b.number("[data-testid=stat-success]").await? == success).then_some(())
    })
    .await;
    if b.enabled("#run-pause").await || !b.enabled("#run-resume").await {
        b.fail("a paused run can be resumed, not paused").await;
    }
    b.shot("run-paused").await;

    // The dashboard lists the paused run with its progress; its link leads back.
    b.click("[data-testid=nav-dashboard]").await;
    let dash_row = format!("tr[data-testid=dashboard-run][data-id='{run_id}']");
    b.until("the run on the dashboard", async || b.find(&dash_row).await)
        .await;
    b.until("the dashboard's agent sparklines", async || {
        (b.count("[data-testid=agent-card]").await == 2).then_some(())
    })
    .await;
    // The tenant's usage today: the pages fetched so far against the quota.
    b.until("the usage bars", async || {
        let pages = b.text("[data-testid=usage-pages]").await?;
        let runs = b.text("[data-testid=usage-runs]").await?;
        let counted: u64 = pages
            .split(" of ")
            .next()?
            .replace([',', '\u{a0}', '\u{202f}', ' '], "")
            .parse()
            .ok()?;
        (counted > 0 && pages.ends_with("of 1,000,000") && runs.ends_with("of 4")).then_some(())
    })
    .await;
    b.shot("dashboard").await;
    b.click(&format!("{dash_row} a")).await;
    b.until_text("[data-testid=run-state]", "paused").await;

    // Resume, then the run finishes.
    b.click("#run-resume").await;
    api.until("pages fetched after resuming", async || {
        let v = api.run(&run_id).await?;
        (v.stats.success > success).then_some(())
    })
    .await;
    b.until_within("the run to succeed", RUN_DEADLINE, async || {
        let state = b.text("[data-testid=run-state]").await?;
        match state.as_str() {
            "succeeded" => Some(Ok(())),
            "failed" | "cancelled" => Some(Err(state)),
            _ => None,
        }
    })
    .await
    .unwrap_or_else(|state| panic!("the run ended {state}"));
    b.until("the progress bar at 100%", async || {
        (b.percent().await? == 100.0).then_some(())
    })
    .await;
    let done = api.client.run(&run_id).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    assert_eq!(done.stats.left, 0, "{done:?}");
    let fetched = done.stats.success;
    assert!(fetched > 200, "a few hundred pages: {done:?}");
    b.until("the final counts on the page", async || {
        let ok = b.number("[data-testid=stat-success]").await? == fetched
            && b.number("[data-testid=stat-left]").await? == 0
            && b.number("[data-testid=stat-items]").await? == done.stats.items;
        ok.then_some(())
    })
    .await;
    b.until("log lines in the tail", async || {
        (b.count("[data-testid=run-log] [data-testid=log-line]")
            .await
            > 0)
        .then_some(())
    })
    .await;
    b.until("the items preview", async || {
        (b.count("[data-testid=run-items] [data-testid=item-row]")
            .await
            > 0)
        .then_some(())
    })
    .await;
    if b.enabled("#run-pause").await || b.enabled("#run-resume").await {
        b.fail("a finished run can be neither paused nor resumed")
            .await;
    }
    b.shot("run-finished").await;
    let _ = b
        .client
        .execute("window.scrollTo(0, document.body.scrollHeight)", vec![])
        .await;
    b.shot("run-finished-items").await;

    // Its finished requests: the demo site's missing pages failed (404); requeued once, into
    // a run of the job (this one is over).
    let failed_rows = "[data-testid=run-requests] [data-testid=request-row][data-outcome=failed]";
    b.until(
        "failed requests in the finished requests card",
        async || {
            // (The rows come a moment after the results: look again.)
            let _ = b
                .client
                .execute(
                    "document.querySelector('[data-testid=run-requests-refresh]').click()",
                    vec![],
                )
                .await;
            (b.count(failed_rows).await > 0).then_some(())
        },
    )
    .await;
    let shown = b.text(failed_rows).await.unwrap_or_default();
    if !shown.contains("404") || !shown.contains("http_404") {
        b.fail(&format!(
            "a failed request shows its status and error: {shown}"
        ))
        .await;
    }
    let _ = b
        .client
        .execute(
            "document.querySelector('[data-testid=run-requeue]').scrollIntoView({block: 'center'})",
            vec![],
        )
        .await;
    b.click("[data-testid=run-requeue]").await;
    if let Err(e) = b.client.accept_alert().await {
        b.fail(&format!("the requeue asks first: {e}")).await;
    }
    b.until("the requeue's answer", async || {
        let text = b.text("[data-testid=run-requeued]").await?;
        text.contains("queued again, into").then_some(())
    })
    .await;
    let marked = api
        .client
        .run_requests(
            &run_id,
            &silk_api::runs::RequestsParams {
                requeued: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!marked.requests.is_empty(), "{marked:?}");
    b.shot("run-finished-requests").await;

    // The runs list has it, newest first, and filters by state.
    b.click("[data-testid=nav-runs]").await;
    b.until("the run in the runs list", async || {
        b.find(&format!("tr[data-testid=run-row][data-id='{run_id}']"))
            .await
    })
    .await;
    if let Some(filter) = b.find("#runs-filter").await {
        let _ = filter.select_by_value("failed").await;
    }
    b.until("the filtered list without the run", async || {
        (b.hash().await == "/runs?state=failed"
            && b.count(&format!("tr[data-testid=run-row][data-id='{run_id}']"))
                .await
                == 0)
            .then_some(())
    })
    .await;

    // The job's last run.
    b.click("[data-testid=nav-jobs]").await;
    b.until_text(&format!("{row} .badge"), "succeeded").await;
    b.shot("jobs").await;

    // The Logs page: the run's end found by text across runs; each line links to its run.
    b.click("[data-testid=nav-logs]").await;
    b.until("the logs form", async || {
        b.find("[data-testid=logs-form]").await
    })
    .await;
    b.type_into("[data-testid=logs-q]", "RUN SUCCEEDED").await;
    b.click("[data-testid=logs-search]").await;
    let link = format!("tr[data-testid=logs-row] a[href='#/runs/{run_id}']");
    b.until("the run's end in the logs", async || b.find(&link).await)
        .await;
    assert!(
        b.hash().await.starts_with("/logs?q=RUN+SUCCEEDED"),
        "the search is in the address"
    );
    let rows = b.count("tr[data-testid=logs-row]").await;
    let texts = b
        .client
        .find_all(Locator::Css("tr[data-testid=logs-row] td.log-msg"))
        .await
        .unwrap();
    for td in &texts {
        let text = td.text().await.unwrap();
        assert!(text.to_lowercase().contains("run succeeded"), "{text}");
    }
    assert_eq!(texts.len(), rows);
    b.shot("logs").await;
    b.click(&link).await;
    b.until("the run's page", async || {
        (b.hash().await == format!("/runs/{run_id}")).then_some(())
    })
    .await;

    // The Alerts page: a rule made over the API (its webhook's path, the secret, never on the
    // page) and its test sent from the page, delivered to a local receiver.
    let receiver = silk_testkit::Receiver::start().await.unwrap();
    let rule: silk_api::alerts::AlertRuleRequest = serde_json::from_value(json!({
        "name": "ui-hook",
        "events": ["run_failed", "agent_dead"],
        "channel": {"webhook": {"url": receiver.url("/hook/s3cret-path"), "format": "slack"}}
    }))
    .unwrap();
    api.client.create_alert_rule(&rule).await.unwrap();
    b.click("[data-testid=nav-alerts]").await;
    let rule_row = "tr[data-testid=alert-rule-row][data-name='ui-hook']";
    let shown = b
        .until("the rule on the Alerts page", async || {
            b.text(rule_row).await
        })
        .await;
    assert!(
        shown.contains("run_failed") && shown.contains(receiver.base_url()),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
    b.click(&format!("{rule_row} [data-testid=alert-test]"))
        .await;
    b.until_text("tr[data-testid=alert-delivery-row] .badge", "sent")
        .await;
    let got = receiver.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].json()["text"]
            .as_str()
            .is_some_and(|t| t.contains("Test alert of rule ui-hook")),
        "{got:?}"
    );
    b.shot("alerts").await;
    let _ = b.client.clone().close().await;
}

/// Projects in the browser: a project made in the form (its password never on the page, its
/// webhook secret shown once); a release tag announced by a webhook signed with that secret
/// becomes a `ready` version in the versions table; a build by hand opens its log, which
/// follows the build to its end; the version run as a program shows its workers in the run's
/// page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_made_in_the_browser_builds_its_tags_and_shows_the_log() {
    let _one = ONE_BROWSER.lock().await;
    let Some((p, api, b)) = signed_in().await else {
        return;
    };
    let password = "ui-git-pw-31337";
    let root = p.path("git");
    let repo = silk_testkit::WorkRepo::init(&p.path("work"), &root, "shop");
    repo.commit(&[("crawl.sh", "echo crawl\n")], "first");
    repo.push();
    let git = silk_testkit::GitServer::start(&root, "bot", password)
        .await
        .unwrap();

    b.click("[data-testid=nav-projects]").await;
    b.click("[data-testid=new-project]").await;
    b.type_into("#project-name", "shop").await;
    b.type_into("#project-git-url", &git.url("shop")).await;
    b.type_into("#project-username", "bot").await;
    b.type_into("#project-password", password).await;
    b.type_into("#project-command", "mkdir -p out && echo made-in-ui")
        .await;
    b.shot("project-form").await;
    b.click("[data-testid=project-save]").await;
    let secret = b
        .until("the webhook secret, shown once", async || {
            b.text("[data-testid=webhook-secret]")
                .await
                .filter(|s| s.len() >= 32)
        })
        .await;
    let html = b
        .client
        .execute("return document.documentElement.outerHTML", vec![])
        .await
        .unwrap();
    assert!(
        !html.to_string().contains(password),
        "the password is on the page"
    );
    b.shot("project-created").await;
    b.click("[data-testid=project-open]").await;
    b.until_text("[data-testid=project-has-password]", "set (never shown)")
        .await;

    // A signed webhook for a release tag: a ready version appears.
    repo.tag("release/shop/1.0.0");
    repo.push();
    let body =
        serde_json::to_vec(&json!({"ref": "refs/tags/release/shop/1.0.0", "after": repo.head()}))
            .unwrap();
    let sig = format!("sha256={}", silk_projects::webhook::sign(&secret, &body));
    let answer = reqwest::Client::new()
        .post(format!("{}/api/v1/webhooks/shop", p.server))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", "ui-1")
        .header("X-Hub-Signature-256", sig)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 202);
    b.until("the version ready in the table", async || {
        b.find("tr[data-testid=version-row][data-version='1.0.0'][data-state='ready']")
            .await
    })
    .await;
    b.shot("project-versions").await;

    // A build by hand opens its log, which follows it to the end.
    b.type_into("[data-testid=build-ref]", "main").await;
    b.type_into("[data-testid=build-version]", "0.1-main").await;
    b.click("[data-testid=build-start]").await;
    b.until("the build's log page", async || {
        b.hash().await.ends_with("?v=0.1-main").then_some(())
    })
    .await;
    b.until("the log to end with the version ready", async || {
        let log = b.text("[data-testid=build-log]").await?;
        (log.contains("made-in-ui") && log.contains("version 0.1-main ready")).then_some(())
    })
    .await;
    b.until_text("[data-testid=build-log-badge]", "ready").await;
    b.shot("project-build-log").await;
    let v = api.client.version("shop", "0.1-main").await.unwrap();
    assert_eq!(v.commit.as_deref(), Some(repo.head().as_str()));

    // The version runs as a program on `silk up`'s agents: its workers in the run's page.
    let run = api
        .client
        .start_run(&silk_api::runs::RunRequest {
            program: Some(silk_api::programs::ProgramSpec {
                project: "shop".into(),
                version: "1.0.0".into(),
                runtime: silk_api::programs::Runtime::Process,
                command: vec!["sh".into(), "crawl.sh".into()],
                workers: 2,
                env: Default::default(),
                stop_grace_ms: None,
            }),
            ..silk_api::runs::RunRequest::spider("")
        })
        .await
        .unwrap();
    b.client
        .execute(
            "location.hash = arguments[0]",
            vec![json!(format!("#/runs/{}", run.id))],
        )
        .await
        .unwrap();
    b.until("both workers succeeded in the run's page", async || {
        let done = b.text("[data-testid=run-state]").await.as_deref() == Some("succeeded");
        (done && b.count("[data-testid=run-worker]").await == 2).then_some(())
    })
    .await;
    let table = b.text("[data-testid=run-workers]").await.unwrap();
    assert_eq!(table.matches("succeeded").count(), 2, "{table}");
    let note = b.text("[data-testid=run-program-note]").await.unwrap();
    assert!(
        note.contains("shop 1.0.0") && note.contains("sh crawl.sh"),
        "{note}"
    );
    b.shot("program-run").await;
    let _ = b.client.clone().close().await;
}
