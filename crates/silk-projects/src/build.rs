//! One build of one version: a fresh checkout of the ref, then the project's build — a
//! command run in the checkout (the artifact is the directory, packed) or a container image
//! built by the configured engine (`podman` or `docker`) — with every output line handed to
//! the caller's log, a timeout over the whole build that kills the build's process group,
//! and nothing left behind on failure but the work directory, which the caller removes.
//!
//! Build commands run code on the building machine: only an administrator defines them (the
//! hub's API enforces it). They run without a shell's inherited environment: `PATH`, `HOME`
//! (a directory of the build), `LANG` and the project's `env` only.

use crate::artifact;
use crate::error::ProjectError;
use crate::git::{self, Remote};
use silk_api::projects::{BuildKind, BuildSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;

/// A build's default timeout, ms (30 minutes).
pub const DEFAULT_TIMEOUT_MS: u64 = 30 * 60 * 1000;
/// Longest output line kept, bytes (longer ones are cut).
const MAX_LINE: usize = 8 * 1024;

/// Where a log line of a build comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Silk's own account of the build (checkout, timings, the artifact).
    Silk,
    /// The build's standard output.
    Stdout,
    /// The build's standard error.
    Stderr,
}

impl Stream {
    /// `silk`, `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Silk => "silk",
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Receives a build's log lines, in order per stream.
pub type LogFn = Arc<dyn Fn(Stream, String) + Send + Sync>;

/// The container engine container builds use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    /// The engine's command line program: `podman` (default) or `docker`.
    pub cli: String,
    /// Arguments before the subcommand (`--runtime runc`).
    pub global_args: Vec<String>,
    /// Arguments of `build` (`--network host`, `--ulimit nofile=1024:1024`).
    pub build_args: Vec<String>,
    /// A registry to push images to (`registry.example:5000/team`), so that agents on other
    /// machines can pull them.
    pub registry: Option<String>,
}

impl Default for Engine {
    fn default() -> Self {
        Self {
            cli: "podman".into(),
            global_args: Vec::new(),
            build_args: Vec::new(),
            registry: None,
        }
    }
}

impl Engine {
    /// The local name of a version's image.
    pub fn image_name(project: &str, version: &str) -> String {
        format!("silk/{project}:{version}")
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.cli);
        command.args(&self.global_args);
        command
    }

    /// Removes the images of a project's versions (local and pushed names); errors are
    /// ignored (the image may be gone already).
    pub async fn remove_image(&self, image: &str) {
        let mut names = vec![image.to_owned()];
        if let Some(registry) = &self.registry
            && !image.starts_with(registry.as_str())
        {
            names.push(format!("{registry}/{image}"));
        }
        for name in names {
            let _ = self
                .command()
                .args(["rmi", "--force", &name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .status()
                .await;
        }
    }
}

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildJob {
    /// The project's name.
    pub project: String,
    /// The version.
    pub version: String,
    /// The repository.
    pub remote: Remote,
    /// A full ref (`refs/tags/…`) or a commit id.
    pub revision: String,
    /// The commit the webhook announced: the checkout must be at it (a tag that moved since is
    /// refused with the reason).
    pub expect_commit: Option<String>,
    /// The build.
    pub spec: BuildSpec,
    /// A fresh directory for this build (checkout, home); the caller removes it.
    pub work_dir: PathBuf,
}

/// What a build made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The packed directory.
    Dir {
        /// The packed file (in the work directory).
        path: PathBuf,
        /// Its SHA-256, hex.
        sha256: String,
        /// Its size.
        bytes: u64,
    },
    /// A container image.
    Image {
        /// Its name.
        image: String,
        /// The engine's id of it.
        id: String,
    },
}

/// A finished build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The commit built.
    pub commit: String,
    /// What it made.
    pub output: Output,
}

