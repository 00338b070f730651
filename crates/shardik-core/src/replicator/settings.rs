//! The replicator's settings, with the reference's defaults.

use std::time::Duration;

/// How a replicator paces its gossip, deltas and notifications.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicatorSettings {
    /// How often a replicator compares digests with one other node (`gossip-interval`, 2 s).
    pub gossip_interval: Duration,
    /// How often deltas of local changes go out: a fifth of the gossip interval, at least
    /// 200 ms (the reference's rule).
    pub delta_interval: Duration,
    /// How often subscribers hear of changes (`notify-subscribers-interval`, 500 ms).
    pub notify_subscribers_interval: Duration,
    /// Whether local changes travel as deltas (`delta-crdt.enabled`, on); off, they spread
    /// by gossip and writes only.
    pub delta_crdt_enabled: bool,
    /// How many changes of one key one node's pending delta may gather before it is dropped
    /// and the key left to gossip (`delta-crdt.max-delta-size`, 50).
    pub max_delta_size: usize,
    /// The most entry bytes one gossip message carries (a bucket is never split, so a
    /// message may exceed it by one bucket).
    pub max_gossip_bytes: usize,
    /// How often a replica runs a round of pruning (`pruning-interval`, 120 s).
    pub pruning_interval: Duration,
    /// How long, counted only while every node is reachable, a removed replica's data may
    /// still be spreading before the leader starts pruning it (`max-pruning-dissemination`,
    /// 300 s).
    pub max_pruning_dissemination: Duration,
    /// How long a performed pruning's marker is kept, stripping the removed replica's data
    /// from every merge (`pruning-marker-time-to-live`, 6 h). A replica away longer than this
    /// must come back empty, or its old copies would count the pruned data twice.
    pub pruning_marker_time_to_live: Duration,
    /// Faults to inject, for the simulator's tests of its own checkers only; none by default.
    pub faults: DeliberateFaults,
}

/// Deliberate faults, so that the simulator can show its checkers catch them. Never set one
/// outside such a test.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliberateFaults {
    /// A write counts as acknowledged one reply short of its consistency.
    pub acknowledge_one_reply_short: bool,
    /// Merges keep a pruned replica's data that old copies bring back (pruning's safety rule
    /// skipped).
    pub skip_pruning_safety_rule: bool,
}

impl Default for ReplicatorSettings {
    fn default() -> Self {
        let gossip_interval = Duration::from_secs(2);
        ReplicatorSettings {
            gossip_interval,
            delta_interval: (gossip_interval / 5).max(Duration::from_millis(200)),
            notify_subscribers_interval: Duration::from_millis(500),
            delta_crdt_enabled: true,
            max_delta_size: 50,
            max_gossip_bytes: 512 * 1024,
            pruning_interval: Duration::from_secs(120),
            max_pruning_dissemination: Duration::from_secs(300),
            pruning_marker_time_to_live: Duration::from_secs(6 * 3600),
            faults: DeliberateFaults::default(),
        }
    }
}
