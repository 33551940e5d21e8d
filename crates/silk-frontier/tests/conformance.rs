//! The frontier conformance suite (`silk_frontier::conformance`) run against the embedded
//! store: each slot is a directory under one temporary root per test.

use async_trait::async_trait;
use silk_core::ManualClock;
use silk_frontier::conformance::FrontierFactory;
use silk_frontier::{EmbeddedFrontier, FrontierConfig, FrontierStore};
use std::sync::Arc;

struct Embedded {
    root: tempfile::TempDir,
}

impl Embedded {
    fn new() -> Self {
        Self {
            root: tempfile::tempdir().expect("temp dir"),
        }
    }
}

#[async_trait]
impl FrontierFactory for Embedded {
    async fn open(
        &self,
        slot: &str,
        config: FrontierConfig,
        clock: ManualClock,
    ) -> Arc<dyn FrontierStore> {
        let dir = self.root.path().join(slot);
        Arc::new(
            EmbeddedFrontier::open(&dir, config, Arc::new(clock)).expect("open embedded frontier"),
        )
    }
}

silk_frontier::frontier_conformance_tests!(Embedded::new());
