//! The bus conformance suite (`silk_bus::conformance`) against NATS JetStream: the shared
//! server named by `SILK_TEST_NATS` (skipped when unset); each check uses its own namespace
//! (subjects and stream) and deletes its stream at the end. The unreachable bus points at a
//! port nothing listens on.

mod support;

use async_trait::async_trait;
use silk_bus::conformance::BusFactory;
use silk_bus::{Bus, BusConfig, NatsBus};
use silk_core::ManualClock;
use std::sync::Arc;

struct Nats {
    url: String,
}

fn factory() -> Option<Nats> {
    support::shared_nats_url().map(|url| Nats { url })
}

#[async_trait]
impl BusFactory for Nats {
    async fn open(&self, config: BusConfig, clock: ManualClock) -> Arc<dyn Bus> {
        Arc::new(
            NatsBus::connect_with_clock(&self.url, config, Arc::new(clock))
                .await
                .expect("connect"),
        )
    }

    async fn open_unreachable(&self, config: BusConfig) -> Arc<dyn Bus> {
        let url = format!("nats://127.0.0.1:{}", support::free_port());
        Arc::new(
            NatsBus::connect(&url, config)
                .await
                .expect("connect returns while the server is down"),
        )
    }

    async fn cleanup(&self, namespace: &str) {
        let bus = NatsBus::connect(&self.url, BusConfig::with_namespace(namespace))
            .await
            .expect("connect");
        if let Err(e) = bus.delete_stream().await {
            eprintln!("cleanup of namespace {namespace}: {e}");
        }
    }
}

silk_bus::bus_conformance_tests!(factory());