/// Checks a build spec (what the API accepts): the fields of its kind only, relative paths
/// inside the checkout, environment names, a timeout of at least a second.
pub fn check_spec(spec: &BuildSpec) -> Result<(), ProjectError> {
    let bad = |what: &str, reason: String| ProjectError::Invalid {
        what: format!("build.{what}"),
        reason,
    };
    match spec.kind {
        BuildKind::Command => {
            for (field, set) in [
                ("containerfile", spec.containerfile.is_some()),
                ("context", spec.context.is_some()),
            ] {
                if set {
                    return Err(bad(field, "only for `kind: container` builds".into()));
                }
            }
            if let Some(command) = &spec.command
                && command.trim().is_empty()
            {
                return Err(bad("command", "is empty".into()));
            }
        }
        BuildKind::Container => {
            if spec.command.is_some() {
                return Err(bad(
                    "command",
                    "only for `kind: command` builds (a container build runs its container file)"
                        .into(),
                ));
            }
            for (field, path) in [
                ("containerfile", &spec.containerfile),
                ("context", &spec.context),
            ] {
                if let Some(path) = path {
                    check_relative(path).map_err(|reason| bad(field, reason))?;
                }
            }
        }
    }
    if let Some(ms) = spec.timeout_ms
        && !(1000..=24 * 3600 * 1000).contains(&ms)
    {
        return Err(bad(
            "timeout_ms",
            format!("{ms} is not between 1000 and 86400000"),
        ));
    }
    for key in spec.env.keys() {
        let ok = key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(bad(
                "env",
                format!("`{}` is not a variable name", crate::shown(key)),
            ));
        }
    }
    Ok(())
}

/// A path that stays inside the checkout.
fn check_relative(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if path.is_empty()
        || p.is_absolute()
        || p.components().any(|c| {
            !matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        })
    {
        Err(format!(
            "`{}` must be a relative path inside the checkout (no `..`)",
            crate::shown(path)
        ))
    } else {
        Ok(())
    }
}

/// Runs `job`: checkout, build, artifact. `log` gets every line. The whole build is bounded by
/// the spec's timeout; a build over it is killed with its process group.
pub async fn build(job: BuildJob, engine: &Engine, log: LogFn) -> Result<Built, ProjectError> {
    let timeout_ms = job.spec.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    let interrupt = Arc::new(AtomicBool::new(false));
    let result = tokio::time::timeout(
        Duration::from_millis(timeout_ms),
        build_inner(&job, engine, &log, interrupt.clone()),
    )
    .await;
    match result {
        Ok(result) => result,
        Err(_) => {
            interrupt.store(true, Ordering::Relaxed);
            Err(ProjectError::Build(format!(
                "the build took longer than its timeout ({timeout_ms} ms): killed"
            )))
        }
    }
}

