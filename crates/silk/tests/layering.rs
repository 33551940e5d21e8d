//! Keeps the crate layering of ARCHITECTURE.md true: dependencies point down only, and the
//! backends (frontier, fetch, bus) never depend on each other.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The silk-* crates each crate may depend on (normal dependencies; tests may use more).
const ALLOWED: &[(&str, &[&str])] = &[
    ("silk-core", &[]),
    ("silk-selector", &[]),
    ("silk-testkit", &[]),
    ("silk-frontier", &["silk-core"]),
    ("silk-fetch", &["silk-core"]),
    ("silk-bus", &["silk-core"]),
    ("silk-store", &[]),
    ("silk-schedule", &[]),
    ("silk-crawl", &["silk-core", "silk-frontier", "silk-fetch"]),
    ("silk-router", &["silk-core", "silk-selector"]),
    ("silk-agent", &["silk-core", "silk-fetch", "silk-bus"]),
    (
        "silk-hub",
        &[
            "silk-core",
            "silk-frontier",
            "silk-fetch",
            "silk-crawl",
            "silk-bus",
            "silk-selector",
            "silk-store",
            "silk-schedule",
            "silk-router",
        ],
    ),
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
