//! End to end against the Redis server named by `SILK_TEST_REDIS` (skipped when unset):
//! a Redis list inbound feeding Redis list outbounds; RPUSH vs LPUSH for real-time tasks; a
//! retry / failback / dont-retry scenario driven by result tasks, with the test acting as
//! the spiders; `max_lag` holding and releasing without dropping; an unreachable outbound
//! leaving its task in the inbound list; the inbound's processing lists (a task being
//! routed is in one, a task left in one by a crash is routed at the next start, routing
//! leaves them empty). Every test uses its own key prefix. The list and stream classes run
//! again on a Redis Cluster the test starts.

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{Value, json};
use silk_core::redis_target::{RedisConnection, RedisTarget, RedisTimeouts};
use silk_router::{Config, Reason, Router};
use silk_testkit::{POLL_EVERY, eventually};

/// The test's own connection to `url` (a server or a cluster).
async fn connect(url: &str) -> RedisConnection {
    RedisTarget::open(url)
        .expect("redis url")
        .dedicated(RedisTimeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(15),
        })
        .await
        .expect("redis connection")
}

fn load(
    text: &str,
    url: &str,
    prefix: &str,
    extra: &[(&str, &str)],
) -> (tempfile::TempDir, Config) {
    let mut pairs = vec![("redis", url), ("p", prefix)];
    pairs.extend_from_slice(extra);
    let (dir, result) = common::load(text, &common::vars(&pairs));
    match result {
        Ok(config) => (dir, config),
        Err(e) => panic!(
            "{}",
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

async fn list(conn: &mut RedisConnection, key: &str) -> Vec<Value> {
    let items: Vec<String> = conn.lrange(key, 0, -1).await.expect("lrange");
    items
        .iter()
        .map(|s| serde_json::from_str(s).expect("json"))
        .collect()
}

async fn cleanup(conn: &mut RedisConnection, prefix: &str) {
    // Processing lists and sets start with `{list key}`.
    for pattern in [format!("{prefix}:*"), format!("{{{prefix}:*")] {
        let keys: Vec<String> = conn.keys(pattern).await.unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = conn.del(keys).await;
        }
    }
}

/// The processing list of consumer `n` of inbound `inbound` reading list `key` (a key
/// without a hash tag).
fn processing(key: &str, inbound: &str, n: usize) -> String {
    format!("{{{key}}}:processing:{inbound}:{n}")
}

/// Asserts that the processing lists of consumers `0..threads` are empty.
async fn assert_processing_empty(
    conn: &mut RedisConnection,
    key: &str,
    inbound: &str,
    threads: usize,
) {
    for n in 0..threads {
        let list = processing(key, inbound, n);
        let left: Vec<String> = conn.lrange(&list, 0, -1).await.expect("lrange");
        assert!(left.is_empty(), "{list} still holds {left:?}");
    }
}

/// Pops one task the router pushed to `key` (as a spider would), waiting up to 10 s.
async fn pop(conn: &mut RedisConnection, key: &str) -> Value {
    let popped: Option<(String, String)> = conn.blpop(key, 10.0).await.expect("blpop");
    let (_, text) = popped.unwrap_or_else(|| panic!("nothing arrived in {key} within 10 s"));
    serde_json::from_str(&text).expect("json")
}

#[tokio::test]
async fn redis_inbound_to_redis_outbounds() {
    let Some(url) = common::redis_url() else {
        return;
    };
    inbound_to_outbounds_on(&url).await;
}

/// The list inbound, the list outbounds and the stream outbound on a Redis Cluster of the
/// test's own (3 masters): each key's slot holds its companions (processing lists, dedup
/// keys), whatever slot the key is in.
#[tokio::test]
async fn the_redis_classes_work_on_a_redis_cluster() {
    let Some(cluster) = silk_testkit::redis_cluster_for_test(3, 0) else {
        return;
    };
    let url = cluster.url();
    inbound_to_outbounds_on(&url).await;
    crash_recovery_on(&url).await;
    stream_outbound_on(&url).await;
}

async fn inbound_to_outbounds_on(url: &str) {
    let url = url.to_owned();
    let prefix = common::unique("silk-router-e2e");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "
project: e2e
inbound:
  - name: queue
    class: redis_queue.RedisListInbound
    init: {url: '{redis}', key: '{p}:in', pop_timeout_s: 1}
    threads: 3
outbound:
  - name: change
    selector: [\"data_type == 'change'\"]
    class: redis_queue.RedisListOutbound
    init: {url: '{redis}', key: '{p}:change'}
    task_params: [company_name, data_type, seq]
    priority: 5
    rt_priority: 50
  - name: other
    selector: ['True']
    class: redis_queue.RedisListOutbound
    init: {url: '{redis}', key: '{p}:other'}
",
        &url,
        &prefix,
        &[],
    );
    let inbound_key = format!("{prefix}:in");
    for seq in 0..10 {
        let rt = seq == 3 || seq == 7;
        let task = json!({"company_name": format!("c{seq}"), "data_type": "change", "seq": seq, "rt": rt, "noise": 1});
        let _: () = conn
            .rpush(&inbound_key, task.to_string())
            .await
            .expect("rpush");
        let other = json!({"data_type": "employee", "seq": seq});
        let _: () = conn
            .rpush(&inbound_key, other.to_string())
            .await
            .expect("rpush");
    }
    let _: () = conn.rpush(&inbound_key, "not json").await.expect("rpush");
    let router = Router::start(config).await.expect("starts");
    let all_in = router
        .wait_until(Duration::from_secs(20), |r| {
            r.count(Some("change"), Reason::Matched) == 10
                && r.count(Some("other"), Reason::Matched) == 10
                && r.count(None, Reason::BadTask) == 1
        })
        .await;
    assert!(all_in, "{}", router.metrics_text());
    router.shutdown().await;

    let change = list(&mut conn, &format!("{prefix}:change")).await;
    assert_eq!(change.len(), 10);
    // Real-time tasks were pushed at the head.
    let mut head: Vec<i64> = change[..2]
        .iter()
        .map(|t| t["seq"].as_i64().expect("seq"))
        .collect();
    head.sort_unstable();
    assert_eq!(head, [3, 7]);
    for task in &change {
        let rt = task["rt"].as_bool().expect("rt");
        assert_eq!(task["priority"], if rt { 50 } else { 5 });
        assert_eq!(task["outbound"], "change");
        assert_eq!(task["submitter"], "taskhub");
        assert!(
            task.get("noise").is_none(),
            "only task_params keys and built-ins: {task}"
        );
    }
    assert_eq!(list(&mut conn, &format!("{prefix}:other")).await.len(), 10);
    let left: u64 = conn.llen(&inbound_key).await.expect("llen");
    assert_eq!(
        left, 0,
        "every task was taken, the bad one recorded and dropped"
    );
    assert_processing_empty(&mut conn, &inbound_key, "queue", 3).await;
    cleanup(&mut conn, &prefix).await;
}

#[tokio::test]
async fn rt_tasks_go_to_the_head_and_others_to_the_tail() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let prefix = common::unique("silk-router-rt");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "outbound:\n  - {name: q, selector: ['True'], class: redis_queue.RedisListOutbound, init: {url: '{redis}', key: '{p}:q'}}\n",
        &url,
        &prefix,
        &[],
    );
    let router = Router::start(config).await.expect("starts");
    for (name, rt) in [("a", false), ("b", true), ("c", false), ("d", true)] {
        router
            .submit(None, json!({"name": name, "rt": rt}))
            .await
            .expect("pushed");
    }
    router.shutdown().await;
    let names: Vec<String> = list(&mut conn, &format!("{prefix}:q"))
        .await
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect();
    assert_eq!(names, ["d", "b", "a", "c"]);
    cleanup(&mut conn, &prefix).await;
}

