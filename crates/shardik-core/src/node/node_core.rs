//! [`NodeCore`]: the membership core with the rules that make it one node.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::Instant;
use crate::membership::{
    Command, Effect, Gossip, Input, Member, Membership, MembershipConfig, ShutdownReason,
    UniqueAddress,
};

/// The membership a node's layers above it (each entity kind) act on: every member it knows,
/// whatever its status, and those some member that is not Down cannot reach.
///
/// It is what [`KindInput::Membership`](crate::sharding::KindInput::Membership) carries; the
/// runtime and the simulator both take it from [`NodeCore::take_view`], so a kind sees the
/// same membership in both.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// Every member, in address order.
    pub members: Vec<Member>,
    /// The members some non-Down member observes as unreachable.
    pub unreachable: BTreeSet<UniqueAddress>,
}

impl ClusterView {
    /// The view a gossip state gives.
    pub fn of(gossip: &Gossip) -> Self {
        ClusterView {
            members: gossip.members.values().cloned().collect(),
            unreachable: gossip.unreachable_members(),
        }
    }
}

/// A deadline of the node's own rules that passed (a driver logs it; the core has already
/// acted on it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Overdue {
    /// A leave this node asked for did not end within the leave timeout: the node stopped
    /// without waiting any longer ([`Effect::Shutdown`] with [`ShutdownReason::Left`]).
    Leave,
    /// The exit tasks did not finish within the leave timeout: the node confirmed it is
    /// Exiting anyway.
    ExitTasks,
}

/// How long a graceful leave, and the exit tasks within it, may take unless the node is told
/// otherwise (the runtime's `NodeBuilder::leave_timeout`, the simulator's `WorldConfig`).
pub const DEFAULT_LEAVE_TIMEOUT: Duration = Duration::from_secs(60);

/// One node's I/O-free core: the membership state machine (with the split-brain resolver
/// and its lease, which live inside it) and the rules that tie it to the layers above and to
/// the process:
///
/// - **Exit tasks.** When this node becomes Exiting, it passes [`Effect::SelfExiting`] on,
///   which tells the driver to run the layers' exit tasks (sharding hands its shards off).
///   The driver reports [`exit_tasks_done`](Self::exit_tasks_done) (at once when it has none);
///   only then is Exiting confirmed, so that the leader removes the node. Tasks that take
///   longer than the leave timeout are given up on: Exiting is confirmed anyway.
/// - **A leave asked for here** ([`leave`](Self::leave)) that has not ended within the leave
///   timeout stops the node; a second request, or one before the node is a member, stops it
///   at once.
/// - **The view the layers see** ([`take_view`](Self::take_view)): taken anew only when the
///   membership state changed.
///
/// The runtime's node task and the simulator's world both drive this type, with the same
/// inputs, so that what the simulator proves about a node is what the runtime runs.
pub struct NodeCore {
    membership: Membership,
    /// How long a graceful leave, and the exit tasks within it, may take.
    leave_timeout: Duration,
    /// When a leave this node asked for must have ended.
    leave_deadline: Option<Instant>,
    /// When the exit tasks must have finished; set while they run.
    exit_deadline: Option<Instant>,
    /// The node stopped by its own rules (a leave that took too long).
    stopped: bool,
    /// The state the last view was taken from.
    viewed: Option<Arc<Gossip>>,
    /// Membership's effects before this core looked at them (reused between calls).
    scratch: Vec<Effect>,
}

impl NodeCore {
    /// A node that has not joined yet. `seed` feeds the membership's random choices.
    pub fn new(
        cfg: MembershipConfig,
        self_node: UniqueAddress,
        seed: u64,
        now: Instant,
        leave_timeout: Duration,
    ) -> Self {
        NodeCore {
            membership: Membership::new(cfg, self_node, seed, now),
            leave_timeout,
            leave_deadline: None,
            exit_deadline: None,
            stopped: false,
            viewed: None,
            scratch: Vec::new(),
        }
    }

    /// The membership state machine, to read.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// This incarnation.
    pub fn self_node(&self) -> &UniqueAddress {
        self.membership.self_node()
    }

    /// The membership state this node holds.
    pub fn gossip(&self) -> &Arc<Gossip> {
        self.membership.gossip()
    }

