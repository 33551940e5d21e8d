//! Item sink targets (`HubConfig::sink_targets`, `silk hub --sink-targets`): a run that names
//! targets gets every item into a JetStream subject, a Redis stream and a Kafka topic (a real
//! NATS server, Redis and a Kafka-protocol broker the test starts), each once; delivered
//! again after a hub restart from offset zero, JetStream and the Redis stream still hold each
//! item once (deduplicated on `RUN:KEY`) and Kafka's copies carry the same key. A target
//! that is not declared is `400`, one not granted to the run's tenant `403`.

mod common;

use common::*;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use serde_json::{Value, json};
use silk_api::jobs::JobSpec;
use silk_api::runs::RunState;
use silk_hub::SinkTargets;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;

const SPIDER: &str = "name: shop\nstart_urls: ['${args.start_url}']\nallowed_domains: [${args.hosts}]\n\
    follow: [{deny: ['/calendar/']}]\nitem_when: '/p/\\d+$'\nextract: {title: {css: 'h1.title'}}\nper_host_delay_ms: 0\n";

fn site_args(site: &silk_testkit::demo::DemoSite) -> Value {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    json!({"start_url": site.start_url(), "hosts": hosts.join(", ")})
}

/// The targets of a sink targets file with `text`.
fn targets(dir: &Path, text: &str) -> SinkTargets {
    let path = dir.join("targets.yaml");
    std::fs::write(&path, text).unwrap();
    let config = silk_router::Config::load(&[&path], &silk_router::Vars::new())
        .unwrap_or_else(|e| panic!("{e:?}"));
    SinkTargets::from_config(&config).unwrap_or_else(|e| panic!("{e:?}"))
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    )
}

/// Every message of JetStream stream `stream`: (its `Nats-Msg-Id`, its JSON).
async fn jetstream_messages(
    js: &async_nats::jetstream::Context,
    stream: &str,
) -> Vec<(String, Value)> {
    let mut stream = js.get_stream(stream).await.unwrap();
    let count = stream.info().await.unwrap().state.messages;
    let mut out = Vec::new();
    for seq in 1..=count {
        let message = stream.get_raw_message(seq).await.unwrap();
        let id = message
            .headers
            .get("Nats-Msg-Id")
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        out.push((id, serde_json::from_slice(&message.payload).unwrap()));
    }
    out
}

/// Every entry of Redis stream `key`: (its `id` field, the JSON of its `item` field).
async fn redis_entries(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> Vec<(String, Value)> {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(_, fields)| {
            let get = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            (get("id"), serde_json::from_str(&get("item")).unwrap())
        })
        .collect()
}

/// Reads `n` messages of `topic` from its start: (key, JSON).
async fn kafka_messages(bootstrap: &str, topic: &str, n: usize) -> Vec<(String, Value)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let message = within("a Kafka message", 60, consumer.recv())
            .await
            .unwrap();
        let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
        out.push((
            key,
            serde_json::from_slice(message.payload().unwrap()).unwrap(),
        ));
    }
    out
}

