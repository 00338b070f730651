//! `logging.*`: log format and level.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::validate::invalid;
use crate::values::de_string;

/// `logging.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct LoggingSettings {
    /// `format`: "text" or "json".
    pub format: LogFormat,
    /// `level`: the filter used when `RUST_LOG` is not set.
    #[serde(deserialize_with = "de_string")]
    pub level: String,
}

impl LoggingSettings {
    /// The checks of `logging.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.level) {
            return Err(invalid(
                "logging.level",
                &self.level,
                &format!(
                    "a level (`error`, `warn`, `info`, `debug`, `trace`) or a tracing filter \
                     directive ({e})"
                ),
            ));
        }
        Ok(())
    }
}

/// The log line format (`logging.format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines (`text`, the default).
    #[default]
    Text,
    /// One JSON object per line (`json`), for log collectors.
    Json,
}

impl LogFormat {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogFormat {
    type Err = LoggingError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(LoggingError::UnknownFormat(s.to_string())),
        }
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoggingError {
    /// The format is neither `text` nor `json`.
    #[error("unknown log format `{0}`: use `text` or `json`")]
    UnknownFormat(String),
    /// The level (or `RUST_LOG`) is not a valid filter.
    #[error(
        "invalid log filter `{filter}` (from {origin}): {reason}; use a level such as `info` or \
         a directive such as `info,shardik_runtime=debug`"
    )]
    BadFilter {
        /// The filter text.
        filter: String,
        /// `RUST_LOG` or `logging.level`.
        origin: &'static str,
        /// The parser's complaint.
        reason: String,
    },
}
