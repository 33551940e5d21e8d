//! `silk run SPIDER` (an ad-hoc run) and `silk runs` (list, show, pause, resume, cancel,
//! restart, wait, requests, requeue). Following a run to its end (`--wait`, `runs wait`) polls the run and shows
//! progress on stderr.

use super::output::{
    Align, Table, agent_list, ago, describe, human_bytes, now_ms, print_json, show,
};
use super::{Answer, ApiError, Client, Conn, parse};
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use silk_api::ErrorCode;
use silk_api::runs::{
    RequestOutcome, RequestsParams, RequeueRequest, RestartRequest, RunView, RunsParams,
};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Time between two looks at a run followed with `--wait`.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// Time between two progress log lines when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

// ------------------------------------------------------------------------------------------
// `silk runs`.

/// Options of `silk runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: Option<RunsCommand>,
    /// Filters of the listing (`silk runs` alone lists).
    #[command(flatten)]
    pub list: ListArgs,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first: id, job, state, strategy, agents, progress (the default).
    List(ListArgs),
    /// Show one run: state, reason, allocation, times, every counter.
    Show(IdArg),
    /// Pause a running run (requests out finish; nothing new is sent).
    Pause(IdArg),
    /// Resume a paused run.
    Resume(IdArg),
    /// Cancel a run (it ends as cancelled).
    Cancel(IdArg),
    /// Start a new run like this one (stopping it first if active); prints the new run's id.
    Restart(RestartArgs),
    /// Follow a run until it ends, with progress on stderr. Exit status: 0 succeeded, 1
    /// failed, 3 cancelled, 130 stopped waiting (Ctrl-C; the run goes on on the hub).
    Wait(IdArg),
    /// List a run's finished requests (the archive), in the order they finished: URL,
    /// outcome, status, error, attempts, agent.
    Requests(RequestsArgs),
    /// Queue a run's finished requests again (its failed ones by default), once each: into
    /// the run while it is active, else into a run of its job (started for them if none is
    /// open).
    Requeue(RequeueArgs),
}

impl RunsCommand {
    fn name(&self) -> &'static str {
        match self {
            RunsCommand::List(_) => "list",
            RunsCommand::Show(_) => "show",
            RunsCommand::Pause(_) => "pause",
            RunsCommand::Resume(_) => "resume",
            RunsCommand::Cancel(_) => "cancel",
            RunsCommand::Restart(_) => "restart",
            RunsCommand::Wait(_) => "wait",
            RunsCommand::Requests(_) => "requests",
            RunsCommand::Requeue(_) => "requeue",
        }
    }
}

