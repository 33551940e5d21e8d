//! The hub's shared state ([`HubCore`]): what its services share — the agent registry, the
//! table of the runs active here, the store and its run repository, the bus, the clock, the
//! files and logs — with the small operations on it that every service uses. It knows no
//! service: nothing here spawns a task or drives a run.

use crate::config::HubConfig;
use crate::files::HubFiles;
use crate::link::AgentLink;
use crate::live::{Run, RunContext};
use crate::logs::RunLogs;
use crate::registry::AgentRegistry;
use crate::repo::RunRepo;
use crate::run::{RunRecord, RunState};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use silk_bus::{AllocationReply, Bus};
use silk_core::{AgentId, Clock, HubId, RunId};
use silk_store::{Level, MetaStore};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// What the hub's tasks share.
pub(crate) struct HubCore {
    pub(crate) config: HubConfig,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The clock of cron fires and retries (the hub's clock unless a test injects one).
    pub(crate) schedule_clock: Arc<dyn Clock>,
    pub(crate) files: HubFiles,
    pub(crate) store: Arc<dyn MetaStore>,
    /// The run records in the store, written under the runs' leases.
    pub(crate) repo: RunRepo,
    pub(crate) logs: Arc<RunLogs>,
    pub(crate) registry: Arc<Mutex<AgentRegistry>>,
    /// Live agents and commands to them.
    pub(crate) link: AgentLink,
    /// What the runs' drivers get of the hub.
    pub(crate) runs_cx: RunContext,
    pub(crate) rng: Arc<Mutex<StdRng>>,
    /// The runs active on this hub (terminal ones are in the store only).
    pub(crate) runs: Mutex<BTreeMap<RunId, Arc<Run>>>,
    pub(crate) waiters: Mutex<HashMap<RunId, mpsc::UnboundedSender<AllocationReply>>>,
    /// Job changes are serialised (the scheduler and the API).
    pub(crate) jobs_lock: tokio::sync::Mutex<()>,
    /// Ended runs, for the scheduler (last run, retries, queued fires).
    pub(crate) ended: mpsc::UnboundedSender<RunRecord>,
    /// Scheduler ticks done (tests wait for them).
    pub(crate) schedule_ticks: watch::Sender<u64>,
    /// Subscriptions open now (readiness).
    pub(crate) subscribed: std::sync::atomic::AtomicUsize,
    /// The log writer, awaited at shutdown so that the last lines are stored.
    pub(crate) log_writer: Mutex<Option<JoinHandle<()>>>,
    pub(crate) stop: watch::Sender<bool>,
    /// The live agents as of the last tick.
    pub(crate) live: watch::Sender<Vec<AgentId>>,
    pub(crate) drivers: Mutex<Vec<JoinHandle<()>>>,
    /// Finding or starting a job's fed run is serialised (two outbounds feeding one job
    /// get one run).
    pub(crate) feed_lock: tokio::sync::Mutex<()>,
    /// Bumped whenever a run's driver starts (outcome readers look for new runs).
    pub(crate) runs_started: watch::Sender<u64>,
    /// This hub's id in the cluster (`HubConfig::hub_id`).
    pub(crate) hub_id: HubId,
    /// Runs this hub is creating (not active yet): adoption leaves them alone.
    pub(crate) starting: Mutex<std::collections::HashSet<RunId>>,
    /// Runs seen open in the store that this hub cannot drive (logged once).
    pub(crate) undrivable: Mutex<std::collections::HashSet<RunId>>,
    /// The build queue of projects' versions, and the secret key.
    pub(crate) builds: Builds,
    /// Woken when a run ended here or a delivery was queued (the alerts service looks).
    pub(crate) alerts_wake: tokio::sync::Notify,
    /// The alerts service's task (stopped before the hub gives its lease back).
    pub(crate) alerts_task: Mutex<Option<JoinHandle<()>>>,
    /// The declared pools as this hub last saw them (`scale`), by name.
    pub(crate) pools: Mutex<BTreeMap<String, silk_api::agents::PoolView>>,
    /// The router this hub runs (`--router`), for replays of its failure records.
    pub(crate) router: std::sync::OnceLock<silk_router::Router>,
    /// Held by a replay of the router's failure records (one at a time on this hub).
    pub(crate) replay_lock: tokio::sync::Mutex<()>,
}

impl HubCore {
    /// Called when a run's driver has ended.
    pub(crate) fn run_finished(&self, run: &Run) {
        let record = run.record();
        if record.state.is_terminal() {
            self.runs.lock().remove(&run.id);
            let _ = self.ended.send(record);
            self.alerts_wake.notify_one();
        } else if run.is_disowned() {
            // Another hub drives it now.
            self.runs.lock().remove(&run.id);
        }
    }

