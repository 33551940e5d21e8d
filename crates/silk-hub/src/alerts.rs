//! The alerts service: what happened becomes deliveries in the store's outbox, and the
//! outbox is sent.
//!
//! - A run's end is noticed from the store: every ended run not yet looked at
//!   (`AlertStore::unnoticed_runs`) is matched against the rules, its deliveries inserted,
//!   then it is marked looked at. A run that ended just before its hub died is noticed by the
//!   next hub; one noticed twice inserts nothing twice (a delivery's id is the rule and the
//!   run). The hub that holds the store lease `alerts` does this.
//! - An agent's death (`presence`) and a failed build (`builds`) are matched where they
//!   happen ([`emit`]), right after the state change is stored (a failed insert is retried).
//! - A rule's rate limit is applied when a delivery is made (admission): over it, the
//!   delivery is stored `suppressed` and not sent; the next one sent says how many were
//!   suppressed in the window. Test deliveries do not count.
//! - Deliveries are sent by the lease holder, a few at once. Each is *claimed* first (its due
//!   time moved past the send), sent within `send_timeout_ms`, and settled only while the
//!   claim holds: no two hubs send one delivery at once, and a sender that dies mid-send
//!   leaves it to be sent again when the claim runs out (at least once; receivers get the
//!   same `X-Silk-Alert-Id` / Message-ID). A failed attempt is retried after
//!   `retry_delay_ms`, doubling up to `retry_max_delay_ms`, until `max_attempts`; an answer
//!   that says retrying is useless (an HTTP 4xx other than 408/425/429, a permanent SMTP
//!   error) fails the delivery at once.

use crate::alert::{self, AlertDoc, Channel, Happening, RuleDoc};
use crate::error::HubError;
use crate::state::HubCore;
use futures::StreamExt as _;
use silk_api::alerts::{AlertEvent, DeliveryState, SmtpSecurity, WebhookFormat};
use silk_store::{AlertFilter, AlertRow, RunFilter};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The store lease of the hub that notices ended runs and sends.
pub(crate) const ALERTS_LEASE: &str = "alerts";

/// Ended runs looked at per store call.
const NOTICE_BATCH: u32 = 100;

/// Due deliveries taken per store call.
const DELIVERY_BATCH: u32 = 32;

/// Deliveries sent at once.
const SENDS_AT_ONCE: usize = 8;

/// A claim lasts the send timeout and this much more, ms.
const CLAIM_MARGIN_MS: u64 = 10_000;

/// How often retention runs, ms.
const RETENTION_EVERY_MS: u64 = 3_600_000;

/// Attempts at storing the deliveries of something that happened here.
const EMIT_ATTEMPTS: u32 = 5;

/// The most of an error answer's body quoted in a delivery's error, bytes.
const ANSWER_QUOTE: usize = 200;

