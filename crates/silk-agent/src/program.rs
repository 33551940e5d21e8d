//! Programs on an agent: the workers of a program run (`Command::Program`).
//!
//! A `start` names the version and the workers this agent runs. For the `process` runtime the
//! version's packed directory is fetched from the hub (`GET
//! {api_url}/api/v1/projects/{project}/versions/{version}/artifact` with the run token),
//! checked against its SHA-256 while it streams in, unpacked once into
//! `{data_dir}/programs/versions/{sha256}` and shared by every run of that version; the
//! cache is held under `program_cache_bytes` by evicting the least recently started versions
//! no worker uses. For `container`, the image must be present or pullable.
//!
//! Each worker is its own process group (a container: its engine's client process, the
//! container named `silk-{run}-{worker}`), started with a minimal environment: `PATH`, `HOME`
//! (a directory of its own), `LANG`, the job's `env` and Silk's `SILK_*` variables. Its
//! stdout and stderr become the run's log lines (stderr at `warn`; a JSON line with `level`
//! and `msg` keeps its level and text). When the agent dies the workers die with it
//! (`setpriv --pdeathsig KILL`, where util-linux has it), and an exited worker's group is
//! killed, so nothing is left behind. Pause is SIGSTOP to the group (`pause` for a
//! container), resume SIGCONT, stop SIGTERM then SIGKILL after the grace period.
//!
//! Nothing runs unless the agent's admin allowed programs (`--allow-programs`).

use crate::runlog::Events;
use parking_lot::Mutex;
use rustix::process::{Pid, Signal, kill_process_group};
use sha2::{Digest, Sha256};
use silk_bus::{LogLevel, ProgramStart, WorkerEvent};
use silk_core::{AgentId, RunId};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

/// The `PATH` of a worker.
const WORKER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Output lines kept for the report of a worker's end.
const TAIL_LINES: usize = 10;

/// Longest output line read at once; a longer one goes on in the next line.
const MAX_LINE_BYTES: u64 = 64 * 1024;

/// How a worker report reaches the hub (the agent publishes it with retries).
pub(crate) type Reporter = Arc<dyn Fn(RunId, u32, WorkerEvent) + Send + Sync>;

/// A control of a run's workers (see [`Programs::controller`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Control {
    /// SIGSTOP; `pause` of a container.
    Pause,
    /// SIGCONT; `unpause`.
    Resume,
    /// SIGTERM, then SIGKILL after the grace period; `stop -t` of a container.
    Stop(Duration),
}

/// How a signal reaches a container: the container engine's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContainerOp {
    Pause,
    Unpause,
    Terminate,
    Kill,
}

/// What the agent's admin allows and where programs live.
#[derive(Debug, Clone)]
pub(crate) struct ProgramSettings {
    /// Whether this agent runs programs at all.
    pub allow: bool,
    /// `{data_dir}/programs`.
    pub dir: PathBuf,
    /// Most bytes of unpacked versions kept (packed size counted).
    pub cache_bytes: u64,
    /// The container engine's client (`podman`, `docker`).
    pub container_cli: String,
    /// Arguments of the engine before its subcommand (e.g. `--runtime=runc`).
    pub container_args: Vec<String>,
}

/// One worker that runs.
#[derive(Debug, Clone)]
struct Running {
    group: Option<Pid>,
    container: Option<String>,
    /// The version directory it runs in (kept from eviction).
    version_dir: Option<PathBuf>,
}

#[derive(Default)]
struct RunWorkers {
    workers: Mutex<BTreeMap<u32, Option<Running>>>,
    /// Where reports go: the latest `start`'s hub (a hub that adopted the run sends `start`
    /// again, and the workers that run already report to it from then on).
    reporter: Mutex<Option<Reporter>>,
    paused: std::sync::atomic::AtomicBool,
    stopping: std::sync::atomic::AtomicBool,
}

