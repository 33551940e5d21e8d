//! Job files: YAML with the fields of the API's `JobSpec` (`name`, `spider`, `cron`, `args`,
//! …), turned into the JSON body of `POST /api/v1/jobs` (or, for an update, of `PATCH`).
//!
//! The spider comes inline, as the text of a spider file (`spider: |`) or as a mapping (sent
//! as YAML text), or from a file: `spider_file: shop.yaml`, relative to the job file. Errors
//! name the file and the line.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Where a job file's text came from.
#[derive(Debug, Clone)]
pub enum Origin {
    /// A file.
    File(PathBuf),
    /// Standard input (`-f -`).
    Stdin,
}

impl Origin {
    /// `-` means standard input.
    pub fn of(path: &Path) -> Self {
        if path == Path::new("-") {
            Origin::Stdin
        } else {
            Origin::File(path.to_owned())
        }
    }

    pub fn name(&self) -> String {
        match self {
            Origin::File(p) => p.display().to_string(),
            Origin::Stdin => "<stdin>".into(),
        }
    }

    /// The directory `spider_file` is relative to.
    fn base_dir(&self) -> PathBuf {
        match self {
            Origin::File(p) => p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_owned),
            Origin::Stdin => PathBuf::from("."),
        }
    }

    /// Reads the text.
    pub fn read(&self) -> anyhow::Result<String> {
        match self {
            Origin::File(p) => std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read job file {}: {e}", p.display())),
            Origin::Stdin => std::io::read_to_string(std::io::stdin())
                .map_err(|e| anyhow::anyhow!("cannot read the job from stdin: {e}")),
        }
    }
}

/// Whether the job file must say what the spider is (create), or may leave it out (update).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Spider,
    Nothing,
}

/// Parses a job file's `text` into the JSON object the API takes: `spider_file` is read and
/// sent as `spider`, a mapping `spider` is sent as YAML text. `read` reads a spider file.
pub fn job_body(
    text: &str,
    origin: &Origin,
    need: Need,
    read: impl Fn(&Path) -> std::io::Result<String>,
) -> Result<Map<String, Value>, String> {
    let name = origin.name();
    let value: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        // Through YAML's own value: it refuses duplicate keys (JSON's would keep the last).
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| yaml_error(&name, &e))?;
        serde_json::to_value(yaml).map_err(|e| format!("{name}: not a job: {e}"))?
    };
    let mut body = match value {
        Value::Object(map) => map,
        Value::Null if need == Need::Nothing => Map::new(),
        Value::Null => return Err(format!("{name}: the job file is empty")),
        other => {
            return Err(format!(
                "{name}: expected a mapping of job fields (name, spider, cron, args, …), found {}",
                kind(&other)
            ));
        }
    };
    match (body.remove("spider_file"), body.contains_key("spider")) {
        (Some(_), true) => {
            return Err(format!(
                "{name}: `spider` and `spider_file` both say what the spider is; keep one"
            ));
        }
        (Some(Value::String(file)), false) => {
            let path = origin.base_dir().join(&file);
            let spider = read(&path).map_err(|e| {
                format!(
                    "{name}: cannot read spider_file {file} ({}): {e}",
                    path.display()
                )
            })?;
            body.insert("spider".into(), Value::String(spider));
        }
        (Some(other), false) => {
            return Err(format!(
                "{name}: `spider_file` must be a path, found {}",
                kind(&other)
            ));
        }
        (None, _) => {}
    }
    match body.get_mut("spider") {
        Some(spider @ Value::Object(_)) => {
            let text =
                serde_yaml_ng::to_string(spider).map_err(|e| format!("{name}: `spider`: {e}"))?;
            *spider = Value::String(text);
        }
        Some(Value::String(_)) | Some(Value::Null) => {}
        Some(other) => {
            return Err(format!(
                "{name}: `spider` must be the spider's YAML (text or mapping), found {}",
                kind(other)
            ));
        }
        None if need == Need::Spider => {
            return Err(format!(
                "{name}: no spider: give `spider` (the spider's YAML) or `spider_file: PATH`"
            ));
        }
        None => {}
    }
    Ok(body)
}

/// The line (1-based) of the job file where the field a hub error is about is written: the
/// error reads `invalid job: FIELD …` or `` invalid job: `FIELD[.inner]`: … ``, and the field
/// is a top-level key of the file (`spider` also matches `spider_file`, which the CLI turned
/// into it).
pub fn field_line(text: &str, message: &str) -> Option<usize> {
    let rest = message
        .split_once("invalid job: ")
        .map_or(message, |(_, rest)| rest);
    let rest = rest.strip_prefix("invalid request body: ").unwrap_or(rest);
    let field: String = rest
        .trim_start_matches('`')
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if field.is_empty() {
        return None;
    }
    let is_key = |line: &str, key: &str| {
        line.strip_prefix(key)
            .is_some_and(|after| after.trim_start().starts_with(':'))
    };
    let lines: Vec<&str> = text.lines().collect();
    let found = lines.iter().position(|l| is_key(l, &field));
    let found = match found {
        None if field == "spider" => lines.iter().position(|l| is_key(l, "spider_file")),
        other => other,
    };
    found.map(|i| i + 1)
}

