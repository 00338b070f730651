//! The membership state machine of one node: seed joining, gossip, leader actions, failure
//! detection and downing, fed with `(now, input)` and emitting effects.
//!
//! # Calling contract
//! - Call [`Membership::handle`] for every network message or local command and
//!   [`Membership::handle_timeout`] when [`Membership::poll_timeout`] is due, then drain the
//!   effects buffer: send the [`Effect::Send`]s, publish the events, count and log the drops.
//! - `now` never decreases between calls. Spurious `handle_timeout` calls are harmless.
//! - After [`Effect::Shutdown`] the node is stopped: later inputs are ignored.
//! - After [`Effect::SelfExiting`], run the node's exit tasks (shard hand-off) and then send
//!   [`Command::ExitingCompleted`].
//!
//! # Layout
//! This file holds the type and the calling contract's entry points (`handle`,
//! `handle_timeout`, `poll_timeout`); its inputs and effects are in `io.rs`, and the state
//! that some concerns keep in its fields in `feature_state.rs`. Each concern is one
//! `impl Membership` block in a sibling file: `joining.rs` (seed nodes, join, welcome), `join_compat.rs` (judging a joiner's
//! configuration), `exchange.rs` (gossip
//! exchange and state replacement), `leader.rs` (leader actions), `failure_detection.rs`
//! (heartbeats, reachability verdicts), `downing.rs` (downing, split-brain resolver),
//! `sbr_lease.rs` (the holder of lease-majority's lease, a `LeaseKeeper`),
//! `exiting.rs` (leave, exit, removal of this node), `not_known.rs` (telling a stranger it
//! is not known here, and joining again when told so), `seed_aliases.rs` (seeds named by
//! another name or address than the identity of the node that answers there),
//! `unanswered_seeds.rs` (reporting seeds that do not let this node in) and
//! `full_shutdown.rs` (preparing for a full cluster shutdown).

mod downing;
mod exchange;
mod exiting;
mod failure_detection;
mod feature_state;
mod freeze;
mod full_shutdown;
mod io;
mod join_compat;
mod joining;
mod leader;
mod not_known;
mod sbr_lease;
mod seed_aliases;
mod senders;
#[cfg(test)]
mod tests;
mod unanswered_seeds;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::MembershipConfig;
use super::gossip::Gossip;
use super::member::{Member, MemberStatus};
use super::messages::{JoinConfig, Message};
use super::ring::HeartbeatSenderState;
use super::sbr::SplitBrainResolver;
use crate::address::{Address, UniqueAddress};
use crate::time::Instant;

use feature_state::{Derived, FreezeCheck, UnansweredSeeds};
pub use io::{Command, CommandError, DropReason, Effect, Input, ShutdownReason};

#[derive(Clone, Debug)]
enum Phase {
    /// Not joined and not trying.
    Idle,
    /// Asking seed nodes (`InitJoin`) who can take us.
    Seeding {
        seeds: Vec<Address>,
        /// When seeding began (a first seed found to be this node under an alias forms the
        /// cluster `seed-node-timeout` after it).
        started_at: Instant,
        /// Set when self is the first seed: form a new cluster at this instant if nobody answered.
        form_cluster_at: Option<Instant>,
        nacks: BTreeSet<Address>,
    },
    /// Sent `Join`, waiting for `Welcome`.
    Joining {
        target: Address,
        seeds: Vec<Address>,
        give_up_at: Instant,
    },
    /// A member (any status).
    Member,
    /// Stopped for good.
    Stopped,
}

impl Phase {
    /// Whether a node may go from this phase to `next`: it seeds and joins (again, after a
    /// join that went unanswered) until it is a member, a member only stops, and a stopped node
    /// stays stopped (a node that comes back is a new incarnation, with a core of its own).
    fn may_become(&self, next: &Phase) -> bool {
        match self {
            Phase::Idle | Phase::Seeding { .. } | Phase::Joining { .. } => true,
            Phase::Member => matches!(next, Phase::Stopped),
            Phase::Stopped => false,
        }
    }
}

