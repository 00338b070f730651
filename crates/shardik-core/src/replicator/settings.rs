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
        }
    }
}
