//! The messages regions and the coordinator exchange for one entity kind (digest §1.2).
//!
//! A region is identified by the [`UniqueAddress`] of its node: there is one region (or proxy)
//! per entity kind per node, so the node's incarnation names it, and a restarted node is a new
//! region. The entity kind itself travels beside these messages on the wire, not inside them.
//!
//! Compared with the reference, three messages are new for the hand-off mode that forwards
//! instead of dropping (see [`HandOffMode`](super::region::HandOffMode)):
//! [`Protocol::HandOffDrained`], [`Protocol::HandOverDone`], and the `predecessor` of
//! [`Protocol::HostShard`]; [`Protocol::CoordinatorStarted`] replaces watching the
//! coordinator actor, and [`Protocol::KindNotStarted`] lets a node that never started the kind
//! say so instead of holding a new coordinator's allocation back.

use crate::membership::UniqueAddress;

use super::shard_id::ShardId;

/// One sharding protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Protocol {
    // ---- region → coordinator ----
    /// A region (or, with `proxy`, a proxy-only region) registers. `hosted` lists the shards
    /// it runs right now: a coordinator that took over after a crash rebuilds its allocation
    /// table from these reports (see `docs/ARCHITECTURE.md`). Retried until acknowledged.
    Register {
        /// Shards running in that region (always empty for a proxy).
        hosted: Vec<ShardId>,
        /// A proxy-only region: routes messages, never hosts shards.
        proxy: bool,
    },
    /// Where does this shard live? The coordinator may stay silent (not ready, shard being
    /// handed off); the region asks again every `retry-interval`.
    GetShardHome {
        /// The shard.
        shard: ShardId,
    },
    /// The region forgot the shard's home and buffers its messages from now on.
    BeginHandOffAck {
        /// The shard.
        shard: ShardId,
        /// The region sent [`Protocol::HandOffDrained`] to the shard's old home, which must
        /// wait for it before stopping the shard (forwarding mode only).
        drained: bool,
    },
    /// A shard has stopped (hand-off done) in the sending region.
    ShardStopped {
        /// The shard.
        shard: ShardId,
        /// The region holds messages for the shard that it will forward to the next home
        /// (forwarding mode): the next home must wait for its [`Protocol::HandOverDone`]. When
        /// false, nothing from other senders is pending there and the next home starts at once.
        forwarding: bool,
    },
    /// The sending region is shutting down: hand off all its shards.
    GracefulShutdownReq,
    /// The sending region has stopped; forget it at once.
    RegionStopped,
    /// The region has started a shard the coordinator asked it to host.
    ShardStarted {
        /// The shard.
        shard: ShardId,
    },

    // ---- coordinator → region ----
    /// The registration was accepted; the sender is the coordinator.
    RegisterAck,
    /// A new coordinator runs on the sender (it started, or started again after losing its
    /// lease): a region registered with the sender's node registers again, because the new
    /// coordinator knows nothing of the old one's registrations. Sent when it starts, to each
    /// member that becomes expected later, and again every rebalance interval until every
    /// expected region has registered or answered [`Protocol::KindNotStarted`].
    CoordinatorStarted {
        /// Names this coordinator incarnation (never 0; 0 from a version that sent none): a
        /// node that has not started the kind echoes it in [`Protocol::KindNotStarted`], so
        /// that only the incarnation that asked acts on the answer.
        epoch: u64,
    },

    // ---- node → coordinator or region ----
    /// The sending node has no region or proxy of this kind (the application never called
    /// `init` for it there). Sent by the node itself, not by a region, in answer to a
    /// [`Protocol::CoordinatorStarted`] (echoing its `epoch`: the coordinator then counts the
    /// sender as heard, with no shards) or to a [`Protocol::Register`] (epoch 0: the region
    /// learns that the node it takes for the coordinator's cannot run one).
    KindNotStarted {
        /// The epoch of the `CoordinatorStarted` answered, or 0.
        epoch: u64,
    },
    /// The shard lives in `region`.
    ShardHome {
        /// The shard.
        shard: ShardId,
        /// Its home.
        region: UniqueAddress,
    },
    /// Every known home, sent on registration so a region does not have to ask shard by shard.
    ShardHomes {
        /// Each region with shards it hosts.
        homes: Vec<(UniqueAddress, Vec<ShardId>)>,
    },
    /// Start hosting this shard. Resent until acknowledged with [`Protocol::ShardStarted`].
    HostShard {
        /// The shard.
        shard: ShardId,
        /// The region that hosted it before a forwarding hand-off: the new home delivers
        /// messages from other senders only after the predecessor's [`Protocol::HandOverDone`],
        /// so per-sender order survives the move.
        predecessor: Option<UniqueAddress>,
    },
    /// Stop routing to this shard's home: forget it and buffer until told the new one.
    BeginHandOff {
        /// The shard.
        shard: ShardId,
    },
    /// Stop the shard (to its home region).
    HandOff {
        /// The shard.
        shard: ShardId,
        /// Regions that sent [`Protocol::HandOffDrained`] (forwarding mode): every message they
        /// routed here before is in front of their marker, so once all markers are in, nothing
        /// more is in flight to this region for the shard.
        drained_from: Vec<UniqueAddress>,
    },

    /// The coordinator gave these shards other homes without a hand-off: the receiving
    /// region's node went silent and the store said the shards' leases had lapsed (see
    /// `coordinator/takeover.rs`). The region stops hosting them (their entities stopped when
    /// the lease was lost, or stop now) and answers each with
    /// `ShardStopped { forwarding: false }`. Resent until answered, while the region's node
    /// is a member.
    ShardsRevoked {
        /// The shards.
        shards: Vec<ShardId>,
    },

    // ---- region → region ----
    /// From a region that was routing to the shard's old home: nothing more follows from it.
    HandOffDrained {
        /// The shard.
        shard: ShardId,
    },
    /// From the shard's old home to its new one, after the messages it had buffered during the
    /// hand-off: the new home may now deliver what it held back from everyone else.
    HandOverDone {
        /// The shard.
        shard: ShardId,
    },
    /// Under shard leases, from a region that forwards the shard's messages to the receiver,
    /// before the first of them since it learnt the receiver as the shard's home (see
    /// `region/routing_order.rs`).
    RoutingHere {
        /// The shard.
        shard: ShardId,
        /// The nonce of the receiver's last [`Protocol::NotHere`] for the shard, or 0.
        nonce: u64,
    },
    /// The receiver's message for the shard was dropped here: the shard's lease changed hands
    /// behind this node's back, and the message may have been sent before the receiver heard
    /// of it. Forget this node as the home, ask the coordinator, and quote `nonce` when routing
    /// here again.
    NotHere {
        /// The shard.
        shard: ShardId,
        /// Names the mark: quoted in the next [`Protocol::RoutingHere`] to this node.
        nonce: u64,
    },
    /// Under the lease takeover, from a region to the coordinator, just before its `Register`:
    /// the homes it has cached on members that are silent (unreachable, not Down). A
    /// coordinator standing in for a silent oldest node (`ShardingView::stand_in`) rebuilt its
    /// table without those members, whose regions cannot register; with this it knows their
    /// shards, and moves each once the store says the silent member's own lease on it has
    /// lapsed (`coordinator/takeover.rs`).
    SilentHomes {
        /// Each silent member's region and the shards cached there.
        homes: Vec<(UniqueAddress, Vec<ShardId>)>,
    },
}