const SCENARIO: &str = "
project: scenario
routing:
  terminal_codes: [1000]
  limits: 10
  failure: {path: '{failure}', compress: false}
inbound:
  - name: submit
    class: http.HttpInbound
  - name: results
    class: redis_queue.RedisListInbound
    init: {url: '{redis}', key: '{p}:results'}
    selector: [\"submitter == 'taskhub' and task_result is not None\"]
    convert: [common.ExtractTaskParams]
outbound:
  - name: primary
    selector: [\"kind == 'company' and task_result is None\"]
    class: redis_queue.RedisListOutbound
    init: {url: '{redis}', key: '{p}:primary'}
    task_params_wrapped: true
    retry_limits: 1
    dont_retry_status: [1404]
    failback: secondary
  - name: by_url
    selector: [\"kind == 'company' and task_result == 1404\"]
    class: redis_queue.RedisListOutbound
    init: {url: '{redis}', key: '{p}:by_url'}
    task_params_wrapped: true
    direct_failback_status: [1403]
    failback: secondary
  - name: secondary
    class: redis_queue.RedisListOutbound
    init: {url: '{redis}', key: '{p}:secondary'}
    task_params_wrapped: true
    reset_retry_times: true
";

#[tokio::test]
async fn retry_failback_and_dont_retry_driven_by_result_tasks() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let prefix = common::unique("silk-router-scenario");
    let dir = tempfile::tempdir().expect("tempdir");
    let failure = dir.path().join("failed.jsonl");
    let failure_text = failure.to_string_lossy().into_owned();
    let mut conn = connect(&url).await;
    let (_dir, config) = load(SCENARIO, &url, &prefix, &[("failure", &failure_text)]);
    let router = Router::start(config).await.expect("starts");
    let results_key = format!("{prefix}:results");
    let key = |name: &str| format!("{prefix}:{name}");

    // A spider takes a task and reports a result with the task's params, as a log line.
    async fn report(conn: &mut RedisConnection, results_key: &str, taken: &Value, code: i64) {
        let log =
            json!({"task_result": code, "spider_name": "ic", "task_params": taken["task_params"]});
        let _: () = conn
            .rpush(results_key, log.to_string())
            .await
            .expect("rpush");
    }

    // T1: fails twice on `primary` (one retry), then succeeds on `secondary`.
    let t1 = router
        .submit(Some(0), json!({"kind": "company", "name": "t1"}))
        .await
        .expect("routed");
    assert_eq!(t1.outbound.as_deref(), Some("primary"));
    let taken = pop(&mut conn, &key("primary")).await;
    assert_eq!(taken["task_params"]["retry_times"], 0);
    report(&mut conn, &results_key, &taken, 1500).await;
    let taken = pop(&mut conn, &key("primary")).await;
    assert_eq!(
        taken["task_params"]["retry_times"], 1,
        "retried on its outbound"
    );
    assert_eq!(
        taken["task_params"]["task_uuid"],
        t1.task_uuid.clone().expect("uuid").as_str()
    );
    report(&mut conn, &results_key, &taken, 1500).await;
    let taken = pop(&mut conn, &key("secondary")).await;
    assert_eq!(
        taken["task_params"]["retry_times"], 0,
        "reset on entering the failback"
    );
    assert_eq!(taken["task_params"]["group_retry_times"], 1);
    assert_eq!(taken["task_params"]["routed_count"], 3);
    report(&mut conn, &results_key, &taken, 1000).await;

    // T2: dont-retry status → routed again by the rules (to `by_url`), then a direct-failback
    // status → `secondary`, then a failure there with no retries left → failure record.
    router
        .submit(Some(0), json!({"kind": "company", "name": "t2"}))
        .await
        .expect("routed");
    let taken = pop(&mut conn, &key("primary")).await;
    report(&mut conn, &results_key, &taken, 1404).await;
    let taken = pop(&mut conn, &key("by_url")).await;
    assert_eq!(taken["task_params"]["name"], "t2");
    report(&mut conn, &results_key, &taken, 1403).await;
    let taken = pop(&mut conn, &key("secondary")).await;
    assert_eq!(taken["task_params"]["name"], "t2");
    report(&mut conn, &results_key, &taken, 1500).await;

    let done = router
        .wait_until(Duration::from_secs(10), |r| {
            r.count(Some("secondary"), Reason::TerminalCode) == 1
                && r.count(Some("secondary"), Reason::RetriesExhausted) == 1
        })
        .await;
    assert!(done, "{}", router.metrics_text());
    assert_eq!(router.count(Some("primary"), Reason::Retry), 1);
    assert_eq!(router.count(Some("secondary"), Reason::Failback), 1);
    assert_eq!(router.count(Some("by_url"), Reason::DontRetry), 1);
    assert_eq!(router.count(Some("secondary"), Reason::DirectFailback), 1);
    router.shutdown().await;

    let records: Vec<Value> = std::fs::read_to_string(&failure)
        .expect("failure record")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["reason"], "retries_exhausted");
    assert_eq!(records[0]["outbound"], "secondary");
    assert_eq!(records[0]["inbound"], "results");
    assert_eq!(records[0]["task"]["name"], "t2");
    for name in ["results", "primary", "by_url", "secondary"] {
        let left: u64 = conn.llen(key(name)).await.expect("llen");
        assert_eq!(left, 0, "{name}");
    }
    assert_processing_empty(&mut conn, &results_key, "results", 1).await;
    cleanup(&mut conn, &prefix).await;
}

#[tokio::test]
async fn max_lag_holds_without_dropping_and_releases_below_it() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let prefix = common::unique("silk-router-lag");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "
outbound:
  - name: lagged
    selector: ['True']
    class: redis_queue.RedisListOutbound
    init: {url: '{redis}', key: '{p}:lag'}
    max_lag: 3
    max_lag_check_ms: 20
",
        &url,
        &prefix,
        &[],
    );
    let router = Router::start(config).await.expect("starts");
    let key = format!("{prefix}:lag");
    let submits: Vec<_> = (0..8)
        .map(|n| {
            let router = router.clone();
            tokio::spawn(async move { router.submit(None, json!({"n": n})).await })
        })
        .collect();
    let mut progress = router.progress("lagged").expect("outbound");
    let mut received = Vec::new();
    let mut releases = 0;
    while received.len() < 8 {
        // Wait until the router holds (backlog at max_lag) or has nothing left to send.
        loop {
            let (holding, queued) = router.holding("lagged").expect("outbound");
            let backlog: u64 = conn.llen(&key).await.expect("llen");
            assert!(backlog <= 3, "backlog {backlog} above max_lag");
            if (holding && backlog == 3) || (queued == 0 && backlog as usize + received.len() == 8)
            {
                if holding {
                    assert!(queued > 0, "held tasks stay queued");
                }
                break;
            }
            tokio::time::timeout(Duration::from_secs(10), progress.changed())
                .await
                .expect("progress within 10 s")
                .expect("router alive");
        }
        // A consumer takes two tasks; the router releases as many.
        for _ in 0..2 {
            let popped: Option<String> = conn.lpop(&key, None).await.expect("lpop");
            if let Some(text) = popped {
                received.push(
                    serde_json::from_str::<Value>(&text).expect("json")["n"]
                        .as_i64()
                        .expect("n"),
                );
            }
        }
        releases += 1;
        assert!(releases < 20, "no progress: received {received:?}");
    }
    for submit in submits {
        submit.await.expect("joined").expect("delivered");
    }
    received.sort_unstable();
    assert_eq!(
        received,
        (0..8).collect::<Vec<i64>>(),
        "nothing dropped, nothing doubled"
    );
    let status = router.outbound_status("lagged").await;
    assert_eq!(status[0].max_lag, 3);
    assert_eq!(status[0].pushed, 8);
    router.shutdown().await;
    cleanup(&mut conn, &prefix).await;
}