/// The program runs of one agent.
pub(crate) struct Programs {
    settings: ProgramSettings,
    agent: AgentId,
    events: Events,
    http: reqwest::Client,
    runs: Mutex<HashMap<RunId, Arc<RunWorkers>>>,
    /// One artifact download at a time (the same version asked twice is fetched once).
    fetching: tokio::sync::Mutex<()>,
    setpriv: bool,
    /// Woken whenever a worker is over.
    ended: tokio::sync::Notify,
    /// How the workers that are over ended, by run, until the run is released: a `start`
    /// sent again (by a hub that adopted the run and missed the report) gets the end reported
    /// again, and the worker is not run a second time.
    over: Mutex<HashMap<RunId, BTreeMap<u32, WorkerEvent>>>,
    /// Runs released lately (their workers, stopped after the release, are not kept in
    /// `over`); forgotten after [`RELEASED_KEPT`].
    released: Mutex<HashMap<RunId, std::time::Instant>>,
    /// Workers being stopped because the agent detached: their ends say so (`detached`), are
    /// not kept in `over` (a later `start` runs them again), and are reported again when a
    /// hub is heard (a report published while no hub was there may be lost with the bus).
    detaching: Mutex<std::collections::HashSet<(RunId, u32)>>,
    /// Ends of workers stopped by a detach, to report again when the agent is heard again.
    detached_ends: Mutex<Vec<(RunId, u32, WorkerEvent, Reporter)>>,
}

/// How long a released run is remembered (longer than any stop's grace period).
const RELEASED_KEPT: Duration = Duration::from_secs(600);

impl Programs {
    pub(crate) fn new(settings: ProgramSettings, agent: AgentId, events: Events) -> Self {
        let setpriv = Path::new("/usr/bin/setpriv").exists();
        Self {
            settings,
            agent,
            events,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            runs: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Mutex::new(()),
            setpriv,
            ended: tokio::sync::Notify::new(),
            over: Mutex::new(HashMap::new()),
            released: Mutex::new(HashMap::new()),
            detaching: Mutex::new(std::collections::HashSet::new()),
            detached_ends: Mutex::new(Vec::new()),
        }
    }

