//! Project converts written in Python (taskHUB's `ic.ExtractTaskParams`…): a convert class
//! that is not built in is looked up in the config's plugins folder (`plugins: dir`, or
//! `--plugins`) and run by long-lived Python worker processes that this module supervises.
//!
//! - **Protocol**: JSON lines over pipes (`plugin_worker.py`, embedded in the binary and
//!   run as `python3 -u -c SCRIPT DIR`); one request at a time per worker. What a convert
//!   prints goes to the worker's stderr, which is logged.
//! - **Loading**: at config load only the module's file is looked for (no code runs);
//!   [`PluginHost::verify`] (`silk router check`, and every router start) starts a worker
//!   and instantiates every step's class with its `init`, so a broken class is a config
//!   error with its file and line. A worker loads a step's class the first time it runs it.
//! - **Failures**: a convert that raises fails its task (reason `convert_failed`, the
//!   exception's text in the failure record). A worker that dies or does not answer within
//!   `timeout_ms` is killed and restarted, and the task it held is tried again on the new
//!   worker, up to [`ATTEMPTS`] times in all; a task that kills every worker it meets fails
//!   (recorded, so it can be replayed). A worker that cannot start, or a class that cannot
//!   load, is [`RouterError::Unavailable`]: the task stays with its inbound. Every restart
//!   and failure is counted per class (`/metrics`) and logged with the class name.
//!
//! **Trust**: the plugins folder is named by the router's config or command line, which
//! only the operator writes; nothing a task carries chooses code to run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::error::{ConfigError, RouterError};

/// The worker script, run by the configured Python.
const WORKER: &str = include_str!("plugin_worker.py");
/// How many workers a task may meet before it fails (the first try and two restarts).
pub const ATTEMPTS: u32 = 3;
/// How long a new worker has to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest answer line read from a worker (a converted task).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// `plugins:` of a router config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSettings {
    /// The folder holding the modules (`ic.py` or `ic/__init__.py` for `ic.*`).
    pub dir: PathBuf,
    /// The Python interpreter (default `python3`, looked up on `PATH`).
    pub python: PathBuf,
    /// Worker processes (default 1): tasks are converted by this many at once.
    pub workers: usize,
    /// How long one call may take before its worker is taken for hung and restarted.
    pub timeout: Duration,
}

impl PluginSettings {
    /// The defaults for a folder.
    pub fn new(dir: impl Into<PathBuf>) -> PluginSettings {
        PluginSettings {
            dir: dir.into(),
            python: PathBuf::from("python3"),
            workers: 1,
            timeout: Duration::from_secs(30),
        }
    }
}

/// One convert step run in Python, as registered at config load.
struct Step {
    class: String,
    init: Value,
    /// Where the step is written (file, line, column, rule), for [`PluginHost::verify`].
    origin: ConfigError,
}

/// Counters of one class.
#[derive(Default)]
struct ClassStats {
    converted: AtomicU64,
    raised: AtomicU64,
    restarts: AtomicU64,
    crashed: AtomicU64,
}

/// The Python converts of one config and the workers that run them.
pub(crate) struct PluginHost {
    settings: PluginSettings,
    steps: parking_lot::Mutex<Vec<Arc<Step>>>,
    stats: parking_lot::Mutex<Vec<(String, Arc<ClassStats>)>>,
    workers: Vec<tokio::sync::Mutex<Option<Worker>>>,
    next: AtomicUsize,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A running worker.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    loaded: HashSet<usize>,
    /// The id of the next request; an answer must carry its request's.
    next_id: u64,
}

