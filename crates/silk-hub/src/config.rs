//! The hub's settings ([`HubConfig`]).

use crate::phi::PhiConfig;
use silk_bus::TtlPolicy;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How long a run log line waits at most before it is stored, ms (`logs`; the API's log
/// stream waits this long for a run's last lines).
pub const LOG_FLUSH_MS: u64 = 200;

/// The hub's settings.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Where runs, frontiers, items and known agents are kept.
    pub data_dir: PathBuf,
    /// Failure detection (phi threshold, `dead_after_ms`, …).
    pub phi: PhiConfig,
    /// Message TTLs (must match the agents' heartbeat interval).
    pub ttl: TtlPolicy,
    /// How often agent states are re-evaluated, ms.
    pub tick_ms: u64,
    /// How long a run start waits for its agents' allocation replies, ms.
    pub allocate_timeout_ms: u64,
    /// Wait between attempts to (re)subscribe while the bus is down, ms (doubling up to
    /// 5 s).
    pub resubscribe_initial_ms: u64,
    /// The metadata store: `sqlite://PATH` or `postgres://…`; default the SQLite file
    /// `DATA_DIR/silk.db`.
    pub store_url: Option<String>,
    /// Run log lines older than this are deleted, ms (default 30 days).
    pub log_retention_ms: u64,
    /// The router's failure records older than this are deleted, ms (default 30 days).
    pub router_failure_retention_ms: u64,
    /// Every request of a spider run that reached its final outcome is archived in the
    /// store (`GET /api/v1/runs/{id}/requests`) and kept this long, ms (default 30 days);
    /// 0: no archive.
    pub archive_retention_ms: u64,
    /// How often the scheduler looks at jobs, ms (default 1000).
    pub schedule_tick_ms: u64,
    /// Write each fetched request's final outcome to `runs/{id}/outcomes.jsonl`, for the
    /// router's `silk.RunResultsInbound` (default false; `silk hub --router` sets it when
    /// the router config has such an inbound).
    pub record_outcomes: bool,
    /// This hub's id in the cluster (a single token of at most 40 `[A-Za-z0-9_-]`
    /// characters): the holder of its run leases, its results subject `results.{id}` and its
    /// durable names. Default: the id kept in `DATA_DIR/hub.id`, made at first start.
    pub hub_id: Option<String>,
    /// The cluster's Redis (`redis://…`) for run frontiers: new runs keep their frontier
    /// there (`RedisFrontier`, prefix `{frontier_prefix}:{run id}`), so another hub can
    /// adopt them when this one dies; their items go to the store before each ack. `None`:
    /// frontiers are embedded stores in the data dir.
    pub frontier_url: Option<String>,
    /// The first part of the Redis key prefix of run frontiers (default `silk`).
    pub frontier_prefix: String,
    /// How long a run's lease in the store lasts without renewal, ms (default 15 s): a hub
    /// that dies loses its runs to the other hubs this long after its last renewal. Renewed
    /// every third of it.
    pub ownership_ttl_ms: u64,
    /// A request whose agent is lost while fetching it this many times is given up as
    /// poison (failed, reason `poison`) instead of being sent to another agent again: a
    /// page that crashes its agent would otherwise take the fleet down one agent at a time,
    /// forever. Default 3. (A request whose lease expires uses up a retry each time, so
    /// `max_retries` bounds that case.)
    pub poison_after_losses: u32,
    /// The key that seals projects' passwords and webhook secrets in the store (base64 or
    /// hex of 32 bytes; `SILK_SECRET_KEY`). `None`: the key file `DATA_DIR/secret.key`, made
    /// at first start. Hubs that share a store must share the key.
    pub secret_key: Option<String>,
    /// How projects' versions are built on this hub (container engine, parallel builds,
    /// versions kept).
    pub builds: BuildSettings,
    /// How alerts are delivered.
    pub alerts: AlertSettings,
    /// The hub's API as the programs of program runs reach it (`SILK_API_URL`, and where
    /// agents fetch versions): `silk hub` sets it from `--public-url`, else from `--listen`.
    /// `None`: program runs fail at start, saying so.
    pub public_url: Option<String>,
    /// What a run gets when its request or spider leaves a setting out.
    pub run_defaults: RunDefaults,
    /// Private address ranges that runs' webhook sinks may reach (loopback, link-local,
    /// RFC 1918, CGNAT, ULA, unspecified and multicast addresses are refused otherwise,
    /// after DNS and on every redirect): `silk hub --allow-network CIDR`.
    pub allow_networks: Vec<silk_core::net::IpNet>,
    /// Agent pools that declare the agents they need, by name (`silk hub --pools FILE`):
    /// when fewer are alive, the hub runs the pool's scale command (see `scale`).
    pub pools: BTreeMap<String, PoolDecl>,
    /// The item sink targets runs may name in `sinks.targets` (`silk hub --sink-targets
    /// FILE`; none by default).
    pub sink_targets: crate::SinkTargets,
}

