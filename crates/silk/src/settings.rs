//! The settings of the long-running commands (`silk hub`, `silk agent`, `silk up`): one
//! table of knobs ([`KNOBS`]) is the single source of their TOML keys, environment
//! variables, flags, kinds, defaults and documentation (`docs/configuration.md` is made from
//! it). A value comes from, in order of precedence:
//!
//! 1. a flag (`--dead-after 20s`), or `--set KEY=VALUE` for any knob;
//! 2. the environment: `SILK_` and the key upper-cased, dots as `_`
//!    (`runs.lease_timeout` → `SILK_RUNS_LEASE_TIMEOUT`); lists are comma-separated;
//! 3. the `--config FILE` (TOML; `[runs]` then `lease_timeout = "45s"`, or dotted keys);
//! 4. the knob's default.
//!
//! Every problem of every source is reported at once, each with its key and where it came
//! from (`silk config check FILE`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A long-running command that reads settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Process {
    Hub,
    Agent,
    Up,
}

impl Process {
    /// Every process.
    pub const ALL: [Process; 3] = [Process::Hub, Process::Agent, Process::Up];

    /// The command, for people (`silk hub`).
    pub fn command(self) -> &'static str {
        match self {
            Process::Hub => "silk hub",
            Process::Agent => "silk agent",
            Process::Up => "silk up",
        }
    }

    /// The process a config file is for, by its name (`hub.toml`, `agent.toml`, `up.toml`,
    /// also `silk-hub.toml`).
    pub fn of_file(path: &Path) -> Option<Process> {
        let stem = path.file_stem()?.to_str()?;
        match stem.strip_prefix("silk-").unwrap_or(stem) {
            "hub" => Some(Process::Hub),
            "agent" => Some(Process::Agent),
            "up" => Some(Process::Up),
            _ => None,
        }
    }
}

/// What a knob holds, and how its text and TOML forms are read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A positive duration: `"250ms"`, `"30s"`, `"10m"`, `"1d"`.
    Duration,
    /// A duration, or `"0s"` for off.
    DurationOrOff,
    /// A whole number within bounds.
    Count { min: u64, max: u64 },
    /// A positive number.
    Number,
    /// `true` or `false`.
    Switch,
    /// Text.
    Text,
    /// Text that is never shown (a key, a URL that may carry a password).
    Secret,
    /// `HOST:PORT` with an IP address.
    Address,
    /// A file or directory.
    Path,
    /// A list of texts (TOML array; comma-separated in the environment and `--set`; a flag
    /// given again adds an item).
    List,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A NATS URL, `nats://HOST:PORT`.
    BusUrl,
}

impl Kind {
    /// The unit or form, for the documentation.
    pub fn unit(&self) -> String {
        match self {
            Kind::Duration => "duration".into(),
            Kind::DurationOrOff => "duration (0s: off)".into(),
            Kind::Count { min, max } if *max == u64::MAX => format!("integer ≥ {min}"),
            Kind::Count { min, max } => format!("integer {min}–{max}"),
            Kind::Number => "number > 0".into(),
            Kind::Switch => "boolean".into(),
            Kind::Text => "text".into(),
            Kind::Secret => "text (secret)".into(),
            Kind::Address => "IP:port".into(),
            Kind::Path => "path".into(),
            Kind::List => "list of text".into(),
            Kind::Choice(words) => words.join(" \\| "),
            Kind::BusUrl => "nats:// URL".into(),
        }
    }

    fn value_name(&self) -> &'static str {
        match self {
            Kind::Duration | Kind::DurationOrOff => "DURATION",
            Kind::Count { .. } => "N",
            Kind::Number => "X",
            Kind::Switch => "BOOL",
            Kind::Text | Kind::Secret | Kind::Choice(_) => "TEXT",
            Kind::Address => "ADDR",
            Kind::Path => "PATH",
            Kind::List => "ITEM",
            Kind::BusUrl => "URL",
        }
    }
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// The TOML key, dotted for a table (`runs.lease_timeout`).
    pub key: &'static str,
    /// The processes that read it.
    pub procs: &'static [Process],
    pub kind: Kind,
    /// The default, in the text form; `None`: unset unless given.
    pub default: Option<&'static str>,
    /// Must be given (there is no sensible default).
    pub required: bool,
    /// The long flag, without `--`; `None`: only `--set`, the environment and the file.
    pub flag: Option<&'static str>,
    /// What it does, for `--help` and the documentation.
    pub doc: &'static str,
}

impl Knob {
    /// The environment variable: `SILK_` and the key upper-cased, dots as `_`.
    pub fn env(&self) -> String {
        format!("SILK_{}", self.key.replace('.', "_").to_ascii_uppercase())
    }

    /// Whether `process` reads it.
    pub fn of(&self, process: Process) -> bool {
        self.procs.contains(&process)
    }
}

use Process::{Agent, Hub, Up};

const ALL: &[Process] = &Process::ALL;
const SERVERS: &[Process] = &[Hub, Up];
const AGENTS: &[Process] = &[Agent, Up];
const NATS: &[Process] = &[Hub, Agent];
const ANY_COUNT: Kind = Kind::Count {
    min: 0,
    max: u64::MAX,
};
const POSITIVE_COUNT: Kind = Kind::Count {
    min: 1,
    max: u64::MAX,
};

const fn knob(
    key: &'static str,
    procs: &'static [Process],
    kind: Kind,
    default: Option<&'static str>,
    flag: Option<&'static str>,
    doc: &'static str,
) -> Knob {
    Knob {
        key,
        procs,
        kind,
        default,
        required: false,
        flag,
        doc,
    }
}

