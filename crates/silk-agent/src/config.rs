//! [`AgentConfig`]: how one agent process runs (its id, capacity, data dir, intervals and
//! retries), and how its id is chosen when none is given.
//!
//! Plain data with defaults, loadable from a file or flags by the binary; [`AgentConfig::problems`]
//! lists every invalid value at once. What a *run's* downloader does is not here: that is
//! [`crate::DownloaderConfig`], which arrives with each `allocate` command.
//!
//! **Invariant:** an agent's id is stable across restarts on the same data dir (a generated
//! id is written to `{data_dir}/agent-id`), because the bus keeps the commands sent while the
//! agent was away under that id, and the hub's allocations name it.

use crate::command::{CommandDef, CommandPolicy};
use crate::error::AgentError;
use crate::store::write_atomic;
use serde::{Deserialize, Serialize};
use silk_bus::{LogLevel, Subject, TtlPolicy};
use silk_core::AgentId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The name of the file in the data dir that keeps a generated agent id.
pub const AGENT_ID_FILE: &str = "agent-id";

/// How one agent runs. Durations are in ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent's id (`[A-Za-z0-9_-]{1,128}`: it becomes a bus subject token). `None`: the
    /// id kept in `{data_dir}/agent-id`, or a new one (`{host name}-{8 hex digits}`) written
    /// there.
    pub id: Option<AgentId>,
    /// Labels sent with the registration (`pool=cn`, `net=adsl`, …).
    pub labels: BTreeMap<String, String>,
    /// Requests fetched at once, all runs together (sent with the registration).
    pub capacity: u32,
    /// Where the agent keeps its id and its allocations file; created if missing.
    pub data_dir: PathBuf,
    /// Time between heartbeats; a heartbeat's TTL on the bus is three of these.
    pub heartbeat_interval_ms: u64,
    /// TTL on the bus of this agent's allocation replies (as the hub's `allocate` commands).
    pub allocated_ttl_ms: u64,
    /// TTL on the bus of this agent's run log batches.
    pub log_ttl_ms: u64,
    /// A downloader not used for longer than this is released.
    pub downloader_idle_ms: u64,
    /// How often idle downloaders are looked for.
    pub idle_check_ms: u64,
    /// Publishes of one result after the first failed one (each is itself retried by the
    /// bus's own retry policy); then the result is dropped and logged, and the hub's lease
    /// expires and re-dispatches the request. Allocation replies and run log batches are
    /// retried as many times, then dropped.
    pub result_publish_retries: u32,
    /// First wait after a failed registration, heartbeat, subscription or result publish;
    /// doubled after each further failure.
    pub backoff_initial_ms: u64,
    /// Longest such wait.
    pub backoff_max_ms: u64,
    /// The window of the QPS reported in heartbeats.
    pub qps_window_ms: u64,
    /// On shutdown, how long requests being fetched may take to finish and publish their
    /// results; requests still waiting for a slot get an `agent_stopping` result at once.
    pub shutdown_grace_ms: u64,
    /// The version sent with the registration.
    pub version: String,
    /// Run log lines waiting to be published, all runs together; a line written while the
    /// queue is full is dropped and counted, and its run's next batch says how many were.
    pub log_queue_lines: usize,
    /// A run's log lines are published as soon as this many wait (one bus message)…
    pub log_batch_lines: usize,
    /// …and at least this often.
    pub log_flush_ms: u64,
    /// Longest run log line (bytes of its message); a longer one is cut at a character
    /// boundary and marked `… [truncated]`. At least 64.
    pub log_line_max_bytes: usize,
    /// Run log lines below this level (`trace`, `debug`, `info`, `warn`, `error`) are not
    /// sent.
    pub log_level: LogLevel,
    /// Commands this machine's admin defined, by name: a run refers to one as
    /// `{"command": NAME}` (`silk agent --commands FILE`).
    pub commands: BTreeMap<String, CommandDef>,
    /// Whether a run may carry a raw command (a program or shell line of its own) for this
    /// agent to run. Off by default: then only named commands run here, whatever the hub
    /// sends (`silk agent --allow-raw-commands`; `silk up`'s local agents allow them, as
    /// their hub, in the same process, refuses raw commands from non-admin tokens).
    pub allow_raw_commands: bool,
    /// Whether this agent runs the programs of program runs (project versions: processes or
    /// containers). Off by default (`silk agent --allow-programs`; `silk up`'s local agents
    /// allow them, as only admins define projects and program runs).
    pub allow_programs: bool,
    /// Most bytes of program versions kept unpacked (least recently started evicted first).
    pub program_cache_bytes: u64,
    /// The container engine's client for `container` programs (`podman`, `docker`).
    pub container_cli: String,
    /// Arguments of the engine before its subcommand (e.g. `--runtime=runc`).
    pub container_args: Vec<String>,
    /// Detach mode: an agent that has heard from no hub (no beacon on `hubs`, no command) for
    /// this long stops its downloads and program workers and drops its allocations, so that
    /// nothing runs up costs while no hub is there; it registers again when a hub is heard.
    /// 0 = never detach. At least twice `heartbeat_interval_ms` otherwise (hubs beacon every
    /// heartbeat interval).
    pub detach_after_ms: u64,
    /// Address ranges that runs' fetches may reach although private. Runs on an agent never
    /// reach loopback, link-local (cloud metadata at 169.254.169.254), RFC 1918, CGNAT,
    /// ULA, unspecified or multicast addresses — checked on the addresses connected to,
    /// after DNS, for sites and proxies — except in these ranges (`silk agent
    /// --allow-network 10.1.0.0/16`; `0.0.0.0/0` and `::/0` open everything). A refused
    /// request fails with `private_address`.
    pub allow_networks: Vec<silk_core::net::IpNet>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            id: None,
            labels: BTreeMap::new(),
            capacity: 64,
            data_dir: PathBuf::from("silk-agent"),
            heartbeat_interval_ms: 1_000,
            allocated_ttl_ms: TtlPolicy::default().allocate_ttl_ms,
            log_ttl_ms: TtlPolicy::default().log_ttl_ms,
            downloader_idle_ms: 600_000,
            idle_check_ms: 1_000,
            result_publish_retries: 3,
            backoff_initial_ms: 100,
            backoff_max_ms: 5_000,
            qps_window_ms: 10_000,
            shutdown_grace_ms: 10_000,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            log_queue_lines: 10_000,
            log_batch_lines: 200,
            log_flush_ms: 250,
            log_line_max_bytes: 4_096,
            log_level: LogLevel::Debug,
            commands: BTreeMap::new(),
            allow_raw_commands: false,
            allow_programs: false,
            program_cache_bytes: 4 << 30,
            container_cli: "podman".into(),
            container_args: Vec::new(),
            detach_after_ms: 60_000,
            allow_networks: Vec::new(),
        }
    }
}

