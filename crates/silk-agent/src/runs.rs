//! The runs an agent holds: one [`RunSlot`] per run (its config as received, the compiled
//! form, the downloader built lazily from it, counters, last use), the runs whose allocation
//! was refused (so that their downloads say why), and the allocations file behind them.
//!
//! **Invariant:** the allocations file lists exactly the runs in the map after every change
//! (allocate, release, idle release, a stored entry that no longer compiles): each change
//! rewrites it from a snapshot of the map, writes serialised, so the last change wins.
//!
//! Use and idle release are decided under the map's lock: a request holds a [`UseGuard`]
//! from lookup to result, and the idle sweep releases only allocations nobody uses.
//! This module must not touch the bus.

use crate::command::CommandPolicy;
use crate::downloader::Downloader;
use crate::downloader_config::{self, CompiledConfig};
use crate::error::AgentError;
use crate::runlog::Events;
use crate::stats::{AgentEvent, ReleaseReason, RunCounters, RunStats};
use crate::store::{AllocationStore, StoredAllocation};
use parking_lot::Mutex;
use silk_core::{Clock, RunId};
use silk_fetch::AddressPolicy;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::OnceCell;

/// One run's downloader on this agent.
pub(crate) struct RunSlot {
    run: RunId,
    /// The allocate command as received (config, time, the ranges its tenant may reach).
    stored: StoredAllocation,
    compiled: Arc<CompiledConfig>,
    downloader: OnceCell<Arc<Downloader>>,
    pub(crate) counters: Arc<RunCounters>,
    last_used_ms: AtomicU64,
}

impl RunSlot {
    fn new(run: RunId, stored: StoredAllocation, compiled: CompiledConfig, now_ms: u64) -> Self {
        Self {
            run,
            stored,
            compiled: Arc::new(compiled),
            downloader: OnceCell::new(),
            counters: Arc::new(RunCounters::default()),
            last_used_ms: AtomicU64::new(now_ms),
        }
    }

    fn touch(&self, now_ms: u64) {
        self.last_used_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// The downloader, built on first use (a failure is returned and tried again next time).
    pub(crate) async fn downloader(
        &self,
        events: &Events,
        clock: &Arc<dyn Clock>,
    ) -> Result<Arc<Downloader>, AgentError> {
        self.downloader
            .get_or_try_init(|| async {
                let built = Downloader::build(
                    self.run.clone(),
                    self.compiled.clone(),
                    self.counters.clone(),
                    events.clone(),
                    clock.clone(),
                )
                .await;
                match &built {
                    Ok(d) => events.emit(AgentEvent::DownloaderBuilt {
                        run: self.run.clone(),
                        proxies: d.proxies(),
                    }),
                    Err(e) => events.emit(AgentEvent::DownloaderFailed {
                        run: self.run.clone(),
                        error: e.to_string(),
                    }),
                }
                built.map(Arc::new)
            })
            .await
            .cloned()
    }
}

/// A request's use of an allocation: keeps it from being released as idle, and marks it
/// used when the request ends.
pub(crate) struct UseGuard {
    pub(crate) allocation: Arc<RunSlot>,
    clock: Arc<dyn Clock>,
}

impl Drop for UseGuard {
    fn drop(&mut self) {
        self.allocation.touch(self.clock.now_ms());
        self.allocation
            .counters
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// What an `allocate` came to.
pub(crate) enum Allocated {
    /// A new allocation (its downloader not built yet).
    New(Arc<RunSlot>),
    /// The run was allocated already: the existing allocation is kept (whatever config the
    /// repeated `allocate` carried).
    Existing(Arc<RunSlot>),
    /// The config was refused: why (every problem, each naming its key).
    Refused(String),
}

/// Why a download found no usable allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Missing {
    /// The run is not allocated here.
    Unknown,
    /// Its allocation was refused: the reason.
    Refused(String),
}

/// The runs of one agent.
pub(crate) struct RunTable {
    runs: Mutex<HashMap<RunId, Arc<RunSlot>>>,
    refused: Mutex<HashMap<RunId, String>>,
    store: AllocationStore,
    clock: Arc<dyn Clock>,
    events: Events,
    /// Which commands runs may use (also checked when stored allocations are reloaded: an
    /// agent restarted without a command drops the runs that need it).
    commands: CommandPolicy,
    /// The addresses runs' fetches may reach (the agent's `allow_networks`).
    network: AddressPolicy,
}

/// Compiles an allocation under the agent's policies, its network policy widened by the
/// ranges the hub allowed the run.
fn compile(
    run: &RunId,
    stored: &StoredAllocation,
    commands: &CommandPolicy,
    network: &AddressPolicy,
) -> Result<CompiledConfig, AgentError> {
    let network = network.widened(&stored.allow_networks);
    downloader_config::from_json(run, stored.config.clone())
        .and_then(|c| downloader_config::compile(&c, run, commands, &network))
}

impl RunTable {
    pub(crate) fn new(
        data_dir: &Path,
        clock: Arc<dyn Clock>,
        events: Events,
        commands: CommandPolicy,
        network: AddressPolicy,
    ) -> Self {
        Self {
            commands,
            network,
            runs: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            store: AllocationStore::new(data_dir),
            clock,
            events,
        }
    }

