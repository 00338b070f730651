//! What goes into the membership core and what comes out: the [`Input`]s and [`Command`]s
//! it is fed, and the [`Effect`]s it emits, with the reasons they carry ([`ShutdownReason`],
//! [`DropReason`], [`CommandError`]).
//!
//! Kept apart from the parent module, which holds the core itself, so that every part of the
//! core (each sibling file), and the lease holder in `sbr_lease.rs` that the core keeps in a
//! field, can name them without importing the core.

use crate::address::{Address, UniqueAddress};
use crate::lease::{LeaseAnswer, LeaseLoss, LeaseRequest};
use crate::membership::events::ClusterEvent;
use crate::membership::messages::Message;
use crate::membership::sbr::SbrAction;
use crate::time::Instant;

/// An input to the membership core.
#[derive(Clone, Debug)]
pub enum Input {
    /// A message from the network, with the peer that sent it and the instant it was
    /// received (before any queueing), so that full gossip that waited too long can be
    /// dropped (`gossip-time-to-live`).
    Message {
        /// The decoded message.
        msg: Message,
        /// The incarnation the connection authenticated (its certificate's host with TLS, the
        /// address of its handshake without): who sent it, whatever the message says. What it
        /// may say is checked against this (`senders.rs`).
        from: UniqueAddress,
        /// When the transport received it.
        received_at: Instant,
    },
    /// A local command (from the API, the management routes or the runtime).
    Command(Command),
    /// The store's answer to [`Effect::SbrLease`], a call on lease-majority's lease
    /// (`sbr_lease.rs`). A call that failed or took longer than `lease-operation-timeout` is
    /// [`LeaseAnswer::Failed`] (an answer that comes later than that counts as one anyway).
    SbrLeaseAnswered {
        /// The `id` of the request answered.
        id: u64,
        /// What the store said.
        answer: LeaseAnswer,
    },
    /// The runtime dialled `dialled` and the node that accepted the connection is `node`
    /// (its handshake reply named it). Told whenever that differs from `dialled`: a seed named
    /// by an alias (`seeds.svc:2552`) or by another of its addresses (an IP where its identity
    /// is a name). While joining, answers from `node` then count as answers from the seed
    /// configured as `dialled` (`seed_aliases.rs`); anything else ignores it.
    PeerIdentified {
        /// The address this node dialled (a configured seed or join target).
        dialled: Address,
        /// The incarnation that answered there.
        node: UniqueAddress,
    },
    /// The runtime's connection attempt to `address` was refused: nothing listens on that
    /// port, so the process of the member there is gone (a process that is merely slow, paused
    /// or cut off by the network does not refuse; it is silent). The member there is marked
    /// unreachable from this node at once instead of after the failure detector's silence, and
    /// stays so until it answers a heartbeat again (`failure_detection.rs`).
    PeerRefused {
        /// The address dialled.
        address: Address,
    },
}

/// A local command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Join through these seed nodes (the first seed may form a new cluster).
    JoinSeedNodes(Vec<Address>),
    /// Join this node directly (`self` forms a new cluster).
    Join(Address),
    /// Mark the member at this address Leaving.
    Leave(Address),
    /// Mark the member at this address Down.
    Down(Address),
    /// Prepare for a full cluster shutdown (Akka's `prepareForFullClusterShutdown`): every Up
    /// member is marked PreparingForShutdown, and the leader moves them to ReadyForShutdown
    /// once every member has seen it. From then on no member is moved Up, no joiner is let
    /// in, and sharding moves no shard (`full_shutdown.rs`). Any member may start it.
    PrepareForFullClusterShutdown,
    /// This node's exit tasks are done: confirm the exit and stop.
    ExitingCompleted,
}

/// Why the node stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownReason {
    /// It left gracefully and was told it is Exiting.
    Left,
    /// It was downed (by the split-brain resolver or an operator).
    Downed,
    /// The cluster it tried to join refused its configuration.
    IncompatibleConfig(String),
    /// The cluster removed it while it was unreachable.
    Removed,
    /// It was still joining when every other member of the cluster it had joined was downed
    /// (they failed, and new incarnations of them asked to join): rather than lead a cluster
    /// of its own beside the one those incarnations form, it stopped. Start it again to join.
    Orphaned,
    /// It stopped at once, without a graceful leave: it was asked to leave before it was ever
    /// a member (there was nothing to hand off), or asked a second time while leaving (what
    /// it had not handed off yet was not).
    Stopped,
    /// The process was asked to stop a second time (SIGTERM or SIGINT) while the node was
    /// leaving, and [`run_until_signal`](https://docs.rs/shardik/latest/shardik/struct.Node.html#method.run_until_signal)
    /// returned at once, without waiting for the leave to end: what had not been handed off
    /// was not. The process should end now ([`exit_code`](Self::exit_code) 130, as shells
    /// report 128 + SIGINT).
    Interrupted,
}

impl ShutdownReason {
    /// The exit code a process that ran only this node should end with: 0 after a graceful
    /// leave or a stop it was asked for, 3 when the cluster downed or removed it (or it stopped rather than lead a
    /// cluster of its own), 4 when the cluster refused its configuration. (2 is left for a
    /// node that could not start.) A supervisor can tell "restart me" (3) from "fix my
    /// configuration" (4). 130 when a second signal cut a leave short.
    pub fn exit_code(&self) -> u8 {
        match self {
            ShutdownReason::Left | ShutdownReason::Stopped => 0,
            ShutdownReason::Downed | ShutdownReason::Removed | ShutdownReason::Orphaned => 3,
            ShutdownReason::IncompatibleConfig(_) => 4,
            ShutdownReason::Interrupted => 130,
        }
    }
}

