//! `cluster.failure-detector.*` and who downs unreachable members: `cluster.downing-provider`
//! and `cluster.split-brain-resolver.*`.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::error::ConfigError;
use crate::validate::{invalid, positive_count, positive_duration};
use crate::values::{DurationOrSwitch, de_duration_or_switch, de_string, de_switch};

/// `cluster.failure-detector.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct FailureDetectorSettings {
    /// `threshold`: phi at or above which a node is unreachable.
    pub threshold: f64,
    /// `max-sample-size`.
    pub max_sample_size: usize,
    /// `min-std-deviation`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub min_std_deviation: Duration,
    /// `acceptable-heartbeat-pause`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub acceptable_heartbeat_pause: Duration,
    /// `heartbeat-interval`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub heartbeat_interval: Duration,
    /// `monitored-by-nr-of-members`.
    pub monitored_by_nr_of_members: usize,
    /// `expected-response-after`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub expected_response_after: Duration,
}

/// `cluster.downing-provider`: who downs unreachable members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DowningProvider {
    /// The split-brain resolver (shardik's default).
    SplitBrainResolver,
    /// Nobody: members are downed by hand (Akka's default).
    Off,
}

impl DowningProvider {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DowningProvider::SplitBrainResolver => "split-brain-resolver",
            DowningProvider::Off => "off",
        }
    }
}

/// `cluster.split-brain-resolver.active-strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActiveStrategy {
    /// `keep-majority` (default).
    KeepMajority,
    /// `static-quorum`.
    StaticQuorum,
    /// `keep-oldest`.
    KeepOldest,
    /// `down-all`.
    DownAll,
    /// `lease-majority`.
    LeaseMajority,
}

impl ActiveStrategy {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ActiveStrategy::KeepMajority => "keep-majority",
            ActiveStrategy::StaticQuorum => "static-quorum",
            ActiveStrategy::KeepOldest => "keep-oldest",
            ActiveStrategy::DownAll => "down-all",
            ActiveStrategy::LeaseMajority => "lease-majority",
        }
    }
}

/// `cluster.split-brain-resolver.down-all-when-unstable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownAllWhenUnstable {
    /// `on`: `max(4s, 3/4 · stable-after)`.
    On,
    /// `off`.
    Off,
    /// An explicit duration.
    After(Duration),
}

/// Reads `down-all-when-unstable`: a duration, or a switch.
fn de_down_all_when_unstable<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<DownAllWhenUnstable, D::Error> {
    use DownAllWhenUnstable as W;
    Ok(
        match de_duration_or_switch(d, "a duration like `15s`, \"on\" or \"off\"")? {
            DurationOrSwitch::On(_) => W::On,
            DurationOrSwitch::After(d) => W::After(d),
            DurationOrSwitch::Off => W::Off,
        },
    )
}

/// `cluster.split-brain-resolver.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct SplitBrainResolverSettings {
    /// `active-strategy`.
    pub active_strategy: ActiveStrategy,
    /// `stable-after`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub stable_after: Duration,
    /// `down-all-when-unstable`.
    #[serde(deserialize_with = "de_down_all_when_unstable")]
    pub down_all_when_unstable: DownAllWhenUnstable,
    /// `static-quorum.*`.
    pub static_quorum: StaticQuorumSettings,
    /// `keep-majority.*`.
    pub keep_majority: RoleOnlySettings,
    /// `keep-oldest.*`.
    pub keep_oldest: KeepOldestSettings,
    /// `lease-majority.*`.
    pub lease_majority: LeaseMajoritySettings,
}

/// `cluster.split-brain-resolver.static-quorum.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct StaticQuorumSettings {
    /// `quorum-size`; 0 = not set (an error when the strategy is active).
    pub quorum_size: usize,
    /// `role`; empty = all members.
    #[serde(deserialize_with = "de_string")]
    pub role: String,
}

/// A strategy section with only a `role` key.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RoleOnlySettings {
    /// `role`; empty = all members.
    #[serde(deserialize_with = "de_string")]
    pub role: String,
}

/// `cluster.split-brain-resolver.keep-oldest.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct KeepOldestSettings {
    /// `down-if-alone`.
    #[serde(deserialize_with = "de_switch")]
    pub down_if_alone: bool,
    /// `role`; empty = all members.
    #[serde(deserialize_with = "de_string")]
    pub role: String,
}

