//! The bus conformance suite (`silk_bus::conformance`) against the in-process bus: one
//! broker per namespace, every client of a namespace attached to it.

use async_trait::async_trait;
use silk_bus::conformance::BusFactory;
use silk_bus::{Bus, BusConfig, InProcessBus};
use silk_core::ManualClock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct InProcess {
    brokers: Mutex<HashMap<String, InProcessBus>>,
}

#[async_trait]
impl BusFactory for InProcess {
    async fn open(&self, config: BusConfig, clock: ManualClock) -> Arc<dyn Bus> {
        let mut brokers = self.brokers.lock().expect("lock");
        let bus = match brokers.get(&config.namespace) {
            Some(first) => first.attach(config, Arc::new(clock)).expect("attach"),
            None => {
                let bus =
                    InProcessBus::with_clock(config.clone(), Arc::new(clock)).expect("new bus");
                brokers.insert(config.namespace, bus.clone());
                bus
            }
        };
        Arc::new(bus)
    }

    async fn open_unreachable(&self, config: BusConfig) -> Arc<dyn Bus> {
        let bus = InProcessBus::new(config).expect("new bus");
        bus.set_available(false);
        Arc::new(bus)
    }
}

silk_bus::bus_conformance_tests!(Some(InProcess::default()));