/// What a pool needs: `agents` live, open agents labelled `pool=NAME`, and the command an
/// admin wrote to get more. A table of the `--pools` TOML file:
///
/// ```toml
/// [eu]
/// agents = 4
/// scale_command = ["/opt/silk/scale-up.sh", "eu"]   # no shell; env: SILK_POOL, SILK_POOL_AGENTS, SILK_POOL_ALIVE, SILK_POOL_DEFICIT
/// scale_timeout_ms = 120000                          # killed (its process group) after
/// scale_backoff_ms = 30000                           # then re-checked: 30 s, 1 min, 2 min, … 10 min
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolDecl {
    /// Live agents the pool needs.
    pub agents: u32,
    /// The program and its arguments the hub runs when fewer are alive (empty: the deficit
    /// is only reported).
    #[serde(default)]
    pub scale_command: Vec<String>,
    /// The command is killed after this long, ms.
    #[serde(default = "default_scale_timeout_ms")]
    pub scale_timeout_ms: u64,
    /// The wait after a run of the command before the deficit is checked and the command
    /// run again, ms; it doubles while the deficit stays, up to [`MAX_SCALE_BACKOFF_MS`].
    #[serde(default = "default_scale_backoff_ms")]
    pub scale_backoff_ms: u64,
    /// Environment variables of the command besides `PATH`, `HOME`, `LANG` and the
    /// `SILK_POOL*` ones (nothing else of the hub's environment is passed on).
    #[serde(default)]
    pub scale_env: BTreeMap<String, String>,
}

/// The longest wait between two runs of a pool's scale command.
pub const MAX_SCALE_BACKOFF_MS: u64 = 600_000;

fn default_scale_timeout_ms() -> u64 {
    120_000
}

fn default_scale_backoff_ms() -> u64 {
    30_000
}

impl PoolDecl {
    /// Every invalid value of pool `name`, as `name.key: reason`.
    pub fn problems(&self, name: &str) -> Vec<String> {
        let mut p = Vec::new();
        if silk_api::runs::check_pools(std::slice::from_ref(&name.to_owned())).is_err() {
            p.push(format!(
                "`{}`: not a pool name (1 to 64 letters, digits, `.`, `_`, `-`)",
                name.escape_debug()
            ));
        }
        if self.agents == 0 {
            p.push(format!("{name}.agents: must be at least 1"));
        }
        if self
            .scale_command
            .first()
            .is_some_and(|c| c.trim().is_empty())
        {
            p.push(format!(
                "{name}.scale_command: the program must not be empty"
            ));
        }
        if self.scale_timeout_ms == 0 {
            p.push(format!("{name}.scale_timeout_ms: must be at least 1"));
        }
        if self.scale_backoff_ms == 0 {
            p.push(format!("{name}.scale_backoff_ms: must be at least 1"));
        }
        p
    }
}

