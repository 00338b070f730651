//! Members, their lifecycle statuses, the allowed transitions and merge priority.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::address::UniqueAddress;

/// Where a member is in its lifecycle.
///
/// `Joining → (WeaklyUp) → Up → Leaving → Exiting → Removed`, with `Down` reachable from any
/// live status and leading only to `Removed`. `PreparingForShutdown`/`ReadyForShutdown` belong
/// to a full-cluster shutdown.
#[derive(
    Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
pub enum MemberStatus {
    /// Asked to join; not yet moved up by the leader.
    Joining,
    /// Moved up by the leader while convergence was blocked (a partition); not counted for convergence.
    WeaklyUp,
    /// A full member.
    Up,
    /// Full-cluster shutdown requested.
    PreparingForShutdown,
    /// Full-cluster shutdown requested and seen by all.
    ReadyForShutdown,
    /// Asked to leave gracefully.
    Leaving,
    /// Leaving, and the leader has moved it on; it hands over and shuts down.
    Exiting,
    /// Declared dead; will be removed once unreachable or gone.
    Down,
    /// Gone; only appears in events (removed members are tombstoned, not kept).
    Removed,
}

impl MemberStatus {
    /// Every status, in declaration order (for tables and property tests).
    pub const ALL: [MemberStatus; 9] = [
        MemberStatus::Joining,
        MemberStatus::WeaklyUp,
        MemberStatus::Up,
        MemberStatus::PreparingForShutdown,
        MemberStatus::ReadyForShutdown,
        MemberStatus::Leaving,
        MemberStatus::Exiting,
        MemberStatus::Down,
        MemberStatus::Removed,
    ];

    /// Whether a member may move from `self` to `to`. Staying put is allowed; Down leads
    /// only to Removed, and nothing leaves Removed.
    pub fn can_move_to(self, to: MemberStatus) -> bool {
        use MemberStatus::*;
        if self == to {
            return true;
        }
        match self {
            Joining => matches!(to, WeaklyUp | Up | Leaving | Down | Removed),
            WeaklyUp => matches!(to, Up | Leaving | Down | Removed),
            Up => matches!(to, Leaving | Down | Removed | PreparingForShutdown),
            Leaving => matches!(to, Exiting | Down | Removed),
            Exiting => matches!(to, Removed | Down),
            Down => matches!(to, Removed),
            PreparingForShutdown => matches!(to, ReadyForShutdown | Removed | Leaving | Down),
            ReadyForShutdown => matches!(to, Removed | Leaving | Down),
            Removed => false,
        }
    }

    /// Whether a member may get from `self` to `later` through allowed transitions, in any
    /// number of steps (staying put included). A node that takes a newer state, or merges two,
    /// may see several of a member's transitions at once: each of them must be allowed.
    pub(crate) fn can_become(self, later: MemberStatus) -> bool {
        // Every allowed transition raises the merge rank (the transition table test checks
        // it), so the search ends.
        self == later
            || MemberStatus::ALL
                .iter()
                .any(|&next| next != self && self.can_move_to(next) && next.can_become(later))
    }

    /// Rank used when two gossips disagree about a member: the higher rank wins the merge.
    ///
    /// Removed > Down > Exiting > Leaving > ReadyForShutdown > PreparingForShutdown > Up >
    /// WeaklyUp > Joining: the status further along wins, so a merge never moves a member
    /// back. Every allowed transition goes to a higher rank (the transition table test checks
    /// it), so the merge of two views of one member is always reachable from both.
    ///
    /// The reference's `highestPriorityOf` ranks ReadyForShutdown above Down, Exiting and
    /// Leaving, although a ReadyForShutdown member may move on to all three: a merge with a
    /// concurrent state that still had it ReadyForShutdown would undo its leave (or its
    /// downing), and a full cluster shutdown is exactly when every member leaves from
    /// ReadyForShutdown. See `docs/differences-from-akka.md`.
    pub fn merge_rank(self) -> u8 {
        use MemberStatus::*;
        match self {
            Joining => 0,
            WeaklyUp => 1,
            Up => 2,
            PreparingForShutdown => 3,
            ReadyForShutdown => 4,
            Leaving => 5,
            Exiting => 6,
            Down => 7,
            Removed => 8,
        }
    }

