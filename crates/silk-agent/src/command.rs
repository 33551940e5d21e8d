//! External commands of a run: the proxy provider and the ADSL re-dial. A command runs with
//! `sh -c` (a string) or as program + arguments (a list), with stdin closed, `SILK_RUN_ID`
//! in its environment and a hard timeout after which it is killed.
//!
//! It must never block the runtime (tokio::process) nor outlive its timeout (killed on
//! drop), and its failures are errors naming the run and the command, never panics.

use crate::downloader_config::CommandSpec;
use crate::error::AgentError;
use silk_core::RunId;
use std::process::Stdio;
use std::time::Duration;

/// Runs `spec` for `run` and returns its stdout (lossy UTF-8) if it exits with success
/// within `timeout_ms`.
pub(crate) async fn run_command(
    run: &RunId,
    what: &'static str,
    spec: &CommandSpec,
    timeout_ms: u64,
) -> Result<String, AgentError> {
    let fail = |reason: String| AgentError::Command {
        run: run.clone(),
        what,
        command: spec.to_string(),
        reason,
    };
    let mut cmd = match spec {
        CommandSpec::Shell(line) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(line);
            c
        }
        CommandSpec::Argv(argv) => {
            let Some((program, args)) = argv.split_first() else {
                return Err(fail("empty command".into()));
            };
            let mut c = tokio::process::Command::new(program);
            c.args(args);
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("SILK_RUN_ID", run.as_str())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| fail(format!("could not start: {e}")))?;
    let output =
        match tokio::time::timeout(Duration::from_millis(timeout_ms), child.wait_with_output())
            .await
        {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(fail(format!("could not be waited for: {e}"))),
            Err(_) => return Err(fail(format!("timed out after {timeout_ms} ms (killed)"))),
        };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first: String = stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        return Err(fail(if first.is_empty() {
            format!("exited with {}", output.status)
        } else {
            format!("exited with {}: {first}", output.status)
        }));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::new("r-1")
    }

    #[tokio::test]
    async fn shell_and_argv_forms() {
        let out = run_command(
            &run(),
            "redial",
            &CommandSpec::Shell("echo $SILK_RUN_ID".into()),
            5_000,
        )
        .await
        .unwrap();
        assert_eq!(out.trim(), "r-1");
        let out = run_command(
            &run(),
            "redial",
            &CommandSpec::Argv(vec!["printf".into(), "%s|".into(), "a b".into()]),
            5_000,
        )
        .await
        .unwrap();
        assert_eq!(out, "a b|");
    }

    #[tokio::test]
    async fn failures_name_run_command_and_cause() {
        let err = run_command(
            &run(),
            "redial",
            &CommandSpec::Shell("echo nope >&2; exit 3".into()),
            5_000,
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
            &CommandSpec::Argv(vec!["/nonexistent/x".into()]),
            5_000,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("could not start"), "{err}");
        let err = run_command(&run(), "redial", &CommandSpec::Shell("sleep 5".into()), 50)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("timed out after 50 ms"), "{err}");
    }
}
