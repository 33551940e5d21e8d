//! Projects and versions as the hub keeps them (pure: no I/O, no clock reads).
//!
//! A project's store document is [`ProjectDoc`]: the request's fields with the password and
//! the webhook secret *sealed* (`silk_projects::secrets`), never in clear. A version's is
//! [`VersionDoc`]. The wire types are `silk_api::projects`; [`project_view`] and
//! [`version_view`] make them, and never carry a secret.

use crate::error::HubError;
use serde::{Deserialize, Serialize};
use silk_api::projects::{
    Artifact, BuildSpec, DEFAULT_TAG_PATTERN, ProjectRequest, ProjectView, VersionState,
    VersionView,
};
use silk_projects::pattern::{TagPattern, check_name, check_version};
use silk_store::{ProjectRow, VersionRow};

/// What the store keeps of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ProjectDoc {
    /// The tenant it belongs to (documents from before tenants: `default`).
    #[serde(default = "silk_api::tenants::default_tenant")]
    pub tenant: String,
    pub git_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password, sealed for [`password_purpose`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_sealed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    pub tag_pattern: String,
    pub build: BuildSpec,
    /// The webhook secret, sealed for [`webhook_purpose`].
    pub webhook_secret_sealed: String,
}

/// The sealing purpose of a project's password.
pub(crate) fn password_purpose(project: &str) -> String {
    format!("project:{project}:password")
}

/// The sealing purpose of a project's webhook secret.
pub(crate) fn webhook_purpose(project: &str) -> String {
    format!("project:{project}:webhook_secret")
}

/// The store lease of a project's builds: one build of a project at a time, by one hub.
pub(crate) fn build_lease(project: &str) -> String {
    format!("build:{project}")
}

/// Checks a project request; the error names the field. Returns the compiled pattern.
pub(crate) fn check_project(request: &ProjectRequest) -> Result<TagPattern, HubError> {
    let bad = |e: silk_projects::ProjectError| HubError::BadProject(e.to_string());
    check_name(&request.name).map_err(bad)?;
    silk_projects::git::check_url(&request.git_url).map_err(bad)?;
    if request.password.is_some() && request.username.is_none() {
        return Err(HubError::BadProject(
            "username: needed with a password (HTTP basic auth; a token's user may be any \
             non-empty name, e.g. `oauth2` or `x-access-token`)"
                .into(),
        ));
    }
    if let Some(user) = &request.username
        && (user.is_empty() || user.contains(':') || user.chars().any(char::is_control))
    {
        return Err(HubError::BadProject(
            "username: must be non-empty, without `:` or control characters".into(),
        ));
    }
    if let Some(secret) = &request.webhook_secret
        && secret.len() < 16
    {
        return Err(HubError::BadProject(
            "webhook_secret: at least 16 characters (or leave it out: one is generated)".into(),
        ));
    }
    if let Some(branch) = &request.branch
        && (branch.is_empty() || branch.chars().any(|c| c.is_whitespace() || c == ':'))
    {
        return Err(HubError::BadProject(format!(
            "branch: `{branch}` is not a branch name"
        )));
    }
    silk_projects::build::check_spec(&request.build).map_err(bad)?;
    let pattern = request
        .tag_pattern
        .as_deref()
        .unwrap_or(DEFAULT_TAG_PATTERN);
    TagPattern::new(pattern, &request.name).map_err(bad)
}

impl ProjectDoc {
    /// The compiled tag pattern.
    pub(crate) fn pattern(&self, name: &str) -> Result<TagPattern, HubError> {
        TagPattern::new(&self.tag_pattern, name).map_err(|e| HubError::BadProject(e.to_string()))
    }

    /// The request form of this document, without the secrets (for merge patches).
    pub(crate) fn request_without_secrets(&self, name: &str) -> ProjectRequest {
        ProjectRequest {
            name: name.to_owned(),
            git_url: self.git_url.clone(),
            username: self.username.clone(),
            password: None,
            branch: self.branch.clone(),
            tag_pattern: Some(self.tag_pattern.clone()),
            build: self.build.clone(),
            webhook_secret: None,
        }
    }
}

/// The tenant of a stored project document (`default` when it names none).
pub(crate) fn tenant_of(doc: &serde_json::Value) -> &str {
    doc.get("tenant")
        .and_then(serde_json::Value::as_str)
        .unwrap_or(silk_store::DEFAULT_TENANT)
}

/// A project row's document; an error names the project.
pub(crate) fn project_doc(row: &ProjectRow) -> Result<ProjectDoc, HubError> {
    serde_json::from_value(row.doc.clone())
        .map_err(|e| HubError::Store(format!("project {:?}: unreadable document: {e}", row.name)))
}

/// The API's view of a project: no password, no secret.
pub(crate) fn project_view(row: &ProjectRow, doc: &ProjectDoc) -> ProjectView {
    ProjectView {
        name: row.name.clone(),
        tenant: doc.tenant.clone(),
        git_url: doc.git_url.clone(),
        username: doc.username.clone(),
        has_password: doc.password_sealed.is_some(),
        branch: doc.branch.clone(),
        tag_pattern: doc.tag_pattern.clone(),
        build: doc.build.clone(),
        webhook_path: format!("/api/v1/webhooks/{}", row.name),
        created_ms: row.created_ms,
        updated_ms: row.updated_ms,
    }
}

