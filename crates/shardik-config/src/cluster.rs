//! `cluster.*`: identity, joining and gossip. The failure detector and downing sections are in
//! `downing.rs`, sharding in `sharding.rs`; what they map to in the membership core, in
//! `membership.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;
use shardik_core::membership::Address;

use crate::addresses::{CANONICAL_ADDRESS_KEY, NodeAddresses, check_identity, de_optional_address};
use crate::downing::{DowningProvider, FailureDetectorSettings, SplitBrainResolverSettings};
use crate::error::ConfigError;
use crate::sharding::ShardingSettings;
use crate::validate::{invalid, positive_count, positive_duration};
use crate::values::{
    DOWN_REMOVAL_MARGIN_EXPECTED, de_addresses, de_down_removal_margin, de_string, de_string_set,
    de_switch, de_weakly_up,
};

/// `cluster.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ClusterSettings {
    /// `name`: only nodes with the same name form a cluster (checked at handshake and join).
    #[serde(deserialize_with = "de_string")]
    pub name: String,
    /// `canonical-address`: this node's identity, "host:port" (Akka's `canonical.hostname`
    /// and `.port`); `None` (`""`): the bind address. See [`ClusterSettings::node_addresses`].
    #[serde(deserialize_with = "de_optional_address")]
    pub canonical_address: Option<Address>,
    /// `bind-address`: where the transport listens, "host:port" (Akka's `bind.hostname` and
    /// `.port`); `None` (`""`): the canonical address.
    #[serde(deserialize_with = "de_optional_address")]
    pub bind_address: Option<Address>,
    /// `seed-nodes`: nodes to contact when joining.
    #[serde(deserialize_with = "de_addresses")]
    pub seed_nodes: Vec<Address>,
    /// `roles`: this node's roles.
    #[serde(deserialize_with = "de_string_set")]
    pub roles: BTreeSet<String>,
    /// `app-version`: this node's application version.
    #[serde(deserialize_with = "de_string")]
    pub app_version: String,
    /// `min-nr-of-members`: joiners stay Joining until the cluster has this many members.
    pub min_nr_of_members: usize,
    /// `role.<name>.*`: per-role settings.
    pub role: BTreeMap<String, RoleSettings>,
    /// `seed-node-timeout`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub seed_node_timeout: Duration,
    /// `retry-unsuccessful-join-after`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub retry_unsuccessful_join_after: Duration,
    /// `allow-weakly-up-members`: `None` when "off".
    #[serde(deserialize_with = "de_weakly_up")]
    pub allow_weakly_up_members: Option<Duration>,
    /// `periodic-tasks-initial-delay`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub periodic_tasks_initial_delay: Duration,
    /// `gossip-interval`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub gossip_interval: Duration,
    /// `gossip-time-to-live`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub gossip_time_to_live: Duration,
    /// `leader-actions-interval`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub leader_actions_interval: Duration,
    /// `unreachable-nodes-reaper-interval`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub unreachable_nodes_reaper_interval: Duration,
    /// `gossip-different-view-probability`, in [0, 1].
    pub gossip_different_view_probability: f64,
    /// `reduce-gossip-different-view-probability`.
    pub reduce_gossip_different_view_probability: usize,
    /// `prune-gossip-tombstones-after`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub prune_gossip_tombstones_after: Duration,
    /// `failure-detector.*`.
    pub failure_detector: FailureDetectorSettings,
    /// `downing-provider`.
    pub downing_provider: DowningProvider,
    /// `down-removal-margin`: how long after a crashed member is removed its shards stay where
    /// they were (and the coordinator stays put). `None` when "off": see
    /// [`effective_down_removal_margin`](Self::effective_down_removal_margin).
    #[serde(deserialize_with = "de_down_removal_margin")]
    pub down_removal_margin: Option<Duration>,
    /// `split-brain-resolver.*`.
    pub split_brain_resolver: SplitBrainResolverSettings,
    /// `configuration-compatibility-check.*`.
    pub configuration_compatibility_check: ConfigurationCompatibilityCheckSettings,
    /// `sharding.*`.
    pub sharding: ShardingSettings,
}

