//! Loads arbitrary input as a router config: `main.yaml`, optionally with included files
//! split off on a marker byte (see `body/config_load.rs`, which the stable test
//! `tests/fuzz_config_load.rs` shares). Loading may fail with errors, never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/config_load.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