/// Every setting of `silk hub`, `silk agent` and `silk up`. A key may appear more than once
/// with different processes (e.g. `data_dir`, whose default differs); it is unique per
/// process.
pub const KNOBS: &[Knob] = &[
    // --- the process ---
    knob(
        "log_format",
        ALL,
        Kind::Choice(&["text", "json"]),
        Some("text"),
        None,
        "How log lines are written on stderr: `text` (key=value fields) or `json` (one object per line). The flag is the global `--log-format`.",
    ),
    knob(
        "data_dir",
        &[Hub],
        Kind::Path,
        Some(".silk/hub"),
        Some("data-dir"),
        "Where runs, frontiers, items, known agents, the admin token and the secret key are kept.",
    ),
    knob(
        "data_dir",
        &[Agent],
        Kind::Path,
        Some(".silk/agent"),
        Some("data-dir"),
        "Where the agent keeps its id, its allocations and unpacked program versions.",
    ),
    knob(
        "data_dir",
        &[Up],
        Kind::Path,
        Some(".silk"),
        Some("data-dir"),
        "Where the hub (`hub/`) and the local agents (`agents/`) keep their data.",
    ),
    knob(
        "listen",
        SERVERS,
        Kind::Address,
        Some("127.0.0.1:7700"),
        Some("listen"),
        "Address of the HTTP API and web UI.",
    ),
    knob(
        "listen",
        &[Agent],
        Kind::Address,
        None,
        Some("listen"),
        "Serve `/healthz` (200 while the agent runs, has registered and is not detached, else 503) and `/metrics` (Prometheus text) on this address; unset: no HTTP.",
    ),
    knob(
        "pools",
        SERVERS,
        Kind::Path,
        None,
        Some("pools"),
        "A TOML file of agent pools and the agents each needs: a table per pool with `agents = N` and optionally `scale_command = [program, args…]` (run when fewer are alive, with `SILK_POOL_DEFICIT`), `scale_timeout_ms`, `scale_backoff_ms`, `scale_env` (see `silk hub --help`).",
    ),
    knob(
        "sink_targets",
        SERVERS,
        Kind::Path,
        None,
        Some("sink-targets"),
        "A YAML file of item sink targets that runs may name in `sinks.targets`: router outbounds (`nats.NatsOutbound`, `redis_queue.RedisStreamOutbound`, `kafka.KafkaOutbound`, …) with `name`, `class`, `init` and optionally `batch_size`; `{NAME}` placeholders are filled from the environment (see docs/items.md).",
    ),
    knob(
        "public_url",
        SERVERS,
        Kind::Text,
        None,
        Some("public-url"),
        "The API as programs and agents reach it (`SILK_API_URL`, version downloads); default `http://` and the listen address.",
    ),
    knob(
        "no_auth",
        SERVERS,
        Kind::Switch,
        Some("false"),
        Some("no-auth"),
        "Serve the API without tokens (only on a loopback `listen` address).",
    ),
    knob(
        "store",
        SERVERS,
        Kind::Secret,
        None,
        Some("store"),
        "The metadata store: `sqlite://PATH` or `postgres://USER@HOST/DB`; default the SQLite file `DATA_DIR/silk.db`.",
    ),
    knob(
        "secret_key",
        SERVERS,
        Kind::Secret,
        None,
        Some("secret-key"),
        "The key sealing projects' git passwords and webhook secrets, and alert channels' secrets, in the store: 32 bytes as base64 or hex. Default `DATA_DIR/secret.key`, made at first start. Hubs sharing a store must share it.",
    ),
    knob(
        "log_retention",
        SERVERS,
        Kind::Duration,
        Some("30d"),
        Some("log-retention"),
        "Run and build log lines older than this are deleted.",
    ),
    // --- the bus ---
    Knob {
        required: true,
        ..knob(
            "bus",
            NATS,
            Kind::BusUrl,
            None,
            Some("bus"),
            "The NATS server of the bus, `nats://HOST:PORT`.",
        )
    },
    knob(
        "namespace",
        NATS,
        Kind::Text,
        Some("silk"),
        Some("namespace"),
        "The bus namespace: the prefix of every subject, one per Silk cluster (hubs and agents must agree).",
    ),
    knob(
        "id",
        &[Hub],
        Kind::Text,
        None,
        Some("id"),
        "This hub's id in the cluster (`[A-Za-z0-9_-]`, at most 40); default the id kept in `DATA_DIR/hub.id`.",
    ),
    knob(
        "id",
        &[Agent],
        Kind::Text,
        None,
        Some("id"),
        "The agent's id (`[A-Za-z0-9_-]`, at most 128); default the id kept in the data dir, or a new `HOST-xxxxxxxx`.",
    ),
    knob(
        "bus_retry.retries",
        ALL,
        ANY_COUNT,
        Some("7"),
        None,
        "Attempts after the first of a failed bus publish or subscribe.",
    ),
    knob(
        "bus_retry.backoff_initial",
        ALL,
        Kind::Duration,
        Some("100ms"),
        None,
        "First wait between bus attempts (doubled after each failure).",
    ),
    knob(
        "bus_retry.backoff_max",
        ALL,
        Kind::Duration,
        Some("5s"),
        None,
        "Longest wait between bus attempts.",
    ),
    // --- failure detection ---
    knob(
        "heartbeat_interval",
        ALL,
        Kind::Duration,
        Some("1s"),
        Some("heartbeat-interval"),
        "Time between an agent's heartbeats (a heartbeat lives 3 of them on the bus). Agents and hubs must agree.",
    ),
    knob(
        "failure.dead_after",
        SERVERS,
        Kind::Duration,
        Some("11s"),
        Some("dead-after"),
        "An agent silent for this long is dead, whatever the failure detector says.",
    ),
    knob(
        "failure.phi_threshold",
        SERVERS,
        Kind::Number,
        Some("8"),
        Some("phi-threshold"),
        "Phi at or above which an agent is dead (suspect from half of it).",
    ),
    knob(
        "failure.acceptable_pause",
        SERVERS,
        Kind::Duration,
        Some("3s"),
        None,
        "Pause tolerated on top of an agent's mean heartbeat interval before phi rises.",
    ),
    knob(
        "ownership_ttl",
        &[Hub],
        Kind::Duration,
        Some("15s"),
        Some("ownership-ttl"),
        "How long a run stays with this hub after its last lease renewal in the store; another hub adopts the runs of a dead hub after this.",
    ),
    knob(
        "frontier",
        &[Hub],
        Kind::Secret,
        None,
        Some("frontier"),
        "Keep run frontiers in this Redis (`redis://HOST:PORT[/DB]`, or a Redis Cluster: `redis+cluster://HOST:PORT[,HOST:PORT…]`) so that the other hubs sharing the store carry a run on when this hub dies.",
    ),
    // --- runs ---
    knob(
        "runs.allocation_timeout",
        SERVERS,
        Kind::Duration,
        Some("10s"),
        None,
        "How long a run's start waits for its agents' allocation replies.",
    ),
    knob(
        "runs.lease_timeout",
        SERVERS,
        Kind::Duration,
        Some("2m"),
        None,
        "A dispatched request not answered within this is dispatched again (when the spider sets no `lease_timeout_ms`; never below twice its `timeout_ms`).",
    ),
    knob(
        "runs.max_retries",
        SERVERS,
        Kind::Count { min: 0, max: 1000 },
        Some("3"),
        None,
        "Retries of a request after a retryable failure (when the spider sets no `max_retries`).",
    ),
    knob(
        "runs.max_pending",
        SERVERS,
        POSITIVE_COUNT,
        Some("100"),
        None,
        "Most requests of a run out at once (when the run request sets no `max_pending`).",
    ),
    knob(
        "runs.stall_timeout",
        SERVERS,
        Kind::Duration,
        Some("60s"),
        None,
        "A run whose requests are out with nothing coming back for this long fails (when the run request sets no `stall_timeout_ms`).",
    ),
    knob(
        "runs.archive_retention",
        SERVERS,
        Kind::DurationOrOff,
        Some("30d"),
        None,
        "Every finished request of a spider run is archived in the store (`silk runs requests`) and kept this long; 0s: no archive.",
    ),
    knob(
        "runs.poison_after_losses",
        SERVERS,
        POSITIVE_COUNT,
        Some("3"),
        None,
        "A request whose agent is lost this many times while fetching it is given up as poison.",
    ),
    // --- message TTLs ---
    knob(
        "ttl.allocate",
        ALL,
        Kind::Duration,
        Some("30s"),
        None,
        "TTL on the bus of `allocate` and `shutdown` commands and of allocation replies.",
    ),
    knob(
        "ttl.download",
        SERVERS,
        Kind::Duration,
        Some("60s"),
        None,
        "TTL on the bus of `download` and `fetch` commands.",
    ),
    knob(
        "ttl.log",
        AGENTS,
        Kind::Duration,
        Some("10m"),
        None,
        "TTL on the bus of an agent's run log batches.",
    ),
    // --- agents ---
    knob(
        "agents",
        &[Up],
        Kind::Count { min: 1, max: 64 },
        Some("2"),
        Some("agents"),
        "Local agents run in the process.",
    ),
    knob(
        "capacity",
        &[Up],
        POSITIVE_COUNT,
        Some("64"),
        Some("capacity"),
        "Requests each local agent fetches at once.",
    ),
    knob(
        "capacity",
        &[Agent],
        POSITIVE_COUNT,
        Some("64"),
        Some("capacity"),
        "Requests fetched at once, all runs together.",
    ),
    knob(
        "labels",
        &[Agent],
        Kind::List,
        None,
        Some("labels"),
        "Labels sent with the registration: `KEY=VALUE` or a bare `KEY`, e.g. `pool=cn`.",
    ),
    knob(
        "idle_release",
        AGENTS,
        Kind::Duration,
        Some("10m"),
        None,
        "A run's downloader not used for this long is released on the agent.",
    ),
    knob(
        "detach_after",
        AGENTS,
        Kind::DurationOrOff,
        Some("60s"),
        Some("detach-after"),
        "Detach mode: heard from no hub for this long, the agent stops its downloads and program workers and drops its allocations (no runaway cost while the hub is gone); it registers again when a hub is heard. `0s`: never. At least twice `heartbeat_interval` otherwise.",
    ),
    knob(
        "shutdown_grace",
        AGENTS,
        Kind::Duration,
        Some("10s"),
        None,
        "On shutdown, how long requests being fetched may take to finish and report.",
    ),
    knob(
        "commands",
        AGENTS,
        Kind::Path,
        None,
        Some("commands"),
        "A TOML file of named commands that runs may use as proxy providers or redials (see `silk agent --help`).",
    ),
    knob(
        "allow_raw_commands",
        &[Agent],
        Kind::Switch,
        Some("false"),
        Some("allow-raw-commands"),
        "Also run raw commands that a run's config carries (hubs send them from admin tokens only).",
    ),
    knob(
        "allow_programs",
        &[Agent],
        Kind::Switch,
        Some("false"),
        Some("allow-programs"),
        "Run the programs of program runs (project versions, as processes or containers).",
    ),
    knob(
        "allow_networks",
        ALL,
        Kind::List,
        None,
        Some("allow-network"),
        "Private address ranges (CIDR, e.g. `10.1.0.0/16`) that runs may reach: their fetches on an agent, their webhook sinks on a hub. Runs never reach loopback, link-local, RFC 1918, CGNAT, ULA, unspecified or multicast addresses otherwise (checked after DNS, on the addresses connected to, and on every redirect), unless an admin allowed the range for their tenant (`silk tenants networks`): such a request fails with `private_address`. `silk up --demo` adds loopback for its demo site; `0.0.0.0/0,::/0` opens everything.",
    ),
    knob(
        "demo",
        &[Up],
        Kind::Switch,
        Some("false"),
        Some("demo"),
        "Also serve the demo site on loopback and create and trigger a `demo` job crawling it.",
    ),
    // --- containers and builds ---
    knob(
        "container.cli",
        ALL,
        Kind::Text,
        Some("podman"),
        Some("container-cli"),
        "The container engine's client, `podman` or `docker` (container programs on agents, container builds on hubs).",
    ),
    knob(
        "container.args",
        ALL,
        Kind::List,
        None,
        Some("container-arg"),
        "Arguments of the container engine before its subcommand, e.g. `--runtime=runc`.",
    ),
    knob(
        "builds.container_args",
        SERVERS,
        Kind::List,
        None,
        Some("container-build-arg"),
        "Arguments of `build`, e.g. `--network=host`.",
    ),
    knob(
        "builds.registry",
        SERVERS,
        Kind::Text,
        None,
        Some("registry"),
        "A registry to push built images to (`registry.example:5000/team`), for agents on other machines.",
    ),
    knob(
        "builds.parallel",
        SERVERS,
        Kind::Count { min: 1, max: 64 },
        Some("2"),
        Some("builds-parallel"),
        "Builds of projects' versions at once on this hub.",
    ),
    knob(
        "builds.keep_versions",
        SERVERS,
        POSITIVE_COUNT,
        Some("10"),
        Some("keep-versions"),
        "Finished versions kept per project (older ones go with their artifacts and images).",
    ),
    // --- alerts ---
    knob(
        "alerts.retry_delay",
        SERVERS,
        Kind::Duration,
        Some("10s"),
        None,
        "Wait before retrying an alert delivery that failed (doubled after each attempt).",
    ),
    knob(
        "alerts.retry_max_delay",
        SERVERS,
        Kind::Duration,
        Some("15m"),
        None,
        "Longest wait between attempts of an alert delivery.",
    ),
    knob(
        "alerts.max_attempts",
        SERVERS,
        Kind::Count { min: 1, max: 1000 },
        Some("12"),
        None,
        "Attempts of an alert delivery before it is `failed`.",
    ),
    knob(
        "alerts.retention",
        SERVERS,
        Kind::Duration,
        Some("30d"),
        None,
        "Alert deliveries that are over (sent, failed, suppressed, dropped) are kept this long.",
    ),
    // --- the task router ---
    knob(
        "router.config",
        SERVERS,
        Kind::Path,
        None,
        Some("router"),
        "Also run the task router from this config (see `silk router`).",
    ),
    knob(
        "router.vars",
        SERVERS,
        Kind::List,
        None,
        Some("router-var"),
        "Placeholder values of the router config, `NAME=VALUE`.",
    ),
    knob(
        "router.var_files",
        SERVERS,
        Kind::List,
        None,
        Some("router-var-file"),
        "YAML files of placeholder values of the router config.",
    ),
    knob(
        "router.failure_retention",
        SERVERS,
        Kind::Duration,
        Some("30d"),
        Some("router-failure-retention"),
        "The router's failure records kept in the store (`--router`) older than this are deleted.",
    ),
];

