//! libFuzzer entry of the `canon_url` target; the body (`body/canon_url.rs`) is shared with the
//! stable test `crates/silk/tests/fuzz_bodies.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/canon_url.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
