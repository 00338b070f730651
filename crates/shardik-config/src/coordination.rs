//! `coordination.*`: leases (Akka's `akka.coordination.lease`), kept in the node's store
//! (`persistence.store`) and held by the cores' `LeaseKeeper` (see the runtime's `lease` module).

use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::validate::{fmt_duration, invalid, positive_duration};

/// `coordination.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct CoordinationSettings {
    /// `lease.*`.
    pub lease: LeaseSettings,
}

/// Where a lease lives, for the settings that turn one on (`cluster.sharding.use-lease`,
/// `cluster.sharding.coordinator-singleton.use-lease`): in Akka these name a lease
/// implementation's configuration block; shardik has one implementation, a store (the kind's
/// own, where its entities write).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum LeaseImplementation {
    /// `""`: no lease.
    #[serde(rename = "")]
    None,
    /// `"auto"` (the default): a lease in the kind's store when it has one of its own (a
    /// durable kind, or one given `EntityKind::with_lease_store`); none for a kind without.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// `"store"`: a lease for every kind, in its store; a kind that hosts shards without a
    /// store is refused at registration.
    #[serde(rename = "store")]
    Store,
}

impl LeaseImplementation {
    /// Whether every kind takes the lease (`"store"`).
    pub fn is_on(self) -> bool {
        self == LeaseImplementation::Store
    }

    /// Whether kinds with a store of their own take the lease (`"auto"`).
    pub fn is_auto(self) -> bool {
        self == LeaseImplementation::Auto
    }

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseImplementation::None => "",
            LeaseImplementation::Auto => "auto",
            LeaseImplementation::Store => "store",
        }
    }
}

/// `coordination.lease.*`: how long a lease lasts and how its holder keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct LeaseSettings {
    /// `heartbeat-timeout`: the lease's time-to-live. A holder that stops renewing (it
    /// crashed, or cannot reach the store) keeps the lease this long after its last renewal;
    /// nobody else can take it before.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub heartbeat_timeout: Duration,
    /// `heartbeat-interval`: how often the holder renews.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub heartbeat_interval: Duration,
    /// `lease-operation-timeout`: how long one call to the store may take before it counts as
    /// failed; also the safety margin by which the holder gives the lease up before it
    /// expires by its own clock.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub lease_operation_timeout: Duration,
}

impl LeaseSettings {
    /// The checks of `coordination.lease.*`: every duration above zero, and a renewal that
    /// can always land before the lease lapses: `heartbeat-interval` + 2 ×
    /// `lease-operation-timeout` < `heartbeat-timeout` (a renewal sent one interval after the
    /// last may take one operation timeout, and the holder counts on the lease until one
    /// operation timeout before its expiry).
    pub fn validate(&self) -> Result<(), ConfigError> {
        const KEY: &str = "coordination.lease";
        positive_duration(&format!("{KEY}.heartbeat-timeout"), self.heartbeat_timeout)?;
        positive_duration(
            &format!("{KEY}.heartbeat-interval"),
            self.heartbeat_interval,
        )?;
        positive_duration(
            &format!("{KEY}.lease-operation-timeout"),
            self.lease_operation_timeout,
        )?;
        if self.heartbeat_interval >= self.heartbeat_timeout {
            return Err(invalid(
                &format!("{KEY}.heartbeat-interval"),
                fmt_duration(self.heartbeat_interval),
                &format!(
                    "less than heartbeat-timeout ({}): the holder must renew before its lease expires",
                    fmt_duration(self.heartbeat_timeout)
                ),
            ));
        }
        let needed = self.heartbeat_interval + 2 * self.lease_operation_timeout;
        if needed >= self.heartbeat_timeout {
            return Err(invalid(
                &format!("{KEY}.heartbeat-timeout"),
                fmt_duration(self.heartbeat_timeout),
                &format!(
                    "more than heartbeat-interval + 2 × lease-operation-timeout ({}): a renewal \
                     sent every heartbeat-interval may take lease-operation-timeout, and the \
                     holder stops counting on its lease lease-operation-timeout before it expires",
                    fmt_duration(needed)
                ),
            ));
        }
        Ok(())
    }
}
