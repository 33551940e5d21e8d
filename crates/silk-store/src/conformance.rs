//! The conformance suite of [`MetaStore`]: every semantic of the trait, written once, run
//! against every backend (`tests/sqlite.rs`, `tests/postgres.rs`).
//!
//! A backend provides a [`StoreFactory`]: `open()` returns a store on the factory's own
//! database, empty the first time and with the same data every later time (also when called
//! concurrently); `cleanup()` removes that database. One line instantiates the suite as one
//! `#[tokio::test]` per check:
//!
//! ```ignore
//! silk_store::store_conformance_tests!(MyFactory::new()); // an Option: None skips
//! ```
//!
//! The module is always compiled (plain code, no extra dependency), so any crate's tests can
//! use it without a feature flag. It must not be called outside tests: it panics on the first
//! violation, with a message saying which check and what differed.

use crate::alerts::{ALERT_PENDING, AlertFilter, AlertRow, AlertRuleRow};
use crate::error::StoreError;
use crate::model::{
    AgentRow, AllocationRow, JobRow, LeaseRow, Level, LogLine, LogQuery, LogSearch, MAX_PAGE,
    NewLogLine, RunFilter, RunRow, TokenRow, run_lease_name,
};
use crate::projects::{ARTIFACT_CHUNK, ProjectRow, VersionRow, build_log_key};
use crate::store::MetaStore;
use crate::tenants::{DEFAULT_TENANT, QuotaClaim, TenantRow, UsageDelta, UsageKey};
use async_trait::async_trait;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Opens stores for the suite.
#[async_trait]
pub trait StoreFactory: Send + Sync + 'static {
    /// Opens a store on this factory's database: empty the first time, the same data every
    /// later time, also when called concurrently.
    async fn open(&self) -> Arc<dyn MetaStore>;

    /// Removes the database, best effort. Runs after the check, also when it failed.
    async fn cleanup(&self) {}
}

/// Generates one `#[tokio::test]` (multi-threaded) per conformance check. `$factory` is
/// evaluated per test and gives an `Option` of a [`StoreFactory`]: `None` skips the test (the
/// expression prints why). The factory's `cleanup` runs after the check, pass or fail.
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:expr) => {
        $crate::store_conformance_tests!(@each $factory;
            open_empty_and_ping, jobs_crud, jobs_conflicts, jobs_values_round_trip,
            runs_upsert, runs_filter_and_order, delete_run_removes_its_data, agents_upsert,
            agent_drain_survives_put,
            allocations_replace_atomically, logs_append_in_order, logs_level_filter,
            logs_text_filter, logs_time_range, logs_cursor_paging, logs_limit_cap,
            logs_retention, logs_concurrent_appends_and_follow, logs_bad_batch_is_atomic,
            logs_searched_across_runs, logs_retention_of_one_job,
            tokens_lifecycle, items_idempotent, items_paging, items_concurrent_inserts,
            leases_acquire_renew_release, leases_expire_and_are_taken_over,
            leases_concurrent_acquire, leases_prefix_listing, runs_written_under_a_lease,
            reopen_keeps_data, concurrent_open, projects_crud, versions_queue_and_lease,
            project_delete_takes_its_versions_logs_and_deliveries, artifacts_in_chunks,
            settings_first_value_wins, alert_rules_crud, alerts_outbox,
            ended_runs_noticed_once, tenants_scope_their_objects,
            a_tenant_deleted_while_written_for_leaves_no_orphan,
            quota_reservations_hold_their_limits, router_failures_recorded_listed_replayed,
            requests_archived_listed_requeued);
    };
    (@each $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let Some(factory) = $factory else { return };
                let factory = ::std::sync::Arc::new(factory);
                let check = ::std::sync::Arc::clone(&factory);
                let outcome = ::tokio::spawn(async move {
                    $crate::conformance::$check(&*check).await
                })
                .await;
                $crate::conformance::StoreFactory::cleanup(&*factory).await;
                if let Err(e) = outcome {
                    match e.try_into_panic() {
                        Ok(panic) => ::std::panic::resume_unwind(panic),
                        Err(e) => panic!("check {} did not finish: {e}", stringify!($check)),
                    }
                }
            }
        )*
    };
}

/// The suite's base time (2024-11-14), so times are neither 0 nor near the i64 limit.
pub const T0: u64 = 1_731_542_400_000;

fn job(id: &str, name: &str) -> JobRow {
    JobRow {
        id: id.to_owned(),
        name: name.to_owned(),
        enabled: true,
        spec: json!({"spider": name, "schedule": {"every": "1h"}}),
        created_ms: T0,
        updated_ms: T0,
        next_fire_ms: None,
        last_fire_ms: None,
        queued: 0,
        tenant: DEFAULT_TENANT.to_owned(),
    }
}

fn run(id: &str, job_id: Option<&str>, state: &str, created_ms: u64) -> RunRow {
    RunRow {
        id: id.to_owned(),
        job_id: job_id.map(str::to_owned),
        state: state.to_owned(),
        created_ms,
        finished_ms: None,
        record: json!({"id": id, "stats": {"pages": 0}}),
        tenant: DEFAULT_TENANT.to_owned(),
    }
}

fn token(id: &str, created_ms: u64) -> TokenRow {
    TokenRow {
        id: id.to_owned(),
        name: format!("token {id}"),
        hash: format!("{:0>64}", id.len()),
        tenant: DEFAULT_TENANT.to_owned(),
        role: "member".to_owned(),
        created_ms,
        last_used_ms: None,
    }
}

fn agent(id: &str, sent_ms: u64) -> AgentRow {
    AgentRow {
        id: id.to_owned(),
        register: json!({"id": id, "labels": {"region": "eu"}, "slots": 4}),
        sent_ms,
        updated_ms: sent_ms + 1,
        drained: false,
    }
}

fn alloc(run_id: &str, agent_id: &str, confirmed_ms: u64) -> AllocationRow {
    AllocationRow {
        run_id: run_id.to_owned(),
        agent_id: agent_id.to_owned(),
        confirmed_ms,
    }
}

fn line(run_id: &str, ts_ms: u64, level: Level, message: &str) -> NewLogLine {
    NewLogLine {
        run_id: run_id.to_owned(),
        ts_ms,
        level,
        source: "hub".to_owned(),
        message: message.to_owned(),
    }
}

fn item(key: &str, ts_ms: u64) -> (String, u64, serde_json::Value) {
    (
        key.to_owned(),
        ts_ms,
        json!({"key": key, "title": format!("Title {key}")}),
    )
}

fn messages(lines: &[LogLine]) -> Vec<&str> {
    lines.iter().map(|l| l.message.as_str()).collect()
}

/// One field of each row, in order.
fn pluck<T, U>(rows: Vec<T>, field: impl FnMut(T) -> U) -> Vec<U> {
    rows.into_iter().map(field).collect()
}

async fn logs(store: &dyn MetaStore, query: LogQuery) -> Vec<LogLine> {
    store.query_logs(&query).await.expect("query_logs")
}

/// Every line `query` finds, read page by page: each page starts after the last line of the
/// one before (before it, when `newest_first`).
async fn logs_paged(store: &dyn MetaStore, mut query: LogQuery) -> Vec<LogLine> {
    let mut all = Vec::new();
    loop {
        let page = logs(store, query.clone()).await;
        let Some(last) = page.last() else { return all };
        if query.newest_first {
            query.before_id = Some(last.id);
        } else {
            query.after_id = Some(last.id);
        }
        all.extend(page);
    }
}

/// Checks that `res` failed with the [`StoreError`] variant `kind` (`Conflict`, `NotFound` or
/// `BadData`) and that the error's `what` contains each of `needles`; panics naming `case`
/// otherwise.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(
    res: Result<T, StoreError>,
    kind: &str,
    needles: &[&str],
    case: &str,
) {
    let (got, what) = match &res {
        Err(StoreError::Conflict { what }) => ("Conflict", what.as_str()),
        Err(StoreError::NotFound { what }) => ("NotFound", what.as_str()),
        Err(StoreError::BadData { what, .. }) => ("BadData", what.as_str()),
        _ => ("", ""),
    };
    assert_eq!(got, kind, "{case}: expected {kind}, got {res:?}");
    for needle in needles {
        assert!(what.contains(needle), "{case}: {what:?} lacks {needle:?}");
    }
}

/// A fresh store is empty and answers; it says which backend it is.
pub async fn open_empty_and_ping(f: &dyn StoreFactory) {
    let s = f.open().await;
    assert!(
        matches!(s.backend(), "sqlite" | "postgres"),
        "{}",
        s.backend()
    );
    assert!(!s.location().is_empty());
    s.ping().await.expect("ping");
    assert!(s.list_jobs().await.expect("list_jobs").is_empty());
    assert!(
        s.list_runs(&RunFilter::default())
            .await
            .expect("list_runs")
            .is_empty()
    );
    assert_eq!(
        s.count_runs(&RunFilter::default())
            .await
            .expect("count_runs"),
        0
    );
    assert!(s.list_agents().await.expect("list_agents").is_empty());
    assert!(s.list_tokens().await.expect("list_tokens").is_empty());
    assert_eq!(s.count_tokens().await.expect("count_tokens"), 0);
    assert!(logs(&*s, LogQuery::new("r1")).await.is_empty());
    assert_eq!(s.count_items("r1").await.expect("count_items"), 0);
    assert!(s.get_job("nope").await.expect("get_job").is_none());
    assert!(s.get_run("nope").await.expect("get_run").is_none());
    assert!(s.list_leases("").await.expect("list_leases").is_empty());
}

/// Jobs: create, get by id and name, list by name (bytes), update, delete.
pub async fn jobs_crud(f: &dyn StoreFactory) {
    let s = f.open().await;
    let a = job("j1", "nightly");
    let b = job("j2", "Backfill"); // upper case sorts before lower case (byte order)
    let c = job("j3", "hourly-a");
    for j in [&a, &b, &c] {
        s.create_job(j).await.expect("create_job");
    }
    assert_eq!(s.get_job("j1").await.expect("get_job"), Some(a.clone()));
    assert_eq!(
        s.get_job_by_name(DEFAULT_TENANT, "Backfill")
            .await
            .expect("by name"),
        Some(b.clone())
    );
    assert_eq!(
        s.get_job_by_name(DEFAULT_TENANT, "backfill")
            .await
            .expect("by name"),
        None
    );
    let names = pluck(s.list_jobs().await.expect("list_jobs"), |j| j.name);
    assert_eq!(names, ["Backfill", "hourly-a", "nightly"]);

    let mut a2 = a.clone();
    a2.name = "nightly-2".to_owned();
    a2.enabled = false;
    a2.spec = json!({"changed": true});
    a2.updated_ms = T0 + 5;
    a2.next_fire_ms = Some(T0 + 3_600_000);
    a2.last_fire_ms = Some(T0 + 1);
    a2.queued = 3;
    s.update_job(&a2).await.expect("update_job");
    assert_eq!(s.get_job("j1").await.expect("get_job"), Some(a2.clone()));
    assert_eq!(
        s.get_job_by_name(DEFAULT_TENANT, "nightly")
            .await
            .expect("by name"),
        None
    );
    assert_eq!(
        s.get_job_by_name(DEFAULT_TENANT, "nightly-2")
            .await
            .expect("by name"),
        Some(a2)
    );

    assert!(s.delete_job("j2").await.expect("delete_job"));
    assert!(!s.delete_job("j2").await.expect("delete_job again"));
    assert_eq!(s.get_job("j2").await.expect("get_job"), None);
    assert_eq!(s.list_jobs().await.expect("list_jobs").len(), 2);
    // the name of a deleted job is free again
    s.create_job(&job("j4", "Backfill"))
        .await
        .expect("reuse name");
}

/// Jobs: duplicate id or name conflicts (naming the key), update of a missing job is
/// NotFound, a clash on update changes nothing.
pub async fn jobs_conflicts(f: &dyn StoreFactory) {
    let s = f.open().await;
    s.create_job(&job("j1", "a")).await.expect("create a");
    s.create_job(&job("j2", "b")).await.expect("create b");

    let res = s.create_job(&job("j1", "other")).await;
    expect_err(res, "Conflict", &["id"], "duplicate id");
    let res = s.create_job(&job("j9", "a")).await;
    expect_err(res, "Conflict", &["name", "\"a\""], "duplicate name");
    assert_eq!(s.get_job("j9").await.expect("get_job"), None);

    let mut clash = job("j2", "a");
    clash.queued = 7;
    let res = s.update_job(&clash).await;
    expect_err(res, "Conflict", &["name"], "rename onto another job's name");
    assert_eq!(
        s.get_job("j2").await.expect("get_job"),
        Some(job("j2", "b"))
    );

    let res = s.update_job(&job("missing", "zzz")).await;
    expect_err(res, "NotFound", &["missing"], "update of a missing job");
    assert_eq!(s.list_jobs().await.expect("list_jobs").len(), 2);
}

