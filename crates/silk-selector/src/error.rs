//! Error types: what went wrong while parsing a selector, and what went wrong while
//! evaluating one against a task.
//!
//! Messages are lower-case, have no trailing period and start with the position in the
//! selector source (``column 17: expected `]`, found `)` ``), so that a caller can prefix
//! them with the rule's name ("selector 3 of outbound `captcha`: …"). This module must not
//! format anything that depends on the task beyond short, bounded excerpts: evaluation
//! errors end up in logs, once per selector.

use std::fmt;

/// A 1-based position in the selector source, counted in characters (not bytes), so that
/// it points at the right place in sources containing Chinese text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// 1-based line; selectors are almost always a single line.
    pub line: u32,
    /// 1-based column within `line`, in characters.
    pub column: u32,
}

impl Position {
    /// Computes the position of byte offset `offset` in `source`.
    pub(crate) fn at(source: &str, offset: usize) -> Position {
        let offset = offset.min(source.len());
        // `offset` always comes from the lexer and sits on a char boundary; be defensive
        // anyway, since an error path must never panic.
        let prefix = source.get(..offset).unwrap_or(source);
        let line_start = prefix.rfind('\n').map_or(0, |i| i + 1);
        let line = prefix.matches('\n').count() + 1;
        let column = prefix[line_start..].chars().count() + 1;
        Position {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 1 {
            write!(f, "column {}", self.column)
        } else {
            write!(f, "line {}, column {}", self.line, self.column)
        }
    }
}

/// Why a selector could not be parsed. Every variant names the position of the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A character that cannot start any token.
    #[error("{pos}: unexpected character `{found}`")]
    UnexpectedCharacter { pos: Position, found: char },
    /// Syntax from other languages or from Python outside the supported subset, with a
    /// hint (`=` → use `==`, `&&` → use `and`, attribute access, keyword arguments…).
    #[error("{pos}: {what}")]
    Unsupported { pos: Position, what: &'static str },
    /// A Python keyword that has no meaning in a selector (`if`, `lambda`, `for`…).
    #[error("{pos}: unsupported keyword `{keyword}`")]
    UnsupportedKeyword { pos: Position, keyword: String },
    /// A string literal without its closing quote.
    #[error("{pos}: unterminated string literal")]
    UnterminatedString { pos: Position },
    /// A backslash escape that Python rejects (`\x4`, `\u12`, `\N{…}`, a surrogate…).
    #[error("{pos}: invalid escape sequence `{escape}`")]
    InvalidEscape { pos: Position, escape: String },
    /// A malformed number (`0123`, `1__0`, `1e`, `0x`, `1j`…).
    #[error("{pos}: invalid number literal `{literal}`")]
    InvalidNumber { pos: Position, literal: String },
    /// An integer literal outside the 128-bit range selectors compute with.
    #[error("{pos}: integer literal `{literal}` is out of range")]
    IntegerOutOfRange { pos: Position, literal: String },
    /// The parser needed one thing and found another.
    #[error("{pos}: expected {expected}, found {found}")]
    Expected {
        pos: Position,
        expected: &'static str,
        found: String,
    },
    /// Nesting (parentheses, brackets, `not`, unary minus, subscripts, calls) deeper than
    /// [`MAX_DEPTH`](crate::MAX_DEPTH); the cap keeps parsing and evaluation off the end of
    /// the stack.
    #[error("{pos}: expression nested too deeply (limit {limit})")]
    TooDeep { pos: Position, limit: usize },
}

impl ParseError {
    /// Where in the source the problem is.
    pub fn position(&self) -> Position {
        match self {
            ParseError::UnexpectedCharacter { pos, .. }
            | ParseError::Unsupported { pos, .. }
            | ParseError::UnsupportedKeyword { pos, .. }
            | ParseError::UnterminatedString { pos }
            | ParseError::InvalidEscape { pos, .. }
            | ParseError::InvalidNumber { pos, .. }
            | ParseError::IntegerOutOfRange { pos, .. }
            | ParseError::Expected { pos, .. }
            | ParseError::TooDeep { pos, .. } => *pos,
        }
    }
}

/// Why evaluating a selector against a task failed. The selector then counts as not
/// matching; [`Selector::try_eval`](crate::Selector::try_eval) hands this to callers that
/// want to log it. Positions point at the operator, call or subscript that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// An operation applied to values of the wrong type, worded after Python's
    /// `TypeError` (`'<' not supported between instances of 'str' and 'int'`).
    #[error("{pos}: type error: {message}")]
    Type { pos: Position, message: String },
    /// A conversion that Python rejects with `ValueError` (`int('x')`).
    #[error("{pos}: value error: {message}")]
    Value { pos: Position, message: String },
    /// A list, tuple or string index outside the sequence.
    #[error("{pos}: index {index} out of range for {type_name} of length {len}")]
    IndexOutOfRange {
        pos: Position,
        index: i128,
        type_name: &'static str,
        len: usize,
    },
    /// A subscript on a dict with a key it does not have (Python's `KeyError`).
    #[error("{pos}: key {key} not found")]
    KeyNotFound { pos: Position, key: String },
    /// A call to a function other than the built-ins `int`, `str`, `float`, `len`, `bool`.
    #[error("{pos}: unknown function `{name}`")]
    UnknownFunction { pos: Position, name: String },
    /// A built-in called with the wrong number of arguments.
    #[error("{pos}: {function}() takes {expected} ({found} given)")]
    Arity {
        pos: Position,
        function: &'static str,
        expected: &'static str,
        found: usize,
    },
    /// A number that does not fit the 128-bit integers selectors compute with.
    #[error("{pos}: integer overflow: {message}")]
    Overflow { pos: Position, message: String },
    /// A task value nested deeper than the evaluator follows when comparing or converting.
    #[error("{pos}: value nested too deeply (limit {limit})")]
    TooDeep { pos: Position, limit: usize },
}

impl EvalError {
    /// Where in the selector source the failing operation is.
    pub fn position(&self) -> Position {
        match self {
            EvalError::Type { pos, .. }
            | EvalError::Value { pos, .. }
            | EvalError::IndexOutOfRange { pos, .. }
            | EvalError::KeyNotFound { pos, .. }
            | EvalError::UnknownFunction { pos, .. }
            | EvalError::Arity { pos, .. }
            | EvalError::Overflow { pos, .. }
            | EvalError::TooDeep { pos, .. } => *pos,
        }
    }
}

/// A parse error together with the number of the selector it belongs to, as returned by
/// [`SelectorList::parse_all`](crate::SelectorList::parse_all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("selector {number}: {source}")]
pub struct SelectorListError {
    /// 1-based number of the selector in the list, as a person counts ("selector 3").
    pub number: usize,
    /// What was wrong with it.
    #[source]
    pub source: ParseError,
}
