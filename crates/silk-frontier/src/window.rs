//! The scheduler's window (seed 002: "cache part of the seeds in memory, load a batch when
//! it is empty"): which pending requests are in memory. Pure bookkeeping, no I/O; the core
//! (`generic`) reads the spilled requests from storage when the window runs low.
//!
//! Requests are stored under increasing seqs (both backends assign them in enqueue order).
//! **Invariant:** every pending request stored under a seq below [`Window::loaded_below`]
//! is in the scheduler; the [`Window::spilled`] others, at or above it, are in the store
//! only. A new request goes into memory while nothing is spilled and the window has room,
//! else it is spilled (and the first one spilled sets `loaded_below`); a load reads the
//! next seqs from `loaded_below` on. Requests retried, released or expired were loaded, so
//! they go back into memory. Only loaded requests can be leased, so a spilled one is never
//! deleted and the seqs from `loaded_below` to the next seq are the spilled ones, but for
//! gaps (corrupt records removed at open).
//!
//! Consequences worth knowing: priority and aging order what is in memory, and the window
//! is loaded in enqueue order, so a high-priority request enqueued behind a full window
//! waits until the window reaches it; a host's requests are spread over the window as they
//! were enqueued.

use crate::layout::RecordHeader;
use crate::sched::{Entry, Scheduler};
use std::collections::BTreeMap;

/// Which pending requests are in memory (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// How many pending requests new ones may join in memory (`memory_window`).
    pub cap: u64,
    /// Every pending request stored under a seq below this is in the scheduler (meaningful
    /// while `spilled > 0`).
    pub loaded_below: u64,
    /// Pending requests in the store only.
    pub spilled: u64,
}

impl Window {
    /// A window of `cap` with nothing spilled.
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            cap: cap.max(1),
            loaded_below: 0,
            spilled: 0,
        }
    }

    /// Where a request newly stored under `seq` goes, the scheduler holding `pending`
    /// requests: `true` into memory, `false` spilled (counted here).
    pub(crate) fn admit(&mut self, seq: u64, pending: u64) -> bool {
        if self.spilled == 0 && pending < self.cap {
            return true;
        }
        if self.spilled == 0 {
            self.loaded_below = seq;
        }
        self.spilled += 1;
        false
    }
}

/// The scheduler entry of the request stored under `seq` with header `h`, and its
/// `not_before_ms`; `None` (a corrupt header) gives an entry that is leased as any other,
/// and the lease finds the record corrupt, drops it and counts it failed.
pub(crate) fn entry_of(
    sched: &mut Scheduler,
    seq: u64,
    h: Option<&RecordHeader<'_>>,
    now_ms: u64,
) -> (Entry, u64) {
    match h {
        Some(h) => (
            Entry {
                seq,
                host: sched.host_id(h.host),
                priority: h.priority,
                created_ms: h.created_ms,
            },
            h.not_before_ms,
        ),
        None => (
            Entry {
                seq,
                host: sched.host_id(""),
                priority: 0,
                created_ms: now_ms,
            },
            0,
        ),
    }
}

/// Builds the scheduler at open within the window: the backend offers every stored request
/// (in any order; the same seq twice is harmless), and the `cap` lowest seqs go into memory.
pub(crate) struct OpenWindow {
    cap: u64,
    /// seq -> (entry, not_before_ms).
    kept: BTreeMap<u64, (Entry, u64)>,
    max_seq: Option<u64>,
}

impl OpenWindow {
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            cap: cap.max(1),
            kept: BTreeMap::new(),
            max_seq: None,
        }
    }

    /// Offers the stored request `seq` with header `h`.
    pub(crate) fn offer(&mut self, sched: &mut Scheduler, seq: u64, h: &RecordHeader<'_>) {
        self.max_seq = self.max_seq.max(Some(seq));
        if self.kept.len() as u64 >= self.cap
            && self
                .kept
                .last_key_value()
                .is_some_and(|(last, _)| seq >= *last)
        {
            return;
        }
        // created_ms comes from the header: `now_ms` is not read.
        self.kept.insert(seq, entry_of(sched, seq, Some(h), 0));
        if self.kept.len() as u64 > self.cap {
            self.kept.pop_last();
        }
    }

    /// The highest seq offered.
    pub(crate) fn max_seq(&self) -> Option<u64> {
        self.max_seq
    }

    /// Puts the kept requests into `sched`; `stored` is how many the store holds (valid
    /// ones, each once).
    pub(crate) fn finish(self, sched: &mut Scheduler, stored: u64, now_ms: u64) -> Window {
        let loaded = self.kept.len() as u64;
        let next = self.kept.last_key_value().map_or(0, |(last, _)| last + 1);
        for (entry, not_before_ms) in self.kept.into_values() {
            sched.push(entry, not_before_ms, now_ms);
        }
        let spilled = stored.saturating_sub(loaded);
        Window {
            cap: self.cap,
            loaded_below: if spilled > 0 { next } else { 0 },
            spilled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::SchedConfig;

    fn sched() -> Scheduler {
        Scheduler::new(
            SchedConfig {
                per_host_concurrency: 1,
                per_host_delay_ms: 0,
                lease_timeout_ms: 1_000,
                aging_beta: 0.5,
            },
            0,
        )
    }

    fn header(host: &str) -> RecordHeader<'_> {
        RecordHeader {
            host,
            priority: 0,
            created_ms: 1,
            not_before_ms: 0,
            retries: 0,
            json_at: 0,
        }
    }

    #[test]
    fn open_keeps_the_lowest_seqs_whatever_the_order() {
        let mut s = sched();
        let mut w = OpenWindow::new(3);
        for seq in [9, 4, 7, 1, 4, 8, 2] {
            w.offer(&mut s, seq, &header("a.test"));
        }
        assert_eq!(w.max_seq(), Some(9));
        // 6 distinct stored: 1, 2, 4 in memory; 7, 8, 9 spilled.
        let window = w.finish(&mut s, 6, 0);
        assert_eq!(
            window,
            Window {
                cap: 3,
                loaded_below: 5,
                spilled: 3
            }
        );
        assert_eq!(s.pending(), 3);
        let all_in = OpenWindow::new(10);
        assert_eq!(all_in.finish(&mut s, 0, 0), Window::new(10));
    }

    #[test]
    fn admit_spills_once_full_and_keeps_spilling_while_anything_is() {
        let mut w = Window::new(2);
        assert!(w.admit(10, 1));
        assert!(!w.admit(11, 2));
        assert_eq!(w.loaded_below, 11);
        // Room again, but something is spilled: behind it.
        assert!(!w.admit(12, 0));
        assert_eq!(
            w,
            Window {
                cap: 2,
                loaded_below: 11,
                spilled: 2
            }
        );
    }
}