impl Worker {
    async fn start(settings: &PluginSettings) -> Result<Worker, String> {
        let mut command = Command::new(&settings.python);
        command
            .arg("-u")
            .arg("-c")
            .arg(WORKER)
            .arg(&settings.dir)
            .current_dir(&settings.dir)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C to the router's group does not kill a worker
            // in the middle of a task while the router shuts down gracefully.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| {
            format!(
                "cannot start `{}` in {}: {e}",
                settings.python.display(),
                settings.dir.display()
            )
        })?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the worker's pipes are missing".into());
        };
        tokio::spawn(drain_stderr(stderr, pid));
        let mut worker = Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            loaded: HashSet::new(),
            next_id: 0,
        };
        match worker.read(START_TIMEOUT).await {
            Ok(answer) if answer.get("ready") == Some(&Value::Bool(true)) => {
                let python = answer.get("python").and_then(Value::as_str).unwrap_or("?");
                tracing::info!(
                    worker = pid,
                    python,
                    dir = %settings.dir.display(),
                    "convert worker started"
                );
                Ok(worker)
            }
            Ok(other) => Err(format!(
                "the worker did not say it was ready: {}",
                Value::Object(other)
            )),
            Err(e) => Err(format!("the worker did not start: {e}")),
        }
    }

    async fn read(&mut self, timeout: Duration) -> Result<Map<String, Value>, String> {
        let mut line = Vec::new();
        let read = async {
            let mut limited = (&mut self.stdout).take(MAX_ANSWER_BYTES as u64);
            limited.read_until(b'\n', &mut line).await
        };
        let n = match tokio::time::timeout(timeout, read).await {
            Err(_) => return Err(format!("no answer within {} ms", timeout.as_millis())),
            Ok(Err(e)) => return Err(format!("reading its answer: {e}")),
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            let status = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await
            {
                Ok(Ok(status)) => status.to_string(),
                _ => "no exit status".into(),
            };
            return Err(format!("the worker exited ({status})"));
        }
        if line.last() != Some(&b'\n') {
            return Err(if n >= MAX_ANSWER_BYTES {
                format!("an answer longer than {MAX_ANSWER_BYTES} bytes")
            } else {
                "it stopped in the middle of an answer".to_owned()
            });
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(format!(
                "an answer that is not a JSON object: {}",
                String::from_utf8_lossy(&line[..line.len().min(200)])
            )),
        }
    }

    /// Sends one request (`fields`: the JSON object's members but `id`, without braces) and
    /// reads its answer, which must carry the request's id.
    async fn call(
        &mut self,
        fields: &str,
        timeout: Duration,
    ) -> Result<Map<String, Value>, String> {
        self.next_id += 1;
        let id = self.next_id;
        let line = format!("{{\"id\":{id},{fields}}}\n");
        let write = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Err(_) => return Err(format!("its input blocked for {} ms", timeout.as_millis())),
            Ok(Err(e)) => return Err(format!("writing to it: {e}")),
            Ok(Ok(())) => {}
        }
        let answer = self.read(timeout).await?;
        match answer.get("id").and_then(Value::as_u64) {
            Some(got) if got == id => Ok(answer),
            got => Err(format!(
                "an answer out of step (to request {got:?}, not {id})"
            )),
        }
    }

    async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
    }
}

/// Why a Python convert did not give a task.
pub(crate) enum ConvertFailure {
    /// The convert raised, or every worker that tried the task died: the task fails.
    Failed(String),
    /// No worker could run it now: the task stays with its inbound.
    Unavailable(String),
}

impl PluginHost {
    pub(crate) fn new(settings: PluginSettings) -> PluginHost {
        let workers = (0..settings.workers.max(1))
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        PluginHost {
            settings,
            steps: parking_lot::Mutex::new(Vec::new()),
            stats: parking_lot::Mutex::new(Vec::new()),
            workers,
            next: AtomicUsize::new(0),
        }
    }

    /// The settings in force.
    pub(crate) fn settings(&self) -> &PluginSettings {
        &self.settings
    }