    /// Up, PreparingForShutdown or ReadyForShutdown: a member that was moved Up and has not
    /// started to leave. A full cluster shutdown changes nothing about what such a member
    /// does (it hosts shards and the coordinator, serves traffic, leads, decides downing);
    /// it only stops members from being moved up and shards from being moved about.
    pub fn counts_as_up(self) -> bool {
        use MemberStatus::*;
        matches!(self, Up | PreparingForShutdown | ReadyForShutdown)
    }

    /// PreparingForShutdown or ReadyForShutdown: the cluster prepares for a full shutdown.
    pub fn is_preparing_for_shutdown(self) -> bool {
        matches!(
            self,
            MemberStatus::PreparingForShutdown | MemberStatus::ReadyForShutdown
        )
    }

    /// Statuses whose members must have seen a gossip version for it to converge.
    pub fn must_see_for_convergence(self) -> bool {
        use MemberStatus::*;
        matches!(self, Up | Leaving | PreparingForShutdown | ReadyForShutdown)
    }

    /// Statuses a leader may have (and that count as "up" for leadership).
    pub fn leader_eligible(self) -> bool {
        self.must_see_for_convergence()
    }

    /// The name used in the management API and logs (Akka's spelling).
    pub fn as_str(self) -> &'static str {
        use MemberStatus::*;
        match self {
            Joining => "Joining",
            WeaklyUp => "WeaklyUp",
            Up => "Up",
            PreparingForShutdown => "PreparingForShutdown",
            ReadyForShutdown => "ReadyForShutdown",
            Leaving => "Leaving",
            Exiting => "Exiting",
            Down => "Down",
            Removed => "Removed",
        }
    }
}

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The up-number of a member that has never been Up: it sorts after every real one.
pub const NOT_YET_UP: u32 = u32::MAX;

/// A node as the cluster sees it.
///
/// Identity (equality in sets, order) is the unique address alone; status, roles and
/// up-number are attributes that gossip merges.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Which incarnation.
    pub addr: UniqueAddress,
    /// Lifecycle status.
    pub status: MemberStatus,
    /// Age: assigned consecutively when moved to Up; smaller is older. [`NOT_YET_UP`] before.
    pub up_number: u32,
    /// Roles, sorted.
    pub roles: BTreeSet<String>,
    /// Application version, for rolling updates (shared: every state copy carries it).
    pub app_version: Arc<str>,
}

impl Member {
    /// A new member in status Joining.
    pub fn joining(
        addr: UniqueAddress,
        roles: BTreeSet<String>,
        app_version: impl Into<Arc<str>>,
    ) -> Self {
        Member {
            addr,
            status: MemberStatus::Joining,
            up_number: NOT_YET_UP,
            roles,
            app_version: app_version.into(),
        }
    }

    /// Whether this member has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }

    /// A copy with another status. Debug builds check the transition is allowed.
    pub fn with_status(&self, status: MemberStatus) -> Member {
        debug_assert!(
            self.status.can_move_to(status),
            "illegal transition {} -> {} for {}",
            self.status,
            status,
            self.addr
        );
        Member {
            status,
            ..self.clone()
        }
    }

    /// Age order: `Less` when `self` is older (smaller up-number, ties by address).
    pub fn age_cmp(&self, other: &Member) -> Ordering {
        self.up_number
            .cmp(&other.up_number)
            .then_with(|| self.addr.cmp(&other.addr))
    }

    /// Whether `self` is older than `other`.
    pub fn is_older_than(&self, other: &Member) -> bool {
        self.age_cmp(other) == Ordering::Less
    }

    /// The member both sides of a merge agree on: the higher merge rank, ties to the older.
    pub fn highest_priority(a: &Member, b: &Member) -> Member {
        debug_assert_eq!(a.addr, b.addr);
        match a.status.merge_rank().cmp(&b.status.merge_rank()) {
            Ordering::Greater => a.clone(),
            Ordering::Less => b.clone(),
            Ordering::Equal => {
                if b.up_number < a.up_number {
                    b.clone()
                } else {
                    a.clone()
                }
            }
        }
    }
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Member({} {}", self.addr, self.status)?;
        if self.up_number != NOT_YET_UP {
            write!(f, " up#{}", self.up_number)?;
        }
        if !self.roles.is_empty() {
            write!(f, " roles={:?}", self.roles)?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests;
