//! Webhook deliveries of git services: which service sent it, whether it is signed with the
//! project's secret, and what happened (a tag pushed, deleted, a branch push, …).
//!
//! The signature is the authentication, checked before the body is parsed, in constant time:
//! - GitHub: `X-GitHub-Event`, `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`,
//!   delivery id `X-GitHub-Delivery`;
//! - Gitea and Forgejo: `X-Gitea-Event` / `X-Forgejo-Event`, `X-Gitea-Signature` /
//!   `X-Forgejo-Signature: <hex HMAC-SHA256>`, delivery id `X-Gitea-Delivery` /
//!   `X-Forgejo-Delivery` (they also send GitHub's headers; theirs win);
//! - GitLab: `X-Gitlab-Event`, `X-Gitlab-Token: <the secret>`, delivery id
//!   `X-Gitlab-Event-UUID` (or `Idempotency-Key`).
//!
//! Bodies are JSON, or GitHub's form encoding (`payload=<url-encoded JSON>`).

use crate::error::ProjectError;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The git service that sent a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// GitHub (and GitHub-compatible senders).
    GitHub,
    /// GitLab.
    GitLab,
    /// Gitea or Forgejo.
    Gitea,
}

impl Provider {
    /// `github`, `gitlab` or `gitea`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Gitea => "gitea",
        }
    }
}

/// What a delivery says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A tag was pushed or created.
    Tag {
        /// The tag's name (without `refs/tags/`).
        name: String,
        /// The commit it points at, when the delivery names it.
        commit: Option<String>,
    },
    /// A tag was deleted.
    TagDeleted {
        /// The tag's name.
        name: String,
    },
    /// A branch was pushed, created or deleted.
    Branch {
        /// The branch's name.
        name: String,
    },
    /// Anything else (`ping`, issues, …): the event's name.
    Other(String),
}

/// A verified delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Who sent it.
    pub provider: Provider,
    /// The delivery id, when the service sends one (a redelivery repeats it).
    pub id: Option<String>,
    /// What happened.
    pub event: Event,
}

/// Verifies that `body` was signed with `secret` and says what it holds. `header` looks a
/// request header up by its lowercase name. [`ProjectError::Signature`] when the delivery
/// is not from a known service or not signed with `secret`; [`ProjectError::Delivery`] when a
/// signed body cannot be read.
pub fn verify(
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    secret: &str,
) -> Result<Delivery, ProjectError> {
    let first = |names: &[&str]| names.iter().find_map(|n| header(n));
    let (provider, event) = if let Some(e) = first(&["x-gitea-event", "x-forgejo-event"]) {
        (Provider::Gitea, e)
    } else if let Some(e) = header("x-github-event") {
        (Provider::GitHub, e)
    } else if let Some(e) = header("x-gitlab-event") {
        (Provider::GitLab, e)
    } else {
        return Err(ProjectError::Signature(
            "not a GitHub, GitLab, Gitea or Forgejo delivery (no X-GitHub-Event, \
             X-Gitlab-Event or X-Gitea-Event header)"
                .into(),
        ));
    };
    match provider {
        Provider::GitHub => {
            let sig =
                header("x-hub-signature-256").ok_or_else(|| missing("X-Hub-Signature-256"))?;
            let hex = sig.trim().strip_prefix("sha256=").ok_or_else(|| {
                ProjectError::Signature("X-Hub-Signature-256 must be `sha256=<hex>`".into())
            })?;
            check_hmac(secret, body, hex, "X-Hub-Signature-256")?;
        }
        Provider::Gitea => {
            let sig = first(&["x-gitea-signature", "x-forgejo-signature"])
                .ok_or_else(|| missing("X-Gitea-Signature"))?;
            check_hmac(secret, body, sig.trim(), "X-Gitea-Signature")?;
        }
        Provider::GitLab => {
            let token = header("x-gitlab-token").ok_or_else(|| missing("X-Gitlab-Token"))?;
            // Hashed first, so the comparison takes the same time whatever the lengths.
            let same: bool = Sha256::digest(token.as_bytes())
                .ct_eq(&Sha256::digest(secret.as_bytes()))
                .into();
            if !same {
                return Err(ProjectError::Signature(
                    "X-Gitlab-Token is not the project's webhook secret".into(),
                ));
            }
        }
    }
    let id = match provider {
        Provider::GitHub => header("x-github-delivery"),
        Provider::Gitea => first(&[
            "x-gitea-delivery",
            "x-forgejo-delivery",
            "x-github-delivery",
        ]),
        Provider::GitLab => first(&[
            "x-gitlab-event-uuid",
            "x-gitlab-webhook-uuid",
            "idempotency-key",
        ]),
    }
    .map(|id| id.trim().to_owned())
    .filter(|id| !id.is_empty() && id.len() <= 200);
    let json = parse_body(body)?;
    let event = match provider {
        Provider::GitHub | Provider::Gitea => github_event(&event, &json)?,
        Provider::GitLab => gitlab_event(&event, &json)?,
    };
    Ok(Delivery {
        provider,
        id,
        event,
    })
}

