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

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::address::{Address, UniqueAddress};
use super::config::MembershipConfig;
use super::events::{self, ClusterEvent};
use super::gossip::Gossip;
use super::member::{Member, MemberStatus, NOT_YET_UP};
use super::messages::{ConfigCheck, JoinConfig, Message};
use super::ring::HeartbeatSenderState;
use super::sbr::{SbrChange, SbrView, SplitBrainResolver};
use super::vclock::Ordering;
use crate::time::Instant;

/// An input to the membership core.
#[derive(Clone, Debug)]
pub enum Input {
    /// A message from the network, with the instant it was received (before any queueing),
    /// so that full gossip that waited too long can be dropped (`gossip-time-to-live`).
    Message {
        /// The decoded message.
        msg: Message,
        /// When the transport received it.
        received_at: Instant,
    },
    /// A local command (from the API, the management routes or the runtime).
    Command(Command),
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
    /// This node's exit tasks are done: confirm the exit and stop.
    ExitingCompleted,
}

/// Why the node stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShutdownReason {
    /// It left gracefully and was told it is Exiting.
    Left,
    /// It was downed (by the split-brain resolver or an operator).
    Downed,
    /// The cluster it tried to join refused its configuration.
    IncompatibleConfig(String),
    /// The cluster removed it while it was unreachable.
    Removed,
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
    /// Not expected in the current phase (a late ack, a duplicate welcome).
    Unexpected,
    /// The sender is an incarnation this cluster removed; it was told so.
    Quarantined,
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
        }
    }
}

/// Why a local command could not be carried out. Nothing changed when one is reported.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
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
}

