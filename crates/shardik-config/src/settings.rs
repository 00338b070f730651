//! The whole configuration of a node ([`Settings`]): one field per section, the checks of
//! every section run in order, and what only the sections together can tell (whether cluster
//! bootstrap runs, and on which port it probes).
//!
//! Each section lives in a module of its own below this one and checks its own keys; a check
//! that needs another section is handed what it needs from here. What the settings map to in
//! the cores (`membership`, `node`) and how they are loaded (`load`) stand above.

use serde::Deserialize;

use crate::cluster::ClusterSettings;
use crate::coordination::CoordinationSettings;
use crate::discovery::{DiscoveryMethod, DiscoverySettings};
use crate::error::ConfigError;
use crate::logging::LoggingSettings;
use crate::management::ManagementSettings;
use crate::persistence::PersistenceSettings;
use crate::runtime::RuntimeSettings;
use crate::transport::TransportSettings;

/// The whole configuration of a node.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Settings {
    /// `cluster.*`: membership, failure detection, downing.
    pub cluster: ClusterSettings,
    /// `transport.*`: the TCP transport between nodes.
    pub transport: TransportSettings,
    /// `management.*`: the management HTTP API and cluster bootstrap.
    pub management: ManagementSettings,
    /// `discovery.*`: how cluster bootstrap finds contact points.
    pub discovery: DiscoverySettings,
    /// `logging.*`: log format and level.
    pub logging: LoggingSettings,
    /// `persistence.*`: the store of durable entities.
    pub persistence: PersistenceSettings,
    /// `coordination.*`: leases.
    pub coordination: CoordinationSettings,
    /// `runtime.*`: the async runtime the node runs on.
    pub runtime: RuntimeSettings,
}

impl Settings {
    /// Range and consistency checks that the types alone cannot express. The first problem
    /// found is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.cluster.validate()?;
        self.transport.validate()?;
        self.management.validate(&self.transport.tls)?;
        self.discovery.validate()?;
        self.management
            .cluster
            .bootstrap
            .validate(&self.discovery)?;
        self.persistence.validate()?;
        self.coordination.lease.validate()?;
        self.runtime.validate()?;
        self.logging.validate()
    }

    /// Whether cluster bootstrap runs: a discovery method is set and `cluster.seed-nodes` is
    /// empty (configured seeds win, as in Akka).
    pub fn bootstrap_enabled(&self) -> bool {
        self.discovery.method != DiscoveryMethod::Off && self.cluster.seed_nodes.is_empty()
    }

    /// The management port of contact points discovered without one.
    pub fn bootstrap_fallback_port(&self) -> u16 {
        match self
            .management
            .cluster
            .bootstrap
            .contact_point
            .fallback_port
        {
            0 => self.management.http.port,
            port => port,
        }
    }
}
