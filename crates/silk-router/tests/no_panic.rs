//! Bad input never panics the config loader or the router's decision: arbitrary text as a
//! config file, YAML-shaped fragments, and arbitrary JSON tasks through `explain`.

mod common;

use proptest::prelude::*;
use serde_json::Value;
use silk_router::explain;

fn yamlish() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "outbound:",
        "inbound:",
        "include:",
        "  - ",
        "name: a",
        "class: test.MemoryOutbound",
        "init: {sink: s}",
        "selector: ['x ==']",
        "selector:",
        "    - \"a in [1\"",
        "{",
        "}",
        "[",
        "]",
        "&a",
        "*a",
        "<<: *a",
        "'{x}'",
        "routing: {limits: x}",
        "\n",
        "  ",
        ": ",
        "- ",
        "!!int x",
        "server: {port: 70000}",
        "threads: 0",
        "weight: -1",
        "convert: [{set: 1}]",
        "failback: a",
        "max_lag: 5",
        "token_per_second: nan",
        "---",
        "\t",
        "破码",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|parts| parts.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z_]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "outbound",
                    "task_result",
                    "rt",
                    "task_src",
                    "task_params",
                    "retry_times",
                    "kind",
                    "x"
                ]),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_text_is_an_error_or_a_config(text in ".{0,300}") {
        let _ = common::load(&text, &common::vars(&[]));
    }

    #[test]
    fn yaml_fragments_are_an_error_or_a_config(text in yamlish()) {
        let _ = common::load(&text, &common::vars(&[]));
    }

    #[test]
    fn any_task_gets_an_answer(task in json_value()) {
        let (_dir, config) = common::load_ok(
            "
inbound:
  - {name: i, class: http.HttpInbound, convert: [common.ExtractTaskParams, common.ExtractMetadata]}
outbound:
  - {name: a, selector: [\"int(task_src) > 1 and task_params['x']\"], retry_limits: 1, failback: b, class: test.MemoryOutbound, init: {sink: np}}
  - {name: b, selector: [\"kind in ['x', 1] or len(x) > 2\"], dont_retry_status: [1], class: test.MemoryOutbound, init: {sink: np}}
",
        );
        let answer = futures::executor::block_on(explain(&config, "i", &task));
        prop_assert!(!answer.why.is_empty());
    }
}