impl Protocol {
    /// Whether the message is for the coordinator (the rest are for regions, except
    /// [`Protocol::KindNotStarted`], which may be for either: see `KindNode`).
    pub fn is_for_coordinator(&self) -> bool {
        matches!(
            self,
            Protocol::Register { .. }
                | Protocol::GetShardHome { .. }
                | Protocol::BeginHandOffAck { .. }
                | Protocol::ShardStopped { .. }
                | Protocol::GracefulShutdownReq
                | Protocol::RegionStopped
                | Protocol::ShardStarted { .. }
                | Protocol::SilentHomes { .. }
        )
    }

    /// A short name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Protocol::Register { proxy: false, .. } => "Register",
            Protocol::Register { proxy: true, .. } => "RegisterProxy",
            Protocol::GetShardHome { .. } => "GetShardHome",
            Protocol::BeginHandOffAck { .. } => "BeginHandOffAck",
            Protocol::ShardStopped { .. } => "ShardStopped",
            Protocol::GracefulShutdownReq => "GracefulShutdownReq",
            Protocol::RegionStopped => "RegionStopped",
            Protocol::ShardStarted { .. } => "ShardStarted",
            Protocol::RegisterAck => "RegisterAck",
            Protocol::CoordinatorStarted { .. } => "CoordinatorStarted",
            Protocol::KindNotStarted { .. } => "KindNotStarted",
            Protocol::ShardHome { .. } => "ShardHome",
            Protocol::ShardHomes { .. } => "ShardHomes",
            Protocol::HostShard { .. } => "HostShard",
            Protocol::BeginHandOff { .. } => "BeginHandOff",
            Protocol::HandOff { .. } => "HandOff",
            Protocol::ShardsRevoked { .. } => "ShardsRevoked",
            Protocol::HandOffDrained { .. } => "HandOffDrained",
            Protocol::HandOverDone { .. } => "HandOverDone",
            Protocol::RoutingHere { .. } => "RoutingHere",
            Protocol::NotHere { .. } => "NotHere",
            Protocol::SilentHomes { .. } => "SilentHomes",
        }
    }
}