#[tokio::test]
async fn an_unreachable_outbound_leaves_the_task_in_its_inbound_list() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let prefix = common::unique("silk-router-down");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "
server: {shutdown_grace_ms: 3000}
inbound:
  - {name: queue, class: redis_queue.RedisListInbound, init: {url: '{redis}', key: '{p}:in'}}
outbound:
  - {name: dead, selector: ['True'], class: redis_queue.RedisListOutbound, init: {url: 'redis://127.0.0.1:1/0', key: x, timeout_ms: 200}}
",
        &url,
        &prefix,
        &[],
    );
    let key = format!("{prefix}:in");
    let task = json!({"keep": "me"}).to_string();
    let _: () = conn.rpush(&key, &task).await.expect("rpush");
    let router = Router::start(config).await.expect("starts");
    let mut progress = router.progress("dead").expect("outbound");
    tokio::time::timeout(Duration::from_secs(15), progress.changed())
        .await
        .expect("a push attempt within 15 s")
        .expect("alive");
    let status = router.outbound_status("dead").await;
    assert!(status[0].push_errors >= 1, "{status:?}");
    assert!(status[0].backlog_error.is_some());
    router.shutdown().await;
    let left: Vec<String> = conn.lrange(&key, 0, -1).await.expect("lrange");
    assert_eq!(left, [task], "the task is back in its inbound list");
    assert_processing_empty(&mut conn, &key, "queue", 1).await;
    cleanup(&mut conn, &prefix).await;
}

