//! Parsing one `inbound:` or `outbound:` entry (and an inbound's `convert:` chain) into a
//! compiled rule: keys checked, selectors compiled, the class looked up in the registry and
//! its component built. Problems are recorded, never returned early, so one pass reports
//! them all. Cross-rule checks (unique names, failback targets) are the loader's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Map;
use silk_selector::{Selector, SelectorList};

use super::{ConvertStep, InboundRule, Opaque, Origin, OutboundRule, OutboundSettings};
use crate::error::ConfigError;
use crate::plugins::{PluginHost, PythonConvert};
use crate::read::{self, InitReader};
use crate::registry::{Entry, Registry};
use crate::yaml::{Key, Node, Pos, Value};

/// Keys of an inbound entry.
const INBOUND_KEYS: [&str; 8] = [
    "name", "disable", "weight", "selector", "class", "init", "convert", "threads",
];
/// Keys of an outbound entry other than its settings and its class's keys.
const OUTBOUND_META: [&str; 5] = ["name", "disable", "selector", "class", "init"];
/// Routing keys of an outbound, accepted beside `class` or inside `init`.
const OUTBOUND_SETTINGS: [&str; 16] = [
    "task_params",
    "task_params_wrapped",
    "retry_limits",
    "priority",
    "rt_priority",
    "dont_retry_status",
    "direct_failback_status",
    "failback",
    "token_scope",
    "token_per_second",
    "reset_retry_times",
    "max_lag",
    "params",
    "queue_capacity",
    "batch_size",
    "max_lag_check_ms",
];

pub(super) struct Ctx<'a> {
    pub file: &'a Arc<Path>,
    pub registry: &'a Registry,
    /// The config's Python converts, when it has a plugins folder.
    pub plugins: Option<&'a Arc<PluginHost>>,
    pub errors: &'a mut Vec<ConfigError>,
    pub warnings: &'a mut Vec<ConfigError>,
}

impl Ctx<'_> {
    fn err(&mut self, pos: Pos, rule: &str, message: impl Into<String>) {
        self.errors
            .push(ConfigError::new(self.file, pos.line, pos.column, message).in_rule(Some(rule)));
    }

    fn warn(&mut self, pos: Pos, rule: &str, message: impl Into<String>) {
        self.warnings
            .push(ConfigError::new(self.file, pos.line, pos.column, message).in_rule(Some(rule)));
    }

    /// Converts `node` with `f`, recording a problem at `key`.
    fn get<T>(
        &mut self,
        rule: &str,
        key: &Key,
        node: &Node,
        f: impl Fn(&Node) -> Result<T, String>,
    ) -> Option<T> {
        if matches!(node.value, Value::Null) {
            return None;
        }
        match f(node) {
            Ok(v) => Some(v),
            Err(message) => {
                self.err(node.pos, rule, format!("`{}`: {message}", key.text));
                None
            }
        }
    }
}

/// The edit distance between two short keys (for "did you mean").
pub(super) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The closest of `known` to `key`, if close enough to be a typo.
pub(super) fn near<'k>(key: &str, known: impl IntoIterator<Item = &'k str>) -> Option<&'k str> {
    known
        .into_iter()
        .map(|k| (distance(key, k), k))
        .filter(|(d, k)| *d > 0 && *d <= 2 && key.len() >= 4 && k.len() >= 4)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

pub(super) fn suggestion<'k>(key: &str, known: impl IntoIterator<Item = &'k str>) -> String {
    near(key, known).map_or(String::new(), |k| format!(" (did you mean `{k}`?)"))
}

fn name_of(
    ctx: &mut Ctx<'_>,
    kind: &str,
    node: &Node,
    entries: &[(Key, Node)],
) -> (Option<String>, String) {
    match entries.iter().find(|(k, _)| k.text == "name") {
        Some((_, n)) => match n.as_text().filter(|s| !s.trim().is_empty()) {
            Some(name) => {
                let rule = format!("{kind} `{name}`");
                (Some(name), rule)
            }
            None => {
                let rule = format!("{kind} at line {}", node.pos.line);
                ctx.err(n.pos, &rule, "`name` must be non-empty text");
                (None, rule)
            }
        },
        None => {
            let rule = format!("{kind} at line {}", node.pos.line);
            ctx.err(node.pos, &rule, "missing `name`");
            (None, rule)
        }
    }
}

