//! The strategies' verdicts: given who is counted on each side of a partition, which side
//! survives. Pure functions of an [`SbrView`]; nothing here knows about time.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::Duration;

use crate::address::UniqueAddress;
use crate::membership::member::{Member, MemberStatus};
use crate::membership::reachability::{Reachability, ReachabilityStatus};

/// Which downing strategy to run (`split-brain-resolver.active-strategy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Keep the side with more members (counting only `role` if set); on a tie keep the side
    /// holding the member with the lowest address. The default.
    KeepMajority {
        /// Only members with this role are counted.
        role: Option<String>,
    },
    /// Keep the side with at least `quorum_size` members; if the cluster has grown beyond
    /// `2 · quorum_size − 1` members the quorum is meaningless and everyone goes down.
    StaticQuorum {
        /// Minimum number of (role) members a side needs to survive.
        quorum_size: usize,
        /// Only members with this role are counted.
        role: Option<String>,
    },
    /// Keep the side with the oldest member; with `down_if_alone`, an oldest member cut off
    /// alone from two or more others goes down instead.
    KeepOldest {
        /// Down the oldest if it is alone on its side and the other side has ≥ 2 members.
        down_if_alone: bool,
        /// Only members with this role are counted.
        role: Option<String>,
    },
    /// Down every node whenever there are unreachable nodes.
    DownAll,
    /// Keep the side that acquires a lease: every side decides to down the others
    /// ([`decide`] says [`Decision::DownUnreachable`], or
    /// [`Decision::DownIndirectlyConnected`]), but only acts on it once it holds the lease; a
    /// side that cannot get it downs itself instead ([`Decision::reversed`]). The minority
    /// asks only after [`lease_acquire_delay`], so that the majority normally wins; a
    /// minority whose majority has crashed gets the lease and survives.
    /// [`SplitBrainResolver`](super::SplitBrainResolver) runs the lease protocol.
    LeaseMajority {
        /// Only members with this role are counted.
        role: Option<String>,
        /// Delay before the minority side tries to acquire the lease (default 2 s), giving
        /// the majority side a head start.
        acquire_lease_delay_for_minority: Duration,
        /// How long to hold the lease after the downed nodes are removed (default 40 s),
        /// so that the other side has asked for it, failed and downed itself before the lease
        /// is free again.
        release_after: Duration,
        /// How long to wait for the answer to a lease request before counting it as refused
        /// (`coordination.lease.lease-operation-timeout`, default 5 s): a lease that never
        /// answers must not keep the resolver waiting for ever.
        lease_operation_timeout: Duration,
        /// How long a grant or renewal of the lease lasts in the store
        /// (`coordination.lease.heartbeat-timeout`, default 120 s).
        lease_ttl: Duration,
        /// How often the holder renews it (`coordination.lease.heartbeat-interval`, default
        /// 12 s).
        lease_renew_interval: Duration,
    },
}

impl Strategy {
    /// The role the strategy counts, if restricted to one.
    pub fn role(&self) -> Option<&str> {
        match self {
            Strategy::KeepMajority { role }
            | Strategy::StaticQuorum { role, .. }
            | Strategy::KeepOldest { role, .. }
            | Strategy::LeaseMajority { role, .. } => role.as_deref(),
            Strategy::DownAll => None,
        }
    }

    /// Whether decisions of this strategy are acted on only under a lease.
    pub fn needs_lease(&self) -> bool {
        matches!(self, Strategy::LeaseMajority { .. })
    }

    /// Keep-oldest orders members by age; the others by address (the "lowest address" of
    /// keep-majority's tie-break is the first member in that order).
    fn by_age(&self) -> bool {
        matches!(self, Strategy::KeepOldest { .. })
    }
}

/// A verdict of [`decide`]; [`nodes_to_down`] turns it into nodes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Down the unreachable nodes: this side survives.
    DownUnreachable,
    /// Down the reachable nodes, self included: the other side survives.
    DownReachable,
    /// Down every node.
    DownAll,
    /// Down the indirectly connected nodes (plus what the strategy decides for a clean
    /// partition once their mutual observations are ignored).
    DownIndirectlyConnected,
    /// Down the indirectly connected nodes and everything reachable (a lease-majority side
    /// that failed to get the lease for an indirectly-connected decision).
    ReverseDownIndirectlyConnected,
    /// Down self only: a remote node quarantined this node while it is still a member.
    DownSelfQuarantinedByRemote,
}

