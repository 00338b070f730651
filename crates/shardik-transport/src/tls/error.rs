//! Why a TLS context could not be built from the configured files.

use std::path::PathBuf;

/// Why the certificate, key or CA files cannot be used. Each message names the configuration
/// key, the file and the cause, so the operator knows which file to fix and how.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file is missing or unreadable.
    #[error("cannot read `{key}` file `{}`: {source}", path.display())]
    ReadFile {
        /// The configuration key (or option) that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid PEM (a broken block, bad base64).
    #[error("`{key}` file `{}` is not valid PEM: {cause}", path.display())]
    Pem {
        /// The configuration key (or option) that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What the PEM parser reported.
        cause: String,
    },
    /// A certificate or CA file holds no `CERTIFICATE` block.
    #[error(
        "`{key}` file `{}` holds no certificate (expected at least one \
         `-----BEGIN CERTIFICATE-----` block)",
        path.display()
    )]
    NoCertificate {
        /// The configuration key (or option) that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key block.
    #[error(
        "`{key}` file `{}` holds no private key (expected a `-----BEGIN PRIVATE KEY-----`, \
         `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)",
        path.display()
    )]
    NoPrivateKey {
        /// The configuration key (or option) that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The private key cannot be used (an unsupported algorithm or a malformed key).
    #[error("`{key}` file `{}` holds an unusable private key: {cause}", path.display())]
    BadPrivateKey {
        /// The configuration key (or option) that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What rustls reported.
        cause: String,
    },
    /// The private key does not belong to the certificate.
    #[error(
        "the private key in `{key_key}` (`{}`) does not belong to the certificate in \
         `{cert_key}` (`{}`): install the key the certificate was issued for",
        key_path.display(),
        cert_path.display()
    )]
    KeyMismatch {
        /// The configuration key (or option) that names the certificate file.
        cert_key: &'static str,
        /// The certificate file.
        cert_path: PathBuf,
        /// The configuration key (or option) that names the key file.
        key_key: &'static str,
        /// The key file.
        key_path: PathBuf,
    },
    /// A certificate that is valid PEM but not a usable X.509 certificate.
    #[error("`{key}` file `{}` holds a certificate that cannot be used: {cause}", path.display())]
    BadCertificate {
        /// The configuration key (or option) that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What the parser or rustls reported.
        cause: String,
    },
    /// The cluster name and trust domain do not form a valid URI SAN.
    #[error("`{key}` = `{value}` cannot be part of the certificate identity: {reason}")]
    Identity {
        /// The configuration key.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        reason: &'static str,
    },
    /// rustls refused the configuration for another reason (its message: rustls's error type
    /// stays out of this enum, so that a program names it without depending on rustls).
    #[error("TLS configuration refused: {0}")]
    Rustls(String),
    /// The configuration turns TLS on, but this build of shardik leaves TLS out.
    #[error(
        "`{key}` is on, but this build of shardik has no TLS: turn on the `tls` feature of the          `shardik` crate (or turn `{key}` off)"
    )]
    NotBuilt {
        /// The configuration key that turns TLS on.
        key: &'static str,
    },
}
