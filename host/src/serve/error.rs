//! The errors of the server's domain: [`ServeError`] when it starts, [`RequestError`] when a
//! request fails. The HTTP layer maps each `RequestError` kind to one status. Depends on
//! `checkpoint`, `fsutil`, `names`, `operator` and `source`.

use std::path::PathBuf;

use crate::names::NameError;
use crate::operator::RegistryError;

/// Server failures at start-up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The registry could not be opened.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The engine could not be set up.
    #[error(transparent)]
    Load(#[from] crate::operator::LoadError),
    /// A file of the data directory could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The tokens are unusable.
    #[error("tokens: {0}")]
    Tokens(String),
    /// The tokens file could not be read.
    #[error("tokens: {}: {source}", path.display())]
    TokensRead {
        /// The tokens file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The tokens file is not a JSON list of tokens.
    #[error("tokens: {}: {source}", path.display())]
    TokensJson {
        /// The tokens file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The tenants' quotas are unusable.
    #[error("tenants: {0}")]
    Tenants(String),
    /// A token's name is not a name.
    #[error("tokens: {0}")]
    TokenName(#[from] NameError),
    /// Another server uses the data directory.
    #[error(
        "data directory {0} is in use by another weir serve (it holds weir.lock); stop that \
         server first, or give this one another --data"
    )]
    Locked(PathBuf),
}

/// Why a request was refused or failed. The message says what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The caller sent something invalid.
    #[error("{0}")]
    Invalid(String),
    /// The thing named does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the current state (exists, in use, not running, busy).
    #[error("{0}")]
    Conflict(String),
    /// Too many requests of this kind at once; retry shortly.
    #[error("{0}")]
    Busy(String),
    /// The disk is full; nothing of the request was kept.
    #[error("{0}")]
    DiskFull(String),
    /// The request is larger than allowed.
    #[error("{0}")]
    TooLarge(String),
    /// The server failed (details for the log only).
    #[error("{0}")]
    Internal(String),
    /// A service the request needs (the cluster's NATS server) did not answer; retry later.
    #[error("{0}")]
    Unavailable(String),
}

impl RequestError {
    /// An I/O failure: a full disk is the caller's to know about; anything else is internal.
    pub fn from_io(error: std::io::Error) -> Self {
        if crate::fsutil::is_disk_full(&error) {
            RequestError::DiskFull(format!("the server's disk is full: {error}"))
        } else {
            RequestError::Internal(error.to_string())
        }
    }
}

impl From<NameError> for RequestError {
    fn from(error: NameError) -> Self {
        RequestError::Invalid(error.to_string())
    }
}

impl From<crate::spec::SpecError> for RequestError {
    /// A spec sent to the API that is not acceptable: the caller's to fix.
    fn from(error: crate::spec::SpecError) -> Self {
        RequestError::Invalid(error.to_string())
    }
}

impl From<super::rollout::PlanError> for RequestError {
    /// A rollout request that is not acceptable: the caller's to fix.
    fn from(error: super::rollout::PlanError) -> Self {
        RequestError::Invalid(error.to_string())
    }
}

impl From<RegistryError> for RequestError {
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::Exists { .. }
            | RegistryError::Quota { .. }
            | RegistryError::GroupQuota { .. }
            | RegistryError::Deleted { .. } => RequestError::Conflict(error.to_string()),
            RegistryError::Unknown { .. } => RequestError::NotFound(error.to_string()),
            RegistryError::TooLarge { .. } => RequestError::TooLarge(error.to_string()),
            RegistryError::Io { source, .. } => RequestError::from_io(source),
            _ => RequestError::Invalid(error.to_string()),
        }
    }
}

impl From<crate::cluster::ClusterError> for RequestError {
    fn from(error: crate::cluster::ClusterError) -> Self {
        use crate::cluster::ClusterError as E;
        match error {
            E::StillHeld { .. } => RequestError::Unavailable(error.to_string()),
            E::NoCheckpointInTime { .. } => RequestError::Busy(error.to_string()),
            E::NotSaved(_) => RequestError::Conflict(error.to_string()),
            E::Nats { .. } => RequestError::Unavailable(format!(
                "the cluster cannot be reached: {error}; the request was not carried out, retry \
                 it once the NATS server answers"
            )),
            E::Unshareable(_) | E::BadName(_) | E::Name(_) | E::Spec(_) => {
                RequestError::Invalid(error.to_string())
            }
            E::Unknown(_) => RequestError::NotFound(error.to_string()),
            E::Io { source, .. } => RequestError::from_io(source),
            _ => RequestError::Internal(error.to_string()),
        }
    }
}

impl From<crate::state::StateError> for RequestError {
    /// A store the server keeps could not be read: the server's failure (the details go to its
    /// log).
    fn from(error: crate::state::StateError) -> Self {
        RequestError::Internal(error.to_string())
    }
}

impl From<crate::operator::LoadError> for RequestError {
    /// Code that cannot be instantiated is the caller's upload.
    fn from(error: crate::operator::LoadError) -> Self {
        RequestError::Invalid(error.to_string())
    }
}

impl From<crate::source::SourceError> for RequestError {
    /// The pipeline's stream or topic could not be read (its server away, say): nothing was
    /// done, and the call may be made again.
    fn from(error: crate::source::SourceError) -> Self {
        RequestError::Unavailable(format!(
            "the pipeline's input cannot be read now ({error}); try again once it can"
        ))
    }
}

impl From<crate::source::IngestError> for RequestError {
    fn from(error: crate::source::IngestError) -> Self {
        match error {
            crate::source::IngestError::DiskFull => RequestError::DiskFull(error.to_string()),
            other => RequestError::Internal(other.to_string()),
        }
    }
}

impl From<crate::checkpoint::SavepointError> for RequestError {
    fn from(error: crate::checkpoint::SavepointError) -> Self {
        use crate::checkpoint::SavepointError as E;
        if error.is_disk_full() {
            return RequestError::DiskFull(format!(
                "the server's disk is full: the savepoint was not taken; free some space and \
                 take it again ({error})"
            ));
        }
        match error {
            E::BadName(_) => RequestError::Invalid(error.to_string()),
            E::Unknown { .. } => RequestError::NotFound(error.to_string()),
            E::Exists(_)
            | E::Full
            | E::NoCheckpoint(_)
            | E::Damaged { .. }
            | E::Sliced(_)
            | E::NotTaken { .. } => RequestError::Conflict(error.to_string()),
            E::Io { source, .. } => RequestError::from_io(source),
            _ => RequestError::Internal(error.to_string()),
        }
    }
}