    /// The file that defines module `module` (`a.b` → `a/b.py` or `a/b/__init__.py`), or
    /// why there is none. No code runs.
    pub(crate) fn module_file(&self, class: &str) -> Result<PathBuf, String> {
        let Some((module, attr)) = class.rsplit_once('.') else {
            return Err("a Python convert is named `module.Class`".into());
        };
        let parts: Vec<&str> = module.split('.').collect();
        let identifier = |s: &str| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && s.chars().all(|c| c.is_alphanumeric() || c == '_')
        };
        if !parts.iter().chain([&attr]).all(|p| identifier(p)) {
            return Err(format!("`{class}` is not a Python name (`module.Class`)"));
        }
        let base: PathBuf = parts.iter().collect();
        let candidates = [
            self.settings.dir.join(&base).with_extension("py"),
            self.settings.dir.join(&base).join("__init__.py"),
        ];
        candidates
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or_else(|| {
                format!(
                    "the plugins folder {} has no `{}` or `{}` for module `{module}`",
                    self.settings.dir.display(),
                    rel(&candidates[0], &self.settings.dir),
                    rel(&candidates[1], &self.settings.dir),
                )
            })
    }

    /// Registers a step; its index is what [`PluginHost::convert`] takes.
    pub(crate) fn register(&self, class: &str, init: Value, origin: ConfigError) -> usize {
        {
            let mut stats = self.stats.lock();
            if !stats.iter().any(|(c, _)| c == class) {
                stats.push((class.to_owned(), Arc::default()));
            }
        }
        let mut steps = self.steps.lock();
        steps.push(Arc::new(Step {
            class: class.to_owned(),
            init,
            origin,
        }));
        steps.len() - 1
    }

    fn step(&self, step: usize) -> Option<Arc<Step>> {
        self.steps.lock().get(step).cloned()
    }

    fn class_stats(&self, class: &str) -> Arc<ClassStats> {
        let mut stats = self.stats.lock();
        if let Some((_, s)) = stats.iter().find(|(c, _)| c == class) {
            return s.clone();
        }
        let s: Arc<ClassStats> = Arc::default();
        stats.push((class.to_owned(), s.clone()));
        s
    }

    /// Starts a worker and loads every step's class with its `init`; one config error per
    /// step that does not load (all of them when no worker starts).
    pub(crate) async fn verify(&self) -> Vec<ConfigError> {
        let steps: Vec<Arc<Step>> = self.steps.lock().clone();
        let mut errors = Vec::new();
        if steps.is_empty() {
            return errors;
        }
        let mut slot = self.workers[0].lock().await;
        for (index, step) in steps.iter().enumerate() {
            match self.load(&mut slot, index, step).await {
                Ok(()) => {}
                Err(m) => {
                    let mut error = step.origin.clone();
                    error.message = format!("{}: {m}", error.message);
                    errors.push(error);
                }
            }
        }
        errors
    }

    /// Makes sure the worker in `slot` runs and has loaded `index`. A worker that cannot
    /// start, dies or hangs while loading (killed), or a class that raises while loading
    /// (the worker stays up), is an `Err`: not the task's doing.
    async fn load(
        &self,
        slot: &mut Option<Worker>,
        index: usize,
        step: &Step,
    ) -> Result<(), String> {
        if slot.is_none() {
            *slot = Some(Worker::start(&self.settings).await?);
        }
        let Some(worker) = slot.as_mut() else {
            return Err("no worker".into());
        };
        if worker.loaded.contains(&index) {
            return Ok(());
        }
        let fields = format!(
            "\"op\":\"load\",\"step\":{index},\"class\":{},\"init\":{}",
            Value::from(step.class.as_str()),
            step.init
        );
        let answer = match worker
            .call(&fields, self.settings.timeout.max(START_TIMEOUT))
            .await
        {
            Ok(answer) => answer,
            Err(e) => {
                if let Some(worker) = slot.take() {
                    worker.kill().await;
                }
                return Err(format!(
                    "the worker failed while loading `{}`: {e}",
                    step.class
                ));
            }
        };
        if answer.get("ok") == Some(&Value::Bool(true)) {
            worker.loaded.insert(index);
            return Ok(());
        }
        let error = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no `ok` in the answer");
        Err(format!("cannot load `{}`: {error}", step.class))
    }

    /// Runs step `index` on `task`.
    pub(crate) async fn convert(
        &self,
        index: usize,
        task: &Map<String, Value>,
    ) -> Result<Map<String, Value>, ConvertFailure> {
        let Some(step) = self.step(index) else {
            return Err(ConvertFailure::Unavailable(format!("no step {index}")));
        };
        let stats = self.class_stats(&step.class);
        let task_json = serde_json::to_string(task)
            .map_err(|e| ConvertFailure::Failed(format!("the task is not JSON: {e}")))?;
        let request = format!("\"op\":\"convert\",\"step\":{index},\"task\":{task_json}");
        let n = self.workers.len();
        let mut slot = self.workers[self.next.fetch_add(1, Ordering::Relaxed) % n]
            .lock()
            .await;
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            let answer = match self.load(&mut slot, index, &step).await {
                Err(m) => return Err(ConvertFailure::Unavailable(m)),
                Ok(()) => match slot.as_mut() {
                    Some(worker) => worker.call(&request, self.settings.timeout).await,
                    None => Err("no worker".into()),
                },
            };
            match answer {
                Ok(mut answer) => {
                    if let Some(Value::Object(task)) = answer.remove("task") {
                        stats.converted.fetch_add(1, Ordering::Relaxed);
                        return Ok(task);
                    }
                    stats.raised.fetch_add(1, Ordering::Relaxed);
                    let error = answer
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("an answer with neither `task` nor `error`");
                    let traceback = answer
                        .get("traceback")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    tracing::debug!(
                        class = %step.class,
                        traceback,
                        "convert raised: {error}"
                    );
                    return Err(ConvertFailure::Failed(error.to_owned()));
                }
                Err(fault) => {
                    stats.restarts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        class = %step.class,
                        attempt,
                        "convert worker failed on a task ({fault}); restarting it"
                    );
                    if let Some(worker) = slot.take() {
                        worker.kill().await;
                    }
                    last = fault;
                }
            }
        }
        stats.crashed.fetch_add(1, Ordering::Relaxed);
        Err(ConvertFailure::Failed(format!(
            "the convert worker failed {ATTEMPTS} times on this task; the last time: {last}"
        )))
    }

    /// Each class's counters: tasks converted, raised, worker restarts, tasks crashed.
    pub(crate) fn counters(&self) -> Vec<(String, [u64; 4])> {
        self.stats
            .lock()
            .iter()
            .map(|(class, s)| {
                let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
                (
                    class.clone(),
                    [n(&s.converted), n(&s.raised), n(&s.restarts), n(&s.crashed)],
                )
            })
            .collect()
    }
}