impl ClusterSettings {
    /// Where this node listens and who it is (see [`NodeAddresses::resolve`]). Refuses
    /// settings that give neither address, or whose identity peers could not dial, naming the
    /// key.
    pub fn node_addresses(&self) -> Result<NodeAddresses, ConfigError> {
        NodeAddresses::resolve(self.bind_address.as_ref(), self.canonical_address.as_ref())
    }

    /// The down-removal margin in force, as the reference resolves it: the configured
    /// `down-removal-margin` if set; otherwise the split-brain resolver's `stable-after` when
    /// the resolver does the downing (so that the downed side has had time to stop its shards
    /// before they start elsewhere); otherwise (manual downing, an operator vouches that the
    /// member is gone) zero.
    pub fn effective_down_removal_margin(&self) -> Duration {
        match (self.down_removal_margin, self.downing_provider) {
            (Some(margin), _) => margin,
            (None, DowningProvider::SplitBrainResolver) => self.split_brain_resolver.stable_after,
            (None, DowningProvider::Off) => Duration::ZERO,
        }
    }

    /// The checks of `cluster.*`, its subsections included.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let c = self;
        let name_ok = !c.name.is_empty()
            && c.name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_');
        if !name_ok {
            return Err(invalid(
                "cluster.name",
                &c.name,
                "a non-empty name of ASCII letters, digits, `-` and `_`",
            ));
        }
        if let Some(canonical) = &c.canonical_address {
            check_identity(canonical, CANONICAL_ADDRESS_KEY)?;
        }
        positive_count("cluster.min-nr-of-members", c.min_nr_of_members)?;
        for (role, r) in &c.role {
            positive_count(
                &format!("cluster.role.{role}.min-nr-of-members"),
                r.min_nr_of_members,
            )?;
        }
        for (key, d) in [
            ("cluster.seed-node-timeout", c.seed_node_timeout),
            (
                "cluster.retry-unsuccessful-join-after",
                c.retry_unsuccessful_join_after,
            ),
            ("cluster.gossip-interval", c.gossip_interval),
            ("cluster.gossip-time-to-live", c.gossip_time_to_live),
            ("cluster.leader-actions-interval", c.leader_actions_interval),
            (
                "cluster.unreachable-nodes-reaper-interval",
                c.unreachable_nodes_reaper_interval,
            ),
        ] {
            positive_duration(key, d)?;
        }
        if c.allow_weakly_up_members == Some(Duration::ZERO) {
            return Err(invalid(
                "cluster.allow-weakly-up-members",
                "0s",
                "a duration greater than zero, \"on\" or \"off\"",
            ));
        }
        let p = c.gossip_different_view_probability;
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid(
                "cluster.gossip-different-view-probability",
                p,
                "a probability between 0 and 1",
            ));
        }
        positive_count(
            "cluster.reduce-gossip-different-view-probability",
            c.reduce_gossip_different_view_probability,
        )?;

        self.failure_detector.validate()?;
        self.split_brain_resolver.validate()?;
        if self.down_removal_margin == Some(Duration::ZERO) {
            return Err(invalid(
                "cluster.down-removal-margin",
                "0s",
                DOWN_REMOVAL_MARGIN_EXPECTED,
            ));
        }
        self.sharding.validate()
    }
}

/// `cluster.configuration-compatibility-check.*`: what a member does with a joiner whose
/// settings differ from its own (see [`Settings::join_compat`](crate::Settings::join_compat)).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ConfigurationCompatibilityCheckSettings {
    /// `enforce-on-join`: refuse such a joiner (on), or let it in and log the differences
    /// at WARN (off).
    #[serde(deserialize_with = "de_switch")]
    pub enforce_on_join: bool,
}

/// `cluster.role.<name>.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RoleSettings {
    /// `min-nr-of-members`: joiners stay Joining until this many members have the role.
    pub min_nr_of_members: usize,
}
