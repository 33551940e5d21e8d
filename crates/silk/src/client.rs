//! The commands that talk to a running hub over its REST API (`/api/v1`): `silk run` (start a
//! run, optionally follow it to the end), `silk runs` and `silk agents` (list). [`Client`] is
//! the shared HTTP client; [`Table`] prints the listings.
//!
//! The hub answers errors as JSON `{"code": "...", "message": "..."}` with an HTTP error
//! status; they are shown as one line, `error: MESSAGE (CODE, HTTP STATUS)`. Answers are read
//! leniently: fields this build does not know are ignored, missing ones take defaults.

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use url::Url;

/// Where the hub is when neither `--server` nor `SILK_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7700";

/// How long a request may wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take (starting a run waits for the agents' allocations).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Time between two looks at a run followed with `--wait`.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// Time between two progress log lines when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The hub to talk to.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The hub's HTTP address (`http://HOST:PORT`; a bare `HOST:PORT` means http).
    #[arg(long, value_name = "URL", env = "SILK_SERVER", default_value = DEFAULT_SERVER, value_parser = parse_server_url)]
    pub server: Url,
}

/// Accepts `http(s)://HOST[:PORT][/PREFIX]`, or `HOST:PORT` as http.
fn parse_server_url(text: &str) -> Result<Url, String> {
    let with_scheme = if text.contains("://") {
        text.to_owned()
    } else {
        format!("http://{text}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the `{}` scheme is not supported, only http:// and https://",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("a query or fragment has no place in the hub's address".into());
    }
    Ok(url)
}

// ------------------------------------------------------------------------------------------
// The client.

/// What can go wrong talking to the hub.
#[derive(Debug)]
pub enum ApiError {
    /// No connection (refused, unknown host, reset, …).
    Unreachable {
        /// The hub's address.
        server: String,
        /// The innermost cause.
        reason: String,
    },
    /// No answer in time.
    Timeout {
        /// The hub's address.
        server: String,
        /// The time waited.
        after: Duration,
    },
    /// The hub's own error answer.
    Api {
        /// The HTTP status.
        status: u16,
        /// The machine-readable code (`allocation_failed`, `not_found`, …).
        code: String,
        /// What went wrong, for people.
        message: String,
    },
    /// An answer that is not what the API answers (wrong server, a proxy's error page, …).
    Unexpected {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What was wrong, with the beginning of the body.
        reason: String,
    },
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Unreachable { server, reason } => write!(
                f,
                "cannot reach the hub at {server}: {reason} (is the hub running there? set --server or SILK_SERVER)"
            ),
            ApiError::Timeout { server, after } => write!(
                f,
                "the hub at {server} did not answer within {}",
                humantime::format_duration(*after)
            ),
            ApiError::Api {
                status,
                code,
                message,
            } => write!(f, "{message} ({code}, HTTP {status})"),
            ApiError::Unexpected {
                url,
                status,
                reason,
            } => write!(f, "unexpected answer from {url} (HTTP {status}): {reason}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// Whether the hub could not be reached at all (worth trying again later).
    fn is_transient(&self) -> bool {
        matches!(
            self,
            ApiError::Unreachable { .. } | ApiError::Timeout { .. }
        )
    }
}

/// A JSON answer of the hub: parsed, and as sent (to print it with its key order).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The parsed JSON (`Null` for an empty body).
    pub value: Value,
    /// The body as sent.
    pub text: String,
}

/// An HTTP client of the hub's API.
#[derive(Debug, Clone)]
pub struct Client {
    base: Url,
    http: reqwest::Client,
}

impl Client {
    /// A client of the hub at `base` (`http://HOST:PORT`, possibly with a path prefix).
    pub fn new(base: Url) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("silk/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot create the HTTP client")?;
        Ok(Self { base, http })
    }

    /// The hub's address as the user gave it (without a trailing slash).
    pub fn server(&self) -> String {
        self.base.as_str().trim_end_matches('/').to_owned()
    }

    /// The URL of `segments` under the base (each segment percent-encoded).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// `GET` → the JSON answer.
    pub async fn get(&self, segments: &[&str]) -> Result<Answer, ApiError> {
        let url = self.url(segments);
        self.send(self.http.get(url.clone()), &url).await
    }

    /// `POST` a JSON body → the JSON answer.
    pub async fn post(&self, segments: &[&str], body: &Value) -> Result<Answer, ApiError> {
        let url = self.url(segments);
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let request = self
            .http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes);
        self.send(request, &url).await
    }

    async fn send(&self, request: reqwest::RequestBuilder, url: &Url) -> Result<Answer, ApiError> {
        let request = request.header(reqwest::header::ACCEPT, "application/json");
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.transport(&e))?;
        let unexpected = |reason: String| ApiError::Unexpected {
            url: url.to_string(),
            status: status.as_u16(),
            reason,
        };
        if status.is_success() {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(Answer {
                    value: Value::Null,
                    text: "null".into(),
                });
            }
            let value = serde_json::from_slice(&body)
                .map_err(|e| unexpected(format!("not JSON ({e}): {}", excerpt(&body))))?;
            // Valid JSON is UTF-8.
            let text = String::from_utf8_lossy(&body).into_owned();
            return Ok(Answer { value, text });
        }
        let error: Option<Value> = serde_json::from_slice(&body).ok();
        let field = |name: &str| {
            error
                .as_ref()
                .and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match (field("code"), field("message")) {
            (Some(code), message) => Err(ApiError::Api {
                status: status.as_u16(),
                message: message.unwrap_or_else(|| code.clone()),
                code,
            }),
            (None, Some(message)) => Err(ApiError::Api {
                status: status.as_u16(),
                code: status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_lowercase()
                    .replace(' ', "_"),
                message,
            }),
            (None, None) => Err(unexpected(if body.is_empty() {
                "empty body".into()
            } else {
                excerpt(&body)
            })),
        }
    }

    fn transport(&self, e: &reqwest::Error) -> ApiError {
        if e.is_timeout() {
            return ApiError::Timeout {
                server: self.server(),
                after: REQUEST_TIMEOUT,
            };
        }
        // The innermost cause says it best ("Connection refused (os error 111)").
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        ApiError::Unreachable {
            server: self.server(),
            reason,
        }
    }
}