impl Decision {
    /// Whether the decision is about indirectly connected nodes.
    pub fn is_indirectly_connected(self) -> bool {
        matches!(
            self,
            Decision::DownIndirectlyConnected | Decision::ReverseDownIndirectlyConnected
        )
    }

    /// The metric label and log spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::DownUnreachable => "down-unreachable",
            Decision::DownReachable => "down-reachable",
            Decision::DownAll => "down-all",
            Decision::DownIndirectlyConnected => "down-indirectly-connected",
            Decision::ReverseDownIndirectlyConnected => "reverse-down-indirectly-connected",
            Decision::DownSelfQuarantinedByRemote => "down-self-quarantined-by-remote",
        }
    }

    /// What to do instead when the lease for this decision could not be acquired
    /// (lease-majority): keep the others, down this side.
    pub fn reversed(self) -> Decision {
        match self {
            Decision::DownUnreachable => Decision::DownReachable,
            Decision::DownIndirectlyConnected => Decision::ReverseDownIndirectlyConnected,
            other => other,
        }
    }
}

/// What the resolver knows, as seen from one node. Build it from the local membership state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbrView {
    /// This node.
    pub self_addr: UniqueAddress,
    /// All members of this data centre, any status (Joining … Down). One entry per node.
    pub members: Vec<Member>,
    /// Nodes this node considers unreachable, plus every Down member (the reference adds
    /// `MemberDowned` to this set), never self.
    pub unreachable: BTreeSet<UniqueAddress>,
    /// Reachability records `(observer, subject, status)` between members of this data
    /// centre; only `Unreachable` and `Terminated` ones matter (others are ignored).
    pub records: Vec<(UniqueAddress, UniqueAddress, ReachabilityStatus)>,
    /// Nodes that have seen the current gossip version.
    pub seen_by: BTreeSet<UniqueAddress>,
    /// Unreachable members whose process this node knows is gone: a connection to their port
    /// was refused (nothing listens there) and they have not answered since.
    pub gone: BTreeSet<UniqueAddress>,
}

impl SbrView {
    /// Builds a view from a members list, a reachability table and the seen set, the way the
    /// reference's event feed would: a member is unreachable if an observer that is not Down
    /// sees it as unreachable or terminated, or if it is Down itself; self never is.
    /// Records are restricted to members (as observer and subject).
    pub fn from_state(
        self_addr: UniqueAddress,
        members: Vec<Member>,
        reachability: &Reachability,
        seen_by: BTreeSet<UniqueAddress>,
    ) -> Self {
        let addrs: BTreeSet<&UniqueAddress> = members.iter().map(|m| &m.addr).collect();
        let down: BTreeSet<&UniqueAddress> = members
            .iter()
            .filter(|m| m.status == MemberStatus::Down)
            .map(|m| &m.addr)
            .collect();
        let unreachable = members
            .iter()
            .filter(|m| m.addr != self_addr)
            .filter(|m| {
                m.status == MemberStatus::Down
                    || reachability.status_by(&m.addr, |o| !down.contains(o))
                        != ReachabilityStatus::Reachable
            })
            .map(|m| m.addr.clone())
            .collect();
        let records = reachability
            .records()
            .filter(|(o, s, st)| {
                addrs.contains(o) && addrs.contains(s) && *st != ReachabilityStatus::Reachable
            })
            .map(|(o, s, st)| (o.clone(), s.clone(), st))
            .collect();
        SbrView {
            self_addr,
            members,
            unreachable,
            records,
            seen_by,
            gone: BTreeSet::new(),
        }
    }

