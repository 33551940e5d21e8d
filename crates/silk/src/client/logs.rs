//! `silk logs RUN`: a run's log lines (`GET /api/v1/runs/{id}/logs`, paged), filtered by
//! level, text and time; `-f` follows the log over the run's event stream
//! (`/api/v1/runs/{id}/events?logs=true`) until the run ends. Without RUN (or with `--job`),
//! the lines of every run, or of one job's runs (`GET /api/v1/logs`): "which runs logged this
//! error yesterday" is `silk logs --job shop --since 1d --grep refused`; each line then
//! names its run.
//!
//! Lines read `2026-11-21T10:00:00.123Z WARN  agent:local-1  message`; with `--json`, each
//! line is the API's JSON object, one per line (JSON Lines).

use super::cursor_text;
use super::output::{out, timestamp};
use super::sse::SseParser;
use super::{Client, Conn};
use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use silk_api::logs::{Level, LogLineView as LogLine};
use silk_api::runs::RunView;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lines asked for per request.
const PAGE: usize = 500;
/// Time before connecting again to an event stream that broke off (or to a hub that is down).
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// An event stream silent this long is taken as broken (the hub keeps it alive every 15 s).
const SILENCE: Duration = Duration::from_secs(60);

/// Options of `silk logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run id; without it, the lines of every run (newest `--limit`, default 1000).
    #[arg(value_name = "RUN")]
    pub run: Option<String>,
    /// Only lines of this job's runs (its name or id): a search across its runs.
    #[arg(long, value_name = "JOB", conflicts_with = "follow")]
    pub job: Option<String>,
    /// Follow the log until the run ends (Ctrl-C stops following).
    #[arg(short = 'f', long, requires = "run")]
    pub follow: bool,
    /// Only lines of this level or more severe.
    #[arg(long, value_name = "LEVEL")]
    pub level: Option<Level>,
    /// Only lines whose message contains this text (case-insensitive).
    #[arg(long, value_name = "TEXT")]
    pub grep: Option<String>,
    /// Only lines from this long ago (`10m`, `2h`) or this time on (`2026-11-21T10:00:00Z`).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<Since>,
    /// Only lines before this long ago (`1h`) or this time (`2026-11-21T12:00:00Z`).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub until: Option<Since>,
    /// Only the last N lines (with -f: the last N before following).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    #[command(flatten)]
    pub conn: Conn,
}

/// The start of `--since`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Since {
    /// This long before now.
    Ago(Duration),
    /// This time.
    At(SystemTime),
}

impl Since {
    pub(crate) fn ms(self) -> u64 {
        let at = match self {
            Since::Ago(d) => SystemTime::now().checked_sub(d).unwrap_or(UNIX_EPOCH),
            Since::At(t) => t,
        };
        at.duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

pub(crate) fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(d) = humantime::parse_duration(text) {
        return Ok(Since::Ago(d));
    }
    humantime::parse_rfc3339_weak(text)
        .map(Since::At)
        .map_err(|_| "expected a duration (10m, 2h) or a UTC time (2026-11-21T10:00:00Z)".into())
}

/// Which lines are shown.
#[derive(Debug, Clone, Default)]
struct Filter {
    level: Option<Level>,
    grep: Option<String>,
    since_ms: Option<u64>,
}

impl Filter {
    fn keeps(&self, line: &LogLine) -> bool {
        self.level.is_none_or(|min| line.level >= min)
            && self.grep.as_deref().is_none_or(|text| {
                // As the hub's `q`: case-insensitive.
                line.message.to_lowercase().contains(&text.to_lowercase())
            })
            && self.since_ms.is_none_or(|since| line.ts_ms >= since)
    }

    /// The query parameters the hub filters by.
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut query = Vec::new();
        if let Some(level) = self.level {
            query.push(("level", level.as_str().to_owned()));
        }
        if let Some(text) = &self.grep {
            query.push(("q", text.clone()));
        }
        if let Some(since) = self.since_ms {
            query.push(("since_ms", since.to_string()));
        }
        query
    }
}

/// A line as people read it: `TIME LEVEL SOURCE  MESSAGE`.
fn format_line(line: &LogLine) -> String {
    format!(
        "{} {:<5} {}  {}",
        timestamp(line.ts_ms),
        line.level.as_str().to_ascii_uppercase(),
        line.source,
        line.message
    )
}

/// A line shown: as people read it, or (`json`) as the hub sent it.
fn show(line: &LogLine, raw: &str, json: bool) -> bool {
    if json {
        out(&format!("{}\n", raw.trim()))
    } else {
        out(&format!("{}\n", format_line(line)))
    }
}

/// One page of `GET /logs`.
#[derive(Debug, Deserialize)]
struct LogPage {
    #[serde(default)]
    lines: Vec<Box<RawValue>>,
    #[serde(default)]
    next: Option<Value>,
}

