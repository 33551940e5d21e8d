//! `silk alerts rules|create|replace|delete|test|deliveries`: notification rules and what
//! they sent.

use super::output::{Align, Table, ago, now_ms, show};
use super::{Client, Conn};
use anyhow::Context;
use clap::{Args, Subcommand};
use silk_api::alerts::{
    AlertRuleRequest, AlertRuleView, ChannelView, DeliveriesParams, DeliveryState, DeliveryView,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `silk alerts`.
#[derive(Debug, Args)]
pub struct AlertsArgs {
    #[command(subcommand)]
    pub command: AlertsCommand,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk alerts …`.
#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// List the rules: name, events, scope, channel (never its secrets).
    Rules,
    /// Create a rule from a YAML or JSON file (the body of `POST /api/v1/alerts/rules`; see
    /// docs/alerts.md). Admin only.
    Create {
        /// The rule file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Replace a rule from a file; the webhook URL, headers and SMTP password it leaves out
    /// are kept. Admin only.
    Replace {
        /// The rule file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Delete a rule (its pending deliveries are dropped). Admin only.
    Delete {
        /// The rule's name.
        name: String,
    },
    /// Send a test alert through a rule's channel. Admin only.
    Test {
        /// The rule's name.
        name: String,
    },
    /// Deliveries, newest first: state, attempts, last error.
    Deliveries {
        /// Only this rule's.
        #[arg(long)]
        rule: Option<String>,
        /// Only deliveries in this state: pending, sent, failed, suppressed, dropped.
        #[arg(long, value_parser = parse_state)]
        state: Option<DeliveryState>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
}

fn parse_state(s: &str) -> Result<DeliveryState, String> {
    DeliveryState::parse(s)
        .ok_or_else(|| format!("{s:?}: one of pending, sent, failed, suppressed, dropped"))
}

/// A rule file: YAML (JSON is YAML too), read as the API's JSON body (so the channel is a
/// map, `webhook: {…}`, not a YAML tag); unknown keys are errors that name them.
fn read_rule(path: &Path) -> anyhow::Result<AlertRuleRequest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        anyhow::anyhow!("{}: {at}: {}", path.display(), e.into_inner())
    })
}

/// Runs `silk alerts`.
pub async fn alerts(args: AlertsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let api = client.api();
    let json = args.conn.json;
    match args.command {
        AlertsCommand::Rules => {
            let rules = api.alert_rules().await.map_err(|e| client.error(e))?;
            show(json, &rules, || rules_table(&rules));
        }
        AlertsCommand::Create { file } => {
            let rule = api
                .create_alert_rule(&read_rule(&file)?)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("alert rule {} created", rule.name);
            show(json, &rule, || rules_table(std::slice::from_ref(&rule)));
        }
        AlertsCommand::Replace { file } => {
            let rule = api
                .put_alert_rule(&read_rule(&file)?)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("alert rule {} replaced", rule.name);
            show(json, &rule, || rules_table(std::slice::from_ref(&rule)));
        }
        AlertsCommand::Delete { name } => {
            api.delete_alert_rule(&name)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("alert rule {name} deleted");
        }
        AlertsCommand::Test { name } => {
            let delivery = api
                .test_alert_rule(&name)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!(
                "test alert queued ({}); see `silk alerts deliveries --rule {name}`",
                delivery.id
            );
        }
        AlertsCommand::Deliveries { rule, state, limit } => {
            let params = DeliveriesParams {
                rule,
                state,
                limit: Some(limit),
            };
            let deliveries = api
                .alert_deliveries(&params)
                .await
                .map_err(|e| client.error(e))?;
            show(json, &deliveries, || {
                deliveries_table(&deliveries, now_ms())
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rules_table(rules: &[AlertRuleView]) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("NAME", Left),
        ("EVENTS", Left),
        ("SCOPE", Left),
        ("CHANNEL", Left),
        ("LIMIT", Left),
        ("ENABLED", Left),
    ]);
    for r in rules {
        let events: Vec<&str> = r.events.iter().map(|e| e.as_str()).collect();
        let scope = match (&r.job, &r.project) {
            (Some(job), _) => format!("job {job}"),
            (_, Some(project)) => format!("project {project}"),
            _ => "all".into(),
        };
        let channel = match &r.channel {
            ChannelView::Webhook { url, format, .. } => {
                format!(
                    "webhook {url} ({})",
                    serde_json::json!(format).as_str().unwrap_or("?")
                )
            }
            ChannelView::Email { host, port, to, .. } => {
                format!("email {} via {host}:{port}", to.join(", "))
            }
        };
        table.row(vec![
            r.name.clone(),
            events.join(","),
            scope,
            channel,
            format!("{}/{}s", r.rate_limit.max, r.rate_limit.per_ms / 1000),
            if r.enabled { "yes" } else { "no" }.into(),
        ]);
    }
    table
}

fn deliveries_table(deliveries: &[DeliveryView], now_ms: u64) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("WHEN", Left),
        ("RULE", Left),
        ("EVENT", Left),
        ("STATE", Left),
        ("ATTEMPTS", Right),
        ("SUBJECT", Left),
        ("ERROR", Left),
    ]);
    for d in deliveries {
        table.row(vec![
            ago(d.created_ms, now_ms),
            d.rule.clone(),
            d.event.as_str().into(),
            d.state.as_str().into(),
            d.attempts.to_string(),
            d.subject.clone(),
            d.error.clone().unwrap_or_default(),
        ]);
    }
    table
}