    /// Whether the split is known without waiting for it to be stable: every unreachable
    /// member that is not Down is gone (its port refused a connection, so no process of it
    /// runs on the far side of a partition), and every reachable member has seen the current
    /// state, so this side agrees on it. Stable-after is there for silent members, whose side
    /// of a split the failure detector may still be finding out; a refused connection is an
    /// answer, not a silence. The resolver acts on it early only for the side its strategy
    /// keeps (`SplitBrainResolver::tick`); a firewall that refuses connections across a
    /// partition (a REJECT rule) is discussed in docs/ARCHITECTURE.md, "Self-fencing".
    pub fn split_is_evident(&self) -> bool {
        let down = |n: &UniqueAddress| {
            self.members
                .iter()
                .any(|m| &m.addr == n && m.status == MemberStatus::Down)
        };
        let mut undecided = self.unreachable.iter().filter(|n| !down(n)).peekable();
        undecided.peek().is_some()
            && undecided.all(|n| self.gone.contains(n))
            && self
                .members
                .iter()
                .filter(|m| !self.unreachable.contains(&m.addr))
                .all(|m| self.seen_by.contains(&m.addr))
    }
}

/// Whether `m` is counted. Joining/WeaklyUp are not (they may not have been seen as such by
/// the other side) unless `including_possibly_up`; Leaving is, unless
/// `excluding_possibly_exiting`; Down and Exiting (and Removed) never are.
pub(super) fn counted(
    m: &Member,
    including_possibly_up: bool,
    excluding_possibly_exiting: bool,
) -> bool {
    use MemberStatus::*;
    match m.status {
        Joining | WeaklyUp => including_possibly_up,
        Leaving => !excluding_possibly_exiting,
        Down | Exiting | Removed => false,
        Up | PreparingForShutdown | ReadyForShutdown => true,
    }
}

/// The counting context: the view, possibly with the unreachable set and records replaced
/// (the second pass of an indirectly-connected decision works on filtered records).
struct Ctx<'a> {
    strategy: &'a Strategy,
    /// Members in the strategy's order (address, or age for keep-oldest).
    members: Vec<&'a Member>,
    unreachable: BTreeSet<UniqueAddress>,
    records: Vec<(UniqueAddress, UniqueAddress)>,
    seen_by: &'a BTreeSet<UniqueAddress>,
    self_addr: &'a UniqueAddress,
}

/// The second indirectly-connected pass found indirectly connected nodes again; the reference
/// throws here and downs everyone instead.
struct DoubleIndirectDecision;

impl<'a> Ctx<'a> {
    fn new(strategy: &'a Strategy, view: &'a SbrView) -> Self {
        let mut members: Vec<&Member> = view.members.iter().collect();
        if strategy.by_age() {
            members.sort_by(|a, b| a.age_cmp(b));
        } else {
            members.sort_by(|a, b| a.addr.cmp(&b.addr));
        }
        Ctx {
            strategy,
            members,
            unreachable: view.unreachable.clone(),
            records: Self::current_records(view),
            seen_by: &view.seen_by,
            self_addr: &view.self_addr,
        }
    }

    /// The unreachability records this node can take as current. A record whose observer this
    /// node has itself lost reached us before we lost it, and may be stale: the observer may
    /// since have been cut off from the rest too (a partition that changed shape). Such a
    /// record counts only while some member this node still reaches does not see the observer
    /// as unreachable, which is the evidence that the observer still talks to the cluster
    /// (and so is what the indirectly-connected rule is about). Without that filter the stale
    /// records make the observer look indirectly connected (it observes and is observed) while
    /// the observer's own side sees a clean partition, the two sides decide by different rules,
    /// and both can survive (the reshaped partition of `membership_scenarios`, found by the
    /// sharding simulation's seed 497). See docs/differences-from-akka.md.
    fn current_records(view: &SbrView) -> Vec<(UniqueAddress, UniqueAddress)> {
        let unreachable = |st: &ReachabilityStatus| *st != ReachabilityStatus::Reachable;
        let lost_by_me: BTreeSet<&UniqueAddress> = view
            .records
            .iter()
            .filter(|(o, _, st)| *o == view.self_addr && unreachable(st))
            .map(|(_, s, _)| s)
            .collect();
        let still_reached: Vec<&UniqueAddress> = view
            .members
            .iter()
            .filter(|m| m.status != MemberStatus::Down && m.addr != view.self_addr)
            .map(|m| &m.addr)
            .filter(|a| !lost_by_me.contains(a))
            .collect();
        let vouched_for = |observer: &UniqueAddress| {
            still_reached.iter().any(|n| {
                !view
                    .records
                    .iter()
                    .any(|(o, s, st)| o == *n && s == observer && unreachable(st))
            })
        };
        view.records
            .iter()
            .filter(|(o, _, st)| unreachable(st) && (!lost_by_me.contains(o) || vouched_for(o)))
            .map(|(o, s, _)| (o.clone(), s.clone()))
            .collect()
    }