/// Filters of `silk runs [list]`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only the runs of this job (id or name).
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only runs in this state (pending, allocating, running, paused, stopping, succeeded,
    /// failed, cancelled).
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    /// At most this many runs (the hub's default: 100).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

/// A run id.
#[derive(Debug, Args)]
pub struct IdArg {
    /// The run id.
    #[arg(value_name = "RUN")]
    pub id: String,
}

/// Options of `silk runs restart`.
#[derive(Debug, Args)]
pub struct RestartArgs {
    /// The run id.
    #[arg(value_name = "RUN")]
    pub id: String,
    /// Keep the old run's frontier (what was fetched stays fetched) instead of starting over.
    #[arg(long)]
    pub keep_frontier: bool,
    /// Follow the new run until it ends (exit status as `silk runs wait`).
    #[arg(long)]
    pub wait: bool,
}

/// Which finished requests of a run (`silk runs requests` and `silk runs requeue`).
#[derive(Debug, Args)]
pub struct ArchiveFilterArgs {
    /// The run id.
    #[arg(value_name = "RUN")]
    pub id: String,
    /// Only those that ended so.
    #[arg(long, value_parser = parse_outcome)]
    pub outcome: Option<RequestOutcome>,
    /// Only those with this error code (http_503, timeout, dns, robots_disallowed, …).
    #[arg(long, value_name = "CODE")]
    pub error_code: Option<String>,
    /// Only those whose last response had this HTTP status.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<u16>,
}

/// Options of `silk runs requests`.
#[derive(Debug, Args)]
pub struct RequestsArgs {
    #[command(flatten)]
    pub filter: ArchiveFilterArgs,
    /// At most this many (100 unless set; the hub pages by 1000 at most).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Every one that matches, page after page.
    #[arg(long, conflicts_with = "limit")]
    pub all: bool,
}

/// Options of `silk runs requeue`.
#[derive(Debug, Args)]
pub struct RequeueArgs {
    #[command(flatten)]
    pub filter: ArchiveFilterArgs,
    /// Only these (keys from `silk runs requests --json`; then any outcome unless
    /// `--outcome`); repeat for more.
    #[arg(long = "key", value_name = "KEY")]
    pub keys: Vec<String>,
    /// At most this many, oldest first (default and most: 10000).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

fn parse_outcome(text: &str) -> Result<RequestOutcome, String> {
    text.parse()
}

/// Runs `silk runs`.
pub async fn runs(args: RunsArgs) -> anyhow::Result<ExitCode> {
    let filtered =
        args.list.job.is_some() || args.list.state.is_some() || args.list.limit.is_some();
    if let Some(command) = &args.command
        && filtered
        && !matches!(command, RunsCommand::List(_))
    {
        let name = command.name();
        eprintln!(
            "error: --job, --state and --limit filter the listing; they do not go with `silk runs {name}`"
        );
        return Ok(ExitCode::from(2));
    }
    let client = Client::connect(&args.conn)?;
    let json = args.conn.json;
    match args.command {
        None => list(&client, &args.list, json).await,
        Some(RunsCommand::List(l)) => {
            // `silk runs --job J list --state S`: both filters.
            let merged = ListArgs {
                job: l.job.or(args.list.job),
                state: l.state.or(args.list.state),
                limit: l.limit.or(args.list.limit),
            };
            list(&client, &merged, json).await
        }
        Some(RunsCommand::Show(IdArg { id })) => {
            let answer = client.get(&["api", "v1", "runs", &id]).await?;
            if json {
                print_json(&answer);
            } else {
                print!("{}", describe(&answer.text, now_ms(), &[]));
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(RunsCommand::Pause(IdArg { id })) => act(&client, &id, "pause", json).await,
        Some(RunsCommand::Resume(IdArg { id })) => act(&client, &id, "resume", json).await,
        Some(RunsCommand::Cancel(IdArg { id })) => act(&client, &id, "cancel", json).await,
        Some(RunsCommand::Restart(r)) => {
            let body = serde_json::to_value(RestartRequest {
                keep_frontier: r.keep_frontier,
            })?;
            let answer = client
                .post(&["api", "v1", "runs", &r.id, "restart"], &body)
                .await?;
            let view: RunView = parse(&answer.value, "a run")?;
            eprintln!("run {} restarted as {} ({})", r.id, view.id, view.state);
            started(&client, view, answer, r.wait, json).await
        }
        Some(RunsCommand::Wait(IdArg { id })) => {
            let answer = client.get(&["api", "v1", "runs", &id]).await?;
            let view: RunView = parse(&answer.value, "a run")?;
            wait_for(&client, view, answer, json).await
        }
        Some(RunsCommand::Requests(r)) => requests(&client, r, json).await,
        Some(RunsCommand::Requeue(r)) => requeue(&client, r, json).await,
    }
}

/// `silk runs requests`: a table of finished requests, or their pages as JSON.
async fn requests(client: &Client, args: RequestsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let f = &args.filter;
    let mut params = RequestsParams {
        outcome: f.outcome,
        error_code: f.error_code.clone(),
        status: f.status,
        limit: Some(if args.all {
            1000
        } else {
            args.limit.unwrap_or(100)
        }),
        ..RequestsParams::default()
    };
    let mut rows = Vec::new();
    let mut counts = None;
    loop {
        let page = client
            .api()
            .run_requests(&f.id, &params)
            .await
            .map_err(|e| client.error(e))?;
        rows.extend(page.requests);
        counts = counts.or(page.counts);
        match page.next {
            Some(next) if args.all => params.after = Some(next),
            _ => break,
        }
    }
    let counts = counts.unwrap_or_default();
    show(json, &rows, || {
        use Align::{Left, Right};
        let mut table = Table::new(&[
            ("WHEN", Left),
            ("OUTCOME", Left),
            ("STATUS", Right),
            ("ERROR", Left),
            ("ATTEMPTS", Right),
            ("AGENT", Left),
            ("URL", Left),
        ]);
        let now = now_ms();
        for r in &rows {
            table.row(vec![
                ago(r.time_ms, now),
                r.outcome.to_string(),
                r.status.map_or_else(|| "-".into(), |s| s.to_string()),
                r.error_code.clone().unwrap_or_else(|| "-".into()),
                r.attempts.to_string(),
                r.agent.clone().unwrap_or_else(|| "-".into()),
                r.url.clone(),
            ]);
        }
        table
    });
    if !json {
        let total: u64 = counts.values().sum();
        let per: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        eprintln!(
            "{} of {total} finished request(s) that match ({})",
            rows.len(),
            if per.is_empty() {
                "none".to_owned()
            } else {
                per.join(", ")
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `silk runs requeue`: what was queued again, and into which run.
async fn requeue(client: &Client, args: RequeueArgs, json: bool) -> anyhow::Result<ExitCode> {
    let f = &args.filter;
    let ask = RequeueRequest {
        outcome: f.outcome,
        error_code: f.error_code.clone(),
        status: f.status,
        keys: (!args.keys.is_empty()).then(|| args.keys.clone()),
        limit: args.limit,
    };
    let done = client
        .api()
        .requeue_requests(&f.id, &ask)
        .await
        .map_err(|e| client.error(e))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&done)?);
    } else {
        match &done.run {
            Some(run) if run.as_str() != f.id => {
                println!("{} request(s) queued again, into run {run}", done.requeued)
            }
            _ => println!("{} request(s) queued again", done.requeued),
        }
        for why in &done.refused {
            eprintln!("not queued: {why}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(client: &Client, args: &ListArgs, json: bool) -> anyhow::Result<ExitCode> {
    let params = RunsParams {
        job: args.job.clone(),
        state: args.state.clone(),
        limit: args.limit,
    };
    let answer = client
        .get_with(&["api", "v1", "runs"], &params.pairs())
        .await?;
    print_runs(client, &answer, json)
}

/// Prints a list of runs (a table, or the answer as is).
pub fn print_runs(client: &Client, answer: &Answer, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        print_json(answer);
        return Ok(ExitCode::SUCCESS);
    }
    let runs: Vec<RunView> = parse(&answer.value, "a list of runs")?;
    print!("{}", runs_table(&runs, now_ms()).render());
    if runs.is_empty() {
        eprintln!("no runs on the hub at {}", client.server());
    }
    Ok(ExitCode::SUCCESS)
}

async fn act(client: &Client, id: &str, action: &str, json: bool) -> anyhow::Result<ExitCode> {
    let answer = client
        .post(&["api", "v1", "runs", id, action], &Value::Null)
        .await?;
    if json {
        print_json(&answer);
    } else {
        let view: RunView = parse(&answer.value, "a run")?;
        println!("run {}: {}", view.id, view.state);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn runs_table(runs: &[RunView], now_ms: u64) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("ID", Left),
        ("JOB", Left),
        ("STATE", Left),
        ("STRATEGY", Left),
        ("AGENTS", Left),
        ("HUB", Left),
        ("SUCCESS/TOTAL", Right),
        ("LEFT", Right),
        ("FAILED", Right),
        ("ITEMS", Right),
        ("PAGES/S", Right),
        ("STARTED", Right),
        ("REASON", Left),
    ]);
    for r in runs {
        table.row(vec![
            r.id.to_string(),
            r.job_name.clone().unwrap_or_else(|| "-".into()),
            r.state.to_string(),
            r.strategy.to_string(),
            agent_list(&r.agents),
            r.hub
                .as_ref()
                .map_or_else(|| "-".into(), ToString::to_string),
            format!("{}/{}", r.stats.success, r.stats.total),
            r.stats.left.to_string(),
            r.stats.failed.to_string(),
            r.stats.items.to_string(),
            format!("{:.1}", r.stats.pages_per_s),
            Some(r.started_ms.unwrap_or(r.created_ms))
                .map_or_else(|| "-".into(), |t| super::output::ago(t, now_ms)),
            r.reason.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table
}

// ------------------------------------------------------------------------------------------
// `silk run`.

/// What happens to a run's requests when one of its agents dies.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnAgentLost {
    /// The run fails.
    Fail,
    /// The requests go to other live agents.
    Reassign,
}

impl OnAgentLost {
    fn as_str(self) -> &'static str {
        match self {
            OnAgentLost::Fail => "fail",
            OnAgentLost::Reassign => "reassign",
        }
    }
}

/// Options of `silk run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The spider file (YAML; see docs/spider.md). It is sent to the hub, which checks it.
    /// With `--program`, optional: its start URLs seed the run's frontier and its settings
    /// apply to what the program asks of Silk.
    #[arg(required_unless_present = "program")]
    pub spider: Option<PathBuf>,
    /// Run a program instead: `PROJECT` or `PROJECT@VERSION` (default the newest ready
    /// version), its command after `--` (`silk run --program shop --workers 2 --
    /// .venv/bin/python -m scrapy crawl products`). Admin tokens only.
    #[arg(long, value_name = "PROJECT[@VERSION]")]
    pub program: Option<String>,
    /// The program's worker processes, spread over the run's agents.
    #[arg(long, value_name = "N", requires = "program", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: Option<u32>,
    /// `process` (the version's directory) or `container` (its image).
    #[arg(long, value_name = "RUNTIME", requires = "program", value_parser = ["process", "container"])]
    pub runtime: Option<String>,
    /// An environment variable of the program's workers, `NAME=VALUE` (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", requires = "program")]
    pub env: Vec<String>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    #[command(flatten)]
    pub conn: Conn,
    /// How requests go to agents: `random` (any live agent), `fixed:N` (N agents picked at
    /// the start), `chained:N` (as fixed, and a request follows the agent of its parent page),
    /// `hash:N` (as fixed, and a host's requests all go to one agent).
    /// Default: the hub's.
    #[arg(long, value_name = "STRATEGY", value_parser = parse_strategy)]
    pub strategy: Option<String>,
    /// What happens when an agent of the run dies. Default: the hub's.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub on_agent_lost: Option<OnAgentLost>,
    /// Run only on agents of this pool (their `pool` label: `silk agent --labels pool=eu`);
    /// give it again for several pools. Default: any agent.
    #[arg(long = "pool", value_name = "POOL")]
    pub pools: Vec<String>,
    /// Most requests sent to agents and not yet answered. Default: the hub's.
    #[arg(long, value_name = "N")]
    pub max_pending: Option<u64>,
    /// Fail the run when nothing progresses for this long (e.g. `60s`, `5m`). Default: the
    /// hub's.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub stall_timeout: Option<Duration>,
    /// Follow the run until it ends, with a progress line on stderr. Exit status: 0 succeeded,
    /// 1 failed, 3 cancelled, 130 stopped waiting (Ctrl-C; the run goes on on the hub).
    #[arg(long)]
    pub wait: bool,
}

/// Accepts what the hub does (`random`, `fixed:N`, `chained:N`, `hash:N`; N ≥ 1): the API's
/// own parser.
pub fn parse_strategy(text: &str) -> Result<String, String> {
    text.parse::<silk_api::runs::Strategy>()
        .map(|s| s.to_string())
        .map_err(|e| e.to_string())
}

/// The body of `POST /api/v1/runs`.
fn run_request(args: &RunArgs, spider: String) -> anyhow::Result<Value> {
    let mut body = serde_json::Map::new();
    body.insert("spider".into(), Value::String(spider));
    if let Some(program) = &args.program {
        let (project, version) = program.split_once('@').unwrap_or((program, "latest"));
        let mut env = serde_json::Map::new();
        for pair in &args.env {
            let Some((name, value)) = pair.split_once('=') else {
                anyhow::bail!("--env `{pair}`: expected NAME=VALUE");
            };
            env.insert(name.to_owned(), value.into());
        }
        let mut p = serde_json::json!({
            "project": project, "version": version, "command": args.command, "env": env});
        if let Some(n) = args.workers {
            p["workers"] = n.into();
        }
        if let Some(r) = &args.runtime {
            p["runtime"] = r.clone().into();
        }
        body.insert("program".into(), p);
    } else if !args.command.is_empty() {
        anyhow::bail!("a command after `--` runs only with --program PROJECT");
    }
    if let Some(strategy) = &args.strategy {
        body.insert("strategy".into(), strategy.clone().into());
    }
    if let Some(policy) = args.on_agent_lost {
        body.insert("on_agent_lost".into(), policy.as_str().into());
    }
    if !args.pools.is_empty() {
        body.insert("pools".into(), args.pools.clone().into());
    }
    if let Some(n) = args.max_pending {
        body.insert("max_pending".into(), n.into());
    }
    if let Some(timeout) = args.stall_timeout {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        body.insert("stall_timeout_ms".into(), ms.into());
    }
    Ok(Value::Object(body))
}

/// Runs `silk run`.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("warn,silk=info");
    let spider = match &args.spider {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read spider file {}", path.display()))?,
        None => String::new(),
    };
    let body = run_request(&args, spider)?;
    let client = Client::connect(&args.conn)?;
    let created = client.post(&["api", "v1", "runs"], &body).await;
    let Some(created) = allocation_failure_is_one_line(created)? else {
        return Ok(ExitCode::FAILURE);
    };
    let view: RunView = parse(&created.value, "a run")?;
    started(&client, view, created, args.wait, args.conn.json).await
}

/// A run that could not be allocated is said as one line (`Ok(None)`: exit 1).
pub fn allocation_failure_is_one_line(
    answer: Result<Answer, ApiError>,
) -> anyhow::Result<Option<Answer>> {
    match answer {
        Ok(answer) => Ok(Some(answer)),
        Err(e) if e.error.code() == Some(ErrorCode::AllocationFailed) => {
            let message = e.error.message().unwrap_or_default();
            eprintln!("error: the run could not be allocated: {message}");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// After a run was started: prints its id (or, with `json`, the answer) and, with `wait`,
/// follows it to the end.
pub async fn started(
    client: &Client,
    view: RunView,
    answer: Answer,
    wait: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if view.id.as_str().is_empty() {
        anyhow::bail!("unexpected answer from the hub: the new run has no id");
    }
    if !wait {
        if json {
            print_json(&answer);
        } else {
            println!("{}", view.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        println!("{}", view.id);
    }
    eprintln!(
        "run {} started on {} ({} agents: {})",
        view.id,
        client.server(),
        view.strategy,
        agent_list(&view.agents),
    );
    wait_for(client, view, answer, json).await
}

/// Follows the run until it ends; the exit status says how (0 succeeded, 1 failed, 3
/// cancelled, 130 stopped waiting).
pub async fn wait_for(
    client: &Client,
    view: RunView,
    answer: Answer,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (view, raw) = if view.is_terminal() {
        (view, answer)
    } else {
        tokio::select! {
            last = follow(client, view) => last?,
            _ = crate::wait_for_stop_signal() => {
                eprintln!("\nstopped waiting; the run goes on on the hub (see `silk runs`)");
                return Ok(ExitCode::from(130));
            }
        }
    };
    if json {
        print_json(&raw);
    }
    Ok(match view.state.as_str() {
        "succeeded" => {
            eprintln!("{}", summary(&view));
            ExitCode::SUCCESS
        }
        "failed" => {
            eprintln!(
                "run {} failed: {}",
                view.id,
                view.reason.as_deref().unwrap_or("no reason given")
            );
            ExitCode::FAILURE
        }
        _ => {
            match &view.reason {
                Some(reason) => eprintln!("run {} cancelled: {reason}", view.id),
                None => eprintln!("run {} cancelled", view.id),
            }
            ExitCode::from(3)
        }
    })
}

/// Polls the run until it is in a terminal state; returns it (parsed and as answered). Shows
/// progress on stderr: a live line on a terminal, a log line every few seconds otherwise. A
/// hub that cannot be reached for a while is waited for.
async fn follow(client: &Client, first: RunView) -> anyhow::Result<(RunView, Answer)> {
    crate::init_logging("warn,silk=info");
    let id = first.id.clone();
    let tty = std::io::stderr().is_terminal();
    let bar = tty.then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let started = std::time::Instant::now();
    let mut last_log = std::time::Instant::now();
    let mut unreachable = false;
    let result = loop {
        match client.get(&["api", "v1", "runs", id.as_str()]).await {
            Ok(raw) => {
                if unreachable {
                    tracing::info!("the hub answers again");
                    unreachable = false;
                }
                let view: RunView = parse(&raw.value, "a run")?;
                let line = progress_line(&view, started.elapsed());
                if view.is_terminal() {
                    break Ok((view, raw));
                }
                match &bar {
                    Some(bar) => bar.set_message(line),
                    None if last_log.elapsed() >= LOG_EVERY => {
                        tracing::info!("run {id}: {line}");
                        last_log = std::time::Instant::now();
                    }
                    None => {}
                }
            }
            Err(e) if e.error.is_transient() => {
                if !unreachable {
                    let text = format!("{e}; still trying");
                    match &bar {
                        Some(bar) => bar.set_message(text),
                        None => tracing::warn!("{text}"),
                    }
                    unreachable = true;
                }
            }
            Err(e) => break Err(anyhow::Error::new(e).context(format!("run {id}"))),
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

fn progress_line(view: &RunView, elapsed: Duration) -> String {
    let s = &view.stats;
    format!(
        "{} | {}/{} ok | left {} | in flight {} | failed {} | {} items | {:.1} pages/s | {}",
        view.state,
        s.success,
        s.total,
        s.left,
        s.in_flight,
        s.failed,
        s.items,
        s.pages_per_s,
        humantime::format_duration(Duration::from_secs(elapsed.as_secs())),
    )
}

/// The one line shown when a run succeeded.
fn summary(view: &RunView) -> String {
    let s = &view.stats;
    let mut line = format!(
        "run {} succeeded: {}/{} ok, {} failed, {} dropped, {} items, {}",
        view.id,
        s.success,
        s.total,
        s.failed,
        s.dropped,
        s.items,
        human_bytes(s.bytes),
    );
    if let (Some(start), Some(end)) = (
        Some(view.started_ms.unwrap_or(view.created_ms)),
        view.finished_ms,
    ) {
        let secs = end.saturating_sub(start) / 1000;
        line.push_str(&format!(
            " in {}",
            humantime::format_duration(Duration::from_secs(secs))
        ));
    }
    if let Some(path) = &view.items_path {
        line.push_str(&format!(" -> {}", path.display()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_views_parse_with_unknown_fields() {
        let runs: Vec<RunView> = parse(
            &json!([{"id": "r1", "state": "running", "reason": null, "extra": {"x": 1},
                     "job_name": "shop", "strategy": "random", "spider_name": "shop",
                     "max_pending": 100, "stall_timeout_ms": 60000, "created_ms": 1,
                     "stats": {"total": 10, "success": 4, "items": 3, "pages_per_s": 2.5, "new": 1}}]),
            "runs",
        )
        .unwrap();
        assert_eq!(runs[0].stats.success, 4);
        assert!(runs[0].agents.is_empty());
        let out = runs_table(&runs, 0).render();
        assert!(out.contains("4/10") && out.contains("shop"), "{out}");
    }

    #[test]
    fn strategies() {
        assert_eq!(parse_strategy("random").unwrap(), "random");
        assert_eq!(parse_strategy("fixed:2").unwrap(), "fixed:2");
        assert!(parse_strategy("fixed:0").is_err());
        assert!(parse_strategy("fixed").is_err());
        assert!(parse_strategy("other:1").is_err());
    }
}