/// Notices and sends until the hub stops.
pub(crate) async fn alert_loop(shared: Arc<HubCore>) {
    let mut stop = shared.stop.subscribe();
    let settings = shared.config.alerts.clone();
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_millis(settings.send_timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("silk/", env!("CARGO_PKG_VERSION"), " alerts"))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::error!(error = %e, "alerts: no HTTP client; alerts are not sent");
            return;
        }
    };
    let mut last_retention = 0;
    loop {
        let wait_ms = match pass(&shared, &http, &stop, &mut last_retention).await {
            Ok(ms) => ms,
            Err(e) => {
                tracing::warn!(error = %e, "alerts: pass failed; retrying");
                settings.poll_ms
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = shared.alerts_wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
}

/// One pass: notice ended runs, send what is due (noticing again between batches),
/// retention. How long to wait, ms.
async fn pass(
    shared: &HubCore,
    http: &reqwest::Client,
    stop: &tokio::sync::watch::Receiver<bool>,
    last_retention: &mut u64,
) -> Result<u64, HubError> {
    let poll_ms = shared.config.alerts.poll_ms;
    loop {
        if *stop.borrow() || !hold(shared).await? {
            return Ok(poll_ms);
        }
        if let Err(e) = notice_runs(shared).await {
            tracing::warn!(error = %e, "alerts: ended runs not looked at; sending what is due");
        }
        let due = shared
            .store
            .due_alerts(shared.clock.now_ms(), DELIVERY_BATCH)
            .await?;
        let full = due.len() == DELIVERY_BATCH as usize;
        // The rules are read once per batch, not once per delivery.
        let rules = if due.is_empty() {
            BTreeMap::new()
        } else {
            stored_rules(shared).await?
        };
        let rules = &rules;
        let mut sends = futures::stream::iter(due)
            .map(|row| {
                let id = row.id.clone();
                async move { (id, deliver(shared, http, rules, row).await) }
            })
            .buffer_unordered(SENDS_AT_ONCE);
        while let Some((id, done)) = sends.next().await {
            if let Err(e) = done {
                tracing::warn!(alert = %id, error = %e, "alerts: delivery not settled (it is sent again later)");
            }
        }
        if !full {
            break;
        }
    }
    let now = shared.clock.now_ms();
    if now.saturating_sub(*last_retention) >= RETENTION_EVERY_MS {
        *last_retention = now;
        let before = now.saturating_sub(shared.config.alerts.retention_ms);
        let gone = shared.store.delete_alerts_before(before).await?;
        if gone > 0 {
            tracing::info!(deliveries = gone, "alerts: old deliveries deleted");
        }
    }
    let next = shared.store.next_alert_due().await?;
    let now = shared.clock.now_ms();
    Ok(next.map_or(poll_ms, |due| due.saturating_sub(now).min(poll_ms)))
}

/// Takes or renews the lease `alerts`; whether this hub holds it.
async fn hold(shared: &HubCore) -> Result<bool, HubError> {
    Ok(shared
        .store
        .acquire_lease(
            ALERTS_LEASE,
            shared.hub_id.as_str(),
            shared.config.ownership_ttl_ms,
        )
        .await?)
}

/// A rule as stored: its document, or why it does not read.
type StoredRule = Result<RuleDoc, String>;

/// Every rule as stored, by name: its document, or why it does not read.
async fn stored_rules(shared: &HubCore) -> Result<BTreeMap<String, StoredRule>, HubError> {
    let rows = shared.store.list_alert_rules().await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let rule = read_rule(&row.name, row.doc);
            (row.name, rule)
        })
        .collect())
}

/// The rules, by name. An unreadable one matches nothing (and is logged).
async fn rules(shared: &HubCore) -> Result<Vec<(String, RuleDoc)>, HubError> {
    let stored = stored_rules(shared).await?;
    Ok(stored
        .into_iter()
        .filter_map(|(name, rule)| match rule {
            Ok(doc) => Some((name, doc)),
            Err(e) => {
                tracing::warn!(rule = %name, error = %e, "alerts: rule unreadable; it matches nothing");
                None
            }
        })
        .collect())
}

fn read_rule(name: &str, doc: serde_json::Value) -> StoredRule {
    serde_json::from_value(doc).map_err(|e| format!("alert rule {name:?} is unreadable: {e}"))
}

/// Inserts the deliveries of `h` for the rules that match it, each admitted or suppressed
/// by its rule's rate limit; how many were new.
async fn enqueue(
    shared: &HubCore,
    rules: &[(String, RuleDoc)],
    h: &Happening,
) -> Result<u64, HubError> {
    let now = shared.clock.now_ms();
    let mut rows = Vec::new();
    for (name, doc) in rules {
        let Some(event) = alert::matches(doc, h) else {
            continue;
        };
        let admitted = shared
            .store
            .count_alerts(&AlertFilter {
                rule: Some(name.clone()),
                counted: Some(true),
                since_ms: Some(now.saturating_sub(doc.rate_limit.per_ms)),
                ..AlertFilter::default()
            })
            .await?;
        let mut row = alert::alert_row(name, doc, event, h, now, true);
        if admitted >= u64::from(doc.rate_limit.max) {
            alert::suppress(&mut row, &doc.rate_limit);
            tracing::info!(alert = %row.id, "alerts: suppressed by its rule's rate limit");
        }
        rows.push(row);
    }
    Ok(shared.store.insert_alerts(&rows).await?)
}