/// The settings a run gets when its request (`max_pending`, `stall_timeout_ms`) or its spider
/// (`lease_timeout_ms`, `max_retries`) does not set them. Kept in the run's record at its
/// start, so a run keeps them across hub restarts whatever the next hub's defaults are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunDefaults {
    /// Most requests out at once (default 100).
    pub max_pending: u64,
    /// How long requests may be out with nothing coming back before the run fails, ms
    /// (default 60 s).
    pub stall_timeout_ms: u64,
    /// A leased request not acked within this time is dispatched again, ms (default 120 s;
    /// never below twice the spider's `timeout_ms`).
    pub lease_timeout_ms: u64,
    /// Retries of a request after a retryable failure (default 3).
    pub max_retries: u32,
}

impl Default for RunDefaults {
    fn default() -> Self {
        Self {
            max_pending: crate::run::DEFAULT_MAX_PENDING,
            stall_timeout_ms: crate::run::DEFAULT_STALL_TIMEOUT_MS,
            lease_timeout_ms: silk_core::spider::DEFAULT_LEASE_TIMEOUT_MS,
            max_retries: silk_core::spider::DEFAULT_MAX_RETRIES,
        }
    }
}

impl HubConfig {
    /// Defaults (`dead_after` 11 s, heartbeats every 1 s) with `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            phi: PhiConfig::default(),
            ttl: TtlPolicy::default(),
            tick_ms: 250,
            allocate_timeout_ms: 10_000,
            resubscribe_initial_ms: 100,
            store_url: None,
            log_retention_ms: 30 * 24 * 3600 * 1000,
            router_failure_retention_ms: 30 * 24 * 3600 * 1000,
            archive_retention_ms: 30 * 24 * 3600 * 1000,
            schedule_tick_ms: 1000,
            record_outcomes: false,
            hub_id: None,
            frontier_url: None,
            frontier_prefix: "silk".into(),
            ownership_ttl_ms: 15_000,
            poison_after_losses: 3,
            secret_key: None,
            builds: BuildSettings::default(),
            alerts: AlertSettings::default(),
            public_url: None,
            run_defaults: RunDefaults::default(),
            allow_networks: Vec::new(),
            pools: BTreeMap::new(),
            sink_targets: crate::SinkTargets::default(),
        }
    }
}

/// How alerts are delivered (by the hub that holds the store lease `alerts`).
#[derive(Debug, Clone)]
pub struct AlertSettings {
    /// The wait before the first retry of a delivery that failed, ms; it doubles with each
    /// attempt (default 10 s).
    pub retry_delay_ms: u64,
    /// The longest wait between attempts, ms (default 15 minutes).
    pub retry_max_delay_ms: u64,
    /// Attempts before a delivery is `failed` (default 12).
    pub max_attempts: u32,
    /// Deliveries that are over are kept this long, ms (default 30 days).
    pub retention_ms: u64,
    /// How often ended runs and due deliveries are looked at besides when this hub knows
    /// of one (other hubs' runs), ms (default 5 s).
    pub poll_ms: u64,
    /// A send (an HTTP request, an SMTP session) gives up after this long, ms (default 30 s).
    pub send_timeout_ms: u64,
}

impl Default for AlertSettings {
    fn default() -> Self {
        Self {
            retry_delay_ms: 10_000,
            retry_max_delay_ms: 15 * 60 * 1000,
            max_attempts: 12,
            retention_ms: 30 * 24 * 3600 * 1000,
            poll_ms: 5_000,
            send_timeout_ms: 30_000,
        }
    }
}

/// How builds of projects' versions run on this hub.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    /// The container engine of `container` builds.
    pub engine: silk_projects::build::Engine,
    /// Builds at once on this hub (of different projects), default 2.
    pub parallel: usize,
    /// Finished versions kept per project (older ones are deleted with their artifacts and
    /// images), default 10.
    pub keep_versions: usize,
    /// How often the queue is looked at besides when this hub queues a version (to take
    /// versions other hubs queued), ms; default 2000.
    pub poll_ms: u64,
}

impl Default for BuildSettings {
    fn default() -> Self {
        Self {
            engine: silk_projects::build::Engine::default(),
            parallel: 2,
            keep_versions: 10,
            poll_ms: 2000,
        }
    }
}
