//! External commands of a run (the proxy provider and the ADSL re-dial): which ones this
//! agent runs ([`CommandPolicy`]), and how it runs them ([`run_command`]).
//!
//! **Which.** A run's config names a command (`{"command": NAME}`: one the agent's admin
//! defined, [`CommandDef`], in `AgentConfig::commands`) or carries a raw one (a program and
//! arguments, or a shell line). A raw command is refused unless the agent was configured to
//! allow raw commands (`AgentConfig::allow_raw_commands`, off by default): whatever a hub
//! or anyone else on the bus sends, nothing runs here that this machine's admin did not
//! allow. The hub also refuses raw commands from non-admin tokens (`silk_core::command`).
//!
//! **How.** Without a shell unless one was asked for (a shell line), in a process group of
//! its own, with stdin closed and a minimal environment (`PATH`, `LANG`, `SILK_RUN_ID`,
//! plus the definition's `env`: nothing of the agent's own environment leaks in), with a
//! hard timeout after which the whole group is killed — also when the run's task is
//! dropped, and its leftovers (background children) when it exits. Its stdout is read up to
//! [`MAX_STDOUT_BYTES`] (more is a failure), its stderr up to a smaller cap for the message.
//!
//! It must never block the runtime (tokio::process), and its failures are errors naming
//! the run and the command, never panics. Logs name a command by its name or its program,
//! never its arguments or environment (they may hold secrets).

use crate::error::AgentError;
use serde::{Deserialize, Serialize};
use silk_core::{CommandSpec, RunId};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The most a command may print on stdout.
pub const MAX_STDOUT_BYTES: usize = 1 << 20;
/// The part of stderr kept for an error message.
const MAX_STDERR_BYTES: usize = 16 << 10;
/// The `PATH` a command gets.
const COMMAND_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A command an agent's admin defined under a name (a table of the `--commands` file):
/// exactly one of `argv` and `shell`.
///
/// ```toml
/// [proxies-cn]
/// argv = ["/usr/local/bin/proxies", "--country", "cn"]
/// env = { PROXY_VENDOR_KEY = "…" }
///
/// [redial-adsl]
/// shell = "pppoe-stop && pppoe-start"
/// timeout_ms = 90000
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandDef {
    /// Program and arguments, run without a shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// A line run with `sh -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// How long it may run; default: the run's (`provider_timeout_ms`, `redial.timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Environment variables it gets besides `PATH`, `LANG` and `SILK_RUN_ID`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for CommandDef {
    // The arguments and the environment may hold secrets: only their shape is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandDef")
            .field("program", &self.program())
            .field("shell", &self.shell.is_some())
            .field("timeout_ms", &self.timeout_ms)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl CommandDef {
    fn program(&self) -> &str {
        match (&self.argv, &self.shell) {
            (Some(argv), _) => argv.first().map_or("", String::as_str),
            (None, Some(line)) => line.split_whitespace().next().unwrap_or(""),
            (None, None) => "",
        }
    }

    /// Every problem of the definition named `name`, each naming its key.
    pub fn problems(&self, name: &str) -> Vec<String> {
        let mut p = Vec::new();
        let at = format!("commands.{name}");
        if let Some(problem) = CommandSpec::Named(name.to_owned()).problem() {
            p.push(format!("{at}: {problem}"));
        }
        match (&self.argv, &self.shell) {
            (Some(_), Some(_)) => p.push(format!("{at}: give either argv or shell, not both")),
            (None, None) => p.push(format!("{at}: give argv (program and arguments) or shell")),
            (Some(argv), None) if argv.first().is_none_or(|a| a.trim().is_empty()) => {
                p.push(format!(
                    "{at}.argv: empty (the list starts with the program)"
                ));
            }
            (None, Some(line)) if line.trim().is_empty() => {
                p.push(format!("{at}.shell: empty command"));
            }
            _ => {}
        }
        if self.timeout_ms == Some(0) {
            p.push(format!("{at}.timeout_ms: must be at least 1"));
        }
        for key in self.env.keys() {
            let ok = !key.is_empty()
                && !key.contains('=')
                && !key.contains('\0')
                && !matches!(key.as_str(), "PATH" | "SILK_RUN_ID");
            if !ok {
                p.push(format!(
                    "{at}.env: `{key}` cannot be set (not empty, no `=`, not PATH or SILK_RUN_ID)"
                ));
            }
        }
        p
    }
}

/// Which commands an agent runs: the named ones its admin defined, and raw ones only when
/// allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandPolicy {
    /// The named commands.
    pub defined: BTreeMap<String, CommandDef>,
    /// Whether raw commands (sent in a run's config) may run.
    pub allow_raw: bool,
}

