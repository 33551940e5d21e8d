//! Fetching a project's repository at one ref with `gix`: over HTTP(S) with basic auth (user
//! and password or token, given to gix's credential callback, never put in the URL), or
//! from `file://`. Each build gets a fresh clone of just that ref, checked out.

use crate::error::ProjectError;
use gix::credentials::helper::Action;
use gix::credentials::protocol::Outcome;
use gix::sec::identity::Account;
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// A repository and its credentials.
#[derive(Clone)]
pub struct Remote {
    /// `https://…`, `http://…` or `file://…`, without credentials.
    pub url: String,
    /// The user for basic auth.
    pub username: Option<String>,
    /// The password or token.
    pub password: Option<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Checks a git URL: `https`, `http` or `file`, with a host for the network ones, and no
/// user or password in it (they are given apart and stored encrypted).
pub fn check_url(url: &str) -> Result<(), ProjectError> {
    let bad = |reason: &str| ProjectError::Invalid {
        what: "git_url".into(),
        reason: format!("`{}`: {reason}", crate::shown(&redact_url(url))),
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    match parsed.scheme() {
        "https" | "http" => {
            if parsed.host_str().is_none_or(str::is_empty) {
                return Err(bad("no host"));
            }
        }
        "file" => {
            if parsed.path().is_empty() || parsed.path() == "/" {
                return Err(bad("no path"));
            }
        }
        "ssh" | "git" => {
            return Err(bad(
                "only https://, http:// and file:// repositories are fetched (ssh is not \
                 supported)",
            ));
        }
        other => return Err(bad(&format!("unknown scheme `{other}`"))),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "put no user or password in the URL: give `username` and `password` (the password \
             is stored encrypted and never shown)",
        ));
    }
    Ok(())
}

/// `url` without a user or password, for messages.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// An error with its causes, `: `-separated (each said once).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

/// Whether `text` is a full commit id (40 or 64 hex digits).
pub fn is_commit_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Clones `remote` at `revision` (a full ref, `refs/tags/…` or `refs/heads/…`, or a commit
/// id) into `dest` (absent or empty) and checks it out; returns the commit checked out and
/// what the remote's ref pointed at.
/// Blocking (network and disk): run it on a blocking thread. `interrupt` stops it early.
/// Errors never hold the password.
pub fn checkout(
    remote: &Remote,
    revision: &str,
    dest: &Path,
    interrupt: &AtomicBool,
) -> Result<Checkout, ProjectError> {
    let password = remote.password.clone().unwrap_or_default();
    let fail = |what: &str, e: &dyn std::error::Error| {
        let mut text = format!(
            "{what} {} at {revision}: {}",
            redact_url(&remote.url),
            chain(e)
        );
        if !password.is_empty() {
            text = text.replace(&password, "***");
        }
        ProjectError::Git(text)
    };
    let account = remote.username.clone().map(|username| Account {
        username,
        password: password.clone(),
        oauth_refresh_token: None,
    });
    let prepare = gix::prepare_clone(remote.url.as_str(), dest)
        .map_err(|e| fail("cannot clone", &e))?
        .with_revision(Some(revision))
        .map_err(|e| fail("cannot fetch", &e))?
        .configure_connection(move |connection| {
            let account = account.clone();
            // Only the project's own credentials: never the machine's credential helpers
            // or a prompt.
            connection.set_credentials(move |action| match (&action, &account) {
                (Action::Get(context), Some(account)) => Ok(Some(Outcome {
                    identity: account.clone(),
                    next: context.clone().into(),
                })),
                _ => Ok(None),
            });
            Ok(())
        });
    let mut prepare = prepare;
    let (mut checkout, outcome) = prepare
        .fetch_then_checkout(gix::progress::Discard, interrupt)
        .map_err(|e| fail("cannot fetch", &e))?;
    // What the remote's ref names: an annotated tag's object and the commit it peels to.
    let ref_ids: Vec<String> = outcome
        .ref_map
        .remote_refs
        .iter()
        .map(|r| r.unpack())
        .filter(|(name, _, _)| *name == revision.as_bytes())
        .flat_map(|(_, target, peeled)| [target, peeled])
        .flatten()
        .map(|id| id.to_hex().to_string())
        .collect();
    let (repo, _) = checkout
        .main_worktree(gix::progress::Discard, interrupt)
        .map_err(|e| fail("cannot check out", &e))?;
    if interrupt.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(ProjectError::Git(format!(
            "interrupted while checking out {} at {revision}",
            redact_url(&remote.url)
        )));
    }
    let commit = repo
        .head_commit()
        .map_err(|e| fail("no commit", &e))?
        .id
        .to_string();
    Ok(Checkout { commit, ref_ids })
}

/// What a checkout checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The commit checked out.
    pub commit: String,
    /// The ids the remote's ref pointed at (an annotated tag's object id and its commit).
    pub ref_ids: Vec<String>,
}

impl Checkout {
    /// Whether the ref was at `id` (a full or abbreviated commit or tag object id, as a git
    /// service's webhook names it).
    pub fn was_at(&self, id: &str) -> bool {
        let id = id.to_ascii_lowercase();
        !id.is_empty()
            && std::iter::once(&self.commit)
                .chain(&self.ref_ids)
                .any(|known| known.starts_with(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_credentials_kept_out() {
        for ok in [
            "https://git.example/a/b.git",
            "http://127.0.0.1:9/x",
            "file:///srv/git/x",
        ] {
            check_url(ok).unwrap();
        }
        for (bad, want) in [
            ("https://u:pw@git.example/x", "no user or password"),
            ("ssh://git@host/x", "ssh is not supported"),
            ("ftp://host/x", "unknown scheme"),
            ("not a url", "git_url"),
        ] {
            let e = check_url(bad).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains(":pw@"), "{bad}: {e}");
        }
        assert_eq!(redact_url("https://u:pw@h/x"), "https://h/x");
        assert!(is_commit_id(&"a".repeat(40)) && !is_commit_id("abc"));
    }
}
