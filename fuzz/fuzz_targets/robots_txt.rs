//! libFuzzer entry of the `robots_txt` target; the body (`body/robots_txt.rs`) is shared with the
//! stable test `crates/silk/tests/fuzz_bodies.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/robots_txt.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
