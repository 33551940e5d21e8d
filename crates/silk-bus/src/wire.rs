//! The wire format of every bus message: a versioned [`Envelope`] around one typed
//! [`Message`]. This module owns the format; the subjects that carry each kind are in
//! `subject`.
//!
//! # Envelope (version 1)
//!
//! JSON (UTF-8), one object per bus message:
//!
//! ```json
//! {"v":1,"id":"0190f1c2a7e47c3d9b5f0e6a1d2c3b4a","sent_ms":1722500000000,"ttl_ms":3000,
//!  "kind":"heartbeat","body":{"agent":"a1","cpu_pct":12.5,"memory_bytes":104857600,
//!  "active_downloaders":2,"in_flight":17,"qps":40.0,"seq":812}}
//! ```
//!
//! | field     | type        | meaning |
//! |-----------|-------------|---------|
//! | `v`       | u16         | wire version, `1`; a reader refuses other versions ([`BusError::UnsupportedVersion`]) |
//! | `id`      | string      | unique message id (UUIDv7, time-ordered): readers de-duplicate on it, JetStream de-duplicates retried publishes on it (`Nats-Msg-Id`) |
//! | `sent_ms` | u64         | when the publisher built the message, ms since the Unix epoch (publisher's clock) |
//! | `ttl_ms`  | u64 or absent | the message is stale when `now - sent_ms > ttl_ms` (reader's clock); absent = never |
//! | `kind`    | string      | `register`, `heartbeat`, `command`, `result`, `control`, `allocated`, `log`, `worker`, `fetched`, `beacon` |
//! | `body`    | object      | the message of that kind, below |
//!
//! Bodies (field names are the Rust field names of the types below):
//! - `register` → [`Register`]: `agent`, `host`, `version`, `cores`, `memory_bytes`,
//!   `labels` (object of strings), `capacity`.
//! - `heartbeat` → [`Heartbeat`]: `agent`, `cpu_pct`, `memory_bytes`, `active_downloaders`,
//!   `in_flight`, `qps`, `seq`.
//! - `command` → [`Command`], tagged by `op`: `{"op":"allocate","run":"r1","config":{…},
//!   "allow_networks":["10.1.0.0/16"]}` (ranges left out when none),
//!   `{"op":"download","run":"r1","batch":[{"lease_id":"00000000000000a3","request":{…Request…}}],
//!   "reply_to":"hub-a"}`, `{"op":"release","run":"r1"}`, `{"op":"shutdown"}`.
//!   `reply_to` (added in wire version 1; absent when `None`) is the id of the hub that sent
//!   the download: the agent publishes the batch's results on `results.{reply_to}`, or on
//!   `results` when it is absent (hubs of older builds). A `reply_to` that is not a valid
//!   subject token (`[A-Za-z0-9_-]{1,128}`) is not an error: its results go to `results`
//!   and the agent logs a warning. An agent of an older build ignores the field and
//!   publishes on `results`, which a hub that sets `reply_to` should therefore also read.
//! - `result` → [`RunResult`]: `run`, `agent`, `lease_id`, `outcome` ([`FetchOutcome`]:
//!   `status`, `error` ([`ResultError`]: `code`, `message`, `retryable`), `links`, `items`,
//!   `timings` ([`Timings`]: `fetch_ms`, `parse_ms`, `total_ms`), `bytes`, and, when not
//!   zero or empty, `redirects`, `bytes_saved`, `proxy`, `body` ([`ResultBody`]: `encoding`
//!   `text` or `base64`, `data`, `content_type`, `truncated`), `crawl_delay_ms` (the
//!   `Crawl-delay` of the request's host's robots.txt for the run's user agent, in ms, when
//!   it has one: the agent reads robots.txt, the hub's frontier decides politeness)).
//! - `command` `{"op":"program","run":"r1","action":{"do":"start",…},"reply_to":"hub-a"}`
//!   ([`Command::Program`], added in wire version 1): start ([`ProgramStart`]), pause, resume
//!   or stop (`grace_ms`) the workers of a program run on the agent; no TTL (a stop must not
//!   expire).
//! - `command` `{"op":"fetch","run":"r1","id":"…","request":{…Request…},"trim":false,
//!   "reply_to":"hub-a"}` ([`Command::Fetch`], added in wire version 1): fetch one request
//!   with the run's downloader and answer with the response as it is (a program's fetch
//!   through the download center); TTL `download_ttl_ms`.
//! - `fetched` → [`FetchReply`] (added in wire version 1), on `results.{hub}` like results:
//!   `run`, `agent`, `id` (the fetch's), `outcome` ([`FetchOutcome`]: `status`, `error`,
//!   `bytes`, `timings`, `proxy`, `bytes_saved`, `body` as the response's bytes in base64, or
//!   the trimmed text), `headers` (`[[name, value], …]` as received).
//! - `worker` → [`WorkerReport`] (added in wire version 1), on `results.{hub}` like results:
//!   `run`, `agent`, `worker`, `event` tagged by `is`: `{"is":"started"}`,
//!   `{"is":"exited","code":0,"signal":null,"tail":["…"]}` (with `"detached":true` when the
//!   agent stopped it on detaching), `{"is":"failed","error":"…"}`.
//! - `control` → [`Control`], tagged by `op`: `{"op":"pause","run":"r1"}`, `resume`, `stop`.
//! - `allocated` → [`AllocationReply`]: an agent's answer to an `allocate` command, sent once
//!   the run's config was accepted and its downloader built (`ok: true`, also for a repeated
//!   `allocate` of a run it already holds), or refused (`ok: false`, `error` saying why):
//!   `{"run":"r1","agent":"a1","ok":false,"error":"…for people…"}`.
//!   `error` is absent or `null` when `ok`. Allocation is synchronous at run start: the hub
//!   waits for the replies of the agents it allocated on, and treats no reply within its
//!   timeout as a failure.
//! - `log` → [`LogBatch`]: a batch of one run's log lines from one agent (added in wire
//!   version 1): `run`, `agent`, `lines` ([`LogEntry`]: `ts_ms` (when the line was
//!   written, ms since the Unix epoch, agent clock), `level` ([`LogLevel`]: `trace`,
//!   `debug`, `info`, `warn`, `error`), `message` (for people, at most a few KiB: the agent
//!   cuts longer ones and marks the cut))):
//!   `{"run":"r1","agent":"a1","lines":[{"ts_ms":1722500000000,"level":"warn",
//!   "message":"http://h/x: http status 404 (http_404; permanent)"}]}`.
//!   The agent is the lines' source; lines in a batch are in the order they were written.
//!   When an agent had to drop lines (its queue full, or a batch it could not publish), a
//!   later batch of that run carries a `warn` line `N log lines dropped (…)`.
//! - `beacon` → [`HubBeacon`] (added in wire version 1), on `hubs`: a hub says it is alive,
//!   every heartbeat interval: `{"hub":"hub-a","seq":42}`. An agent that hears no beacon (and
//!   no command) for its `detach_after` detaches: it stops its downloads and programs until a
//!   hub is heard again. Agents of older builds do not read `hubs`.
//!
//! | kind        | subject            | TTL (default)                        | durability |
//! |-------------|--------------------|--------------------------------------|------------|
//! | `register`  | `registrations`    | none (never expires)                 | stored; hubs read one durable |
//! | `heartbeat` | `heartbeats`       | 3 × `heartbeat_interval_ms` (3 s)    | not stored (fan-out) |
//! | `command`   | `agent.{id}.cmd`   | `allocate`, `shutdown`: `allocate_ttl_ms` (30 s); `download`, `fetch`: `download_ttl_ms` (60 s); `release`, `program`: none | stored; the agent reads its durable |
//! | `result`    | `results.{hub}` (the download's `reply_to`), else `results` | none | stored; each hub reads its own durable on `results.{hub}`; hubs share one on `results` |
//! | `worker`, `fetched` | `results.{hub}` (the command's `reply_to`), else `results` | none | as results |
//! | `control`   | `run.{id}.control` | none                                 | stored |
//! | `allocated` | `allocations`      | `allocate_ttl_ms` (30 s)             | not stored (fan-out) |
//! | `log`       | `logs`             | `log_ttl_ms` (10 min)                | stored; hubs read one durable (`hub-logs`) |
//! | `beacon`    | `hubs`             | 3 × `heartbeat_interval_ms` (3 s)    | not stored (fan-out) |
//!
//! # Design constraints
//!
//! - **Additive evolution.** Within version 1, fields are only added, with a default, and
//!   never renamed or removed; readers ignore fields they do not know (no
//!   `deny_unknown_fields` anywhere), so an old hub reads a newer agent's messages. A change
//!   that an old reader would misread bumps `v`. A new `kind` or `op` is an error for old
//!   readers (they skip the message), so new kinds go on new subjects.
//! - **Nothing panics on input.** A payload that is not JSON, misses a field, has a wrong
//!   type or an unknown kind decodes to [`BusError::Malformed`] naming the subject and what
//!   was wrong (serde's line and column where it has one).
//! - **Staleness is decided by the reader.** Heartbeats, allocations, allocation replies,
//!   downloads, shutdowns and log batches carry a TTL ([`TtlPolicy`]); a reader drops them
//!   when they are older than that on its clock, so a hub coming back after an outage does
//!   not act on old news. Log batches live longer (10 minutes by default): they are worth
//!   storing after a short hub outage, but a backlog older than that is dropped rather than
//!   replayed. Registrations never expire, whatever their `ttl_ms` says; results, releases and
//!   run control carry no TTL (a late result is still processed once, idempotently). Clocks
//!   of hub and agents are assumed NTP-synchronised to well under the TTLs (seconds); a
//!   message from the future (`sent_ms > now`) is not stale.
//! - **Idempotent handling.** Every bus delivers at least once; a reader that must not act
//!   twice keys on `id` (and the hub on `lease_id` for results).
//! - **Floats.** `cpu_pct` and `qps` read `null` (what JSON makes of NaN) as 0.

