//! `silk agent --bus nats://HOST:4222`: runs one agent of the download center (the runtime is
//! `silk-agent`) on a NATS bus until Ctrl-C, SIGTERM or a `shutdown` command from the hub.
//!
//! The bus may be down when the agent starts: the NATS client connects in the background and
//! reconnects forever, and the agent registers as soon as it can. Only a bad address or a bad
//! namespace stops the start (exit 2).

use clap::Args;
use silk_agent::{Agent, AgentConfig, CommandDef};
use silk_bus::{BusConfig, BusError, NatsBus};
use silk_core::{AgentId, SystemClock};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Options of `silk agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The NATS server of the bus, `nats://HOST:PORT` (e.g. `nats://127.0.0.1:4222`).
    #[arg(long, value_name = "URL", value_parser = parse_bus_url)]
    pub bus: String,
    /// The bus namespace: the prefix of every subject, one per Silk cluster (the hub must use
    /// the same).
    #[arg(long, default_value = "silk")]
    pub namespace: String,
    /// The agent's id (`[A-Za-z0-9_-]`, at most 128). Default: the id kept in the data dir,
    /// or a new one (`HOST-xxxxxxxx`) written there.
    #[arg(long)]
    pub id: Option<String>,
    /// Labels sent with the registration, comma-separated (repeatable): `KEY=VALUE`, or a
    /// bare `KEY` (empty value). Example: `--labels pool=cn,net=adsl,gpu`.
    #[arg(long, value_name = "LABELS")]
    pub labels: Vec<String>,
    /// Requests fetched at once, all runs together.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub capacity: Option<u32>,
    /// Where the agent keeps its id and its allocations (created if missing).
    #[arg(long, default_value = ".silk/agent")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub commands: CommandArgs,
    /// Also run raw commands that a run's config carries (a proxy provider or redial
    /// program of its own). Off by default: only the commands of `--commands` run here,
    /// whatever the hub sends (hubs send raw commands from admin tokens only).
    #[arg(long)]
    pub allow_raw_commands: bool,
    /// Run the programs of program runs (project versions, as processes or containers).
    /// Off by default: a program's command runs on this machine (only admin tokens start
    /// program runs).
    #[arg(long)]
    pub allow_programs: bool,
    #[command(flatten)]
    pub container: ContainerArgs,
}

/// The container engine: container programs on an agent, container builds on a hub.
#[derive(Debug, Clone, Args)]
pub struct ContainerArgs {
    /// The container engine's client: `podman` or `docker` (on PATH, or a path).
    #[arg(
        long,
        value_name = "CLI",
        default_value = "podman",
        env = "SILK_CONTAINER_CLI"
    )]
    pub container_cli: String,
    /// An argument of the container engine before its subcommand, e.g. `--runtime=runc`
    /// (repeatable).
    #[arg(long = "container-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub container_args: Vec<String>,
}

/// The commands an admin defines for agents.
#[derive(Debug, Args)]
pub struct CommandArgs {
    /// A TOML file of named commands that runs may use (`{"command": NAME}` as a proxy
    /// provider or redial): one table per name with `argv = [program, args…]` (no shell) or
    /// `shell = "line"`, and optionally `timeout_ms` and `env = {KEY = "value"}`. Nothing
    /// else runs on the agent unless raw commands are allowed.
    #[arg(long, value_name = "FILE")]
    pub commands: Option<PathBuf>,
}

impl CommandArgs {
    /// The named commands of the file (none without one); the error names the file and
    /// every problem.
    pub(crate) fn load(&self) -> Result<BTreeMap<String, CommandDef>, String> {
        let Some(path) = &self.commands else {
            return Ok(BTreeMap::new());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--commands {}: {e}", path.display()))?;
        parse_commands(&text).map_err(|e| format!("--commands {}: {e}", path.display()))
    }
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

/// Accepts `nats://HOST[:PORT]` only.
pub(crate) fn parse_bus_url(text: &str) -> Result<String, String> {
    let hint = "expected a NATS URL such as nats://127.0.0.1:4222";
    let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e}); {hint}"))?;
    if url.scheme() != "nats" {
        return Err(format!(
            "the `{}` scheme is not supported, only nats://; {hint}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("no host; {hint}"));
    }
    Ok(text.to_owned())
}

/// The bus URL for people and logs: a user name, password or token in it is replaced by `***`.
pub(crate) fn redact(bus: &str) -> String {
    match url::Url::parse(bus) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("***");
            let _ = url.set_password(None);
            url.to_string()
        }
        Ok(_) => bus.to_owned(),
        Err(_) => "(invalid bus URL)".to_owned(),
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
            return Err(format!("--labels: `{part}` has no key (KEY=VALUE or KEY)"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// Runs `silk agent`.
pub async fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging(&crate::own_events("info"));
    let labels = match parse_labels(&args.labels) {
        Ok(labels) => labels,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Err(e) = silk_bus::subject::check_namespace(&args.namespace) {
        eprintln!("error: --namespace: {e}");
        return Ok(ExitCode::from(2));
    }
    let id = args.id.clone().map(AgentId::new);
    if let Some(id) = &id
        && let Err(e) = silk_bus::Subject::agent_commands(id)
    {
        // The id becomes a subject token: the bus says what it accepts.
        eprintln!("error: --id: {e}");
        return Ok(ExitCode::from(2));
    }
    let commands = match args.commands.load() {
        Ok(commands) => commands,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut config = AgentConfig::new(&args.data_dir);
    config.id = id;
    config.labels = labels;
    config.commands = commands;
    config.allow_raw_commands = args.allow_raw_commands;
    config.allow_programs = args.allow_programs;
    config.container_cli = args.container.container_cli.clone();
    config.container_args = args.container.container_args.clone();
    if let Some(capacity) = args.capacity {
        config.capacity = capacity;
    }
    let problems = config.problems();
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        return Ok(ExitCode::from(2));
    }

    let bus = tokio::select! {
        bus = connect(&args.bus, &args.namespace) => bus,
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
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("error: cannot start the agent: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if connected {
        println!("agent {} connected to {}", handle.id(), redact(&args.bus));
    } else {
        println!(
            "agent {} started; waiting for the bus at {} (retrying in the background)",
            handle.id(),
            redact(&args.bus)
        );
        tracing::warn!(bus = %redact(&args.bus), "the bus is not reachable yet; the agent keeps retrying");
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

/// Connects the bus. The NATS client connects in the background and reconnects forever, so
/// a server that is down does not fail this; should a connect attempt fail anyway for a
/// retryable reason, it is tried again with back-off, forever. A permanent error (bad
/// namespace, bad address) is returned.
pub(crate) async fn connect(url: &str, namespace: &str) -> Result<NatsBus, BusError> {
    let mut wait = Duration::from_millis(500);
    loop {
        match NatsBus::connect(url, BusConfig::with_namespace(namespace)).await {
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
    fn credentials_never_reach_the_output() {
        assert_eq!(
            redact("nats://u:secret@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        assert_eq!(redact("nats://tok3n@host:4222"), "nats://***@host:4222");
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
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

    #[test]
    fn only_nats_urls() {
        assert!(parse_bus_url("nats://127.0.0.1:4222").is_ok());
        assert!(parse_bus_url("nats://nats").is_ok());
        assert!(parse_bus_url("http://x").unwrap_err().contains("nats://"));
        assert!(parse_bus_url("inproc").is_err());
        assert!(parse_bus_url("127.0.0.1:4222").is_err());
    }
}
