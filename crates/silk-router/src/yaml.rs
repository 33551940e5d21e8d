//! YAML text → a [`Node`] tree where every node knows its line and column, so that config
//! errors can point at the rule and key they are about.
//!
//! Parsing uses `saphyr-parser` (pure Rust, YAML 1.2, an event stream with a span on every
//! event). Scalars are resolved the way PyYAML (which taskHUB used) resolves them, because
//! existing configs were written against it: `True`/`False`/`yes`/`no`/`on`/`off` are
//! booleans, `~`/`null`/empty are null, `0x1f`, `0o17`, `017` (octal) and `1_000` are
//! integers, a float needs a dot (`1e3` is a string, as in PyYAML) or is `.inf`/`.nan`.
//! Quoted scalars are always strings; `!!str`/`!!int`/`!!float`/`!!bool`/`!!null` tags
//! force a type. Anchors, aliases and `<<` merge keys work as in PyYAML. A duplicate key
//! keeps the last value, as in PyYAML, and is reported as a warning.
//!
//! This module must not know anything about the router's config keys. It bounds what an
//! input can cost: at most [`MAX_NODES`] nodes after alias expansion and [`MAX_DEPTH`]
//! levels of nesting, so an alias bomb or a deep nest is an error, not an exhausted memory
//! or stack.

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Most nodes a document may expand to (aliases count each time they are used).
pub const MAX_NODES: usize = 1_000_000;
/// Deepest nesting of sequences and mappings.
pub const MAX_DEPTH: usize = 64;

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// A YAML node with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub pos: Pos,
    /// The source text of a plain scalar that resolved to something other than a string
    /// (`on`, `3`, `1.0`), so that a key expecting text can take it as written.
    pub raw: Option<Box<str>>,
}

/// A resolved YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order; keys are scalars, kept as text.
    Map(Vec<(Key, Node)>),
}

/// A mapping key: its text and position.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub text: String,
    pub pos: Pos,
}

/// A problem with the YAML itself.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlProblem {
    pub pos: Pos,
    pub message: String,
}

/// The parsed document and the warnings found on the way (duplicate keys).
#[derive(Debug)]
pub struct Document {
    pub root: Node,
    pub warnings: Vec<YamlProblem>,
}

impl Node {
    /// The scalar as text: strings as they are, other scalars as written.
    pub fn as_text(&self) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
                Some(match &self.raw {
                    Some(raw) => raw.to_string(),
                    None => scalar_text(&self.value),
                })
            }
            Value::Seq(_) | Value::Map(_) => None,
        }
    }

    /// The node as JSON (keys become strings; NaN and infinities become null).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => {
                let mut map = serde_json::Map::new();
                for (key, node) in entries {
                    map.insert(key.text.clone(), node.to_json());
                }
                serde_json::Value::Object(map)
            }
        }
    }

    /// A short name of the node's type, for error messages.
    pub fn kind(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => if *b { "true" } else { "false" }.into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        _ => String::new(),
    }
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

/// Parses one YAML document. An empty input is a null root.
pub fn parse(text: &str) -> Result<Document, YamlProblem> {
    // The parser is a dependency; a bug in it must be an error here, not a crash of the
    // router or of `silk router check`.
    std::panic::catch_unwind(|| parse_document(text)).unwrap_or_else(|_| {
        Err(YamlProblem {
            pos: Pos::default(),
            message: "the YAML parser failed on this input".into(),
        })
    })
}

fn parse_document(text: &str) -> Result<Document, YamlProblem> {
    let mut builder = Builder::default();
    let mut documents = 0usize;
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| YamlProblem {
            pos: Pos {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            },
            message: e.info().to_owned(),
        })?;
        let pos = pos_of(&span);
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(YamlProblem {
                        pos,
                        message: "more than one YAML document (`---`) in one file".into(),
                    });
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let tag = tag.map(|t| format!("{}{}", t.handle, t.suffix));
                let node = resolve_scalar(&text, style, tag.as_deref(), pos)?;
                builder.add(node, anchor)?;
            }
            Event::SequenceStart(anchor, _) => builder.open(Frame::Seq(Vec::new()), anchor, pos)?,
            Event::MappingStart(anchor, _) => {
                builder.open(Frame::Map(Vec::new(), None), anchor, pos)?
            }
            Event::SequenceEnd | Event::MappingEnd => builder.close()?,
            Event::Alias(id) => {
                let node = builder
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| YamlProblem {
                        pos,
                        message: "alias to an unknown anchor".into(),
                    })?;
                builder.count(count_nodes(&node), pos)?;
                builder.add(node, 0)?;
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
    Ok(Document {
        root: builder.root.unwrap_or(Node {
            value: Value::Null,
            pos: Pos { line: 1, column: 1 },
            raw: None,
        }),
        warnings: builder.warnings,
    })
}

