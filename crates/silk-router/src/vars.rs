//! Variables for `{placeholder}`s in config values: from `--var name=value`, from var files
//! (YAML mappings of scalars) and from the environment, in that order of precedence.
//!
//! Placeholders are filled in string values after YAML parsing (never in the raw text, so a
//! value cannot break the YAML around it): `url: '{redis_url}'` becomes
//! `url: redis://…`. A placeholder is `{` name `}` with a name of letters, digits, `_`, `.`
//! and `-` starting with a letter or `_`; any other brace text is left alone, and `{{` / `}}`
//! write a literal brace. Values are never logged or put in error messages (they may hold
//! passwords); only names are.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::ConfigError;
use crate::yaml::{self, Node, Pos, Value};

/// Where placeholder values come from. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Vars {
    explicit: BTreeMap<String, String>,
    from_files: BTreeMap<String, String>,
    use_env: bool,
}

impl Default for Vars {
    fn default() -> Self {
        Vars::new()
    }
}

impl Vars {
    /// No variables yet; the environment is consulted.
    pub fn new() -> Vars {
        Vars {
            explicit: BTreeMap::new(),
            from_files: BTreeMap::new(),
            use_env: true,
        }
    }

    /// Whether the environment is consulted (default yes); tests turn it off.
    pub fn with_env(mut self, use_env: bool) -> Vars {
        self.use_env = use_env;
        self
    }

    /// Sets `name` (a `--var`); it wins over var files and the environment.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Vars {
        self.explicit.insert(name.into(), value.into());
        self
    }

    /// Parses `name=value` (the `--var` argument form).
    pub fn set_arg(&mut self, arg: &str) -> Result<&mut Vars, String> {
        match arg.split_once('=') {
            Some((name, value)) if is_name(name) => Ok(self.set(name, value)),
            _ => Err(format!(
                "`--var` expects `name=value` with a name of letters, digits, `_`, `.`, `-`: got `{}`",
                arg.split('=').next().unwrap_or("")
            )),
        }
    }

    /// Reads a var file: a YAML mapping of names to scalars. Later files override earlier
    /// ones; `--var`s override both.
    pub fn load_file(&mut self, path: &Path) -> Result<&mut Vars, Vec<ConfigError>> {
        let file: Arc<Path> = Arc::from(path);
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![ConfigError::new(
                &file,
                0,
                0,
                format!("cannot read var file: {e}"),
            )]
        })?;
        let doc = yaml::parse(&text).map_err(|p| {
            vec![ConfigError::new(
                &file,
                p.pos.line,
                p.pos.column,
                format!("invalid YAML: {}", p.message),
            )]
        })?;
        let mut errors = Vec::new();
        match doc.root.value {
            Value::Null => {}
            Value::Map(entries) => {
                for (key, node) in entries {
                    if !is_name(&key.text) {
                        errors.push(ConfigError::new(
                            &file,
                            key.pos.line,
                            key.pos.column,
                            format!("`{}` is not a variable name", key.text),
                        ));
                        continue;
                    }
                    match node.as_text() {
                        Some(text) => {
                            self.from_files.insert(key.text, text);
                        }
                        None => errors.push(ConfigError::new(
                            &file,
                            node.pos.line,
                            node.pos.column,
                            format!(
                                "variable `{}` must be a scalar, not {}",
                                key.text,
                                node.kind()
                            ),
                        )),
                    }
                }
            }
            _ => errors.push(ConfigError::new(
                &file,
                doc.root.pos.line,
                doc.root.pos.column,
                "a var file is a mapping of names to values",
            )),
        }
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(errors)
        }
    }

    /// The value of `name`: `--var`, then var files, then the environment variable `name`,
    /// then `NAME` (upper-cased).
    pub fn get(&self, name: &str) -> Option<String> {
        if let Some(v) = self
            .explicit
            .get(name)
            .or_else(|| self.from_files.get(name))
        {
            return Some(v.clone());
        }
        if self.use_env {
            let upper = name.to_ascii_uppercase().replace(['.', '-'], "_");
            return std::env::var(name)
                .ok()
                .or_else(|| std::env::var(upper).ok());
        }
        None
    }
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// An unfilled placeholder: its name and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unfilled {
    pub name: String,
    pub pos: Pos,
}

/// Fills every placeholder in the string values under `node`, returning the unfilled ones.
pub(crate) fn fill(node: &mut Node, vars: &Vars) -> Vec<Unfilled> {
    let mut unfilled = Vec::new();
    fill_into(node, vars, &mut unfilled);
    unfilled
}

fn fill_into(node: &mut Node, vars: &Vars, unfilled: &mut Vec<Unfilled>) {
    let pos = node.pos;
    match &mut node.value {
        Value::Str(s) if s.contains(['{', '}']) => {
            *s = fill_str(s, vars, |name| {
                unfilled.push(Unfilled {
                    name: name.to_owned(),
                    pos,
                })
            });
        }
        Value::Seq(items) => items.iter_mut().for_each(|n| fill_into(n, vars, unfilled)),
        Value::Map(entries) => entries
            .iter_mut()
            .for_each(|(_, n)| fill_into(n, vars, unfilled)),
        _ => {}
    }
}

/// Fills the placeholders of one string; `missing` is called with each unknown name.
pub(crate) fn fill_str(s: &str, vars: &Vars, mut missing: impl FnMut(&str)) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        let end = if tail.starts_with('{') {
            tail.find('}').filter(|&end| is_name(&tail[1..end]))
        } else {
            None
        };
        if let Some(end) = end {
            let name = &tail[1..end];
            match vars.get(name) {
                Some(value) => out.push_str(&value),
                None => {
                    missing(name);
                    out.push_str(&tail[..=end]);
                }
            }
            rest = &tail[end + 1..];
            continue;
        }
        out.push_str(&tail[..1]);
        rest = &tail[1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_and_escapes() {
        let mut vars = Vars::new().with_env(false);
        vars.set("redis_url", "redis://127.0.0.1:6379/0");
        let mut missing = Vec::new();
        let filled = fill_str("{redis_url}/x {{literal}} {0} {nope} }", &vars, |n| {
            missing.push(n.to_owned())
        });
        assert_eq!(filled, "redis://127.0.0.1:6379/0/x {literal} {0} {nope} }");
        assert_eq!(missing, vec!["nope"]);
    }

    #[test]
    fn precedence_var_over_file_over_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vars.yaml");
        std::fs::write(&path, "a: from_file\nb: 2\n").expect("write");
        let mut vars = Vars::new().with_env(false);
        vars.load_file(&path).expect("loads");
        vars.set_arg("a=from_arg").expect("valid");
        assert_eq!(vars.get("a").as_deref(), Some("from_arg"));
        assert_eq!(vars.get("b").as_deref(), Some("2"));
        assert!(vars.set_arg("no equals").is_err());
    }
}