fn missing(header: &str) -> ProjectError {
    ProjectError::Signature(format!("no {header} header: the delivery is not signed"))
}

/// Checks a hex HMAC-SHA256 of `body` under `secret`, in constant time.
fn check_hmac(secret: &str, body: &[u8], hex: &str, header: &str) -> Result<(), ProjectError> {
    let wrong = || {
        ProjectError::Signature(format!(
            "{header} does not match the body signed with the project's webhook secret"
        ))
    };
    let given = decode_hex(hex).ok_or_else(wrong)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|_| ProjectError::Signature("the webhook secret cannot key an HMAC".into()))?;
    mac.update(body);
    mac.verify_slice(&given).map_err(|_| wrong())
}

/// Hex HMAC-SHA256 of `body` under `secret` (what a git service sends; for tests and
/// clients).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    crate::hex(&mac.finalize().into_bytes())
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || hex.len() > 256 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The delivery's JSON: the body, or the `payload` field of a form-encoded body.
fn parse_body(body: &[u8]) -> Result<Value, ProjectError> {
    let bad = |e: serde_json::Error| {
        ProjectError::Delivery(format!(
            "the body is not JSON (line {}, column {}): {e}",
            e.line(),
            e.column()
        ))
    };
    if let Some(form) = body.strip_prefix(b"payload=") {
        let plus_as_space: Vec<u8> = form
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        let decoded: Vec<u8> = percent_encoding::percent_decode(&plus_as_space).collect();
        return serde_json::from_slice(&decoded).map_err(bad);
    }
    serde_json::from_slice(body).map_err(bad)
}

fn text<'a>(json: &'a Value, key: &str) -> Option<&'a str> {
    json.get(key).and_then(Value::as_str)
}

/// A commit id that means "none" (a deletion).
fn is_zero(commit: &str) -> bool {
    !commit.is_empty() && commit.bytes().all(|b| b == b'0')
}

fn commit_of(value: Option<&str>) -> Option<String> {
    value
        .filter(|c| !is_zero(c) && c.len() >= 7 && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|c| c.to_ascii_lowercase())
}

/// A `ref` that should be there.
fn field<'a>(json: &'a Value, key: &str, event: &str) -> Result<&'a str, ProjectError> {
    text(json, key).ok_or_else(|| {
        ProjectError::Delivery(format!("`{event}` event without a `{key}` string field"))
    })
}