/// Values survive exactly: options, extremes, Unicode and nested JSON; out-of-range values
/// are BadData and store nothing.
pub async fn jobs_values_round_trip(f: &dyn StoreFactory) {
    let s = f.open().await;
    let mut j = job("jé", "ünïcødé ✓ 'quoted' \"double\"");
    j.spec = json!({"a": [1, 2.5, -3, null, true], "s": "x\ny\u{1F600}", "n": {"deep": {}}});
    j.created_ms = 0;
    j.updated_ms = i64::MAX as u64;
    j.next_fire_ms = Some(1);
    j.last_fire_ms = Some(i64::MAX as u64);
    j.queued = u32::MAX;
    s.create_job(&j).await.expect("create_job");
    assert_eq!(s.get_job("jé").await.expect("get_job"), Some(j.clone()));

    let mut bad = job("big", "big");
    bad.updated_ms = u64::MAX;
    expect_err(
        s.create_job(&bad).await,
        "BadData",
        &["updated_ms"],
        "u64::MAX",
    );
    assert_eq!(s.get_job("big").await.expect("get_job"), None);
    let mut r = run("r1", None, "queued", T0);
    r.finished_ms = Some(u64::MAX);
    expect_err(s.put_run(&r).await, "BadData", &[], "finished_ms u64::MAX");
    assert_eq!(s.get_run("r1").await.expect("get_run"), None);
}

/// Runs: put inserts, put again replaces, get returns exactly what was put.
pub async fn runs_upsert(f: &dyn StoreFactory) {
    let s = f.open().await;
    let mut r = run("r1", Some("j1"), "queued", T0);
    s.put_run(&r).await.expect("put_run");
    assert_eq!(s.get_run("r1").await.expect("get_run"), Some(r.clone()));
    r.state = "finished".to_owned();
    r.finished_ms = Some(T0 + 10);
    r.job_id = None;
    r.record = json!({"id": "r1", "stats": {"pages": 42, "items": 7}});
    s.put_run(&r).await.expect("put_run again");
    assert_eq!(s.get_run("r1").await.expect("get_run"), Some(r));
    assert_eq!(s.count_runs(&RunFilter::default()).await.expect("count"), 1);
}

/// Runs: filters by job and states, order by created_ms then id (bytes), newest first,
/// limit, count.
pub async fn runs_filter_and_order(f: &dyn StoreFactory) {
    let s = f.open().await;
    let runs = [
        run("r-b", Some("j1"), "running", T0 + 2),
        run("r-A", Some("j1"), "running", T0 + 2), // same time: "r-A" < "r-a" < "r-b" by bytes
        run("r-a", Some("j2"), "finished", T0 + 2),
        run("r-0", Some("j1"), "failed", T0 + 1),
        run("r-z", None, "finished", T0 + 3),
    ];
    for r in &runs {
        s.put_run(r).await.expect("put_run");
    }
    let filter = |job_id: Option<&str>, states: &[&str], limit, newest_first| RunFilter {
        job_id: job_id.map(str::to_owned),
        tenant: None,
        states: states.iter().map(|&state| state.to_owned()).collect(),
        limit,
        newest_first,
    };
    // (filter, the ids it lists, the count: the limit does not count)
    let cases: [(RunFilter, &[&str], u64); 8] = [
        (
            filter(None, &[], None, false),
            &["r-0", "r-A", "r-a", "r-b", "r-z"],
            5,
        ),
        (
            filter(None, &[], None, true),
            &["r-z", "r-b", "r-a", "r-A", "r-0"],
            5,
        ),
        (filter(None, &[], Some(2), true), &["r-z", "r-b"], 5),
        (
            filter(Some("j1"), &[], None, false),
            &["r-0", "r-A", "r-b"],
            3,
        ),
        (
            filter(None, &["finished", "failed"], None, false),
            &["r-0", "r-a", "r-z"],
            3,
        ),
        (
            filter(Some("j1"), &["running"], Some(1), false),
            &["r-A"],
            2,
        ),
        (filter(None, &["nope"], None, false), &[], 0),
        (filter(None, &[], Some(0), false), &[], 5),
    ];
    for (query, ids, count) in &cases {
        let listed = s.list_runs(query).await.expect("list");
        assert_eq!(pluck(listed, |r| r.id), *ids, "{query:?}");
        assert_eq!(
            s.count_runs(query).await.expect("count"),
            *count,
            "{query:?}"
        );
    }
}

/// `delete_run` removes the run, its allocations, log lines and items, and nothing of other
/// runs.
pub async fn delete_run_removes_its_data(f: &dyn StoreFactory) {
    let s = f.open().await;
    for id in ["r1", "r2"] {
        s.put_run(&run(id, None, "finished", T0))
            .await
            .expect("put_run");
        s.put_allocations(id, &[alloc(id, "a1", T0)])
            .await
            .expect("put_allocations");
        s.append_logs(&[line(id, T0, Level::Info, "hello")])
            .await
            .expect("append");
        s.insert_items(id, &[item("k", T0)])
            .await
            .expect("insert_items");
        let lease = run_lease_name(id);
        assert!(
            s.acquire_lease(&lease, "hub-a", 60_000)
                .await
                .expect("acquire")
        );
    }
    // a lease whose name only starts with the run's lease name stays
    assert!(
        s.acquire_lease("run:r1x", "hub-a", 60_000)
            .await
            .expect("acquire")
    );
    assert!(s.delete_run("r1").await.expect("delete_run"));
    assert!(!s.delete_run("r1").await.expect("delete_run again"));
    assert_eq!(s.get_run("r1").await.expect("get_run"), None);
    assert!(s.list_allocations("r1").await.expect("allocs").is_empty());
    assert!(logs(&*s, LogQuery::new("r1")).await.is_empty());
    assert_eq!(s.count_items("r1").await.expect("count_items"), 0);
    // r2 untouched
    assert!(s.get_run("r2").await.expect("get_run").is_some());
    assert_eq!(s.list_allocations("r2").await.expect("allocs").len(), 1);
    assert_eq!(logs(&*s, LogQuery::new("r2")).await.len(), 1);
    assert_eq!(s.count_items("r2").await.expect("count_items"), 1);
    assert_eq!(s.get_lease("run:r1").await.expect("get_lease"), None);
    assert!(s.get_lease("run:r2").await.expect("get_lease").is_some());
    assert!(s.get_lease("run:r1x").await.expect("get_lease").is_some());
    // the run's items can be written again from scratch
    assert_eq!(
        s.insert_items("r1", &[item("k", T0)])
            .await
            .expect("insert"),
        1
    );
}

/// Agents: put inserts or replaces, get, list by id (bytes), delete.
pub async fn agents_upsert(f: &dyn StoreFactory) {
    let s = f.open().await;
    for a in [agent("b", T0), agent("a", T0), agent("C", T0)] {
        s.put_agent(&a).await.expect("put_agent");
    }
    let mut a2 = agent("a", T0 + 100);
    a2.register = json!({"id": "a", "labels": {}, "slots": 8});
    s.put_agent(&a2).await.expect("put_agent again");
    assert_eq!(s.get_agent("a").await.expect("get_agent"), Some(a2.clone()));
    assert_eq!(s.get_agent("zz").await.expect("get_agent"), None);
    let list = s.list_agents().await.expect("list_agents");
    let ids: Vec<&str> = list.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["C", "a", "b"]);
    assert_eq!(list[1], a2);
    assert!(s.delete_agent("b").await.expect("delete_agent"));
    assert!(!s.delete_agent("b").await.expect("delete_agent again"));
    assert_eq!(s.list_agents().await.expect("list_agents").len(), 2);
}

/// An agent's drain: set and ended on its own; storing the agent again keeps it (a hub storing
/// a registration does not undo a drain another hub set); a new agent takes its row's value.
pub async fn agent_drain_survives_put(f: &dyn StoreFactory) {
    let s = f.open().await;
    s.put_agent(&agent("a", T0)).await.expect("put_agent");
    assert!(s.set_agent_drained("a", true).await.expect("drain"));
    assert!(
        !s.set_agent_drained("zz", true)
            .await
            .expect("drain unknown")
    );
    assert!(s.get_agent("a").await.expect("get").expect("a").drained);
    s.put_agent(&agent("a", T0 + 5))
        .await
        .expect("put_agent again");
    let a = s.get_agent("a").await.expect("get").expect("a");
    assert!(a.drained, "a put keeps the drain");
    assert_eq!(a.sent_ms, T0 + 5, "and replaces the rest");
    assert!(s.set_agent_drained("a", false).await.expect("undrain"));
    assert!(!s.get_agent("a").await.expect("get").expect("a").drained);
    let mut b = agent("b", T0);
    b.drained = true;
    s.put_agent(&b).await.expect("put new drained");
    let list = s.list_agents().await.expect("list");
    let drained: Vec<&str> = list
        .iter()
        .filter(|a| a.drained)
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(drained, ["b"]);
    assert_eq!(s.list_drained_agents().await.expect("drained ids"), ["b"]);
}

/// Allocations: put replaces the run's whole set atomically; bad input changes nothing.
pub async fn allocations_replace_atomically(f: &dyn StoreFactory) {
    let s = f.open().await;
    let first = [alloc("r1", "a2", T0), alloc("r1", "a1", T0 + 1)];
    s.put_allocations("r1", &first).await.expect("put");
    s.put_allocations("r2", &[alloc("r2", "a1", T0)])
        .await
        .expect("put r2");
    assert_eq!(
        s.list_allocations("r1").await.expect("list"),
        [alloc("r1", "a1", T0 + 1), alloc("r1", "a2", T0)]
    );
    let second = [alloc("r1", "a3", T0 + 5), alloc("r1", "a1", T0 + 6)];
    s.put_allocations("r1", &second).await.expect("replace");
    let now = [alloc("r1", "a1", T0 + 6), alloc("r1", "a3", T0 + 5)];
    assert_eq!(s.list_allocations("r1").await.expect("list"), now);

    let res = s.put_allocations("r1", &[alloc("r2", "a9", T0)]).await;
    expect_err(res, "BadData", &[], "row of another run");
    let twice = [alloc("r1", "a7", T0), alloc("r1", "a7", T0 + 1)];
    let res = s.put_allocations("r1", &twice).await;
    expect_err(res, "Conflict", &["a7"], "agent twice");
    let big = [alloc("r1", "a8", u64::MAX)];
    expect_err(
        s.put_allocations("r1", &big).await,
        "BadData",
        &[],
        "confirmed_ms u64::MAX",
    );
    assert_eq!(
        s.list_allocations("r1").await.expect("list"),
        now,
        "unchanged"
    );
    assert_eq!(s.list_allocations("r2").await.expect("list").len(), 1);

    s.put_allocations("r1", &[]).await.expect("clear");
    assert!(s.list_allocations("r1").await.expect("list").is_empty());
    s.put_allocations("r1", &second).await.expect("put again");
    assert_eq!(s.delete_allocations("r1").await.expect("delete"), 2);
    assert_eq!(s.delete_allocations("r1").await.expect("delete again"), 0);
    assert_eq!(s.list_allocations("r2").await.expect("list").len(), 1);
}

/// Logs: ids increase in slice order and across calls; each run sees only its lines; fields
/// survive.
pub async fn logs_append_in_order(f: &dyn StoreFactory) {
    let s = f.open().await;
    s.append_logs(&[]).await.expect("empty append");
    let batch1 = [
        line("r1", T0, Level::Info, "one"),
        line("r2", T0, Level::Warn, "other run"),
        line(
            "r1",
            T0 - 5,
            Level::Error,
            "two (older timestamp, later insert)",
        ),
    ];
    s.append_logs(&batch1).await.expect("append");
    let mut l = line("r1", T0 + 1, Level::Trace, "three ünïcødé\nsecond line");
    l.source = "agent-7".to_owned();
    s.append_logs(std::slice::from_ref(&l))
        .await
        .expect("append");

    let got = logs(&*s, LogQuery::new("r1")).await;
    assert_eq!(
        messages(&got),
        [
            "one",
            "two (older timestamp, later insert)",
            "three ünïcødé\nsecond line"
        ]
    );
    assert!(
        got.windows(2).all(|w| w[0].id < w[1].id),
        "ids increase: {got:?}"
    );
    assert_eq!(got[0].to_new(), batch1[0]);
    assert_eq!(got[1].to_new(), batch1[2]);
    assert_eq!(got[2].to_new(), l);
    let other = logs(&*s, LogQuery::new("r2")).await;
    assert_eq!(messages(&other), ["other run"]);
    assert!(
        other[0].id > got[0].id && other[0].id < got[1].id,
        "slice order"
    );
}

/// Logs: `min_level` keeps that level and above.
pub async fn logs_level_filter(f: &dyn StoreFactory) {
    let s = f.open().await;
    let lines: Vec<NewLogLine> = Level::ALL
        .iter()
        .map(|&level| line("r1", T0, level, level.as_str()))
        .collect();
    s.append_logs(&lines).await.expect("append");
    for (i, &level) in Level::ALL.iter().enumerate() {
        let q = LogQuery {
            min_level: Some(level),
            ..LogQuery::new("r1")
        };
        let expected: Vec<&str> = Level::ALL[i..].iter().map(|l| l.as_str()).collect();
        assert_eq!(messages(&logs(&*s, q).await), expected, "min_level {level}");
    }
    let got = logs(&*s, LogQuery::new("r1")).await;
    let levels: Vec<Level> = got.iter().map(|l| l.level).collect();
    assert_eq!(levels, Level::ALL);
}

