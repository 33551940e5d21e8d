//! libFuzzer entry of the `api_body` target; the body (`body/api_body.rs`) is shared with the
//! stable test `crates/silk/tests/fuzz_bodies.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/api_body.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
