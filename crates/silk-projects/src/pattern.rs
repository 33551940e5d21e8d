//! Names, versions and tag patterns: which tags of a project are releases, and which version
//! each one is.
//!
//! A tag pattern is literal text with the placeholders `{name}` (at most once: the project's
//! own name) and `{version}` (exactly once). `release/{name}/{version}` matches the tag
//! `release/shop/1.4.0` of project `shop` as version `1.4.0`. The seeds write
//! `{Release}:{Name}:{Version}`, but `:` cannot appear in a git ref, so a pattern with `:` is
//! refused with that explanation.

use crate::error::ProjectError;

/// Longest project name.
pub const MAX_NAME: usize = 63;
/// Longest version.
pub const MAX_VERSION: usize = 128;

/// Checks a project name: lowercase ASCII letters, digits, `-` and `_`, starting with a letter
/// or a digit, 1 to [`MAX_NAME`] characters (it becomes part of paths, image names and
/// lease names).
pub fn check_name(name: &str) -> Result<(), ProjectError> {
    let bad = |why: &str| ProjectError::Invalid {
        what: "name".into(),
        reason: format!("`{}` {why}", crate::shown(name)),
    };
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(bad(&format!("must be 1 to {MAX_NAME} characters")));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(bad("must start with a letter or a digit"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(bad(
            "may hold only lowercase letters, digits, `-` and `_` (a safe identifier)",
        ));
    }
    Ok(())
}

/// Checks a version: ASCII letters, digits, `.`, `-`, `_` and `+`, starting with a letter
/// or a digit, 1 to [`MAX_VERSION`] characters (it becomes part of paths and image tags).
pub fn check_version(version: &str) -> Result<(), ProjectError> {
    let ok = !version.is_empty()
        && version.len() <= MAX_VERSION
        && version.as_bytes()[0].is_ascii_alphanumeric()
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+'));
    if ok {
        Ok(())
    } else {
        Err(ProjectError::Invalid {
            what: "version".into(),
            reason: format!(
                "`{}` must be 1 to {MAX_VERSION} letters, digits, `.`, `-`, `_` or `+`, starting \
                 with a letter or a digit",
                crate::shown(version)
            ),
        })
    }
}

/// A compiled tag pattern of one project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagPattern {
    /// The pattern as written.
    text: String,
    /// The text before `{version}`, with `{name}` filled in.
    prefix: String,
    /// The text after `{version}`, with `{name}` filled in.
    suffix: String,
}

impl TagPattern {
    /// Compiles `pattern` for project `name`. Errors name the pattern and what is wrong.
    pub fn new(pattern: &str, name: &str) -> Result<Self, ProjectError> {
        let bad = |reason: String| ProjectError::Invalid {
            what: "tag_pattern".into(),
            reason: format!("`{}`: {reason}", crate::shown(pattern)),
        };
        if pattern.contains(':') {
            return Err(bad(
                "`:` cannot appear in a git ref (the seeds' `{Release}:{Name}:{Version}` is \
                 written `release/{name}/{version}` here)"
                    .into(),
            ));
        }
        if pattern.matches("{version}").count() != 1 {
            return Err(bad("must hold `{version}` exactly once".into()));
        }
        if pattern.matches("{name}").count() > 1 {
            return Err(bad("may hold `{name}` at most once".into()));
        }
        let filled = pattern.replace("{name}", name);
        let (prefix, suffix) = filled
            .split_once("{version}")
            .ok_or_else(|| bad("must hold `{version}`".into()))?;
        let literal = format!("{prefix}{suffix}");
        if let Some(c) = literal.chars().find(|c| matches!(c, '{' | '}')) {
            return Err(bad(format!(
                "unknown placeholder (`{c}`): only `{{name}}` and `{{version}}` are filled"
            )));
        }
        if let Some(c) = literal.chars().find(|c| {
            c.is_control() || c.is_whitespace() || matches!(c, '~' | '^' | '?' | '*' | '[' | '\\')
        }) {
            return Err(bad(format!(
                "`{}` cannot appear in a git ref",
                c.escape_default()
            )));
        }
        if literal.contains("..") || literal.contains("//") || prefix.starts_with('/') {
            return Err(bad(
                "`..`, `//` and a leading `/` cannot appear in a git ref".into(),
            ));
        }
        if prefix.starts_with("refs/") {
            return Err(bad(
                "write the tag's name without `refs/tags/` (`release/{name}/{version}`)".into(),
            ));
        }
        Ok(Self {
            text: pattern.to_owned(),
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The version of tag `tag` (a tag name, or `refs/tags/…`), if it matches and the version
    /// is a valid one ([`check_version`]).
    pub fn version_of<'t>(&self, tag: &'t str) -> Option<&'t str> {
        let tag = tag.strip_prefix("refs/tags/").unwrap_or(tag);
        let version = tag.strip_prefix(&self.prefix)?.strip_suffix(&self.suffix)?;
        check_version(version).ok().map(|()| version)
    }

    /// The tag name of `version` (without `refs/tags/`).
    pub fn tag_of(&self, version: &str) -> String {
        format!("{}{version}{}", self.prefix, self.suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pattern_matches_release_tags_of_the_project_only() {
        let p = TagPattern::new("release/{name}/{version}", "shop").unwrap();
        assert_eq!(p.version_of("release/shop/1.4.0"), Some("1.4.0"));
        assert_eq!(p.version_of("refs/tags/release/shop/1.4.0"), Some("1.4.0"));
        assert_eq!(p.version_of("release/blog/1.4.0"), None);
        assert_eq!(p.version_of("release/shop/"), None);
        assert_eq!(p.version_of("release/shop/1/2"), None, "no `/` in versions");
        assert_eq!(p.version_of("v1.4.0"), None);
        assert_eq!(p.tag_of("2.0"), "release/shop/2.0");
        let v = TagPattern::new("v{version}", "shop").unwrap();
        assert_eq!(v.version_of("v1.2.3-rc.1"), Some("1.2.3-rc.1"));
        assert_eq!(v.version_of("x1"), None);
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        let cases = [
            (
                "{Release}:{Name}:{Version}",
                "`:` cannot appear in a git ref",
            ),
            ("release/{name}", "`{version}` exactly once"),
            ("{version}/{version}", "`{version}` exactly once"),
            ("{name}/{name}/{version}", "`{name}` at most once"),
            ("rel/{project}/{version}", "unknown placeholder"),
            ("rel ease/{version}", "cannot appear in a git ref"),
            ("rel..x/{version}", "`..`"),
            ("refs/tags/{version}", "without `refs/tags/`"),
        ];
        for (pattern, want) in cases {
            let e = TagPattern::new(pattern, "shop").unwrap_err().to_string();
            assert!(
                e.contains("tag_pattern") && e.contains(want),
                "{pattern}: {e}"
            );
        }
    }

    #[test]
    fn names_and_versions_are_safe_identifiers() {
        for ok in ["shop", "a", "shop-2_x", "9lives"] {
            check_name(ok).unwrap();
        }
        for bad in ["", "Shop", "-x", "a/b", "a b", "../x", &"a".repeat(64)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.starts_with("name:"), "{e}");
        }
        for ok in ["1.4.0", "2024-01-01", "1.0+build.5", "v2"] {
            check_version(ok).unwrap();
        }
        for bad in ["", ".1", "1/2", "1 2", "1:2", "../x"] {
            assert!(check_version(bad).is_err(), "{bad}");
        }
    }
}