/// Logs: `text` is a case-insensitive substring; `%`, `_`, `!` and `\` match literally.
pub async fn logs_text_filter(f: &dyn StoreFactory) {
    let s = f.open().await;
    let texts = [
        "Fetched https://example.com/a OK",
        "fetch FAILED: timeout",
        "progress 50% done",
        "progress 50 of 100",
        "file_name.txt written",
        "filename.txt written",
        "wow! really",
        "back\\slash",
    ];
    let lines: Vec<NewLogLine> = texts
        .iter()
        .map(|t| line("r1", T0, Level::Info, t))
        .collect();
    s.append_logs(&lines).await.expect("append");
    s.append_logs(&[line("r2", T0, Level::Info, "fetched elsewhere")])
        .await
        .expect("append r2");
    let find = |text: &str| LogQuery {
        text: Some(text.to_owned()),
        ..LogQuery::new("r1")
    };
    let cases: [(&str, &[&str]); 9] = [
        (
            "FETCH",
            &["Fetched https://example.com/a OK", "fetch FAILED: timeout"],
        ),
        ("failed", &["fetch FAILED: timeout"]),
        ("50%", &["progress 50% done"]),
        ("%", &["progress 50% done"]),
        ("e_n", &["file_name.txt written"]),
        ("_", &["file_name.txt written"]),
        ("w!", &["wow! really"]),
        ("k\\s", &["back\\slash"]),
        ("nothing like this", &[]),
    ];
    for (text, expected) in cases {
        let got = logs(&*s, find(text)).await;
        assert_eq!(messages(&got), expected, "text {text:?}");
    }
    assert_eq!(logs(&*s, find("")).await.len(), texts.len());
    let combined = LogQuery {
        text: Some("progress".to_owned()),
        newest_first: true,
        limit: 1,
        ..LogQuery::new("r1")
    };
    assert_eq!(messages(&logs(&*s, combined).await), ["progress 50 of 100"]);
}

/// Logs across runs: by job (its runs' lines only), run, level, text and time, newest first,
/// paged by `before_id`.
pub async fn logs_searched_across_runs(f: &dyn StoreFactory) {
    let s = f.open().await;
    for row in [
        run("a1", Some("jobA"), "failed", T0),
        run("a2", Some("jobA"), "succeeded", T0 + 1),
        run("b1", Some("jobB"), "failed", T0 + 2),
        run("adhoc", None, "succeeded", T0 + 3),
    ] {
        s.put_run(&row).await.expect("run");
    }
    let lines = [
        ("a1", 0, Level::Error, "fetch failed: Connection REFUSED"),
        ("a1", 10, Level::Info, "progress"),
        ("b1", 20, Level::Error, "connection refused by peer"),
        ("a2", 30, Level::Warn, "slow: connection refused once"),
        ("adhoc", 40, Level::Error, "connection refused"),
        ("a2", 50, Level::Info, "done"),
    ];
    let new: Vec<NewLogLine> = lines
        .iter()
        .map(|(r, dt, level, text)| line(r, T0 + dt, *level, text))
        .collect();
    s.append_logs(&new).await.expect("append");
    let search = |f: &dyn Fn(&mut LogSearch)| {
        let mut q = LogSearch {
            limit: 100,
            ..LogSearch::default()
        };
        f(&mut q);
        q
    };
    let found = async |q: LogSearch| -> Vec<(String, String)> {
        s.search_logs(&q)
            .await
            .expect("search_logs")
            .into_iter()
            .map(|l| (l.run_id, l.message))
            .collect()
    };
    let pairs = |items: &[(&str, &str)]| -> Vec<(String, String)> {
        items
            .iter()
            .map(|(r, m)| ((*r).to_owned(), (*m).to_owned()))
            .collect()
    };
    // Every run, newest first.
    let all = found(search(&|_| {})).await;
    assert_eq!(all.len(), 6);
    assert_eq!(all[0], ("a2".to_owned(), "done".to_owned()));
    // "Which runs of job A logged `connection refused`": text ignores case.
    let q = search(&|q| {
        q.job_id = Some("jobA".into());
        q.text = Some("connection refused".into());
    });
    assert_eq!(
        found(q).await,
        pairs(&[
            ("a2", "slow: connection refused once"),
            ("a1", "fetch failed: Connection REFUSED"),
        ])
    );
    // Errors of every run since T0 + 15, before T0 + 45.
    let q = search(&|q| {
        q.min_level = Some(Level::Error);
        q.since_ms = Some(T0 + 15);
        q.until_ms = Some(T0 + 45);
    });
    assert_eq!(
        found(q).await,
        pairs(&[
            ("adhoc", "connection refused"),
            ("b1", "connection refused by peer"),
        ])
    );
    // One run; a job with no runs finds nothing.
    let q = search(&|q| q.run_id = Some("a1".into()));
    assert_eq!(found(q).await.len(), 2);
    let q = search(&|q| q.job_id = Some("nojob".into()));
    assert!(found(q).await.is_empty());
    // Paging: two at a time, each page before the oldest id of the one before.
    let mut paged = Vec::new();
    let mut q = search(&|q| q.limit = 2);
    loop {
        let page = s.search_logs(&q).await.expect("page");
        let Some(last) = page.last() else { break };
        q.before_id = Some(last.id);
        paged.extend(page.into_iter().map(|l| (l.run_id, l.message)));
    }
    assert_eq!(paged, all);
    assert!(found(search(&|q| q.limit = 0)).await.is_empty());
}

/// Logs: a job's retention removes its runs' old lines and nothing else.
pub async fn logs_retention_of_one_job(f: &dyn StoreFactory) {
    let s = f.open().await;
    for row in [
        run("a1", Some("jobA"), "failed", T0),
        run("b1", Some("jobB"), "failed", T0),
    ] {
        s.put_run(&row).await.expect("run");
    }
    let new = [
        line("a1", T0, Level::Info, "old a"),
        line("a1", T0 + 100, Level::Info, "new a"),
        line("b1", T0, Level::Info, "old b"),
        line("other", T0, Level::Info, "old other"),
    ];
    s.append_logs(&new).await.expect("append");
    assert_eq!(s.delete_job_logs_before("jobA", T0 + 50).await.unwrap(), 1);
    let left = s
        .search_logs(&LogSearch {
            limit: 100,
            ..LogSearch::default()
        })
        .await
        .unwrap();
    let mut texts: Vec<&str> = left.iter().map(|l| l.message.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["new a", "old b", "old other"]);
}

/// Logs: `since_ms` is inclusive, `until_ms` exclusive.
pub async fn logs_time_range(f: &dyn StoreFactory) {
    let s = f.open().await;
    let lines: Vec<NewLogLine> = (0..10u64)
        .map(|i| line("r1", T0 + i * 10, Level::Info, &format!("t{i}")))
        .collect();
    s.append_logs(&lines).await.expect("append");
    let range = |since_ms: Option<u64>, until_ms: Option<u64>| LogQuery {
        since_ms,
        until_ms,
        ..LogQuery::new("r1")
    };
    let cases: [(Option<u64>, Option<u64>, &[&str]); 4] = [
        (Some(T0 + 20), Some(T0 + 50), &["t2", "t3", "t4"]),
        (Some(T0 + 85), None, &["t9"]),
        (None, Some(T0 + 10), &["t0"]),
        (Some(T0 + 50), Some(T0 + 50), &[]),
    ];
    for (since, until, expected) in cases {
        let got = logs(&*s, range(since, until)).await;
        assert_eq!(messages(&got), expected, "since {since:?}, until {until:?}");
    }
    let res = s.query_logs(&range(Some(u64::MAX), None)).await;
    expect_err(res, "BadData", &[], "since u64::MAX");
}

/// Logs: `after_id` / `before_id` page forwards and backwards without gaps or repeats;
/// `newest_first` with a limit keeps the newest.
pub async fn logs_cursor_paging(f: &dyn StoreFactory) {
    let s = f.open().await;
    let lines: Vec<NewLogLine> = (0..25u64)
        .map(|i| line("r1", T0 + i, Level::Info, &format!("m{i}")))
        .collect();
    s.append_logs(&lines).await.expect("append");
    let expected: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();

    // forwards
    let forwards = LogQuery {
        limit: 7,
        ..LogQuery::new("r1")
    };
    let seen = logs_paged(&*s, forwards).await;
    assert_eq!(messages(&seen), expected);

    // backwards from the newest
    let backwards = LogQuery {
        limit: 4,
        newest_first: true,
        ..LogQuery::new("r1")
    };
    let mut seen = logs_paged(&*s, backwards).await;
    seen.reverse();
    assert_eq!(messages(&seen), expected);

    let all = logs(&*s, LogQuery::new("r1")).await;
    let window = LogQuery {
        after_id: Some(all[4].id),
        before_id: Some(all[8].id),
        ..LogQuery::new("r1")
    };
    assert_eq!(messages(&logs(&*s, window).await), ["m5", "m6", "m7"]);
    let tail = LogQuery {
        newest_first: true,
        limit: 3,
        ..LogQuery::new("r1")
    };
    assert_eq!(messages(&logs(&*s, tail).await), ["m24", "m23", "m22"]);
    let after_last = LogQuery {
        after_id: Some(all[24].id),
        ..LogQuery::new("r1")
    };
    assert!(logs(&*s, after_last).await.is_empty());
}

/// Logs: the limit is capped at [`MAX_PAGE`]; 0 returns nothing.
pub async fn logs_limit_cap(f: &dyn StoreFactory) {
    let s = f.open().await;
    let n = MAX_PAGE as usize + 150;
    let lines: Vec<NewLogLine> = (0..n)
        .map(|i| line("r1", T0, Level::Debug, &format!("line {i}")))
        .collect();
    s.append_logs(&lines).await.expect("append");
    let q = LogQuery {
        limit: u32::MAX,
        ..LogQuery::new("r1")
    };
    let page = logs(&*s, q).await;
    assert_eq!(page.len(), MAX_PAGE as usize);
    assert_eq!(page[0].message, "line 0");
    let rest = LogQuery {
        after_id: page.last().map(|l| l.id),
        limit: u32::MAX,
        ..LogQuery::new("r1")
    };
    assert_eq!(logs(&*s, rest).await.len(), 150);
    let zero = LogQuery {
        limit: 0,
        ..LogQuery::new("r1")
    };
    assert!(logs(&*s, zero).await.is_empty());
}

/// Logs: retention removes lines older than the cutoff across runs; a run's lines can be
/// removed alone.
pub async fn logs_retention(f: &dyn StoreFactory) {
    let s = f.open().await;
    let lines = [
        line("r1", T0, Level::Info, "old r1"),
        line("r2", T0 + 5, Level::Info, "old r2"),
        line("r1", T0 + 10, Level::Info, "new r1"),
        line("r2", T0 + 20, Level::Info, "new r2"),
        line("r3", T0 + 30, Level::Info, "r3"),
    ];
    s.append_logs(&lines).await.expect("append");
    assert_eq!(s.delete_logs_before(T0 + 10).await.expect("retention"), 2);
    assert_eq!(
        s.delete_logs_before(T0 + 10)
            .await
            .expect("retention again"),
        0
    );
    assert_eq!(messages(&logs(&*s, LogQuery::new("r1")).await), ["new r1"]);
    assert_eq!(messages(&logs(&*s, LogQuery::new("r2")).await), ["new r2"]);
    assert_eq!(s.delete_run_logs("r2").await.expect("delete_run_logs"), 1);
    assert!(logs(&*s, LogQuery::new("r2")).await.is_empty());
    assert_eq!(messages(&logs(&*s, LogQuery::new("r3")).await), ["r3"]);
    // ids keep increasing after deletions
    let before = logs(&*s, LogQuery::new("r3")).await[0].id;
    s.append_logs(&[line("r3", T0, Level::Info, "later")])
        .await
        .expect("append");
    let after = logs(&*s, LogQuery::new("r3")).await;
    assert!(after[1].id > before);
    expect_err(
        s.delete_logs_before(u64::MAX).await,
        "BadData",
        &[],
        "cutoff u64::MAX",
    );
}

