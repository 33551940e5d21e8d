//! Character decoding of HTML bodies: which encoding a page is in, and its text as UTF-8.
//!
//! The order is the WHATWG encoding sniffing order, which is what browsers (and so page
//! authors) rely on: a byte order mark; else the `charset` of the `Content-Type` header; else
//! a `<meta charset>` / `<meta http-equiv="content-type">` in the first 1024 bytes; else UTF-8
//! when the bytes are valid UTF-8; else a guess by `chardetng` (Firefox's detector).
//! Decoding uses `encoding_rs`: malformed bytes become U+FFFD, nothing ever fails.
//!
//! Pure functions over bytes: no I/O, no allocation when a UTF-8 body needs no change
//! ([`decode_html_cow`]).

use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};
use std::borrow::Cow;

/// How many bytes the `<meta>` prescan looks at (as browsers do).
const PRESCAN_BYTES: usize = 1024;
/// How many bytes the statistical detector is fed; more does not change its mind.
const DETECT_BYTES: usize = 64 * 1024;

/// The body as UTF-8 text (see the module docs for how the encoding is chosen).
pub fn decode_html(body: &[u8], content_type: Option<&str>) -> String {
    decode_html_cow(body, content_type).into_owned()
}

/// [`decode_html`] without a copy when the body already is UTF-8 without a BOM.
pub fn decode_html_cow<'a>(body: &'a [u8], content_type: Option<&str>) -> Cow<'a, str> {
    if let Some((enc, bom_len)) = Encoding::for_bom(body) {
        return enc.decode_without_bom_handling(&body[bom_len..]).0;
    }
    let enc = sniff_encoding(body, content_type);
    enc.decode_without_bom_handling(body).0
}

/// The encoding of an HTML body without a BOM: `Content-Type` charset, else `<meta>`, else
/// UTF-8 if valid, else `chardetng`'s guess.
pub fn sniff_encoding(body: &[u8], content_type: Option<&str>) -> &'static Encoding {
    if let Some(enc) = content_type
        .and_then(charset_param)
        .and_then(|l| Encoding::for_label(l.as_bytes()))
    {
        return enc;
    }
    if let Some(enc) = prescan_meta(&body[..body.len().min(PRESCAN_BYTES)]) {
        return enc;
    }
    if std::str::from_utf8(body).is_ok() {
        return UTF_8;
    }
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    let sample = &body[..body.len().min(DETECT_BYTES)];
    detector.feed(sample, sample.len() == body.len());
    detector.guess(None, chardetng::Utf8Detection::Allow)
}

/// The `charset` parameter of a `Content-Type` (`text/html; charset="iso-8859-1"`).
pub fn charset_param(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches(|c| c == '"' || c == '\''))
    })
}

/// The WHATWG `<meta>` prescan, simplified: comments are skipped, each `<meta` tag's
/// attributes are read, `charset=` wins, else `http-equiv=content-type` with a `content`
/// that names a charset. UTF-16 labels mean UTF-8 here (the bytes are ASCII-compatible).
fn prescan_meta(head: &[u8]) -> Option<&'static Encoding> {
    let mut i = 0;
    while i < head.len() {
        let rest = &head[i..];
        if rest.starts_with(b"<!--") {
            i += 4 + find(&rest[4..], b"-->").map_or(rest.len(), |p| p + 3);
            continue;
        }
        if rest.len() > 5
            && rest[0] == b'<'
            && rest[1..5].eq_ignore_ascii_case(b"meta")
            && is_space_or_slash(rest[5])
        {
            let (enc, consumed) = meta_tag(&rest[5..]);
            if let Some(enc) = enc {
                return Some(
                    if enc == encoding_rs::UTF_16LE || enc == encoding_rs::UTF_16BE {
                        UTF_8
                    } else if enc == encoding_rs::X_USER_DEFINED {
                        WINDOWS_1252
                    } else {
                        enc
                    },
                );
            }
            i += 5 + consumed;
            continue;
        }
        i += 1;
    }
    None
}

