//! `kafka.KafkaInbound` and `kafka.KafkaOutbound` against a real Kafka-protocol broker that
//! each test starts on a loopback port of its own (`silk_testkit::KafkaBroker`: tansu, named
//! by `SILK_TEST_KAFKA_BROKER`; skipped when unset, required under CI). Clients on the test
//! side are librdkafka's, through `rdkafka`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::Headers;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Value, json};
use silk_router::{Config, Reason, Router};
use silk_testkit::KafkaBroker;

fn broker() -> Option<KafkaBroker> {
    let binary = silk_testkit::service_url("SILK_TEST_KAFKA_BROKER")?;
    Some(KafkaBroker::start(binary).expect("the Kafka broker starts"))
}

async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics");
    for r in results {
        r.expect("topic created");
    }
}

/// Produces `(key, payload)` messages in order; returns each one's (partition, offset).
async fn produce(bootstrap: &str, topic: &str, messages: &[(String, Vec<u8>)]) -> Vec<(i32, i64)> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let mut placed = Vec::new();
    for (key, payload) in messages {
        let delivery = producer
            .send(
                FutureRecord::to(topic).key(key.as_bytes()).payload(payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("delivered");
        placed.push((delivery.partition, delivery.offset));
    }
    placed
}

/// The group's committed offset of each partition of `topic` (`None`: nothing committed).
fn committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p);
    }
    let offsets = consumer
        .committed_offsets(list, Duration::from_secs(10))
        .expect("committed offsets");
    (0..partitions)
        .map(
            |p| match offsets.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            },
        )
        .collect()
}

