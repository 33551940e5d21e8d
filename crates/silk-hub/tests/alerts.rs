//! Alerts over real sockets: a real SMTP server (Python's `aiosmtpd`, from the venv of
//! `SILK_TEST_PYTHON`, with a login) and a local webhook receiver. A job's failed run sends
//! one email and one webhook (JSON and Slack form); deliveries that fail are retried and
//! survive a hub restart; a rule's rate limit suppresses; recovered, empty runs and a dead
//! agent alert; secrets are never shown; only admins change rules.

mod common;

use common::*;
use serde_json::{Value, json};
use silk_api::ErrorCode;
use silk_api::alerts::{
    AlertEvent, AlertRuleRequest, ChannelSpec, DeliveriesParams, DeliveryState, DeliveryView,
    EmailSpec, RateLimit, SmtpSecurity, WebhookFormat, WebhookSpec,
};
use silk_api::client::Client;
use silk_api::jobs::{JobSpec, TriggerRequest};
use silk_api::runs::{RunState, RunsParams};
use silk_core::{AgentId, SystemClock};
use silk_hub::{AlertSettings, Hub, HubHandle};
use silk_testkit::Receiver;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;

const SMTP_USER: &str = "silk-alerts";
const SMTP_PASSWORD: &str = "smtp-pw-93b1c";
const HOOK_TOKEN: &str = "hook-tok-5e21";

/// A real SMTP server on loopback (aiosmtpd) that wants a login and writes each message it
/// takes to a JSON file in `dir`.
struct Smtp {
    port: u16,
    dir: PathBuf,
    _child: tokio::process::Child,
}

const SMTP_SERVER: &str = r#"
import json, os, socket, sys
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
out, user, password = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
class Handler:
    async def handle_DATA(self, server, session, envelope):
        n = len([f for f in os.listdir(out) if f.endswith(".json")])
        rec = {"from": envelope.mail_from, "to": envelope.rcpt_tos,
               "authenticated": bool(session.authenticated),
               "data": envelope.content.decode("utf8", "replace")}
        tmp = os.path.join(out, ".%d.tmp" % n)
        with open(tmp, "w") as f:
            json.dump(rec, f)
        os.rename(tmp, os.path.join(out, "%d.json" % n))
        return "250 OK"
def auth(server, session, envelope, mechanism, data):
    ok = isinstance(data, LoginPassword) and data.login == user and data.password == password
    return AuthResult(success=ok)
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
c = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=auth,
               auth_required=True, auth_require_tls=False)
c.start()
print("ready", port, flush=True)
sys.stdin.read()
c.stop()
"#;

impl Smtp {
    async fn start(python: &str, dir: &Path) -> Smtp {
        use tokio::io::AsyncBufReadExt;
        let dir = dir.join("mail");
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = tokio::process::Command::new(python)
            .args(["-c", SMTP_SERVER])
            .arg(&dir)
            .args([SMTP_USER, SMTP_PASSWORD])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python with aiosmtpd");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = within("the SMTP server", 30, lines.next_line())
            .await
            .unwrap()
            .expect("the SMTP server says ready (is aiosmtpd installed?)");
        let port = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        Smtp {
            port,
            dir,
            _child: child,
        }
    }

    fn messages(&self) -> Vec<Value> {
        let mut names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect()
    }
}

struct World {
    dir: TempDir,
    bus: silk_bus::InProcessBus,
    hub: HubHandle,
    admin: Client,
    base: String,
}

fn config(dir: &Path) -> silk_hub::HubConfig {
    silk_hub::HubConfig {
        alerts: AlertSettings {
            retry_delay_ms: 200,
            retry_max_delay_ms: 1_000,
            poll_ms: 200,
            send_timeout_ms: 5_000,
            ..AlertSettings::default()
        },
        ..hub_config(dir)
    }
}

