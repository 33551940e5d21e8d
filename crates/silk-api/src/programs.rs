//! Programs on the wire: a run (or a job) that runs a team's own crawler — a command from a
//! project version, in processes or containers on the allocated agents — instead of a
//! declarative spider.
//!
//! [`ProgramSpec`] is the `program` of a [`crate::runs::RunRequest`] or a
//! [`crate::jobs::JobSpec`]; [`ProgramView`] is what a run shows of it (the version it
//! resolved to and each worker's state). [`ItemsBatch`] / [`ItemsAdded`] are the body and
//! the answer of `POST /api/v1/runs/{id}/items`, which a program calls with its run token.
//!
//! A program's workers get, in their environment:
//! `SILK_API_URL`, `SILK_RUN_ID`, `SILK_RUN_TOKEN` (a bearer token for this run's program
//! routes only, valid while the run has not ended), `SILK_AGENT_ID`, `SILK_WORKER` (0-based)
//! and `SILK_WORKERS`, beside the job's `env` and a minimal `PATH`, `HOME` and `LANG`.

use serde::{Deserialize, Serialize};
use silk_core::AgentId;
use std::collections::BTreeMap;

/// The version a program names when it names none: the newest `ready` one.
pub const LATEST: &str = "latest";

/// Most workers of one program run.
pub const MAX_WORKERS: u32 = 256;

/// Most items in one `POST /api/v1/runs/{id}/items`.
pub const MAX_ITEMS_PER_BATCH: usize = 10_000;

/// Where a program's workers run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// A process group per worker, in the version's unpacked directory (a `command` build).
    #[default]
    Process,
    /// A container per worker, from the version's image (a `container` build), with the
    /// host's network.
    Container,
}

impl Runtime {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Process => "process",
            Runtime::Container => "container",
        }
    }
}

/// What a program run runs.
///
/// ```yaml
/// program:
///   project: shop
///   version: latest
///   runtime: process
///   command: [".venv/bin/scrapy", "crawl", "products", "-a", "region=${args.region}"]
///   workers: 4
///   env: {LOG_LEVEL: INFO}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgramSpec {
    /// The project whose version runs.
    pub project: String,
    /// The version (`1.4.0`), or `latest`: the newest `ready` version when the run starts.
    #[serde(default = "latest")]
    pub version: String,
    /// `process` (default) or `container`.
    #[serde(default)]
    pub runtime: Runtime,
    /// The program and its arguments (no shell); `${args.NAME}` is filled from the run's
    /// args. For `process`, a relative program path is taken in the version's directory;
    /// for `container`, the command given to the image (empty: the image's own).
    #[serde(default)]
    pub command: Vec<String>,
    /// Worker processes, spread over the run's agents (default 1).
    #[serde(default = "one")]
    pub workers: u32,
    /// Environment variables of the workers (`${args.NAME}` filled); names starting with
    /// `SILK_` are Silk's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// How long a cancelled worker has between SIGTERM and SIGKILL, ms (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_ms: Option<u64>,
}

fn latest() -> String {
    LATEST.to_owned()
}

fn one() -> u32 {
    1
}

/// The grace period between SIGTERM and SIGKILL when none is set, ms.
pub const DEFAULT_STOP_GRACE_MS: u64 = 10_000;

impl ProgramSpec {
    /// Every invalid value, as `program.key: reason` lines (empty when valid).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.project.trim().is_empty() {
            p.push("program.project: must not be empty".into());
        }
        if self.version.trim().is_empty() {
            p.push("program.version: must not be empty (or `latest`)".into());
        }
        if self.runtime == Runtime::Process && self.command.is_empty() {
            p.push("program.command: the program to run is needed for the process runtime".into());
        }
        for (i, arg) in self.command.iter().enumerate() {
            if arg.contains('\0') {
                p.push(format!("program.command[{i}]: must not hold a NUL byte"));
            }
        }
        if self.workers == 0 || self.workers > MAX_WORKERS {
            p.push(format!(
                "program.workers: {} is not between 1 and {MAX_WORKERS}",
                self.workers
            ));
        }
        for (name, value) in &self.env {
            let valid = !name.is_empty()
                && !name.as_bytes()[0].is_ascii_digit()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                p.push(format!(
                    "program.env.{name}: a variable name is letters, digits and `_`, not starting with a digit"
                ));
            } else if name.starts_with("SILK_") {
                p.push(format!(
                    "program.env.{name}: names starting with SILK_ are set by Silk"
                ));
            }
            if value.contains('\0') {
                p.push(format!("program.env.{name}: must not hold a NUL byte"));
            }
        }
        if self.stop_grace_ms == Some(0) {
            p.push("program.stop_grace_ms: must be at least 1".into());
        }
        p
    }

    /// The grace period of a cancel, ms.
    pub fn stop_grace_ms(&self) -> u64 {
        self.stop_grace_ms.unwrap_or(DEFAULT_STOP_GRACE_MS)
    }
}