    /// Where the agent sends the controls of runs' workers: applied one at a time, in the
    /// order they came (a resume never overtakes its pause), off the agent's command loop (a
    /// container engine's client can take seconds).
    pub(crate) fn controller(
        self: &Arc<Self>,
    ) -> tokio::sync::mpsc::UnboundedSender<(RunId, Control)> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(RunId, Control)>();
        let this = self.clone();
        tokio::spawn(async move {
            while let Some((run, control)) = rx.recv().await {
                match control {
                    Control::Pause => this.pause(&run).await,
                    Control::Resume => this.resume(&run).await,
                    Control::Stop(grace) => this.stop(&run, grace).await,
                }
            }
        });
        tx
    }

    /// Workers that run here now, all runs together.
    pub(crate) fn running(&self) -> usize {
        self.runs
            .lock()
            .values()
            .map(|r| r.workers.lock().values().filter(|w| w.is_some()).count())
            .sum()
    }

    /// Starts the workers of `start` that do not run here yet; reports each start and end.
    pub(crate) fn start(self: &Arc<Self>, run: RunId, start: ProgramStart, report: Reporter) {
        if !self.settings.allow {
            let error = format!(
                "agent `{}` does not run programs (its admin starts it with --allow-programs)",
                self.agent
            );
            for w in start.workers {
                report(
                    run.clone(),
                    w,
                    WorkerEvent::Failed {
                        error: error.clone(),
                    },
                );
            }
            return;
        }
        let over: Vec<(u32, WorkerEvent)> = {
            let over = self.over.lock();
            over.get(&run)
                .map(|ended| {
                    start
                        .workers
                        .iter()
                        .filter_map(|w| ended.get(w).map(|e| (*w, e.clone())))
                        .collect()
                })
                .unwrap_or_default()
        };
        for (w, event) in &over {
            // Over already: its end again, to the hub that asks now.
            report(run.clone(), *w, event.clone());
        }
        let workers = {
            let mut runs = self.runs.lock();
            let slot = runs.entry(run.clone()).or_default().clone();
            slot.stopping
                .store(false, std::sync::atomic::Ordering::SeqCst);
            *slot.reporter.lock() = Some(report.clone());
            let mut table = slot.workers.lock();
            let new: Vec<u32> = start
                .workers
                .iter()
                .copied()
                .filter(|w| !table.contains_key(w) && !over.iter().any(|(o, _)| o == w))
                .collect();
            for w in &new {
                table.insert(*w, None);
            }
            new
        };
        if workers.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let place = match this.prepare(&run, &start).await {
                Ok(place) => place,
                Err(error) => {
                    this.events.log(&run, LogLevel::Error, || {
                        format!("program not started: {error}")
                    });
                    for w in workers {
                        let event = WorkerEvent::Failed {
                            error: error.clone(),
                        };
                        this.end(&run, w, event, &report);
                    }
                    return;
                }
            };
            for w in workers {
                let (this, run, start, report, place) = (
                    this.clone(),
                    run.clone(),
                    start.clone(),
                    report.clone(),
                    place.clone(),
                );
                tokio::spawn(async move { this.work(run, w, &start, &place, report).await });
            }
        });
    }

    /// Stops the run's workers where they are (SIGSTOP; `pause` of a container).
    pub(crate) async fn pause(&self, run: &RunId) {
        let Some(slot) = self.slot(run) else { return };
        slot.paused.store(true, std::sync::atomic::Ordering::SeqCst);
        for w in Self::running_of(&slot) {
            self.signal(&w, Signal::STOP, ContainerOp::Pause).await;
        }
        self.events.log(run, LogLevel::Info, || {
            "program workers paused (SIGSTOP)".into()
        });
    }

    /// Continues the run's workers.
    pub(crate) async fn resume(&self, run: &RunId) {
        let Some(slot) = self.slot(run) else { return };
        slot.paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
        for w in Self::running_of(&slot) {
            self.signal(&w, Signal::CONT, ContainerOp::Unpause).await;
        }
        self.events.log(run, LogLevel::Info, || {
            "program workers resumed (SIGCONT)".into()
        });
    }

    /// Ends the run's workers: SIGTERM (after SIGCONT: a stopped process would not see it),
    /// then SIGKILL to each group still there after `grace`.
    pub(crate) async fn stop(self: &Arc<Self>, run: &RunId, grace: Duration) {
        let Some(slot) = self.slot(run) else { return };
        slot.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        slot.paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let running = Self::running_of(&slot);
        if running.is_empty() {
            return;
        }
        self.events.log(run, LogLevel::Info, || {
            format!(
                "stopping {} program worker(s): SIGTERM, SIGKILL after {} ms",
                running.len(),
                grace.as_millis()
            )
        });
        for w in &running {
            if let Some(name) = &w.container {
                // The engine waits out the grace period itself: not here.
                let (this, name) = (self.clone(), name.clone());
                let secs = grace.as_secs().max(1).to_string();
                tokio::spawn(async move { this.engine(&["stop", "-t", &secs, &name]).await });
            } else {
                self.signal(w, Signal::CONT, ContainerOp::Unpause).await;
                self.signal(w, Signal::TERM, ContainerOp::Terminate).await;
            }
        }
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            for w in Self::running_of(&slot) {
                this.signal(&w, Signal::KILL, ContainerOp::Kill).await;
            }
        });
    }

    /// The agent detached (no hub heard for its `detach_after`): every worker of every run is
    /// stopped as by a `stop` with `grace`; their ends are reported with `detached: true`, so
    /// that the hub starts them again, and reported again by [`Programs::reattached`].
    pub(crate) async fn detach_all(self: &Arc<Self>, grace: Duration) {
        let slots: Vec<(RunId, Arc<RunWorkers>)> = self
            .runs
            .lock()
            .iter()
            .map(|(run, slot)| (run.clone(), slot.clone()))
            .collect();
        for (run, slot) in slots {
            let workers: Vec<u32> = slot.workers.lock().keys().copied().collect();
            if workers.is_empty() {
                continue;
            }
            self.detaching
                .lock()
                .extend(workers.into_iter().map(|w| (run.clone(), w)));
            self.events.log(&run, LogLevel::Warn, || {
                "the agent heard from no hub for its detach_after: its workers are stopped and start again when a hub is heard".to_owned()
            });
            self.stop(&run, grace).await;
        }
    }

    /// A hub is heard again after a detach: the ends of the workers the detach stopped are
    /// reported again (the hub applies a report once; one published while the bus was down
    /// was lost).
    pub(crate) fn reattached(&self) {
        let ends = std::mem::take(&mut *self.detached_ends.lock());
        for (run, worker, event, report) in ends {
            report(run, worker, event);
        }
    }

    /// Ends every worker of every run (the agent stops), and waits at most `grace`.
    pub(crate) async fn stop_all(self: &Arc<Self>, grace: Duration) {
        let runs: Vec<RunId> = self.runs.lock().keys().cloned().collect();
        for run in &runs {
            self.stop(run, grace).await;
        }
        let deadline = tokio::time::Instant::now() + grace + Duration::from_millis(500);
        loop {
            // Registered before the count is read, so an end in between is not missed.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            tokio::select! {
                () = ended => {}
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    fn slot(&self, run: &RunId) -> Option<Arc<RunWorkers>> {
        self.runs.lock().get(run).cloned()
    }

    fn running_of(slot: &RunWorkers) -> Vec<Running> {
        slot.workers.lock().values().flatten().cloned().collect()
    }

    fn forget(&self, run: &RunId, worker: u32) {
        let mut runs = self.runs.lock();
        if let Some(slot) = runs.get(run) {
            let empty = {
                let mut table = slot.workers.lock();
                table.remove(&worker);
                table.is_empty()
            };
            if empty {
                runs.remove(run);
            }
        }
        drop(runs);
        self.ended.notify_waiters();
    }

    /// Sends `signal` to a worker's process group, or has the container engine do `op` to
    /// its container.
    async fn signal(&self, w: &Running, signal: Signal, op: ContainerOp) {
        if let Some(group) = w.group
            && w.container.is_none()
        {
            // ESRCH: the group is gone already.
            let _ = kill_process_group(group, signal);
        } else if let Some(name) = &w.container {
            let args: &[&str] = match op {
                ContainerOp::Pause => &["pause"],
                ContainerOp::Unpause => &["unpause"],
                ContainerOp::Terminate => &["kill", "--signal", "TERM"],
                ContainerOp::Kill => &["kill"],
            };
            let mut args = args.to_vec();
            args.push(name);
            self.engine(&args).await;
        }
    }

    /// Runs the container engine's client with `args`; whether it succeeded.
    async fn engine(&self, args: &[&str]) -> bool {
        let out = tokio::process::Command::new(&self.settings.container_cli)
            .args(&self.settings.container_args)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .await;
        match out {
            Ok(o) if o.status.success() => true,
            Ok(o) => {
                tracing::debug!(
                    cli = %self.settings.container_cli,
                    op = args.first().copied().unwrap_or(""),
                    stderr = %String::from_utf8_lossy(&o.stderr).trim(),
                    "container engine call failed"
                );
                false
            }
            Err(e) => {
                tracing::debug!(cli = %self.settings.container_cli, error = %e, "container engine not run");
                false
            }
        }
    }

    /// Where the workers of `start` run: the version's directory, or its image.
    async fn prepare(&self, run: &RunId, start: &ProgramStart) -> Result<Place, String> {
        match start.runtime.as_str() {
            "process" => {
                let Some(artifact) = &start.artifact else {
                    return Err(format!(
                        "version {} of project `{}` has no packed directory (a container version needs `runtime: container`)",
                        start.version, start.project
                    ));
                };
                let dir = self
                    .version_dir(run, start, &artifact.sha256, artifact.size)
                    .await?;
                Ok(Place::Dir(dir))
            }
            "container" => {
                let Some(image) = &start.image else {
                    return Err(format!(
                        "version {} of project `{}` has no image (a command version needs `runtime: process`)",
                        start.version, start.project
                    ));
                };
                if !self.engine(&["image", "exists", image]).await {
                    self.events
                        .log(run, LogLevel::Info, || format!("pulling image {image}"));
                    if !self.engine(&["pull", image]).await {
                        return Err(format!(
                            "image {image} is not on agent `{}` and could not be pulled with {}",
                            self.agent, self.settings.container_cli
                        ));
                    }
                }
                Ok(Place::Image(image.clone()))
            }
            other => Err(format!("unknown runtime `{other}`")),
        }
    }

    /// The unpacked directory of a version, fetched and checked when it is not cached.
    async fn version_dir(
        &self,
        run: &RunId,
        start: &ProgramStart,
        sha256: &str,
        size: u64,
    ) -> Result<PathBuf, String> {
        let valid = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(format!("artifact digest `{sha256}` is not a SHA-256"));
        }
        let versions = self.settings.dir.join("versions");
        let dir = versions.join(sha256);
        let ready = dir.join(READY);
        let _one = self.fetching.lock().await;
        if ready.exists() {
            touch(&ready);
            return Ok(dir);
        }
        if size > self.settings.cache_bytes {
            return Err(format!(
                "the version's packed directory ({size} bytes) is larger than this agent's program cache ({} bytes)",
                self.settings.cache_bytes
            ));
        }
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        tokio::fs::create_dir_all(&versions)
            .await
            .map_err(|e| io(&versions.display().to_string(), e))?;
        let packed = versions.join(format!("{sha256}.download"));
        let url = format!(
            "{}/api/v1/projects/{}/versions/{}/artifact",
            start.api_url.trim_end_matches('/'),
            start.project,
            start.version
        );
        self.events.log(run, LogLevel::Info, || {
            format!(
                "fetching version {} of project `{}` ({size} bytes) from the hub",
                start.version, start.project
            )
        });
        let response = self
            .http
            .get(&url)
            .bearer_auth(&start.token)
            .send()
            .await
            .map_err(|e| format!("artifact not fetched from {url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "artifact not fetched from {url}: HTTP {}",
                response.status()
            ));
        }
        let mut file = tokio::fs::File::create(&packed)
            .await
            .map_err(|e| io(&packed.display().to_string(), e))?;
        let mut hash = Sha256::new();
        let mut got = 0u64;
        let mut response = response;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("artifact download from {url} broke off: {e}"))?
        {
            got += chunk.len() as u64;
            if got > size {
                let _ = tokio::fs::remove_file(&packed).await;
                return Err(format!(
                    "artifact from {url} is larger than the {size} bytes announced"
                ));
            }
            hash.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| io(&packed.display().to_string(), e))?;
        }
        file.sync_all()
            .await
            .map_err(|e| io(&packed.display().to_string(), e))?;
        drop(file);
        let digest = hex(&hash.finalize());
        if digest != sha256.to_ascii_lowercase() {
            let _ = tokio::fs::remove_file(&packed).await;
            return Err(format!(
                "artifact from {url} has SHA-256 {digest}, not {sha256}: refused"
            ));
        }
        let unpacking = versions.join(format!("{sha256}.unpacking"));
        let (from, into, done) = (packed.clone(), unpacking.clone(), dir.clone());
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(&into);
            silk_projects::artifact::unpack(&from, &into).map_err(|e| e.to_string())?;
            let _ = std::fs::remove_dir_all(&done);
            std::fs::rename(&into, &done).map_err(|e| format!("{}: {e}", done.display()))?;
            std::fs::write(done.join(READY), size.to_string())
                .map_err(|e| format!("{}: {e}", done.display()))?;
            let _ = std::fs::remove_file(&from);
            Ok::<(), String>(())
        })
        .await
        .map_err(|e| format!("unpacking failed: {e}"))??;
        self.evict(&versions, &dir);
        Ok(dir)
    }

    /// Removes the least recently started versions no worker uses until the cache holds at
    /// most `cache_bytes` (the one just made stays).
    fn evict(&self, versions: &Path, keep: &Path) {
        let in_use: Vec<PathBuf> = self
            .runs
            .lock()
            .values()
            .flat_map(|r| {
                r.workers
                    .lock()
                    .values()
                    .flatten()
                    .filter_map(|w| w.version_dir.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let Ok(entries) = std::fs::read_dir(versions) else {
            return;
        };
        let mut cached: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let marker = e.path().join(READY);
                let meta = std::fs::metadata(&marker).ok()?;
                let size = std::fs::read_to_string(&marker).ok()?.trim().parse().ok()?;
                Some((meta.modified().ok()?, size, e.path()))
            })
            .collect();
        let mut total: u64 = cached.iter().map(|c| c.1).sum();
        cached.sort();
        for (_, size, path) in cached {
            if total <= self.settings.cache_bytes {
                break;
            }
            if path == keep || in_use.contains(&path) {
                continue;
            }
            if std::fs::remove_dir_all(&path).is_ok() {
                tracing::info!(version = %path.display(), "program version evicted from the cache");
                total = total.saturating_sub(size);
            }
        }
    }

    /// Runs one worker to its end and reports it.
    async fn work(
        &self,
        run: RunId,
        worker: u32,
        start: &ProgramStart,
        place: &Place,
        report: Reporter,
    ) {
        let home = self
            .settings
            .dir
            .join("work")
            .join(run.as_str())
            .join(worker.to_string());
        if let Err(e) = std::fs::create_dir_all(&home) {
            let event = WorkerEvent::Failed {
                error: format!("{}: {e}", home.display()),
            };
            self.end(&run, worker, event, &report);
            return;
        }
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), WORKER_PATH.into()),
            ("HOME".into(), home.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
        ];
        env.extend(start.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend([
            ("SILK_API_URL".into(), start.api_url.clone()),
            ("SILK_RUN_ID".into(), run.to_string()),
            ("SILK_RUN_TOKEN".into(), start.token.clone()),
            ("SILK_AGENT_ID".into(), self.agent.to_string()),
            ("SILK_WORKER".into(), worker.to_string()),
            ("SILK_WORKERS".into(), start.workers_total.to_string()),
            ("SILK_PROJECT".into(), start.project.clone()),
            ("SILK_VERSION".into(), start.version.clone()),
        ]);
        // The line protocol's pipe (see `fifo`); a container sees the worker's home at
        // CONTAINER_HOME.
        let fifo_path = home.join(FIFO_NAME);
        if let Err(e) = crate::fifo::make(&fifo_path) {
            self.events.log(&run, LogLevel::Warn, || {
                format!("worker {worker}: no line protocol pipe: {e}")
            });
        }
        let fifo_seen = match place {
            Place::Dir(_) => fifo_path.display().to_string(),
            Place::Image(_) => format!("{CONTAINER_HOME}/{FIFO_NAME}"),
        };
        env.push(("SILK_FIFO_PATH".into(), fifo_seen.clone()));
        env.push(("SHUB_FIFO_PATH".into(), fifo_seen));
        let (mut cmd, container, version_dir) = match place {
            Place::Dir(dir) => {
                let Some((program, args)) = start.command.split_first() else {
                    let event = WorkerEvent::Failed {
                        error: "no command to run".into(),
                    };
                    self.end(&run, worker, event, &report);
                    return;
                };
                // A relative program path with a `/` is the version directory's.
                let program = if program.contains('/') && !program.starts_with('/') {
                    dir.join(program).display().to_string()
                } else {
                    program.clone()
                };
                let mut cmd = if self.setpriv {
                    let mut c = tokio::process::Command::new("/usr/bin/setpriv");
                    c.args(["--pdeathsig", "KILL", "--"]).arg(&program);
                    c
                } else {
                    tokio::process::Command::new(&program)
                };
                cmd.args(args)
                    .current_dir(dir)
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .process_group(0);
                (cmd, None, Some(dir.clone()))
            }
            Place::Image(image) => {
                let name = format!("silk-{run}-{worker}");
                let mut cmd = tokio::process::Command::new(&self.settings.container_cli);
                cmd.args(&self.settings.container_args).args([
                    "run",
                    "--rm",
                    "--name",
                    &name,
                    "--network",
                    "host",
                    "--volume",
                    &format!("{}:{CONTAINER_HOME}", home.display()),
                ]);
                for (k, v) in env.iter().filter(|(k, _)| k != "PATH" && k != "HOME") {
                    cmd.arg("--env").arg(format!("{k}={v}"));
                }
                cmd.arg(image).args(&start.command);
                // The client process, and through it the container, in a group of its own.
                cmd.env_clear()
                    .env("PATH", WORKER_PATH)
                    .env("HOME", home.display().to_string())
                    .process_group(0);
                (cmd, Some(name), None)
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let label = start
            .command
            .first()
            .cloned()
            .unwrap_or_else(|| "(image)".into());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let error = format!("worker {worker}: `{label}` could not start: {e}");
                self.events.log(&run, LogLevel::Error, || error.clone());
                self.end(&run, worker, WorkerEvent::Failed { error }, &report);
                return;
            }
        };
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw);
        let running = Running {
            group,
            container: container.clone(),
            version_dir,
        };
        let (paused, stopping) = match self.slot(&run) {
            Some(slot) => {
                slot.workers.lock().insert(worker, Some(running.clone()));
                (
                    slot.paused.load(std::sync::atomic::Ordering::SeqCst),
                    slot.stopping.load(std::sync::atomic::Ordering::SeqCst),
                )
            }
            None => (false, false),
        };
        if stopping {
            // Told to stop (a cancel, a detach) while it was being prepared: it ends now.
            self.signal(&running, Signal::KILL, ContainerOp::Kill).await;
        } else if paused {
            self.signal(&running, Signal::STOP, ContainerOp::Pause)
                .await;
        }
        tracing::info!(run = %run, worker, program = %label, "program worker started");
        self.events.log(&run, LogLevel::Info, || {
            format!("worker {worker} started: {label}")
        });
        report(run.clone(), worker, WorkerEvent::Started);
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return;
        };
        let status = {
            let out = self.lines(&run, worker, stdout, LogLevel::Info, tail.clone());
            let err = self.lines(&run, worker, stderr, LogLevel::Warn, tail.clone());
            let (exited, exit) = tokio::sync::oneshot::channel::<()>();
            let sink = crate::fifo::ItemSink {
                http: self.http.clone(),
                url: format!(
                    "{}/api/v1/runs/{run}/items",
                    start.api_url.trim_end_matches('/')
                ),
                token: start.token.clone(),
            };
            let pipe = crate::fifo::read(&fifo_path, &run, worker, &self.events, &sink, async {
                let _ = exit.await;
            });
            let process = async {
                let (_, _, status) = tokio::join!(out, err, child.wait());
                let _ = exited.send(());
                status
            };
            let (status, ()) = tokio::join!(process, pipe);
            status
        };
        // Whatever the worker left running in its group goes with it.
        if let Some(group) = group {
            let _ = kill_process_group(group, Signal::KILL);
        }
        if let Some(name) = &container {
            self.engine(&["rm", "-f", name]).await;
        }
        let report = self
            .slot(&run)
            .and_then(|s| s.reporter.lock().clone())
            .unwrap_or(report);
        let tail: Vec<String> = tail.lock().iter().cloned().collect();
        let detached = self.detaching.lock().remove(&(run.clone(), worker));
        let event = match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                WorkerEvent::Exited {
                    code: status.code(),
                    signal: status.signal(),
                    tail,
                    detached,
                }
            }
            Err(e) => WorkerEvent::Failed {
                error: format!("worker {worker}: its end could not be read: {e}"),
            },
        };
        if let WorkerEvent::Exited { code, signal, .. } = &event {
            tracing::info!(run = %run, worker, code = ?code, signal = ?signal, "program worker ended");
            self.events
                .log(&run, LogLevel::Info, || match (code, signal) {
                    (Some(c), _) => format!("worker {worker} exited with status {c}"),
                    (None, Some(s)) => format!("worker {worker} was killed by signal {s}"),
                    (None, None) => format!("worker {worker} ended"),
                });
        }
        let _ = std::fs::remove_dir_all(&home);
        self.end(&run, worker, event, &report);
    }

    /// A worker is over: it leaves the table of running workers, its end is kept (see
    /// `over`) and reported.
    fn end(&self, run: &RunId, worker: u32, event: WorkerEvent, report: &Reporter) {
        self.forget(run, worker);
        // A worker that ended otherwise (one being prepared that failed) is not detaching
        // any more: a later run of it must not be reported as stopped by a detach.
        self.detaching.lock().remove(&(run.clone(), worker));
        if matches!(event, WorkerEvent::Exited { detached: true, .. }) {
            self.detached_ends
                .lock()
                .push((run.clone(), worker, event.clone(), report.clone()));
        } else if !self.released.lock().contains_key(run) {
            self.over
                .lock()
                .entry(run.clone())
                .or_default()
                .insert(worker, event.clone());
        }
        report(run.clone(), worker, event);
    }

    /// The run has ended (released): the ends of its workers are forgotten, and so are those
    /// of the workers its release stops.
    pub(crate) fn release(&self, run: &RunId) {
        self.over.lock().remove(run);
        self.detached_ends.lock().retain(|(r, ..)| r != run);
        self.detaching.lock().retain(|(r, _)| r != run);
        let now = std::time::Instant::now();
        let mut released = self.released.lock();
        released.retain(|_, at| now.duration_since(*at) < RELEASED_KEPT);
        released.insert(run.clone(), now);
    }

    /// Reads a worker's output lines into the run's log.
    async fn lines(
        &self,
        run: &RunId,
        worker: u32,
        from: impl AsyncRead + Unpin,
        level: LogLevel,
        tail: Arc<Mutex<VecDeque<String>>>,
    ) {
        let mut reader = BufReader::new(from);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match (&mut reader)
                .take(MAX_LINE_BYTES)
                .read_until(b'\n', &mut buf)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                continue;
            }
            let (level, message) = structured(text).unwrap_or((level, text.to_owned()));
            {
                let mut t = tail.lock();
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(silk_core::text::prefix(&message, 500).to_owned());
            }
            self.events
                .log(run, level, || format!("[worker {worker}] {message}"));
        }
    }
}

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs")
            .field("allow", &self.settings.allow)
            .field("running", &self.running())
            .finish()
    }
}

