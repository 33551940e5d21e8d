//! Table-driven tests: every selector of the taskHUB manual (seed 001) verbatim, then the
//! edge cases of the Python semantics, then parse errors with their exact messages.

use serde_json::Value;
use silk_selector::{EvalError, ParseError, Selector, SelectorList};

#[derive(Debug, Clone, Copy)]
enum Expect {
    Match,
    NoMatch,
    /// Evaluation fails with exactly this message (and the selector does not match).
    Fails(&'static str),
}
use Expect::{Fails, Match, NoMatch};

/// A typical task as it flows through the router: about ten keys, plus a few extra for
/// the edge cases below.
const TASK: &str = r#"{
    "task_type": "找新", "province": "JS", "task_result": 1000, "task_src": 0,
    "company_name": "浙江温州龙湾农村商业银行股份有限公司", "credit_no": "913303007772078015",
    "search_key": "913303007772078015", "data_type": "employee", "rt": true,
    "submitter": "taskhub",
    "score": 2.5, "tags": ["a", "b"], "empty": "", "empty_list": [], "zero": 0,
    "nothing": null, "s_num": "11", "matrix": [[1, 2], [3, 4]],
    "task_params": {"province": "GD", "city": "guangzhou"}
}"#;

/// The selectors of seed 001 (the taskHUB manual), copied verbatim, including the
/// outbound rule's misspelt `task_parms`, which can never match: Python raises on
/// `None['province']`, and so do we.
const SEED_INBOUND_1: &str = "submitter == 'taskhub' and (company_name or credit_no or company_code) and int(task_src) in [1, 11, 5, 3, 22, 21, 7]";
const SEED_INBOUND_2: &str =
    "task_type == '找新' and detail_url and province != 'AH' and task_src == 0";
const SEED_INBOUND_3: &str = "task_type == '找新' and province in ['JS', 'TJ', 'ZJ'] and task_result == 1000 and task_src == 0";
const SEED_INBOUND_4: &str = "task_type == '小微企业补充行业'";
const SEED_OUTBOUND: &str =
    "task_src in [3] and not detail_url and data_type and task_parms['province'] == 'GD'";

/// (selector, task JSON, expected)
const SEED_CASES: &[(&str, &str, Expect)] = &[
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "company_name": "宁乡县老粮仓镇楚江冻库", "task_src": "5"}"#,
        Match,
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "credit_no": "92430124MA4MGMN16U", "task_src": 22}"#,
        Match,
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "company_code": "x", "task_src": " 7 "}"#,
        Match,
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "company_name": "x", "task_src": 2}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "company_name": "", "task_src": 5}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "spider", "company_name": "x", "task_src": 5}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "company_name": "x", "task_src": "abc"}"#,
        Fails("column 76: value error: invalid literal for int() with base 10: 'abc'"),
    ),
    (
        SEED_INBOUND_1,
        r#"{"submitter": "taskhub", "company_name": "x"}"#,
        Fails(
            "column 76: type error: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'",
        ),
    ),
    (
        SEED_INBOUND_2,
        r#"{"task_type": "找新", "detail_url": "http://gsxt.example/1", "province": "JS", "task_src": 0}"#,
        Match,
    ),
    (
        SEED_INBOUND_2,
        r#"{"task_type": "找新", "detail_url": "http://gsxt.example/1", "province": "AH", "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_2,
        r#"{"task_type": "找新", "detail_url": "", "province": "JS", "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_2,
        r#"{"task_type": "找新", "province": "JS", "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_2,
        r#"{"task_type": "找新", "detail_url": "u", "province": "JS", "task_src": "0"}"#,
        NoMatch,
    ),
    (SEED_INBOUND_3, TASK, Match),
    (
        SEED_INBOUND_3,
        r#"{"task_type": "找新", "province": "ZJ", "task_result": 1000.0, "task_src": false}"#,
        Match,
    ),
    (
        SEED_INBOUND_3,
        r#"{"task_type": "找新", "province": "GD", "task_result": 1000, "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_3,
        r#"{"task_type": "找新", "province": "JS", "task_result": 1001, "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_3,
        r#"{"task_type": "破码", "province": "JS", "task_result": 1000, "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_3,
        r#"{"province": "JS", "task_result": 1000, "task_src": 0}"#,
        NoMatch,
    ),
    (
        SEED_INBOUND_4,
        r#"{"task_type": "小微企业补充行业"}"#,
        Match,
    ),
    (SEED_INBOUND_4, r#"{"task_type": "找新"}"#, NoMatch),
    (SEED_INBOUND_4, "{}", NoMatch),
    (
        SEED_OUTBOUND,
        r#"{"task_src": 3, "data_type": "change", "task_parms": {"province": "GD"}}"#,
        Match,
    ),
    (
        SEED_OUTBOUND,
        r#"{"task_src": 3, "data_type": "change", "task_parms": {"province": "BJ"}}"#,
        NoMatch,
    ),
    (
        SEED_OUTBOUND,
        r#"{"task_src": 1, "data_type": "change"}"#,
        NoMatch,
    ),
    (
        SEED_OUTBOUND,
        r#"{"task_src": 3, "detail_url": "u", "data_type": "change"}"#,
        NoMatch,
    ),
    (
        SEED_OUTBOUND,
        r#"{"task_src": 3, "data_type": ""}"#,
        NoMatch,
    ),
    (
        SEED_OUTBOUND,
        r#"{"task_src": 3, "data_type": "change", "task_params": {"province": "GD"}}"#,
        Fails("column 64: type error: 'NoneType' object is not subscriptable"),
    ),
];