/// The state of one worker of a program run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Sent to its agent, not yet started (the artifact is being fetched).
    Starting,
    /// Its process (or container) runs.
    Running,
    /// It exited with status 0.
    Succeeded,
    /// It exited otherwise, was killed, or could not start.
    Failed,
}

impl WorkerState {
    /// Whether the worker is over.
    pub fn is_final(self) -> bool {
        matches!(self, WorkerState::Succeeded | WorkerState::Failed)
    }
}

/// One worker of a program run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkerView {
    /// Its index, `0..workers` (its `SILK_WORKER`).
    pub worker: u32,
    /// The agent it runs on.
    #[schema(value_type = String)]
    pub agent: AgentId,
    /// Its state.
    pub state: WorkerState,
    /// The exit code, once exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why it failed, for people (with its last log lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a program run shows of its program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProgramView {
    /// The program as asked (args filled in).
    pub spec: ProgramSpec,
    /// The version it runs (`latest` resolved).
    pub version: String,
    /// Its workers (empty until they are placed).
    pub workers: Vec<WorkerView>,
}

/// Items a program pushes (`POST /api/v1/runs/{id}/items`): JSON objects, each with the
/// run's item key field (default `url`); an item whose key the run has already is counted
/// as a duplicate and not written again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemsBatch {
    /// The items, at most 10000.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// The answer to a pushed batch of items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemsAdded {
    /// Items written to the run's item log.
    pub added: u64,
    /// Items whose key the run had already.
    pub duplicates: u64,
    /// Items past the run's `max_items`: not written (the run is ending).
    #[serde(default)]
    pub over_limit: u64,
}

/// Most requests in one enqueue, lease or ack call.
pub const MAX_REQUESTS_PER_CALL: usize = 10_000;

/// Longest long-poll of a lease call, ms.
pub const MAX_LEASE_WAIT_MS: u64 = 30_000;

/// A request a program puts in its run's frontier. It is deduplicated on Silk's canonical
/// key (method, canonical URL, body), unless `dont_filter`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRequest {
    /// An absolute http(s) URL.
    pub url: String,
    /// `GET` (default), `HEAD` or `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Headers of the request (not part of its key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Higher is leased first (aging raises waiting requests).
    #[serde(default)]
    pub priority: i32,
    /// Anything JSON the program wants back with the lease (Scrapy: callback, errback, meta).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Enqueue it even when its key was seen (a fresh key of its own).
    #[serde(default)]
    pub dont_filter: bool,
    /// The URL of the request this one is the redirect of. When both have the same key (the
    /// redirect only changed what canonicalisation removes: scheme case, a fragment, a
    /// tracking parameter…), this one gets a key of its own, so it is not dropped as a
    /// duplicate of the request it came from; otherwise the usual key decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_from: Option<String>,
    /// Link distance from a start request (kept for the spider's `max_depth`).
    #[serde(default)]
    pub depth: u32,
}

/// `POST /api/v1/runs/{id}/requests`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueBatch {
    /// At most 10000.
    pub requests: Vec<NewRequest>,
}

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Enqueued {
    /// New requests.
    pub added: u64,
    /// Requests whose key the run had seen (dropped).
    pub duplicates: u64,
}

/// `POST /api/v1/runs/{id}/lease`: up to `max` requests that may start now (politeness and
/// aging as for spider runs), waiting up to `wait_ms` for one when none may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseAsk {
    /// Most requests (default 1, at most 10000).
    #[serde(default = "one_usize")]
    pub max: u32,
    /// Longest wait for a request, ms (default 0, at most 30000).
    #[serde(default)]
    pub wait_ms: u64,
}

fn one_usize() -> u32 {
    1
}

/// A leased request as a program sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeasedView {
    /// Give it back in the ack (16 hex digits).
    pub lease_id: String,
    /// When the lease expires (ms since the epoch): not acked by then, the request is
    /// leased again (its retries used up one by one).
    pub deadline_ms: u64,
    /// The canonical URL.
    pub url: String,
    /// `GET`, `HEAD` or `POST`.
    pub method: String,
    /// Its headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Its body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Its base priority.
    pub priority: i32,
    /// Its meta, as enqueued.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Its depth.
    pub depth: u32,
    /// Retryable failures so far.
    pub retries: u32,
}

/// The answer to a lease call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Leases {
    /// The leases (possibly none).
    pub leases: Vec<LeasedView>,
    /// The run is paused: lease nothing until it is resumed.
    pub paused: bool,
    /// The run is ending (cancelled, or past its limits): finish what you hold and exit.
    pub ending: bool,
    /// Requests in the frontier not finished yet (pending + leased), all workers together.
    pub left: u64,
}

