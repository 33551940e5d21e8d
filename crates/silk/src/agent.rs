//! `silk agent --bus nats://HOST:4222`: runs one agent of the download center (the runtime is
//! `silk-agent`) on a NATS bus until Ctrl-C, SIGTERM or a `shutdown` command from the hub.
//!
//! The bus may be down when the agent starts: the NATS client connects in the background and
//! reconnects forever, and the agent registers as soon as it can. Only a bad address or a bad
//! namespace stops the start (exit 2).

use crate::settings::{Settings, SettingsArgs, redact};
use clap::Args;
use silk_agent::{Agent, AgentConfig, CommandDef};
use silk_bus::{BusConfig, BusError, NatsBus};
use silk_core::{AgentId, SystemClock};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Options of `silk agent`. Its settings (`--bus`, `--labels`, `--capacity`, … and the
/// timing knobs) are the knobs of [`crate::settings`], added to the command from its table.
///
/// `--commands FILE`: a TOML file of named commands that runs may use (`{"command": NAME}` as
/// a proxy provider or redial): one table per name with `argv = [program, args…]` (no
/// shell) or `shell = "line"`, and optionally `timeout_ms` and `env = {KEY = "value"}`.
/// Nothing else runs on the agent unless raw commands are allowed.
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
}

/// The named commands of the `commands` file (none without one); the error names the file
/// and every problem.
pub(crate) fn load_commands(path: Option<&Path>) -> Result<BTreeMap<String, CommandDef>, String> {
    let Some(path) = path else {
        return Ok(BTreeMap::new());
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("commands {}: {e}", path.display()))?;
    parse_commands(&text).map_err(|e| format!("commands {}: {e}", path.display()))
}

/// The ranges of `allow_networks` (comma-separated CIDRs, as many values as given); the
/// error names the value.
pub(crate) fn allow_networks(s: &Settings) -> Result<Vec<silk_core::net::IpNet>, String> {
    s.list("allow_networks")
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            silk_core::net::parse_range(v).ok_or_else(|| {
                format!("allow_networks: `{v}` is no address range (CIDR such as 10.1.0.0/16)")
            })
        })
        .collect()
}

/// An agent's config from the settings `silk agent` and `silk up` share.
pub(crate) fn agent_config(
    s: &Settings,
    data_dir: PathBuf,
    commands: BTreeMap<String, CommandDef>,
    allow_networks: Vec<silk_core::net::IpNet>,
) -> AgentConfig {
    let mut config = AgentConfig::new(data_dir);
    config.allow_networks = allow_networks;
    config.commands = commands;
    config.capacity = u32::try_from(s.count("capacity")).unwrap_or(u32::MAX);
    config.heartbeat_interval_ms = s.ms("heartbeat_interval");
    config.allocated_ttl_ms = s.ms("ttl.allocate");
    config.log_ttl_ms = s.ms("ttl.log");
    config.downloader_idle_ms = s.ms("idle_release");
    config.shutdown_grace_ms = s.ms("shutdown_grace");
    config.detach_after_ms = s.ms("detach_after");
    config.container_cli = s.text("container.cli").unwrap_or_default();
    config.container_args = s.list("container.args");
    config
}

/// Parses a commands file: every problem at once.
fn parse_commands(text: &str) -> Result<BTreeMap<String, CommandDef>, String> {
    let commands: BTreeMap<String, CommandDef> =
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())?;
    let problems: Vec<String> = commands
        .iter()
        .flat_map(|(name, def)| def.problems(name))
        .collect();
    if problems.is_empty() {
        Ok(commands)
    } else {
        Err(problems.join("; "))
    }
}

