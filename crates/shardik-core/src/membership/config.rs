//! Membership settings, with the reference's defaults (`pekko.cluster` in its
//! `reference.conf`); each field names its key and default.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::compat::{JoinCompat, JoinConfigCompatChecker, MustMatch, WhenMissing};
use super::phi::PhiAccrualConfig;
use super::sbr::{SbrSettings, Strategy};

/// Failure-detection settings (`cluster.failure-detector.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct FailureDetectorConfig {
    /// Phi-accrual parameters (threshold, samples, pause, minimum deviation).
    pub phi: PhiAccrualConfig,
    /// How often heartbeats are sent (`heartbeat-interval`, 1 s).
    pub heartbeat_interval: Duration,
    /// How many others monitor each node (`monitored-by-nr-of-members`, 9).
    pub monitored_by_nr_of_members: usize,
    /// After the first heartbeat to a new receiver, start detection even without an answer
    /// after this long (`expected-response-after`, 1 s).
    pub expected_response_after: Duration,
}

impl Default for FailureDetectorConfig {
    fn default() -> Self {
        FailureDetectorConfig {
            phi: PhiAccrualConfig::default(),
            heartbeat_interval: Duration::from_secs(1),
            monitored_by_nr_of_members: 9,
            expected_response_after: Duration::from_secs(1),
        }
    }
}

/// The join-compatibility key carrying the number of shards, checked by
/// [`MembershipConfig::join_compat`]. Entity ids map to shards by a hash modulo this
/// number, so a node that counts shards differently would look for entities in the wrong
/// shards: it must not join. Every version has sent it, so a joiner without it is refused.
pub const NUMBER_OF_SHARDS_JOIN_KEY: &str = "cluster.sharding.number-of-shards";

/// The check of [`NUMBER_OF_SHARDS_JOIN_KEY`] for a node with `number_of_shards` shards.
pub fn number_of_shards_check(number_of_shards: impl ToString) -> MustMatch {
    MustMatch::new(
        NUMBER_OF_SHARDS_JOIN_KEY,
        number_of_shards.to_string(),
        WhenMissing::Refuse,
    )
}

/// The join key of `cluster.sharding.handoff-mode`.
pub const HANDOFF_MODE_JOIN_KEY: &str = "cluster.sharding.handoff-mode";
/// The join key of `cluster.downing-provider`.
pub const DOWNING_PROVIDER_JOIN_KEY: &str = "cluster.downing-provider";
/// The join key of `cluster.split-brain-resolver.active-strategy` (sent only when the
/// resolver downs: with downing off the strategy is never used).
pub const ACTIVE_STRATEGY_JOIN_KEY: &str = "cluster.split-brain-resolver.active-strategy";
/// The join key of `transport.tls.enabled`.
pub const TLS_ENABLED_JOIN_KEY: &str = "transport.tls.enabled";

/// The settings the built-in join checks compare, as configured (their spelling in the
/// configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltInJoinKeys<'a> {
    /// `cluster.sharding.number-of-shards`.
    pub number_of_shards: u32,
    /// `cluster.sharding.handoff-mode`.
    pub handoff_mode: &'a str,
    /// `cluster.downing-provider`.
    pub downing_provider: &'a str,
    /// `cluster.split-brain-resolver.active-strategy`, when the resolver downs.
    pub active_strategy: Option<&'a str>,
    /// `transport.tls.enabled`.
    pub tls_enabled: bool,
}

impl Default for BuiltInJoinKeys<'static> {
    /// The reference's defaults.
    fn default() -> Self {
        BuiltInJoinKeys {
            number_of_shards: 1000,
            handoff_mode: "forward",
            downing_provider: "split-brain-resolver",
            active_strategy: Some("keep-majority"),
            tls_enabled: false,
        }
    }
}

impl BuiltInJoinKeys<'_> {
    /// The built-in checks, enforced:
    /// - the number of shards: entity ids map to shards modulo this number, so nodes that
    ///   count differently look for entities in different shards. Every version has sent it:
    ///   a joiner without it is refused.
    /// - the hand-off mode: in `forward` mode the new home waits for the old one's buffered
    ///   messages, which a `drop`-mode node never sends.
    /// - the downing provider and strategy: the two sides of a partition must decide by the
    ///   same rule, or both may survive.
    /// - TLS on or off: a node with TLS and one without cannot complete a handshake, so this
    ///   differs only on a connection that got through some other way.
    ///
    /// The last four are new in this version: a joiner that does not send them (an older
    /// version, during a rolling update) is not refused for their absence.
    pub fn checks(&self) -> JoinCompat {
        let accept = |key: &str, value: &str| MustMatch::new(key, value, WhenMissing::Accept);
        let mut checks: Vec<Arc<dyn JoinConfigCompatChecker>> = vec![
            Arc::new(number_of_shards_check(self.number_of_shards)),
            Arc::new(accept(HANDOFF_MODE_JOIN_KEY, self.handoff_mode)),
            Arc::new(accept(DOWNING_PROVIDER_JOIN_KEY, self.downing_provider)),
        ];
        if let Some(strategy) = self.active_strategy {
            checks.push(Arc::new(accept(ACTIVE_STRATEGY_JOIN_KEY, strategy)));
        }
        let tls = if self.tls_enabled { "on" } else { "off" };
        checks.push(Arc::new(accept(TLS_ENABLED_JOIN_KEY, tls).with_note(
            "a node with TLS and one without cannot normally even complete a handshake; set \
             transport.tls.enabled alike on every node",
        )));
        JoinCompat::new(checks)
    }
}

