//! Keeps the crate layering of ARCHITECTURE.md true: dependencies point down only, and the
//! backends (frontier, fetch, bus) never depend on each other.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The silk-* crates each crate may depend on (normal dependencies; tests may use more).
const ALLOWED: &[(&str, &[&str])] = &[
    ("silk-api", &["silk-core", "silk-schedule"]),
    ("silk-core", &[]),
    ("silk-selector", &[]),
    ("silk-testkit", &[]),
    ("silk-frontier", &["silk-core"]),
    ("silk-fetch", &["silk-core"]),
    ("silk-bus", &["silk-core"]),
    ("silk-store", &[]),
    ("silk-schedule", &[]),
    ("silk-items", &[]),
    (
        "silk-crawl",
        &["silk-core", "silk-frontier", "silk-fetch", "silk-items"],
    ),
    ("silk-router", &["silk-api", "silk-core", "silk-selector"]),
    (
        "silk-agent",
        &[
            "silk-api",
            "silk-core",
            "silk-fetch",
            "silk-bus",
            "silk-projects",
        ],
    ),
    (
        "silk-hub",
        &[
            "silk-api",
            "silk-core",
            "silk-frontier",
            "silk-items",
            "silk-bus",
            "silk-store",
            "silk-schedule",
            "silk-router",
            "silk-projects",
        ],
    ),
    ("silk-projects", &["silk-api", "silk-core"]),
];

#[test]
fn dependencies_point_down_only() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pkg in meta["packages"].as_array().unwrap() {
        let name = pkg["name"].as_str().unwrap().to_owned();
        let internal = pkg["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|d| d.starts_with("silk"))
            .map(str::to_owned)
            .collect();
        deps.insert(name, internal);
    }
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    for (name, internal) in &deps {
        if name == "silk" {
            continue; // the binary may use every library
        }
        let Some(ok) = allowed.get(name.as_str()) else {
            panic!("crate {name} is not in the layering table of this test (and ARCHITECTURE.md)");
        };
        for dep in internal {
            assert!(
                ok.contains(&dep.as_str()),
                "{name} must not depend on {dep} (see ARCHITECTURE.md)"
            );
        }
    }
    assert!(
        deps.contains_key("silk-core") && deps.contains_key("silk"),
        "workspace not found: {deps:?}"
    );
}

/// The layers of `silk-hub` (ARCHITECTURE.md), lowest first, with their top-level modules. A
/// module may name modules of its own layer or of a lower one, never of a higher one; the edge
/// names only the facade and the model (it never reaches past the facade into the services,
/// their state or the adapters); every module of the crate is in the table.
const HUB_LAYERS: &[(&str, &[&str])] = &[
    (
        "model",
        &[
            "alert",
            "allocation",
            "allocation_tests",
            "config",
            "dispatch",
            "error",
            "fair",
            "jobs",
            "phi",
            "project",
            "registry",
            "registry_tests",
            "routed",
            "run",
            "sink_targets",
            "tenant",
        ],
    ),
    (
        "adapters",
        &[
            "expansion",
            "files",
            "items",
            "job_frontier",
            "link",
            "logs",
            "outcomes",
            "repo",
            "tailer",
        ],
    ),
    ("state", &["live", "quotas", "state"]),
    (
        "services",
        &[
            "alerts",
            "archive",
            "builds",
            "feeds",
            "launch",
            "ownership",
            "presence",
            "programs",
            "runner",
            "scale",
            "scheduler",
            "sinks",
        ],
    ),
    (
        "facade",
        &[
            "hub",
            "hub_alerts",
            "hub_projects",
            "hub_router",
            "hub_tenants",
        ],
    ),
    ("edge", &["api", "auth", "sdk", "taskhub", "ui"]),
];

/// Top-level modules of a crate (`src/NAME.rs` or `src/NAME/`) and, for each, the other
/// top-level modules its code names through `crate::` (directly, or through a name the crate
/// root re-exports from that module). Test modules (`#[cfg(test)]` to the end of a file) are
/// left out: they are not part of the crate's structure.
fn module_graph(src: &std::path::Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        if module && stem != "lib" && stem != "main" {
            modules.insert(stem);
        }
    }
    // Names the crate root re-exports, and the module each comes from.
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for root in ["lib.rs", "main.rs"] {
        let Ok(text) = std::fs::read_to_string(src.join(root)) else {
            continue;
        };
        for stmt in text.split(';') {
            let stmt = stmt.trim();
            let Some(rest) = stmt
                .strip_prefix("pub use ")
                .or_else(|| stmt.strip_prefix("pub(crate) use "))
            else {
                continue;
            };
            let Some((module, names)) = rest.split_once("::") else {
                continue;
            };
            if !modules.contains(module) {
                continue;
            }
            for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                if !name.is_empty() {
                    reexports.insert(name.to_owned(), module.to_owned());
                }
            }
        }
    }
    let mut graph = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        let file = src.join(format!("{module}.rs"));
        if file.exists() {
            files.push(file);
        }
        let mut dirs = vec![src.join(module)];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut uses = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            // Comments (doc links included) name modules without depending on them.
            let code: String = code
                .lines()
                .map(|l| l.split_once("//").map_or(l, |(c, _)| c))
                .collect::<Vec<_>>()
                .join("\n");
            for name in crate_paths(&code) {
                let target = if modules.contains(&name) {
                    Some(name)
                } else {
                    reexports.get(&name).cloned()
                };
                if let Some(target) = target.filter(|t| t != module) {
                    uses.insert(target);
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// The first segment after every `crate::` in `code`, with the names inside
/// `crate::{a, b::c}` groups (only the first segment of each).
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` in macros, or a longer name
        }
        let rest = code[i + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split on commas at brace depth 0.
            let mut depth = 0usize;
            let mut start = 0usize;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(ident(group[start..j].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(group[start..j].trim()));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn the_scan_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    let found = cycles(&graph);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].iter().cloned().collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(
        crate_paths("use crate::{a::X, b, c::{d, e}};\nlet x = crate::f::g(); $crate::h"),
        ["a", "b", "c", "f"]
    );
}

#[test]
fn no_module_cycles_inside_a_crate() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        for cycle in cycles(&module_graph(&src)) {
            problems.push(format!(
                "{name}: modules {cycle:?} import each other in a cycle"
            ));
        }
    }
    assert!(checked > 5, "crates not found under {}", crates.display());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_hub_imports_point_down_its_layers() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../silk-hub/src");
    let layer_of: BTreeMap<&str, (usize, &str)> = HUB_LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, (layer, modules))| modules.iter().map(move |m| (*m, (i, *layer))))
        .collect();
    let graph = module_graph(&src);
    let mut problems = Vec::new();
    for (module, uses) in &graph {
        let Some(&(level, layer)) = layer_of.get(module.as_str()) else {
            problems.push(format!(
                "silk-hub module `{module}` is in no layer of HUB_LAYERS (and ARCHITECTURE.md)"
            ));
            continue;
        };
        for used in uses {
            let Some(&(used_level, used_layer)) = layer_of.get(used.as_str()) else {
                continue;
            };
            if used_level > level {
                problems.push(format!(
                    "silk-hub: `{module}` ({layer}) names `{used}` ({used_layer}), a layer above it"
                ));
            } else if layer == "edge" && !["edge", "facade", "model"].contains(&used_layer) {
                problems.push(format!(
                    "silk-hub: `{module}` (edge) names `{used}` ({used_layer}): the edge goes through the facade"
                ));
            }
        }
    }
    assert!(
        graph.len() > 20,
        "silk-hub modules not found under {}",
        src.display()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
