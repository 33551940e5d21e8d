//! One sender per outbound: the in-memory queue between routing and the target, and the
//! loop that drains it under the outbound's `max_lag` and token bucket.
//!
//! - Routing calls [`OutboundSender::deliver`], which queues the task and resolves when the
//!   target has it (so an inbound acknowledges only delivered tasks). At most
//!   `queue_capacity` tasks wait; further callers wait for room (back-pressure).
//! - Tasks wait in one lane per inbound. The sender serves lanes round-robin, up to the
//!   inbound's `weight` tasks per turn, so when the outbound is the bottleneck each
//!   inbound gets its weighted share.
//! - `max_lag`: before each batch the sender reads the target's backlog; at or above
//!   `max_lag` it holds (nothing is dropped: tasks stay queued, submitters wait) and reads
//!   again every `max_lag_check_ms`; below it, it pushes at most `max_lag - backlog` tasks.
//!   The backlog therefore never exceeds `max_lag` because of this router.
//! - Tokens: a batch is cut to the tokens available; with none, the sender waits for the
//!   next one.
//! - A failed push is tried twice more (after 200 ms and 1 s); then the submitters get the
//!   error and the task stays with its inbound. A non-retryable error is not tried again;
//!   a refusal ([`RouterError::Refused`]) goes to its submitter at once, which ends the task
//!   as failed, and is not counted as a push error (the target is fine; the task is not).
//!
//! Shutdown: after `stop`, the sender drains what is queued and exits; `abort` fails
//! everything queued with `ShuttingDown` at once.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use silk_core::Clock;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot, watch};

use crate::bucket::TokenBucket;
use crate::config::OutboundSettings;
use crate::error::RouterError;
use crate::metrics::OutboundGauges;
use crate::registry::{Outbound, Outgoing};

struct Pending {
    out: Outgoing,
    done: oneshot::Sender<Result<(), RouterError>>,
    _permit: OwnedSemaphorePermit,
}

struct Lane {
    weight: u32,
    items: VecDeque<Pending>,
}

struct Lanes {
    lanes: Vec<Lane>,
    cursor: usize,
    served: u32,
    len: usize,
}

impl Lanes {
    fn push(&mut self, lane: usize, pending: Pending) {
        let lane = lane.min(self.lanes.len() - 1);
        self.lanes[lane].items.push_back(pending);
        self.len += 1;
    }

    /// Up to `n` tasks, weighted round-robin over the lanes.
    fn pop(&mut self, n: usize) -> Vec<Pending> {
        let mut out = Vec::with_capacity(n.min(self.len));
        while out.len() < n && self.len > 0 {
            let lane = &mut self.lanes[self.cursor];
            if self.served < lane.weight
                && let Some(p) = lane.items.pop_front()
            {
                out.push(p);
                self.served += 1;
                self.len -= 1;
                continue;
            }
            self.cursor = (self.cursor + 1) % self.lanes.len();
            self.served = 0;
        }
        out
    }

    fn drain(&mut self) -> Vec<Pending> {
        self.len = 0;
        self.lanes
            .iter_mut()
            .flat_map(|l| l.items.drain(..))
            .collect()
    }
}

/// Pushes per second over the last 10 s.
struct RateWindow {
    slots: [(u64, u64); 10],
}

impl RateWindow {
    fn add(&mut self, now_ms: u64, n: u64) {
        let sec = now_ms / 1000;
        let slot = &mut self.slots[(sec % 10) as usize];
        if slot.0 != sec {
            *slot = (sec, 0);
        }
        slot.1 += n;
    }

    fn per_second(&self, now_ms: u64) -> f64 {
        let sec = now_ms / 1000;
        let total: u64 = self
            .slots
            .iter()
            .filter(|(s, _)| *s + 10 > sec && *s <= sec)
            .map(|(_, n)| n)
            .sum();
        total as f64 / 10.0
    }
}

/// The queue and sender of one outbound.
pub(crate) struct OutboundSender {
    pub name: String,
    component: Arc<dyn Outbound>,
    settings: OutboundSettings,
    lanes: Mutex<Lanes>,
    wake: Notify,
    abort_wake: Notify,
    capacity: Arc<Semaphore>,
    bucket: Option<Arc<TokenBucket>>,
    clock: Arc<dyn Clock>,
    pushed: AtomicU64,
    push_errors: AtomicU64,
    token_waits: AtomicU64,
    holding: AtomicBool,
    backlog: AtomicI64,
    abort: AtomicBool,
    rate: Mutex<RateWindow>,
    progress: watch::Sender<u64>,
}

