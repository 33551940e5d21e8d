//! [`HubError`]: everything that can go wrong in the hub.

use crate::allocation::AllocationError;
use silk_api::ErrorCode;
use silk_core::RunId;
use std::path::PathBuf;
use thiserror::Error;

/// An error of the hub. Every message names the input or the agents involved, so it can be
/// shown to a user as is (a run that cannot be allocated fails to start with it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HubError {
    /// A strategy or policy that does not parse, or too few live agents (see
    /// [`AllocationError`]).
    #[error(transparent)]
    Allocation(#[from] AllocationError),
    /// A label filter string that does not parse.
    #[error("invalid label filter `{input}`: {reason} (expected `key=value[,key=value…]`)")]
    BadLabelFilter {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value out of range.
    #[error("invalid hub configuration: {0}")]
    BadConfig(String),
    /// A run submission that cannot be accepted (bad spider, bad settings).
    #[error("invalid run: {0}")]
    BadRun(String),
    /// No run with that id.
    #[error("no run `{0}`")]
    NoSuchRun(RunId),
    /// The action does not apply to the run in its state.
    #[error("run `{run}` is {state}: {action} does not apply")]
    WrongState {
        /// The run.
        run: RunId,
        /// Its state.
        state: String,
        /// What was asked.
        action: String,
    },
    /// The run could not be allocated: it failed to start.
    #[error("run `{run}` could not be allocated: {reason}")]
    AllocationFailed {
        /// The run (stored as failed with the reason).
        run: RunId,
        /// Why.
        reason: String,
    },
    /// A file of the hub's data dir could not be read or written.
    #[error("hub storage `{}`: {reason}", path.display())]
    Storage {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A run's frontier or item sink failed.
    #[error("run `{run}`: {reason}")]
    RunStorage {
        /// The run.
        run: RunId,
        /// What went wrong.
        reason: String,
    },
    /// The bus refused a publish or subscribe (after its retries).
    #[error("bus: {0}")]
    Bus(String),
    /// The hub is shutting down.
    #[error("the hub is shutting down")]
    ShuttingDown,
    /// The metadata store failed.
    #[error("store: {0}")]
    Store(String),
    /// A job definition that cannot be accepted (the message names the field).
    #[error("invalid job: {0}")]
    BadJob(String),
    /// No job with that id or name.
    #[error("no job `{0}`")]
    NoSuchJob(String),
    /// Something with that name exists already.
    #[error("{0}")]
    Conflict(String),
    /// No such API token.
    #[error("no token `{0}`")]
    NoSuchToken(String),
    /// No such tenant.
    #[error("no tenant `{0}`")]
    NoSuchTenant(String),
    /// Not allowed to this tenant or token (the message names the field).
    #[error("{0}")]
    Forbidden(String),
    /// A tenant name or description that cannot be used.
    #[error("bad tenant: {0}")]
    BadTenant(String),
    /// The run is driven by another hub of the cluster (hubs sharing one store): send the
    /// action to that hub.
    #[error("run `{run}` is driven by hub `{hub}`: send this to that hub")]
    OwnedElsewhere {
        /// The run.
        run: RunId,
        /// The hub that holds the run's lease.
        hub: String,
    },
    /// A project, a build request or a webhook body that cannot be accepted (the message
    /// names the field).
    #[error("invalid project: {0}")]
    BadProject(String),
    /// No project with that name.
    #[error("no project `{0}`")]
    NoSuchProject(String),
    /// No such version of the project.
    #[error("project `{project}` has no version `{version}`")]
    NoSuchVersion {
        /// The project.
        project: String,
        /// The version asked for.
        version: String,
    },
    /// A version without a packed directory to download (a container image, or not ready).
    #[error("{0}")]
    NoArtifact(String),
    /// A webhook delivery that is not signed with the project's secret.
    #[error("{0}")]
    WebhookRefused(String),
    /// A secret that does not open with this hub's key (the message names whose, never the
    /// value).
    #[error("secrets: {0}")]
    Secrets(String),
    /// No agent of the run answered a program's fetch (the message names them and the wait).
    #[error("{0}")]
    FetchUnanswered(String),
    /// An alert rule that cannot be accepted (the message names the field).
    #[error("invalid alert rule: {0}")]
    BadAlertRule(String),
    /// No alert rule with that name.
    #[error("no alert rule `{0}`")]
    NoSuchAlertRule(String),
    /// No agent with that id is known to this hub.
    #[error("no agent `{0}`")]
    NoSuchAgent(String),
    /// The hub runs no router (what needs one says so).
    #[error("{0}")]
    NoRouter(String),
}

impl HubError {
    /// A short machine-readable code for API errors.
    pub fn code(&self) -> ErrorCode {
        match self {
            HubError::Allocation(AllocationError::NotEnoughAgents { .. }) => {
                ErrorCode::AllocationFailed
            }
            HubError::BadLabelFilter { .. }
            | HubError::BadRun(_)
            | HubError::BadJob(_)
            | HubError::BadProject(_)
            | HubError::BadAlertRule(_) => ErrorCode::BadRequest,
            HubError::NoSuchProject(_)
            | HubError::NoSuchAlertRule(_)
            | HubError::NoSuchAgent(_)
            | HubError::NoSuchVersion { .. }
            | HubError::NoArtifact(_) => ErrorCode::NotFound,
            HubError::WebhookRefused(_) => ErrorCode::Unauthorized,
            HubError::Secrets(_) => ErrorCode::Storage,
            HubError::BadConfig(_) => ErrorCode::BadConfig,
            HubError::AllocationFailed { .. } => ErrorCode::AllocationFailed,
            HubError::NoSuchRun(_)
            | HubError::NoSuchJob(_)
            | HubError::NoSuchToken(_)
            | HubError::NoSuchTenant(_) => ErrorCode::NotFound,
            HubError::BadTenant(_) => ErrorCode::BadRequest,
            HubError::Forbidden(_) => ErrorCode::Forbidden,
            HubError::Conflict(_) => ErrorCode::Conflict,
            HubError::WrongState { .. } => ErrorCode::WrongState,
            HubError::OwnedElsewhere { .. } => ErrorCode::OwnedElsewhere,
            HubError::Storage { .. } | HubError::RunStorage { .. } | HubError::Store(_) => {
                ErrorCode::Storage
            }
            HubError::Bus(_) => ErrorCode::Bus,
            HubError::FetchUnanswered(_) | HubError::NoRouter(_) => ErrorCode::Unavailable,
            HubError::ShuttingDown => ErrorCode::ShuttingDown,
        }
    }
}

impl From<silk_store::StoreError> for HubError {
    fn from(e: silk_store::StoreError) -> Self {
        match e {
            silk_store::StoreError::Conflict { .. } => HubError::Conflict(e.to_string()),
            other => HubError::Store(other.to_string()),
        }
    }
}
