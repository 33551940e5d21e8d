//! The hub's facade for projects, versions, builds and webhooks (the `HubHandle` methods the
//! API calls). Each checks, writes the store, and wakes the build queue (`builds`).
//!
//! Who may call what is the API's business: creating and changing projects is an admin's
//! action (a build command runs code on the hub's machine); a webhook needs no token, its
//! signature is the authentication.

use crate::builds;
use crate::error::HubError;
use crate::hub::HubHandle;
use crate::project::{
    ProjectDoc, VersionDoc, check_project, password_purpose, project_doc, project_view,
    resolve_ref, version_row, version_state, version_view, webhook_purpose,
};
use base64::Engine as _;
use rand::RngCore;
use silk_api::projects::{
    Artifact, BuildQueued, BuildRequest, NewProject, ProjectRequest, ProjectView, VersionState,
    VersionView, WebhookIgnored,
};
use silk_projects::webhook::{self, Event};
use silk_store::{ProjectRow, VersionRow};

/// What a webhook delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookAnswer {
    /// A build was queued (`202`).
    Queued(BuildQueued),
    /// Nothing was queued, and why (`200`).
    Ignored(WebhookIgnored),
}

/// Deliveries are remembered this long (a redelivery within it is recognised), ms.
const DELIVERY_RETENTION_MS: u64 = 30 * 24 * 3600 * 1000;

fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn new_build_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

fn ignored(reason: impl Into<String>) -> WebhookAnswer {
    WebhookAnswer::Ignored(WebhookIgnored {
        ignored: reason.into(),
    })
}

impl HubHandle {
    async fn project_row(&self, name: &str) -> Result<(ProjectRow, ProjectDoc), HubError> {
        let row = self
            .shared()
            .store
            .get_project(name)
            .await?
            .ok_or_else(|| HubError::NoSuchProject(name.to_owned()))?;
        let doc = project_doc(&row)?;
        Ok((row, doc))
    }

    /// The sealed document of `request` (secrets sealed; a missing webhook secret made).
    fn seal(
        &self,
        tenant: &str,
        request: &ProjectRequest,
        secret: &str,
    ) -> Result<ProjectDoc, HubError> {
        let pattern = check_project(request)?;
        let secrets = &self.shared().builds.secrets;
        Ok(ProjectDoc {
            tenant: tenant.to_owned(),
            git_url: request.git_url.clone(),
            username: request.username.clone(),
            password_sealed: request
                .password
                .as_ref()
                .map(|p| secrets.seal(&password_purpose(&request.name), p)),
            branch: request.branch.clone(),
            tag_pattern: pattern.as_str().to_owned(),
            build: request.build.clone(),
            webhook_secret_sealed: secrets.seal(&webhook_purpose(&request.name), secret),
        })
    }

    /// Creates a project of `tenant`; the answer is the only place its webhook secret
    /// appears. Project names are unique over all tenants.
    pub async fn create_project(
        &self,
        tenant: &str,
        request: ProjectRequest,
    ) -> Result<NewProject, HubError> {
        let secret = request.webhook_secret.clone().unwrap_or_else(new_secret);
        let doc = self.seal(tenant, &request, &secret)?;
        let now = self.shared().clock.now_ms();
        let row = ProjectRow {
            name: request.name.clone(),
            doc: serde_json::to_value(&doc).map_err(|e| HubError::Store(e.to_string()))?,
            created_ms: now,
            updated_ms: now,
        };
        self.shared()
            .store
            .create_project(&row)
            .await
            .map_err(|e| match e {
                silk_store::StoreError::Conflict { .. } => {
                    HubError::Conflict(format!("a project named `{}` exists", request.name))
                }
                other => other.into(),
            })?;
        tracing::info!(project = %row.name, git_url = %doc.git_url, build = ?doc.build.kind, "project created");
        Ok(NewProject {
            project: project_view(&row, &doc),
            webhook_secret: secret,
        })
    }

