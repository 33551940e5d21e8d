//! The router inside `silk up --router`: a config using the hub's classes checks clean, is
//! refused by the router alone, and in the platform turns tasks posted to the router into
//! pages fetched by a job's run, whose outcomes come back and end the tasks.

mod cli_support;

use cli_support::{DEADLINE, Platform, output, silk};
use serde_json::{Value, json};
use silk_testkit::eventually_blocking;
use std::time::Duration;
use tempfile::TempDir;

fn config(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("router.yaml");
    std::fs::write(
        &path,
        format!(
            r#"project: hubbed
server: {{bind: 127.0.0.1, port: {port}}}
routing:
  terminal_codes: [1000]
  failure: {{path: '{failures}', compress: False}}
inbound:
  - {{name: web, class: http.HttpInbound}}
  - name: results
    class: silk.RunResultsInbound
    init: {{jobs: [fetch], requests: tasks}}
    convert: [{{class: common.ExtractTaskParams}}]
outbound:
  - name: fetch
    class: silk.JobOutbound
    init: {{job: fetch, idle_ms: 60000}}
    selector: ["url != None"]
    retry_limits: 1
"#,
            failures = dir.join("failures.jsonl").display()
        ),
    )
    .unwrap();
    path
}

#[test]
fn tasks_posted_to_the_router_in_silk_up_are_fetched_and_end() {
    let dir = TempDir::new().unwrap();
    let router_port = silk_testkit::free_port();
    let cfg = config(dir.path(), router_port);
    let cfg_arg = cfg.to_str().unwrap().to_owned();

    // `check` knows the hub's classes (the example of the docs too); the router alone
    // cannot run them.
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/router/hub.yaml");
    for config in [cfg_arg.as_str(), example.to_str().unwrap()] {
        let (out, stderr) = output(silk().args(["router", "check", "--config", config]));
        assert!(out.status.success(), "{config}: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
    }
    let (out, stderr) = output(silk().args(["router", "--config", &cfg_arg]));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("class `silk.JobOutbound` needs the Silk hub"),
        "{stderr}"
    );

    let mut p = Platform::start_in(dir, 5, &["--router", &cfg_arg]);
    p.up.wait_line("router `hubbed`");
    // The example job: it fetches what it is fed.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/router");
    p.ok(&[
        "jobs",
        "create",
        "-f",
        examples.join("fetch-job.yaml").to_str().unwrap(),
    ]);

    let http = Http::new();
    let base = format!("http://127.0.0.1:{router_port}");
    let urls: Vec<String> = (0..5)
        .map(|i| format!("http://127.0.0.1:{}/p/{i}", p.site_port))
        .collect();
    for url in &urls {
        let answer = http.post(&format!("{base}/task/"), json!({"url": url}));
        assert_eq!(answer["reason"], "matched", "{answer}");
    }
    // The outbound's counters move as the outcomes come back through `results`.
    let mut last = serde_json::Value::Null;
    let status = eventually_blocking(DEADLINE, Duration::from_millis(100), || {
        last = http.get(&format!("{base}/outbound/fetch"));
        (last[0]["counters"]["terminal_code"] == 5).then(|| last.clone())
    })
    .unwrap_or_else(|| {
        panic!(
            "tasks did not end: {last}\n--- silk up ---\n{}",
            p.up.output()
        )
    });
    assert_eq!(status[0]["class"], "silk.JobOutbound");
    assert_eq!(status[0]["target"], "job:fetch");

    // One run of the job, fed by the router, with one item per page.
    let runs = p.json(&["jobs", "runs", "fetch"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["feed"]["outbound"], "fetch");
    let run = runs[0]["id"].as_str().unwrap();
    let items = p.ok(&["items", run]);
    let pages: Vec<Value> = items
        .lines()
        .map(|l| serde_json::from_str(l).expect("an item per line"))
        .collect();
    assert_eq!(pages.len(), 5, "{items}");
    assert!(pages.iter().all(|i| i["title"].is_string()), "{items}");

    // A task no outbound takes is a failure record in the hub's store: listed, replayed.
    let answer = http.post(&format!("{base}/task/"), json!({"kind": "lost"}));
    assert_eq!(answer["reason"], "no_route", "{answer}");
    let page = p.json(&["router", "failures", "--reason", "no_route"]);
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["failures"][0]["inbound"], "web");
    assert_eq!(page["failures"][0]["task"]["kind"], "lost");
    let table = p.ok(&["router", "failures"]);
    assert!(
        table.contains("no_route") && table.contains("web"),
        "{table}"
    );
    let replayed = p.json(&["router", "replay", "--reason", "no_route"]);
    assert_eq!(replayed["replayed"][0]["decision"], "failed", "{replayed}");
    let page = p.json(&[
        "router",
        "failures",
        "--reason",
        "no_route",
        "--replayed",
        "false",
    ]);
    assert_eq!(page["total"], 1, "the new record only: {page}");
}

/// A small HTTP client for the synchronous test.
struct Http {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
}

impl Http {
    fn new() -> Http {
        Http {
            rt: tokio::runtime::Runtime::new().unwrap(),
            client: reqwest::Client::new(),
        }
    }

    fn post(&self, url: &str, body: Value) -> Value {
        self.rt.block_on(async {
            let r = self
                .client
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
        })
    }

    fn get(&self, url: &str) -> Value {
        self.rt.block_on(async {
            let r = self.client.get(url).send().await.unwrap();
            serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
        })
    }
}

/// `silk up --sink-targets FILE`: a file with a routing key, or an unknown class, is refused
/// at start, with its file and line.
#[test]
fn a_bad_sink_targets_file_stops_the_platform_naming_the_problem() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("targets.yaml");
    let at = file.display().to_string();
    let entry = |name: &str, class: &str| {
        format!(
            "  - name: {name}\n    class: {class}\n    init: {{url: 'redis://127.0.0.1:1', stream: items}}\n"
        )
    };
    let cases = [
        (
            format!(
                "outbound:\n{}    selector: ['True']\n",
                entry("feed", "redis_queue.RedisStreamOutbound")
            ),
            format!("{at}:2: outbound `feed`: only `name`, `class`, `init`"),
        ),
        (
            format!(
                "outbound:\n{}",
                entry("other", "redis_queue.RedisStreamOutbond")
            ),
            format!(
                "{at}:3:12: outbound `other`: unknown outbound class `redis_queue.RedisStreamOutbond` (did you mean `redis_queue.RedisStreamOutbound`?)"
            ),
        ),
    ];
    for (text, said) in cases {
        std::fs::write(&file, text).unwrap();
        let (out, stderr) = output(
            silk()
                .current_dir(dir.path())
                .args(["up", "--listen", "127.0.0.1:0", "--sink-targets"])
                .arg(&file),
        );
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&said), "{said}\n{stderr}");
    }
}
