//! Cluster events published to subscribers, computed as the difference of two states.

use std::collections::BTreeSet;

use super::gossip::Gossip;
use super::member::{Member, MemberStatus};
use crate::address::UniqueAddress;

/// Something changed in the cluster as this node sees it.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ClusterEvent {
    /// A member appeared as Joining.
    MemberJoined(Member),
    /// A member became WeaklyUp.
    MemberWeaklyUp(Member),
    /// A member became Up.
    MemberUp(Member),
    /// A member started leaving.
    MemberLeft(Member),
    /// A member is exiting.
    MemberExited(Member),
    /// A member was marked Down.
    MemberDowned(Member),
    /// A member is preparing for a full cluster shutdown (every Up member is marked so).
    MemberPreparingForShutdown(Member),
    /// A member is ready for a full cluster shutdown: every member had seen the preparation.
    MemberReadyForShutdown(Member),
    /// A member was removed; `previous` is the status it had.
    MemberRemoved {
        /// The member, with status Removed.
        member: Member,
        /// Its status before removal.
        previous: MemberStatus,
    },
    /// A member became unreachable (never published about self).
    UnreachableMember(Member),
    /// A member became reachable again.
    ReachableMember(Member),
    /// The leader changed.
    LeaderChanged(Option<UniqueAddress>),
    /// The leader among members with `role` changed.
    RoleLeaderChanged {
        /// The role.
        role: String,
        /// Its new leader.
        leader: Option<UniqueAddress>,
    },
}

fn status_event(m: &Member) -> Option<ClusterEvent> {
    let m = m.clone();
    Some(match m.status {
        MemberStatus::Joining => ClusterEvent::MemberJoined(m),
        MemberStatus::WeaklyUp => ClusterEvent::MemberWeaklyUp(m),
        MemberStatus::Up => ClusterEvent::MemberUp(m),
        MemberStatus::Leaving => ClusterEvent::MemberLeft(m),
        MemberStatus::Exiting => ClusterEvent::MemberExited(m),
        MemberStatus::Down => ClusterEvent::MemberDowned(m),
        MemberStatus::PreparingForShutdown => ClusterEvent::MemberPreparingForShutdown(m),
        MemberStatus::ReadyForShutdown => ClusterEvent::MemberReadyForShutdown(m),
        MemberStatus::Removed => return None,
    })
}

/// The events that turn `old` into `new` as `self_node` sees it, in a fixed order: removals,
/// status changes, reachability, then leadership.
pub fn diff(old: &Gossip, new: &Gossip, self_node: &UniqueAddress, out: &mut Vec<ClusterEvent>) {
    // Both maps are sorted by address: walk them together once (states carry every member, and
    // this runs on every change, so per-member lookups would cost O(n log n) each time).
    let mut removed = Vec::new();
    let mut changed = Vec::new();
    let mut a = old.members.iter().peekable();
    let mut b = new.members.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(&(_, m)), None) => {
                removed.push(m);
                a.next();
            }
            (None, Some(&(_, m))) => {
                changed.push(m);
                b.next();
            }
            (Some(&(ka, ma)), Some(&(kb, mb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    removed.push(ma);
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    changed.push(mb);
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if ma.status != mb.status || ma.up_number != mb.up_number {
                        changed.push(mb);
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    for m in removed {
        let mut gone = m.clone();
        gone.status = MemberStatus::Removed;
        out.push(ClusterEvent::MemberRemoved {
            member: gone,
            previous: m.status,
        });
    }
    for m in changed {
        if let Some(e) = status_event(m) {
            out.push(e);
        }
    }
    let old_unreachable = old.unreachable_members();
    let new_unreachable = new.unreachable_members();
    for n in new_unreachable.difference(&old_unreachable) {
        if n != self_node
            && let Some(m) = new.members.get(n)
        {
            out.push(ClusterEvent::UnreachableMember(m.clone()));
        }
    }
    for n in old_unreachable.difference(&new_unreachable) {
        if n != self_node
            && let Some(m) = new.members.get(n)
        {
            out.push(ClusterEvent::ReachableMember(m.clone()));
        }
    }
    let (ol, nl) = (old.leader(self_node), new.leader(self_node));
    if ol != nl {
        out.push(ClusterEvent::LeaderChanged(nl));
    }
    let roles: BTreeSet<String> = old.all_roles().union(&new.all_roles()).cloned().collect();
    for role in roles {
        let (o, n) = (
            old.role_leader(self_node, &role),
            new.role_leader(self_node, &role),
        );
        if o != n {
            out.push(ClusterEvent::RoleLeaderChanged { role, leader: n });
        }
    }
}