#[tokio::test]
async fn a_task_left_in_a_processing_list_by_a_crash_is_routed_at_the_next_start() {
    let Some(url) = common::redis_url() else {
        return;
    };
    crash_recovery_on(&url).await;
}

async fn crash_recovery_on(url: &str) {
    let url = url.to_owned();
    let prefix = common::unique("silk-router-crash");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "
inbound:
  - {name: queue, class: redis_queue.RedisListInbound, init: {url: '{redis}', key: '{p}:in'}, threads: 2}
outbound:
  - {name: out, selector: ['True'], class: redis_queue.RedisListOutbound, init: {url: '{redis}', key: '{p}:out'}}
",
        &url,
        &prefix,
        &[],
    );
    let key = format!("{prefix}:in");
    let set = format!("{{{key}}}:processing:queue");
    // As a crash leaves them: consumer 1 had taken `in_flight` and not routed it; an earlier
    // run with 5 consumers had taken `orphan` on its consumer 4, which this run lacks.
    let in_flight = json!({"name": "in_flight"}).to_string();
    let orphan = json!({"name": "orphan"}).to_string();
    let _: () = conn
        .lpush(processing(&key, "queue", 1), &in_flight)
        .await
        .expect("lpush");
    let _: () = conn
        .lpush(processing(&key, "queue", 4), &orphan)
        .await
        .expect("lpush");
    let _: () = conn
        .sadd(&set, processing(&key, "queue", 4))
        .await
        .expect("sadd");
    let _: () = conn
        .rpush(&key, json!({"name": "queued"}).to_string())
        .await
        .expect("rpush");

    let router = Router::start(config).await.expect("starts");
    let routed = router
        .wait_until(Duration::from_secs(15), |r| {
            r.count(Some("out"), Reason::Matched) == 3
        })
        .await;
    assert!(routed, "{}", router.metrics_text());
    router.shutdown().await;

    let mut names: Vec<String> = list(&mut conn, &format!("{prefix}:out"))
        .await
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["in_flight", "orphan", "queued"], "each once");
    assert_processing_empty(&mut conn, &key, "queue", 5).await;
    let left: u64 = conn.llen(&key).await.expect("llen");
    assert_eq!(left, 0);
    let mut known: Vec<String> = conn.smembers(&set).await.expect("smembers");
    known.sort_unstable();
    assert_eq!(
        known,
        [processing(&key, "queue", 0), processing(&key, "queue", 1)],
        "the orphaned list is forgotten"
    );
    cleanup(&mut conn, &prefix).await;
}

