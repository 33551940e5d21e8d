//! Process-level tests of the hub client commands (`silk run`, `silk runs`, `silk agents`) and
//! of `silk agent`, for what can be checked without a hub: errors a user sees first. The
//! end-to-end tests against a real hub live with the hub.

use std::process::{Command, Output, Stdio};

fn silk() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_silk"));
    cmd.env("RUST_LOG", "warn")
        .env_remove("SILK_SERVER")
        .stdin(Stdio::null());
    cmd
}

fn output(cmd: &mut Command) -> (Output, String) {
    let out = cmd.output().expect("silk runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

/// A local port where nothing listens (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

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
        ("--id", "a.b", "--id"),
        ("--namespace", "Bad NS", "namespace"),
        ("--labels", "=x", "--labels"),
        ("--capacity", "0", "--capacity"),
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
