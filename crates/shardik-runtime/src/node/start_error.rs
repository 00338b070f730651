//! Why a node could not start: [`StartError`], which both the driver's [`start`](super::start)
//! and [`NodeBuilder::start`](crate::cluster_node::NodeBuilder::start) return, and the part of
//! it that cluster bootstrap reports, [`BootstrapError`].
//!
//! `BootstrapError` is cluster bootstrap's (`crate::bootstrap` names it as its own), but it is
//! defined here, beside the error that wraps it: bootstrap steers a started node through its
//! [`NodeHandle`](super::handle::NodeHandle), so the node must not import bootstrap back.

use shardik_persistence::StoreError;

#[cfg(feature = "management")]
use crate::discovery::DiscoveryError;
use shardik_transport::TransportError;
use shardik_transport::tls::TlsError;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The transport could not listen.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The split-brain resolver's lease (lease-majority) cannot be kept.
    #[error("split-brain resolver lease: {0}")]
    SbrLease(String),
    /// `transport.tls` is on but its files cannot be used (the message names the key and file).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Cluster bootstrap cannot run (its discovery method or its HTTPS client cannot be set
    /// up; the message says which key).
    #[cfg(feature = "management")]
    #[error("cluster bootstrap: {0}")]
    Bootstrap(#[from] BootstrapError),
    /// The configuration asks for something this build of shardik leaves out: turn on the
    /// named cargo feature of the `shardik` crate (or change the configuration).
    #[error("{what} needs shardik's `{feature}` feature, which this build leaves out")]
    FeatureMissing {
        /// What the configuration asks for.
        what: &'static str,
        /// The cargo feature that builds it.
        feature: &'static str,
    },
    /// The node's identity is not an address peers can reach (an unspecified address such as
    /// `0.0.0.0`, or port 0); the message names the key to set.
    #[error(transparent)]
    Address(#[from] shardik_config::ConfigError),
    /// The management API asked for with `NodeBuilder::management` (feature `management`)
    /// cannot be served (its port, token file or TLS files; the message says which).
    #[error("management API: {0}")]
    Management(String),
    /// Logging or metrics asked for with the builder cannot be set up.
    #[error("{0}")]
    Observability(String),
    /// The node's store, opened at start because the builder asked for it
    /// ([`NodeBuilder::persistence`](crate::cluster_node::NodeBuilder::persistence)), cannot be opened:
    /// check `persistence.store` (or `persistence.data-dir` for the default SQLite file).
    #[error("the node's store {store} (persistence.store) cannot be opened: {source}")]
    Store {
        /// The store's URL, with any password redacted.
        store: String,
        /// Why it cannot be opened.
        source: StoreError,
    },
    /// The settings given to [`Node::builder`](crate::cluster_node::Node::builder) fail the checks that
    /// loading them runs ([`Settings::validate`](shardik_config::Settings::validate)): a value
    /// changed in code after loading is checked as one read from a file is. The message names
    /// the key, the value and what is allowed.
    #[error("invalid settings: {0}")]
    Settings(shardik_config::ConfigError),
}

/// Why bootstrap could not start (the node does not start either).
#[cfg(feature = "management")]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// The discovery method could not be set up.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The CA file to trust other management ports (`management.http.tls`) is unusable.
    #[error("cluster bootstrap probes contact points over HTTPS: {0}")]
    Tls(#[from] TlsError),
}
