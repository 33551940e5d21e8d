//! Silk's projects: a team's crawler code from git, built into versions.
//!
//! - [`pattern`]: safe project names and versions, and tag patterns
//!   (`release/{name}/{version}`: which tags are releases, and which version each is);
//! - [`webhook`]: deliveries of GitHub, GitLab, Gitea and Forgejo, verified against the
//!   project's secret in constant time, and what they announce;
//! - [`secrets`]: passwords and webhook secrets sealed at rest (ChaCha20-Poly1305, a key
//!   file of the data dir or `SILK_SECRET_KEY`);
//! - [`git`]: a fresh clone of one ref with `gix`, over HTTP(S) with basic auth or `file://`;
//! - [`build`]: one build — checkout, the project's command or a container build, with its
//!   log line by line, a timeout that kills the process group;
//! - [`artifact`]: built directories packed (tar + zstd) and named by their SHA-256.
//!
//! The hub owns the queue, the store and the API; this crate owns the mechanics. Messages and
//! errors never hold a password, a token or a webhook secret.

pub mod artifact;
pub mod build;
pub mod error;
pub mod git;
pub mod pattern;
pub mod secrets;
pub mod webhook;

pub use error::ProjectError;

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// `text` as it may appear in a message: at most 100 characters, control characters escaped.
pub(crate) fn shown(text: &str) -> String {
    let mut out: String = text.chars().flat_map(char::escape_debug).collect();
    if out.chars().count() > 100 {
        out = out.chars().take(100).collect::<String>() + "…";
    }
    out
}