fn load(text: &str) -> (tempfile::TempDir, Config) {
    let (dir, result) = common::load(text, &common::vars(&[]));
    match result {
        Ok(config) => (dir, config),
        Err(errors) => panic!(
            "{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// A config reading `topic` as group `group` with `threads` consumers into `outbound`.
/// (`session.timeout.ms` 6 s, Kafka's smallest by default: the test broker waits about half
/// of it for members before it answers a join; `max.poll.interval.ms`, the rebalance
/// timeout, 10 s: the longest the test broker waits for a member that is gone.)
fn inbound_config(
    bootstrap: &str,
    topic: &str,
    group: &str,
    threads: usize,
    outbound: &str,
) -> String {
    format!(
        "
project: k
inbound:
  - name: spider_log
    class: kafka.KafkaInbound
    init:
      consumer_settings:
        bootstrap.servers: '{bootstrap}'
        group.id: '{group}'
        enable.auto.commit: False
        session.timeout.ms: 6000
        heartbeat.interval.ms: 1000
        max.poll.interval.ms: 10000
      topics: ['{topic}']
    threads: {threads}
outbound:
{outbound}
"
    )
}

fn memory_outbound(sink: &str) -> String {
    format!(
        "  - {{name: out, selector: ['True'], class: test.MemoryOutbound, init: {{sink: {sink}}}}}"
    )
}

fn pushed(sink: &str) -> Vec<Value> {
    common::sink(sink)
        .lock()
        .expect("sink")
        .iter()
        .map(|(_, t)| t.clone())
        .collect()
}

#[tokio::test]
async fn the_inbound_routes_every_message_in_partition_order_and_commits_what_it_took() {
    let Some(broker) = broker() else { return };
    let bootstrap = broker.bootstrap();
    let topic = common::unique("logs");
    let group = common::unique("g");
    create_topic(&bootstrap, &topic, 3).await;
    let mut messages: Vec<(String, Vec<u8>)> = (0..60)
        .map(|i| {
            let key = format!("company-{}", i % 5);
            let task = json!({"seq": i, "company_name": key, "task_params": {"page": i}});
            (key, serde_json::to_vec(&task).expect("json"))
        })
        .collect();
    messages.insert(30, ("company-0".into(), b"not json at all".to_vec()));
    let placed = produce(&bootstrap, &topic, &messages).await;

    let sink = common::unique("kafka-in");
    let (_dir, config) = load(&inbound_config(
        &bootstrap,
        &topic,
        &group,
        2,
        &memory_outbound(&sink),
    ));
    let router = Router::start(config).await.expect("starts");
    let done = router
        .wait_until(Duration::from_secs(60), |r| {
            pushed(&sink).len() >= 60 && r.count(None, Reason::BadTask) >= 1
        })
        .await;
    assert!(
        done,
        "routed {} of 60 (broker log: {})",
        pushed(&sink).len(),
        broker.log().display()
    );
    router.shutdown().await;

    let tasks = pushed(&sink);
    assert_eq!(tasks.len(), 60, "each message once");
    // Within a key (one partition), in the order produced.
    let mut last: HashMap<String, i64> = HashMap::new();
    for task in &tasks {
        let key = task["company_name"].as_str().expect("key").to_owned();
        let seq = task["seq"].as_i64().expect("seq");
        if let Some(before) = last.insert(key.clone(), seq) {
            assert!(seq > before, "{key}: {seq} after {before}");
        }
    }
    // The group committed every message it took (the one that is not JSON included: it
    // was recorded as failed): each partition's next offset.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, o) in placed {
        let e = next.entry(p).or_insert(0);
        *e = (*e).max(o + 1);
    }
    let offsets = committed(&bootstrap, &group, &topic, 3);
    for (p, want) in next {
        assert_eq!(
            offsets[p as usize],
            Some(want),
            "partition {p}: {offsets:?}"
        );
    }
}

#[tokio::test]
async fn a_message_the_router_cannot_take_is_not_committed_and_a_restart_reads_it_again() {
    let Some(broker) = broker() else { return };
    let bootstrap = broker.bootstrap();
    let topic = common::unique("logs");
    let group = common::unique("g");
    create_topic(&bootstrap, &topic, 2).await;
    let batch = |from: usize, to: usize| -> Vec<(String, Vec<u8>)> {
        (from..to)
            .map(|i| {
                (
                    format!("k{}", i % 3),
                    serde_json::to_vec(&json!({"seq": i})).expect("json"),
                )
            })
            .collect()
    };
    produce(&bootstrap, &topic, &batch(0, 10)).await;

    // Router A's outbound is down (nothing listens there): it takes nothing, commits
    // nothing, and stops.
    let down = silk_testkit::free_port();
    let outbound = format!(
        "  - {{name: out, selector: ['True'], class: http.HttpOutbound, init: {{url: 'http://127.0.0.1:{down}/tasks', timeout_ms: 300}}}}"
    );
    let (_dir, config) = load(&inbound_config(&bootstrap, &topic, &group, 1, &outbound));
    let router = Router::start(config).await.expect("starts");
    let tried = silk_testkit::eventually(
        Duration::from_secs(30),
        silk_testkit::POLL_EVERY,
        async || {
            let status = router.outbound_status("out").await;
            (status.first().map_or(0, |s| s.push_errors) > 0).then_some(())
        },
    )
    .await;
    assert!(tried.is_some(), "router A tried to push");
    router.shutdown().await;
    assert_eq!(
        committed(&bootstrap, &group, &topic, 2),
        vec![None, None],
        "nothing committed"
    );

    // Router B, same group, outbound up: every message, once. One consumer: the test
    // broker (tansu) can lose one of two LeaveGroups sent at once and then keeps the member
    // that left as the group's leader, so router C's consumers got no partition for a minute
    // in about one run of seven (seen in librdkafka's `cgrp` debug log).
    let sink = common::unique("kafka-again");
    let (_dir, config) = load(&inbound_config(
        &bootstrap,
        &topic,
        &group,
        1,
        &memory_outbound(&sink),
    ));
    let router = Router::start(config).await.expect("starts");
    assert!(
        router
            .wait_until(Duration::from_secs(60), |_| pushed(&sink).len() >= 10)
            .await,
        "B routed {}",
        pushed(&sink).len()
    );
    router.shutdown().await;
    // A restart after a clean stop reads only what is new: nothing twice.
    produce(&bootstrap, &topic, &batch(10, 15)).await;
    let (_dir, config) = load(&inbound_config(
        &bootstrap,
        &topic,
        &group,
        2,
        &memory_outbound(&sink),
    ));
    let router = Router::start(config).await.expect("starts");
    assert!(
        router
            .wait_until(Duration::from_secs(60), |_| pushed(&sink).len() >= 15)
            .await,
        "C routed {}",
        pushed(&sink).len() - 10
    );
    router.shutdown().await;
    let mut seqs: Vec<i64> = pushed(&sink)
        .iter()
        .map(|t| t["seq"].as_i64().expect("seq"))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..15).collect::<Vec<i64>>());
}

