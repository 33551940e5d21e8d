//! Shared by the property and differential tests: proptest strategies that generate
//! well-formed selectors over a fixed set of tasks, and those tasks.
//!
//! The generated selectors stay inside the part of Python both implementations agree on:
//! small integers (no overflow past 128 bits), `is` only against `None`/`True`/`False`,
//! and tasks whose dict keys are already in sorted order (so `str(dict)` agrees).

#![allow(dead_code)]

use proptest::prelude::*;
use serde_json::{Value, json};

/// Task keys the generator uses as names; `missing` is in no task.
pub const NAMES: &[&str] = &[
    "a", "b", "s", "n", "f", "t", "l", "d", "e", "z", "el", "task_src", "province", "missing",
];

/// Tasks that exercise every JSON type under the generator's names.
pub fn tasks() -> Vec<Value> {
    vec![
        json!({
            "a": 1, "b": 2.5, "d": {"k": "v", "n": 1}, "e": "", "el": [], "f": false,
            "l": [1, "a", [2]], "n": null, "province": "JS", "s": "abc", "t": true,
            "task_src": "3", "z": 0
        }),
        json!({
            "a": "1", "b": [], "d": {}, "e": "x", "el": [0], "f": 0.0, "l": [], "n": -7,
            "province": "找新", "s": "", "t": "True", "task_src": 11, "z": "0x1f"
        }),
        json!({}),
    ]
}

fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(NAMES).prop_map(str::to_owned),
        1 => (-5i64..20).prop_map(|i| i.to_string()),
        1 => proptest::sample::select(&["0.0", "1.5", "-2.5", "1e20", "0.1", "3.0", "1e-7", ".5"][..])
            .prop_map(str::to_owned),
        2 => proptest::sample::select(
            &[
                "''", "'a'", "'ab'", "'JS'", "\"b\"", "'1'", "' 12 '", "'x'", "'1.5'",
                "'0x1f'", "'找新'", "'k'", "'1_000'", "'inf'", "'-3'", r"'\x41'", "'it''s'",
            ][..]
        )
        .prop_map(str::to_owned),
        1 => proptest::sample::select(&["True", "False", "None", "[]", "()"][..]).prop_map(str::to_owned),
    ]
}

/// Wraps anything but a bare leaf in parentheses, for operand positions that bind
/// tighter than `and`/`or`/`not`.
fn paren(s: String) -> String {
    if s.chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '\'' || c == '.')
    {
        s
    } else {
        format!("({s})")
    }
}

/// Well-formed selectors of bounded depth.
pub fn expression() -> impl Strategy<Value = String> {
    leaf().prop_recursive(5, 48, 3, |inner| {
        let cmp_op = proptest::sample::select(&["==", "!=", "<", "<=", ">", ">=", "in", "not in"][..]);
        let func = proptest::sample::select(&["int", "str", "float", "len", "bool"][..]);
        prop_oneof![
            3 => (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} and {b}")),
            3 => (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} or {b}")),
            2 => inner.clone().prop_map(|a| format!("not {a}")),
            6 => (inner.clone(), cmp_op.clone(), inner.clone())
                .prop_map(|(a, op, b)| format!("{} {op} {}", paren(a), paren(b))),
            2 => (inner.clone(), cmp_op.clone(), inner.clone(), cmp_op, inner.clone()).prop_map(
                |(a, op1, b, op2, c)| format!("{} {op1} {} {op2} {}", paren(a), paren(b), paren(c))
            ),
            2 => (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("[{a}, {b}]")),
            1 => (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}, {b})")),
            1 => inner.clone().prop_map(|a| format!("({a},)")),
            2 => (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{}[{b}]", paren(a))),
            3 => (func, inner.clone()).prop_map(|(f, a)| format!("{f}({a})")),
            1 => inner.clone().prop_map(|a| format!("int({a}, 16)")),
            1 => inner.clone().prop_map(|a| format!("-{}", paren(a))),
            1 => (inner.clone(), proptest::sample::select(&["is None", "is not None", "is True", "is False"][..]))
                .prop_map(|(a, is)| format!("{} {is}", paren(a))),
        ]
    })
}
