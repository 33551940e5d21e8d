//! Helpers shared by the router's integration tests: config files in temporary folders,
//! the shared Redis and NATS servers from `SILK_TEST_REDIS` / `SILK_TEST_NATS` (tests skip
//! when unset), unique key prefixes so tests run in parallel on one server, and an
//! in-memory outbound registered through the class registry (the seam the hub uses).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use silk_router::{
    Config, ConfigError, InitReader, Outbound, OutboundFactory, Outgoing, Registry, RouterError,
    Vars,
};

/// The Redis URL of the shared test server, or `None` (and a "skipped" line).
pub fn redis_url() -> Option<String> {
    match std::env::var("SILK_TEST_REDIS") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            println!("skipped: SILK_TEST_REDIS not set");
            None
        }
    }
}

/// The NATS URL of the shared test server, or `None` (and a "skipped" line).
pub fn nats_url() -> Option<String> {
    match std::env::var("SILK_TEST_NATS") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            println!("skipped: SILK_TEST_NATS not set");
            None
        }
    }
}

/// A name no other test (or test run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// Writes `files` (relative path → text) into a new temporary folder.
pub fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, text).expect("write");
    }
    dir
}

/// Vars without the environment, from `name=value` pairs.
pub fn vars(pairs: &[(&str, &str)]) -> Vars {
    let mut vars = Vars::new().with_env(false);
    for (k, v) in pairs {
        vars.set(*k, *v);
    }
    vars
}

/// Loads `main.yaml` of `dir` with the test registry.
pub fn load_dir(dir: &Path, vars: &Vars) -> Result<Config, Vec<ConfigError>> {
    Config::load_with(&[dir.join("main.yaml")], vars, &registry())
}

/// Loads one config text (as `main.yaml` in a temporary folder).
pub fn load(text: &str, vars: &Vars) -> (tempfile::TempDir, Result<Config, Vec<ConfigError>>) {
    let dir = tree(&[("main.yaml", text)]);
    let result = load_dir(dir.path(), vars);
    (dir, result)
}

/// Loads, panicking with every error on failure.
pub fn load_ok(text: &str) -> (tempfile::TempDir, Config) {
    let (dir, result) = load(text, &vars(&[]));
    match result {
        Ok(config) => (dir, config),
        Err(errors) => panic!(
            "config errors:\n{}",
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// The messages of a failed load, one per line.
pub fn errors_of(result: Result<Config, Vec<ConfigError>>) -> String {
    match result {
        Ok(_) => panic!("expected config errors"),
        Err(errors) => errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// What the in-memory outbound received: (outbound name, task).
pub type Sink = Arc<Mutex<Vec<(String, Value)>>>;

/// The standard registry plus `test.MemoryOutbound` (`init.sink` names a sink in
/// [`sink`]; `init.backlog` is a fixed backlog for `max_lag`).
pub fn registry() -> Registry {
    let mut registry = Registry::standard();
    registry.register_outbound("test.MemoryOutbound", Arc::new(MemoryFactory));
    registry
}

static SINKS: Mutex<Vec<(String, Sink)>> = Mutex::new(Vec::new());

/// The sink named `name` (created on first use).
pub fn sink(name: &str) -> Sink {
    let mut sinks = SINKS.lock().expect("sinks");
    if let Some((_, s)) = sinks.iter().find(|(n, _)| n == name) {
        return s.clone();
    }
    let s: Sink = Arc::default();
    sinks.push((name.to_owned(), s.clone()));
    s
}

struct MemoryFactory;

impl OutboundFactory for MemoryFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["sink", "backlog"]
    }
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let name = init.str("sink")?;
        Some(Arc::new(Memory {
            outbound: init.rule_name().to_owned(),
            sink: sink(&name),
            backlog: init.opt_u64("backlog"),
        }))
    }
}

struct Memory {
    outbound: String,
    sink: Sink,
    backlog: Option<u64>,
}

#[async_trait]
impl Outbound for Memory {
    fn target(&self) -> String {
        "memory".into()
    }
    fn has_backlog(&self) -> bool {
        self.backlog.is_some()
    }
    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let mut sink = self.sink.lock().expect("sink");
        batch
            .iter()
            .map(|o| {
                let task: Value = serde_json::from_slice(&o.payload).expect("payload is JSON");
                sink.push((self.outbound.clone(), task));
                Ok(())
            })
            .collect()
    }
    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        Ok(self.backlog)
    }
}

/// A new plugins folder holding the example's `ic.py` and the fixtures' Python modules.
pub fn plugins() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(from, to).expect("copy");
    };
    copy(&examples().join("plugins/ic.py"), &dir.path().join("ic.py"));
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plugins");
    for name in ["checks.py", "flaky/__init__.py"] {
        copy(&fixtures.join(name), &dir.path().join(name));
    }
    dir
}

/// The repository's `examples/router` folder.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/router")
}

/// Sends one request to the router's HTTP API without a socket (`app(router)`); the status
/// and the body text.
pub async fn call(
    router: &silk_router::Router,
    method: &str,
    uri: &str,
    body: &str,
) -> (axum::http::StatusCode, String) {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_owned()))
        .expect("request");
    let response = silk_router::app(router.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