fn selectors(ctx: &mut Ctx<'_>, rule: &str, node: &Node) -> Option<SelectorList> {
    let items = match read::list(node) {
        Ok(items) => items,
        Err(message) => {
            ctx.err(node.pos, rule, format!("`selector`: {message}"));
            return None;
        }
    };
    let mut compiled = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.into_iter().enumerate() {
        let Some(text) = item.as_text() else {
            ctx.err(
                item.pos,
                rule,
                format!("selector {}: expected text, found {}", i + 1, item.kind()),
            );
            ok = false;
            continue;
        };
        match Selector::parse(&text) {
            Ok(selector) => compiled.push(selector),
            Err(e) => {
                ctx.err(item.pos, rule, format!("selector {}: {e}", i + 1));
                ok = false;
            }
        }
    }
    ok.then(|| SelectorList::new(compiled))
}

fn flags(n: usize) -> Arc<[AtomicBool]> {
    (0..n).map(|_| AtomicBool::new(false)).collect()
}

fn origin(ctx: &Ctx<'_>, node: &Node) -> Origin {
    Origin {
        file: ctx.file.clone(),
        line: node.pos.line,
    }
}

/// Parses one inbound entry.
pub(super) fn inbound(ctx: &mut Ctx<'_>, node: &Node) -> Option<InboundRule> {
    let entries = match read::entries(node) {
        Ok(e) => e,
        Err(m) => {
            ctx.err(node.pos, "inbound", format!("an inbound is a mapping: {m}"));
            return None;
        }
    };
    let (name, rule) = name_of(ctx, "inbound", node, entries);
    let mut disable = false;
    let mut weight = 1u32;
    let mut threads = 1usize;
    let mut selector = None;
    let mut selector_ok = true;
    let mut class = None;
    let mut init: (Pos, Vec<(Key, Node)>) = (node.pos, Vec::new());
    let mut converts = Vec::new();
    let mut converts_ok = true;
    for (key, value) in entries {
        match key.text.as_str() {
            "name" => {}
            "disable" => disable = ctx.get(&rule, key, value, read::boolean).unwrap_or(false),
            "weight" => {
                let w = ctx.get(&rule, key, value, read::int);
                match w.map(u32::try_from) {
                    Some(Ok(w)) if w >= 1 => weight = w,
                    Some(_) => ctx.err(
                        value.pos,
                        &rule,
                        "`weight` must be a whole number of at least 1",
                    ),
                    None => {}
                }
            }
            "threads" => match ctx.get(&rule, key, value, read::int) {
                Some(t) if (1..=1024).contains(&t) => threads = t as usize,
                Some(t) => ctx.err(
                    value.pos,
                    &rule,
                    format!("`threads` must be between 1 and 1024, found {t}"),
                ),
                None => {}
            },
            "selector" => {
                selector = selectors(ctx, &rule, value);
                selector_ok = selector.is_some();
            }
            "class" => {
                class = ctx
                    .get(&rule, key, value, read::text)
                    .map(|c| (c, value.pos))
            }
            "init" => match read::entries(value) {
                Ok(e) => init = (value.pos, e.to_vec()),
                Err(m) => ctx.err(value.pos, &rule, format!("`init`: {m}")),
            },
            "convert" => match convert_chain(ctx, &rule, value) {
                Some(c) => converts = c,
                None => converts_ok = false,
            },
            other => {
                let hint = suggestion(other, INBOUND_KEYS);
                ctx.err(key.pos, &rule, format!("unknown key `{other}`{hint}"));
            }
        }
    }
    let Some((class, class_pos)) = class else {
        ctx.err(node.pos, &rule, "missing `class`");
        return None;
    };
    let component = match ctx.registry.inbound(&class) {
        None => {
            let hint = if ctx.registry.outbound(&class).is_some() {
                " (that is an outbound class)".to_owned()
            } else {
                suggestion(
                    &class,
                    ctx.registry.names("inbound").iter().map(String::as_str),
                )
            };
            ctx.err(
                class_pos,
                &rule,
                format!(
                    "unknown inbound class `{class}`{hint}; known: {}",
                    ctx.registry.names("inbound").join(", ")
                ),
            );
            None
        }
        Some(Entry::Unavailable(reason)) => {
            ctx.err(class_pos, &rule, format!("class `{class}` {reason}"));
            None
        }
        Some(Entry::Available(factory)) => {
            let known = factory.keys();
            for (k, _) in &init.1 {
                if !known.contains(&k.text.as_str()) {
                    let hint = suggestion(&k.text, known.iter().copied());
                    ctx.err(
                        k.pos,
                        &rule,
                        format!(
                            "unknown key `{}` in `init` of class `{class}`{hint}; known: {}",
                            k.text,
                            known.join(", ")
                        ),
                    );
                }
            }
            let entries = init
                .1
                .iter()
                .filter(|(k, _)| known.contains(&k.text.as_str()))
                .cloned()
                .collect();
            let mut reader = InitReader::new(
                ctx.file.clone(),
                rule.clone(),
                name.clone().unwrap_or_default(),
                init.0,
                entries,
                ctx.errors,
            );
            factory.build(&mut reader)
        }
    };
    let component = component?;
    if component.is_http() && threads > 1 {
        ctx.warn(
            node.pos,
            &rule,
            "`threads` is ignored for an HTTP inbound (the server serves requests concurrently)",
        );
    }
    if !selector_ok || !converts_ok {
        return None;
    }
    let n = selector.as_ref().map_or(0, SelectorList::len);
    Some(InboundRule {
        name: name?,
        disable,
        weight,
        selector: selector.filter(|s| !s.is_empty()),
        class,
        threads,
        converts,
        origin: origin(ctx, node),
        component: Opaque(component),
        logged: flags(n),
    })
}

