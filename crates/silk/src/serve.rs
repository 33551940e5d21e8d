//! `silk up` (hub + N local agents in one process, in-process bus) and `silk hub --bus
//! nats://…` (the hub alone, agents elsewhere): both serve the hub's HTTP API and web UI on
//! `--listen` until Ctrl-C or SIGTERM, then stop the hub (running runs stay running on disk
//! and resume at the next start).
//!
//! The API needs a bearer token: at first start the hub makes the admin token, writes it to
//! `DATA_DIR/admin.token` (mode 0600) and it is printed once, inside the web UI's URL
//! fragment (`#token=…`, which browsers never send to the server). `--no-auth` is refused
//! unless `--listen` is a loopback address. `silk up --demo` also serves the demo site and
//! creates and triggers a `demo` job that crawls it.
//!
//! `--router CONFIG` also runs the task router in the process (its own HTTP server on the
//! config's `server.bind`:`server.port`), with the hub's classes `silk.JobOutbound` and
//! `silk.RunResultsInbound`; it stops before the hub.

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

/// Options of the HTTP API and the store, shared by `silk up` and `silk hub`.
#[derive(Debug, Args)]
pub struct ControlArgs {
    /// Serve the API without tokens (only allowed when --listen is a loopback address).
    #[arg(long)]
    pub no_auth: bool,
    /// The metadata store: `sqlite://PATH` or `postgres://USER@HOST/DB`; default the
    /// SQLite file DATA_DIR/silk.db.
    #[arg(long, value_name = "URL", env = "SILK_STORE")]
    pub store: Option<String>,
    /// Run log lines older than this are deleted.
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub log_retention: std::time::Duration,
    /// Also run the task router from this config (see `silk router`), with the hub's
    /// classes `silk.JobOutbound` and `silk.RunResultsInbound`.
    #[arg(long, value_name = "CONFIG")]
    pub router: Option<PathBuf>,
    /// A placeholder value of the router config, `NAME=VALUE` (repeatable).
    #[arg(long = "router-var", value_name = "NAME=VALUE", requires = "router")]
    pub router_vars: Vec<String>,
    /// A YAML file of placeholder values of the router config (repeatable).
    #[arg(long = "router-var-file", value_name = "FILE", requires = "router")]
    pub router_var_files: Vec<PathBuf>,
    /// The key that seals projects' git passwords and webhook secrets in the store: 32
    /// bytes as base64 or hex. Default: DATA_DIR/secret.key, made at first start. Hubs
    /// that share a store must share it.
    #[arg(
        long,
        value_name = "KEY",
        env = "SILK_SECRET_KEY",
        hide_env_values = true
    )]
    pub secret_key: Option<String>,
    #[command(flatten)]
    pub container: crate::agent::ContainerArgs,
    /// An argument of `build`, e.g. `--network=host` or `--ulimit=nofile=1024:1024`
    /// (repeatable).
    #[arg(
        long = "container-build-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub container_build_args: Vec<String>,
    /// A registry to push built images to (`registry.example:5000/team`), so that agents
    /// on other machines can pull them.
    #[arg(long, value_name = "REGISTRY")]
    pub registry: Option<String>,
    /// Builds of projects' versions at once on this hub.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub builds_parallel: u32,
    /// Finished versions kept per project (older ones go with their artifacts).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub keep_versions: u32,
    /// The hub's API as programs and agents reach it (`SILK_API_URL`, version downloads);
    /// default `http://` + the listen address (loopback when it listens on all addresses).
    #[arg(long, value_name = "URL", env = "SILK_PUBLIC_URL")]
    pub public_url: Option<String>,
}

/// The router of `--router`, loaded and bound before the hub starts.
struct RouterSetup {
    classes: silk_hub::HubClasses,
    config: silk_router::Config,
    listener: tokio::net::TcpListener,
}