use crate::error::BusError;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use silk_core::{AgentId, LeaseId, Request, RunId};
use std::collections::BTreeMap;
use std::fmt;

/// The wire version this build writes and reads.
pub const WIRE_VERSION: u16 = 1;

/// A unique message id (a UUIDv7 in simple form: 32 hex digits, time-ordered).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageId(pub String);

impl MessageId {
    /// A fresh id.
    pub fn generate() -> Self {
        MessageId(uuid::Uuid::now_v7().simple().to_string())
    }
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kind of a message: the `kind` field on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// [`Register`]
    Register,
    /// [`Heartbeat`]
    Heartbeat,
    /// [`Command`]
    Command,
    /// [`RunResult`]
    Result,
    /// [`Control`]
    Control,
    /// [`AllocationReply`]
    Allocated,
    /// [`LogBatch`]
    Log,
    /// [`WorkerReport`]
    Worker,
    /// [`FetchReply`]
    Fetched,
    /// [`HubBeacon`]
    Beacon,
}

impl Kind {
    /// The `kind` string on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Register => "register",
            Kind::Heartbeat => "heartbeat",
            Kind::Command => "command",
            Kind::Result => "result",
            Kind::Control => "control",
            Kind::Allocated => "allocated",
            Kind::Log => "log",
            Kind::Worker => "worker",
            Kind::Fetched => "fetched",
            Kind::Beacon => "beacon",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "register" => Kind::Register,
            "heartbeat" => Kind::Heartbeat,
            "command" => Kind::Command,
            "result" => Kind::Result,
            "control" => Kind::Control,
            "allocated" => Kind::Allocated,
            "log" => Kind::Log,
            "worker" => Kind::Worker,
            "fetched" => Kind::Fetched,
            "beacon" => Kind::Beacon,
            _ => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An agent announces itself (once at start, and again after it was told it is unknown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Register {
    /// The agent.
    pub agent: AgentId,
    /// Host name of its machine.
    pub host: String,
    /// Silk version of the agent.
    pub version: String,
    /// CPU cores.
    pub cores: u32,
    /// Physical memory.
    pub memory_bytes: u64,
    /// Labels used to pick agent pools (`pool=cn`, `net=adsl`, …).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How many requests it accepts in flight at once.
    #[serde(default)]
    pub capacity: u32,
}

/// An agent's periodic health report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The agent.
    pub agent: AgentId,
    /// CPU use of the machine, percent (0–100 × cores is not used: 0–100).
    #[serde(default, deserialize_with = "null_as_zero")]
    pub cpu_pct: f64,
    /// Memory in use.
    #[serde(default)]
    pub memory_bytes: u64,
    /// Downloaders (runs) allocated on the agent.
    #[serde(default)]
    pub active_downloaders: u32,
    /// Requests being fetched.
    #[serde(default)]
    pub in_flight: u32,
    /// Requests per second over the last window.
    #[serde(default, deserialize_with = "null_as_zero")]
    pub qps: f64,
    /// Increases by one per heartbeat of this agent process (gaps = lost heartbeats).
    #[serde(default)]
    pub seq: u64,
}

/// A hub's periodic sign of life to the agents, on `hubs` (added in wire version 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HubBeacon {
    /// The hub's id.
    pub hub: String,
    /// Increases by one per beacon of this hub process.
    #[serde(default)]
    pub seq: u64,
}