#[tokio::test]
async fn a_task_being_routed_is_in_its_consumers_processing_list() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let prefix = common::unique("silk-router-inflight");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "
inbound:
  - {name: queue, class: redis_queue.RedisListInbound, init: {url: '{redis}', key: '{p}:in'}}
outbound:
  - {name: held, selector: ['True'], class: redis_queue.RedisListOutbound, init: {url: '{redis}', key: '{p}:held'}, max_lag: 1, max_lag_check_ms: 20}
",
        &url,
        &prefix,
        &[],
    );
    let key = format!("{prefix}:in");
    let held = format!("{prefix}:held");
    // The outbound's backlog is at `max_lag`: the router holds the task while routing it.
    let _: () = conn.rpush(&held, "backlog").await.expect("rpush");
    let task = json!({"name": "t"}).to_string();
    let _: () = conn.rpush(&key, &task).await.expect("rpush");
    let router = Router::start(config).await.expect("starts");
    let in_processing = processing(&key, "queue", 0);
    let seen: Vec<String> = eventually(Duration::from_secs(3), POLL_EVERY, async || {
        let seen: Vec<String> = conn.lrange(&in_processing, 0, -1).await.expect("lrange");
        (!seen.is_empty()).then_some(seen)
    })
    .await
    .unwrap_or_default();
    assert_eq!(
        seen,
        std::slice::from_ref(&task),
        "taken into the processing list"
    );
    let left: u64 = conn.llen(&key).await.expect("llen");
    assert_eq!(left, 0, "and out of the inbound list");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let still: Vec<String> = conn.lrange(&in_processing, 0, -1).await.expect("lrange");
    assert_eq!(still, [task], "there while the outbound holds");

    // A spider takes the backlog; the task is pushed and leaves the processing list.
    let _: Option<String> = conn.lpop(&held, None).await.expect("lpop");
    let pushed = pop(&mut conn, &held).await;
    assert_eq!(pushed["name"], "t");
    let done = router
        .wait_until(Duration::from_secs(10), |r| {
            r.count(Some("held"), Reason::Matched) == 1
        })
        .await;
    assert!(done, "{}", router.metrics_text());
    let empty = eventually(Duration::from_secs(3), POLL_EVERY, async || {
        let len: u64 = conn.llen(&in_processing).await.expect("llen");
        (len == 0).then_some(())
    })
    .await
    .is_some();
    assert!(empty, "removed from the processing list once routed");
    router.shutdown().await;
    cleanup(&mut conn, &prefix).await;
}