/// The knobs of `process`.
pub fn knobs(process: Process) -> impl Iterator<Item = &'static Knob> {
    KNOBS.iter().filter(move |k| k.of(process))
}

fn find(process: Process, key: &str) -> Option<&'static Knob> {
    knobs(process).find(|k| k.key == key)
}

/// Accepts `nats://HOST[:PORT]` only.
pub(crate) fn parse_bus_url(text: &str) -> Result<String, String> {
    let hint = "expected a NATS URL such as nats://127.0.0.1:4222";
    let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e}); {hint}"))?;
    if url.scheme() != "nats" {
        return Err(format!(
            "the `{}` scheme is not supported, only nats://; {hint}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("no host; {hint}"));
    }
    Ok(text.to_owned())
}

/// The bus URL for people and logs: a user name, password or token in it is replaced by `***`.
pub(crate) fn redact(bus: &str) -> String {
    match url::Url::parse(bus) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("***");
            let _ = url.set_password(None);
            url.to_string()
        }
        Ok(_) => bus.to_owned(),
        Err(_) => "(invalid bus URL)".to_owned(),
    }
}

/// A value read.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Duration(Duration),
    Count(u64),
    Number(f64),
    Switch(bool),
    Text(String),
    Address(SocketAddr),
    List(Vec<String>),
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Env(name) => write!(f, "${name}"),
            Source::Flag(flag) => f.write_str(flag),
        }
    }
}