/// Logs: appends from several tasks at once lose nothing and keep each batch's order, and a
/// follower reading `after_id` of the last line it saw, while they write, sees every line
/// exactly once.
pub async fn logs_concurrent_appends_and_follow(f: &dyn StoreFactory) {
    const WRITERS: usize = 6;
    const BATCHES: usize = 15;
    const PER_BATCH: usize = 20;
    const TOTAL: usize = WRITERS * BATCHES * PER_BATCH;
    let s = f.open().await;
    let done = Arc::new(AtomicBool::new(false));

    let follower = {
        let s = Arc::clone(&s);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut seen: Vec<LogLine> = Vec::new();
            let mut after = None;
            loop {
                // read `done` before the query: if it was set, this query sees every line
                let finished = done.load(Ordering::SeqCst);
                let page = s
                    .query_logs(&LogQuery {
                        after_id: after,
                        ..LogQuery::new("shared")
                    })
                    .await
                    .expect("follow query");
                if let Some(last) = page.last() {
                    after = Some(last.id);
                }
                let empty = page.is_empty();
                seen.extend(page);
                if empty && finished {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                for b in 0..BATCHES {
                    let batch: Vec<NewLogLine> = (0..PER_BATCH)
                        .map(|i| line("shared", T0, Level::Info, &format!("w{w} b{b} i{i}")))
                        .collect();
                    s.append_logs(&batch).await.expect("concurrent append");
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer task");
    }
    done.store(true, Ordering::SeqCst);
    let followed = follower.await.expect("follower task");

    let all = logs_paged(&*s, LogQuery::new("shared")).await;
    assert_eq!(all.len(), TOTAL, "every appended line is stored");
    let ids: BTreeSet<i64> = all.iter().map(|l| l.id).collect();
    assert_eq!(ids.len(), TOTAL, "ids are unique");
    for w in 0..WRITERS {
        let mine: Vec<&str> = all
            .iter()
            .map(|l| l.message.as_str())
            .filter(|m| m.starts_with(&format!("w{w} ")))
            .collect();
        let expected: Vec<String> = (0..BATCHES)
            .flat_map(|b| (0..PER_BATCH).map(move |i| format!("w{w} b{b} i{i}")))
            .collect();
        assert_eq!(mine, expected, "writer {w}'s lines in its order");
        // a batch is contiguous in id order (one transaction)
    }
    assert_eq!(followed.len(), TOTAL, "the follower saw every line once");
    assert_eq!(followed, all, "the follower saw them in id order");
}

/// Logs: a batch with one bad line stores none of it.
pub async fn logs_bad_batch_is_atomic(f: &dyn StoreFactory) {
    let s = f.open().await;
    let batch = [
        line("r1", T0, Level::Info, "fine"),
        line("r1", u64::MAX, Level::Info, "too late"),
    ];
    expect_err(
        s.append_logs(&batch).await,
        "BadData",
        &["ts_ms"],
        "u64::MAX ts",
    );
    assert!(logs(&*s, LogQuery::new("r1")).await.is_empty());
}

/// Tokens: create, conflict on id, get, list by creation, touch (never backwards), count,
/// delete.
pub async fn tokens_lifecycle(f: &dyn StoreFactory) {
    let s = f.open().await;
    let mut admin = token("t-admin", T0);
    admin.role = "admin".to_owned();
    let user = token("t-user", T0 + 5);
    let early = token("t-early", T0 - 5);
    for t in [&admin, &user, &early] {
        s.create_token(t).await.expect("create_token");
    }
    let res = s.create_token(&token("t-user", T0 + 9)).await;
    expect_err(res, "Conflict", &["t-user"], "duplicate token id");
    assert_eq!(s.count_tokens().await.expect("count"), 3);
    assert_eq!(
        s.get_token("t-admin").await.expect("get"),
        Some(admin.clone())
    );
    assert_eq!(s.get_token("t-none").await.expect("get"), None);
    let ids = pluck(s.list_tokens().await.expect("list"), |t| t.id);
    assert_eq!(ids, ["t-early", "t-admin", "t-user"]);

    assert!(s.touch_token("t-user", T0 + 100).await.expect("touch"));
    assert!(s.touch_token("t-user", T0 + 50).await.expect("touch older"));
    let got = s.get_token("t-user").await.expect("get").expect("exists");
    assert_eq!(
        got.last_used_ms,
        Some(T0 + 100),
        "last_used_ms never moves back"
    );
    assert!(
        s.touch_token("t-user", T0 + 200)
            .await
            .expect("touch newer")
    );
    let got = s.get_token("t-user").await.expect("get").expect("exists");
    assert_eq!(got.last_used_ms, Some(T0 + 200));
    assert!(!s.touch_token("t-none", T0).await.expect("touch missing"));

    assert!(s.delete_token("t-user").await.expect("delete"));
    assert!(!s.delete_token("t-user").await.expect("delete again"));
    assert_eq!(s.get_token("t-user").await.expect("get"), None);
    assert_eq!(s.count_tokens().await.expect("count"), 2);
}

/// Items: insert-ignore on (run, key): the same key twice is one row, replays insert
/// nothing, counts are per run, the first version of an item wins.
pub async fn items_idempotent(f: &dyn StoreFactory) {
    let s = f.open().await;
    let batch = [item("a", T0), item("b", T0 + 1), item("c", T0 + 2)];
    assert_eq!(s.insert_items("r1", &batch).await.expect("insert"), 3);
    assert_eq!(s.insert_items("r1", &batch).await.expect("replay"), 0);
    let mut changed = item("a", T0 + 99);
    changed.2 = json!({"changed": true});
    let mixed = [changed, item("d", T0 + 3), item("d", T0 + 4)];
    assert_eq!(s.insert_items("r1", &mixed).await.expect("mixed"), 1);
    assert_eq!(s.insert_items("r1", &[]).await.expect("empty"), 0);
    assert_eq!(s.count_items("r1").await.expect("count"), 4);
    assert_eq!(s.insert_items("r2", &batch).await.expect("other run"), 3);
    assert_eq!(s.count_items("r2").await.expect("count"), 3);

    let rows = s.list_items("r1", 0, 100).await.expect("list");
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    assert_eq!(
        rows[0].data, batch[0].2,
        "the first version of an item wins"
    );
    assert_eq!(rows[0].ts_ms, T0);
    assert_eq!(
        rows[3].ts_ms,
        T0 + 3,
        "the first of two same keys in a batch wins"
    );
    assert!(rows.iter().all(|r| r.run_id == "r1"));
    assert!(rows.windows(2).all(|w| w[0].seq < w[1].seq));

    let bad = [item("e", T0), item("f", u64::MAX)];
    expect_err(
        s.insert_items("r1", &bad).await,
        "BadData",
        &[],
        "item ts_ms u64::MAX",
    );
    assert_eq!(
        s.count_items("r1").await.expect("count"),
        4,
        "a bad batch stores nothing"
    );

    assert_eq!(s.delete_items("r1").await.expect("delete"), 4);
    assert_eq!(s.count_items("r1").await.expect("count"), 0);
    assert_eq!(s.count_items("r2").await.expect("count"), 3);
}

/// Items: `list_items` pages by `seq` in insertion order; the limit is capped.
pub async fn items_paging(f: &dyn StoreFactory) {
    let s = f.open().await;
    let n = MAX_PAGE as usize + 30;
    let items: Vec<_> = (0..n).map(|i| item(&format!("k{i:05}"), T0)).collect();
    assert_eq!(
        s.insert_items("r1", &items[..500]).await.expect("insert"),
        500
    );
    assert_eq!(
        s.insert_items("r1", &items[500..]).await.expect("insert"),
        n as u64 - 500
    );
    let first = s.list_items("r1", 0, u32::MAX).await.expect("list");
    assert_eq!(first.len(), MAX_PAGE as usize);
    let mut all = first;
    let mut after = all.last().map_or(0, |r| r.seq);
    loop {
        let page = s.list_items("r1", after, 7).await.expect("list");
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 7);
        after = last.seq;
        all.extend(page);
    }
    let keys: Vec<&str> = all.iter().map(|r| r.key.as_str()).collect();
    let expected: Vec<&str> = items.iter().map(|i| i.0.as_str()).collect();
    assert_eq!(keys, expected);
    assert!(s.list_items("r1", 0, 0).await.expect("list").is_empty());
    assert!(
        s.list_items("r-none", 0, 10)
            .await
            .expect("list")
            .is_empty()
    );
}

/// Items: several tasks inserting overlapping keys at once store each key once, and the
/// counts they report add up to the number of keys.
pub async fn items_concurrent_inserts(f: &dyn StoreFactory) {
    const TASKS: u64 = 6;
    const KEYS: u64 = 200;
    let s = f.open().await;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let mut inserted = 0;
                // every task inserts every key, starting at a different offset, in batches
                let keys: Vec<u64> = (0..KEYS).map(|k| (k + t * 37) % KEYS).collect();
                for chunk in keys.chunks(25) {
                    let batch: Vec<_> = chunk.iter().map(|k| item(&format!("k{k}"), T0)).collect();
                    inserted += s.insert_items("r1", &batch).await.expect("insert");
                }
                inserted
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    assert_eq!(total, KEYS, "each key reported inserted once");
    assert_eq!(s.count_items("r1").await.expect("count"), KEYS);
    let rows = s.list_items("r1", 0, u32::MAX).await.expect("list");
    let keys: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys.len() as u64, KEYS);
}

/// The lease `name`, which must exist.
async fn lease(s: &dyn MetaStore, name: &str) -> LeaseRow {
    s.get_lease(name)
        .await
        .expect("get_lease")
        .unwrap_or_else(|| panic!("lease {name:?} exists"))
}

/// Waits until the store's clock is past `ms` (so a lease with `expires_ms == ms` has
/// expired), polling the clock; panics if it does not get there within 10 s.
async fn wait_store_clock_past(s: &dyn MetaStore, ms: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = s.store_now_ms().await.expect("store_now_ms");
        if now > ms {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the store clock stays at {now}, not past {ms}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A run is written under a lease only while the writer holds it (also once it expired, if
/// nobody took it); a writer that lost it writes nothing.
pub async fn runs_written_under_a_lease(f: &dyn StoreFactory) {
    let s = f.open().await;
    let name = crate::run_lease_name("r1");
    let mut row = run("r1", None, "running", 10);
    assert!(
        !s.put_run_held(&row, &name, "hub-a").await.expect("put"),
        "no lease, no write"
    );
    assert_eq!(s.get_run("r1").await.expect("get"), None);
    assert!(s.acquire_lease(&name, "hub-a", 1).await.expect("acquire"));
    assert!(s.put_run_held(&row, &name, "hub-a").await.expect("put"));
    assert_eq!(
        s.get_run("r1").await.expect("get").expect("stored").state,
        "running"
    );
    // Expired but not taken: still hub-a's.
    let expires = lease(&*s, &name).await.expires_ms;
    wait_store_clock_past(&*s, expires).await;
    row.state = "paused".into();
    assert!(s.put_run_held(&row, &name, "hub-a").await.expect("put"));
    assert_eq!(
        s.get_run("r1").await.expect("get").expect("stored").state,
        "paused"
    );
    // Taken over: hub-a's write is refused, hub-b's goes through.
    assert!(
        s.acquire_lease(&name, "hub-b", 60_000)
            .await
            .expect("take over")
    );
    row.state = "succeeded".into();
    assert!(!s.put_run_held(&row, &name, "hub-a").await.expect("put"));
    assert_eq!(
        s.get_run("r1").await.expect("get").expect("stored").state,
        "paused"
    );
    row.state = "cancelled".into();
    assert!(s.put_run_held(&row, &name, "hub-b").await.expect("put"));
    assert_eq!(
        s.get_run("r1").await.expect("get").expect("stored").state,
        "cancelled"
    );
}

/// Leases: the store clock is close to the system clock; acquire (a second holder is refused
/// while the lease is live, the holder re-acquires and keeps `acquired_ms`), renew returns
/// exactly the holder's leases, release only by the holder; a huge ttl is BadData.
pub async fn leases_acquire_renew_release(f: &dyn StoreFactory) {
    let s = f.open().await;
    let system = crate::sql::now_ms().unsigned_abs();
    let before = s.store_now_ms().await.expect("store_now_ms");
    assert!(
        before.abs_diff(system) < 5_000,
        "store clock {before} vs system clock {system}"
    );
    assert_eq!(s.get_lease("run:r1").await.expect("get_lease"), None);
    assert!(
        s.acquire_lease("run:r1", "hub-a", 60_000)
            .await
            .expect("acquire")
    );
    let after = s.store_now_ms().await.expect("store_now_ms");
    let first = lease(&*s, "run:r1").await;
    assert_eq!(
        (first.name.as_str(), first.holder.as_str()),
        ("run:r1", "hub-a")
    );
    assert!(
        (before..=after).contains(&first.acquired_ms),
        "acquired at {} outside [{before}, {after}]",
        first.acquired_ms
    );
    let ttl = first.expires_ms - first.acquired_ms;
    assert!(
        (60_000..=60_010).contains(&ttl),
        "expires {ttl} ms after acquisition"
    );

    // another holder is refused and changes nothing
    assert!(
        !s.acquire_lease("run:r1", "hub-b", 60_000)
            .await
            .expect("acquire")
    );
    assert!(
        !s.acquire_lease("run:r1", "hub-b", 0)
            .await
            .expect("acquire")
    );
    assert_eq!(lease(&*s, "run:r1").await, first);
    // the holder re-acquires: a renewal that keeps acquired_ms
    assert!(
        s.acquire_lease("run:r1", "hub-a", 120_000)
            .await
            .expect("re-acquire")
    );
    let renewed = lease(&*s, "run:r1").await;
    assert_eq!(renewed.holder, "hub-a");
    assert_eq!(renewed.acquired_ms, first.acquired_ms);
    assert!(renewed.expires_ms >= first.acquired_ms + 120_000);

    assert!(
        s.acquire_lease("run:r2", "hub-a", 60_000)
            .await
            .expect("acquire")
    );
    assert!(
        s.acquire_lease("scheduler", "hub-b", 60_000)
            .await
            .expect("acquire")
    );
    assert!(
        !s.acquire_lease("scheduler", "hub-a", 60_000)
            .await
            .expect("acquire")
    );
    let now = s.store_now_ms().await.expect("store_now_ms");
    assert_eq!(
        s.renew_leases("hub-a", 300_000).await.expect("renew"),
        ["run:r1", "run:r2"]
    );
    for name in ["run:r1", "run:r2"] {
        let l = lease(&*s, name).await;
        assert!(l.expires_ms >= now + 300_000, "{l:?} renewed from {now}");
        assert_eq!(l.holder, "hub-a");
    }
    assert_eq!(
        s.renew_leases("hub-b", 60_000).await.expect("renew"),
        ["scheduler"]
    );
    assert!(
        s.renew_leases("hub-c", 60_000)
            .await
            .expect("renew")
            .is_empty()
    );

    // release: only by the holder
    assert!(!s.release_lease("run:r1", "hub-b").await.expect("release"));
    assert_eq!(lease(&*s, "run:r1").await.holder, "hub-a");
    assert!(!s.release_lease("missing", "hub-a").await.expect("release"));
    assert!(s.release_lease("run:r1", "hub-a").await.expect("release"));
    assert_eq!(s.get_lease("run:r1").await.expect("get_lease"), None);
    assert!(
        !s.release_lease("run:r1", "hub-a")
            .await
            .expect("release again")
    );
    assert_eq!(
        s.renew_leases("hub-a", 60_000).await.expect("renew"),
        ["run:r2"]
    );
    // a released lease is free for anyone, with a new acquisition time
    assert!(
        s.acquire_lease("run:r1", "hub-b", 60_000)
            .await
            .expect("acquire")
    );
    let taken = lease(&*s, "run:r1").await;
    assert_eq!(taken.holder, "hub-b");
    assert!(taken.acquired_ms >= first.acquired_ms);

    let names = pluck(s.list_leases("").await.expect("list"), |l| l.name);
    assert_eq!(names, ["run:r1", "run:r2", "scheduler"]);

    // a ttl that could overflow is refused and changes nothing
    expect_err(
        s.acquire_lease("run:r9", "hub-a", u64::MAX).await,
        "BadData",
        &["ttl"],
        "acquire with u64::MAX ttl",
    );
    assert_eq!(s.get_lease("run:r9").await.expect("get_lease"), None);
    expect_err(
        s.renew_leases("hub-a", u64::MAX / 2 + 1).await,
        "BadData",
        &["ttl"],
        "renew with a huge ttl",
    );
    assert_eq!(lease(&*s, "run:r2").await.holder, "hub-a");
}

/// Leases: once the store clock passes `expires_ms` another holder takes the lease (with a
/// new `acquired_ms`), and the old holder's renew no longer returns it; an expired lease
/// nobody took is still its holder's to renew or re-acquire.
pub async fn leases_expire_and_are_taken_over(f: &dyn StoreFactory) {
    let s = f.open().await;
    assert!(
        s.acquire_lease("run:r1", "hub-a", 50)
            .await
            .expect("acquire")
    );
    assert!(
        s.acquire_lease("run:r2", "hub-a", 1)
            .await
            .expect("acquire")
    );
    assert!(
        s.acquire_lease("run:r3", "hub-a", 1)
            .await
            .expect("acquire")
    );
    assert!(
        s.acquire_lease("run:live", "hub-a", 600_000)
            .await
            .expect("acquire")
    );
    let old = lease(&*s, "run:r1").await;
    let r3 = lease(&*s, "run:r3").await;
    let latest = [&old, &r3, &lease(&*s, "run:r2").await]
        .iter()
        .map(|l| l.expires_ms)
        .max()
        .expect("three leases");
    wait_store_clock_past(&*s, latest).await;

    // expired but not taken: the row is still there, still hub-a's
    assert_eq!(lease(&*s, "run:r1").await, old);
    assert_eq!(s.list_leases("run:").await.expect("list").len(), 4);
    // the live one is not free
    assert!(
        !s.acquire_lease("run:live", "hub-b", 60_000)
            .await
            .expect("acquire")
    );

    // another holder takes the expired lease
    assert!(
        s.acquire_lease("run:r1", "hub-b", 60_000)
            .await
            .expect("take over")
    );
    let taken = lease(&*s, "run:r1").await;
    assert_eq!(taken.holder, "hub-b");
    assert!(
        taken.acquired_ms >= old.expires_ms,
        "{taken:?} taken over after {old:?} expired"
    );
    assert!(taken.expires_ms >= taken.acquired_ms + 60_000);
    // the old holder lost it: refused, and not renewed
    assert!(
        !s.acquire_lease("run:r1", "hub-a", 60_000)
            .await
            .expect("acquire")
    );
    // its expired leases nobody took are renewed (and no longer expired)
    let now = s.store_now_ms().await.expect("store_now_ms");
    assert_eq!(
        s.renew_leases("hub-a", 60_000).await.expect("renew"),
        ["run:live", "run:r2", "run:r3"]
    );
    let r2 = lease(&*s, "run:r2").await;
    assert!(r2.expires_ms >= now + 60_000, "{r2:?} renewed at {now}");
    assert!(
        !s.acquire_lease("run:r2", "hub-b", 60_000)
            .await
            .expect("acquire")
    );
    assert_eq!(
        s.renew_leases("hub-b", 60_000).await.expect("renew"),
        ["run:r1"]
    );
    assert_eq!(lease(&*s, "run:r1").await.holder, "hub-b");

    // re-acquiring an own expired lease nobody took keeps acquired_ms
    assert!(
        s.acquire_lease("run:r3", "hub-a", 1)
            .await
            .expect("acquire")
    );
    let r3_short = lease(&*s, "run:r3").await;
    wait_store_clock_past(&*s, r3_short.expires_ms).await;
    assert!(
        s.acquire_lease("run:r3", "hub-a", 60_000)
            .await
            .expect("re-acquire")
    );
    let again = lease(&*s, "run:r3").await;
    assert_eq!(
        (again.holder.as_str(), again.acquired_ms),
        ("hub-a", r3.acquired_ms)
    );
    assert!(again.expires_ms > r3_short.expires_ms);
}

/// Leases: 16 holders racing on a new lease, then on an expired one: exactly one wins each
/// time, and the row names the winner.
pub async fn leases_concurrent_acquire(f: &dyn StoreFactory) {
    const RACERS: usize = 16;
    let s = f.open().await;
    assert!(
        s.acquire_lease("run:old", "hub-old", 1)
            .await
            .expect("acquire")
    );
    let old = lease(&*s, "run:old").await;
    wait_store_clock_past(&*s, old.expires_ms).await;

    for name in ["scheduler", "run:old"] {
        let start = Arc::new(tokio::sync::Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let s = Arc::clone(&s);
                let start = Arc::clone(&start);
                tokio::spawn(async move {
                    // Holders of their own per race: one hub winning both would hold both.
                    let holder = format!("{name}-hub-{i:02}");
                    start.wait().await;
                    let won = s
                        .acquire_lease(name, &holder, 60_000)
                        .await
                        .expect("acquire");
                    (holder, won)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            let (holder, won) = t.await.expect("task");
            if won {
                winners.push(holder);
            }
        }
        assert_eq!(winners.len(), 1, "{name}: winners {winners:?}");
        assert_eq!(lease(&*s, name).await.holder, winners[0], "{name}");
        assert_eq!(
            s.renew_leases(&winners[0], 60_000).await.expect("renew"),
            [name],
            "{name}"
        );
    }
    assert!(
        s.renew_leases("hub-old", 60_000)
            .await
            .expect("renew")
            .is_empty()
    );
}

/// Leases: listing by prefix matches the prefix exactly (case, `%`, `_` and `!` are plain
/// characters; characters, not bytes) and orders by name in bytes.
pub async fn leases_prefix_listing(f: &dyn StoreFactory) {
    let s = f.open().await;
    let names = [
        "run:b",
        "run:a",
        "RUN:c",
        "run_x",
        "runXa",
        "ru%n:1",
        "ru_n:2",
        "run%",
        "run!a",
        "a_b",
        "a_b:1",
        "axb:2",
        "a%b:3",
        "A_b:4",
        "é:1",
        "éa",
        "e:1",
        "scheduler",
    ];
    for (i, name) in names.iter().enumerate() {
        let holder = format!("hub-{}", i % 3);
        assert!(
            s.acquire_lease(name, &holder, 60_000)
                .await
                .expect("acquire")
        );
    }
    let cases: [(&str, &[&str]); 12] = [
        ("run:", &["run:a", "run:b"]),
        ("RUN:", &["RUN:c"]),
        ("run_", &["run_x"]),
        ("run%", &["run%"]),
        ("run!", &["run!a"]),
        ("ru%", &["ru%n:1"]),
        ("ru_", &["ru_n:2"]),
        ("a_b", &["a_b", "a_b:1"]),
        ("a%", &["a%b:3"]),
        ("é", &["é:1", "éa"]),
        ("scheduler", &["scheduler"]),
        ("scheduler!", &[]),
    ];
    for (prefix, want) in cases {
        let got = pluck(s.list_leases(prefix).await.expect("list"), |l| l.name);
        assert_eq!(got, want, "prefix {prefix:?}");
    }
    let all = s.list_leases("").await.expect("list");
    let mut sorted: Vec<&str> = names.to_vec();
    sorted.sort_unstable(); // bytes
    assert_eq!(pluck(all.clone(), |l| l.name), sorted);
    assert!(all.iter().all(|l| l.holder.starts_with("hub-")));
    assert!(s.list_leases("zzz").await.expect("list").is_empty());
}

/// Opening the same database again (migrations re-applied: a no-op) keeps every kind of data
/// and keeps assigning ids above the old ones.
pub async fn reopen_keeps_data(f: &dyn StoreFactory) {
    let s = f.open().await;
    let j = job("j1", "nightly");
    let r = run("r1", Some("j1"), "running", T0);
    let t = token("t1", T0);
    let a = agent("a1", T0);
    let al = alloc("r1", "a1", T0);
    s.create_job(&j).await.expect("create_job");
    s.put_run(&r).await.expect("put_run");
    s.create_token(&t).await.expect("create_token");
    s.put_agent(&a).await.expect("put_agent");
    s.put_allocations("r1", std::slice::from_ref(&al))
        .await
        .expect("put_allocations");
    s.append_logs(&[line("r1", T0, Level::Info, "before")])
        .await
        .expect("append");
    s.insert_items("r1", &[item("k1", T0)])
        .await
        .expect("insert");
    assert!(
        s.acquire_lease("run:r1", "hub-a", 600_000)
            .await
            .expect("acquire")
    );
    let old_lease = lease(&*s, "run:r1").await;
    let old_log = logs(&*s, LogQuery::new("r1")).await;
    let old_items = s.list_items("r1", 0, 10).await.expect("list");
    s.close().await;
    drop(s);

    for _ in 0..2 {
        let s = f.open().await;
        assert_eq!(s.get_job("j1").await.expect("get_job"), Some(j.clone()));
        assert_eq!(s.get_run("r1").await.expect("get_run"), Some(r.clone()));
        assert_eq!(s.get_token("t1").await.expect("get_token"), Some(t.clone()));
        assert_eq!(s.get_agent("a1").await.expect("get_agent"), Some(a.clone()));
        assert_eq!(
            s.list_allocations("r1").await.expect("allocs"),
            std::slice::from_ref(&al)
        );
        assert_eq!(
            s.list_items("r1", 0, 10).await.expect("list")[..1],
            old_items[..]
        );
        assert_eq!(logs(&*s, LogQuery::new("r1")).await[..1], old_log[..]);
        assert_eq!(lease(&*s, "run:r1").await, old_lease);
        s.close().await;
    }
    let s = f.open().await;
    s.append_logs(&[line("r1", T0, Level::Info, "after")])
        .await
        .expect("append");
    assert_eq!(
        s.insert_items("r1", &[item("k1", T0), item("k2", T0)])
            .await
            .expect("insert"),
        1
    );
    let new_log = logs(&*s, LogQuery::new("r1")).await;
    assert_eq!(messages(&new_log), ["before", "after"]);
    assert!(new_log[1].id > old_log[0].id);
    let new_items = s.list_items("r1", 0, 10).await.expect("list");
    assert_eq!(new_items.len(), 2);
    assert!(new_items[1].seq > old_items[0].seq);
}

/// Two stores opened at once on a fresh database (both migrate) both work and share data.
pub async fn concurrent_open(f: &dyn StoreFactory) {
    let (a, b, c) = tokio::join!(f.open(), f.open(), f.open());
    a.create_job(&job("j1", "from-a"))
        .await
        .expect("create via a");
    b.create_job(&job("j2", "from-b"))
        .await
        .expect("create via b");
    expect_err(
        c.create_job(&job("j3", "from-a")).await,
        "Conflict",
        &[],
        "a name taken through another store",
    );
    for s in [&a, &b, &c] {
        assert_eq!(s.list_jobs().await.expect("list_jobs").len(), 2);
    }
    let (la, lb) = (
        [line("r1", T0, Level::Info, "a")],
        [line("r1", T0, Level::Info, "b")],
    );
    let (ra, rb) = tokio::join!(a.append_logs(&la), b.append_logs(&lb));
    ra.expect("append via a");
    rb.expect("append via b");
    assert_eq!(logs(&*c, LogQuery::new("r1")).await.len(), 2);
}

fn project(name: &str) -> ProjectRow {
    ProjectRow {
        name: name.to_owned(),
        doc: json!({"git_url": format!("https://git.example/{name}.git"), "password": "v1:sealed"}),
        created_ms: T0,
        updated_ms: T0,
    }
}

fn version(project: &str, version: &str, build: &str, state: &str, created_ms: u64) -> VersionRow {
    VersionRow {
        project: project.to_owned(),
        version: version.to_owned(),
        build_id: build.to_owned(),
        state: state.to_owned(),
        created_ms,
        artifact: None,
        doc: json!({"tag": format!("release/{project}/{version}")}),
    }
}

/// Projects: create (a taken name conflicts), get, list by name, update (a missing one is
/// NotFound), documents round-trip.
pub async fn projects_crud(f: &dyn StoreFactory) {
    let s = f.open().await;
    assert_eq!(s.get_project("shop").await.expect("get"), None);
    s.create_project(&project("shop")).await.expect("create");
    s.create_project(&project("blog")).await.expect("create");
    let e = s.create_project(&project("shop")).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
    let names: Vec<String> = s
        .list_projects()
        .await
        .expect("list")
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["blog", "shop"]);
    let mut shop = project("shop");
    shop.doc = json!({"git_url": "https://other.example/shop.git"});
    shop.updated_ms = T0 + 5;
    s.update_project(&shop).await.expect("update");
    assert_eq!(s.get_project("shop").await.expect("get"), Some(shop));
    let e = s.update_project(&project("nope")).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e}");
}

/// Versions: inserted once per (project, version) (a second insert is a no-op, a reused
/// build id conflicts), listed newest first per project and oldest first per state, found by
/// build id, written under a lease only while it is held, deleted with their log lines.
pub async fn versions_queue_and_lease(f: &dyn StoreFactory) {
    let s = f.open().await;
    s.create_project(&project("shop")).await.expect("create");
    assert!(
        s.insert_version(&version("shop", "1.0", "b1", "queued", T0))
            .await
            .expect("insert")
    );
    assert!(
        !s.insert_version(&version("shop", "1.0", "b9", "queued", T0 + 1))
            .await
            .expect("insert"),
        "the same version twice is one version"
    );
    let e = s
        .insert_version(&version("shop", "2.0", "b1", "queued", T0))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
    assert!(
        s.insert_version(&version("shop", "1.1", "b2", "queued", T0 + 2))
            .await
            .expect("insert")
    );
    assert!(
        s.insert_version(&version("blog", "0.1", "b3", "queued", T0 + 1))
            .await
            .expect("insert")
    );
    let listed: Vec<String> = s
        .list_versions("shop")
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(listed, ["1.1", "1.0"]);
    let queued: Vec<String> = s
        .list_versions_in_state("queued")
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.build_id)
        .collect();
    assert_eq!(queued, ["b1", "b3", "b2"]);
    assert_eq!(
        s.get_version_by_build("b3")
            .await
            .expect("get")
            .expect("b3")
            .project,
        "blog"
    );

    let lease = "build:shop";
    let mut v = version("shop", "1.0", "b1", "building", T0);
    assert!(
        !s.put_version_held(&v, lease, "hub-a").await.expect("put"),
        "no lease, no write"
    );
    assert!(
        s.acquire_lease(lease, "hub-a", 60_000)
            .await
            .expect("acquire")
    );
    assert!(s.put_version_held(&v, lease, "hub-a").await.expect("put"));
    assert!(!s.put_version_held(&v, lease, "hub-b").await.expect("put"));
    v.state = "ready".into();
    v.artifact = Some("ab".repeat(32));
    s.put_version(&v).await.expect("put");
    assert_eq!(
        s.get_version("shop", "1.0").await.expect("get"),
        Some(v.clone())
    );
    assert!(
        s.list_versions_in_state("building")
            .await
            .expect("list")
            .is_empty()
    );

    s.append_logs(&[NewLogLine {
        run_id: build_log_key("b1"),
        ts_ms: T0,
        level: Level::Info,
        source: "stdout".into(),
        message: "built".into(),
    }])
    .await
    .expect("log");
    assert!(s.delete_version("shop", "1.0").await.expect("delete"));
    assert!(!s.delete_version("shop", "1.0").await.expect("delete"));
    assert!(
        s.query_logs(&LogQuery::new(build_log_key("b1")))
            .await
            .expect("logs")
            .is_empty()
    );
}

/// Deleting a project takes its versions, their build logs and its deliveries, and nothing
/// of another project; deliveries are recorded once and expire.
pub async fn project_delete_takes_its_versions_logs_and_deliveries(f: &dyn StoreFactory) {
    let s = f.open().await;
    for name in ["shop", "blog"] {
        s.create_project(&project(name)).await.expect("create");
        let build = format!("{name}-b");
        s.insert_version(&version(name, "1.0", &build, "ready", T0))
            .await
            .expect("insert");
        s.append_logs(&[NewLogLine {
            run_id: build_log_key(&build),
            ts_ms: T0,
            level: Level::Info,
            source: "silk".into(),
            message: format!("{name} built"),
        }])
        .await
        .expect("log");
        assert!(s.record_delivery(name, "d-1", T0).await.expect("delivery"));
        assert!(
            !s.record_delivery(name, "d-1", T0 + 1)
                .await
                .expect("delivery"),
            "seen"
        );
    }
    assert!(s.delete_project("shop").await.expect("delete"));
    assert!(!s.delete_project("shop").await.expect("delete"));
    assert_eq!(s.get_project("shop").await.expect("get"), None);
    assert!(s.list_versions("shop").await.expect("list").is_empty());
    assert!(
        s.query_logs(&LogQuery::new(build_log_key("shop-b")))
            .await
            .expect("logs")
            .is_empty()
    );
    assert!(
        s.record_delivery("shop", "d-1", T0)
            .await
            .expect("delivery"),
        "forgotten"
    );
    assert_eq!(s.list_versions("blog").await.expect("list").len(), 1);
    assert_eq!(
        s.query_logs(&LogQuery::new(build_log_key("blog-b")))
            .await
            .expect("logs")
            .len(),
        1
    );
    assert!(
        !s.record_delivery("blog", "d-1", T0)
            .await
            .expect("delivery")
    );
    assert_eq!(
        s.delete_deliveries_before(T0 + 1).await.expect("retention"),
        2
    );
    assert!(
        s.record_delivery("blog", "d-1", T0)
            .await
            .expect("delivery")
    );
}

/// Artifacts: chunks round-trip byte for byte (every byte value), are counted, replaced,
/// deleted; a chunk over the limit is BadData; `artifact_in_use` follows the versions.
pub async fn artifacts_in_chunks(f: &dyn StoreFactory) {
    let s = f.open().await;
    let sha = "cd".repeat(32);
    let first: Vec<u8> = (0..=255u8).cycle().take(ARTIFACT_CHUNK).collect();
    s.put_artifact_chunk(&sha, 0, &first).await.expect("put");
    s.put_artifact_chunk(&sha, 1, b"old").await.expect("put");
    s.put_artifact_chunk(&sha, 1, b"tail")
        .await
        .expect("replace");
    assert_eq!(s.count_artifact_chunks(&sha).await.expect("count"), 2);
    assert_eq!(
        s.get_artifact_chunk(&sha, 0).await.expect("get").as_deref(),
        Some(&first[..])
    );
    assert_eq!(
        s.get_artifact_chunk(&sha, 1).await.expect("get").as_deref(),
        Some(&b"tail"[..])
    );
    assert_eq!(s.get_artifact_chunk(&sha, 2).await.expect("get"), None);
    let big = vec![0u8; ARTIFACT_CHUNK + 1];
    let e = s.put_artifact_chunk(&sha, 2, &big).await.unwrap_err();
    assert!(matches!(e, StoreError::BadData { .. }), "{e}");
    assert!(!s.artifact_in_use(&sha).await.expect("in use"));
    let mut v = version("shop", "1.0", "b1", "ready", T0);
    v.artifact = Some(sha.clone());
    s.put_version(&v).await.expect("put");
    assert!(s.artifact_in_use(&sha).await.expect("in use"));
    s.delete_version("shop", "1.0").await.expect("delete");
    assert!(!s.artifact_in_use(&sha).await.expect("in use"));
    assert_eq!(s.delete_artifact(&sha).await.expect("delete"), 2);
    assert_eq!(s.count_artifact_chunks(&sha).await.expect("count"), 0);
}

/// Settings: the first value stored wins, also between concurrent callers.
pub async fn settings_first_value_wins(f: &dyn StoreFactory) {
    let s = f.open().await;
    assert_eq!(s.get_setting("key_check").await.expect("get"), None);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.put_setting_if_absent("key_check", &format!("v{i}"))
                .await
                .expect("put")
        }));
    }
    let mut seen = BTreeSet::new();
    for t in tasks {
        seen.insert(t.await.expect("task"));
    }
    assert_eq!(seen.len(), 1, "{seen:?}");
    let winner = seen.into_iter().next().expect("one");
    assert_eq!(
        s.get_setting("key_check").await.expect("get"),
        Some(winner.clone())
    );
    assert_eq!(
        s.put_setting_if_absent("key_check", "later")
            .await
            .expect("put"),
        winner
    );
}

