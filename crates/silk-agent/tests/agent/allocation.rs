//! Allocation replies: every `allocate` is answered on `allocations` — ok once the
//! downloader is built (also for a repeated `allocate`), or not ok with the reason (an
//! invalid config, a raw command the agent does not allow, a failing proxy provider); a
//! reply that cannot be published is dropped after its retries.

use crate::support::*;
use silk_agent::{AgentConfig, AgentEvent, CommandDef, CommandSpec, DownloaderConfig, ProxyConfig};
use silk_bus::{AllocationReply, Bus, Command};
use silk_core::{AgentId, RunId};
use std::path::Path;
use std::sync::Arc;

/// `config` with the named commands the allocation scenario uses (raw commands stay
/// refused, as by default).
pub fn with_scenario_commands(config: AgentConfig) -> AgentConfig {
    let shell = |line: &str| CommandDef {
        shell: Some(line.into()),
        ..CommandDef::default()
    };
    AgentConfig {
        commands: [
            ("broken".to_owned(), shell("echo broken >&2; exit 7")),
            (
                "one-proxy".to_owned(),
                CommandDef {
                    argv: Some(vec!["echo".into(), "http://127.0.0.1:9".into()]),
                    ..CommandDef::default()
                },
            ),
        ]
        .into(),
        ..config
    }
}

fn valid() -> DownloaderConfig {
    DownloaderConfig::for_spider_yaml(spider_yaml(
        "http://127.0.0.1:9/",
        "extract:\n  h: {css: h1}\n",
    ))
}

fn with_provider(command: CommandSpec) -> DownloaderConfig {
    DownloaderConfig {
        proxies: ProxyConfig {
            provider: Some(command),
            ..ProxyConfig::default()
        },
        ..valid()
    }
}

/// What the hub sees on `allocations` for good, repeated and bad allocations of the agent
/// `agent` (already started on `bus`, reading commands, with [`with_scenario_commands`]);
/// `dir` is a scratch directory.
pub async fn replies_say_whether_allocation_succeeded(bus: Arc<dyn Bus>, agent: &str, dir: &Path) {
    let mut replies = allocation_replies(bus.as_ref()).await;
    let hub = Hub::new(bus.clone(), agent).await;
    let reply = |run: &str, ok: bool, error: Option<String>| AllocationReply {
        run: RunId::new(run),
        agent: AgentId::new(agent),
        ok,
        error,
    };

    hub.allocate("r1", &valid()).await;
    assert_eq!(
        next_allocation_reply(&mut replies).await,
        reply("r1", true, None)
    );
    // A repeated allocate of a healthy allocation is answered ok again.
    hub.allocate("r1", &valid()).await;
    assert_eq!(
        next_allocation_reply(&mut replies).await,
        reply("r1", true, None)
    );

    // An invalid config: not ok, and the reason names every problem.
    hub.send(Command::Allocate {
        run: RunId::new("bad"),
        config: serde_json::json!({"spider": "name: x\nstart_urls: [\"http://127.0.0.1:1/\"]\nextract: {p: {css: \"[[\"}}\n", "qps": -1}),
        allow_networks: Vec::new(),
    })
    .await;
    let r = next_allocation_reply(&mut replies).await;
    assert_eq!(
        (r.run.as_str(), r.agent.as_str(), r.ok),
        ("bad", agent, false)
    );
    let why = r.error.expect("a refusal says why");
    assert!(
        why.contains("run `bad`")
            && why.contains("invalid downloader config")
            && why.contains("extract.p.css")
            && why.contains("qps"),
        "{why}"
    );
    // Not a config at all.
    hub.send(Command::Allocate {
        run: RunId::new("worse"),
        config: serde_json::json!([1, 2]),
        allow_networks: Vec::new(),
    })
    .await;
    let r = next_allocation_reply(&mut replies).await;
    assert_eq!((r.run.as_str(), r.ok), ("worse", false));
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("invalid downloader config")),
        "{r:?}"
    );

    // A raw command sent straight on the bus (the hub's token check is bypassed): the
    // agent was not configured to allow raw commands, so it refuses, naming the field, and
    // runs nothing.
    let pwned = dir.join("pwned");
    let raw = format!("touch '{}'; echo http://127.0.0.1:9", pwned.display());
    hub.allocate("r-raw", &with_provider(CommandSpec::Shell(raw)))
        .await;
    let r = next_allocation_reply(&mut replies).await;
    assert_eq!((r.run.as_str(), r.ok), ("r-raw", false));
    let why = r.error.expect("a refusal says why");
    assert!(
        why.contains("proxies.provider: raw commands are not allowed on this agent"),
        "{why}"
    );
    assert!(!pwned.exists(), "the raw command ran");
    // A name the agent does not define.
    hub.allocate(
        "r-unknown",
        &with_provider(CommandSpec::Named("nope".into())),
    )
    .await;
    let r = next_allocation_reply(&mut replies).await;
    assert_eq!((r.run.as_str(), r.ok), ("r-unknown", false));
    let why = r.error.expect("a refusal says why");
    assert!(
        why.contains("no command `nope` is defined on this agent (defined: broken, one-proxy)"),
        "{why}"
    );

    // A valid config whose downloader cannot be built (its proxy provider fails).
    hub.allocate(
        "r-provider",
        &with_provider(CommandSpec::Named("broken".into())),
    )
    .await;
    let r = next_allocation_reply(&mut replies).await;
    assert_eq!((r.run.as_str(), r.ok), ("r-provider", false));
    let why = r.error.expect("a failed build says why");
    assert!(
        why.contains("run `r-provider`")
            && why.contains("proxy provider")
            && why.contains("broken"),
        "{why}"
    );

    // A provider that works: ok comes after it ran.
    hub.allocate(
        "r-proxied",
        &with_provider(CommandSpec::Named("one-proxy".into())),
    )
    .await;
    assert_eq!(
        next_allocation_reply(&mut replies).await,
        reply("r-proxied", true, None)
    );
}

