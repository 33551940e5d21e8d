//! A push the target refuses for good (`RouterError::Refused`, e.g. a task with no usable
//! URL for a job outbound) ends the task as failed with reason `refused`: recorded in the
//! failure record, counted, answered `200` by `POST /task/`, and acknowledged by a Redis
//! list inbound instead of being put back (which would offer it again forever). The
//! refusing outbound is a test class registered through `Registry::register_outbound`, the
//! seam the hub uses for `silk.JobOutbound`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::StatusCode;
use redis::AsyncCommands;
use serde_json::{Value, json};
use silk_router::{
    Config, Decision, InitReader, Outbound, OutboundFactory, Outgoing, Reason, Registry, Router,
    RouterError,
};

/// `test.RefusingOutbound`: takes tasks with a non-empty string `url` (into the sink named
/// by `init.sink`, see [`common::sink`]) and refuses every other one for good.
struct RefusingFactory;

impl OutboundFactory for RefusingFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["sink"]
    }
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let name = init.str("sink")?;
        Some(Arc::new(Refusing {
            outbound: init.rule_name().to_owned(),
            sink: common::sink(&name),
        }))
    }
}

struct Refusing {
    outbound: String,
    sink: common::Sink,
}

#[async_trait]
impl Outbound for Refusing {
    fn target(&self) -> String {
        format!("picky memory `{}`", self.outbound)
    }
    fn has_backlog(&self) -> bool {
        false
    }
    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let mut sink = self.sink.lock().expect("sink");
        batch
            .iter()
            .map(|o| {
                let task: Value = serde_json::from_slice(&o.payload).expect("payload is JSON");
                match task.get("url").and_then(Value::as_str) {
                    Some(url) if !url.is_empty() => {
                        sink.push((self.outbound.clone(), task));
                        Ok(())
                    }
                    _ => Err(RouterError::Refused {
                        target: self.target(),
                        message: "the task has no `url`".into(),
                    }),
                }
            })
            .collect()
    }
    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        Ok(None)
    }
}

fn registry() -> Registry {
    let mut registry = common::registry();
    registry.register_outbound("test.RefusingOutbound", Arc::new(RefusingFactory));
    registry
}

/// The config: `inbound` (YAML list items) feeding the outbound `picky`, which refuses
/// tasks without a `url`; failed tasks are recorded in `failure_dir`.
fn load(inbound: &str, sink: &str, failure_dir: &Path, vars: &[(&str, &str)]) -> Config {
    let text = format!(
        "
project: p
routing:
  failure: {{path: '{}'}}
inbound:
{inbound}
outbound:
  - name: picky
    selector: ['True']
    class: test.RefusingOutbound
    init: {{sink: {sink}}}
",
        failure_dir.display()
    );
    let dir = common::tree(&[("main.yaml", &text)]);
    Config::load_with(
        &[dir.path().join("main.yaml")],
        &common::vars(vars),
        &registry(),
    )
    .unwrap_or_else(|errors| {
        panic!(
            "config errors:\n{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn failure_file(dir: &Path) -> PathBuf {
    dir.join("p-failure.jsonl")
}

const WHY: &str = "picky memory `picky` refused the task: the task has no `url`";

#[tokio::test]
async fn a_refused_push_fails_the_task_and_records_it() {
    let sink_name = common::unique("refused");
    let failures = tempfile::tempdir().expect("tempdir");
    let config = load(
        "  - {name: api, class: http.HttpInbound}",
        &sink_name,
        failures.path(),
        &[],
    );
    let router = Router::start(config).await.expect("starts");

    let good = router
        .submit(Some(0), json!({"url": "https://example.com/a", "n": 1}))
        .await
        .expect("a good task is delivered");
    assert_eq!(good.decision, Decision::Routed);
    assert_eq!(good.reason, Reason::Matched);
    assert_eq!(good.outbound.as_deref(), Some("picky"));

    let bad = router
        .submit(Some(0), json!({"n": 2}))
        .await
        .expect("a refused task is an outcome, not an error");
    assert_eq!(bad.decision, Decision::Failed);
    assert_eq!(bad.reason, Reason::Refused);
    assert_eq!(bad.outbound.as_deref(), Some("picky"));
    assert!(bad.task_uuid.is_some(), "{bad:?}");
    assert_eq!(bad.why, WHY);

    let sink = common::sink(&sink_name);
    {
        let got = sink.lock().expect("sink");
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].1["n"], 1);
    }
    assert_eq!(router.count(Some("picky"), Reason::Matched), 1);
    assert_eq!(router.count(Some("picky"), Reason::Refused), 1);
    let metrics = router.metrics_text();
    for line in [
        r#"silk_router_decisions_total{project="p",inbound="api",outbound="picky",decision="failed",reason="refused"} 1"#,
        r#"silk_router_decisions_total{project="p",inbound="api",outbound="picky",decision="routed",reason="matched"} 1"#,
        r#"silk_router_failure_records_total{project="p"} 1"#,
        r#"silk_router_outbound_pushed_total{project="p",outbound="picky"} 1"#,
        // A refusal says nothing about the target's health.
        r#"silk_router_outbound_push_errors_total{project="p",outbound="picky"} 0"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    router.shutdown().await;

    let records = records(&failure_file(failures.path()));
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["reason"], "refused");
    assert_eq!(record["why"], WHY);
    assert_eq!(record["project"], "p");
    assert_eq!(record["inbound"], "api");
    assert_eq!(record["outbound"], "picky");
    assert_eq!(record["task"], json!({"n": 2}), "the task after convert");
    assert!(record["time"].as_str().is_some_and(|t| t.len() == 23));
}

async fn call(router: &Router, uri: &str, body: &str) -> (StatusCode, Value) {
    let (status, text) = common::call(router, "POST", uri, body).await;
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, value)
}

