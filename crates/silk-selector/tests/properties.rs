//! Property tests: no input makes the parser panic, and no well-formed selector makes
//! evaluation panic; evaluation is consistent with `not` and with `matches`.

mod common;

use proptest::prelude::*;
use silk_selector::Selector;

/// Fragments of selector syntax, so random inputs get past the lexer and exercise the
/// parser (unbalanced brackets, dangling operators, odd literals).
fn token_soup() -> impl Strategy<Value = String> {
    let token = proptest::sample::select(
        &[
            "a",
            "task_params",
            "x",
            "int",
            "str",
            "len",
            "float",
            "bool",
            "foo",
            "(",
            ")",
            "[",
            "]",
            ",",
            "==",
            "!=",
            "<",
            "<=",
            ">",
            ">=",
            "in",
            "not",
            "is",
            "and",
            "or",
            "-",
            "+",
            "True",
            "False",
            "None",
            "0",
            "-1",
            "1.5",
            "1e3",
            "0x1f",
            "'a'",
            "\"b\"",
            "'找新'",
            "'",
            "\"",
            "\\",
            "r'\\d'",
            "'''",
            "#",
            "\n",
            "=",
            ".",
            ":",
            "$",
            "1_0",
            "'\\x4'",
            "'\\u",
            "999999999999999999999999999999999999999999",
        ][..],
    );
    proptest::collection::vec((token, proptest::bool::ANY), 0..40).prop_map(|tokens| {
        tokens
            .into_iter()
            .map(|(t, space)| if space { format!("{t} ") } else { t.to_owned() })
            .collect()
    })
}

fn eval_everywhere(selector: &Selector) {
    for task in common::tasks() {
        let outcome = selector.try_eval(&task);
        assert_eq!(selector.matches(&task), outcome.as_ref().is_ok_and(|b| *b));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn parser_never_panics_on_any_string(source in any::<String>()) {
        if let Ok(selector) = Selector::parse(&source) {
            eval_everywhere(&selector);
        }
    }

    #[test]
    fn parser_never_panics_on_token_soup(source in token_soup()) {
        match Selector::parse(&source) {
            Ok(selector) => eval_everywhere(&selector),
            // Errors point inside the source (or just past its end).
            Err(error) => {
                let pos = error.position();
                let lines: Vec<&str> = source.split('\n').collect();
                let line = lines.get(pos.line as usize - 1).copied().unwrap_or_default();
                prop_assert!(pos.column as usize <= line.chars().count() + 1, "{error}");
            }
        }
    }

    #[test]
    fn well_formed_selectors_parse_and_evaluate(source in common::expression()) {
        let selector = Selector::parse(&source)
            .map_err(|e| TestCaseError::fail(format!("{source:?}: {e}")))?;
        prop_assert_eq!(selector.source(), source.as_str());
        let negated = Selector::parse(&format!("not ({source})"))
            .map_err(|e| TestCaseError::fail(format!("not ({source:?}): {e}")))?;
        for task in common::tasks() {
            let outcome = selector.try_eval(&task);
            prop_assert_eq!(selector.matches(&task), outcome.as_ref().is_ok_and(|b| *b));
            // `not` flips a result and keeps an error.
            match (outcome, negated.try_eval(&task)) {
                (Ok(b), Ok(n)) => prop_assert_eq!(b, !n),
                (Err(e), Err(f)) => {
                    // The same error, five columns further right behind `not (`.
                    prop_assert_eq!(e.position().column + 5, f.position().column);
                    let message = |s: String| s.split_once(": ").map(|(_, m)| m.to_owned());
                    prop_assert_eq!(message(e.to_string()), message(f.to_string()));
                }
                (a, b) => prop_assert!(false, "{source:?}: {a:?} vs not: {b:?}"),
            }
        }
    }
}