impl AgentConfig {
    /// The defaults, with `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            ..Self::default()
        }
    }

    /// Every invalid value, as `key: reason` lines (empty when the config is valid).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let positive = [
            ("capacity", u64::from(self.capacity)),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("allocated_ttl_ms", self.allocated_ttl_ms),
            ("log_ttl_ms", self.log_ttl_ms),
            ("downloader_idle_ms", self.downloader_idle_ms),
            ("idle_check_ms", self.idle_check_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("qps_window_ms", self.qps_window_ms),
            ("log_queue_lines", self.log_queue_lines as u64),
            ("log_batch_lines", self.log_batch_lines as u64),
            ("log_flush_ms", self.log_flush_ms),
        ];
        for (key, value) in positive {
            if value == 0 {
                p.push(format!("{key}: must be at least 1"));
            }
        }
        // Longer waits are mistakes, and would overflow instants.
        const MAX_MS: u64 = 30 * 24 * 3_600_000;
        let bounded = [
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("allocated_ttl_ms", self.allocated_ttl_ms),
            ("log_ttl_ms", self.log_ttl_ms),
            ("downloader_idle_ms", self.downloader_idle_ms),
            ("idle_check_ms", self.idle_check_ms),
            ("backoff_max_ms", self.backoff_max_ms),
            ("qps_window_ms", self.qps_window_ms),
            ("shutdown_grace_ms", self.shutdown_grace_ms),
            ("log_flush_ms", self.log_flush_ms),
            ("detach_after_ms", self.detach_after_ms),
        ];
        for (key, value) in bounded {
            if value > MAX_MS {
                p.push(format!("{key}: at most {MAX_MS} (30 days)"));
            }
        }
        if self.detach_after_ms != 0
            && self.detach_after_ms < self.heartbeat_interval_ms.saturating_mul(2)
        {
            p.push(format!(
                "detach_after_ms: 0 (never) or at least twice heartbeat_interval_ms ({} ms): hubs beacon every heartbeat interval",
                self.heartbeat_interval_ms.saturating_mul(2)
            ));
        }
        if self.log_line_max_bytes < 64 {
            p.push("log_line_max_bytes: must be at least 64".into());
        }
        if self.backoff_max_ms < self.backoff_initial_ms {
            p.push("backoff_max_ms: must not be less than backoff_initial_ms".into());
        }
        if self.data_dir.as_os_str().is_empty() {
            p.push("data_dir: must not be empty".into());
        }
        if let Some(id) = &self.id
            && let Err(e) = check_id(id)
        {
            p.push(format!("id: {e}"));
        }
        for (name, def) in &self.commands {
            p.extend(def.problems(name));
        }
        p
    }

    /// Which addresses the runs' fetches may reach.
    pub fn address_policy(&self) -> silk_fetch::AddressPolicy {
        silk_fetch::AddressPolicy::new(self.allow_networks.clone())
    }

    /// Which commands the agent runs.
    pub fn command_policy(&self) -> CommandPolicy {
        CommandPolicy {
            defined: self.commands.clone(),
            allow_raw: self.allow_raw_commands,
        }
    }

    /// Checks the config: an error listing every problem.
    pub fn validate(&self) -> Result<(), AgentError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(AgentError::InvalidAgentConfig { problems })
        }
    }
}

