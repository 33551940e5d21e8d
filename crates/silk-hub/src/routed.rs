//! What the router and the hub exchange: routed tasks in ([`FeedTask`], fed to a job's
//! run), final outcomes out ([`OutcomeLine`], a line of a run's `outcomes.jsonl`), and
//! [`OutcomeConsumer`], what reads those outcomes back (the router's
//! `silk.RunResultsInbound`). Plain data and one trait: no I/O.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use silk_core::RunId;

/// One routed task for a job: see [`HubHandle::feed_job`].
#[derive(Debug, Clone, PartialEq)]
pub struct FeedTask {
    /// The URL to fetch (canonicalised by the job's spider).
    pub url: String,
    /// The request's priority (the task's built-in `priority`).
    pub priority: i32,
    /// The task as pushed; it rides in the request's meta and comes back in the outcome
    /// (none when empty: a requeued request is no router task).
    pub task: Map<String, Value>,
    /// Links from the start request (0 for a routed task; a requeued request keeps its own).
    pub depth: u32,
    /// The delivery id (`task_uuid:routed_count`): the request's dedup salt.
    pub delivery_id: String,
}

/// One final outcome (a line of `outcomes.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutcomeLine {
    pub v: u32,
    pub ok: bool,
    pub http_code: Option<u16>,
    pub error_code: Option<String>,
    pub error_msg: String,
    pub url: String,
    pub method: String,
    pub depth: u32,
    pub retries: u32,
    pub items: u64,
    pub links: u64,
    pub bytes: u64,
    pub fetch_ms: u64,
    pub agent: String,
    pub run: String,
    /// The run's tenant (lines from before tenants: `default`).
    #[serde(default = "silk_api::tenants::default_tenant")]
    pub tenant: String,
    pub job: Option<String>,
    pub job_id: Option<String>,
    pub spider_name: String,
    pub time_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Map<String, Value>>,
    /// The frontier's verdict: `done`, `failed` or `dropped` (empty in lines of older hubs:
    /// then `ok` says done or failed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub outcome: String,
    /// The request's dedup salt, when it has one (a routed or requeued request): with the
    /// URL, what makes it one request of its run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
    /// A redirect hop (done: its target is another request of the run, which carries on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redirect: bool,
}

impl OutcomeLine {
    /// `done`, `failed` or `dropped`.
    pub(crate) fn outcome(&self) -> &str {
        match self.outcome.as_str() {
            "" if self.ok => "done",
            "" => "failed",
            o => o,
        }
    }
}

/// A reader of the runs' final outcomes (the router's `silk.RunResultsInbound`), driven by
/// [`HubHandle::consume_outcomes`](crate::HubHandle::consume_outcomes): every run's
/// outcomes after a stored offset, delivered at least once, across hub restarts.
#[async_trait::async_trait]
pub(crate) trait OutcomeConsumer: Send + Sync + 'static {
    /// Its name, unique among the hub's consumers: its offsets are kept under it.
    fn name(&self) -> &str;

    /// How many outcome lines to read at once.
    fn page_size(&self) -> usize;

    /// The name of its offset files in each run's directory; `None`: `router-{name}.json`.
    fn state_file(&self) -> Option<String> {
        None
    }

    /// How long to let lines gather after a page that was not full, before reading again
    /// (zero: read at every write). A consumer whose delivery costs per call (a store
    /// write) lingers, so that a fast run gives it full pages, not a call per line.
    fn linger(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// The task an outcome becomes, or `None` when the consumer does not want it.
    fn task(&self, line: OutcomeLine) -> Option<Value>;

    /// Delivers tasks of `run`. Those not taken stay in `todo` and are offered again with
    /// back-off; the offset moves only past what was delivered.
    async fn deliver(&self, run: &RunId, todo: &mut Vec<Value>) -> Result<(), String>;

    /// Resolves when the consumer stops.
    async fn stopped(&self);
}
