//! The alerts service: what happened becomes deliveries in the store's outbox, and the
//! outbox is sent.
//!
//! - A run's end is noticed from the store: every ended run not yet looked at
//!   (`AlertStore::unnoticed_runs`) is matched against the rules, its deliveries inserted,
//!   then it is marked looked at. A run that ended just before its hub died is noticed by the
//!   next hub; one noticed twice inserts nothing twice (a delivery's id is the rule and the
//!   run).
//! - An agent's death (`presence`) and a failed build (`builds`) are matched where they
//!   happen ([`emit`]).
//! - One hub at a time notices and sends: the holder of the store lease `alerts` (renewed
//!   each pass). A delivery is sent, then marked `sent`: a hub that dies between the two
//!   sends it again (at least once; the receiver gets the same `X-Silk-Alert-Id` /
//!   Message-ID). A failed attempt is retried after `retry_delay_ms`, doubling up to
//!   `retry_max_delay_ms`, until `max_attempts`; then the delivery is `failed`.
//! - A rule's rate limit is checked before the first attempt: over it, the delivery is
//!   `suppressed`, and the next one sent says how many were.

use crate::alert::{self, AlertDoc, Channel, Happening, RuleDoc};
use crate::error::HubError;
use crate::state::HubCore;
use silk_api::alerts::{DeliveryState, SmtpSecurity, WebhookFormat};
use silk_store::{AlertFilter, AlertRow, RunFilter};
use std::sync::Arc;
use std::time::Duration;

/// The store lease of the hub that notices and sends.
pub(crate) const ALERTS_LEASE: &str = "alerts";

/// Ended runs looked at per store call.
const NOTICE_BATCH: u32 = 100;

/// Due deliveries taken per store call.
const DELIVERY_BATCH: u32 = 50;

