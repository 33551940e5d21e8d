//! The in-memory scheduler: which pending request may be leased now, and which first.
//! Per-host politeness (concurrency, delay), priority with aging, leases and their expiry,
//! retry back-off. Pure and synchronous: it knows requests only by a compact [`Entry`]
//! (sequence number, host, priority, created) and never does I/O; a backend stores the
//! requests and rebuilds this from them at open.
//!
//! It must not decide anything about storage or dedup, and must not read the clock: every
//! method takes `now_ms`, so the caller holds one consistent time per call.
//!
//! # How the order is kept cheap
//!
//! - Per host, one FIFO per priority level: a `BTreeSet<(created_ms, seq)>`, so within a
//!   level the front is the oldest request, i.e. the one with the largest `alpha`.
//! - A global *ready index* holds only hosts that may be hit now (something queued, fewer
//!   than `per_host_concurrency` in flight, delay elapsed): per priority level, the set of
//!   ready hosts keyed by their candidate at that level. Hosts waiting for their delay sit in
//!   a timer heap; hosts at their concurrency limit come back on an ack or an expiry.
//! - Picking the next request walks the levels from the highest base priority down, taking
//!   each level's best host in `O(log hosts)`, and stops as soon as a level cannot beat the
//!   best found: aging at most doubles a positive priority (`alpha <= 1`), so level `p > 0`
//!   is bounded by `2p` and a level `p <= 0` by `p`. A pick is therefore
//!   `O(levels visited * log n)`, independent of the number of queued requests and hosts.
//! - `oldest` is the minimum of a multiset of the `created_ms` of pending requests.
//!
//! Aging is design §3 to the letter: with `alpha = (now - created) / (now - oldest)`, the
//! effective priority is `p * 2^alpha` when `alpha > beta`, else `p`. Consequences worth
//! knowing: priority 0 never ages; a *negative* priority gets more negative with age, so in a
//! negative level the best candidate is the oldest request still within `beta` (then the
//! newest) — the index keys negative levels by their newest request for that reason.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

/// Index of a host in the scheduler's host table.
pub(crate) type HostId = u32;

/// What the scheduler knows of a stored request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    /// The backend's key of the request (unique within the frontier).
    pub seq: u64,
    pub host: HostId,
    pub priority: i32,
    pub created_ms: u64,
}

/// The scheduling part of [`crate::FrontierConfig`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SchedConfig {
    pub per_host_concurrency: u32,
    pub per_host_delay_ms: u64,
    pub lease_timeout_ms: u64,
    pub aging_beta: f64,
}

impl From<&crate::FrontierConfig> for SchedConfig {
    fn from(c: &crate::FrontierConfig) -> Self {
        Self {
            per_host_concurrency: c.per_host_concurrency.max(1),
            per_host_delay_ms: c.per_host_delay_ms,
            lease_timeout_ms: c.lease_timeout_ms.max(1),
            aging_beta: c.aging_beta,
        }
    }
}

/// A lease the scheduler handed out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Picked {
    pub lease_id: u64,
    pub entry: Entry,
    pub deadline_ms: u64,
}

/// The state of a lease when an ack arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// In flight and within its deadline: the ack may be applied (then call `finish`).
    Live(Entry),
    /// Past its deadline: it has just been re-queued.
    Expired,
    /// Not in flight.
    Unknown,
}

struct Host {
    /// priority level -> FIFO of (created_ms, seq).
    levels: BTreeMap<i32, BTreeSet<(u64, u64)>>,
    queued: u64,
    in_flight: u32,
    last_start_ms: Option<u64>,
    /// Own delay (robots crawl-delay); the effective one is the max with the config's.
    delay_ms: u64,
    /// The keys this host has in the ready index, `(level, sort key)`; empty when not ready.
    keys: Vec<(i32, SortKey)>,
    /// The time of this host's live entry in the wake heap.
    wake_at: Option<u64>,
}

struct InFlight {
    entry: Entry,
    deadline_ms: u64,
}

/// The scheduler. See the module doc.
pub(crate) struct Scheduler {
    cfg: SchedConfig,
    hosts: Vec<Host>,
    host_ids: HashMap<Box<str>, HostId>,
    /// Ready hosts: level (highest first) -> (sort key, host).
    index: BTreeMap<Reverse<i32>, BTreeSet<(SortKey, HostId)>>,
    /// Hosts waiting for their delay: (time, host); stale entries are skipped.
    wakes: BinaryHeap<Reverse<(u64, HostId)>>,
    /// Requests in retry back-off: (not before, entry).
    delayed: BinaryHeap<Reverse<(u64, Entry)>>,
    leases: HashMap<u64, InFlight>,
    /// (deadline, lease id) of every lease in flight.
    deadlines: BTreeSet<(u64, u64)>,
    /// Multiset of created_ms of pending (queued + delayed) requests.
    ages: BTreeMap<u64, u32>,
    queued: u64,
    next_lease: u64,
    lease_expiries: u64,
}