/// (selector, expected against `TASK`)
const CASES: &[(&str, Expect)] = &[
    // Chained comparisons.
    ("-1 < task_src < 1", Match),
    ("0 < task_src < 1", NoMatch),
    ("0 <= task_src <= 0 < 1", Match),
    ("1 < 2 < 3 < 4 > 2", Match),
    ("1 < 3 < 2", NoMatch),
    ("2.0 <= score < 3", Match),
    ("'A' < province < 'Z'", Match),
    ("'a' < province < 'z'", NoMatch),
    ("task_src == zero == False", Match),
    ("task_src > 5 > province", NoMatch),
    (
        "task_src < 5 > province",
        Fails("column 14: type error: '>' not supported between instances of 'int' and 'str'"),
    ),
    // `in` and `not in` over lists, tuples, strings and dict keys.
    ("province in ['JS', 'TJ', 'ZJ']", Match),
    ("province in ('JS',)", Match),
    ("province in ['AH']", NoMatch),
    ("province not in ['AH', 'GD']", Match),
    ("province not in ['JS']", NoMatch),
    ("task_src in [0.0]", Match),
    ("rt in [1, 2]", Match),
    ("task_result in [999, 1000.0, 'x']", Match),
    ("'1000' in [1000]", NoMatch),
    ("'c' not in tags", Match),
    ("missing in [None]", Match),
    ("missing not in ['x']", Match),
    ("[1, 2] in matrix", Match),
    ("(1, 2) in matrix", NoMatch),
    ("province in [task_type, 'JS']", Match),
    ("'温州' in company_name", Match),
    ("'上海' in company_name", NoMatch),
    ("'' in empty", Match),
    ("'J' not in province", NoMatch),
    (
        "1 in province",
        Fails("column 3: type error: 'in <string>' requires string as left operand, not int"),
    ),
    (
        "'a' in missing",
        Fails("column 5: type error: argument of type 'NoneType' is not iterable"),
    ),
    ("'city' in task_params", Match),
    ("'x' in task_params", NoMatch),
    ("'province' not in task_params", NoMatch),
    (
        "tags in task_params",
        Fails("column 6: type error: unhashable type: 'list'"),
    ),
    // Subscripts.
    ("task_params['province'] == 'GD'", Match),
    ("task_params[\"city\"] == 'guangzhou'", Match),
    (
        "tags[0] == 'a' and tags[-1] == 'b' and tags[-2] == 'a'",
        Match,
    ),
    ("matrix[1][0] == 3 and matrix[-1][-1] == 4", Match),
    ("province[0] == 'J' and company_name[-1] == '司'", Match),
    ("tags[True] == 'b'", Match),
    ("['a', 'b'][1] == 'b' and ('a',)[0] == 'a'", Match),
    ("[province, 'x'][0] == 'JS'", Match),
    (
        "tags[2]",
        Fails("column 5: index 2 out of range for list of length 2"),
    ),
    (
        "tags[-3]",
        Fails("column 5: index -3 out of range for list of length 2"),
    ),
    (
        "province[2]",
        Fails("column 9: index 2 out of range for str of length 2"),
    ),
    ("task_params['x']", Fails("column 12: key 'x' not found")),
    ("task_params[0]", Fails("column 12: key 0 not found")),
    (
        "tags['a']",
        Fails("column 5: type error: list indices must be integers, not 'str'"),
    ),
    (
        "tags[0.0]",
        Fails("column 5: type error: list indices must be integers, not 'float'"),
    ),
    (
        "task_src[0]",
        Fails("column 9: type error: 'int' object is not subscriptable"),
    ),
    (
        "missing['a']",
        Fails("column 8: type error: 'NoneType' object is not subscriptable"),
    ),
    // Missing keys are None.
    ("missing", NoMatch),
    ("not missing", Match),
    ("missing == None", Match),
    ("missing is None", Match),
    ("missing is not None", NoMatch),
    ("missing != 0", Match),
    ("missing_a == missing_b", Match),
    (
        "missing < 1",
        Fails("column 9: type error: '<' not supported between instances of 'NoneType' and 'int'"),
    ),
    // Truthiness.
    ("empty_list", NoMatch),
    ("not empty_list", Match),
    ("empty", NoMatch),
    ("zero", NoMatch),
    ("nothing", NoMatch),
    ("0.0", NoMatch),
    ("[]", NoMatch),
    ("()", NoMatch),
    ("None", NoMatch),
    ("False", NoMatch),
    ("[0]", Match),
    ("' '", Match),
    ("True", Match),
    ("rt", Match),
    ("tags", Match),
    ("task_params", Match),
    ("not 0 and not '' and not [] and not None and not ()", Match),
    // `and`/`or` return operands and short-circuit.
    ("(empty or province) == 'JS'", Match),
    ("(province and zero) == 0", Match),
    ("(missing or empty_list or 'x') == 'x'", Match),
    ("(nothing and int('x')) is None", Match),
    ("rt or int('x')", Match),
    ("zero and int('x')", NoMatch),
    (
        "zero or int('x')",
        Fails("column 9: value error: invalid literal for int() with base 10: 'x'"),
    ),
    ("not province == 'GD' and score", Match),
    ("province == 'GD' or task_src == 0 and rt", Match),
    // Python's equality and ordering.
    ("True == 1 and False == 0 and 1 == 1.0", Match),
    ("task_src == False", Match),
    ("rt == 1.0", Match),
    ("'1' == 1", NoMatch),
    ("'1' != 1", Match),
    ("None == None", Match),
    ("None == 0", NoMatch),
    ("[1, 2] == [1, 2] and (1, 2) == (1, 2)", Match),
    ("[1, 2] == (1, 2)", NoMatch),
    ("tags == ['a', 'b']", Match),
    ("matrix == [[1, 2], [3, 4]]", Match),
    (
        "matrix[0] < [1, 3] and [1] < [1, 0] and (2,) > (1, 9)",
        Match,
    ),
    ("task_params == task_params", Match),
    ("score > 2 and task_result >= 1e3", Match),
    ("9007199254740993 == 9007199254740992.0", NoMatch),
    (
        "province < 1",
        Fails("column 10: type error: '<' not supported between instances of 'str' and 'int'"),
    ),
    (
        "[1] < (1,)",
        Fails("column 5: type error: '<' not supported between instances of 'list' and 'tuple'"),
    ),
    (
        "task_params < task_params",
        Fails("column 13: type error: '<' not supported between instances of 'dict' and 'dict'"),
    ),
    ("rt is True and rt is not False and nothing is None", Match),
    ("zero is False", NoMatch),
    // Built-in functions.
    (
        "int(s_num) == 11 and int(score) == 2 and int(rt) == 1",
        Match,
    ),
    (
        "int('0x1f', 16) == 31 and int('1f', 16) == 31 and int('0b11', 0) == 3",
        Match,
    ),
    ("int(' -1_000 ') == -1000", Match),
    (
        "str(task_result) == '1000' and str(score) == '2.5' and str(1e16) == '1e+16'",
        Match,
    ),
    (
        "str(nothing) == 'None' and str(rt) == 'True' and str(province) == 'JS'",
        Match,
    ),
    (
        "str(tags) == \"['a', 'b']\" and str(('x',)) == \"('x',)\"",
        Match,
    ),
    (
        "str(task_params) == \"{'city': 'guangzhou', 'province': 'GD'}\"",
        Match,
    ),
    (
        "float(s_num) == 11.0 and float('1e3') == 1000 and float(' -inf ') < 0",
        Match,
    ),
    (
        "len(tags) == 2 and len(company_name) == 18 and len(task_params) == 2 and len(empty) == 0",
        Match,
    ),
    ("bool(empty) == False and bool(tags) == True", Match),
    (
        "int() == 0 and str() == '' and float() == 0 and not bool()",
        Match,
    ),
    (
        "int('x')",
        Fails("column 1: value error: invalid literal for int() with base 10: 'x'"),
    ),
    (
        "int('1.5')",
        Fails("column 1: value error: invalid literal for int() with base 10: '1.5'"),
    ),
    (
        "int(nothing)",
        Fails(
            "column 1: type error: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'",
        ),
    ),
    (
        "int(tags)",
        Fails(
            "column 1: type error: int() argument must be a string, a bytes-like object or a real number, not 'list'",
        ),
    ),
    (
        "int(s_num, 1)",
        Fails("column 1: value error: int() base must be >= 2 and <= 36, or 0"),
    ),
    (
        "int(task_src, 10)",
        Fails("column 1: type error: int() can't convert non-string with explicit base"),
    ),
    (
        "float('abc')",
        Fails("column 1: value error: could not convert string to float: 'abc'"),
    ),
    (
        "len(task_src)",
        Fails("column 1: type error: object of type 'int' has no len()"),
    ),
    (
        "len()",
        Fails("column 1: len() takes exactly one argument (0 given)"),
    ),
    (
        "int(1, 2, 3)",
        Fails("column 1: int() takes at most 2 arguments (3 given)"),
    ),
    (
        "str(1, 2, 3, 4)",
        Fails("column 1: str() takes at most 1 argument (4 given)"),
    ),
    (
        "province == 'JS' and foo(province)",
        Fails("column 22: unknown function `foo`"),
    ),
    ("False and foo(x)", NoMatch),
    // Literals.
    ("'it\\'s' == \"it's\" and '''x''' == 'x'", Match),
    ("'\\u4e2d\\u6587' == '中文' and '\\x41\\101' == 'AA'", Match),
    ("r'\\d' == '\\\\d' and 'a' 'b' == 'ab'", Match),
    (
        "-1 < 0 and -task_src == 0 and - -1 == 1 and +score == 2.5 and -True == -1",
        Match,
    ),
    (
        "1_000 == 1000 and 0x10 == 16 and 0o10 == 8 and 0b10 == 2 and .5 == 0.5",
        Match,
    ),
    (
        "-province",
        Fails("column 1: type error: bad operand type for unary -: 'str'"),
    ),
    // Comments and newlines are whitespace.
    ("province == 'JS'  # JS only", Match),
    ("province in [\n  'JS',\n  'TJ',\n]", Match),
];

