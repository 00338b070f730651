//! Log output: a tracing subscriber writing human-readable text or JSON lines to stderr.
//!
//! Logs go to stderr so that stdout stays free for a program's own output (the CLI prints
//! results there). `RUST_LOG`, when set, wins over the configured level, because it is the
//! habitual way to turn up logging for one run without editing configuration.

use tracing_subscriber::EnvFilter;

/// The format and the errors live with the configuration that reads them.
pub use shardik_config::{LogFormat, LoggingError};

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
