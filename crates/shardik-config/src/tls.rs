//! `transport.tls.*`: mutual TLS between nodes (the runtime's `tls` module holds the identity rule).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::validate::{invalid, positive_duration};
use crate::values::{de_string, de_switch};

/// Whether `s` is a SPIFFE trust domain (the host part of a `spiffe://` URI): lower-case ASCII
/// letters, digits, `.`, `-` and `_`.
pub fn is_trust_domain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
        })
}

/// `transport.tls.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct TlsSettings {
    /// `enabled`: TLS on every connection between nodes.
    #[serde(deserialize_with = "de_switch")]
    pub enabled: bool,
    /// `cert-file`: this node's certificate (PEM). Empty means not set.
    #[serde(deserialize_with = "de_string")]
    pub cert_file: String,
    /// `key-file`: the private key of `cert-file` (PEM). Empty means not set.
    #[serde(deserialize_with = "de_string")]
    pub key_file: String,
    /// `ca-cert-file`: the CA certificates peers must chain to (PEM, one or more). Empty means
    /// not set.
    #[serde(deserialize_with = "de_string")]
    pub ca_cert_file: String,
    /// `require-mutual-authentication`: refuse inbound connections without a client
    /// certificate.
    #[serde(deserialize_with = "de_switch")]
    pub require_mutual_authentication: bool,
    /// `trust-domain`: the SPIFFE trust domain of the URI SAN every node certificate carries.
    #[serde(deserialize_with = "de_string")]
    pub trust_domain: String,
    /// `ssl-context-cache-ttl`: how long the loaded files are used before they are checked
    /// for changes again.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub ssl_context_cache_ttl: Duration,
}

/// What a trust domain may contain (SPIFFE: lower-case letters, digits, `.`, `-`, `_`).
const TRUST_DOMAIN_EXPECTED: &str =
    "a non-empty SPIFFE trust domain of lower-case ASCII letters, digits, `.`, `-` and `_`";

impl TlsSettings {
    /// The checks of `transport.tls.*`. The file keys are required only when TLS is on; their
    /// contents are checked when the TLS context is built at start.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !is_trust_domain(&self.trust_domain) {
            return Err(invalid(
                "transport.tls.trust-domain",
                &self.trust_domain,
                TRUST_DOMAIN_EXPECTED,
            ));
        }
        positive_duration(
            "transport.tls.ssl-context-cache-ttl",
            self.ssl_context_cache_ttl,
        )?;
        if self.enabled {
            for (key, value, what) in [
                (
                    "transport.tls.cert-file",
                    &self.cert_file,
                    "this node's certificate",
                ),
                ("transport.tls.key-file", &self.key_file, "its private key"),
                (
                    "transport.tls.ca-cert-file",
                    &self.ca_cert_file,
                    "the cluster's CA certificates",
                ),
            ] {
                if value.trim().is_empty() {
                    return Err(invalid(
                        key,
                        value,
                        &format!(
                            "the path of a PEM file with {what} (required when \
                             `transport.tls.enabled` is on)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `cert-file` as a path.
    pub fn cert_path(&self) -> &Path {
        Path::new(&self.cert_file)
    }

    /// `key-file` as a path.
    pub fn key_path(&self) -> &Path {
        Path::new(&self.key_file)
    }

    /// `ca-cert-file` as a path.
    pub fn ca_cert_path(&self) -> &Path {
        Path::new(&self.ca_cert_file)
    }
}