/// Alert rules: create (a second with the name conflicts), get, update (a missing one is
/// not found), list by name, delete.
pub async fn alert_rules_crud(f: &dyn StoreFactory) {
    let s = f.open().await;
    let rule = |name: &str, n: u64| AlertRuleRow {
        name: name.to_owned(),
        doc: json!({"events": ["run_failed"], "n": n}),
        created_ms: T0,
        updated_ms: T0 + n,
    };
    s.create_alert_rule(&rule("b", 1)).await.expect("create b");
    s.create_alert_rule(&rule("a", 1)).await.expect("create a");
    let again = s.create_alert_rule(&rule("a", 2)).await.unwrap_err();
    assert!(matches!(again, StoreError::Conflict { .. }), "{again:?}");
    s.update_alert_rule(&rule("a", 3)).await.expect("update");
    assert_eq!(s.get_alert_rule("a").await.unwrap(), Some(rule("a", 3)));
    let missing = s.update_alert_rule(&rule("zz", 1)).await.unwrap_err();
    assert!(
        matches!(missing, StoreError::NotFound { .. }),
        "{missing:?}"
    );
    let names: Vec<String> = s
        .list_alert_rules()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(s.delete_alert_rule("a").await.unwrap());
    assert!(!s.delete_alert_rule("a").await.unwrap());
    assert_eq!(s.get_alert_rule("a").await.unwrap(), None);
}