fn null_as_zero<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(0.0))
}

/// One leased request of a download batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeasedRequest {
    /// The frontier lease it belongs to (16 hex digits on the wire); comes back in the
    /// [`RunResult`].
    pub lease_id: LeaseId,
    /// What to fetch.
    pub request: Request,
}

/// A command to one agent, on its own subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Create the downloader of a run (session, cookies, headers, proxies, trimming).
    Allocate {
        /// The run.
        run: RunId,
        /// The downloader configuration (its typed form comes with the agent).
        #[serde(default)]
        config: serde_json::Value,
        /// Private address ranges this run may reach besides the agent's own
        /// `allow_networks`: those an admin granted the run's tenant. Set by the hub from the
        /// tenant, never from the run's (user-written) `config`. Added in wire version 1; not
        /// written when empty (an agent of an older build ignores it and refuses the ranges).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        allow_networks: Vec<silk_core::net::IpNet>,
    },
    /// Fetch a batch of requests with the run's downloader.
    Download {
        /// The run.
        run: RunId,
        /// The requests, each with its lease.
        batch: Vec<LeasedRequest>,
        /// The id of the hub that sent the download: the results of this batch go to
        /// `results.{reply_to}` ([`Subject::hub_results`](crate::Subject::hub_results)), or to
        /// `results` when absent (hubs of older builds) or not a valid subject token. Added
        /// in wire version 1; not written when `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
    /// Drop the run's downloader.
    Release {
        /// The run.
        run: RunId,
    },
    /// Stop the agent process.
    Shutdown,
    /// Start, pause, resume or stop the workers of a program run on this agent (added in
    /// wire version 1). The agent reports each worker's start and end as a
    /// [`WorkerReport`] on `results.{reply_to}`.
    Program {
        /// The run.
        run: RunId,
        /// What to do.
        action: ProgramAction,
        /// The id of the hub that drives the run: worker reports go to `results.{reply_to}`
        /// (or `results` when absent or not a valid token, as for downloads).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
    /// Fetch one request with the run's downloader (its proxies, cookies, rate limit,
    /// robots.txt, ban handling) and answer with the response as it is — status, headers,
    /// body, neither judged nor parsed; a redirect is not followed — as a [`FetchReply`] on
    /// `results.{reply_to}` (added in wire version 1). A program's fetch through the download
    /// center: nothing of it touches the run's frontier.
    Fetch {
        /// The run.
        run: RunId,
        /// The fetch's id: comes back in the [`FetchReply`].
        id: String,
        /// What to fetch (its URL as the program gave it).
        request: Request,
        /// Return the body trimmed by the run's trimming rules (UTF-8 text) rather than as
        /// received, when the run has rules and the body is text.
        #[serde(default)]
        trim: bool,
        /// The id of the hub that asks: the reply goes to `results.{reply_to}` (or
        /// `results` when absent or not a valid token).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
}

/// What a [`Command::Program`] asks, tagged by `do`:
/// `{"do":"start", …ProgramStart…}`, `{"do":"pause"}`, `{"do":"resume"}`,
/// `{"do":"stop","grace_ms":10000}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum ProgramAction {
    /// Start these workers (a worker already running here is left alone).
    Start(Box<ProgramStart>),
    /// Stop the run's workers where they are (SIGSTOP to each process group; `pause` of a
    /// container).
    Pause,
    /// Continue them (SIGCONT; `unpause`).
    Resume,
    /// End them: SIGTERM, then SIGKILL after `grace_ms` (containers: `stop -t`).
    Stop {
        /// Between SIGTERM and SIGKILL, ms.
        grace_ms: u64,
    },
}

/// The workers of a program run that one agent is to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramStart {
    /// The project.
    pub project: String,
    /// The version (resolved: never `latest`).
    pub version: String,
    /// `process` or `container`.
    pub runtime: String,
    /// The packed directory of a `command` version: fetched from
    /// `{api_url}/api/v1/projects/{project}/versions/{version}/artifact` with the run token,
    /// checked against `sha256`, cached by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactRef>,
    /// The image of a `container` version (`silk/{project}:{version}`, or its registry
    /// reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The program and its arguments (args filled in).
    pub command: Vec<String>,
    /// The job's environment (args filled in); the agent adds Silk's `SILK_*` variables.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// The workers to start here (indices `0..workers_total`).
    pub workers: Vec<u32>,
    /// All workers of the run.
    pub workers_total: u32,
    /// The hub's API, for the program and for the artifact (`SILK_API_URL`).
    pub api_url: String,
    /// The run's token (`SILK_RUN_TOKEN`): valid for this run's program routes while the
    /// run has not ended. A secret: the agent never logs it.
    pub token: String,
}

/// A packed version directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// SHA-256 of the packed bytes, hex.
    pub sha256: String,
    /// Its size, bytes.
    pub size: u64,
}

/// A worker of a program run started or ended: from the agent that runs it to the hub that
/// drives the run, on `results.{hub}` (added in wire version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The run.
    pub run: RunId,
    /// The agent.
    pub agent: AgentId,
    /// The worker's index.
    pub worker: u32,
    /// What happened.
    pub event: WorkerEvent,
}

/// The answer to a [`Command::Fetch`], from the agent to the hub that asked, on
/// `results.{hub}` (added in wire version 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchReply {
    /// The run.
    pub run: RunId,
    /// The agent that fetched.
    pub agent: AgentId,
    /// The fetch's id, from the command.
    pub id: String,
    /// What happened: `status`, `error`, `bytes`, `timings`, `proxy`, `bytes_saved` (when
    /// trimmed), `crawl_delay_ms`, and `body`: the response's bytes (`base64`) or the trimmed
    /// text (`text`), cut to the run's `max_return_body_bytes` and then marked `truncated`.
    pub outcome: FetchOutcome,
    /// The response's headers as received, in order (`Content-Encoding` describes the wire,
    /// not `body`, which is decoded).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
}

/// What happened to a worker, tagged by `is`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// Its process (or container) started.
    Started,
    /// It ended: its exit code, or the signal that killed it, and its last output lines.
    Exited {
        /// The exit code, when it exited.
        #[serde(default)]
        code: Option<i32>,
        /// The signal, when one ended it.
        #[serde(default)]
        signal: Option<i32>,
        /// Its last output lines (at most a few).
        #[serde(default)]
        tail: Vec<String>,
        /// The agent stopped it because it had heard from no hub for its `detach_after`
        /// (detach mode): the worker did not end by itself, and the hub starts it again.
        /// Added in wire version 1; not written when `false`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        detached: bool,
    },
    /// It could not be started (artifact, image, program not found, programs refused).
    Failed {
        /// Why, for people.
        error: String,
    },
}