impl Scheduler {
    /// An empty scheduler whose lease ids start at `first_lease_id`.
    pub fn new(cfg: SchedConfig, first_lease_id: u64) -> Self {
        Self {
            cfg,
            hosts: Vec::new(),
            host_ids: HashMap::new(),
            index: BTreeMap::new(),
            wakes: BinaryHeap::new(),
            delayed: BinaryHeap::new(),
            leases: HashMap::new(),
            deadlines: BTreeSet::new(),
            ages: BTreeMap::new(),
            queued: 0,
            next_lease: first_lease_id,
            lease_expiries: 0,
        }
    }

    /// The id of `host`, registering it if new.
    pub fn host_id(&mut self, host: &str) -> HostId {
        if let Some(&id) = self.host_ids.get(host) {
            return id;
        }
        let id = HostId::try_from(self.hosts.len()).unwrap_or(HostId::MAX);
        self.hosts.push(Host {
            levels: BTreeMap::new(),
            queued: 0,
            in_flight: 0,
            last_start_ms: None,
            delay_ms: 0,
            keys: Vec::new(),
            wake_at: None,
        });
        self.host_ids.insert(host.into(), id);
        id
    }

    /// Adds a pending request, leasable from `not_before_ms`.
    pub fn push(&mut self, entry: Entry, not_before_ms: u64, now_ms: u64) {
        *self.ages.entry(entry.created_ms).or_insert(0) += 1;
        if not_before_ms > now_ms {
            self.delayed.push(Reverse((not_before_ms, entry)));
        } else {
            self.enqueue_ready(entry, now_ms);
        }
    }

    fn enqueue_ready(&mut self, entry: Entry, now_ms: u64) {
        let host = &mut self.hosts[entry.host as usize];
        host.levels
            .entry(entry.priority)
            .or_default()
            .insert((entry.created_ms, entry.seq));
        host.queued += 1;
        self.queued += 1;
        self.refresh(entry.host, now_ms);
    }

    /// Sets a host's own delay between lease starts.
    pub fn set_host_delay(&mut self, host: HostId, delay_ms: u64, now_ms: u64) {
        self.hosts[host as usize].delay_ms = delay_ms;
        self.refresh(host, now_ms);
    }

