//! Process-level tests of `silk crawl`: SIGKILL mid-crawl and restart, Ctrl-C and resume, and
//! the exit codes and messages of bad spider files. They run the real binary.

use serde_json::Value;
use silk_testkit::demo::{DemoConfig, DemoSite};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn silk() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_silk"));
    cmd.env("RUST_LOG", "warn").stdin(Stdio::null());
    cmd
}

fn write_spider(dir: &Path, site: &DemoSite, concurrency: u32) -> std::path::PathBuf {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    let yaml = format!(
        "name: crash\nstart_urls: ['{}']\nallowed_domains: [{}]\nfollow: [{{deny: ['/calendar/']}}]\n\
         item_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\nconcurrency: {concurrency}\n\
         per_host_concurrency: {concurrency}\nper_host_delay_ms: 0\n",
        site.start_url(),
        hosts.join(", ")
    );
    let path = dir.join("spider.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn crawl_cmd(dir: &Path, spider: &Path) -> Command {
    let mut cmd = silk();
    cmd.arg("crawl")
        .arg(spider)
        .arg("--out")
        .arg(dir.join("items.jsonl"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--stats-json")
        .arg(dir.join("stats.json"));
    cmd
}

fn item_urls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("items.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}"))["url"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts the output holds every content page of `site` exactly once (by item key).
fn assert_every_page_once(dir: &Path, site: &DemoSite) {
    let urls = item_urls(dir);
    let unique: BTreeSet<String> = urls.iter().cloned().collect();
    assert_eq!(urls.len(), unique.len(), "an item is in the output twice");
    let expected: BTreeSet<String> = site
        .expected_pages()
        .into_iter()
        .filter(|u| u.contains("/p/"))
        .collect();
    assert_eq!(unique, expected);
}

fn content_hits(site: &DemoSite) -> BTreeMap<String, u32> {
    let mut per_page = BTreeMap::new();
    for (url, n) in site.stats().hits {
        if url.contains("/p/") {
            *per_page
                .entry(url.split(['?', '#']).next().unwrap().to_owned())
                .or_insert(0) += n;
        }
    }
    per_page
}

/// SIGKILL twice mid-crawl, restart on the same data dir: every page ends up in the output
/// exactly once, and no more pages are fetched twice than were in flight at the kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_crawl_then_restart_loses_nothing() {
    let site = DemoSite::start(DemoConfig {
        port: 0,
        hosts: 3,
        pages: 250,
        latency_ms: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let concurrency = 12;
    let spider = write_spider(dir.path(), &site, concurrency);
    let mut kills = 0;
    for kill_at in [150u64, 450] {
        let mut child = crawl_cmd(dir.path(), &spider)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        site.wait_for_requests(kill_at).await;
        child.kill().expect("SIGKILL");
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "the crawl ended before the kill: {status}"
        );
        kills += 1;
    }
    let out = crawl_cmd(dir.path(), &spider).output().unwrap();
    assert!(
        out.status.success(),
        "final run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    assert_every_page_once(dir.path(), &site);
    let twice = content_hits(&site).values().filter(|n| **n > 1).count();
    assert!(
        twice <= kills * concurrency as usize,
        "{twice} pages fetched twice, but at most {concurrency} were in flight at each of {kills} kills"
    );
    let stats: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["finish"], "complete");
    assert_eq!(stats["left"], 0);
}

/// SIGINT stops gracefully with exit code 130; the same command resumes and completes, and
/// appends to the same output without duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_gracefully_and_the_same_command_resumes() {
    let site = DemoSite::start(DemoConfig {
        port: 0,
        hosts: 2,
        pages: 200,
        latency_ms: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spider = write_spider(dir.path(), &site, 8);
    let child = crawl_cmd(dir.path(), &spider)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    site.wait_for_requests(100).await;
    let sent = Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let partial = item_urls(dir.path()).len();
    assert!(partial > 0, "nothing written before the stop");
    let hits_before = content_hits(&site);

    let out = crawl_cmd(dir.path(), &spider).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_every_page_once(dir.path(), &site);
    // A graceful stop acks everything in flight: nothing fetched before it is fetched again.
    let hits_after = content_hits(&site);
    let refetched: Vec<_> = hits_before.keys().filter(|u| hits_after[*u] > 1).collect();
    assert!(
        refetched.is_empty(),
        "fetched again after a graceful stop: {refetched:?}"
    );
}

fn run_with_spider(yaml: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, yaml).unwrap();
    crawl_cmd(dir.path(), &path).output().unwrap()
}

/// Bad spider files: exit code 2 and one clear message naming the key and where.
#[test]
fn bad_spider_files_are_reported_clearly() {
    let cases: &[(&str, &[&str])] = &[
        ("name: [unclosed\n", &["bad.yaml", "line"]),
        (
            "name: x\nstart_urls: ['http://127.0.0.1:1/']\nconcurency: 3\n",
            &["unknown field `concurency`", "line 3"],
        ),
        (
            "name: x\nstart_urls: ['http://127.0.0.1:1/']\nfollow: [{allow: ['(']}]\n",
            &["follow[0].allow[0]", "regex"],
        ),
        (
            "name: x\nstart_urls: ['not a url']\n",
            &["start_urls[0]", "invalid url"],
        ),
        (
            "name: x\nstart_urls: ['http://127.0.0.1:1/']\nextract: {t: {css: 'h1[['}}\n",
            &["extract.t"],
        ),
        (
            "name: x\nstart_urls: ['http://127.0.0.1:1/']\nrecrawl_segment: sometimes\n",
            &["recrawl_segment"],
        ),
    ];
    for (yaml, needles) in cases {
        let out = run_with_spider(yaml);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "spider {yaml:?}: stderr {stderr}"
        );
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "spider {yaml:?}: `{needle}` not in {stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let out = silk()
        .args(["crawl", "/nonexistent/spider.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/spider.yaml"));
}

/// CPU time (user + system, clock ticks) process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which ends with the last `)`: utime and stime are the
    // 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// A stop has a deadline: SIGTERM while a page is being parsed (a page of 1,000,000 nested
/// `<div>`s, the parse budget raised past it, so the parse would take hours) ends
/// `silk crawl` once `SILK_STOP_GRACE` has passed, whatever the parse is doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_crawl_within_the_grace_period_during_a_parse() {
    use silk_testkit::hostile::{HostileKind, HostileServer};
    let deep = HostileServer::start(HostileKind::DeepNesting)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spider = dir.path().join("spider.yaml");
    std::fs::write(
        &spider,
        format!(
            "name: deep\nstart_urls: ['{}']\nrobots: false\nmax_retries: 0\n\
             max_html_depth: 100000000\nmax_html_elements: 100000000\nextract: {{title: {{xpath: '//h1'}}}}\n",
            deep.url("/")
        ),
    )
    .unwrap();
    let mut child = crawl_cmd(dir.path(), &spider)
        .env("SILK_STOP_GRACE", "2s")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The page was served, and the crawler has spent a second of CPU on it: it is parsing.
    while deep.requests() == 0 || cpu_ticks(child.id()) < 100 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "silk crawl ended early"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let sent = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success());
    // The deadline is 2 s; allow for a loaded machine, far below the parse's hours.
    let waited = tokio::task::spawn_blocking(move || {
        let every = std::time::Duration::from_millis(50);
        let within = std::time::Duration::from_secs(60);
        match silk_testkit::eventually_blocking(within, every, || child.try_wait().unwrap()) {
            Some(status) => Some((status, child)),
            None => {
                let _ = child.kill();
                None
            }
        }
    })
    .await
    .unwrap();
    let (status, child) = waited.expect("silk crawl did not end within 60 s of SIGTERM");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(130), "stderr: {stderr}");
    assert!(
        stderr.contains("did not stop within 2s of the stop signal"),
        "the deadline did not end it: {stderr}"
    );
}