/// A structured failure of one request, as seen by the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultError {
    /// Why, as a code (`timeout`, `dns`, `tls`, `body_too_large`, `parse_budget`, `agent_lost`,
    /// …): its snake_case string on the wire, [`silk_core::OutcomeCode::Other`] for a code
    /// this build does not know.
    pub code: silk_core::OutcomeCode,
    /// For people.
    #[serde(default)]
    pub message: String,
    /// Whether the frontier should retry the request.
    #[serde(default)]
    pub retryable: bool,
}

/// Where the time of one request went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// From sending the request to the end of the body.
    #[serde(default)]
    pub fetch_ms: u64,
    /// Trimming and parsing.
    #[serde(default)]
    pub parse_ms: u64,
    /// From receiving the command to publishing the result.
    #[serde(default)]
    pub total_ms: u64,
}

/// What came of one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FetchOutcome {
    /// HTTP status, when a response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why it failed, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ResultError>,
    /// Links discovered (absolute URLs).
    #[serde(default)]
    pub links: Vec<String>,
    /// Items extracted.
    #[serde(default)]
    pub items: Vec<serde_json::Value>,
    /// Timings.
    #[serde(default)]
    pub timings: Timings,
    /// Body bytes received.
    #[serde(default)]
    pub bytes: u64,
    /// For a redirect (a 3xx with a usable `Location`): the redirect count its target
    /// carries (`request.redirects + 1`); the target is then the only entry of `links` and
    /// keeps the request's depth. 0 (absent) otherwise. Added in wire version 1.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub redirects: u32,
    /// Body bytes removed by the run's trimming rules (0, absent, when none ran). Added in
    /// wire version 1.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub bytes_saved: u64,
    /// The proxy the request went through, without credentials; absent = direct. Added in
    /// wire version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// The (trimmed) body, when the run asked for bodies. Added in wire version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<ResultBody>,
    /// The `Crawl-delay` (ms) that the robots.txt of the request's host gives the run's user
    /// agent, when it gives one (absent otherwise, and when the run does not read robots.txt).
    /// Set on every result of such a host; the hub's frontier applies it. Added in wire
    /// version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crawl_delay_ms: Option<u64>,
}

impl FetchOutcome {
    /// Whether the request was given back unharmed, to be dispatched again without using a
    /// retry (`robots_fetched`, `no_downloader`, `agent_stopping`): it did not finish.
    pub fn given_back(&self) -> bool {
        self.error
            .as_ref()
            .is_some_and(|e| e.code.disposition(e.retryable) == silk_core::Disposition::Released)
    }
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// How [`ResultBody::data`] holds the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyEncoding {
    /// UTF-8 text (an HTML, XML, JSON or text page, decoded from its charset).
    Text,
    /// Standard base64 with padding (a body that is not text).
    Base64,
}

/// A body returned with a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultBody {
    /// How `data` holds the body.
    pub encoding: BodyEncoding,
    /// The body.
    pub data: String,
    /// The response's `Content-Type`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Whether `data` was cut to the run's size limit for returned bodies.
    #[serde(default)]
    pub truncated: bool,
}

/// The result of one leased request, from an agent to the hubs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The run.
    pub run: RunId,
    /// The agent that fetched it.
    pub agent: AgentId,
    /// The lease from the [`LeasedRequest`]: the hub acks the frontier with it.
    pub lease_id: LeaseId,
    /// What happened.
    pub outcome: FetchOutcome,
}

/// Run control, on the run's subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Control {
    /// Stop taking new requests, keep state.
    Pause {
        /// The run.
        run: RunId,
    },
    /// Continue after a pause.
    Resume {
        /// The run.
        run: RunId,
    },
    /// Stop for good.
    Stop {
        /// The run.
        run: RunId,
    },
}

/// An agent's answer to [`Command::Allocate`], on the `allocations` subject: whether the
/// run's downloader is ready on the agent, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationReply {
    /// The run of the `allocate`.
    pub run: RunId,
    /// The agent that answers.
    pub agent: AgentId,
    /// Whether the config was accepted and the downloader built (or already held).
    pub ok: bool,
    /// Why not, when not `ok` (the refused config's problems, or the build error).
    #[serde(default)]
    pub error: Option<String>,
}

/// The severity of a [`LogEntry`]; ordered from `Trace` (least) to `Error` (most). On the
/// wire: `trace`, `debug`, `info`, `warn`, `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Step by step detail.
    Trace,
    /// Detail for whoever debugs a run (a request dropped by robots.txt, …).
    Debug,
    /// Normal life of a run (downloader allocated, built, released, …).
    Info,
    /// Something went wrong with a request or a resource, the run goes on (a 404, a proxy
    /// switched out, a failed redial, …).
    Warn,
    /// The run cannot work as asked (its allocation was refused, its downloader cannot be
    /// built).
    Error,
}

impl LogLevel {
    /// The level as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One log line of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// When it was written, ms since the Unix epoch (the writer's clock).
    pub ts_ms: u64,
    /// How serious.
    pub level: LogLevel,
    /// For people.
    #[serde(default)]
    pub message: String,
}

/// Log lines of one run from one agent, on the `logs` subject: a batch, so that a busy
/// agent sends few messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBatch {
    /// The run the lines are about.
    pub run: RunId,
    /// The agent that wrote them (their source).
    pub agent: AgentId,
    /// The lines, in the order they were written.
    #[serde(default)]
    pub lines: Vec<LogEntry>,
}

/// The typed body of an envelope.
// A result is by far the largest body; one message is built per bus message and moved into
// its envelope, so the size costs nothing that matters, and boxing it would change
// `Message::Result` for every reader.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `register`
    Register(Register),
    /// `heartbeat`
    Heartbeat(Heartbeat),
    /// `command`
    Command(Command),
    /// `result`
    Result(RunResult),
    /// `control`
    Control(Control),
    /// `allocated`
    Allocated(AllocationReply),
    /// `log`
    Log(LogBatch),
    /// `worker`
    Worker(WorkerReport),
    /// `fetched`
    Fetched(FetchReply),
    /// `beacon`
    Beacon(HubBeacon),
}

