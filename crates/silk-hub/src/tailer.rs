//! One tailer for a run's append-only logs (its items, its outcomes): reads what was written
//! after a stored offset, hands it to a consumer, stores the new offset, waits for the writer,
//! backs off while the consumer fails, and finishes once the run is over and everything was
//! handed on. The item sinks (SQL, webhook) and the router's `silk.RunResultsInbound` are its
//! consumers; each says only how to read a page, how to deliver it and where to keep its offset
//! ([`Tail`]).
//!
//! **Guarantees**, whatever the consumer: delivery is at least once and in order (the offset
//! moves only after a page is delivered in full, and is stored then); a page that could not be
//! delivered is offered again after a back-off, with only what was not taken yet; whether the
//! writer is over is read *before* the page, so lines written before the end are in what is read
//! next, and the tail never finishes with lines left. This module knows no hub: the writer's
//! wake-ups and the stop signal come in as values.

use std::future::Future;
use std::time::Duration;

/// A page read from a log: its entries and the offset after them (which may be past the
/// entries when lines were skipped as unreadable, or filtered out).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Page<T> {
    pub entries: Vec<T>,
    pub next: u64,
}

/// The writer of a log, as seen before a read.
pub(crate) enum Writer<W> {
    /// Still writing: `W` is woken on each write ([`Tail::written`]).
    Active(W),
    /// Done: what is read now is all there will be.
    Over,
}

/// How long to wait between delivery attempts: `initial`, doubling up to `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

/// How a tail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The writer is over and everything was delivered ([`Tail::finished`] was called).
    Finished,
    /// The stop signal came first; the stored offset says where to go on.
    Stopped,
}