impl OutboundSender {
    pub(crate) fn new(
        name: String,
        component: Arc<dyn Outbound>,
        settings: OutboundSettings,
        lane_weights: &[u32],
        bucket: Option<Arc<TokenBucket>>,
        clock: Arc<dyn Clock>,
    ) -> OutboundSender {
        let lanes = lane_weights
            .iter()
            .map(|&weight| Lane {
                weight: weight.max(1),
                items: VecDeque::new(),
            })
            .collect();
        OutboundSender {
            name,
            component,
            capacity: Arc::new(Semaphore::new(settings.queue_capacity)),
            settings,
            lanes: Mutex::new(Lanes {
                lanes,
                cursor: 0,
                served: 0,
                len: 0,
            }),
            wake: Notify::new(),
            abort_wake: Notify::new(),
            bucket,
            clock,
            pushed: AtomicU64::new(0),
            push_errors: AtomicU64::new(0),
            token_waits: AtomicU64::new(0),
            holding: AtomicBool::new(false),
            backlog: AtomicI64::new(-1),
            abort: AtomicBool::new(false),
            rate: Mutex::new(RateWindow {
                slots: [(0, 0); 10],
            }),
            progress: watch::channel(0).0,
        }
    }

    fn lanes(&self) -> parking_lot::MutexGuard<'_, Lanes> {
        self.lanes.lock()
    }

    /// Queues `out` in `lane` and waits until the target has it.
    pub(crate) async fn deliver(&self, lane: usize, out: Outgoing) -> Result<(), RouterError> {
        if self.abort.load(Ordering::Acquire) {
            return Err(RouterError::ShuttingDown);
        }
        let permit = self
            .capacity
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RouterError::ShuttingDown)?;
        let (done, wait) = oneshot::channel();
        {
            let mut lanes = self.lanes();
            // Checked under the lock that `abort` drains under, so nothing is queued after it.
            if self.abort.load(Ordering::Acquire) {
                return Err(RouterError::ShuttingDown);
            }
            lanes.push(
                lane,
                Pending {
                    out,
                    done,
                    _permit: permit,
                },
            );
        }
        self.wake.notify_one();
        wait.await.unwrap_or(Err(RouterError::ShuttingDown))
    }

    /// Fails everything queued (and every later `deliver`) with `ShuttingDown`.
    pub(crate) fn abort(&self) {
        let drained = {
            let mut lanes = self.lanes();
            self.abort.store(true, Ordering::Release);
            lanes.drain()
        };
        self.capacity.close();
        for p in drained {
            let _ = p.done.send(Err(RouterError::ShuttingDown));
        }
        self.abort_wake.notify_waiters();
        self.wake.notify_one();
    }

    /// A counter that moves after every batch and every change of holding state.
    pub(crate) fn progress(&self) -> watch::Receiver<u64> {
        self.progress.subscribe()
    }

    pub(crate) fn gauges(&self) -> OutboundGauges {
        let backlog = self.backlog.load(Ordering::Relaxed);
        OutboundGauges {
            pushed: self.pushed.load(Ordering::Relaxed),
            push_errors: self.push_errors.load(Ordering::Relaxed),
            queued: self.lanes().len as u64,
            holding: self.holding.load(Ordering::Relaxed),
            backlog: u64::try_from(backlog).ok(),
            tokens_waits: self.token_waits.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn rate_per_second(&self) -> f64 {
        self.rate.lock().per_second(self.clock.now_ms())
    }

    pub(crate) fn component(&self) -> &Arc<dyn Outbound> {
        &self.component
    }

    pub(crate) fn bucket(&self) -> Option<&Arc<TokenBucket>> {
        self.bucket.as_ref()
    }

    fn set_holding(&self, holding: bool) {
        if self.holding.swap(holding, Ordering::Relaxed) != holding {
            if holding {
                tracing::info!(outbound = %self.name, max_lag = self.settings.max_lag, "holding: target backlog at max_lag");
            } else {
                tracing::info!(outbound = %self.name, "released: target backlog below max_lag");
            }
            self.progress.send_modify(|v| *v += 1);
        }
    }

    async fn pause(&self, ms: u64) {
        let aborted = self.abort_wake.notified();
        if self.abort.load(Ordering::Acquire) {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = aborted => {}
        }
    }

    /// The sender loop; returns after `stop` once the queue is empty.
    pub(crate) async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut lag_errors = 0u64;
        loop {
            loop {
                let notified = self.wake.notified();
                if self.lanes().len > 0 {
                    break;
                }
                if *stop.borrow() || self.abort.load(Ordering::Acquire) {
                    return;
                }
                tokio::select! {
                    _ = notified => {}
                    _ = stop.changed() => {}
                }
            }
            if self.abort.load(Ordering::Acquire) {
                continue;
            }
            let mut room = self.settings.batch_size;
            if self.settings.max_lag > 0 {
                let max_lag = self.settings.max_lag as u64;
                match self.component.backlog().await {
                    Ok(Some(backlog)) => {
                        lag_errors = 0;
                        self.backlog.store(backlog as i64, Ordering::Relaxed);
                        if backlog >= max_lag {
                            self.set_holding(true);
                            self.pause(self.settings.max_lag_check_ms).await;
                            continue;
                        }
                        room = room.min((max_lag - backlog) as usize);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        lag_errors += 1;
                        if lag_errors == 1 || lag_errors.is_multiple_of(100) {
                            tracing::warn!(outbound = %self.name, error = %e, "cannot read the backlog; holding");
                        }
                        self.pause(self.settings.max_lag_check_ms.max(200)).await;
                        continue;
                    }
                }
                self.set_holding(false);
            }
            let queued = self.lanes().len;
            let mut n = room.min(queued);
            if let Some(bucket) = &self.bucket {
                let got = bucket.take_up_to(n);
                if got == 0 {
                    self.token_waits.fetch_add(1, Ordering::Relaxed);
                    self.pause(bucket.wait_ms().max(1)).await;
                    continue;
                }
                n = got;
            }
            let batch = self.lanes().pop(n);
            if batch.is_empty() {
                continue;
            }
            self.push_batch(batch).await;
        }
    }

    async fn push_batch(&self, batch: Vec<Pending>) {
        let (outs, waiters): (Vec<Outgoing>, Vec<_>) = batch
            .into_iter()
            .map(|p| (p.out, (p.done, p._permit)))
            .unzip();
        let mut results: Vec<Option<Result<(), RouterError>>> =
            (0..outs.len()).map(|_| None).collect();
        let mut todo: Vec<usize> = (0..outs.len()).collect();
        for (attempt, backoff_ms) in [0u64, 200, 1000].into_iter().enumerate() {
            if attempt > 0 {
                if self.abort.load(Ordering::Acquire) {
                    break;
                }
                self.pause(backoff_ms).await;
            }
            let answers = if todo.len() == outs.len() {
                self.component.push(&outs).await
            } else {
                let slice: Vec<Outgoing> = todo.iter().map(|&i| outs[i].clone()).collect();
                self.component.push(&slice).await
            };
            let mut again = Vec::new();
            for (k, &i) in todo.iter().enumerate() {
                match answers.get(k) {
                    Some(Ok(())) => results[i] = Some(Ok(())),
                    Some(Err(e)) if e.is_retryable() && attempt < 2 => {
                        if attempt == 0 && again.is_empty() {
                            tracing::warn!(outbound = %self.name, error = %e, "push failed; trying again");
                        }
                        results[i] = Some(Err(RouterError::ShuttingDown));
                        again.push(i);
                    }
                    Some(Err(e @ RouterError::Refused { .. })) => {
                        tracing::debug!(outbound = %self.name, error = %e, "push refused");
                        results[i] = Some(Err(e.clone()));
                    }
                    Some(Err(e)) => {
                        tracing::warn!(outbound = %self.name, error = %e, "push failed");
                        results[i] = Some(Err(e.clone()));
                    }
                    None => {
                        results[i] = Some(Err(RouterError::Http {
                            target: self.component.target(),
                            message: "the outbound returned fewer results than tasks".into(),
                        }))
                    }
                }
            }
            todo = again;
            if todo.is_empty() {
                break;
            }
        }
        let mut ok = 0u64;
        let mut failed = 0u64;
        for ((done, _permit), result) in waiters.into_iter().zip(results) {
            let result = result.unwrap_or(Err(RouterError::ShuttingDown));
            match &result {
                Ok(()) => ok += 1,
                Err(RouterError::Refused { .. }) => {}
                Err(_) => failed += 1,
            }
            let _ = done.send(result);
        }
        self.pushed.fetch_add(ok, Ordering::Relaxed);
        self.push_errors.fetch_add(failed, Ordering::Relaxed);
        self.rate.lock().add(self.clock.now_ms(), ok);
        self.progress.send_modify(|v| *v += 1);
    }
}
