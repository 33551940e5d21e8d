//! Reading config files: the main file, its `include`s (files and folders), placeholders,
//! the top-level sections, and the checks across rules (unique names, failback targets,
//! shared token scopes).
//!
//! # Merge order
//!
//! A file's own `inbound`/`outbound` entries come first, then those of the files it
//! includes. The files one `include` list names (folders expanded to their `*.yaml` and
//! `*.yml` files, not recursively, hidden files skipped) are merged in ascending order of
//! file name (then path), as the seed says; an included file may include more, relative to
//! its own folder. So `include: [config.d]` with `sub_config_a.yaml` (`o_a_1`) and
//! `sub_config_b.yaml` (`o_b_2`, `o_b_1`) gives `o_a_1, o_b_2, o_b_1`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::rules::{self, Ctx};
use super::{Config, FailureConfig, LoggingConfig, RoutingConfig, ServerConfig};
use crate::error::ConfigError;
use crate::plugins::{PluginHost, PluginSettings};
use crate::read;
use crate::registry::Registry;
use crate::vars::{self, Vars};
use crate::yaml::{self, Key, Node, Pos, Value};

/// The largest config file read (16 MiB): a config is text written by people.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

const TOP_KEYS: [&str; 8] = [
    "include", "project", "server", "routing", "inbound", "outbound", "logging", "plugins",
];
const MAIN_ONLY: [&str; 5] = ["project", "server", "routing", "logging", "plugins"];
/// Keys of `plugins:` written as a mapping.
const PLUGIN_KEYS: [&str; 4] = ["path", "python", "workers", "timeout_ms"];

/// Where a file was first loaded from: its path as given, and the including file and line.
type SeenFrom = (Arc<Path>, Option<(Arc<Path>, usize)>);
/// A section's file and entries.
type Entries = (Arc<Path>, Vec<(Key, Node)>);

struct Section {
    file: Arc<Path>,
    key: Key,
    node: Node,
}

struct Loader<'a> {
    vars: &'a Vars,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    files: Vec<PathBuf>,
    seen: HashMap<PathBuf, SeenFrom>,
    stack: Vec<PathBuf>,
    sections: HashMap<&'static str, Section>,
    inbounds: Vec<(Arc<Path>, Node)>,
    outbounds: Vec<(Arc<Path>, Node)>,
}

/// Loads and validates; see the module docs.
pub(crate) fn load(
    paths: &[PathBuf],
    vars: &Vars,
    registry: &Registry,
) -> Result<Config, Vec<ConfigError>> {
    let mut loader = Loader {
        vars,
        errors: Vec::new(),
        warnings: Vec::new(),
        files: Vec::new(),
        seen: HashMap::new(),
        stack: Vec::new(),
        sections: HashMap::new(),
        inbounds: Vec::new(),
        outbounds: Vec::new(),
    };
    if paths.is_empty() {
        let file: Arc<Path> = Arc::from(Path::new("<none>"));
        return Err(vec![ConfigError::new(&file, 0, 0, "no config file given")]);
    }
    for path in paths {
        loader.load_file(path, true, None);
    }
    loader.finish(paths, registry)
}