    fn members_with_role(&self, incl_up: bool, excl_exiting: bool) -> Vec<&'a Member> {
        let role = self.strategy.role();
        self.members
            .iter()
            .copied()
            .filter(|m| counted(m, incl_up, excl_exiting))
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .collect()
    }

    fn is_unreachable(&self, m: &Member) -> bool {
        self.unreachable.contains(&m.addr)
    }

    /// (all counted, reachable counted, unreachable counted) with the role filter.
    fn split(&self, incl_up: bool, excl_exiting: bool) -> (Vec<&'a Member>, usize, usize) {
        let ms = self.members_with_role(incl_up, excl_exiting);
        let unreachable = ms.iter().filter(|m| self.is_unreachable(m)).count();
        let reachable = ms.len() - unreachable;
        (ms, reachable, unreachable)
    }

    fn observers_and_subjects(&self) -> BTreeSet<UniqueAddress> {
        let observers: BTreeSet<&UniqueAddress> = self.records.iter().map(|(o, _)| o).collect();
        self.records
            .iter()
            .map(|(_, s)| s)
            .filter(|s| observers.contains(s))
            .cloned()
            .collect()
    }

    fn seen_current_gossip(&self) -> BTreeSet<UniqueAddress> {
        self.records
            .iter()
            .filter(|(_, s)| self.seen_by.contains(s))
            .flat_map(|(o, s)| [o.clone(), s.clone()])
            .collect()
    }

    /// Nodes marked unreachable over some links while still connected over others: a node
    /// that both observes and is observed as unreachable (a cycle in the unreachability
    /// graph), or either end of a record whose subject has seen the current gossip (it is
    /// evidently talking to the rest). A clean partition or a crash never produces these.
    fn indirectly_connected(&self) -> BTreeSet<UniqueAddress> {
        let mut ic = self.observers_and_subjects();
        ic.extend(self.seen_current_gossip());
        ic
    }

    fn decide(&self) -> Decision {
        match self.strategy {
            Strategy::DownAll => Decision::DownAll,
            Strategy::StaticQuorum { quorum_size, .. } => self.static_quorum(*quorum_size),
            Strategy::KeepMajority { .. } => self.keep_majority(),
            Strategy::LeaseMajority { .. } => self.lease_majority(),
            Strategy::KeepOldest { down_if_alone, .. } => self.keep_oldest(*down_if_alone),
        }
    }

    fn static_quorum(&self, quorum: usize) -> Decision {
        let (ms, reachable, _) = self.split(false, false);
        if ms.len() > (quorum * 2).saturating_sub(1) {
            // More members than the quorum can arbitrate: two sides could both reach it.
            Decision::DownAll
        } else if !self.indirectly_connected().is_empty() {
            Decision::DownIndirectlyConnected
        } else if reachable >= quorum {
            Decision::DownUnreachable
        } else {
            Decision::DownReachable
        }
    }

    fn majority(&self, this_side: usize, other_side: usize, lowest: &Member) -> Decision {
        match this_side.cmp(&other_side) {
            // Equal halves: keep the half holding the lowest address.
            Ordering::Equal if self.is_unreachable(lowest) => Decision::DownReachable,
            Ordering::Equal | Ordering::Greater => Decision::DownUnreachable,
            Ordering::Less => Decision::DownReachable,
        }
    }

    fn keep_majority(&self) -> Decision {
        if !self.indirectly_connected().is_empty() {
            return Decision::DownIndirectlyConnected;
        }
        let (ms, reachable, unreachable) = self.split(false, false);
        let Some(lowest) = ms.first() else {
            return Decision::DownAll; // nobody with the role
        };
        match self.majority(reachable, unreachable, lowest) {
            Decision::DownUnreachable => {
                // Membership changes racing with the partition: this side may count Leaving
                // nodes that the other side already saw Exiting, and the other side may
                // count nodes as Up that this side still sees Joining. Re-count this side
                // pessimistically and the other optimistically; if the verdict changes, the
                // sides might not be complementary, so down everyone.
                let ms = self.members_with_role(false, true);
                let Some(lowest) = ms.first() else {
                    return Decision::DownAll;
                };
                let this_side = ms.iter().filter(|m| !self.is_unreachable(m)).count();
                let (_, _, other_side) = self.split(true, false);
                match self.majority(this_side, other_side, lowest) {
                    Decision::DownUnreachable => Decision::DownUnreachable,
                    _ => Decision::DownAll,
                }
            }
            other => other,
        }
    }

    /// Every side claims survival; the lease decides which claim holds. The majority only
    /// asks first ([`lease_acquire_delay`]), so no re-count for racing membership changes is
    /// needed: two sides can never both get the lease.
    fn lease_majority(&self) -> Decision {
        if self.indirectly_connected().is_empty() {
            Decision::DownUnreachable
        } else {
            Decision::DownIndirectlyConnected
        }
    }

    fn oldest(
        down_if_alone: bool,
        oldest_here: bool,
        this_side: usize,
        other_side: usize,
    ) -> Decision {
        if oldest_here {
            // With 2 nodes keep the oldest even though alone (the other is no better off);
            // alone against 2 or more, give way.
            if down_if_alone && this_side == 1 && other_side >= 2 {
                Decision::DownReachable
            } else {
                Decision::DownUnreachable
            }
        } else if down_if_alone && other_side == 1 && this_side >= 2 {
            Decision::DownUnreachable
        } else {
            Decision::DownReachable
        }
    }

    fn keep_oldest(&self, down_if_alone: bool) -> Decision {
        if !self.indirectly_connected().is_empty() {
            return Decision::DownIndirectlyConnected;
        }
        let (ms, reachable, unreachable) = self.split(false, false);
        let Some(oldest) = ms.first() else {
            return Decision::DownAll;
        };
        let here = !self.is_unreachable(oldest);
        match Self::oldest(down_if_alone, here, reachable, unreachable) {
            Decision::DownUnreachable => {
                // Re-check without Leaving (maybe Exiting over there); Joining/WeaklyUp only
                // matter for the down-if-alone counts.
                let Some(oldest) = self.members_with_role(false, true).first().copied() else {
                    return Decision::DownAll;
                };
                let (_, reachable, unreachable) = self.split(down_if_alone, true);
                let here = !self.is_unreachable(oldest);
                match Self::oldest(down_if_alone, here, reachable, unreachable) {
                    Decision::DownUnreachable => Decision::DownUnreachable,
                    _ => Decision::DownAll,
                }
            }
            other => other,
        }
    }

    /// Members that may be downed: anyone not already Down/Exiting/Removed, any role.
    fn downable(&self) -> BTreeSet<UniqueAddress> {
        use MemberStatus::*;
        self.members
            .iter()
            .filter(|m| !matches!(m.status, Down | Exiting | Removed))
            .map(|m| m.addr.clone())
            .collect()
    }

    fn nodes_to_down(
        &self,
        decision: Decision,
    ) -> Result<BTreeSet<UniqueAddress>, DoubleIndirectDecision> {
        let downable = self.downable();
        Ok(match decision {
            Decision::DownUnreachable => {
                downable.intersection(&self.unreachable).cloned().collect()
            }
            Decision::DownReachable => downable.difference(&self.unreachable).cloned().collect(),
            Decision::DownAll => downable,
            Decision::DownIndirectlyConnected => {
                let mut chosen = self.indirectly_connected();
                chosen.extend(self.additional_when_indirectly_connected(&downable)?);
                downable.intersection(&chosen).cloned().collect()
            }
            Decision::ReverseDownIndirectlyConnected => {
                let ic = self.indirectly_connected();
                downable
                    .iter()
                    .filter(|n| ic.contains(*n) || !self.unreachable.contains(*n))
                    .cloned()
                    .collect()
            }
            Decision::DownSelfQuarantinedByRemote => downable
                .into_iter()
                .filter(|n| n == self.self_addr)
                .collect(),
        })
    }

    /// The second pass: if there is also a clean partition or a crash besides the indirectly
    /// connected nodes, forget the observations among the indirectly connected ones and let
    /// the strategy decide about the rest as usual.
    fn additional_when_indirectly_connected(
        &self,
        downable: &BTreeSet<UniqueAddress>,
    ) -> Result<BTreeSet<UniqueAddress>, DoubleIndirectDecision> {
        let ic = self.indirectly_connected();
        if self.unreachable.iter().all(|n| ic.contains(n)) {
            return Ok(BTreeSet::new());
        }
        let cycle = self.observers_and_subjects();
        let seen = self.seen_current_gossip();
        let records: Vec<_> = self
            .records
            .iter()
            .filter(|(o, s)| {
                downable.contains(o)
                    && downable.contains(s)
                    && !(cycle.contains(o) && cycle.contains(s))
                    && !(seen.contains(o) && seen.contains(s))
            })
            .cloned()
            .collect();
        let second = Ctx {
            strategy: self.strategy,
            members: self.members.clone(),
            unreachable: records.iter().map(|(_, s)| s.clone()).collect(),
            records,
            seen_by: self.seen_by,
            self_addr: self.self_addr,
        };
        let decision = second.decide();
        if decision.is_indirectly_connected() {
            // Still indirectly connected after filtering (e.g. indirect links that were not
            // detected via seen because a clean partition happened first): give up.
            return Err(DoubleIndirectDecision);
        }
        second.nodes_to_down(decision)
    }
}

