//! Why a simulation could not run.

use farmem_workloads::{TraceError, WorkloadError};

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("config {source_name}: {message}")]
    Config {
        source_name: String,
        message: String,
    },
    #[error("unknown scheme `{name}` (known: {known})")]
    UnknownScheme { name: String, known: String },
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

impl From<ConfigError> for SimError {
    fn from(e: ConfigError) -> Self {
        SimError::Config {
            source_name: e.source_name,
            message: e.message,
        }
    }
}
