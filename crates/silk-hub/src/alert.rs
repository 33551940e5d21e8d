//! Alerts, the model (pure): the stored rule document (its channel's secrets sealed), request
//! checks, views without secrets, the events a run's end, an agent's death and a failed
//! build make, which rules they match, the outbox document and how a delivery is rendered
//! (minijinja templates over the event's facts).
//!
//! One delivery per rule and event: a run's end may be several events at once (failed,
//! stalled, empty); a rule gets one delivery for it, headed by the most specific event it
//! subscribes to (stalled, failed, recovered, empty: [`run_happening`]'s order).

use crate::error::HubError;
use crate::run::{RunRecord, RunState};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use silk_api::alerts::{
    AlertEvent, AlertRuleRequest, AlertRuleView, ChannelSpec, ChannelView, DEFAULT_RATE_LIMIT,
    DeliveryState, DeliveryView, EmailSpec, RateLimit, SmtpSecurity, WebhookFormat, WebhookSpec,
};
use silk_projects::secrets::SecretBox;
use std::collections::BTreeMap;

/// The most instructions a template may run per rendering (minijinja's fuel).
const TEMPLATE_FUEL: u64 = 50_000;

/// The longest rendered subject or body, bytes (longer ones are cut).
const MAX_RENDERED: usize = 64 * 1024;

/// A rule as stored: the request with its channel's secrets sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RuleDoc {
    pub(crate) events: Vec<AlertEvent>,
    #[serde(default)]
    pub(crate) job: Option<String>,
    #[serde(default)]
    pub(crate) project: Option<String>,
    pub(crate) channel: ChannelDoc,
    #[serde(default)]
    pub(crate) subject: Option<String>,
    #[serde(default)]
    pub(crate) body: Option<String>,
    pub(crate) rate_limit: RateLimit,
    pub(crate) enabled: bool,
}

/// A channel as stored: secrets sealed with the hub's key, bound to the rule and field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ChannelDoc {
    Webhook {
        /// Sealed.
        url: String,
        /// Scheme, host and port: what views show.
        origin: String,
        format: WebhookFormat,
        /// Name → sealed value.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    Email {
        host: String,
        port: u16,
        security: SmtpSecurity,
        #[serde(default)]
        username: Option<String>,
        /// Sealed.
        #[serde(default)]
        password: Option<String>,
        from: String,
        to: Vec<String>,
    },
}

/// A channel with its secrets opened, for sending (its `Debug` shows no secret).
#[derive(Clone)]
pub(crate) enum Channel {
    Webhook {
        url: String,
        format: WebhookFormat,
        headers: BTreeMap<String, String>,
    },
    Email {
        host: String,
        port: u16,
        security: SmtpSecurity,
        login: Option<(String, String)>,
        from: String,
        to: Vec<String>,
    },
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Channel::Webhook {
                format, headers, ..
            } => f
                .debug_struct("Webhook")
                .field("url", &"***")
                .field("format", format)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
            Channel::Email {
                host,
                port,
                security,
                login,
                from,
                to,
            } => f
                .debug_struct("Email")
                .field("host", host)
                .field("port", port)
                .field("security", security)
                .field("user", &login.as_ref().map(|(u, _)| u))
                .field("from", from)
                .field("to", to)
                .finish(),
        }
    }
}

/// Headers a webhook rule may not set: the request's own.
const RESERVED_HEADERS: [&str; 5] = [
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "x-silk-alert-id",
];

fn bad(msg: impl Into<String>) -> HubError {
    HubError::BadAlertRule(msg.into())
}

fn purpose(rule: &str, field: &str) -> String {
    format!("alert:{rule}:{field}")
}

/// Checks a rule request: name, events, scope, channel, templates, rate limit. The message
/// names the field.
pub(crate) fn check_rule(request: &AlertRuleRequest) -> Result<(), HubError> {
    silk_projects::pattern::check_name(&request.name).map_err(|e| bad(format!("name: {e}")))?;
    if request.events.is_empty() {
        return Err(bad("events: at least one event"));
    }
    if request.events.contains(&AlertEvent::Test) {
        return Err(bad(
            "events: `test` is sent by hand (POST /api/v1/alerts/rules/{name}/test), not subscribed to",
        ));
    }
    if request.job.is_some() && request.project.is_some() {
        return Err(bad(
            "job and project: a rule is about one job's runs or one project's builds, not both",
        ));
    }
    if let Some(job) = &request.job
        && !request.events.iter().any(|e| e.is_run_event())
    {
        return Err(bad(format!(
            "job: only run events can be about job {job:?}, and events lists none"
        )));
    }
    if request.project.is_some() && !request.events.contains(&AlertEvent::BuildFailed) {
        return Err(bad(
            "project: only build_failed is about a project, and events lacks it",
        ));
    }
    match &request.channel {
        ChannelSpec::Webhook(w) => check_webhook(w)?,
        ChannelSpec::Email(e) => check_email(e)?,
    }
    for (field, template) in [("subject", &request.subject), ("body", &request.body)] {
        if let Some(t) = template {
            env()
                .template_from_str(t)
                .map_err(|e| bad(format!("{field}: {}", template_error(&e))))?;
        }
    }
    if let Some(limit) = request.rate_limit
        && (limit.max == 0 || limit.per_ms < 1000)
    {
        return Err(bad(
            "rate_limit: max must be at least 1 and per_ms at least 1000",
        ));
    }
    Ok(())
}