#[tokio::test]
async fn the_outbound_produces_each_task_with_its_key_and_delivery_id() {
    let Some(broker) = broker() else { return };
    let bootstrap = broker.bootstrap();
    let topic = common::unique("tasks");
    create_topic(&bootstrap, &topic, 2).await;
    let (_dir, config) = load(&format!(
        "
project: k
outbound:
  - name: to_kafka
    selector: ['True']
    class: kafka.KafkaOutbound
    init:
      producer_settings: {{bootstrap.servers: '{bootstrap}'}}
      topic: '{topic}'
      key: company
"
    ));
    let router = Router::start(config).await.expect("starts");
    for i in 0..20 {
        let outcome = router
            .submit(None, json!({"seq": i, "company": format!("c{}", i % 4)}))
            .await
            .expect("routed");
        assert_eq!(outcome.reason, Reason::Matched, "{}", outcome.why);
    }
    router.shutdown().await;

    // The reader takes the partitions itself (no group to join).
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", common::unique("reader"))
        .create()
        .expect("consumer");
    let mut partitions = TopicPartitionList::new();
    for p in 0..2 {
        partitions
            .add_partition_offset(&topic, p, Offset::Beginning)
            .expect("offset");
    }
    consumer.assign(&partitions).expect("assign");
    let mut got = Vec::new();
    while got.len() < 20 {
        let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("a message within 30 s")
            .expect("message");
        let task: Value =
            serde_json::from_slice(message.payload().expect("payload")).expect("json");
        let key = String::from_utf8(message.key().expect("key").to_vec()).expect("utf8");
        assert_eq!(task["company"], key.as_str());
        let header = message
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "silk-delivery-id"))
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .expect("silk-delivery-id");
        assert_eq!(
            header,
            format!(
                "{}:{}",
                task["task_uuid"].as_str().expect("uuid"),
                task["routed_count"]
            )
        );
        got.push(task["seq"].as_i64().expect("seq"));
    }
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<i64>>());
}

