//! Start requests expanded from templates (seed 003 F4–F5: a job expands into its tasks).
//!
//! A spider's `expand` gives URL templates with `{name}` placeholders and, for each name, its
//! values: a list, an integer range, the lines of a file, or a trigger argument. The requests
//! are the product of the values, the first placeholder of the template varying slowest;
//! several templates follow one another. They are never all in memory: [`Expansion::get`]
//! makes the `i`-th from its index alone, so a frontier is fed in batches from a cursor (see
//! `silk_frontier::expand`), and ten million tasks cost a counter.
//!
//! `{name}` percent-encodes the value (all but RFC 3986's unreserved characters); `{+name}`
//! puts it in as it is (RFC 6570's reserved expansion: a path, a host); `{{` and `}}` are
//! literal braces.
//!
//! [`ExpandSpec::problems`] checks what can be checked without I/O (when the spider file is
//! parsed); [`Expansion::compile`] reads the files and the args (when a run starts).

use crate::error::CoreError;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What `{name}` encodes: everything but RFC 3986's unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Most values one list, file or argument may give (a file of keywords, not a database).
pub const MAX_VALUES: usize = 10_000_000;

/// One template and its parameters, as written in a spider file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpandSpec {
    /// The URL with `{name}` (encoded) and `{+name}` (as is) placeholders.
    pub template: String,
    /// The values of each placeholder.
    #[serde(default)]
    pub params: BTreeMap<String, ParamSpec>,
}

/// Where the values of one placeholder come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamSpec {
    /// These values (`[shoes, hats]`, or one scalar).
    Values(Vec<String>),
    /// `{range: [start, end]}` or `{range: [start, end, step]}`: integers, both ends
    /// included.
    Range { start: i64, end: i64, step: i64 },
    /// `{file: keywords.txt}`: one value per non-blank line of a file (of the run's project
    /// version on a hub; next to the spider file for `silk crawl`).
    File { file: String },
    /// `{arg: kw}` (`split: ","` by default): the trigger's argument `kw`, split.
    Arg { arg: String, split: String },
}

impl Serialize for ParamSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ParamSpec::Values(v) => v.serialize(s),
            ParamSpec::Range { start, end, step } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("range", &[*start, *end, *step])?;
                m.end()
            }
            ParamSpec::File { file } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("file", file)?;
                m.end()
            }
            ParamSpec::Arg { arg, split } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("arg", arg)?;
                m.serialize_entry("split", split)?;
                m.end()
            }
        }
    }
}

/// A list value: a string, a number or a boolean, kept as its text.
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor).map(Scalar)
    }
}

struct ScalarVisitor;

impl Visitor<'_> for ScalarVisitor {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, a number or a boolean")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
}

/// The object form of a parameter, before it is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamObject {
    range: Option<Vec<i64>>,
    file: Option<String>,
    arg: Option<String>,
    split: Option<String>,
}

