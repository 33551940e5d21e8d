//! Typed reading of YAML nodes for the config loader and for component factories:
//! [`InitReader`] hands a class its `init` keys, converts values (numbers given as strings
//! by placeholders included) and records every problem with its file, line and rule instead
//! of stopping at the first.
//!
//! It must not decide what keys mean; the config loader and the factories do.

use std::path::Path;
use std::sync::Arc;

use crate::error::ConfigError;
use crate::yaml::{Key, Node, Pos, Value, parse_bool, parse_float, parse_int};

/// Converts a node to text: strings, and other scalars as written.
pub(crate) fn text(node: &Node) -> Result<String, String> {
    node.as_text()
        .ok_or_else(|| format!("expected text, found {}", node.kind()))
}

/// Converts a node to an integer: integers, integral floats, and strings holding one
/// (a `{placeholder}` fills in text).
pub(crate) fn int(node: &Node) -> Result<i64, String> {
    match &node.value {
        Value::Int(i) => Ok(*i),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        Value::Str(s) => {
            parse_int(s.trim()).ok_or_else(|| format!("expected an integer, found `{s}`"))
        }
        _ => Err(format!("expected an integer, found {}", node.kind())),
    }
}

/// Converts a node to a number.
pub(crate) fn float(node: &Node) -> Result<f64, String> {
    match &node.value {
        Value::Int(i) => Ok(*i as f64),
        Value::Float(f) => Ok(*f),
        Value::Str(s) => parse_float(s.trim())
            .or_else(|| parse_int(s.trim()).map(|i| i as f64))
            .ok_or_else(|| format!("expected a number, found `{s}`")),
        _ => Err(format!("expected a number, found {}", node.kind())),
    }
}

/// Converts a node to a boolean: YAML booleans (PyYAML's `yes`/`on` included), `0`/`1`, and
/// strings holding one of those.
pub(crate) fn boolean(node: &Node) -> Result<bool, String> {
    match &node.value {
        Value::Bool(b) => Ok(*b),
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        Value::Str(s) => match s.trim() {
            "0" => Ok(false),
            "1" => Ok(true),
            t => parse_bool(t).ok_or_else(|| format!("expected true or false, found `{s}`")),
        },
        _ => Err(format!("expected true or false, found {}", node.kind())),
    }
}

/// A list of nodes: a sequence, one scalar as a list of one, null as empty.
pub(crate) fn list(node: &Node) -> Result<Vec<&Node>, String> {
    match &node.value {
        Value::Seq(items) => Ok(items.iter().collect()),
        Value::Null => Ok(Vec::new()),
        Value::Map(_) => Err("expected a list, found a mapping".into()),
        _ => Ok(vec![node]),
    }
}

/// The entries of a mapping (null is empty).
pub(crate) fn entries(node: &Node) -> Result<&[(Key, Node)], String> {
    match &node.value {
        Value::Map(entries) => Ok(entries),
        Value::Null => Ok(&[]),
        _ => Err(format!("expected a mapping, found {}", node.kind())),
    }
}

/// Reads the `init` keys of one component (and, for outbounds, the keys written beside
/// `class` that belong to it), recording problems. Handed to
/// [`InboundFactory::build`](crate::registry::InboundFactory::build) and its siblings.
pub struct InitReader<'a> {
    file: Arc<Path>,
    rule: String,
    name: String,
    pos: Pos,
    entries: Vec<(Key, Node)>,
    errors: &'a mut Vec<ConfigError>,
}

impl std::fmt::Debug for InitReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitReader")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

impl<'a> InitReader<'a> {
    pub(crate) fn new(
        file: Arc<Path>,
        rule: String,
        name: String,
        pos: Pos,
        entries: Vec<(Key, Node)>,
        errors: &'a mut Vec<ConfigError>,
    ) -> Self {
        InitReader {
            file,
            rule,
            name,
            pos,
            entries,
            errors,
        }
    }

    /// The name of the rule (inbound or outbound) being built.
    pub fn rule_name(&self) -> &str {
        &self.name
    }

    /// The config file the rule is in.
    pub fn file(&self) -> &Path {
        &self.file
    }

    fn find(&self, key: &str) -> Option<&Node> {
        self.entries
            .iter()
            .find(|(k, _)| k.text == key)
            .map(|(_, n)| n)
    }

    /// Records a problem at `key` (or at the rule when `key` is absent or `None`).
    pub fn error(&mut self, key: Option<&str>, message: impl Into<String>) {
        let pos = key.and_then(|k| self.find(k)).map_or(self.pos, |n| n.pos);
        let message = match key {
            Some(key) => format!("`{key}`: {}", message.into()),
            None => message.into(),
        };
        self.errors.push(
            ConfigError::new(&self.file, pos.line, pos.column, message).in_rule(Some(&self.rule)),
        );
    }

    fn read<T>(&mut self, key: &str, convert: impl Fn(&Node) -> Result<T, String>) -> Option<T> {
        let node = self.find(key)?;
        if matches!(node.value, Value::Null) {
            return None;
        }
        match convert(node) {
            Ok(value) => Some(value),
            Err(message) => {
                self.error(Some(key), message);
                None
            }
        }
    }

    /// A required text value; records "missing `key`" when absent.
    pub fn str(&mut self, key: &str) -> Option<String> {
        let value = self.read(key, text);
        if value.is_none()
            && self
                .find(key)
                .is_none_or(|n| matches!(n.value, Value::Null))
        {
            self.error(None, format!("missing `{key}` in `init`"));
        }
        value
    }

    /// An optional text value.
    pub fn opt_str(&mut self, key: &str) -> Option<String> {
        self.read(key, text)
    }

    /// An optional non-negative integer.
    pub fn opt_u64(&mut self, key: &str) -> Option<u64> {
        self.read(key, |n| {
            int(n).and_then(|i| {
                u64::try_from(i).map_err(|_| format!("expected a non-negative integer, found {i}"))
            })
        })
    }

    /// An optional boolean.
    pub fn opt_bool(&mut self, key: &str) -> Option<bool> {
        self.read(key, boolean)
    }

    /// An optional list of texts (one text is a list of one).
    pub fn opt_str_list(&mut self, key: &str) -> Option<Vec<String>> {
        self.read(key, |n| list(n)?.into_iter().map(text).collect())
    }

    /// A required mapping of client properties (librdkafka's `consumer_settings`): texts,
    /// numbers as written, booleans as `true`/`false`; records "missing `key`" when absent.
    pub fn settings(&mut self, key: &str) -> Option<Vec<(String, String)>> {
        if self
            .find(key)
            .is_none_or(|n| matches!(n.value, Value::Null))
        {
            self.error(None, format!("missing `{key}` in `init`"));
            return None;
        }
        self.read(key, |n| {
            entries(n)?
                .iter()
                .map(|(k, v)| match &v.value {
                    Value::Bool(b) => Ok((k.text.clone(), b.to_string())),
                    _ => Ok((
                        k.text.clone(),
                        text(v).map_err(|m| format!("`{}`: {m}", k.text))?,
                    )),
                })
                .collect()
        })
    }

    /// An optional mapping of texts.
    pub fn opt_str_map(&mut self, key: &str) -> Option<Vec<(String, String)>> {
        self.read(key, |n| {
            entries(n)?
                .iter()
                .map(|(k, v)| Ok((k.text.clone(), text(v)?)))
                .collect()
        })
    }
}