fn check_webhook(w: &WebhookSpec) -> Result<(), HubError> {
    if let Some(url) = &w.url {
        origin(url)?;
    }
    for (name, value) in w.headers.iter().flatten() {
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(bad(format!(
                "channel.webhook.headers: {name:?} is set by the hub itself"
            )));
        }
        let ok_name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok();
        let ok_value = reqwest::header::HeaderValue::from_str(value).is_ok();
        if !ok_name || !ok_value {
            return Err(bad(format!(
                "channel.webhook.headers: {name:?} is not a valid header (name or value)"
            )));
        }
    }
    Ok(())
}

/// Scheme, host and port of a webhook URL; an error unless it is `http(s)://host…`.
fn origin(url: &str) -> Result<String, HubError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| bad(format!("channel.webhook.url: not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad(
            "channel.webhook.url: must be http://HOST… or https://HOST…",
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "channel.webhook.url: no user or password in the URL (use headers)",
        ));
    }
    Ok(format!("{}/…", parsed.origin().ascii_serialization()))
}

fn check_email(e: &EmailSpec) -> Result<(), HubError> {
    let host = e.host.trim();
    let ipv6 = host.parse::<std::net::Ipv6Addr>().is_ok();
    if host.is_empty() || host.contains(['/', ' ', '@']) || (host.contains(':') && !ipv6) {
        return Err(bad(format!(
            "channel.email.host: {:?} is not a host name (the port is `port`)",
            e.host
        )));
    }
    if e.security == SmtpSecurity::None && e.password.is_some() && !is_loopback(host) {
        return Err(bad(
            "channel.email.password: not sent in clear (security: none) to another machine; use starttls or tls",
        ));
    }
    if e.port == Some(0) {
        return Err(bad("channel.email.port: 0 is not a port"));
    }
    e.from
        .parse::<lettre::message::Mailbox>()
        .map_err(|err| bad(format!("channel.email.from: {:?}: {err}", e.from)))?;
    if e.to.is_empty() {
        return Err(bad("channel.email.to: at least one recipient"));
    }
    for to in &e.to {
        to.parse::<lettre::message::Mailbox>()
            .map_err(|err| bad(format!("channel.email.to: {to:?}: {err}")))?;
    }
    if e.password.is_some() && e.username.is_none() {
        return Err(bad("channel.email.password: given without username"));
    }
    Ok(())
}

/// Whether `host` is this machine (a password may go to it in clear).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The stored document of a checked request; secrets sealed. A secret the request leaves
/// out is taken from `old` (the rule it replaces); the webhook URL is required if there is
/// no old one.
pub(crate) fn seal_rule(
    request: &AlertRuleRequest,
    old: Option<&RuleDoc>,
    secrets: &SecretBox,
) -> Result<RuleDoc, HubError> {
    let name = &request.name;
    let channel = match (&request.channel, old.map(|o| &o.channel)) {
        (ChannelSpec::Webhook(w), old) => {
            let (old_url, old_origin, old_headers) = match old {
                Some(ChannelDoc::Webhook {
                    url,
                    origin,
                    headers,
                    ..
                }) => (Some(url), Some(origin), Some(headers)),
                _ => (None, None, None),
            };
            let (url, origin) = match (&w.url, old_url.zip(old_origin)) {
                (Some(url), _) => (secrets.seal(&purpose(name, "url"), url), origin(url)?),
                (None, Some((url, origin))) => (url.clone(), origin.clone()),
                (None, None) => return Err(bad("channel.webhook.url: required")),
            };
            // Kept headers go only where they went: a new host must be given them again.
            let moved = old_origin.is_some_and(|o| *o != origin);
            let headers = match (&w.headers, old_headers) {
                (None, Some(old)) if moved && !old.is_empty() => {
                    return Err(bad(
                        "channel.webhook.headers: give them again: the URL's host changed",
                    ));
                }
                (Some(h), _) => h
                    .iter()
                    .map(|(k, v)| {
                        let sealed = secrets.seal(&purpose(name, &format!("header:{k}")), v);
                        (k.clone(), sealed)
                    })
                    .collect(),
                (None, Some(old)) => old.clone(),
                (None, None) => BTreeMap::new(),
            };
            ChannelDoc::Webhook {
                url,
                origin,
                format: w.format,
                headers,
            }
        }
        (ChannelSpec::Email(e), old) => {
            let host = e.host.trim().to_owned();
            let port = e.port.unwrap_or(match e.security {
                SmtpSecurity::Starttls => 587,
                SmtpSecurity::Tls => 465,
                SmtpSecurity::None => 25,
            });
            // A kept password goes only where it went: same server, user and security.
            let old_password = match old {
                Some(ChannelDoc::Email {
                    host: h,
                    port: p,
                    security: s,
                    username: u,
                    password,
                    ..
                }) if *h == host && *p == port && *s == e.security && *u == e.username => {
                    password.clone()
                }
                _ => None,
            };
            let password = match &e.password {
                Some(p) => Some(secrets.seal(&purpose(name, "password"), p)),
                None if e.username.is_some() => old_password,
                None => None,
            };
            if e.username.is_some() && password.is_none() {
                return Err(bad(
                    "channel.email.password: required with username (a kept one is kept only for the same server, port, security and user)",
                ));
            }
            ChannelDoc::Email {
                host,
                port,
                security: e.security,
                username: e.username.clone(),
                password,
                from: e.from.clone(),
                to: e.to.clone(),
            }
        }
    };
    let mut events = request.events.clone();
    events.sort_unstable();
    events.dedup();
    Ok(RuleDoc {
        events,
        job: request.job.clone(),
        project: request.project.clone(),
        channel,
        subject: request.subject.clone(),
        body: request.body.clone(),
        rate_limit: request.rate_limit.unwrap_or(DEFAULT_RATE_LIMIT),
        enabled: request.enabled.unwrap_or(true),
    })
}