fn convert_chain(ctx: &mut Ctx<'_>, rule: &str, node: &Node) -> Option<Vec<ConvertStep>> {
    let items = match read::list(node) {
        Ok(items) => items,
        Err(m) => {
            ctx.err(node.pos, rule, format!("`convert`: {m}"));
            return None;
        }
    };
    let mut steps = Vec::new();
    let mut ok = true;
    for (i, item) in items.into_iter().enumerate() {
        match convert_step(ctx, rule, i + 1, item) {
            Some(step) => steps.push(step),
            None => ok = false,
        }
    }
    ok.then_some(steps)
}

fn convert_step(ctx: &mut Ctx<'_>, rule: &str, number: usize, node: &Node) -> Option<ConvertStep> {
    let here = format!("convert {number}");
    let (class, init): (String, (Pos, Vec<(Key, Node)>)) = match &node.value {
        Value::Str(class) => (class.clone(), (node.pos, Vec::new())),
        Value::Map(entries) => {
            let declarative = entries
                .iter()
                .find(|(k, _)| matches!(k.text.as_str(), "set" | "rename" | "remove"));
            if let Some((key, value)) = declarative {
                if entries.len() != 1 {
                    ctx.err(
                        node.pos,
                        rule,
                        format!("{here}: `{}` stands alone in its step", key.text),
                    );
                    return None;
                }
                return match crate::components::convert::declarative(&key.text, value) {
                    Ok(step) => Some(ConvertStep {
                        class: key.text.clone(),
                        step: Opaque(step),
                    }),
                    Err(m) => {
                        ctx.err(value.pos, rule, format!("{here}: `{}`: {m}", key.text));
                        None
                    }
                };
            }
            let mut class = None;
            let mut init = (node.pos, Vec::new());
            for (k, v) in entries {
                match k.text.as_str() {
                    "class" => class = v.as_text(),
                    "init" => match read::entries(v) {
                        Ok(e) => init = (v.pos, e.to_vec()),
                        Err(m) => ctx.err(v.pos, rule, format!("{here}: `init`: {m}")),
                    },
                    other => {
                        let hint = suggestion(other, ["class", "init", "set", "rename", "remove"]);
                        ctx.err(
                            k.pos,
                            rule,
                            format!("{here}: unknown key `{other}`{hint}; a step is `class` (+ `init`), `set`, `rename` or `remove`"),
                        );
                    }
                }
            }
            match class {
                Some(c) => (c, init),
                None => {
                    ctx.err(node.pos, rule, format!("{here}: missing `class`"));
                    return None;
                }
            }
        }
        _ => {
            ctx.err(
                node.pos,
                rule,
                format!(
                    "{here}: expected a class name or a mapping, found {}",
                    node.kind()
                ),
            );
            return None;
        }
    };
    match ctx.registry.convert(&class) {
        None if ctx.plugins.is_some() && class.contains('.') => {
            python_step(ctx, rule, &here, node.pos, class, &init.1)
        }
        None => {
            let hint = suggestion(
                &class,
                ctx.registry.names("convert").iter().map(String::as_str),
            );
            ctx.err(
                node.pos,
                rule,
                format!(
                    "{here}: unknown convert class `{class}`{hint}; built in: {}, or declarative `set`/`rename`/`remove`; a project's Python converts are loaded from the config's plugins folder (`plugins: path/to/dir` or `--plugins`), which is not set",
                    ctx.registry.names("convert").join(", ")
                ),
            );
            None
        }
        Some(Entry::Unavailable(reason)) => {
            ctx.err(node.pos, rule, format!("{here}: class `{class}` {reason}"));
            None
        }
        Some(Entry::Available(factory)) => {
            let known = factory.keys();
            for (k, _) in &init.1 {
                if !known.contains(&k.text.as_str()) {
                    ctx.err(
                        k.pos,
                        rule,
                        format!("{here}: unknown key `{}` in `init` of `{class}`", k.text),
                    );
                }
            }
            let mut reader = InitReader::new(
                ctx.file.clone(),
                rule.to_owned(),
                String::new(),
                init.0,
                init.1,
                ctx.errors,
            );
            let step = factory.build(&mut reader)?;
            Some(ConvertStep {
                class,
                step: Opaque(step),
            })
        }
    }
}