/// Parses label arguments: each is comma-separated `KEY=VALUE` or `KEY` (value "").
fn parse_labels(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for part in args.iter().flat_map(|a| a.split(',')) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (part, ""),
        };
        if key.is_empty() {
            return Err(format!("labels: `{part}` has no key (KEY=VALUE or KEY)"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// Runs `silk agent`.
pub async fn run(s: Settings) -> anyhow::Result<ExitCode> {
    crate::init_logging(&crate::own_events("info"));
    let bus_url = s.text("bus").unwrap_or_default();
    let namespace = s.text("namespace").unwrap_or_default();
    let labels = match parse_labels(&s.list("labels")) {
        Ok(labels) => labels,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Err(e) = silk_bus::subject::check_namespace(&namespace) {
        eprintln!("error: namespace: {e}");
        return Ok(ExitCode::from(2));
    }
    let id = s.text("id").map(AgentId::new);
    if let Some(id) = &id
        && let Err(e) = silk_bus::Subject::agent_commands(id)
    {
        // The id becomes a subject token: the bus says what it accepts.
        eprintln!("error: id: {e}");
        return Ok(ExitCode::from(2));
    }
    let commands = match load_commands(s.path("commands").as_deref()) {
        Ok(commands) => commands,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let networks = match allow_networks(&s) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut config = agent_config(
        &s,
        s.path("data_dir").unwrap_or_default(),
        commands,
        networks,
    );
    config.id = id;
    config.labels = labels;
    config.allow_raw_commands = s.switch("allow_raw_commands");
    config.allow_programs = s.switch("allow_programs");
    let bus_config = s.bus_config(&namespace);
    let listen = s.opt_address("listen");
    s.check_all_read();
    let problems = config.problems();
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        return Ok(ExitCode::from(2));
    }

    let listener = match listen {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                eprintln!("error: listen: cannot listen on {addr}: {e}");
                return Ok(ExitCode::from(2));
            }
        },
        None => None,
    };
    let bus = tokio::select! {
        bus = connect(&bus_url, bus_config) => bus,
        _ = crate::wait_for_stop_signal() => {
            eprintln!("stopped before the bus was reached");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let bus = match bus {
        Ok(bus) => bus,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let connected = bus.wait_connected(Duration::ZERO).await;
    let handle = match Agent::start(config, Arc::new(bus), Arc::new(SystemClock)).await {
        Ok(handle) => Arc::new(handle),
        Err(e) => {
            eprintln!("error: cannot start the agent: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if let Some(listener) = listener {
        if let Ok(addr) = listener.local_addr() {
            println!(
                "agent {} serves /healthz and /metrics on http://{addr}",
                handle.id()
            );
        }
        let app = health_app(handle.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the agent's health listener stopped");
            }
        });
    }
    if connected {
        println!("agent {} connected to {}", handle.id(), redact(&bus_url));
    } else {
        println!(
            "agent {} started; waiting for the bus at {} (retrying in the background)",
            handle.id(),
            redact(&bus_url)
        );
        tracing::warn!(bus = %redact(&bus_url), "the bus is not reachable yet; the agent keeps retrying");
    }

    tokio::select! {
        _ = crate::wait_for_stop_signal() => {
            eprintln!("stopping: letting requests in flight finish (Ctrl-C again to quit now)");
            tokio::select! {
                _ = handle.shutdown() => {}
                _ = crate::wait_for_stop_signal() => {
                    eprintln!("quitting now");
                    return Ok(ExitCode::from(130));
                }
            }
        }
        _ = handle.stopped() => {
            eprintln!("agent {} stopped (shutdown command)", handle.id());
            handle.shutdown().await;
        }
    }
    eprintln!("agent {} stopped", handle.id());
    Ok(ExitCode::SUCCESS)
}

/// The agent's own HTTP: `/healthz` (200 while it runs, has registered and is not detached,
/// 503 with why otherwise) and `/metrics` (its counters as Prometheus text).
fn health_app(handle: Arc<silk_agent::AgentHandle>) -> axum::Router {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let health = handle.clone();
    axum::Router::new()
        .route(
            "/healthz",
            axum::routing::get(move || {
                let handle = health.clone();
                async move {
                    let stats = handle.stats();
                    if handle.is_stopped() {
                        (StatusCode::SERVICE_UNAVAILABLE, "stopped\n")
                    } else if stats.detached {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "detached: no hub heard for detach_after (downloads and programs stopped)\n",
                        )
                    } else if !stats.registered {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "not registered yet (is the bus reachable?)\n",
                        )
                    } else {
                        (StatusCode::OK, "ok\n")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            axum::routing::get(move || {
                let handle = handle.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        agent_metrics(handle.id().as_str(), &handle.stats()),
                    )
                        .into_response()
                }
            }),
        )
}

/// An agent's counters as Prometheus text (an agent id needs no escaping: it is
/// `[A-Za-z0-9_-]`).
fn agent_metrics(agent: &str, s: &silk_agent::AgentStats) -> String {
    let metrics: [(&str, &str, &str, String); 14] = [
        (
            "silk_agent_registered",
            "gauge",
            "1 once the registration was published.",
            u8::from(s.registered).to_string(),
        ),
        (
            "silk_agent_detached",
            "gauge",
            "1 while the agent is detached (no hub heard for detach_after).",
            u8::from(s.detached).to_string(),
        ),
        (
            "silk_agent_detaches_total",
            "counter",
            "Times the agent detached.",
            s.detaches.to_string(),
        ),
        (
            "silk_agent_hub_silent_seconds",
            "gauge",
            "Seconds since a hub was last heard (0 when detach mode is off).",
            format!("{:.3}", s.hub_silent_ms as f64 / 1000.0),
        ),
        (
            "silk_agent_heartbeats_sent_total",
            "counter",
            "Heartbeats published.",
            s.heartbeats_sent.to_string(),
        ),
        (
            "silk_agent_heartbeats_failed_total",
            "counter",
            "Heartbeats that could not be published.",
            s.heartbeats_failed.to_string(),
        ),
        (
            "silk_agent_downloaders",
            "gauge",
            "Downloaders allocated now.",
            s.active_downloaders.to_string(),
        ),
        (
            "silk_agent_in_flight",
            "gauge",
            "Requests being fetched now.",
            s.in_flight.to_string(),
        ),
        (
            "silk_agent_requests_total",
            "counter",
            "Requests finished.",
            s.requests.to_string(),
        ),
        (
            "silk_agent_results_published_total",
            "counter",
            "Results published.",
            s.results_published.to_string(),
        ),
        (
            "silk_agent_results_dropped_total",
            "counter",
            "Results dropped after their retries.",
            s.results_dropped.to_string(),
        ),
        (
            "silk_agent_bytes_saved_total",
            "counter",
            "Body bytes removed by trimming.",
            s.bytes_saved.to_string(),
        ),
        (
            "silk_agent_log_lines_dropped_total",
            "counter",
            "Run log lines lost.",
            s.log_lines_dropped.to_string(),
        ),
        (
            "silk_agent_qps",
            "gauge",
            "Requests per second, recently.",
            format!("{:.3}", s.qps),
        ),
    ];
    metrics
        .iter()
        .map(|(name, kind, help, value)| {
            format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{agent=\"{agent}\"}} {value}\n"
            )
        })
        .collect()
}

/// Connects the bus. The NATS client connects in the background and reconnects forever, so
/// a server that is down does not fail this; should a connect attempt fail anyway for a
/// retryable reason, it is tried again with back-off, forever. A permanent error (bad
/// namespace, bad address) is returned.
pub(crate) async fn connect(url: &str, config: BusConfig) -> Result<NatsBus, BusError> {
    let mut wait = Duration::from_millis(500);
    loop {
        match NatsBus::connect(url, config.clone()).await {
            Ok(bus) => return Ok(bus),
            Err(e) if e.is_retryable() => {
                tracing::warn!(bus = %redact(url), error = %e, retry_in = ?wait, "cannot connect to the bus; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_mix_keys_and_pairs() {
        let labels = parse_labels(&["a,b".into(), "pool=cn, net = adsl".into()]).unwrap();
        let expected: BTreeMap<String, String> =
            [("a", ""), ("b", ""), ("pool", "cn"), ("net", "adsl")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        assert_eq!(labels, expected);
        assert!(parse_labels(&["=x".into()]).is_err());
        assert!(parse_labels(&[",,".into()]).unwrap().is_empty());
    }

    #[test]
    fn commands_files_are_checked_whole() {
        let ok = parse_commands(
            "[proxies-cn]\nargv = [\"/usr/local/bin/proxies\", \"--country\", \"cn\"]\n\
             env = { KEY = \"v\" }\n\n[redial]\nshell = \"pppoe-stop && pppoe-start\"\ntimeout_ms = 90000\n",
        )
        .unwrap();
        assert_eq!(ok.keys().collect::<Vec<_>>(), ["proxies-cn", "redial"]);
        assert_eq!(ok["redial"].timeout_ms, Some(90_000));
        let err =
            parse_commands("[a]\nargv = []\n[b]\nshell = \"x\"\nargv = [\"y\"]\n").unwrap_err();
        assert!(
            err.contains("commands.a.argv: empty") && err.contains("commands.b: give either"),
            "{err}"
        );
        let err = parse_commands("[a]\nprogram = \"x\"\n").unwrap_err();
        assert!(err.contains("program") && err.contains("line 2"), "{err}");
    }
}
