//! One config file per process (issue 19): `silk config check` reports every problem of a
//! file at once with its key; flags win over `SILK_…` variables, which win over the file;
//! the packaged example files are good; and a file's settings reach a running `silk up`
//! (its listen address, its data dir, its runs' defaults).

mod cli_support;

use cli_support::{Proc, closed_port, output, silk};
use std::path::Path;

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .display()
        .to_string()
}

/// `silk` without the `SILK_…` settings of the test's own environment.
fn silk_clean() -> std::process::Command {
    let mut cmd = silk();
    for (name, _) in std::env::vars() {
        if name.starts_with("SILK_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

#[test]
fn config_check_reports_every_problem_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hub.toml");
    std::fs::write(
        &file,
        "bus = \"http://x\"\nlisten = \"localhost\"\ncapacity = 3\n[runs]\nmax_pending = -1\nlease_timeout = 30\nstal_timeout = \"1m\"\n[failure]\nphi_threshold = \"high\"\n",
    )
    .unwrap();
    let (out, stderr) = output(silk_clean().arg("config").arg("check").arg(&file));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for expected in [
        "bus: `http://x`: the `http` scheme is not supported",
        "listen: `localhost` is not an IP address and port",
        "capacity: not a setting of silk hub (it is one of silk agent, silk up)",
        "runs.max_pending: -1 is negative",
        "runs.lease_timeout: expected a duration as text",
        "runs.stal_timeout: unknown setting (did you mean `runs.stall_timeout`?)",
        "failure.phi_threshold: expected a number",
        "7 problem(s) in the settings of silk hub",
    ] {
        assert!(stderr.contains(expected), "missing `{expected}`:\n{stderr}");
    }
    // Every problem line names the file.
    let problems = stderr.lines().filter(|l| l.starts_with("error: ")).count();
    assert_eq!(problems, 7, "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with(&format!("error: {}: ", file.display())))
            .count(),
        7,
        "{stderr}"
    );
    // A file named for no process needs --for.
    let other = dir.path().join("settings.toml");
    std::fs::write(&other, "listen = \"127.0.0.1:1\"\n").unwrap();
    let (out, stderr) = output(silk_clean().arg("config").arg("check").arg(&other));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("--for hub|agent|up"), "{stderr}");
    let (out, stderr) = output(
        silk_clean()
            .args(["config", "check", "--for", "up"])
            .arg(&other),
    );
    assert!(out.status.success(), "{stderr}");
}

#[test]
fn the_packaged_example_files_are_good() {
    for (file, process) in [
        ("packaging/hub.toml", "hub"),
        ("packaging/agent.toml", "agent"),
    ] {
        let (out, stderr) = output(silk_clean().args(["config", "check", &repo(file)]));
        assert!(out.status.success(), "{file}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("good for silk {process}")),
            "{stdout}"
        );
    }
}

#[test]
fn flags_win_over_variables_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("up.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:7001\"\nagents = 3\n[runs]\nmax_pending = 5\nstall_timeout = \"2m\"\n",
    )
    .unwrap();
    let show = |cmd: &mut std::process::Command| {
        let (out, stderr) = output(cmd);
        assert!(out.status.success(), "{stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = show(
        silk_clean()
            .env("SILK_LISTEN", "127.0.0.1:7002")
            .env("SILK_RUNS_MAX_PENDING", "6")
            .env("SILK_SECRET_KEY", "very-secret")
            .args(["config", "show", "--for", "up", "--config"])
            .arg(&file)
            .args(["--set", "runs.max_pending=7"]),
    );
    let file_source = file.display().to_string();
    for expected in [
        "listen = \"127.0.0.1:7002\"  # $SILK_LISTEN".to_owned(),
        "runs.max_pending = 7  # --set".to_owned(),
        format!("agents = 3  # {file_source}"),
        format!("runs.stall_timeout = \"2m\"  # {file_source}"),
        "runs.lease_timeout = \"2m\"  # default".to_owned(),
        "secret_key = \"***\"  # $SILK_SECRET_KEY".to_owned(),
    ] {
        assert!(shown.contains(&expected), "missing `{expected}`:\n{shown}");
    }
    assert!(!shown.contains("very-secret"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_reaches_a_running_up() {
    let dir = tempfile::tempdir().unwrap();
    let port = closed_port();
    let data = dir.path().join("state");
    let file = dir.path().join("up.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\nagents = 1\nno_auth = true\n[runs]\nmax_pending = 9\nstall_timeout = \"90s\"\n",
            data.display()
        ),
    )
    .unwrap();
    let mut cmd = silk_clean();
    cmd.current_dir(dir.path())
        .args(["up", "--config"])
        .arg(&file);
    let mut up = Proc::spawn(cmd, "up", &dir.path().join("up.log"));
    let line = up.wait_line("silk is up");
    assert!(
        line.contains(&format!("127.0.0.1:{port} with 1 local agents")),
        "{line}"
    );
    assert!(
        data.join("hub").is_dir(),
        "the data dir of the file is used"
    );
    // A run that sets neither gets the file's defaults.
    let spider = "name: s\nstart_urls: ['http://127.0.0.1:9/']\n";
    let url = reqwest::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let api = silk_api::client::Client::new(url, None).unwrap();
    let request: silk_api::runs::RunRequest =
        serde_json::from_value(serde_json::json!({ "spider": spider })).unwrap();
    let made = api.start_run(&request).await.unwrap();
    assert_eq!((made.max_pending, made.stall_timeout_ms), (9, 90_000));
}
