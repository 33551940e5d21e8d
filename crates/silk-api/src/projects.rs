//! Projects, versions and builds on the wire.
//!
//! A *project* is a team's crawler code: a git repository (with a user and a password or
//! token), a tag pattern and a build. Every tag that matches the pattern — announced by a
//! signed webhook, or asked for by hand — is checked out and built into a *version*: a packed
//! directory (`command` builds) or a container image (`container` builds).
//!
//! [`ProjectRequest`] is the body of `POST /api/v1/projects`; [`ProjectView`] is what the API
//! shows (never the password or the webhook secret: `has_password`); [`NewProject`] is the
//! create answer, the only place the webhook secret appears. [`VersionView`] is one version
//! with its state, commit and artifact.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The tag pattern of a project that does not set one.
pub const DEFAULT_TAG_PATTERN: &str = "release/{name}/{version}";

/// How a version is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuildKind {
    /// Runs `command` in the checkout; the artifact is the resulting directory, packed.
    Command,
    /// Builds a container image from `containerfile` in `context` (`silk/{project}:{version}`).
    Container,
}

/// A project's build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildSpec {
    /// `command` or `container`.
    pub kind: BuildKind,
    /// A shell command line run in the checkout (`sh -c`), for `command` builds; none means
    /// the checkout as it is becomes the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The container file, relative to the checkout (default `Containerfile`, else
    /// `Dockerfile`), for `container` builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerfile: Option<String>,
    /// The build context, relative to the checkout (default `.`), for `container` builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The build is killed after this long, ms (default 30 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Environment variables of the build (beside a minimal `PATH`, `HOME`, `LANG`), or build
    /// arguments of a container build.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// A project to create (`POST /api/v1/projects`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectRequest {
    /// A safe identifier: lowercase letters, digits, `-` and `_`, starting with a letter or
    /// digit, at most 63 characters.
    pub name: String,
    /// `https://…`, `http://…` or `file://…` (no user or password in it: give them apart).
    pub git_url: String,
    /// The git user (HTTP basic auth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password or access token (stored encrypted, never shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The branch pushes come from (for people; builds follow tags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Which tags are releases: literal text with `{name}` and `{version}` (default
    /// `release/{name}/{version}`; `:` cannot appear in a git ref).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_pattern: Option<String>,
    /// How versions are built.
    pub build: BuildSpec,
    /// The webhook secret (HMAC key or GitLab token); generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
}

/// A project as the API shows it: never the password or the webhook secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectView {
    /// Its name.
    pub name: String,
    /// The tenant it belongs to.
    #[serde(default = "crate::tenants::default_tenant")]
    #[schema(required = true)]
    pub tenant: String,
    /// The repository.
    pub git_url: String,
    /// The git user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Whether a password or token is stored.
    pub has_password: bool,
    /// The branch, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The tag pattern in force.
    pub tag_pattern: String,
    /// How versions are built.
    pub build: BuildSpec,
    /// Where the git service sends its webhook: `/api/v1/webhooks/{name}`.
    pub webhook_path: String,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Last changed, ms since the epoch.
    pub updated_ms: u64,
}

/// A project just created (or whose webhook secret was just replaced): the only time the
/// webhook secret is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewProject {
    /// The project.
    pub project: ProjectView,
    /// The webhook secret; give it to the git service's webhook: it cannot be shown again.
    pub webhook_secret: String,
}

/// Where a version is in its build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VersionState {
    /// Waiting for a builder.
    Queued,
    /// A hub builds it.
    Building,
    /// Built: its artifact can be used.
    Ready,
    /// The build failed (`reason` says why).
    Failed,
}

impl VersionState {
    /// The wire name (`"ready"`).
    pub fn as_str(self) -> &'static str {
        match self {
            VersionState::Queued => "queued",
            VersionState::Building => "building",
            VersionState::Ready => "ready",
            VersionState::Failed => "failed",
        }
    }

    /// Whether the build is over (ready or failed).
    pub fn is_final(self) -> bool {
        matches!(self, VersionState::Ready | VersionState::Failed)
    }
}

