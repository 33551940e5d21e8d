//! Proxies per run: switching on a ban status or a body regex, a redial command run before
//! the run continues, a provider command, and proxy failures.

use crate::support::*;
use axum::http::{StatusCode, Uri};
use silk_agent::{AgentEvent, CommandSpec, DownloaderConfig, ProxyConfig, RedialConfig};
use silk_core::RunId;
use std::sync::{Arc, Mutex};

/// A local HTTP proxy that answers every request itself with `status` and `body`, and
/// records the absolute URIs it was asked for.
struct RecordingProxy {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl RecordingProxy {
    async fn start(status: u16, body: &'static str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push(uri.to_string());
                (
                    StatusCode::from_u16(status).unwrap(),
                    axum::response::Html(body),
                )
            }
        });
        Self {
            url: format!("http://{}", serve(app).await),
            seen,
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

const OK_PAGE: &str = "<html><body><h1>ok</h1><a href=\"/next\">next</a></body></html>";

fn spider() -> DownloaderConfig {
    // The target is never contacted: the proxies answer. robots.txt is off so that every
    // request is one pick of the rotation.
    DownloaderConfig::for_spider_yaml(spider_yaml(
        "http://127.0.0.1:9/",
        "robots: false\nextract:\n  h: {css: h1}\n",
    ))
}

#[tokio::test]
async fn bans_switch_proxies_and_redial() {
    let banned = RecordingProxy::start(403, "<p>forbidden</p>").await;
    let captcha = RecordingProxy::start(200, "<p>please solve this CAPTCHA</p>").await;
    let good = RecordingProxy::start(200, OK_PAGE).await;
    let dir = tempfile::tempdir().unwrap();
    let redials = dir.path().join("redials");
    let config = DownloaderConfig {
        proxies: ProxyConfig {
            list: vec![banned.url.clone(), captcha.url.clone(), good.url.clone()],
            switch_on_regex: Some("(?i)captcha".into()),
            ..ProxyConfig::default()
        },
        redial: Some(RedialConfig {
            command: CommandSpec::Named("redial".into()),
            timeout_ms: 5_000,
        }),
        ..spider()
    };
    let bus = bus();
    // The redial is a command the agent's admin defined; the run names it.
    let agent_config = silk_agent::AgentConfig {
        commands: [(
            "redial".to_owned(),
            silk_agent::CommandDef {
                shell: Some(format!("echo redial >> '{}'", redials.display())),
                ..Default::default()
            },
        )]
        .into(),
        ..agent_config(dir.path(), "a-proxy")
    };
    let agent = start(agent_config, &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-proxy").await;
    hub.allocate("r1", &config).await;
    // One at a time, so that the rotation is deterministic: banned, captcha, good, good…
    let mut results = Vec::new();
    for i in 0..4 {
        results.push(
            hub.fetch("r1", &format!("http://127.0.0.1:9/p/{i}"))
                .await
                .outcome,
        );
    }
    let e0 = results[0].error.as_ref().expect("banned");
    assert_eq!(
        (e0.code.to_string().as_str(), e0.retryable),
        ("proxy_banned", true)
    );
    assert_eq!(results[0].status, Some(403));
    assert!(e0.message.contains("status 403"), "{}", e0.message);
    assert_eq!(
        results[0].proxy.as_deref(),
        Some(format!("{}/", banned.url).as_str())
    );
    let e1 = results[1].error.as_ref().expect("captcha");
    assert_eq!(
        (e1.code.to_string().as_str(), e1.retryable),
        ("proxy_banned", true)
    );
    assert!(e1.message.contains("switch_on_regex"), "{}", e1.message);
    for r in &results[2..] {
        assert_eq!((r.status, &r.error), (Some(200), &None), "{r:?}");
        assert_eq!(r.items[0]["h"], "ok");
        assert_eq!(r.links, vec!["http://127.0.0.1:9/next".to_owned()]);
        assert_eq!(r.proxy.as_deref(), Some(format!("{}/", good.url).as_str()));
    }
    assert_eq!(banned.seen(), ["http://127.0.0.1:9/p/0"]);
    assert_eq!(captcha.seen(), ["http://127.0.0.1:9/p/1"]);
    assert_eq!(good.seen().len(), 2);
    // The redial ran once per ban, before the next request.
    let ran = std::fs::read_to_string(&redials).unwrap();
    assert_eq!(ran.lines().count(), 2, "{ran}");
    let mut switched = Vec::new();
    let mut redialed = 0;
    while switched.len() < 2 || redialed < 2 {
        match within("events", events.recv()).await.unwrap() {
            AgentEvent::ProxySwitched { proxy, reason, .. } => switched.push((proxy, reason)),
            AgentEvent::Redialed { error, .. } => {
                assert_eq!(error, None);
                redialed += 1;
            }
            _ => {}
        }
    }
    assert_eq!(switched[0].1, "status 403");
    assert_eq!(switched[1].1, "body matches switch_on_regex");
    let stats = &agent.stats().runs[&RunId::new("r1")];
    assert_eq!((stats.proxy_switches, stats.redials), (2, 2));
    agent.shutdown().await;
}

#[tokio::test]
async fn without_proxies_or_redial_a_403_is_an_ordinary_status() {
    let site = RecordingProxy::start(403, "<p>no</p>").await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-403"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-403").await;
    hub.allocate(
        "r1",
        &DownloaderConfig::for_spider_yaml(spider_yaml(
            &format!("{}/", site.url),
            "robots: false\n",
        )),
    )
    .await;
    let r = hub.fetch("r1", &format!("{}/x", site.url)).await.outcome;
    let e = r.error.unwrap();
    assert_eq!(
        (e.code.to_string().as_str(), e.retryable),
        ("http_403", false)
    );
    agent.shutdown().await;
}

#[tokio::test]
async fn a_provider_gives_the_proxies_and_its_failure_is_retryable() {
    let good = RecordingProxy::start(200, OK_PAGE).await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    // Raw commands in the run's config: the agent allows them.
    let config = silk_agent::AgentConfig {
        allow_raw_commands: true,
        ..agent_config(dir.path(), "a-provider")
    };
    let agent = start(config, &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-provider").await;
    let with_provider = |command: CommandSpec| DownloaderConfig {
        proxies: ProxyConfig {
            provider: Some(command),
            ..ProxyConfig::default()
        },
        ..spider()
    };
    hub.allocate(
        "r1",
        &with_provider(CommandSpec::Argv(vec![
            "printf".into(),
            "# proxies\\n%s\\n".into(),
            good.url.clone(),
        ])),
    )
    .await;
    let count = event(&mut events, "provider ran", |e| match e {
        AgentEvent::ProxiesRefreshed { count, .. } => Some(*count),
        _ => None,
    })
    .await;
    assert_eq!(count, 1);
    let r = hub.fetch("r1", "http://127.0.0.1:9/a").await.outcome;
    assert_eq!(r.status, Some(200), "{r:?}");
    assert_eq!(good.seen(), ["http://127.0.0.1:9/a"]);

    hub.allocate(
        "r2",
        &with_provider(CommandSpec::Shell("echo broken >&2; exit 7".into())),
    )
    .await;
    let r = hub.fetch("r2", "http://127.0.0.1:9/b").await.outcome;
    let e = r.error.unwrap();
    assert_eq!(
        (e.code.to_string().as_str(), e.retryable),
        ("downloader_unavailable", true)
    );
    assert!(
        e.message.contains("proxy provider") && e.message.contains("broken"),
        "{}",
        e.message
    );
    agent.shutdown().await;
}

#[tokio::test]
async fn a_failing_proxy_is_switched_after_n_failures() {
    let good = RecordingProxy::start(200, OK_PAGE).await;
    // A port nothing listens on: connecting to the proxy fails.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-fail"), &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-fail").await;
    let config = DownloaderConfig {
        proxies: ProxyConfig {
            list: vec![dead.clone(), good.url.clone()],
            switch_after_failures: 1,
            ..ProxyConfig::default()
        },
        ..spider()
    };
    hub.allocate("r1", &config).await;
    let first = hub.fetch("r1", "http://127.0.0.1:9/1").await.outcome;
    let e = first.error.unwrap();
    assert_eq!((e.code.to_string().as_str(), e.retryable), ("proxy", true));
    let reason = event(&mut events, "switch", |e| match e {
        AgentEvent::ProxySwitched { reason, .. } => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(reason, "1 failures in a row");
    for i in 2..5 {
        let r = hub
            .fetch("r1", &format!("http://127.0.0.1:9/{i}"))
            .await
            .outcome;
        assert_eq!(
            r.status,
            Some(200),
            "the dead proxy is out of rotation: {r:?}"
        );
    }
    agent.shutdown().await;
}