#[derive(Clone, Debug)]
enum Phase {
    /// Not joined and not trying.
    Idle,
    /// Asking seed nodes (`InitJoin`) who can take us.
    Seeding {
        seeds: Vec<Address>,
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
}

/// Values computed from the current gossip state, cached until the state changes: gossip
/// rounds and status messages run several times a second, and recomputing these per round
/// would cost O(members) each time (O(members²) per second across a large cluster).
#[derive(Clone, Debug, Default)]
struct Derived {
    generation: u64,
    seen_digest: u64,
    /// How many members other than self that self observes as reachable (valid targets).
    valid_targets: usize,
    /// How many of those have not seen the current version. Counts, not lists: every node
    /// would otherwise hold two more copies of the member list, which in a simulation of
    /// thousands of nodes is most of the memory.
    unseen_targets: usize,
    has_down_member: bool,
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
    first_heartbeat_due: BTreeSet<(Instant, UniqueAddress)>,
    /// The member table the heartbeat ring was last synced with (shared, not a copy).
    ring_members: Arc<std::collections::BTreeMap<UniqueAddress, Member>>,
    ring_unreachable: BTreeSet<UniqueAddress>,
    /// Bumped whenever `gossip` is replaced; keys the `derived` cache.
    gossip_generation: u64,
    derived: Derived,
    sbr: Option<SplitBrainResolver>,
    timers: Timers,
    unconverged_leader_ticks: u32,
    stats: MembershipStats,
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
        let join_config = JoinConfig {
            cluster_name: cfg.cluster_name.clone(),
            must_match: cfg.join_must_match.clone(),
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
            first_heartbeat_due: BTreeSet::new(),
            ring_members: Arc::default(),
            ring_unreachable: BTreeSet::new(),
            gossip_generation: 1,
            derived: Derived::default(),
            sbr,
            timers: Timers::default(),
            unconverged_leader_ticks: 0,
            stats: MembershipStats::default(),
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

    /// Whether the node has stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// Whether the node is a member (of any status).
    pub fn is_member(&self) -> bool {
        matches!(self.phase, Phase::Member)
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
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ----- inputs -----

    /// Handles one input.
    pub fn handle(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        if self.is_stopped() {
            return;
        }
        match input {
            Input::Command(c) => self.handle_command(now, c, out),
            Input::Message { msg, received_at } => self.handle_message(now, msg, received_at, out),
        }
    }

    /// Fires every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Effect>) {
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
        if self.timers.leader.is_some_and(|t| t <= now) {
            self.timers.leader = Some(now + self.cfg.leader_actions_interval);
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
                if address == self.self_node.address {
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

    /// Why gossip from `from` must be ignored, if it must (digest §4.4): we are not a member,
    /// or the sender is not one we know, or we observe it as unreachable.
    fn gossip_sender_refusal(&self, from: &UniqueAddress) -> Option<DropReason> {
        if !self.is_member() {
            Some(DropReason::NotAMember)
        } else if !self.gossip.has_member(from) {
            Some(DropReason::UnknownSender)
        } else if !self
            .gossip
            .reachability
            .is_reachable_from(&self.self_node, from)
        {
            Some(DropReason::UnreachableSender)
        } else {
            None
        }
    }

    fn drop_input(&mut self, reason: DropReason, msg: &Message, out: &mut Vec<Effect>) {
        self.stats.dropped += 1;
        out.push(Effect::Dropped {
            reason,
            kind: msg.kind(),
        });
    }

    fn handle_message(
        &mut self,
        now: Instant,
        msg: Message,
        received_at: Instant,
        out: &mut Vec<Effect>,
    ) {
        if let Some(sender) = msg.sender() {
            if self.gossip.tombstones.contains_key(sender) {
                // A removed incarnation still talks: tell it, so that it stops.
                let to = sender.clone();
                let reply = Message::Quarantined {
                    from: self.self_node.clone(),
                    to: to.clone(),
                };
                self.drop_input(DropReason::Quarantined, &msg, out);
                return self.send(to.address, reply, out);
            }
        }
        match msg {
            Message::InitJoin {
                ref from,
                ref config,
            } => {
                let me = self.self_node.clone();
                let can_answer = self.is_member()
                    && !matches!(
                        self.self_status(),
                        Some(MemberStatus::Down | MemberStatus::Exiting) | None
                    );
                let reply = if !can_answer {
                    Message::InitJoinNack { from: me }
                } else {
                    let check = match self.join_config.incompatibility(config) {
                        None => ConfigCheck::Compatible,
                        Some(why) => ConfigCheck::Incompatible(why),
                    };
                    Message::InitJoinAck { from: me, check }
                };
                self.send(from.address.clone(), reply, out);
            }
            Message::InitJoinAck {
                ref from,
                ref check,
            } => {
                let seeds = match &self.phase {
                    Phase::Seeding { seeds, .. } => seeds.clone(),
                    _ => return self.drop_input(DropReason::Unexpected, &msg, out),
                };
                match check {
                    ConfigCheck::Compatible => {
                        self.send_join(now, from.address.clone(), seeds, out)
                    }
                    ConfigCheck::Incompatible(why) => {
                        self.phase = Phase::Stopped;
                        out.push(Effect::Shutdown(ShutdownReason::IncompatibleConfig(
                            why.clone(),
                        )));
                    }
                }
            }
            Message::InitJoinNack { ref from } => {
                let Phase::Seeding {
                    seeds,
                    form_cluster_at,
                    nacks,
                } = &mut self.phase
                else {
                    return self.drop_input(DropReason::Unexpected, &msg, out);
                };
                nacks.insert(from.address.clone());
                let others = seeds
                    .iter()
                    .filter(|s| **s != self.self_node.address)
                    .count();
                // Only the first seed may form a cluster, and only when every other seed said no.
                let form_now = form_cluster_at.is_some() && nacks.len() >= others;
                if form_now {
                    self.join_self(now, out);
                }
            }
            Message::Join {
                ref node,
                ref roles,
                ref app_version,
            } => self.handle_join(
                now,
                node.clone(),
                roles.clone(),
                app_version.clone(),
                &msg,
                out,
            ),
            Message::Welcome {
                ref from,
                ref gossip,
            } => {
                if !matches!(self.phase, Phase::Joining { .. } | Phase::Seeding { .. }) {
                    return self.drop_input(DropReason::Unexpected, &msg, out);
                }
                if !gossip.has_member(&self.self_node) {
                    return self.drop_input(DropReason::NotInGossip, &msg, out);
                }
                let from = from.clone();
                let mut g = Gossip::clone(gossip);
                g.see(&self.self_node);
                self.become_member(now);
                self.set_gossip(now, g, out);
                self.send_gossip_to(&from, out);
            }
            Message::Leave { ref address } => match self.member_at(address) {
                Some(node) if self.is_member() => self.leaving(now, &node, out),
                _ => self.drop_input(DropReason::NotAMember, &msg, out),
            },
            Message::Down { ref address } => match self.member_at(address) {
                Some(node) if self.is_member() => self.downing(now, &node, out),
                _ => self.drop_input(DropReason::NotAMember, &msg, out),
            },
            Message::ExitingConfirmed { ref node } => {
                if self
                    .gossip
                    .member(node)
                    .is_some_and(|m| m.status == MemberStatus::Exiting)
                {
                    self.exiting_confirmed.insert(node.clone());
                }
            }
            Message::GossipStatus {
                ref from,
                ref version,
                seen_digest,
            } => {
                if let Some(reason) = self.gossip_sender_refusal(from) {
                    return self.drop_input(reason, &msg, out);
                }
                let from = from.clone();
                match self.gossip.version.compare(version) {
                    Ordering::Same if seen_digest == self.derived().seen_digest => {}
                    Ordering::Before => self.send_status_to(&from, out),
                    _ => self.send_envelope_to(&from, out),
                }
            }
            Message::GossipEnvelope {
                ref from,
                ref to,
                ref gossip,
            } => {
                if now.saturating_duration_since(received_at) > self.cfg.gossip_time_to_live {
                    return self.drop_input(DropReason::StaleGossip, &msg, out);
                }
                if *to != self.self_node {
                    return self.drop_input(DropReason::WrongIncarnation, &msg, out);
                }
                if let Some(reason) = self.gossip_sender_refusal(from) {
                    return self.drop_input(reason, &msg, out);
                }
                if !gossip.has_member(&self.self_node) {
                    return self.drop_input(DropReason::NotInGossip, &msg, out);
                }
                let (from, remote) = (from.clone(), Arc::clone(gossip));
                self.receive_gossip(now, &from, remote, out);
            }
            Message::Heartbeat { ref from, seq } => {
                let reply = Message::HeartbeatRsp {
                    from: self.self_node.clone(),
                    seq,
                };
                self.send(from.address.clone(), reply, out);
            }
            Message::HeartbeatRsp { ref from, .. } => {
                self.heartbeat.heartbeat_rsp(from, now);
            }
            Message::Quarantined { ref from, ref to } => {
                // Only a current member's word counts, and only about this incarnation.
                if *to != self.self_node || !self.gossip.has_member(from) || !self.is_member() {
                    return self.drop_input(DropReason::Unexpected, &msg, out);
                }
                self.phase = Phase::Stopped;
                out.push(Effect::Shutdown(ShutdownReason::Removed));
            }
        }
    }

    // ----- joining -----

    fn start_seeding(&mut self, now: Instant, seeds: Vec<Address>, out: &mut Vec<Effect>) {
        let me = &self.self_node.address;
        if seeds.len() == 1 && &seeds[0] == me {
            return self.join_self(now, out);
        }
        let form_cluster_at = (&seeds[0] == me).then(|| now + self.cfg.seed_node_timeout);
        self.phase = Phase::Seeding {
            seeds,
            form_cluster_at,
            nacks: BTreeSet::new(),
        };
        self.timers.join = Some(now);
        self.join_tick(now, out);
    }

    /// Seed process tick: resend `InitJoin` every second; the first seed forms a cluster at its
    /// deadline; a `Join` without `Welcome` is retried from the seeds.
    fn join_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        match self.phase.clone() {
            Phase::Seeding {
                seeds,
                form_cluster_at,
                ..
            } => {
                if form_cluster_at.is_some_and(|t| t <= now) {
                    return self.join_self(now, out);
                }
                let others: Vec<Address> = seeds
                    .iter()
                    .filter(|s| **s != self.self_node.address)
                    .cloned()
                    .collect();
                for s in others {
                    let msg = Message::InitJoin {
                        from: self.self_node.clone(),
                        config: self.join_config.clone(),
                    };
                    self.send(s, msg, out);
                }
                let next = now + Duration::from_secs(1);
                self.timers.join = Some(form_cluster_at.map_or(next, |t| t.min(next)));
            }
            Phase::Joining {
                seeds,
                give_up_at,
                target,
            } => {
                if give_up_at <= now {
                    if seeds.is_empty() {
                        self.phase = Phase::Idle;
                        self.send_join(now, target, seeds, out);
                    } else {
                        self.phase = Phase::Idle;
                        self.start_seeding(now, seeds, out);
                    }
                } else {
                    self.timers.join = Some(give_up_at);
                }
            }
            _ => {}
        }
    }

    fn send_join(
        &mut self,
        now: Instant,
        target: Address,
        seeds: Vec<Address>,
        out: &mut Vec<Effect>,
    ) {
        let give_up_at = now + self.cfg.retry_unsuccessful_join_after;
        self.phase = Phase::Joining {
            target: target.clone(),
            seeds,
            give_up_at,
        };
        self.timers.join = Some(give_up_at);
        let msg = Message::Join {
            node: self.self_node.clone(),
            roles: self.cfg.roles.clone(),
            app_version: self.cfg.app_version.clone(),
        };
        self.send(target, msg, out);
    }

    fn join_self(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let me = Member::joining(
            self.self_node.clone(),
            self.cfg.roles.clone(),
            self.cfg.app_version.clone(),
        );
        let mut g = Gossip::with_members([me]);
        g.version.increment(&self.self_node);
        g.see(&self.self_node);
        self.become_member(now);
        self.set_gossip(now, g, out);
    }

    fn become_member(&mut self, now: Instant) {
        self.phase = Phase::Member;
        self.timers.join = None;
        // Each periodic task starts at a random phase within its interval, so that nodes that
        // became members together do not all gossip at the same instant (a node that receives a
        // new state then waits on average half a round, not a whole one, to pass it on).
        let delay = self.cfg.periodic_tasks_initial_delay;
        let gossip_phase = self.random_fraction_of(self.cfg.gossip_interval / 3);
        let leader_phase = self.random_fraction_of(self.cfg.leader_actions_interval);
        let reaper_phase = self.random_fraction_of(self.cfg.unreachable_nodes_reaper_interval);
        self.timers.gossip = Some(now + delay + gossip_phase);
        self.timers.leader = Some(now + delay + leader_phase);
        self.timers.reaper = Some(now + delay + reaper_phase);
        self.timers.heartbeat = Some(now);
    }

    fn random_fraction_of(&mut self, d: Duration) -> Duration {
        d.mul_f64(self.rng.random::<f64>())
    }

    fn handle_join(
        &mut self,
        now: Instant,
        node: UniqueAddress,
        roles: BTreeSet<String>,
        app_version: String,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        if !self.is_member()
            || matches!(
                self.self_status(),
                Some(MemberStatus::Down | MemberStatus::Exiting) | None
            )
        {
            return self.drop_input(DropReason::NotAMember, msg, out);
        }
        if self.gossip.has_member(&node) {
            // A retried join: the joiner missed the welcome.
            let welcome = Message::Welcome {
                from: self.self_node.clone(),
                gossip: Arc::clone(&self.gossip),
            };
            return self.send(node.address.clone(), welcome, out);
        }
        if self.gossip.tombstones.contains_key(&node) {
            return self.drop_input(DropReason::JoinRefused, msg, out);
        }
        if let Some(old) = self.member_at(&node.address) {
            // A new incarnation at the same host:port: the old one is dead for good. Down it;
            // the new one is accepted when it retries after the old one was removed.
            let mut g = Gossip::clone(&self.gossip);
            g.reachability.terminated(&self.self_node, &old);
            if g.member(&old)
                .is_some_and(|m| m.status != MemberStatus::Down)
            {
                g.mark_down(&old);
            }
            self.update_gossip(now, g, out);
            return self.drop_input(DropReason::JoinRefused, msg, out);
        }
        let mut g = Gossip::clone(&self.gossip);
        g.update_member(Member::joining(node.clone(), roles, app_version));
        self.update_gossip(now, g, out);
        let welcome = Message::Welcome {
            from: self.self_node.clone(),
            gossip: Arc::clone(&self.gossip),
        };
        self.send(node.address.clone(), welcome, out);
    }

    // ----- leave, down, exit -----

    fn leaving(&mut self, now: Instant, node: &UniqueAddress, out: &mut Vec<Effect>) {
        let Some(m) = self.gossip.member(node) else {
            return;
        };
        use MemberStatus::*;
        if !matches!(
            m.status,
            Joining | WeaklyUp | Up | PreparingForShutdown | ReadyForShutdown
        ) {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        g.update_member(m.with_status(Leaving));
        self.update_gossip(now, g, out);
        self.gossip_round(out);
    }

    fn downing(&mut self, now: Instant, node: &UniqueAddress, out: &mut Vec<Effect>) {
        let Some(m) = self.gossip.member(node) else {
            return;
        };
        if m.status == MemberStatus::Down {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        g.mark_down(node);
        self.update_gossip(now, g, out);
        if node == &self.self_node {
            self.gossip_to_random(5, out);
        } else {
            // Tell the downed node directly, so that it stops itself if it can still hear us.
            let to = node.clone();
            self.send_envelope_to(&to, out);
        }
        self.after_state_change(now, out);
    }

    fn exiting_completed(&mut self, out: &mut Vec<Effect>) {
        if self.self_status() != Some(MemberStatus::Exiting) {
            return out.push(Effect::CommandFailed(CommandError::NotAMember));
        }
        let mut g = Gossip::clone(&self.gossip);
        g.see(&self.self_node);
        self.install_gossip(Arc::new(g));
        self.gossip_to_random(5, out);
        // The two members most likely to lead next, so that one of them removes us promptly.
        let next_leaders: Vec<UniqueAddress> = self
            .gossip
            .members
            .values()
            .filter(|m| m.addr != self.self_node && m.status.leader_eligible())
            .filter(|m| self.gossip.is_reachable(&m.addr))
            .take(2)
            .map(|m| m.addr.clone())
            .collect();
        for n in next_leaders {
            let msg = Message::ExitingConfirmed {
                node: self.self_node.clone(),
            };
            self.send(n.address.clone(), msg, out);
        }
        self.phase = Phase::Stopped;
        out.push(Effect::Shutdown(ShutdownReason::Left));
    }

    // ----- gossip -----

    /// Whether to gossip three times per interval instead of once. The reference speeds up
    /// while a member is Down or fewer than half have seen the state; we keep the speed-up
    /// until every reachable member has seen it, because the leader can only act once the
    /// seen sets have merged, and that last half dominates convergence time in large clusters
    /// (see docs/differences-from-akka.md). Unreachable members do not count, so a partition
    /// does not keep it on.
    fn needs_speedup(&mut self) -> bool {
        let d = self.derived();
        d.has_down_member || d.unseen_targets > 0
    }

    /// Replaces the gossip state without publishing anything (callers publish).
    fn install_gossip(&mut self, g: Arc<Gossip>) -> Arc<Gossip> {
        self.gossip_generation += 1;
        std::mem::replace(&mut self.gossip, g)
    }

    /// The cached values derived from the current state, recomputed after a change.
    fn derived(&mut self) -> &Derived {
        if self.derived.generation != self.gossip_generation {
            let g = &self.gossip;
            let me = &self.self_node;
            let (mut valid_targets, mut unseen_targets) = (0, 0);
            for n in g.members.keys() {
                if n != me && g.reachability.is_reachable_from(me, n) {
                    valid_targets += 1;
                    if !g.seen_by(n) {
                        unseen_targets += 1;
                    }
                }
            }
            self.derived = Derived {
                generation: self.gossip_generation,
                seen_digest: g.seen_digest(),
                valid_targets,
                unseen_targets,
                has_down_member: g.members.values().any(|m| m.status == MemberStatus::Down),
            };
        }
        &self.derived
    }

    fn gossip_round(&mut self, out: &mut Vec<Effect>) {
        if !self.is_member() || self.gossip.members.len() <= 1 {
            return;
        }
        let p = self
            .cfg
            .different_view_probability(self.gossip.members.len());
        let prefer_unseen = self.rng.random::<f64>() < p;
        let (valid, unseen) = {
            let d = self.derived();
            (d.valid_targets, d.unseen_targets)
        };
        let only_unseen = prefer_unseen && unseen > 0;
        let pool = if only_unseen { unseen } else { valid };
        if pool == 0 {
            return;
        }
        // Pick the k-th eligible member by walking the table (no per-node target list kept).
        let k = self.rng.random_range(0..pool);
        let g = &self.gossip;
        let me = &self.self_node;
        let target = g
            .members
            .keys()
            .filter(|n| *n != me && g.reachability.is_reachable_from(me, n))
            .filter(|n| !only_unseen || !g.seen_by(n))
            .nth(k)
            .cloned();
        if let Some(target) = target {
            self.send_gossip_to(&target, out);
        }
    }

    /// Status to a peer that has seen our version, full gossip otherwise.
    fn send_gossip_to(&mut self, node: &UniqueAddress, out: &mut Vec<Effect>) {
        if self.gossip.seen_by(node) {
            self.send_status_to(node, out)
        } else {
            self.send_envelope_to(node, out)
        }
    }

    fn send_status_to(&mut self, node: &UniqueAddress, out: &mut Vec<Effect>) {
        self.stats.gossip_status_sent += 1;
        let msg = Message::GossipStatus {
            from: self.self_node.clone(),
            version: self.gossip.version.clone(),
            seen_digest: self.derived().seen_digest,
        };
        self.send(node.address.clone(), msg, out);
    }

    fn send_envelope_to(&mut self, node: &UniqueAddress, out: &mut Vec<Effect>) {
        self.stats.gossip_sent += 1;
        let msg = Message::GossipEnvelope {
            from: self.self_node.clone(),
            to: node.clone(),
            gossip: Arc::clone(&self.gossip),
        };
        self.send(node.address.clone(), msg, out);
    }

    fn gossip_to_random(&mut self, n: usize, out: &mut Vec<Effect>) {
        let mut others: Vec<UniqueAddress> = self
            .gossip
            .members
            .keys()
            .filter(|a| **a != self.self_node)
            .cloned()
            .collect();
        for i in 0..others.len().min(n) {
            let j = self.rng.random_range(i..others.len());
            others.swap(i, j);
            let to = others[i].clone();
            self.send_envelope_to(&to, out);
        }
    }

    fn receive_gossip(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        remote: Arc<Gossip>,
        out: &mut Vec<Effect>,
    ) {
        self.stats.gossip_received += 1;
        let me = self.self_node.clone();
        let local = Arc::clone(&self.gossip);
        let (mut new, talkback) = match local.version.compare(&remote.version) {
            Ordering::Same => {
                let talkback = !remote.seen_by(&me);
                if remote.seen.is_subset(&local.seen) && local.seen_by(&me) {
                    // Nothing new: keep the shared state as it is (no copy).
                    if talkback {
                        self.send_envelope_to(from, out);
                    }
                    return;
                }
                let mut g = Gossip::clone(&local);
                g.seen.extend(remote.seen.iter().cloned());
                (g, talkback)
            }
            Ordering::After => (Gossip::clone(&local), true),
            Ordering::Before => (Gossip::clone(&remote), !remote.seen_by(&me)),
            Ordering::Concurrent => {
                self.stats.merges += 1;
                let mut a = Gossip::clone(&local);
                let mut b = Gossip::clone(&remote);
                a.prune_departed_against(&remote);
                b.prune_departed_against(&local);
                (a.merge(&b), true)
            }
        };
        if !self.exit_started || self.self_status() != Some(MemberStatus::Exiting) {
            new.see(&me);
        }
        self.set_gossip(now, new, out);
        if talkback {
            self.send_envelope_to(from, out);
        }
        self.after_state_change(now, out);
    }

    /// A local change: bump our clock entry, only we have seen it, publish.
    fn update_gossip(&mut self, now: Instant, mut g: Gossip, out: &mut Vec<Effect>) {
        g.version.increment(&self.self_node);
        g.only_seen_by(&self.self_node);
        self.set_gossip(now, g, out);
        self.after_state_change(now, out);
    }

    /// Replaces the state and publishes what changed.
    fn set_gossip(&mut self, now: Instant, g: Gossip, out: &mut Vec<Effect>) {
        debug_assert_eq!(g.check_invariants(), Ok(()));
        let old = self.install_gossip(Arc::new(g));
        let mut evs = Vec::new();
        events::diff(&old, &self.gossip, &self.self_node, &mut evs);
        if self.sbr.is_some() {
            let changes: Vec<SbrChange> = evs
                .iter()
                .filter_map(|e| match e {
                    ClusterEvent::MemberUp(_) => Some(SbrChange::MemberUp),
                    ClusterEvent::MemberExited(_) => Some(SbrChange::MemberExited),
                    ClusterEvent::UnreachableMember(_) => Some(SbrChange::Unreachable),
                    ClusterEvent::ReachableMember(_) => Some(SbrChange::Reachable),
                    ClusterEvent::MemberDowned(_) => Some(SbrChange::MemberDowned),
                    ClusterEvent::MemberRemoved { .. } => Some(SbrChange::MemberRemoved),
                    _ => None,
                })
                .collect();
            if !changes.is_empty() {
                let view = self.sbr_view();
                if let Some(sbr) = self.sbr.as_mut() {
                    for c in changes {
                        sbr.note_change(now, c, &view);
                    }
                }
            }
        }
        out.extend(evs.into_iter().map(Effect::Event));
        self.exiting_confirmed.retain(|n| self.gossip.has_member(n));
        self.sync_heartbeat_ring(now);
    }

    /// Keeps the heartbeat ring in step with the members and their reachability. Most state
    /// changes (seen sets, statuses) leave both alone, so the common path only compares.
    fn sync_heartbeat_ring(&mut self, now: Instant) {
        let g = Arc::clone(&self.gossip);
        if !Arc::ptr_eq(&self.ring_members, &g.members) {
            // Walk old and new tables together: no copies, O(members) only when the table changed.
            let old = std::mem::replace(&mut self.ring_members, Arc::clone(&g.members));
            let mut a = old.keys().peekable();
            let mut b = g.members.keys().peekable();
            loop {
                match (a.peek(), b.peek()) {
                    (None, None) => break,
                    (Some(&x), None) => {
                        self.heartbeat.remove_member(x, now);
                        self.heartbeat_started.remove(x);
                        a.next();
                    }
                    (None, Some(&y)) => {
                        self.heartbeat.add_member(y, now);
                        b.next();
                    }
                    (Some(&x), Some(&y)) => match x.cmp(y) {
                        std::cmp::Ordering::Less => {
                            self.heartbeat.remove_member(x, now);
                            self.heartbeat_started.remove(x);
                            a.next();
                        }
                        std::cmp::Ordering::Greater => {
                            self.heartbeat.add_member(y, now);
                            b.next();
                        }
                        std::cmp::Ordering::Equal => {
                            a.next();
                            b.next();
                        }
                    },
                }
            }
        }
        let unreachable = g.unreachable_members();
        if unreachable != self.ring_unreachable {
            for n in unreachable.difference(&self.ring_unreachable) {
                if g.has_member(n) {
                    self.heartbeat.unreachable_member(n, now);
                }
            }
            for n in self.ring_unreachable.difference(&unreachable) {
                if g.has_member(n) {
                    self.heartbeat.reachable_member(n, now);
                }
            }
            self.ring_unreachable = unreachable;
        }
    }

    /// Reacts to our own status: Exiting starts the exit tasks, Down or removal stops the node.
    fn after_state_change(&mut self, _now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        match self.self_status() {
            Some(MemberStatus::Exiting) if !self.exit_started => {
                self.exit_started = true;
                out.push(Effect::SelfExiting);
            }
            Some(MemberStatus::Down) => {
                self.phase = Phase::Stopped;
                out.push(Effect::Shutdown(ShutdownReason::Downed));
            }
            None if self.gossip.tombstones.contains_key(&self.self_node) => {
                self.phase = Phase::Stopped;
                out.push(Effect::Shutdown(ShutdownReason::Removed));
            }
            _ => {}
        }
    }

    // ----- failure detection -----

    fn heartbeat_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        self.heartbeat_seq += 1;
        let receivers = self.heartbeat.active_receivers();
        for r in receivers {
            if self.heartbeat_started.insert(r.clone()) {
                let due = now + self.cfg.failure_detector.expected_response_after;
                self.first_heartbeat_due.insert((due, r.clone()));
            }
            self.stats.heartbeats_sent += 1;
            let msg = Message::Heartbeat {
                from: self.self_node.clone(),
                seq: self.heartbeat_seq,
            };
            self.send(r.address.clone(), msg, out);
        }
    }

    /// Marks members our detector gave up on as unreachable, and those it hears again as
    /// reachable (digest §4.5, the reaper).
    fn reap_unreachable(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        let me = self.self_node.clone();
        let r = &self.gossip.reachability;
        let fd = self.heartbeat.fd();
        let newly_unreachable: Vec<UniqueAddress> = self
            .gossip
            .members
            .keys()
            .filter(|n| **n != me && r.is_reachable_from(&me, n) && !fd.is_available(n, now))
            .cloned()
            .collect();
        let again_reachable: Vec<UniqueAddress> = r
            .unreachable_from(&me)
            .into_iter()
            .filter(|n| {
                r.observers()
                    .get(&me)
                    .and_then(|rows| rows.subjects.get(n))
                    .is_some_and(|s| *s == super::reachability::ReachabilityStatus::Unreachable)
                    && fd.is_available(n, now)
            })
            .collect();
        if newly_unreachable.is_empty() && again_reachable.is_empty() {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        for n in &newly_unreachable {
            g.reachability.unreachable(&me, n);
        }
        for n in &again_reachable {
            g.reachability.reachable(&me, n);
        }
        self.update_gossip(now, g, out);
    }

    // ----- leader -----

    fn leader_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        let is_leader = self.leader().as_ref() == Some(&self.self_node);
        if is_leader {
            if self.is_converged() {
                self.unconverged_leader_ticks = 0;
                self.leader_actions_on_convergence(now, out);
            } else {
                self.unconverged_leader_ticks += 1;
                if let Some(after) = self.cfg.allow_weakly_up_members {
                    let waited = self.cfg.leader_actions_interval * self.unconverged_leader_ticks;
                    if waited >= after {
                        self.move_joining_to_weakly_up(now, out);
                    }
                }
            }
            let cutoff = now
                .as_millis()
                .saturating_sub(self.cfg.prune_gossip_tombstones_after.as_millis() as u64);
            if cutoff > 0 && self.gossip.tombstones.values().any(|t| *t < cutoff) {
                let mut g = Gossip::clone(&self.gossip);
                g.prune_tombstones(cutoff);
                self.update_gossip(now, g, out);
            }
        }
        self.downing_tick(now, is_leader, out);
    }

    fn enough_members(&self) -> bool {
        let g = &self.gossip;
        if g.members.len() < self.cfg.min_nr_of_members {
            return false;
        }
        self.cfg
            .role_min_nr_of_members
            .iter()
            .all(|(role, min)| g.members.values().filter(|m| m.has_role(role)).count() >= *min)
    }

    fn leader_actions_on_convergence(&mut self, now: Instant, out: &mut Vec<Effect>) {
        use MemberStatus::*;
        let g = &self.gossip;
        let enough = self.enough_members();
        let mut next_up = g
            .members
            .values()
            .filter(|m| m.up_number != NOT_YET_UP)
            .map(|m| m.up_number)
            .max()
            .unwrap_or(0)
            + 1;
        let mut changed: Vec<Member> = Vec::new();
        let mut newly_exiting = false;
        for m in g.members.values() {
            match m.status {
                Joining | WeaklyUp if enough => {
                    let mut up = m.with_status(Up);
                    up.up_number = next_up;
                    next_up += 1;
                    changed.push(up);
                }
                Leaving => {
                    changed.push(m.with_status(Exiting));
                    newly_exiting = true;
                }
                _ => {}
            }
        }
        let removed: Vec<UniqueAddress> = g
            .members
            .values()
            .filter(|m| {
                let unreachable_and_gone =
                    matches!(m.status, Down | Exiting) && !g.is_reachable(&m.addr);
                let confirmed = m.status == Exiting && self.exiting_confirmed.contains(&m.addr);
                unreachable_and_gone || confirmed
            })
            .map(|m| m.addr.clone())
            .collect();
        if changed.is_empty() && removed.is_empty() {
            return;
        }
        let mut g = Gossip::clone(g);
        for n in &removed {
            g.remove(n, now.as_millis());
            self.exiting_confirmed.remove(n);
        }
        for m in changed {
            if g.has_member(&m.addr) {
                g.update_member(m);
            }
        }
        self.update_gossip(now, g, out);
        if newly_exiting {
            // Hand-over speed-up: the oldest nodes host singletons and should learn at once.
            let mut oldest: Vec<&Member> = self
                .gossip
                .members
                .values()
                .filter(|m| m.addr != self.self_node)
                .collect();
            oldest.sort_by(|a, b| a.age_cmp(b));
            let targets: Vec<UniqueAddress> =
                oldest.iter().take(2).map(|m| m.addr.clone()).collect();
            for t in targets {
                self.send_envelope_to(&t, out);
            }
        }
    }

    fn move_joining_to_weakly_up(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.enough_members() {
            return;
        }
        let g = &self.gossip;
        let promote: Vec<Member> = g
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Joining && g.is_reachable(&m.addr))
            .map(|m| m.with_status(MemberStatus::WeaklyUp))
            .collect();
        if promote.is_empty() {
            return;
        }
        let mut g = Gossip::clone(g);
        for m in promote {
            g.update_member(m);
        }
        self.update_gossip(now, g, out);
    }

    /// What the split-brain resolver sees from this node.
    fn sbr_view(&self) -> SbrView {
        let g = &self.gossip;
        SbrView::from_state(
            self.self_node.clone(),
            g.members.values().cloned().collect(),
            &g.reachability,
            g.seen.clone(),
        )
    }

    /// Split-brain resolver tick: decides on the leader, and "down all when unstable" everywhere.
    fn downing_tick(&mut self, now: Instant, is_leader: bool, out: &mut Vec<Effect>) {
        if self.sbr.is_none() {
            return;
        }
        let status = self.self_status();
        let responsible = is_leader
            && matches!(
                status,
                Some(MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Leaving)
            );
        let view = self.sbr_view();
        let Some(sbr) = self.sbr.as_mut() else { return };
        let Some((_decision, nodes)) = sbr.tick(now, responsible, &view) else {
            return;
        };
        for n in nodes {
            if self.is_stopped() {
                break;
            }
            self.downing(now, &n, out);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::address::Address;

    fn addr(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 1000 + 7)
    }

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// A node that formed a cluster of itself and `other` (both Up), seen by both.
    fn member_of_two(other: &UniqueAddress) -> Membership {
        let me = addr(1);
        let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
        let mut g = Gossip::default();
        for (i, a) in [&me, other].into_iter().enumerate() {
            let mut m = Member::joining(a.clone(), Default::default(), "1");
            m.status = MemberStatus::Up;
            m.up_number = i as u32 + 1;
            Arc::make_mut(&mut g.members).insert(a.clone(), m);
        }
        g.version.increment(&me);
        g.seen = g.members.keys().cloned().collect();
        node.start_as_member(t(0), Arc::new(g));
        node
    }

    fn dropped(out: &[Effect]) -> Vec<DropReason> {
        out.iter()
            .filter_map(|e| match e {
                Effect::Dropped { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }

    fn envelope(from: &UniqueAddress, to: &UniqueAddress, g: Gossip) -> Message {
        Message::GossipEnvelope {
            from: from.clone(),
            to: to.clone(),
            gossip: Arc::new(g),
        }
    }

    #[test]
    fn stale_wrong_incarnation_and_unknown_gossip_is_dropped_and_reported() {
        let other = addr(2);
        let mut node = member_of_two(&other);
        let g = Gossip::clone(node.gossip());
        let me = node.self_node().clone();
        let mut out = Vec::new();

        // Waited 3 s in a queue: older than gossip-time-to-live (2 s).
        let msg = envelope(&other, &me, g.clone());
        node.handle(
            t(5000),
            Input::Message {
                msg,
                received_at: t(2000),
            },
            &mut out,
        );
        assert_eq!(dropped(&out), vec![DropReason::StaleGossip]);

        out.clear();
        let other_incarnation = UniqueAddress::new(me.address.clone(), me.uid + 1);
        let msg = envelope(&other, &other_incarnation, g.clone());
        node.handle(
            t(5000),
            Input::Message {
                msg,
                received_at: t(5000),
            },
            &mut out,
        );
        assert_eq!(dropped(&out), vec![DropReason::WrongIncarnation]);

        out.clear();
        let stranger = addr(9);
        let msg = envelope(&stranger, &me, g);
        node.handle(
            t(5000),
            Input::Message {
                msg,
                received_at: t(5000),
            },
            &mut out,
        );
        assert_eq!(dropped(&out), vec![DropReason::UnknownSender]);
        assert_eq!(node.stats().dropped, 3);
        assert_eq!(
            node.self_status(),
            Some(MemberStatus::Up),
            "nothing changed"
        );
    }

    #[test]
    fn a_removed_incarnation_is_told_it_is_quarantined_and_a_told_node_stops() {
        let other = addr(2);
        let mut node = member_of_two(&other);
        let mut out = Vec::new();
        node.handle(
            t(10),
            Input::Command(Command::Down(other.address.clone())),
            &mut out,
        );
        // The leader removes the Down member once it is unreachable; simulate the removal.
        let mut g = Gossip::clone(node.gossip());
        g.remove(&other, 10);
        let mut out = Vec::new();
        node.set_gossip(t(10), g, &mut out);
        out.clear();
        let hb = Message::Heartbeat {
            from: other.clone(),
            seq: 1,
        };
        node.handle(
            t(20),
            Input::Message {
                msg: hb,
                received_at: t(20),
            },
            &mut out,
        );
        assert_eq!(dropped(&out), vec![DropReason::Quarantined]);
        assert!(out.iter().any(|e| matches!(e,
            Effect::Send { msg: Message::Quarantined { to, .. }, .. } if *to == other)));

        // The other side of it: a node told by a current member that it was removed stops.
        let mut victim = member_of_two(&addr(3));
        let me = victim.self_node().clone();
        let mut out = Vec::new();
        let msg = Message::Quarantined {
            from: addr(3),
            to: me,
        };
        victim.handle(
            t(30),
            Input::Message {
                msg,
                received_at: t(30),
            },
            &mut out,
        );
        assert!(
            out.iter()
                .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Removed)))
        );
        assert!(victim.is_stopped());
    }

    #[test]
    fn commands_about_unknown_members_fail_without_changing_anything() {
        let other = addr(2);
        let mut node = member_of_two(&other);
        let before = Gossip::clone(node.gossip());
        let mut out = Vec::new();
        let nobody = Address::new("10.9.9.9", 1);
        node.handle(
            t(1),
            Input::Command(Command::Down(nobody.clone())),
            &mut out,
        );
        node.handle(
            t(1),
            Input::Command(Command::Leave(nobody.clone())),
            &mut out,
        );
        assert_eq!(
            out.iter().filter(|e| matches!(e, Effect::CommandFailed(CommandError::UnknownMember(a)) if *a == nobody)).count(),
            2
        );
        assert_eq!(*node.gossip().as_ref(), before);
    }
}
