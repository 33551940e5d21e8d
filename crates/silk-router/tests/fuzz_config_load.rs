//! The `config_load` fuzz target's body (`fuzz/body/config_load.rs`, shared by `#[path]`)
//! on stable, on every `cargo test`: over every file of the seed corpus
//! (`fuzz/seeds/config_load`), over inputs built from `examples/router` now, and over a few
//! thousand deterministic mutations of them (bit flips, odd bytes, truncations, duplicated,
//! deleted and swapped lines, inserted tokens and file markers). Loading must never panic.
//!
//! The seeds built from `examples/router` are rewritten by
//! `SILK_WRITE_SEEDS=1 cargo test -p silk-router --test fuzz_config_load`; the other seeds
//! are written by hand.

#[path = "../fuzz/body/config_load.rs"]
mod body;

// xorshift64* (the testkit's): deterministic, so a failure names a case that can be run again.
use silk_testkit::mutate::Rng;
use std::path::{Path, PathBuf};

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn seeds_dir() -> PathBuf {
    manifest_dir().join("fuzz/seeds/config_load")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Inputs built from the files of `examples/router`: each config as `main.yaml`, and the
/// include example as one input (`main.yaml`, then its `config.d` files in name order).
/// The names are the seed files' names.
fn from_examples() -> Vec<(String, Vec<u8>)> {
    let examples = manifest_dir().join("../../examples/router");
    let seed = examples.join("seed");
    let mut include = read(&seed.join("main.yaml"));
    let mut parts: Vec<PathBuf> = std::fs::read_dir(seed.join("config.d"))
        .expect("examples/router/seed/config.d")
        .map(|e| e.expect("entry").path())
        .collect();
    parts.sort();
    assert!(parts.len() <= body::INCLUDED.len(), "{parts:?}");
    for part in &parts {
        include.push(body::FILE_MARKER);
        include.extend(read(part));
    }
    vec![
        (
            "example_full.yaml".into(),
            read(&examples.join("full.yaml")),
        ),
        (
            "example_taskhub_ic.yaml".into(),
            read(&examples.join("taskhub_ic.yaml")),
        ),
        ("example_seed_include".into(), include),
        (
            "example_seed_main_alone.yaml".into(),
            read(&seed.join("main.yaml")),
        ),
        (
            "example_seed_vars.yaml".into(),
            read(&seed.join("vars.yaml")),
        ),
    ]
}

/// Every input of the corpus and from the examples, sorted by name, without duplicates.
fn inputs() -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(seeds_dir())
        .expect("fuzz/seeds/config_load")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, read(&p))
        })
        .collect();
    for (name, data) in from_examples() {
        if !all.iter().any(|(_, d)| *d == data) {
            all.push((format!("{name} (examples now)"), data));
        }
    }
    all.sort();
    all
}

/// Runs the body, turning a panic into a failure that shows the input.
fn run_named(name: &str, data: &[u8]) {
    let outcome = std::panic::catch_unwind(|| body::run(data));
    if outcome.is_err() {
        panic!(
            "the config loader panicked on {name}:\n{}",
            String::from_utf8_lossy(data).escape_debug()
        );
    }
}

#[test]
fn the_fuzz_body_never_panics_on_the_seed_corpus() {
    if std::env::var_os("SILK_WRITE_SEEDS").is_some() {
        for (name, data) in from_examples() {
            std::fs::write(seeds_dir().join(name), data).expect("write seed");
        }
    }
    let inputs = inputs();
    assert!(inputs.len() >= 5, "{:?}", inputs.iter().map(|i| &i.0));
    for (name, data) in &inputs {
        run_named(name, data);
    }
}

#[test]
fn the_example_seeds_load_so_mutations_start_from_valid_configs() {
    for (name, data) in from_examples() {
        if name.contains("alone") || name.contains("vars") {
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        body::write_files(dir.path(), &data).expect("write");
        // The Python converts `taskhub_ic.yaml` names, next to it as in `examples/router`.
        std::fs::create_dir_all(dir.path().join("plugins")).expect("mkdir");
        std::fs::copy(
            manifest_dir().join("../../examples/router/plugins/ic.py"),
            dir.path().join("plugins/ic.py"),
        )
        .expect("copy");
        let loaded = silk_router::check(&[dir.path().join("main.yaml")], &body::vars());
        if let Err(errors) = loaded {
            panic!(
                "{name}:\n{}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

const BYTES: &[u8] = b"{}[]:-,'\"&*!#|>%@`\n\t \\0x\x1e\xff\xc3";

const TOKENS: &[&str] = &[
    "{x}",
    "'{redis_url}'",
    "{{",
    "&a ",
    "*a",
    "<<: *a\n",
    "include: [config.d]\n",
    "include: [main.yaml]\n",
    "- ",
    ": ",
    "? ",
    "!!int ",
    "~",
    "---\n",
    "...\n",
    "[[[[[[[[[[[[[[[[",
    "'a' == 'a' and (",
    "selector: [\"x in [1\"]\n",
    "class: redis_queue.RedisListOutbound\n",
    "name: o\n",
    "failback: o\n",
    "破码",
];

/// Line boundaries of `data`: (start, end including the newline).
fn lines(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            out.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < data.len() {
        out.push((start, data.len()));
    }
    out
}

/// One to four random edits of `data`.
fn mutate(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let mut data = data.to_vec();
    for _ in 0..=rng.below(4) {
        let len = data.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = BYTES[rng.below(BYTES.len())];
            }
            2 => data.truncate(rng.below(len + 1)),
            3..=5 => {
                let lines = lines(&data);
                if lines.is_empty() {
                    continue;
                }
                let (s, e) = lines[rng.below(lines.len())];
                match rng.below(3) {
                    0 => {
                        let line = data[s..e].to_vec();
                        data.splice(e..e, line);
                    }
                    1 => {
                        data.drain(s..e);
                    }
                    _ => {
                        let (s2, e2) = lines[rng.below(lines.len())];
                        if s2 >= e {
                            let (a, b) = (data[s..e].to_vec(), data[s2..e2].to_vec());
                            data.splice(s2..e2, a);
                            data.splice(s..e, b);
                        }
                    }
                }
            }
            6 => {
                let i = rng.below(len + 1);
                data.insert(i, body::FILE_MARKER);
            }
            _ => {
                let i = rng.below(len + 1);
                let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
                data.splice(i..i, token.iter().copied());
            }
        }
    }
    data
}

/// The fixed seed of the mutations.
const SEED: u64 = 0x5eed_c0f1_9000_0001;

#[test]
fn the_fuzz_body_never_panics_on_mutations_of_the_seeds() {
    const MUTATIONS: usize = 4000;
    let inputs = inputs();
    let per_input = MUTATIONS.div_ceil(inputs.len());
    let mut rng = Rng::new(SEED);
    for (name, data) in &inputs {
        for k in 0..per_input {
            let mutated = mutate(&mut rng, data);
            run_named(&format!("mutation {k} of {name}"), &mutated);
        }
    }
}
