//! Alerts on the wire: notification rules and their deliveries.
//!
//! A *rule* says which [`AlertEvent`]s (of one job, one project, or all) are sent where: a
//! webhook (JSON, or the `{"text": …}` form Slack, Mattermost and Rocket.Chat take) or
//! email over SMTP, with optional templates, and a rate limit. Every event a rule matches
//! becomes one *delivery*, stored before it is sent and retried until it is sent, so it
//! reaches the channel at least once, across hub restarts.
//!
//! [`AlertRuleRequest`] is the body of `POST /api/v1/alerts/rules` and `PUT
//! /api/v1/alerts/rules/{name}`; [`AlertRuleView`] is what the API shows (never the webhook
//! URL's path or query, header values or the SMTP password: they are stored sealed).
//! [`DeliveryView`] is one delivery.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What happened.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AlertEvent {
    /// A run failed (stalled ones included).
    RunFailed,
    /// A run of a job succeeded, and the job's run before it had failed.
    RunRecovered,
    /// A run failed because nothing came back for its stall timeout.
    RunStalled,
    /// A run ended (succeeded or failed) without an item. Fed runs are left out.
    RunEmpty,
    /// An agent that was live stopped answering (its failure detector says dead).
    AgentDead,
    /// A project's version failed to build (for good: not an interrupted build queued again).
    BuildFailed,
    /// A test sent by hand (`POST /api/v1/alerts/rules/{name}/test`); no rule subscribes to it.
    Test,
}

impl AlertEvent {
    /// Every event a rule may subscribe to.
    pub const SUBSCRIBABLE: [AlertEvent; 6] = [
        AlertEvent::RunFailed,
        AlertEvent::RunRecovered,
        AlertEvent::RunStalled,
        AlertEvent::RunEmpty,
        AlertEvent::AgentDead,
        AlertEvent::BuildFailed,
    ];

    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertEvent::RunFailed => "run_failed",
            AlertEvent::RunRecovered => "run_recovered",
            AlertEvent::RunStalled => "run_stalled",
            AlertEvent::RunEmpty => "run_empty",
            AlertEvent::AgentDead => "agent_dead",
            AlertEvent::BuildFailed => "build_failed",
            AlertEvent::Test => "test",
        }
    }

    /// Whether it is about a run (and so has a job, if the run has one).
    pub fn is_run_event(self) -> bool {
        matches!(
            self,
            AlertEvent::RunFailed
                | AlertEvent::RunRecovered
                | AlertEvent::RunStalled
                | AlertEvent::RunEmpty
        )
    }
}

impl std::fmt::Display for AlertEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of a webhook.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// The event as JSON: `id`, `rule`, `event`, `subject`, `text` and the event's facts.
    #[default]
    Json,
    /// `{"text": subject + "\n" + text}`: Slack's incoming webhooks (and Mattermost's,
    /// Rocket.Chat's, Discord's `/slack` endpoint).
    Slack,
}

/// A webhook channel (`POST` of the body; a 2xx answer is delivered). Its `Debug` shows no
/// secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    /// `http://…` or `https://…`. Stored sealed (a Slack URL is its token); required at
    /// create, kept when a replacement leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `json` (default) or `slack`.
    #[serde(default)]
    pub format: WebhookFormat,
    /// Extra request headers (e.g. `Authorization`); values stored sealed. A replacement
    /// that leaves `headers` out keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// STARTTLS, required (default; port 587).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// Plain text (port 25; only for a relay on a trusted network).
    None,
}

/// An email channel: SMTP. Its `Debug` shows no password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailSpec {
    /// The SMTP server's host name or address.
    pub host: String,
    /// Its port (default: 587 for `starttls`, 465 for `tls`, 25 for `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `starttls` (default), `tls` or `none`.
    #[serde(default)]
    pub security: SmtpSecurity,
    /// The SMTP user, if the server wants a login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Its password (stored sealed, never shown; a replacement that leaves it out keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The sender, `name@host` or `Name <name@host>`.
    pub from: String,
    /// The recipients (at least one).
    pub to: Vec<String>,
}

impl std::fmt::Debug for WebhookSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSpec")
            .field("url", &self.url.as_ref().map(|_| "***"))
            .field("format", &self.format)
            .field(
                "headers",
                &self.headers.as_ref().map(|h| h.keys().collect::<Vec<_>>()),
            )
            .finish()
    }
}

impl std::fmt::Debug for EmailSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSpec")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("from", &self.from)
            .field("to", &self.to)
            .finish()
    }
}

