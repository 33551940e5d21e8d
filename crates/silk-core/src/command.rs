//! External commands a run may ask a machine to run (today: an agent's proxy provider and
//! its ADSL re-dial), and the rule that keeps them behind the token boundary.
//!
//! A command in a run's downloader config has one of three forms:
//!
//! | JSON | form | who may send it |
//! |---|---|---|
//! | `{"command": "NAME"}` | **named**: a command the agent's admin defined under `NAME` (`silk agent --commands FILE`) | any token |
//! | `["/usr/bin/prog", "--arg"]` | **raw** program and arguments, run without a shell | admin tokens only; the agent must allow raw commands |
//! | `"prog --arg \| filter"` | **raw** shell line, run with `sh -c` (asked for by giving a string) | admin tokens only; the agent must allow raw commands |
//!
//! **Invariant:** nothing a non-admin token sends runs code on a machine: the hub refuses a
//! raw command from such a token ([`raw_command_fields`] finds them in a downloader config,
//! by the paths in [`COMMAND_FIELDS`]), and an agent runs a raw command only when its own
//! configuration allows raw commands, whatever the hub says. Named commands are resolved on
//! the agent, from its own definitions.
//!
//! This module is pure: it parses and classifies, it runs nothing.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The places in a downloader config (the JSON object sent with `allocate`) that hold a
/// command, as key paths.
pub const COMMAND_FIELDS: &[&[&str]] = &[&["proxies", "provider"], &["redial", "command"]];

/// A command of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandSpec {
    /// A shell line, run with `sh -c` (raw).
    Shell(String),
    /// Program and arguments, run without a shell (raw).
    Argv(Vec<String>),
    /// A command the agent's admin defined under this name.
    Named(String),
}

impl CommandSpec {
    /// Whether the command is raw (given by the sender, not named): only admins may send it.
    pub fn is_raw(&self) -> bool {
        !matches!(self, CommandSpec::Named(_))
    }

    /// Why the command cannot be run, if it cannot.
    pub fn problem(&self) -> Option<&'static str> {
        match self {
            CommandSpec::Shell(line) if line.trim().is_empty() => Some("empty command"),
            CommandSpec::Argv(argv) if argv.first().is_none_or(|p| p.trim().is_empty()) => {
                Some("empty command (the list starts with the program)")
            }
            CommandSpec::Named(name) if !valid_name(name) => {
                Some("a command name is 1 to 64 characters of letters, digits, `-`, `_` and `.`")
            }
            _ => None,
        }
    }

    /// What to call the command in logs and errors: `` `NAME` ``, or the program of a raw
    /// command (`` (raw: program `P`) ``; its arguments may hold secrets, so they are never
    /// shown).
    pub fn log_label(&self) -> String {
        match self {
            CommandSpec::Named(name) => format!("`{name}`"),
            CommandSpec::Argv(argv) => format!(
                "(raw: program `{}`)",
                argv.first().map_or("", String::as_str)
            ),
            CommandSpec::Shell(line) => format!(
                "(raw shell line: program `{}`)",
                line.split_whitespace().next().unwrap_or("")
            ),
        }
    }
}

/// Whether `name` may name a command: `[A-Za-z0-9._-]{1,64}`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl fmt::Display for CommandSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandSpec::Shell(line) => f.write_str(line),
            CommandSpec::Argv(argv) => f.write_str(&argv.join(" ")),
            CommandSpec::Named(name) => write!(f, "{{command: {name}}}"),
        }
    }
}