impl Message {
    /// The message's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Message::Register(_) => Kind::Register,
            Message::Heartbeat(_) => Kind::Heartbeat,
            Message::Command(_) => Kind::Command,
            Message::Result(_) => Kind::Result,
            Message::Control(_) => Kind::Control,
            Message::Allocated(_) => Kind::Allocated,
            Message::Log(_) => Kind::Log,
            Message::Worker(_) => Kind::Worker,
            Message::Fetched(_) => Kind::Fetched,
            Message::Beacon(_) => Kind::Beacon,
        }
    }
}

macro_rules! into_message {
    ($($ty:ident => $variant:ident),*) => {$(
        impl From<$ty> for Message {
            fn from(m: $ty) -> Self {
                Message::$variant(m)
            }
        }
    )*};
}
into_message!(
    Register => Register,
    Heartbeat => Heartbeat,
    Command => Command,
    RunResult => Result,
    Control => Control,
    AllocationReply => Allocated,
    LogBatch => Log,
    WorkerReport => Worker,
    FetchReply => Fetched,
    HubBeacon => Beacon
);

/// Default TTLs, by kind of message. The publisher stamps the TTL; the reader enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TtlPolicy {
    /// How often agents send heartbeats; a heartbeat lives 3 intervals.
    pub heartbeat_interval_ms: u64,
    /// TTL of `allocate` and `shutdown` commands, and of `allocated` replies.
    pub allocate_ttl_ms: u64,
    /// TTL of `download` commands (keep it at or below the frontier's lease timeout: after
    /// that the hub re-dispatches the requests anyway).
    pub download_ttl_ms: u64,
    /// TTL of `log` batches: long enough to survive a short hub outage, short enough that a
    /// hub coming back much later does not store an old backlog. Added in wire version 1.
    pub log_ttl_ms: u64,
}

impl Default for TtlPolicy {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 1_000,
            allocate_ttl_ms: 30_000,
            download_ttl_ms: 60_000,
            log_ttl_ms: 600_000,
        }
    }
}

impl TtlPolicy {
    /// The heartbeat TTL: 3 × the interval.
    pub fn heartbeat_ttl_ms(&self) -> u64 {
        self.heartbeat_interval_ms.saturating_mul(3)
    }

    /// The TTL a message gets: heartbeat and hub beacon 3 × interval; allocate, shutdown and allocation
    /// replies `allocate_ttl_ms`; download and fetch `download_ttl_ms`; log batches `log_ttl_ms`;
    /// registrations, releases, results and run control none.
    pub fn ttl_ms(&self, message: &Message) -> Option<u64> {
        match message {
            Message::Heartbeat(_) | Message::Beacon(_) => Some(self.heartbeat_ttl_ms()),
            Message::Command(Command::Allocate { .. } | Command::Shutdown)
            | Message::Allocated(_) => Some(self.allocate_ttl_ms),
            Message::Command(Command::Download { .. } | Command::Fetch { .. }) => {
                Some(self.download_ttl_ms)
            }
            Message::Log(_) => Some(self.log_ttl_ms),
            Message::Command(Command::Release { .. } | Command::Program { .. })
            | Message::Register(_)
            | Message::Result(_)
            | Message::Worker(_)
            | Message::Fetched(_)
            | Message::Control(_) => None,
        }
    }

    /// An envelope for `body` sent at `sent_ms`, with the TTL of its kind.
    pub fn envelope(&self, body: impl Into<Message>, sent_ms: u64) -> Envelope {
        let body = body.into();
        let ttl_ms = self.ttl_ms(&body);
        Envelope::new(body, sent_ms, ttl_ms)
    }
}

/// The versioned envelope of every bus message.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Wire version ([`WIRE_VERSION`]).
    pub v: u16,
    /// Unique id (idempotent handling, publish de-duplication).
    pub id: MessageId,
    /// When it was built, ms since the epoch.
    pub sent_ms: u64,
    /// Time to live from `sent_ms`; `None` = never expires.
    pub ttl_ms: Option<u64>,
    /// The message.
    pub body: Message,
}

#[derive(Serialize)]
struct WireOut<'a, T: Serialize> {
    v: u16,
    id: &'a str,
    sent_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    kind: &'static str,
    body: &'a T,
}

/// Everything optional so that a missing field is reported by name after the version check.
#[derive(Deserialize)]
struct WireIn {
    v: Option<u16>,
    id: Option<String>,
    sent_ms: Option<u64>,
    #[serde(default)]
    ttl_ms: Option<u64>,
    kind: Option<String>,
    body: Option<serde_json::Value>,
}

impl Envelope {
    /// An envelope with a fresh id.
    pub fn new(body: impl Into<Message>, sent_ms: u64, ttl_ms: Option<u64>) -> Self {
        Envelope {
            v: WIRE_VERSION,
            id: MessageId::generate(),
            sent_ms,
            ttl_ms,
            body: body.into(),
        }
    }

    /// The kind of the body.
    pub fn kind(&self) -> Kind {
        self.body.kind()
    }

    /// When it expires (ms since the epoch), if it does. Registrations never do.
    pub fn expires_at_ms(&self) -> Option<u64> {
        if matches!(self.body, Message::Register(_)) {
            return None;
        }
        self.ttl_ms.map(|ttl| self.sent_ms.saturating_add(ttl))
    }

