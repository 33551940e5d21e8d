//! The classes this crate provides, registered under the seed's names and Silk's own.
//! Each submodule owns its storage layout and documents it.

pub(crate) mod convert;
pub(crate) mod http;
pub(crate) mod kafka;
pub(crate) mod nats;
pub(crate) mod redis;
pub(crate) mod redis_stream;

use std::sync::Arc;

use crate::registry::{Entry, NEEDS_HUB, Registry};

impl Default for Registry {
    fn default() -> Self {
        Registry::standard()
    }
}

impl Registry {
    /// Every class of this crate, under the seed's names and Silk's own (the `silk.*` classes
    /// as unavailable: the hub registers real ones).
    pub fn standard() -> Registry {
        let mut registry = Registry::empty();
        register_standard(&mut registry);
        registry.inbounds.insert(
            "silk.RunResultsInbound".into(),
            Entry::Unavailable(NEEDS_HUB.into()),
        );
        registry.outbounds.insert(
            "silk.JobOutbound".into(),
            Entry::Unavailable(NEEDS_HUB.into()),
        );
        registry
    }
}

/// Registers every standard class.
fn register_standard(registry: &mut Registry) {
    registry
        .register_inbound("http.HttpInbound", Arc::new(http::HttpInboundFactory))
        .register_inbound(
            "redis_queue.RedisListInbound",
            Arc::new(redis::RedisListInboundFactory),
        )
        .register_inbound(
            "nats.JetStreamInbound",
            Arc::new(nats::JetStreamInboundFactory),
        )
        .register_outbound(
            "redis_queue.RedisListOutbound",
            Arc::new(redis::RedisListOutboundFactory),
        )
        .register_outbound(
            "redis_queue.RedisStreamOutbound",
            Arc::new(redis_stream::RedisStreamOutboundFactory),
        )
        .register_inbound("kafka.KafkaInbound", Arc::new(kafka::KafkaInboundFactory))
        .register_outbound("kafka.KafkaOutbound", Arc::new(kafka::KafkaOutboundFactory))
        .register_outbound("nats.NatsOutbound", Arc::new(nats::NatsOutboundFactory))
        .register_outbound("http.HttpOutbound", Arc::new(http::HttpOutboundFactory))
        .register_convert(
            "logstash.RemoveBuildinKeys",
            Arc::new(convert::RemoveBuildinKeysFactory),
        )
        .register_convert(
            "common.ExtractTaskParams",
            Arc::new(convert::ExtractFactory("task_params")),
        )
        .register_convert(
            "common.ExtractMetadata",
            Arc::new(convert::ExtractFactory("metadata")),
        );
}
