//! Membership settings, with the reference's defaults (`pekko.cluster` in its
//! `reference.conf`); each field names its key and default.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

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

/// The join-compatibility key carrying the number of shards, in
/// [`MembershipConfig::join_must_match`]. Entity ids map to shards by a hash modulo this
/// number, so a node that counts shards differently would look for entities in the wrong
/// shards: it must not join.
pub const NUMBER_OF_SHARDS_JOIN_KEY: &str = "cluster.sharding.number-of-shards";

/// Everything the membership core needs to know (`cluster.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct MembershipConfig {
    /// Cluster name; only nodes with the same name form a cluster.
    pub cluster_name: String,
    /// Further keys whose values a joining node must share with the cluster (key → value as
    /// configured). Default: [`NUMBER_OF_SHARDS_JOIN_KEY`] at its default of 1000.
    pub join_must_match: BTreeMap<String, String>,
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
            join_must_match: BTreeMap::from([(
                NUMBER_OF_SHARDS_JOIN_KEY.to_string(),
                "1000".to_string(),
            )]),
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
mod tests {
    use super::*;

    #[test]
    fn different_view_probability_falls_linearly_from_400_to_1200() {
        let c = MembershipConfig::default();
        assert_eq!(c.different_view_probability(10), 0.8);
        assert_eq!(c.different_view_probability(400), 0.8);
        assert!((c.different_view_probability(800) - 0.44).abs() < 1e-9);
        assert!((c.different_view_probability(1200) - 0.08).abs() < 1e-9);
        assert!((c.different_view_probability(10_000) - 0.08).abs() < 1e-9);
    }
}