impl Loader<'_> {
    fn err(&mut self, file: &Arc<Path>, pos: Pos, message: impl Into<String>) {
        self.errors
            .push(ConfigError::new(file, pos.line, pos.column, message));
    }

    fn load_file(&mut self, path: &Path, main: bool, from: Option<(Arc<Path>, Pos)>) {
        let file: Arc<Path> = Arc::from(path);
        let (at_file, at_pos) = from.clone().unwrap_or((file.clone(), Pos::default()));
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(e) => {
                let what = if from.is_some() {
                    format!("include `{}`", path.display())
                } else {
                    "config file".into()
                };
                self.err(&at_file, at_pos, format!("{what}: cannot read: {e}"));
                return;
            }
        };
        if self.stack.contains(&canonical) {
            let chain: Vec<String> = self
                .stack
                .iter()
                .chain(std::iter::once(&canonical))
                .map(|p| p.display().to_string())
                .collect();
            self.err(
                &at_file,
                at_pos,
                format!("include cycle: {}", chain.join(" → ")),
            );
            return;
        }
        if let Some((first, by)) = self.seen.get(&canonical) {
            let by = by.as_ref().map_or(String::new(), |(f, line)| {
                format!(" by {}:{line}", f.display())
            });
            let message = format!(
                "`{}` is already loaded (as `{}`{by}); a file is merged once",
                path.display(),
                first.display()
            );
            self.err(&at_file, at_pos, message);
            return;
        }
        self.seen.insert(
            canonical.clone(),
            (
                file.clone(),
                from.as_ref().map(|(f, p)| (f.clone(), p.line)),
            ),
        );
        // A device or a pipe (`/dev/zero`) would be read forever, a huge file into memory.
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                self.err(
                    &at_file,
                    at_pos,
                    format!("`{}` is not a regular file", path.display()),
                );
                return;
            }
            Ok(m) if m.len() > MAX_CONFIG_BYTES => {
                self.err(
                    &at_file,
                    at_pos,
                    format!(
                        "`{}` is {} bytes; a config file may have at most {MAX_CONFIG_BYTES}",
                        path.display(),
                        m.len()
                    ),
                );
                return;
            }
            _ => {}
        }
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                self.err(
                    &at_file,
                    at_pos,
                    format!("cannot read `{}`: {e}", path.display()),
                );
                return;
            }
        };
        self.files.push(path.to_path_buf());
        let doc = match yaml::parse(&text) {
            Ok(doc) => doc,
            Err(problem) => {
                self.err(
                    &file,
                    problem.pos,
                    format!("invalid YAML: {}", problem.message),
                );
                return;
            }
        };
        for w in doc.warnings {
            self.warnings
                .push(ConfigError::new(&file, w.pos.line, w.pos.column, w.message));
        }
        let mut root = doc.root;
        let mut unfilled = vars::fill(&mut root, self.vars);
        unfilled.dedup();
        for u in unfilled {
            let upper = u.name.to_ascii_uppercase().replace(['.', '-'], "_");
            self.err(
                &file,
                u.pos,
                format!(
                    "unfilled placeholder `{{{}}}`: pass `--var {}=…`, put it in a `--var-file`, or set the environment variable `{}`",
                    u.name, u.name, upper
                ),
            );
        }
        let entries = match root.value {
            Value::Null => Vec::new(),
            Value::Map(entries) => entries,
            _ => {
                self.err(
                    &file,
                    root.pos,
                    format!("a config file is a mapping, found {}", root.kind()),
                );
                return;
            }
        };
        let mut includes: Vec<(PathBuf, Pos)> = Vec::new();
        for (key, node) in entries {
            match key.text.as_str() {
                "include" => match read::list(&node) {
                    Ok(items) => {
                        for item in items {
                            match item.as_text() {
                                Some(p) if !p.is_empty() => {
                                    includes.push((PathBuf::from(p), item.pos))
                                }
                                _ => self.err(&file, item.pos, "`include`: expected a path"),
                            }
                        }
                    }
                    Err(m) => self.err(&file, node.pos, format!("`include`: {m}")),
                },
                "inbound" | "outbound" => match read::list(&node) {
                    Ok(items) => {
                        let items: Vec<Node> = items.into_iter().cloned().collect();
                        let target = if key.text == "inbound" {
                            &mut self.inbounds
                        } else {
                            &mut self.outbounds
                        };
                        target.extend(items.into_iter().map(|n| (file.clone(), n)));
                    }
                    Err(m) => self.err(&file, node.pos, format!("`{}`: {m}", key.text)),
                },
                k if MAIN_ONLY.contains(&k) => {
                    let name = MAIN_ONLY
                        .iter()
                        .copied()
                        .find(|m| *m == k)
                        .unwrap_or("project");
                    if !main {
                        self.err(&file, key.pos, format!("`{k}` is only allowed in the main config file, not in an included one"));
                    } else if let Some(prev) = self.sections.get(name) {
                        let message = format!(
                            "`{k}` is also set in {}:{}",
                            prev.file.display(),
                            prev.key.pos.line
                        );
                        self.err(&file, key.pos, message);
                    } else {
                        self.sections.insert(
                            name,
                            Section {
                                file: file.clone(),
                                key,
                                node,
                            },
                        );
                    }
                }
                other => {
                    let hint = rules::suggestion(other, TOP_KEYS);
                    self.err(
                        &file,
                        key.pos,
                        format!(
                            "unknown top-level key `{other}`{hint}; known: {}",
                            TOP_KEYS.join(", ")
                        ),
                    );
                }
            }
        }
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut expanded: Vec<(PathBuf, Pos)> = Vec::new();
        for (include, pos) in includes {
            let target = if include.is_absolute() {
                include.clone()
            } else {
                dir.join(&include)
            };
            if target.is_dir() {
                match std::fs::read_dir(&target) {
                    Ok(listing) => {
                        let mut found: Vec<PathBuf> = listing
                            .filter_map(Result::ok)
                            .map(|e| e.path())
                            .filter(|p| p.is_file() && is_yaml(p))
                            .collect();
                        if found.is_empty() {
                            self.warnings.push(ConfigError::new(
                                &file,
                                pos.line,
                                pos.column,
                                format!(
                                    "include `{}`: the folder has no .yaml or .yml files",
                                    include.display()
                                ),
                            ));
                        }
                        found.sort();
                        expanded.extend(found.into_iter().map(|p| (p, pos)));
                    }
                    Err(e) => self.err(
                        &file,
                        pos,
                        format!(
                            "include `{}`: cannot list the folder: {e}",
                            include.display()
                        ),
                    ),
                }
            } else if target.exists() {
                expanded.push((target, pos));
            } else {
                self.err(
                    &file,
                    pos,
                    format!("include `{}`: no such file or folder", target.display()),
                );
            }
        }
        expanded.sort_by(|(a, _), (b, _)| a.file_name().cmp(&b.file_name()).then_with(|| a.cmp(b)));
        self.stack.push(canonical);
        for (sub, pos) in expanded {
            self.load_file(&sub, false, Some((file.clone(), pos)));
        }
        self.stack.pop();
    }

    fn finish(
        mut self,
        paths: &[PathBuf],
        registry: &Registry,
    ) -> Result<Config, Vec<ConfigError>> {
        let project = match self.sections.remove("project") {
            Some(s) => match s.node.as_text() {
                Some(p) if !p.trim().is_empty() => p,
                _ => {
                    self.err(&s.file, s.node.pos, "`project` must be non-empty text");
                    String::new()
                }
            },
            None => paths[0].file_stem().map_or_else(
                || "silk-router".into(),
                |s| s.to_string_lossy().into_owned(),
            ),
        };
        let server = self.server();
        let routing = self.routing();
        let logging = self.logging();
        let plugins = self
            .plugins(paths, registry)
            .map(|settings| Arc::new(PluginHost::new(settings)));
        let mut inbounds = Vec::new();
        let mut outbounds = Vec::new();
        for (file, node) in std::mem::take(&mut self.inbounds) {
            let mut ctx = Ctx {
                file: &file,
                registry,
                plugins: plugins.as_ref(),
                errors: &mut self.errors,
                warnings: &mut self.warnings,
            };
            if let Some(rule) = rules::inbound(&mut ctx, &node) {
                inbounds.push(rule);
            }
        }
        for (file, node) in std::mem::take(&mut self.outbounds) {
            let mut ctx = Ctx {
                file: &file,
                registry,
                plugins: plugins.as_ref(),
                errors: &mut self.errors,
                warnings: &mut self.warnings,
            };
            if let Some(rule) = rules::outbound(&mut ctx, &node) {
                outbounds.push(rule);
            }
        }
        let mut inbound_index = HashMap::new();
        for (i, rule) in inbounds.iter().enumerate() {
            if let Some(first) = inbound_index.insert(rule.name.clone(), i) {
                inbound_index.insert(rule.name.clone(), first);
                let first = &inbounds[first];
                let message = format!(
                    "duplicate inbound name `{}` (first at {})",
                    rule.name, first.origin
                );
                self.errors.push(ConfigError::new(
                    &rule.origin.file,
                    rule.origin.line,
                    0,
                    message,
                ));
            }
        }
        let mut outbound_index = HashMap::new();
        for (i, rule) in outbounds.iter().enumerate() {
            if let Some(first) = outbound_index.insert(rule.name.clone(), i) {
                outbound_index.insert(rule.name.clone(), first);
                let first = &outbounds[first];
                let message = format!(
                    "duplicate outbound name `{}` (first at {})",
                    rule.name, first.origin
                );
                self.errors.push(ConfigError::new(
                    &rule.origin.file,
                    rule.origin.line,
                    0,
                    message,
                ));
            }
        }
        let mut scopes: HashMap<String, (f64, String)> = HashMap::new();
        #[allow(clippy::needless_range_loop)] // `outbounds[i]` is written inside the loop
        for i in 0..outbounds.len() {
            let rule = &outbounds[i];
            let rule_name = format!("outbound `{}`", rule.name);
            if let Some(failback) = rule.settings.failback.clone() {
                match outbound_index.get(&failback) {
                    Some(&j) if j == i => self.errors.push(
                        ConfigError::new(
                            &rule.origin.file,
                            rule.origin.line,
                            0,
                            "`failback` names the outbound itself",
                        )
                        .in_rule(Some(&rule_name)),
                    ),
                    Some(&j) => outbounds[i].failback_index = Some(j),
                    None => self.errors.push(
                        ConfigError::new(
                            &rule.origin.file,
                            rule.origin.line,
                            0,
                            format!("`failback` names no outbound: `{failback}`"),
                        )
                        .in_rule(Some(&rule_name)),
                    ),
                }
            }
            let rule = &outbounds[i];
            if let (Some(key), Some(rate)) = (
                rule.settings.bucket_key(&rule.name),
                rule.settings.token_per_second,
            ) {
                match scopes.get(&key) {
                    Some((other_rate, other)) if (other_rate - rate).abs() > f64::EPSILON => {
                        let message = format!(
                            "`token_per_second` {rate} differs from {other_rate} of outbound `{other}`, which shares `token_scope` `{}`",
                            rule.settings.token_scope.as_deref().unwrap_or("*")
                        );
                        self.errors.push(
                            ConfigError::new(&rule.origin.file, rule.origin.line, 0, message)
                                .in_rule(Some(&rule_name)),
                        );
                    }
                    Some(_) => {}
                    None => {
                        scopes.insert(key, (rate, rule.name.clone()));
                    }
                }
            }
        }
        if !self.errors.is_empty() {
            return Err(self.sorted_errors());
        }
        Ok(Config {
            project,
            server,
            routing,
            inbounds,
            outbounds,
            logging,
            files: self.files,
            warnings: self.warnings,
            plugins,
            inbound_index,
            outbound_index,
        })
    }

    /// The errors in file order (merge order), then line; without the follow-on errors of
    /// a value whose placeholder is unfilled (its own error says what to do).
    fn sorted_errors(mut self) -> Vec<ConfigError> {
        let placeholder_spots: Vec<(Arc<Path>, usize, usize)> = self
            .errors
            .iter()
            .filter(|e| e.message.starts_with("unfilled placeholder"))
            .map(|e| (e.file.clone(), e.line, e.column))
            .collect();
        self.errors.retain(|e| {
            e.message.starts_with("unfilled placeholder")
                || !placeholder_spots
                    .iter()
                    .any(|(f, l, c)| *f == e.file && *l == e.line && *c == e.column)
        });
        let order = |file: &Path| {
            self.files
                .iter()
                .position(|f| f == file)
                .unwrap_or(usize::MAX)
        };
        let mut errors = std::mem::take(&mut self.errors);
        errors.sort_by_key(|e| (order(&e.file), e.line, e.column));
        errors
    }

    /// The entries of a top-level section, checking its keys against `known`.
    fn section(&mut self, name: &'static str, known: &[&str]) -> Option<Entries> {
        let section = self.sections.remove(name)?;
        self.section_of(section, name, known)
    }

    /// [`Loader::section`] of a section already taken out.
    fn section_of(
        &mut self,
        section: Section,
        name: &'static str,
        known: &[&str],
    ) -> Option<Entries> {
        let entries = match read::entries(&section.node) {
            Ok(e) => e.to_vec(),
            Err(m) => {
                self.err(&section.file, section.node.pos, format!("`{name}`: {m}"));
                return None;
            }
        };
        for (key, _) in &entries {
            if !known.contains(&key.text.as_str()) {
                let hint = rules::suggestion(&key.text, known.iter().copied());
                self.err(
                    &section.file,
                    key.pos,
                    format!(
                        "unknown key `{}` in `{name}`{hint}; known: {}",
                        key.text,
                        known.join(", ")
                    ),
                );
            }
        }
        Some((section.file, entries))
    }

    fn value<T>(
        &mut self,
        file: &Arc<Path>,
        section: &str,
        key: &Key,
        node: &Node,
        f: impl Fn(&Node) -> Result<T, String>,
    ) -> Option<T> {
        if matches!(node.value, Value::Null) {
            return None;
        }
        match f(node) {
            Ok(v) => Some(v),
            Err(m) => {
                self.err(file, node.pos, format!("`{section}.{}`: {m}", key.text));
                None
            }
        }
    }

    fn server(&mut self) -> ServerConfig {
        let mut server = ServerConfig::default();
        let Some((file, entries)) = self.section("server", &["bind", "port", "shutdown_grace_ms"])
        else {
            return server;
        };
        for (key, node) in &entries {
            match key.text.as_str() {
                "bind" => {
                    if let Some(bind) = self.value(&file, "server", key, node, read::text) {
                        server.bind = bind;
                    }
                }
                "port" => match self.value(&file, "server", key, node, read::int) {
                    Some(p) if (0..=65535).contains(&p) => server.port = p as u16,
                    Some(p) => self.err(
                        &file,
                        node.pos,
                        format!("`server.port`: {p} is not a port (0–65535)"),
                    ),
                    None => {}
                },
                "shutdown_grace_ms" => match self.value(&file, "server", key, node, read::int) {
                    Some(ms) if ms >= 0 => server.shutdown_grace_ms = ms as u64,
                    Some(_) => self.err(
                        &file,
                        node.pos,
                        "`server.shutdown_grace_ms` must not be negative",
                    ),
                    None => {}
                },
                _ => {}
            }
        }
        server
    }

    fn routing(&mut self) -> RoutingConfig {
        let mut routing = RoutingConfig {
            limits: -1,
            ..RoutingConfig::default()
        };
        let Some((file, entries)) =
            self.section("routing", &["limits", "terminal_codes", "failure"])
        else {
            return routing;
        };
        for (key, node) in &entries {
            match key.text.as_str() {
                "limits" => {
                    routing.limits = self
                        .value(&file, "routing", key, node, read::int)
                        .unwrap_or(-1)
                }
                "terminal_codes" => {
                    routing.terminal_codes = self
                        .value(&file, "routing", key, node, |n| {
                            read::list(n)?.into_iter().map(read::int).collect()
                        })
                        .unwrap_or_default();
                }
                "failure" => routing.failure = self.failure(&file, node),
                _ => {}
            }
        }
        routing
    }

    fn failure(&mut self, file: &Arc<Path>, node: &Node) -> Option<FailureConfig> {
        let entries = match read::entries(node) {
            Ok(e) => e.to_vec(),
            Err(m) => {
                self.err(file, node.pos, format!("`routing.failure`: {m}"));
                return None;
            }
        };
        let mut path = None;
        let mut compress = false;
        for (key, value) in &entries {
            match key.text.as_str() {
                "path" => path = self.value(file, "routing.failure", key, value, read::text),
                "compress" => {
                    compress = self
                        .value(file, "routing.failure", key, value, read::boolean)
                        .unwrap_or(false)
                }
                other => {
                    let hint = rules::suggestion(other, ["path", "compress"]);
                    self.err(
                        file,
                        key.pos,
                        format!("unknown key `{other}` in `routing.failure`{hint}"),
                    );
                }
            }
        }
        match path.filter(|p| !p.trim().is_empty()) {
            Some(p) => Some(FailureConfig {
                path: PathBuf::from(p),
                compress,
            }),
            None if entries.is_empty() => None,
            None => {
                self.err(file, node.pos, "`routing.failure` needs a `path`");
                None
            }
        }
    }

    /// `plugins: DIR` or `plugins: {path, python, workers, timeout_ms}`; a relative path is
    /// relative to the main file's folder. The registry's folder (`--plugins`) wins.
    fn plugins(&mut self, paths: &[PathBuf], registry: &Registry) -> Option<PluginSettings> {
        let section = self.sections.remove("plugins");
        let mut settings = None;
        if let Some(section) = section {
            let base = paths[0].parent().map(Path::to_path_buf).unwrap_or_default();
            let file = section.file.clone();
            let mut path = None;
            let mut found = PluginSettings::new(PathBuf::new());
            let pos = section.node.pos;
            match section.node.value {
                Value::Str(_) => {
                    path = self.value(&file, "plugins", &section.key, &section.node, read::text)
                }
                Value::Null => {}
                _ => {
                    let Some((file, entries)) = self.section_of(section, "plugins", &PLUGIN_KEYS)
                    else {
                        return registry.plugins_dir.clone().map(PluginSettings::new);
                    };
                    for (key, node) in &entries {
                        match key.text.as_str() {
                            "path" => path = self.value(&file, "plugins", key, node, read::text),
                            "python" => {
                                if let Some(p) = self.value(&file, "plugins", key, node, read::text)
                                {
                                    // A path (not a bare name looked up on `PATH`) is
                                    // relative to the main file's folder.
                                    found.python = if p.contains('/') {
                                        absolute(&base.join(p))
                                    } else {
                                        PathBuf::from(p)
                                    };
                                }
                            }
                            "workers" => match self.value(&file, "plugins", key, node, read::int) {
                                Some(n) if (1..=64).contains(&n) => found.workers = n as usize,
                                Some(_) => {
                                    self.err(&file, node.pos, "`plugins.workers`: from 1 to 64")
                                }
                                None => {}
                            },
                            "timeout_ms" => {
                                match self.value(&file, "plugins", key, node, read::int) {
                                    Some(ms) if ms >= 100 => {
                                        found.timeout = std::time::Duration::from_millis(ms as u64)
                                    }
                                    Some(_) => self.err(
                                        &file,
                                        node.pos,
                                        "`plugins.timeout_ms`: at least 100",
                                    ),
                                    None => {}
                                }
                            }
                            _ => {}
                        }
                    }
                    if path.is_none() {
                        self.err(&file, pos, "`plugins` needs a `path` (the folder holding the Python converts' modules)");
                    }
                }
            }
            if let Some(p) = path.filter(|p| !p.trim().is_empty()) {
                found.dir = absolute(&base.join(p));
                settings = Some(found);
            }
        }
        if let Some(dir) = &registry.plugins_dir {
            let mut s = settings.unwrap_or_else(|| PluginSettings::new(PathBuf::new()));
            s.dir = absolute(dir);
            settings = Some(s);
        }
        settings
    }

    fn logging(&mut self) -> LoggingConfig {
        let mut logging = LoggingConfig::default();
        let Some(section) = self.sections.remove("logging") else {
            return logging;
        };
        let entries = match read::entries(&section.node) {
            Ok(e) => e.to_vec(),
            Err(m) => {
                self.err(&section.file, section.node.pos, format!("`logging`: {m}"));
                return logging;
            }
        };
        for (key, node) in &entries {
            if key.text == "level" {
                let level = node.as_text().map(|l| l.to_ascii_lowercase());
                match level.as_deref() {
                    Some("trace" | "debug" | "info" | "error") => logging.level = level,
                    Some("warn" | "warning") => logging.level = Some("warn".into()),
                    Some("critical" | "fatal") => logging.level = Some("error".into()),
                    _ => self.err(&section.file, node.pos, "`logging.level`: expected one of trace, debug, info, warning, error, critical"),
                }
            } else {
                self.warnings.push(ConfigError::new(
                    &section.file,
                    key.pos.line,
                    key.pos.column,
                    format!("`logging.{}` is ignored: Silk logs through its own logger; only `logging.level` is used", key.text),
                ));
            }
        }
        logging
    }
}

/// `path` made absolute against the current folder (as it is if that cannot be read).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn is_yaml(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'));
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    !hidden && matches!(ext.as_deref(), Some("yaml" | "yml"))
}