/// Asserts that `messages` hold each of the run's `items` once, as the sink's envelope.
fn assert_each_item_once(what: &str, messages: &[(String, Value)], run: &str, items: u64) {
    let mut keys = BTreeMap::new();
    for (id, message) in messages {
        assert_eq!(message["run"], run, "{what}: {message}");
        assert_eq!(message["job"], "targets", "{what}: {message}");
        assert_eq!(message["tenant"], "default", "{what}: {message}");
        let key = message["key"].as_str().unwrap().to_owned();
        assert_eq!(id, &format!("{run}:{key}"), "{what}: the delivery id");
        assert!(message["item"]["url"].is_string(), "{what}: {message}");
        *keys.entry(key).or_insert(0) += 1;
    }
    assert_eq!(keys.len() as u64, items, "{what}: every item");
    assert!(
        keys.values().all(|n| *n == 1),
        "{what}: each once: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn items_reach_a_jetstream_subject_a_redis_stream_and_a_kafka_topic_once_each() {
    let (Some(nats), Some(redis_url), Some(broker)) = (
        silk_testkit::service_url("SILK_TEST_NATS"),
        silk_testkit::service_url("SILK_TEST_REDIS"),
        silk_testkit::service_url("SILK_TEST_KAFKA_BROKER"),
    ) else {
        return;
    };
    let broker = silk_testkit::KafkaBroker::start(broker).expect("the Kafka broker starts");
    let name = unique("silkitems");
    // The JetStream stream that captures the subject (its duplicate window is 2 minutes).
    let client = async_nats::connect(&nats).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![format!("{name}.items")],
        ..Default::default()
    })
    .await
    .unwrap();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    for created in admin
        .create_topics(
            &[NewTopic::new("items", 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap()
    {
        created.unwrap();
    }
    let stream_key = format!("{name}:items");
    let dir = TempDir::new().unwrap();
    let file = format!(
        "
outbound:
  - name: events
    class: nats.NatsOutbound
    init: {{url: '{nats}', subject: '{name}.items'}}
  - name: feed
    class: redis_queue.RedisStreamOutbound
    init: {{url: '{redis_url}', stream: '{stream_key}', field: item}}
    batch_size: 7
  - name: warehouse
    class: kafka.KafkaOutbound
    init: {{producer_settings: {{bootstrap.servers: '{}'}}, topic: items, key: key}}
",
        broker.bootstrap()
    );
    let mut config = hub_config(dir.path());
    config.sink_targets = targets(dir.path(), &file);
    let bus = bus();
    let site = site(20, 0).await;
    let hub = start_hub_with(config.clone(), &bus).await;
    let _agent = start_agent(dir.path(), &bus, "a1").await;
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    let spec: JobSpec = serde_json::from_value(json!({
        "name": "targets", "spider": SPIDER, "args": site_args(&site),
        "sinks": {"targets": ["events", "feed", "warehouse"]}
    }))
    .unwrap();
    let job = hub.create_job(spec).await.unwrap();
    let run = hub.trigger(&job.id, Default::default()).await.unwrap();
    assert_eq!(run.sinks.targets, ["events", "feed", "warehouse"]);
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let items = done.stats.items;
    assert!(items > 10, "{items}");
    let run_id = run.id.as_str().to_owned();

    let mut conn = redis::Client::open(redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let entries = until("the Redis stream", async || {
        let e = redis_entries(&mut conn, &stream_key).await;
        (e.len() as u64 >= items).then_some(e)
    })
    .await;
    assert_each_item_once("redis stream", &entries, &run_id, items);
    let messages = until("the JetStream subject", async || {
        let m = jetstream_messages(&js, &name).await;
        (m.len() as u64 >= items).then_some(m)
    })
    .await;
    assert_each_item_once("jetstream", &messages, &run_id, items);
    let records = kafka_messages(&broker.bootstrap(), "items", items as usize).await;
    let with_ids: Vec<(String, Value)> = records
        .iter()
        .map(|(key, m)| (format!("{run_id}:{key}"), m.clone()))
        .collect();
    assert_each_item_once("kafka", &with_ids, &run_id, items);
    // Each sink says it delivered everything (the sinks' marker is gone).
    let run_dir = hub.data_dir().join("runs").join(&run_id);
    until("the sinks' end", async || {
        (!run_dir.join("sinks.pending").exists()).then_some(())
    })
    .await;
    hub.shutdown().await;

    // Every sink delivers everything again (its offset lost, as after a crash before it was
    // stored): the targets that deduplicate still hold each item once.
    for target in ["events", "feed", "warehouse"] {
        std::fs::write(
            run_dir.join(format!("sink-target-{target}.json")),
            r#"{"offset":0,"delivered":0}"#,
        )
        .unwrap();
    }
    std::fs::write(run_dir.join("sinks.pending"), "true").unwrap();
    let hub = start_hub_with(config, &bus).await;
    until("the sinks' second end", async || {
        (!run_dir.join("sinks.pending").exists()).then_some(())
    })
    .await;
    assert_each_item_once(
        "redis stream, again",
        &redis_entries(&mut conn, &stream_key).await,
        &run_id,
        items,
    );
    assert_each_item_once(
        "jetstream, again",
        &jetstream_messages(&js, &name).await,
        &run_id,
        items,
    );
    // Kafka keeps both copies (at least once), under the same key.
    let records = kafka_messages(&broker.bootstrap(), "items", 2 * items as usize).await;
    let mut per_key: BTreeMap<String, u32> = BTreeMap::new();
    for (key, _) in &records {
        *per_key.entry(key.clone()).or_default() += 1;
    }
    assert_eq!(per_key.len() as u64, items);
    assert!(per_key.values().all(|n| *n == 2), "{per_key:?}");
    hub.shutdown().await;
    let _: () = redis::cmd("DEL")
        .arg(&stream_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    js.delete_stream(&name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_names_only_targets_the_hub_declares_and_its_tenant_is_granted() {
    let dir = TempDir::new().unwrap();
    let mut config = hub_config(dir.path());
    // Not reached: a run that may not use it never starts.
    config.sink_targets = targets(
        dir.path(),
        "
outbound:
  - name: feed
    class: redis_queue.RedisStreamOutbound
    init: {url: 'redis://127.0.0.1:1', stream: items}
  - name: other
    class: redis_queue.RedisListOutbound
    init: {url: 'redis://127.0.0.1:1', key: items}
",
    );
    let bus = bus();
    let hub = start_hub_with(config, &bus).await;
    let (base, admin) = serve(&hub).await;
    let (status, body) = call(
        &admin,
        reqwest::Method::POST,
        "/api/v1/tenants",
        Some(json!({"name": "shop", "sink_targets": ["feed"]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["sink_targets"], json!(["feed"]));
    let run = |targets: Value| json!({"spider": "name: s\nstart_urls: ['http://127.0.0.1:1/']\n", "sinks": {"targets": targets}});
    let (status, body) = call(
        &admin,
        reqwest::Method::POST,
        "/api/v1/runs",
        Some(run(json!(["nope"]))),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let said = body["message"].as_str().unwrap();
    assert!(
        said.contains(
            "sinks.targets[0]: this hub has no item sink target `nope` (declared: feed, other)"
        ),
        "{said}"
    );
    let (status, body) = call(
        &admin,
        reqwest::Method::POST,
        "/api/v1/runs",
        Some(run(json!(["feed", "feed"]))),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("sinks.targets[1]: `feed` is given twice")
    );
    // A token of tenant `shop`: `feed` is granted, `other` is not.
    let made = admin
        .create_token(&silk_api::tokens::TokenRequest {
            name: "shop-owner".into(),
            role: Some(silk_api::tokens::Role::Owner),
            tenant: Some("shop".into()),
            admin: false,
        })
        .await
        .unwrap();
    let shop = silk_api::client::Client::new(reqwest::Url::parse(&base).unwrap(), Some(made.token))
        .unwrap();
    let (status, body) = call(
        &shop,
        reqwest::Method::POST,
        "/api/v1/runs",
        Some(run(json!(["feed", "other"]))),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let said = body["message"].as_str().unwrap();
    assert!(
        said.contains("sinks.targets[1]: item sink target `other` is not granted to tenant `shop` (granted: feed)"),
        "{said}"
    );
    // A job is checked when it is made (and its runs again when they start).
    let (status, body) = call(
        &shop,
        reqwest::Method::POST,
        "/api/v1/jobs",
        Some(json!({"name": "j", "spider": "name: s\nstart_urls: ['http://127.0.0.1:1/']\n", "sinks": {"targets": ["other"]}})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("sinks.targets[0]: item sink target `other` is not granted"),
        "{body}"
    );
    // The admin takes the grant back: every target again.
    let (status, body) = call(
        &admin,
        reqwest::Method::PATCH,
        "/api/v1/tenants/shop",
        Some(json!({"sink_targets": null})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("sink_targets").is_none(), "{body}");
    hub.shutdown().await;
}