/// The beginning of a body, on one line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 200 {
        one_line = one_line.chars().take(200).collect::<String>() + "…";
    }
    one_line
}

// ------------------------------------------------------------------------------------------
// What the API answers (lenient: unknown fields ignored, missing ones default). The counters
// are the hub's own type (`silk_hub::RunStats`, every field defaulted).

pub use silk_hub::RunStats;

/// One run (`GET /api/v1/runs/{id}`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RunView {
    /// The run id.
    pub id: String,
    /// `pending`, `allocating`, `running`, `paused`, `stopping`, `succeeded`, `failed`,
    /// `cancelled`.
    pub state: String,
    /// Why it failed (or was cancelled).
    pub reason: Option<String>,
    /// `random`, `fixed:N`, `chained:N`.
    pub strategy: String,
    /// `fail` or `reassign`.
    pub on_agent_lost: String,
    /// The allocated agents (empty for `random`).
    pub agents: Vec<String>,
    /// The spider's name.
    pub spider_name: String,
    /// When it was created, ms since the epoch.
    pub created_ms: Option<u64>,
    /// When it started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// When it finished, ms since the epoch.
    pub finished_ms: Option<u64>,
    /// Where the hub writes the items.
    pub items_path: Option<String>,
    /// The counters.
    pub stats: RunStats,
}

impl RunView {
    fn is_terminal(&self) -> bool {
        matches!(self.state.as_str(), "succeeded" | "failed" | "cancelled")
    }
}

/// One agent (`GET /api/v1/agents`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AgentView {
    pub id: String,
    /// `alive`, `suspect`, `dead`.
    pub state: String,
    pub cpu_pct: f64,
    pub memory_bytes: u64,
    pub active_downloaders: u64,
    pub in_flight: u64,
    pub qps: f64,
    /// ms since the epoch (hub clock); `None` before the first heartbeat.
    pub last_heartbeat_ms: Option<u64>,
    /// `None` when infinite (JSON has no infinity).
    pub phi: Option<f64>,
}

/// Parses an answer into `T`, saying what was expected when it does not fit.
fn parse<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> anyhow::Result<T> {
    T::deserialize(value).with_context(|| format!("unexpected answer from the hub: not {what}"))
}

