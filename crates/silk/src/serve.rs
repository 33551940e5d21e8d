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

use crate::agent::connect;
use crate::settings::{Settings, SettingsArgs, redact};
use anyhow::Context;
use clap::Args;
use silk_agent::{Agent, AgentHandle};
use silk_bus::{Bus, BusConfig, InProcessBus};
use silk_core::{AgentId, SystemClock};
use silk_hub::{Hub, HubConfig, HubHandle};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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

/// Options of `silk up`. Its settings (`--listen`, `--agents`, `--demo`, … and the timing
/// knobs) are the knobs of [`crate::settings`], added to the command from its table.
#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
}

/// Options of `silk hub` (its settings: see [`UpArgs`]).
///
/// `--pools FILE`: a TOML file of agent pools that declare the agents they need: one table
/// per pool with `agents = N` (live agents labelled `pool=NAME`, not drained) and optionally
/// `scale_command = [program, args…]` (no shell), which the hub runs while fewer are alive,
/// with `SILK_POOL`, `SILK_POOL_AGENTS`, `SILK_POOL_ALIVE` and `SILK_POOL_DEFICIT` in its
/// environment, then again after `scale_backoff_ms` (default 30 s, doubling up to 10 min)
/// while the deficit stays; `scale_timeout_ms` (default 2 min) and `scale_env = {KEY =
/// "value"}`. The deficit is in `GET /api/v1/pools`, the web UI and `/metrics`.
#[derive(Debug, Args)]
pub struct HubArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
}

/// Checks the settings against the listen address.
fn check_listen(s: &Settings, listen: SocketAddr) -> Result<(), String> {
    if s.switch("no_auth") && !listen.ip().is_loopback() {
        return Err(format!(
            "--no-auth is only allowed on a loopback address, not {listen}"
        ));
    }
    Ok(())
}