impl<'de> Deserialize<'de> for ParamSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ParamSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a list of values, a value, or one of {range: [start, end, step]}, {file: PATH}, {arg: NAME}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ParamSpec, E> {
                Ok(ParamSpec::Values(vec![v.to_owned()]))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ParamSpec, E> {
                Ok(ParamSpec::Values(vec![v.to_string()]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ParamSpec, E> {
                Ok(ParamSpec::Values(vec![v.to_string()]))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ParamSpec, E> {
                Ok(ParamSpec::Values(vec![v.to_string()]))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ParamSpec, E> {
                Ok(ParamSpec::Values(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut q: A) -> Result<ParamSpec, A::Error> {
                let mut out = Vec::new();
                while let Some(Scalar(v)) = q.next_element()? {
                    if out.len() == MAX_VALUES {
                        return Err(de::Error::custom(format!("more than {MAX_VALUES} values")));
                    }
                    out.push(v);
                }
                Ok(ParamSpec::Values(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<ParamSpec, A::Error> {
                let o = ParamObject::deserialize(de::value::MapAccessDeserializer::new(m))?;
                let given = [o.range.is_some(), o.file.is_some(), o.arg.is_some()]
                    .into_iter()
                    .filter(|g| *g)
                    .count();
                if given != 1 {
                    return Err(de::Error::custom(
                        "give exactly one of `range`, `file`, `arg`",
                    ));
                }
                if o.split.is_some() && o.arg.is_none() {
                    return Err(de::Error::custom("`split` goes only with `arg`"));
                }
                if let Some(r) = o.range {
                    let (start, end, step) = match r[..] {
                        [start, end] => (start, end, 1),
                        [start, end, step] => (start, end, step),
                        _ => {
                            return Err(de::Error::custom(
                                "`range` takes [start, end] or [start, end, step]",
                            ));
                        }
                    };
                    return Ok(ParamSpec::Range { start, end, step });
                }
                if let Some(file) = o.file {
                    return Ok(ParamSpec::File { file });
                }
                Ok(ParamSpec::Arg {
                    arg: o.arg.unwrap_or_default(),
                    split: o.split.unwrap_or_else(|| ",".into()),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Lit(String),
    /// The value of dimension `dim`, percent-encoded unless `raw`.
    Slot {
        dim: usize,
        raw: bool,
    },
}

/// A template parsed: its pieces and its placeholder names in the order they first appear.
fn parse_template(t: &str) -> Result<(Vec<Piece>, Vec<String>), String> {
    let mut pieces = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut lit = String::new();
    let mut chars = t.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|p| p.1) == Some('{') => {
                chars.next();
                lit.push('{');
            }
            '}' if chars.peek().map(|p| p.1) == Some('}') => {
                chars.next();
                lit.push('}');
            }
            '}' => {
                return Err(format!(
                    "a `}}` at byte {at} closes nothing (write `}}}}` for a brace)"
                ));
            }
            '{' => {
                let rest = &t[at + 1..];
                let Some(close) = rest.find('}') else {
                    return Err(format!(
                        "the `{{` at byte {at} is not closed (write `{{{{` for a brace)"
                    ));
                };
                let inner = &rest[..close];
                let (raw, name) = match inner.strip_prefix('+') {
                    Some(n) => (true, n),
                    None => (false, inner),
                };
                if !valid_name(name) {
                    return Err(format!(
                        "`{{{inner}}}` is not a placeholder: a name is letters, digits and `_`, not starting with a digit (`{{+name}}` for a value as is)"
                    ));
                }
                if !lit.is_empty() {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                let dim = match names.iter().position(|n| n == name) {
                    Some(d) => d,
                    None => {
                        names.push(name.to_owned());
                        names.len() - 1
                    }
                };
                pieces.push(Piece::Slot { dim, raw });
                for _ in 0..=close {
                    chars.next();
                }
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        pieces.push(Piece::Lit(lit));
    }
    Ok((pieces, names))
}

fn valid_name(name: &str) -> bool {
    let mut cs = name.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How many values a range gives (0 when it is empty: `step` goes away from `end`).
fn range_len(start: i64, end: i64, step: i64) -> u64 {
    if step == 0 || (step > 0 && start > end) || (step < 0 && start < end) {
        return 0;
    }
    let span = (i128::from(end) - i128::from(start)) / i128::from(step);
    u64::try_from(span + 1).unwrap_or(u64::MAX)
}

impl ExpandSpec {
    /// Problems that need no I/O, as `at…: reason` lines (`at` names this expansion, e.g.
    /// `expand[0]`).
    pub fn problems(&self, at: &str) -> Vec<String> {
        let mut p = Vec::new();
        match parse_template(&self.template) {
            Err(e) => p.push(format!("{at}.template: {e}")),
            Ok((_, names)) => {
                for n in &names {
                    if !self.params.contains_key(n) {
                        p.push(format!(
                            "{at}.template: placeholder `{{{n}}}` has no entry in params"
                        ));
                    }
                }
                for n in self.params.keys() {
                    if !names.contains(n) {
                        p.push(format!(
                            "{at}.params.{n}: the template has no `{{{n}}}` placeholder"
                        ));
                    }
                }
            }
        }
        for (name, param) in &self.params {
            let at = format!("{at}.params.{name}");
            match param {
                ParamSpec::Values(v) if v.is_empty() => p.push(format!("{at}: no values")),
                ParamSpec::Values(_) => {}
                ParamSpec::Range { start, end, step } => {
                    if *step == 0 {
                        p.push(format!("{at}.range: the step must not be 0"));
                    } else if range_len(*start, *end, *step) == 0 {
                        p.push(format!(
                            "{at}.range: [{start}, {end}, {step}] gives no value (the step goes away from the end)"
                        ));
                    }
                }
                ParamSpec::File { file } => {
                    if let Err(e) = check_relative(file) {
                        p.push(format!("{at}.file: {e}"));
                    }
                }
                ParamSpec::Arg { arg, split } => {
                    if arg.is_empty()
                        || !arg
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                    {
                        p.push(format!("{at}.arg: `{arg}` is not an argument name"));
                    }
                    if split.is_empty() {
                        p.push(format!("{at}.split: must not be empty"));
                    }
                }
            }
        }
        p
    }

    /// The files its parameters read.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.params.values().filter_map(|p| match p {
            ParamSpec::File { file } => Some(file.as_str()),
            _ => None,
        })
    }
}

/// A relative path that stays inside its directory: no root, no `..`, not empty.
pub fn check_relative(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if path.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if p.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err(format!(
            "`{path}` must be relative (to the project, or to the spider file)"
        ));
    }
    if p.components().any(|c| {
        !matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    }) {
        return Err(format!("`{path}` must not leave its directory (`..`)"));
    }
    Ok(())
}

/// The values of one placeholder.
#[derive(Debug, Clone)]
enum Values {
    List(Vec<String>),
    Range { start: i64, step: i64, len: u64 },
}

impl Values {
    fn len(&self) -> u64 {
        match self {
            Values::List(v) => v.len() as u64,
            Values::Range { len, .. } => *len,
        }
    }

    /// The `i`-th value (`i < len`), as text and as JSON (a range's are numbers).
    fn get(&self, i: u64) -> (String, serde_json::Value) {
        match self {
            Values::List(v) => {
                let s = usize::try_from(i)
                    .ok()
                    .and_then(|i| v.get(i))
                    .cloned()
                    .unwrap_or_default();
                (s.clone(), serde_json::Value::String(s))
            }
            Values::Range { start, step, .. } => {
                let v = i128::from(*start) + i128::from(*step) * i128::from(i);
                let v = i64::try_from(v).unwrap_or(i64::MAX);
                (v.to_string(), serde_json::Value::from(v))
            }
        }
    }
}

/// One template compiled, with its values resolved.
#[derive(Debug, Clone)]
struct Part {
    pieces: Vec<Piece>,
    /// (name, values), in the order the names first appear in the template.
    dims: Vec<(String, Values)>,
    total: u64,
}

/// Every expansion of a spider, resolved: the `i`-th request is made from `i` alone.
#[derive(Debug, Clone)]
pub struct Expansion {
    parts: Vec<Part>,
    total: u64,
    fingerprint: u64,
}

/// The `i`-th request of an expansion: its URL (not canonical yet) and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    pub url: String,
    /// Placeholder → value, for the request's `meta.params`.
    pub params: serde_json::Map<String, serde_json::Value>,
}

impl Expansion {
    /// Resolves `specs` (the spider's `expand`, valid by [`ExpandSpec::problems`]): `args`
    /// are the run's arguments; `read` gives a file's text by its relative path. Every
    /// problem is reported at once, named `expand[i].params.NAME` (`expand.params.NAME`
    /// when there is one template).
    pub fn compile(
        specs: &[ExpandSpec],
        args: &BTreeMap<String, String>,
        read: &mut dyn FnMut(&str) -> Result<String, String>,
    ) -> Result<Self, CoreError> {
        let mut problems = Vec::new();
        let mut parts = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let at = at_of(specs.len(), i);
            let found = spec.problems(&at);
            if !found.is_empty() {
                problems.extend(found);
                continue;
            }
            let Ok((pieces, names)) = parse_template(&spec.template) else {
                continue;
            };
            let mut dims = Vec::new();
            for name in names {
                let Some(param) = spec.params.get(&name) else {
                    continue;
                };
                let at = format!("{at}.params.{name}");
                let values = match param {
                    ParamSpec::Values(v) => Values::List(v.clone()),
                    ParamSpec::Range { start, end, step } => Values::Range {
                        start: *start,
                        step: *step,
                        len: range_len(*start, *end, *step),
                    },
                    ParamSpec::File { file } => match read(file) {
                        Ok(text) => Values::List(
                            text.lines()
                                .map(str::trim)
                                .filter(|l| !l.is_empty())
                                .map(str::to_owned)
                                .collect(),
                        ),
                        Err(e) => {
                            problems.push(format!("{at}.file: cannot read `{file}`: {e}"));
                            continue;
                        }
                    },
                    ParamSpec::Arg { arg, split } => match args.get(arg) {
                        Some(v) => Values::List(
                            v.split(split.as_str())
                                .map(str::trim)
                                .filter(|l| !l.is_empty())
                                .map(str::to_owned)
                                .collect(),
                        ),
                        None => {
                            problems.push(format!(
                                "{at}.arg: the run has no argument `{arg}` (give it with the trigger: args: {{{arg}: \"a,b\"}})"
                            ));
                            continue;
                        }
                    },
                };
                match values.len() {
                    0 => problems.push(format!("{at}: no values")),
                    n if n > MAX_VALUES as u64 && !matches!(values, Values::Range { .. }) => {
                        problems.push(format!("{at}: {n} values, more than {MAX_VALUES}"))
                    }
                    _ => {}
                }
                dims.push((name, values));
            }
            let total = dims
                .iter()
                .try_fold(1u64, |acc, (_, v)| acc.checked_mul(v.len()));
            match total {
                Some(total) => parts.push(Part {
                    pieces,
                    dims,
                    total,
                }),
                None => problems.push(format!("{at}: the product of the values exceeds 2^64")),
            }
        }
        let total = parts
            .iter()
            .try_fold(0u64, |acc, p| acc.checked_add(p.total));
        match total {
            Some(total) if problems.is_empty() => {
                let fingerprint = fingerprint(specs, &parts);
                Ok(Self {
                    parts,
                    total,
                    fingerprint,
                })
            }
            Some(_) => Err(CoreError::ExpandInvalid { problems }),
            None => {
                problems.push("expand: the templates give more than 2^64 requests".into());
                Err(CoreError::ExpandInvalid { problems })
            }
        }
    }

    /// How many requests it gives.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// A hash of the templates and every value (args and file lines included): two
    /// expansions with the same one give the same requests in the same order (a stored
    /// cursor belongs to it).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The index of each template's first request.
    pub fn firsts(&self) -> impl Iterator<Item = u64> + '_ {
        self.parts.iter().scan(0u64, |at, p| {
            let first = *at;
            *at += p.total;
            Some(first)
        })
    }

    /// The `i`-th request (`None` past the end).
    pub fn get(&self, mut i: u64) -> Option<Expanded> {
        let part = self.parts.iter().find(|p| {
            if i < p.total {
                true
            } else {
                i -= p.total;
                false
            }
        })?;
        // Mixed radix, the last dimension varying fastest.
        let mut digits = vec![0u64; part.dims.len()];
        for (d, (_, values)) in part.dims.iter().enumerate().rev() {
            let n = values.len().max(1);
            digits[d] = i % n;
            i /= n;
        }
        let values: Vec<(String, serde_json::Value)> = part
            .dims
            .iter()
            .zip(&digits)
            .map(|((_, v), digit)| v.get(*digit))
            .collect();
        let mut url = String::new();
        for piece in &part.pieces {
            match piece {
                Piece::Lit(s) => url.push_str(s),
                Piece::Slot { dim, raw: true } => url.push_str(&values[*dim].0),
                Piece::Slot { dim, raw: false } => {
                    url.extend(utf8_percent_encode(&values[*dim].0, COMPONENT))
                }
            }
        }
        let params = part
            .dims
            .iter()
            .zip(values)
            .map(|((name, _), (_, json))| (name.clone(), json))
            .collect();
        Some(Expanded { url, params })
    }
}

/// The hash of [`Expansion::fingerprint`].
fn fingerprint(specs: &[ExpandSpec], parts: &[Part]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for (spec, part) in specs.iter().zip(parts) {
        h.update(spec.template.as_bytes());
        h.update(&[0xff]);
        for (name, values) in &part.dims {
            h.update(name.as_bytes());
            h.update(&[0xfe]);
            match values {
                Values::List(v) => {
                    for value in v {
                        h.update(value.as_bytes());
                        h.update(&[0xfd]);
                    }
                }
                Values::Range { start, step, len } => {
                    for n in [*start, *step] {
                        h.update(&n.to_le_bytes());
                    }
                    h.update(&len.to_le_bytes());
                }
            }
        }
    }
    h.digest()
}

/// How the `i`-th of `n` expansions is named in messages.
pub(crate) fn at_of(n: usize, i: usize) -> String {
    if n == 1 {
        "expand".into()
    } else {
        format!("expand[{i}]")
    }
}

/// One template or a list of them.
pub(crate) fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ExpandSpec>, D::Error> {
    // (An untagged enum would lose serde's message: the input's shape decides instead.)
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<ExpandSpec>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("{template: …, params: {…}} or a list of them")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut q: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = q.next_element()? {
                out.push(s);
            }
            Ok(out)
        }
        fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
            Ok(vec![ExpandSpec::deserialize(
                de::value::MapAccessDeserializer::new(m),
            )?])
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(yaml: &str) -> Vec<ExpandSpec> {
        #[derive(Deserialize)]
        struct W {
            #[serde(deserialize_with = "one_or_many")]
            expand: Vec<ExpandSpec>,
        }
        serde_yaml_ng::from_str::<W>(yaml).unwrap().expand
    }

    fn compile(yaml: &str, args: &[(&str, &str)]) -> Result<Expansion, CoreError> {
        let args = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Expansion::compile(&specs(yaml), &args, &mut |f| {
            if f == "kw.txt" {
                Ok("shoes\n\n  red hats \r\n".into())
            } else {
                Err("no such file".into())
            }
        })
    }

    fn urls(e: &Expansion) -> Vec<String> {
        (0..e.total()).map(|i| e.get(i).unwrap().url).collect()
    }

    #[test]
    fn the_product_varies_the_first_placeholder_slowest() {
        let e = compile(
            "expand: {template: 'http://s/q?kw={kw}&p={page}', params: {page: {range: [1, 3]}, kw: [a, 'b c']}}",
            &[],
        )
        .unwrap();
        assert_eq!(e.total(), 6);
        assert_eq!(
            urls(&e),
            [
                "http://s/q?kw=a&p=1",
                "http://s/q?kw=a&p=2",
                "http://s/q?kw=a&p=3",
                "http://s/q?kw=b%20c&p=1",
                "http://s/q?kw=b%20c&p=2",
                "http://s/q?kw=b%20c&p=3",
            ]
        );
        let third = e.get(2).unwrap();
        assert_eq!(third.params["kw"], "a");
        assert_eq!(third.params["page"], 3);
        assert!(e.get(6).is_none());
    }

    #[test]
    fn templates_follow_one_another_and_values_come_from_files_args_and_ranges() {
        let e = compile(
            "expand:\n  - {template: 'http://s/{+path}/{kw}', params: {path: ['a/b'], kw: {file: kw.txt}}}\n  - {template: 'http://s/c/{n}/{tag}', params: {n: {range: [10, 4, -3]}, tag: {arg: tags, split: ';'}}}\n",
            &[("tags", "x; y&z ;")],
        )
        .unwrap();
        assert_eq!(
            urls(&e),
            [
                "http://s/a/b/shoes",
                "http://s/a/b/red%20hats",
                "http://s/c/10/x",
                "http://s/c/10/y%26z",
                "http://s/c/7/x",
                "http://s/c/7/y%26z",
                "http://s/c/4/x",
                "http://s/c/4/y%26z",
            ]
        );
    }

    #[test]
    fn ten_million_requests_cost_nothing_until_asked() {
        let e = compile(
            "expand: {template: 'http://s/{a}/{b}', params: {a: {range: [1, 10000]}, b: {range: [0, 999]}}}",
            &[],
        )
        .unwrap();
        assert_eq!(e.total(), 10_000_000);
        // Other values, the same count: another expansion.
        let other = compile(
            "expand: {template: 'http://s/{a}/{b}', params: {a: {range: [2, 10001]}, b: {range: [0, 999]}}}",
            &[],
        )
        .unwrap();
        assert_eq!(other.total(), e.total());
        assert_ne!(other.fingerprint(), e.fingerprint());
        assert_eq!(e.get(9_999_999).unwrap().url, "http://s/10000/999");
        assert_eq!(e.get(1_234_567).unwrap().url, "http://s/1235/567");
    }

    #[test]
    fn braces_escape_and_bad_templates_are_named() {
        let e = compile(
            "expand: {template: 'http://s/{{x}}/{k}', params: {k: [1]}}",
            &[],
        )
        .unwrap();
        assert_eq!(urls(&e), ["http://s/{x}/1"]);
        for (yaml, needle) in [
            (
                "expand: {template: 'http://s/{k', params: {k: [1]}}",
                "expand.template: the `{` at byte 9 is not closed",
            ),
            (
                "expand: {template: 'http://s/}', params: {}}",
                "closes nothing",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {}}",
                "placeholder `{k}` has no entry in params",
            ),
            (
                "expand: {template: 'http://s/', params: {k: [1]}}",
                "expand.params.k: the template has no `{k}`",
            ),
            (
                "expand: {template: 'http://s/{1k}', params: {}}",
                "is not a placeholder",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: []}}",
                "expand.params.k: no values",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: {range: [5, 1]}}}",
                "expand.params.k.range: [5, 1, 1] gives no value",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: {range: [1, 5, 0]}}}",
                "the step must not be 0",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: {file: ../x}}}",
                "must not leave its directory",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: {file: /etc/passwd}}}",
                "must be relative",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: {file: gone.txt}}}",
                "expand.params.k.file: cannot read `gone.txt`: no such file",
            ),
            (
                "expand: {template: 'http://s/{k}', params: {k: {arg: kw}}}",
                "expand.params.k.arg: the run has no argument `kw`",
            ),
            (
                "expand: [{template: 'http://s/{k}', params: {k: [1]}}, {template: 'http://s/{j}', params: {j: []}}]",
                "expand[1].params.j: no values",
            ),
            (
                "expand: {template: 'http://s/{a}/{b}/{c}', params: {a: {range: [0, 4294967296]}, b: {range: [0, 4294967296]}, c: [1]}}",
                "exceeds 2^64",
            ),
        ] {
            let err = compile(yaml, &[]).unwrap_err().to_string();
            assert!(err.contains(needle), "{yaml}: {err}");
        }
    }

    #[test]
    fn bad_parameter_shapes_are_refused_by_serde() {
        for (yaml, needle) in [
            (
                "expand: {template: x, params: {k: {range: [1]}}}",
                "takes [start, end]",
            ),
            (
                "expand: {template: x, params: {k: {range: [1, 2], file: a}}}",
                "exactly one of",
            ),
            (
                "expand: {template: x, params: {k: {file: a, split: ','}}}",
                "only with `arg`",
            ),
            (
                "expand: {template: x, params: {k: {filez: a}}}",
                "unknown field `filez`",
            ),
            ("expand: {template: x, parms: {}}", "unknown field `parms`"),
        ] {
            #[derive(Deserialize, Debug)]
            #[allow(dead_code)]
            struct W {
                #[serde(deserialize_with = "one_or_many")]
                expand: Vec<ExpandSpec>,
            }
            let err = serde_yaml_ng::from_str::<W>(yaml).unwrap_err().to_string();
            assert!(err.contains(needle), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_spec_round_trips_through_json() {
        let s = specs(
            "expand: {template: 'http://s/{a}/{b}/{c}/{d}', params: {a: [x, 1, true], b: {range: [1, 9, 2]}, c: {file: f.txt}, d: {arg: kw}}}",
        );
        let json = serde_json::to_string(&s).unwrap();
        let back: Vec<ExpandSpec> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}
