//! The hub's facade for alerts (the `HubHandle` methods the API calls): rules checked,
//! sealed and stored; test deliveries queued; deliveries listed. Sending is the `alerts`
//! service's. Who may change rules is the API's business (admins: a rule makes the hub
//! send to an address of the rule's choosing).

use crate::alert::{self, RuleDoc};
use crate::error::HubError;
use crate::hub::HubHandle;
use serde_json::json;
use silk_api::alerts::{
    AlertEvent, AlertRuleRequest, AlertRuleView, DeliveriesParams, DeliveryView,
};
use silk_store::{AlertFilter, AlertRuleRow};
use std::collections::BTreeMap;

impl HubHandle {
    async fn alert_rule_row(&self, name: &str) -> Result<(AlertRuleRow, RuleDoc), HubError> {
        let row = self
            .shared()
            .store
            .get_alert_rule(name)
            .await?
            .ok_or_else(|| HubError::NoSuchAlertRule(name.to_owned()))?;
        let doc = serde_json::from_value(row.doc.clone())
            .map_err(|e| HubError::Store(format!("alert rule {name:?} unreadable: {e}")))?;
        Ok((row, doc))
    }

    /// The checked, sealed document of `request`, and its stored form.
    fn alert_rule_doc(
        &self,
        request: &AlertRuleRequest,
        old: Option<&RuleDoc>,
    ) -> Result<(RuleDoc, serde_json::Value), HubError> {
        alert::check_rule(request)?;
        let doc = alert::seal_rule(request, old, &self.shared().builds.secrets)?;
        let stored = serde_json::to_value(&doc)
            .map_err(|e| HubError::Store(format!("alert rule {:?}: {e}", request.name)))?;
        Ok((doc, stored))
    }

    /// Every alert rule, by name (no secrets).
    pub async fn alert_rules(&self) -> Result<Vec<AlertRuleView>, HubError> {
        let mut out = Vec::new();
        for row in self.shared().store.list_alert_rules().await? {
            match serde_json::from_value::<RuleDoc>(row.doc) {
                Ok(doc) => out.push(alert::rule_view(
                    &row.name,
                    &doc,
                    row.created_ms,
                    row.updated_ms,
                )),
                Err(e) => {
                    tracing::warn!(rule = %row.name, error = %e, "alert rule unreadable; not listed")
                }
            }
        }
        Ok(out)
    }

    /// One alert rule (no secrets).
    pub async fn alert_rule(&self, name: &str) -> Result<AlertRuleView, HubError> {
        let (row, doc) = self.alert_rule_row(name).await?;
        Ok(alert::rule_view(name, &doc, row.created_ms, row.updated_ms))
    }

    /// Creates an alert rule; [`HubError::Conflict`] if one has its name.
    pub async fn create_alert_rule(
        &self,
        request: &AlertRuleRequest,
    ) -> Result<AlertRuleView, HubError> {
        let now = self.shared().clock.now_ms();
        let (doc, stored) = self.alert_rule_doc(request, None)?;
        let row = AlertRuleRow {
            name: request.name.clone(),
            doc: stored,
            created_ms: now,
            updated_ms: now,
        };
        self.shared().store.create_alert_rule(&row).await?;
        tracing::info!(rule = %request.name, "alert rule created");
        Ok(alert::rule_view(&row.name, &doc, now, now))
    }

    /// Replaces alert rule `name` (secrets the request leaves out are kept).
    pub async fn put_alert_rule(
        &self,
        name: &str,
        request: &AlertRuleRequest,
    ) -> Result<AlertRuleView, HubError> {
        if request.name != name {
            return Err(HubError::BadAlertRule(format!(
                "name: {:?} in the body, {name:?} in the path (a rule is not renamed)",
                request.name
            )));
        }
        let mut row = self
            .shared()
            .store
            .get_alert_rule(name)
            .await?
            .ok_or_else(|| HubError::NoSuchAlertRule(name.to_owned()))?;
        // A rule that does not read is replaced whole (its secrets must be given again).
        let old: Option<RuleDoc> = match serde_json::from_value(row.doc.clone()) {
            Ok(old) => Some(old),
            Err(e) => {
                tracing::warn!(rule = %name, error = %e, "alert rule unreadable; replaced whole");
                None
            }
        };
        let (doc, stored) = self.alert_rule_doc(request, old.as_ref())?;
        row.doc = stored;
        row.updated_ms = self.shared().clock.now_ms();
        self.shared().store.update_alert_rule(&row).await?;
        tracing::info!(rule = %name, "alert rule replaced");
        Ok(alert::rule_view(name, &doc, row.created_ms, row.updated_ms))
    }

    /// Deletes alert rule `name` (its pending deliveries are dropped, its history kept).
    pub async fn delete_alert_rule(&self, name: &str) -> Result<(), HubError> {
        if !self.shared().store.delete_alert_rule(name).await? {
            return Err(HubError::NoSuchAlertRule(name.to_owned()));
        }
        tracing::info!(rule = %name, "alert rule deleted");
        Ok(())
    }

    /// Queues a `test` delivery of rule `name` (sent even if the rule is disabled, outside
    /// its rate limit).
    pub async fn test_alert_rule(&self, name: &str) -> Result<DeliveryView, HubError> {
        let (_, doc) = self.alert_rule_row(name).await?;
        let now = self.shared().clock.now_ms();
        let h = alert::Happening {
            events: vec![AlertEvent::Test],
            key: format!("test/{}", uuid::Uuid::now_v7().simple()),
            job: None,
            project: None,
            facts: BTreeMap::from([
                ("rule".to_owned(), json!(name)),
                ("hub".to_owned(), json!(self.shared().hub_id.as_str())),
                ("at_ms".to_owned(), json!(now)),
            ]),
        };
        let row = alert::alert_row(name, &doc, AlertEvent::Test, &h, now, false);
        self.shared()
            .store
            .insert_alerts(std::slice::from_ref(&row))
            .await?;
        self.shared().alerts_wake.notify_one();
        alert::delivery_view(&row)
    }

    /// Deliveries, newest first.
    pub async fn alert_deliveries(
        &self,
        params: &DeliveriesParams,
    ) -> Result<Vec<DeliveryView>, HubError> {
        let filter = AlertFilter {
            rule: params.rule.clone(),
            state: params.state.map(|s| s.as_str().to_owned()),
            limit: Some(params.limit.unwrap_or(100).clamp(1, 1000)),
            ..AlertFilter::default()
        };
        let rows = self.shared().store.list_alerts(&filter).await?;
        Ok(rows
            .iter()
            .filter_map(|row| match alert::delivery_view(row) {
                Ok(view) => Some(view),
                Err(e) => {
                    tracing::warn!(alert = %row.id, error = %e, "delivery unreadable; not listed");
                    None
                }
            })
            .collect())
    }
}
