//! The one versioned state every node gossips: members, who has seen this version,
//! reachability, and tombstones of removed nodes; and what it implies (convergence, leader).
//!
//! Everything here is a pure function of the state. The merge of two concurrent states is a
//! CRDT (commutative, associative, idempotent on the members, reachability and tombstones it
//! keeps; the seen set is reset because nobody has seen the merged result yet).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::member::{Member, MemberStatus};
use super::reachability::{Reachability, ReachabilityStatus};
use super::vclock::{Ordering, VectorClock};
use crate::address::UniqueAddress;

/// The gossiped cluster state.
#[derive(Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Gossip {
    /// Live members (never Removed), by unique address. Shared copy-on-write: members change
    /// rarely while seen sets change on nearly every exchange, so copies of a state share this
    /// table until one of them really changes a member.
    pub members: Arc<BTreeMap<UniqueAddress, Member>>,
    /// Members that have seen exactly this version.
    pub seen: BTreeSet<UniqueAddress>,
    /// Who sees whom as unreachable.
    pub reachability: Reachability,
    /// The version of this state.
    pub version: VectorClock,
    /// Removed nodes and when they were removed (milliseconds of the remover's clock), so that
    /// an older gossip cannot bring them back. Pruned after `prune-gossip-tombstones-after`.
    pub tombstones: BTreeMap<UniqueAddress, u64>,
}

impl std::fmt::Debug for Gossip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gossip")
            .field("members", &self.members.values().collect::<Vec<_>>())
            .field("seen", &self.seen)
            .field(
                "reachability",
                &self.reachability.records().collect::<Vec<_>>(),
            )
            .field("version", &self.version)
            .field("tombstones", &self.tombstones)
            .finish()
    }
}

impl Gossip {
    /// A state holding just `members` (version empty, nobody has seen it).
    pub fn with_members(members: impl IntoIterator<Item = Member>) -> Self {
        Gossip {
            members: Arc::new(members.into_iter().map(|m| (m.addr.clone(), m)).collect()),
            ..Default::default()
        }
    }