/// The strategy's verdict on `view`.
///
/// Pure: it does not check whether a decision is due (stable-after) or whether this node is
/// responsible; [`SplitBrainResolver::tick`](super::SplitBrainResolver::tick) does.
pub fn decide(strategy: &Strategy, view: &SbrView) -> Decision {
    Ctx::new(strategy, view).decide()
}

/// The nodes `decision` downs in `view` (never nodes already Down or Exiting).
///
/// For [`Decision::DownIndirectlyConnected`] this includes the second pass: the strategy is
/// re-run with the observations among the indirectly connected nodes removed, and its
/// verdict added. If that second pass is itself indirectly connected, every downable node is
/// returned (the reference's fallback to down-all).
pub fn nodes_to_down(
    decision: Decision,
    strategy: &Strategy,
    view: &SbrView,
) -> BTreeSet<UniqueAddress> {
    let ctx = Ctx::new(strategy, view);
    ctx.nodes_to_down(decision)
        .unwrap_or_else(|DoubleIndirectDecision| ctx.downable())
}

/// The nodes [`decide`] considers indirectly connected in `view`.
pub fn indirectly_connected(view: &SbrView) -> BTreeSet<UniqueAddress> {
    // The strategy does not matter for this set.
    Ctx::new(&Strategy::DownAll, view).indirectly_connected()
}

/// Lease-majority: how long this side should wait before trying to acquire the lease.
/// The minority (more than half unreachable, or exactly half with the lowest-address member
/// unreachable) waits `acquire_lease_delay_for_minority` so that the majority gets the lease
/// first; indirectly connected decisions and other strategies do not wait.
pub fn lease_acquire_delay(strategy: &Strategy, view: &SbrView) -> Duration {
    let Strategy::LeaseMajority {
        acquire_lease_delay_for_minority,
        ..
    } = strategy
    else {
        return Duration::ZERO;
    };
    let ctx = Ctx::new(strategy, view);
    if !ctx.indirectly_connected().is_empty() {
        return Duration::ZERO;
    }
    let (ms, _, unreachable) = ctx.split(false, false);
    let minority = match ms.first() {
        None => false,
        Some(lowest) => match (unreachable * 2).cmp(&ms.len()) {
            Ordering::Equal => ctx.is_unreachable(lowest),
            Ordering::Less => false,
            Ordering::Greater => true,
        },
    };
    if minority {
        *acquire_lease_delay_for_minority
    } else {
        Duration::ZERO
    }
}