impl std::str::FromStr for VersionState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "queued" => VersionState::Queued,
            "building" => VersionState::Building,
            "ready" => VersionState::Ready,
            "failed" => VersionState::Failed,
            other => {
                return Err(format!(
                    "version state `{other}`: expected queued, building, ready or failed"
                ));
            }
        })
    }
}

/// What a build made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Artifact {
    /// The built directory, packed (tar + zstd), content-addressed; download it from
    /// `GET /api/v1/projects/{name}/versions/{version}/artifact`.
    Dir {
        /// SHA-256 of the packed file, hex.
        sha256: String,
        /// Size of the packed file.
        bytes: u64,
    },
    /// A container image.
    Image {
        /// Its name (`silk/{project}:{version}`, or in the configured registry).
        image: String,
        /// The image id the engine gave it.
        id: String,
    },
}

/// One version of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VersionView {
    /// The project.
    pub project: String,
    /// The version (from the tag: `1.4.0`).
    pub version: String,
    /// The build's id (its log is kept under it).
    pub build: String,
    /// The git ref built (`refs/tags/release/shop/1.4.0`).
    pub tag: String,
    /// The commit built, once known (the webhook's, else the checkout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Where the build is.
    pub state: VersionState,
    /// What the build made, once ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// Queued, ms since the epoch.
    pub created_ms: u64,
    /// Build started, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// Build ended, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// Why it failed (or was built again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The hub that builds or built it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// What queued it: `webhook:github`, `api`, ….
    pub trigger: String,
}

/// A build asked for by hand (`POST /api/v1/projects/{name}/builds`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildRequest {
    /// A tag (`release/shop/1.4.0`), a branch (`main`), a full ref (`refs/…`) or a commit id.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The version to record; needed when the ref is not a tag matching the pattern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A webhook delivery that queued a build (`202`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BuildQueued {
    /// The build id.
    pub build: String,
    /// The version it builds.
    pub version: String,
}

/// A webhook delivery that queued nothing (`200`): a branch push, a tag that does not match,
/// a deleted tag, a repeated delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookIgnored {
    /// Why.
    pub ignored: String,
}

/// Lines of a build log (`GET …/versions/{version}/log`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BuildLog {
    /// The version's state when read.
    pub state: VersionState,
    /// The lines, oldest first.
    pub lines: Vec<crate::logs::LogLineView>,
    /// Pass as `after` for the next page (`None`: nothing more stored yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// Query of a build log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BuildLogParams {
    /// Lines after this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// At most this many lines (default 1000, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl BuildLogParams {
    /// The query pairs.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        crate::push_param(&mut pairs, "after", self.after.as_ref());
        crate::push_param(&mut pairs, "limit", self.limit.as_ref());
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_are_tagged_by_kind() {
        let dir = Artifact::Dir {
            sha256: "ab".into(),
            bytes: 3,
        };
        assert_eq!(
            serde_json::to_value(&dir).unwrap(),
            serde_json::json!({"kind": "dir", "sha256": "ab", "bytes": 3})
        );
        let image: Artifact =
            serde_json::from_str(r#"{"kind":"image","image":"silk/shop:1.0","id":"sha256:1"}"#)
                .unwrap();
        assert!(matches!(image, Artifact::Image { .. }));
    }

    #[test]
    fn a_request_refuses_unknown_keys_and_reads_ref() {
        let e = serde_json::from_str::<ProjectRequest>(
            r#"{"name":"a","git_url":"x","build":{"kind":"command"},"pasword":"x"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("pasword"), "{e}");
        let b: BuildRequest = serde_json::from_str(r#"{"ref":"main","version":"1"}"#).unwrap();
        assert_eq!(b.git_ref, "main");
        for s in ["queued", "building", "ready", "failed"] {
            assert_eq!(s.parse::<VersionState>().unwrap().as_str(), s);
        }
    }
}
