//! The built-in functions selectors may call — `int()`, `str()`, `float()`, `len()`,
//! `bool()` — with Python's conversion rules, and Python's `str`/`repr` formatting.
//!
//! These are the only places evaluation may allocate (`str()` of a non-string builds a
//! string). They must not accept more than Python does (`int('1.5')` is an error, not 1)
//! and must not panic on any input, however large or deeply nested.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::ast::SeqKind;
use crate::lexer::strip_underscores;
pub(crate) use crate::text::{float_repr, truncate};
use crate::value::{MAX_VALUE_DEPTH, OpError, Val, exact_int};

/// Why a built-in failed; the evaluator adds the position.
#[derive(Debug)]
pub(crate) enum CallError {
    Type(String),
    Value(String),
    Overflow(String),
    Arity {
        function: &'static str,
        expected: &'static str,
        found: usize,
    },
    TooDeep,
}

impl From<OpError> for CallError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Type(message) => CallError::Type(message),
            OpError::TooDeep => CallError::TooDeep,
        }
    }
}

type CallResult<'a> = Result<Val<'a>, CallError>;

fn arity(function: &'static str, expected: &'static str, found: usize) -> CallError {
    CallError::Arity {
        function,
        expected,
        found,
    }
}

/// `int()`, `int(x)`, `int(text, base)`.
pub(crate) fn int<'a>(args: &mut [Val<'a>]) -> CallResult<'a> {
    match args {
        [] => Ok(Val::Int(0)),
        [x] => match x {
            Val::Bool(b) => Ok(Val::Int(i128::from(*b))),
            Val::Int(i) => Ok(Val::Int(*i)),
            Val::Float(f) => float_to_int(*f),
            Val::Str(s) => parse_int(s, 10),
            other => Err(CallError::Type(format!(
                "int() argument must be a string, a bytes-like object or a real number, not '{}'",
                other.type_name()
            ))),
        },
        [x, base] => {
            let base = match base {
                Val::Bool(b) => i128::from(*b),
                Val::Int(i) => *i,
                other => {
                    return Err(CallError::Type(format!(
                        "'{}' object cannot be interpreted as an integer",
                        other.type_name()
                    )));
                }
            };
            let Val::Str(s) = x else {
                return Err(CallError::Type(
                    "int() can't convert non-string with explicit base".to_owned(),
                ));
            };
            match u32::try_from(base) {
                Ok(base @ (0 | 2..=36)) => parse_int(s, base),
                _ => Err(CallError::Value(
                    "int() base must be >= 2 and <= 36, or 0".to_owned(),
                )),
            }
        }
        _ => Err(arity("int", "at most 2 arguments", args.len())),
    }
}

fn float_to_int<'a>(f: f64) -> CallResult<'a> {
    if f.is_nan() {
        return Err(CallError::Value(
            "cannot convert float NaN to integer".to_owned(),
        ));
    }
    exact_int(f.trunc()).map(Val::Int).ok_or_else(|| {
        CallError::Overflow(format!("cannot convert float {} to integer", float_repr(f)))
    })
}

/// Parses `text` as Python's `int(text, base)` does: surrounding whitespace, a sign,
/// `_` between digits, and for base 0 (or a matching base) a `0x`/`0o`/`0b` prefix.
fn parse_int<'a>(text: &str, base: u32) -> CallResult<'a> {
    let invalid = || {
        CallError::Value(format!(
            "invalid literal for int() with base {base}: {}",
            str_repr(&truncate(text, 200))
        ))
    };
    let trimmed = text.trim();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let lower = unsigned.to_ascii_lowercase();
    let prefixed = |p: &str, radix: u32| (base == 0 || base == radix) && lower.starts_with(p);
    let (digits, radix) = if prefixed("0x", 16) {
        (&lower[2..], 16)
    } else if prefixed("0o", 8) {
        (&lower[2..], 8)
    } else if prefixed("0b", 2) {
        (&lower[2..], 2)
    } else if base == 0 {
        // Base 0 follows literal syntax: no leading zeros on non-zero decimals.
        if lower.len() > 1 && lower.starts_with('0') && lower.chars().any(|c| c != '0' && c != '_')
        {
            return Err(invalid());
        }
        (lower.as_str(), 10)
    } else {
        (lower.as_str(), base)
    };
    // After a prefix Python allows one leading underscore: `0x_ff`.
    let digits = if radix != 10 && digits.len() < lower.len() {
        digits.strip_prefix('_').unwrap_or(digits)
    } else {
        digits
    };
    let clean = strip_underscores(digits, radix).ok_or_else(invalid)?;
    if clean.is_empty() || !clean.chars().all(|c| c.is_digit(radix)) {
        return Err(invalid());
    }
    let magnitude = u128::from_str_radix(&clean, radix)
        .map_err(|_| CallError::Overflow("int() result does not fit in 128 bits".to_owned()))?;
    let value = if negative {
        0i128.checked_sub_unsigned(magnitude)
    } else {
        i128::try_from(magnitude).ok()
    };
    value
        .map(Val::Int)
        .ok_or_else(|| CallError::Overflow("int() result does not fit in 128 bits".to_owned()))
}