#[test]
fn bad_kafka_settings_are_config_errors_at_their_place() {
    let (_dir, result) = common::load(
        "
inbound:
  - name: a
    class: kafka.KafkaInbound
    init:
      consumer_settings: {bootstrap.servers: 'k:9092', bootstrp.srvers: x}
      topics: []
  - name: b
    class: kafka.KafkaInbound
    init: {topics: [t]}
outbound:
  - name: o
    class: kafka.KafkaOutbound
    init: {producer_settings: {bootstrap.servers: 'k:9092', acks: maybe, ssl.key.password: hunter2-secret}}
",
        &common::vars(&[]),
    );
    let text = common::errors_of(result);
    for needle in [
        "inbound `a`: `consumer_settings`: needs `group.id`",
        "bootstrp.srvers",
        "inbound `a`: `topics`: needs at least one topic name",
        "inbound `b`: missing `consumer_settings` in `init`",
        "outbound `o`: `producer_settings`: librdkafka refuses it: `acks`: Invalid value",
        "outbound `o`: missing `topic` in `init`",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
    assert!(!text.contains("hunter2"), "a value is never shown: {text}");
}

/// The Python convert workers this process started (children running `python… -c`).
fn convert_workers() -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the fields after the last `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(me) && String::from_utf8_lossy(&cmdline).contains("Silk's convert worker") {
            found.push(pid);
        }
    }
    found
}

/// A spider log as Logstash ships it: the task's parameters as JSON text.
fn spider_log(seq: usize) -> Vec<u8> {
    let params = json!({
        "company_name": format!("测试企业{seq}"),
        "credit_no": format!("91330300{seq:010}"),
        "data_type": "change",
    });
    serde_json::to_vec(&json!({
        "@timestamp": "2024-05-01T08:00:00.000Z",
        "@version": "1",
        "host": "spider-7",
        "submitter": "taskhub",
        "task_src": 1,
        "seq": seq,
        "task_params": params.to_string(),
    }))
    .expect("json")
}

#[tokio::test]
async fn the_taskhub_ic_example_routes_spider_logs_from_kafka_through_python_converts_to_redis() {
    let Some(broker) = broker() else { return };
    let Some(redis) = common::redis_url() else {
        return;
    };
    let bootstrap = broker.bootstrap();
    // Its own database: the example's list keys are the manual's, not per test.
    let redis_url = format!("{}/13", redis.trim_end_matches('/'));
    let client = redis::Client::open(redis_url.as_str()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let lists = ["ic_change_online", "ic_change_offline", "captcha_spider"];
    let _: () = redis::AsyncCommands::del(&mut conn, &lists[..])
        .await
        .expect("del");
    let topic = "collie-ic-spider-business-log";
    create_topic(&bootstrap, topic, 2).await;

    // The example as it is, but for a shorter group session (the test broker waits about
    // half of it before it answers a join) and the plugins folder's absolute place. The
    // router starts before the first log is produced: a new group reads from the start.
    let example =
        std::fs::read_to_string(common::examples().join("taskhub_ic.yaml")).expect("example");
    let text = example
        .replace(
            "        group.id: 'taskhub-project-ic'\n",
            "        group.id: 'taskhub-project-ic'\n        session.timeout.ms: 6000\n        max.poll.interval.ms: 10000\n",
        )
        .replace(
            "plugins: plugins\n",
            &format!(
                "plugins: {{path: '{}', python: '{}'}}\n",
                common::examples().join("plugins").display(),
                std::env::var("SILK_TEST_PYTHON")
                    .ok()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "python3".into())
            ),
        )
        .replace("port: 8526", "port: 0");
    assert_ne!(text, example);
    let state = tempfile::tempdir().expect("tempdir");
    let failure = state.path().join("failure.jsonl.gz");
    let vars = common::vars(&[
        ("kafka_servers", bootstrap.as_str()),
        ("redis_url", redis_url.as_str()),
        ("failure_path", &failure.display().to_string()),
    ]);
    let load = || {
        let (dir, result) = common::load(&text, &vars);
        (dir, result.unwrap_or_else(|e| panic!("{e:?}")))
    };
    let logs = |from: usize, to: usize| -> Vec<(String, Vec<u8>)> {
        (from..to)
            .map(|i| (format!("c{}", i % 7), spider_log(i)))
            .collect()
    };
    let routed = |r: &Router| r.count(Some("change_online"), Reason::Matched);

    let (_dir, config) = load();
    let router = Router::start(config).await.expect("starts");
    produce(&bootstrap, topic, &logs(0, 15)).await;
    assert!(
        router
            .wait_until(Duration::from_secs(60), |r| routed(r) >= 15)
            .await,
        "routed {}: {}",
        routed(&router),
        router.metrics_text()
    );
    // A convert worker killed between tasks is replaced; nothing is lost.
    let workers = convert_workers();
    assert!(!workers.is_empty(), "a convert worker runs");
    for pid in &workers {
        let status = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
    produce(&bootstrap, topic, &logs(15, 30)).await;
    assert!(
        router
            .wait_until(Duration::from_secs(60), |r| routed(r) >= 30)
            .await,
        "routed {} after the worker was killed",
        routed(&router)
    );
    assert!(
        router
            .metrics_text()
            .contains("silk_router_convert_worker_restarts_total{project=\"ic\",class=\"ic.ExtractTaskParams\"} 1"),
        "{}",
        router.metrics_text()
    );
    // The router restarts: it goes on from the committed offsets.
    router.shutdown().await;
    produce(&bootstrap, topic, &logs(30, 40)).await;
    let (_dir, config) = load();
    let router = Router::start(config).await.expect("starts again");
    assert!(
        router
            .wait_until(Duration::from_secs(60), |r| routed(r) >= 10)
            .await,
        "routed {} after the restart",
        routed(&router)
    );
    router.shutdown().await;

    // Every log once, in order within its key, converted by the Python classes and pushed
    // as the outbound says (`task_params_wrapped`).
    let items: Vec<String> = redis::AsyncCommands::lrange(&mut conn, "ic_change_online", 0, -1)
        .await
        .expect("lrange");
    let mut last: BTreeMap<usize, usize> = BTreeMap::new();
    for item in &items {
        let task: Value = serde_json::from_str(item).expect("json");
        let params = &task["task_params"];
        assert_eq!(params["data_type"], "change");
        assert_eq!(
            params["search_key"], params["credit_no"],
            "ic.ChangeSearchKey ran: {task}"
        );
        assert_eq!(params["outbound"], "change_online");
        let seq: usize = params["company_name"]
            .as_str()
            .and_then(|n| n.strip_prefix("测试企业"))
            .and_then(|n| n.parse().ok())
            .expect("the name carries the log's number");
        if let Some(before) = last.insert(seq % 7, seq) {
            assert!(seq > before, "key c{}: {seq} after {before}", seq % 7);
        }
    }
    assert_eq!(items.len(), 40, "each spider log once");
    let mut seqs: Vec<usize> = items
        .iter()
        .filter_map(|i| serde_json::from_str::<Value>(i).ok())
        .filter_map(|t| {
            t["task_params"]["company_name"]
                .as_str()
                .and_then(|n| n.strip_prefix("测试企业"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..40).collect::<Vec<usize>>());
    let _: () = redis::AsyncCommands::del(&mut conn, &lists[..])
        .await
        .expect("del");
}
