//! [`ConfigError`] and the translation of figment's errors into it: every message names the
//! key, the value as written, what is allowed and where the value was set, and an unknown key
//! comes with the closest known one ("did you mean").

use std::path::PathBuf;

use figment::{Figment, Metadata};

use crate::values::DURATION_EXPECTED;

/// Why the configuration could not be loaded. Each variant names the key (and, when known,
/// the file or environment variable that set it) so the operator knows where to look.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The user configuration file could not be read.
    #[error("cannot read configuration file `{}`: {source}; check the path given with --config", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file or string is not valid TOML.
    #[error("{origin} is not valid TOML: {message}")]
    Syntax {
        /// Where the text came from.
        origin: String,
        /// The parser's description of the problem.
        message: String,
    },
    /// A key that shardik does not know (often a typo).
    #[error(
        "unknown key `{key}`{}{}; every key with its default is listed in shardik's reference.toml",
        set_in(origin),
        did_you_mean(suggestion)
    )]
    UnknownKey {
        /// The full dotted key path.
        key: String,
        /// The known key at the same level closest in spelling, if any is close.
        suggestion: Option<String>,
        /// Where the key was set (file, environment variable), if known.
        origin: Option<String>,
    },
    /// A key has a value of the wrong kind or outside its allowed range.
    #[error("`{key}` = `{value}`: expected {expected}{}", set_in(origin))]
    InvalidValue {
        /// The full dotted key path.
        key: String,
        /// The offending value as written.
        value: String,
        /// What is allowed.
        expected: String,
        /// Where the value was set (file, environment variable), if known.
        origin: Option<String>,
    },
    /// A required key is missing (only possible if the built-in reference was altered).
    #[error(
        "missing key `{key}`{}: set it in the configuration file",
        set_in(origin)
    )]
    MissingKey {
        /// The full dotted key path.
        key: String,
        /// The provider that was being read, if known.
        origin: Option<String>,
    },
    /// A value the type allows but the setting does not (the passivation settings explain
    /// their refusals in a sentence rather than as an expectation).
    #[error("`{key}` = `{value}`: {reason}{}", set_in(origin))]
    Refused {
        /// The full dotted key path.
        key: String,
        /// The value as written.
        value: String,
        /// Why it is refused and what would be accepted.
        reason: String,
        /// Where the key was set, if known.
        origin: Option<String>,
    },
    /// Any other problem reported while merging the layers.
    #[error("invalid configuration: {0}")]
    Other(String),
}

/// How the built-in reference names itself in error messages.
pub(super) const REFERENCE_ORIGIN: &str = "shardik's built-in reference.toml";

pub(super) fn set_in(origin: &Option<String>) -> String {
    match origin.as_deref() {
        None => String::new(),
        // A default that is invalid in context (quorum-size with static-quorum): the fix is
        // to set the key, not to edit the reference.
        Some(REFERENCE_ORIGIN) => " (the built-in default; set the key)".to_string(),
        Some(o) => format!(" (set in {o})"),
    }
}

/// serde's type names, as an operator would say them.
fn friendly_expected(expected: String) -> String {
    match expected.as_str() {
        "u8" | "u16" | "u32" | "u64" | "usize" => {
            let max = match expected.as_str() {
                "u8" => u64::from(u8::MAX),
                "u16" => u64::from(u16::MAX),
                "u32" => u64::from(u32::MAX),
                _ => usize::MAX as u64,
            };
            format!("a whole number from 0 to {max}")
        }
        "i64" | "i32" => "a whole number".to_string(),
        "f64" | "f32" => "a number".to_string(),
        "a boolean" | "bool" => "true or false".to_string(),
        // humantime-serde's wording, with the examples an operator needs.
        "a duration" => DURATION_EXPECTED.to_string(),
        e if e.starts_with("struct ") || e.starts_with("a map") => "a table of keys".to_string(),
        _ => expected,
    }
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

pub(super) fn describe_origin(metadata: &Metadata) -> String {
    match metadata.source.as_ref() {
        Some(figment::Source::File(path)) => format!("file `{}`", path.display()),
        _ => metadata.name.to_string(),
    }
}

pub(super) fn convert_error(figment: &Figment, error: figment::Error) -> ConfigError {
    // figment chains several errors; the first one is enough to act on, and the operator
    // sees the next after fixing it.
    let error = error
        .into_iter()
        .next()
        .expect("an error holds at least one error");
    let origin = error.metadata.as_ref().map(describe_origin);
    let path = error.path.join(".");
    // For field errors figment's path may or may not already end with the field itself;
    // the parent is what is left without it.
    let parent_of = |field: &str| {
        let mut parent = error.path.clone();
        if parent.last().map(String::as_str) == Some(field) {
            parent.pop();
        }
        parent
    };
    let key_at = |parent: &[String], leaf: &str| {
        parent
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(leaf))
            .collect::<Vec<_>>()
            .join(".")
    };
    match error.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            let parent = parent_of(&field);
            let suggestion = closest(&field, expected).map(|s| key_at(&parent, s));
            ConfigError::UnknownKey {
                key: key_at(&parent, &field),
                suggestion,
                origin,
            }
        }
        figment::error::Kind::MissingField(field) => ConfigError::MissingKey {
            key: key_at(&parent_of(&field), &field),
            origin,
        },
        figment::error::Kind::InvalidType(actual, expected)
        | figment::error::Kind::InvalidValue(actual, expected) => ConfigError::InvalidValue {
            // Our own deserializers report a value they refuse at the key itself.
            origin: origin.or_else(|| figment.find_metadata(&path).map(describe_origin)),
            key: path,
            value: raw_actual(&actual),
            expected: friendly_expected(expected),
        },
        figment::error::Kind::UnknownVariant(actual, expected) => ConfigError::InvalidValue {
            key: path,
            value: actual,
            expected: format!(
                "one of {}",
                expected
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            origin,
        },
        figment::error::Kind::Message(message) if path.is_empty() => ConfigError::Syntax {
            origin: origin.unwrap_or_else(|| "the configuration".to_string()),
            message,
        },
        kind => ConfigError::Other(format!("`{path}`: {kind}{}", set_in(&origin))),
    }
}

/// The value as the user wrote it, without figment's type prefix.
fn raw_actual(actual: &figment::error::Actual) -> String {
    use figment::error::Actual;
    match actual {
        Actual::Bool(v) => v.to_string(),
        Actual::Unsigned(v) => v.to_string(),
        Actual::Signed(v) => v.to_string(),
        Actual::Float(v) => v.to_string(),
        Actual::Char(v) => v.to_string(),
        Actual::Str(v) => v.clone(),
        Actual::Seq => "[...]".to_string(),
        Actual::Map => "{...}".to_string(),
        other => other.to_string(),
    }
}

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo: at
/// most a third of the candidate's length (and at least two edits) away.
pub(super) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(word, c), *c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn closest_suggests_only_near_misses() {
        let keys = ["gossip-interval", "gossip-time-to-live", "roles"];
        assert_eq!(closest("gosip-interval", &keys), Some("gossip-interval"));
        assert_eq!(closest("role", &keys), Some("roles"));
        assert_eq!(closest("completely-different", &keys), None);
    }
}
