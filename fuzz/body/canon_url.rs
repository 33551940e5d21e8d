//! URL canonicalisation on any text, alone and against a base: it returns a URL or an
//! error, never panics, and a canonical URL is its own canonical form (idempotence).

use silk_core::canon::{CanonRules, canonicalize_str};

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let rules = CanonRules::default();
    let base = url::Url::parse("http://example.com/a/b/?x=1&utm_source=y").ok();
    for base in [None, base.as_ref()] {
        if let Ok(url) = canonicalize_str(text, base, &rules) {
            match canonicalize_str(url.as_str(), None, &rules) {
                Ok(again) => assert_eq!(again.as_str(), url.as_str(), "not idempotent"),
                Err(e) => panic!("the canonical URL `{url}` is refused: {e}"),
            }
        }
    }
}
