//! Hit recording for the demo site: what was requested, when, and how many at once.
//!
//! Tests use it to check that a crawler fetched each page once, honoured robots.txt, kept
//! to its per-host concurrency and delay. Recording sits on the request path of a server
//! that must do well over 5,000 requests a second on one core, so it is one uncontended
//! mutex per host plus atomics; the timing log can be switched off for benchmarks. It must
//! not influence what is answered, and must never block on anything but its own mutexes.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// A snapshot of everything the demo site saw since it started (or since the last
/// `reset_stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemoStats {
    /// Requests per URL exactly as requested (`http://127.0.0.2:PORT/p/%35?utm_source=x`):
    /// origin of the listener that took it, then the raw path and query. Fragments are never
    /// sent, so never appear. Includes `/robots.txt`, 404s and redirects.
    pub hits: BTreeMap<String, u32>,
    /// Per host IP (`127.0.0.2`), the start time of every request in microseconds since the
    /// site started, ascending. Empty when `record_timings` is off.
    pub per_host_starts: BTreeMap<String, Vec<u64>>,
    /// Per host IP, the most requests that were in flight at the same time.
    pub per_host_max_in_flight: BTreeMap<String, u32>,
    /// All requests on all hosts.
    pub total_requests: u64,
}

impl DemoStats {
    /// Hits on `url` (exactly as requested), 0 if never requested.
    pub fn hits_on(&self, url: &str) -> u32 {
        self.hits.get(url).copied().unwrap_or(0)
    }

    /// Hits whose path (after the port) starts with `path_prefix`, e.g. `/private/`.
    pub fn hits_under(&self, path_prefix: &str) -> u32 {
        self.hits
            .iter()
            .filter(|(url, _)| path_of(url).starts_with(path_prefix))
            .map(|(_, n)| *n)
            .sum()
    }

    /// URLs (as requested) that were requested more than once, with their counts.
    pub fn repeated(&self) -> BTreeMap<String, u32> {
        self.hits
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(u, n)| (u.clone(), *n))
            .collect()
    }
}

/// The path-and-query part of `http://ip:port/path?query`.
fn path_of(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme
        .find('/')
        .map_or("/", |slash| &after_scheme[slash..])
}

#[derive(Debug, Default)]
pub(crate) struct HostRecorder {
    hits: Mutex<HashMap<Box<str>, u32>>,
    starts_us: Mutex<Vec<u64>>,
    in_flight: AtomicU32,
    max_in_flight: AtomicU32,
}

/// Decrements the in-flight count when the request ends, however it ends (a client that
/// hangs up during artificial latency drops the handler future).
pub(crate) struct InFlight<'a>(&'a HostRecorder);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub(crate) struct Recorder {
    epoch: Instant,
    record_timings: bool,
    origins: Vec<String>,
    hosts: Vec<HostRecorder>,
    total: AtomicU64,
    /// The smallest request count a `wait_for_requests` caller waits for (`u64::MAX`: none),
    /// so the request path pays for a wake-up only when someone waits.
    wake_at: AtomicU64,
    reached: tokio::sync::Notify,
}

impl Recorder {
    /// `origins[k-1]` is `http://127.0.0.k:PORT`.
    pub(crate) fn new(origins: Vec<String>, record_timings: bool) -> Self {
        Recorder {
            epoch: Instant::now(),
            record_timings,
            hosts: origins.iter().map(|_| HostRecorder::default()).collect(),
            origins,
            total: AtomicU64::new(0),
            wake_at: AtomicU64::new(u64::MAX),
            reached: tokio::sync::Notify::new(),
        }
    }

    /// Records the start of a request on host `host` (1-based); the returned guard counts it
    /// as in flight until dropped.
    pub(crate) fn start(&self, host: u32, path_and_query: &str) -> InFlight<'_> {
        let rec = &self.hosts[host as usize - 1];
        let now = rec.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        rec.max_in_flight.fetch_max(now, Ordering::Relaxed);
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        if total >= self.wake_at.load(Ordering::Relaxed) {
            self.reached.notify_waiters();
        }
        if self.record_timings {
            let us = self.epoch.elapsed().as_micros() as u64;
            rec.starts_us.lock().push(us);
        }
        {
            let mut hits = rec.hits.lock();
            match hits.get_mut(path_and_query) {
                Some(n) => *n += 1,
                None => {
                    hits.insert(path_and_query.into(), 1);
                }
            }
        }
        InFlight(rec)
    }

    /// Returns once at least `n` requests were received in all (since start or reset).
    pub(crate) async fn wait_for_requests(&self, n: u64) {
        loop {
            let reached = self.reached.notified();
            tokio::pin!(reached);
            reached.as_mut().enable();
            self.wake_at.fetch_min(n, Ordering::Relaxed);
            if self.total.load(Ordering::Relaxed) >= n {
                return;
            }
            reached.await;
        }
    }

    pub(crate) fn snapshot(&self) -> DemoStats {
        let mut stats = DemoStats {
            total_requests: self.total.load(Ordering::Relaxed),
            ..DemoStats::default()
        };
        for (origin, rec) in self.origins.iter().zip(&self.hosts) {
            let ip = origin
                .trim_start_matches("http://")
                .rsplit_once(':')
                .map_or(origin.as_str(), |(ip, _)| ip)
                .to_owned();
            for (pq, n) in rec.hits.lock().iter() {
                stats.hits.insert(format!("{origin}{pq}"), *n);
            }
            let mut starts = rec.starts_us.lock().clone();
            starts.sort_unstable();
            stats.per_host_starts.insert(ip.clone(), starts);
            stats
                .per_host_max_in_flight
                .insert(ip, rec.max_in_flight.load(Ordering::Relaxed));
        }
        stats
    }

    pub(crate) fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        for rec in &self.hosts {
            rec.hits.lock().clear();
            rec.starts_us.lock().clear();
            rec.max_in_flight
                .store(rec.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_hits_concurrency_and_starts() {
        let r = Recorder::new(
            vec!["http://127.0.0.1:9".into(), "http://127.0.0.2:9".into()],
            true,
        );
        {
            let _a = r.start(2, "/p/1");
            let _b = r.start(2, "/p/1?utm_source=x");
            let _c = r.start(2, "/p/1");
        }
        drop(r.start(1, "/private/3"));
        let s = r.snapshot();
        assert_eq!(s.hits_on("http://127.0.0.2:9/p/1"), 2);
        assert_eq!(s.hits_on("http://127.0.0.2:9/p/1?utm_source=x"), 1);
        assert_eq!(s.hits_under("/private/"), 1);
        assert_eq!(s.per_host_max_in_flight["127.0.0.2"], 3);
        assert_eq!(s.per_host_max_in_flight["127.0.0.1"], 1);
        assert_eq!(s.per_host_starts["127.0.0.2"].len(), 3);
        assert_eq!(s.total_requests, 4);
        assert_eq!(s.repeated().len(), 1);
        r.reset();
        assert_eq!(r.snapshot().total_requests, 0);
        assert!(r.snapshot().hits.is_empty());
    }
}