async fn build_inner(
    job: &BuildJob,
    engine: &Engine,
    log: &LogFn,
    interrupt: Arc<AtomicBool>,
) -> Result<Built, ProjectError> {
    let started = std::time::Instant::now();
    let src = job.work_dir.join("src");
    let home = job.work_dir.join("home");
    std::fs::create_dir_all(&home).map_err(|e| ProjectError::io(&home, e))?;
    log(
        Stream::Silk,
        format!(
            "fetching {} at {}",
            git::redact_url(&job.remote.url),
            job.revision
        ),
    );
    if job.remote.url.starts_with("http://") && job.remote.password.is_some() {
        log(
            Stream::Silk,
            "warning: the password is sent in clear text over http://; use https://".into(),
        );
    }
    let checked = {
        let remote = job.remote.clone();
        let revision = job.revision.clone();
        let src = src.clone();
        tokio::task::spawn_blocking(move || git::checkout(&remote, &revision, &src, &interrupt))
            .await
            .map_err(|e| ProjectError::Git(format!("the checkout task failed: {e}")))??
    };
    let commit = checked.commit.clone();
    log(
        Stream::Silk,
        format!(
            "checked out {commit} in {} ms",
            started.elapsed().as_millis()
        ),
    );
    if let Some(expected) = &job.expect_commit
        && !checked.was_at(expected)
    {
        return Err(ProjectError::Git(format!(
            "{} now points at {commit}, not at {expected} as the webhook said: the tag moved \
             (force-pushed) since; push the tag again or build by hand",
            job.revision
        )));
    }
    let env = build_env(&job.spec.env, &home);
    let output = match job.spec.kind {
        BuildKind::Command => {
            if let Some(command) = &job.spec.command {
                log(Stream::Silk, "running the build command".into());
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(command).current_dir(&src);
                run_logged(cmd, &env, log, "the build command").await?;
            }
            let packed = job.work_dir.join("artifact.tar.zst");
            let (src2, packed2) = (src.clone(), packed.clone());
            let (sha256, bytes) =
                tokio::task::spawn_blocking(move || artifact::pack(&src2, &packed2))
                    .await
                    .map_err(|e| ProjectError::Build(format!("the packing task failed: {e}")))??;
            log(
                Stream::Silk,
                format!("packed the directory: {bytes} bytes, sha256 {sha256}"),
            );
            Output::Dir {
                path: packed,
                sha256,
                bytes,
            }
        }
        BuildKind::Container => container_build(job, engine, &src, &env, log).await?,
    };
    log(
        Stream::Silk,
        format!("built in {} ms", started.elapsed().as_millis()),
    );
    Ok(Built { commit, output })
}

async fn container_build(
    job: &BuildJob,
    engine: &Engine,
    src: &Path,
    env: &BTreeMap<String, String>,
    log: &LogFn,
) -> Result<Output, ProjectError> {
    let image = Engine::image_name(&job.project, &job.version);
    let file = match &job.spec.containerfile {
        Some(file) => file.clone(),
        None if src.join("Containerfile").exists() => "Containerfile".into(),
        None => "Dockerfile".into(),
    };
    if !src.join(&file).is_file() {
        return Err(ProjectError::Build(format!(
            "no container file `{file}` in the checkout (set build.containerfile)"
        )));
    }
    let context = job.spec.context.clone().unwrap_or_else(|| ".".into());
    let mut cmd = engine.command();
    cmd.arg("build").args(["-t", &image, "-f", &file]);
    cmd.args(&engine.build_args);
    for (k, v) in &job.spec.env {
        cmd.arg("--build-arg").arg(format!("{k}={v}"));
    }
    cmd.arg(&context).current_dir(src);
    log(
        Stream::Silk,
        format!("{} build -t {image} -f {file} {context}", engine.cli),
    );
    run_logged(cmd, env, log, &format!("{} build", engine.cli)).await?;
    let mut inspect = engine.command();
    inspect.args(["image", "inspect", "--format", "{{.Id}}", &image]);
    let id = capture(inspect, env, &format!("{} image inspect", engine.cli)).await?;
    let mut name = image.clone();
    if let Some(registry) = &engine.registry {
        let remote = format!("{registry}/{image}");
        let mut tag = engine.command();
        tag.args(["tag", &image, &remote]);
        run_logged(tag, env, log, &format!("{} tag", engine.cli)).await?;
        let mut push = engine.command();
        push.args(["push", &remote]);
        log(Stream::Silk, format!("pushing {remote}"));
        run_logged(push, env, log, &format!("{} push", engine.cli)).await?;
        name = remote;
    }
    log(Stream::Silk, format!("image {name} ({id})"));
    Ok(Output::Image { image: name, id })
}

/// The build's environment: a minimal one plus the project's.
fn build_env(project_env: &BTreeMap<String, String>, home: &Path) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
    );
    env.insert("HOME".to_owned(), home.display().to_string());
    env.insert("LANG".to_owned(), "C.UTF-8".to_owned());
    // Container engines keep their state under the user's directories: they need the real
    // ones (they build in their own sandbox).
    for key in [
        "XDG_RUNTIME_DIR",
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
        "DOCKER_HOST",
    ] {
        if let Ok(v) = std::env::var(key) {
            env.insert(key.to_owned(), v);
        }
    }
    env.extend(project_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Kills a build's process group when dropped (the build ended, timed out or was
/// cancelled), so no grandchild outlives it.
struct GroupGuard(Option<rustix::process::Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

fn spawn(
    mut cmd: Command,
    env: &BTreeMap<String, String>,
    what: &str,
) -> Result<(tokio::process::Child, GroupGuard), ProjectError> {
    cmd.env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| ProjectError::Build(format!("{what} could not start: {e}")))?;
    let guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw),
    );
    Ok((child, guard))
}

