//! The one versioned state every node gossips: members, who has seen this version,
//! reachability, and tombstones of removed nodes (digest §4.3, §4.6).
//!
//! Everything here is a pure function of the state. The merge of two concurrent states is a
//! CRDT (commutative, associative, idempotent on the members, reachability and tombstones it
//! keeps; the seen set is reset because nobody has seen the merged result yet).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::address::UniqueAddress;
use super::member::{Member, MemberStatus};
use super::reachability::{Reachability, ReachabilityStatus};
use super::vclock::{Ordering, VectorClock};

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

    /// Marks `node` Down and drops it from the seen set (digest §4.3 `markAsDown`).
    pub fn mark_down(&mut self, node: &UniqueAddress) {
        if let Some(m) = self.members.get(node) {
            if m.status != MemberStatus::Down {
                let down = m.with_status(MemberStatus::Down);
                Arc::make_mut(&mut self.members).insert(node.clone(), down);
            }
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

    /// Prunes clock entries of members that are Down or Exiting here but absent from `other`
    /// (the other side already removed them); done on both sides before a concurrent merge so
    /// that the leader's pruning at removal is mirrored (digest §4.4).
    pub fn prune_departed_against(&mut self, other: &Gossip) {
        let departed: Vec<UniqueAddress> = self
            .members
            .values()
            .filter(|m| {
                matches!(m.status, MemberStatus::Down | MemberStatus::Exiting)
                    && !other.has_member(&m.addr)
            })
            .map(|m| m.addr.clone())
            .collect();
        for n in departed {
            self.version.prune(&n);
        }
    }

    /// Merges two concurrent states (digest §4.3).
    ///
    /// Tombstones are united; the clock is the pointwise max with tombstoned entries pruned; a
    /// member on both sides takes the higher merge priority; a member on one side survives
    /// unless tombstoned or Down/Exiting (the other side already removed it); reachability
    /// takes, per observer, the rows of the higher version; the seen set is emptied.
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
                (Some(one), None) | (None, Some(one)) => {
                    if matches!(one.status, MemberStatus::Down | MemberStatus::Exiting) {
                        continue;
                    }
                    one.clone()
                }
                (None, None) => continue,
            };
            members.insert(k.clone(), picked);
        }
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
    /// side of a partition and their opinion must not block convergence; digest §4.6).
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

    /// Members that some non-Down observer sees as unreachable or terminated.
    pub fn unreachable_members(&self) -> BTreeSet<UniqueAddress> {
        self.reachability
            .all_unreachable_or_terminated()
            .into_iter()
            .filter(|n| self.members.contains_key(n) && !self.is_reachable(n))
            .collect()
    }

    /// Whether `self_node`, holding this state, sees convergence (digest §4.6): every Up or
    /// Leaving member has seen this version (or confirmed its exit), and every unreachable
    /// member other than self is Down or Exiting.
    pub fn convergence(
        &self,
        self_node: &UniqueAddress,
        exiting_confirmed: &BTreeSet<UniqueAddress>,
    ) -> bool {
        let unreachable_ok = self.unreachable_members().iter().all(|n| {
            n == self_node
                || exiting_confirmed.contains(n)
                || self
                    .members
                    .get(n)
                    .is_some_and(|m| matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
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
    /// [`leader_fallback_rank`] (digest §4.6). `None` for an empty state.
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
        let candidates: Vec<&Member> = self
            .members
            .values()
            .filter(|m| filter(m))
            .filter(|m| m.status != MemberStatus::Down)
            .filter(|m| &m.addr == self_node || self.is_reachable(&m.addr))
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

    /// Whether the invariants of digest §4.3 hold: no Removed member, seen and reachability
    /// only mention members, clock entries only for members or tombstoned nodes.
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
mod tests {
    use super::*;
    use crate::membership::address::Address;
    use crate::membership::member::NOT_YET_UP;
    use MemberStatus::*;
    use proptest::prelude::*;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("n", i), u64::from(i))
    }

    fn m(i: u16, status: MemberStatus) -> Member {
        Member {
            addr: n(i),
            status,
            up_number: if matches!(status, Joining) {
                NOT_YET_UP
            } else {
                u32::from(i)
            },
            roles: Default::default(),
            app_version: "1".into(),
        }
    }

    fn g(members: &[(u16, MemberStatus)], seen: &[u16]) -> Gossip {
        let mut g = Gossip::with_members(members.iter().map(|&(i, s)| m(i, s)));
        for s in seen {
            g.see(&n(*s));
        }
        g
    }

    /// Digest §4.6: who must have seen a version, and which unreachable members block.
    #[test]
    fn convergence_table() {
        let none = BTreeSet::new();
        let me = n(1);
        assert!(g(&[(1, Up), (2, Up)], &[1, 2]).convergence(&me, &none));
        assert!(
            !g(&[(1, Up), (2, Up)], &[1]).convergence(&me, &none),
            "Up member has not seen it"
        );
        assert!(
            !g(&[(1, Up), (2, Leaving)], &[1]).convergence(&me, &none),
            "Leaving must see it too"
        );
        assert!(
            g(&[(1, Up), (2, Joining), (3, WeaklyUp)], &[1]).convergence(&me, &none),
            "joiners never block"
        );
        assert!(
            g(&[(1, Up), (2, Down), (3, Exiting)], &[1]).convergence(&me, &none),
            "Down/Exiting need not see"
        );

        let mut unreachable_up = g(&[(1, Up), (2, Up), (3, Up)], &[1, 2, 3]);
        unreachable_up.reachability.unreachable(&n(1), &n(3));
        assert!(
            !unreachable_up.convergence(&me, &none),
            "an unreachable Up member blocks"
        );
        let mut downed = unreachable_up.clone();
        downed.mark_down(&n(3));
        assert!(
            downed.convergence(&me, &none),
            "once Down it no longer blocks"
        );

        let mut unreachable_joiner = g(&[(1, Up), (2, Joining)], &[1]);
        unreachable_joiner.reachability.unreachable(&n(1), &n(2));
        assert!(
            !unreachable_joiner.convergence(&me, &none),
            "an unreachable joiner blocks until downed"
        );

        let mut seen_by_down = g(&[(1, Up), (2, Up), (3, Down)], &[1, 2]);
        seen_by_down.reachability.unreachable(&n(3), &n(2));
        assert!(
            seen_by_down.convergence(&me, &none),
            "observations of Down members are ignored"
        );

        let mut self_unreachable = g(&[(1, Up), (2, Up)], &[1, 2]);
        self_unreachable.reachability.unreachable(&n(2), &n(1));
        assert!(
            self_unreachable.convergence(&me, &none),
            "self being unreachable does not block self"
        );

        let confirmed: BTreeSet<_> = [n(2)].into_iter().collect();
        let mut exiting = g(&[(1, Up), (2, Exiting)], &[1]);
        exiting.reachability.unreachable(&n(1), &n(2));
        assert!(exiting.convergence(&me, &confirmed));
    }

    /// Digest §4.6: the leader is the first reachable Up-like member by address; else fallback order.
    #[test]
    fn leader_table() {
        let me = n(5);
        assert_eq!(g(&[(1, Up), (2, Up), (5, Up)], &[]).leader(&me), Some(n(1)));
        assert_eq!(
            g(&[(1, Joining), (2, Up), (5, Up)], &[]).leader(&me),
            Some(n(2)),
            "joiners do not lead"
        );
        assert_eq!(
            g(&[(1, Leaving), (2, Up)], &[]).leader(&me),
            Some(n(1)),
            "leaving members still lead"
        );
        assert_eq!(g(&[(1, Down), (2, Up)], &[]).leader(&me), Some(n(2)));
        assert_eq!(g(&[(1, Exiting), (2, Up)], &[]).leader(&me), Some(n(2)));
        let mut unreachable = g(&[(1, Up), (2, Up), (5, Up)], &[]);
        unreachable.reachability.unreachable(&n(2), &n(1));
        assert_eq!(
            unreachable.leader(&me),
            Some(n(2)),
            "unreachable members do not lead"
        );
        assert_eq!(
            unreachable.leader(&n(1)),
            Some(n(1)),
            "but self always counts for self"
        );
        assert_eq!(
            g(&[(1, Exiting), (2, Joining), (3, WeaklyUp)], &[]).leader(&me),
            Some(n(3)),
            "fallback: WeaklyUp, Joining, Exiting, Down"
        );
        assert_eq!(g(&[(1, Down), (2, Exiting)], &[]).leader(&me), Some(n(2)));
        assert_eq!(Gossip::default().leader(&me), None);
    }

    #[test]
    fn merge_keeps_higher_priority_and_drops_removed() {
        let mut a = g(&[(1, Up), (2, Up), (3, Up)], &[1]);
        a.version.increment(&n(1));
        let mut b = g(&[(1, Up), (2, Leaving), (3, Down)], &[2]);
        b.version.increment(&n(2));
        b.remove(&n(3), 7);
        let merged = a.merge(&b);
        assert_eq!(merged.members.len(), 2, "tombstoned member stays removed");
        assert_eq!(merged.members[&n(2)].status, Leaving);
        assert!(merged.seen.is_empty());
        assert_eq!(merged.version.get(&n(1)), 1);
        assert_eq!(merged.version.get(&n(2)), 1);
        assert!(merged.check_invariants().is_ok());

        // One-sided Down/Exiting members: the other side already removed them.
        let a = g(&[(1, Up), (4, Exiting)], &[]);
        let b = g(&[(1, Up)], &[]);
        assert!(!a.merge(&b).has_member(&n(4)));
        let a = g(&[(1, Up), (4, Joining)], &[]);
        assert!(
            a.merge(&b).has_member(&n(4)),
            "a new joiner on one side survives"
        );
    }

    /// A gossip over 5 nodes where each node is a member with some status or tombstoned, and
    /// each observer's reachability rows are a function of its version (only the observer ever
    /// writes its rows, so two states with equal observer versions agree on them).
    fn arb_gossip() -> impl Strategy<Value = Gossip> {
        let statuses = prop::sample::select(vec![Joining, WeaklyUp, Up, Leaving, Exiting, Down]);
        let node = prop_oneof![
            4 => (statuses, 1u32..4).prop_map(Some),
            1 => Just(None),
        ];
        (
            proptest::collection::vec(node, 5),
            proptest::collection::vec(0u64..4, 5),
            proptest::collection::vec(0u64..3, 5),
        )
            .prop_map(|(nodes, clock, reach_versions)| {
                let mut g = Gossip::default();
                for (i, st) in nodes.iter().enumerate() {
                    let addr = n(i as u16);
                    match st {
                        Some((status, up)) => {
                            let mut mm = m(i as u16, *status);
                            mm.up_number = *up;
                            Arc::make_mut(&mut g.members).insert(addr, mm);
                        }
                        None => {
                            g.tombstones.insert(addr, 1);
                        }
                    }
                }
                // An observer's rows at version v are fixed by v; removing a node from the
                // table drops its rows without a version bump, as `Reachability::remove` does.
                let mut observers = BTreeMap::new();
                for (i, v) in reach_versions.iter().enumerate() {
                    let obs = n(i as u16);
                    if !g.has_member(&obs) || *v == 0 {
                        continue;
                    }
                    let subjects = (1..=*v)
                        .map(|step| n(((i as u64 + step) % 5) as u16))
                        .filter(|s| g.has_member(s) && *s != obs)
                        .map(|s| (s, ReachabilityStatus::Unreachable))
                        .collect();
                    observers.insert(
                        obs,
                        crate::membership::reachability::ObserverRows {
                            version: *v,
                            subjects,
                        },
                    );
                }
                g.reachability = Reachability::from_observers(observers);
                g.version = VectorClock::from_entries(
                    clock
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (n(i as u16), *c))
                        .filter(|(a, _)| !g.tombstones.contains_key(a)),
                );
                g
            })
    }

    fn normalized(mut g: Gossip) -> Gossip {
        g.seen.clear();
        g
    }

    proptest! {
        /// Gossip merge is a CRDT join: commutative, associative, idempotent.
        #[test]
        fn merge_is_a_crdt(a in arb_gossip(), b in arb_gossip(), c in arb_gossip()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
            prop_assert_eq!(a.merge(&a), normalized(a.clone()));
            prop_assert!(a.merge(&b).check_invariants().is_ok());
        }

        /// A member's status in the merge is never lower (in merge priority) than on either side.
        #[test]
        fn merge_never_moves_a_status_backwards(a in arb_gossip(), b in arb_gossip()) {
            let merged = a.merge(&b);
            for (addr, mm) in merged.members.iter() {
                for side in [&a, &b] {
                    if let Some(before) = side.member(addr) {
                        prop_assert!(mm.status.merge_rank() >= before.status.merge_rank());
                    }
                }
            }
        }
    }
}
