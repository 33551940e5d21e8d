//! Process-level tests of the hub client commands (`silk run`, `runs`, `jobs`, `logs`,
//! `items`, `agents`, `tokens`) and of `silk agent`, for what can be checked without a hub:
//! errors a user sees first. The tests against a real hub are in `cli_platform.rs`.

mod cli_support;

use cli_support::{Proc, closed_port, output, silk};

fn spider_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("spider.yaml");
    std::fs::write(&path, "name: t\nstart_urls: ['http://127.0.0.1:9/']\n").unwrap();
    path
}

#[test]
fn run_without_a_hub_says_it_cannot_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let spider = spider_file(dir.path());
    let server = format!("http://127.0.0.1:{}", closed_port());
    let (out, stderr) = output(
        silk()
            .args(["run", "--server", &server])
            .arg(&spider)
            .arg("--wait"),
    );
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("error: cannot reach the hub at {server}")),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout without a run id");
}

#[test]
fn listings_without_a_hub_say_they_cannot_reach_it() {
    let server = format!("127.0.0.1:{}", closed_port());
    for command in ["runs", "agents"] {
        // The address comes from SILK_SERVER here (a bare HOST:PORT means http).
        let (out, stderr) = output(silk().arg(command).env("SILK_SERVER", &server));
        assert!(!out.status.success(), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot reach the hub at http://{server}")),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn run_with_a_missing_spider_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let (out, stderr) = output(
        silk()
            .arg("run")
            .arg(&missing)
            .args(["--server", "http://127.0.0.1:9"]),
    );
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot read spider file") && stderr.contains("nope.yaml"),
        "{stderr}"
    );
}

#[test]
fn run_rejects_bad_options_before_calling_the_hub() {
    let dir = tempfile::tempdir().unwrap();
    let spider = spider_file(dir.path());
    for (flag, value) in [
        ("--strategy", "fixed:0"),
        ("--strategy", "round-robin"),
        ("--on-agent-lost", "retry"),
        ("--stall-timeout", "soon"),
        ("--server", "nats://127.0.0.1:4222"),
    ] {
        let (out, stderr) = output(silk().arg("run").arg(&spider).args([flag, value]));
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

#[test]
fn agent_refuses_a_bus_that_is_not_nats() {
    let dir = tempfile::tempdir().unwrap();
    for bus in ["http://x", "inproc", "127.0.0.1:4222"] {
        let (out, stderr) = output(
            silk()
                .args(["agent", "--bus", bus, "--data-dir"])
                .arg(dir.path()),
        );
        assert_eq!(out.status.code(), Some(2), "{bus}: {stderr}");
        assert!(
            stderr.contains("--bus") && stderr.contains("nats://"),
            "{bus}: {stderr}"
        );
    }
}

#[test]
fn agent_refuses_bad_settings() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, says) in [
        ("--id", "a.b", "error: id: invalid agent id"),
        ("--namespace", "Bad NS", "error: namespace:"),
        ("--labels", "=x", "error: labels: `=x` has no key"),
        (
            "--allow-network",
            "10.0.0.0/33",
            "error: allow_networks: `10.0.0.0/33` is no address range",
        ),
        (
            "--capacity",
            "0",
            "error: --capacity: capacity: 0 is below the least allowed, 1",
        ),
    ] {
        let (out, stderr) = output(
            silk()
                .args([
                    "agent",
                    "--bus",
                    "nats://127.0.0.1:9",
                    flag,
                    value,
                    "--data-dir",
                ])
                .arg(dir.path()),
        );
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }
}

/// `silk agent --listen ADDR` serves `/healthz` (200 once it has registered on the bus) and
/// `/metrics` (its counters, Prometheus text).
#[test]
fn an_agent_serves_its_health_and_metrics_on_listen() {
    let Some(nats) = silk_testkit::service_url("SILK_TEST_NATS") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let namespace = format!("agenthealth{}", std::process::id());
    let mut cmd = silk();
    cmd.args([
        "agent",
        "--bus",
        &nats,
        "--namespace",
        &namespace,
        "--id",
        "probe",
        "--listen",
        "127.0.0.1:0",
        // No hub on this namespace: the agent detaches after 5 s.
        "--detach-after",
        "5s",
        "--data-dir",
    ])
    .arg(dir.path().join("agent"));
    let mut agent = Proc::spawn(cmd, "silk agent", &dir.path().join("agent.log"));
    let line = agent.wait_line("serves /healthz and /metrics on http://");
    let base = line.rsplit(' ').next().unwrap().to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (healthy, metrics, detached) = rt.block_on(async {
        let http = reqwest::Client::new();
        let healthy = silk_testkit::eventually(
            std::time::Duration::from_secs(30),
            silk_testkit::POLL_EVERY,
            async || {
                let answer = http.get(format!("{base}/healthz")).send().await.ok()?;
                (answer.status() == 200).then_some(())
            },
        )
        .await;
        let metrics = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // No hub is heard: detached, and unhealthy for it.
        let detached = silk_testkit::eventually(
            std::time::Duration::from_secs(30),
            silk_testkit::POLL_EVERY,
            async || {
                let answer = http.get(format!("{base}/healthz")).send().await.ok()?;
                let status = answer.status();
                let text = answer.text().await.ok()?;
                (status == 503 && text.starts_with("detached")).then_some(())?;
                http.get(format!("{base}/metrics"))
                    .send()
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()
            },
        )
        .await;
        (healthy, metrics, detached)
    });
    assert!(healthy.is_some(), "never healthy: {}", agent.output());
    assert!(
        metrics.contains("silk_agent_registered{agent=\"probe\"} 1")
            && metrics.contains("# TYPE silk_agent_requests_total counter"),
        "{metrics}"
    );
    let detached = detached.unwrap_or_else(|| panic!("never detached: {}", agent.output()));
    assert!(
        detached.contains("silk_agent_detached{agent=\"probe\"} 1")
            && detached.contains("silk_agent_detaches_total{agent=\"probe\"} 1"),
        "{detached}"
    );
    agent.kill();
}

