//! The task as pushed to an outbound, serialized straight from the routed task without
//! building an intermediate object: the outbound's `task_params` keys (every key but
//! `task_result` when it lists none), its fixed params, then the built-in keys (see
//! [`crate::task`]); wrapped as `{"task_params": {...}}` with `task_params_wrapped`. A key
//! is written once: built-ins win over fixed params, which win over copied keys.
//!
//! This is the router's hot path; it must not allocate per key.

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::config::OutboundRule;
use crate::task::{self, BUILTIN_KEYS, Carry};

fn is_builtin(key: &str) -> bool {
    BUILTIN_KEYS.contains(&key)
}

enum Priority<'a> {
    Set(i64),
    Task(&'a Value),
}

/// One push of one task to one outbound.
pub(crate) struct Payload<'a> {
    rule: &'a OutboundRule,
    task: &'a Map<String, Value>,
    pub routed_count: u64,
    retry_times: u64,
    group_retry_times: u64,
    pub rt: bool,
    priority: Priority<'a>,
    pub task_uuid: Cow<'a, str>,
    submit_time: String,
}

impl<'a> Payload<'a> {
    /// The push of `task` to `rule`; `retry` when it is a retry on the same outbound.
    pub(crate) fn new(
        rule: &'a OutboundRule,
        task: &'a Map<String, Value>,
        retry: bool,
        now_ms: u64,
    ) -> Payload<'a> {
        let carry = Carry::of(task);
        let s = &rule.settings;
        let rt = task.get("rt").is_some_and(task::truthy);
        let priority = match (
            if rt {
                s.rt_priority.or(s.priority)
            } else {
                s.priority
            },
            task.get("priority"),
        ) {
            (Some(p), _) => Priority::Set(p),
            (None, Some(p)) if p.is_number() => Priority::Task(p),
            (None, _) => Priority::Set(0),
        };
        let retry_times = if retry {
            carry.retry_times + 1
        } else if s.reset_retry_times {
            0
        } else {
            carry.retry_times
        };
        Payload {
            rule,
            task,
            routed_count: carry.routed_count + 1,
            retry_times,
            group_retry_times: carry.group_retry_times + u64::from(retry),
            rt,
            priority,
            task_uuid: match task.get("task_uuid") {
                Some(Value::String(s)) if !s.is_empty() => Cow::Borrowed(s.as_str()),
                _ => Cow::Owned(task::new_uuid()),
            },
            submit_time: task::format_time(now_ms),
        }
    }

    /// As a JSON value (for dry runs).
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for Payload<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.rule.settings.task_params_wrapped {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry("task_params", &Flat(self))?;
            map.end()
        } else {
            Flat(self).serialize(serializer)
        }
    }
}

struct Flat<'p, 'a>(&'p Payload<'a>);

impl Serialize for Flat<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let s = &p.rule.settings;
        let mut map = serializer.serialize_map(None)?;
        match &s.task_params {
            Some(_) => {
                for key in p.rule.copy_keys.iter() {
                    if let Some(v) = p.task.get(key) {
                        map.serialize_entry(key, v)?;
                    }
                }
            }
            None => {
                for (k, v) in p.task {
                    if k != "task_result" && !is_builtin(k) && !s.params.contains_key(k) {
                        map.serialize_entry(k, v)?;
                    }
                }
            }
        }
        for (k, v) in &s.params {
            if !is_builtin(k) {
                map.serialize_entry(k, v)?;
            }
        }
        map.serialize_entry("outbound", &p.rule.name)?;
        map.serialize_entry("routed_count", &p.routed_count)?;
        map.serialize_entry("retry_times", &p.retry_times)?;
        map.serialize_entry("submitter", task::SUBMITTER)?;
        map.serialize_entry("submit_time", &p.submit_time)?;
        map.serialize_entry("retry_limits", &s.retry_limits)?;
        map.serialize_entry("rt", &p.rt)?;
        match p.priority {
            Priority::Set(v) => map.serialize_entry("priority", &v)?,
            Priority::Task(v) => map.serialize_entry("priority", v)?,
        }
        map.serialize_entry("task_uuid", &p.task_uuid)?;
        map.serialize_entry("group_retry_times", &p.group_retry_times)?;
        map.serialize_entry("token_scope", s.token_scope.as_deref().unwrap_or("*"))?;
        map.end()
    }
}
