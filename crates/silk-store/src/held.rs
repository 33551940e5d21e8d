//! Store calls count as work for a paused tokio clock.
//!
//! sqlx runs SQLite on a thread of its own, which tokio does not see: on a runtime whose clock
//! is paused (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`), a task waiting for
//! a query looks idle, and the clock jumps to the next timer — a pool's acquire timeout, a
//! hub's tick — while the query runs. Tokio does not auto-advance a current-thread runtime's
//! clock while a blocking task runs, so every store call holds one (a thread parked until the
//! call ends) on such a runtime. Virtual time then moves only when the store is idle too, and
//! tests of time-driven code over a real store see exact timings. On a multi-thread runtime
//! (every server's), nothing is held: the clock cannot be paused there.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Held for the length of one store call; dropping it lets the clock move again.
pub(crate) struct ClockHold {
    /// Dropped with the hold: the blocking task then ends.
    _release: Option<std::sync::mpsc::Sender<()>>,
}

/// Holds a current-thread runtime's clock still (see the module's documentation) until the
/// returned value is dropped.
pub(crate) fn hold_clock() -> ClockHold {
    let Ok(handle) = Handle::try_current() else {
        return ClockHold { _release: None };
    };
    if handle.runtime_flavor() != RuntimeFlavor::CurrentThread {
        return ClockHold { _release: None };
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Ends when `tx` is dropped: `recv` then fails.
    drop(handle.spawn_blocking(move || {
        let _ = rx.recv();
    }));
    ClockHold { _release: Some(tx) }
}