/// Why an input was dropped (each counted and logged by the runtime).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The sender is not a member this node knows.
    UnknownSender,
    /// This node observes the sender as unreachable.
    UnreachableSender,
    /// The message was meant for another incarnation at this address.
    WrongIncarnation,
    /// The gossip does not contain this node.
    NotInGossip,
    /// Full gossip waited longer than `gossip-time-to-live`.
    StaleGossip,
    /// This node is not (yet or any more) a member able to handle it.
    NotAMember,
    /// A join from an address that was removed (tombstoned) or whose old incarnation is still present.
    JoinRefused,
    /// Not expected in the current phase (a late ack, a duplicate welcome, a `NotKnown`
    /// before a join retry is due).
    Unexpected,
    /// The sender is an incarnation this cluster removed; it was told so.
    Quarantined,
    /// The message names another sender than the peer its connection authenticated.
    SenderMismatch,
    /// The sender may not say this: only members may gossip, heartbeat, leave, down or
    /// quarantine, and only the nodes this node asked may answer its join (`senders.rs`).
    NotFromMember,
    /// A `Join` while the cluster prepares for a full shutdown: nobody new is let in.
    PreparingForShutdown,
}

impl DropReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::UnknownSender => "unknown-sender",
            DropReason::UnreachableSender => "unreachable-sender",
            DropReason::WrongIncarnation => "wrong-incarnation",
            DropReason::NotInGossip => "not-in-gossip",
            DropReason::StaleGossip => "stale-gossip",
            DropReason::NotAMember => "not-a-member",
            DropReason::JoinRefused => "join-refused",
            DropReason::Unexpected => "unexpected",
            DropReason::Quarantined => "quarantined",
            DropReason::SenderMismatch => "sender-mismatch",
            DropReason::NotFromMember => "not-from-member",
            DropReason::PreparingForShutdown => "preparing-for-shutdown",
        }
    }
}

/// Why a local command could not be carried out. Nothing changed when one is reported.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// No member has that address; check the address (host:port) against `GET /cluster/members`.
    #[error("no member at {0}")]
    UnknownMember(Address),
    /// The node already joined or is joining; leave first.
    #[error("already joining or a member")]
    AlreadyJoining,
    /// The node is not a member yet (or no more), so it cannot change membership.
    #[error("this node is not a member")]
    NotAMember,
    /// The seed node list was empty.
    #[error("no seed nodes given")]
    NoSeeds,
}

/// Something the runtime must do.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Send `msg` to the node listening at `to`.
    Send {
        /// Destination address.
        to: Address,
        /// The message.
        msg: Message,
    },
    /// Publish a cluster event.
    Event(ClusterEvent),
    /// An input was dropped.
    Dropped {
        /// Why.
        reason: DropReason,
        /// Which message kind.
        kind: &'static str,
    },
    /// A local command failed.
    CommandFailed(CommandError),
    /// This node is Exiting: run exit tasks, then send [`Command::ExitingCompleted`].
    SelfExiting,
    /// The node must stop.
    Shutdown(ShutdownReason),
    /// A joiner's configuration differs from this member's (`compat.rs`): log the
    /// differences (WARN) and count them. The joiner was refused with `enforce-on-join` on,
    /// and let in with it off.
    JoinIncompatible {
        /// The joining incarnation.
        joiner: UniqueAddress,
        /// The message that carried its configuration: `"init-join"` or `"join"`.
        via: &'static str,
        /// One sentence per difference, each naming the key and both values.
        differences: Vec<String>,
        /// Whether it was refused.
        refused: bool,
    },
    /// The split-brain resolver acted: always an [`SbrAction::Down`], a decision the core has
    /// already carried out (for logs and metrics). Its lease calls are
    /// [`Effect::SbrLease`]s.
    Sbr(SbrAction),
    /// A call on lease-majority's lease for the driver to make on the store, as this node
    /// (its `address#uid`), each bounded by `lease-operation-timeout`; acquisitions and
    /// renewals are answered with [`Input::SbrLeaseAnswered`] quoting the request's `id`, a
    /// release is not answered. Calls must reach the store in the order they are emitted.
    SbrLease(LeaseRequest<()>),
    /// lease-majority's lease, held by this node, is lost: a renewal was refused, or none
    /// succeeded before the holder's deadline (for logs and metrics).
    SbrLeaseLost(LeaseLoss),
    /// This node has asked to join for `waited` (at least `seed-node-timeout`) and is not a
    /// member yet: log it (WARN) with what is known of each seed. Repeated with back-off
    /// while it lasts (`unanswered_seeds.rs`).
    SeedsUnanswered {
        /// The seeds asked, as configured (or the node a `Join` went to, without seeds).
        seeds: Vec<Address>,
        /// Rounds of asking so far.
        attempts: u32,
        /// Since the first attempt.
        waited: std::time::Duration,
    },
    /// This node has seen the cluster start to prepare for a full shutdown (reported once
    /// per incarnation, for the runtime's log and metric).
    PreparingForFullShutdown,
}