/// Counters the runtime exports as metrics and the simulator reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Full gossips sent.
    pub gossip_sent: u64,
    /// Gossip statuses sent.
    pub gossip_status_sent: u64,
    /// Full gossips received and processed.
    pub gossip_received: u64,
    /// Concurrent merges performed.
    pub merges: u64,
    /// Heartbeats sent.
    pub heartbeats_sent: u64,
    /// Inputs dropped.
    pub dropped: u64,
    /// `Join`s sent again by this node, a member still Joining, to a member that did not know
    /// it (see `node/not_known.rs`).
    pub rejoins: u64,
    /// Refused connections to members (`Input::PeerRefused`) taken as evidence that their
    /// process is gone.
    pub peers_refused: u64,
}

#[derive(Clone, Debug, Default)]
struct Timers {
    gossip: Option<Instant>,
    gossip_round: u8,
    leader: Option<Instant>,
    reaper: Option<Instant>,
    heartbeat: Option<Instant>,
    join: Option<Instant>,
}

/// This node's last `Join` sent again after a member said it does not know it.
#[derive(Clone, Debug)]
struct Rejoin {
    /// When it was sent (the next one waits `retry-unsuccessful-join-after`).
    sent_at: Instant,
    /// The member it went to, until its `Welcome` arrives; only that `Welcome` is merged.
    target: Option<UniqueAddress>,
}

/// One node's membership core. See the module docs for the calling contract.
pub struct Membership {
    cfg: MembershipConfig,
    self_node: UniqueAddress,
    join_config: JoinConfig,
    rng: ChaCha8Rng,
    phase: Phase,
    gossip: Arc<Gossip>,
    exiting_confirmed: BTreeSet<UniqueAddress>,
    exit_started: bool,
    heartbeat: HeartbeatSenderState,
    heartbeat_seq: u64,
    heartbeat_started: BTreeSet<UniqueAddress>,
    /// Members whose port refused a connection and that have not answered a heartbeat since:
    /// unreachable from this node whatever the failure detector's history says.
    refused: BTreeSet<UniqueAddress>,
    /// Set by a freeze, until the members it heartbeats answered again (`freeze.rs`).
    freeze_check: Option<FreezeCheck>,
    first_heartbeat_due: BTreeSet<(Instant, UniqueAddress)>,
    /// The member table the heartbeat ring was last synced with (shared, not a copy).
    ring_members: Arc<std::collections::BTreeMap<UniqueAddress, Member>>,
    ring_unreachable: BTreeSet<UniqueAddress>,
    /// Bumped whenever `gossip` is replaced; keys the `derived` cache.
    gossip_generation: u64,
    derived: Derived,
    sbr: Option<SplitBrainResolver>,
    /// lease-majority's lease (`sbr_lease.rs`); `None` under the other strategies.
    sbr_lease: Option<sbr_lease::SbrLeaseHolder>,
    timers: Timers,
    unconverged_leader_ticks: u32,
    stats: MembershipStats,
    /// When this node last became a member (a `NotKnown` counts only a while after it).
    member_since: Instant,
    rejoin: Option<Rejoin>,
    /// Incarnations whose `InitJoin` this member found compatible, and when: a `Join` without
    /// configuration (from a node of the version before joins carried it) is welcomed only
    /// from them. Bounded in size and age (`joining.rs`).
    init_join_checked: BTreeMap<UniqueAddress, Instant>,
    /// This node became a member through another node's `Welcome` (not by forming a cluster
    /// of its own); consulted only while it is not Up yet: see `orphaned_joiner` in
    /// `leader.rs`.
    joined_through_other: bool,
    /// Seeds and join targets dialled under another address than the identity of the node
    /// that answered there, with that identity's address (`seed_aliases.rs`). At most one
    /// entry per configured seed, plus a join target.
    seed_identities: std::collections::BTreeMap<Address, Address>,
    /// Set from the first join attempt until this node is a member (`unanswered_seeds.rs`).
    unanswered_seeds: Option<UnansweredSeeds>,
    /// This node has seen the cluster prepare for a full shutdown (a member
    /// PreparingForShutdown or ReadyForShutdown, or the command given here). It never goes
    /// back: the members that prepared leave one by one, and once the last of them is gone
    /// the state no longer says so, but a joiner must still not be let in (as the
    /// reference's flag, which is per node too).
    preparing_for_shutdown: bool,
}