/// The router running beside the hub.
struct RunningRouter {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), silk_router::RouterError>>,
}

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
    /// Also serve the demo site on loopback and create and trigger a `demo` job crawling
    /// it (watch it in the web UI).
    #[arg(long)]
    pub demo: bool,
    /// Named commands of the local agents (they also run admins' raw commands: their hub,
    /// in this process, refuses raw commands from other tokens).
    #[command(flatten)]
    pub commands: crate::agent::CommandArgs,
    #[command(flatten)]
    pub control: ControlArgs,
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
    /// This hub's id in the cluster (`[A-Za-z0-9_-]`, at most 40); default the id kept in
    /// DATA_DIR/hub.id, made at first start.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Keep run frontiers in this Redis (`redis://HOST:PORT[/DB]`) instead of the data dir,
    /// so that the other hubs sharing the store (`--store postgres://…`) carry a run on when
    /// this hub dies. Key prefix: the namespace.
    #[arg(long, value_name = "URL", env = "SILK_FRONTIER")]
    pub frontier: Option<String>,
    /// How long a run stays with this hub after its last lease renewal in the store: when
    /// the hub dies, another hub of the cluster adopts its runs after this.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub ownership_ttl: std::time::Duration,
    #[command(flatten)]
    pub control: ControlArgs,
}

impl ControlArgs {
    /// Checks the options against the listen address.
    fn check(&self, listen: SocketAddr) -> Result<(), String> {
        if self.no_auth && !listen.ip().is_loopback() {
            return Err(format!(
                "--no-auth is only allowed on a loopback address, not {listen}"
            ));
        }
        Ok(())
    }

    /// The API URL programs are given: `--public-url`, or the listen address.
    fn public_url(&self, listen: SocketAddr) -> String {
        if let Some(url) = &self.public_url {
            return url.trim_end_matches('/').to_owned();
        }
        let ip = if listen.ip().is_unspecified() {
            tracing::warn!(
                "listening on all addresses without --public-url: programs are given http://127.0.0.1:{}, which agents on other machines cannot reach",
                listen.port()
            );
            std::net::IpAddr::from([127, 0, 0, 1])
        } else {
            listen.ip()
        };
        format!("http://{}", SocketAddr::new(ip, listen.port()))
    }

    fn apply(&self, config: &mut HubConfig, router: Option<&RouterSetup>) {
        config.store_url = self.store.clone();
        config.log_retention_ms = self.log_retention.as_millis() as u64;
        config.secret_key = self.secret_key.clone();
        config.builds = silk_hub::BuildSettings {
            engine: silk_projects::build::Engine {
                cli: self.container.container_cli.clone(),
                global_args: self.container.container_args.clone(),
                build_args: self.container_build_args.clone(),
                registry: self.registry.clone(),
            },
            parallel: self.builds_parallel as usize,
            keep_versions: self.keep_versions as usize,
            ..silk_hub::BuildSettings::default()
        };
        config.record_outcomes =
            router.is_some_and(|r| silk_hub::HubClasses::wants_outcomes(&r.config));
    }

    /// Loads the `--router` config and binds its port; `Err` is the exit code (the problems
    /// are printed).
    async fn router(&self) -> Result<Option<RouterSetup>, ExitCode> {
        let Some(path) = &self.router else {
            return Ok(None);
        };
        let classes = silk_hub::HubClasses::new();
        let config = crate::router::load(
            path,
            &self.router_vars,
            &self.router_var_files,
            &classes.registry(),
        )?;
        let addr = format!("{}:{}", config.server.bind, config.server.port);
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: router: cannot listen on {addr}: {e}");
                return Err(ExitCode::from(2));
            }
        };
        Ok(Some(RouterSetup {
            classes,
            config,
            listener,
        }))
    }
}

/// Starts the `--router` router, if any; on failure stops the hub and gives the exit code.
async fn start_router(
    router: Option<RouterSetup>,
    hub: &HubHandle,
) -> Result<Option<RunningRouter>, ExitCode> {
    let Some(router) = router else {
        return Ok(None);
    };
    match router.start(hub).await {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            eprintln!("error: {e:#}");
            hub.shutdown().await;
            Err(ExitCode::from(2))
        }
    }
}

