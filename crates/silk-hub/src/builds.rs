//! The build queue: versions in state `queued` in the store are built, one at a time per
//! project and at most `parallel` at once per hub, by whichever hub takes the project's
//! build lease (`build:{project}`, renewed by the ownership loop with the hub's other
//! leases). Several hubs sharing a store never build the same version twice: a version is
//! written only under its project's lease (`put_version_held`).
//!
//! A build: a fresh work directory (`DATA_DIR/builds/{build id}`), the checkout and build of
//! `silk_projects::build`, each output line into the version's log (run log lines under
//! `build:{id}`, so they are stored in batches, paged and followed like a run's), then the
//! artifact into the store in chunks (a packed directory) or the image recorded; the version
//! becomes `ready`, or `failed` with the reason. Nothing partial stays: the work directory is
//! removed either way, and an artifact is recorded only once every chunk is stored.
//!
//! Restarts: a version left `building` by a hub that stopped or died (its lease expired,
//! taken by another hub, or its own after a restart) is queued again, at most
//! [`MAX_ATTEMPTS`] times, then failed with the reason — decided under the project's lease on
//! the version read again, so a build that just ended is never queued again and a hub whose
//! expired lease was taken over cannot record its result. A hub that stops mid-build queues
//! the version again itself.

use crate::project::{
    ProjectDoc, VersionDoc, build_lease, password_purpose, project_doc, version_doc, version_row,
    version_state,
};
use crate::state::HubCore;
use silk_api::projects::{Artifact, VersionState};
use silk_projects::build::{self, BuildJob, LogFn, Output, Stream};
use silk_projects::git::Remote;
use silk_store::{ARTIFACT_CHUNK, Level, VersionRow, build_log_key};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// A version is built at most this many times when hubs keep stopping during its build.
pub const MAX_ATTEMPTS: u32 = 3;