/// Everything the membership core needs to know (`cluster.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct MembershipConfig {
    /// Cluster name; only nodes with the same name form a cluster.
    pub cluster_name: String,
    /// What a joining node must share with the cluster, and whether a difference refuses it
    /// (`configuration-compatibility-check`). Default: the built-in checks at the
    /// reference's defaults ([`BuiltInJoinKeys`]), enforced.
    pub join_compat: JoinCompat,
    /// This node's roles.
    pub roles: BTreeSet<String>,
    /// This node's application version.
    pub app_version: String,
    /// The first seed waits this long for another seed before forming a new cluster (5 s).
    pub seed_node_timeout: Duration,
    /// Restart the seed-join process if no Welcome came within this (10 s).
    pub retry_unsuccessful_join_after: Duration,
    /// Move joiners to WeaklyUp after this long without convergence; `None` disables (7 s).
    pub allow_weakly_up_members: Option<Duration>,
    /// Joiners stay Joining until this many members exist (1).
    pub min_nr_of_members: usize,
    /// Per-role minimum (`role.<name>.min-nr-of-members`).
    pub role_min_nr_of_members: BTreeMap<String, usize>,
    /// Delay before periodic tasks start (1 s).
    pub periodic_tasks_initial_delay: Duration,
    /// Gossip round interval (1 s).
    pub gossip_interval: Duration,
    /// Full gossip that waited longer than this before processing is dropped (2 s).
    pub gossip_time_to_live: Duration,
    /// Leader actions interval (1 s).
    pub leader_actions_interval: Duration,
    /// Unreachable reaper interval (1 s).
    pub unreachable_nodes_reaper_interval: Duration,
    /// Probability of preferring a node that has not seen the current version (0.8).
    pub gossip_different_view_probability: f64,
    /// Above this many members the probability above is reduced (400).
    pub reduce_gossip_different_view_probability: usize,
    /// Tombstones are forgotten after this (24 h).
    pub prune_gossip_tombstones_after: Duration,
    /// Failure detection.
    pub failure_detector: FailureDetectorConfig,
    /// Automatic downing by the split-brain resolver; `None` = manual downing only.
    /// Default: keep-majority (the reference ships it off; see differences-from-akka.md).
    pub downing: Option<SbrSettings>,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig {
            cluster_name: "shardik".to_string(),
            join_compat: BuiltInJoinKeys::default().checks(),
            roles: BTreeSet::new(),
            app_version: "0.0.0".to_string(),
            seed_node_timeout: Duration::from_secs(5),
            retry_unsuccessful_join_after: Duration::from_secs(10),
            allow_weakly_up_members: Some(Duration::from_secs(7)),
            min_nr_of_members: 1,
            role_min_nr_of_members: BTreeMap::new(),
            periodic_tasks_initial_delay: Duration::from_secs(1),
            gossip_interval: Duration::from_secs(1),
            gossip_time_to_live: Duration::from_secs(2),
            leader_actions_interval: Duration::from_secs(1),
            unreachable_nodes_reaper_interval: Duration::from_secs(1),
            gossip_different_view_probability: 0.8,
            reduce_gossip_different_view_probability: 400,
            prune_gossip_tombstones_after: Duration::from_secs(24 * 3600),
            failure_detector: FailureDetectorConfig::default(),
            downing: Some(SbrSettings::new(
                Strategy::KeepMajority { role: None },
                Duration::from_secs(20),
            )),
        }
    }
}

impl MembershipConfig {
    /// The probability of gossiping to a node that has not seen the current version, for a
    /// cluster of `members`: the configured value up to the reduction threshold, then falling
    /// linearly to a tenth of it at three times the threshold (the reference's formula).
    pub fn different_view_probability(&self, members: usize) -> f64 {
        let p = self.gossip_different_view_probability;
        let low = self.reduce_gossip_different_view_probability;
        let high = low * 3;
        let min_p = p / 10.0;
        if members <= low {
            p
        } else if members >= high {
            min_p
        } else {
            let k = (min_p - p) / (high - low) as f64;
            p + (members - low) as f64 * k
        }
    }
}

#[cfg(test)]
mod tests;
