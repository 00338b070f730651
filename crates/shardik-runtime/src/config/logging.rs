//! `logging.*`: log format and level.

use serde::Deserialize;

use super::ConfigError;
use super::validate::invalid;
use super::values::de_string;
use crate::logging::LogFormat;

/// `logging.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
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