    fn emit(&self, event: AgentEvent) {
        self.events.emit(event);
    }

    /// Loads the allocations file (downloaders are built on first use). Entries that no
    /// longer compile are dropped from the file, with a warning.
    pub(crate) async fn reload(&self) {
        let (stored, err) = self.store.load();
        if let Some(e) = err {
            tracing::warn!(error = %e, "allocations file unreadable; starting without allocations");
        }
        let now = self.clock.now_ms();
        let mut dropped = false;
        for (run, entry) in stored {
            match compile(&run, &entry, &self.commands, &self.network) {
                Ok(compiled) => {
                    let alloc = RunSlot::new(run.clone(), entry, compiled, now);
                    self.runs.lock().insert(run.clone(), Arc::new(alloc));
                    tracing::info!(run = %run, "allocation reloaded");
                    self.emit(AgentEvent::Allocated {
                        run,
                        reloaded: true,
                        existing: false,
                    });
                }
                Err(e) => {
                    tracing::warn!(run = %run, error = %e, "stored allocation no longer valid; dropped");
                    self.emit(AgentEvent::AllocationFailed {
                        run,
                        error: e.to_string(),
                    });
                    dropped = true;
                }
            }
        }
        if dropped {
            self.persist().await;
        }
    }

    /// Writes the allocations file from the map; a failure is logged (the allocations stay
    /// in memory, the next change tries again).
    async fn persist(&self) {
        let result = self
            .store
            .save(|| {
                self.runs
                    .lock()
                    .iter()
                    .map(|(run, a)| (run.clone(), a.stored.clone()))
                    .collect()
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "could not write the allocations file");
        }
    }

    /// Handles an `allocate`: keeps an existing allocation (idempotent), or compiles and
    /// stores a new one, or records why the config was refused.
    pub(crate) async fn allocate(
        &self,
        run: &RunId,
        config: serde_json::Value,
        allow_networks: Vec<silk_core::net::IpNet>,
    ) -> Allocated {
        let now = self.clock.now_ms();
        let existing = self.runs.lock().get(run).cloned();
        if let Some(alloc) = existing {
            alloc.touch(now);
            if alloc.stored.config != config || alloc.stored.allow_networks != allow_networks {
                tracing::warn!(run = %run, "allocate with another config for an allocated run: the existing downloader is kept (release it first to change it)");
            }
            self.emit(AgentEvent::Allocated {
                run: run.clone(),
                reloaded: false,
                existing: true,
            });
            return Allocated::Existing(alloc);
        }
        let stored = StoredAllocation {
            config,
            allocated_ms: now,
            allow_networks,
        };
        match compile(run, &stored, &self.commands, &self.network) {
            Err(e) => {
                let reason = e.to_string();
                tracing::error!(run = %run, error = %reason, "allocation refused");
                self.refused.lock().insert(run.clone(), reason.clone());
                self.emit(AgentEvent::AllocationFailed {
                    run: run.clone(),
                    error: reason.clone(),
                });
                Allocated::Refused(reason)
            }
            Ok(compiled) => {
                let alloc = Arc::new(RunSlot::new(run.clone(), stored, compiled, now));
                self.runs.lock().insert(run.clone(), alloc.clone());
                self.refused.lock().remove(run);
                self.persist().await;
                tracing::info!(run = %run, "downloader allocated");
                self.emit(AgentEvent::Allocated {
                    run: run.clone(),
                    reloaded: false,
                    existing: false,
                });
                Allocated::New(alloc)
            }
        }
    }