#[test]
fn every_client_command_without_a_hub_says_it_cannot_reach_it_in_one_line() {
    let server = format!("http://127.0.0.1:{}", closed_port());
    for args in [
        &["jobs", "list"][..],
        &["jobs", "show", "shop"],
        &["jobs", "trigger", "shop", "--arg", "a=b"],
        &["runs", "list", "--state", "running"],
        &["runs", "--job", "shop"],
        &["runs", "show", "r1"],
        &["runs", "pause", "r1"],
        &["runs", "--json", "cancel", "r1"],
        &["runs", "--job", "shop", "list", "--state", "failed"],
        &["runs", "restart", "r1", "--keep-frontier"],
        &["runs", "wait", "r1"],
        &["logs", "r1", "--level", "warn"],
        &["logs", "-f", "r1"],
        &["items", "r1", "--all"],
        &["runs", "requests", "r1", "--outcome", "failed"],
        &["runs", "requeue", "r1", "--status", "503"],
        &["tokens", "list"],
        &["tokens", "create", "ci"],
        &["alerts", "rules"],
        &["alerts", "deliveries", "--state", "failed"],
        &["alerts", "test", "ops"],
        &["agents", "shutdown", "a1"],
    ] {
        let (out, stderr) = output(silk().args(args).args(["--server", &server]));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ")
                && stderr.contains(&format!("cannot reach the hub at {server}")),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_bad_job_file_is_refused_with_its_line_before_calling_the_hub() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.yaml");
    std::fs::write(
        &job,
        "name: shop\nspider_file: s.yaml\n  cron: '*/5 * * * *'\nargs: {}\n",
    )
    .unwrap();
    // Nothing listens on port 9: the error comes from the file.
    let (out, stderr) = output(
        silk()
            .args(["jobs", "create", "--server", "http://127.0.0.1:9", "-f"])
            .arg(&job),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("error: {}:3:", job.display())) && stderr.contains("bad YAML"),
        "{stderr}"
    );
    // A spider_file that is not there is named, resolved next to the job file.
    std::fs::write(&job, "name: shop\nspider_file: s.yaml\n").unwrap();
    let (out, stderr) = output(
        silk()
            .args([
                "jobs",
                "update",
                "shop",
                "--server",
                "http://127.0.0.1:9",
                "-f",
            ])
            .arg(&job),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read spider_file s.yaml")
            && stderr.contains(&dir.path().join("s.yaml").display().to_string()),
        "{stderr}"
    );
}

#[test]
fn client_commands_reject_bad_options_before_calling_the_hub() {
    for (args, says) in [
        (&["jobs", "trigger", "j", "--arg", "novalue"][..], "--arg"),
        (
            &["jobs", "update", "j", "--enable", "--disable"],
            "--disable",
        ),
        (&["logs", "r", "--level", "loud"], "--level"),
        (&["logs", "r", "--since", "yesterday"], "--since"),
        (&["items", "r", "--all", "--limit", "3"], "--limit"),
        (
            &["runs", "requests", "r", "--outcome", "lost"],
            "unknown outcome `lost`",
        ),
        (
            &["runs", "requests", "r", "--all", "--limit", "3"],
            "--limit",
        ),
        (&["runs", "--state", "running", "pause", "r"], "pause"),
        (&["tokens", "list", "--server", "ftp://x"], "--server"),
    ] {
        let (out, stderr) = output(silk().args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // An update with nothing to change.
    let (out, stderr) =
        output(silk().args(["jobs", "update", "j", "--server", "http://127.0.0.1:9"]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nothing to change"), "{stderr}");
}