/// How often retention runs, ms.
const RETENTION_EVERY_MS: u64 = 3_600_000;

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
            tracing::error!(error = %e, "alerts: no HTTP client; webhooks cannot be sent");
            return;
        }
    };
    let mut last_retention = 0;
    loop {
        let wait_ms = match pass(&shared, &http, &mut last_retention).await {
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

/// One pass: notice ended runs, send what is due, retention. How long to wait, ms.
async fn pass(
    shared: &HubCore,
    http: &reqwest::Client,
    last_retention: &mut u64,
) -> Result<u64, HubError> {
    let poll_ms = shared.config.alerts.poll_ms;
    if !hold(shared).await? {
        return Ok(poll_ms);
    }
    notice_runs(shared).await?;
    let now = shared.clock.now_ms();
    loop {
        let due = shared.store.due_alerts(now, DELIVERY_BATCH).await?;
        let full = due.len() == DELIVERY_BATCH as usize;
        for row in due {
            if !hold(shared).await? {
                return Ok(poll_ms);
            }
            deliver(shared, http, row).await?;
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

/// The rules, by name, with their documents; an unreadable one is left out (and logged).
async fn rules(shared: &HubCore) -> Result<Vec<(String, RuleDoc)>, HubError> {
    let mut out = Vec::new();
    for row in shared.store.list_alert_rules().await? {
        match serde_json::from_value::<RuleDoc>(row.doc) {
            Ok(doc) => out.push((row.name, doc)),
            Err(e) => {
                tracing::warn!(rule = %row.name, error = %e, "alerts: rule unreadable; skipped")
            }
        }
    }
    Ok(out)
}

/// Inserts the deliveries of `h` for the rules that match it; how many were new.
async fn enqueue(
    shared: &HubCore,
    rules: &[(String, RuleDoc)],
    h: &Happening,
) -> Result<u64, HubError> {
    let now = shared.clock.now_ms();
    let rows: Vec<AlertRow> = rules
        .iter()
        .filter_map(|(name, doc)| {
            alert::matches(doc, h).map(|event| alert::alert_row(name, doc, event, h, now))
        })
        .collect();
    Ok(shared.store.insert_alerts(&rows).await?)
}

/// Matches something that happened here (an agent's death, a failed build) against the
/// rules and stores its deliveries; the sender is woken. Errors are logged: an alert never
/// fails what it reports on.
pub(crate) async fn emit(shared: &HubCore, h: Happening) {
    let done = async {
        let rules = rules(shared).await?;
        enqueue(shared, &rules, &h).await
    };
    match done.await {
        Ok(0) => {}
        Ok(n) => {
            tracing::debug!(key = %h.key, deliveries = n, "alerts: queued");
            shared.alerts_wake.notify_one();
        }
        Err(e) => tracing::warn!(key = %h.key, error = %e, "alerts: not queued"),
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
                    let previous_failed = if record.state == crate::run::RunState::Succeeded {
                        previous_failed(shared, &record).await?
                    } else {
                        false
                    };
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
        states: vec!["succeeded".into(), "failed".into()],
        limit: Some(20),
        newest_first: true,
    };
    let runs = shared.store.list_runs(&filter).await?;
    let before = runs.iter().find(|r| {
        r.id != record.id.as_str()
            && (r.created_ms, r.id.as_str()) < (record.created_ms, record.id.as_str())
    });
    Ok(before.is_some_and(|r| r.state == "failed"))
}

/// Sends one due delivery, or suppresses, drops or fails it; stores what became of it.
async fn deliver(
    shared: &HubCore,
    http: &reqwest::Client,
    mut row: AlertRow,
) -> Result<(), HubError> {
    let now = shared.clock.now_ms();
    let mut doc = match alert::alert_doc(&row) {
        Ok(doc) => doc,
        Err(e) => {
            tracing::warn!(alert = %row.id, error = %e, "alerts: delivery unreadable; failed");
            row.state = DeliveryState::Failed.as_str().into();
            row.due_ms = now;
            return Ok(shared.store.put_alert(&row).await?);
        }
    };
    let rule = match shared.store.get_alert_rule(&row.rule).await? {
        Some(rule) => serde_json::from_value::<RuleDoc>(rule.doc).ok(),
        None => None,
    };
    let Some(rule) = rule.filter(|r| r.enabled || doc.event == silk_api::alerts::AlertEvent::Test)
    else {
        doc.error = Some("its rule was deleted or disabled before it was sent".into());
        return finish(shared, row, doc, DeliveryState::Dropped, now).await;
    };
    if doc.attempts == 0 && doc.event != silk_api::alerts::AlertEvent::Test {
        let sent = shared
            .store
            .count_alerts(&AlertFilter {
                rule: Some(row.rule.clone()),
                state: Some(DeliveryState::Sent.as_str().into()),
                since_ms: Some(now.saturating_sub(rule.rate_limit.per_ms)),
                limit: None,
            })
            .await?;
        if sent >= u64::from(rule.rate_limit.max) {
            doc.error = Some(format!(
                "over the rule's rate limit ({} per {} s)",
                rule.rate_limit.max,
                rule.rate_limit.per_ms / 1000
            ));
            tracing::info!(alert = %row.id, "alerts: suppressed by the rule's rate limit");
            return finish(shared, row, doc, DeliveryState::Suppressed, now).await;
        }
    }
    let suppressed = suppressed_since_last_sent(shared, &row.rule).await?;
    let (subject, text) = alert::render(&rule, &doc, &row.rule, suppressed);
    let sent = match alert::open_channel(&row.rule, &rule, &shared.builds.secrets) {
        Ok(channel) => {
            send(
                http,
                &shared.config.alerts,
                &channel,
                &row.id,
                &row.rule,
                &doc,
                &subject,
                &text,
            )
            .await
        }
        Err(e) => Err(e.to_string()),
    };
    doc.attempts += 1;
    doc.subject = subject;
    let now = shared.clock.now_ms();
    match sent {
        Ok(()) => {
            doc.error = None;
            tracing::info!(alert = %row.id, event = %doc.event, attempts = doc.attempts, "alert sent");
            finish(shared, row, doc, DeliveryState::Sent, now).await
        }
        Err(e) => {
            let settings = &shared.config.alerts;
            doc.error = Some(e.clone());
            if doc.attempts >= settings.max_attempts {
                tracing::warn!(alert = %row.id, attempts = doc.attempts, error = %e, "alert not sent: attempts used up");
                return finish(shared, row, doc, DeliveryState::Failed, now).await;
            }
            let shift = doc.attempts.saturating_sub(1).min(20);
            let delay = settings
                .retry_delay_ms
                .saturating_mul(1 << shift)
                .min(settings.retry_max_delay_ms);
            tracing::warn!(alert = %row.id, attempts = doc.attempts, retry_in_ms = delay, error = %e, "alert not sent; retrying");
            finish(
                shared,
                row,
                doc,
                DeliveryState::Pending,
                now.saturating_add(delay),
            )
            .await
        }
    }
}

/// How many of the rule's deliveries were suppressed since its last one sent.
async fn suppressed_since_last_sent(shared: &HubCore, rule: &str) -> Result<u64, HubError> {
    let last_sent = shared
        .store
        .list_alerts(&AlertFilter {
            rule: Some(rule.to_owned()),
            state: Some(DeliveryState::Sent.as_str().into()),
            since_ms: None,
            limit: Some(1),
        })
        .await?;
    Ok(shared
        .store
        .count_alerts(&AlertFilter {
            rule: Some(rule.to_owned()),
            state: Some(DeliveryState::Suppressed.as_str().into()),
            since_ms: last_sent.first().map(|a| a.due_ms),
            limit: None,
        })
        .await?)
}

/// Stores a delivery's new state and document.
async fn finish(
    shared: &HubCore,
    mut row: AlertRow,
    doc: AlertDoc,
    state: DeliveryState,
    due_ms: u64,
) -> Result<(), HubError> {
    row.state = state.as_str().into();
    row.due_ms = due_ms;
    row.doc = serde_json::to_value(&doc)
        .map_err(|e| HubError::Store(format!("alert {:?}: {e}", row.id)))?;
    Ok(shared.store.put_alert(&row).await?)
}

/// Sends a delivery over its channel; the error says why, never a secret.
#[allow(clippy::too_many_arguments)]
async fn send(
    http: &reqwest::Client,
    settings: &crate::config::AlertSettings,
    channel: &Channel,
    id: &str,
    rule: &str,
    doc: &AlertDoc,
    subject: &str,
    text: &str,
) -> Result<(), String> {
    match channel {
        Channel::Webhook {
            url,
            format,
            headers,
        } => {
            let body = match format {
                WebhookFormat::Json => alert::webhook_json(id, rule, doc, subject, text),
                WebhookFormat::Slack => serde_json::json!({ "text": format!("{subject}\n{text}") }),
            };
            let mut request = http
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("X-Silk-Alert-Id", id)
                .body(body.to_string());
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let answer = request
                .send()
                .await
                .map_err(|e| format!("webhook: {}", e.without_url()))?;
            let status = answer.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("webhook: HTTP {status}"))
            }
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
            let mut message = lettre::Message::builder()
                .from(from.parse().map_err(|e| format!("email: from: {e}"))?)
                .subject(subject)
                .message_id(Some(message_id(id)))
                .header(lettre::message::header::ContentType::TEXT_PLAIN);
            for to in to {
                message = message.to(to.parse().map_err(|e| format!("email: to {to:?}: {e}"))?);
            }
            let message = message
                .body(text.to_owned())
                .map_err(|e| format!("email: {e}"))?;
            type Smtp = lettre::AsyncSmtpTransport<lettre::Tokio1Executor>;
            let builder = match security {
                SmtpSecurity::Starttls => Smtp::starttls_relay(host),
                SmtpSecurity::Tls => Smtp::relay(host),
                SmtpSecurity::None => Ok(Smtp::builder_dangerous(host)),
            }
            .map_err(|e| format!("email: {e}"))?;
            let mut builder = builder
                .port(*port)
                .timeout(Some(Duration::from_millis(settings.send_timeout_ms)));
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
                .map_err(|e| format!("email via {host}:{port}: {e}"))
        }
    }
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
