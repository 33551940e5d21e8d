//! Cutting text to a byte budget without splitting a character: the one helper behind every
//! bounded message, log line, body and stored key.

/// The longest prefix of `s` that is at most `max_bytes` long and ends on a character
/// boundary.
pub fn prefix(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts `s` in place to [`prefix`]`(s, max_bytes)`; returns whether anything was cut.
pub fn truncate(s: &mut String, max_bytes: usize) -> bool {
    let keep = prefix(s, max_bytes).len();
    let cut = keep < s.len();
    s.truncate(keep);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(prefix("abc", 5), "abc");
        assert_eq!(prefix("abc", 3), "abc");
        assert_eq!(prefix("abc", 2), "ab");
        assert_eq!(prefix("abc", 0), "");
        // "é" is two bytes, "€" three.
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(prefix("a€b", 3), "a");
        assert_eq!(prefix("a€b", 4), "a€");
        let mut s = String::from("a€b");
        assert!(truncate(&mut s, 2));
        assert_eq!(s, "a");
        assert!(!truncate(&mut s, 2));
    }

    #[test]
    fn every_cut_of_a_mixed_string_is_valid() {
        let s = "añ€😀z";
        for max in 0..=s.len() + 1 {
            let p = prefix(s, max);
            assert!(p.len() <= max);
            assert!(s.starts_with(p));
            // Nothing longer would fit.
            let next = s[p.len()..].chars().next();
            assert!(next.is_none_or(|c| p.len() + c.len_utf8() > max), "{max}");
        }
    }
}
