//! Item sink targets: the NATS subjects, Redis streams, Kafka topics (and Redis lists and
//! HTTP endpoints) that an admin declares for runs' items (`silk hub --sink-targets FILE`),
//! which runs then name in `sinks.targets`.
//!
//! The file is written like the router's outbounds, with the router's classes (one
//! implementation of each target, one validation, errors at file and line, `{NAME}`
//! placeholders filled from the environment so credentials need not be in the file):
//!
//! ```yaml
//! outbound:
//!   - name: events
//!     class: nats.NatsOutbound
//!     init: {url: "nats://10.0.0.5:4222", subject: silk.items}
//! ```
//!
//! Only `name`, `class`, `init` (or its keys beside `class`), `disable` and `batch_size` are
//! read; routing keys mean nothing here and are refused, and so are inbounds. A token
//! holder names a target, never an address: no run reaches a server an admin did not
//! declare, and a tenant reaches only the targets granted to it (`sink_targets`). The
//! targets are built once and shared by every run's sink (their connections too).
//!
//! This module is pure: the binary loads the file ([`silk_router::Config::load`]) and hands
//! the config to [`SinkTargets::from_config`].

use silk_router::Outbound;
use silk_router::config::OutboundSettings;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The item sink targets of a hub (none by default).
#[derive(Clone, Default)]
pub struct SinkTargets {
    targets: BTreeMap<String, SinkTarget>,
}

/// One declared target.
#[derive(Clone)]
pub(crate) struct SinkTarget {
    /// Its router class (`redis_queue.RedisStreamOutbound`).
    pub class: String,
    /// The component items are pushed to.
    pub outbound: Arc<dyn Outbound>,
    /// Most items per push.
    pub batch: usize,
}

impl std::fmt::Debug for SinkTargets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The targets' descriptions carry no credentials (the router redacts them).
        let targets: BTreeMap<&str, String> = self
            .targets
            .iter()
            .map(|(name, t)| (name.as_str(), t.outbound.target()))
            .collect();
        f.debug_struct("SinkTargets")
            .field("targets", &targets)
            .finish()
    }
}

impl SinkTargets {
    /// The targets of a loaded sink targets file (see the module docs); the error is every
    /// problem, each with its file and line.
    pub fn from_config(config: &silk_router::Config) -> Result<SinkTargets, Vec<String>> {
        let mut problems = Vec::new();
        if let Some(inbound) = config.inbounds.first() {
            problems.push(format!(
                "{}: inbound `{}`: a sink targets file declares `outbound` entries only",
                inbound.origin, inbound.name
            ));
        }
        let mut targets = BTreeMap::new();
        for rule in &config.outbounds {
            let at = format!("{}: outbound `{}`", rule.origin, rule.name);
            if !silk_api::runs::valid_target_name(&rule.name) {
                problems.push(format!(
                    "{at}: a target's name is 1 to 64 letters, digits, `.`, `_`, `-`"
                ));
                continue;
            }
            let routing_only = OutboundSettings {
                batch_size: OutboundSettings::default().batch_size,
                ..rule.settings.clone()
            };
            if !rule.selector.is_empty() || routing_only != OutboundSettings::default() {
                problems.push(format!(
                    "{at}: only `name`, `class`, `init`, `disable` and `batch_size` mean something for an item sink target (routing keys such as `selector`, `priority`, `failback`, `max_lag` or fixed params do not)"
                ));
                continue;
            }
            if rule.disable {
                continue;
            }
            targets.insert(
                rule.name.clone(),
                SinkTarget {
                    class: rule.class.clone(),
                    outbound: rule.component().clone(),
                    batch: rule.settings.batch_size,
                },
            );
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(SinkTargets { targets })
    }

    /// The names of the targets, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.targets.keys().map(String::as_str).collect()
    }

    /// Each target's name, class and where it delivers (no credentials), sorted by name.
    pub fn describe(&self) -> Vec<(String, String, String)> {
        self.targets
            .iter()
            .map(|(name, t)| (name.clone(), t.class.clone(), t.outbound.target()))
            .collect()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&SinkTarget> {
        self.targets.get(name)
    }

    /// What this hub declares, for errors.
    pub(crate) fn names_text(&self) -> String {
        if self.targets.is_empty() {
            "it declares none: an admin declares them with `silk hub --sink-targets FILE`"
                .to_owned()
        } else {
            format!("declared: {}", self.names().join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<SinkTargets, Vec<String>> {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("targets.yaml");
        std::fs::write(&path, text).unwrap();
        let config = silk_router::Config::load(&[&path], &silk_router::Vars::new())
            .map_err(|e| e.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        SinkTargets::from_config(&config)
    }

    #[test]
    fn the_example_declares_a_subject_a_stream_and_a_topic_without_showing_the_password() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/hub/sink_targets.yaml");
        let mut vars = silk_router::Vars::new();
        vars.set("REDIS_PASSWORD", "s3cr3t");
        let config = silk_router::Config::load(&[&path], &vars).unwrap();
        let targets = SinkTargets::from_config(&config).unwrap();
        assert_eq!(targets.names(), ["events", "feed", "warehouse"]);
        assert_eq!(targets.get("feed").unwrap().batch, 200);
        let shown = format!("{targets:?} {:?}", targets.describe());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("stream silk:items"), "{shown}");
    }

    #[test]
    fn routing_keys_and_inbounds_are_refused_with_their_place() {
        let entry =
            "class: redis_queue.RedisListOutbound\n    init: {url: 'redis://127.0.0.1:1', key: k}";
        let problems = load(&format!(
            "inbound:\n  - name: web\n    class: http.HttpInbound\noutbound:\n  - name: a\n    {entry}\n    priority: 5\n  - name: 'b c'\n    {entry}\n  - name: d\n    {entry}\n    disable: true\n"
        ))
        .unwrap_err();
        let text = problems.join("\n");
        assert!(
            text.contains(
                ":2: inbound `web`: a sink targets file declares `outbound` entries only"
            ),
            "{text}"
        );
        assert!(
            text.contains(":5: outbound `a`: only `name`, `class`, `init`"),
            "{text}"
        );
        assert!(
            text.contains(":9: outbound `b c`: a target's name is 1 to 64"),
            "{text}"
        );
        assert_eq!(problems.len(), 3, "{text}");
        let ok = load(&format!("outbound:\n  - name: a\n    {entry}\n    batch_size: 50\n  - name: d\n    {entry}\n    disable: true\n")).unwrap();
        assert_eq!(ok.names(), ["a"], "a disabled target is not declared");
    }
}