/// The channel of rule `name` with its secrets opened.
pub(crate) fn open_channel(
    name: &str,
    doc: &RuleDoc,
    secrets: &SecretBox,
) -> Result<Channel, HubError> {
    let open = |field: &str, sealed: &str| {
        secrets
            .open(&purpose(name, field), sealed)
            .map_err(|e| HubError::Secrets(format!("alert rule {name:?} {field}: {e}")))
    };
    Ok(match &doc.channel {
        ChannelDoc::Webhook {
            url,
            format,
            headers,
            ..
        } => Channel::Webhook {
            url: open("url", url)?,
            format: *format,
            headers: headers
                .iter()
                .map(|(k, v)| Ok((k.clone(), open(&format!("header:{k}"), v)?)))
                .collect::<Result<_, HubError>>()?,
        },
        ChannelDoc::Email {
            host,
            port,
            security,
            username,
            password,
            from,
            to,
        } => Channel::Email {
            host: host.clone(),
            port: *port,
            security: *security,
            login: match (username, password) {
                (Some(u), Some(p)) => Some((u.clone(), open("password", p)?)),
                _ => None,
            },
            from: from.clone(),
            to: to.clone(),
        },
    })
}

/// What the API shows of a rule.
pub(crate) fn rule_view(
    name: &str,
    doc: &RuleDoc,
    created_ms: u64,
    updated_ms: u64,
) -> AlertRuleView {
    let channel = match &doc.channel {
        ChannelDoc::Webhook {
            origin,
            format,
            headers,
            ..
        } => ChannelView::Webhook {
            url: origin.clone(),
            format: *format,
            headers: headers.keys().cloned().collect(),
        },
        ChannelDoc::Email {
            host,
            port,
            security,
            username,
            password,
            from,
            to,
        } => ChannelView::Email {
            host: host.clone(),
            port: *port,
            security: *security,
            username: username.clone(),
            has_password: password.is_some(),
            from: from.clone(),
            to: to.clone(),
        },
    };
    AlertRuleView {
        name: name.to_owned(),
        events: doc.events.clone(),
        job: doc.job.clone(),
        project: doc.project.clone(),
        channel,
        subject: doc.subject.clone(),
        body: doc.body.clone(),
        rate_limit: doc.rate_limit,
        enabled: doc.enabled,
        created_ms,
        updated_ms,
    }
}

/// Something that happened, with every event it is (most specific first).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Happening {
    pub(crate) events: Vec<AlertEvent>,
    /// Unique per happening: `run/{id}`, `agent/{id}/{ms}`, `build/{id}`.
    pub(crate) key: String,
    /// The job's name, for run events.
    pub(crate) job: Option<String>,
    /// The project, for build events.
    pub(crate) project: Option<String>,
    pub(crate) facts: BTreeMap<String, Value>,
}