/// A problem with a setting: where, which key, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub source: Source,
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.source, self.key.is_empty()) {
            // A setting missing from every source.
            (Source::Default, _) => write!(f, "{}: {}", self.key, self.message),
            (source, true) => write!(f, "{source}: {}", self.message),
            (source, false) => write!(f, "{source}: {}: {}", self.key, self.message),
        }
    }
}

/// Reads `text` (a flag, an environment variable, `--set`, a default) as a value of `kind`.
fn parse_text(kind: Kind, text: &str) -> Result<Value, String> {
    let text = text.trim();
    match kind {
        Kind::Duration | Kind::DurationOrOff => {
            let d = humantime::parse_duration(text).map_err(|e| {
                format!("`{text}` is not a duration such as `250ms`, `30s`, `10m` ({e})")
            })?;
            if kind == Kind::DurationOrOff && d.is_zero() {
                return Ok(Value::Duration(d));
            }
            check_duration(d)
        }
        Kind::Count { .. } => {
            let n: u64 = text
                .parse()
                .map_err(|_| format!("`{text}` is not a whole number"))?;
            check_count(kind, n)
        }
        Kind::Number => {
            let x: f64 = text
                .parse()
                .map_err(|_| format!("`{text}` is not a number"))?;
            check_number(x)
        }
        Kind::Switch => match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Switch(true)),
            "false" | "0" | "no" | "off" | "" => Ok(Value::Switch(false)),
            _ => Err(format!("`{text}` is not true or false")),
        },
        Kind::List => Ok(Value::List(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )),
        _ => check_text(kind, text),
    }
}

fn check_duration(d: Duration) -> Result<Value, String> {
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    if d > Duration::from_secs(366 * 24 * 3600) {
        return Err("must be at most a year".into());
    }
    Ok(Value::Duration(d))
}

fn check_count(kind: Kind, n: u64) -> Result<Value, String> {
    match kind {
        Kind::Count { min, max } if n < min || n > max => Err(if max == u64::MAX {
            format!("{n} is below the least allowed, {min}")
        } else {
            format!("{n} is not within {min}–{max}")
        }),
        _ => Ok(Value::Count(n)),
    }
}

fn check_number(x: f64) -> Result<Value, String> {
    if x.is_finite() && x > 0.0 {
        Ok(Value::Number(x))
    } else {
        Err(format!("{x} is not a positive number"))
    }
}

fn check_text(kind: Kind, text: &str) -> Result<Value, String> {
    match kind {
        Kind::Address => text.parse::<SocketAddr>().map(Value::Address).map_err(|_| {
            format!("`{text}` is not an IP address and port such as `127.0.0.1:7700`")
        }),
        Kind::Choice(words) => {
            if words.contains(&text) {
                Ok(Value::Text(text.to_owned()))
            } else {
                Err(format!("`{text}` is not one of {}", words.join(", ")))
            }
        }
        Kind::BusUrl => parse_bus_url(text)
            .map(Value::Text)
            .map_err(|e| format!("`{}`: {e}", redact(text))),
        Kind::Path | Kind::Text | Kind::Secret if text.is_empty() => {
            Err("must not be empty".into())
        }
        _ => Ok(Value::Text(text.to_owned())),
    }
}

