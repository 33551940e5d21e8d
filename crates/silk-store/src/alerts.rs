//! Alert rules, the outbox of their deliveries, and the ended runs not yet looked at: the
//! [`AlertStore`] half of the store (every [`crate::MetaStore`] is one).
//!
//! A rule's document is the hub's JSON (its channel's secrets sealed: the store never sees
//! an SMTP password or a webhook URL in clear). An alert is one delivery of one event by one
//! rule: its id is unique, so an event noticed twice (a hub restarted, another hub saw it
//! too) is inserted once. An alert is `pending` until it is sent, fails for good, or is
//! suppressed or dropped; `due_ms` is when a pending one is due, and when a final one got
//! its state. The states' names are the hub's vocabulary; the store only knows `pending`.
//! A sender *claims* a pending alert before it sends it (its `due_ms` moved past the send,
//! [`AlertStore::claim_alert`]) and writes the outcome only while its claim holds
//! ([`AlertStore::settle_alert`]): two senders never send one alert at once, and a sender
//! that was too slow writes nothing over the one that took the alert after it.
//!
//! A run has ended when its `finished_ms` is set; the alerts look at each ended run once
//! ([`AlertStore::unnoticed_runs`], [`AlertStore::mark_run_noticed`]), from the store, so a
//! run that ended just before its hub died is looked at by the next hub.

use crate::error::StoreError;
use crate::model::RunRow;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The state of an alert that is still to be delivered.
pub const ALERT_PENDING: &str = "pending";

/// A notification rule: its name and the hub's rule document.
pub type AlertRuleRow = crate::projects::DocRow;

/// One delivery of one event by one rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertRow {
    /// Unique: the rule and the event's key.
    pub id: String,
    /// The rule's name.
    pub rule: String,
    /// [`ALERT_PENDING`], or a final state of the hub's vocabulary.
    pub state: String,
    /// When the event was noticed.
    pub created_ms: u64,
    /// Pending: when it is due. Final: when it got its state.
    pub due_ms: u64,
    /// Whether it counts against its rule's rate limit (admitted, not a test).
    pub counted: bool,
    /// The hub's alert document (the event, attempts, errors).
    pub doc: serde_json::Value,
}

/// Which alerts [`AlertStore::list_alerts`] and [`AlertStore::count_alerts`] return.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertFilter {
    /// Only this rule's.
    pub rule: Option<String>,
    /// Only alerts in this state.
    pub state: Option<String>,
    /// Only alerts whose `created_ms` is at or after this.
    pub since_ms: Option<u64>,
    /// Only alerts that count (or do not count) against their rule's rate limit.
    pub counted: Option<bool>,
    /// At most this many (ignored by `count_alerts`); newest (`created_ms`) first.
    pub limit: Option<u32>,
}

/// Rules, alerts, ended runs to look at. Every call is one transaction.
#[async_trait]
pub trait AlertStore: Send + Sync {
    /// Adds a rule. [`StoreError::Conflict`] if one has the same name.
    async fn create_alert_rule(&self, rule: &AlertRuleRow) -> Result<(), StoreError>;

    /// Replaces the rule with `rule.name`. [`StoreError::NotFound`] if there is none.
    async fn update_alert_rule(&self, rule: &AlertRuleRow) -> Result<(), StoreError>;

    /// The rule named `name`.
    async fn get_alert_rule(&self, name: &str) -> Result<Option<AlertRuleRow>, StoreError>;

    /// Every rule, by name.
    async fn list_alert_rules(&self) -> Result<Vec<AlertRuleRow>, StoreError>;

    /// Removes a rule (not its alerts: their history stays, and pending ones are dropped
    /// by the hub). Whether it existed.
    async fn delete_alert_rule(&self, name: &str) -> Result<bool, StoreError>;

    /// Inserts the alerts whose id is new, in one write; how many were new.
    async fn insert_alerts(&self, alerts: &[AlertRow]) -> Result<u64, StoreError>;

    /// Claims pending alert `id` due at `due_ms` by moving its due time to `until_ms`;
    /// whether this call claimed it (false: it is not pending, or another claim moved it).
    async fn claim_alert(&self, id: &str, due_ms: u64, until_ms: u64) -> Result<bool, StoreError>;

    /// Writes a claimed alert (state, due time, document) if it is still pending and due at
    /// `claimed_ms` (the claim's `until_ms`); whether it was written.
    async fn settle_alert(&self, alert: &AlertRow, claimed_ms: u64) -> Result<bool, StoreError>;

    /// One alert.
    async fn get_alert(&self, id: &str) -> Result<Option<AlertRow>, StoreError>;

    /// Pending alerts due at `now_ms`, soonest first (`due_ms`, then id), at most `limit`.
    async fn due_alerts(&self, now_ms: u64, limit: u32) -> Result<Vec<AlertRow>, StoreError>;

    /// When the next pending alert is due, if any is pending.
    async fn next_alert_due(&self) -> Result<Option<u64>, StoreError>;

    /// Alerts matching `filter`, newest (`created_ms`, then id) first.
    async fn list_alerts(&self, filter: &AlertFilter) -> Result<Vec<AlertRow>, StoreError>;

    /// How many alerts match `filter`.
    async fn count_alerts(&self, filter: &AlertFilter) -> Result<u64, StoreError>;

    /// Removes the alerts that are not pending and got their state before `before_ms`; how
    /// many.
    async fn delete_alerts_before(&self, before_ms: u64) -> Result<u64, StoreError>;

    /// Ended runs (`finished_ms` set) the alerts have not looked at, in the order they
    /// ended (then id), at most `limit`.
    async fn unnoticed_runs(&self, limit: u32) -> Result<Vec<RunRow>, StoreError>;

    /// Marks an ended run looked at; whether it was not already. A run stored again later
    /// keeps the mark.
    async fn mark_run_noticed(&self, id: &str) -> Result<bool, StoreError>;
}