/// `float()`, `float(x)`.
pub(crate) fn float<'a>(args: &mut [Val<'a>]) -> CallResult<'a> {
    match args {
        [] => Ok(Val::Float(0.0)),
        [x] => match x {
            Val::Bool(b) => Ok(Val::Float(f64::from(u8::from(*b)))),
            Val::Int(i) => Ok(Val::Float(*i as f64)),
            Val::Float(f) => Ok(Val::Float(*f)),
            Val::Str(s) => parse_float(s),
            other => Err(CallError::Type(format!(
                "float() argument must be a string or a real number, not '{}'",
                other.type_name()
            ))),
        },
        _ => Err(arity("float", "at most 1 argument", args.len())),
    }
}

fn parse_float<'a>(text: &str) -> CallResult<'a> {
    let invalid = || {
        CallError::Value(format!(
            "could not convert string to float: {}",
            str_repr(&truncate(text, 200))
        ))
    };
    let trimmed = text.trim();
    let unsigned = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    let word = unsigned.to_ascii_lowercase();
    // Rust's parser also takes these words; Python takes exactly these.
    let is_special = matches!(word.as_str(), "inf" | "infinity" | "nan");
    let is_decimal = unsigned
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-' | '_'))
        && unsigned.chars().any(|c| c.is_ascii_digit());
    if !is_special && !is_decimal {
        return Err(invalid());
    }
    let clean = strip_underscores(trimmed, 10).ok_or_else(invalid)?;
    clean.parse::<f64>().map(Val::Float).map_err(|_| invalid())
}

/// `str()`, `str(x)`: borrows when `x` is already a string.
pub(crate) fn str<'a>(args: &mut [Val<'a>]) -> CallResult<'a> {
    match args {
        [] => Ok(Val::Str(Cow::Borrowed(""))),
        [x] => {
            if let Val::Str(s) = x {
                return Ok(Val::Str(std::mem::take(s)));
            }
            let mut out = String::new();
            write_repr(&mut out, x, 0)?;
            Ok(Val::Str(Cow::Owned(out)))
        }
        _ => Err(arity("str", "at most 1 argument", args.len())),
    }
}

/// `len(x)`: characters of a string, elements of a list, tuple or dict.
pub(crate) fn len<'a>(args: &mut [Val<'a>]) -> CallResult<'a> {
    let [x] = args else {
        return Err(arity("len", "exactly one argument", args.len()));
    };
    let n = match x {
        Val::Str(s) => s.chars().count(),
        Val::Seq(seq) => seq.len(),
        Val::Dict(map) => map.len(),
        other => {
            return Err(CallError::Type(format!(
                "object of type '{}' has no len()",
                other.type_name()
            )));
        }
    };
    Ok(Val::Int(i128::try_from(n).unwrap_or(i128::MAX)))
}

/// `bool()`, `bool(x)`.
pub(crate) fn bool<'a>(args: &mut [Val<'a>]) -> CallResult<'a> {
    match args {
        [] => Ok(Val::Bool(false)),
        [x] => Ok(Val::Bool(x.truthy())),
        _ => Err(arity("bool", "at most 1 argument", args.len())),
    }
}

/// Appends Python's `repr(value)`; for a top-level string `str()` returns it unchanged
/// before getting here.
pub(crate) fn write_repr(out: &mut String, value: &Val<'_>, depth: usize) -> Result<(), OpError> {
    if depth >= MAX_VALUE_DEPTH {
        return Err(OpError::TooDeep);
    }
    match value {
        Val::None => out.push_str("None"),
        Val::Bool(true) => out.push_str("True"),
        Val::Bool(false) => out.push_str("False"),
        Val::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Val::Float(f) => out.push_str(&float_repr(*f)),
        Val::Str(s) => out.push_str(&str_repr(s)),
        Val::Seq(seq) => {
            let (open, close) = match seq.kind() {
                SeqKind::List => ('[', "]"),
                SeqKind::Tuple => ('(', if seq.len() == 1 { ",)" } else { ")" }),
            };
            out.push(open);
            for (i, item) in seq.items().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item, depth + 1)?;
            }
            out.push_str(close);
        }
        Val::Dict(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&str_repr(key));
                out.push_str(": ");
                write_repr(out, &Val::from_json(item), depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// Python's `repr()` of a string: single quotes unless the text has single quotes and no
/// double quotes; backslash escapes for quotes, backslashes and control characters.
pub(crate) fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if u32::from(c) < 0x20 || (0x7f..=0xa0).contains(&u32::from(c)) => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-07"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-2.5, "-2.5"),
            (12345.678, "12345.678"),
            (f64::INFINITY, "inf"),
            (1e300, "1e+300"),
        ];
        for (value, expected) in cases {
            assert_eq!(float_repr(value), expected, "{value:e}");
        }
    }

    #[test]
    fn strings_repr_like_python() {
        assert_eq!(str_repr("a"), "'a'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("'\""), "'\\'\"'");
        assert_eq!(str_repr("a\nb\\"), "'a\\nb\\\\'");
        assert_eq!(str_repr("找新"), "'找新'");
    }
}