/// Runs `silk logs`.
pub async fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let filter = Filter {
        level: args.level,
        grep: args.grep.clone(),
        since_ms: args.since.map(Since::ms),
    };
    let json = args.conn.json;
    let until_ms = args.until.map(Since::ms);
    let run = match (&args.run, &args.job, until_ms) {
        (Some(run), None, None) => run.clone(),
        _ => return search(&client, &args, &filter, until_ms, json).await,
    };
    if !args.follow {
        history(&client, &run, &filter, args.limit, json).await?;
        return Ok(ExitCode::SUCCESS);
    }
    tokio::select! {
        result = follow(&client, &run, &filter, args.limit, args.since.is_some(), json) => result,
        _ = crate::wait_for_stop_signal() => Ok(ExitCode::from(130)),
    }
}

/// Reads a page of log lines into `lines` (each with its JSON as sent); how many it had, and
/// the cursor of the next page.
fn read_page(
    text: &str,
    lines: &mut Vec<(LogLine, String)>,
) -> anyhow::Result<(usize, Option<String>)> {
    let page: LogPage = serde_json::from_str(text)
        .context("unexpected answer from the hub: not a page of log lines")?;
    let got = page.lines.len();
    for raw in page.lines {
        let line: LogLine = serde_json::from_str(raw.get())
            .context("unexpected answer from the hub: not a log line")?;
        lines.push((line, raw.get().to_owned()));
    }
    Ok((got, page.next.as_ref().and_then(cursor_text)))
}

/// Reads the pages of log lines at `path` (`query` + `limit` + the cursor `cursor_key`) until
/// `limit` lines, the last page, or a page that does not move; the lines in the order the
/// pages give them, and whether lines were left past `limit`.
async fn read_pages(
    client: &Client,
    path: &[&str],
    query: Vec<(&'static str, String)>,
    cursor_key: &'static str,
    limit: Option<usize>,
) -> anyhow::Result<(Vec<(LogLine, String)>, bool)> {
    let mut lines = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut page_query = query.clone();
        let want = limit.map_or(PAGE, |n| (n - lines.len()).min(PAGE));
        page_query.push(("limit", want.to_string()));
        if let Some(c) = &cursor {
            page_query.push((cursor_key, c.clone()));
        }
        let answer = client.get_with(path, &page_query).await?;
        let (got, next) = read_page(&answer.text, &mut lines)?;
        if limit.is_some_and(|n| lines.len() >= n) {
            return Ok((lines, next.is_some()));
        }
        if got == 0 || next.is_none() || next == cursor {
            return Ok((lines, false));
        }
        cursor = next;
    }
}

/// Lines most shown by a search across runs without `--limit`.
const SEARCH_LIMIT: usize = 1000;