/// Reads a TOML value of the file as a value of `kind`.
fn parse_toml(kind: Kind, value: &toml::Value) -> Result<Value, String> {
    use toml::Value as T;
    match (kind, value) {
        (Kind::Duration | Kind::DurationOrOff, T::String(s)) => parse_text(kind, s),
        (Kind::Duration | Kind::DurationOrOff, _) => {
            Err("expected a duration as text, such as \"30s\"".into())
        }
        (Kind::Count { .. }, T::Integer(n)) => match u64::try_from(*n) {
            Ok(n) => check_count(kind, n),
            Err(_) => Err(format!("{n} is negative")),
        },
        (Kind::Count { .. }, _) => Err("expected a whole number".into()),
        (Kind::Number, T::Float(x)) => check_number(*x),
        (Kind::Number, T::Integer(n)) => check_number(*n as f64),
        (Kind::Number, _) => Err("expected a number".into()),
        (Kind::Switch, T::Boolean(b)) => Ok(Value::Switch(*b)),
        (Kind::Switch, _) => Err("expected true or false".into()),
        (Kind::List, T::Array(items)) => items
            .iter()
            .map(|item| match item {
                T::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "expected a list of texts; `{other}` is a {}",
                    other.type_str()
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List),
        (Kind::List, _) => Err("expected a list of texts, such as [\"a\", \"b\"]".into()),
        (_, T::String(s)) => check_text(kind, s),
        (_, other) => Err(format!("expected text, found {}", other.type_str())),
    }
}

/// The settings of one process, every knob of it resolved.
#[derive(Debug)]
pub struct Settings {
    process: Process,
    values: BTreeMap<&'static str, (Option<Value>, Source)>,
    /// The keys read so far ([`Settings::check_all_read`]).
    read: std::sync::Mutex<BTreeSet<&'static str>>,
}

/// The sources besides the defaults.
#[derive(Debug, Default)]
pub struct Inputs {
    /// `--config FILE`.
    pub file: Option<PathBuf>,
    /// Flags and `--set` values given, by key, in the order given; the text says which
    /// flag (`--dead-after`, `--set`).
    pub flags: Vec<(String, Vec<String>, String)>,
    /// The environment (`SILK_…` variables).
    pub env: BTreeMap<String, String>,
}

impl Inputs {
    /// The `SILK_…` variables of this process's environment.
    pub fn process_env() -> BTreeMap<String, String> {
        std::env::vars()
            .filter(|(name, _)| name.starts_with("SILK_"))
            .collect()
    }
}

impl Settings {
    /// Resolves every knob of `process` from `inputs`: flag, then environment, then file,
    /// then default. Every problem of every source at once.
    pub fn resolve(process: Process, inputs: &Inputs) -> Result<Settings, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut values: BTreeMap<&'static str, (Option<Value>, Source)> = BTreeMap::new();
        for knob in knobs(process) {
            let value = knob.default.map(|d| parse_text(knob.kind, d));
            let value = match value {
                Some(Ok(v)) => Some(v),
                // The table's defaults are checked by a test; a bad one is a bug.
                Some(Err(e)) => {
                    problems.push(Problem {
                        source: Source::Default,
                        key: knob.key.into(),
                        message: e,
                    });
                    None
                }
                None => None,
            };
            values.insert(knob.key, (value, Source::Default));
        }
        if let Some(path) = &inputs.file {
            for (knob, value) in read_file(process, path, &mut problems) {
                values.insert(knob.key, (Some(value), Source::File(path.clone())));
            }
        }
        for knob in knobs(process) {
            let name = knob.env();
            if let Some(text) = inputs.env.get(&name) {
                match parse_text(knob.kind, text) {
                    Ok(v) => {
                        values.insert(knob.key, (Some(v), Source::Env(name)));
                    }
                    Err(message) => problems.push(Problem {
                        source: Source::Env(name),
                        key: knob.key.into(),
                        message,
                    }),
                }
            }
        }
        for (key, texts, flag) in &inputs.flags {
            let source = Source::Flag(flag.clone());
            let Some(knob) = find(process, key) else {
                problems.push(Problem {
                    source,
                    key: key.clone(),
                    message: unknown(process, key),
                });
                continue;
            };
            let parsed = if knob.kind == Kind::List && flag != "--set" {
                // Each use of a list flag is one item, commas and all.
                Ok(Some(Value::List(texts.clone())))
            } else {
                texts
                    .iter()
                    .map(|t| parse_text(knob.kind, t))
                    .collect::<Result<Vec<_>, _>>()
                    .map(join)
            };
            match parsed {
                Ok(Some(v)) => {
                    values.insert(knob.key, (Some(v), source));
                }
                Ok(None) => {}
                Err(message) => problems.push(Problem {
                    source,
                    key: key.clone(),
                    message,
                }),
            }
        }
        for knob in knobs(process).filter(|k| k.required) {
            let bad = problems.iter().any(|p| p.key == knob.key);
            if !bad && values.get(knob.key).is_none_or(|(v, _)| v.is_none()) {
                let flag = knob.flag.map(|f| format!("--{f}, ")).unwrap_or_default();
                problems.push(Problem {
                    source: Source::Default,
                    key: knob.key.into(),
                    message: format!(
                        "required: give {flag}${} or `{}` in the config file",
                        knob.env(),
                        knob.key
                    ),
                });
            }
        }
        if problems.is_empty() {
            Ok(Settings {
                process,
                values,
                read: std::sync::Mutex::new(BTreeSet::new()),
            })
        } else {
            Err(problems)
        }
    }

    fn value(&self, key: &str) -> Option<&Value> {
        match self.values.get_key_value(key) {
            Some((key, (value, _))) => {
                if let Ok(mut read) = self.read.lock() {
                    read.insert(*key);
                }
                value.as_ref()
            }
            // Every key the commands read is in the table for their process (the tests
            // start every command); a miss is a bug in this file.
            None => panic!("no setting `{key}` for {}", self.process.command()),
        }
    }

    /// A duration knob.
    pub fn duration(&self, key: &str) -> Duration {
        match self.value(key) {
            Some(Value::Duration(d)) => *d,
            other => panic!("setting `{key}` is not a duration: {other:?}"),
        }
    }

    /// A duration knob in ms.
    pub fn ms(&self, key: &str) -> u64 {
        u64::try_from(self.duration(key).as_millis()).unwrap_or(u64::MAX)
    }

    /// A count knob (set or defaulted).
    pub fn count(&self, key: &str) -> u64 {
        match self.value(key) {
            Some(Value::Count(n)) => *n,
            other => panic!("setting `{key}` is not a count: {other:?}"),
        }
    }

    /// A number knob.
    pub fn number(&self, key: &str) -> f64 {
        match self.value(key) {
            Some(Value::Number(x)) => *x,
            other => panic!("setting `{key}` is not a number: {other:?}"),
        }
    }

    /// A switch.
    pub fn switch(&self, key: &str) -> bool {
        match self.value(key) {
            Some(Value::Switch(b)) => *b,
            other => panic!("setting `{key}` is not a switch: {other:?}"),
        }
    }

    /// A text knob, `None` when unset.
    pub fn text(&self, key: &str) -> Option<String> {
        match self.value(key) {
            Some(Value::Text(s)) => Some(s.clone()),
            None => None,
            other => panic!("setting `{key}` is not text: {other:?}"),
        }
    }

    /// A path knob, `None` when unset.
    pub fn path(&self, key: &str) -> Option<PathBuf> {
        self.text(key).map(PathBuf::from)
    }

    /// An address knob (set or defaulted).
    pub fn address(&self, key: &str) -> SocketAddr {
        self.opt_address(key)
            .unwrap_or_else(|| panic!("setting `{key}` has no address"))
    }

    /// An address knob that may be unset.
    pub fn opt_address(&self, key: &str) -> Option<SocketAddr> {
        match self.value(key) {
            Some(Value::Address(a)) => Some(*a),
            None => None,
            other => panic!("setting `{key}` is not an address: {other:?}"),
        }
    }

    /// A list knob (empty when unset).
    pub fn list(&self, key: &str) -> Vec<String> {
        match self.value(key) {
            Some(Value::List(items)) => items.clone(),
            None => Vec::new(),
            other => panic!("setting `{key}` is not a list: {other:?}"),
        }
    }

    /// The bus retry policy (`bus_retry.*`).
    pub fn bus_retry(&self) -> silk_bus::RetryPolicy {
        silk_bus::RetryPolicy {
            retries: u32::try_from(self.count("bus_retry.retries")).unwrap_or(u32::MAX),
            backoff_initial_ms: self.ms("bus_retry.backoff_initial"),
            backoff_max_ms: self.ms("bus_retry.backoff_max"),
        }
    }

    /// The bus settings: `namespace` and `bus_retry.*`.
    pub fn bus_config(&self, namespace: &str) -> silk_bus::BusConfig {
        silk_bus::BusConfig {
            retry: self.bus_retry(),
            ..silk_bus::BusConfig::with_namespace(namespace)
        }
    }

    /// The knobs of the process that its start did not read: a knob in the table (and in
    /// docs/configuration.md) that changes nothing is a bug. Debug builds (the tests, which
    /// start every process) panic on one; release builds log it.
    pub fn check_all_read(&self) {
        let read = match self.read.lock() {
            Ok(read) => read.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let unread: Vec<&str> = self
            .values
            .keys()
            .filter(|k| !read.contains(*k))
            .copied()
            .collect();
        if !unread.is_empty() {
            debug_assert!(
                false,
                "{} did not read its settings {unread:?}",
                self.process.command()
            );
            tracing::error!(process = self.process.command(), unread = ?unread, "settings not read (a bug)");
        }
    }

    /// Every knob with its value and source, secrets hidden: `key = value  # source`.
    pub fn show(&self) -> String {
        let mut out = String::new();
        for knob in knobs(self.process) {
            let Some((value, source)) = self.values.get(knob.key) else {
                continue;
            };
            let shown = match (value, knob.kind) {
                (None, _) => "(unset)".to_owned(),
                (Some(_), Kind::Secret) => "\"***\"".to_owned(),
                (Some(v), _) => show_value(v),
            };
            out.push_str(&format!("{} = {shown}  # {source}\n", knob.key));
        }
        out
    }
}

/// Several texts of one non-list flag: the last wins; of a list flag given by `--set`, the
/// items of all.
fn join(values: Vec<Value>) -> Option<Value> {
    if values.iter().all(|v| matches!(v, Value::List(_))) && !values.is_empty() {
        let items = values
            .into_iter()
            .flat_map(|v| match v {
                Value::List(items) => items,
                _ => Vec::new(),
            })
            .collect();
        return Some(Value::List(items));
    }
    values.into_iter().last()
}

fn show_value(value: &Value) -> String {
    match value {
        Value::Duration(d) => format!("\"{}\"", humantime::format_duration(*d)),
        Value::Count(n) => n.to_string(),
        Value::Number(x) => x.to_string(),
        Value::Switch(b) => b.to_string(),
        Value::Text(s) => toml::Value::String(s.clone()).to_string(),
        Value::Address(a) => format!("\"{a}\""),
        Value::List(items) => toml::Value::Array(
            items
                .iter()
                .map(|s| toml::Value::String(s.clone()))
                .collect(),
        )
        .to_string(),
    }
}

/// Why `key` is not a setting of `process`: another process's, or unknown (with the closest
/// key).
fn unknown(process: Process, key: &str) -> String {
    let others: BTreeSet<&str> = KNOBS
        .iter()
        .filter(|k| k.key == key)
        .flat_map(|k| k.procs.iter().map(|p| p.command()))
        .collect();
    if !others.is_empty() {
        let list: Vec<&str> = others.into_iter().collect();
        return format!(
            "not a setting of {} (it is one of {})",
            process.command(),
            list.join(", ")
        );
    }
    let closest = knobs(process)
        .map(|k| (strsim::jaro_winkler(k.key, key), k.key))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match closest {
        Some((_, near)) => format!("unknown setting (did you mean `{near}`?)"),
        None => "unknown setting".to_owned(),
    }
}

/// The file's values for `process`; every problem is pushed.
fn read_file(
    process: Process,
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Vec<(&'static Knob, Value)> {
    let source = Source::File(path.to_owned());
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            problems.push(Problem {
                source,
                key: String::new(),
                message: format!("cannot read it: {e}"),
            });
            return Vec::new();
        }
    };
    let table: toml::Table = match text.parse() {
        Ok(table) => table,
        Err(e) => {
            problems.push(Problem {
                source,
                key: String::new(),
                message: format!("not valid TOML: {}", e.to_string().trim_end()),
            });
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    walk(process, &table, "", &source, problems, &mut found);
    found
}

fn walk(
    process: Process,
    table: &toml::Table,
    prefix: &str,
    source: &Source,
    problems: &mut Vec<Problem>,
    found: &mut Vec<(&'static Knob, Value)>,
) {
    for (name, value) in table {
        let key = format!("{prefix}{name}");
        let mut problem = |message: String| {
            problems.push(Problem {
                source: source.clone(),
                key: key.clone(),
                message,
            })
        };
        if let Some(knob) = find(process, &key) {
            match parse_toml(knob.kind, value) {
                Ok(v) => found.push((knob, v)),
                Err(message) => problem(message),
            }
            continue;
        }
        let section = format!("{key}.");
        let is_section = KNOBS.iter().any(|k| k.key.starts_with(&section));
        match value {
            toml::Value::Table(inner) if is_section => {
                walk(process, inner, &section, source, problems, found)
            }
            _ if is_section => problem(format!(
                "a table of settings (`[{key}]`), found {}",
                value.type_str()
            )),
            _ => problem(unknown(process, &key)),
        }
    }
}

/// The flags of the knobs of `process`, added to its subcommand: no clap default, so that
/// a flag counts only when given ([`given`]); the default and the variable are in the help.
pub fn add_flags(mut cmd: clap::Command, process: Process) -> clap::Command {
    for knob in knobs(process) {
        let Some(flag) = knob.flag else { continue };
        let mut help = knob.doc.to_owned();
        if let Some(d) = knob.default {
            help.push_str(&format!(" [default: {d}]"));
        }
        help.push_str(&format!(" [env: {}] [config: {}]", knob.env(), knob.key));
        let arg = clap::Arg::new(knob.key)
            .long(flag)
            .help(help)
            .value_name(knob.kind.value_name());
        let arg = match knob.kind {
            Kind::Switch => arg.action(clap::ArgAction::SetTrue),
            Kind::List => arg
                .action(clap::ArgAction::Append)
                .allow_hyphen_values(true),
            _ => arg.action(clap::ArgAction::Set),
        };
        cmd = cmd.arg(arg);
    }
    cmd
}

/// The options every process has: `--config FILE` and `--set KEY=VALUE`.
#[derive(Debug, Clone, clap::Args)]
pub struct SettingsArgs {
    /// A TOML file of settings (see docs/configuration.md; `silk config check FILE`). Flags
    /// win over `SILK_…` variables, which win over the file.
    #[arg(long, value_name = "FILE", env = "SILK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Any setting by its key, e.g. `--set runs.lease_timeout=45s` (repeatable; wins like a
    /// flag).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// The flags given to `process`'s subcommand (`matches`), and the global `--log-format`
/// given on the command line (`top`).
pub fn given(
    process: Process,
    top: &clap::ArgMatches,
    matches: &clap::ArgMatches,
    args: &SettingsArgs,
) -> Vec<(String, Vec<String>, String)> {
    use clap::parser::ValueSource;
    let mut flags = Vec::new();
    if top.value_source("log_format") == Some(ValueSource::CommandLine)
        && let Some(raw) = top.get_raw("log_format")
    {
        let texts = raw.map(|s| s.to_string_lossy().into_owned()).collect();
        flags.push(("log_format".to_owned(), texts, "--log-format".to_owned()));
    }
    for knob in knobs(process) {
        let Some(flag) = knob.flag else { continue };
        if matches.value_source(knob.key) != Some(ValueSource::CommandLine) {
            continue;
        }
        let texts = if knob.kind == Kind::Switch {
            vec!["true".to_owned()]
        } else {
            match matches.get_raw(knob.key) {
                Some(raw) => raw.map(|s| s.to_string_lossy().into_owned()).collect(),
                None => continue,
            }
        };
        flags.push((knob.key.to_owned(), texts, format!("--{flag}")));
    }
    flags.extend(given_sets(args));
    flags
}

/// The `--set KEY=VALUE` options, as flags.
pub fn given_sets(args: &SettingsArgs) -> Vec<(String, Vec<String>, String)> {
    args.set
        .iter()
        .map(|set| {
            let (key, value) = set.split_once('=').unwrap_or((set.as_str(), ""));
            (
                key.trim().to_owned(),
                vec![value.to_owned()],
                "--set".to_owned(),
            )
        })
        .collect()
}

/// Resolves the settings of `process` from its command line and the environment; the
/// problems are printed (`Err`: the exit code).
pub fn load(
    process: Process,
    top: &clap::ArgMatches,
    matches: &clap::ArgMatches,
    args: &SettingsArgs,
) -> Result<Settings, std::process::ExitCode> {
    let inputs = Inputs {
        file: args.config.clone(),
        flags: given(process, top, matches, args),
        env: Inputs::process_env(),
    };
    Settings::resolve(process, &inputs).map_err(|problems| {
        for p in &problems {
            eprintln!("error: {p}");
        }
        std::process::ExitCode::from(2)
    })
}

/// `docs/configuration.md`, made from [`KNOBS`].
pub fn reference() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         <!-- Made from crates/silk/src/settings.rs by `SILK_BLESS=1 cargo test -p silk --bin silk reference_is_current`; do not edit by hand. -->\n\n\
         `silk hub`, `silk agent` and `silk up` read their settings from, in order of precedence:\n\n\
         1. flags (`--dead-after 20s`), and `--set KEY=VALUE` for any key below;\n\
         2. environment variables: `SILK_` and the key upper-cased with dots as `_`\n   \
         (`runs.lease_timeout` → `SILK_RUNS_LEASE_TIMEOUT`); lists are comma-separated;\n\
         3. the TOML file of `--config FILE` (or `SILK_CONFIG`): a dotted key is a table\n   \
         (`[runs]` then `lease_timeout = \"45s\"`, or `runs.lease_timeout = \"45s\"`);\n\
         4. the default.\n\n\
         `silk config check FILE [--for hub|agent|up]` reports every problem of a file (and of\n\
         the `SILK_…` variables set) at once, each with its key; `silk config show --for hub\n\
         [--config FILE]` prints every setting with its value and where it came from (secrets\n\
         as `***`). Durations are written like `250ms`, `30s`, `10m`, `12h`, `30d`.\n\
         Example files: `packaging/hub.toml`, `packaging/agent.toml`.\n\n\
         Per-run settings (a spider's `lease_timeout_ms` and `max_retries`, a run request's\n\
         `max_pending` and `stall_timeout_ms`) win over the `runs.*` defaults; a run keeps the\n\
         defaults it started with across hub restarts.\n",
    );
    for process in Process::ALL {
        out.push_str(&format!(
            "\n## `{}`\n\n| key | default | unit | flag | variable | meaning |\n|---|---|---|---|---|---|\n",
            process.command()
        ));
        for knob in knobs(process) {
            let default = match (knob.default, knob.required) {
                (_, true) => "required".to_owned(),
                (Some(d), _) => format!("`{d}`"),
                (None, _) => "unset".to_owned(),
            };
            let flag = knob.flag.map_or_else(
                || {
                    if knob.key == "log_format" {
                        "`--log-format`".to_owned()
                    } else {
                        String::new()
                    }
                },
                |f| format!("`--{f}`"),
            );
            out.push_str(&format!(
                "| `{}` | {default} | {} | {flag} | `{}` | {} |\n",
                knob.key,
                knob.kind.unit(),
                knob.env(),
                knob.doc.replace('|', "\\|")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn defaults_are_valid_and_keys_unique_per_process() {
        for process in Process::ALL {
            let mut seen = BTreeSet::new();
            for knob in knobs(process) {
                // A key cannot be both a value and a table of a TOML file.
                let section = format!("{}.", knob.key);
                assert!(
                    !KNOBS.iter().any(|k| k.key.starts_with(&section)),
                    "{} is a key and a table",
                    knob.key
                );
                assert!(seen.insert(knob.key), "{} twice for {process:?}", knob.key);
                if let Some(d) = knob.default {
                    parse_text(knob.kind, d).unwrap_or_else(|e| panic!("{}: {e}", knob.key));
                }
            }
            let inputs = Inputs {
                env: env(&[("SILK_BUS", "nats://127.0.0.1:4222")]),
                ..Inputs::default()
            };
            Settings::resolve(process, &inputs).unwrap();
        }
    }

    #[test]
    fn flags_win_over_env_over_file_over_default() {
        let (_dir, path) = file(
            "bus = \"nats://file:4222\"\nlisten = \"127.0.0.1:7701\"\n[runs]\nlease_timeout = \"45s\"\nmax_pending = 7\n[failure]\ndead_after = \"20s\"\n",
        );
        let inputs = Inputs {
            file: Some(path.clone()),
            env: env(&[
                ("SILK_LISTEN", "127.0.0.1:7702"),
                ("SILK_RUNS_MAX_PENDING", "8"),
            ]),
            flags: vec![
                (
                    "listen".into(),
                    vec!["127.0.0.1:7703".into()],
                    "--listen".into(),
                ),
                (
                    "container.args".into(),
                    vec!["--a=b,c".into(), "-x".into()],
                    "--container-arg".into(),
                ),
            ],
        };
        let s = Settings::resolve(Process::Hub, &inputs).unwrap();
        assert_eq!(s.address("listen"), "127.0.0.1:7703".parse().unwrap());
        assert_eq!(s.count("runs.max_pending"), 8);
        assert_eq!(s.duration("runs.lease_timeout"), Duration::from_secs(45));
        assert_eq!(s.duration("failure.dead_after"), Duration::from_secs(20));
        assert_eq!(s.duration("runs.stall_timeout"), Duration::from_secs(60));
        assert_eq!(s.text("bus").as_deref(), Some("nats://file:4222"));
        assert_eq!(s.list("container.args"), ["--a=b,c", "-x"]);
        let shown = s.show();
        assert!(
            shown.contains("listen = \"127.0.0.1:7703\"  # --listen"),
            "{shown}"
        );
        assert!(
            shown.contains("runs.max_pending = 8  # $SILK_RUNS_MAX_PENDING"),
            "{shown}"
        );
        assert!(
            shown.contains(&format!(
                "runs.lease_timeout = \"45s\"  # {}",
                path.display()
            )),
            "{shown}"
        );
        assert!(
            shown.contains("runs.stall_timeout = \"1m\"  # default"),
            "{shown}"
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let (_dir, path) = file(
            "listen = 7700\nrouter = \"x\"\ndemo = true\n[runs]\nlease_timeot = \"45s\"\nmax_pending = 0\nstall_timeout = \"soon\"\n[builds]\nparallel = 65\n",
        );
        let inputs = Inputs {
            file: Some(path),
            env: env(&[("SILK_FAILURE_PHI_THRESHOLD", "-1")]),
            flags: vec![("nope".into(), vec!["1".into()], "--set".into())],
        };
        let problems = Settings::resolve(Process::Hub, &inputs).unwrap_err();
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let all = text.join("\n");
        for expected in [
            "listen: expected text, found integer",
            "router: a table of settings (`[router]`), found string",
            "demo: not a setting of silk hub (it is one of silk up)",
            "runs.lease_timeot: unknown setting (did you mean `runs.lease_timeout`?)",
            "runs.max_pending: 0 is below the least allowed, 1",
            "runs.stall_timeout: `soon` is not a duration",
            "builds.parallel: 65 is not within 1–64",
            "$SILK_FAILURE_PHI_THRESHOLD: failure.phi_threshold: -1 is not a positive number",
            "--set: nope: unknown setting",
            "bus: required: give --bus, $SILK_BUS or `bus` in the config file",
        ] {
            assert!(all.contains(expected), "missing `{expected}` in:\n{all}");
        }
        assert_eq!(problems.len(), 10, "{all}");
    }

    #[test]
    fn a_bad_file_says_where() {
        let (_dir, path) = file("listen = \n");
        let problems = Settings::resolve(
            Process::Up,
            &Inputs {
                file: Some(path.clone()),
                ..Inputs::default()
            },
        )
        .unwrap_err();
        assert_eq!(problems.len(), 1);
        let text = problems[0].to_string();
        assert!(
            text.starts_with(&format!("{}: not valid TOML", path.display())),
            "{text}"
        );
        assert!(text.contains("line 1"), "{text}");
    }

    #[test]
    fn credentials_never_reach_the_output() {
        assert_eq!(
            redact("nats://u:secret@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        assert_eq!(redact("nats://tok3n@host:4222"), "nats://***@host:4222");
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }

    #[test]
    fn zero_is_off_only_where_a_knob_says_so() {
        assert_eq!(
            parse_text(Kind::DurationOrOff, "0s"),
            Ok(Value::Duration(Duration::ZERO))
        );
        assert_eq!(
            parse_text(Kind::DurationOrOff, "90s"),
            Ok(Value::Duration(Duration::from_secs(90)))
        );
        assert_eq!(
            parse_text(Kind::Duration, "0s"),
            Err("must be longer than zero".into())
        );
    }

    #[test]
    fn only_nats_urls() {
        assert!(parse_bus_url("nats://127.0.0.1:4222").is_ok());
        assert!(parse_bus_url("nats://nats").is_ok());
        assert!(parse_bus_url("http://x").unwrap_err().contains("nats://"));
        assert!(parse_bus_url("inproc").is_err());
        assert!(parse_bus_url("127.0.0.1:4222").is_err());
    }

    #[test]
    fn reference_is_current() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        let made = reference();
        if std::env::var_os("SILK_BLESS").is_some() {
            std::fs::write(&path, &made).unwrap();
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == made,
            "docs/configuration.md is not what settings.rs makes: run `SILK_BLESS=1 cargo test -p silk --bin silk reference_is_current`"
        );
    }
}
