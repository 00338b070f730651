//! The helpers of the range and consistency checks that the types alone cannot express. Each
//! section checks its own keys (`validate` beside its settings) with them; `Settings::validate`
//! runs the sections' checks in order.

use std::fmt;
use std::time::Duration;

use crate::error::ConfigError;

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
