//! What sharding reads from the membership view.
//!
//! Two decisions depend on the cluster: which node hosts a kind's coordinator, and which
//! regions are alive. Both must be made conservatively around crashes: a member that was
//! downed may still be running (on the other side of a partition, until its own split-brain
//! resolver stops it), so its shards must not get a second home the moment it is removed. As in
//! the reference, such a member lingers for the *down-removal margin* after its removal: it
//! still counts as the coordinator's host (so nobody else starts one) and its region as
//! terminating (its shards are neither answered for nor re-homed). A member that left
//! gracefully (seen Leaving or Exiting, and reachable when it went) does not linger: it handed
//! its shards off before it went.
//!
//! PreparingForShutdown and ReadyForShutdown members count as Up here
//! ([`MemberStatus::counts_as_up`]): they host shards and the coordinator as before. Seeing one
//! latches [`ShardingView::is_preparing_for_shutdown`], which keeps every shard where it is
//! (the coordinator and the region read it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::Instant;
use crate::membership::{Member, MemberStatus, UniqueAddress};

/// The membership facts sharding needs for one entity kind, with the margin applied.
#[derive(Clone, Debug)]
pub struct ShardingView {
    self_node: UniqueAddress,
    role: Option<String>,
    margin: Duration,
    members: BTreeMap<UniqueAddress, Member>,
    unreachable: BTreeSet<UniqueAddress>,
    /// Removed members still treated as possibly alive, until the instant given.
    lingering: BTreeMap<UniqueAddress, (Member, Instant)>,
    /// A member was seen PreparingForShutdown or ReadyForShutdown: the cluster prepares for a
    /// full shutdown. Never unset, as the membership core's own flag: the members that prepared
    /// leave one by one, and the last ones must not start moving shards again.
    preparing_for_shutdown: bool,
    /// Whether a member may stand in for a silent coordinator node (the kind's coordinator
    /// runs under a lease): see [`stand_in`](Self::stand_in).
    stand_in: bool,
}

impl ShardingView {
    /// An empty view for the kind whose shards live on members with `role` (`None`: all).
    pub fn new(self_node: UniqueAddress, role: Option<String>, margin: Duration) -> Self {
        ShardingView {
            self_node,
            role: role.filter(|r| !r.is_empty()),
            margin,
            members: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            lingering: BTreeMap::new(),
            preparing_for_shutdown: false,
            stand_in: false,
        }
    }

    /// Lets a member stand in for a silent coordinator node ([`stand_in`](Self::stand_in)):
    /// only for a kind whose coordinator and shards run under leases, where the store, not
    /// the membership, decides whether the silent one still runs its coordinator.
    pub fn with_stand_in(mut self, on: bool) -> Self {
        self.stand_in = on;
        self
    }

    /// Whether the cluster prepares for a full shutdown (seen once, kept for good): no shard
    /// is rebalanced or handed off, and the shards of a region that stops are not given a
    /// new home.
    pub fn is_preparing_for_shutdown(&self) -> bool {
        self.preparing_for_shutdown
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// The kind's role, if any.
    pub fn role(&self) -> Option<&str> {
        self.role.as_deref()
    }

    /// Replaces the membership with `members` (every member the node sees, any status) and
    /// the set of unreachable ones. Members that disappeared start lingering when they may
    /// still be running. Returns whether anything sharding cares about changed.
    pub fn update(
        &mut self,
        now: Instant,
        members: impl IntoIterator<Item = Member>,
        unreachable: BTreeSet<UniqueAddress>,
    ) -> bool {
        let new: BTreeMap<UniqueAddress, Member> = members
            .into_iter()
            .filter(|m| m.status != MemberStatus::Removed)
            .map(|m| (m.addr.clone(), m))
            .collect();
        let mut changed = new != self.members || unreachable != self.unreachable;
        if !self.preparing_for_shutdown
            && new.values().any(|m| m.status.is_preparing_for_shutdown())
        {
            self.preparing_for_shutdown = true;
            changed = true;
        }
        for (addr, old) in &self.members {
            if new.contains_key(addr) {
                continue;
            }
            // A member that left while reachable handed its shards off. One that went
            // unreachable first may not have: Exiting says the cluster let it go, not that its
            // regions finished handing off (they start when it is seen Leaving), and an Exiting
            // member cut off by a partition is removed without any downing decision while it
            // may still run shards (simulator seed 1869 of the reachability sweep); a Leaving
            // one may have been downed without our seeing it.
            let graceful = matches!(old.status, MemberStatus::Exiting | MemberStatus::Leaving)
                && !self.unreachable.contains(addr);
            if !graceful && !self.margin.is_zero() {
                self.lingering
                    .insert(addr.clone(), (old.clone(), now + self.margin));
            }
        }
        // A member that is back in the view (it cannot be, with the same uid) stops lingering.
        let before = self.lingering.len();
        self.lingering.retain(|a, _| !new.contains_key(a));
        changed |= before != self.lingering.len();
        self.members = new;
        self.unreachable = unreachable;
        changed | self.expire(now)
    }

    /// Forgets lingering members whose margin has passed. Returns whether any did.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.lingering.len();
        self.lingering.retain(|_, (_, until)| *until > now);
        before != self.lingering.len()
    }

