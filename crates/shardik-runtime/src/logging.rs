//! Log output: a tracing subscriber writing human-readable text or JSON lines to stderr.
//!
//! Logs go to stderr so that stdout stays free for a program's own output (the CLI prints
//! results there). `RUST_LOG`, when set, wins over the configured level, because it is the
//! habitual way to turn up logging for one run without editing configuration.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

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

/// The filter: `RUST_LOG` if set (and non-empty), otherwise `level`.
fn filter(level: &str) -> Result<EnvFilter, LoggingError> {
    let (text, origin) = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => (v, "RUST_LOG"),
        _ => (level.to_string(), "logging.level"),
    };
    EnvFilter::try_new(&text).map_err(|e| LoggingError::BadFilter {
        filter: text,
        origin,
        reason: e.to_string(),
    })
}

/// Installs the process-wide log subscriber.
///
/// Idempotent: if a subscriber is already installed (by an earlier call, or by a test
/// harness), that one stays and this returns `Ok`, because a second node in the same process
/// must not fail over who prints its logs. An invalid filter is still reported.
pub fn init(format: LogFormat, level: &str) -> Result<(), LoggingError> {
    let filter = filter(level)?;
    // Colours only for a person at a terminal; files and pipes get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // `try_init` fails only when a global subscriber exists already; see above.
    let _already_installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    Ok(())
}
