//! Range and consistency checks that the types alone cannot express. Each section checks its
//! own keys (`validate` beside its settings); this module runs them in order and holds the
//! helpers they share.

use std::fmt;
use std::time::Duration;

use super::{ConfigError, Settings};

impl Settings {
    /// Range and consistency checks that the types alone cannot express. The first problem
    /// found is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.cluster.validate()?;
        self.transport.validate()?;
        self.management.validate(&self.transport.tls)?;
        self.discovery.validate()?;
        self.validate_bootstrap()?;
        self.persistence.validate()?;
        self.coordination.lease.validate()?;
        self.runtime.validate()?;
        self.logging.validate()
    }
}

/// A refused value: the key, the value as it would be written, and what is allowed.
pub(super) fn invalid(key: &str, value: impl fmt::Display, expected: &str) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
        origin: None,
    }
}

pub(super) fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

pub(super) fn positive_duration(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(invalid(
            key,
            fmt_duration(d),
            "a duration greater than zero",
        ));
    }
    Ok(())
}

pub(super) fn positive_count(key: &str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        return Err(invalid(key, n, "a number greater than zero"));
    }
    Ok(())
}