/// What the store keeps of a version besides its columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VersionDoc {
    /// The ref built: `refs/tags/…`, `refs/heads/…`, or a commit id.
    pub revision: String,
    /// The commit the webhook announced (the checkout must be at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_commit: Option<String>,
    /// The commit built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// `webhook:github`, `api`, ….
    pub trigger: String,
    /// Builds started for this version (a hub that stopped mid-build re-queues it).
    #[serde(default)]
    pub attempts: u32,
}

/// A version row's document; an error names the version.
pub(crate) fn version_doc(row: &VersionRow) -> Result<VersionDoc, HubError> {
    serde_json::from_value(row.doc.clone()).map_err(|e| {
        HubError::Store(format!(
            "version {}/{}: unreadable document: {e}",
            row.project, row.version
        ))
    })
}

/// A version row with `doc` as its document and its columns set from it.
pub(crate) fn version_row(
    project: &str,
    version: &str,
    build_id: &str,
    state: VersionState,
    created_ms: u64,
    doc: &VersionDoc,
) -> VersionRow {
    let artifact = match &doc.artifact {
        Some(Artifact::Dir { sha256, .. }) => Some(sha256.clone()),
        _ => None,
    };
    VersionRow {
        project: project.to_owned(),
        version: version.to_owned(),
        build_id: build_id.to_owned(),
        state: state.as_str().to_owned(),
        created_ms,
        artifact,
        doc: serde_json::to_value(doc).unwrap_or_default(),
    }
}

/// A row's state; an unknown one is a store error.
pub(crate) fn version_state(row: &VersionRow) -> Result<VersionState, HubError> {
    row.state.parse().map_err(|e: String| {
        HubError::Store(format!("version {}/{}: {e}", row.project, row.version))
    })
}

/// The API's view of a version.
pub(crate) fn version_view(row: &VersionRow) -> Result<VersionView, HubError> {
    let doc = version_doc(row)?;
    Ok(VersionView {
        project: row.project.clone(),
        version: row.version.clone(),
        build: row.build_id.clone(),
        tag: doc.revision,
        commit: doc.commit.or(doc.expect_commit),
        state: version_state(row)?,
        artifact: doc.artifact,
        created_ms: row.created_ms,
        started_ms: doc.started_ms,
        finished_ms: doc.finished_ms,
        reason: doc.reason,
        hub: doc.hub,
        trigger: doc.trigger,
    })
}

/// What a by-hand build of `git_ref` builds: the revision to fetch and the version to
/// record. A tag matching the pattern gives its version; any other ref needs `version`. A
/// name that is not a full ref nor a commit id is a tag when it matches the pattern, else a
/// branch (write `refs/tags/NAME` for another tag).
pub(crate) fn resolve_ref(
    pattern: &TagPattern,
    git_ref: &str,
    version: Option<&str>,
) -> Result<(String, String), HubError> {
    let bad = |m: String| HubError::BadProject(m);
    let git_ref = git_ref.trim();
    if git_ref.is_empty()
        || git_ref.len() > 250
        || git_ref
            .chars()
            .any(|c| c.is_control() || c == ' ' || c == ':')
    {
        return Err(bad(format!("ref: `{git_ref}` is not a git ref")));
    }
    let (revision, from_pattern) = if silk_projects::git::is_commit_id(git_ref) {
        (git_ref.to_ascii_lowercase(), None)
    } else if git_ref.starts_with("refs/") {
        (
            git_ref.to_owned(),
            pattern
                .version_of(git_ref)
                .filter(|_| git_ref.starts_with("refs/tags/")),
        )
    } else if let Some(v) = pattern.version_of(git_ref) {
        (format!("refs/tags/{git_ref}"), Some(v))
    } else {
        (format!("refs/heads/{git_ref}"), None)
    };
    let version = match (version, from_pattern) {
        (Some(v), _) => v.to_owned(),
        (None, Some(v)) => v.to_owned(),
        (None, None) => {
            return Err(bad(format!(
                "ref `{git_ref}` is not a tag matching the tag pattern `{}`: give the version \
                 to record (`version`, `--version`)",
                pattern.as_str()
            )));
        }
    };
    check_version(&version).map_err(|e| bad(e.to_string()))?;
    Ok((revision, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_resolve_to_a_revision_and_a_version() {
        let p = TagPattern::new(DEFAULT_TAG_PATTERN, "shop").unwrap();
        assert_eq!(
            resolve_ref(&p, "release/shop/1.4.0", None).unwrap(),
            ("refs/tags/release/shop/1.4.0".into(), "1.4.0".into())
        );
        assert_eq!(
            resolve_ref(&p, "refs/tags/release/shop/2.0", None).unwrap(),
            ("refs/tags/release/shop/2.0".into(), "2.0".into())
        );
        assert_eq!(
            resolve_ref(&p, "main", Some("0.0.1-main")).unwrap(),
            ("refs/heads/main".into(), "0.0.1-main".into())
        );
        let sha = "a".repeat(40);
        assert_eq!(resolve_ref(&p, &sha, Some("x1")).unwrap().0, sha);
        let e = resolve_ref(&p, "main", None).unwrap_err().to_string();
        assert!(e.contains("give the version"), "{e}");
        assert!(resolve_ref(&p, "a b", Some("1")).is_err());
        assert!(resolve_ref(&p, "main", Some("../x")).is_err());
    }
}
