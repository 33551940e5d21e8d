//! Convert steps: the seed's built-ins (`logstash.RemoveBuildinKeys`,
//! `common.ExtractTaskParams`, `common.ExtractMetadata`) and Silk's declarative `set`,
//! `rename` and `remove`. Each step is a pure function of the task; none of these can fail (a
//! step that does not apply leaves the task as it is). Python converts are `crate::plugins`.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::RouterError;
use crate::read::{self, InitReader};
use crate::registry::{Convert, ConvertFactory};
use crate::yaml::Node;

/// Keys Logstash (and Beats in front of it) add to an event: `@timestamp`, `@version`,
/// `@metadata`, `host`, `path`, `tags`, `message`, and Beats' `agent`, `ecs`, `input`,
/// `log`, `beat`, `offset`, `prospector`. Not `type`: spider logs use it for data.
pub const LOGSTASH_KEYS: [&str; 14] = [
    "@timestamp",
    "@version",
    "@metadata",
    "host",
    "path",
    "tags",
    "message",
    "agent",
    "ecs",
    "input",
    "log",
    "beat",
    "offset",
    "prospector",
];

struct RemoveKeys {
    keys: Vec<String>,
}

#[async_trait::async_trait]
impl Convert for RemoveKeys {
    fn describe(&self) -> String {
        format!("remove {}", self.keys.join(", "))
    }
    async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError> {
        for key in &self.keys {
            task.remove(key);
        }
        Ok(())
    }
}

/// `logstash.RemoveBuildinKeys`; `init.keys` replaces the list, `init.extra_keys` adds.
pub(crate) struct RemoveBuildinKeysFactory;

impl ConvertFactory for RemoveBuildinKeysFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["keys", "extra_keys"]
    }
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Convert>> {
        let mut keys = init
            .opt_str_list("keys")
            .unwrap_or_else(|| LOGSTASH_KEYS.iter().map(|k| (*k).to_owned()).collect());
        keys.extend(init.opt_str_list("extra_keys").unwrap_or_default());
        Some(Arc::new(RemoveKeys { keys }))
    }
}

struct Extract {
    key: String,
    overwrite: bool,
    keep: bool,
}

#[async_trait::async_trait]
impl Convert for Extract {
    fn describe(&self) -> String {
        format!("lift the keys of `{}` to the top level", self.key)
    }
    async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError> {
        let nested = match task.get(&self.key) {
            Some(Value::Object(map)) => map.clone(),
            // Logstash sometimes leaves a nested object as JSON text.
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                _ => return Ok(()),
            },
            _ => return Ok(()),
        };
        if !self.keep {
            task.remove(&self.key);
        }
        for (k, v) in nested {
            if self.overwrite || !task.contains_key(&k) {
                task.insert(k, v);
            }
        }
        Ok(())
    }
}

/// `common.ExtractTaskParams` / `common.ExtractMetadata`: the nested object's keys replace
/// top-level keys of the same name (`overwrite`, default true) and the nested key is
/// removed (`keep`, default false).
pub(crate) struct ExtractFactory(pub &'static str);

impl ConvertFactory for ExtractFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["overwrite", "keep"]
    }
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Convert>> {
        Some(Arc::new(Extract {
            key: self.0.to_owned(),
            overwrite: init.opt_bool("overwrite").unwrap_or(true),
            keep: init.opt_bool("keep").unwrap_or(false),
        }))
    }
}

struct Set(Map<String, Value>);

#[async_trait::async_trait]
impl Convert for Set {
    fn describe(&self) -> String {
        format!(
            "set {}",
            self.0.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    }
    async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError> {
        for (k, v) in &self.0 {
            task.insert(k.clone(), v.clone());
        }
        Ok(())
    }
}

struct Rename(Vec<(String, String)>);

#[async_trait::async_trait]
impl Convert for Rename {
    fn describe(&self) -> String {
        let pairs: Vec<String> = self.0.iter().map(|(a, b)| format!("{a} → {b}")).collect();
        format!("rename {}", pairs.join(", "))
    }
    async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError> {
        for (from, to) in &self.0 {
            if let Some(v) = task.remove(from) {
                task.insert(to.clone(), v);
            }
        }
        Ok(())
    }
}

/// Builds `set: {k: v}`, `rename: {old: new}` or `remove: [k, …]`.
pub(crate) fn declarative(kind: &str, node: &Node) -> Result<Arc<dyn Convert>, String> {
    match kind {
        "set" => Ok(Arc::new(Set(read::entries(node)?
            .iter()
            .map(|(k, v)| (k.text.clone(), v.to_json()))
            .collect()))),
        "rename" => Ok(Arc::new(Rename(
            read::entries(node)?
                .iter()
                .map(|(k, v)| Ok((k.text.clone(), read::text(v)?)))
                .collect::<Result<_, String>>()?,
        ))),
        "remove" => Ok(Arc::new(RemoveKeys {
            keys: read::list(node)?
                .into_iter()
                .map(read::text)
                .collect::<Result<_, String>>()?,
        })),
        other => Err(format!("unknown step `{other}`")),
    }
}