impl Membership {
    /// A node that is not yet a member. `seed` fixes every random choice it will make.
    pub fn new(cfg: MembershipConfig, self_node: UniqueAddress, seed: u64, now: Instant) -> Self {
        let heartbeat = HeartbeatSenderState::new(
            self_node.clone(),
            cfg.failure_detector.monitored_by_nr_of_members,
            cfg.failure_detector.phi.clone(),
        );
        let sbr = cfg.downing.clone().map(|s| SplitBrainResolver::new(s, now));
        let sbr_lease = cfg
            .downing
            .as_ref()
            .and_then(|s| sbr_lease::SbrLeaseHolder::for_strategy(&s.strategy));
        let join_config = JoinConfig {
            cluster_name: cfg.cluster_name.clone(),
            must_match: cfg.join_compat.values(),
        };
        Membership {
            cfg,
            self_node,
            join_config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            phase: Phase::Idle,
            gossip: Arc::new(Gossip::default()),
            exiting_confirmed: BTreeSet::new(),
            exit_started: false,
            heartbeat,
            heartbeat_seq: 0,
            heartbeat_started: BTreeSet::new(),
            refused: BTreeSet::new(),
            freeze_check: None,
            first_heartbeat_due: BTreeSet::new(),
            ring_members: Arc::default(),
            ring_unreachable: BTreeSet::new(),
            gossip_generation: 1,
            derived: Derived::default(),
            sbr,
            sbr_lease,
            timers: Timers::default(),
            unconverged_leader_ticks: 0,
            stats: MembershipStats::default(),
            member_since: now,
            rejoin: None,
            init_join_checked: BTreeMap::new(),
            joined_through_other: false,
            seed_identities: std::collections::BTreeMap::new(),
            unanswered_seeds: None,
            preparing_for_shutdown: false,
        }
    }

    /// Makes this node a member of an established cluster whose state is `gossip` (which must
    /// contain this node), as if it had joined long ago. For simulations and benchmarks that
    /// start from a converged cluster of thousands of nodes without replaying its formation.
    pub fn start_as_member(&mut self, now: Instant, gossip: Arc<Gossip>) {
        assert!(
            gossip.has_member(&self.self_node),
            "the state must contain this node"
        );
        self.become_member(now);
        self.install_gossip(gossip);
        self.sync_heartbeat_ring(now);
    }

    /// Moves this node to phase `next` (debug builds check the move is allowed).
    fn enter(&mut self, next: Phase) {
        debug_assert!(
            self.phase.may_become(&next),
            "{}: phase {:?} -> {next:?}",
            self.self_node,
            self.phase
        );
        self.phase = next;
    }

    // ----- getters -----

    /// This incarnation.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// The latest gossip state this node holds.
    pub fn gossip(&self) -> &Arc<Gossip> {
        &self.gossip
    }

    /// This node as a member, once it is one.
    pub fn self_member(&self) -> Option<&Member> {
        self.gossip.member(&self.self_node)
    }

    /// This node's status (`None` before it joined or after it was removed).
    pub fn self_status(&self) -> Option<MemberStatus> {
        self.self_member().map(|m| m.status)
    }

    /// The leader as this node sees it.
    pub fn leader(&self) -> Option<UniqueAddress> {
        self.gossip.leader(&self.self_node)
    }

    /// Whether this node sees convergence.
    pub fn is_converged(&self) -> bool {
        self.gossip
            .convergence(&self.self_node, &self.exiting_confirmed)
    }

    /// Whether this node has seen the cluster prepare for a full shutdown.
    pub fn is_preparing_for_shutdown(&self) -> bool {
        self.preparing_for_shutdown
    }

    /// Whether the node has stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// Whether the node is a member (of any status).
    pub fn is_member(&self) -> bool {
        matches!(self.phase, Phase::Member)
    }

    /// The token of lease-majority's lease if this node holds it and counts on it at `now`.
    pub fn sbr_lease_token(&self, now: Instant) -> Option<u64> {
        self.sbr_lease.as_ref().and_then(|l| l.held(now))
    }

    /// Counters.
    pub fn stats(&self) -> &MembershipStats {
        &self.stats
    }

    /// The heartbeat sender state (ring, failure detectors), for metrics and inspection.
    pub fn heartbeat_state(&self) -> &HeartbeatSenderState {
        &self.heartbeat
    }

