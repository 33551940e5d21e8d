//! The scale hook of agent pools (seed 003 F2/F23/F8: a tenant's hosts are rebuilt when too
//! few are alive). A pool declared in the hub's `--pools` file needs `agents` live, open
//! agents labelled `pool=NAME`; while it has fewer, the hub that holds the store lease
//! `scale:{pool}` (taken by the first hub that sees the deficit, kept while it lives)
//! runs the pool's scale command — an admin's, from the hub's own config:
//! nothing a token holder sends — with the deficit in its environment, then checks again
//! after a back-off that doubles while the deficit stays (up to
//! [`MAX_SCALE_BACKOFF_MS`](crate::config::MAX_SCALE_BACKOFF_MS)). The deficit is
//! reported whether or not there is a command: `GET /api/v1/pools`, the web UI's Agents
//! page and `/metrics`.
//!
//! Nothing is judged before the agents had time to register after the hub started (the
//! failure detector's `dead_after`): a restarted hub does not scale up a pool whose agents
//! are alive and about to say so. The command runs without a shell, in its own process
//! group, with stdin closed and only `PATH`, `HOME`, `LANG`, the pool's `scale_env` and
//! `SILK_POOL`, `SILK_POOL_AGENTS`, `SILK_POOL_ALIVE`, `SILK_POOL_DEFICIT`; it is killed
//! after `scale_timeout_ms`. Logs name the pool and the program, never the arguments.

use crate::config::{MAX_SCALE_BACKOFF_MS, PoolDecl};
use crate::state::HubCore;
use silk_api::agents::{PoolView, ScaleView};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The store lease of a pool's scale hook.
fn lease_name(pool: &str) -> String {
    format!("scale:{pool}")
}

/// The wait after the `attempts`-th run of a command whose base back-off is `base_ms`.
pub(crate) fn backoff_ms(base_ms: u64, attempts: u32) -> u64 {
    let doublings = attempts.saturating_sub(1).min(30);
    base_ms
        .saturating_mul(1u64 << doublings)
        .min(MAX_SCALE_BACKOFF_MS.max(base_ms))
}

/// What the hook of one pool does at a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing (enough agents, no command, or it runs).
    Nothing,
    /// Wait until then.
    WaitUntil(u64),
    /// Run the command now, telling it this deficit.
    Run(u32),
}

/// The decision of one pass for a pool (pure): `alive` agents now, its `state`, the time,
/// and when the hub may first judge (`judge_from_ms`).
pub(crate) fn decide(
    decl: &PoolDecl,
    state: &ScaleView,
    alive: u32,
    now_ms: u64,
    judge_from_ms: u64,
) -> Step {
    let deficit = decl.agents.saturating_sub(alive);
    if deficit == 0 || decl.scale_command.is_empty() || state.running {
        return Step::Nothing;
    }
    let at = state.next_ms.unwrap_or(0).max(judge_from_ms);
    if now_ms < at {
        Step::WaitUntil(at)
    } else {
        Step::Run(deficit)
    }
}