/// `cluster.split-brain-resolver.lease-majority.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct LeaseMajoritySettings {
    /// `lease-implementation`: where the lease lives. `"store"` = in the node's store
    /// (`persistence.store`), the only implementation; empty = not set, an error when the
    /// strategy is active (as the reference, which has no default either).
    #[serde(deserialize_with = "de_string")]
    pub lease_implementation: String,
    /// `lease-name`; empty = `{cluster.name}-shardik-sbr` (see
    /// [`Settings::sbr_lease_name`](crate::Settings::sbr_lease_name)).
    #[serde(deserialize_with = "de_string")]
    pub lease_name: String,
    /// `role`; empty = all members.
    #[serde(deserialize_with = "de_string")]
    pub role: String,
    /// `acquire-lease-delay-for-minority`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub acquire_lease_delay_for_minority: Duration,
    /// `release-after`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub release_after: Duration,
}

impl FailureDetectorSettings {
    /// The checks of `cluster.failure-detector.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return Err(invalid(
                "cluster.failure-detector.threshold",
                self.threshold,
                "a number greater than zero (8.0 by default)",
            ));
        }
        positive_count(
            "cluster.failure-detector.max-sample-size",
            self.max_sample_size,
        )?;
        positive_count(
            "cluster.failure-detector.monitored-by-nr-of-members",
            self.monitored_by_nr_of_members,
        )?;
        for (key, d) in [
            (
                "cluster.failure-detector.min-std-deviation",
                self.min_std_deviation,
            ),
            (
                "cluster.failure-detector.heartbeat-interval",
                self.heartbeat_interval,
            ),
            (
                "cluster.failure-detector.expected-response-after",
                self.expected_response_after,
            ),
        ] {
            positive_duration(key, d)?;
        }
        Ok(())
    }
}

impl SplitBrainResolverSettings {
    /// The checks of `cluster.split-brain-resolver.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.active_strategy == ActiveStrategy::StaticQuorum
            && self.static_quorum.quorum_size == 0
        {
            return Err(invalid(
                "cluster.split-brain-resolver.static-quorum.quorum-size",
                0,
                "a number of at least 1 when `cluster.split-brain-resolver.active-strategy` is \
                 `static-quorum` (typically a majority of the cluster's intended size)",
            ));
        }
        if self.active_strategy == ActiveStrategy::LeaseMajority {
            self.lease_majority.validate()?;
        }
        if self.down_all_when_unstable == DownAllWhenUnstable::After(Duration::ZERO) {
            return Err(invalid(
                "cluster.split-brain-resolver.down-all-when-unstable",
                "0s",
                "a duration greater than zero, \"on\" or \"off\"",
            ));
        }
        Ok(())
    }
}

/// The one value of `lease-majority.lease-implementation` that exists.
pub const LEASE_IMPLEMENTATION_STORE: &str = "store";

impl LeaseMajoritySettings {
    /// The checks of `lease-majority.*` when it is the active strategy.
    fn validate(&self) -> Result<(), ConfigError> {
        const KEY: &str = "cluster.split-brain-resolver.lease-majority";
        match self.lease_implementation.as_str() {
            LEASE_IMPLEMENTATION_STORE => {}
            "" => {
                return Err(invalid(
                    &format!("{KEY}.lease-implementation"),
                    "\"\"",
                    "\"store\" (the lease is kept in the node's store, `persistence.store`): \
                     `active-strategy = \"lease-majority\"` needs a lease that every node \
                     reaches, such as a PostgreSQL store shared by the cluster",
                ));
            }
            other => {
                return Err(invalid(
                    &format!("{KEY}.lease-implementation"),
                    format!("{other:?}"),
                    "\"store\" (the lease is kept in the node's store, `persistence.store`; \
                     no other implementation exists)",
                ));
            }
        }
        for (key, d) in [
            (
                "acquire-lease-delay-for-minority",
                self.acquire_lease_delay_for_minority,
            ),
            ("release-after", self.release_after),
        ] {
            positive_duration(&format!("{KEY}.{key}"), d)?;
        }
        Ok(())
    }
}