/// The API URL programs are given: `public_url`, or the listen address.
fn public_url(s: &Settings, listen: SocketAddr) -> String {
    if let Some(url) = s.text("public_url") {
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

/// The hub's config from the settings `silk up` and `silk hub` share.
fn hub_config(s: &Settings, data_dir: PathBuf, router: Option<&RouterSetup>) -> HubConfig {
    let mut config = HubConfig::new(data_dir);
    config.store_url = s.text("store");
    config.log_retention_ms = s.ms("log_retention");
    config.router_failure_retention_ms = s.ms("router.failure_retention");
    config.archive_retention_ms = s.ms("runs.archive_retention");
    config.secret_key = s.text("secret_key");
    config.builds = silk_hub::BuildSettings {
        engine: silk_projects::build::Engine {
            cli: s.text("container.cli").unwrap_or_default(),
            global_args: s.list("container.args"),
            build_args: s.list("builds.container_args"),
            registry: s.text("builds.registry"),
        },
        parallel: usize::try_from(s.count("builds.parallel")).unwrap_or(usize::MAX),
        keep_versions: usize::try_from(s.count("builds.keep_versions")).unwrap_or(usize::MAX),
        ..silk_hub::BuildSettings::default()
    };
    config.alerts = silk_hub::AlertSettings {
        retry_delay_ms: s.ms("alerts.retry_delay"),
        retry_max_delay_ms: s.ms("alerts.retry_max_delay"),
        max_attempts: u32::try_from(s.count("alerts.max_attempts")).unwrap_or(u32::MAX),
        retention_ms: s.ms("alerts.retention"),
        ..silk_hub::AlertSettings::default()
    };
    config.record_outcomes =
        router.is_some_and(|r| silk_hub::HubClasses::wants_outcomes(&r.config));
    let heartbeat_ms = s.ms("heartbeat_interval");
    config.phi.dead_after_ms = s.ms("failure.dead_after");
    config.phi.threshold = s.number("failure.phi_threshold");
    config.phi.acceptable_heartbeat_pause_ms = s.ms("failure.acceptable_pause");
    config.phi.first_heartbeat_estimate_ms = heartbeat_ms;
    config.ttl = silk_bus::TtlPolicy {
        heartbeat_interval_ms: heartbeat_ms,
        allocate_ttl_ms: s.ms("ttl.allocate"),
        download_ttl_ms: s.ms("ttl.download"),
        ..silk_bus::TtlPolicy::default()
    };
    config.allocate_timeout_ms = s.ms("runs.allocation_timeout");
    config.poison_after_losses =
        u32::try_from(s.count("runs.poison_after_losses")).unwrap_or(u32::MAX);
    config.run_defaults = silk_hub::RunDefaults {
        max_pending: s.count("runs.max_pending"),
        stall_timeout_ms: s.ms("runs.stall_timeout"),
        lease_timeout_ms: s.ms("runs.lease_timeout"),
        max_retries: u32::try_from(s.count("runs.max_retries")).unwrap_or(u32::MAX),
    };
    config
}

/// The pools of the `pools` file (none without one); the error names the file and every
/// problem.
pub(crate) fn load_pools(
    path: Option<&std::path::Path>,
) -> Result<std::collections::BTreeMap<String, silk_hub::PoolDecl>, String> {
    let Some(path) = path else {
        return Ok(Default::default());
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("pools {}: {e}", path.display()))?;
    let pools: std::collections::BTreeMap<String, silk_hub::PoolDecl> = toml::from_str(&text)
        .map_err(|e| format!("pools {}: {}", path.display(), e.to_string().trim_end()))?;
    let problems: Vec<String> = pools
        .iter()
        .flat_map(|(name, decl)| decl.problems(name))
        .collect();
    if problems.is_empty() {
        Ok(pools)
    } else {
        Err(format!("pools {}: {}", path.display(), problems.join("; ")))
    }
}

/// The item sink targets of the `sink_targets` file (none without one); the error names
/// every problem with its file and line.
pub(crate) fn load_sink_targets(
    path: Option<&std::path::Path>,
) -> Result<silk_hub::SinkTargets, String> {
    let Some(path) = path else {
        return Ok(Default::default());
    };
    let vars = silk_router::Vars::new().with_env(true);
    let problems =
        |p: Vec<String>| format!("sink targets {}:\n  {}", path.display(), p.join("\n  "));
    let config = silk_router::Config::load(&[path], &vars)
        .map_err(|e| problems(e.iter().map(ToString::to_string).collect()))?;
    for warning in &config.warnings {
        tracing::warn!(file = %path.display(), "sink targets: {warning}");
    }
    let targets = silk_hub::SinkTargets::from_config(&config).map_err(problems)?;
    for (name, class, target) in targets.describe() {
        tracing::info!(target_name = %name, class = %class, to = %target, "item sink target");
    }
    Ok(targets)
}

/// Loads the `router.config` and binds its port; `Err` is the exit code (the problems are
/// printed).
async fn load_router(s: &Settings) -> Result<Option<RouterSetup>, ExitCode> {
    let vars = s.list("router.vars");
    let var_files: Vec<PathBuf> = s
        .list("router.var_files")
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let Some(path) = s.path("router.config") else {
        if !(vars.is_empty() && var_files.is_empty()) {
            eprintln!("error: router.vars and router.var_files need router.config (--router)");
            return Err(ExitCode::from(2));
        }
        return Ok(None);
    };
    let classes = silk_hub::HubClasses::new();
    let config = crate::router::load(&path, &vars, &var_files, &classes.registry())?;
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
        let router = silk_router::Router::start_with(
            self.config,
            std::sync::Arc::new(silk_core::SystemClock),
            Some(hub.router_failure_sink()),
        )
        .await
        .context("starting the router")?;
        hub.set_router(router.clone());
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
pub async fn up(s: Settings) -> anyhow::Result<ExitCode> {
    crate::init_logging(&crate::own_events("info"));
    let listen = s.address("listen");
    let data_dir = s.path("data_dir").unwrap_or_default();
    let agents_n = s.count("agents");
    if let Err(e) = check_listen(&s, listen) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    let commands = match crate::agent::load_commands(s.path("commands").as_deref()) {
        Ok(commands) => commands,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let bus_config = BusConfig {
        retry: s.bus_retry(),
        ..BusConfig::default()
    };
    let bus = InProcessBus::new(bus_config).context("in-process bus")?;
    let bus: Arc<dyn Bus> = Arc::new(bus);
    let listener = bind(listen).await?;
    let router = match load_router(&s).await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let mut networks = match crate::agent::allow_networks(&s) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut config = hub_config(&s, data_dir.join("hub"), router.as_ref());
    config.allow_networks = networks.clone();
    config.pools = match load_pools(s.path("pools").as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    config.sink_targets = match load_sink_targets(s.path("sink_targets").as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    config.public_url = Some(public_url(&s, listener.local_addr()?));
    let hub = match Hub::start(config, bus.clone(), Arc::new(SystemClock)).await {
        Ok(hub) => hub,
        Err(e) => {
            eprintln!("error: cannot start the hub: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if s.switch("demo") {
        // The demo site is served on loopback.
        networks.extend(
            ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|n| n.parse::<silk_core::net::IpNet>().ok()),
        );
    }
    let mut agents = Vec::new();
    for k in 1..=agents_n {
        let mut config = crate::agent::agent_config(
            &s,
            data_dir.join("agents").join(format!("local-{k}")),
            commands.clone(),
            networks.clone(),
        );
        config.id = Some(AgentId::new(format!("local-{k}")));
        config.allow_raw_commands = true;
        config.allow_programs = true;
        let agent = Agent::start(config, bus.clone(), Arc::new(SystemClock))
            .await
            .context("starting a local agent")?;
        agents.push(agent);
    }
    println!(
        "silk is up: hub on http://{listen} with {agents_n} local agents (data in {})",
        data_dir.display()
    );
    let no_auth = s.switch("no_auth");
    print_access(&hub, listen, no_auth).await?;
    let router = match start_router(router, &hub).await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let demo = if s.switch("demo") {
        Some(start_demo(&hub, agents.len()).await?)
    } else {
        println!("submit a run:  silk run SPIDER.yaml --server http://{listen}");
        None
    };
    s.check_all_read();
    let code = serve(hub, listener, agents, router, no_auth).await;
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
pub async fn hub(s: Settings) -> anyhow::Result<ExitCode> {
    crate::init_logging(&crate::own_events("info"));
    let listen = s.address("listen");
    let namespace = s.text("namespace").unwrap_or_default();
    let bus_url = s.text("bus").unwrap_or_default();
    let frontier = s.text("frontier");
    if let Err(e) = silk_bus::subject::check_namespace(&namespace) {
        eprintln!("error: namespace: {e}");
        return Ok(ExitCode::from(2));
    }
    if let Err(e) = check_listen(&s, listen) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    if let Some(url) = &frontier {
        let scheme_ok = [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "rediss+cluster://",
        ]
        .iter()
        .any(|s| url.starts_with(s));
        let parsed = silk_core::redis_target::RedisTarget::open(url);
        if !scheme_ok || parsed.is_err() {
            // The detail only: the error's text may quote the URL, password and all.
            let why = parsed
                .err()
                .and_then(|e| e.detail().map(|d| format!(" ({d})")))
                .unwrap_or_default();
            eprintln!(
                "error: frontier: expected redis://HOST:PORT[/DB], rediss://…, or redis+cluster://HOST:PORT[,HOST:PORT…] for a Redis Cluster, not `{}`{}",
                redact(url),
                why
            );
            return Ok(ExitCode::from(2));
        }
    }
    let listener = bind(listen).await?;
    let bus = match connect(&bus_url, s.bus_config(&namespace)).await {
        Ok(bus) => bus,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let router = match load_router(&s).await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let data_dir = s.path("data_dir").unwrap_or_default();
    let mut config = hub_config(&s, data_dir, router.as_ref());
    config.allow_networks = match crate::agent::allow_networks(&s) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    config.pools = match load_pools(s.path("pools").as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    config.sink_targets = match load_sink_targets(s.path("sink_targets").as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    config.public_url = Some(public_url(&s, listener.local_addr()?));
    config.hub_id = s.text("id");
    config.ownership_ttl_ms = s.ms("ownership_ttl");
    if let Some(url) = &frontier {
        config.frontier_url = Some(url.clone());
        config.frontier_prefix = namespace.clone();
    }
    let hub = match Hub::start(config, Arc::new(bus), Arc::new(SystemClock)).await {
        Ok(hub) => hub,
        Err(e) => {
            eprintln!("error: cannot start the hub: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    println!(
        "silk hub: API on http://{listen}, bus {} (namespace {namespace}), hub id `{}`, frontiers {}",
        redact(&bus_url),
        hub.hub_id(),
        frontier
            .as_deref()
            .map_or_else(|| "in the data dir".to_owned(), redact)
    );
    let no_auth = s.switch("no_auth");
    print_access(&hub, listen, no_auth).await?;
    s.check_all_read();
    let router = match start_router(router, &hub).await {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    serve(hub, listener, Vec::new(), router, no_auth).await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pools_file_is_checked_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pools.toml");
        std::fs::write(
            &path,
            "[eu]\nagents = 2\nscale_command = ['/opt/scale.sh', 'eu']\n[cn]\nagents = 1\n",
        )
        .unwrap();
        let pools = load_pools(Some(&path)).unwrap();
        assert_eq!(pools["eu"].scale_command, ["/opt/scale.sh", "eu"]);
        assert_eq!(pools["eu"].scale_backoff_ms, 30_000);
        assert!(pools["cn"].scale_command.is_empty());
        std::fs::write(
            &path,
            "[eu]\nagents = 0\nscale_timeout_ms = 0\n['bad pool']\nagents = 1\n",
        )
        .unwrap();
        let err = load_pools(Some(&path)).unwrap_err();
        for needle in [
            "eu.agents: must be at least 1",
            "eu.scale_timeout_ms",
            "`bad pool`: not a pool name",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        std::fs::write(&path, "[eu]\nagents = 1\nscale_comand = []\n").unwrap();
        let err = load_pools(Some(&path)).unwrap_err();
        assert!(err.contains("scale_comand"), "{err}");
        assert!(load_pools(None).unwrap().is_empty());
    }
}