/// What became of a leased request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AckOutcome {
    /// Processed (its items pushed, its new requests enqueued): counted as success.
    Done,
    /// A retryable failure: leased again after a back-off, until the run's `max_retries`.
    Retry,
    /// A permanent failure: counted failed.
    Failed,
    /// Not fetched on purpose: counted dropped.
    Dropped,
    /// Not attempted: pending again at once, no retry used.
    Release,
}

/// One ack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckItem {
    /// The lease.
    pub lease_id: String,
    /// What became of it.
    pub outcome: AckOutcome,
    /// Why (for failures; logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// New requests it gave, enqueued with the ack in one atomic write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<NewRequest>,
}

/// `POST /api/v1/runs/{id}/ack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckBatch {
    /// At most 10000.
    pub acks: Vec<AckItem>,
}

/// What an ack call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Acked {
    /// Acks applied.
    pub acked: u64,
    /// Acks of leases that had expired or were unknown (their requests were, or will be,
    /// leased again): nothing applied (their new requests are enqueued all the same; dedup
    /// absorbs the repeat).
    pub late: u64,
    /// New requests enqueued.
    pub added: u64,
    /// New requests whose key was seen.
    pub duplicates: u64,
}

/// Longest wait the hub gives a fetch's agent beyond the run's request timeout, ms.
pub const FETCH_MARGIN_MS: u64 = 10_000;

/// `POST /api/v1/runs/{id}/fetch`: fetch one request through the download center — by one of
/// the run's agents, with that agent's downloader for the run (its proxies and their
/// switching, cookies, rate limit, robots.txt, ban handling, trimming). Nothing of it touches
/// the run's frontier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchAsk {
    /// An absolute http(s) URL, fetched as given (not canonicalised).
    pub url: String,
    /// `GET` (default), `HEAD` or `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Headers of the request, beside the run's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Return the body trimmed by the run's trimming rules (UTF-8 text), when the run has
    /// rules and the response is text; otherwise the body as received.
    #[serde(default)]
    pub trim: bool,
    /// Follow redirects (at most the run's `max_redirects`), each hop fetched the same way;
    /// otherwise a 3xx comes back as it is.
    #[serde(default)]
    pub follow_redirects: bool,
    /// The agent to fetch with, when it is one of the run's (the SDK names its own,
    /// `SILK_AGENT_ID`); otherwise the run's agents take turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// Why a fetch through the download center failed (no response, or a response the run's
/// ban rules call a ban).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FetchFailure {
    /// `timeout`, `connect`, `dns`, `tls`, `proxy`, `proxy_banned`, `robots_disallowed`,
    /// `body_too_large`, `too_many_redirects`, …
    pub code: String,
    /// For people.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

/// The answer to a fetch: the response as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Fetched {
    /// The URL of this response (the last hop when redirects were followed).
    pub url: String,
    /// HTTP status, when a response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Response headers as received, in order (`Content-Encoding` describes the wire: the
    /// body here is decoded).
    #[serde(default)]
    #[schema(value_type = Vec<Vec<String>>)]
    pub headers: Vec<(String, String)>,
    /// The body, base64 (the trimmed text in UTF-8 when `trimmed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body was cut to the run's `max_return_body_bytes`.
    #[serde(default)]
    pub truncated: bool,
    /// The body is the run's trimmed text.
    #[serde(default)]
    pub trimmed: bool,
    /// Body bytes received (decoded).
    pub bytes: u64,
    /// The proxy it went through, without credentials; absent = direct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// The agent that fetched it.
    pub agent: String,
    /// From the hub's ask to the agent's answer, ms (all hops).
    pub elapsed_ms: u64,
    /// The URLs redirected from, in order, when redirects were followed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirects: Vec<String>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FetchFailure>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> ProgramSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_are_the_latest_version_one_process_worker() {
        let s = spec(r#"{"project": "shop", "command": ["./run.sh"]}"#);
        assert_eq!(s.version, LATEST);
        assert_eq!(s.runtime, Runtime::Process);
        assert_eq!(s.workers, 1);
        assert!(s.problems().is_empty());
        assert_eq!(s.stop_grace_ms(), DEFAULT_STOP_GRACE_MS);
    }

    #[test]
    fn problems_name_the_key() {
        let s = spec(
            r#"{"project": "", "command": [], "workers": 0,
                "env": {"SILK_RUN_ID": "x", "1A": "y", "OK": "a\u0000b"}}"#,
        );
        let p = s.problems().join("\n");
        for needle in [
            "program.project",
            "program.command",
            "program.workers: 0",
            "program.env.SILK_RUN_ID",
            "program.env.1A",
            "program.env.OK: must not hold a NUL",
        ] {
            assert!(p.contains(needle), "{needle} not in {p}");
        }
        let container = spec(r#"{"project": "shop", "runtime": "container"}"#);
        assert!(
            container.problems().is_empty(),
            "{:?}",
            container.problems()
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = serde_json::from_str::<ProgramSpec>(
            r#"{"project": "shop", "command": ["x"], "wokers": 2}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("wokers"), "{e}");
    }
}