/// The alert outbox: an id is inserted once; due alerts soonest first; the next due time;
/// a claim is taken once and only its holder settles the alert, which then leaves the queue;
/// filters (rule, state, created since, counted), counts and newest-first lists; retention
/// of final alerts only.
pub async fn alerts_outbox(f: &dyn StoreFactory) {
    let s = f.open().await;
    let alert = |id: &str, rule: &str, due_ms: u64| AlertRow {
        id: id.to_owned(),
        rule: rule.to_owned(),
        state: ALERT_PENDING.to_owned(),
        created_ms: due_ms,
        due_ms,
        counted: true,
        doc: json!({"event": id}),
    };
    assert_eq!(s.next_alert_due().await.unwrap(), None);
    let mut test = alert("r2|test", "r2", T0 + 30);
    test.counted = false;
    let batch = [
        alert("r1|e2", "r1", T0 + 20),
        alert("r1|e1", "r1", T0 + 10),
        test,
    ];
    assert_eq!(s.insert_alerts(&batch).await.unwrap(), 3);
    // Noticed again (another hub, a restart): nothing new, nothing changed.
    let mut again = alert("r1|e1", "r1", T0 + 99);
    again.doc = json!({"changed": true});
    assert_eq!(
        s.insert_alerts(&[again, alert("r1|e3", "r1", T0 + 40)])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.get_alert("r1|e1").await.unwrap(),
        Some(alert("r1|e1", "r1", T0 + 10))
    );
    assert_eq!(s.next_alert_due().await.unwrap(), Some(T0 + 10));
    let due: Vec<String> = s
        .due_alerts(T0 + 30, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(due, ["r1|e1", "r1|e2", "r2|test"]);
    assert_eq!(s.due_alerts(T0 + 30, 1).await.unwrap().len(), 1);

    // Claimed once: the claim moves it past the send; a second claim of the old due time
    // fails; only the claim's holder settles it.
    assert!(s.claim_alert("r1|e1", T0 + 10, T0 + 5_000).await.unwrap());
    assert!(!s.claim_alert("r1|e1", T0 + 10, T0 + 6_000).await.unwrap());
    assert_eq!(s.next_alert_due().await.unwrap(), Some(T0 + 20));
    let mut sent = alert("r1|e1", "r1", T0 + 50);
    sent.created_ms = T0 + 10;
    sent.state = "sent".into();
    sent.doc = json!({"attempts": 1});
    assert!(!s.settle_alert(&sent, T0 + 6_000).await.unwrap());
    assert!(s.settle_alert(&sent, T0 + 5_000).await.unwrap());
    assert_eq!(s.get_alert("r1|e1").await.unwrap(), Some(sent.clone()));
    // Settled: no longer pending, so no claim and no second settle.
    assert!(!s.claim_alert("r1|e1", T0 + 50, T0 + 7_000).await.unwrap());
    assert!(!s.settle_alert(&sent, T0 + 50).await.unwrap());
    assert!(!s.claim_alert("nope", T0, T0 + 1).await.unwrap());

    let count = |rule: Option<&str>, state: Option<&str>, since_ms: Option<u64>| AlertFilter {
        rule: rule.map(str::to_owned),
        state: state.map(str::to_owned),
        since_ms,
        ..AlertFilter::default()
    };
    assert_eq!(
        s.count_alerts(&count(Some("r1"), None, None))
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        s.count_alerts(&count(Some("r1"), Some("sent"), None))
            .await
            .unwrap(),
        1
    );
    // `since_ms` is on the creation time.
    assert_eq!(
        s.count_alerts(&count(Some("r1"), None, Some(T0 + 20)))
            .await
            .unwrap(),
        2
    );
    let counted = AlertFilter {
        counted: Some(true),
        ..AlertFilter::default()
    };
    assert_eq!(s.count_alerts(&counted).await.unwrap(), 3);
    let listed: Vec<String> = s
        .list_alerts(&AlertFilter {
            limit: Some(3),
            ..AlertFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(listed, ["r1|e3", "r2|test", "r1|e2"]);
    // Retention takes final alerts older than the bound, never pending ones.
    assert_eq!(s.delete_alerts_before(T0 + 1_000).await.unwrap(), 1);
    assert_eq!(s.get_alert("r1|e1").await.unwrap(), None);
    assert_eq!(s.count_alerts(&AlertFilter::default()).await.unwrap(), 3);
}

/// The router's failure records: an id is inserted once; newest first (time, then id) with
/// paging by the last one seen; filters by inbound, outbound, reason, project, time and
/// replayed; counts; a task that is JSON and a raw message both come back as written;
/// marking replayed; retention by age.
pub async fn router_failures_recorded_listed_replayed(f: &dyn StoreFactory) {
    use crate::router_failures::{RouterFailureFilter, RouterFailureRow};
    let s = f.open().await;
    let row = |id: &str, time: u64, outbound: Option<&str>, reason: &str| RouterFailureRow {
        id: id.to_owned(),
        time_ms: T0 + time,
        project: "ic".into(),
        inbound: Some("spider_log".into()),
        outbound: outbound.map(str::to_owned),
        reason: reason.into(),
        why: format!("why {id}"),
        task: Some(json!({"id": id, "名": "宁乡县", "n": 1.5, "nested": {"a": [1, null]}})),
        raw: None,
        replayed_ms: None,
    };
    let mut raw = row("f0", 0, None, "bad_task");
    raw.why = "a message that is not JSON".into();
    raw.task = None;
    raw.raw = Some("not json \u{0}".into());
    raw.inbound = None;
    let rows = vec![
        raw.clone(),
        row("f1", 10, Some("captcha"), "retries_exhausted"),
        row("f2", 10, Some("captcha"), "retries_exhausted"),
        row("f3", 20, Some("online"), "refused"),
        row("f4", 30, None, "no_route"),
    ];
    assert_eq!(s.insert_router_failures(&rows).await.unwrap(), 5);
    assert_eq!(
        s.insert_router_failures(&rows[1..2]).await.unwrap(),
        0,
        "an id is kept once"
    );
    let all = s
        .list_router_failures(&RouterFailureFilter::default())
        .await
        .unwrap();
    let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["f4", "f3", "f2", "f1", "f0"]);
    assert_eq!(all[4], raw, "a raw message comes back as written");
    assert_eq!(all[3], rows[1], "a task comes back as written");
    // Paging: two at a time, after the last one seen.
    let mut filter = RouterFailureFilter {
        limit: Some(2),
        ..RouterFailureFilter::default()
    };
    let mut paged = Vec::new();
    loop {
        let page = s.list_router_failures(&filter).await.unwrap();
        let Some(last) = page.last() else { break };
        filter.before = Some((last.time_ms, last.id.clone()));
        paged.extend(page.iter().map(|r| r.id.clone()));
    }
    assert_eq!(paged, ids);
    let oldest = s
        .list_router_failures(&RouterFailureFilter {
            oldest_first: true,
            limit: Some(2),
            ..RouterFailureFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        oldest.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["f0", "f1"]
    );
    let count = |filter: RouterFailureFilter| {
        let s = &s;
        async move { s.count_router_failures(&filter).await.unwrap() }
    };
    assert_eq!(
        count(RouterFailureFilter {
            outbound: Some("captcha".into()),
            ..Default::default()
        })
        .await,
        2
    );
    assert_eq!(
        count(RouterFailureFilter {
            reason: Some("refused".into()),
            since_ms: Some(T0 + 20),
            until_ms: Some(T0 + 21),
            ..Default::default()
        })
        .await,
        1
    );
    assert_eq!(
        count(RouterFailureFilter {
            inbound: Some("spider_log".into()),
            project: Some("ic".into()),
            ..Default::default()
        })
        .await,
        4
    );
    assert_eq!(
        count(RouterFailureFilter {
            ids: Some(vec!["f1".into(), "f4".into(), "nope".into()]),
            ..Default::default()
        })
        .await,
        2
    );
    assert_eq!(
        count(RouterFailureFilter {
            ids: Some(Vec::new()),
            ..Default::default()
        })
        .await,
        0
    );
    // Replayed.
    let marked = s
        .mark_router_failures_replayed(&["f1".into(), "f3".into(), "nope".into()], T0 + 99)
        .await
        .unwrap();
    assert_eq!(marked, 2);
    let replayed = s
        .list_router_failures(&RouterFailureFilter {
            replayed: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        replayed
            .iter()
            .map(|r| (r.id.as_str(), r.replayed_ms))
            .collect::<Vec<_>>(),
        [("f3", Some(T0 + 99)), ("f1", Some(T0 + 99))]
    );
    assert_eq!(
        count(RouterFailureFilter {
            replayed: Some(false),
            ..Default::default()
        })
        .await,
        3
    );
    // Retention: older than T0 + 20 goes.
    assert_eq!(s.delete_router_failures_before(T0 + 20).await.unwrap(), 3);
    assert_eq!(count(RouterFailureFilter::default()).await, 2);
}

/// Ended runs are listed for the alerts until marked noticed, in the order they ended; a
/// run stored again keeps its mark; runs that have not ended are not listed.
pub async fn ended_runs_noticed_once(f: &dyn StoreFactory) {
    let s = f.open().await;
    let ended = |id: &str, finished_ms: u64| RunRow {
        finished_ms: Some(finished_ms),
        ..run(id, Some("job"), "failed", T0)
    };
    s.put_run(&run("open", Some("job"), "running", T0))
        .await
        .unwrap();
    s.put_run(&ended("late", T0 + 20)).await.unwrap();
    s.put_run(&ended("early", T0 + 10)).await.unwrap();
    let ids = |rows: Vec<RunRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(s.unnoticed_runs(10).await.unwrap()), ["early", "late"]);
    assert_eq!(ids(s.unnoticed_runs(1).await.unwrap()), ["early"]);
    assert!(s.mark_run_noticed("early").await.unwrap());
    assert!(!s.mark_run_noticed("early").await.unwrap());
    assert!(!s.mark_run_noticed("nope").await.unwrap());
    s.put_run(&ended("early", T0 + 30)).await.unwrap();
    assert_eq!(ids(s.unnoticed_runs(10).await.unwrap()), ["late"]);
    let mut finished = run("open", Some("job"), "succeeded", T0);
    finished.finished_ms = Some(T0 + 40);
    s.put_run(&finished).await.unwrap();
    assert_eq!(ids(s.unnoticed_runs(10).await.unwrap()), ["late", "open"]);
}

/// Tenants: `default` exists; create (conflict on a name), list by name, update; job names
/// are unique within a tenant only; runs and log searches filter by tenant; a token keeps
/// its tenant and role; a tenant that still owns a job, run or token is not deleted.
pub async fn tenants_scope_their_objects(f: &dyn StoreFactory) {
    let s = f.open().await;
    let tenant = |name: &str| TenantRow {
        name: name.to_owned(),
        doc: json!({"weight": 1}),
        created_ms: T0,
        updated_ms: T0,
    };
    let names = |rows: Vec<TenantRow>| rows.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(
        names(s.list_tenants().await.expect("list")),
        [DEFAULT_TENANT]
    );
    s.create_tenant(&tenant("acme")).await.expect("create");
    s.create_tenant(&tenant("Zeta")).await.expect("create");
    let res = s.create_tenant(&tenant("acme")).await;
    expect_err(res, "Conflict", &["acme"], "duplicate tenant");
    assert_eq!(
        names(s.list_tenants().await.expect("list")),
        ["Zeta", "acme", DEFAULT_TENANT]
    );
    let mut acme = tenant("acme");
    acme.doc = json!({"weight": 3});
    acme.updated_ms = T0 + 1;
    s.update_tenant(&acme).await.expect("update");
    assert_eq!(s.get_tenant("acme").await.expect("get"), Some(acme));
    let res = s.update_tenant(&tenant("nobody")).await;
    expect_err(res, "NotFound", &["nobody"], "update of a missing tenant");

    // The same job name in two tenants; not twice in one.
    let mut theirs = job("j-acme", "nightly");
    theirs.tenant = "acme".to_owned();
    s.create_job(&job("j-default", "nightly"))
        .await
        .expect("job");
    s.create_job(&theirs)
        .await
        .expect("same name, other tenant");
    let mut again = job("j-acme-2", "nightly");
    again.tenant = "acme".to_owned();
    let res = s.create_job(&again).await;
    expect_err(res, "Conflict", &["nightly"], "a name twice in a tenant");
    assert_eq!(
        s.get_job_by_name("acme", "nightly").await.expect("by name"),
        Some(theirs)
    );
    assert_eq!(
        s.get_job_by_name("Zeta", "nightly").await.expect("by name"),
        None
    );

    // Runs and their logs, by tenant.
    let mut r = run("r-acme", Some("j-acme"), "running", T0);
    r.tenant = "acme".to_owned();
    s.put_run(&r).await.expect("run");
    s.put_run(&run("r-default", Some("j-default"), "running", T0 + 1))
        .await
        .expect("run");
    assert_eq!(
        s.get_run("r-acme").await.expect("get").expect("run").tenant,
        "acme"
    );
    let filter = RunFilter {
        tenant: Some("acme".to_owned()),
        ..RunFilter::default()
    };
    let ids = pluck(s.list_runs(&filter).await.expect("list"), |r| r.id);
    assert_eq!(ids, ["r-acme"]);
    assert_eq!(s.count_runs(&filter).await.expect("count"), 1);
    let lines = [
        line("r-acme", T0, Level::Info, "acme line"),
        line("r-default", T0, Level::Info, "default line"),
        line(&build_log_key("b1"), T0, Level::Info, "build line"),
    ];
    s.append_logs(&lines).await.expect("append");
    let search = LogSearch {
        tenant: Some("acme".to_owned()),
        limit: 10,
        ..LogSearch::default()
    };
    let found = pluck(s.search_logs(&search).await.expect("search"), |l| l.message);
    assert_eq!(found, ["acme line"]);

    // Tokens keep tenant and role.
    let mut t = token("t-acme", T0);
    t.tenant = "acme".to_owned();
    t.role = "owner".to_owned();
    s.create_token(&t).await.expect("token");
    assert_eq!(s.get_token("t-acme").await.expect("get"), Some(t));

    // Deleting: refused while the tenant owns something, then done.
    let res = s.delete_tenant("acme").await;
    expect_err(res, "Conflict", &["acme", "jobs"], "a tenant with a job");
    assert!(s.delete_job("j-acme").await.expect("delete job"));
    let res = s.delete_tenant("acme").await;
    expect_err(res, "Conflict", &["acme", "runs"], "a tenant with a run");
    assert!(s.delete_run("r-acme").await.expect("delete run"));
    let res = s.delete_tenant("acme").await;
    expect_err(
        res,
        "Conflict",
        &["acme", "tokens"],
        "a tenant with a token",
    );
    assert!(s.delete_token("t-acme").await.expect("delete token"));
    assert!(s.delete_tenant("acme").await.expect("delete"));
    assert!(!s.delete_tenant("acme").await.expect("delete again"));
    assert_eq!(s.get_tenant("acme").await.expect("get"), None);

    // Nothing is written for a tenant that is not there (deleted while a hub wrote for it):
    // no orphan job, run or token.
    let mut orphan = job("j-gone", "nightly");
    orphan.tenant = "acme".to_owned();
    let res = s.create_job(&orphan).await;
    expect_err(
        res,
        "NotFound",
        &["acme", "nightly"],
        "a job of a deleted tenant",
    );
    assert_eq!(s.get_job("j-gone").await.expect("get"), None);
    let mut orphan = run("r-gone", None, "running", T0);
    orphan.tenant = "acme".to_owned();
    let res = s.put_run(&orphan).await;
    expect_err(
        res,
        "NotFound",
        &["acme", "r-gone"],
        "a run of a deleted tenant",
    );
    assert!(
        s.acquire_lease(&run_lease_name("r-gone"), "hub-a", 60_000)
            .await
            .expect("lease")
    );
    let res = s
        .put_run_held(&orphan, &run_lease_name("r-gone"), "hub-a")
        .await;
    expect_err(res, "NotFound", &["acme"], "a held run of a deleted tenant");
    assert_eq!(s.get_run("r-gone").await.expect("get"), None);
    let mut orphan = token("t-gone", T0);
    orphan.tenant = "acme".to_owned();
    let res = s.create_token(&orphan).await;
    expect_err(res, "NotFound", &["acme"], "a token of a deleted tenant");
    assert_eq!(s.get_token("t-gone").await.expect("get"), None);
}

/// A tenant deleted while a job and a token are written for it: either they are written
/// and the delete is refused (it saw them), or the tenant is gone and they are not written —
/// never a job or token of a tenant that does not exist.
pub async fn a_tenant_deleted_while_written_for_leaves_no_orphan(f: &dyn StoreFactory) {
    let s = f.open().await;
    for i in 0..40 {
        let name = format!("racer{i}");
        s.create_tenant(&TenantRow {
            name: name.clone(),
            doc: json!({}),
            created_ms: T0,
            updated_ms: T0,
        })
        .await
        .expect("tenant");
        let mut j = job(&format!("j-race-{i}"), "nightly");
        j.tenant = name.clone();
        let mut t = token(&format!("t-race-{i}"), T0);
        t.tenant = name.clone();
        let (deleted, made, minted) =
            tokio::join!(s.delete_tenant(&name), s.create_job(&j), s.create_token(&t));
        let tenant = s.get_tenant(&name).await.expect("get").is_some();
        let job_there = s.get_job(&j.id).await.expect("get").is_some();
        let token_there = s.get_token(&t.id).await.expect("get").is_some();
        assert!(
            tenant || (!job_there && !token_there),
            "round {i}: an orphan (deleted {deleted:?}, job {made:?}, token {minted:?})"
        );
        assert_eq!(made.is_ok(), job_there, "round {i}: {made:?}");
        assert_eq!(minted.is_ok(), token_there, "round {i}: {minted:?}");
        assert_eq!(
            deleted.as_ref().is_ok_and(|d| *d),
            !tenant,
            "round {i}: {deleted:?}"
        );
    }
}

/// Quota counters: a reservation never takes a counter past its page limit (also when hubs
/// race), reserves on every claim at once, stops at the byte limit, and usage gives
/// reservations back.
pub async fn quota_reservations_hold_their_limits(f: &dyn StoreFactory) {
    let s = f.open().await;
    let key = |scope: &str| UsageKey {
        scope: scope.to_owned(),
        period: "2026-11-28".to_owned(),
    };
    let claim = |scope: &str, max_pages: Option<u64>, max_bytes: Option<u64>| QuotaClaim {
        key: key(scope),
        max_pages,
        max_bytes,
    };
    assert_eq!(s.get_usage(&key("tenant:a")).await.expect("get"), None);
    let tenant = [claim("tenant:a", Some(100), None)];
    assert_eq!(s.reserve_quota(&tenant, 30, T0).await.expect("reserve"), 30);
    assert_eq!(s.reserve_quota(&tenant, 80, T0).await.expect("reserve"), 70);
    assert_eq!(s.reserve_quota(&tenant, 1, T0).await.expect("reserve"), 0);
    // 50 pages used out of the reservation, 10 past it.
    let used = UsageDelta {
        pages: 60,
        bytes: 6_000,
        unreserve: 50,
        overshoot: 10,
    };
    s.add_usage(&[key("tenant:a")], &used, T0 + 1)
        .await
        .expect("add");
    let row = s
        .get_usage(&key("tenant:a"))
        .await
        .expect("get")
        .expect("row");
    assert_eq!(
        (
            row.pages,
            row.bytes,
            row.reserved,
            row.overshoot,
            row.updated_ms
        ),
        (60, 6_000, 50, 10, T0 + 1)
    );
    assert_eq!(s.reserve_quota(&tenant, 10, T0).await.expect("reserve"), 0);
    // The rest of the reservation given back (more than is reserved: never below 0).
    let back = UsageDelta {
        unreserve: 80,
        ..UsageDelta::default()
    };
    s.add_usage(&[key("tenant:a")], &back, T0 + 2)
        .await
        .expect("add");
    assert_eq!(
        s.reserve_quota(&tenant, 100, T0).await.expect("reserve"),
        40
    );
    // Every claim at once: the smallest room wins, and both counters are reserved.
    let both = [
        claim("tenant:b", Some(100), None),
        claim("job:j1", Some(25), None),
    ];
    assert_eq!(s.reserve_quota(&both, 50, T0).await.expect("reserve"), 25);
    let reserved = |row: Option<crate::tenants::UsageRow>| row.expect("row").reserved;
    assert_eq!(
        reserved(s.get_usage(&key("tenant:b")).await.expect("get")),
        25
    );
    assert_eq!(
        reserved(s.get_usage(&key("job:j1")).await.expect("get")),
        25
    );
    // A claim without limits only counts.
    let free = [claim("tenant:c", None, None)];
    assert_eq!(s.reserve_quota(&free, 500, T0).await.expect("reserve"), 500);
    // The byte limit: reached, nothing more.
    let bytes = [claim("tenant:d", None, Some(1_000))];
    assert_eq!(s.reserve_quota(&bytes, 10, T0).await.expect("reserve"), 10);
    let big = UsageDelta {
        pages: 10,
        bytes: 1_000,
        unreserve: 10,
        overshoot: 0,
    };
    s.add_usage(&[key("tenant:d")], &big, T0)
        .await
        .expect("add");
    assert_eq!(s.reserve_quota(&bytes, 10, T0).await.expect("reserve"), 0);
    // Racing reservations (two stores, like two hubs) never hand out more than the limit.
    let other = f.open().await;
    let race = [claim("tenant:race", Some(100), None)];
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = if i % 2 == 0 { s.clone() } else { other.clone() };
        let race = race.clone();
        tasks.push(tokio::spawn(async move {
            store.reserve_quota(&race, 7, T0).await.expect("reserve")
        }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += t.await.expect("task");
    }
    assert_eq!(granted, 100, "racing reservations");
    assert_eq!(
        reserved(s.get_usage(&key("tenant:race")).await.expect("get")),
        100
    );
}

/// The archive of finished requests: rows of a run in the order they finished, with paging
/// by the last one seen; a row written again replaces the first (keeping when it was
/// requeued), also twice in one batch; filters by outcome, error code, status, keys and
/// requeued; counts per outcome; other runs apart; NUL in a text (stored as U+FFFD, found
/// by the same text) and in the document; retention by age in bounded steps.
pub async fn requests_archived_listed_requeued(f: &dyn StoreFactory) {
    use crate::request_archive::{ArchiveFilter, ArchivedRequest};
    use std::collections::BTreeMap;
    let s = f.open().await;
    let row =
        |run: &str, key: &str, time: u64, outcome: &str, status: Option<u16>| ArchivedRequest {
            run: run.to_owned(),
            key: key.to_owned(),
            time_ms: T0 + time,
            outcome: outcome.to_owned(),
            url: format!("https://example.com/{key}"),
            status,
            error_code: (outcome != "done").then(|| format!("http_{}", status.unwrap_or(0))),
            attempts: if outcome == "failed" { 3 } else { 1 },
            agent: Some("a1".into()),
            doc: serde_json::json!({"method": "GET", "depth": 1, "error_msg": "x\u{0}y"}),
            requeued_ms: None,
        };
    let mut nul = row("r1", "k1", 10, "done", Some(200));
    nul.url = "https://example.com/a\u{0}b".into();
    let rows = vec![
        nul,
        row("r1", "k2", 11, "failed", Some(503)),
        row("r1", "k3", 11, "failed", Some(500)),
        row("r1", "k4", 12, "dropped", None),
        row("r1", "k5", 13, "failed", Some(503)),
        row("r2", "k1", 10, "failed", Some(503)),
    ];
    assert_eq!(s.archive_requests(&rows).await.unwrap(), 6);
    let all = |run: &str| ArchiveFilter {
        run: run.to_owned(),
        ..ArchiveFilter::default()
    };
    let listed = s.list_archived(&all("r1")).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        ["k1", "k2", "k3", "k4", "k5"],
        "in the order they finished"
    );
    assert_eq!(listed[1], rows[1], "a row comes back as written");
    assert_eq!(listed[0].url, "https://example.com/a\u{FFFD}b");
    assert_eq!(listed[0].doc, rows[0].doc, "the document keeps its NUL");
    // Paging.
    let mut filter = ArchiveFilter {
        limit: Some(2),
        ..all("r1")
    };
    let mut seen = Vec::new();
    loop {
        let page = s.list_archived(&filter).await.unwrap();
        let Some(last) = page.last() else { break };
        filter.after = Some((last.time_ms, last.key.clone()));
        seen.extend(page.into_iter().map(|r| r.key));
    }
    assert_eq!(seen, ["k1", "k2", "k3", "k4", "k5"]);
    // Filters and counts.
    let failed = ArchiveFilter {
        outcome: Some("failed".into()),
        ..all("r1")
    };
    let keys = |rows: Vec<ArchivedRequest>| rows.into_iter().map(|r| r.key).collect::<Vec<_>>();
    assert_eq!(
        keys(s.list_archived(&failed).await.unwrap()),
        ["k2", "k3", "k5"]
    );
    let f503 = ArchiveFilter {
        status: Some(503),
        ..failed.clone()
    };
    assert_eq!(keys(s.list_archived(&f503).await.unwrap()), ["k2", "k5"]);
    let code = ArchiveFilter {
        error_code: Some("http_500".into()),
        ..all("r1")
    };
    assert_eq!(keys(s.list_archived(&code).await.unwrap()), ["k3"]);
    let counts = s.count_archived(&all("r1")).await.unwrap();
    assert_eq!(
        counts,
        BTreeMap::from([
            ("done".into(), 1),
            ("dropped".into(), 1),
            ("failed".into(), 3)
        ])
    );
    assert_eq!(
        s.count_archived(&all("r2")).await.unwrap(),
        BTreeMap::from([("failed".into(), 1)])
    );
    assert!(s.count_archived(&all("r3")).await.unwrap().is_empty());
    // Requeued.
    assert_eq!(
        s.mark_archived_requeued("r1", &["k2".into(), "k5".into(), "nope".into()], T0 + 50)
            .await
            .unwrap(),
        2
    );
    let requeued = ArchiveFilter {
        requeued: Some(false),
        ..failed.clone()
    };
    assert_eq!(keys(s.list_archived(&requeued).await.unwrap()), ["k3"]);
    let marked = ArchiveFilter {
        requeued: Some(true),
        ..all("r1")
    };
    assert_eq!(keys(s.list_archived(&marked).await.unwrap()), ["k2", "k5"]);
    let none = ArchiveFilter {
        keys: Some(Vec::new()),
        ..all("r1")
    };
    assert!(s.list_archived(&none).await.unwrap().is_empty());
    let nul_code = ArchiveFilter {
        error_code: Some("http_\u{0}".into()),
        ..all("r1")
    };
    assert!(s.list_archived(&nul_code).await.unwrap().is_empty());
    let by_keys = ArchiveFilter {
        keys: Some(vec!["k5".into(), "k1".into()]),
        ..all("r1")
    };
    assert_eq!(keys(s.list_archived(&by_keys).await.unwrap()), ["k1", "k5"]);
    // Written again (twice in one batch): the last one wins, requeued kept.
    let mut again = row("r1", "k5", 60, "done", Some(200));
    again.attempts = 4;
    let first = row("r1", "k5", 59, "failed", Some(502));
    assert_eq!(
        s.archive_requests(&[first, again.clone()]).await.unwrap(),
        1
    );
    let k5 = s
        .list_archived(&ArchiveFilter {
            keys: Some(vec!["k5".into()]),
            ..all("r1")
        })
        .await
        .unwrap();
    assert_eq!(k5.len(), 1);
    assert_eq!(k5[0].outcome, "done");
    assert_eq!(k5[0].attempts, 4);
    assert_eq!(k5[0].requeued_ms, Some(T0 + 50), "requeued kept");
    // Retention, in steps.
    assert_eq!(s.delete_archived_before(T0 + 12, 2).await.unwrap(), 2);
    assert_eq!(s.delete_archived_before(T0 + 12, 2).await.unwrap(), 2);
    assert_eq!(s.delete_archived_before(T0 + 12, 2).await.unwrap(), 0);
    let left: Vec<(String, String)> = s
        .list_archived(&all("r1"))
        .await
        .unwrap()
        .into_iter()
        .chain(s.list_archived(&all("r2")).await.unwrap())
        .map(|r| (r.run, r.key))
        .collect();
    assert_eq!(
        left,
        [("r1".into(), "k4".into()), ("r1".into(), "k5".into())]
    );
}