fn parse_task(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("bad test task {json}: {e}"))
}

fn check(selector_src: &str, task: &Value, expected: Expect) -> Result<(), String> {
    let selector =
        Selector::parse(selector_src).map_err(|e| format!("{selector_src:?}: parse error: {e}"))?;
    let outcome = selector.try_eval(task);
    let ok = match (expected, &outcome) {
        (Match, Ok(true)) | (NoMatch, Ok(false)) => true,
        (Fails(message), Err(error)) => error.to_string() == message,
        _ => false,
    };
    // `matches` and `eval` always agree with `try_eval`.
    let matches = outcome.as_ref().is_ok_and(|b| *b);
    if !ok || selector.matches(task) != matches || selector.eval(task) != matches {
        return Err(format!(
            "{selector_src:?}: expected {expected:?}, got {outcome:?}"
        ));
    }
    Ok(())
}

#[test]
fn seed_selectors() {
    let failures: Vec<String> = SEED_CASES
        .iter()
        .filter_map(|(selector, task, expected)| {
            check(selector, &parse_task(task), *expected).err()
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn edge_cases() {
    let task = parse_task(TASK);
    let failures: Vec<String> = CASES
        .iter()
        .filter_map(|(selector, expected)| check(selector, &task, *expected).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn seed_inbound_rule_as_a_list() {
    let list = SelectorList::parse_all([
        SEED_INBOUND_1,
        SEED_INBOUND_2,
        SEED_INBOUND_3,
        SEED_INBOUND_4,
    ])
    .expect("seed selectors parse");
    assert_eq!(list.len(), 4);
    assert_eq!(list.first_match(&parse_task(TASK)), Some(2));
    assert!(list.matches(&parse_task(r#"{"task_type": "小微企业补充行业"}"#)));
    assert!(!list.matches(&parse_task(r#"{"task_type": "其他"}"#)));

    // Errors are reported per selector and do not stop the search.
    let mut errors = Vec::new();
    let task = parse_task(
        r#"{"submitter": "taskhub", "company_name": "x", "task_src": "abc", "task_type": "小微企业补充行业"}"#,
    );
    let found = list.first_match_reporting(&task, |i, selector, error| {
        errors.push((i, selector.source().to_owned(), error.to_string()));
    });
    assert_eq!(found, Some(3));
    assert_eq!(
        errors,
        [(
            0,
            SEED_INBOUND_1.to_owned(),
            "column 76: value error: invalid literal for int() with base 10: 'abc'".to_owned()
        )]
    );
    assert!(!SelectorList::default().matches(&task));
}

#[test]
fn list_parse_reports_every_error_with_its_number() {
    let errors = SelectorList::parse_all(["a == 1", "a ==", "b", "c in [1"]).unwrap_err();
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "selector 2: column 5: expected an expression, found end of input",
            "selector 4: column 8: expected `,` or `]`, found end of input",
        ]
    );
}

#[test]
fn tasks_that_are_not_objects_have_no_keys() {
    let selector = Selector::parse("missing is None and not province").expect("parses");
    for task in ["[1, 2]", "\"JS\"", "null", "3"] {
        assert!(selector.matches(&parse_task(task)), "{task}");
    }
}

#[test]
fn api_basics() {
    let selector: Selector = "province == 'JS'".parse().expect("parses");
    assert_eq!(selector.source(), "province == 'JS'");
    assert_eq!(selector.to_string(), "province == 'JS'");
    assert_eq!(format!("{selector:?}"), "Selector(\"province == 'JS'\")");
    assert_eq!(
        selector,
        Selector::try_from("province == 'JS'").expect("parses")
    );
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Selector>();
    send_sync::<SelectorList>();
    send_sync::<ParseError>();
    send_sync::<EvalError>();
}

/// (source, exact error message)
const PARSE_ERRORS: &[(&str, &str)] = &[
    (
        "task_params['province'",
        "column 23: expected `]`, found end of input",
    ),
    (
        "province in ['JS', 'TJ'",
        "column 24: expected `,` or `]`, found end of input",
    ),
    (
        "province in ['JS' 'TJ')",
        "column 23: expected `,` or `]`, found `)`",
    ),
    (
        "province == ",
        "column 13: expected an expression, found end of input",
    ),
    ("", "column 1: expected an expression, found end of input"),
    (
        "a b",
        "column 3: expected an operator or end of input, found name `b`",
    ),
    (
        "(a and b",
        "column 9: expected `,` or `)`, found end of input",
    ),
    ("int(a", "column 6: expected `,` or `)`, found end of input"),
    (
        "a and",
        "column 6: expected an expression, found end of input",
    ),
    (
        "a == not b",
        "column 6: expected an expression, found `not`",
    ),
    ("a in not", "column 6: expected an expression, found `not`"),
    ("[1, , 2]", "column 5: expected an expression, found `,`"),
    (
        "a = 1",
        "column 3: assignment `=` is not supported (use `==` to compare)",
    ),
    ("a && b", "column 3: `&&` is not supported (use `and`)"),
    ("a || b", "column 3: `||` is not supported (use `or`)"),
    ("!a", "column 1: `!` is not supported (use `not`)"),
    ("a <> b", "column 3: `<>` is not supported (use `!=`)"),
    (
        "a.b == 1",
        "column 2: attribute access `.` is not supported",
    ),
    ("x[1:2]", "column 4: slices and `:` are not supported"),
    (
        "a + 1 > 2",
        "column 3: expected an operator or end of input, found `+`",
    ),
    (
        "a * 2",
        "column 3: arithmetic and bitwise operators are not supported",
    ),
    (
        "{'a': 1}",
        "column 1: dict and set literals are not supported",
    ),
    (
        "f(x)(y)",
        "column 5: only the built-in functions int, str, float, len and bool can be called",
    ),
    (
        "x[0](1)",
        "column 5: only the built-in functions int, str, float, len and bool can be called",
    ),
    (
        "int(base=16)",
        "column 9: assignment `=` is not supported (use `==` to compare)",
    ),
    ("lambda: 1", "column 1: unsupported keyword `lambda`"),
    ("x if y else z", "column 3: unsupported keyword `if`"),
    ("'abc", "column 1: unterminated string literal"),
    (
        "province == '找新",
        "column 13: unterminated string literal",
    ),
    ("'a\nb'", "column 1: unterminated string literal"),
    ("'\\x4g'", "column 2: invalid escape sequence `\\x4g`"),
    ("'\\N{DASH}'", "column 2: invalid escape sequence `\\N`"),
    ("'\\ud800'", "column 2: invalid escape sequence `\\ud800`"),
    (
        "b'x'",
        "column 1: byte strings, f-strings and combined string prefixes are not supported",
    ),
    ("0123", "column 1: invalid number literal `0123`"),
    ("1__0", "column 1: invalid number literal `1__0`"),
    ("1e", "column 1: invalid number literal `1e`"),
    ("3j", "column 1: invalid number literal `3j`"),
    (
        "x == 999999999999999999999999999999999999999999",
        "column 6: integer literal `999999999999999999999999999999999999999999` is out of range",
    ),
    (
        "'找新' == task_type and $",
        "column 23: unexpected character `$`",
    ),
    (
        "a ==\n  (b",
        "line 2, column 5: expected `,` or `)`, found end of input",
    ),
];

#[test]
fn parse_errors_name_the_column() {
    let mut failures = Vec::new();
    for (source, expected) in PARSE_ERRORS {
        match Selector::parse(source) {
            Ok(_) => failures.push(format!("{source:?}: parsed, expected {expected:?}")),
            Err(error) if error.to_string() != *expected => {
                failures.push(format!(
                    "{source:?}: got {:?}, expected {expected:?}",
                    error.to_string()
                ));
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn nesting_is_capped_without_overflowing_the_stack() {
    let limit = silk_selector::MAX_DEPTH;
    let cases = [
        (
            format!("{}x{}", "(".repeat(100_000), ")".repeat(100_000)),
            limit + 1,
        ),
        (format!("{}x", "not ".repeat(100_000)), 4 * limit + 1),
        (format!("{}1", "-".repeat(100_000)), limit + 1),
        (format!("x{}", "[0]".repeat(100_000)), 3 * limit + 2),
        ("[".repeat(100_000), limit + 1),
        (format!("{}x", "int(".repeat(100_000)), 4 * limit + 4),
    ];
    for (source, column) in cases {
        let error = Selector::parse(&source).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("column {column}: expression nested too deeply (limit {limit})"),
            "{}…",
            &source[..20]
        );
    }
    // Right at the limit still parses and evaluates.
    let at_limit = format!("{}1{}", "(".repeat(limit), ")".repeat(limit));
    assert!(
        Selector::parse(&at_limit)
            .expect("at the limit")
            .matches(&Value::Null)
    );
    // Long flat chains are not nesting.
    let flat = vec!["rt"; 100_000].join(" and ");
    assert!(
        Selector::parse(&flat)
            .expect("flat")
            .matches(&parse_task(TASK))
    );
    let chain = vec!["1"; 10_000].join(" == ");
    assert!(
        Selector::parse(&chain)
            .expect("chain")
            .matches(&Value::Null)
    );
}

#[test]
fn deeply_nested_task_values_fail_cleanly() {
    let mut deep = Value::from(1);
    for _ in 0..1_000 {
        deep = Value::Array(vec![deep]);
    }
    let task = serde_json::json!({"a": deep.clone(), "b": deep});
    for (source, message) in [
        ("a == b", "column 3: value nested too deeply (limit 128)"),
        ("a < b", "column 3: value nested too deeply (limit 128)"),
        ("str(a)", "column 1: value nested too deeply (limit 128)"),
        ("a in [b]", "column 3: value nested too deeply (limit 128)"),
    ] {
        let selector = Selector::parse(source).expect("parses");
        assert_eq!(
            selector.try_eval(&task).unwrap_err().to_string(),
            message,
            "{source}"
        );
        assert!(!selector.matches(&task));
    }
    // Selectors only touch what they name: len() of the outer list is fine.
    assert!(
        Selector::parse("len(a) == 1")
            .expect("parses")
            .matches(&task)
    );
    // Avoid a recursive drop of the 1,000-deep value on a small test-thread stack.
    let mut task = task;
    for key in ["a", "b"] {
        let mut value = task[key].take();
        while let Value::Array(mut items) = value {
            value = items.pop().unwrap_or(Value::Null);
        }
    }
}