    /// How long a graceful leave may take.
    pub fn leave_timeout(&self) -> Duration {
        self.leave_timeout
    }

    /// Whether the node has stopped, by the membership's decision or its own rules.
    pub fn is_stopped(&self) -> bool {
        self.stopped || self.membership.is_stopped()
    }

    /// Whether the exit tasks run (Exiting not confirmed yet).
    pub fn is_running_exit_tasks(&self) -> bool {
        self.exit_deadline.is_some()
    }

    /// Starts as a member of an already formed cluster (the simulator's shortcut past joining).
    pub fn start_as_member(&mut self, now: Instant, gossip: Arc<Gossip>) {
        self.membership.start_as_member(now, gossip);
    }

    /// The earliest instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_stopped() {
            return None;
        }
        [
            self.membership.poll_timeout(),
            self.leave_deadline,
            self.exit_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Handles one membership input.
    pub fn handle(&mut self, now: Instant, input: Input, out: &mut Vec<Effect>) {
        if self.is_stopped() {
            return;
        }
        let mut effects = std::mem::take(&mut self.scratch);
        self.membership.handle(now, input, &mut effects);
        self.pass_on(now, &mut effects, out);
        self.scratch = effects;
    }

    /// Fires every timer due at `now`; says which of the node's own deadlines passed.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Effect>) -> Option<Overdue> {
        if self.is_stopped() {
            return None;
        }
        if self.leave_deadline.is_some_and(|t| t <= now) {
            self.leave_deadline = None;
            self.exit_deadline = None;
            self.stopped = true;
            out.push(Effect::Shutdown(ShutdownReason::Left));
            return Some(Overdue::Leave);
        }
        let mut overdue = None;
        if self.exit_deadline.is_some_and(|t| t <= now) {
            overdue = Some(Overdue::ExitTasks);
            self.exit_tasks_done(now, out);
        }
        let mut effects = std::mem::take(&mut self.scratch);
        self.membership.handle_timeout(now, &mut effects);
        self.pass_on(now, &mut effects, out);
        self.scratch = effects;
        overdue
    }

    /// This node asks to leave gracefully (a signal, the process's stop request). The first
    /// request of a member starts the leave, bounded by the leave timeout; a second one, or
    /// one before the node is a member, stops it at once. Returns whether it stopped now.
    pub fn leave(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        if self.is_stopped() {
            return true;
        }
        if self.leave_deadline.is_some() || !self.membership.is_member() {
            self.leave_deadline = None;
            self.exit_deadline = None;
            self.stopped = true;
            out.push(Effect::Shutdown(ShutdownReason::Stopped));
            return true;
        }
        self.leave_deadline = Some(now + self.leave_timeout);
        let me = self.self_node().address.clone();
        self.handle(now, Input::Command(Command::Leave(me)), out);
        false
    }

    /// The exit tasks [`Effect::SelfExiting`] asked for have finished: Exiting is confirmed.
    /// Nothing happens when they were not running (given up on already, or never asked for).
    pub fn exit_tasks_done(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.exit_deadline.take().is_some() {
            self.handle(now, Input::Command(Command::ExitingCompleted), out);
        }
    }

    /// The view the layers above should act on, when the membership state changed since the
    /// last call (`None`: unchanged).
    pub fn take_view(&mut self) -> Option<ClusterView> {
        let gossip = self.membership.gossip();
        if self.viewed.as_ref().is_some_and(|v| Arc::ptr_eq(v, gossip)) {
            return None;
        }
        self.viewed = Some(Arc::clone(gossip));
        Some(ClusterView::of(gossip))
    }

    /// Moves the membership's effects to `out`, acting on those the node's rules own.
    fn pass_on(&mut self, now: Instant, effects: &mut Vec<Effect>, out: &mut Vec<Effect>) {
        for effect in effects.drain(..) {
            match effect {
                Effect::SelfExiting => {
                    self.exit_deadline = Some(now + self.leave_timeout);
                    out.push(Effect::SelfExiting);
                }
                Effect::Shutdown(reason) => {
                    self.leave_deadline = None;
                    self.exit_deadline = None;
                    out.push(Effect::Shutdown(reason));
                }
                other => out.push(other),
            }
        }
    }
}
