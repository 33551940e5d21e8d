//! The control plane's CLI against a real platform: `silk up` (hub + two local agents) and the
//! demo site as processes on loopback, driven by the `silk` binary the way a user drives it:
//! jobs from files, triggers, runs and their controls, logs (also followed), items, tokens and
//! where the token comes from, alert rules from files.

mod cli_support;

use cli_support::{DEADLINE, Platform, Proc, output};
use serde_json::Value;
use silk_api::runs::{RunState, RunView};
use std::time::Instant;

/// A job file whose spider is in a file next to it.
fn job_file(p: &Platform, job: &str, spider_extra: &str, job_extra: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(p.path("jobs/spiders")).unwrap();
    p.spider(&format!("jobs/spiders/{job}.yaml"), job, spider_extra);
    let path = p.path(&format!("jobs/{job}.yaml"));
    std::fs::write(
        &path,
        format!(
            "# a job\nname: {job}\nspider_file: spiders/{job}.yaml\nremarks: made by the CLI test\n{job_extra}"
        ),
    )
    .unwrap();
    path
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn jobs_from_files_are_created_listed_updated_and_deleted_keeping_their_runs() {
    let p = Platform::start(30);
    let file = job_file(&p, "shop", "per_host_delay_ms: 0\n", "args: {cat: books}\n");
    let file = file.to_str().unwrap();

    // Create: the id on stdout.
    let id = p.ok(&["jobs", "create", "-f", file]).trim().to_owned();
    assert!(!id.is_empty());
    // The same name again: one line from the API, exit 1.
    let (out, stderr) = output(p.cli().args(["jobs", "create", "-f", file]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(lines(&stderr).len(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("(conflict, HTTP 409)"),
        "{stderr}"
    );

    // A field the hub refuses is pointed at in the file.
    std::fs::write(
        p.path("jobs/bad.yaml"),
        "name: bad\nspider_file: spiders/shop.yaml\ncron: 'every day'\n",
    )
    .unwrap();
    let (out, stderr) = output(p.cli().args(["jobs", "create", "-f", "jobs/bad.yaml"]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(lines(&stderr).len(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: jobs/bad.yaml:3: ")
            && stderr.contains("(bad_request, HTTP 400)"),
        "{stderr}"
    );

    // List: a table for people, the API's JSON for scripts.
    let table = p.ok(&["jobs", "list"]);
    let rows = lines(&table);
    assert!(
        rows[0].starts_with("NAME") && rows[0].contains("LAST-RUN"),
        "{table}"
    );
    assert!(
        rows[1].starts_with("shop") && rows[1].contains(&id),
        "{table}"
    );
    let listed = p.json(&["jobs", "list"]);
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["spider_name"], "shop", "{listed}");
    assert!(
        listed[0]["spider"]
            .as_str()
            .is_some_and(|s| s.contains("per_host_delay_ms: 0")),
        "the spider file's text was sent: {listed}"
    );
    let shown = p.ok(&["jobs", "show", "shop"]);
    assert!(
        shown.contains("made by the CLI test") && shown.contains("spider: |"),
        "{shown}"
    );

    let run = p.ok(&["jobs", "trigger", "shop", "--wait"]);
    let run = run.trim();

    // Update: disable, then change a field from a patch file (null clears).
    p.ok(&["jobs", "update", "shop", "--disable"]);
    let table = p.ok(&["jobs", "list"]);
    assert!(lines(&table)[1].contains(" no "), "{table}");
    std::fs::write(p.path("patch.yaml"), "remarks: null\nargs: {cat: games}\n").unwrap();
    let patched = p.json(&["jobs", "update", "shop", "-f", "patch.yaml", "--enable"]);
    assert_eq!(patched["enabled"], true, "{patched}");
    assert_eq!(patched["args"]["cat"], "games", "{patched}");
    assert!(
        patched["remarks"].is_null() || patched["remarks"] == "",
        "cleared: {patched}"
    );

    // Delete: gone; its runs stay.
    p.ok(&["jobs", "delete", "shop"]);
    assert_eq!(p.json(&["jobs", "list"]), serde_json::json!([]));
    let (out, stderr) = output(p.cli().args(["jobs", "show", "shop"]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(not_found, HTTP 404)"), "{stderr}");
    assert!(p.ok(&["runs"]).contains(run));
}

#[test]
fn a_triggered_job_run_is_listed_and_its_logs_and_items_are_read() {
    let p = Platform::start(30);
    let file = job_file(&p, "shop", "per_host_delay_ms: 0\n", "args: {cat: books}\n");
    let file = file.to_str().unwrap();
    p.ok(&["jobs", "create", "-f", file]);
    let id = p.json(&["jobs", "show", "shop"])["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Trigger and wait: the run id on stdout, exit 0 when it succeeded.
    let run = p.ok(&["jobs", "trigger", "shop", "--arg", "extra=1", "--wait"]);
    let run = run.trim();
    let view: RunView = p.view(&["runs", "show", run]);
    assert_eq!(view.state, RunState::Succeeded, "{view:?}");
    assert_eq!(view.job_name.as_deref(), Some("shop"), "{view:?}");
    let items_count = view.stats.items;
    assert!(items_count > 0, "{view:?}");
    assert!(p.ok(&["runs", "show", run]).contains("state"));

    // The run is listed by job and by state, and under the job.
    let runs = p.ok(&["runs", "--job", "shop"]);
    assert!(runs.contains(run) && runs.contains("succeeded"), "{runs}");
    let runs = p.json(&["runs", "list", "--state", "succeeded", "--limit", "5"]);
    assert!(
        runs.as_array().unwrap().iter().any(|r| r["id"] == run),
        "{runs}"
    );
    assert!(p.ok(&["jobs", "runs", "shop"]).contains(run));
    let listed = p.json(&["jobs", "show", &id]);
    assert_eq!(listed["last_run"]["id"], run, "{listed}");

    // The run's log is written in batches: its end line is there soon after the run ended.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while lines(&p.ok(&["logs", run, "--grep", "run succeeded"])).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the run's end is not in its log"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // Logs: not empty; the level filter keeps that level and above.
    let all = p.ok(&["logs", run, "--level", "trace"]);
    assert!(!lines(&all).is_empty(), "no log lines");
    for line in lines(&all) {
        let mut words = line.split_whitespace();
        let ts = words.next().unwrap();
        assert!(humantime::parse_rfc3339(ts).is_ok(), "{line}");
        let level = words.next().unwrap();
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
            "{line}"
        );
    }
    let warn = p.ok(&["logs", run, "--level", "warn"]);
    for line in lines(&warn) {
        assert!(
            line.contains(" WARN ") || line.contains(" ERROR "),
            "{line}"
        );
    }
    let info = p.ok(&["logs", run, "--level", "info"]);
    assert!(
        lines(&info).iter().any(|l| l.contains(" INFO ")),
        "the run logs its start and end: {info}"
    );
    assert!(lines(&info).len() >= lines(&warn).len());
    // The last N; JSON lines for scripts.
    // (Agents' last lines may still arrive after the run ended: the log only grows.)
    let last2 = p.ok(&["logs", run, "--level", "trace", "--limit", "2"]);
    let all_lines = lines(&all);
    let later = p.ok(&["logs", run, "--level", "trace"]);
    let later = lines(&later);
    assert_eq!(later[..all_lines.len()], all_lines[..]);
    assert!(later.len() >= lines(&info).len());
    let last2 = lines(&last2);
    let at = later.iter().position(|l| *l == last2[0]).unwrap();
    assert_eq!(later[at..at + 2], last2[..], "consecutive");
    assert!(at + 2 >= all_lines.len(), "the last two: {last2:?}\n{all}");
    let json = p.ok(&["logs", run, "--json"]);
    for line in lines(&json) {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v["message"].is_string(), "{line}");
    }
    // Text search: the lines that contain it.
    let word = all_lines
        .last()
        .unwrap()
        .split("  ")
        .last()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let found = p.ok(&["logs", run, "--level", "trace", "--grep", &word]);
    assert!(!lines(&found).is_empty(), "{word}");
    assert!(
        lines(&found).iter().all(|l| l.contains(&word)),
        "{word}: {found}"
    );
    let since = p.ok(&["logs", run, "--level", "trace", "--since", "1h"]);
    assert_eq!(lines(&since)[..all_lines.len()], all_lines[..]);
    // Across runs: the job's lines with the text, each naming its run; none before a time
    // long past.
    let across = p.ok(&[
        "logs",
        "--job",
        "shop",
        "--since",
        "1d",
        "--grep",
        "run succeeded",
    ]);
    assert!(!lines(&across).is_empty(), "{across}");
    assert!(
        lines(&across)
            .iter()
            .all(|l| l.contains(run) && l.contains("run succeeded")),
        "{across}"
    );
    let long_ago = p.ok(&["logs", "--job", "shop", "--until", "2000-01-01T00:00:00Z"]);
    assert!(lines(&long_ago).is_empty(), "{long_ago}");

    // Items: JSON Lines, as many as the run counted.
    let items = p.ok(&["items", run, "--all"]);
    assert_eq!(lines(&items).len() as u64, items_count, "{items}");
    for line in lines(&items) {
        let item: Value = serde_json::from_str(line).unwrap();
        assert!(item.is_object(), "{line}");
    }
    let few = p.ok(&["items", run, "--limit", "2"]);
    assert_eq!(lines(&few), lines(&items)[..2]);

    // Finished requests (the archive, written a moment after the results): as many as the
    // run finished; the demo site's missing pages failed with 404.
    let finished = view.stats.success + view.stats.failed + view.stats.dropped;
    let rows = p.until(
        "every finished request in the archive",
        &["runs", "requests", run, "--all"],
        |v| v.as_array().is_some_and(|a| a.len() as u64 == finished),
    );
    let failed = p.json(&["runs", "requests", run, "--outcome", "failed", "--all"]);
    let failed = failed.as_array().unwrap();
    assert_eq!(failed.len() as u64, view.stats.failed, "{failed:?}");
    assert!(!failed.is_empty(), "the demo site has missing pages");
    for r in failed {
        assert_eq!(r["status"], 404, "{r}");
        assert_eq!(r["error_code"], "http_404", "{r}");
        assert!(r["url"].as_str().unwrap().contains("/missing/"), "{r}");
    }
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["outcome"] == "done")
    );
    let table = p.ok(&[
        "runs",
        "requests",
        run,
        "--outcome",
        "failed",
        "--limit",
        "1",
    ]);
    assert!(
        table.contains("http_404") && table.contains("/missing/") && lines(&table).len() == 2,
        "a header and one row: {table}"
    );
    // Requeued once, into a run of the job (this one is over).
    let requeued = p.ok(&["runs", "requeue", run, "--status", "404"]);
    assert!(
        requeued.starts_with(&format!(
            "{} request(s) queued again, into run ",
            failed.len()
        )),
        "{requeued}"
    );
    let again = p.ok(&["runs", "requeue", run]);
    assert!(again.starts_with("0 request(s) queued again"), "{again}");

    // The ad-hoc commands still work, with the token.
    let spider = p.spider(
        "adhoc.yaml",
        "adhoc",
        "per_host_delay_ms: 0\nmax_pages: 5\n",
    );
    let adhoc = p.ok(&["run", spider.to_str().unwrap(), "--wait"]);
    assert!(!adhoc.trim().is_empty());
    let agents = p.ok(&["agents"]);
    assert!(
        agents.contains("local-1") && agents.contains("alive"),
        "{agents}"
    );
}

#[test]
fn runs_pause_resume_cancel_restart_and_logs_follow() {
    let p = Platform::start(100);
    // Slow: one request at a time per host, spaced.
    let slow = job_file(
        &p,
        "slow",
        "per_host_concurrency: 1\nper_host_delay_ms: 300\n",
        "",
    );
    p.ok(&["jobs", "create", "-f", slow.to_str().unwrap()]);
    let run = p.ok(&["jobs", "trigger", "slow"]).trim().to_owned();

    // logs -f of the running run, in the background.
    let mut cmd = p.cli();
    cmd.args(["logs", "-f", &run, "--level", "trace"]);
    let mut follow = Proc::spawn(cmd, "logs -f", &p.path("follow.log"));

    assert_eq!(
        p.ok(&["runs", "pause", &run]).trim(),
        format!("run {run}: paused")
    );
    p.until_view("the run paused", &["runs", "show", &run], |v: &RunView| {
        v.state == RunState::Paused
    });
    // Pausing again is the API's error, in one line.
    let (out, stderr) = output(p.cli().args(["runs", "pause", &run]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(wrong_state, HTTP 409)"), "{stderr}");
    let resumed = p.json(&["runs", "resume", &run]);
    assert_eq!(resumed["id"], run.as_str());
    p.until_view("the run running", &["runs", "show", &run], |v: &RunView| {
        v.state == RunState::Running
    });
    p.ok(&["runs", "cancel", &run]);

    // `runs wait` of a cancelled run: exit 3 with the reason on stderr.
    let (out, stderr) = output(p.cli().args(["runs", "wait", &run]));
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");
    // logs -f ended with the run.
    assert_eq!(follow.wait_exit(), Some(0), "{}", follow.output());
    let followed = follow.output();
    assert!(
        followed.contains(&format!("run {run} ended: cancelled")),
        "{followed}"
    );

    // Restart: a new run, restart_of the old one.
    let new = p
        .ok(&["runs", "restart", &run, "--keep-frontier"])
        .trim()
        .to_owned();
    assert_ne!(new, run);
    let view = p.json(&["runs", "show", &new]);
    assert_eq!(view["restart_of"], run.as_str(), "{view}");
    // Ctrl-C stops following (exit 130).
    let mut cmd = p.cli();
    cmd.args(["logs", "-f", &new, "--level", "trace"]);
    let mut follow = Proc::spawn(cmd, "logs -f (interrupted)", &p.path("follow2.log"));
    follow.wait_line(" INFO ");
    interrupt(follow.child.id());
    assert_eq!(follow.wait_exit(), Some(130), "{}", follow.output());
    p.ok(&["runs", "cancel", &new]);

    // A short run followed from its start ends by itself when the run ends.
    // (Its page budget is an argument: the job's, overridden by the trigger's.)
    let quick = job_file(
        &p,
        "quick",
        "per_host_delay_ms: 50\nmax_pages: ${args.max}\n",
        "args: {max: 1000}\n",
    );
    p.ok(&["jobs", "create", "-f", quick.to_str().unwrap()]);
    let run = p
        .ok(&["jobs", "trigger", "quick", "--arg", "max=12"])
        .trim()
        .to_owned();
    let started = Instant::now();
    let mut cmd = p.cli();
    cmd.args(["logs", "-f", &run]);
    let mut follow = Proc::spawn(cmd, "logs -f (quick)", &p.path("follow3.log"));
    assert_eq!(follow.wait_exit(), Some(0), "{}", follow.output());
    assert!(started.elapsed() < DEADLINE);
    assert!(
        follow
            .output()
            .contains(&format!("run {run} ended: succeeded")),
        "{}",
        follow.output()
    );
    let view = p.json(&["runs", "show", &run]);
    assert_eq!(view["args"]["max"], "12", "{view}");
    assert!(
        view["stats"]["success"].as_u64().unwrap() <= 12 + 8,
        "{view}"
    );
}

/// Sends SIGINT (Ctrl-C) to the process `pid` (with `kill`: the workspace forbids unsafe code).
fn interrupt(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[test]
fn tokens_and_where_the_token_comes_from() {
    let p = Platform::start(10);
    let admin = std::fs::read_to_string(p.path(".silk/hub/admin.token"))
        .expect("silk up writes DATA_DIR/hub/admin.token")
        .trim()
        .to_owned();

    // The file (found through the default --data-dir .silk) works.
    p.ok(&["jobs", "list"]);

    // A wrong SILK_TOKEN beats the file: refused, in one line, without the token.
    let wrong = "silk_nope_0123456789abcdef";
    let (out, stderr) = output(p.cli().args(["jobs", "list"]).env("SILK_TOKEN", wrong));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(lines(&stderr).len(), 1, "{stderr}");
    assert!(
        stderr.contains("refused the token (the token from SILK_TOKEN")
            && stderr
                .contains("pass --token, set SILK_TOKEN or run where DATA_DIR/hub/admin.token"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stderr.contains(wrong) && !stdout.contains(wrong),
        "{stderr}"
    );
    // --token beats SILK_TOKEN.
    p.ok(&["jobs", "list", "--token", &admin]);
    let (out, _) = output(
        p.cli()
            .args(["jobs", "list", "--token", &admin])
            .env("SILK_TOKEN", wrong),
    );
    assert!(out.status.success());
    let (out, stderr) = output(
        p.cli()
            .args(["runs", "--token", wrong])
            .env("SILK_TOKEN", &admin),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the token from --token") && !stderr.contains(wrong),
        "{stderr}"
    );
    // No token anywhere: said so.
    let (out, stderr) = output(p.cli().args(["agents", "--data-dir", "elsewhere"]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("wants a token (no token"), "{stderr}");
    // `silk hub --data-dir DIR` keeps its token in DIR: found there too.
    p.ok(&["agents", "--data-dir", ".silk/hub"]);

    // Tokens: created (printed once, alone on stdout), listed, used, deleted.
    let created = p.ok(&["tokens", "create", "ci"]);
    let ci = created.trim();
    assert_eq!(lines(&created).len(), 1, "{created}");
    assert!(ci.starts_with("silk_"), "{created}");
    let table = p.ok(&["tokens", "list"]);
    assert!(table.contains("ci") && !table.contains(ci), "{table}");
    let listed = p.json(&["tokens", "list"]);
    let id = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .and_then(|t| t["id"].as_str())
        .unwrap()
        .to_owned();
    let (out, stderr) = output(
        p.cli()
            .args(["runs", "--data-dir", "elsewhere"])
            .env("SILK_TOKEN", ci),
    );
    assert!(out.status.success(), "{stderr}");
    p.ok(&["tokens", "delete", &id]);
    let (out, stderr) = output(
        p.cli()
            .args(["runs", "--data-dir", "elsewhere"])
            .env("SILK_TOKEN", ci),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refused the token"), "{stderr}");
}

#[test]
fn alert_rules_from_files_are_created_tested_replaced_and_deleted() {
    let p = Platform::start(10);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(silk_testkit::Receiver::start()).unwrap();
    let file = p.path("rule.yaml");
    std::fs::write(
        &file,
        format!(
            "# failures of job shop, as JSON\nname: shop-hook\nevents: [run_failed, run_stalled]\n\
             job: shop\nchannel:\n  webhook:\n    url: {}\n    headers: {{X-Token: tok-5d1e}}\n",
            receiver.url("/hook/path-secret")
        ),
    )
    .unwrap();
    let created = p.ok(&["alerts", "create", "-f", "rule.yaml"]);
    assert!(
        created.contains("shop-hook") && created.contains("job shop"),
        "{created}"
    );
    let table = p.ok(&["alerts", "rules"]);
    assert!(table.contains("run_failed,run_stalled"), "{table}");
    let listed = p.json(&["alerts", "rules"]).to_string();
    for secret in ["path-secret", "tok-5d1e"] {
        assert!(
            !table.contains(secret) && !listed.contains(secret),
            "{listed}"
        );
    }

    // A test goes through the channel; the deliveries say so.
    p.ok(&["alerts", "test", "shop-hook"]);
    p.until(
        "the test delivery sent",
        &["alerts", "deliveries", "--rule", "shop-hook"],
        |v| v[0]["state"] == "sent" && v[0]["event"] == "test",
    );
    let got = receiver.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].path, "/hook/path-secret");
    assert_eq!(got[0].headers["x-token"], "tok-5d1e");
    assert_eq!(got[0].json()["facts"]["rule"], "shop-hook");

    // Replaced by a file without the secrets: they are kept; the form is Slack's now.
    std::fs::write(
        &file,
        "name: shop-hook\nevents: [run_failed]\njob: shop\nchannel: {webhook: {format: slack}}\n",
    )
    .unwrap();
    p.ok(&["alerts", "replace", "-f", "rule.yaml"]);
    p.ok(&["alerts", "test", "shop-hook"]);
    p.until(
        "the second test sent",
        &[
            "alerts",
            "deliveries",
            "--rule",
            "shop-hook",
            "--state",
            "sent",
        ],
        |v| v.as_array().is_some_and(|a| a.len() == 2),
    );
    let got = receiver.received();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1].path, "/hook/path-secret");
    assert_eq!(got[1].headers["x-token"], "tok-5d1e");
    assert!(
        got[1].json()["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[silk] Test alert of rule shop-hook")),
        "{got:?}"
    );

    // A bad file is refused naming the key, before the hub.
    std::fs::write(&file, "name: x\nevnts: [run_failed]\n").unwrap();
    let (out, stderr) = output(p.cli().args(["alerts", "create", "-f", "rule.yaml"]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rule.yaml") && stderr.contains("evnts"),
        "{stderr}"
    );

    p.ok(&["alerts", "delete", "shop-hook"]);
    let listed = p.json(&["alerts", "rules"]);
    assert_eq!(listed, serde_json::json!([]));
}

#[test]
fn projects_from_a_file_build_by_hand_list_versions_follow_the_log_and_delete() {
    use silk_api::projects::{ProjectView, VersionState, VersionView};
    let p = Platform::start(5);
    // A real git server with basic auth, on a runtime that lives as long as the test.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = p.path("git");
    let repo = silk_testkit::WorkRepo::init(&p.path("work"), &root, "shop");
    repo.commit(&[("crawl.sh", "echo crawling\n")], "first");
    repo.tag("release/shop/1.0.0");
    repo.push();
    let password = "cli-pw-5e1f";
    let git = rt
        .block_on(silk_testkit::GitServer::start(&root, "bot", password))
        .unwrap();
    let file = p.path("project.yaml");
    std::fs::write(
        &file,
        format!(
            "name: shop\ngit_url: {}\nusername: bot\npassword: {password}\n\
             build:\n  kind: command\n  command: mkdir -p out && cp crawl.sh out/ && echo packed\n",
            git.url("shop")
        ),
    )
    .unwrap();
    let secret = p.ok(&["projects", "create", "-f", file.to_str().unwrap()]);
    assert!(
        secret.trim().len() >= 32,
        "the secret alone on stdout: {secret}"
    );
    let listed = p.ok(&["projects", "list"]);
    assert!(
        listed.contains("shop") && listed.contains("command"),
        "{listed}"
    );
    let shown: ProjectView = p.view(&["projects", "show", "shop"]);
    assert!(shown.has_password);
    assert!(!p.ok(&["projects", "show", "shop"]).contains(password));

    // A build by hand, waited for: its log is printed, the exit says it is ready.
    let waited = p.ok(&[
        "projects",
        "build",
        "shop",
        "--ref",
        "release/shop/1.0.0",
        "--wait",
    ]);
    assert!(waited.contains("packed"), "{waited}");
    let versions = p.ok(&["versions", "shop"]);
    assert!(
        versions.contains("1.0.0") && versions.contains("ready"),
        "{versions}"
    );
    let v: VersionView = p.view(&["versions", "shop", "1.0.0"]);
    assert_eq!(
        (v.state, v.commit.as_deref()),
        (VersionState::Ready, Some(repo.head().as_str()))
    );
    let log = p.ok(&["versions", "shop", "1.0.0", "--log"]);
    assert!(log.contains("packed") && log.contains("ready"), "{log}");

    // A bad file names the field; a failing build exits non-zero with --wait.
    std::fs::write(
        p.path("bad.yaml"),
        "name: x\ngit_url: http://h/x\nbuild: {kind: cmd}\n",
    )
    .unwrap();
    let (out, stderr) = output(p.cli().args(["projects", "create", "-f", "bad.yaml"]));
    assert!(
        !out.status.success() && stderr.contains("build.kind"),
        "{stderr}"
    );
    let (out, stderr) = output(p.cli().args([
        "projects",
        "build",
        "shop",
        "--ref",
        "nope",
        "--version",
        "9",
        "--wait",
    ]));
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("failed"), "{stderr}");

    p.ok(&["versions", "shop", "9", "--delete"]);
    p.ok(&["projects", "delete", "shop"]);
    let (out, stderr) = output(p.cli().args(["versions", "shop"]));
    assert!(
        !out.status.success() && stderr.contains("no project `shop`"),
        "{stderr}"
    );
    // The password is in no log line of the platform.
    assert!(
        !p.up.raw_output().contains(password),
        "the hub logged the password"
    );
    drop(git);
}

#[test]
fn tenants_get_weights_quotas_and_networks_and_show_their_usage() {
    let p = Platform::start(10);
    p.ok(&["tenants", "create", "acme", "--weight", "3", "--pool", "eu"]);
    let set = p.json(&[
        "tenants",
        "quotas",
        "acme",
        "--pages-per-day",
        "1000",
        "--concurrent-runs",
        "2",
        "--time-zone",
        "Europe/Paris",
    ]);
    assert_eq!(set["quotas"]["pages_per_day"], 1000, "{set}");
    assert_eq!(set["quotas"]["concurrent_runs"], 2, "{set}");
    assert_eq!(set["weight"], 3, "{set}");
    let usage = p.json(&["tenants", "usage", "acme"]);
    assert_eq!(usage["pages"], 0, "{usage}");
    assert_eq!(usage["time_zone"], "Europe/Paris", "{usage}");
    assert_eq!(usage["quotas"]["pages_per_day"], 1000, "{usage}");
    let text = p.ok(&["tenants", "usage", "acme"]);
    assert!(text.contains("0 of 1000"), "{text}");
    let weighted = p.json(&["tenants", "weight", "acme", "1"]);
    assert_eq!(weighted["weight"], 1, "{weighted}");
    let cleared = p.json(&["tenants", "quotas", "acme", "--none"]);
    assert!(cleared.get("quotas").is_none(), "{cleared}");
    let (out, stderr) =
        output(
            p.cli()
                .args(["tenants", "quotas", "acme", "--time-zone", "Mars/Olympus"]),
        );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("quotas.time_zone"), "{stderr}");
    // Private networks: the whole list, checked; none given: none.
    let opened = p.json(&["tenants", "networks", "acme", "10.1.0.0/16", "10.2.3.4"]);
    assert_eq!(
        opened["allow_networks"],
        serde_json::json!(["10.1.0.0/16", "10.2.3.4/32"]),
        "{opened}"
    );
    let listed = p.ok(&["tenants", "list"]);
    assert!(listed.contains("10.1.0.0/16,10.2.3.4/32"), "{listed}");
    let (out, stderr) = output(p.cli().args(["tenants", "networks", "acme", "intranet"]));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("allow_networks[0]"), "{stderr}");
    let closed = p.json(&["tenants", "networks", "acme"]);
    assert!(closed.get("allow_networks").is_none(), "{closed}");
}