/// The events of a run that has ended; `previous_failed`: whether the job's run before it
/// failed. None for a run with none (cancelled; succeeded with items and no failure before).
pub(crate) fn run_happening(
    record: &RunRecord,
    previous_failed: bool,
    ui_base: Option<&str>,
) -> Option<Happening> {
    let items = record.final_stats.as_ref().map(|s| s.items);
    let empty = items == Some(0) && record.feed.is_none();
    let reason = record.reason.as_deref().unwrap_or("");
    let mut events = Vec::new();
    match record.state {
        RunState::Failed => {
            if reason.starts_with(crate::dispatch::STALLED) {
                events.push(AlertEvent::RunStalled);
            }
            events.push(AlertEvent::RunFailed);
        }
        RunState::Succeeded if previous_failed && record.job_name.is_some() => {
            events.push(AlertEvent::RunRecovered)
        }
        RunState::Succeeded => {}
        _ => return None,
    }
    if empty {
        events.push(AlertEvent::RunEmpty);
    }
    if events.is_empty() {
        return None;
    }
    let mut facts = BTreeMap::new();
    facts.insert("run".into(), json!(record.id.as_str()));
    facts.insert("state".into(), json!(record.state.to_string()));
    if let Some(job) = &record.job_name {
        facts.insert("job".into(), json!(job));
    }
    facts.insert("tenant".into(), json!(record.tenant));
    facts.insert("spider".into(), json!(record.spider_name));
    if let Some(reason) = &record.reason {
        facts.insert("reason".into(), json!(reason));
    }
    if let Some(stats) = &record.final_stats {
        facts.insert("items".into(), json!(stats.items));
        facts.insert("pages".into(), json!(stats.success));
        facts.insert("failed_requests".into(), json!(stats.failed));
    }
    facts.insert("attempt".into(), json!(record.attempt));
    if let (Some(start), Some(end)) = (record.started_ms, record.finished_ms) {
        facts.insert("duration_s".into(), json!(end.saturating_sub(start) / 1000));
    }
    if let Some(end) = record.finished_ms {
        facts.insert("at_ms".into(), json!(end));
    }
    if let Some(base) = ui_base {
        facts.insert(
            "url".into(),
            json!(format!("{base}/ui/#/runs/{}", record.id)),
        );
    }
    Some(Happening {
        events,
        key: format!("run/{}", record.id),
        // As a rule names it: a name of the tenant `default`, else `TENANT/NAME`.
        job: record.job_name.as_ref().map(|name| {
            if record.tenant == silk_store::DEFAULT_TENANT {
                name.clone()
            } else {
                format!("{}/{name}", record.tenant)
            }
        }),
        project: None,
        facts,
    })
}

/// An agent that was live is dead: the last it sent (a registration or a heartbeat) was at
/// `last_heard_ms` (its clock); the hub saw it dead at `at_ms`.
pub(crate) fn agent_dead(agent: &str, last_heard_ms: u64, at_ms: u64, phi: f64) -> Happening {
    let mut facts = BTreeMap::new();
    facts.insert("agent".into(), json!(agent));
    facts.insert("at_ms".into(), json!(at_ms));
    facts.insert("last_heard_ms".into(), json!(last_heard_ms));
    if phi.is_finite() {
        facts.insert("phi".into(), json!((phi * 10.0).round() / 10.0));
    }
    Happening {
        events: vec![AlertEvent::AgentDead],
        key: format!("agent/{agent}/{last_heard_ms}"),
        job: None,
        project: None,
        facts,
    }
}

/// A version's build failed for good.
pub(crate) fn build_failed(
    project: &str,
    version: &str,
    build_id: &str,
    reason: &str,
    at_ms: u64,
) -> Happening {
    let mut facts = BTreeMap::new();
    facts.insert("project".into(), json!(project));
    facts.insert("version".into(), json!(version));
    facts.insert("build".into(), json!(build_id));
    facts.insert("reason".into(), json!(reason));
    facts.insert("at_ms".into(), json!(at_ms));
    Happening {
        events: vec![AlertEvent::BuildFailed],
        key: format!("build/{build_id}"),
        job: None,
        project: Some(project.to_owned()),
        facts,
    }
}

/// The event that heads rule `doc`'s delivery of `h`, if the rule matches it.
pub(crate) fn matches(doc: &RuleDoc, h: &Happening) -> Option<AlertEvent> {
    if !doc.enabled {
        return None;
    }
    if doc.job.is_some() && doc.job != h.job {
        return None;
    }
    if doc.project.is_some() && doc.project != h.project {
        return None;
    }
    h.events.iter().copied().find(|e| doc.events.contains(e))
}

/// The one-line title of an event.
pub(crate) fn title(event: AlertEvent, facts: &BTreeMap<String, Value>, rule: &str) -> String {
    let f = |k: &str| match facts.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "?".into(),
    };
    let run = || match facts.get("job") {
        Some(_) => format!("run {} of job {}", f("run"), f("job")),
        None => format!("run {}", f("run")),
    };
    match event {
        AlertEvent::RunFailed => format!("{} failed: {}", capital(&run()), f("reason")),
        AlertEvent::RunStalled => format!("{} stalled: {}", capital(&run()), f("reason")),
        AlertEvent::RunRecovered => format!(
            "Job {} recovered: run {} succeeded after a failure",
            f("job"),
            f("run")
        ),
        AlertEvent::RunEmpty => format!("{} ended {} with no items", capital(&run()), f("state")),
        AlertEvent::AgentDead => format!("Agent {} is dead", f("agent")),
        AlertEvent::BuildFailed => format!(
            "Build of {} {} failed: {}",
            f("project"),
            f("version"),
            f("reason")
        ),
        AlertEvent::Test => format!("Test alert of rule {rule}"),
    }
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|first| first.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// An alert as stored in the outbox (`silk_store::AlertRow::doc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AlertDoc {
    pub(crate) event: AlertEvent,
    pub(crate) title: String,
    pub(crate) facts: BTreeMap<String, Value>,
    #[serde(default)]
    pub(crate) subject: String,
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(default)]
    pub(crate) error: Option<String>,
}