    /// The member with this unique address, if present.
    pub fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.get(node)
    }

    /// Whether `node` is a member.
    pub fn has_member(&self, node: &UniqueAddress) -> bool {
        self.members.contains_key(node)
    }

    /// Whether `node` has seen this version.
    pub fn seen_by(&self, node: &UniqueAddress) -> bool {
        self.seen.contains(node)
    }

    /// A stable 64-bit digest of the seen set (FNV-1a over the sorted addresses), sent in
    /// gossip status messages so that peers with the same version but different seen sets
    /// notice and exchange the full state. The reference uses SHA-1; any stable hash works.
    pub fn seen_digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for n in &self.seen {
            eat(n.address.host.as_bytes());
            eat(&n.address.port.to_le_bytes());
            eat(&n.uid.to_le_bytes());
        }
        h
    }

    /// Marks the state as seen by `node` only (a local change makes everyone else's view stale).
    pub fn only_seen_by(&mut self, node: &UniqueAddress) {
        self.seen.clear();
        self.seen.insert(node.clone());
    }

    /// Adds `node` to the seen set.
    pub fn see(&mut self, node: &UniqueAddress) {
        self.seen.insert(node.clone());
    }

    /// Replaces (or adds) a member. Debug builds check the status transition.
    pub fn update_member(&mut self, member: Member) {
        if let Some(old) = self.members.get(&member.addr) {
            debug_assert!(
                old.status.can_move_to(member.status),
                "{:?} -> {:?}",
                old,
                member
            );
        }
        Arc::make_mut(&mut self.members).insert(member.addr.clone(), member);
    }

    /// Marks `node` Down and drops it from the seen set (a Down member need not see anything
    /// for convergence).
    pub fn mark_down(&mut self, node: &UniqueAddress) {
        if let Some(m) = self.members.get(node)
            && m.status != MemberStatus::Down
        {
            let down = m.with_status(MemberStatus::Down);
            Arc::make_mut(&mut self.members).insert(node.clone(), down);
        }
        self.seen.remove(node);
    }

    /// Removes `node` for good: out of members, seen and reachability, its clock entry pruned,
    /// and a tombstone added so an older gossip cannot resurrect it.
    pub fn remove(&mut self, node: &UniqueAddress, now_millis: u64) {
        if self.members.contains_key(node) {
            Arc::make_mut(&mut self.members).remove(node);
        }
        self.seen.remove(node);
        self.reachability.remove(std::slice::from_ref(node));
        self.version.prune(node);
        self.tombstones.insert(node.clone(), now_millis);
    }

    /// Forgets tombstones older than `cutoff_millis`.
    pub fn prune_tombstones(&mut self, cutoff_millis: u64) {
        self.tombstones.retain(|_, t| *t >= cutoff_millis);
    }

    /// Merges two concurrent states.
    ///
    /// Tombstones are united; the clock is the pointwise max with tombstoned entries pruned; a
    /// member on both sides takes the higher merge priority; a member on one side survives
    /// unless tombstoned, whatever its status; reachability takes, per observer, the rows of
    /// the higher version; the seen set is emptied.
    ///
    /// Why a one-sided Down or Exiting member survives (the reference drops it, taking its
    /// absence on the other side for a removal): every removal here leaves a tombstone, so an
    /// absence without one means the other side never knew the member (a joiner welcomed by
    /// one member only, say). Dropping it there loses the Down while the merged clock still
    /// claims the change that made it Down; a stale state that still holds the member alive
    /// then compares as newer, or merges it back, and a removed incarnation comes back.
    pub fn merge(&self, other: &Gossip) -> Gossip {
        let mut tombstones = self.tombstones.clone();
        for (n, t) in &other.tombstones {
            let e = tombstones.entry(n.clone()).or_insert(*t);
            *e = (*e).max(*t);
        }
        let mut version = self.version.merge(&other.version);
        for n in tombstones.keys() {
            version.prune(n);
        }
        let mut members = BTreeMap::new();
        let keys: BTreeSet<&UniqueAddress> =
            self.members.keys().chain(other.members.keys()).collect();
        for k in keys {
            if tombstones.contains_key(k) {
                continue;
            }
            let picked = match (self.members.get(k), other.members.get(k)) {
                (Some(a), Some(b)) => Member::highest_priority(a, b),
                (Some(one), None) | (None, Some(one)) => one.clone(),
                (None, None) => continue,
            };
            members.insert(k.clone(), picked);
        }
        debug_assert_eq!(
            succeeds(self, &members, &version, &tombstones).and_then(|()| succeeds(
                other,
                &members,
                &version,
                &tombstones
            )),
            Ok(()),
            "a merge moved a member back or a clock entry backwards"
        );
        let member_set: BTreeSet<UniqueAddress> = members.keys().cloned().collect();
        let reachability = self.reachability.merge(&other.reachability, &member_set);
        // Keep sharing the table when the merge changed nothing in it.
        let members = if *self.members == members {
            Arc::clone(&self.members)
        } else {
            Arc::new(members)
        };
        Gossip {
            members,
            seen: BTreeSet::new(),
            reachability,
            version,
            tombstones,
        }
    }

    /// How this state's version relates to `other`'s.
    pub fn compare(&self, other: &Gossip) -> Ordering {
        self.version.compare(&other.version)
    }

    /// Reachability of `subject` ignoring what Down members observed (they may be on the other
    /// side of a partition and their opinion must not block convergence).
    pub fn reachability_status(&self, subject: &UniqueAddress) -> ReachabilityStatus {
        self.reachability.status_by(subject, |observer| {
            self.members
                .get(observer)
                .is_some_and(|m| m.status != MemberStatus::Down)
        })
    }

    /// Whether `subject` is reachable in the cluster-wide view (Down observers excluded).
    pub fn is_reachable(&self, subject: &UniqueAddress) -> bool {
        self.reachability_status(subject) == ReachabilityStatus::Reachable
    }

    /// Members that some non-Down observer sees as unreachable or terminated (those for which
    /// [`is_reachable`](Self::is_reachable) is false), found in one pass over the table.
    pub fn unreachable_members(&self) -> BTreeSet<UniqueAddress> {
        let mut unreachable = self.reachability.unreachable_by(|observer| {
            self.members
                .get(observer)
                .is_some_and(|m| m.status != MemberStatus::Down)
        });
        unreachable.retain(|n| self.members.contains_key(n));
        unreachable
    }

    /// Whether `self_node`, holding this state, sees convergence: every Up or Leaving member
    /// has seen this version (or confirmed its exit), and every unreachable member other than
    /// self is Down or Exiting, or Joining while this node reaches a member that is Up (or
    /// Leaving, or preparing for a full shutdown). Joining and WeaklyUp members need not have
    /// seen it.
    ///
    /// An unreachable Joining member does not block it beside a reachable Up member, where
    /// the reference's does: such a member was never Up, holds nothing, and is moved Up only
    /// once it is reachable again; its own side cannot move anyone Up either, since the Up
    /// members it cannot reach block convergence there. Blocking on it held every leave, and
    /// every other joiner, up until the split-brain resolver downed it (`stable-after`,
    /// 20 s), and a member that was leaving then could be downed with it
    /// (docs/differences-from-akka.md). Without a reachable Up member it still blocks: a side
    /// of joiners alone would otherwise move itself Up beside a cluster that moved them Up
    /// too (the sharding sweep's seed 1177 with leases, store cuts and reachability settling).
    pub fn convergence(
        &self,
        self_node: &UniqueAddress,
        exiting_confirmed: &BTreeSet<UniqueAddress>,
    ) -> bool {
        let unreachable = self.unreachable_members();
        let reaches_an_up_member = self.members.values().any(|m| {
            m.status.must_see_for_convergence()
                && (&m.addr == self_node || !unreachable.contains(&m.addr))
        });
        let unreachable_ok = unreachable.iter().all(|n| {
            n == self_node
                || exiting_confirmed.contains(n)
                || self.members.get(n).is_some_and(|m| match m.status {
                    MemberStatus::Down | MemberStatus::Exiting => true,
                    MemberStatus::Joining => reaches_an_up_member,
                    _ => false,
                })
        });
        unreachable_ok
            && self.members.values().all(|m| {
                !m.status.must_see_for_convergence()
                    || self.seen.contains(&m.addr)
                    || exiting_confirmed.contains(&m.addr)
            })
    }

    /// The leader as `self_node` sees it: among reachable (or self), non-Down members, the
    /// first in address order with an Up-like status; failing that, the first by
    /// [`leader_fallback_rank`]. No election: every node that holds the same state and sees
    /// the same members as reachable names the same leader. `None` for an empty state.
    pub fn leader(&self, self_node: &UniqueAddress) -> Option<UniqueAddress> {
        self.leader_among(self_node, |_| true)
    }

    /// The leader among members with `role`.
    pub fn role_leader(&self, self_node: &UniqueAddress, role: &str) -> Option<UniqueAddress> {
        self.leader_among(self_node, |m| m.has_role(role))
    }

    fn leader_among(
        &self,
        self_node: &UniqueAddress,
        filter: impl Fn(&Member) -> bool,
    ) -> Option<UniqueAddress> {
        // The unreachable set once, not `is_reachable` per member: each of those walks every
        // observer row, O(members x observers) per call, and this runs for every gossip state
        // a node takes in.
        let unreachable = self.unreachable_members();
        let candidates: Vec<&Member> = self
            .members
            .values()
            .filter(|m| filter(m))
            .filter(|m| m.status != MemberStatus::Down)
            .filter(|m| &m.addr == self_node || !unreachable.contains(&m.addr))
            .collect();
        candidates
            .iter()
            .find(|m| m.status.leader_eligible())
            .or_else(|| {
                candidates
                    .iter()
                    .min_by_key(|m| (leader_fallback_rank(m.status), &m.addr))
            })
            .map(|m| m.addr.clone())
    }

    /// The oldest member (smallest up-number, ties by address) that is Up-like, optionally with `role`.
    pub fn oldest(&self, role: Option<&str>) -> Option<&Member> {
        self.members
            .values()
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .filter(|m| m.up_number != super::member::NOT_YET_UP)
            .filter(|m| !matches!(m.status, MemberStatus::Down | MemberStatus::Removed))
            .min_by(|a, b| a.age_cmp(b))
    }

    /// All roles carried by members, sorted.
    pub fn all_roles(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.roles.iter().cloned())
            .collect()
    }

    /// Whether this state may follow `old` on one node, which taking a newer state, merging a
    /// concurrent one and changing it locally all must keep: every member in both has a status
    /// it can reach from its old one ([`MemberStatus::can_become`]), and no clock entry went
    /// back (an entry goes only with its node, which leaves a tombstone).
    pub(crate) fn check_succession(&self, old: &Gossip) -> Result<(), String> {
        succeeds(old, &self.members, &self.version, &self.tombstones)
    }

    /// Whether the state's invariants hold: no Removed member, seen and reachability only
    /// mention members, clock entries only for members or tombstoned nodes.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(m) = self
            .members
            .values()
            .find(|m| m.status == MemberStatus::Removed)
        {
            return Err(format!("removed member kept: {m:?}"));
        }
        if let Some(n) = self.seen.iter().find(|n| !self.members.contains_key(*n)) {
            return Err(format!("seen by non-member {n}"));
        }
        for (o, s, _) in self.reachability.records() {
            if !self.members.contains_key(o) || !self.members.contains_key(s) {
                return Err(format!("reachability record {o} -> {s} about a non-member"));
            }
        }
        if let Some(m) = self
            .members
            .keys()
            .find(|n| self.tombstones.contains_key(*n))
        {
            return Err(format!("tombstoned node still a member: {m}"));
        }
        Ok(())
    }
}

/// Whether `members`, `version` and `tombstones` may follow `old`: no member in both moved
/// against the lifecycle, and no clock entry of a node without a tombstone went back.
fn succeeds(
    old: &Gossip,
    members: &BTreeMap<UniqueAddress, Member>,
    version: &VectorClock,
    tombstones: &BTreeMap<UniqueAddress, u64>,
) -> Result<(), String> {
    for (node, was) in old.members.iter() {
        if let Some(now) = members.get(node)
            && !was.status.can_become(now.status)
        {
            return Err(format!(
                "member {node} went from {} to {}",
                was.status, now.status
            ));
        }
    }
    for (node, was) in old.version.entries() {
        let now = version.get(node);
        if now < was && !tombstones.contains_key(node) {
            return Err(format!("clock entry of {node} went from {was} to {now}"));
        }
    }
    Ok(())
}

/// Fallback order when no member is Up-like: Down last, then Exiting, then Joining, then WeaklyUp
/// (the reference's `leaderStatusOrdering`); lower rank leads.
pub fn leader_fallback_rank(status: MemberStatus) -> u8 {
    match status {
        MemberStatus::Down => 4,
        MemberStatus::Exiting => 3,
        MemberStatus::Joining => 2,
        MemberStatus::WeaklyUp => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