impl RouterSetup {
    /// Gives the classes the hub and starts the router.
    async fn start(self, hub: &HubHandle) -> anyhow::Result<RunningRouter> {
        self.classes.set_hub(hub.clone());
        let addr = self.listener.local_addr()?;
        let project = self.config.project.clone();
        let (inbounds, outbounds) = (self.config.inbounds.len(), self.config.outbounds.len());
        let router = silk_router::Router::start(self.config)
            .await
            .context("starting the router")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(silk_router::serve_on(router, self.listener, async move {
            let _ = stopped.await;
        }));
        println!(
            "router `{project}`: http://{addr}/task/ ({inbounds} inbound(s), {outbounds} outbound(s))"
        );
        Ok(RunningRouter { stop, task })
    }
}

/// Runs `silk up`.
pub async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging(&crate::own_events("info"));
    if let Err(e) = args.control.check(args.listen) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    let commands = match args.commands.load() {
        Ok(commands) => commands,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let bus = InProcessBus::new(BusConfig::default()).context("in-process bus")?;
    let bus: Arc<dyn Bus> = Arc::new(bus);
    let listener = bind(args.listen).await?;
    let router = match args.control.router().await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let mut config = HubConfig::new(args.data_dir.join("hub"));
    args.control.apply(&mut config, router.as_ref());
    config.public_url = Some(args.control.public_url(listener.local_addr()?));
    let hub = match Hub::start(config, bus.clone(), Arc::new(SystemClock)).await {
        Ok(hub) => hub,
        Err(e) => {
            eprintln!("error: cannot start the hub: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut agents = Vec::new();
    for k in 1..=args.agents {
        let mut config = AgentConfig::new(args.data_dir.join("agents").join(format!("local-{k}")));
        config.id = Some(AgentId::new(format!("local-{k}")));
        config.commands = commands.clone();
        config.allow_raw_commands = true;
        config.allow_programs = true;
        config.container_cli = args.control.container.container_cli.clone();
        config.container_args = args.control.container.container_args.clone();
        if let Some(c) = args.capacity {
            config.capacity = c;
        }
        let agent = Agent::start(config, bus.clone(), Arc::new(SystemClock))
            .await
            .context("starting a local agent")?;
        agents.push(agent);
    }
    println!(
        "silk is up: hub on http://{} with {} local agents (data in {})",
        args.listen,
        args.agents,
        args.data_dir.display()
    );
    print_access(&hub, args.listen, args.control.no_auth).await?;
    let router = match start_router(router, &hub).await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let demo = if args.demo {
        Some(start_demo(&hub, args.agents as usize).await?)
    } else {
        println!(
            "submit a run:  silk run SPIDER.yaml --server http://{}",
            args.listen
        );
        None
    };
    let code = serve(hub, listener, agents, router, args.control.no_auth).await;
    drop(demo);
    code
}

/// Prints where the web UI is and, at first start, the admin token (once).
async fn print_access(hub: &HubHandle, listen: SocketAddr, no_auth: bool) -> anyhow::Result<()> {
    if no_auth {
        println!("web UI:  http://{listen}/  (no auth: --no-auth)");
        return Ok(());
    }
    let token_file = hub.data_dir().join(silk_hub::ADMIN_TOKEN_FILE);
    match hub
        .ensure_admin_token()
        .await
        .context("creating the admin token")?
    {
        Some(token) => {
            println!("web UI:  http://{listen}/#token={token}");
            println!(
                "the admin token above is shown once; it is also in {} (mode 0600)",
                token_file.display()
            );
        }
        None => println!(
            "web UI:  http://{listen}/  (token in {})",
            token_file.display()
        ),
    }
    Ok(())
}

/// The demo job's spider: the demo site's start URL and hosts come in as args.
const DEMO_SPIDER: &str = r#"# The demo job of `silk up --demo`: crawls the built-in demo site (served by the hub process
# on loopback). The calendar is a spider trap, so it is denied.
name: demo
start_urls: ['${args.start_url}']
allowed_domains: [${args.hosts}]
follow:
  - deny: ['/calendar/']
item_when: '/p/\d+$'
extract:
  title: { css: 'h1.title' }
  price: { css: 'span.price' }
  tags: { css: 'a.tag', all: true }
  sku: { json: '$.sku' }
per_host_concurrency: 4
per_host_delay_ms: 20
"#;

/// Serves the demo site, creates the `demo` job if needed and triggers it.
async fn start_demo(
    hub: &HubHandle,
    agents: usize,
) -> anyhow::Result<silk_testkit::demo::DemoSite> {
    let site = crate::demo::start(silk_testkit::demo::DemoConfig {
        port: 0,
        ..silk_testkit::demo::DemoConfig::default()
    })
    .await?;
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    // The site's port changes with every start: the job's args follow it.
    let args = serde_json::json!({"start_url": site.start_url(), "hosts": hosts.join(", ")});
    let job = match hub.job("demo").await {
        Ok(job) => hub
            .update_job(&job.id, &serde_json::json!({ "args": args }))
            .await
            .context("updating the demo job")?,
        Err(silk_hub::HubError::NoSuchJob(_)) => {
            let spec: silk_api::jobs::JobSpec = serde_json::from_value(serde_json::json!({
                "name": "demo",
                "spider": DEMO_SPIDER,
                "args": args,
                "remarks": "made by `silk up --demo`: crawls the built-in demo site",
            }))?;
            hub.create_job(spec)
                .await
                .context("creating the demo job")?
        }
        Err(e) => return Err(e).context("looking up the demo job"),
    };
    hub.wait_for_live_agents(agents).await;
    let run = hub
        .trigger(&job.id, silk_api::jobs::TriggerRequest::default())
        .await
        .context("triggering the demo job")?;
    println!(
        "demo: site on port {}, job `demo` triggered: run {} (open it in the web UI)",
        site.port(),
        run.id
    );
    Ok(site)
}

/// Runs `silk hub`.
pub async fn hub(args: HubArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging(&crate::own_events("info"));
    if let Err(e) = silk_bus::subject::check_namespace(&args.namespace) {
        eprintln!("error: --namespace: {e}");
        return Ok(ExitCode::from(2));
    }
    if let Err(e) = args.control.check(args.listen) {
        eprintln!("error: {e}");
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
    let router = match args.control.router().await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let mut config = HubConfig::new(&args.data_dir);
    config.public_url = Some(args.control.public_url(listener.local_addr()?));
    config.phi.dead_after_ms = args.dead_after.as_millis() as u64;
    config.phi.threshold = args.phi_threshold;
    config.hub_id = args.id.clone();
    config.ownership_ttl_ms = args.ownership_ttl.as_millis() as u64;
    if let Some(url) = &args.frontier {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            eprintln!(
                "error: --frontier: expected redis://HOST:PORT[/DB] or rediss://…, not `{}`",
                redact(url)
            );
            return Ok(ExitCode::from(2));
        }
        config.frontier_url = Some(url.clone());
        config.frontier_prefix = args.namespace.clone();
    }
    args.control.apply(&mut config, router.as_ref());
    let hub = match Hub::start(config, Arc::new(bus), Arc::new(SystemClock)).await {
        Ok(hub) => hub,
        Err(e) => {
            eprintln!("error: cannot start the hub: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    println!(
        "silk hub: API on http://{}, bus {} (namespace {}), hub id `{}`, frontiers {}",
        args.listen,
        redact(&args.bus),
        args.namespace,
        hub.hub_id(),
        args.frontier
            .as_deref()
            .map_or_else(|| "in the data dir".to_owned(), redact)
    );
    print_access(&hub, args.listen, args.control.no_auth).await?;
    let router = match start_router(router, &hub).await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    serve(hub, listener, Vec::new(), router, args.control.no_auth).await
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Serves the API until a stop signal, then stops the router, the agents and the hub.
async fn serve(
    hub: HubHandle,
    listener: tokio::net::TcpListener,
    agents: Vec<AgentHandle>,
    router: Option<RunningRouter>,
    no_auth: bool,
) -> anyhow::Result<ExitCode> {
    let api = hub.router_with(silk_hub::ApiOptions { auth: !no_auth });
    let server = axum::serve(listener, api).with_graceful_shutdown(crate::wait_for_stop_signal());
    server.await.context("the HTTP API failed")?;
    eprintln!("stopping: runs stay on disk and resume at the next start");
    if let Some(router) = router {
        // First: it hands back the tasks it holds and stops reading run outcomes.
        let _ = router.stop.send(());
        match router.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("router: {e}"),
            Err(e) => eprintln!("router: {e}"),
        }
    }
    for agent in &agents {
        agent.shutdown().await;
    }
    hub.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