/// Watches the declared pools until the hub stops (nothing to do without any).
pub(crate) async fn scale_loop(shared: Arc<HubCore>) {
    if shared.config.pools.is_empty() {
        return;
    }
    let mut stop = shared.stop.subscribe();
    let judge_from_ms = shared
        .clock
        .now_ms()
        .saturating_add(shared.config.phi.dead_after_ms);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Ran)>();
    loop {
        let now = shared.clock.now_ms();
        let mut wake_ms = now.saturating_add(shared.config.tick_ms.max(100));
        for (name, decl) in &shared.config.pools {
            let alive = u32::try_from(
                shared
                    .link
                    .agents_for_run(&[], std::slice::from_ref(name))
                    .len(),
            )
            .unwrap_or(u32::MAX);
            let deficit = decl.agents.saturating_sub(alive);
            let state = {
                let mut views = shared.pools.lock();
                let view = views.entry(name.clone()).or_insert_with(|| PoolView {
                    name: name.clone(),
                    agents: decl.agents,
                    alive,
                    deficit,
                    scale: ScaleView {
                        command: !decl.scale_command.is_empty(),
                        ..ScaleView::default()
                    },
                });
                if deficit == 0 && view.deficit > 0 {
                    tracing::info!(pool = %name, alive, "pool: enough agents again");
                }
                view.alive = alive;
                view.deficit = deficit;
                if deficit == 0 {
                    // The next deficit runs the command at once, from the base back-off.
                    view.scale.attempts = 0;
                    view.scale.next_ms = None;
                }
                view.scale.clone()
            };
            match decide(decl, &state, alive, now, judge_from_ms) {
                Step::Nothing => {}
                Step::WaitUntil(at) => wake_ms = wake_ms.min(at),
                Step::Run(deficit) => {
                    match shared
                        .store
                        .acquire_lease(
                            &lease_name(name),
                            shared.hub_id.as_str(),
                            shared.config.ownership_ttl_ms.max(decl.scale_timeout_ms),
                        )
                        .await
                    {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => {
                            tracing::warn!(pool = %name, error = %e, "pool: scale lease not taken; trying again");
                            continue;
                        }
                    }
                    if let Some(view) = shared.pools.lock().get_mut(name) {
                        view.scale.running = true;
                        view.scale.next_ms = None;
                    }
                    tracing::warn!(pool = %name, wanted = decl.agents, alive, deficit, program = %decl.scale_command.first().map_or("", String::as_str), "pool: too few agents, running its scale command");
                    let (name, decl, done) = (name.clone(), decl.clone(), done_tx.clone());
                    tokio::spawn(async move {
                        let ran = run_command(&name, &decl, alive, deficit).await;
                        let _ = done.send((name, ran));
                    });
                }
            }
        }
        let wait = Duration::from_millis(wake_ms.saturating_sub(shared.clock.now_ms()).max(1));
        tokio::select! {
            _ = stop.changed() => return,
            Some((name, ran)) = done_rx.recv() => finished(&shared, &name, ran).await,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// How a run of a scale command went.
struct Ran {
    deficit: u32,
    result: Result<String, String>,
}

/// Records a run that ended and when to check again. The lease stays with this hub (the
/// ownership loop renews it with the run leases), so the back-off holds across hubs: another
/// hub runs the command only once this one is gone.
async fn finished(shared: &HubCore, name: &str, ran: Ran) {
    let now = shared.clock.now_ms();
    let Some(decl) = shared.config.pools.get(name) else {
        return;
    };
    let (ok, mut message) = match ran.result {
        Ok(out) => (true, out),
        Err(e) => (false, e),
    };
    silk_core::text::truncate(&mut message, 500);
    match ok {
        true => tracing::info!(pool = %name, deficit = ran.deficit, "pool: scale command done"),
        false => {
            tracing::warn!(pool = %name, deficit = ran.deficit, error = %message, "pool: scale command failed")
        }
    }
    if let Some(view) = shared.pools.lock().get_mut(name) {
        let s = &mut view.scale;
        s.running = false;
        s.attempts = s.attempts.saturating_add(1);
        s.last_ms = Some(now);
        s.last_ok = Some(ok);
        s.last_message = Some(message);
        s.last_deficit = Some(ran.deficit);
        s.next_ms = Some(now.saturating_add(backoff_ms(decl.scale_backoff_ms, s.attempts)));
    }
}

/// Gives back the scale leases this hub holds (it stops): another hub takes the pools on.
pub(crate) async fn release_leases(shared: &HubCore) {
    for name in shared.config.pools.keys() {
        if let Err(e) = shared
            .store
            .release_lease(&lease_name(name), shared.hub_id.as_str())
            .await
        {
            tracing::warn!(pool = %name, error = %e, "pool: scale lease not given back (it expires)");
        }
    }
}

/// Runs pool `name`'s command with the deficit in its environment, at most its timeout.
async fn run_command(name: &str, decl: &PoolDecl, alive: u32, deficit: u32) -> Ran {
    let mut env: BTreeMap<String, String> = ["PATH", "HOME", "LANG"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_owned(), v)))
        .collect();
    env.extend(decl.scale_env.clone());
    env.insert("SILK_POOL".into(), name.to_owned());
    env.insert("SILK_POOL_AGENTS".into(), decl.agents.to_string());
    env.insert("SILK_POOL_ALIVE".into(), alive.to_string());
    env.insert("SILK_POOL_DEFICIT".into(), deficit.to_string());
    let Some((program, args)) = decl.scale_command.split_first() else {
        return Ran {
            deficit,
            result: Err(format!("pool {name} has no scale command")),
        };
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    let what = format!("the scale command of pool {name} ({program})");
    let result = match tokio::time::timeout(
        Duration::from_millis(decl.scale_timeout_ms),
        silk_projects::build::capture(cmd, &env, &what),
    )
    .await
    {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "{what} did not end within {} ms and was killed",
            decl.scale_timeout_ms
        )),
    };
    Ran { deficit, result }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(agents: u32, command: &[&str]) -> PoolDecl {
        PoolDecl {
            agents,
            scale_command: command.iter().map(|s| (*s).to_owned()).collect(),
            scale_timeout_ms: 1_000,
            scale_backoff_ms: 30_000,
            scale_env: BTreeMap::new(),
        }
    }

    #[test]
    fn the_command_runs_when_too_few_are_alive_after_the_grace_and_the_back_off() {
        let d = decl(3, &["scale.sh"]);
        let fresh = ScaleView {
            command: true,
            ..ScaleView::default()
        };
        // Enough agents, or no command: nothing.
        assert_eq!(decide(&d, &fresh, 3, 10_000, 0), Step::Nothing);
        assert_eq!(decide(&decl(3, &[]), &fresh, 0, 10_000, 0), Step::Nothing);
        // Too few, but agents may still be registering after a hub start.
        assert_eq!(decide(&d, &fresh, 1, 1_000, 5_000), Step::WaitUntil(5_000));
        assert_eq!(decide(&d, &fresh, 1, 5_000, 5_000), Step::Run(2));
        // Running: not twice. After a run: at its next check.
        let running = ScaleView {
            running: true,
            ..fresh.clone()
        };
        assert_eq!(decide(&d, &running, 0, 9_000, 0), Step::Nothing);
        let after = ScaleView {
            next_ms: Some(40_000),
            attempts: 1,
            ..fresh
        };
        assert_eq!(decide(&d, &after, 2, 39_999, 0), Step::WaitUntil(40_000));
        assert_eq!(decide(&d, &after, 2, 40_000, 0), Step::Run(1));
    }

    #[test]
    fn the_back_off_doubles_up_to_ten_minutes() {
        let waits: Vec<u64> = (1..=7).map(|n| backoff_ms(30_000, n)).collect();
        assert_eq!(
            waits,
            [30_000, 60_000, 120_000, 240_000, 480_000, 600_000, 600_000]
        );
        assert_eq!(backoff_ms(30_000, u32::MAX), 600_000);
        // A base longer than the cap is kept.
        assert_eq!(backoff_ms(900_000, 3), 900_000);
    }
}
