//! The parse budget: a linear pre-scan of an HTML page that refuses, before any tree or
//! streaming pass, a page whose element nesting or element count would make parsing cost
//! far more than its size (html5ever's tree builder walks the stack of open elements for
//! many start tags, so 1,000,000 nested `<div>`s take hours; a streaming selector pass
//! keeps a stack as deep as the page too).
//!
//! The scan is a small tokenizer, not a parser: it skips comments, doctypes, processing
//! instructions and the text of raw-text elements (`script`, `style`, `textarea`, `title`,
//! …), honours quoted attribute values, and does not count void elements, self-closing
//! tags, nor the elements whose end tag HTML lets the parser imply (`p`, `li`, `td`, …: a
//! new one closes the previous one, so they never nest deep). It can only over-count the
//! depth of a page whose end tags are missing where the parser would also keep elements
//! open, which is the shape it exists to stop. Written by hand because no maintained crate
//! gives a bounded, allocation-free depth count; html5ever's own tokenizer allocates per
//! token and is several times slower. The byte searches are the `memchr` crate's.

/// Pages up to this size are parsed on the caller's thread; larger ones on a thread of their
/// own with a deadline (`parse_timeout_ms`). Within the depth limit, a page this small cannot
/// cost more than a few milliseconds whatever its shape (at most ~6,500 elements × 1,024
/// levels of stack walks), while the hand-off to another thread would cost a crawl of small
/// pages a quarter of its speed.
pub const INLINE_PARSE_MAX_BYTES: usize = 32 * 1024;

/// Limits on the shape of a page that is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Deepest element nesting.
    pub max_depth: u32,
    /// Most elements.
    pub max_elements: u64,
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self {
            max_depth: 1_024,
            max_elements: 1_000_000,
        }
    }
}

/// Elements without content.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "keygen", "frame", "basefont", "bgsound", "image",
];
/// Elements a following sibling of the same kind (or their parent's end) closes: they never
/// nest deep in the tree the parser builds, whatever the markup says.
const IMPLIED_END: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot", "rb",
    "rt", "rp", "rtc", "colgroup", "caption", "html", "head", "body",
];
/// Elements whose content is text up to their end tag.
const RAW_TEXT: &[&str] = &[
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "plaintext",
];

/// Checks `html` against `limits`: `Err` says which limit the page passes and where.
pub fn check(html: &str, limits: &ParseLimits) -> Result<(), String> {
    let bytes = html.as_bytes();
    let mut depth: u32 = 0;
    let mut elements: u64 = 0;
    let mut i = 0;
    while let Some(off) = memchr::memchr(b'<', &bytes[i..]) {
        let lt = i + off;
        let rest = &bytes[lt + 1..];
        match rest.first() {
            Some(b'!') => {
                i = if rest.starts_with(b"!--") {
                    find(bytes, lt + 4, b"-->").map_or(bytes.len(), |e| e + 3)
                } else {
                    skip_to_gt(bytes, lt + 1)
                };
            }
            Some(b'?') => i = skip_to_gt(bytes, lt + 1),
            Some(b'/') => {
                depth = depth.saturating_sub(1);
                i = skip_to_gt(bytes, lt + 2);
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let name_end = lt
                    + 1
                    + rest
                        .iter()
                        .position(|b| b.is_ascii_whitespace() || matches!(b, b'>' | b'/'))
                        .unwrap_or(rest.len());
                let name = &bytes[lt + 1..name_end];
                let gt = skip_to_gt(bytes, name_end);
                let self_closing = gt >= 2 && bytes.get(gt - 2) == Some(&b'/');
                elements += 1;
                if elements > limits.max_elements {
                    return Err(format!(
                        "more than {} elements (at byte {lt})",
                        limits.max_elements
                    ));
                }
                let is =
                    |list: &[&str]| list.iter().any(|t| name.eq_ignore_ascii_case(t.as_bytes()));
                i = gt;
                if is(RAW_TEXT) {
                    i = raw_text_end(bytes, gt, name);
                } else if !self_closing && !is(VOID) && !is(IMPLIED_END) {
                    depth += 1;
                    if depth > limits.max_depth {
                        return Err(format!(
                            "elements nested more than {} deep (at byte {lt})",
                            limits.max_depth
                        ));
                    }
                }
            }
            _ => i = lt + 1,
        }
    }
    Ok(())
}

fn find(bytes: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    memchr::memmem::find(bytes.get(from..)?, pat).map(|p| from + p)
}

/// The index after the `>` that ends the tag whose body starts at `from` (quoted attribute
/// values may hold `>`), or the end of the input.
fn skip_to_gt(bytes: &[u8], from: usize) -> usize {
    let mut quote = None;
    let mut i = from;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b == b'>' => return i + 1,
            None => {}
        }
        i += 1;
    }
    bytes.len()
}

/// The index after the end tag `</name…>` of a raw-text element whose text starts at
/// `from`, or the end of the input.
fn raw_text_end(bytes: &[u8], from: usize, name: &[u8]) -> usize {
    let mut i = from;
    while let Some(off) = memchr::memchr(b'<', &bytes[i.min(bytes.len())..]) {
        let lt = i + off;
        let tail = &bytes[lt + 1..];
        if tail.first() == Some(&b'/')
            && tail.len() > name.len()
            && tail[1..=name.len()].eq_ignore_ascii_case(name)
        {
            return skip_to_gt(bytes, lt + 2 + name.len());
        }
        i = lt + 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_depth: u32, max_elements: u64) -> ParseLimits {
        ParseLimits {
            max_depth,
            max_elements,
        }
    }

    #[test]
    fn ordinary_pages_pass() {
        let page = "<!doctype html><html><head><title>a <div> b</title>\
            <script>if (a<b) { document.write('<div><div><div>') }</script></head>\
            <body><!-- <div><div> --><ul><li>one<li>two<li>three</ul>\
            <p>x<p>y<br><img src='a>b'/><div class=\"x>\"><span>z</span></div>\
            <table><tr><td>1<td>2<tr><td>3</table></body></html>";
        assert_eq!(check(page, &limits(6, 100)), Ok(()));
        // Thousands of unclosed list items and paragraphs never nest in the parser.
        let items = "<ul>".to_owned() + &"<li><p>item".repeat(10_000) + "</ul>";
        assert_eq!(check(&items, &limits(8, 100_000)), Ok(()));
    }

    #[test]
    fn deep_and_huge_pages_are_refused_early() {
        let nested = "<div>".repeat(2_000);
        let err = check(&nested, &limits(1_024, 1_000_000)).unwrap_err();
        assert_eq!(err, "elements nested more than 1024 deep (at byte 5120)");
        let closed = "<div></div>".repeat(2_000);
        assert_eq!(check(&closed, &limits(1_024, 1_000_000)), Ok(()));
        let err = check(&closed, &limits(1_024, 1_500)).unwrap_err();
        assert!(err.starts_with("more than 1500 elements"), "{err}");
        // Upper case, attributes and `>` in quotes count the same.
        let tricky = "<DIV data-x='>'>".repeat(30);
        assert!(check(&tricky, &limits(20, 1_000)).is_err());
    }

    #[test]
    fn broken_input_never_panics() {
        for s in [
            "<",
            "</",
            "<!",
            "<!--",
            "<a",
            "<a '",
            "<script>",
            "<script></scr",
            "<<<>>>",
            "<\u{e9}>",
            "<title",
            "</>",
            "<a/",
            "<!---->",
        ] {
            let _ = check(s, &limits(2, 2));
        }
    }
}