/// Matches something that happened here (an agent's death, a failed build) against the
/// rules and stores its deliveries (retried a few times if the store fails); the sender is
/// woken. It never fails what it reports on: a last failure is logged.
pub(crate) async fn emit(shared: &HubCore, h: Happening) {
    let mut wait = Duration::from_millis(200);
    for attempt in 1..=EMIT_ATTEMPTS {
        let done = async {
            let rules = rules(shared).await?;
            enqueue(shared, &rules, &h).await
        };
        match done.await {
            Ok(n) => {
                if n > 0 {
                    tracing::debug!(key = %h.key, deliveries = n, "alerts: queued");
                    shared.alerts_wake.notify_one();
                }
                return;
            }
            Err(e) if attempt < EMIT_ATTEMPTS => {
                tracing::warn!(key = %h.key, error = %e, "alerts: not queued; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => {
                tracing::error!(key = %h.key, error = %e, "alerts: not queued; this event is not alerted")
            }
        }
    }
}

/// Looks at every ended run not looked at yet.
async fn notice_runs(shared: &HubCore) -> Result<(), HubError> {
    let mut rules_cache: Option<Vec<(String, RuleDoc)>> = None;
    loop {
        let runs = shared.store.unnoticed_runs(NOTICE_BATCH).await?;
        if runs.is_empty() {
            return Ok(());
        }
        if rules_cache.is_none() {
            rules_cache = Some(rules(shared).await?);
        }
        let rules = rules_cache.as_deref().unwrap_or_default();
        for row in runs {
            let id = row.id.clone();
            match crate::repo::record_of(row) {
                Ok(record) => {
                    let previous_failed = record.state == crate::run::RunState::Succeeded
                        && previous_failed(shared, &record).await?;
                    let ui = shared.config.public_url.as_deref();
                    if let Some(h) = alert::run_happening(&record, previous_failed, ui) {
                        enqueue(shared, rules, &h).await?;
                    }
                }
                Err(e) => {
                    tracing::warn!(run = %id, error = %e, "alerts: ended run unreadable; no alert")
                }
            }
            shared.store.mark_run_noticed(&id).await?;
        }
        shared.alerts_wake.notify_one();
    }
}

/// Whether the job's ended run made before `record` failed.
async fn previous_failed(
    shared: &HubCore,
    record: &crate::run::RunRecord,
) -> Result<bool, HubError> {
    let Some(job_id) = &record.job_id else {
        return Ok(false);
    };
    let filter = RunFilter {
        job_id: Some(job_id.clone()),
        tenant: None,
        states: vec!["succeeded".into(), "failed".into()],
        limit: Some(50),
        newest_first: true,
    };
    let runs = shared.store.list_runs(&filter).await?;
    let before = runs
        .iter()
        .find(|r| (r.created_ms, r.id.as_str()) < (record.created_ms, record.id.as_str()));
    Ok(before.is_some_and(|r| r.state == "failed"))
}

/// Why a send failed, and whether trying again can help.
struct SendError {
    message: String,
    permanent: bool,
}

impl SendError {
    fn retry(message: String) -> Self {
        Self {
            message,
            permanent: false,
        }
    }
}

/// Claims one due delivery and sends it, or drops or fails it; stores what became of it
/// while the claim holds.
async fn deliver(
    shared: &HubCore,
    http: &reqwest::Client,
    rules: &BTreeMap<String, StoredRule>,
    mut row: AlertRow,
) -> Result<(), HubError> {
    let settings = &shared.config.alerts;
    let claimed = shared
        .clock
        .now_ms()
        .saturating_add(settings.send_timeout_ms)
        .saturating_add(CLAIM_MARGIN_MS);
    if !shared
        .store
        .claim_alert(&row.id, row.due_ms, claimed)
        .await?
    {
        return Ok(()); // Another hub took it, or it is settled.
    }
    let now = shared.clock.now_ms();
    let mut doc = match alert::alert_doc(&row) {
        Ok(doc) => doc,
        Err(e) => {
            tracing::warn!(alert = %row.id, error = %e, "alerts: delivery unreadable; failed");
            row.state = DeliveryState::Failed.as_str().into();
            row.due_ms = now;
            shared.store.settle_alert(&row, claimed).await?;
            return Ok(());
        }
    };
    let is_test = doc.event == AlertEvent::Test;
    let rule = match rules.get(&row.rule) {
        Some(Ok(rule)) if rule.enabled || is_test => rule,
        Some(Err(e)) => {
            let e = e.clone();
            tracing::warn!(alert = %row.id, error = %e, "alerts: its rule is unreadable; retrying");
            doc.attempts += 1;
            return retry_or_fail(shared, row, doc, SendError::retry(e), claimed).await;
        }
        _ => {
            doc.error = Some("its rule was deleted or disabled before it was sent".into());
            return settle(shared, row, doc, DeliveryState::Dropped, now, claimed).await;
        }
    };
    let suppressed = if is_test {
        0
    } else {
        shared
            .store
            .count_alerts(&AlertFilter {
                rule: Some(row.rule.clone()),
                state: Some(DeliveryState::Suppressed.as_str().into()),
                since_ms: Some(now.saturating_sub(rule.rate_limit.per_ms)),
                ..AlertFilter::default()
            })
            .await?
    };
    let (subject, text) = alert::render(rule, &doc, &row.rule, suppressed);
    let timeout = Duration::from_millis(settings.send_timeout_ms);
    let sent = match alert::open_channel(&row.rule, rule, &shared.builds.secrets) {
        Ok(channel) => {
            let outgoing = Outgoing {
                id: &row.id,
                rule: &row.rule,
                doc: &doc,
                subject: &subject,
                text: &text,
            };
            match tokio::time::timeout(timeout, send(http, &channel, &outgoing)).await {
                Ok(sent) => sent,
                Err(_) => Err(SendError::retry(format!(
                    "no answer within {} s",
                    timeout.as_secs()
                ))),
            }
        }
        Err(e) => Err(SendError::retry(e.to_string())),
    };
    doc.attempts += 1;
    doc.subject = subject;
    match sent {
        Ok(()) => {
            doc.error = None;
            tracing::info!(alert = %row.id, event = %doc.event, attempts = doc.attempts, "alert sent");
            let now = shared.clock.now_ms();
            settle(shared, row, doc, DeliveryState::Sent, now, claimed).await
        }
        Err(e) => retry_or_fail(shared, row, doc, e, claimed).await,
    }
}

/// Schedules the next attempt of a delivery whose attempt failed, or fails it (attempts
/// used up, or retrying cannot help).
async fn retry_or_fail(
    shared: &HubCore,
    row: AlertRow,
    mut doc: AlertDoc,
    e: SendError,
    claimed: u64,
) -> Result<(), HubError> {
    let settings = &shared.config.alerts;
    let now = shared.clock.now_ms();
    doc.error = Some(e.message.clone());
    if e.permanent || doc.attempts >= settings.max_attempts {
        let why = if e.permanent {
            "retrying cannot help"
        } else {
            "attempts used up"
        };
        tracing::warn!(alert = %row.id, attempts = doc.attempts, error = %e.message, "alert not sent: {why}");
        return settle(shared, row, doc, DeliveryState::Failed, now, claimed).await;
    }
    let shift = doc.attempts.saturating_sub(1).min(20);
    let delay = settings
        .retry_delay_ms
        .saturating_mul(1 << shift)
        .min(settings.retry_max_delay_ms);
    tracing::warn!(alert = %row.id, attempts = doc.attempts, retry_in_ms = delay, error = %e.message, "alert not sent; retrying");
    settle(
        shared,
        row,
        doc,
        DeliveryState::Pending,
        now.saturating_add(delay),
        claimed,
    )
    .await
}

/// Stores a claimed delivery's new state and document, if the claim still holds.
async fn settle(
    shared: &HubCore,
    mut row: AlertRow,
    doc: AlertDoc,
    state: DeliveryState,
    due_ms: u64,
    claimed: u64,
) -> Result<(), HubError> {
    row.state = state.as_str().into();
    row.due_ms = due_ms;
    row.doc = serde_json::to_value(&doc)
        .map_err(|e| HubError::Store(format!("alert {:?} document: {e}", row.id)))?;
    if !shared.store.settle_alert(&row, claimed).await? {
        tracing::warn!(alert = %row.id, "alerts: the claim ran out before the outcome was stored; another attempt follows");
    }
    Ok(())
}

/// What one delivery sends.
struct Outgoing<'a> {
    id: &'a str,
    rule: &'a str,
    doc: &'a AlertDoc,
    subject: &'a str,
    text: &'a str,
}

