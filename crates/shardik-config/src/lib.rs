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
//! One module per concern, each importing only those below it. At the bottom, `values` reads
//! the values TOML has no type for (durations, sizes, switches), `error` turns figment's errors
//! into [`ConfigError`]s that name the key, the value and what is allowed, and `validate`
//! holds the helpers of the range checks. Above them, one module per section holds that
//! section's keys and rules, and `settings` gathers the sections into [`Settings`] and runs
//! their checks. On top, `load` layers the sources with figment, and `join_compat`,
//! `membership` and `node` are the one mapping from the checked settings to what a node runs
//! with ([`Settings::node_settings`]), shared by the runtime and the simulator. This file only
//! names what the crate offers.
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
mod membership;
mod node;
mod persistence;
mod runtime;
mod settings;
mod sharding;
mod tls;
mod transport;
mod validate;
mod values;

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
pub use load::{ENV_PREFIX, REFERENCE_TOML, env_var_to_key, key_to_env_var};
pub use logging::{LogFormat, LoggingError, LoggingSettings};
pub use management::{
    MIN_MANAGEMENT_BODY_SIZE, ManagementHttpSettings, ManagementSettings, ManagementTlsSettings,
};
pub use persistence::PersistenceSettings;
pub use runtime::{MAX_WORKER_THREADS, RuntimeSettings};
pub use settings::Settings;
pub use sharding::{
    ConstantRateSettings, CoordinatorSingletonSettings, EntityRecoveryStrategySetting,
    HandOffModeSetting, LeastShardAllocationStrategySettings, MAX_HANDLER_LANES,
    ShardingHealthCheckSettings, ShardingSettings,
};
pub use tls::{TlsSettings, is_trust_domain};
pub use transport::{MIN_FRAME_SIZE, TransportSettings};
