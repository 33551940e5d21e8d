//! `silk`: the one binary. Parses the command line, sets up logging and signals, and calls
//! the library crates; no crawl logic lives here (it would be out of reach of the hub).

mod agent;
mod client;
mod crawl;
mod demo;
mod router;
mod serve;

use clap::{Parser, Subcommand};

/// The crawl loop allocates many small short-lived buffers (URLs, headers, parser state);
/// glibc's allocator cost ~13% of the crawler's CPU in profiles, mimalloc a fraction of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;

/// Silk: a distributed web-crawling platform.
#[derive(Debug, Parser)]
#[command(name = "silk", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// List the agents known to the hub: state, load, last heartbeat.
    Agents(client::AgentsArgs),
    /// The hub's API tokens: list, create NAME (printed once), delete ID.
    Tokens(client::TokensArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Crawl(args) => crawl::run(args).await,
            Command::DemoSite(args) => demo::run(args).await,
            Command::Router(args) => router::run(args).await,
            Command::Up(args) => serve::up(args).await,
            Command::Hub(args) => serve::hub(args).await,
            Command::Agent(args) => agent::run(args).await,
            Command::Run(args) => client::run(args).await,
            Command::Runs(args) => client::runs(args).await,
            Command::Jobs(args) => client::jobs(args).await,
            Command::Logs(args) => client::logs(args).await,
            Command::Items(args) => client::items(args).await,
            Command::Agents(args) => client::agents(args).await,
            Command::Tokens(args) => client::tokens(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr; `RUST_LOG` overrides the default level.
pub(crate) fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    // Colour codes only on a terminal: redirected logs stay plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
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
