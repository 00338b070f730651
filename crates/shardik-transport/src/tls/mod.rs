//! Mutual TLS between nodes: who may connect, proven by certificates. The same identity rule
//! and files serve HTTPS on the management port ([`TlsContext::for_management`]), where a
//! client certificate is optional and, when presented and valid, authorises the
//! state-changing routes (the runtime's `http` module).
//!
//! # The identity rule
//!
//! A peer's certificate is accepted only if all of these hold:
//!
//! 1. it chains to one of the CA certificates in `transport.tls.ca-cert-file` (the file may
//!    hold several CAs, so that a CA can be rotated);
//! 2. it is within its validity period (and so is every certificate of its chain);
//! 3. it carries the URI subject alternative name
//!    `spiffe://{transport.tls.trust-domain}/cluster/{cluster.name}` ([`cluster_uri`]): a
//!    certificate from the right CA for another cluster, or made for another purpose, is
//!    refused;
//! 4. it allows the use it is put to (extended key usage `serverAuth` for the accepting side,
//!    `clientAuth` for the dialling side, as webpki checks it).
//!
//! Besides, every node certificate names the node's host with DNS and/or IP SANs:
//!
//! - the dialling node checks the accepting node's certificate against the host it dialled
//!   (an IP address against IP SANs, a name against DNS SANs, webpki's server-name rules);
//! - the accepting node checks, with [`PeerCertificate::names_host`], that the client
//!   certificate names the host the client claims in shardik's own handshake (the
//!   `UniqueAddress` that follows the TLS handshake inside the encrypted stream), so a member
//!   cannot speak for another member's address.
//!
//! Rules 1–4 run inside the TLS handshake ([`ClusterServerVerifier`],
//! [`ClusterClientVerifier`]); the host check of the dialled side too; the host check of the
//! client is the transport's, after our handshake frame is read.
//! TLS 1.3 only between nodes: both ends are shardik nodes, so there is no older peer to talk
//! to. The management port also speaks TLS 1.2, for HTTP clients that have nothing newer.
//!
//! # Rotation
//!
//! [`TlsContext`] re-reads the certificate, key and CA files when
//! `transport.tls.ssl-context-cache-ttl` has passed since it last looked (on the next new
//! connection) and, if they changed (read again until two reads agree, so that a replacement
//! in progress is not seen half done) and are valid, uses them for new connections;
//! connections already open keep the session they negotiated. Files that fail to load leave
//! the current ones in use, with one warning and one count of [`RELOAD_FAILURES_TOTAL`] per
//! change.
//!
//! # Failures
//!
//! Handshake failures are the transport's to count; [`FailureReason::of_io`] names the reason
//! in a short label and [`HandshakeFailureLog`] logs them at most once per peer IP and reason
//! per interval, since strangers can cause as many as they like.

//!
//! # Without the `tls` feature
//!
//! A build without the `tls` feature has no rustls: [`TlsContext`] and [`PeerCertificate`]
//! are types with no values, so the transport's and the HTTP server's TLS paths compile away,
//! and a configuration that turns TLS on stops the node at start with an error that names the
//! key and the feature ([`TlsError::NotBuilt`]).

#[cfg(not(feature = "tls"))]
mod absent;
#[cfg(feature = "tls")]
pub mod certs;
#[cfg(feature = "tls")]
mod context;
mod error;
mod failure;
#[cfg(feature = "tls")]
mod https_client;
#[cfg(feature = "tls")]
mod identity;
#[cfg(feature = "tls")]
mod pem;
#[cfg(feature = "tls")]
mod verifier;

#[cfg(not(feature = "tls"))]
pub use absent::{PeerCertificate, TlsContext};
#[cfg(feature = "tls")]
pub use context::{ClientAuth, HandshakeError, ReloadStats, TlsContext};
pub use error::TlsError;
pub use failure::{FailureReason, HandshakeFailureLog, Logged};
#[cfg(feature = "tls")]
pub use https_client::https_client_config;
#[cfg(feature = "tls")]
pub use identity::{PeerCertificate, WrongIdentity, cluster_uri, is_uri_cluster_name, server_name};
#[cfg(feature = "tls")]
pub use pem::PemFile;
pub use shardik_config::is_trust_domain;
#[cfg(feature = "tls")]
pub use verifier::{ClusterClientVerifier, ClusterServerVerifier};

// The reload counters under the names this module always gave them (`tls::RELOADS_TOTAL`).
pub use crate::metrics::{
    TLS_RELOAD_FAILURES_TOTAL as RELOAD_FAILURES_TOTAL, TLS_RELOADS_TOTAL as RELOADS_TOTAL,
};
