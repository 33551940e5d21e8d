//! `silk up --demo`, the README's first command, as a newcomer runs it: the platform with the
//! demo site and a demo job that runs at once; the admin token printed once (in the web UI's
//! URL), kept in a private file, required by the API, and never written to the logs.

mod cli_support;

use cli_support::{Proc, closed_port, silk};
use serde_json::Value;
use silk_api::ErrorCode;
use silk_api::client::Client;
use silk_api::runs::{RunState, RunView};
use std::time::Duration;
use tempfile::TempDir;

async fn get(http: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("GET");
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The demo run's id in `silk up --demo`'s `demo:` line.
fn demo_run(line: &str) -> String {
    line.split("run ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the demo run's id")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silk_up_demo_runs_a_live_demo_job_and_keeps_the_token_out_of_logs() {
    let dir = TempDir::new().unwrap();
    let port = closed_port();
    let base = format!("http://127.0.0.1:{port}");
    let start = |name: &str| {
        let mut cmd = silk();
        cmd.current_dir(dir.path()).env("RUST_LOG", "debug").args([
            "up",
            "--demo",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ]);
        Proc::spawn(cmd, name, &dir.path().join(format!("{name}.log")))
    };
    let mut up = start("up");
    let ui = up.wait_line("web UI:");
    let token = ui
        .split("#token=")
        .nth(1)
        .expect("the first start prints the token in the UI's URL")
        .trim()
        .to_owned();
    assert!(token.starts_with("silk_"), "{ui}");
    let file = dir.path().join(".silk/hub/admin.token");
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), token);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the token file is private");
    }
    let run = demo_run(&up.wait_line("demo:"));

    let http = reqwest::Client::new();
    let url = reqwest::Url::parse(&base).unwrap();
    for token in [None, Some(format!("{token}x"))] {
        let refused = Client::new(url.clone(), token).unwrap().jobs().await;
        assert_eq!(refused.unwrap_err().code(), Some(ErrorCode::Unauthorized));
    }
    let (status, page) = get(&http, &format!("{base}/"), None).await;
    assert_eq!(status, 200, "the web UI is served: {page}");
    // The demo run is live within seconds and finishes.
    let api = Client::new(url, Some(token.clone())).unwrap();
    let mut last = None;
    let every = Duration::from_millis(200);
    let done = silk_testkit::eventually(Duration::from_secs(60), every, async || {
        last = api.run(&run).await.ok();
        last.clone().filter(RunView::is_terminal)
    })
    .await
    .unwrap_or_else(|| panic!("the demo run did not finish: {last:?}"));
    assert_eq!(done.state, RunState::Succeeded, "{done:?}");
    assert_eq!(done.job_name.as_deref(), Some("demo"));
    assert!(done.stats.items > 100, "{done:?}");

    // The secret is printed once (the UI line) and nowhere else, also at debug level.
    up.kill();
    // `silk_<id>_<secret>`; the secret is base64url and may itself hold `_`.
    let secret = token.splitn(3, '_').nth(2).expect("the token's secret");
    let output = up.raw_output();
    assert_eq!(
        output.matches(secret).count(),
        1,
        "the token appears only in the UI line"
    );

    // A second start reuses the token: not printed again, the demo job runs again. It logs
    // at the default level, as JSON: only Silk's own events, ids as plain text.
    let mut cmd = silk();
    cmd.current_dir(dir.path())
        .env_remove("RUST_LOG")
        .args(["--log-format", "json", "up", "--demo", "--listen"])
        .arg(format!("127.0.0.1:{port}"));
    let mut again = Proc::spawn(cmd, "again", &dir.path().join("again.log"));
    let ui = again.wait_line("web UI:");
    assert!(!ui.contains("#token="), "{ui}");
    let run = demo_run(&again.wait_line("demo:"));
    silk_testkit::eventually(Duration::from_secs(60), every, async || {
        api.run(&run).await.ok().filter(RunView::is_terminal)
    })
    .await
    .expect("the second demo run finishes");
    again.kill();
    let output = again.raw_output();
    assert!(!output.contains(secret));
    let events: Vec<Value> = output
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        events.iter().any(|e| e["message"] == "run started"),
        "{output}"
    );
    for e in &events {
        let target = e["target"].as_str().unwrap_or_default();
        let level = e["level"].as_str().unwrap_or_default();
        assert!(
            target.starts_with("silk") || matches!(level, "WARN" | "ERROR"),
            "a dependency's {level} event at the default level: {e}"
        );
    }
    assert!(!output.contains("AgentId("), "{output}");
}

#[test]
fn no_auth_is_refused_off_loopback() {
    let out = silk()
        .args(["up", "--no-auth", "--listen", "0.0.0.0:0"])
        .output()
        .expect("silk up");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--no-auth") && stderr.contains("loopback"),
        "{stderr}"
    );
}