    /// The configuration in force.
    pub fn config(&self) -> &MembershipConfig {
        &self.cfg
    }

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_stopped() {
            return None;
        }
        let t = &self.timers;
        [
            t.gossip,
            t.leader,
            t.reaper,
            t.heartbeat,
            t.join,
            self.first_heartbeat_due.first().map(|(i, _)| *i),
            self.sbr_lease.as_ref().and_then(|l| l.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Handles one input.
    pub fn handle(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        if self.is_stopped() {
            return;
        }
        self.notice_freeze(now);
        match input {
            Input::Command(c) => self.handle_command(now, c, out),
            Input::Message {
                msg,
                from,
                received_at,
            } => self.handle_message(now, msg, &from, received_at, out),
            Input::SbrLeaseAnswered { id, answer } => self.sbr_lease_answered(now, id, answer, out),
            Input::PeerIdentified { dialled, node } => {
                self.peer_identified(now, dialled, node, out)
            }
            Input::PeerRefused { address } => self.peer_refused(now, &address, out),
        }
    }

    /// Fires every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.is_stopped() {
            return;
        }
        self.notice_freeze(now);
        // First the lease's timers: an acquisition not answered in time is the resolver's
        // answer before its own deadline for it, due at the same instant, is checked.
        self.sbr_lease_timeout(now, out);
        if self.is_stopped() {
            return;
        }
        if self.timers.join.is_some_and(|t| t <= now) {
            self.timers.join = None;
            self.join_tick(now, out);
        }
        while let Some((due, node)) = self.first_heartbeat_due.first().cloned() {
            if due > now {
                break;
            }
            self.first_heartbeat_due.pop_first();
            self.heartbeat.expected_first_heartbeat(&node, now);
        }
        if self.timers.heartbeat.is_some_and(|t| t <= now) {
            self.timers.heartbeat = Some(now + self.cfg.failure_detector.heartbeat_interval);
            self.heartbeat_tick(now, out);
        }
        if self.timers.reaper.is_some_and(|t| t <= now) {
            self.timers.reaper = Some(now + self.cfg.unreachable_nodes_reaper_interval);
            self.reap_unreachable(now, out);
        }
        if self.timers.gossip.is_some_and(|t| t <= now) {
            self.timers.gossip = Some(now + self.cfg.gossip_interval / 3);
            self.timers.gossip_round = (self.timers.gossip_round + 1) % 3;
            if self.timers.gossip_round == 0 || self.needs_speedup() {
                self.gossip_round(out);
            }
        }
        if let Some(due) = self.timers.leader.filter(|t| *t <= now) {
            self.timers.leader = Some(now + self.cfg.leader_actions_interval);
            // A tick this late means this node was frozen (a pause, a stalled process).
            self.note_stall(now - due);
            self.leader_tick(now, out);
        }
    }

    fn handle_command(&mut self, now: Instant, cmd: Command, out: &mut Vec<Effect>) {
        match cmd {
            Command::JoinSeedNodes(seeds) => {
                if !matches!(self.phase, Phase::Idle) {
                    return out.push(Effect::CommandFailed(CommandError::AlreadyJoining));
                }
                let mut uniq: Vec<Address> = Vec::new();
                for s in seeds {
                    if !uniq.contains(&s) {
                        uniq.push(s);
                    }
                }
                if uniq.is_empty() {
                    return out.push(Effect::CommandFailed(CommandError::NoSeeds));
                }
                self.start_seeding(now, uniq, out);
            }
            Command::Join(address) => {
                if !matches!(self.phase, Phase::Idle) {
                    return out.push(Effect::CommandFailed(CommandError::AlreadyJoining));
                }
                if *self.identity_of(&address) == self.self_node.address {
                    self.join_self(now, out);
                } else {
                    self.send_join(now, address, Vec::new(), out);
                }
            }
            Command::Leave(address) => match self.member_at(&address) {
                Some(node) if self.is_member() => self.leaving(now, &node, out),
                Some(_) => out.push(Effect::CommandFailed(CommandError::NotAMember)),
                None => out.push(Effect::CommandFailed(CommandError::UnknownMember(address))),
            },
            Command::Down(address) => match self.member_at(&address) {
                Some(node) if self.is_member() => self.downing(now, &node, out),
                Some(_) => out.push(Effect::CommandFailed(CommandError::NotAMember)),
                None => out.push(Effect::CommandFailed(CommandError::UnknownMember(address))),
            },
            Command::PrepareForFullClusterShutdown => {
                if self.is_member() {
                    self.prepare_for_full_shutdown(now, out);
                } else {
                    out.push(Effect::CommandFailed(CommandError::NotAMember));
                }
            }
            Command::ExitingCompleted => self.exiting_completed(out),
        }
    }