// ------------------------------------------------------------------------------------------
// Tables.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A plain-text table: a header row and cells padded to the widest of each column, two
/// spaces apart. The last column is not padded (no trailing spaces).
#[derive(Debug)]
pub struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones ignored).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        fn cell(row: &[String], i: usize) -> &str {
            row.get(i).map(String::as_str).unwrap_or("")
        }
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .map(|(h, _)| h.chars().count())
            .collect();
        for row in &self.rows {
            for (i, w) in widths.iter_mut().enumerate() {
                *w = (*w).max(cell(row, i).chars().count());
            }
        }
        let headers: Vec<String> = self.columns.iter().map(|(h, _)| (*h).to_owned()).collect();
        let mut out = String::new();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (_, align)) in self.columns.iter().enumerate() {
                let text = cell(row, i);
                let pad = widths[i].saturating_sub(text.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                match align {
                    Align::Left => {
                        line.push_str(text);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(text);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1.2 KiB`, `3.4 GiB`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `0.8s ago`, `3m 12s ago`, `2h 5m ago`.
fn ago(then_ms: u64, now_ms: u64) -> String {
    let ms = now_ms.saturating_sub(then_ms);
    let s = ms / 1000;
    if s < 60 {
        format!("{:.1}s ago", ms as f64 / 1000.0)
    } else if s < 3600 {
        format!("{}m {}s ago", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {}m ago", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d {}h ago", s / 86_400, (s % 86_400) / 3600)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Prints an answer pretty, in the hub's key order.
fn print_json(answer: &Answer) {
    println!("{}", reindent(&answer.text));
}

/// Pretty-prints valid JSON text as `serde_json::to_string_pretty` would, but keeping the key
/// order of the text (a `Value` sorts keys).
fn reindent(text: &str) -> String {
    fn newline(out: &mut String, depth: usize) {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    }
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
                match chars.next_if(|c| matches!(c, '}' | ']')) {
                    Some(close) => out.push(close),
                    None => {
                        depth += 1;
                        newline(&mut out, depth);
                    }
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// `silk agents`.

/// Options of `silk agents`.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Print the hub's JSON answer instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `silk agents`.
pub async fn agents(args: AgentsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(args.server.server)?;
    let answer = client.get(&["api", "v1", "agents"]).await?;
    if args.json {
        print_json(&answer);
        return Ok(ExitCode::SUCCESS);
    }
    let agents: Vec<AgentView> = parse(&answer.value, "a list of agents")?;
    print!("{}", agents_table(&agents, now_ms()).render());
    if agents.is_empty() {
        eprintln!("no agents registered with the hub at {}", client.server());
    }
    Ok(ExitCode::SUCCESS)
}

fn agents_table(agents: &[AgentView], now_ms: u64) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("ID", Left),
        ("STATE", Left),
        ("CPU%", Right),
        ("MEM", Right),
        ("ACTIVE", Right),
        ("INFLIGHT", Right),
        ("QPS", Right),
        ("LAST-HEARTBEAT", Right),
        ("PHI", Right),
    ]);
    for a in agents {
        table.row(vec![
            a.id.clone(),
            a.state.clone(),
            format!("{:.1}", a.cpu_pct),
            human_bytes(a.memory_bytes),
            a.active_downloaders.to_string(),
            a.in_flight.to_string(),
            format!("{:.1}", a.qps),
            a.last_heartbeat_ms
                .map_or_else(|| "never".to_owned(), |t| ago(t, now_ms)),
            match a.phi {
                Some(phi) if phi.is_finite() => format!("{phi:.2}"),
                _ => "inf".to_owned(),
            },
        ]);
    }
    table
}

// ------------------------------------------------------------------------------------------
// `silk runs`.

/// Options of `silk runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Print the hub's JSON answer instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `silk runs`.
pub async fn runs(args: RunsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(args.server.server)?;
    let answer = client.get(&["api", "v1", "runs"]).await?;
    if args.json {
        print_json(&answer);
        return Ok(ExitCode::SUCCESS);
    }
    let runs: Vec<RunView> = parse(&answer.value, "a list of runs")?;
    print!("{}", runs_table(&runs).render());
    if runs.is_empty() {
        eprintln!("no runs on the hub at {}", client.server());
    }
    Ok(ExitCode::SUCCESS)
}

fn runs_table(runs: &[RunView]) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("ID", Left),
        ("STATE", Left),
        ("STRATEGY", Left),
        ("AGENTS", Left),
        ("SUCCESS/TOTAL", Right),
        ("LEFT", Right),
        ("FAILED", Right),
        ("PAGES/S", Right),
        ("REASON", Left),
    ]);
    for r in runs {
        table.row(vec![
            r.id.clone(),
            r.state.clone(),
            r.strategy.clone(),
            agent_list(&r.agents),
            format!("{}/{}", r.stats.success, r.stats.total),
            r.stats.left.to_string(),
            r.stats.failed.to_string(),
            format!("{:.1}", r.stats.pages_per_s),
            r.reason.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table
}

/// `a,b,c`, or `a,b,c +2` for more than three, `-` for none.
fn agent_list(agents: &[String]) -> String {
    match agents.len() {
        0 => "-".into(),
        n if n <= 3 => agents.join(","),
        n => format!("{} +{}", agents[..3].join(","), n - 3),
    }
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
    pub spider: PathBuf,
    #[command(flatten)]
    pub server: ServerArgs,
    /// How requests go to agents: `random` (any live agent), `fixed:N` (N agents picked at
    /// the start), `chained:N` (as fixed, and a request follows the agent of its parent page).
    /// Default: the hub's.
    #[arg(long, value_name = "STRATEGY", value_parser = parse_strategy)]
    pub strategy: Option<String>,
    /// What happens when an agent of the run dies. Default: the hub's.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub on_agent_lost: Option<OnAgentLost>,
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
    /// Print the run as JSON (with --wait: as it ended) instead of its id alone.
    #[arg(long)]
    pub json: bool,
}

/// Accepts `random`, `fixed:N`, `chained:N` (N ≥ 1), as the hub does.
fn parse_strategy(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text == "random" {
        return Ok(text.to_owned());
    }
    let (name, n) = text
        .split_once(':')
        .ok_or("expected random, fixed:N or chained:N")?;
    if !matches!(name, "fixed" | "chained") {
        return Err(format!(
            "unknown strategy `{name}`: expected random, fixed:N or chained:N"
        ));
    }
    match n.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(format!("{name}:{n}")),
        _ => Err(format!(
            "the agent count of `{name}` must be a whole number of at least 1"
        )),
    }
}

/// The body of `POST /api/v1/runs`.
fn run_request(args: &RunArgs, spider: String) -> Value {
    let mut body = serde_json::Map::new();
    body.insert("spider".into(), Value::String(spider));
    if let Some(strategy) = &args.strategy {
        body.insert("strategy".into(), strategy.clone().into());
    }
    if let Some(policy) = args.on_agent_lost {
        body.insert("on_agent_lost".into(), policy.as_str().into());
    }
    if let Some(n) = args.max_pending {
        body.insert("max_pending".into(), n.into());
    }
    if let Some(timeout) = args.stall_timeout {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        body.insert("stall_timeout_ms".into(), ms.into());
    }
    Value::Object(body)
}

/// Runs `silk run`.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("warn,silk=info");
    let spider = std::fs::read_to_string(&args.spider)
        .with_context(|| format!("cannot read spider file {}", args.spider.display()))?;
    let client = Client::new(args.server.server.clone())?;
    let created = match client
        .post(&["api", "v1", "runs"], &run_request(&args, spider))
        .await
    {
        Ok(created) => created,
        Err(ApiError::Api { code, message, .. }) if code == "allocation_failed" => {
            eprintln!("error: the run could not be allocated: {message}");
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.into()),
    };
    let view: RunView = parse(&created.value, "a run")?;
    if view.id.is_empty() {
        anyhow::bail!("unexpected answer from the hub: the new run has no id");
    }
    if !args.wait {
        if args.json {
            print_json(&created);
        } else {
            println!("{}", view.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        println!("{}", view.id);
    }
    eprintln!(
        "run {} started on {} ({} agents: {})",
        view.id,
        client.server(),
        if view.strategy.is_empty() {
            "default"
        } else {
            &view.strategy
        },
        agent_list(&view.agents),
    );
    let last = tokio::select! {
        last = follow(&client, view) => last?,
        _ = crate::wait_for_stop_signal() => {
            eprintln!("\nstopped waiting; the run goes on on the hub (see `silk runs`)");
            return Ok(ExitCode::from(130));
        }
    };
    let (view, raw) = last;
    if args.json {
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
        match client.get(&["api", "v1", "runs", &id]).await {
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
            Err(e) if e.is_transient() => {
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
        "{} | {}/{} ok | left {} | in flight {} | failed {} | {:.1} pages/s | {}",
        view.state,
        s.success,
        s.total,
        s.left,
        s.in_flight,
        s.failed,
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
    if let (Some(start), Some(end)) = (view.started_ms.or(view.created_ms), view.finished_ms) {
        let secs = end.saturating_sub(start) / 1000;
        line.push_str(&format!(
            " in {}",
            humantime::format_duration(Duration::from_secs(secs))
        ));
    }
    if let Some(path) = &view.items_path {
        line.push_str(&format!(" -> {path}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&[
            ("ID", Align::Left),
            ("N", Align::Right),
            ("NOTE", Align::Left),
        ]);
        t.row(vec!["a".into(), "100".into(), "x".into()]);
        t.row(vec!["long-id".into(), "2".into(), String::new()]);
        assert_eq!(
            t.render(),
            "ID         N  NOTE\na        100  x\nlong-id    2\n"
        );
    }

    #[test]
    fn views_parse_leniently() {
        let runs: Vec<RunView> = parse(
            &json!([{"id": "r1", "state": "running", "reason": null, "extra": {"x": 1},
                     "stats": {"total": 10, "success": 4, "pages_per_s": 2.5, "new": 1}}]),
            "runs",
        )
        .unwrap();
        assert_eq!(runs[0].stats.success, 4);
        assert!(runs[0].agents.is_empty());
        let out = runs_table(&runs).render();
        assert!(out.contains("4/10"), "{out}");

        let agents: Vec<AgentView> = parse(
            &json!([{"id": "a1", "state": "alive", "phi": null, "last_heartbeat_ms": 1_000,
                     "memory_bytes": 3_221_225_472u64, "labels": {"pool": "cn"}}]),
            "agents",
        )
        .unwrap();
        let out = agents_table(&agents, 2_200).render();
        assert!(
            out.contains("1.2s ago") && out.contains("3.0 GiB") && out.contains("inf"),
            "{out}"
        );
    }

    #[test]
    fn strategies_and_server_urls() {
        assert_eq!(parse_strategy("random").unwrap(), "random");
        assert_eq!(parse_strategy("fixed:2").unwrap(), "fixed:2");
        assert!(parse_strategy("fixed:0").is_err());
        assert!(parse_strategy("fixed").is_err());
        assert!(parse_strategy("other:1").is_err());
        assert_eq!(
            parse_server_url("127.0.0.1:7700").unwrap().as_str(),
            "http://127.0.0.1:7700/"
        );
        assert!(parse_server_url("nats://x:4222").is_err());
    }

    #[test]
    fn urls_keep_a_path_prefix_and_encode_ids() {
        let c = Client::new(Url::parse("http://h:1/silk/").unwrap()).unwrap();
        assert_eq!(
            c.url(&["api", "v1", "runs", "a/b"]).as_str(),
            "http://h:1/silk/api/v1/runs/a%2Fb"
        );
        assert_eq!(c.server(), "http://h:1/silk");
    }

    #[test]
    fn json_is_reindented_in_its_own_order() {
        let value = json!({"b": [1, {"x": "a,b:{[\\\"]}"}], "a": {}, "c": [], "d": null});
        let compact = serde_json::to_string(&value).unwrap();
        assert_eq!(
            reindent(&compact),
            serde_json::to_string_pretty(&value).unwrap()
        );
        assert_eq!(
            reindent("{\"z\": 1, \"a\": [ ]}"),
            "{\n  \"z\": 1,\n  \"a\": []\n}"
        );
    }

    #[test]
    fn api_errors_read_as_one_line() {
        let e = ApiError::Api {
            status: 409,
            code: "allocation_failed".into(),
            message: "no live agent".into(),
        };
        assert_eq!(e.to_string(), "no live agent (allocation_failed, HTTP 409)");
        assert_eq!(ago(0, 200_000), "3m 20s ago");
        assert_eq!(human_bytes(512), "512 B");
    }
}