enum Frame {
    Seq(Vec<Node>),
    /// Entries so far and the key waiting for its value.
    Map(Vec<(Key, Node)>, Option<Node>),
}

#[derive(Default)]
struct Builder {
    stack: Vec<(Frame, usize, Pos)>,
    anchors: std::collections::HashMap<usize, Node>,
    root: Option<Node>,
    nodes: usize,
    warnings: Vec<YamlProblem>,
}

impl Builder {
    fn count(&mut self, n: usize, pos: Pos) -> Result<(), YamlProblem> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(YamlProblem {
                pos,
                message: format!("document expands to more than {MAX_NODES} nodes (alias bomb?)"),
            });
        }
        Ok(())
    }

    fn open(&mut self, frame: Frame, anchor: usize, pos: Pos) -> Result<(), YamlProblem> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlProblem {
                pos,
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
            });
        }
        self.count(1, pos)?;
        self.stack.push((frame, anchor, pos));
        Ok(())
    }

    fn close(&mut self) -> Result<(), YamlProblem> {
        let Some((frame, anchor, pos)) = self.stack.pop() else {
            return Ok(());
        };
        let value = match frame {
            Frame::Seq(items) => Value::Seq(items),
            Frame::Map(entries, _) => Value::Map(apply_merges(entries, &mut self.warnings)?),
        };
        self.add(
            Node {
                value,
                pos,
                raw: None,
            },
            anchor,
        )
    }

    fn add(&mut self, node: Node, anchor: usize) -> Result<(), YamlProblem> {
        if !matches!(node.value, Value::Seq(_) | Value::Map(_)) {
            self.count(1, node.pos)?;
        }
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some((Frame::Seq(items), _, _)) => items.push(node),
            Some((Frame::Map(_, pending @ None), _, _)) => *pending = Some(node),
            Some((Frame::Map(entries, pending @ Some(_)), _, _)) => {
                let key_node = pending.take().unwrap_or_else(|| node.clone());
                let Some(text) = key_node.as_text() else {
                    return Err(YamlProblem {
                        pos: key_node.pos,
                        message: "a mapping key must be a scalar, not a list or mapping".into(),
                    });
                };
                entries.push((
                    Key {
                        text,
                        pos: key_node.pos,
                    },
                    node,
                ));
            }
        }
        Ok(())
    }
}

/// Applies `<<` merge keys (explicit keys win, then earlier merged maps) and keeps the last
/// of duplicate keys, warning about them.
fn apply_merges(
    entries: Vec<(Key, Node)>,
    warnings: &mut Vec<YamlProblem>,
) -> Result<Vec<(Key, Node)>, YamlProblem> {
    let mut own: Vec<(Key, Node)> = Vec::with_capacity(entries.len());
    let mut merged: Vec<(Key, Node)> = Vec::new();
    for (key, node) in entries {
        if key.text == "<<" {
            let sources: Vec<Node> = match node.value {
                Value::Map(_) => vec![node],
                Value::Seq(items) => items,
                _ => {
                    return Err(YamlProblem {
                        pos: key.pos,
                        message: "`<<` merges a mapping or a list of mappings".into(),
                    });
                }
            };
            for source in sources {
                let Value::Map(source_entries) = source.value else {
                    return Err(YamlProblem {
                        pos: source.pos,
                        message: "`<<` merges a mapping or a list of mappings".into(),
                    });
                };
                for (k, v) in source_entries {
                    if !merged.iter().any(|(m, _)| m.text == k.text) {
                        merged.push((k, v));
                    }
                }
            }
            continue;
        }
        if let Some(i) = own.iter().position(|(k, _)| k.text == key.text) {
            warnings.push(YamlProblem {
                pos: key.pos,
                message: format!(
                    "duplicate key `{}` (also at line {}); the last one is used, as PyYAML does",
                    key.text, own[i].0.pos.line
                ),
            });
            own.remove(i);
        }
        own.push((key, node));
    }
    for (k, v) in merged {
        if !own.iter().any(|(o, _)| o.text == k.text) {
            own.push((k, v));
        }
    }
    Ok(own)
}

fn count_nodes(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Value::Map(entries) => {
            1 + entries
                .iter()
                .map(|(_, v)| count_nodes(v) + 1)
                .sum::<usize>()
        }
        _ => 1,
    }
}