    fn member_at(&self, address: &Address) -> Option<UniqueAddress> {
        self.gossip
            .members
            .keys()
            .find(|n| &n.address == address)
            .cloned()
    }

    fn drop_input(&mut self, reason: DropReason, msg: &Message, out: &mut Vec<Effect>) {
        self.stats.dropped += 1;
        out.push(Effect::Dropped {
            reason,
            kind: msg.kind(),
        });
    }

    /// Routes a network message to the concern that handles it, after three gates: a removed
    /// incarnation is told so instead, a sender may only say what `senders.rs` allows it, and
    /// full gossip that waited too long is dropped.
    fn handle_message(
        &mut self,
        now: Instant,
        msg: Message,
        from: &UniqueAddress,
        received_at: Instant,
        out: &mut Vec<Effect>,
    ) {
        if msg.sender().is_none_or(|named| named == from)
            && self.gossip.tombstones.contains_key(from)
        {
            // A removed incarnation still talks: tell it, so that it stops.
            let reply = Message::Quarantined {
                from: self.self_node.clone(),
                to: from.clone(),
            };
            self.drop_input(DropReason::Quarantined, &msg, out);
            return self.send(from.address.clone(), reply, out);
        }
        if let Some(reason) = self.sender_refusal(from, &msg) {
            return self.drop_input(reason, &msg, out);
        }
        match msg {
            Message::InitJoin {
                ref from,
                ref config,
            } => self.answer_init_join(now, from, config, out),
            Message::InitJoinAck {
                ref from,
                ref check,
            } => self.receive_init_join_ack(now, from, check, &msg, out),
            Message::InitJoinNack { ref from } => self.receive_init_join_nack(now, from, &msg, out),
            Message::Join { .. } => self.handle_join(now, &msg, out),
            Message::JoinRefused {
                ref from,
                ref to,
                ref reason,
            } => self.receive_join_refused(from, to, reason, &msg, out),
            Message::Welcome {
                ref from,
                ref gossip,
            } => self.receive_welcome(now, from, gossip, &msg, out),
            Message::Leave { ref address } => match self.member_at(address) {
                Some(node) if self.is_member() => self.leaving(now, &node, out),
                _ => self.drop_input(DropReason::NotAMember, &msg, out),
            },
            Message::Down { ref address } => match self.member_at(address) {
                Some(node) if self.is_member() => self.downing(now, &node, out),
                _ => self.drop_input(DropReason::NotAMember, &msg, out),
            },
            Message::ExitingConfirmed { ref node } => self.note_exiting_confirmed(node),
            Message::GossipStatus {
                ref from,
                ref version,
                seen_digest,
            } => self.receive_gossip_status(from, version, seen_digest, &msg, out),
            Message::GossipEnvelope {
                ref from,
                ref to,
                ref gossip,
            } => {
                if now.saturating_duration_since(received_at) > self.cfg.gossip_time_to_live {
                    return self.drop_input(DropReason::StaleGossip, &msg, out);
                }
                self.receive_gossip_envelope(now, from, to, gossip, &msg, out)
            }
            Message::Heartbeat { ref from, seq } => self.answer_heartbeat(from, seq, out),
            Message::HeartbeatRsp { ref from, seq } => {
                self.heartbeat.heartbeat_rsp(from, now);
                self.refused.remove(from);
                self.note_answer_after_freeze(from, seq);
            }
            Message::Quarantined { ref to, .. } => self.receive_quarantined(to, &msg, out),
            Message::NotKnown { ref from, ref to } => {
                self.receive_not_known(now, from, to, &msg, out)
            }
        }
    }

    fn send(&mut self, to: Address, msg: Message, out: &mut Vec<Effect>) {
        out.push(Effect::Send { to, msg });
    }

    /// Draws from this node's seeded generator (for the runtime's jitter needs, so that
    /// simulated runs stay reproducible).
    pub fn random_u64(&mut self) -> u64 {
        self.rng.random()
    }
}