/// Sends a delivery over its channel; the error says why, never a secret.
async fn send(
    http: &reqwest::Client,
    channel: &Channel,
    out: &Outgoing<'_>,
) -> Result<(), SendError> {
    match channel {
        Channel::Webhook {
            url,
            format,
            headers,
        } => {
            let body = match format {
                WebhookFormat::Json => {
                    alert::webhook_json(out.id, out.rule, out.doc, out.subject, out.text)
                }
                WebhookFormat::Slack => {
                    serde_json::json!({ "text": alert::slack_text(out.subject, out.text) })
                }
            };
            let mut request = http.post(url);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let answer = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("X-Silk-Alert-Id", out.id)
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| SendError::retry(format!("webhook: {}", describe(e))))?;
            let status = answer.status();
            if status.is_success() {
                return Ok(());
            }
            let quote = answer.text().await.unwrap_or_default();
            let quote = silk_core::text::prefix(quote.trim(), ANSWER_QUOTE);
            let message = if quote.is_empty() {
                format!("webhook: HTTP {status}")
            } else {
                format!("webhook: HTTP {status}: {quote}")
            };
            let permanent = status.is_client_error() && !matches!(status.as_u16(), 408 | 425 | 429);
            Err(SendError { message, permanent })
        }
        Channel::Email {
            host,
            port,
            security,
            login,
            from,
            to,
        } => {
            use lettre::AsyncTransport as _;
            let bad = |e: String| SendError {
                message: format!("email: {e}"),
                permanent: true,
            };
            let mut message = lettre::Message::builder()
                .from(from.parse().map_err(|e| bad(format!("from: {e}")))?)
                .subject(out.subject)
                .message_id(Some(message_id(out.id)))
                .header(lettre::message::header::ContentType::TEXT_PLAIN);
            for to in to {
                message = message.to(to.parse().map_err(|e| bad(format!("to {to:?}: {e}")))?);
            }
            let message = message
                .body(out.text.to_owned())
                .map_err(|e| bad(e.to_string()))?;
            type Smtp = lettre::AsyncSmtpTransport<lettre::Tokio1Executor>;
            let builder = match security {
                SmtpSecurity::Starttls => Smtp::starttls_relay(host),
                SmtpSecurity::Tls => Smtp::relay(host),
                SmtpSecurity::None => Ok(Smtp::builder_dangerous(host)),
            }
            .map_err(|e| SendError::retry(format!("email: {e}")))?;
            let mut builder = builder.port(*port);
            if let Some((user, password)) = login {
                builder =
                    builder.credentials(lettre::transport::smtp::authentication::Credentials::new(
                        user.clone(),
                        password.clone(),
                    ));
            }
            builder
                .build()
                .send(message)
                .await
                .map(drop)
                .map_err(|e| SendError {
                    message: format!("email via {host}:{port}: {e}"),
                    permanent: e.is_permanent(),
                })
        }
    }
}

/// A request error with its causes (reqwest's own text is only "error sending request"),
/// without the URL (it may hold a token).
fn describe(e: reqwest::Error) -> String {
    let timeout = e.is_timeout();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if timeout {
        text.push_str(" (timed out)");
    }
    text
}

/// The Message-ID of a delivery: its id, with characters a message id cannot hold replaced.
fn message_id(id: &str) -> String {
    let local: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+=/".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("<{local}@silk.alerts>")
}