    /// Every project, by name.
    pub async fn projects(&self) -> Result<Vec<ProjectView>, HubError> {
        let mut out = Vec::new();
        for row in self.shared().store.list_projects().await? {
            match project_doc(&row) {
                Ok(doc) => out.push(project_view(&row, &doc)),
                Err(e) => tracing::warn!(project = %row.name, error = %e, "stored project skipped"),
            }
        }
        Ok(out)
    }

    /// One project.
    pub async fn project(&self, name: &str) -> Result<ProjectView, HubError> {
        let (row, doc) = self.project_row(name).await?;
        Ok(project_view(&row, &doc))
    }

    /// Changes a project with a JSON merge patch of its request form: `git_url`,
    /// `username`, `password` (`null` removes it), `branch`, `tag_pattern`, `build`,
    /// `webhook_secret` (a new one). The name cannot change.
    pub async fn patch_project(
        &self,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<ProjectView, HubError> {
        let (row, doc) = self.project_row(name).await?;
        let serde_json::Value::Object(fields) = patch else {
            return Err(HubError::BadProject(
                "the body must be a JSON object (a merge patch)".into(),
            ));
        };
        if fields.get("name").is_some_and(|n| n.as_str() != Some(name)) {
            return Err(HubError::BadProject(
                "name: a project cannot be renamed".into(),
            ));
        }
        let mut form = serde_json::to_value(doc.request_without_secrets(name))
            .map_err(|e| HubError::Store(e.to_string()))?;
        if let serde_json::Value::Object(form) = &mut form {
            for (k, v) in fields {
                if v.is_null() {
                    form.remove(k);
                } else {
                    form.insert(k.clone(), v.clone());
                }
            }
        }
        let mut request: ProjectRequest =
            serde_json::from_value(form).map_err(|e| HubError::BadProject(e.to_string()))?;
        let secrets = &self.shared().builds.secrets;
        // Secrets the patch does not name stay as they are.
        let keep_password = !fields.contains_key("password");
        let secret = match &request.webhook_secret {
            Some(secret) => secret.clone(),
            None => secrets
                .open(&webhook_purpose(name), &doc.webhook_secret_sealed)
                .map_err(|e| HubError::Secrets(e.to_string()))?,
        };
        if keep_password && doc.password_sealed.is_some() {
            // Checked with a placeholder: the sealed value is carried over below.
            request.password = Some(String::new());
        }
        let mut new_doc = self.seal(&doc.tenant, &request, &secret)?;
        if keep_password {
            new_doc.password_sealed = doc.password_sealed.clone();
        }
        let updated = ProjectRow {
            name: row.name.clone(),
            doc: serde_json::to_value(&new_doc).map_err(|e| HubError::Store(e.to_string()))?,
            created_ms: row.created_ms,
            updated_ms: self.shared().clock.now_ms(),
        };
        self.shared().store.update_project(&updated).await?;
        tracing::info!(project = %name, fields = ?fields.keys().collect::<Vec<_>>(), "project changed");
        Ok(project_view(&updated, &new_doc))
    }

    /// Deletes a project with its versions, build logs, artifacts and images.
    pub async fn delete_project(&self, name: &str) -> Result<(), HubError> {
        let store = &self.shared().store;
        let versions = store.list_versions(name).await?;
        if !store.delete_project(name).await? {
            return Err(HubError::NoSuchProject(name.to_owned()));
        }
        for row in &versions {
            if let Ok(Some(artifact)) = crate::project::version_doc(row).map(|d| d.artifact) {
                builds::drop_artifact(self.shared(), &artifact).await;
            }
        }
        self.shared().builds.changed.send_modify(|n| *n += 1);
        tracing::info!(project = %name, versions = versions.len(), "project deleted");
        Ok(())
    }

    /// Handles a webhook delivery for `project`: checks its signature against the project's
    /// secret, then queues a build when it announces a tag matching the pattern.
    pub async fn webhook(
        &self,
        project: &str,
        header: &(dyn Fn(&str) -> Option<String> + Sync),
        body: &[u8],
    ) -> Result<WebhookAnswer, HubError> {
        let (_, doc) = self.project_row(project).await?;
        let secret = self
            .shared()
            .builds
            .secrets
            .open(&webhook_purpose(project), &doc.webhook_secret_sealed)
            .map_err(|e| HubError::Secrets(e.to_string()))?;
        let delivery = webhook::verify(header, body, &secret).map_err(|e| match e {
            silk_projects::ProjectError::Signature(m) => {
                HubError::WebhookRefused(format!("webhook for project `{project}` refused: {m}"))
            }
            other => HubError::BadProject(other.to_string()),
        })?;
        let store = &self.shared().store;
        let now = self.shared().clock.now_ms();
        if let Some(id) = &delivery.id {
            if !store.record_delivery(project, id, now).await? {
                return Ok(ignored(format!("delivery {id} was received before")));
            }
            let _ = store
                .delete_deliveries_before(now.saturating_sub(DELIVERY_RETENTION_MS))
                .await;
        }
        let pattern = doc.pattern(project)?;
        let (tag, commit) = match delivery.event {
            Event::Tag { name, commit } => (name, commit),
            Event::TagDeleted { name } => {
                return Ok(ignored(format!("tag {name} was deleted")));
            }
            Event::Branch { name } => {
                return Ok(ignored(format!(
                    "a push to branch {name}: builds follow tags matching `{}`",
                    pattern.as_str()
                )));
            }
            Event::Other(event) => return Ok(ignored(format!("event `{event}`"))),
        };
        let Some(version) = pattern.version_of(&tag) else {
            return Ok(ignored(format!(
                "tag {tag} does not match the tag pattern `{}`",
                pattern.as_str()
            )));
        };
        let trigger = format!("webhook:{}", delivery.provider.as_str());
        match self
            .queue_version(
                project,
                version,
                &format!("refs/tags/{tag}"),
                commit,
                &trigger,
            )
            .await?
        {
            Ok(view) => {
                tracing::info!(project, version, tag = %tag, provider = delivery.provider.as_str(), "webhook queued a build");
                Ok(WebhookAnswer::Queued(BuildQueued {
                    build: view.build,
                    version: view.version,
                }))
            }
            Err(existing) => Ok(ignored(format!(
                "version {version} exists already ({}, build {})",
                existing.state.as_str(),
                existing.build
            ))),
        }
    }

    /// Queues a build of `version` from `revision`; `Err(existing)` when the version exists.
    async fn queue_version(
        &self,
        project: &str,
        version: &str,
        revision: &str,
        expect_commit: Option<String>,
        trigger: &str,
    ) -> Result<Result<VersionView, VersionView>, HubError> {
        let doc = VersionDoc {
            revision: revision.to_owned(),
            expect_commit,
            commit: None,
            artifact: None,
            started_ms: None,
            finished_ms: None,
            reason: None,
            hub: None,
            trigger: trigger.to_owned(),
            attempts: 0,
        };
        let now = self.shared().clock.now_ms();
        let row = version_row(
            project,
            version,
            &new_build_id(),
            VersionState::Queued,
            now,
            &doc,
        );
        let store = &self.shared().store;
        if store.insert_version(&row).await? {
            self.shared().builds.wake();
            return Ok(Ok(version_view(&row)?));
        }
        let existing = store
            .get_version(project, version)
            .await?
            .ok_or_else(|| HubError::Conflict(format!("version {version} is being replaced")))?;
        Ok(Err(version_view(&existing)?))
    }

    /// Queues a build by hand (`POST /api/v1/projects/{name}/builds`). A failed version may
    /// be built again; another existing version is a conflict.
    pub async fn build_project(
        &self,
        project: &str,
        request: &BuildRequest,
    ) -> Result<VersionView, HubError> {
        let (_, doc) = self.project_row(project).await?;
        let pattern = doc.pattern(project)?;
        let (revision, version) =
            resolve_ref(&pattern, &request.git_ref, request.version.as_deref())?;
        match self
            .queue_version(project, &version, &revision, None, "api")
            .await?
        {
            Ok(view) => Ok(view),
            Err(existing) if existing.state == VersionState::Failed => {
                // Built again: a new build id (a new log), queued.
                let store = &self.shared().store;
                let old = store
                    .get_version(project, &version)
                    .await?
                    .ok_or_else(|| HubError::Conflict(format!("version {version} changed")))?;
                let mut vdoc = crate::project::version_doc(&old)?;
                vdoc.revision = revision;
                vdoc.expect_commit = None;
                vdoc.commit = None;
                vdoc.started_ms = None;
                vdoc.finished_ms = None;
                vdoc.reason = Some(format!(
                    "built again by hand (build {} had failed)",
                    old.build_id
                ));
                vdoc.hub = None;
                vdoc.trigger = "api".into();
                vdoc.attempts = 0;
                let now = self.shared().clock.now_ms();
                let row = version_row(
                    project,
                    &version,
                    &new_build_id(),
                    VersionState::Queued,
                    now,
                    &vdoc,
                );
                if old.state != VersionState::Failed.as_str() {
                    return Err(HubError::Conflict(format!(
                        "version {version} of {project} is {} now",
                        old.state
                    )));
                }
                store.put_version(&row).await?;
                self.shared().builds.wake();
                version_view(&row)
            }
            Err(existing) => Err(HubError::Conflict(format!(
                "version {version} of {project} exists ({}, build {}); delete it first to \
                 build it again",
                existing.state.as_str(),
                existing.build
            ))),
        }
    }

    /// The versions of a project, newest first.
    pub async fn versions(&self, project: &str) -> Result<Vec<VersionView>, HubError> {
        self.project_row(project).await?;
        let rows = self.shared().store.list_versions(project).await?;
        rows.iter().map(version_view).collect()
    }

    async fn version_row(&self, project: &str, version: &str) -> Result<VersionRow, HubError> {
        self.shared()
            .store
            .get_version(project, version)
            .await?
            .ok_or_else(|| HubError::NoSuchVersion {
                project: project.to_owned(),
                version: version.to_owned(),
            })
    }

    /// One version.
    pub async fn version(&self, project: &str, version: &str) -> Result<VersionView, HubError> {
        version_view(&self.version_row(project, version).await?)
    }

    /// Deletes a version (not while it builds) with its log and artifact.
    pub async fn delete_version(&self, project: &str, version: &str) -> Result<(), HubError> {
        let row = self.version_row(project, version).await?;
        if version_state(&row)? == VersionState::Building {
            return Err(HubError::Conflict(format!(
                "version {version} of {project} is building; delete it once the build ends"
            )));
        }
        builds::delete_version(self.shared(), &row).await
    }

    /// The build id of a version and whether its build is over (for the log).
    pub async fn version_build(
        &self,
        project: &str,
        version: &str,
    ) -> Result<(String, VersionState), HubError> {
        let row = self.version_row(project, version).await?;
        Ok((row.build_id.clone(), version_state(&row)?))
    }

    /// A receiver that changes whenever a version changes on this hub (queued, started,
    /// ended) or a log batch is stored: log followers wait on both.
    pub fn version_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared().builds.changed.subscribe()
    }

    /// The packed directory of a ready version: `(sha256, bytes, chunks)`.
    pub async fn artifact(
        &self,
        project: &str,
        version: &str,
    ) -> Result<(String, u64, u64), HubError> {
        let row = self.version_row(project, version).await?;
        let view = version_view(&row)?;
        let Some(Artifact::Dir { sha256, bytes }) = view.artifact else {
            return Err(HubError::NoArtifact(format!(
                "version {version} of {project} has no packed directory ({}): only a ready \
                 `command` build has one",
                match view.artifact {
                    Some(Artifact::Image { image, .. }) => format!("it is the image {image}"),
                    _ => format!("it is {}", view.state.as_str()),
                }
            )));
        };
        let chunks = self.shared().store.count_artifact_chunks(&sha256).await?;
        Ok((sha256, bytes, chunks))
    }

    /// Chunk `seq` of artifact `sha256`.
    pub async fn artifact_chunk(&self, sha256: &str, seq: u32) -> Result<Vec<u8>, HubError> {
        self.shared()
            .store
            .get_artifact_chunk(sha256, seq)
            .await?
            .ok_or_else(|| HubError::Store(format!("artifact {sha256}: chunk {seq} is missing")))
    }
}