/// What to execute.
#[derive(Clone, PartialEq, Eq)]
enum Program {
    Shell(String),
    Argv(Vec<String>),
}

/// A command resolved against the policy: what runs, for how long, with what environment.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ResolvedCommand {
    /// For errors and logs (`CommandSpec::log_label`): never the arguments.
    label: String,
    program: Program,
    pub(crate) timeout_ms: u64,
    env: BTreeMap<String, String>,
}

impl ResolvedCommand {
    /// Its name, or its program: never its arguments.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }
}

impl std::fmt::Debug for ResolvedCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

impl CommandPolicy {
    /// The command `spec` of a run stands for, or why it may not run here (`field` is its
    /// key in the run's config, e.g. `proxies.provider`); `run_timeout_ms` is the run's
    /// timeout for it.
    pub(crate) fn resolve(
        &self,
        field: &str,
        spec: &CommandSpec,
        run_timeout_ms: u64,
    ) -> Result<ResolvedCommand, String> {
        if let Some(problem) = spec.problem() {
            return Err(format!("{field}: {problem}"));
        }
        let label = spec.log_label();
        match spec {
            CommandSpec::Named(name) => {
                let def = self.defined.get(name).ok_or_else(|| {
                    let known: Vec<&str> = self.defined.keys().map(String::as_str).collect();
                    format!(
                        "{field}: no command `{name}` is defined on this agent (defined: {})",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    )
                })?;
                let program = match (&def.argv, &def.shell) {
                    (Some(argv), _) => Program::Argv(argv.clone()),
                    (None, Some(line)) => Program::Shell(line.clone()),
                    (None, None) => {
                        return Err(format!("{field}: command `{name}` has nothing to run"));
                    }
                };
                Ok(ResolvedCommand {
                    label,
                    program,
                    timeout_ms: def.timeout_ms.unwrap_or(run_timeout_ms),
                    env: def.env.clone(),
                })
            }
            CommandSpec::Shell(_) | CommandSpec::Argv(_) if !self.allow_raw => Err(format!(
                "{field}: raw commands are not allowed on this agent; refer to a command its \
                 admin defined, as {{\"command\": NAME}} (`silk agent --commands FILE`), or \
                 start the agent with --allow-raw-commands"
            )),
            CommandSpec::Shell(line) => Ok(ResolvedCommand {
                label,
                program: Program::Shell(line.clone()),
                timeout_ms: run_timeout_ms,
                env: BTreeMap::new(),
            }),
            CommandSpec::Argv(argv) => Ok(ResolvedCommand {
                label,
                program: Program::Argv(argv.clone()),
                timeout_ms: run_timeout_ms,
                env: BTreeMap::new(),
            }),
        }
    }
}

/// Kills a command's process group when dropped: on a timeout, when the run's task is
/// dropped, and after the command exits (background children it left behind).
struct GroupGuard(Option<rustix::process::Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // ESRCH (the group is gone already) is the usual answer.
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

/// Reads up to `cap` bytes; the bytes kept and whether more came. With `drain`, the rest is
/// read and dropped (so that the command is never blocked on a full pipe); without, reading
/// stops there (the pipe closes: a command that goes on writing gets `SIGPIPE`).
async fn read_capped(mut from: impl AsyncRead + Unpin, cap: usize, drain: bool) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut over = false;
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                over |= n > room;
                if over && !drain {
                    break;
                }
            }
        }
    }
    (kept, over)
}

