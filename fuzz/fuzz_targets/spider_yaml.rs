//! libFuzzer entry of the `spider_yaml` target; the body (`body/spider_yaml.rs`) is shared with the
//! stable test `crates/silk/tests/fuzz_bodies.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/spider_yaml.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