fn is_space_or_slash(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/')
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads the attributes of one `<meta` tag; returns its encoding (if it declares one) and
/// the bytes consumed.
fn meta_tag(s: &[u8]) -> (Option<&'static Encoding>, usize) {
    let mut i = 0;
    let mut charset: Option<&[u8]> = None;
    let mut content: Option<&[u8]> = None;
    let mut http_equiv_ct = false;
    loop {
        while i < s.len() && is_space_or_slash(s[i]) {
            i += 1;
        }
        if i >= s.len() || s[i] == b'>' {
            break;
        }
        let name_start = i;
        while i < s.len() && !matches!(s[i], b'=' | b'>') && !is_space_or_slash(s[i]) {
            i += 1;
        }
        let name = &s[name_start..i];
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value: &[u8] = b"";
        if i < s.len() && s[i] == b'=' {
            i += 1;
            while i < s.len() && s[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < s.len() && (s[i] == b'"' || s[i] == b'\'') {
                let quote = s[i];
                let start = i + 1;
                let end = s[start..]
                    .iter()
                    .position(|&b| b == quote)
                    .map_or(s.len(), |p| start + p);
                value = &s[start..end];
                i = (end + 1).min(s.len());
            } else {
                let start = i;
                while i < s.len() && s[i] != b'>' && !s[i].is_ascii_whitespace() {
                    i += 1;
                }
                value = &s[start..i];
            }
        }
        if name.eq_ignore_ascii_case(b"charset") && charset.is_none() {
            charset = Some(value);
        } else if name.eq_ignore_ascii_case(b"content") && content.is_none() {
            content = Some(value);
        } else if name.eq_ignore_ascii_case(b"http-equiv") {
            http_equiv_ct = value.eq_ignore_ascii_case(b"content-type");
        }
    }
    let label = charset.or_else(|| {
        if http_equiv_ct {
            content.and_then(charset_in_content)
        } else {
            None
        }
    });
    (label.and_then(|l| Encoding::for_label(trim_ascii(l))), i)
}

/// `text/html; charset=gbk` in a `content` attribute → `gbk`.
fn charset_in_content(content: &[u8]) -> Option<&[u8]> {
    let lower: Vec<u8> = content.to_ascii_lowercase();
    let pos = find(&lower, b"charset")?;
    let mut rest = &content[pos + 7..];
    rest = trim_ascii(rest);
    rest = rest.strip_prefix(b"=")?;
    rest = trim_ascii(rest);
    let rest = rest
        .strip_prefix(b"\"")
        .or_else(|| rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'"' | b'\'' | b';') || b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

fn trim_ascii(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type_charset_wins_over_meta() {
        let body = b"<meta charset=utf-8><p>caf\xe9</p>";
        assert_eq!(
            decode_html(body, Some("text/html; charset=ISO-8859-1")),
            "<meta charset=utf-8><p>café</p>"
        );
        assert_eq!(
            decode_html(body, Some("text/html; charset=\"latin1\"")),
            "<meta charset=utf-8><p>café</p>"
        );
    }

    #[test]
    fn meta_charset_and_http_equiv() {
        let cases: &[(&[u8], &str)] = &[
            (b"<html><head><meta charset=\"windows-1252\"><p>\x93q\x94", "\u{201c}q\u{201d}"),
            (b"<META CHARSET='iso-8859-1'/><p>\xe9", "é"),
            (b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=windows-1251\"><p>\xcf\xf0", "Пр"),
            (b"<meta content='text/html;charset=gbk' http-equiv='content-type'><p>\xc4\xe3", "你"),
            (b"<!-- <meta charset=koi8-r> --><meta charset=latin1><p>\xe9", "é"),
            (b"<meta charset=utf-16><p>ok", "ok"),
        ];
        for (body, want) in cases {
            let got = decode_html(body, Some("text/html"));
            assert!(got.ends_with(want), "{got:?} should end with {want:?}");
        }
    }

    #[test]
    fn meta_beyond_1024_bytes_is_not_seen() {
        let mut body = vec![b' '; 1100];
        body.extend_from_slice(b"<meta charset=koi8-r>");
        assert_eq!(sniff_encoding(&body, None), UTF_8);
    }

    #[test]
    fn bom_wins() {
        assert_eq!(
            decode_html(b"\xef\xbb\xbfhi", Some("text/html; charset=latin1")),
            "hi"
        );
        assert_eq!(decode_html(b"\xff\xfeh\x00i\x00", None), "hi");
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let got = decode_html(b"<meta charset=utf-8><p>a\xff\xfeb\xc3</p>", None);
        assert_eq!(got, "<meta charset=utf-8><p>a\u{fffd}\u{fffd}b\u{fffd}</p>");
        let got = decode_html(b"<p>ok \xe2\x82</p>", Some("text/html; charset=utf-8"));
        assert_eq!(got, "<p>ok \u{fffd}</p>");
    }

    #[test]
    fn unlabelled_bytes_are_detected() {
        assert_eq!(
            sniff_encoding("<p>plain ascii and ünïcode</p>".as_bytes(), None),
            UTF_8
        );
        let latin1 = b"<p>Le caf\xe9 est tr\xe8s bon, la cr\xe8me br\xfbl\xe9e aussi. D\xe9j\xe0 vu, \xe0 bient\xf4t.</p>";
        assert_eq!(sniff_encoding(latin1, None), WINDOWS_1252);
        assert!(decode_html(latin1, None).contains("café est très bon"));
    }

    #[test]
    fn unknown_label_falls_through() {
        assert_eq!(
            sniff_encoding(b"<meta charset=latin1>", Some("text/html; charset=bogus")),
            WINDOWS_1252
        );
        assert_eq!(charset_param("text/html"), None);
        assert_eq!(charset_param("text/html;Charset=UTF-8 "), Some("UTF-8"));
    }

    #[test]
    fn utf8_without_change_is_borrowed() {
        assert!(matches!(
            decode_html_cow(b"<p>ok</p>", Some("text/html; charset=utf-8")),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn truncated_meta_does_not_panic() {
        for body in [
            &b"<meta"[..],
            b"<meta ",
            b"<meta charset",
            b"<meta charset=",
            b"<meta content='",
            b"<!--",
        ] {
            let _ = decode_html(body, None);
        }
    }
}
