//! Python converts from a plugins folder, run by real Python worker processes
//! (`examples/router/plugins/ic.py`: sample `ic.*` classes in the style of a taskHUB project;
//! `tests/fixtures/plugins`: `checks.*`, which misbehave, and `flaky.*`, which kill or hang
//! their worker a set number of times per task).
//! Python is `SILK_TEST_PYTHON` or `python3`.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use silk_router::{Config, Decision, Reason, Registry, Router};

/// The plugins folder of these tests: the example's `ic.py` and the fixtures' modules,
/// copied together (it lives as long as the process).
fn plugins_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(common::plugins).path().to_path_buf()
}

fn python() -> String {
    std::env::var("SILK_TEST_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// A config with the plugins folder and `inbound`'s convert chain; outbound `out` takes
/// every task into sink `sink`.
fn config_text(sink: &str, converts: &str, extra_plugins: &str, failure: &str) -> String {
    format!(
        "\
project: plug
routing:
  failure: {{path: '{failure}'}}
plugins:
  path: '{}'
  python: '{}'
{extra_plugins}
inbound:
  - name: logs
    class: http.HttpInbound
    convert:
{converts}
outbound:
  - name: out
    selector: ['True']
    class: test.MemoryOutbound
    init: {{sink: {sink}}}
",
        plugins_dir().display(),
        python()
    )
}

fn load(
    text: &str,
) -> (
    tempfile::TempDir,
    Result<Config, Vec<silk_router::ConfigError>>,
) {
    common::load(text, &common::vars(&[]))
}

fn ok(result: Result<Config, Vec<silk_router::ConfigError>>) -> Config {
    result.unwrap_or_else(|errors| {
        panic!(
            "{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

fn failure_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test]
async fn python_converts_run_in_order_with_the_built_in_ones_and_route() {
    let sink = common::unique("plugins-route");
    let state = tempfile::tempdir().expect("tempdir");
    let failure = state.path().join("failure.jsonl");
    let converts = "      - class: logstash.RemoveBuildinKeys
      - class: ic.ExtractTaskParams
      - class: ic.CaptchaExtraItem
        init: {codes: [1001]}
      - class: ic.ChangeSearchKey
      - class: ic.ParseSearchinfoItems
      - class: ic.ParseNoticeItem
        init: {prefix: ann}
      - class: checks.lowercase_name";
    let (_dir, config) = load(&config_text(
        &sink,
        converts,
        "",
        &failure.display().to_string(),
    ));
    let config = ok(config);
    config.verify_plugins().await.expect("every class loads");
    let router = Router::start(config).await.expect("starts");
    let task = json!({
        "@timestamp": "2024-05-01T08:00:00Z", "host": "logstash-1", "message": "…",
        "task_params": "{\"company_name\": \"宁乡县老粮仓镇楚江冻库\", \"credit_no\": \"92430124MA4MGMN16U\"}",
        "task_result": 1001, "captcha": true,
        "search_info": "[{\"url\": \"http://127.0.0.1/detail/1\", \"code\": \"C1\"}]",
        "notice": "change",
    });
    let outcome = router.submit(Some(0), task.clone()).await.expect("routed");
    assert_eq!(
        (outcome.decision, outcome.reason),
        (Decision::Routed, Reason::Matched),
        "{}",
        outcome.why
    );
    let pushed = common::sink(&sink).lock().expect("sink").clone();
    assert_eq!(pushed.len(), 1);
    let got = &pushed[0].1;
    assert_eq!(got["company_name"], "宁乡县老粮仓镇楚江冻库"); // lowercase leaves CJK as it is
    assert_eq!(got["search_key"], "92430124MA4MGMN16U");
    assert_eq!(got["task_src"], 3);
    assert_eq!(got["detail_url"], "http://127.0.0.1/detail/1");
    assert_eq!(got["company_code"], "C1");
    assert_eq!(got["data_type"], "ann:change");
    for gone in [
        "@timestamp",
        "host",
        "message",
        "task_params",
        "search_info",
        "notice",
    ] {
        assert!(got.get(gone).is_none(), "{gone} should be gone: {got}");
    }
    // The dry run runs the same chain.
    let answer = router.check_task("logs", &task).await;
    assert_eq!(answer.converted["search_key"], "92430124MA4MGMN16U");
    assert_eq!(answer.decision, Decision::Routed);
    let metrics = router.metrics_text();
    assert!(
        metrics.contains(
            "silk_router_convert_tasks_total{project=\"plug\",class=\"ic.ChangeSearchKey\"} 2"
        ),
        "{metrics}"
    );
    router.shutdown().await;
}

#[tokio::test]
async fn a_convert_that_raises_fails_its_task_with_the_exception_in_the_failure_record() {
    let sink = common::unique("plugins-raise");
    let state = tempfile::tempdir().expect("tempdir");
    let failure = state.path().join("failure.jsonl");
    let converts = "      - class: ic.ExtractTaskParams
      - class: checks.Explode
      - class: checks.NotADict";
    let (_dir, config) = load(&config_text(
        &sink,
        converts,
        "",
        &failure.display().to_string(),
    ));
    let router = Router::start(ok(config)).await.expect("starts");
    let task = json!({"task_params": {"explode": "bad row"}, "id": 1});
    let outcome = router.submit(Some(0), task.clone()).await.expect("ends");
    assert_eq!(
        (outcome.decision, outcome.reason),
        (Decision::Failed, Reason::ConvertFailed)
    );
    assert!(
        outcome
            .why
            .contains("convert `checks.Explode` failed: ValueError: boom: bad row"),
        "{}",
        outcome.why
    );
    let records = failure_records(&failure);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["reason"], "convert_failed");
    assert_eq!(records[0]["inbound"], "logs");
    assert!(
        records[0]["why"]
            .as_str()
            .unwrap_or_default()
            .contains("ValueError: boom: bad row")
    );
    // The task as it came (a replay runs the whole chain again).
    assert_eq!(records[0]["task"], task);
    // A convert returning something other than a dict fails the task too, named.
    let outcome = router
        .submit(Some(0), json!({"id": 2}))
        .await
        .expect("ends");
    assert_eq!(outcome.reason, Reason::ConvertFailed);
    assert!(
        outcome.why.contains("checks.NotADict") && outcome.why.contains("not a dict"),
        "{}",
        outcome.why
    );
    assert!(common::sink(&sink).lock().expect("sink").is_empty());
    assert_eq!(router.count(None, Reason::ConvertFailed), 2);
    // The dry run says the same, without recording.
    let answer = router.check_task("logs", &task).await;
    assert_eq!(answer.reason, Reason::ConvertFailed);
    assert_eq!(failure_records(&failure).len(), 2);
    router.shutdown().await;
}

#[tokio::test]
async fn a_worker_that_dies_or_hangs_is_restarted_and_its_task_tried_again() {
    let sink = common::unique("plugins-flaky");
    let state = tempfile::tempdir().expect("tempdir");
    let failure = state.path().join("failure.jsonl");
    let state_dir = state.path().display().to_string();
    let converts = format!(
        "      - class: flaky.Crash
        init: {{state_dir: '{state_dir}'}}
      - class: flaky.Hang
        init: {{state_dir: '{state_dir}/hang'}}"
    );
    std::fs::create_dir_all(state.path().join("hang")).expect("mkdir");
    let (_dir, config) = load(&config_text(
        &sink,
        &converts,
        "  timeout_ms: 3000",
        &failure.display().to_string(),
    ));
    let router = Router::start(ok(config)).await.expect("starts");

    // Dies once: the worker is restarted and the task goes through on the new one.
    let outcome = router
        .submit(Some(0), json!({"id": "a", "crash_times": 1}))
        .await
        .expect("routed");
    assert_eq!(outcome.decision, Decision::Routed, "{}", outcome.why);
    // Dies twice, then hangs once (killed at the timeout): still routed.
    let outcome = router
        .submit(
            Some(0),
            json!({"id": "b", "crash_times": 2, "hang_times": 1}),
        )
        .await
        .expect("routed");
    assert_eq!(outcome.decision, Decision::Routed, "{}", outcome.why);
    let pushed = common::sink(&sink).lock().expect("sink").clone();
    assert_eq!(pushed.len(), 2);
    assert!(
        pushed
            .iter()
            .all(|(_, t)| t["survived_crash_times"] == true && t["survived_hang_times"] == true)
    );

    // Kills every worker it meets: failed after three, recorded, not lost.
    let outcome = router
        .submit(Some(0), json!({"id": "c", "crash_times": 10}))
        .await
        .expect("ends");
    assert_eq!(
        (outcome.decision, outcome.reason),
        (Decision::Failed, Reason::ConvertFailed)
    );
    assert!(
        outcome.why.contains("flaky.Crash") && outcome.why.contains("3 times"),
        "{}",
        outcome.why
    );
    let records = failure_records(&failure);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["task"]["id"], "c");
    // The next task finds a fresh worker.
    let outcome = router
        .submit(Some(0), json!({"id": "d"}))
        .await
        .expect("routed");
    assert_eq!(outcome.decision, Decision::Routed, "{}", outcome.why);
    let metrics = router.metrics_text();
    for line in [
        // a: 1, b: 2, c: 3 restarts of the worker while running flaky.Crash.
        "silk_router_convert_worker_restarts_total{project=\"plug\",class=\"flaky.Crash\"} 6",
        // b hung once in flaky.Hang.
        "silk_router_convert_worker_restarts_total{project=\"plug\",class=\"flaky.Hang\"} 1",
        "silk_router_convert_crashed_total{project=\"plug\",class=\"flaky.Crash\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    router.shutdown().await;
}

#[tokio::test]
async fn check_names_every_class_that_does_not_load_at_its_place() {
    let sink = common::unique("plugins-check");
    let converts = "      - class: ic.ExtractTaskParams
      - class: ic.NoSuchClass
      - class: nope.Missing
      - class: checks.NeedsInit
      - class: ic.ExtractTaskParams
        init: {unknown_keyword: 1}";
    let (_dir, result) = load(&config_text(&sink, converts, "", "/tmp/unused.jsonl"));
    // The missing module is found at load, without running code.
    let text = common::errors_of(result);
    assert!(
        text.contains(
            "convert 3: convert class `nope.Missing` is not built in, and the plugins folder"
        ) && text.contains("has no `nope.py` or `nope/__init__.py`"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");

    let converts = "      - class: ic.ExtractTaskParams
      - class: ic.NoSuchClass
      - class: checks.NeedsInit
      - class: ic.ExtractTaskParams
        init: {unknown_keyword: 1}";
    let (_dir, result) = load(&config_text(&sink, converts, "", "/tmp/unused.jsonl"));
    let config = ok(result);
    let errors = config
        .verify_plugins()
        .await
        .expect_err("three do not load");
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 3, "{text:#?}");
    assert!(
        text[0].contains("main.yaml:")
            && text[0].contains("inbound `logs`: convert 2: `ic.NoSuchClass`")
            && text[0].contains("has no `NoSuchClass`"),
        "{text:#?}"
    );
    assert!(
        text[1].contains("convert 3: `checks.NeedsInit`") && text[1].contains("required"),
        "{text:#?}"
    );
    assert!(
        text[2].contains("convert 4") && text[2].contains("unknown_keyword"),
        "{text:#?}"
    );
    // A router does not start with them.
    let error = Router::start(config).await.expect_err("does not start");
    assert!(error.to_string().contains("ic.NoSuchClass"), "{error}");
}

#[tokio::test]
async fn no_interpreter_is_a_clear_error() {
    let sink = common::unique("plugins-nopython");
    let text = config_text(
        &sink,
        "      - class: ic.ExtractTaskParams",
        "",
        "/tmp/unused.jsonl",
    )
    .replace(
        &format!("python: '{}'", python()),
        "python: '/nonexistent/python9'",
    );
    let (_dir, result) = load(&text);
    let config = ok(result);
    let errors = config.verify_plugins().await.expect_err("no python");
    assert!(
        errors[0]
            .to_string()
            .contains("cannot start `/nonexistent/python9`"),
        "{}",
        errors[0]
    );
}

#[test]
fn without_a_plugins_folder_an_unknown_class_says_where_python_converts_come_from() {
    let (_dir, result) = load(
        "
inbound:
  - {name: i, class: http.HttpInbound, convert: [ic.ExtractTaskParams]}
",
    );
    let text = common::errors_of(result);
    assert!(
        text.contains("unknown convert class `ic.ExtractTaskParams`")
            && text.contains("`plugins: path/to/dir` or `--plugins`"),
        "{text}"
    );
}

#[test]
fn the_registry_plugins_folder_wins_over_the_configs() {
    let mut registry: Registry = common::registry();
    registry.set_plugins_dir(plugins_dir());
    let dir = common::tree(&[(
        "main.yaml",
        "
plugins: does/not/exist
inbound:
  - {name: i, class: http.HttpInbound, convert: [ic.ExtractTaskParams, flaky.Crash]}
",
    )]);
    let config = Config::load_with(
        &[dir.path().join("main.yaml")],
        &common::vars(&[]),
        &registry,
    )
    .expect("loads with --plugins");
    assert_eq!(config.plugins().map(|p| p.dir.clone()), Some(plugins_dir()));
    assert_eq!(
        config.plugins().map(|p| p.timeout),
        Some(Duration::from_secs(30))
    );
}