/// Runs `command` for `run` and returns its stdout (lossy UTF-8) if it exits with success
/// within its timeout.
pub(crate) async fn run_command(
    run: &RunId,
    what: &'static str,
    command: &ResolvedCommand,
) -> Result<String, AgentError> {
    let fail = |reason: String| AgentError::Command {
        run: run.clone(),
        what,
        command: command.label.clone(),
        reason,
    };
    let mut cmd = match &command.program {
        Program::Shell(line) => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c").arg(line);
            c
        }
        Program::Argv(argv) => {
            let Some((program, args)) = argv.split_first() else {
                return Err(fail("empty command".into()));
            };
            let mut c = tokio::process::Command::new(program);
            c.args(args);
            c
        }
    };
    cmd.env_clear()
        .env("PATH", COMMAND_PATH)
        .env("LANG", "C.UTF-8")
        .envs(&command.env)
        .env("SILK_RUN_ID", run.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    tracing::info!(run = %run, what, command = %command.label, timeout_ms = command.timeout_ms, "running a command");
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("could not start: {e}")))?;
    // The child leads its own group: its id is the group's.
    let _group = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw),
    );
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(fail("its output could not be read".into()));
    };
    let timeout_ms = command.timeout_ms;
    let finished = tokio::time::timeout(Duration::from_millis(timeout_ms), async {
        let (out, err, status) = tokio::join!(
            read_capped(stdout, MAX_STDOUT_BYTES, false),
            read_capped(stderr, MAX_STDERR_BYTES, true),
            child.wait()
        );
        (out, err, status)
    })
    .await;
    let ((stdout, stdout_over), (stderr, _), status) = match finished {
        Ok(done) => done,
        Err(_) => return Err(fail(format!("timed out after {timeout_ms} ms (killed)"))),
    };
    if stdout_over {
        return Err(fail(format!(
            "printed more than {MAX_STDOUT_BYTES} bytes on stdout"
        )));
    }
    let status = status.map_err(|e| fail(format!("could not be waited for: {e}")))?;
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let first: String = stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        return Err(fail(if first.is_empty() {
            format!("exited with {status}")
        } else {
            format!("exited with {status}: {first}")
        }));
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::new("r-1")
    }

    fn raw_allowed() -> CommandPolicy {
        CommandPolicy {
            allow_raw: true,
            ..CommandPolicy::default()
        }
    }

    fn resolve(policy: &CommandPolicy, spec: CommandSpec, timeout_ms: u64) -> ResolvedCommand {
        policy.resolve("redial.command", &spec, timeout_ms).unwrap()
    }

    #[tokio::test]
    async fn shell_and_argv_forms() {
        let p = raw_allowed();
        let out = run_command(
            &run(),
            "redial",
            &resolve(&p, CommandSpec::Shell("echo $SILK_RUN_ID".into()), 5_000),
        )
        .await
        .unwrap();
        assert_eq!(out.trim(), "r-1");
        let out = run_command(
            &run(),
            "redial",
            &resolve(
                &p,
                CommandSpec::Argv(vec!["printf".into(), "%s|".into(), "a b".into()]),
                5_000,
            ),
        )
        .await
        .unwrap();
        assert_eq!(out, "a b|");
    }

    #[tokio::test]
    async fn failures_name_run_command_and_cause() {
        let p = raw_allowed();
        let err = run_command(
            &run(),
            "redial",
            &resolve(
                &p,
                CommandSpec::Shell("echo nope >&2; exit 3".into()),
                5_000,
            ),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("run `r-1`") && err.contains("redial command") && err.contains("nope"),
            "{err}"
        );
        let err = run_command(
            &run(),
            "proxy provider",
            &resolve(&p, CommandSpec::Argv(vec!["/nonexistent/x".into()]), 5_000),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("could not start"), "{err}");
        let err = run_command(
            &run(),
            "redial",
            &resolve(&p, CommandSpec::Shell("sleep 5".into()), 50),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("timed out after 50 ms"), "{err}");
        let err = run_command(
            &run(),
            "proxy provider",
            &resolve(&p, CommandSpec::Shell("yes".into()), 10_000),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("more than 1048576 bytes"), "{err}");
    }

    #[test]
    fn raw_commands_are_refused_unless_allowed_named_ones_resolve() {
        let mut policy = CommandPolicy::default();
        let raw = CommandSpec::Shell("touch pwned".into());
        let err = policy.resolve("proxies.provider", &raw, 10).unwrap_err();
        assert!(
            err.starts_with("proxies.provider: raw commands are not allowed"),
            "{err}"
        );
        let named = CommandSpec::Named("p".into());
        let err = policy.resolve("proxies.provider", &named, 10).unwrap_err();
        assert!(
            err.contains("no command `p` is defined") && err.contains("none"),
            "{err}"
        );
        policy.defined.insert(
            "p".into(),
            CommandDef {
                argv: Some(vec!["echo".into()]),
                timeout_ms: Some(7),
                ..CommandDef::default()
            },
        );
        let resolved = policy.resolve("proxies.provider", &named, 10).unwrap();
        assert_eq!(resolved.timeout_ms, 7);
        assert_eq!(format!("{resolved:?}"), "`p`");
    }

    #[test]
    fn definitions_are_checked() {
        let both = CommandDef {
            argv: Some(vec!["a".into()]),
            shell: Some("b".into()),
            ..CommandDef::default()
        };
        assert!(both.problems("x")[0].contains("not both"));
        assert!(CommandDef::default().problems("x")[0].contains("give argv"));
        let bad = CommandDef {
            argv: Some(vec![String::new()]),
            timeout_ms: Some(0),
            env: [("PATH".to_owned(), "/tmp".to_owned())].into(),
            ..CommandDef::default()
        };
        assert_eq!(
            bad.problems("bad name").len(),
            4,
            "{:?}",
            bad.problems("bad name")
        );
        let secret = CommandDef {
            argv: Some(vec!["prog".into(), "--key=s3cret".into()]),
            env: [("KEY".to_owned(), "s3cret".to_owned())].into(),
            ..CommandDef::default()
        };
        assert!(!format!("{secret:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn the_environment_is_minimal_and_the_definitions_env_is_added() {
        let mut policy = CommandPolicy::default();
        policy.defined.insert(
            "env".into(),
            CommandDef {
                argv: Some(vec!["env".into()]),
                env: [("VENDOR".to_owned(), "v1".to_owned())].into(),
                ..CommandDef::default()
            },
        );
        let resolved = resolve(&policy, CommandSpec::Named("env".into()), 5_000);
        let out = run_command(&run(), "proxy provider", &resolved)
            .await
            .unwrap();
        let mut names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["LANG", "PATH", "SILK_RUN_ID", "VENDOR"], "{out}");
        assert!(out.contains("VENDOR=v1"));
    }

    /// Whether process `pid` is gone (or a zombie waiting for its reaper).
    fn gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // The shell starts a background child, records its pid, and waits past the timeout.
        let line = format!("sleep 30 & echo $! > '{}'; wait", pid_file.display());
        let resolved = resolve(&raw_allowed(), CommandSpec::Shell(line), 300);
        let err = run_command(&run(), "redial", &resolved).await.unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let pid = pid.trim();
        assert!(!pid.is_empty());
        // SIGKILL was sent to the group before run_command returned; the kernel takes the
        // process down asynchronously, so wait for that event (bounded).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !gone(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the background child {pid} outlived the timeout"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