/// The outbox row of rule `rule`'s delivery of `h`, headed by `event`; `counted`: whether it
/// counts against the rule's rate limit (not a test).
pub(crate) fn alert_row(
    rule: &str,
    doc: &RuleDoc,
    event: AlertEvent,
    h: &Happening,
    now_ms: u64,
    counted: bool,
) -> silk_store::AlertRow {
    let title = title(event, &h.facts, rule);
    let mut alert = AlertDoc {
        event,
        title,
        facts: h.facts.clone(),
        subject: String::new(),
        attempts: 0,
        error: None,
    };
    alert.subject = render(doc, &alert, rule, 0).0;
    silk_store::AlertRow {
        id: format!("{rule}/{}", h.key),
        rule: rule.to_owned(),
        state: DeliveryState::Pending.as_str().to_owned(),
        created_ms: now_ms,
        due_ms: now_ms,
        counted,
        doc: serde_json::to_value(&alert).unwrap_or(Value::Null),
    }
}

/// Makes a new delivery `suppressed` by its rule's rate limit (not sent, not counted).
pub(crate) fn suppress(row: &mut silk_store::AlertRow, limit: &RateLimit) {
    row.state = DeliveryState::Suppressed.as_str().to_owned();
    row.counted = false;
    if let Some(doc) = row.doc.as_object_mut() {
        doc.insert(
            "error".into(),
            json!(format!(
                "over the rule's rate limit ({} per {} s)",
                limit.max,
                limit.per_ms / 1000
            )),
        );
    }
}

/// The text of a `slack` webhook: `&`, `<` and `>` escaped as Slack wants (so no text from
/// a run makes a mention or a link), subject first.
pub(crate) fn slack_text(subject: &str, text: &str) -> String {
    format!("{subject}\n{text}")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The stored alert document of a row; a row that does not read is an error naming it.
pub(crate) fn alert_doc(row: &silk_store::AlertRow) -> Result<AlertDoc, HubError> {
    serde_json::from_value(row.doc.clone())
        .map_err(|e| HubError::Store(format!("alert {:?} unreadable: {e}", row.id)))
}

/// What the API shows of a delivery.
pub(crate) fn delivery_view(row: &silk_store::AlertRow) -> Result<DeliveryView, HubError> {
    let doc = alert_doc(row)?;
    let state = DeliveryState::parse(&row.state).ok_or_else(|| {
        HubError::Store(format!("alert {:?}: unknown state {:?}", row.id, row.state))
    })?;
    Ok(DeliveryView {
        id: row.id.clone(),
        rule: row.rule.clone(),
        event: doc.event,
        subject: doc.subject,
        state,
        attempts: doc.attempts,
        created_ms: row.created_ms,
        due_ms: row.due_ms,
        error: doc.error,
        facts: doc.facts,
    })
}

fn env() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env
}

fn template_error(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!(
            "line {line}: {}",
            e.detail().unwrap_or(&e.kind().to_string())
        ),
        None => e.to_string(),
    }
}

/// The subject and text of a delivery: the rule's templates over the event's facts (with
/// `event`, `title`, `rule` and `suppressed`), else the defaults. A template that fails
/// at send time (fuel, a bad filter call) falls back to the default, with the error in the
/// text.
pub(crate) fn render(
    doc: &RuleDoc,
    alert: &AlertDoc,
    rule: &str,
    suppressed: u64,
) -> (String, String) {
    let mut ctx: BTreeMap<String, Value> = alert.facts.clone();
    ctx.insert("event".into(), json!(alert.event.as_str()));
    ctx.insert("title".into(), json!(alert.title));
    ctx.insert("rule".into(), json!(rule));
    ctx.insert("suppressed".into(), json!(suppressed));
    let env = env();
    let run = |template: &str| -> Result<String, String> {
        let template = env
            .template_from_str(template)
            .map_err(|e| template_error(&e))?;
        let mut out = Bounded(Vec::new());
        template
            .render_captured_to(&ctx, &mut out)
            .map_err(|e| match e.kind() {
                minijinja::ErrorKind::WriteFailure => {
                    format!("its output is over {MAX_RENDERED} bytes")
                }
                _ => template_error(&e),
            })?;
        Ok(String::from_utf8_lossy(&out.0).into_owned())
    };
    let mut notes = Vec::new();
    let subject = match doc.subject.as_deref().map(run) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            notes.push(format!("(the rule's subject template failed: {e})"));
            default_subject(alert)
        }
        None => default_subject(alert),
    };
    let mut text = match doc.body.as_deref().map(run) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            notes.push(format!("(the rule's body template failed: {e})"));
            default_body(alert)
        }
        None => default_body(alert),
    };
    if suppressed > 0 && doc.body.is_none() {
        text.push_str(&format!(
            "\n({suppressed} other alert(s) of rule {rule} were suppressed by its rate limit in the last {} s)\n",
            doc.rate_limit.per_ms / 1000
        ));
    }
    for note in notes {
        text.push('\n');
        text.push_str(&note);
    }
    let subject = subject.lines().next().unwrap_or("").trim();
    (
        silk_core::text::prefix(subject, MAX_RENDERED).to_owned(),
        silk_core::text::prefix(&text, MAX_RENDERED).to_owned(),
    )
}