/// `silk logs [--job JOB] [RUN]` across runs: the newest matching lines (at most `--limit`),
/// printed oldest first, each with its run.
async fn search(
    client: &Client,
    args: &LogsArgs,
    filter: &Filter,
    until_ms: Option<u64>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let limit = args.limit.map_or(SEARCH_LIMIT, |n| n as usize);
    let mut query = filter.query();
    let scope = [("job", args.job.clone()), ("run", args.run.clone())];
    query.extend(scope.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
    if let Some(until) = until_ms {
        query.push(("until_ms", until.to_string()));
    }
    let (mut lines, more) =
        read_pages(client, &["api", "v1", "logs"], query, "before", Some(limit)).await?;
    lines.reverse();
    for (line, raw) in &lines {
        let shown = if json {
            out(&format!("{}\n", raw.trim()))
        } else {
            out(&format!(
                "{} {:<5} {}  {}  {}\n",
                timestamp(line.ts_ms),
                line.level.as_str().to_ascii_uppercase(),
                line.run_id,
                line.source,
                line.message
            ))
        };
        if !shown {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if more {
        eprintln!("(the newest {limit} lines; --limit N or --since/--until for others)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the lines the logs endpoint has (the last `limit` ones, or all); returns the id of
/// the last line printed and whether stdout is still open.
async fn history(
    client: &Client,
    run: &str,
    filter: &Filter,
    limit: Option<u32>,
    json: bool,
) -> anyhow::Result<(Option<i64>, bool)> {
    let lines = fetch(client, run, filter, limit.map(|n| n as usize)).await?;
    let mut last = None;
    for (line, raw) in &lines {
        last = Some(line.id);
        if !filter.keeps(line) {
            continue;
        }
        if !show(line, raw, json) {
            return Ok((last, false));
        }
    }
    Ok((last, true))
}

/// The matching lines, oldest first: all of them, or the last `limit`.
async fn fetch(
    client: &Client,
    run: &str,
    filter: &Filter,
    limit: Option<usize>,
) -> anyhow::Result<Vec<(LogLine, String)>> {
    // The last N: newest first, then turned around.
    let newest_first = limit.is_some();
    let mut query = filter.query();
    query.push(("order", if newest_first { "desc" } else { "asc" }.into()));
    let cursor = if newest_first { "before" } else { "after" };
    let path = ["api", "v1", "runs", run, "logs"];
    let (mut lines, _) = read_pages(client, &path, query, cursor, limit).await?;
    if newest_first {
        lines.reverse();
    }
    Ok(lines)
}

/// Follows the run's event stream: log lines as they come, until the `end` event (exit 0).
/// A stream that breaks off, or a hub that cannot be reached, is connected to again after the
/// last line seen.
async fn follow(
    client: &Client,
    run: &str,
    filter: &Filter,
    limit: Option<u32>,
    since: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    // Without --limit or --since the stream starts with the log's tail; with them, the lines
    // they select come first and the stream goes on after them.
    let mut after: Option<i64> = None;
    if limit.is_some() || since {
        let (last, open) = history(client, run, filter, limit, json).await?;
        if !open {
            return Ok(ExitCode::SUCCESS);
        }
        after = Some(last.unwrap_or(0));
    }
    let mut state = String::new();
    let mut unreachable = false;
    let mut connected = false;
    loop {
        let mut query = vec![("logs", "true".to_owned())];
        if let Some(level) = filter.level {
            query.push(("level", level.as_str().to_owned()));
        }
        if let Some(id) = after {
            query.push(("after", id.to_string()));
        }
        let response = match client
            .stream(&["api", "v1", "runs", run, "events"], &query)
            .await
        {
            Ok(r) => r,
            // A hub that went away after the stream started is waited for.
            Err(e) if connected && e.error.is_transient() => {
                if !unreachable {
                    eprintln!("{e}; still trying");
                    unreachable = true;
                }
                tokio::time::sleep(RECONNECT_AFTER).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        connected = true;
        if unreachable {
            eprintln!("the hub answers again");
            unreachable = false;
        }
        let mut response = response;
        let mut parser = SseParser::new();
        loop {
            let chunk = match tokio::time::timeout(SILENCE, response.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                // The stream broke off, closed before `end`, or went silent (the hub sends a
                // keep-alive every 15 s): connect again.
                Ok(Ok(None) | Err(_)) | Err(_) => break,
            };
            for event in parser.push(&chunk) {
                match event.event.as_str() {
                    "log" => {
                        let Ok(line) = serde_json::from_str::<LogLine>(&event.data) else {
                            continue;
                        };
                        if after.is_some_and(|a| line.id <= a) {
                            continue;
                        }
                        after = Some(line.id);
                        if filter.keeps(&line) && !show(&line, &event.data, json) {
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                    "run" => {
                        if let Ok(view) = serde_json::from_str::<RunView>(&event.data) {
                            state = view.state.to_string();
                        }
                    }
                    "end" => {
                        // The end event's data is the final state (the last `run` event
                        // says it too).
                        let last = event.data.trim().trim_matches('"');
                        if !last.is_empty() && !last.starts_with('{') {
                            state = last.to_owned();
                        }
                        if state.is_empty() {
                            eprintln!("run {run} ended");
                        } else {
                            eprintln!("run {run} ended: {state}");
                        }
                        return Ok(ExitCode::SUCCESS);
                    }
                    _ => {}
                }
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(level: &str, message: &str, ts_ms: u64) -> LogLine {
        LogLine {
            id: 1,
            run_id: "r1".into(),
            ts_ms,
            level: level.parse().unwrap(),
            source: "agent:local-1".into(),
            message: message.into(),
        }
    }

    #[test]
    fn lines_read_time_level_source_message() {
        assert_eq!(
            format_line(&line("warn", "slow host", 1_795_255_200_123)),
            "2026-11-21T10:00:00.123Z WARN  agent:local-1  slow host"
        );
        assert_eq!(
            format_line(&line("error", "x", 0)),
            "1970-01-01T00:00:00.000Z ERROR agent:local-1  x"
        );
    }

    #[test]
    fn filters_keep_the_level_and_above_the_text_and_the_time() {
        let f = Filter {
            level: Some(Level::Warn),
            grep: Some("host".into()),
            since_ms: Some(10),
        };
        assert!(f.keeps(&line("warn", "slow host", 10)));
        assert!(f.keeps(&line("error", "Host down", 11)));
        assert!(!f.keeps(&line("info", "host", 11)));
        assert!(!f.keeps(&line("error", "disk", 11)));
        assert!(!f.keeps(&line("error", "host", 9)));
        assert!(Filter::default().keeps(&line("trace", "", 0)));
        assert_eq!(
            f.query(),
            vec![
                ("level", "warn".to_owned()),
                ("q", "host".to_owned()),
                ("since_ms", "10".to_owned())
            ]
        );
    }

    #[test]
    fn since_is_a_duration_or_a_time() {
        assert!(matches!(parse_since("10m"), Ok(Since::Ago(d)) if d.as_secs() == 600));
        let Ok(Since::At(t)) = parse_since("2026-11-21T10:00:00Z") else {
            panic!("a time");
        };
        assert_eq!(Since::At(t).ms(), 1_795_255_200_000);
        assert!(parse_since("yesterday").is_err());
    }
}
