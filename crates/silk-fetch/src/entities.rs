//! HTML character references (`&amp;`, `&#233;`, `&eacute`) in the raw text and attribute
//! values that the streaming parser hands over undecoded.
//!
//! Follows the HTML tokenizer's rules: the full named-entity table (from `markup5ever`),
//! the longest match wins, legacy names without `;`, numeric references with the C1 and
//! invalid code point replacements, and in attribute values a legacy name followed by `=` or
//! an alphanumeric stays literal (so `?a=1&copy=2` in an `href` keeps `&copy`).
//!
//! Pure string functions: they must not allocate when there is no `&`.

use markup5ever::data::{C1_REPLACEMENTS, NAMED_ENTITIES};
use std::borrow::Cow;

/// `s` with its character references decoded (borrowed when it has none).
pub(crate) fn decode(s: &str, in_attribute: bool) -> Cow<'_, str> {
    if !s.contains('&') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    decode_into(s, in_attribute, &mut out);
    Cow::Owned(out)
}

/// Appends `s` with its character references decoded to `out`.
pub(crate) fn decode_into(s: &str, in_attribute: bool, out: &mut String) {
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        match reference(after, in_attribute) {
            Some((consumed, c1, c2)) => {
                out.push(c1);
                if let Some(c2) = c2 {
                    out.push(c2);
                }
                rest = &after[consumed..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
}

/// The reference at the start of `s` (just after `&`): bytes consumed and the characters.
fn reference(s: &str, in_attribute: bool) -> Option<(usize, char, Option<char>)> {
    let bytes = s.as_bytes();
    if bytes.first() == Some(&b'#') {
        return numeric(s);
    }
    // Longest name in the table; the table also holds every prefix of every name (as 0, 0),
    // so the walk stops as soon as no name can match.
    let mut best: Option<(usize, u32, u32)> = None;
    let mut len = 0;
    while len < bytes.len() && len < 40 {
        let b = bytes[len];
        if !(b.is_ascii_alphanumeric() || b == b';') {
            break;
        }
        len += 1;
        match NAMED_ENTITIES.get(&s[..len]) {
            Some(&(0, _)) => {}
            Some(&(c1, c2)) => best = Some((len, c1, c2)),
            None => break,
        }
        if b == b';' {
            break;
        }
    }
    let (len, c1, c2) = best?;
    // In an attribute, `&copy=2` and `&copyx` stay literal (the historical URL rule).
    if in_attribute
        && bytes[len - 1] != b';'
        && let Some(&next) = bytes.get(len)
        && (next == b'=' || next.is_ascii_alphanumeric())
    {
        return None;
    }
    Some((
        len,
        char::from_u32(c1)?,
        if c2 == 0 { None } else { char::from_u32(c2) },
    ))
}

fn numeric(s: &str) -> Option<(usize, char, Option<char>)> {
    let bytes = s.as_bytes();
    let (radix, start) = match bytes.get(1) {
        Some(b'x' | b'X') => (16, 2),
        _ => (10, 1),
    };
    let digits = bytes[start..]
        .iter()
        .take_while(|b| (**b as char).is_digit(radix))
        .count();
    if digits == 0 {
        return None;
    }
    let mut end = start + digits;
    let value = s[start..end]
        .chars()
        .filter_map(|c| c.to_digit(radix))
        .fold(0u32, |acc, d| {
            acc.saturating_mul(radix).saturating_add(d).min(0x110000)
        });
    if bytes.get(end) == Some(&b';') {
        end += 1;
    }
    let c = match value {
        0x80..=0x9f => C1_REPLACEMENTS[(value - 0x80) as usize]
            .unwrap_or_else(|| char::from_u32(value).unwrap_or('\u{fffd}')),
        0 | 0xd800..=0xdfff | 0x110000.. => '\u{fffd}',
        v => char::from_u32(v).unwrap_or('\u{fffd}'),
    };
    Some((end, c, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_a_browser() {
        let cases: &[(&str, bool, &str)] = &[
            ("plain", false, "plain"),
            ("a &amp; b", false, "a & b"),
            (
                "&lt;p&gt; &quot;x&quot; &#39;y&#39;",
                false,
                "<p> \"x\" 'y'",
            ),
            ("caf&eacute; &#233; &#xE9; &#XE9", false, "café é é é"),
            ("&nbsp;|", false, "\u{a0}|"),
            ("&copy 2024", false, "© 2024"),
            ("&notin; &notit;", false, "∉ ¬it;"),
            ("&NotEqualTilde;", false, "≂\u{338}"),
            (
                "&#x80; &#0; &#xD800; &#1114112;",
                false,
                "€ \u{fffd} \u{fffd} \u{fffd}",
            ),
            ("&#99999999999;", false, "\u{fffd}"),
            ("& &; &# &#x; &bogus;", false, "& &; &# &#x; &bogus;"),
            ("/p?a=1&amp;b=2", true, "/p?a=1&b=2"),
            ("/p?a=1&copy=2&lang=en", true, "/p?a=1&copy=2&lang=en"),
            ("/p?x&copy;y", true, "/p?x©y"),
            ("/p?a=1&copy", true, "/p?a=1©"),
            ("/p?x=&quot", true, "/p?x=\""),
        ];
        for (input, attr, want) in cases {
            assert_eq!(decode(input, *attr), *want, "input {input:?}");
        }
    }

    #[test]
    fn no_ampersand_borrows() {
        assert!(matches!(decode("/a/b?c=d", true), Cow::Borrowed(_)));
    }
}