/// GitHub's (and Gitea's) `push`, `create` and `delete` events.
fn github_event(event: &str, json: &Value) -> Result<Event, ProjectError> {
    Ok(match event {
        "push" => {
            let git_ref = field(json, "ref", event)?;
            let deleted = json.get("deleted").and_then(Value::as_bool) == Some(true)
                || text(json, "after").is_some_and(is_zero);
            if let Some(tag) = git_ref.strip_prefix("refs/tags/") {
                if deleted {
                    Event::TagDeleted { name: tag.into() }
                } else {
                    Event::Tag {
                        name: tag.into(),
                        commit: commit_of(text(json, "after")),
                    }
                }
            } else {
                Event::Branch {
                    name: git_ref
                        .strip_prefix("refs/heads/")
                        .unwrap_or(git_ref)
                        .into(),
                }
            }
        }
        "create" | "delete" => {
            let name = field(json, "ref", event)?.to_owned();
            match (text(json, "ref_type"), event) {
                (Some("tag"), "create") => Event::Tag {
                    name,
                    commit: commit_of(text(json, "sha")),
                },
                (Some("tag"), _) => Event::TagDeleted { name },
                _ => Event::Branch { name },
            }
        }
        other => Event::Other(other.to_owned()),
    })
}

/// GitLab's `Tag Push Hook` and `Push Hook`.
fn gitlab_event(event: &str, json: &Value) -> Result<Event, ProjectError> {
    Ok(match event {
        "Tag Push Hook" => {
            let git_ref = field(json, "ref", event)?;
            let name = git_ref
                .strip_prefix("refs/tags/")
                .unwrap_or(git_ref)
                .to_owned();
            let after = text(json, "after");
            if after.is_some_and(is_zero) || json.get("checkout_sha").is_some_and(Value::is_null) {
                Event::TagDeleted { name }
            } else {
                Event::Tag {
                    name,
                    // The commit the tag points at (`after` may be an annotated tag's object).
                    commit: commit_of(text(json, "checkout_sha")).or_else(|| commit_of(after)),
                }
            }
        }
        "Push Hook" => {
            let git_ref = field(json, "ref", event)?;
            Event::Branch {
                name: git_ref
                    .strip_prefix("refs/heads/")
                    .unwrap_or(git_ref)
                    .into(),
            }
        }
        other => Event::Other(other.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const SECRET: &str = "s3cret";
    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    fn run(headers: &[(&str, &str)], body: &str) -> Result<Delivery, ProjectError> {
        let map: HashMap<String, String> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        verify(&|name| map.get(name).cloned(), body.as_bytes(), SECRET)
    }

    #[test]
    fn github_push_of_a_tag_is_verified_and_read() {
        let body =
            format!(r#"{{"ref":"refs/tags/release/shop/1.4.0","after":"{SHA}","deleted":false}}"#);
        let sig = format!("sha256={}", sign(SECRET, body.as_bytes()));
        let d = run(
            &[
                ("X-GitHub-Event", "push"),
                ("X-GitHub-Delivery", "d-1"),
                ("X-Hub-Signature-256", &sig),
            ],
            &body,
        )
        .unwrap();
        assert_eq!(d.provider, Provider::GitHub);
        assert_eq!(d.id.as_deref(), Some("d-1"));
        assert_eq!(
            d.event,
            Event::Tag {
                name: "release/shop/1.4.0".into(),
                commit: Some(SHA.into())
            }
        );
        // The same body under another secret, a changed body, no signature: refused.
        let other = format!("sha256={}", sign("other", body.as_bytes()));
        for (headers, body) in [
            (
                vec![
                    ("X-GitHub-Event", "push"),
                    ("X-Hub-Signature-256", other.as_str()),
                ],
                body.clone(),
            ),
            (
                vec![
                    ("X-GitHub-Event", "push"),
                    ("X-Hub-Signature-256", sig.as_str()),
                ],
                body.replace("1.4.0", "1.4.1"),
            ),
            (vec![("X-GitHub-Event", "push")], body.clone()),
            (
                vec![
                    ("X-GitHub-Event", "push"),
                    ("X-Hub-Signature-256", "sha1=00"),
                ],
                body.clone(),
            ),
            (
                vec![
                    ("X-GitHub-Event", "push"),
                    ("X-Hub-Signature-256", "sha256=zz"),
                ],
                body.clone(),
            ),
            (vec![], body.clone()),
        ] {
            let e = run(&headers, &body).unwrap_err();
            assert!(matches!(e, ProjectError::Signature(_)), "{headers:?}: {e}");
        }
    }

    #[test]
    fn deletions_branches_and_create_events_are_told_apart() {
        let signed = |event: &str, body: &str| {
            let sig = format!("sha256={}", sign(SECRET, body.as_bytes()));
            run(
                &[("X-GitHub-Event", event), ("X-Hub-Signature-256", &sig)],
                body,
            )
            .unwrap()
            .event
        };
        assert_eq!(
            signed(
                "push",
                r#"{"ref":"refs/tags/v1","after":"0000000000000000000000000000000000000000","deleted":true}"#
            ),
            Event::TagDeleted { name: "v1".into() }
        );
        assert_eq!(
            signed(
                "push",
                &format!(r#"{{"ref":"refs/heads/main","after":"{SHA}"}}"#)
            ),
            Event::Branch {
                name: "main".into()
            }
        );
        assert_eq!(
            signed("create", r#"{"ref":"v2","ref_type":"tag"}"#),
            Event::Tag {
                name: "v2".into(),
                commit: None
            }
        );
        assert_eq!(
            signed("ping", r#"{"zen":"x"}"#),
            Event::Other("ping".into())
        );
        // A form-encoded body (GitHub's other content type).
        let json = r#"{"ref":"refs/tags/v3","after":"0123456789abcdef0123456789abcdef01234567"}"#;
        let form = format!(
            "payload={}",
            percent_encoding::utf8_percent_encode(json, percent_encoding::NON_ALPHANUMERIC)
        );
        assert!(matches!(signed("push", &form), Event::Tag { name, .. } if name == "v3"));
        // A signed body that is not JSON: a delivery error, naming where.
        let sig = format!("sha256={}", sign(SECRET, b"{nope"));
        let e = run(
            &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &sig)],
            "{nope",
        )
        .unwrap_err();
        assert!(
            matches!(e, ProjectError::Delivery(ref m) if m.contains("line 1")),
            "{e}"
        );
    }

    #[test]
    fn gitea_and_gitlab_are_verified_their_way() {
        let body = format!(r#"{{"ref":"refs/tags/v1","after":"{SHA}"}}"#);
        let sig = sign(SECRET, body.as_bytes());
        let d = run(
            &[
                ("X-Gitea-Event", "push"),
                ("X-GitHub-Event", "push"),
                ("X-Gitea-Signature", &sig),
                ("X-Gitea-Delivery", "g-1"),
            ],
            &body,
        )
        .unwrap();
        assert_eq!(
            (d.provider, d.id.as_deref()),
            (Provider::Gitea, Some("g-1"))
        );
        let e = run(
            &[("X-Gitea-Event", "push"), ("X-Gitea-Signature", "00")],
            &body,
        )
        .unwrap_err();
        assert!(matches!(e, ProjectError::Signature(_)));

        let lab = format!(
            r#"{{"object_kind":"tag_push","ref":"refs/tags/v1","after":"{SHA}","checkout_sha":"{SHA}"}}"#
        );
        let d = run(
            &[
                ("X-Gitlab-Event", "Tag Push Hook"),
                ("X-Gitlab-Token", SECRET),
                ("X-Gitlab-Event-UUID", "u-1"),
            ],
            &lab,
        )
        .unwrap();
        assert_eq!(
            d.event,
            Event::Tag {
                name: "v1".into(),
                commit: Some(SHA.into())
            }
        );
        assert_eq!(d.id.as_deref(), Some("u-1"));
        let e = run(
            &[
                ("X-Gitlab-Event", "Tag Push Hook"),
                ("X-Gitlab-Token", "wrong"),
            ],
            &lab,
        )
        .unwrap_err();
        assert!(matches!(e, ProjectError::Signature(_)));
        let deleted = r#"{"ref":"refs/tags/v1","after":"0000000000000000000000000000000000000000","checkout_sha":null}"#;
        let d = run(
            &[
                ("X-Gitlab-Event", "Tag Push Hook"),
                ("X-Gitlab-Token", SECRET),
            ],
            deleted,
        )
        .unwrap();
        assert_eq!(d.event, Event::TagDeleted { name: "v1".into() });
    }
}