fn rel(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A convert step run in Python.
pub(crate) struct PythonConvert {
    pub host: Arc<PluginHost>,
    pub step: usize,
    pub class: String,
}

/// Copies a worker's stderr to the log, a line (at most 4 KiB of it) at a time, lossily
/// decoded, until the worker closes it: a convert that prints never blocks on a full pipe
/// or fails on a closed one.
async fn drain_stderr(stderr: tokio::process::ChildStderr, pid: u32) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader).take(4096).read_until(b'\n', &mut line).await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                if !text.is_empty() {
                    tracing::info!(worker = pid, "convert worker: {text}");
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::registry::Convert for PythonConvert {
    fn describe(&self) -> String {
        format!(
            "Python convert `{}` from {}",
            self.class,
            self.host.settings().dir.display()
        )
    }

    async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError> {
        // On a task of its own: a caller that goes away (an HTTP client that hung up) must
        // not leave a worker with a request sent and its answer unread.
        let (host, step, input) = (self.host.clone(), self.step, task.clone());
        let result = tokio::spawn(async move { host.convert(step, &input).await })
            .await
            .map_err(|e| RouterError::Unavailable {
                target: format!("convert `{}`", self.class),
                message: format!("the convert task failed: {e}"),
            })?;
        match result {
            Ok(converted) => {
                *task = converted;
                Ok(())
            }
            Err(ConvertFailure::Failed(message)) => Err(RouterError::ConvertFailed {
                class: self.class.clone(),
                message,
            }),
            Err(ConvertFailure::Unavailable(message)) => Err(RouterError::Unavailable {
                target: format!("convert `{}`", self.class),
                message,
            }),
        }
    }
}
