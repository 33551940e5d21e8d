//! The HTTP API through `app(router)` without a socket: `POST /task/` (one task, an array,
//! `?inbound=`, no HTTP inbound), `POST /inbound/{name}/check_task/`, `GET /outbound/{prefix}`,
//! `GET /metrics`, error answers, and the failure record (JSON Lines, gzip).

mod common;

use std::io::Read;

use axum::http::StatusCode;
use serde_json::{Value, json};
use silk_router::Router;

use common::call;

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn config_text(sink: &str, extra: &str) -> String {
    format!(
        r#"
project: p
inbound:
  - name: first
    class: http.HttpInbound
    selector: ["kind != 'skip'"]
  - name: second
    class: http.HttpInbound
    convert:
      - set: {{via: second}}
outbound:
  - name: mem_a
    selector: ["kind == 'a'"]
    class: test.MemoryOutbound
    init: {{sink: {sink}}}
  - name: mem_b
    selector: ["kind == 'b'", "via == 'second'"]
    class: test.MemoryOutbound
    init: {{sink: {sink}}}
{extra}"#
    )
}

#[tokio::test]
async fn post_task_routes_to_the_first_http_inbound_or_the_named_one() {
    let sink_name = common::unique("api");
    let (_dir, config) = common::load_ok(&config_text(&sink_name, ""));
    let router = Router::start(config).await.expect("starts");
    let sink = common::sink(&sink_name);

    let (status, body) = call(&router, "POST", "/task/", r#"{"kind": "a", "n": 1}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer = json_of(&body);
    assert_eq!(answer["accepted"], true);
    assert_eq!(answer["decision"], "routed");
    assert_eq!(answer["reason"], "matched");
    assert_eq!(answer["outbound"], "mem_a");
    let uuid = answer["task_uuid"].as_str().expect("uuid").to_owned();
    {
        let got = sink.lock().expect("sink");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "mem_a");
        assert_eq!(got[0].1["task_uuid"], uuid.as_str());
        assert_eq!(got[0].1["n"], 1);
    }

    // Rejected by the first inbound's selector: counted, not pushed.
    let (status, body) = call(&router, "POST", "/task", r#"{"kind": "skip"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json_of(&body)["accepted"], false);
    assert_eq!(json_of(&body)["decision"], "rejected");

    // `?inbound=second` applies that inbound's convert chain.
    let (status, body) = call(&router, "POST", "/task/?inbound=second", r#"{"kind": "z"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(json_of(&body)["outbound"], "mem_b");

    // An array of tasks: one outcome per task, in order.
    let (status, body) = call(
        &router,
        "POST",
        "/task/",
        r#"[{"kind": "a"}, {"kind": "b"}, {"kind": "none"}]"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let outcomes = json_of(&body);
    assert_eq!(outcomes[0]["outbound"], "mem_a");
    assert_eq!(outcomes[1]["outbound"], "mem_b");
    assert_eq!(outcomes[2]["decision"], "failed");
    assert_eq!(outcomes[2]["reason"], "no_route");
    assert_eq!(sink.lock().expect("sink").len(), 4);

    // Errors.
    let (status, body) = call(&router, "POST", "/task/?inbound=nope", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json_of(&body)["error"]["code"], "not_found");
    assert_eq!(
        json_of(&body)["error"]["message"],
        "no inbound named `nope`"
    );
    let (status, body) = call(&router, "POST", "/task/", r#"{"kind": "a""#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        json_of(&body)["error"]["message"]
            .as_str()
            .expect("message")
            .starts_with("request body is not JSON: EOF")
    );
    let (status, _) = call(&router, "POST", "/task/", "42").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Counters.
    let (status, metrics) = call(&router, "GET", "/metrics", "").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        r#"silk_router_decisions_total{project="p",inbound="first",outbound="mem_a",decision="routed",reason="matched"} 2"#,
        r#"silk_router_decisions_total{project="p",inbound="first",outbound="",decision="rejected",reason="not_accepted"} 1"#,
        r#"silk_router_decisions_total{project="p",inbound="second",outbound="mem_b",decision="routed",reason="matched"} 1"#,
        r#"silk_router_decisions_total{project="p",inbound="first",outbound="",decision="failed",reason="no_route"} 1"#,
        r#"silk_router_inbound_received_total{project="p",inbound="first"} 5"#,
        r#"silk_router_outbound_pushed_total{project="p",outbound="mem_a"} 2"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    router.shutdown().await;
}

#[tokio::test]
async fn check_task_is_a_dry_run_and_outbound_lists_by_prefix() {
    let sink_name = common::unique("check");
    let (_dir, config) = common::load_ok(&config_text(&sink_name, ""));
    let router = Router::start(config).await.expect("starts");
    let (status, body) = call(
        &router,
        "POST",
        "/inbound/second/check_task/",
        r#"{"kind": "q"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer = json_of(&body);
    assert_eq!(answer["accepted"], true);
    assert_eq!(answer["selector"], "via == 'second'");
    assert_eq!(answer["outbound"], "mem_b");
    assert_eq!(answer["task"]["via"], "second");
    assert_eq!(answer["task"]["outbound"], "mem_b");
    assert!(
        common::sink(&sink_name).lock().expect("sink").is_empty(),
        "a dry run pushes nothing"
    );
    let (status, _) = call(&router, "POST", "/inbound/nope/check_task", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    call(&router, "POST", "/task/", r#"{"kind": "b"}"#).await;
    let (status, body) = call(&router, "GET", "/outbound/mem_b", "").await;
    assert_eq!(status, StatusCode::OK);
    let list = json_of(&body);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["name"], "mem_b");
    assert_eq!(list[0]["pushed"], 1);
    assert_eq!(list[0]["counters"]["matched"], 1);
    assert_eq!(
        list[0]["selectors"],
        json!(["kind == 'b'", "via == 'second'"])
    );
    assert!(list[0]["rate_per_second"].as_f64().is_some());
    let (_, body) = call(&router, "GET", "/outbound/", "").await;
    assert_eq!(json_of(&body).as_array().map(Vec::len), Some(2));
    let (_, body) = call(&router, "GET", "/outbound/mem", "").await;
    assert_eq!(json_of(&body).as_array().map(Vec::len), Some(2));
    router.shutdown().await;
}

#[tokio::test]
async fn without_an_http_inbound_tasks_go_straight_to_the_rules() {
    let sink_name = common::unique("direct");
    let (_dir, config) = common::load_ok(&format!(
        "outbound:\n  - {{name: all, selector: ['True'], class: test.MemoryOutbound, init: {{sink: {sink_name}}}}}\n"
    ));
    let router = Router::start(config).await.expect("starts");
    let (status, body) = call(&router, "POST", "/task/", r#"{"x": 1}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(json_of(&body)["outbound"], "all");
    let (_, metrics) = call(&router, "GET", "/metrics", "").await;
    assert!(
        metrics.contains(r#"inbound="",outbound="all",decision="routed",reason="matched"} 1"#),
        "{metrics}"
    );
    router.shutdown().await;
}

fn read_records(path: &std::path::Path, gzip: bool) -> Vec<Value> {
    let bytes = std::fs::read(path).expect("failure record");
    let text = if gzip {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .expect("gzip");
        text
    } else {
        String::from_utf8(bytes).expect("utf-8")
    };
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test]
async fn failed_tasks_are_recorded_as_json_lines_gzip_when_compressed() {
    for compress in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink_name = common::unique("failure");
        let text = format!(
            "routing:\n  terminal_codes: [1000]\n  failure: {{path: '{}', compress: {compress}}}\n{}",
            dir.path().display(),
            config_text(&sink_name, "")
        );
        let (_cfg_dir, config) = common::load_ok(&text);
        let router = Router::start(config).await.expect("starts");
        let expected = dir.path().join(if compress {
            "p-failure.jsonl.gz"
        } else {
            "p-failure.jsonl"
        });
        assert_eq!(router.failure_path(), Some(expected.as_path()));
        // Two separate writes (two gzip members when compressed).
        call(&router, "POST", "/task/", r#"{"kind": "none", "n": 1}"#).await;
        call(
            &router,
            "POST",
            "/task/",
            r#"[{"kind": "none", "n": 2}, {"kind": "none", "n": 3}]"#,
        )
        .await;
        // A task of `mem_a` that failed with no retries left.
        call(
            &router,
            "POST",
            "/task/",
            r#"{"kind": "a", "outbound": "mem_a", "task_result": 500}"#,
        )
        .await;
        router.shutdown().await;
        let records = read_records(&expected, compress);
        assert_eq!(records.len(), 4, "{records:?}");
        assert_eq!(records[0]["reason"], "no_route");
        assert_eq!(records[0]["inbound"], "first");
        assert_eq!(records[0]["task"]["n"], 1);
        assert_eq!(records[0]["project"], "p");
        assert!(records[0]["time"].as_str().is_some_and(|t| t.len() == 23));
        let last = &records[3];
        assert_eq!(last["reason"], "retries_exhausted");
        assert_eq!(last["outbound"], "mem_a");
    }
}