    /// Drops a run's allocation (and a refused one's reason); whether it existed.
    pub(crate) async fn release(&self, run: &RunId) -> bool {
        self.refused.lock().remove(run);
        let removed = self.runs.lock().remove(run).is_some();
        if removed {
            self.persist().await;
            tracing::info!(run = %run, "downloader released");
            self.emit(AgentEvent::Released {
                run: run.clone(),
                reason: ReleaseReason::Command,
            });
        }
        removed
    }

    /// Drops every allocation (the agent detached); their runs.
    pub(crate) async fn release_all(&self) -> Vec<RunId> {
        self.refused.lock().clear();
        let released: Vec<RunId> = std::mem::take(&mut *self.runs.lock()).into_keys().collect();
        if !released.is_empty() {
            self.persist().await;
            for run in &released {
                tracing::info!(run = %run, "downloader released: the agent detached");
                self.emit(AgentEvent::Released {
                    run: run.clone(),
                    reason: ReleaseReason::Detached,
                });
            }
        }
        released
    }

    /// Releases the allocations nobody used for longer than `idle_ms`.
    pub(crate) async fn release_idle(&self, idle_ms: u64) -> Vec<RunId> {
        let now = self.clock.now_ms();
        let released: Vec<RunId> = {
            let mut runs = self.runs.lock();
            let idle: Vec<RunId> = runs
                .iter()
                .filter(|(_, a)| {
                    a.counters.in_flight.load(Ordering::Relaxed) == 0
                        && now.saturating_sub(a.last_used_ms.load(Ordering::Relaxed)) > idle_ms
                })
                .map(|(run, _)| run.clone())
                .collect();
            for run in &idle {
                runs.remove(run);
            }
            idle
        };
        if !released.is_empty() {
            self.persist().await;
            for run in &released {
                tracing::info!(run = %run, idle_ms, "idle downloader released");
                self.emit(AgentEvent::Released {
                    run: run.clone(),
                    reason: ReleaseReason::Idle,
                });
            }
        }
        released
    }

    /// The allocation of `run`, marked in use until the guard is dropped.
    pub(crate) fn begin_use(&self, run: &RunId) -> Result<UseGuard, Missing> {
        let runs = self.runs.lock();
        match runs.get(run) {
            Some(alloc) => {
                alloc.touch(self.clock.now_ms());
                alloc.counters.in_flight.fetch_add(1, Ordering::Relaxed);
                Ok(UseGuard {
                    allocation: alloc.clone(),
                    clock: self.clock.clone(),
                })
            }
            None => Err(self
                .refused
                .lock()
                .get(run)
                .cloned()
                .map_or(Missing::Unknown, Missing::Refused)),
        }
    }

    /// How many runs are allocated.
    pub(crate) fn len(&self) -> usize {
        self.runs.lock().len()
    }

    /// The counters of every allocated run.
    pub(crate) fn stats(&self) -> BTreeMap<RunId, RunStats> {
        self.runs
            .lock()
            .iter()
            .map(|(run, a)| {
                (
                    run.clone(),
                    a.counters.snapshot(a.last_used_ms.load(Ordering::Relaxed)),
                )
            })
            .collect()
    }
}
