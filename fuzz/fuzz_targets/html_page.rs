//! libFuzzer entry of the `html_page` target; the body (`body/html_page.rs`) is shared with the
//! stable test `crates/silk/tests/fuzz_bodies.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/html_page.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