/// A convert class that is not built in, from the plugins folder: its module file must
/// exist (no code runs at load; `Config::verify_plugins` instantiates it).
fn python_step(
    ctx: &mut Ctx<'_>,
    rule: &str,
    here: &str,
    pos: Pos,
    class: String,
    init: &[(Key, Node)],
) -> Option<ConvertStep> {
    let host = ctx.plugins?.clone();
    if let Err(m) = host.module_file(&class) {
        ctx.err(
            pos,
            rule,
            format!("{here}: convert class `{class}` is not built in, and {m}"),
        );
        return None;
    }
    let init: Map<String, serde_json::Value> = init
        .iter()
        .map(|(k, v)| (k.text.clone(), v.to_json()))
        .collect();
    let origin = ConfigError::new(ctx.file, pos.line, pos.column, format!("{here}: `{class}`"))
        .in_rule(Some(rule));
    let step = host.register(&class, serde_json::Value::Object(init), origin);
    Some(ConvertStep {
        class: class.clone(),
        step: Opaque(Arc::new(PythonConvert { host, step, class })),
    })
}

/// Parses one outbound entry.
pub(super) fn outbound(ctx: &mut Ctx<'_>, node: &Node) -> Option<OutboundRule> {
    let entries = match read::entries(node) {
        Ok(e) => e,
        Err(m) => {
            ctx.err(
                node.pos,
                "outbound",
                format!("an outbound is a mapping: {m}"),
            );
            return None;
        }
    };
    let (name, rule) = name_of(ctx, "outbound", node, entries);
    let mut disable = false;
    let mut selector = Some(SelectorList::default());
    let mut class = None;
    let mut init_pos = node.pos;
    // Every key that is neither meta nor `init`, from both levels: (key, value, in init).
    let mut rest: Vec<(Key, Node, bool)> = Vec::new();
    for (key, value) in entries {
        match key.text.as_str() {
            "name" => {}
            "disable" => disable = ctx.get(&rule, key, value, read::boolean).unwrap_or(false),
            "selector" => selector = selectors(ctx, &rule, value),
            "class" => {
                class = ctx
                    .get(&rule, key, value, read::text)
                    .map(|c| (c, value.pos))
            }
            "init" => match read::entries(value) {
                Ok(e) => {
                    init_pos = value.pos;
                    rest.extend(e.iter().map(|(k, v)| (k.clone(), v.clone(), true)));
                }
                Err(m) => ctx.err(value.pos, &rule, format!("`init`: {m}")),
            },
            _ => rest.push((key.clone(), value.clone(), false)),
        }
    }
    for (i, (key, _, in_init)) in rest.iter().enumerate() {
        if let Some((other, _, _)) = rest[..i].iter().find(|(k, _, _)| k.text == key.text) {
            let (a, b) = if *in_init {
                ("in `init`", "beside `class`")
            } else {
                ("beside `class`", "in `init`")
            };
            ctx.err(
                key.pos,
                &rule,
                format!(
                    "`{}` is given twice: {a} here and {b} at line {}",
                    key.text, other.pos.line
                ),
            );
        }
    }
    let Some((class, class_pos)) = class else {
        ctx.err(node.pos, &rule, "missing `class`");
        return None;
    };
    let factory = match ctx.registry.outbound(&class) {
        None => {
            let hint = if ctx.registry.inbound(&class).is_some() {
                " (that is an inbound class)".to_owned()
            } else {
                suggestion(
                    &class,
                    ctx.registry.names("outbound").iter().map(String::as_str),
                )
            };
            ctx.err(
                class_pos,
                &rule,
                format!(
                    "unknown outbound class `{class}`{hint}; known: {}",
                    ctx.registry.names("outbound").join(", ")
                ),
            );
            None
        }
        Some(Entry::Unavailable(reason)) => {
            ctx.err(class_pos, &rule, format!("class `{class}` {reason}"));
            None
        }
        Some(Entry::Available(factory)) => Some(factory.clone()),
    };
    let class_keys: &[&str] = factory.as_ref().map_or(&[], |f| f.keys());
    let (settings, class_entries, settings_ok) =
        settings(ctx, &rule, &rest, class_keys, factory.is_some());
    let component = factory.and_then(|factory| {
        let mut reader = InitReader::new(
            ctx.file.clone(),
            rule.clone(),
            name.clone().unwrap_or_default(),
            init_pos,
            class_entries,
            ctx.errors,
        );
        factory.build(&mut reader)
    });
    let (component, selector, name) = (component?, selector?, name?);
    if !settings_ok {
        return None;
    }
    if settings.max_lag > 0 && !component.has_backlog() {
        ctx.err(
            node.pos,
            &rule,
            format!("`max_lag` needs a target whose backlog can be read, and class `{class}` with this `init` has none"),
        );
        return None;
    }
    let n = selector.len();
    let mut copy_keys: Vec<String> = Vec::new();
    for key in settings.task_params.iter().flatten() {
        if !crate::task::BUILTIN_KEYS.contains(&key.as_str())
            && !settings.params.contains_key(key)
            && !copy_keys.contains(key)
        {
            copy_keys.push(key.clone());
        }
    }
    Some(OutboundRule {
        copy_keys: copy_keys.into(),
        name,
        disable,
        selector,
        class,
        settings,
        origin: origin(ctx, node),
        component: Opaque(component),
        failback_index: None,
        logged: flags(n),
    })
}

