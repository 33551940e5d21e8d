//! Text helpers shared by the lexer's messages and the builtins: Python's float `repr()` and
//! truncation of long strings in messages. Pure; depends on nothing else in the crate.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Python's `repr()` of a float: the shortest digits that round-trip, in positional
/// notation for exponents -4 to 15 and scientific notation (`1e+16`, `1e-05`) outside.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits Python uses.
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    if !(-4..16).contains(&exponent) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    } else if exponent >= 0 {
        let int_len = usize::try_from(exponent).unwrap_or(0) + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    } else {
        out.push_str("0.");
        out.extend(std::iter::repeat_n(
            '0',
            usize::try_from(-exponent - 1).unwrap_or(0),
        ));
        out.push_str(&digits);
    }
    out
}

/// At most `max_chars` characters of `s`, for error messages about task data.
pub(crate) fn truncate(s: &str, max_chars: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max_chars) {
        Some((end, _)) => Cow::Owned(format!("{}…", &s[..end])),
        None => Cow::Borrowed(s),
    }
}