async fn start(dir: &Path, bus: &silk_bus::InProcessBus) -> (HubHandle, String, Client) {
    let hub = Hub::start(config(dir), Arc::new(bus.clone()), Arc::new(SystemClock))
        .await
        .expect("hub starts");
    let (base, admin) = serve(&hub).await;
    (hub, base, admin)
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let (hub, base, admin) = start(dir.path(), &bus).await;
    World {
        dir,
        bus,
        hub,
        admin,
        base,
    }
}

fn webhook_rule(
    name: &str,
    url: &str,
    format: WebhookFormat,
    events: &[AlertEvent],
) -> AlertRuleRequest {
    AlertRuleRequest {
        name: name.into(),
        events: events.to_vec(),
        job: None,
        project: None,
        channel: ChannelSpec::Webhook(WebhookSpec {
            url: Some(url.into()),
            format,
            headers: Some(BTreeMap::from([(
                "Authorization".to_owned(),
                format!("Bearer {HOOK_TOKEN}"),
            )])),
        }),
        subject: None,
        body: None,
        rate_limit: None,
        enabled: None,
    }
}

/// A job whose spider fetches `start_url`; `items` says whether its pages make items.
async fn create_job(admin: &Client, name: &str, start_url: &str, host: &str, items: bool) {
    let item_when = if items {
        "'/p/\\d+$'"
    } else {
        "'/never-an-item$'"
    };
    let spider = format!(
        "name: {name}\nstart_urls: ['{start_url}']\nallowed_domains: [{host}]\n\
         follow: [{{deny: ['/calendar/']}}]\nitem_when: {item_when}\n\
         extract: {{title: {{css: 'h1.title'}}}}\nper_host_delay_ms: 0\n"
    );
    let spec: JobSpec = serde_json::from_value(json!({"name": name, "spider": spider})).unwrap();
    admin.create_job(&spec).await.unwrap();
}

/// Triggers the job and waits for the run's end; its id and state.
async fn run_job(admin: &Client, job: &str) -> (String, RunState) {
    let before = admin
        .runs(&RunsParams {
            job: Some(job.into()),
            ..RunsParams::default()
        })
        .await
        .unwrap()
        .len();
    // With no agent the trigger is refused (allocation failed) and the run stored failed.
    let _ = admin.trigger_job(job, &TriggerRequest::default()).await;
    until("the run's end", async || {
        let runs = admin
            .runs(&RunsParams {
                job: Some(job.into()),
                ..RunsParams::default()
            })
            .await
            .unwrap();
        let run = runs.iter().max_by_key(|r| r.created_ms)?;
        (runs.len() > before && run.state.is_terminal()).then(|| (run.id.to_string(), run.state))
    })
    .await
}

/// Waits until the deliveries matching `params` satisfy `done`; the last list.
async fn deliveries_until(
    admin: &Client,
    params: DeliveriesParams,
    what: &str,
    done: impl Fn(&[DeliveryView]) -> bool,
) -> Vec<DeliveryView> {
    until(what, async || {
        let list = admin.alert_deliveries(&params).await.unwrap();
        done(&list).then_some(list)
    })
    .await
}