/// `FILE:LINE:COLUMN: message` (the location once, at the front).
fn yaml_error(name: &str, e: &serde_yaml_ng::Error) -> String {
    let mut message = e.to_string();
    match e.location() {
        Some(at) => {
            let suffix = format!(" at line {} column {}", at.line(), at.column());
            // Said once, at the front.
            message = message.replacen(&suffix, "", 1);
            format!("{name}:{}:{}: bad YAML: {message}", at.line(), at.column())
        }
        None => format!("{name}: bad YAML: {message}"),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Parses `--arg NAME=VALUE`.
pub fn parse_arg(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err("expected NAME=VALUE".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_files(_: &Path) -> std::io::Result<String> {
        Err(std::io::Error::new(std::io::ErrorKind::NotFound, "nope"))
    }

    fn file(name: &str) -> Origin {
        Origin::File(PathBuf::from(name))
    }

    #[test]
    fn an_inline_spider_and_every_field_become_json() {
        let text = "name: shop\nspider: |\n  name: shop\n  start_urls: ['http://x/']\n\
                    cron: '*/5 * * * *'\nargs: {cat: books, n: 3}\ntimeout_ms: 3600000\n\
                    retry: {max_retries: 2, delay_ms: 60000}\nenabled: false\nremarks: null\n";
        let body = job_body(text, &file("jobs/shop.yaml"), Need::Spider, no_files).unwrap();
        assert_eq!(
            Value::Object(body),
            json!({"name": "shop", "spider": "name: shop\nstart_urls: ['http://x/']\n",
                   "cron": "*/5 * * * *", "args": {"cat": "books", "n": 3},
                   "timeout_ms": 3_600_000, "retry": {"max_retries": 2, "delay_ms": 60_000},
                   "enabled": false, "remarks": null})
        );
    }

    #[test]
    fn a_spider_file_is_read_relative_to_the_job_file() {
        let read = |p: &Path| {
            assert_eq!(p, Path::new("jobs/spiders/shop.yaml"));
            Ok("name: shop\n".to_owned())
        };
        let body = job_body(
            "name: s\nspider_file: spiders/shop.yaml\n",
            &file("jobs/shop.yaml"),
            Need::Spider,
            read,
        )
        .unwrap();
        assert_eq!(
            Value::Object(body),
            json!({"name": "s", "spider": "name: shop\n"})
        );
        // A bare file name: relative to the current directory.
        let read = |p: &Path| {
            assert_eq!(p, Path::new("./s.yaml"));
            Ok("x".to_owned())
        };
        job_body("spider_file: s.yaml", &file("job.yaml"), Need::Spider, read).unwrap();
        let e = job_body(
            "spider_file: s.yaml",
            &file("j.yaml"),
            Need::Spider,
            no_files,
        )
        .unwrap_err();
        assert!(
            e.starts_with("j.yaml: cannot read spider_file s.yaml (./s.yaml): nope"),
            "{e}"
        );
    }

    #[test]
    fn a_spider_mapping_is_sent_as_yaml_text() {
        let body = job_body(
            "name: s\nspider:\n  name: s\n  start_urls: ['http://x/']\n",
            &file("j.yaml"),
            Need::Spider,
            no_files,
        )
        .unwrap();
        let spider = body["spider"].as_str().unwrap();
        let back: Value = serde_yaml_ng::from_str(spider).unwrap();
        assert_eq!(back, json!({"name": "s", "start_urls": ["http://x/"]}));
    }

    #[test]
    fn bad_files_say_file_and_line() {
        let e = job_body(
            "name: shop\ncron: '*/5'\n  bad: [\n",
            &file("job.yaml"),
            Need::Spider,
            no_files,
        )
        .unwrap_err();
        assert!(e.starts_with("job.yaml:3:"), "{e}");
        assert!(e.contains("bad YAML") && !e.contains(" at line 3"), "{e}");
        let e = job_body(
            "name: a\nname: b\nspider: x\n",
            &file("j.yaml"),
            Need::Spider,
            no_files,
        )
        .unwrap_err();
        // The line of the mapping, and the key.
        assert!(
            e.starts_with("j.yaml:1:") && e.contains("duplicate entry with key \"name\""),
            "{e}"
        );
        for (text, says) in [
            ("", "empty"),
            ("- a\n- b\n", "found a list"),
            ("name: x\n", "no spider"),
            ("spider: x\nspider_file: y\n", "keep one"),
            ("spider_file: [a]\n", "must be a path"),
            ("spider: 3\n", "must be the spider's YAML"),
        ] {
            let e = job_body(text, &Origin::Stdin, Need::Spider, no_files).unwrap_err();
            assert!(
                e.starts_with("<stdin>: ") && e.contains(says),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn a_patch_may_leave_the_spider_out_and_clear_fields() {
        let body = job_body("cron: null\n", &file("p.yaml"), Need::Nothing, no_files).unwrap();
        assert_eq!(Value::Object(body), json!({"cron": null}));
        assert!(
            job_body("", &file("p.yaml"), Need::Nothing, no_files)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn hub_errors_point_at_the_field_line() {
        let text =
            "# job\nname: shop\nspider_file: s.yaml\ncron : '* *'\nretry:\n  max_retries: x\n";
        for (message, line) in [
            ("invalid job: cron `* *`: 2 fields", Some(4)),
            ("invalid job: `retry.max_retries`: invalid type", Some(5)),
            (
                "invalid job: spider placeholder `${args.x}` has no value",
                Some(3),
            ),
            ("invalid request body: `name`: invalid type", Some(2)),
            ("invalid job: `crn`: unknown field", None),
            ("something else", None),
        ] {
            assert_eq!(field_line(text, message), line, "{message}");
        }
    }

    #[test]
    fn args_are_name_value_pairs() {
        assert_eq!(parse_arg("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(parse_arg("a=").unwrap(), ("a".into(), String::new()));
        assert!(parse_arg("=x").is_err());
        assert!(parse_arg("x").is_err());
    }
}