#[tokio::test]
async fn post_task_answers_200_with_decision_failed_for_a_refused_task() {
    let sink_name = common::unique("refused-http");
    let failures = tempfile::tempdir().expect("tempdir");
    let config = load(
        "  - {name: api, class: http.HttpInbound}",
        &sink_name,
        failures.path(),
        &[],
    );
    let router = Router::start(config).await.expect("starts");

    let (status, answer) = call(&router, "/task/", r#"{"n": 1}"#).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["accepted"], true);
    assert_eq!(answer["decision"], "failed");
    assert_eq!(answer["reason"], "refused");
    assert_eq!(answer["outbound"], "picky");
    assert_eq!(answer["why"], WHY);

    // In an array, the refused task fails alone; the array is still answered 200.
    let (status, answers) = call(
        &router,
        "/task/",
        r#"[{"url": "https://example.com/", "n": 2}, {"url": "", "n": 3}]"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answers}");
    assert_eq!(answers[0]["decision"], "routed");
    assert_eq!(answers[0]["reason"], "matched");
    assert_eq!(answers[1]["decision"], "failed");
    assert_eq!(answers[1]["reason"], "refused");

    let status_list = router.outbound_status("picky").await;
    assert_eq!(status_list[0].counters.get("refused"), Some(&2));
    assert_eq!(status_list[0].counters.get("matched"), Some(&1));
    assert_eq!(status_list[0].pushed, 1);
    assert_eq!(status_list[0].push_errors, 0);
    router.shutdown().await;

    let records = records(&failure_file(failures.path()));
    let mut refused: Vec<i64> = records
        .iter()
        .inspect(|r| assert_eq!(r["reason"], "refused", "{r}"))
        .map(|r| r["task"]["n"].as_i64().expect("n"))
        .collect();
    refused.sort_unstable();
    assert_eq!(refused, [1, 3]);
}

#[tokio::test]
async fn a_redis_list_inbound_acknowledges_a_refused_task_instead_of_looping() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let prefix = common::unique("silk-router-refused");
    let client = redis::Client::open(url.as_str()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let sink_name = common::unique("refused-redis");
    let failures = tempfile::tempdir().expect("tempdir");
    let config = load(
        "  - name: queue
    class: redis_queue.RedisListInbound
    init: {url: '{redis}', key: '{p}:in', pop_timeout_s: 1}",
        &sink_name,
        failures.path(),
        &[("redis", &url), ("p", &prefix)],
    );
    let key = format!("{prefix}:in");
    let _: () = conn
        .rpush(&key, json!({"n": 1}).to_string())
        .await
        .expect("rpush");
    let _: () = conn
        .rpush(
            &key,
            json!({"n": 2, "url": "https://example.com/"}).to_string(),
        )
        .await
        .expect("rpush");
    let router = Router::start(config).await.expect("starts");
    let done = router
        .wait_until(Duration::from_secs(20), |r| {
            r.count(Some("picky"), Reason::Refused) >= 1
                && r.count(Some("picky"), Reason::Matched) >= 1
        })
        .await;
    assert!(done, "{}", router.metrics_text());
    router.shutdown().await;

    // Refused once, recorded once, and gone from the list and the processing list.
    assert_eq!(router.count(Some("picky"), Reason::Refused), 1);
    let left: Vec<String> = conn.lrange(&key, 0, -1).await.expect("lrange");
    assert!(left.is_empty(), "{left:?}");
    let processing = format!("{{{key}}}:processing:queue:0");
    let in_flight: Vec<String> = conn.lrange(&processing, 0, -1).await.expect("lrange");
    assert!(in_flight.is_empty(), "{in_flight:?}");
    let records = records(&failure_file(failures.path()));
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["reason"], "refused");
    assert_eq!(records[0]["inbound"], "queue");
    assert_eq!(records[0]["task"], json!({"n": 1}));
    assert_eq!(common::sink(&sink_name).lock().expect("sink").len(), 1);

    for k in [key, processing, format!("{{{prefix}:in}}:processing:queue")] {
        let _: Result<(), _> = conn.del(k).await;
    }
}
