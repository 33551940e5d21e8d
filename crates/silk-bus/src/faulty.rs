//! [`FaultyBus`]: a [`Bus`] that delegates to another one and injects the faults a test asks
//! for, per subject class, while the test runs: publishes that fail the way a bus that is
//! down fails (retryable errors through the caller's retry policy, then the last error), or
//! publishes that are lost (acknowledged, never delivered, as a core NATS publish to a
//! server that dies). The one fault-injecting bus of the tests; nothing else uses it.

use crate::bus::{Bus, RetryPolicy, SubscribeOpts, Subscription};
use crate::error::BusError;
use crate::subject::{Subject, SubjectClass};
use crate::wire::Envelope;
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// What happens to a publish on a faulty subject class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fails as an unreachable bus does: retried under `policy` (its waits are real), then
    /// the last `Unavailable` error.
    Unavailable(RetryPolicy),
    /// Acknowledged, never delivered.
    Lost,
}

/// The switchboard of a [`FaultyBus`]: cheap to clone, shared with the test.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    by_class: Arc<Mutex<HashMap<SubjectClass, Fault>>>,
}

impl Faults {
    /// From now on, publishes on `class` meet `fault`.
    pub fn set(&self, class: SubjectClass, fault: Fault) {
        self.by_class.lock().insert(class, fault);
    }
    /// From now on, publishes on `class` go through again.
    pub fn heal(&self, class: SubjectClass) {
        self.by_class.lock().remove(&class);
    }
    fn of(&self, class: SubjectClass) -> Option<Fault> {
        self.by_class.lock().get(&class).copied()
    }
}

/// A bus whose publishes fail or vanish on demand (see the module doc). Subscriptions are
/// the inner bus's.
#[derive(Debug)]
pub struct FaultyBus<B> {
    inner: B,
    faults: Faults,
}

impl<B: Bus> FaultyBus<B> {
    /// Wraps `inner`, healthy until `faults` says otherwise.
    pub fn new(inner: B, faults: Faults) -> Self {
        Self { inner, faults }
    }

    /// What a publish on `subject` meets: `None` to go on to the inner bus.
    async fn fault(&self, subject: &Subject) -> Option<Result<(), BusError>> {
        match self.faults.of(subject.class())? {
            Fault::Lost => Some(Ok(())),
            Fault::Unavailable(policy) => {
                let full = subject.full(self.inner.namespace());
                let result = policy
                    .run("publish", &full, || {
                        let subject = full.clone();
                        async move {
                            Err::<(), _>(BusError::unavailable(
                                "publish",
                                subject,
                                "bus broken by the test (FaultyBus)",
                            ))
                        }
                    })
                    .await;
                Some(result)
            }
        }
    }
}

#[async_trait]
impl<B: Bus> Bus for FaultyBus<B> {
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    async fn publish(&self, subject: &Subject, envelope: &Envelope) -> Result<(), BusError> {
        match self.fault(subject).await {
            Some(result) => result,
            None => self.inner.publish(subject, envelope).await,
        }
    }

    async fn publish_raw(&self, subject: &Subject, payload: Bytes) -> Result<(), BusError> {
        match self.fault(subject).await {
            Some(result) => result,
            None => self.inner.publish_raw(subject, payload).await,
        }
    }

    async fn subscribe(
        &self,
        subject: &Subject,
        opts: SubscribeOpts,
    ) -> Result<Subscription, BusError> {
        self.inner.subscribe(subject, opts).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InProcessBus;
    use crate::bus::BusConfig;
    use crate::wire::{Control, TtlPolicy};
    use silk_core::RunId;
    use std::time::Duration;

    fn stop(n: u32) -> Envelope {
        let run = RunId::new(format!("r{n}"));
        TtlPolicy::default().envelope(Control::Stop { run }, 1)
    }

    #[tokio::test(start_paused = true)]
    async fn faults_apply_per_class_until_healed() {
        let faults = Faults::default();
        let inner = InProcessBus::new(BusConfig::default()).expect("bus");
        let bus = FaultyBus::new(inner.clone(), faults.clone());
        let subject = Subject::run_control(&RunId::new("r")).expect("subject");
        let mut sub = bus
            .subscribe(&subject, SubscribeOpts::durable("d"))
            .await
            .expect("subscribe");

        let policy = RetryPolicy {
            retries: 2,
            backoff_initial_ms: 10,
            backoff_max_ms: 50,
        };
        faults.set(SubjectClass::RunControl, Fault::Unavailable(policy));
        let e = bus.publish(&subject, &stop(1)).await.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        // Another class goes through.
        let raw = stop(2).encode().expect("encode");
        bus.publish_raw(&Subject::results(), raw)
            .await
            .expect("results unaffected");

        faults.set(SubjectClass::RunControl, Fault::Lost);
        bus.publish(&subject, &stop(3)).await.expect("acknowledged");
        faults.heal(SubjectClass::RunControl);
        bus.publish(&subject, &stop(4)).await.expect("healed");
        // Only the publish after the heal arrived.
        let got = sub.next().await.expect("delivery").expect("envelope");
        assert_eq!(got.envelope.body, stop(4).body);
        let more = tokio::time::timeout(Duration::from_millis(100), sub.next()).await;
        assert!(more.is_err(), "nothing else was delivered");
    }
}