    /// The writer of a run's logs (items, outcomes), for a tailer: the run while it is
    /// active here, over once it is not.
    pub(crate) fn run_writer(&self, id: &RunId) -> crate::tailer::Writer<Arc<Run>> {
        match self.active_run(id) {
            Some(run) => crate::tailer::Writer::Active(run),
            None => crate::tailer::Writer::Over,
        }
    }

    /// The active run `id`.
    pub(crate) fn active_run(&self, id: &RunId) -> Option<Arc<Run>> {
        self.runs.lock().get(id).cloned()
    }

    /// The active runs of a job that its schedule or a user started (not the run the
    /// router feeds: that one lives beside them and overlap rules ignore it).
    pub(crate) fn active_runs_of(&self, job_id: &str) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .values()
            .filter(|r| r.job_id() == Some(job_id) && !r.is_fed())
            .cloned()
            .collect()
    }

    /// The job's run that the router feeds and that still takes requests.
    pub(crate) fn fed_run_of(&self, job_id: &str) -> Option<Arc<Run>> {
        self.runs
            .lock()
            .values()
            .find(|r| r.job_id() == Some(job_id) && r.is_fed() && !r.is_closing())
            .cloned()
    }

    /// The ids of the runs active now.
    pub(crate) fn runs_now(&self) -> Vec<RunId> {
        self.runs.lock().keys().cloned().collect()
    }

    /// Stores a run as failed (it never ran, or could not resume) and tells the scheduler.
    pub(crate) async fn fail_stored(&self, mut record: RunRecord, reason: String) -> RunRecord {
        record.state = RunState::Failed;
        record.reason = Some(reason.clone());
        record.finished_ms = Some(self.clock.now_ms());
        if let Err(e) = self.repo.save(&record).await {
            tracing::error!(run = %record.id, error = %e, "run state not stored");
        }
        self.logs
            .hub(&record.id, Level::Error, format!("run failed: {reason}"));
        self.repo.release(&record.id).await;
        let _ = self.ended.send(record.clone());
        self.alerts_wake.notify_one();
        record
    }

    /// Notes the driver task of a run that has just entered the table (`runs`): shutdown
    /// awaits it, and outcome readers learn that a run started.
    pub(crate) fn driver_started(&self, handle: JoinHandle<()>) {
        {
            let mut drivers = self.drivers.lock();
            drivers.retain(|h| !h.is_finished());
            drivers.push(handle);
        }
        self.runs_started.send_modify(|n| *n += 1);
    }
}

/// The build queue's state on this hub (the `builds` service drives it).
pub(crate) struct Builds {
    pub(crate) secrets: silk_projects::secrets::SecretBox,
    pub(crate) settings: crate::config::BuildSettings,
    /// Woken when this hub queues a version.
    pub(crate) wake: tokio::sync::Notify,
    /// Builds running here: build id → project.
    pub(crate) local: Mutex<HashMap<String, String>>,
    /// Bumped on every version change this hub makes (log followers wait on it).
    pub(crate) changed: watch::Sender<u64>,
    /// The build tasks, awaited at shutdown (a stopping build queues its version again and
    /// logs why before the log queue closes).
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Builds {
    pub(crate) fn new(
        secrets: silk_projects::secrets::SecretBox,
        settings: crate::config::BuildSettings,
    ) -> Self {
        Self {
            secrets,
            settings,
            wake: tokio::sync::Notify::new(),
            local: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// The build tasks still running (taken: the caller awaits them).
    pub(crate) fn take_tasks(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.tasks.lock())
    }

    /// A version was queued: look at the queue now.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
        self.changed.send_modify(|n| *n += 1);
    }

    /// Whether this hub builds a version of `project` now.
    pub(crate) fn building_here(&self, project: &str) -> bool {
        self.local.lock().values().any(|p| p == project)
    }
}