    /// Processes everything due at `now_ms`: expired leases, ended back-offs, host delays.
    pub fn advance(&mut self, now_ms: u64) -> usize {
        let mut expired = 0;
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now_ms {
                break;
            }
            self.deadlines.pop_first();
            if self.requeue(id, now_ms) {
                self.lease_expiries += 1;
                expired += 1;
            }
        }
        while let Some(Reverse((not_before, _))) = self.delayed.peek() {
            if *not_before > now_ms {
                break;
            }
            if let Some(Reverse((_, entry))) = self.delayed.pop() {
                self.enqueue_ready(entry, now_ms);
            }
        }
        while let Some(&Reverse((at, host))) = self.wakes.peek() {
            if at > now_ms {
                break;
            }
            self.wakes.pop();
            let h = &mut self.hosts[host as usize];
            if h.wake_at == Some(at) {
                h.wake_at = None;
            }
            self.refresh(host, now_ms);
        }
        expired
    }

    fn expire_lease(&mut self, id: u64, now_ms: u64) {
        if self.requeue(id, now_ms) {
            self.lease_expiries += 1;
        }
    }

    /// Puts a lease's request back in its queue at once (the caller could not hand it out).
    pub fn release(&mut self, lease_id: u64, now_ms: u64) {
        self.requeue(lease_id, now_ms);
    }

    fn requeue(&mut self, id: u64, now_ms: u64) -> bool {
        let Some(inflight) = self.leases.remove(&id) else {
            return false;
        };
        self.deadlines.remove(&(inflight.deadline_ms, id));
        let entry = inflight.entry;
        let host = &mut self.hosts[entry.host as usize];
        host.in_flight = host.in_flight.saturating_sub(1);
        *self.ages.entry(entry.created_ms).or_insert(0) += 1;
        self.enqueue_ready(entry, now_ms);
        true
    }

    /// Leases up to `max` requests at `now_ms` (after `advance`).
    pub fn lease(&mut self, max: usize, now_ms: u64) -> Vec<Picked> {
        self.advance(now_ms);
        let mut out = Vec::with_capacity(max.min(self.queued as usize));
        while out.len() < max {
            let Some((host, level, key)) = self.pick(now_ms) else {
                break;
            };
            out.push(self.take(host, level, key, now_ms));
        }
        out
    }

    fn effective(&self, priority: i32, created_ms: u64, now_ms: u64, oldest_ms: u64) -> f64 {
        let p = f64::from(priority);
        let span = now_ms.saturating_sub(oldest_ms);
        if span == 0 {
            return p;
        }
        let alpha = (now_ms.saturating_sub(created_ms) as f64 / span as f64).min(1.0);
        if alpha > self.cfg.aging_beta {
            p * alpha.exp2()
        } else {
            p
        }
    }

    /// The best request of one host's level: the oldest for `p >= 0`; for `p < 0` the oldest
    /// that has not aged past `beta`, else the newest (see the module doc).
    fn level_candidate(
        &self,
        set: &BTreeSet<(u64, u64)>,
        priority: i32,
        now_ms: u64,
        oldest_ms: u64,
    ) -> Option<(u64, u64)> {
        if priority >= 0 {
            return set.first().copied();
        }
        let span = now_ms.saturating_sub(oldest_ms) as f64;
        let threshold = now_ms.saturating_sub((self.cfg.aging_beta * span) as u64);
        set.range((threshold, 0)..)
            .next()
            .or_else(|| set.last())
            .copied()
    }

    /// The next request to lease: (host, level, (created, seq)).
    fn pick(&self, now_ms: u64) -> Option<(HostId, i32, (u64, u64))> {
        let oldest = *self.ages.keys().next()?;
        let mut best: Option<(f64, HostId, i32, (u64, u64))> = None;
        for (&Reverse(level), hosts) in &self.index {
            let bound = if level > 0 {
                2.0 * f64::from(level)
            } else {
                f64::from(level)
            };
            if best.is_some_and(|b| bound <= b.0) {
                break;
            }
            let Some(&(_, host)) = hosts.first() else {
                continue;
            };
            let Some(set) = self.hosts[host as usize].levels.get(&level) else {
                continue;
            };
            let Some(key) = self.level_candidate(set, level, now_ms, oldest) else {
                continue;
            };
            let eff = self.effective(level, key.0, now_ms, oldest);
            if best.is_none_or(|b| eff > b.0) {
                best = Some((eff, host, level, key));
            }
        }
        best.map(|(_, h, l, k)| (h, l, k))
    }

    fn take(&mut self, host_id: HostId, level: i32, key: (u64, u64), now_ms: u64) -> Picked {
        let host = &mut self.hosts[host_id as usize];
        if let Some(set) = host.levels.get_mut(&level) {
            set.remove(&key);
            if set.is_empty() {
                host.levels.remove(&level);
            }
        }
        host.queued -= 1;
        host.in_flight += 1;
        host.last_start_ms = Some(now_ms);
        self.queued -= 1;
        remove_age(&mut self.ages, key.0);
        let entry = Entry {
            seq: key.1,
            host: host_id,
            priority: level,
            created_ms: key.0,
        };
        let lease_id = self.next_lease;
        self.next_lease += 1;
        let deadline_ms = now_ms.saturating_add(self.cfg.lease_timeout_ms);
        self.leases
            .insert(lease_id, InFlight { entry, deadline_ms });
        self.deadlines.insert((deadline_ms, lease_id));
        self.refresh(host_id, now_ms);
        Picked {
            lease_id,
            entry,
            deadline_ms,
        }
    }

    /// Where a lease stands; an expired one is re-queued here.
    pub fn check(&mut self, lease_id: u64, now_ms: u64) -> LeaseState {
        match self.leases.get(&lease_id) {
            None => LeaseState::Unknown,
            Some(l) if now_ms >= l.deadline_ms => {
                self.expire_lease(lease_id, now_ms);
                LeaseState::Expired
            }
            Some(l) => LeaseState::Live(l.entry),
        }
    }

    /// Ends a live lease (after its ack was recorded): frees its host slot. A `Retry` then
    /// calls [`Scheduler::push`] with the back-off.
    pub fn finish(&mut self, lease_id: u64, now_ms: u64) -> Option<Entry> {
        let inflight = self.leases.remove(&lease_id)?;
        self.deadlines.remove(&(inflight.deadline_ms, lease_id));
        let host = &mut self.hosts[inflight.entry.host as usize];
        host.in_flight = host.in_flight.saturating_sub(1);
        self.refresh(inflight.entry.host, now_ms);
        Some(inflight.entry)
    }

    /// When a lease could next succeed (see [`crate::FrontierStore::next_ready_ms`]).
    pub fn next_ready_ms(&mut self, now_ms: u64) -> Option<u64> {
        self.advance(now_ms);
        if !self.index.is_empty() {
            return Some(now_ms);
        }
        while let Some(&Reverse((at, host))) = self.wakes.peek() {
            if self.hosts[host as usize].wake_at == Some(at) {
                break;
            }
            self.wakes.pop();
        }
        let wake = self.wakes.peek().map(|Reverse((at, _))| *at);
        let backoff = self.delayed.peek().map(|Reverse((at, _))| *at);
        let expiry = self.deadlines.first().map(|(at, _)| *at);
        [wake, backoff, expiry].into_iter().flatten().min()
    }

    /// Recomputes whether a host is ready, and its keys in the ready index.
    fn refresh(&mut self, host_id: HostId, now_ms: u64) {
        let cfg = self.cfg;
        let host = &mut self.hosts[host_id as usize];
        let delay = cfg.per_host_delay_ms.max(host.delay_ms);
        let next_start = host.last_start_ms.map_or(0, |s| s.saturating_add(delay));
        let can = host.queued > 0 && host.in_flight < cfg.per_host_concurrency;
        let ready = can && now_ms >= next_start;

        let unchanged = if ready {
            host.keys.len() == host.levels.len()
                && host
                    .levels
                    .iter()
                    .zip(&host.keys)
                    .all(|((&p, set), &k)| (p, sort_key(p, set)) == k)
        } else {
            host.keys.is_empty()
        };
        if !unchanged {
            for (p, k) in host.keys.drain(..) {
                if let Some(set) = self.index.get_mut(&Reverse(p)) {
                    set.remove(&(k, host_id));
                    if set.is_empty() {
                        self.index.remove(&Reverse(p));
                    }
                }
            }
            if ready {
                for (&p, set) in &host.levels {
                    let k = sort_key(p, set);
                    host.keys.push((p, k));
                    self.index
                        .entry(Reverse(p))
                        .or_default()
                        .insert((k, host_id));
                }
            }
        }
        if can && !ready && host.wake_at != Some(next_start) {
            host.wake_at = Some(next_start);
            self.wakes.push(Reverse((next_start, host_id)));
        }
    }

    /// Forgets a live lease without re-queueing it (its record turned out to be unreadable).
    pub fn discard(&mut self, lease_id: u64, now_ms: u64) {
        self.finish(lease_id, now_ms);
    }

    /// Requests waiting to be leased (queued or in back-off).
    pub fn pending(&self) -> u64 {
        self.queued + self.delayed.len() as u64
    }
    /// Requests in retry back-off.
    pub fn delayed(&self) -> u64 {
        self.delayed.len() as u64
    }
    /// Leases in flight.
    pub fn in_flight(&self) -> u64 {
        self.leases.len() as u64
    }
    /// Known hosts.
    pub fn hosts(&self) -> u64 {
        self.hosts.len() as u64
    }
    /// Leases expired since the scheduler was created.
    pub fn lease_expiries(&self) -> u64 {
        self.lease_expiries
    }
}