fn resolve_scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<&str>,
    pos: Pos,
) -> Result<Node, YamlProblem> {
    let string = |s: &str| Node {
        value: Value::Str(s.to_owned()),
        pos,
        raw: None,
    };
    let bad = |what: &str| YamlProblem {
        pos,
        message: format!("`{text}` is not {what}"),
    };
    if let Some(tag) = tag {
        let value = match tag {
            "tag:yaml.org,2002:str" | "!!str" => return Ok(string(text)),
            "tag:yaml.org,2002:int" | "!!int" => {
                Value::Int(parse_int(text).ok_or_else(|| bad("an integer"))?)
            }
            "tag:yaml.org,2002:float" | "!!float" => Value::Float(
                parse_float(text)
                    .or_else(|| parse_int(text).map(|i| i as f64))
                    .ok_or_else(|| bad("a number"))?,
            ),
            "tag:yaml.org,2002:bool" | "!!bool" => {
                Value::Bool(parse_bool(text).ok_or_else(|| bad("a boolean"))?)
            }
            "tag:yaml.org,2002:null" | "!!null" => Value::Null,
            other => {
                return Err(YamlProblem {
                    pos,
                    message: format!("unsupported tag `{other}`"),
                });
            }
        };
        return Ok(Node {
            value,
            pos,
            raw: Some(text.into()),
        });
    }
    if style != ScalarStyle::Plain {
        return Ok(string(text));
    }
    let value = if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        Value::Null
    } else if let Some(b) = parse_bool(text) {
        Value::Bool(b)
    } else if let Some(i) = parse_int(text) {
        Value::Int(i)
    } else if let Some(f) = parse_float(text) {
        Value::Float(f)
    } else {
        return Ok(string(text));
    };
    Ok(Node {
        value,
        pos,
        raw: Some(text.into()),
    })
}

/// PyYAML's (YAML 1.1) booleans.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// PyYAML's integers: decimal, `0x`, `0o`/leading-zero octal, `0b`, with `_` separators.
pub(crate) fn parse_int(text: &str) -> Option<i64> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if body.is_empty() || body.starts_with('_') {
        return None;
    }
    let digits: String = body.chars().filter(|c| *c != '_').collect();
    let (radix, digits) = if let Some(rest) = digits.strip_prefix("0x") {
        (16, rest)
    } else if let Some(rest) = digits.strip_prefix("0o") {
        (8, rest)
    } else if let Some(rest) = digits.strip_prefix("0b") {
        (2, rest)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(digits, radix).ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// PyYAML's floats: a dot is required, or `.inf`/`.nan`.
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    if !text.contains('.') {
        return None;
    }
    let cleaned: String = text.chars().filter(|c| *c != '_').collect();
    let valid = cleaned
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if !valid || !cleaned.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).expect("valid yaml").root
    }

    fn get<'n>(node: &'n Node, key: &str) -> &'n Node {
        match &node.value {
            Value::Map(entries) => &entries.iter().find(|(k, _)| k.text == key).expect("key").1,
            _ => panic!("not a map"),
        }
    }

    #[test]
    fn scalars_resolve_like_pyyaml() {
        let doc = root(
            "a: True\nb: off\nc: ~\nd: 0x1f\ne: 017\nf: 1_000\ng: 1.5\nh: 1e3\ni: '3'\nj: -.inf\nk: 破码\n",
        );
        assert_eq!(get(&doc, "a").value, Value::Bool(true));
        assert_eq!(get(&doc, "b").value, Value::Bool(false));
        assert_eq!(get(&doc, "c").value, Value::Null);
        assert_eq!(get(&doc, "d").value, Value::Int(31));
        assert_eq!(get(&doc, "e").value, Value::Int(15));
        assert_eq!(get(&doc, "f").value, Value::Int(1000));
        assert_eq!(get(&doc, "g").value, Value::Float(1.5));
        assert_eq!(get(&doc, "h").value, Value::Str("1e3".into()));
        assert_eq!(get(&doc, "i").value, Value::Str("3".into()));
        assert_eq!(get(&doc, "j").value, Value::Float(f64::NEG_INFINITY));
        assert_eq!(get(&doc, "k").value, Value::Str("破码".into()));
        assert_eq!(get(&doc, "b").as_text().as_deref(), Some("off"));
    }

    #[test]
    fn positions_are_one_based() {
        let doc = root("outbound:\n  - name: x\n    key: q\n");
        let outbound = get(&doc, "outbound");
        let Value::Seq(items) = &outbound.value else {
            panic!()
        };
        assert_eq!(items[0].pos.line, 2);
        assert_eq!(
            get(&items[0], "key").pos,
            Pos {
                line: 3,
                column: 10
            }
        );
    }

    #[test]
    fn anchors_merges_and_duplicates() {
        let doc = parse("base: &b {retry_limits: 3, key: a}\nx:\n  <<: *b\n  key: z\n  key: y\n")
            .expect("ok");
        let x = get(&doc.root, "x");
        assert_eq!(get(x, "key").value, Value::Str("y".into()));
        assert_eq!(get(x, "retry_limits").value, Value::Int(3));
        assert_eq!(doc.warnings.len(), 1);
        assert!(doc.warnings[0].message.contains("duplicate key `key`"));
    }

    #[test]
    fn bad_input_is_an_error_with_position() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.pos.line >= 1, "{err:?}");
        let bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n";
        assert!(parse(bomb).unwrap_err().message.contains("alias bomb"));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(&deep).unwrap_err().message.contains("nesting"));
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }
}
