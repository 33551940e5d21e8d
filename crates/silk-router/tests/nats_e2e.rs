//! End to end against the NATS server named by `SILK_TEST_NATS` (skipped when unset): a
//! JetStream inbound (durable consumer, acked after routing) feeding a JetStream-backed
//! NATS outbound, with the outbound's backlog read from its stream. Streams and subjects
//! are unique per test.

mod common;

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use serde_json::{Value, json};
use silk_router::{Reason, Router};

#[tokio::test]
async fn jetstream_inbound_to_nats_outbound() {
    let Some(url) = common::nats_url() else {
        return;
    };
    let id = common::unique("t").replace('-', "_");
    let (in_stream, out_stream) = (format!("IN_{id}"), format!("OUT_{id}"));
    let (in_subject, out_subject) = (format!("silk_test.{id}.in"), format!("silk_test.{id}.out"));
    let client = async_nats::connect(&url).await.expect("nats");
    let js = jetstream::new(client);
    for (name, subject) in [(&in_stream, &in_subject), (&out_stream, &out_subject)] {
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            max_age: Duration::from_secs(600),
            ..Default::default()
        })
        .await
        .expect("stream");
    }
    let text = "
inbound:
  - name: results
    class: nats.JetStreamInbound
    init: {url: '{nats}', stream: '{in_stream}', subject: '{in_subject}', ack_wait_ms: 5000}
    threads: 4
    selector: [\"kind is not None\"]
outbound:
  - name: out
    selector: [\"kind == 'x'\"]
    class: nats.NatsOutbound
    init: {url: '{nats}', subject: '{out_subject}', stream: '{out_stream}'}
";
    let vars = common::vars(&[
        ("nats", &url),
        ("in_stream", &in_stream),
        ("in_subject", &in_subject),
        ("out_stream", &out_stream),
        ("out_subject", &out_subject),
    ]);
    let (_dir, config) = common::load(text, &vars);
    let config = config.unwrap_or_else(|e| {
        panic!(
            "{}",
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    for n in 0..10 {
        js.publish(
            in_subject.clone(),
            json!({"kind": "x", "n": n}).to_string().into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored");
    }
    js.publish(in_subject.clone(), json!({"kind": "y"}).to_string().into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    js.publish(in_subject.clone(), "{not json".into())
        .await
        .expect("publish")
        .await
        .expect("stored");

    let router = Router::start(config).await.expect("starts");
    let routed = router
        .wait_until(Duration::from_secs(20), |r| {
            r.count(Some("out"), Reason::Matched) == 10
                && r.count(None, Reason::NoRoute) == 1
                && r.count(None, Reason::BadTask) == 1
        })
        .await;
    assert!(routed, "{}", router.metrics_text());
    let status = router.outbound_status("out").await;
    assert_eq!(status[0].backlog, Some(10), "{status:?}");
    router.shutdown().await;

    // Every inbound message was acked after routing.
    let stream = js.get_stream(&in_stream).await.expect("stream");
    let info = stream
        .consumer_info("silk-router-results")
        .await
        .expect("durable consumer");
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0), "{info:?}");

    // The outbound stream holds the ten routed tasks, each with its delivery id.
    let out = js.get_stream(&out_stream).await.expect("stream");
    let reader = out
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut messages = reader
        .fetch()
        .max_messages(20)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .expect("fetch");
    let mut seen = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message.expect("message");
        let task: Value = serde_json::from_slice(&message.payload).expect("json");
        assert_eq!(task["outbound"], "out");
        let id = message
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.to_string())
            .expect("Nats-Msg-Id");
        assert_eq!(
            id,
            format!("{}:1", task["task_uuid"].as_str().expect("uuid"))
        );
        seen.push(task["n"].as_i64().expect("n"));
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<i64>>());
    let _ = js.delete_stream(&in_stream).await;
    let _ = js.delete_stream(&out_stream).await;
}