/// A buffer that refuses to grow past [`MAX_RENDERED`] bytes (a template's output stops
/// there, instead of taking the hub's memory).
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED {
            return Err(std::io::Error::other("template output too long"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn default_subject(alert: &AlertDoc) -> String {
    format!("[silk] {}", alert.title)
}

fn default_body(alert: &AlertDoc) -> String {
    let mut text = format!("{}\n\n", alert.title);
    text.push_str(&format!("event: {}\n", alert.event));
    for (k, v) in &alert.facts {
        match v {
            Value::String(s) => text.push_str(&format!("{k}: {s}\n")),
            v => text.push_str(&format!("{k}: {v}\n")),
        }
    }
    text
}

/// The JSON body of a `json` webhook.
pub(crate) fn webhook_json(
    id: &str,
    rule: &str,
    alert: &AlertDoc,
    subject: &str,
    text: &str,
) -> Value {
    json!({
        "id": id,
        "rule": rule,
        "event": alert.event,
        "title": alert.title,
        "subject": subject,
        "text": text,
        "facts": alert.facts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(channel: ChannelSpec) -> AlertRuleRequest {
        AlertRuleRequest {
            name: "ops".into(),
            events: vec![AlertEvent::RunFailed],
            job: None,
            project: None,
            channel,
            subject: None,
            body: None,
            rate_limit: None,
            enabled: None,
        }
    }

    fn webhook(url: &str) -> ChannelSpec {
        ChannelSpec::Webhook(WebhookSpec {
            url: Some(url.into()),
            format: WebhookFormat::Json,
            headers: Some(BTreeMap::from([(
                "Authorization".into(),
                "Bearer t0k".into(),
            )])),
        })
    }

    #[test]
    fn bad_rules_are_refused_naming_the_field() {
        let cases: Vec<(AlertRuleRequest, &str)> = vec![
            (
                AlertRuleRequest {
                    events: vec![],
                    ..request(webhook("https://h/x"))
                },
                "events",
            ),
            (
                AlertRuleRequest {
                    events: vec![AlertEvent::Test],
                    ..request(webhook("https://h/x"))
                },
                "events",
            ),
            (request(webhook("ftp://h/x")), "channel.webhook.url"),
            (request(webhook("https://u:p@h/x")), "channel.webhook.url"),
            (
                AlertRuleRequest {
                    subject: Some("{{ title".into()),
                    ..request(webhook("https://h/x"))
                },
                "subject: line 1",
            ),
            (
                AlertRuleRequest {
                    job: Some("j".into()),
                    events: vec![AlertEvent::AgentDead],
                    ..request(webhook("https://h/x"))
                },
                "job",
            ),
            (
                request(ChannelSpec::Email(EmailSpec {
                    host: "smtp.example".into(),
                    port: None,
                    security: SmtpSecurity::Starttls,
                    username: None,
                    password: None,
                    from: "not an address".into(),
                    to: vec!["ops@example.com".into()],
                })),
                "channel.email.from",
            ),
            (
                AlertRuleRequest {
                    rate_limit: Some(RateLimit {
                        max: 0,
                        per_ms: 60_000,
                    }),
                    ..request(webhook("https://h/x"))
                },
                "rate_limit",
            ),
        ];
        for (req, field) in cases {
            let err = check_rule(&req).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        check_rule(&request(webhook("https://hooks.example/T/B/secret"))).unwrap();
    }

    #[test]
    fn secrets_are_sealed_shown_nowhere_and_kept_when_left_out() {
        let secrets = SecretBox::new([7; 32], "test");
        let req = request(webhook("https://hooks.example/T/B/secret"));
        let doc = seal_rule(&req, None, &secrets).unwrap();
        let stored = serde_json::to_string(&doc).unwrap();
        assert!(
            !stored.contains("secret") && !stored.contains("t0k"),
            "{stored}"
        );
        let view = serde_json::to_string(&rule_view("ops", &doc, 1, 2)).unwrap();
        assert!(!view.contains("secret") && !view.contains("t0k"), "{view}");
        assert!(view.contains("https://hooks.example/…"), "{view}");
        // A replacement without the URL and headers keeps them.
        let again = AlertRuleRequest {
            channel: ChannelSpec::Webhook(WebhookSpec {
                url: None,
                format: WebhookFormat::Slack,
                headers: None,
            }),
            ..req
        };
        let doc = seal_rule(&again, Some(&doc), &secrets).unwrap();
        match open_channel("ops", &doc, &secrets).unwrap() {
            Channel::Webhook {
                url,
                format,
                headers,
            } => {
                assert_eq!(url, "https://hooks.example/T/B/secret");
                assert_eq!(format, WebhookFormat::Slack);
                assert_eq!(headers["Authorization"], "Bearer t0k");
            }
            other => panic!("{other:?}"),
        }
        // Sealed for one rule, it does not open as another's.
        assert!(open_channel("other", &doc, &secrets).is_err());
    }

    #[test]
    fn kept_secrets_go_only_where_they_went() {
        let secrets = SecretBox::new([7; 32], "test");
        let req = request(webhook("https://hooks.example/T/B/secret"));
        let doc = seal_rule(&req, None, &secrets).unwrap();
        // Another host without the headers again: refused (they would follow it there).
        let moved = AlertRuleRequest {
            channel: ChannelSpec::Webhook(WebhookSpec {
                url: Some("https://elsewhere.example/x".into()),
                format: WebhookFormat::Json,
                headers: None,
            }),
            ..req.clone()
        };
        let err = seal_rule(&moved, Some(&doc), &secrets)
            .unwrap_err()
            .to_string();
        assert!(err.contains("channel.webhook.headers"), "{err}");
        // An SMTP password is kept for the same server and user only.
        let email = |host: &str, password: Option<&str>| {
            request(ChannelSpec::Email(EmailSpec {
                host: host.into(),
                port: None,
                security: SmtpSecurity::Starttls,
                username: Some("u".into()),
                password: password.map(str::to_owned),
                from: "silk@example.com".into(),
                to: vec!["ops@example.com".into()],
            }))
        };
        let doc = seal_rule(&email("smtp.example", Some("pw")), None, &secrets).unwrap();
        assert!(seal_rule(&email("smtp.example", None), Some(&doc), &secrets).is_ok());
        let err = seal_rule(&email("smtp.evil", None), Some(&doc), &secrets)
            .unwrap_err()
            .to_string();
        assert!(err.contains("channel.email.password"), "{err}");
        // No password in clear to another machine; a header of the hub's own is refused.
        let mut clear = email("smtp.example", Some("pw"));
        if let ChannelSpec::Email(e) = &mut clear.channel {
            e.security = SmtpSecurity::None;
        }
        let err = check_rule(&clear).unwrap_err().to_string();
        assert!(err.contains("in clear"), "{err}");
        if let ChannelSpec::Email(e) = &mut clear.channel {
            e.host = "127.0.0.1".into();
        }
        check_rule(&clear).unwrap();
        let mut own = request(webhook("https://h/x"));
        own.channel = ChannelSpec::Webhook(WebhookSpec {
            url: Some("https://h/x".into()),
            format: WebhookFormat::Json,
            headers: Some(BTreeMap::from([(
                "Content-Type".into(),
                "text/plain".into(),
            )])),
        });
        let err = check_rule(&own).unwrap_err().to_string();
        assert!(err.contains("set by the hub"), "{err}");
        // Nothing secret in a Debug print.
        let debug = format!(
            "{:?} {:?}",
            req,
            open_channel("ops", &seal_rule(&req, None, &secrets).unwrap(), &secrets).unwrap()
        );
        assert!(
            !debug.contains("secret") && !debug.contains("t0k"),
            "{debug}"
        );
    }

    #[test]
    fn slack_text_makes_no_mention_and_output_is_bounded() {
        assert_eq!(
            slack_text("a <!channel>", "x & y"),
            "a &lt;!channel&gt;\nx &amp; y"
        );
        let secrets = SecretBox::new([7; 32], "test");
        let mut req = request(webhook("https://h/x"));
        req.body = Some("{% for i in range(9000) %}{{ \"x\" * 1000 }}{% endfor %}".into());
        let doc = seal_rule(&req, None, &secrets).unwrap();
        let alert = AlertDoc {
            event: AlertEvent::RunFailed,
            title: "t".into(),
            facts: BTreeMap::new(),
            subject: String::new(),
            attempts: 0,
            error: None,
        };
        let (_, text) = render(&doc, &alert, "ops", 0);
        assert!(text.len() < 2 * MAX_RENDERED, "{}", text.len());
        assert!(
            text.contains("over 65536 bytes"),
            "{}",
            &text[..200.min(text.len())]
        );
    }

    #[test]
    fn templates_render_the_facts_and_fall_back_when_they_fail() {
        let secrets = SecretBox::new([7; 32], "test");
        let mut req = request(webhook("https://h/x"));
        req.subject = Some("{{ job }} #{{ attempt }}: {{ event }}".into());
        req.body = Some("{% for i in range(100000) %}{{ i }}{% endfor %}".into());
        let doc = seal_rule(&req, None, &secrets).unwrap();
        let mut facts = BTreeMap::new();
        facts.insert("job".into(), json!("shop"));
        facts.insert("attempt".into(), json!(2));
        let h = Happening {
            events: vec![AlertEvent::RunFailed],
            key: "run/r1".into(),
            job: Some("shop".into()),
            project: None,
            facts,
        };
        assert_eq!(matches(&doc, &h), Some(AlertEvent::RunFailed));
        let row = alert_row("ops", &doc, AlertEvent::RunFailed, &h, 5, true);
        assert_eq!(row.id, "ops/run/r1");
        let alert = alert_doc(&row).unwrap();
        let (subject, text) = render(&doc, &alert, "ops", 0);
        assert_eq!(subject, "shop #2: run_failed");
        // The loop runs out of fuel: the default body, with why.
        assert!(text.contains("job: shop"), "{text}");
        assert!(text.contains("body template failed"), "{text}");
    }

    fn ended(state: &str, reason: Option<&str>, items: u64, job: Option<&str>) -> RunRecord {
        serde_json::from_value(json!({
            "id": "r1", "spider": "name: s\n", "spider_name": "s", "strategy": "random",
            "on_agent_lost": "fail", "max_pending": 10, "stall_timeout_ms": 30000,
            "state": state, "reason": reason, "created_ms": 1, "started_ms": 1000,
            "finished_ms": 61_000, "final_stats": {"items": items, "success": 3},
            "job_id": job.map(|_| "j1"), "job_name": job,
        }))
        .unwrap()
    }

    #[test]
    fn a_runs_end_is_every_event_it_is_most_specific_first() {
        let stalled = format!(
            "{}no live agent for 30 s (stall_timeout)",
            crate::dispatch::STALLED
        );
        let cases: Vec<(RunRecord, bool, Vec<AlertEvent>)> = vec![
            (
                ended("failed", Some(&stalled), 0, Some("shop")),
                false,
                vec![
                    AlertEvent::RunStalled,
                    AlertEvent::RunFailed,
                    AlertEvent::RunEmpty,
                ],
            ),
            (
                ended("failed", Some("every request failed"), 2, None),
                false,
                vec![AlertEvent::RunFailed],
            ),
            (
                ended("succeeded", None, 2, Some("shop")),
                true,
                vec![AlertEvent::RunRecovered],
            ),
            (
                ended("succeeded", None, 0, Some("shop")),
                true,
                vec![AlertEvent::RunRecovered, AlertEvent::RunEmpty],
            ),
            // An ad-hoc run has no job to recover.
            (ended("succeeded", None, 2, None), true, vec![]),
            (ended("succeeded", None, 2, Some("shop")), false, vec![]),
            (
                ended("cancelled", Some("cancelled by a user"), 0, Some("shop")),
                true,
                vec![],
            ),
        ];
        for (record, previous_failed, want) in cases {
            let got = run_happening(&record, previous_failed, Some("http://hub:7700"))
                .map(|h| h.events)
                .unwrap_or_default();
            assert_eq!(got, want, "{:?} {:?}", record.state, record.reason);
        }
        let h = run_happening(
            &ended("failed", Some("x"), 1, Some("shop")),
            false,
            Some("http://hub:7700"),
        )
        .unwrap();
        assert_eq!(h.key, "run/r1");
        assert_eq!(h.facts["url"], "http://hub:7700/ui/#/runs/r1");
        assert_eq!(h.facts["duration_s"], 60);
        assert_eq!(
            title(AlertEvent::RunFailed, &h.facts, "ops"),
            "Run r1 of job shop failed: x"
        );
    }

    #[test]
    fn a_rule_matches_its_job_and_the_most_specific_event_heads() {
        let secrets = SecretBox::new([7; 32], "test");
        let mut req = request(webhook("https://h/x"));
        req.events = vec![
            AlertEvent::RunEmpty,
            AlertEvent::RunFailed,
            AlertEvent::RunStalled,
        ];
        req.job = Some("shop".into());
        let doc = seal_rule(&req, None, &secrets).unwrap();
        let mut h = Happening {
            events: vec![
                AlertEvent::RunStalled,
                AlertEvent::RunFailed,
                AlertEvent::RunEmpty,
            ],
            key: "run/r1".into(),
            job: Some("shop".into()),
            project: None,
            facts: BTreeMap::new(),
        };
        assert_eq!(matches(&doc, &h), Some(AlertEvent::RunStalled));
        h.job = Some("other".into());
        assert_eq!(matches(&doc, &h), None);
        // Another tenant's job of the same name is `TENANT/NAME`: not this rule's.
        h.job = Some("acme/shop".into());
        assert_eq!(matches(&doc, &h), None);
        h.job = None;
        assert_eq!(matches(&doc, &h), None);
        let dead = agent_dead("a1", 8, 9, 12.34);
        assert_eq!(matches(&doc, &dead), None);
    }
}
