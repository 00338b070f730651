//! The simulator's one error type.

/// Simulator errors.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Bad command line or configuration.
    #[error("usage error: {0}")]
    Usage(String),
    /// File could not be read.
    #[error("i/o error: {0}")]
    Io(String),
    /// Malformed trace content.
    #[error("trace error: {0}")]
    Trace(String),
}
