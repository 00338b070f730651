//! Messages nodes exchange for membership: the reference's set (join through seeds, welcome,
//! leave, down, heartbeats, gossip status and envelope, exit confirmation) plus `Quarantined`
//! and `NotKnown`, a member's two answers to an incarnation it does not have as a member.
//!
//! These are the decoded forms the core consumes and produces; the wire layer maps them to
//! protobuf frames. Gossip travels behind an `Arc` so that the simulator and the runtime can
//! fan one state out to many peers without copying it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::gossip::Gossip;
use super::vclock::VectorClock;
use crate::address::{Address, UniqueAddress};

/// The join-relevant configuration a joiner sends with `InitJoin` and `Join`: what the
/// accepting member checks (`compat.rs`).
#[derive(Clone, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct JoinConfig {
    /// The cluster's name; nodes of different names never join each other.
    pub cluster_name: String,
    /// The values of the keys the joiner's checkers name (for example
    /// `cluster.sharding.number-of-shards`); the member's checkers compare them with its own.
    pub must_match: BTreeMap<String, String>,
}

/// The verdict in an [`Message::InitJoinAck`].
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum ConfigCheck {
    /// The joiner may join.
    Compatible,
    /// The joiner's configuration conflicts; the text says how.
    Incompatible(String),
}

/// A membership protocol message.
#[derive(Clone, PartialEq, Debug)]
pub enum Message {
    /// "Is anyone there, and could I join you?" — sent by a joining node to the seed nodes.
    InitJoin {
        /// The asking node.
        from: UniqueAddress,
        /// Its join-relevant configuration.
        config: JoinConfig,
    },
    /// "I am a member; here is whether your configuration fits."
    InitJoinAck {
        /// The answering member.
        from: UniqueAddress,
        /// The compatibility verdict.
        check: ConfigCheck,
    },
    /// "I am not (yet) a member of any cluster."
    InitJoinNack {
        /// The answering node.
        from: UniqueAddress,
    },
    /// Request to be added as a Joining member.
    Join {
        /// The joining incarnation.
        node: UniqueAddress,
        /// Its roles.
        roles: BTreeSet<String>,
        /// Its application version.
        app_version: String,
        /// Its join-relevant configuration, which the receiving member checks. `None` from a
        /// node of a version before join checks on `Join` (see `compat.rs` and
        /// `node/joining.rs` for how such a join is judged).
        config: Option<Box<JoinConfig>>,
    },
    /// Reply to [`Message::Join`]: the member found the joiner's configuration incompatible
    /// (with `enforce-on-join` on); the joiner stops.
    JoinRefused {
        /// The member that refused.
        from: UniqueAddress,
        /// The refused incarnation; another incarnation at that address ignores it.
        to: UniqueAddress,
        /// The differences, each naming the key and both values.
        reason: String,
    },
    /// Reply to [`Message::Join`]: you are in; here is the state.
    Welcome {
        /// The member that added the joiner.
        from: UniqueAddress,
        /// The state including the joiner.
        gossip: Arc<Gossip>,
    },
    /// Ask the receiver to mark `address` Leaving.
    Leave {
        /// The node that should leave.
        address: Address,
    },
    /// Ask the receiver to mark `address` Down.
    Down {
        /// The node to down.
        address: Address,
    },
    /// An exiting node finished its exit tasks; the leader may remove it without waiting for
    /// it to become unreachable.
    ExitingConfirmed {
        /// The exiting node.
        node: UniqueAddress,
    },
    /// The small form of gossip: version and seen digest.
    GossipStatus {
        /// Sender.
        from: UniqueAddress,
        /// Sender's version.
        version: VectorClock,
        /// Digest of the sender's seen set.
        seen_digest: u64,
    },
    /// The full state.
    GossipEnvelope {
        /// Sender.
        from: UniqueAddress,
        /// Intended incarnation; another incarnation at that address drops it.
        to: UniqueAddress,
        /// The state.
        gossip: Arc<Gossip>,
    },
    /// Failure-detector heartbeat.
    Heartbeat {
        /// Sender.
        from: UniqueAddress,
        /// Sequence number, echoed in the response.
        seq: u64,
    },
    /// "You were removed from the cluster": sent to a removed incarnation that is still
    /// talking, so that it stops instead of living on in a cluster of its own.
    Quarantined {
        /// The member that noticed.
        from: UniqueAddress,
        /// The removed incarnation.
        to: UniqueAddress,
    },
    /// "I do not know you": a member's answer to gossip from an incarnation that is neither
    /// among its members nor tombstoned. Sent only by a member that would welcome a `Join`
    /// from it. A Joining node told so joins again through that member (see
    /// `node/not_known.rs`): the member that welcomed it may have died before telling anyone.
    NotKnown {
        /// The member that does not know it.
        from: UniqueAddress,
        /// The incarnation it does not know.
        to: UniqueAddress,
    },
    /// Heartbeat response; what the detector actually records.
    HeartbeatRsp {
        /// The responder.
        from: UniqueAddress,
        /// Echoed sequence number.
        seq: u64,
    },
}

impl Message {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::InitJoin { .. } => "init-join",
            Message::InitJoinAck { .. } => "init-join-ack",
            Message::InitJoinNack { .. } => "init-join-nack",
            Message::Join { .. } => "join",
            Message::JoinRefused { .. } => "join-refused",
            Message::Welcome { .. } => "welcome",
            Message::Leave { .. } => "leave",
            Message::Down { .. } => "down",
            Message::ExitingConfirmed { .. } => "exiting-confirmed",
            Message::GossipStatus { .. } => "gossip-status",
            Message::GossipEnvelope { .. } => "gossip",
            Message::Heartbeat { .. } => "heartbeat",
            Message::HeartbeatRsp { .. } => "heartbeat-rsp",
            Message::Quarantined { .. } => "quarantined",
            Message::NotKnown { .. } => "not-known",
        }
    }

    /// The incarnation that sent the message, when the message names it.
    pub fn sender(&self) -> Option<&UniqueAddress> {
        match self {
            Message::InitJoin { from, .. }
            | Message::InitJoinAck { from, .. }
            | Message::InitJoinNack { from }
            | Message::Welcome { from, .. }
            | Message::GossipStatus { from, .. }
            | Message::GossipEnvelope { from, .. }
            | Message::Heartbeat { from, .. }
            | Message::HeartbeatRsp { from, .. }
            | Message::Quarantined { from, .. }
            | Message::NotKnown { from, .. }
            | Message::JoinRefused { from, .. } => Some(from),
            Message::Join { node, .. } | Message::ExitingConfirmed { node } => Some(node),
            Message::Leave { .. } | Message::Down { .. } => None,
        }
    }

    /// Whether the message belongs on the control lane that must never wait behind user traffic.
    pub fn is_heartbeat(&self) -> bool {
        matches!(
            self,
            Message::Heartbeat { .. } | Message::HeartbeatRsp { .. }
        )
    }
}
