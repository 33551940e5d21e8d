//! Differential test against CPython: random well-formed selectors are evaluated by this
//! crate and by Python's own `eval`, over the same tasks, and must agree on match /
//! no match / error.
//!
//! It needs `python3` on the PATH (every machine of ours has it); without one it prints
//! "skipped: …" and passes.
//! `SELECTOR_DIFF_CASES` sets the number of expressions (default 3000).

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, TestRng, TestRunner};
use serde_json::{Value, json};
use silk_selector::Selector;

const PYTHON: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
BUILTINS = {"int": int, "str": str, "float": float, "len": len, "bool": bool}

class Task(dict):
    # A missing name is None, except the built-in functions.
    def __missing__(self, key):
        return BUILTINS.get(key)

data = json.load(sys.stdin)
out = []
for expr in data["exprs"]:
    try:
        code = compile(expr, "<selector>", "eval")
    except SyntaxError:
        out.append(["syntax"] * len(data["tasks"]))
        continue
    row = []
    for task in data["tasks"]:
        try:
            row.append("true" if eval(code, {"__builtins__": {}}, Task(task)) else "false")
        except Exception as e:
            row.append("error:" + type(e).__name__)
    out.append(row)
json.dump(out, sys.stdout)
"#;

/// Hand-picked corners, checked on every run before the random ones.
const TRICKY: &[&str] = &[
    "str(1e16) == '1e+16'",
    "str(1e-5) == '1e-05'",
    "str(0.1) == '0.1'",
    "str(-0.0) == '-0.0'",
    "str(b) == '2.5'",
    "str(d) == \"{'k': 'v', 'n': 1}\"",
    "str(l) == \"[1, 'a', [2]]\"",
    "str((1,)) == '(1,)'",
    "str(\"it's\") == \"it's\"",
    "str([\"it's\"]) == '[\"it\\'s\"]'",
    "str(['a\\nb']) == \"['a\\\\nb']\"",
    "str(float('inf')) == 'inf'",
    "str(1e300)",
    "int(' -1_0 ') == -10",
    "int('0x1f', 0) == 31",
    "int('0o17', 0)",
    "int('010', 0)",
    "int('1_', 10)",
    "int('z', 36) == 35",
    "int(2.9) == 2",
    "int(-2.9) == -2",
    "int('1.5')",
    "int(1e20) == 100000000000000000000",
    "float(' 1_0.5 ') == 10.5",
    "float('-inf') < 0",
    "float('nan') != float('nan')",
    "float('1e')",
    "1 == 1.0 == True",
    "9007199254740993 == 9007199254740992.0",
    "9007199254740993 > 9007199254740992.0",
    "[1, 2] < [1, 3]",
    "[1] < [1, 'a']",
    "[1, 'a'] < [1, 2]",
    "(1, 2) < (1, 2, 0)",
    "[1] == (1,)",
    "[1] < (1,)",
    "None == None",
    "None < None",
    "'a' < 'b' < 'c'",
    "'B' < 'a'",
    "'é' > 'z'",
    "1 < 2 > 1",
    "1 < 3 < 2",
    "0 < a < 2",
    "a in [1.0]",
    "True in [1]",
    "1.0 in [True]",
    "'a' in 'abc'",
    "'' in 'x'",
    "1 in 'abc'",
    "'k' in d",
    "1 in d",
    "[1] in d",
    "(1, [2]) in d",
    "(1, 2) in d",
    "'x' not in None",
    "d['k'] == 'v'",
    "d['zz']",
    "d[1]",
    "d[[1]]",
    "l[-1] == [2]",
    "l[-4]",
    "l[3]",
    "l[True] == 'a'",
    "l[1.0]",
    "s[-1] == 'c'",
    "s[5]",
    "'找新'[1] == '新'",
    "len('找新') == 2",
    "len(d) == 2",
    "len(None)",
    "len(1)",
    "len()",
    "int(1, 2, 3)",
    "str(1, 2)",
    "bool([]) or bool('') or bool(0) or bool(0.0) or bool(None) or bool(())",
    "bool([0]) and bool(' ')",
    "not missing",
    "missing is None",
    "missing is not None",
    "t is True",
    "f is False",
    "a is True",
    "-True == -1",
    "-'a'",
    "- -a == 1",
    "+b == 2.5",
    "x(1)",
    "n and int('x')",
    "a or int('x')",
    "not n and a",
    "(n or 0) == 0",
    "(a and 'yes') == 'yes'",
    "(el or s) == 'abc'",
    "province in ['JS', 'TJ', 'ZJ']",
    "task_src in [1, 3]",
    "int(task_src) in [1, 11, 5, 3, 22, 21, 7]",
    "3.0 in [1, 3]",
    "3.5 in [1, 3]",
    "'3' in [1, 3]",
    "[2] in l",
    "'a' 'b' == 'ab'",
    "r'\\d' == '\\\\d'",
    "'\\x41' == 'A'",
    "'\\101' == 'A'",
    "'\\u4e2d' == '中'",
    "'\\q' == '\\\\q'",
    "0x_ff == 255",
    "1_000 == 1000",
    "0123",
    "1e3 == 1000",
    ".5 == 0.5",
    "5. == 5",
    "not not a",
    "a == not b",
];

fn ours(expr: &str, tasks: &[Value]) -> Vec<String> {
    match Selector::parse(expr) {
        Err(_) => vec!["syntax".to_owned(); tasks.len()],
        Ok(selector) => tasks
            .iter()
            .map(|task| match selector.try_eval(task) {
                Ok(true) => "true".to_owned(),
                Ok(false) => "false".to_owned(),
                Err(e) => format!("error: {e}"),
            })
            .collect(),
    }
}

#[test]
fn agrees_with_cpython() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not on the PATH");
        return;
    }
    let cases: usize = std::env::var("SELECTOR_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let strategy = common::expression();
    let mut exprs: Vec<String> = TRICKY.iter().map(|s| (*s).to_owned()).collect();
    exprs.extend((0..cases).map(|_| strategy.new_tree(&mut runner).expect("generate").current()));
    let tasks = common::tasks();

    let mut python = Command::new("python3")
        .args(["-c", PYTHON])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 on PATH");
    let input = json!({"exprs": exprs, "tasks": tasks}).to_string();
    python
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write to python");
    let output = python.wait_with_output().expect("python output");
    assert!(output.status.success(), "python failed");
    let theirs: Vec<Vec<String>> = serde_json::from_slice(&output.stdout).expect("python json");

    let mut mismatches = Vec::new();
    let mut outcomes = std::collections::BTreeMap::<&str, usize>::new();
    for (expr, their_row) in exprs.iter().zip(&theirs) {
        let our_row = ours(expr, &tasks);
        for (i, (our, their)) in our_row.iter().zip(their_row).enumerate() {
            *outcomes.entry(their.as_str()).or_default() += 1;
            let agree = our == their || (our.starts_with("error") && their.starts_with("error"));
            if !agree {
                mismatches.push(format!("{expr:?} on task {i}: ours {our}, python {their}"));
            }
        }
    }
    eprintln!("python outcomes: {outcomes:?}");
    eprintln!("sample: {:?}", &exprs[..exprs.len().min(8)]);
    assert!(
        mismatches.is_empty(),
        "{} of {} evaluations differ from CPython:\n{}",
        mismatches.len(),
        exprs.len() * tasks.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