fn int_list(node: &Node) -> Result<Vec<i64>, String> {
    read::list(node)?.into_iter().map(read::int).collect()
}

/// Reads the routing keys; returns the settings, the entries that belong to the class, and
/// whether everything was valid.
fn settings(
    ctx: &mut Ctx<'_>,
    rule: &str,
    rest: &[(Key, Node, bool)],
    class_keys: &[&str],
    class_known: bool,
) -> (OutboundSettings, Vec<(Key, Node)>, bool) {
    let mut s = OutboundSettings::default();
    let before = ctx.errors.len();
    let mut class_entries = Vec::new();
    for (key, value, _) in rest {
        let k = key.text.as_str();
        match k {
            "task_params" => {
                s.task_params = ctx.get(rule, key, value, |n| {
                    read::list(n)?.into_iter().map(read::text).collect()
                });
                if matches!(value.value, Value::Null) {
                    s.task_params = None;
                }
            }
            "task_params_wrapped" => {
                s.task_params_wrapped = ctx.get(rule, key, value, read::boolean).unwrap_or(false)
            }
            "retry_limits" => s.retry_limits = ctx.get(rule, key, value, read::int).unwrap_or(0),
            "priority" => s.priority = ctx.get(rule, key, value, read::int),
            "rt_priority" => s.rt_priority = ctx.get(rule, key, value, read::int),
            "dont_retry_status" => {
                s.dont_retry_status = ctx.get(rule, key, value, int_list).unwrap_or_default()
            }
            "direct_failback_status" => {
                s.direct_failback_status = ctx.get(rule, key, value, int_list).unwrap_or_default();
            }
            "failback" => {
                s.failback = ctx
                    .get(rule, key, value, read::text)
                    .filter(|f| !f.is_empty())
            }
            "token_scope" => s.token_scope = ctx.get(rule, key, value, read::text),
            "token_per_second" => s.token_per_second = ctx.get(rule, key, value, read::float),
            "reset_retry_times" => {
                s.reset_retry_times = ctx.get(rule, key, value, read::boolean).unwrap_or(false)
            }
            "max_lag" => s.max_lag = ctx.get(rule, key, value, read::int).unwrap_or(-1),
            "params" => {
                if let Some(map) = ctx.get(rule, key, value, |n| {
                    Ok(read::entries(n)?
                        .iter()
                        .map(|(k, v)| (k.text.clone(), v.to_json()))
                        .collect::<Map<_, _>>())
                }) {
                    s.params.extend(map);
                }
            }
            "queue_capacity" | "batch_size" => match ctx.get(rule, key, value, read::int) {
                Some(n) if (1..=1_000_000).contains(&n) => {
                    if k == "queue_capacity" {
                        s.queue_capacity = n as usize;
                    } else {
                        s.batch_size = n as usize;
                    }
                }
                Some(n) => ctx.err(
                    value.pos,
                    rule,
                    format!("`{k}` must be between 1 and 1000000, found {n}"),
                ),
                None => {}
            },
            "max_lag_check_ms" => match ctx.get(rule, key, value, read::int) {
                Some(n) if (1..=3_600_000).contains(&n) => s.max_lag_check_ms = n as u64,
                Some(n) => ctx.err(
                    value.pos,
                    rule,
                    format!("`max_lag_check_ms` must be between 1 and 3600000, found {n}"),
                ),
                None => {}
            },
            _ if class_keys.contains(&k) => class_entries.push((key.clone(), value.clone())),
            _ if !class_known => {}
            other => {
                let known = OUTBOUND_META
                    .iter()
                    .chain(OUTBOUND_SETTINGS.iter())
                    .chain(class_keys.iter())
                    .copied();
                match near(other, known) {
                    Some(close) => ctx.err(
                        key.pos,
                        rule,
                        format!(
                            "unknown key `{other}` (did you mean `{close}`?); to push a fixed task parameter with this name, put it under `params:`"
                        ),
                    ),
                    None => {
                        s.params.insert(other.to_owned(), value.to_json());
                    }
                }
            }
        }
    }
    if !s.direct_failback_status.is_empty() && s.failback.is_none() {
        let pos = rest
            .iter()
            .find(|(k, _, _)| k.text == "direct_failback_status")
            .map_or(Pos::default(), |(k, _, _)| k.pos);
        ctx.warn(
            pos,
            rule,
            "`direct_failback_status` without `failback` has no effect",
        );
    }
    (s, class_entries, ctx.errors.len() == before)
}