/// Where a rule's alerts go: `{"webhook": {…}}` or `{"email": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ChannelSpec {
    /// An HTTP `POST`.
    Webhook(WebhookSpec),
    /// An email.
    Email(EmailSpec),
}

/// At most `max` deliveries are made per `per_ms` (counted when the event happens; tests do
/// not count); the others are `suppressed` (listed, not sent), and the next one sent says how
/// many were in the window (with the default body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Deliveries per window (at least 1).
    pub max: u32,
    /// The window, ms (at least 1000).
    pub per_ms: u64,
}

/// The rate limit of a rule that sets none: 20 an hour.
pub const DEFAULT_RATE_LIMIT: RateLimit = RateLimit {
    max: 20,
    per_ms: 3_600_000,
};

/// A rule to create or to put in place of one (`POST /api/v1/alerts/rules`, `PUT
/// /api/v1/alerts/rules/{name}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleRequest {
    /// A safe identifier: lowercase letters, digits, `-` and `_`, at most 63 characters.
    pub name: String,
    /// What it is sent for (at least one; not `test`).
    pub events: Vec<AlertEvent>,
    /// Only runs of this job: `TENANT/NAME`, or a name of the tenant `default`; none: every
    /// job's and ad-hoc runs. A rule with a job matches only run events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Only builds of this project; none: every project's. A rule with a project matches
    /// only `build_failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Where to.
    pub channel: ChannelSpec,
    /// The subject template (email subject; first line of a chat message). Jinja syntax
    /// (minijinja) over the event's fields; default `[silk] {{ title }}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The body template; default: the event's facts, one per line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Default 20 an hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Default true; a disabled rule matches nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// A channel as the API shows it: no secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelView {
    /// A webhook.
    Webhook {
        /// Scheme, host and port only (`https://hooks.slack.com/…`).
        url: String,
        /// The body's format.
        format: WebhookFormat,
        /// The names of its extra headers.
        headers: Vec<String>,
    },
    /// Email over SMTP.
    Email {
        /// The server.
        host: String,
        /// Its port.
        port: u16,
        /// How the connection is secured.
        security: SmtpSecurity,
        /// The SMTP user.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
        /// Whether a password is stored.
        has_password: bool,
        /// The sender.
        from: String,
        /// The recipients.
        to: Vec<String>,
    },
}

/// A rule as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertRuleView {
    /// Its name.
    pub name: String,
    /// What it is sent for.
    pub events: Vec<AlertEvent>,
    /// Only runs of this job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Only builds of this project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Where to (no secrets).
    pub channel: ChannelView,
    /// The subject template, if not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The body template, if not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The rate limit.
    pub rate_limit: RateLimit,
    /// Whether it matches events.
    pub enabled: bool,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Last changed.
    pub updated_ms: u64,
}

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// To be sent (again) at `due_ms`.
    Pending,
    /// The channel took it.
    Sent,
    /// Every attempt failed (`error` says the last reason).
    Failed,
    /// Over the rule's rate limit: not sent.
    Suppressed,
    /// Its rule was deleted or disabled before it was sent.
    Dropped,
}

impl DeliveryState {
    /// Its name on the wire (and in the store).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Sent => "sent",
            DeliveryState::Failed => "failed",
            DeliveryState::Suppressed => "suppressed",
            DeliveryState::Dropped => "dropped",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        [
            DeliveryState::Pending,
            DeliveryState::Sent,
            DeliveryState::Failed,
            DeliveryState::Suppressed,
            DeliveryState::Dropped,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// One delivery of one event by one rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// Unique (`{rule}/{event key}`); sent as `X-Silk-Alert-Id` and in the Message-ID, so a
    /// receiver can drop a repeat.
    pub id: String,
    /// The rule.
    pub rule: String,
    /// What happened.
    pub event: AlertEvent,
    /// The rendered subject.
    pub subject: String,
    /// Where it is.
    pub state: DeliveryState,
    /// Attempts made.
    pub attempts: u32,
    /// When the event was noticed, ms since the epoch.
    pub created_ms: u64,
    /// Pending: when the next attempt is due; otherwise when it got its state.
    pub due_ms: u64,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The event's facts (job, run, state, reason, items, agent, project, version, …).
    pub facts: BTreeMap<String, serde_json::Value>,
}

/// Which deliveries `GET /api/v1/alerts/deliveries` lists, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesParams {
    /// Only this rule's.
    pub rule: Option<String>,
    /// Only deliveries in this state.
    pub state: Option<DeliveryState>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<u32>,
}

impl DeliveriesParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "rule", self.rule.as_ref());
        crate::push_param(
            &mut p,
            "state",
            self.state.map(DeliveryState::as_str).as_ref(),
        );
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        p
    }
}
