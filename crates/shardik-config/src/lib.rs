//! Node configuration: the built-in `reference.toml`, a user TOML file and environment
//! variables, layered in that order and checked before anything starts.
//!
//! Keys mirror Akka's `reference.conf` in kebab-case under the same paths, without the
//! `akka.` prefix. Every key has a default in [`REFERENCE_TOML`], so a user file only names what
//! it changes. An environment variable `SHARDIK_` + the key path in upper snake case with `__`
//! between levels overrides both files (see [`env_var_to_key`]).
//!
//! Unknown keys are errors, not warnings: a misspelt key that is silently ignored leaves a
//! production cluster running with a default the operator thought they had changed.
//!
//! One module per concern: `load` layers the sources with figment, `error` turns figment's
//! errors into [`ConfigError`]s that name the key, the value and what is allowed, `values`
//! reads the values TOML has no type for (durations, sizes, switches), `validate` runs the
//! range checks, and one module per section holds that section's keys and rules. `node` is the
//! one mapping from the checked settings to what a node runs with
//! ([`Settings::node_settings`]), shared by the runtime and the simulator.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod addresses;
mod bootstrap;
mod cluster;
mod coordination;
mod discovery;
mod downing;
mod error;
mod join_compat;
mod load;
mod logging;
mod management;
mod node;
mod persistence;
mod runtime;
mod sharding;
mod tls;
mod transport;
mod validate;
mod values;

use serde::Deserialize;

pub use addresses::{BIND_ADDRESS_KEY, CANONICAL_ADDRESS_KEY, NodeAddresses, check_identity};
pub use bootstrap::{
    BootstrapSettings, ContactPointDiscoverySettings, ContactPointSettings,
    ManagementClusterSettings,
};
pub use cluster::{ClusterSettings, ConfigurationCompatibilityCheckSettings, RoleSettings};
pub use coordination::{CoordinationSettings, LeaseImplementation, LeaseSettings};
pub use discovery::{
    ConfigDiscoverySettings, ConfigEndpoint, ConfigService, DiscoveryMethod, DiscoverySettings,
    DnsDiscoverySettings,
};
pub use downing::{
    ActiveStrategy, DownAllWhenUnstable, DowningProvider, FailureDetectorSettings,
    KeepOldestSettings, LEASE_IMPLEMENTATION_STORE, LeaseMajoritySettings, RoleOnlySettings,
    SplitBrainResolverSettings, StaticQuorumSettings,
};
pub use error::ConfigError;
pub use load::{ENV_PREFIX, env_var_to_key, key_to_env_var};
pub use logging::{LogFormat, LoggingError, LoggingSettings};
pub use management::{
    MIN_MANAGEMENT_BODY_SIZE, ManagementHttpSettings, ManagementSettings, ManagementTlsSettings,
};
pub use persistence::PersistenceSettings;
pub use runtime::{MAX_WORKER_THREADS, RuntimeSettings};
pub use sharding::{
    ConstantRateSettings, CoordinatorSingletonSettings, EntityRecoveryStrategySetting,
    HandOffModeSetting, LeastShardAllocationStrategySettings, MAX_HANDLER_LANES,
    ShardingHealthCheckSettings, ShardingSettings,
};
pub use tls::{TlsSettings, is_trust_domain};
pub use transport::{MIN_FRAME_SIZE, TransportSettings};

/// The built-in configuration: every key with its default and a comment saying what it does.
pub const REFERENCE_TOML: &str = include_str!("reference.toml");

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
