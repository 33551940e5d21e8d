//! Parses arbitrary input as a selector and, when it parses, evaluates it against a few
//! tasks covering every JSON type. Neither step may panic, overflow the stack or hang.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use silk_selector::Selector;

fn tasks() -> [Value; 3] {
    [
        json!({
            "task_type": "找新", "province": "JS", "task_result": 1000, "task_src": "3",
            "score": 2.5, "rt": true, "nothing": null, "tags": ["a", [1, 2.0]],
            "task_params": {"province": "GD", "n": [null, false]}, "empty": ""
        }),
        json!({}),
        json!([1, "a"]),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(selector) = Selector::parse(source) else {
        return;
    };
    for task in &tasks() {
        let outcome = selector.try_eval(task);
        assert_eq!(selector.matches(task), matches!(outcome, Ok(true)));
    }
});
