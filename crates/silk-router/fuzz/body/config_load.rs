//! The body of the `config_load` fuzz target, shared (by `#[path]`) with the stable test
//! `crates/silk-router/tests/fuzz_config_load.rs`, which runs it over the seed corpus and
//! deterministic mutations of it on every `cargo test`.
//!
//! The input is one or more files separated by [`FILE_MARKER`]: the first part is
//! `main.yaml`, the next ones `config.d/a.yaml`, `config.d/b.yaml`, `config.d/c.yaml`
//! (any further marker stays in the last file), all written into a new temporary folder;
//! then the config loader runs on `main.yaml`. A main file that says `include: [config.d]`
//! (as the seeds do) merges the others. Loading must return a config or errors, never
//! panic, overflow the stack or hang.

use std::path::Path;

use silk_router::Vars;

/// Separates the files of one input (ASCII record separator: not valid in YAML, and it
/// keeps the seed files text).
pub const FILE_MARKER: u8 = 0x1e;

/// The included files, in order, after `main.yaml`.
pub const INCLUDED: [&str; 3] = ["config.d/a.yaml", "config.d/b.yaml", "config.d/c.yaml"];

/// The placeholder values the examples use, so that seeds load and mutations reach the
/// rules. The environment is not read: a run must not depend on where it runs.
pub fn vars() -> Vars {
    let mut vars = Vars::new().with_env(false);
    vars.set("redis_url", "redis://127.0.0.1:6379/0")
        .set("nats_url", "nats://127.0.0.1:4222")
        .set("kafka_servers", "127.0.0.1:9092")
        .set("failure_dir", "/nonexistent/silk-router-fuzz")
        .set(
            "failure_path",
            "/nonexistent/silk-router-fuzz/failure.jsonl",
        );
    vars
}

/// Writes `data`'s files into `dir` (which must exist).
pub fn write_files(dir: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut parts = data.splitn(INCLUDED.len() + 1, |b| *b == FILE_MARKER);
    std::fs::write(dir.join("main.yaml"), parts.next().unwrap_or_default())?;
    let mut parts = parts.peekable();
    if parts.peek().is_some() {
        std::fs::create_dir_all(dir.join("config.d"))?;
    }
    for (name, part) in INCLUDED.iter().zip(parts) {
        std::fs::write(dir.join(name), part)?;
    }
    Ok(())
}

/// The fuzz body: writes the files, loads `main.yaml`, checks the answer's shape.
pub fn run(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    if write_files(dir.path(), data).is_err() {
        return;
    }
    let main = dir.path().join("main.yaml");
    match silk_router::check(&[main], &vars()) {
        Ok(config) => {
            // Names are unique: a lookup by name finds the rule itself.
            for rule in &config.inbounds {
                let found = config.inbound(&rule.name);
                assert!(
                    found.is_some_and(|r| std::ptr::eq(r, rule)),
                    "{}",
                    rule.name
                );
            }
            for rule in &config.outbounds {
                let found = config.outbound(&rule.name);
                assert!(
                    found.is_some_and(|r| std::ptr::eq(r, rule)),
                    "{}",
                    rule.name
                );
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "a failed load names its problems");
            for error in &errors {
                assert!(!error.message.is_empty(), "an error says what: {error:?}");
                let _ = error.to_string();
            }
        }
    }
}