/// Runs the queue until the hub stops.
pub(crate) async fn build_loop(shared: Arc<HubCore>) {
    let dir = shared.config.data_dir.join("builds");
    // Work directories of builds this hub was running when it last stopped.
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let mut stop = shared.stop.subscribe();
    let poll = Duration::from_millis(shared.builds.settings.poll_ms.max(10));
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = recover(&shared).await {
            tracing::warn!(error = %e, "build queue: recovery failed; retrying");
        }
        if let Err(e) = dispatch(&shared).await {
            tracing::warn!(error = %e, "build queue: dispatch failed; retrying");
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = shared.builds.wake.notified() => {}
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// Queues again (or fails) versions left `building` by a hub that no longer builds them.
async fn recover(shared: &Arc<HubCore>) -> Result<(), crate::error::HubError> {
    let store = &shared.store;
    let rows = store.list_versions_in_state("building").await?;
    if rows.is_empty() {
        return Ok(());
    }
    let now = store.store_now_ms().await?;
    let me = shared.hub_id.as_str();
    for row in rows {
        if shared.builds.local.lock().contains_key(&row.build_id) {
            continue;
        }
        let doc = version_doc(&row)?;
        let lease_name = build_lease(&row.project);
        let lease = store.get_lease(&lease_name).await?;
        let orphan = match &lease {
            None => true,
            Some(l) => l.expires_ms <= now || Some(&l.holder) != doc.hub.as_ref() || l.holder == me,
        };
        if !orphan {
            continue;
        }
        // Decide and write under the project's lease, on the version read again: the build may
        // have ended since the list was read (a ready version must not be queued again), and
        // a hub whose lease this takes over can no longer record its result.
        if !store
            .acquire_lease(&lease_name, me, shared.config.ownership_ttl_ms)
            .await?
        {
            continue;
        }
        let decided = requeue_held(shared, &row, &lease_name).await;
        if !shared.builds.building_here(&row.project) {
            let _ = store.release_lease(&lease_name, me).await;
        }
        let Some((row, doc, state, reason)) = decided? else {
            continue;
        };
        if state == VersionState::Failed {
            alert_failed(shared, &row, &doc).await;
        }
        log(shared, &row.build_id, Level::Warn, &reason);
        tracing::warn!(project = %row.project, version = %row.version, %reason, "build recovered");
        shared.builds.changed.send_modify(|n| *n += 1);
        if state == VersionState::Queued {
            shared.builds.wake.notify_one();
        }
    }
    Ok(())
}

/// Under the project's build lease `lease` (held by this hub): reads the version again and,
/// if it is still the orphaned build (`building`, same build id, not building here), queues
/// it again or fails it for good; the written row, its document, state and reason, or `None`
/// when there was nothing to do (or the lease was lost meanwhile).
async fn requeue_held(
    shared: &HubCore,
    listed: &VersionRow,
    lease: &str,
) -> Result<Option<(VersionRow, VersionDoc, VersionState, String)>, crate::error::HubError> {
    let store = &shared.store;
    let fresh = store.get_version(&listed.project, &listed.version).await?;
    let Some(row) = fresh.filter(|v| {
        v.build_id == listed.build_id
            && v.state == "building"
            && !shared.builds.local.lock().contains_key(&v.build_id)
    }) else {
        return Ok(None);
    };
    let mut doc = version_doc(&row)?;
    let hub = doc.hub.clone().unwrap_or_else(|| "?".into());
    let (state, reason) = if doc.attempts >= MAX_ATTEMPTS {
        (
            VersionState::Failed,
            format!(
                "the build was interrupted {} times (its hub stopped or died; last {hub})",
                doc.attempts
            ),
        )
    } else {
        (
            VersionState::Queued,
            format!("hub {hub} stopped during the build; queued again"),
        )
    };
    doc.reason = Some(reason.clone());
    if state == VersionState::Failed {
        doc.finished_ms = Some(shared.clock.now_ms());
    }
    let fixed = version_row(
        &row.project,
        &row.version,
        &row.build_id,
        state,
        row.created_ms,
        &doc,
    );
    if !store
        .put_version_held(&fixed, lease, shared.hub_id.as_str())
        .await?
    {
        return Ok(None);
    }
    Ok(Some((row, doc, state, reason)))
}

/// Tells the alerts that a version failed to build for good.
async fn alert_failed(shared: &HubCore, row: &VersionRow, doc: &VersionDoc) {
    let h = crate::alert::build_failed(
        &row.project,
        &row.version,
        &row.build_id,
        doc.reason.as_deref().unwrap_or("?"),
        doc.finished_ms.unwrap_or_else(|| shared.clock.now_ms()),
    );
    crate::alerts::emit(shared, h).await;
}

/// Starts builds of queued versions while this hub has room.
async fn dispatch(shared: &Arc<HubCore>) -> Result<(), crate::error::HubError> {
    let store = &shared.store;
    for row in store.list_versions_in_state("queued").await? {
        if shared.builds.local.lock().len() >= shared.builds.settings.parallel.max(1) {
            return Ok(());
        }
        if shared.builds.building_here(&row.project) {
            continue;
        }
        let lease = build_lease(&row.project);
        let me = shared.hub_id.as_str();
        if !store
            .acquire_lease(&lease, me, shared.config.ownership_ttl_ms)
            .await?
        {
            continue;
        }
        // Read again under the lease: another hub may have taken it in between.
        let fresh = store.get_version(&row.project, &row.version).await?;
        let Some(fresh) = fresh.filter(|v| v.build_id == row.build_id && v.state == "queued")
        else {
            store.release_lease(&lease, me).await?;
            continue;
        };
        let mut doc = version_doc(&fresh)?;
        doc.started_ms = Some(shared.clock.now_ms());
        doc.finished_ms = None;
        doc.hub = Some(me.to_owned());
        doc.attempts += 1;
        shared
            .builds
            .local
            .lock()
            .insert(fresh.build_id.clone(), fresh.project.clone());
        let building = version_row(
            &fresh.project,
            &fresh.version,
            &fresh.build_id,
            VersionState::Building,
            fresh.created_ms,
            &doc,
        );
        match store.put_version_held(&building, &lease, me).await {
            Ok(true) => {}
            other => {
                shared.builds.local.lock().remove(&fresh.build_id);
                let _ = store.release_lease(&lease, me).await;
                other?;
                continue;
            }
        }
        shared.builds.changed.send_modify(|n| *n += 1);
        let task = tokio::spawn(run_build(shared.clone(), building, doc));
        let mut tasks = shared.builds.tasks.lock();
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
    Ok(())
}

/// A line of a build's log.
fn log(shared: &HubCore, build_id: &str, level: Level, message: &str) {
    shared.logs.line(
        &build_log_key(build_id),
        shared.clock.now_ms(),
        level,
        "silk",
        message.to_owned(),
    );
}

/// How a build ended.
enum Ended {
    Built(build::Built),
    Failed(String),
    /// The hub is stopping: queue it again.
    Stopped,
}

async fn run_build(shared: Arc<HubCore>, row: VersionRow, mut doc: VersionDoc) {
    let started = std::time::Instant::now();
    let work_dir = shared.config.data_dir.join("builds").join(&row.build_id);
    let ended = match prepare(&shared, &row, &doc, &work_dir).await {
        Err(reason) => Ended::Failed(format!("project {}: {reason}", row.project)),
        Ok(job) => {
            let key = build_log_key(&row.build_id);
            let logs = shared.logs.clone();
            let clock = shared.clock.clone();
            let sink: LogFn = Arc::new(move |stream: Stream, line: String| {
                let level = if stream == Stream::Silk && line.starts_with("warning") {
                    Level::Warn
                } else {
                    Level::Info
                };
                logs.line(&key, clock.now_ms(), level, stream.as_str(), line);
            });
            let mut stop = shared.stop.subscribe();
            tokio::select! {
                r = build::build(job, &shared.builds.settings.engine, sink) => match r {
                    Ok(built) => Ended::Built(built),
                    Err(e) => Ended::Failed(format!("project {}: {e}", row.project)),
                },
                _ = stop.wait_for(|s| *s) => Ended::Stopped,
            }
        }
    };
    let (state, artifact) = match ended {
        Ended::Built(built) => {
            doc.commit = Some(built.commit.clone());
            match store_output(&shared, &row, built.output).await {
                Ok(artifact) => (VersionState::Ready, Some(artifact)),
                Err(reason) => {
                    doc.reason = Some(reason);
                    (VersionState::Failed, None)
                }
            }
        }
        Ended::Failed(reason) => {
            doc.reason = Some(reason);
            (VersionState::Failed, None)
        }
        Ended::Stopped => {
            doc.reason = Some(format!(
                "hub {} stopped during the build; queued again",
                shared.hub_id
            ));
            (VersionState::Queued, None)
        }
    };
    let _ = tokio::fs::remove_dir_all(&work_dir).await;
    doc.artifact = artifact;
    if state != VersionState::Queued {
        doc.finished_ms = Some(shared.clock.now_ms());
    }
    if state == VersionState::Ready {
        doc.reason = None;
    }
    let took = started.elapsed().as_millis();
    match state {
        VersionState::Ready => log(
            &shared,
            &row.build_id,
            Level::Info,
            &format!("version {} ready ({took} ms)", row.version),
        ),
        VersionState::Failed => log(
            &shared,
            &row.build_id,
            Level::Error,
            &format!("build failed: {}", doc.reason.as_deref().unwrap_or("?")),
        ),
        _ => log(
            &shared,
            &row.build_id,
            Level::Warn,
            doc.reason.as_deref().unwrap_or("queued again"),
        ),
    }
    let lease = build_lease(&row.project);
    let me = shared.hub_id.as_str();
    let done = version_row(
        &row.project,
        &row.version,
        &row.build_id,
        state,
        row.created_ms,
        &doc,
    );
    match shared.store.put_version_held(&done, &lease, me).await {
        Ok(true) => {
            tracing::info!(project = %row.project, version = %row.version, state = state.as_str(), took_ms = took as u64, "build ended");
            if state == VersionState::Failed {
                alert_failed(&shared, &row, &doc).await;
            }
        }
        Ok(false) => {
            tracing::warn!(project = %row.project, version = %row.version, "build lease lost: the result is not recorded");
            if let Some(artifact) = &doc.artifact {
                drop_artifact(&shared, artifact).await;
            }
        }
        Err(e) => {
            tracing::error!(project = %row.project, version = %row.version, error = %e, "build result not stored; the version will be built again");
        }
    }
    // Not building here before the lease goes: a recovery pass that takes the lease in
    // between must see that and let it go.
    shared.builds.local.lock().remove(&row.build_id);
    let _ = shared.store.release_lease(&lease, me).await;
    shared.builds.changed.send_modify(|n| *n += 1);
    if state == VersionState::Ready {
        retention(&shared, &row.project).await;
    }
    shared.builds.wake.notify_one();
}

/// The build job of a version: its project's repository and credentials, a fresh work dir.
async fn prepare(
    shared: &HubCore,
    row: &VersionRow,
    doc: &VersionDoc,
    work_dir: &std::path::Path,
) -> Result<BuildJob, String> {
    let project = shared
        .store
        .get_project(&row.project)
        .await
        .map_err(|e| format!("store: {e}"))?
        .ok_or_else(|| format!("project {} was deleted", row.project))?;
    let pdoc: ProjectDoc = project_doc(&project).map_err(|e| e.to_string())?;
    let password = match &pdoc.password_sealed {
        Some(sealed) => Some(
            shared
                .builds
                .secrets
                .open(&password_purpose(&row.project), sealed)
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let _ = tokio::fs::remove_dir_all(work_dir).await;
    tokio::fs::create_dir_all(work_dir)
        .await
        .map_err(|e| format!("{}: {e}", work_dir.display()))?;
    Ok(BuildJob {
        project: row.project.clone(),
        version: row.version.clone(),
        remote: Remote {
            url: pdoc.git_url.clone(),
            username: pdoc.username.clone(),
            password,
        },
        revision: doc.revision.clone(),
        expect_commit: doc.expect_commit.clone(),
        spec: pdoc.build,
        work_dir: work_dir.to_path_buf(),
    })
}

/// Stores what a build made: a packed directory's chunks into the store (the artifact is
/// named only once all are there), or the image.
async fn store_output(
    shared: &HubCore,
    row: &VersionRow,
    output: Output,
) -> Result<Artifact, String> {
    match output {
        Output::Image { image, id } => Ok(Artifact::Image { image, id }),
        Output::Dir {
            path,
            sha256,
            bytes,
        } => {
            let mut file = tokio::fs::File::open(&path)
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let mut seq = 0u32;
            let mut buf = vec![0u8; ARTIFACT_CHUNK];
            loop {
                let mut filled = 0;
                while filled < buf.len() {
                    let n = file
                        .read(&mut buf[filled..])
                        .await
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    if n == 0 {
                        break;
                    }
                    filled += n;
                }
                if filled == 0 && seq > 0 {
                    break;
                }
                shared
                    .store
                    .put_artifact_chunk(&sha256, seq, &buf[..filled])
                    .await
                    .map_err(|e| format!("the artifact could not be stored: {e}"))?;
                seq += 1;
                if filled < buf.len() {
                    break;
                }
            }
            log(
                shared,
                &row.build_id,
                Level::Info,
                &format!("artifact stored: {bytes} bytes in {seq} chunks, sha256 {sha256}"),
            );
            Ok(Artifact::Dir { sha256, bytes })
        }
    }
}

/// Removes an artifact nothing refers to any more (a packed directory no version has; an
/// image).
pub(crate) async fn drop_artifact(shared: &HubCore, artifact: &Artifact) {
    match artifact {
        Artifact::Dir { sha256, .. } => match shared.store.artifact_in_use(sha256).await {
            Ok(false) => {
                if let Err(e) = shared.store.delete_artifact(sha256).await {
                    tracing::warn!(%sha256, error = %e, "artifact not deleted");
                }
            }
            Ok(true) => {}
            Err(e) => tracing::warn!(%sha256, error = %e, "artifact not deleted"),
        },
        Artifact::Image { image, .. } => shared.builds.settings.engine.remove_image(image).await,
    }
}

/// Deletes a version (its row and log) and then its artifact if nothing else uses it.
pub(crate) async fn delete_version(
    shared: &HubCore,
    row: &VersionRow,
) -> Result<(), crate::error::HubError> {
    let doc = version_doc(row)?;
    shared
        .store
        .delete_version(&row.project, &row.version)
        .await?;
    if let Some(artifact) = &doc.artifact {
        drop_artifact(shared, artifact).await;
    }
    shared.builds.changed.send_modify(|n| *n += 1);
    Ok(())
}

/// Keeps the newest `keep_versions` finished versions of a project; older ones go with
/// their artifacts.
async fn retention(shared: &HubCore, project: &str) {
    let keep = shared.builds.settings.keep_versions.max(1);
    let rows = match shared.store.list_versions(project).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(project, error = %e, "version retention skipped");
            return;
        }
    };
    let finished = rows
        .iter()
        .filter(|r| version_state(r).is_ok_and(VersionState::is_final));
    for row in finished.skip(keep) {
        match delete_version(shared, row).await {
            Ok(()) => {
                tracing::info!(project, version = %row.version, "old version deleted (retention)")
            }
            Err(e) => {
                tracing::warn!(project, version = %row.version, error = %e, "old version not deleted")
            }
        }
    }
}