/// The entries of stream `key`: (the `id` field, the `field` field as JSON), oldest first.
async fn stream(conn: &mut RedisConnection, key: &str, field: &str) -> Vec<(String, Value)> {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .expect("xrange");
    entries
        .into_iter()
        .map(|(_, fields)| {
            let get = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("no `{name}` in {fields:?}"))
            };
            let data = serde_json::from_str(&get(field)).expect("json");
            (get("id"), data)
        })
        .collect()
}

#[tokio::test]
async fn a_redis_stream_outbound_adds_each_delivery_once_in_order_and_reads_its_backlog() {
    let Some(url) = common::redis_url() else {
        return;
    };
    stream_outbound_on(&url).await;
}

async fn stream_outbound_on(url: &str) {
    let url = url.to_owned();
    let prefix = common::unique("silk-router-stream");
    let mut conn = connect(&url).await;
    let (_dir, config) = load(
        "
project: streams
inbound:
  - name: queue
    class: redis_queue.RedisListInbound
    init: {url: '{redis}', key: '{p}:in'}
outbound:
  - name: events
    selector: ['True']
    class: redis_queue.RedisStreamOutbound
    init: {url: '{redis}', stream: '{p}:events', field: task, group: readers, maxlen: 100000}
    max_lag: 1000
",
        &url,
        &prefix,
        &[],
    );
    let inbound_key = format!("{prefix}:in");
    for seq in 0..20 {
        let task = json!({"seq": seq, "rt": seq == 5});
        let _: () = conn.rpush(&inbound_key, task.to_string()).await.unwrap();
    }
    let stream_key = format!("{prefix}:events");
    let events = config
        .outbound("events")
        .expect("events")
        .component()
        .clone();
    // No stream yet: nothing waits.
    assert_eq!(events.backlog().await.unwrap(), Some(0));
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream_key)
        .arg("readers")
        .arg("$")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    let router = Router::start(config).await.expect("starts");
    let routed = router
        .wait_until(Duration::from_secs(20), |r| {
            r.count(Some("events"), Reason::Matched) == 20
        })
        .await;
    assert!(routed, "{}", router.metrics_text());
    router.shutdown().await;

    let entries = stream(&mut conn, &stream_key, "task").await;
    let seqs: Vec<i64> = entries
        .iter()
        .map(|(_, t)| t["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "in order, rt or not");
    for (id, task) in &entries {
        let uuid = task["task_uuid"].as_str().expect("task_uuid");
        assert!(
            id.starts_with(uuid),
            "the entry's id is the delivery id: {id}"
        );
    }
    assert_eq!(events.backlog().await.unwrap(), Some(20), "the group's lag");
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("readers")
        .arg("r1")
        .arg("COUNT")
        .arg(5)
        .arg("STREAMS")
        .arg(&stream_key)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        events.backlog().await.unwrap(),
        Some(20),
        "read but not acknowledged still waits"
    );
    let first = first_entry_id(&mut conn, &stream_key).await;
    let _: u64 = redis::cmd("XACK")
        .arg(&stream_key)
        .arg("readers")
        .arg(&first)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(events.backlog().await.unwrap(), Some(19));

    // A push retried with the same delivery ids (a lost answer, a restart) adds nothing
    // again; new ids are added after them.
    let again: Vec<silk_router::Outgoing> = entries[..3]
        .iter()
        .map(|(id, task)| silk_router::Outgoing {
            payload: task.to_string().into(),
            rt: false,
            delivery_id: id.clone(),
        })
        .chain(std::iter::once(silk_router::Outgoing {
            payload: json!({"seq": 20}).to_string().into(),
            rt: false,
            delivery_id: "new:1".into(),
        }))
        .collect();
    for result in events.push(&again).await {
        result.expect("pushed");
    }
    for result in events.push(&again).await {
        result.expect("pushed twice");
    }
    let entries = stream(&mut conn, &stream_key, "task").await;
    assert_eq!(entries.len(), 21, "only the new delivery was added, once");
    assert_eq!(entries[20].0, "new:1");
    cleanup(&mut conn, &prefix).await;
}

/// The stream id of the first entry of `key`.
async fn first_entry_id(conn: &mut RedisConnection, key: &str) -> String {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .arg("COUNT")
        .arg(1)
        .query_async(conn)
        .await
        .expect("xrange");
    entries[0].0.clone()
}