/// Checks that `id` can be an agent id on the bus.
fn check_id(id: &AgentId) -> Result<(), AgentError> {
    Subject::agent_commands(id)
        .map(|_| ())
        .map_err(|e| AgentError::InvalidId {
            id: id.to_string(),
            reason: e.to_string(),
        })
}

/// The agent's id: the configured one, or the one kept in the data dir, or a new one that is
/// then kept there. The data dir must exist.
pub(crate) fn resolve_id(config: &AgentConfig) -> Result<AgentId, AgentError> {
    if let Some(id) = &config.id {
        check_id(id)?;
        return Ok(id.clone());
    }
    let path = config.data_dir.join(AGENT_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = AgentId::new(text.trim());
            check_id(&id)?;
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = generate_id(host_name().as_deref());
            write_atomic(&path, format!("{id}\n").as_bytes()).map_err(|source| AgentError::Io {
                what: "agent id file",
                path: path.clone(),
                source,
            })?;
            tracing::info!(agent = %id, path = %path.display(), "generated a new agent id");
            Ok(id)
        }
        Err(source) => Err(AgentError::Io {
            what: "agent id file",
            path,
            source,
        }),
    }
}

/// The machine's host name, if it has one.
pub(crate) fn host_name() -> Option<String> {
    sysinfo::System::host_name().filter(|h| !h.trim().is_empty())
}

/// `{host}-{8 hex digits}`: the host name reduced to token characters (at most 40 of them),
/// then random digits so that two agents on one machine differ.
fn generate_id(host: Option<&str>) -> AgentId {
    let mut prefix: String = host
        .unwrap_or("agent")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    if prefix.trim_matches('-').is_empty() {
        prefix = "agent".into();
    }
    // The last digits of a UUIDv7 are random (the first ones are the time).
    let random = uuid::Uuid::now_v7().simple().to_string();
    AgentId::new(format!("{prefix}-{}", &random[random.len() - 8..]))
}

/// The durable name of the agent's command subscription (`agent-{id}`, or a hash of a long
/// id: durable names are at most 64 characters).
pub(crate) fn durable_name(id: &AgentId) -> String {
    let name = format!("agent-{id}");
    if name.len() <= 64 {
        name
    } else {
        format!(
            "agent-{:016x}",
            xxhash_rust::xxh3::xxh3_64(id.as_str().as_bytes())
        )
    }
}

/// Creates the data dir if needed.
pub(crate) fn ensure_data_dir(dir: &Path) -> Result<(), AgentError> {
    std::fs::create_dir_all(dir).map_err(|source| AgentError::Io {
        what: "data dir",
        path: dir.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid_tokens() {
        for host in [
            Some("web-01.example.com"),
            Some("héllo wörld"),
            Some(""),
            None,
        ] {
            let id = generate_id(host);
            check_id(&id).unwrap();
        }
        assert!(
            generate_id(Some("h.example"))
                .as_str()
                .starts_with("h-example-")
        );
        assert_ne!(generate_id(None), generate_id(None));
    }

    #[test]
    fn id_is_kept_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let config = AgentConfig::new(dir.path());
        let first = resolve_id(&config).unwrap();
        assert_eq!(resolve_id(&config).unwrap(), first);
        std::fs::write(dir.path().join(AGENT_ID_FILE), "bad.id\n").unwrap();
        let err = resolve_id(&config).unwrap_err().to_string();
        assert!(err.contains("bad.id"), "{err}");
    }

    #[test]
    fn problems_are_listed_together() {
        let config = AgentConfig {
            capacity: 0,
            heartbeat_interval_ms: 0,
            backoff_initial_ms: 10,
            backoff_max_ms: 5,
            id: Some(AgentId::new("a b")),
            log_queue_lines: 0,
            log_line_max_bytes: 10,
            ..AgentConfig::default()
        };
        let p = config.problems();
        assert_eq!(p.len(), 6, "{p:?}");
        assert!(AgentConfig::default().problems().is_empty());
    }

    #[test]
    fn durable_names_fit() {
        assert_eq!(durable_name(&AgentId::new("a1")), "agent-a1");
        let long = durable_name(&AgentId::new("x".repeat(128)));
        assert!(long.len() <= 64);
        silk_bus::subject::check_durable(&long).unwrap();
    }
}
