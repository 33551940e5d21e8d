//! `silk-agent`: the agent runtime of Silk's download center (design §4; in the seeds:
//! 下载器代理, downloader agent). An agent registers with the hubs, heartbeats, reads the
//! commands sent to its own bus subject, keeps one isolated downloader per run, fetches and
//! parses near the data, and sends back only results.
//!
//! Map:
//! - [`Agent::start`] / [`AgentHandle`] (`agent`): the tasks — presence (register, then
//!   heartbeats), commands (allocate — answered on `allocations` —, download, release,
//!   shutdown), idle sweeper — and result and allocation-reply publishing with retries.
//! - [`AgentConfig`] (`config`): the agent's own settings and how its id is chosen.
//! - [`DownloaderConfig`] (the schema is `silk_api::downloader`, shared with the hub, which
//!   checks it at submit): what an `allocate` command carries; `downloader_config` compiles
//!   it with the agent's engines and commands; `downloader`: one run's downloader (fetch, ban detection, redirects,
//!   trimming, parsing); `trim`: trimming rules; [`command`]: provider and redial
//!   commands — which ones the agent runs (named ones, raw ones only when allowed) and how.
//! - `runs` and `store`: the allocations in memory and in `{data_dir}/allocations.json`.
//! - `system`: CPU, memory, host name (`sysinfo`); [`stats`]: counters, QPS, events.
//! - `runlog`: each run's log lines (events, failed requests, trimming problems), queued
//!   without blocking and published in `log` batches on the bus's `logs` subject.
//!
//! **API boundary:** the hub talks to agents only through `silk-bus` messages; this crate
//! exposes nothing to the hub but what it publishes. **Invariant:** nothing a run sends
//! (a bad config, a hostile page, a failing command) stops the agent or touches another run.

mod agent;
pub mod command;
pub mod config;
mod downloader;
pub mod downloader_config;
pub mod error;
mod fifo;
mod program;
mod runlog;
mod runs;
pub mod stats;
mod store;
mod system;
mod trim;

pub use agent::{Agent, AgentHandle};
pub use command::{CommandDef, CommandPolicy};
pub use config::{AGENT_ID_FILE, AgentConfig};
pub use downloader_config::{
    DownloaderConfig, ProxyConfig, RedialConfig, SpiderSource, TrimConfig, TrimRule,
};
pub use error::AgentError;
pub use silk_core::CommandSpec;
pub use stats::{AgentEvent, AgentStats, ReleaseReason, RunStats};
pub use store::ALLOCATIONS_FILE;
