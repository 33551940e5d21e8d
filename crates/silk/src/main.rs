//! `silk`: the one binary. Parses the command line, sets up logging and signals, and calls
//! the library crates; no crawl logic lives here (it would be out of reach of the hub).

mod agent;
mod client;
mod config;
mod crawl;
mod demo;
mod manual;
mod router;
mod serve;
mod settings;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use settings::Process;

/// The crawl loop allocates many small short-lived buffers (URLs, headers, parser state);
/// glibc's allocator cost ~13% of the crawler's CPU in profiles, mimalloc a fraction of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;

/// Silk: a distributed web-crawling platform.
#[derive(Debug, Parser)]
#[command(name = "silk", version, about, propagate_version = true)]
struct Cli {
    /// How log lines are written on stderr: `text` (for people: one line per event,
    /// key=value fields) or `json` (one JSON object per line, for log shippers).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "SILK_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of log lines (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The crates whose events are Silk's own: at the default level only theirs are logged
/// (dependencies at `warn`), unless `RUST_LOG` says otherwise.
const OWN_CRATES: &[&str] = &[
    "silk",
    "silk_agent",
    "silk_api",
    "silk_bus",
    "silk_core",
    "silk_crawl",
    "silk_fetch",
    "silk_frontier",
    "silk_hub",
    "silk_items",
    "silk_projects",
    "silk_router",
    "silk_schedule",
    "silk_selector",
    "silk_store",
];

/// The default log filter: Silk's own events at `level`, dependencies at `warn`.
pub(crate) fn own_events(level: &str) -> String {
    let own: Vec<String> = OWN_CRATES.iter().map(|c| format!("{c}={level}")).collect();
    format!("warn,{}", own.join(","))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a declarative spider to completion on this machine (no server needed).
    Crawl(crawl::CrawlArgs),
    /// Serve the synthetic demo site on 127.0.0.x (for demos, tests and benchmarks).
    DemoSite(demo::DemoSiteArgs),
    /// Run the task router, or check a router config, or explain a routing decision.
    Router(router::RouterArgs),
    /// Run the whole platform on this machine: the hub and N local agents in one process.
    ///
    /// The HTTP API listens on --listen (printed at start); submit runs with `silk run`.
    Up(serve::UpArgs),
    /// Run the hub alone on a NATS bus; agents run elsewhere (`silk agent --bus …`).
    Hub(serve::HubArgs),
    /// Run an agent of the download center on a NATS bus (fetches for the hub's runs).
    ///
    /// The agent registers, heartbeats and fetches until Ctrl-C, SIGTERM or a shutdown command
    /// from the hub. A bus that is down at the start is waited for (reconnects forever).
    Agent(agent::AgentArgs),
    /// Start an ad-hoc run of a spider on the hub (prints the run id; --wait follows it to
    /// the end).
    Run(client::RunArgs),
    /// The hub's runs: list (the default), show, pause, resume, cancel, restart, wait.
    Runs(client::RunsArgs),
    /// The hub's jobs: list, show, create -f JOB.yaml, update, delete, trigger, runs.
    Jobs(client::JobsArgs),
    /// A run's log lines (filtered by level, text, time); -f follows them until the run ends.
    Logs(client::LogsArgs),
    /// A run's items, as JSON Lines.
    Items(client::ItemsArgs),
    /// The agents known to the hub: list (state, load, last heartbeat), shutdown ID.
    Agents(client::AgentsArgs),
    /// The tenant's API tokens: list, create NAME [--role ROLE] (printed once), delete ID.
    Tokens(client::TokensArgs),
    /// Tenants (admin): list, create NAME, delete NAME. Every job, run, project and token
    /// belongs to one; `--tenant NAME` makes an admin act in one.
    Tenants(client::TenantsArgs),
    /// Alert rules (webhook, Slack, email on run failures, stalls, empty runs, dead agents,
    /// failed builds) and their deliveries.
    Alerts(client::AlertsArgs),
    /// Projects from git: create, list, show, delete, build a ref by hand.
    Projects(client::ProjectsArgs),
    /// A project's versions, one version, its build log (`--log [-f]`).
    Versions(client::VersionsArgs),
    /// Check a settings file (`silk config check FILE`), or show the settings a process would
    /// run with and where each comes from (`silk config show --for hub`).
    Config(config::ConfigArgs),
    /// Print the shell completion script of SHELL (e.g. `silk completions bash >
    /// /etc/bash_completion.d/silk`).
    Completions(manual::CompletionsArgs),
    /// Write the man pages (`silk.1` and one per subcommand) into a directory.
    Man(manual::ManArgs),
}

/// The command line: the derived one, with the settings' flags added to `silk hub`, `silk
/// agent` and `silk up` from the knob table.
pub(crate) fn cli_command() -> clap::Command {
    Cli::command()
        .mut_subcommand("hub", |c| settings::add_flags(c, Process::Hub))
        .mut_subcommand("agent", |c| settings::add_flags(c, Process::Agent))
        .mut_subcommand("up", |c| settings::add_flags(c, Process::Up))
}

/// The settings of a long-running command; the log format is theirs too.
fn load_settings(
    process: Process,
    top: &clap::ArgMatches,
    args: &settings::SettingsArgs,
) -> Result<settings::Settings, ExitCode> {
    let sub = top.subcommand().map(|(_, m)| m).unwrap_or(top);
    let s = settings::load(process, top, sub, args)?;
    let format = match s.text("log_format").as_deref() {
        Some("json") => LogFormat::Json,
        _ => LogFormat::Text,
    };
    let _ = LOG_FORMAT.set(format);
    Ok(s)
}

fn main() -> ExitCode {
    let matches = cli_command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if !matches!(
        cli.command,
        Command::Up(_) | Command::Hub(_) | Command::Agent(_)
    ) {
        let _ = LOG_FORMAT.set(cli.log_format);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if matches!(
        cli.command,
        Command::Crawl(_)
            | Command::DemoSite(_)
            | Command::Router(_)
            | Command::Up(_)
            | Command::Hub(_)
            | Command::Agent(_)
    ) {
        watch_stop_signals();
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Crawl(args) => crawl::run(args).await,
            Command::DemoSite(args) => demo::run(args).await,
            Command::Router(args) => router::run(args).await,
            Command::Up(args) => match load_settings(Process::Up, &matches, &args.settings) {
                Ok(s) => serve::up(s).await,
                Err(code) => Ok(code),
            },
            Command::Hub(args) => match load_settings(Process::Hub, &matches, &args.settings) {
                Ok(s) => serve::hub(s).await,
                Err(code) => Ok(code),
            },
            Command::Agent(args) => match load_settings(Process::Agent, &matches, &args.settings) {
                Ok(s) => agent::run(s).await,
                Err(code) => Ok(code),
            },
            Command::Run(args) => client::run(args).await,
            Command::Runs(args) => client::runs(args).await,
            Command::Jobs(args) => client::jobs(args).await,
            Command::Logs(args) => client::logs(args).await,
            Command::Items(args) => client::items(args).await,
            Command::Agents(args) => client::agents(args).await,
            Command::Tokens(args) => client::tokens(args).await,
            Command::Tenants(args) => client::tenants(args).await,
            Command::Alerts(args) => client::alerts(args).await,
            Command::Projects(args) => client::projects(args).await,
            Command::Versions(args) => client::versions(args).await,
            Command::Config(args) => config::run(args),
            Command::Completions(args) => manual::completions(args),
            Command::Man(args) => manual::man(args),
        }
    });
    // Threads still parsing a page past its `parse_timeout_ms` were abandoned: the process
    // does not wait for them.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr in the `--log-format`; `RUST_LOG` overrides the default filter.
pub(crate) fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text) {
        // Colour codes only on a terminal: redirected logs stay plain text.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_target(false)
            .try_init(),
        // `timestamp`, `level`, `target`, the event's fields and `message` at the top level.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// How long the process may take to stop after the first Ctrl-C or SIGTERM
/// (`SILK_STOP_GRACE`, a duration such as `10s`; default 10 s).
fn stop_grace() -> std::time::Duration {
    const DEFAULT: std::time::Duration = std::time::Duration::from_secs(10);
    match std::env::var("SILK_STOP_GRACE") {
        Ok(text) => humantime::parse_duration(text.trim()).unwrap_or_else(|e| {
            eprintln!("warning: SILK_STOP_GRACE `{text}` is not a duration ({e}); using 10s");
            DEFAULT
        }),
        Err(_) => DEFAULT,
    }
}

/// Gives the process a deadline once it is asked to stop: a thread with a runtime of its own
/// waits for the first Ctrl-C or SIGTERM, then, [`stop_grace`] later, exits (130) whatever
/// the process is doing — a page being parsed, a task that does not yield — and the work it
/// had in flight is left to its leases (the frontier hands it out again). Its own thread
/// and runtime, so that a main runtime whose workers are all busy cannot delay it. The
/// commands' own handlers get the signal too and start their graceful stop, which usually
/// ends well before.
fn watch_stop_signals() {
    let spawned = std::thread::Builder::new()
        .name("stop-deadline".into())
        .spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let rt = match runtime {
                Ok(rt) => rt,
                Err(e) => return eprintln!("warning: no stop deadline ({e})"),
            };
            rt.block_on(wait_for_stop_signal());
            let grace = stop_grace();
            std::thread::sleep(grace);
            eprintln!(
                "did not stop within {} of the stop signal: exiting now (work in flight is left to its leases)",
                humantime::format_duration(grace)
            );
            std::process::exit(130);
        });
    if let Err(e) = spawned {
        eprintln!("warning: no stop deadline ({e})");
    }
}

/// Waits for Ctrl-C or SIGTERM.
pub(crate) async fn wait_for_stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