/// What a consumer of a log provides.
pub(crate) trait Tail: Send {
    /// An entry of the log, as delivered.
    type Entry: Send;
    /// What [`Tail::written`] waits on (the run, say).
    type Waker: Send + Sync;
    /// The writer's state; read before each page.
    fn writer(&self) -> Writer<Self::Waker>;
    /// Resolves at the writer's next write (a tail also looks again every second, in case a
    /// wake-up came between the read and the wait).
    fn written(waker: &Self::Waker) -> impl Future<Output = ()> + Send;
    /// Reads at most a page after `offset`.
    fn read(
        &mut self,
        offset: u64,
    ) -> impl Future<Output = Result<Page<Self::Entry>, String>> + Send;
    /// Delivers `todo`, removing what was taken; `Ok` when all was. On `Err`, what is left in
    /// `todo` is offered again after the back-off (an all-or-nothing consumer leaves it as it
    /// was).
    fn deliver(
        &mut self,
        todo: &mut Vec<Self::Entry>,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// The page up to `next` is delivered (`delivered` entries): store the offset.
    fn advanced(&mut self, next: u64, delivered: u64);
    /// A page could not be read (logged; read again a second later).
    fn read_failed(&mut self, error: &str);
    /// A delivery failed; `first` when the previous one had not (to log a change once).
    fn failing(&mut self, error: &str, first: bool);
    /// A delivery succeeded after failures.
    fn recovered(&mut self);
    /// The writer is over and everything was delivered.
    fn finished(&mut self);
}

/// Tails `log` from `offset` until it is finished or `stop` resolves.
pub(crate) async fn tail<T: Tail>(
    log: &mut T,
    mut offset: u64,
    backoff: Backoff,
    stop: impl Future<Output = ()> + Send,
) -> Ended {
    let mut stop = std::pin::pin!(stop);
    let mut failing = false;
    let mut wait = backoff.initial;
    loop {
        if futures::poll!(stop.as_mut()).is_ready() {
            return Ended::Stopped;
        }
        // Before the read: what was written before the end is then in this page.
        let writer = log.writer();
        let page = match log.read(offset).await {
            Ok(page) => page,
            Err(e) => {
                log.read_failed(&e);
                tokio::select! {
                    () = stop.as_mut() => return Ended::Stopped,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        };
        if page.entries.is_empty() {
            if page.next > offset {
                // Nothing to deliver in what was read (unreadable or filtered out): step over.
                offset = page.next;
                log.advanced(offset, 0);
                continue;
            }
            match writer {
                Writer::Over => {
                    log.finished();
                    return Ended::Finished;
                }
                Writer::Active(waker) => {
                    tokio::select! {
                        () = stop.as_mut() => return Ended::Stopped,
                        () = T::written(&waker) => {}
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    continue;
                }
            }
        }
        let delivered = page.entries.len() as u64;
        let mut todo = page.entries;
        loop {
            match log.deliver(&mut todo).await {
                Ok(()) => break,
                Err(e) => {
                    log.failing(&e, !failing);
                    failing = true;
                    if todo.is_empty() {
                        break; // all taken after all
                    }
                    tokio::select! {
                        () = stop.as_mut() => return Ended::Stopped,
                        () = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(backoff.max);
                }
            }
        }
        if failing {
            failing = false;
            log.recovered();
        }
        wait = backoff.initial;
        offset = page.next;
        log.advanced(offset, delivered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Notify;

    /// A log in memory: entry `i` is at offset `i + 1`; deliveries fail while `fail` > 0
    /// (taking one entry each time, to exercise partial delivery).
    struct Mem {
        lines: Arc<parking_lot::Mutex<Vec<u32>>>,
        over: Arc<std::sync::atomic::AtomicBool>,
        wake: Arc<Notify>,
        page: usize,
        fail: u32,
        got: Vec<u32>,
        events: Vec<String>,
    }

    impl Tail for Mem {
        type Entry = u32;
        type Waker = Arc<Notify>;
        fn writer(&self) -> Writer<Arc<Notify>> {
            if self.over.load(std::sync::atomic::Ordering::SeqCst) {
                Writer::Over
            } else {
                Writer::Active(self.wake.clone())
            }
        }
        async fn written(waker: &Arc<Notify>) {
            waker.notified().await;
        }
        async fn read(&mut self, offset: u64) -> Result<Page<u32>, String> {
            let lines = self.lines.lock();
            let from = offset as usize;
            let to = (from + self.page).min(lines.len());
            Ok(Page {
                entries: lines[from..to]
                    .iter()
                    .copied()
                    .filter(|v| *v != 0)
                    .collect(),
                next: to as u64,
            })
        }
        async fn deliver(&mut self, todo: &mut Vec<u32>) -> Result<(), String> {
            if self.fail > 0 {
                self.fail -= 1;
                self.got.push(todo.remove(0));
                return Err("down".into());
            }
            self.got.append(todo);
            Ok(())
        }
        fn advanced(&mut self, next: u64, delivered: u64) {
            self.events.push(format!("at {next} +{delivered}"));
        }
        fn read_failed(&mut self, error: &str) {
            self.events.push(format!("read failed: {error}"));
        }
        fn failing(&mut self, error: &str, first: bool) {
            self.events.push(format!("failing: {error} first={first}"));
        }
        fn recovered(&mut self) {
            self.events.push("recovered".into());
        }
        fn finished(&mut self) {
            self.events.push("finished".into());
        }
    }

    fn mem(lines: Vec<u32>, page: usize, fail: u32) -> Mem {
        Mem {
            lines: Arc::new(parking_lot::Mutex::new(lines)),
            over: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            wake: Arc::new(Notify::new()),
            page,
            fail,
            got: Vec::new(),
            events: Vec::new(),
        }
    }

    const BACKOFF: Backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(250),
    };

    #[tokio::test(start_paused = true)]
    async fn delivers_in_order_steps_over_skipped_lines_and_finishes_when_over() {
        // 0 stands for a line the reader skips (unreadable or filtered out).
        let mut log = mem(vec![1, 2, 0, 0, 0, 3], 2, 0);
        log.over.store(true, std::sync::atomic::Ordering::SeqCst);
        let ended = tail(&mut log, 0, BACKOFF, std::future::pending()).await;
        assert_eq!(ended, Ended::Finished);
        assert_eq!(log.got, [1, 2, 3]);
        assert_eq!(
            log.events,
            ["at 2 +2", "at 4 +0", "at 6 +1", "finished"],
            "{:?}",
            log.events
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_consumer_gets_only_what_is_left_after_a_growing_backoff() {
        let mut log = mem(vec![1, 2, 3, 4], 4, 3);
        log.over.store(true, std::sync::atomic::Ordering::SeqCst);
        let start = tokio::time::Instant::now();
        let ended = tail(&mut log, 0, BACKOFF, std::future::pending()).await;
        assert_eq!(ended, Ended::Finished);
        // Each entry once, in order: partial deliveries are not repeated.
        assert_eq!(log.got, [1, 2, 3, 4]);
        // Three failures: waits of 100, 200 and 250 (capped) ms.
        assert_eq!(start.elapsed(), Duration::from_millis(550));
        assert_eq!(
            log.events,
            [
                "failing: down first=true",
                "failing: down first=false",
                "failing: down first=false",
                "recovered",
                "at 4 +4",
                "finished"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_writer_and_stops_on_the_signal() {
        let mut log = mem(vec![1], 10, 0);
        let lines = log.lines.clone();
        let over = log.over.clone();
        let wake = log.wake.clone();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            lines.lock().push(2);
            wake.notify_waiters();
            tokio::time::sleep(Duration::from_millis(300)).await;
            over.store(true, std::sync::atomic::Ordering::SeqCst);
            wake.notify_waiters();
        });
        let ended = tail(&mut log, 0, BACKOFF, std::future::pending()).await;
        writer.await.unwrap();
        assert_eq!(ended, Ended::Finished);
        assert_eq!(log.got, [1, 2]);

        // A tail whose writer never ends stops on the signal, where it was.
        let mut log = mem(vec![1], 10, 0);
        let stop = tokio::time::sleep(Duration::from_secs(5));
        let ended = tail(&mut log, 0, BACKOFF, stop).await;
        assert_eq!(ended, Ended::Stopped);
        assert_eq!(log.events, ["at 1 +1"]);
    }
}