/// Where a program's workers run.
#[derive(Debug, Clone)]
enum Place {
    Dir(PathBuf),
    Image(String),
}

/// The line protocol's pipe in a worker's home.
const FIFO_NAME: &str = "silk.fifo";

/// Where a container sees its worker's home.
const CONTAINER_HOME: &str = "/silk";

/// The marker of a complete unpacked version (its packed size inside).
const READY: &str = ".silk-ready";

fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON log line (`{"level": "warning", "msg": "…"}`, also `message`): its level and text.
fn structured(line: &str) -> Option<(LogLevel, String)> {
    if !line.starts_with('{') {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let obj = value.as_object()?;
    let msg = obj
        .get("msg")
        .or_else(|| obj.get("message"))
        .and_then(|m| m.as_str())?;
    let level = match obj
        .get("level")
        .or_else(|| obj.get("levelname"))
        .and_then(|l| l.as_str())?
        .to_ascii_lowercase()
        .as_str()
    {
        "trace" => LogLevel::Trace,
        "debug" => LogLevel::Debug,
        "info" | "notice" => LogLevel::Info,
        "warn" | "warning" => LogLevel::Warn,
        "error" | "critical" | "fatal" | "panic" => LogLevel::Error,
        _ => return None,
    };
    Some((level, msg.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(dir: &Path) -> Arc<Programs> {
        let logs = crate::runlog::LogQueue::new(
            AgentId::new("a1"),
            crate::runlog::LogSettings {
                queue_lines: 100,
                batch_lines: 10,
                line_max_bytes: 1024,
                min_level: LogLevel::Debug,
            },
            Arc::new(silk_core::SystemClock),
        );
        let events = Events::new(tokio::sync::broadcast::channel(16).0, Arc::new(logs));
        let settings = ProgramSettings {
            allow: true,
            dir: dir.to_owned(),
            cache_bytes: 1 << 20,
            container_cli: "podman".into(),
            container_args: Vec::new(),
        };
        Arc::new(Programs::new(settings, AgentId::new("a1"), events))
    }

    /// A start the agent cannot run: a process version without a packed directory.
    fn start() -> ProgramStart {
        ProgramStart {
            project: "shop".into(),
            version: "1.0".into(),
            runtime: "process".into(),
            artifact: None,
            image: None,
            command: vec!["true".into()],
            env: BTreeMap::new(),
            workers: vec![0],
            workers_total: 1,
            api_url: "http://127.0.0.1:9".into(),
            token: "t".into(),
        }
    }

    #[tokio::test]
    async fn a_start_sent_again_reports_a_workers_end_instead_of_running_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let programs = programs(dir.path());
        let run = RunId::new("r1");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let to = |hub: &'static str| -> Reporter {
            let tx = tx.clone();
            Arc::new(move |_run, worker, event| {
                let _ = tx.send((hub, worker, event));
            })
        };
        programs.start(run.clone(), start(), to("a"));
        let (hub, worker, first) = rx.recv().await.unwrap();
        assert_eq!((hub, worker), ("a", 0));
        let WorkerEvent::Failed { error } = &first else {
            panic!("{first:?}")
        };
        assert!(error.contains("no packed directory"), "{error}");
        // Another hub adopted the run and starts it again (this time a start that would
        // fetch an artifact, and fail otherwise if it ran): the end, to that hub, at once.
        let again = ProgramStart {
            artifact: Some(silk_bus::ArtifactRef {
                sha256: "00".repeat(32),
                size: 1,
            }),
            ..start()
        };
        programs.start(run.clone(), again, to("b"));
        assert_eq!(rx.recv().await.unwrap(), ("b", 0, first.clone()));
        assert_eq!(programs.running(), 0);
        // Released: forgotten, and a worker that ends after the release is not kept.
        programs.release(&run);
        assert!(programs.over.lock().is_empty());
        programs.end(&run, 1, first.clone(), &to("b"));
        assert!(programs.over.lock().is_empty());
    }

    #[test]
    fn json_lines_keep_their_level_and_text() {
        assert_eq!(
            structured(r#"{"level": "WARNING", "msg": "slow"}"#),
            Some((LogLevel::Warn, "slow".into()))
        );
        assert_eq!(
            structured(r#"{"levelname": "error", "message": "boom", "x": 1}"#),
            Some((LogLevel::Error, "boom".into()))
        );
        assert_eq!(structured(r#"{"level": "loud", "msg": "?"}"#), None);
        assert_eq!(structured("plain text"), None);
        assert_eq!(structured("{not json"), None);
    }
}
