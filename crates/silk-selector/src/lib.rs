//! Python-style boolean selector expressions, which the router uses to decide which
//! inbound accepts a task and which outbound takes it.
//!
//! A selector such as
//! `task_type == '找新' and province in ['JS', 'TJ', 'ZJ'] and task_result == 1000` is
//! compiled once with [`Selector::parse`] and then evaluated against many tasks (JSON
//! objects) with [`Selector::matches`]. The syntax and semantics are those of the Python
//! expressions existing taskHUB rules were written in, so those rules work unchanged.
//!
//! This crate is pure: it must not do I/O, spawn threads, block, log, or depend on async
//! runtimes, and evaluating a selector must not panic or allocate for the common shapes of
//! rule. Logging an evaluation error, once per rule, is the caller's business
//! ([`Selector::try_eval`] returns it).
//!
//! # Grammar
//!
//! From loosest to tightest binding:
//!
//! | binds | syntax                                   | notes                                     |
//! |------:|------------------------------------------|-------------------------------------------|
//! | 1     | `a or b`                                 | the first truthy operand, or the last     |
//! | 2     | `a and b`                                | the first falsy operand, or the last      |
//! | 3     | `not a`                                  | always a bool                             |
//! | 4     | `==` `!=` `<` `<=` `>` `>=`              | chained: `1 < x < 5` is                   |
//! |       | `in` `not in` `is` `is not`              | `1 < x and x < 5`, `x` evaluated once     |
//! | 5     | `-a` `+a`                                | numbers only                              |
//! | 6     | `a[i]` `f(a, b)`                         | subscripts; calls of built-ins only       |
//! | 7     | names, literals, `(a)` `(a, b)` `[a, b]` | atoms                                     |
//!
//! ```text
//! selector   := or_expr EOF
//! or_expr    := and_expr ('or' and_expr)*
//! and_expr   := not_expr ('and' not_expr)*
//! not_expr   := 'not' not_expr | comparison
//! comparison := sign_expr (comp_op sign_expr)*
//! comp_op    := '==' | '!=' | '<' | '<=' | '>' | '>='
//!             | 'in' | 'not' 'in' | 'is' | 'is' 'not'
//! sign_expr  := ('-' | '+') sign_expr | postfix
//! postfix    := (NAME '(' [args] ')' | atom) ('[' or_expr ']')*
//! atom       := NAME | INT | FLOAT | STRING+ | 'True' | 'False' | 'None'
//!             | '(' ')' | '(' or_expr ')' | '(' or_expr ',' [args] ')' | '[' [args] ']'
//! args       := or_expr (',' or_expr)* [',']
//! ```
//!
//! Lexically: string literals in single, double or triple quotes with Python escapes
//! (`\n`, `\x41`, `\u4e2d`, octal…) and optional `r`/`u` prefix, adjacent literals
//! concatenated; integers in decimal, `0x`, `0o`, `0b` with `_` separators; floats
//! (`1.5`, `.5`, `1e-3`); names may be Unicode; `#` starts a comment; newlines are
//! ordinary whitespace.
//!
//! # Semantics
//!
//! - A name is a top-level key of the task; a missing key (or a task that is not an
//!   object) gives `None`. `True`, `False`, `None` are keywords, not keys.
//! - Values are Python's: JSON `null`/booleans/numbers/strings/arrays/objects are
//!   `None`/`bool`/`int` or `float`/`str`/`list`/`dict`. Integers are 128-bit.
//! - Truthiness: `None`, `False`, `0`, `0.0`, `''`, `[]`, `()`, `{}` are false.
//! - `==` between unrelated types is false, never an error; `int`, `float` and `bool`
//!   compare numerically (`True == 1`, `1 == 1.0`); lists never equal tuples.
//!   Ordering (`<`…) works between numbers, between strings (by code point) and between
//!   two lists or two tuples (lexicographically); anything else is a type error.
//! - `x in c` tests list and tuple elements, substrings of a string (`x` must be a
//!   string), or keys of a dict.
//! - `is`/`is not` compare the singletons `None`, `True`, `False`; any other pair is
//!   not identical.
//! - `d['k']` on a dict with no key `k` is an error (Python's `KeyError`), unlike a
//!   missing top-level name; `x[-1]` counts from the end; strings index by character.
//! - Built-ins: `int(x)`, `int(text, base)`, `str(x)`, `float(x)`, `len(x)`, `bool(x)`,
//!   with Python's conversion rules. Other calls parse, and fail when evaluated.
//!
//! # Errors
//!
//! [`ParseError`] names the 1-based column (and line, past the first) and what was
//! expected: ``column 17: expected `]`, found `)` ``. Nesting deeper than [`MAX_DEPTH`]
//! levels is a parse error, which bounds the recursion of both parser and evaluator.
//!
//! A runtime error ([`EvalError`]: a type error, `int('x')`, an index out of range, an
//! unknown function) makes the selector not match; short-circuiting means
//! `False and int('x')` never fails.
//!
//! # Differences from Python
//!
//! Integers are 128-bit (an overflow is an error, not a big integer); `is` only knows
//! `None`, `True` and `False`; a name is never a function value (`int` alone is the task
//! key `int`); arithmetic, attributes, slices, dict literals, comprehensions and other
//! statements' keywords are parse errors; newlines may appear anywhere whitespace may.
//! A differential test against CPython (`tests/python_differential.rs`) checks the rest.
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use silk_selector::{Selector, SelectorList};
//!
//! let selector = Selector::parse("task_type == '找新' and province in ['JS', 'TJ', 'ZJ']")?;
//! assert!(selector.matches(&json!({"task_type": "找新", "province": "JS"})));
//! assert!(!selector.matches(&json!({"task_type": "找新"})));
//!
//! let list = SelectorList::parse_all(["rt", "int(task_src) in [1, 3]"]).expect("valid");
//! assert_eq!(list.first_match(&json!({"task_src": "3"})), Some(1));
//!
//! let broken = Selector::parse("province in ['JS', 'TJ'").unwrap_err();
//! assert_eq!(broken.to_string(), "column 24: expected `,` or `]`, found end of input");
//! # Ok::<(), silk_selector::ParseError>(())
//! ```