fn of_rule(rule: &str) -> DeliveriesParams {
    DeliveriesParams {
        rule: Some(rule.into()),
        ..DeliveriesParams::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_sends_one_email_and_one_webhook_and_no_secret_shows() {
    let Some(python) = silk_testkit::service_url("SILK_TEST_PYTHON") else {
        return;
    };
    let w = world().await;
    let smtp = Smtp::start(&python, w.dir.path()).await;
    let receiver = Receiver::start().await.unwrap();
    let hook_base = receiver.base_url().to_owned();
    let mail = AlertRuleRequest {
        name: "mail".into(),
        events: vec![AlertEvent::RunFailed],
        job: Some("shop".into()),
        project: None,
        channel: ChannelSpec::Email(EmailSpec {
            host: "127.0.0.1".into(),
            port: Some(smtp.port),
            security: SmtpSecurity::None,
            username: Some(SMTP_USER.into()),
            password: Some(SMTP_PASSWORD.into()),
            from: "Silk <silk@example.test>".into(),
            to: vec!["oncall@example.test".into()],
        }),
        subject: Some("[{{ job }}] {{ event }}: {{ reason }}".into()),
        body: None,
        rate_limit: None,
        enabled: None,
    };
    w.admin.create_alert_rule(&mail).await.unwrap();
    let hook_url = format!("{hook_base}/hook/T000/B000/{HOOK_TOKEN}");
    w.admin
        .create_alert_rule(&webhook_rule(
            "hook",
            &hook_url,
            WebhookFormat::Json,
            &[AlertEvent::RunFailed],
        ))
        .await
        .unwrap();
    let slack_url = format!("{hook_base}/hook/slack");
    w.admin
        .create_alert_rule(&webhook_rule(
            "slack",
            &slack_url,
            WebhookFormat::Slack,
            &[AlertEvent::RunFailed],
        ))
        .await
        .unwrap();
    // Another job's rule stays quiet.
    let mut other = webhook_rule(
        "other-job",
        &slack_url,
        WebhookFormat::Slack,
        &[AlertEvent::RunFailed],
    );
    other.job = Some("not-shop".into());
    w.admin.create_alert_rule(&other).await.unwrap();

    create_job(&w.admin, "shop", "http://127.0.0.1:9/", "127.0.0.1", true).await;
    let (run, state) = run_job(&w.admin, "shop").await;
    assert_eq!(state, RunState::Failed);

    let sent = deliveries_until(
        &w.admin,
        DeliveriesParams::default(),
        "3 deliveries sent",
        |d| d.iter().filter(|d| d.state == DeliveryState::Sent).count() == 3,
    )
    .await;
    assert_eq!(sent.len(), 3, "{sent:?}");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let m = &messages[0];
    assert_eq!(m["authenticated"], true);
    assert_eq!(m["to"], json!(["oncall@example.test"]));
    let data = m["data"].as_str().unwrap();
    assert!(data.contains("Subject: [shop] run_failed: "), "{data}");
    assert!(data.contains(&run), "{data}");
    assert!(
        data.contains(&format!("Message-ID: <mail/run/{run}@silk.alerts>")),
        "{data}"
    );

    let got = receiver.received();
    assert_eq!(got.len(), 2, "{got:?}");
    let hook = got
        .iter()
        .find(|r| r.path.starts_with("/hook/T000"))
        .expect("the JSON webhook");
    let (json_headers, json_body) = (&hook.headers, hook.json());
    assert_eq!(json_body["event"], "run_failed");
    assert_eq!(json_body["rule"], "hook");
    assert_eq!(json_body["facts"]["job"], "shop");
    assert_eq!(json_body["facts"]["run"], run.as_str());
    assert_eq!(json_body["id"], format!("hook/run/{run}"));
    assert_eq!(json_headers["x-silk-alert-id"], format!("hook/run/{run}"));
    assert_eq!(
        json_headers["authorization"],
        format!("Bearer {HOOK_TOKEN}")
    );
    assert_eq!(json_headers["content-type"], "application/json");
    let slack_body = got
        .iter()
        .find(|r| r.path == "/hook/slack")
        .expect("the Slack webhook")
        .json();
    let text = slack_body["text"].as_str().unwrap();
    assert!(text.starts_with("[silk] Run "), "{text}");
    assert!(text.contains("of job shop failed"), "{text}");

    // No secret in any answer, nor in the store.
    let shown = serde_json::to_string(&w.admin.alert_rules().await.unwrap()).unwrap();
    let stored = serde_json::to_string(&w.hub.store().list_alert_rules().await.unwrap()).unwrap();
    for text in [&shown, &stored] {
        for secret in [SMTP_PASSWORD, HOOK_TOKEN, "T000"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
    assert!(shown.contains(&format!("{hook_base}/…")), "{shown}");
    assert!(shown.contains(r#""has_password":true"#), "{shown}");

    // Only admins change rules; anyone with a token reads them.
    let member = member(&w.admin, &w.base).await;
    let refused = member
        .create_alert_rule(&webhook_rule(
            "x",
            &slack_url,
            WebhookFormat::Json,
            &[AlertEvent::RunFailed],
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden), "{refused}");
    // Rules see every tenant's runs: only an admin reads them.
    let refused = member.alert_rules().await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden), "{refused}");
    assert_eq!(w.admin.alert_rules().await.unwrap().len(), 4);
    // A bad rule is refused naming the field.
    let mut bad = webhook_rule(
        "bad",
        "ftp://x/y",
        WebhookFormat::Json,
        &[AlertEvent::RunFailed],
    );
    let e = w.admin.create_alert_rule(&bad).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{e}");
    assert!(e.to_string().contains("channel.webhook.url"), "{e}");
    bad.channel = ChannelSpec::Webhook(WebhookSpec {
        url: Some(slack_url.clone()),
        format: WebhookFormat::Json,
        headers: None,
    });
    bad.body = Some("{% if %}".into());
    let e = w.admin.create_alert_rule(&bad).await.unwrap_err();
    assert!(e.to_string().contains("body: line 1"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_retried_and_survives_a_hub_restart() {
    let w = world().await;
    let receiver = Receiver::start().await.unwrap();
    let hook_base = receiver.base_url().to_owned();
    receiver.set_status(503);
    let url = format!("{hook_base}/hook/down");
    w.admin
        .create_alert_rule(&webhook_rule(
            "hook",
            &url,
            WebhookFormat::Json,
            &[AlertEvent::RunFailed],
        ))
        .await
        .unwrap();
    create_job(&w.admin, "shop", "http://127.0.0.1:9/", "127.0.0.1", true).await;
    let (run, _) = run_job(&w.admin, "shop").await;
    let failing = deliveries_until(&w.admin, of_rule("hook"), "two failed attempts", |d| {
        d.first().is_some_and(|d| d.attempts >= 2)
    })
    .await;
    assert_eq!(failing[0].state, DeliveryState::Pending, "{failing:?}");
    assert_eq!(
        failing[0].error.as_deref(),
        Some("webhook: HTTP 503 Service Unavailable")
    );
    w.hub.shutdown().await;
    drop(w.hub);

    // The receiver is back; a new hub on the same store sends what the old one could not.
    receiver.set_status(200);
    let (_hub, _base, admin) = start(w.dir.path(), &w.bus).await;
    let sent = deliveries_until(&admin, of_rule("hook"), "the delivery sent", |d| {
        d.first().is_some_and(|d| d.state == DeliveryState::Sent)
    })
    .await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].attempts >= 3, "{sent:?}");
    assert_eq!(sent[0].error, None);
    let got = receiver.received();
    let id = format!("hook/run/{run}");
    let statuses: Vec<u16> = got.iter().map(|r| r.status).collect();
    assert!(statuses.len() >= 3, "{got:?}");
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        got.iter().all(|r| r.headers["x-silk-alert-id"] == id),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovered_empty_runs_dead_agents_and_the_rate_limit() {
    let w = world().await;
    let receiver = Receiver::start().await.unwrap();
    let hook_base = receiver.base_url().to_owned();
    let url = format!("{hook_base}/hook/all");
    let mut limited = webhook_rule(
        "limited",
        &url,
        WebhookFormat::Json,
        &[AlertEvent::RunFailed],
    );
    limited.rate_limit = Some(RateLimit {
        max: 1,
        per_ms: 3_600_000,
    });
    w.admin.create_alert_rule(&limited).await.unwrap();
    let mut state_rule = webhook_rule(
        "states",
        &url,
        WebhookFormat::Json,
        &[
            AlertEvent::RunRecovered,
            AlertEvent::RunEmpty,
            AlertEvent::AgentDead,
        ],
    );
    state_rule.job = None;
    w.admin.create_alert_rule(&state_rule).await.unwrap();

    let site = site(5, 0).await;
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    create_job(&w.admin, "shop", &site.start_url(), &hosts.join(", "), true).await;
    create_job(
        &w.admin,
        "empty",
        &site.start_url(),
        &hosts.join(", "),
        false,
    )
    .await;

    // Two failures (no agent yet): one sent, one suppressed by the limit.
    run_job(&w.admin, "shop").await;
    let (second, _) = run_job(&w.admin, "shop").await;
    let limited = deliveries_until(
        &w.admin,
        of_rule("limited"),
        "one sent, one suppressed",
        |d| d.len() == 2 && d.iter().all(|d| d.state != DeliveryState::Pending),
    )
    .await;
    let states: Vec<DeliveryState> = limited.iter().map(|d| d.state).collect();
    assert_eq!(
        states,
        [DeliveryState::Suppressed, DeliveryState::Sent],
        "{limited:?}"
    );
    assert_eq!(limited[0].facts["run"], second.as_str());
    // A test goes out whatever the limit.
    let test = w.admin.test_alert_rule("limited").await.unwrap();
    assert_eq!(test.event, AlertEvent::Test);
    deliveries_until(&w.admin, of_rule("limited"), "the test sent", |d| {
        d.iter()
            .any(|d| d.event == AlertEvent::Test && d.state == DeliveryState::Sent)
    })
    .await;

    // With an agent: the job succeeds after its failures (recovered), the other job's run
    // ends without items (empty).
    let agent = start_agent(w.dir.path(), &w.bus, "a1").await;
    let (ok, state) = run_job(&w.admin, "shop").await;
    assert_eq!(state, RunState::Succeeded);
    let (empty, state) = run_job(&w.admin, "empty").await;
    assert_eq!(state, RunState::Succeeded);
    let states = deliveries_until(&w.admin, of_rule("states"), "recovered and empty", |d| {
        d.iter().filter(|d| d.state == DeliveryState::Sent).count() == 2
    })
    .await;
    let by_run: BTreeMap<String, AlertEvent> = states
        .iter()
        .map(|d| (d.facts["run"].as_str().unwrap().to_owned(), d.event))
        .collect();
    assert_eq!(by_run[&ok], AlertEvent::RunRecovered, "{states:?}");
    assert_eq!(by_run[&empty], AlertEvent::RunEmpty, "{states:?}");

    // A live agent that stops answering is dead.
    let ghost = AgentId::new("ghost");
    let presence = tokio::spawn(fake_presence(
        w.bus.clone(),
        Arc::new(SystemClock),
        ghost.clone(),
    ));
    until("the ghost live", async || {
        let agents = w.admin.agents().await.unwrap();
        agents
            .iter()
            .any(|a| a.id == ghost && a.state.is_live())
            .then_some(())
    })
    .await;
    presence.abort();
    let dead = deliveries_until(&w.admin, of_rule("states"), "the agent_dead alert", |d| {
        d.iter()
            .any(|d| d.event == AlertEvent::AgentDead && d.state == DeliveryState::Sent)
    })
    .await;
    let d = dead
        .iter()
        .find(|d| d.event == AlertEvent::AgentDead)
        .unwrap();
    assert_eq!(d.facts["agent"], "ghost");
    assert!(d.subject.contains("Agent ghost is dead"), "{d:?}");
    let got = receiver.received();
    assert!(
        got.iter().any(|r| r.json()["event"] == "agent_dead"),
        "{got:?}"
    );

    // A restarted hub restores the ghost from the store; silent since, its death there is
    // no news: still one agent_dead delivery.
    w.hub.shutdown().await;
    let (hub, _base, admin) = start(w.dir.path(), &w.bus).await;
    until("the ghost dead on the restarted hub", async || {
        let agents = admin.agents().await.unwrap();
        agents
            .iter()
            .any(|a| a.id == ghost && !a.state.is_live())
            .then_some(())
    })
    .await;
    admin.test_alert_rule("states").await.unwrap();
    let after = deliveries_until(&admin, of_rule("states"), "the test sent", |d| {
        d.iter()
            .any(|d| d.event == AlertEvent::Test && d.state == DeliveryState::Sent)
    })
    .await;
    let deaths = after
        .iter()
        .filter(|d| d.event == AlertEvent::AgentDead)
        .count();
    assert_eq!(deaths, 1, "{after:?}");
    agent.shutdown().await;
    hub.shutdown().await;
}
