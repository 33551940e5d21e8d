//! How answers are shown: tables and `key: value` descriptions for people, the API's JSON as
//! is for scripts, times and sizes in words.

use super::Answer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A plain-text table: a header row and cells padded to the widest of each column, two
/// spaces apart. The last column is not padded (no trailing spaces).
#[derive(Debug)]
pub struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones ignored).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        fn cell(row: &[String], i: usize) -> &str {
            row.get(i).map(String::as_str).unwrap_or("")
        }
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .map(|(h, _)| h.chars().count())
            .collect();
        for row in &self.rows {
            for (i, w) in widths.iter_mut().enumerate() {
                *w = (*w).max(cell(row, i).chars().count());
            }
        }
        let headers: Vec<String> = self.columns.iter().map(|(h, _)| (*h).to_owned()).collect();
        let mut out = String::new();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (_, align)) in self.columns.iter().enumerate() {
                let text = cell(row, i);
                let pad = widths[i].saturating_sub(text.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                match align {
                    Align::Left => {
                        line.push_str(text);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(text);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1.2 KiB`, `3.4 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `0.8s ago`, `3m 12s ago`, `2h 5m ago`; `in 3m 12s` for a time to come.
pub fn ago(then_ms: u64, now_ms: u64) -> String {
    if then_ms > now_ms {
        return format!("in {}", span(then_ms - now_ms));
    }
    format!("{} ago", span(now_ms - then_ms))
}

fn span(ms: u64) -> String {
    let s = ms / 1000;
    if s < 60 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if s < 3600 {
        format!("{}m {}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d {}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// `2026-11-21T10:00:00.123Z`.
pub fn timestamp(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `a,b,c`, or `a,b,c +2` for more than three, `-` for none.
pub fn agent_list<A: AsRef<str>>(agents: &[A]) -> String {
    let names: Vec<&str> = agents.iter().map(AsRef::as_ref).collect();
    match names.len() {
        0 => "-".into(),
        n if n <= 3 => names.join(","),
        n => format!("{} +{}", names[..3].join(","), n - 3),
    }
}

/// Prints an answer pretty, in the hub's key order.
/// Prints `value` as JSON (`--json`), or the table made of it.
pub fn show<T: serde::Serialize>(json: bool, value: &T, table: impl FnOnce() -> Table) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{}", table().render());
    }
}

pub fn print_json(answer: &Answer) {
    println!("{}", reindent(&answer.text));
}

/// Writes `text` to stdout; a reader that went away (`silk items R | head`) is no error.
/// Returns false when stdout is closed.
pub fn out(text: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => false,
        // Nothing better to do with a failing stdout than to stop writing.
        Err(_) => false,
    }
}

/// Pretty-prints valid JSON text as `serde_json::to_string_pretty` would, but keeping the key
/// order of the text (a `Value` sorts keys).
pub fn reindent(text: &str) -> String {
    fn newline(out: &mut String, depth: usize) {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    }
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
                match chars.next_if(|c| matches!(c, '}' | ']')) {
                    Some(close) => out.push(close),
                    None => {
                        depth += 1;
                        newline(&mut out, depth);
                    }
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// A JSON value whose objects keep the key order of the text.
#[derive(Debug, Clone, PartialEq)]
pub enum Ordered {
    Object(Vec<(String, Ordered)>),
    Other(Value),
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Ordered>()? {
                    fields.push((k, v));
                }
                Ok(Ordered::Object(fields))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<Ordered>()? {
                    items.push(v.into_value());
                }
                Ok(Ordered::Other(Value::Array(items)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Other(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::Other(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::Other(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::Other(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::Other(v.into()))
            }
            fn visit_string<E>(self, v: String) -> Result<Ordered, E> {
                Ok(Ordered::Other(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Other(Value::Null))
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Other(Value::Null))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Ordered, D::Error> {
                Ordered::deserialize(d)
            }
        }
        d.deserialize_any(V)
    }
}

impl Ordered {
    fn into_value(self) -> Value {
        match self {
            Ordered::Object(fields) => Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k, v.into_value()))
                    .collect(),
            ),
            Ordered::Other(v) => v,
        }
    }
}

/// An object answer as `key: value` lines for people, in the hub's key order: nested objects
/// indented, times (`*_ms` past the year 2001) as dates with their distance from `now_ms`,
/// other `*_ms` as durations, multi-line text as an indented block, null as `-`. `skip` keys
/// are left out.
pub fn describe(text: &str, now_ms: u64, skip: &[&str]) -> String {
    let Ok(value) = serde_json::from_str::<Ordered>(text) else {
        return reindent(text) + "\n";
    };
    let mut out = String::new();
    match value {
        Ordered::Object(fields) => describe_fields(&mut out, &fields, 0, now_ms, skip),
        Ordered::Other(v) => {
            out.push_str(&v.to_string());
            out.push('\n');
        }
    }
    out
}

fn describe_fields(
    out: &mut String,
    fields: &[(String, Ordered)],
    depth: usize,
    now_ms: u64,
    skip: &[&str],
) {
    let shown: Vec<&(String, Ordered)> = fields
        .iter()
        .filter(|(k, _)| depth > 0 || !skip.contains(&k.as_str()))
        .collect();
    let width = shown
        .iter()
        .filter(|(_, v)| !is_block(v))
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let indent = "  ".repeat(depth);
    for (key, value) in shown {
        match value {
            Ordered::Object(inner) if inner.is_empty() => {
                out.push_str(&format!("{indent}{key}:{}-\n", pad(key, width)));
            }
            Ordered::Object(inner) => {
                out.push_str(&format!("{indent}{key}:\n"));
                describe_fields(out, inner, depth + 1, now_ms, skip);
            }
            Ordered::Other(Value::String(s)) if s.contains('\n') => {
                out.push_str(&format!("{indent}{key}: |\n"));
                for line in s.trim_end_matches('\n').lines() {
                    out.push_str(&format!("{indent}  {line}\n"));
                }
            }
            Ordered::Other(v) => {
                let text = scalar(key, v, now_ms);
                out.push_str(&format!("{indent}{key}:{}{text}\n", pad(key, width)));
            }
        }
    }
}

fn is_block(v: &Ordered) -> bool {
    match v {
        Ordered::Object(inner) => !inner.is_empty(),
        Ordered::Other(Value::String(s)) => s.contains('\n'),
        Ordered::Other(_) => false,
    }
}

fn pad(key: &str, width: usize) -> String {
    " ".repeat(width.saturating_sub(key.chars().count()) + 1)
}

/// Times after 2001-09-09 (10¹² ms) read as dates; smaller `*_ms` values as durations.
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

fn scalar(key: &str, v: &Value, now_ms: u64) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "\"\"".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) if key.ends_with("_ms") => match n.as_u64() {
            Some(ms) if ms >= EPOCH_MS_FLOOR => format!("{} ({})", timestamp(ms), ago(ms, now_ms)),
            Some(ms) => humantime::format_duration(Duration::from_millis(ms)).to_string(),
            None => n.to_string(),
        },
        Value::Number(n) if n.is_f64() => format!("{:.2}", n.as_f64().unwrap_or_default()),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&[
            ("ID", Align::Left),
            ("N", Align::Right),
            ("NOTE", Align::Left),
        ]);
        t.row(vec!["a".into(), "100".into(), "x".into()]);
        t.row(vec!["long-id".into(), "2".into(), String::new()]);
        assert_eq!(
            t.render(),
            "ID         N  NOTE\na        100  x\nlong-id    2\n"
        );
    }

    #[test]
    fn json_is_reindented_in_its_own_order() {
        let value = json!({"b": [1, {"x": "a,b:{[\\\"]}"}], "a": {}, "c": [], "d": null});
        let compact = serde_json::to_string(&value).unwrap();
        assert_eq!(
            reindent(&compact),
            serde_json::to_string_pretty(&value).unwrap()
        );
        assert_eq!(
            reindent("{\"z\": 1, \"a\": [ ]}"),
            "{\n  \"z\": 1,\n  \"a\": []\n}"
        );
    }

    #[test]
    fn words_for_times_and_sizes() {
        assert_eq!(ago(0, 200_000), "3m 20s ago");
        assert_eq!(ago(200_000, 0), "in 3m 20s");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(timestamp(1_795_255_200_123), "2026-11-21T10:00:00.123Z");
        assert_eq!(agent_list::<&str>(&[]), "-");
    }

    #[test]
    fn descriptions_keep_the_order_and_read_times_and_blocks() {
        let now = 1_795_255_260_000;
        let text = r#"{"name":"shop","id":"j1","spider":"name: shop\nstart_urls: []\n",
            "cron":null,"enabled":true,"timeout_ms":3600000,"next_fire_ms":1795255320000,
            "args":{},"tags":["a","b"],"retry":{"max_retries":2,"delay_ms":60000,"backoff":1.5}}"#;
        assert_eq!(
            describe(text, now, &[]),
            "name:         shop\n\
             id:           j1\n\
             spider: |\n  name: shop\n  start_urls: []\n\
             cron:         -\n\
             enabled:      yes\n\
             timeout_ms:   1h\n\
             next_fire_ms: 2026-11-21T10:02:00.000Z (in 1m 0s)\n\
             args:         -\n\
             tags:         a, b\n\
             retry:\n  max_retries: 2\n  delay_ms:    1m\n  backoff:     1.50\n"
        );
        assert_eq!(
            describe(r#"{"a":1,"spider":"x"}"#, now, &["spider"]),
            "a: 1\n"
        );
    }
}