#![forbid(unsafe_code)]

mod ast;
mod builtins;
mod error;
mod eval;
mod lexer;
mod parser;
mod text;
mod value;

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

pub use error::{EvalError, ParseError, Position, SelectorListError};
pub use parser::MAX_DEPTH;

/// A compiled selector. Cheap to evaluate, `Send + Sync`, and cloneable.
#[derive(Clone)]
pub struct Selector {
    source: Box<str>,
    expr: ast::Expr,
}

impl Selector {
    /// Compiles `source`. Literal lists and tuples are folded into constants, so
    /// `x in ['a', 'b', …]` becomes a binary search.
    pub fn parse(source: &str) -> Result<Selector, ParseError> {
        Ok(Selector {
            source: source.into(),
            expr: parser::parse(source)?,
        })
    }

    /// The text the selector was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether `task` matches: the truthiness of the expression, or `false` if
    /// evaluating it failed.
    pub fn matches(&self, task: &Value) -> bool {
        self.try_eval(task).unwrap_or(false)
    }

    /// The same as [`matches`](Self::matches), named after the Python operation.
    pub fn eval(&self, task: &Value) -> bool {
        self.matches(task)
    }

    /// Whether `task` matches, or why evaluating the selector against it failed (so the
    /// caller can log it; the selector then counts as not matching).
    pub fn try_eval(&self, task: &Value) -> Result<bool, EvalError> {
        eval::Evaluator::new(task, &self.source)
            .truth(&self.expr)
            .map_err(|e| *e)
    }
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Selector").field(&self.source).finish()
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Two selectors are equal when compiled from the same text.
impl PartialEq for Selector {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Selector {}

impl FromStr for Selector {
    type Err = ParseError;

    fn from_str(source: &str) -> Result<Self, Self::Err> {
        Selector::parse(source)
    }
}

impl TryFrom<&str> for Selector {
    type Error = ParseError;

    fn try_from(source: &str) -> Result<Self, Self::Error> {
        Selector::parse(source)
    }
}

/// Selectors of one rule: a task matches the list if any selector matches. An empty list
/// matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectorList {
    selectors: Vec<Selector>,
}

impl SelectorList {
    /// A list of already compiled selectors.
    pub fn new(selectors: Vec<Selector>) -> SelectorList {
        SelectorList { selectors }
    }

    /// Compiles every source, returning all parse errors at once (each with the
    /// selector's 1-based number) so a config loader can report them together.
    pub fn parse_all<I, S>(sources: I) -> Result<SelectorList, Vec<SelectorListError>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut selectors = Vec::new();
        let mut errors = Vec::new();
        for (i, source) in sources.into_iter().enumerate() {
            match Selector::parse(source.as_ref()) {
                Ok(selector) => selectors.push(selector),
                Err(source) => errors.push(SelectorListError {
                    number: i + 1,
                    source,
                }),
            }
        }
        if errors.is_empty() {
            Ok(SelectorList { selectors })
        } else {
            Err(errors)
        }
    }

    /// Whether any selector matches `task`; selectors that fail to evaluate don't.
    pub fn matches(&self, task: &Value) -> bool {
        self.first_match(task).is_some()
    }

    /// The 0-based index of the first selector that matches `task`.
    pub fn first_match(&self, task: &Value) -> Option<usize> {
        self.selectors.iter().position(|s| s.matches(task))
    }

    /// Like [`first_match`](Self::first_match), calling `on_error` with the 0-based
    /// index, selector and error of each selector that failed to evaluate on the way.
    pub fn first_match_reporting<F>(&self, task: &Value, mut on_error: F) -> Option<usize>
    where
        F: FnMut(usize, &Selector, &EvalError),
    {
        self.selectors
            .iter()
            .enumerate()
            .find_map(|(i, selector)| match selector.try_eval(task) {
                Ok(true) => Some(i),
                Ok(false) => None,
                Err(error) => {
                    on_error(i, selector, &error);
                    None
                }
            })
    }

    /// The selectors, in order.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors
    }

    /// Iterates over the selectors in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Selector> {
        self.selectors.iter()
    }

    pub fn len(&self) -> usize {
        self.selectors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.selectors.is_empty()
    }
}

impl FromIterator<Selector> for SelectorList {
    fn from_iter<T: IntoIterator<Item = Selector>>(iter: T) -> Self {
        SelectorList::new(iter.into_iter().collect())
    }
}

impl<'l> IntoIterator for &'l SelectorList {
    type Item = &'l Selector;
    type IntoIter = std::slice::Iter<'l, Selector>;

    fn into_iter(self) -> Self::IntoIter {
        self.selectors.iter()
    }
}

impl IntoIterator for SelectorList {
    type Item = Selector;
    type IntoIter = std::vec::IntoIter<Selector>;

    fn into_iter(self) -> Self::IntoIter {
        self.selectors.into_iter()
    }
}
