//! libFuzzer entry of the `bus_message` target; the body (`body/bus_message.rs`) is shared with the
//! stable test `crates/silk/tests/fuzz_bodies.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/bus_message.rs"]
mod body;

fuzz_target!(|data: &[u8]| {
    body::run(data);
});
