//! The [`MetaStore`] trait: the seam between the control plane (the hub) and where its
//! metadata lives. Every implementation passes [`crate::conformance`].

use crate::error::StoreError;
use crate::model::{
    AgentRow, AllocationRow, ItemRow, JobRow, LeaseRow, LogLine, LogQuery, LogSearch, NewLogLine,
    RunFilter, RunRow, TokenRow,
};
use async_trait::async_trait;

/// The control plane's metadata store. Every call is one transaction: it happened entirely or
/// not at all. Lists are ordered as documented per method (text ordering is by bytes on every
/// backend). Projects, versions, artifacts and settings are its
/// [`crate::projects::ProjectStore`] half; alert rules and alerts its
/// [`crate::alerts::AlertStore`] part; the router's failure records its
/// [`crate::router_failures::RouterFailureStore`] part; the archive of finished requests its
/// [`crate::request_archive::RequestArchiveStore`] part.
#[async_trait]
pub trait MetaStore:
    crate::projects::ProjectStore
    + crate::alerts::AlertStore
    + crate::router_failures::RouterFailureStore
    + crate::request_archive::RequestArchiveStore
    + crate::tenants::TenantStore
    + Send
    + Sync
    + std::fmt::Debug
{
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Where the store is, for people: the SQLite path or the PostgreSQL URL without its
    /// password.
    fn location(&self) -> &str;

    /// Checks that the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Closes the connections (waiting for calls in flight). Calls after `close` fail with
    /// [`StoreError::Query`].
    async fn close(&self);

    // ---- jobs -------------------------------------------------------------------------

    /// Adds a job. [`StoreError::Conflict`] if a job has the same id or the same name.
    async fn create_job(&self, job: &JobRow) -> Result<(), StoreError>;

    /// Replaces the job with `job.id` by `job` (every column, `created_ms` included).
    /// [`StoreError::NotFound`] if there is no such job; [`StoreError::Conflict`] if another
    /// job has `job.name`.
    async fn update_job(&self, job: &JobRow) -> Result<(), StoreError>;

    /// The job with this id.
    async fn get_job(&self, id: &str) -> Result<Option<JobRow>, StoreError>;

    /// The job of `tenant` with this name.
    async fn get_job_by_name(&self, tenant: &str, name: &str)
    -> Result<Option<JobRow>, StoreError>;

    /// All jobs, by name.
    async fn list_jobs(&self) -> Result<Vec<JobRow>, StoreError>;

    /// Removes the job; its runs stay (they keep the `job_id`). Whether it existed.
    async fn delete_job(&self, id: &str) -> Result<bool, StoreError>;

    // ---- runs -------------------------------------------------------------------------

    /// Inserts the run, or replaces the run with the same id.
    async fn put_run(&self, run: &RunRow) -> Result<(), StoreError>;

    /// As [`MetaStore::put_run`], but only while `holder` holds the lease `lease` (expired or
    /// not: a lease nobody took over is still its holder's), in one statement; returns whether
    /// the run was written. A hub that lost a run to another hub cannot write over the new
    /// owner's record.
    async fn put_run_held(
        &self,
        run: &RunRow,
        lease: &str,
        holder: &str,
    ) -> Result<bool, StoreError>;

    /// The run with this id.
    async fn get_run(&self, id: &str) -> Result<Option<RunRow>, StoreError>;

    /// The runs matching `filter`, by `created_ms` then id (both descending if
    /// `newest_first`), at most `filter.limit`.
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError>;

    /// How many runs match `filter` (its `limit` and order are ignored).
    async fn count_runs(&self, filter: &RunFilter) -> Result<u64, StoreError>;

    /// Removes the run and everything stored for it: its allocations, log lines, items (and
    /// their seq counter), archived requests and its lease ([`crate::run_lease_name`]). Whether the run existed
    /// (its other data is removed either way).
    async fn delete_run(&self, id: &str) -> Result<bool, StoreError>;

    // ---- agents -----------------------------------------------------------------------

    /// Inserts the agent, or replaces the agent with the same id — all but its `drained`,
    /// which only a new agent takes from `agent` (a drain is changed by
    /// [`set_agent_drained`](Self::set_agent_drained) alone, so that storing a registration
    /// never undoes a drain set meanwhile).
    async fn put_agent(&self, agent: &AgentRow) -> Result<(), StoreError>;

    /// Sets or ends the agent's drain. Whether the agent exists.
    async fn set_agent_drained(&self, id: &str, drained: bool) -> Result<bool, StoreError>;

    /// The ids of the drained agents, sorted (read often by every hub: ids only).
    async fn list_drained_agents(&self) -> Result<Vec<String>, StoreError>;

    /// The agent with this id.
    async fn get_agent(&self, id: &str) -> Result<Option<AgentRow>, StoreError>;

    /// All agents, by id.
    async fn list_agents(&self) -> Result<Vec<AgentRow>, StoreError>;

    /// Removes the agent (its allocations stay with their runs). Whether it existed.
    async fn delete_agent(&self, id: &str) -> Result<bool, StoreError>;

    // ---- allocations ------------------------------------------------------------------

    /// Replaces the allocation of `run_id` by `rows`, atomically. Every row must have
    /// `run_id` ([`StoreError::BadData`] otherwise); an agent listed twice is a
    /// [`StoreError::Conflict`] and changes nothing.
    async fn put_allocations(&self, run_id: &str, rows: &[AllocationRow])
    -> Result<(), StoreError>;

    /// The allocation of `run_id`, by agent id.
    async fn list_allocations(&self, run_id: &str) -> Result<Vec<AllocationRow>, StoreError>;

    /// Removes the allocation of `run_id`; how many rows went.
    async fn delete_allocations(&self, run_id: &str) -> Result<u64, StoreError>;

    // ---- logs -------------------------------------------------------------------------

    /// Appends the lines in one transaction (multi-row inserts), in slice order: their ids
    /// increase in that order and are above every id visible before the call.
    async fn append_logs(&self, lines: &[NewLogLine]) -> Result<(), StoreError>;

    /// The lines of one run matching `query` (see [`LogQuery`]).
    async fn query_logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, StoreError>;

    /// The lines of every run matching `search`, newest first (see [`LogSearch`]).
    async fn search_logs(&self, search: &LogSearch) -> Result<Vec<LogLine>, StoreError>;

    /// Retention: removes every line (of every run) with `ts_ms < ts_ms`; how many went.
    async fn delete_logs_before(&self, ts_ms: u64) -> Result<u64, StoreError>;

    /// Retention of one job: removes the lines of its runs with `ts_ms < ts_ms`; how many
    /// went.
    async fn delete_job_logs_before(&self, job_id: &str, ts_ms: u64) -> Result<u64, StoreError>;

    /// Removes every line of `run_id`; how many went.
    async fn delete_run_logs(&self, run_id: &str) -> Result<u64, StoreError>;

    // ---- tokens -----------------------------------------------------------------------

    /// Adds a token. [`StoreError::Conflict`] if a token has the same id.
    async fn create_token(&self, token: &TokenRow) -> Result<(), StoreError>;

    /// The token with this id.
    async fn get_token(&self, id: &str) -> Result<Option<TokenRow>, StoreError>;

    /// All tokens, by `created_ms` then id.
    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError>;

    /// Removes the token. Whether it existed.
    async fn delete_token(&self, id: &str) -> Result<bool, StoreError>;

    /// Records a use of the token at `used_ms`; `last_used_ms` never moves back. Whether the
    /// token exists.
    async fn touch_token(&self, id: &str, used_ms: u64) -> Result<bool, StoreError>;

    /// How many tokens there are.
    async fn count_tokens(&self) -> Result<u64, StoreError>;

    // ---- items ------------------------------------------------------------------------

    /// The SQL item sink: stores `(key, ts_ms, data)` items of `run_id`, in one transaction,
    /// ignoring every item whose key the run already has (or that repeats a key earlier in
    /// `items`). Returns how many were newly inserted. Idempotent: replaying a batch inserts
    /// nothing.
    async fn insert_items(
        &self,
        run_id: &str,
        items: &[(String, u64, serde_json::Value)],
    ) -> Result<u64, StoreError>;

    /// The items of `run_id` with `seq > after_seq`, in insertion order, at most `limit`
    /// (capped at [`crate::MAX_PAGE`]). Start with `after_seq = 0`.
    async fn list_items(
        &self,
        run_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<ItemRow>, StoreError>;

    /// How many items `run_id` has.
    async fn count_items(&self, run_id: &str) -> Result<u64, StoreError>;

    /// Removes the items of `run_id`; how many went.
    async fn delete_items(&self, run_id: &str) -> Result<u64, StoreError>;

    // ---- leases -----------------------------------------------------------------------
    //
    // Named leases let several processes share the store: the holder of `run:{id}` owns the
    // run, the holder of `scheduler` fires cron jobs. A holder renews its leases before they
    // expire; when it dies they expire and another holder takes them. "Now" is always the
    // database's clock ([`MetaStore::store_now_ms`]), never the caller's, so holders with
    // skewed clocks agree. A lease is expired when `expires_ms <= now`. A `ttl_ms` above
    // `i64::MAX / 2` is [`StoreError::BadData`].

    /// The database's clock: milliseconds since the Unix epoch, as lease calls see it (to show
    /// how long a lease has left).
    async fn store_now_ms(&self) -> Result<u64, StoreError>;

    /// Takes lease `name` for `holder` until now + `ttl_ms`, atomically (one statement), if
    /// nobody holds it, `holder` already holds it (a renewal: `acquired_ms` is kept), or its
    /// holder let it expire (`acquired_ms` becomes now). Returns whether `holder` holds it
    /// now; `false` changes nothing. Of concurrent calls on a free or expired lease with
    /// different holders, exactly one wins.
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Extends every lease `holder` still holds to now + `ttl_ms`, those that expired without
    /// anybody taking them included, and returns their names, sorted (by bytes). A lease that
    /// another holder took is not there: the caller has lost it.
    async fn renew_leases(&self, holder: &str, ttl_ms: u64) -> Result<Vec<String>, StoreError>;

    /// Removes lease `name` if `holder` holds it (expired or not). Whether it did.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool, StoreError>;

    /// The lease named `name`, expired or not.
    async fn get_lease(&self, name: &str) -> Result<Option<LeaseRow>, StoreError>;

    /// The leases whose name starts with `prefix` (compared exactly: case-sensitive, `%` and
    /// `_` are plain characters; `""` lists all), expired ones included, by name (bytes).
    async fn list_leases(&self, prefix: &str) -> Result<Vec<LeaseRow>, StoreError>;
}