/// Runs `cmd` in its own process group, handing each output line to `log`; an exit other
/// than 0 is an error naming `what`.
async fn run_logged(
    cmd: Command,
    env: &BTreeMap<String, String>,
    log: &LogFn,
    what: &str,
) -> Result<(), ProjectError> {
    let (mut child, _guard) = spawn(cmd, env, what)?;
    let out = child
        .stdout
        .take()
        .map(|s| forward(s, Stream::Stdout, log.clone()));
    let err = child
        .stderr
        .take()
        .map(|s| forward(s, Stream::Stderr, log.clone()));
    let status = child
        .wait()
        .await
        .map_err(|e| ProjectError::Build(format!("{what}: {e}")))?;
    for task in [out, err].into_iter().flatten() {
        let _ = task.await;
    }
    if status.success() {
        Ok(())
    } else {
        Err(ProjectError::Build(match status.code() {
            Some(code) => format!("{what} exited with status {code}"),
            None => format!("{what} was killed by a signal"),
        }))
    }
}

/// Runs `cmd` in its own process group with exactly `env` (stdin closed) and returns its
/// trimmed standard output; an exit other than 0 is an error with the end of its error
/// output. Dropping the future kills the whole group (a caller's timeout does). `what`
/// names the command in errors.
pub async fn capture(
    cmd: Command,
    env: &BTreeMap<String, String>,
    what: &str,
) -> Result<String, ProjectError> {
    let (child, _guard) = spawn(cmd, env, what)?;
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| ProjectError::Build(format!("{what}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        let mut err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        silk_core::text::truncate(&mut err, 500);
        Err(ProjectError::Build(format!("{what} failed: {err}")))
    }
}

/// Reads lines of `from` into `log` until it closes.
fn forward(
    from: impl AsyncRead + Unpin + Send + 'static,
    stream: Stream,
    log: LogFn,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                        line.pop();
                    }
                    let mut text = String::from_utf8_lossy(&line).into_owned();
                    silk_core::text::truncate(&mut text, MAX_LINE);
                    log(stream, text);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: BuildKind) -> BuildSpec {
        BuildSpec {
            kind,
            command: None,
            containerfile: None,
            context: None,
            timeout_ms: None,
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn specs_are_checked_field_by_field() {
        check_spec(&spec(BuildKind::Command)).unwrap();
        let mut s = spec(BuildKind::Command);
        s.context = Some("x".into());
        assert!(
            check_spec(&s)
                .unwrap_err()
                .to_string()
                .starts_with("build.context")
        );
        let mut s = spec(BuildKind::Container);
        s.containerfile = Some("../Dockerfile".into());
        assert!(
            check_spec(&s)
                .unwrap_err()
                .to_string()
                .contains("inside the checkout")
        );
        let mut s = spec(BuildKind::Container);
        s.command = Some("make".into());
        assert!(
            check_spec(&s)
                .unwrap_err()
                .to_string()
                .starts_with("build.command")
        );
        let mut s = spec(BuildKind::Command);
        s.env.insert("A-B".into(), "x".into());
        assert!(
            check_spec(&s)
                .unwrap_err()
                .to_string()
                .starts_with("build.env")
        );
        let mut s = spec(BuildKind::Command);
        s.timeout_ms = Some(5);
        assert!(
            check_spec(&s)
                .unwrap_err()
                .to_string()
                .starts_with("build.timeout_ms")
        );
    }
}