#[tokio::test]
async fn allocations_are_answered_ok_or_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(
        with_scenario_commands(agent_config(dir.path(), "a-alloc")),
        &bus,
    )
    .await;
    let mut events = agent.events();
    replies_say_whether_allocation_succeeded(Arc::new(bus.clone()), "a-alloc", dir.path()).await;
    // One event per reply sent (the tasks that send them may finish in any order).
    let mut seen = Vec::new();
    while seen.len() < 8 {
        seen.push(
            event(&mut events, "allocation replied", |e| match e {
                AgentEvent::AllocationReplied { run, ok } => Some((run.to_string(), *ok)),
                AgentEvent::AllocationReplyDropped { run, .. } => {
                    panic!("the reply for {run} was dropped")
                }
                _ => None,
            })
            .await,
        );
    }
    let want = [
        ("r1", true),
        ("r1", true),
        ("bad", false),
        ("worse", false),
        ("r-raw", false),
        ("r-unknown", false),
        ("r-provider", false),
        ("r-proxied", true),
    ];
    let mut want: Vec<(String, bool)> = want.iter().map(|(r, ok)| (r.to_string(), *ok)).collect();
    seen.sort();
    want.sort();
    assert_eq!(seen, want);
    // The refused runs hold nothing; the failed build stays allocated (its downloads try
    // the build again), beside the two good ones.
    let runs: Vec<String> = agent.stats().runs.keys().map(|r| r.to_string()).collect();
    assert_eq!(runs, ["r-provider", "r-proxied", "r1"]);
    agent.shutdown().await;
}

#[tokio::test]
async fn a_reply_that_cannot_be_published_is_dropped_after_its_retries() {
    let dir = tempfile::tempdir().unwrap();
    // The provider prints its proxy only when the test writes it into this pipe, so the
    // reply is published exactly when the test says.
    let fifo = dir.path().join("proxies.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed: {made}");
    let bus = bus();
    let config = silk_agent::AgentConfig {
        result_publish_retries: 2,
        allow_raw_commands: true,
        ..agent_config(dir.path(), "a-drop")
    };
    let agent = start(config, &bus).await;
    let mut events = agent.events();
    let mut replies = allocation_replies(&bus).await;
    let hub = Hub::new(Arc::new(bus.clone()), "a-drop").await;
    let gated = with_provider(CommandSpec::Argv(vec![
        "cat".into(),
        fifo.display().to_string(),
    ]));
    hub.allocate("r-gated", &gated).await;
    event(&mut events, "allocated", |e| {
        matches!(e, AgentEvent::Allocated { run, existing: false, .. } if run.as_str() == "r-gated")
            .then_some(())
    })
    .await;
    // The downloader is being built (the provider waits for the pipe): the bus goes down.
    bus.set_available(false);
    let write = tokio::task::spawn_blocking(move || std::fs::write(fifo, "http://127.0.0.1:9\n"));
    within("the pipe written", write)
        .await
        .unwrap()
        .expect("write the pipe");
    let (ok, error) = event(&mut events, "reply dropped", |e| match e {
        AgentEvent::AllocationReplyDropped { run, ok, error } if run.as_str() == "r-gated" => {
            Some((*ok, error.clone()))
        }
        AgentEvent::AllocationReplied { run, .. } if run.as_str() == "r-gated" => {
            panic!("published while the bus was down")
        }
        _ => None,
    })
    .await;
    assert!(ok, "the downloader was built: the lost reply said ok");
    assert!(
        error.contains("3 attempts") && error.contains("switched off"),
        "{error}"
    );
    // The hub, having no reply, allocates again: the built downloader is kept and ok sent.
    bus.set_available(true);
    hub.allocate("r-gated", &gated).await;
    let r = next_allocation_reply(&mut replies).await;
    assert_eq!((r.run.as_str(), r.ok, r.error), ("r-gated", true, None));
    agent.shutdown().await;
}