impl Serialize for CommandSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CommandSpec::Shell(line) => s.serialize_str(line),
            CommandSpec::Argv(argv) => argv.serialize(s),
            CommandSpec::Named(name) => {
                use serde::ser::SerializeMap;
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("command", name)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for CommandSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        CommandSpec::from_json(&serde_json::Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

impl CommandSpec {
    /// Reads a command from its JSON form; the error says which forms are accepted.
    pub fn from_json(value: &serde_json::Value) -> Result<CommandSpec, String> {
        use serde_json::Value;
        const FORMS: &str = "expected {\"command\": NAME} (a command defined on the agent), \
                             a list [program, args…] or a shell line";
        match value {
            Value::String(line) => Ok(CommandSpec::Shell(line.clone())),
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .map(CommandSpec::Argv)
                .ok_or_else(|| {
                    format!("every item of a [program, args…] list is a string; {FORMS}")
                }),
            Value::Object(map) => match (map.get("command"), map.len()) {
                (Some(Value::String(name)), 1) => Ok(CommandSpec::Named(name.clone())),
                (Some(_), 1) => Err(format!("`command` is a name (a string); {FORMS}")),
                _ => {
                    let keys: Vec<&str> = map.keys().map(String::as_str).collect();
                    Err(format!("unexpected keys {keys:?}; {FORMS}"))
                }
            },
            _ => Err(FORMS.to_owned()),
        }
    }
}

/// The key paths (`proxies.provider`, …) of `config`, a downloader config as JSON, that hold
/// a raw command (one a non-admin token may not send). A value that is not a command at all
/// is reported too: whoever checks the config further refuses it, and the caller must not
/// let it through as "not a command".
pub fn raw_command_fields(config: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    let mut found = Vec::new();
    for path in COMMAND_FIELDS {
        let Some((first, rest)) = path.split_first() else {
            continue;
        };
        let mut value = config.get(*first);
        for key in rest {
            value = value.and_then(|v| v.get(*key));
        }
        match value {
            None | Some(serde_json::Value::Null) => {}
            Some(v) => {
                if CommandSpec::from_json(v).is_ok_and(|c| !c.is_raw()) {
                    continue;
                }
                found.push(path.join("."));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_forms_round_trip() {
        for (text, spec) in [
            (
                json!("echo a | tr a b"),
                CommandSpec::Shell("echo a | tr a b".into()),
            ),
            (
                json!(["/bin/prog", "--x"]),
                CommandSpec::Argv(vec!["/bin/prog".into(), "--x".into()]),
            ),
            (
                json!({"command": "proxies-cn"}),
                CommandSpec::Named("proxies-cn".into()),
            ),
        ] {
            let parsed: CommandSpec = serde_json::from_value(text.clone()).unwrap();
            assert_eq!(parsed, spec);
            assert_eq!(serde_json::to_value(&parsed).unwrap(), text);
        }
        for bad in [
            json!(3),
            json!([1]),
            json!({"command": 1}),
            json!({"argv": ["x"]}),
            json!({"command": "a", "shell": true}),
        ] {
            let err = serde_json::from_value::<CommandSpec>(bad.clone()).unwrap_err();
            assert!(
                err.to_string().contains("expected {\"command\": NAME}"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn names_are_checked_and_logs_never_show_arguments() {
        assert!(CommandSpec::Named("a b".into()).problem().is_some());
        assert_eq!(CommandSpec::Named("redial.adsl-1".into()).problem(), None);
        let shell = CommandSpec::Shell("curl -H 'key: s3cret' http://x".into());
        assert!(!shell.log_label().contains("s3cret") && shell.log_label().contains("curl"));
        let argv = CommandSpec::Argv(vec!["prog".into(), "--token=s3cret".into()]);
        assert!(!argv.log_label().contains("s3cret"));
    }

    #[test]
    fn raw_fields_are_found_named_ones_are_not() {
        let config = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert!(raw_command_fields(&config(json!({"qps": 3}))).is_empty());
        assert!(
            raw_command_fields(&config(json!({
                "proxies": {"provider": {"command": "p"}},
                "redial": {"command": {"command": "r"}}
            })))
            .is_empty()
        );
        assert_eq!(
            raw_command_fields(&config(json!({
                "proxies": {"provider": "touch pwned; echo http://127.0.0.1:9"},
                "redial": {"command": ["pppoe-start"]}
            }))),
            ["proxies.provider", "redial.command"]
        );
        // Not a command at all: reported, never waved through.
        assert_eq!(
            raw_command_fields(&config(json!({"redial": {"command": {"shell": "x"}}}))),
            ["redial.command"]
        );
        // Shapes that hold no command at those paths.
        assert!(raw_command_fields(&config(json!({"proxies": [1], "redial": 3}))).is_empty());
    }
}
