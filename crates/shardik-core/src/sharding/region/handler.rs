//! The protocol handler: which concern each message from a coordinator or another region goes
//! to. The decisions themselves live with their concern (registration, routing, hosting,
//! hand-off).

use super::{Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// Handles a protocol message from `from` (a coordinator or another region).
    pub fn handle(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        msg: Protocol,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            return;
        }
        match msg {
            Protocol::RegisterAck => self.registered(from.clone(), view, out),
            Protocol::CoordinatorStarted { .. } => self.coordinator_started(now, from, view, out),
            Protocol::ShardHome { shard, region } => self.shard_home(now, shard, region, view, out),
            Protocol::ShardHomes { homes } => {
                for (region, shards) in homes {
                    for shard in shards {
                        self.shard_home(now, shard, region.clone(), view, out);
                    }
                }
            }
            Protocol::HostShard { shard, predecessor } => {
                self.host_shard(now, from, shard, predecessor, view, out)
            }
            Protocol::BeginHandOff { shard } if view.is_preparing_for_shutdown() => {
                // Not acknowledged, as the reference does: no shard moves while the cluster
                // prepares for a full shutdown. A hand-off asked for before this node saw the
                // preparation times out at the coordinator, and the shard stays where it is.
                let _ = shard;
            }
            Protocol::BeginHandOff { shard } => self.begin_hand_off(from, shard, out),
            Protocol::HandOff {
                shard,
                drained_from,
            } => self.hand_off(now, from, shard, drained_from, view, out),
            Protocol::ShardsRevoked { shards } => self.shards_revoked(from, shards, view, out),
            Protocol::HandOffDrained { shard } => self.hand_off_drained(from, shard, out),
            Protocol::RoutingHere { shard, nonce } => self.routing_here(from, &shard, nonce),
            Protocol::NotHere { shard, nonce } => self.not_here(from, &shard, nonce),
            Protocol::HandOverDone { shard } => self.hand_over_done(now, from, shard, out),
            // Messages for the coordinator never reach a region's handler.
            Protocol::Register { .. }
            | Protocol::GetShardHome { .. }
            | Protocol::BeginHandOffAck { .. }
            | Protocol::ShardStopped { .. }
            | Protocol::GracefulShutdownReq
            | Protocol::RegionStopped
            | Protocol::ShardStarted { .. }
            | Protocol::SilentHomes { .. } => {}
            // Answered by a node, not a region: `KindNode` handles it.
            Protocol::KindNotStarted { .. } => {}
        }
    }
}