/// A host level's key in the ready index.
type SortKey = (u64, u64);

/// The key of a host's level: its front `(created, seq)` for `p >= 0` (so the index is a
/// global FIFO), its back, reversed, for `p < 0` (newest first, see the module doc).
fn sort_key(priority: i32, set: &BTreeSet<(u64, u64)>) -> SortKey {
    if priority >= 0 {
        set.first().copied().unwrap_or_default()
    } else {
        let (c, s) = set.last().copied().unwrap_or_default();
        (u64::MAX - c, u64::MAX - s)
    }
}

fn remove_age(ages: &mut BTreeMap<u64, u32>, created_ms: u64) {
    if let Some(n) = ages.get_mut(&created_ms) {
        *n -= 1;
        if *n == 0 {
            ages.remove(&created_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(conc: u32, delay: u64) -> SchedConfig {
        SchedConfig {
            per_host_concurrency: conc,
            per_host_delay_ms: delay,
            lease_timeout_ms: 1_000,
            aging_beta: 0.5,
        }
    }

    fn push(s: &mut Scheduler, seq: u64, host: &str, priority: i32, created: u64, now: u64) {
        let host = s.host_id(host);
        s.push(
            Entry {
                seq,
                host,
                priority,
                created_ms: created,
            },
            0,
            now,
        );
    }

    fn seqs(p: &[Picked]) -> Vec<u64> {
        p.iter().map(|p| p.entry.seq).collect()
    }

    #[test]
    fn highest_priority_first_fifo_within_level() {
        let mut s = Scheduler::new(cfg(10, 0), 1);
        push(&mut s, 1, "a", 1, 100, 100);
        push(&mut s, 2, "a", 5, 100, 100);
        push(&mut s, 3, "b", 5, 100, 100);
        push(&mut s, 4, "b", 1, 100, 100);
        push(&mut s, 5, "a", 1, 100, 100);
        assert_eq!(seqs(&s.lease(10, 100)), vec![2, 3, 1, 4, 5]);
    }

    #[test]
    fn aging_can_flip_the_order() {
        // oldest created at 0; now 1000. A p=3 request created at 0 has alpha 1: eff 6,
        // beating a fresh p=5.
        let mut s = Scheduler::new(cfg(10, 0), 1);
        push(&mut s, 1, "a", 3, 0, 0);
        push(&mut s, 2, "b", 5, 1_000, 1_000);
        assert_eq!(seqs(&s.lease(1, 1_000)), vec![1]);
        // Not when the gap is too large: p=2 aged to 4 < 5.
        let mut s = Scheduler::new(cfg(10, 0), 1);
        push(&mut s, 1, "a", 2, 0, 0);
        push(&mut s, 2, "b", 5, 1_000, 1_000);
        assert_eq!(seqs(&s.lease(1, 1_000)), vec![2]);
    }

    #[test]
    fn negative_levels_prefer_unaged() {
        let mut s = Scheduler::new(cfg(10, 0), 1);
        push(&mut s, 1, "a", -1, 0, 0);
        push(&mut s, 2, "a", -1, 900, 900);
        push(&mut s, 3, "b", -2, 1_000, 1_000);
        // seq 1: alpha 1 -> -2 (tie with seq 3, lower base loses ... seq 3 is -2 base), seq 2:
        // alpha 0.1 -> -1.
        assert_eq!(seqs(&s.lease(1, 1_000)), vec![2]);
    }

    #[test]
    fn concurrency_and_delay_per_host() {
        let mut s = Scheduler::new(cfg(2, 100), 1);
        for i in 0..5 {
            push(&mut s, i, "a", 0, 0, 0);
        }
        assert_eq!(s.lease(10, 0).len(), 1, "delay: one start per 100 ms");
        assert_eq!(s.next_ready_ms(50), Some(100));
        assert_eq!(s.lease(10, 99).len(), 0);
        assert_eq!(s.lease(10, 100).len(), 1);
        assert_eq!(s.lease(10, 300).len(), 0, "concurrency 2 reached");
        assert_eq!(s.in_flight(), 2);
    }

    #[test]
    fn expiry_requeues_and_stale_ack_is_reported() {
        let mut s = Scheduler::new(cfg(1, 0), 1);
        push(&mut s, 7, "a", 0, 0, 0);
        let l = s.lease(1, 0)[0];
        assert_eq!(s.next_ready_ms(10), Some(1_000));
        assert_eq!(s.check(l.lease_id, 1_000), LeaseState::Expired);
        assert_eq!(s.check(l.lease_id, 1_000), LeaseState::Unknown);
        let again = s.lease(1, 1_000);
        assert_eq!(again[0].entry.seq, 7);
        assert_ne!(again[0].lease_id, l.lease_id);
        assert!(matches!(
            s.check(again[0].lease_id, 1_001),
            LeaseState::Live(_)
        ));
        assert!(s.finish(again[0].lease_id, 1_001).is_some());
        assert_eq!(s.next_ready_ms(1_001), None);
    }

    #[test]
    fn backoff_delays_and_counts_as_pending() {
        let mut s = Scheduler::new(cfg(1, 0), 1);
        let h = s.host_id("a");
        s.push(
            Entry {
                seq: 1,
                host: h,
                priority: 0,
                created_ms: 0,
            },
            500,
            0,
        );
        assert_eq!(s.pending(), 1);
        assert_eq!(s.delayed(), 1);
        assert!(s.lease(1, 499).is_empty());
        assert_eq!(s.next_ready_ms(499), Some(500));
        assert_eq!(s.lease(1, 500).len(), 1);
    }
}
