//! `silk router failures|replay`: the failure records of the router a hub runs (`--router`),
//! kept in its store, and submitting them again. Admin only.

use super::logs::{Since, parse_since};
use super::output::{Align, Table, ago, now_ms, show};
use super::{Client, Conn};
use clap::Args;
use silk_api::router::{ReplayRequest, RouterFailuresParams};
use std::process::ExitCode;

/// Which records (`silk router failures` and `silk router replay`).
#[derive(Debug, Args)]
pub struct FailureFilter {
    /// Only those that came from this inbound.
    #[arg(long)]
    pub inbound: Option<String>,
    /// Only those of this outbound.
    #[arg(long)]
    pub outbound: Option<String>,
    /// Only this reason (retries_exhausted, no_route, refused, convert_failed, limits,
    /// bad_task).
    #[arg(long)]
    pub reason: Option<String>,
    /// Only those since then: a duration (10m, 2h, 1d) or a UTC time.
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<Since>,
    /// At most this many (`failures`: 50 unless set; `replay`: all the `--id`s, else 1000).
    #[arg(long)]
    pub limit: Option<u32>,
    #[command(flatten)]
    pub conn: Conn,
}

/// Runs `silk router failures`: newest first.
pub async fn failures(filter: FailureFilter, replayed: Option<bool>) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&filter.conn)?;
    let params = RouterFailuresParams {
        inbound: filter.inbound,
        outbound: filter.outbound,
        reason: filter.reason,
        since: filter.since.map(Since::ms),
        replayed,
        limit: Some(filter.limit.unwrap_or(50)),
        ..RouterFailuresParams::default()
    };
    let page = client
        .api()
        .router_failures(&params)
        .await
        .map_err(|e| client.error(e))?;
    show(filter.conn.json, &page, || {
        use Align::Left;
        let mut table = Table::new(&[
            ("WHEN", Left),
            ("ID", Left),
            ("INBOUND", Left),
            ("OUTBOUND", Left),
            ("REASON", Left),
            ("REPLAYED", Left),
            ("WHY", Left),
        ]);
        let now = now_ms();
        for f in &page.failures {
            table.row(vec![
                ago(f.time_ms, now),
                f.id.clone(),
                f.inbound.clone().unwrap_or_else(|| "-".into()),
                f.outbound.clone().unwrap_or_else(|| "-".into()),
                f.reason.clone(),
                f.replayed_ms.map_or_else(|| "-".into(), |t| ago(t, now)),
                f.why.clone(),
            ]);
        }
        table
    });
    if !filter.conn.json {
        eprintln!("{} of {} record(s)", page.failures.len(), page.total);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `silk router replay`: the records `ids`, or those the filter takes, oldest first.
pub async fn replay(
    filter: FailureFilter,
    ids: Vec<String>,
    again: bool,
) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&filter.conn)?;
    let request = ReplayRequest {
        ids: (!ids.is_empty()).then_some(ids),
        inbound: filter.inbound,
        outbound: filter.outbound,
        reason: filter.reason,
        since: filter.since.map(Since::ms),
        until: None,
        again,
        limit: filter.limit,
    };
    let answer = client
        .api()
        .replay_router_failures(&request)
        .await
        .map_err(|e| client.error(e))?;
    show(filter.conn.json, &answer, || {
        use Align::Left;
        let mut table = Table::new(&[
            ("ID", Left),
            ("DECISION", Left),
            ("REASON", Left),
            ("OUTBOUND", Left),
            ("WHY", Left),
        ]);
        for r in &answer.replayed {
            table.row(vec![
                r.id.clone(),
                r.decision.clone().unwrap_or_else(|| "not replayed".into()),
                r.reason.clone().unwrap_or_default(),
                r.outbound.clone().unwrap_or_default(),
                r.why.clone(),
            ]);
        }
        table
    });
    let not = answer
        .replayed
        .iter()
        .filter(|r| r.decision.is_none())
        .count();
    Ok(if not > 0 {
        eprintln!("{not} record(s) not replayed");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
