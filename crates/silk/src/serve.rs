//! `silk up` (hub + N local agents in one process, in-process bus) and `silk hub --bus
//! nats://…` (the hub alone, agents elsewhere): both serve the hub's HTTP API on `--listen`
//! until Ctrl-C or SIGTERM, then stop the hub (running runs stay running on disk and resume
//! at the next start).

use crate::agent::{connect, parse_bus_url, redact};
use anyhow::Context;
use clap::Args;
use silk_agent::{Agent, AgentConfig, AgentHandle};
use silk_bus::{Bus, BusConfig, InProcessBus};
use silk_core::{AgentId, SystemClock};
use silk_hub::{Hub, HubConfig, HubHandle};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Options of `silk up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Local agents to run in the process.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub agents: u32,
    /// Requests each local agent fetches at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub capacity: Option<u32>,
    /// Where runs, frontiers, items and the agents' state are kept.
    #[arg(long, default_value = ".silk")]
    pub data_dir: PathBuf,
    /// Address of the HTTP API (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: SocketAddr,
}

/// Options of `silk hub`.
#[derive(Debug, Args)]
pub struct HubArgs {
    /// The NATS server of the bus, `nats://HOST:PORT`.
    #[arg(long, value_name = "URL", value_parser = parse_bus_url)]
    pub bus: String,
    /// The bus namespace (the agents must use the same).
    #[arg(long, default_value = "silk")]
    pub namespace: String,
    /// Where runs, frontiers, items and known agents are kept.
    #[arg(long, default_value = ".silk/hub")]
    pub data_dir: PathBuf,
    /// Address of the HTTP API.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: SocketAddr,
    /// An agent silent for this long is dead, whatever the failure detector says.
    #[arg(long, default_value = "11s", value_parser = humantime::parse_duration)]
    pub dead_after: std::time::Duration,
    /// Phi threshold of the failure detector (suspect at half of it).
    #[arg(long, default_value_t = 8.0)]
    pub phi_threshold: f64,
}

/// Runs `silk up`.
pub async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("info");
    let bus = InProcessBus::new(BusConfig::default()).context("in-process bus")?;
    let bus: Arc<dyn Bus> = Arc::new(bus);
    let listener = bind(args.listen).await?;
    let hub = Hub::start(
        HubConfig::new(args.data_dir.join("hub")),
        bus.clone(),
        Arc::new(SystemClock),
    )
    .await
    .context("starting the hub")?;
    let mut agents = Vec::new();
    for k in 1..=args.agents {
        let mut config = AgentConfig::new(args.data_dir.join("agents").join(format!("local-{k}")));
        config.id = Some(AgentId::new(format!("local-{k}")));
        if let Some(c) = args.capacity {
            config.capacity = c;
        }
        let agent = Agent::start(config, bus.clone(), Arc::new(SystemClock))
            .await
            .context("starting a local agent")?;
        agents.push(agent);
    }
    println!(
        "silk is up: hub API on http://{} with {} local agents (data in {})",
        args.listen,
        args.agents,
        args.data_dir.display()
    );
    println!(
        "submit a run:  silk run SPIDER.yaml --server http://{}",
        args.listen
    );
    serve(hub, listener, agents).await
}

/// Runs `silk hub`.
pub async fn hub(args: HubArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("info");
    if let Err(e) = silk_bus::subject::check_namespace(&args.namespace) {
        eprintln!("error: --namespace: {e}");
        return Ok(ExitCode::from(2));
    }
    let listener = bind(args.listen).await?;
    let bus = match connect(&args.bus, &args.namespace).await {
        Ok(bus) => bus,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut config = HubConfig::new(&args.data_dir);
    config.phi.dead_after_ms = args.dead_after.as_millis() as u64;
    config.phi.threshold = args.phi_threshold;
    let hub = match Hub::start(config, Arc::new(bus), Arc::new(SystemClock)).await {
        Ok(hub) => hub,
        Err(e) => {
            eprintln!("error: cannot start the hub: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    println!(
        "silk hub: API on http://{}, bus {} (namespace {})",
        args.listen,
        redact(&args.bus),
        args.namespace
    );
    serve(hub, listener, Vec::new()).await
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Serves the API until a stop signal, then stops the agents and the hub.
async fn serve(
    hub: HubHandle,
    listener: tokio::net::TcpListener,
    agents: Vec<AgentHandle>,
) -> anyhow::Result<ExitCode> {
    let router = hub.router();
    let server =
        axum::serve(listener, router).with_graceful_shutdown(crate::wait_for_stop_signal());
    server.await.context("the HTTP API failed")?;
    eprintln!("stopping: runs stay on disk and resume at the next start");
    for agent in &agents {
        agent.shutdown().await;
    }
    hub.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