    /// When the next lingering member expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.lingering.values().map(|(_, t)| *t).min()
    }

    /// The member `node` as currently seen (not lingering ones).
    pub fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.get(node)
    }

    /// This node's own status, if it is a member.
    pub fn self_status(&self) -> Option<MemberStatus> {
        self.members.get(&self.self_node).map(|m| m.status)
    }

    /// Whether this node has the kind's role (hosts shards rather than only proxying).
    pub fn self_has_role(&self) -> bool {
        match (&self.role, self.members.get(&self.self_node)) {
            (None, _) => true,
            (Some(r), Some(m)) => m.has_role(r),
            (Some(_), None) => false,
        }
    }

    fn with_role(&self, m: &Member) -> bool {
        self.role.as_ref().is_none_or(|r| m.has_role(r))
    }

    /// Whether `node` may still be running: a member in any status, or a lingering one.
    pub fn may_be_alive(&self, node: &UniqueAddress) -> bool {
        self.members.contains_key(node) || self.lingering.contains_key(node)
    }

    /// Whether `node` is a member some member cannot reach that is not on its way out (not
    /// Down, not removed): silent, for a reason nobody knows yet.
    pub fn is_silent(&self, node: &UniqueAddress) -> bool {
        self.members.contains_key(node)
            && self.unreachable.contains(node)
            && !self.is_terminating(node)
    }

    /// Whether `node` is on its way out after a failure: Down, or removed and lingering.
    /// Its region's shards are neither answered for nor re-homed until it is gone.
    pub fn is_terminating(&self, node: &UniqueAddress) -> bool {
        self.lingering.contains_key(node)
            || self
                .members
                .get(node)
                .is_some_and(|m| m.status == MemberStatus::Down)
    }

    /// Whether shards may be allocated to `node`: an Up member (or one preparing for a full
    /// shutdown) with the role, reachable.
    pub fn can_host(&self, node: &UniqueAddress) -> bool {
        self.members.get(node).is_some_and(|m| {
            m.status.counts_as_up() && self.with_role(m) && !self.unreachable.contains(node)
        })
    }

    /// Whether a region on `node` may register with the coordinator: a member that is
    /// WeaklyUp, Up (or preparing for a full shutdown), Leaving or Exiting (the coordinator
    /// hears what it hosts; it only allocates to Up ones).
    pub fn can_register(&self, node: &UniqueAddress) -> bool {
        self.members.get(node).is_some_and(|m| {
            m.status.counts_as_up()
                || matches!(
                    m.status,
                    MemberStatus::WeaklyUp | MemberStatus::Leaving | MemberStatus::Exiting
                )
        })
    }

    /// Members with the role whose regions a coordinator taking over must hear from before it
    /// knows every live shard: all that may host shards or may still be running (WeaklyUp, Up,
    /// Leaving, Exiting, Down, and lingering ones, which never answer and so hold allocation
    /// back until their margin has passed).
    pub fn expected_regions(&self) -> BTreeSet<UniqueAddress> {
        let mut out: BTreeSet<UniqueAddress> = self
            .members
            .values()
            .filter(|m| self.with_role(m) && m.status != MemberStatus::Joining)
            .map(|m| m.addr.clone())
            .collect();
        out.extend(
            self.lingering
                .values()
                .filter(|(m, _)| self.with_role(m))
                .map(|(m, _)| m.addr.clone()),
        );
        out
    }

    /// Members with the role that have been Up, oldest first, including ones on their way out
    /// (and lingering ones): the order in which the coordinator's home is chosen.
    fn by_age(&self) -> Vec<&Member> {
        let mut v: Vec<&Member> = self
            .members
            .values()
            .chain(self.lingering.values().map(|(m, _)| m))
            .filter(|m| {
                self.with_role(m)
                    && matches!(
                        m.status,
                        MemberStatus::Up
                            | MemberStatus::PreparingForShutdown
                            | MemberStatus::ReadyForShutdown
                            | MemberStatus::Leaving
                            | MemberStatus::Exiting
                            | MemberStatus::Down
                            | MemberStatus::Removed
                    )
                    && m.up_number != crate::membership::member::NOT_YET_UP
            })
            .collect();
        v.sort_by(|a, b| a.age_cmp(b));
        v
    }

    /// The node that hosts (or is about to host, or may still host) the coordinator: the oldest
    /// member with the role that has been Up and is not gone (lingering counts as not gone).
    pub fn coordinator_node(&self) -> Option<&UniqueAddress> {
        self.by_age().first().map(|m| &m.addr)
    }

    /// The member that may run the coordinator in place of the [coordinator
    /// node](Self::coordinator_node) while that one is silent: unreachable, whether or not
    /// it has been downed yet (when the view allows stand-ins): the oldest member with the role after it
    /// that is Up and that nobody reports unreachable. It *tries*: its coordinator starts only
    /// once it holds the kind's coordinator lease, which the store grants only after the
    /// silent node's tenure has run out (a node cut off from its peers but not from the store
    /// keeps renewing it, and keeps its coordinator). When the coordinator node is heard
    /// again there is no stand-in, and the stand-in's coordinator stops and gives the lease
    /// back; when it is removed, the stand-in is the oldest and simply stays.
    pub fn stand_in(&self) -> Option<&UniqueAddress> {
        if !self.stand_in {
            return None;
        }
        let ages = self.by_age();
        let (oldest, rest) = ages.split_first()?;
        // Silent, not leaving: a member on its way out that is still heard (a graceful leave
        // in a rolling update, say) hands its coordinator over the usual way, and a stand-in
        // then would start a second, early coordinator beside the hand-over.
        if !self.unreachable.contains(&oldest.addr) {
            return None;
        }
        rest.iter()
            .find(|m| {
                m.status.counts_as_up()
                    && self.members.contains_key(&m.addr)
                    && !self.unreachable.contains(&m.addr)
            })
            .map(|m| &m.addr)
    }

    /// Whether `node` may run the kind's coordinator now: the coordinator node or its
    /// [stand-in](Self::stand_in).
    pub fn may_run_coordinator(&self, node: &UniqueAddress) -> bool {
        self.coordinator_node() == Some(node) || self.stand_in() == Some(node)
    }

    /// Whether this node should run the coordinator now: it is the coordinator node and is Up
    /// (or preparing for a full shutdown) or Leaving (a leaving node keeps it until its own
    /// region has handed off; the next one starts only after this one is removed).
    pub fn self_hosts_coordinator(&self) -> bool {
        self.coordinator_node() == Some(&self.self_node)
            && self
                .self_status()
                .is_some_and(|s| s.counts_as_up() || s == MemberStatus::Leaving)
    }

    /// Where a region sends `Register`: from the oldest, every member up to and including the
    /// first one that is Up (older ones that are leaving may still host the coordinator), and
    /// the [stand-in](Self::stand_in), if any.
    pub fn registration_targets(&self) -> Vec<UniqueAddress> {
        let mut out = Vec::new();
        for m in self.by_age() {
            if matches!(m.status, MemberStatus::Down | MemberStatus::Removed)
                || !self.members.contains_key(&m.addr)
            {
                continue;
            }
            out.push(m.addr.clone());
            if m.status.counts_as_up() {
                break;
            }
        }
        if let Some(stand_in) = self.stand_in()
            && !out.contains(stand_in)
        {
            out.push(stand_in.clone());
        }
        out
    }

    /// Members with the kind's role whose regions may hold shards now (WeaklyUp, Up or
    /// preparing for a full shutdown, Leaving): the ones a cluster-wide statistics query asks.
    pub fn members_holding_shards(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.members_with_role()
            .filter(|m| {
                m.status.counts_as_up()
                    || matches!(m.status, MemberStatus::WeaklyUp | MemberStatus::Leaving)
            })
            .map(|m| &m.addr)
    }

    /// Whether no member but this node may be given the kind's shards, now or later: every
    /// other member with the role is on its way out (Leaving, Exiting, Down) or gone. A
    /// region that leaves then has nobody to hand its shards to.
    pub fn nobody_else_may_host(&self) -> bool {
        !self.members_with_role().any(|m| {
            m.addr != self.self_node
                && (m.status.counts_as_up()
                    || matches!(m.status, MemberStatus::Joining | MemberStatus::WeaklyUp))
        })
    }

    /// Members with the kind's role (for allocation snapshots).
    pub fn members_with_role(&self) -> impl Iterator<Item = &Member> {
        self.members.values().filter(|m| self.with_role(m))
    }

    /// Whether any member is unreachable (no rebalancing then).
    pub fn any_unreachable(&self) -> bool {
        !self.unreachable.is_empty()
    }

    /// Whether any member is Joining or WeaklyUp (no rebalancing then).
    pub fn any_joining(&self) -> bool {
        self.members
            .values()
            .any(|m| matches!(m.status, MemberStatus::Joining | MemberStatus::WeaklyUp))
    }

    /// How many members with the role are Up (or preparing for a full shutdown).
    pub fn up_count(&self) -> usize {
        self.members_with_role()
            .filter(|m| m.status.counts_as_up())
            .count()
    }
}

#[cfg(test)]
mod tests;