    /// Whether it is stale at `now_ms`: older than its TTL. Registrations never are.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms().is_some_and(|at| now_ms > at)
    }

    /// The JSON bytes of the envelope.
    pub fn encode(&self) -> Result<Bytes, BusError> {
        fn out<T: Serialize>(
            e: &Envelope,
            kind: Kind,
            body: &T,
        ) -> Result<Vec<u8>, serde_json::Error> {
            serde_json::to_vec(&WireOut {
                v: e.v,
                id: e.id.as_str(),
                sent_ms: e.sent_ms,
                ttl_ms: e.ttl_ms,
                kind: kind.as_str(),
                body,
            })
        }
        let kind = self.kind();
        let bytes = match &self.body {
            Message::Register(b) => out(self, kind, b),
            Message::Heartbeat(b) => out(self, kind, b),
            Message::Command(b) => out(self, kind, b),
            Message::Result(b) => out(self, kind, b),
            Message::Control(b) => out(self, kind, b),
            Message::Allocated(b) => out(self, kind, b),
            Message::Log(b) => out(self, kind, b),
            Message::Worker(b) => out(self, kind, b),
            Message::Fetched(b) => out(self, kind, b),
            Message::Beacon(b) => out(self, kind, b),
        };
        bytes.map(Bytes::from).map_err(|e| BusError::Encode {
            kind: kind.as_str().into(),
            reason: e.to_string(),
        })
    }

    /// Decodes a payload read from `subject` (named in errors). Never panics.
    pub fn decode(subject: &str, payload: &[u8]) -> Result<Envelope, BusError> {
        let bad = |reason: String| BusError::malformed(subject, reason);
        let wire: WireIn = serde_json::from_slice(payload)
            .map_err(|e| bad(format!("not a JSON envelope: {e}")))?;
        let v = wire.v.ok_or_else(|| bad("missing field `v`".into()))?;
        if v != WIRE_VERSION {
            return Err(BusError::UnsupportedVersion {
                subject: subject.into(),
                version: v,
                supported: WIRE_VERSION,
            });
        }
        let missing = |field: &str| bad(format!("missing field `{field}`"));
        let id = wire.id.ok_or_else(|| missing("id"))?;
        if id.is_empty() {
            return Err(bad("empty field `id`".into()));
        }
        let sent_ms = wire.sent_ms.ok_or_else(|| missing("sent_ms"))?;
        let kind_text = wire.kind.ok_or_else(|| missing("kind"))?;
        let kind =
            Kind::parse(&kind_text).ok_or_else(|| bad(format!("unknown kind `{kind_text}`")))?;
        let body = wire.body.ok_or_else(|| missing("body"))?;
        fn typed<T: serde::de::DeserializeOwned>(
            body: serde_json::Value,
        ) -> Result<T, serde_json::Error> {
            serde_json::from_value(body)
        }
        let body = match kind {
            Kind::Register => typed(body).map(Message::Register),
            Kind::Heartbeat => typed(body).map(Message::Heartbeat),
            Kind::Command => typed(body).map(Message::Command),
            Kind::Result => typed(body).map(Message::Result),
            Kind::Control => typed(body).map(Message::Control),
            Kind::Allocated => typed(body).map(Message::Allocated),
            Kind::Log => typed(body).map(Message::Log),
            Kind::Worker => typed(body).map(Message::Worker),
            Kind::Fetched => typed(body).map(Message::Fetched),
            Kind::Beacon => typed(body).map(Message::Beacon),
        }
        .map_err(|e| bad(format!("`{kind}` body: {e}")))?;
        Ok(Envelope {
            v,
            id: MessageId(id),
            sent_ms,
            ttl_ms: wire.ttl_ms,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Message> {
        let mut req = Request::from_canonical("https://example.com/a".into());
        req.meta
            .insert("referer".into(), serde_json::json!("https://example.com/"));
        vec![
            Register {
                agent: "a1".into(),
                host: "h1".into(),
                version: "0.1.0".into(),
                cores: 8,
                memory_bytes: 1 << 34,
                labels: [("pool".to_owned(), "cn".to_owned())].into(),
                capacity: 64,
            }
            .into(),
            Heartbeat {
                agent: "a1".into(),
                cpu_pct: 12.5,
                memory_bytes: 1 << 27,
                active_downloaders: 2,
                in_flight: 17,
                qps: 40.0,
                seq: 812,
            }
            .into(),
            Command::Allocate {
                run: "r1".into(),
                config: serde_json::json!({"proxy": null}),
                allow_networks: Vec::new(),
            }
            .into(),
            Command::Download {
                run: "r1".into(),
                batch: vec![LeasedRequest {
                    lease_id: LeaseId(1),
                    request: req.clone(),
                }],
                reply_to: None,
            }
            .into(),
            Command::Download {
                run: "r1".into(),
                batch: vec![LeasedRequest {
                    lease_id: LeaseId(2),
                    request: req,
                }],
                reply_to: Some("hub-a".into()),
            }
            .into(),
            Command::Release { run: "r1".into() }.into(),
            Command::Shutdown.into(),
            RunResult {
                run: "r1".into(),
                agent: "a1".into(),
                lease_id: LeaseId(1),
                outcome: FetchOutcome {
                    status: Some(200),
                    error: None,
                    links: vec!["https://example.com/b".into()],
                    items: vec![serde_json::json!({"title": "t"})],
                    timings: Timings {
                        fetch_ms: 10,
                        parse_ms: 2,
                        total_ms: 13,
                    },
                    bytes: 1234,
                    redirects: 1,
                    bytes_saved: 100,
                    proxy: Some("http://127.0.0.1:3128/".into()),
                    body: Some(ResultBody {
                        encoding: BodyEncoding::Text,
                        data: "<p>t</p>".into(),
                        content_type: Some("text/html".into()),
                        truncated: false,
                    }),
                    crawl_delay_ms: Some(2_000),
                },
            }
            .into(),
            Control::Pause { run: "r1".into() }.into(),
            Control::Resume { run: "r1".into() }.into(),
            Control::Stop { run: "r1".into() }.into(),
            AllocationReply {
                run: "r1".into(),
                agent: "a1".into(),
                ok: true,
                error: None,
            }
            .into(),
            AllocationReply {
                run: "r2".into(),
                agent: "a1".into(),
                ok: false,
                error: Some("run `r2`: invalid downloader config: qps: must be positive".into()),
            }
            .into(),
            LogBatch {
                run: "r1".into(),
                agent: "a1".into(),
                lines: vec![
                    LogEntry {
                        ts_ms: 1_000,
                        level: LogLevel::Info,
                        message: "downloader allocated".into(),
                    },
                    LogEntry {
                        ts_ms: 1_001,
                        level: LogLevel::Warn,
                        message: "https://example.com/a: http status 404 \"é\"\n".into(),
                    },
                ],
            }
            .into(),
            Command::Program {
                run: "r1".into(),
                action: ProgramAction::Start(Box::new(ProgramStart {
                    project: "shop".into(),
                    version: "1.0.0".into(),
                    runtime: "process".into(),
                    artifact: Some(ArtifactRef {
                        sha256: "ab".repeat(32),
                        size: 10,
                    }),
                    image: None,
                    command: vec!["./run.sh".into(), "eu".into()],
                    env: [("A".to_owned(), "b".to_owned())].into(),
                    workers: vec![0, 2],
                    workers_total: 3,
                    api_url: "http://127.0.0.1:7000".into(),
                    token: "t".into(),
                })),
                reply_to: Some("hub-a".into()),
            }
            .into(),
            Command::Program {
                run: "r1".into(),
                action: ProgramAction::Stop { grace_ms: 5 },
                reply_to: None,
            }
            .into(),
            WorkerReport {
                run: "r1".into(),
                agent: "a1".into(),
                worker: 2,
                event: WorkerEvent::Exited {
                    code: None,
                    signal: Some(9),
                    tail: vec!["last".into()],
                    detached: true,
                },
            }
            .into(),
            Command::Fetch {
                run: "r1".into(),
                id: "f1".into(),
                request: Request::from_canonical("http://h/x?q=1".into()),
                trim: true,
                reply_to: Some("hub-a".into()),
            }
            .into(),
            FetchReply {
                run: "r1".into(),
                agent: "a1".into(),
                id: "f1".into(),
                outcome: FetchOutcome {
                    status: Some(200),
                    body: Some(ResultBody {
                        encoding: BodyEncoding::Base64,
                        data: "aGk=".into(),
                        content_type: Some("text/plain".into()),
                        truncated: false,
                    }),
                    ..FetchOutcome::default()
                },
                headers: vec![("content-type".into(), "text/plain".into())],
            }
            .into(),
            HubBeacon {
                hub: "hub-a".into(),
                seq: 7,
            }
            .into(),
            Command::Allocate {
                run: "r2".into(),
                config: serde_json::json!({}),
                allow_networks: vec!["10.1.0.0/16".parse().unwrap(), "fd00::/8".parse().unwrap()],
            }
            .into(),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        let policy = TtlPolicy::default();
        for m in samples() {
            let e = policy.envelope(m, 1_000);
            let back = Envelope::decode("silk.x", &e.encode().unwrap()).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn wire_shape_is_documented_shape() {
        let e = Envelope {
            v: 1,
            id: MessageId("m1".into()),
            sent_ms: 5,
            ttl_ms: None,
            body: Command::Release { run: "r1".into() }.into(),
        };
        let text = String::from_utf8(e.encode().unwrap().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"id":"m1","sent_ms":5,"kind":"command","body":{"op":"release","run":"r1"}}"#
        );
    }

    #[test]
    fn download_reply_to_is_optional_both_ways() {
        let download = |reply_to: Option<&str>| Envelope {
            v: 1,
            id: MessageId("m1".into()),
            sent_ms: 5,
            ttl_ms: Some(60_000),
            body: Command::Download {
                run: "r1".into(),
                batch: vec![],
                reply_to: reply_to.map(str::to_owned),
            }
            .into(),
        };
        let with = download(Some("hub-a"));
        let text = String::from_utf8(with.encode().unwrap().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"id":"m1","sent_ms":5,"ttl_ms":60000,"kind":"command","body":{"op":"download","run":"r1","batch":[],"reply_to":"hub-a"}}"#
        );
        assert_eq!(Envelope::decode("s", text.as_bytes()).unwrap(), with);
        let without = download(None);
        let text = String::from_utf8(without.encode().unwrap().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"id":"m1","sent_ms":5,"ttl_ms":60000,"kind":"command","body":{"op":"download","run":"r1","batch":[]}}"#,
            "an absent reply_to is not written (older agents read the same bytes as before)"
        );
        assert_eq!(Envelope::decode("s", text.as_bytes()).unwrap(), without);
        // An older hub's download (no field) and an explicit null decode to None.
        for old in [
            br#"{"v":1,"id":"m1","sent_ms":5,"ttl_ms":60000,"kind":"command","body":{"op":"download","run":"r1","batch":[]}}"#.as_slice(),
            br#"{"v":1,"id":"m1","sent_ms":5,"ttl_ms":60000,"kind":"command","body":{"op":"download","run":"r1","batch":[],"reply_to":null}}"#,
        ] {
            assert_eq!(Envelope::decode("s", old).unwrap(), without);
        }
        // A reply_to that is no subject token still decodes: the agent decides what to do.
        let odd = br#"{"v":1,"id":"m1","sent_ms":5,"kind":"command","body":{"op":"download","run":"r1","batch":[],"reply_to":"a.b *"}}"#;
        let Message::Command(Command::Download { reply_to, .. }) =
            Envelope::decode("s", odd).unwrap().body
        else {
            panic!("not a download")
        };
        assert_eq!(reply_to.as_deref(), Some("a.b *"));
    }

    #[test]
    fn result_fields_added_in_v1_are_optional_both_ways() {
        let plain = FetchOutcome {
            status: Some(200),
            ..FetchOutcome::default()
        };
        let text = serde_json::to_string(&plain).unwrap();
        assert_eq!(
            text,
            r#"{"status":200,"links":[],"items":[],"timings":{"fetch_ms":0,"parse_ms":0,"total_ms":0},"bytes":0}"#,
            "defaults of the added fields are not written"
        );
        let old: FetchOutcome =
            serde_json::from_str(r#"{"status":301,"links":["http://h/"]}"#).unwrap();
        assert_eq!(
            (
                old.redirects,
                old.bytes_saved,
                old.proxy,
                old.body,
                old.crawl_delay_ms
            ),
            (0, 0, None, None, None)
        );
        let polite = FetchOutcome {
            crawl_delay_ms: Some(2_000),
            ..plain
        };
        let text = serde_json::to_string(&polite).unwrap();
        assert!(text.ends_with(r#","crawl_delay_ms":2000}"#), "{text}");
    }

    #[test]
    fn allocation_replies_have_the_documented_shape() {
        let e = Envelope {
            v: 1,
            id: MessageId("m1".into()),
            sent_ms: 5,
            ttl_ms: Some(30_000),
            body: AllocationReply {
                run: "r1".into(),
                agent: "a1".into(),
                ok: true,
                error: None,
            }
            .into(),
        };
        let text = String::from_utf8(e.encode().unwrap().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"id":"m1","sent_ms":5,"ttl_ms":30000,"kind":"allocated","body":{"run":"r1","agent":"a1","ok":true,"error":null}}"#
        );
        let refused = br#"{"v":1,"id":"m2","sent_ms":5,"kind":"allocated",
            "body":{"run":"r1","agent":"a1","ok":false,"error":"bad qps"}}"#;
        let Message::Allocated(reply) = Envelope::decode("s", refused).unwrap().body else {
            panic!("not an allocation reply")
        };
        assert_eq!((reply.ok, reply.error.as_deref()), (false, Some("bad qps")));
        let no_error = br#"{"v":1,"id":"m3","sent_ms":5,"kind":"allocated",
            "body":{"run":"r1","agent":"a1","ok":true}}"#;
        let Message::Allocated(reply) = Envelope::decode("s", no_error).unwrap().body else {
            panic!("not an allocation reply")
        };
        assert_eq!((reply.ok, reply.error), (true, None));
        let err = Envelope::decode(
            "silk.allocations",
            br#"{"v":1,"id":"m4","sent_ms":5,"kind":"allocated","body":{"run":"r1","ok":true}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`allocated` body: missing field `agent`"),
            "{err}"
        );
    }

    #[test]
    fn log_batches_have_the_documented_shape() {
        let e = Envelope {
            v: 1,
            id: MessageId("m1".into()),
            sent_ms: 5,
            ttl_ms: Some(600_000),
            body: LogBatch {
                run: "r1".into(),
                agent: "a1".into(),
                lines: vec![LogEntry {
                    ts_ms: 4,
                    level: LogLevel::Warn,
                    message: "http://h/x: http status 404".into(),
                }],
            }
            .into(),
        };
        let text = String::from_utf8(e.encode().unwrap().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"id":"m1","sent_ms":5,"ttl_ms":600000,"kind":"log","body":{"run":"r1","agent":"a1","lines":[{"ts_ms":4,"level":"warn","message":"http://h/x: http status 404"}]}}"#
        );
        for (level, text) in [
            (LogLevel::Trace, "trace"),
            (LogLevel::Debug, "debug"),
            (LogLevel::Info, "info"),
            (LogLevel::Warn, "warn"),
            (LogLevel::Error, "error"),
        ] {
            assert_eq!(serde_json::to_value(level).unwrap(), text);
            assert_eq!(level.to_string(), text);
        }
        assert!(LogLevel::Trace < LogLevel::Debug && LogLevel::Warn < LogLevel::Error);
        let err = Envelope::decode(
            "silk.logs",
            br#"{"v":1,"id":"m2","sent_ms":5,"kind":"log","body":{"run":"r1","agent":"a1","lines":[{"ts_ms":1,"level":"fatal"}]}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`log` body: unknown variant `fatal`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_are_tolerated() {
        let text = r#"{"v":1,"id":"m","sent_ms":1,"kind":"heartbeat","future":{"x":1},
            "body":{"agent":"a","cpu_pct":null,"gpu_pct":3,"seq":2}}"#;
        let e = Envelope::decode("s", text.as_bytes()).unwrap();
        let Message::Heartbeat(hb) = e.body else {
            panic!("not a heartbeat")
        };
        assert_eq!((hb.cpu_pct, hb.seq, e.ttl_ms), (0.0, 2, None));
    }

    #[test]
    fn malformed_payloads_are_errors_naming_subject_and_cause() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not a JSON envelope"),
            (b"\xff\xfe", "not a JSON envelope"),
            (b"[1,2]", "not a JSON envelope"),
            (b"{\"v\":1", "not a JSON envelope"),
            (br#"{"id":"m","sent_ms":1,"kind":"heartbeat","body":{}}"#, "missing field `v`"),
            (br#"{"v":1,"sent_ms":1,"kind":"heartbeat","body":{}}"#, "missing field `id`"),
            (br#"{"v":1,"id":"","sent_ms":1,"kind":"heartbeat","body":{}}"#, "empty field `id`"),
            (br#"{"v":1,"id":"m","kind":"heartbeat","body":{}}"#, "missing field `sent_ms`"),
            (br#"{"v":1,"id":"m","sent_ms":-1,"kind":"x","body":{}}"#, "not a JSON envelope"),
            (br#"{"v":1,"id":"m","sent_ms":1,"body":{}}"#, "missing field `kind`"),
            (br#"{"v":1,"id":"m","sent_ms":1,"kind":"gossip","body":{}}"#, "unknown kind `gossip`"),
            (br#"{"v":1,"id":"m","sent_ms":1,"kind":"heartbeat"}"#, "missing field `body`"),
            (br#"{"v":1,"id":"m","sent_ms":1,"kind":"heartbeat","body":{}}"#, "`heartbeat` body: missing field `agent`"),
            (br#"{"v":1,"id":"m","sent_ms":1,"kind":"command","body":{"op":"fly"}}"#, "`command` body: unknown variant `fly`"),
            (br#"{"v":1,"id":"m","sent_ms":1,"kind":"command","body":{"op":"download","run":"r"}}"#, "missing field `batch`"),
            (br#"{"v":1,"id":"m","sent_ms":1,"kind":"register","body":{"agent":"a","host":"h","version":"1","cores":"8","memory_bytes":1}}"#, "`register` body: invalid type"),
        ];
        for (payload, want) in cases {
            let err = Envelope::decode("silk.results", payload).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, BusError::Malformed { .. }), "{text}");
            assert!(
                text.starts_with("subject `silk.results`: malformed message: "),
                "{text}"
            );
            assert!(
                text.contains(want),
                "{:?}: {text}",
                String::from_utf8_lossy(payload)
            );
        }
        let err = Envelope::decode("s", br#"{"v":2,"whatever":true}"#).unwrap_err();
        assert_eq!(
            err,
            BusError::UnsupportedVersion {
                subject: "s".into(),
                version: 2,
                supported: 1
            }
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn expiry_by_kind() {
        let policy = TtlPolicy {
            heartbeat_interval_ms: 1_000,
            allocate_ttl_ms: 5_000,
            download_ttl_ms: 7_000,
            log_ttl_ms: 9_000,
        };
        let hb = policy.envelope(samples().remove(1), 10_000);
        assert_eq!(hb.ttl_ms, Some(3_000));
        assert!(!hb.expired(13_000) && hb.expired(13_001));
        assert!(!hb.expired(0), "a message from the future is not stale");
        let dl = policy.envelope(samples().remove(3), 10_000);
        assert_eq!(dl.ttl_ms, Some(7_000));
        let alloc = policy.envelope(samples().remove(2), 10_000);
        assert_eq!(alloc.ttl_ms, Some(5_000));
        // A registration never expires, even when a publisher stamped a TTL on it.
        let mut reg = policy.envelope(samples().remove(0), 0);
        assert_eq!(reg.ttl_ms, None);
        reg.ttl_ms = Some(1);
        assert!(!reg.expired(u64::MAX));
        for m in samples().into_iter().skip(4) {
            match m {
                Message::Command(Command::Shutdown | Command::Allocate { .. })
                | Message::Allocated(_) => {
                    assert_eq!(policy.ttl_ms(&m), Some(5_000), "{m:?}");
                }
                Message::Command(Command::Download { .. } | Command::Fetch { .. }) => {
                    assert_eq!(policy.ttl_ms(&m), Some(7_000), "{m:?}");
                }
                Message::Log(_) => {
                    assert_eq!(policy.ttl_ms(&m), Some(9_000), "{m:?}");
                    let e = policy.envelope(m, 10_000);
                    assert!(!e.expired(19_000) && e.expired(19_001));
                }
                // A hub's beacon lives as long as a heartbeat.
                Message::Beacon(_) => assert_eq!(policy.ttl_ms(&m), Some(3_000), "{m:?}"),
                _ => assert_eq!(policy.ttl_ms(&m), None, "{m:?}"),
            }
        }
    }

    #[test]
    fn ids_are_unique_and_time_ordered() {
        let a = MessageId::generate();
        let b = MessageId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(a < b);
    }
}
