//! Split-brain resolver: which nodes to down when some are unreachable (digest §4.8).
//!
//! When a partition happens, each side elects its own leader, and each side's leader runs
//! [`decide`] on its own view. The strategies are built so that the two sides, looking at
//! complementary views, reach complementary verdicts: one side downs the other, the other
//! downs itself (or, when that cannot be guaranteed, everyone goes down). This module holds
//! the decision logic as pure functions over an [`SbrView`], and [`SplitBrainResolver`], the
//! small timer state deciding *when* to decide (stable-after, down-all-when-unstable).

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::Duration;

use super::address::UniqueAddress;
use super::member::{Member, MemberStatus};
use super::reachability::{Reachability, ReachabilityStatus};
use crate::time::Instant;

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
    /// Keep the side that acquires a distributed lease.
    ///
    /// **Seam:** leases are not implemented yet. Until they are, [`decide`] treats this
    /// strategy as keep-majority (the same verdict the lease decision would carry: "down the
    /// unreachable" on the majority side), so it is safe to run without a lease. When leases
    /// arrive, the caller acquires the lease (after [`lease_acquire_delay`]) before acting,
    /// and applies [`Decision::reversed`] if acquisition fails.
    LeaseMajority {
        /// Only members with this role are counted.
        role: Option<String>,
        /// Delay before the minority side tries to acquire the lease (default 2 s), giving
        /// the majority side a head start.
        acquire_lease_delay_for_minority: Duration,
        /// How long to hold the lease after acting (default 40 s).
        release_after: Duration,
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

    /// Keep-oldest orders members by age; the others by address (the "lowest address" of
    /// keep-majority's tie-break is the first member in that order).
    fn by_age(&self) -> bool {
        matches!(self, Strategy::KeepOldest { .. })
    }
}

/// Split-brain resolver settings (`pekko.cluster.split-brain-resolver`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbrSettings {
    /// The strategy.
    pub strategy: Strategy,
    /// How long membership and reachability must stay unchanged before deciding. Default 20 s.
    pub stable_after: Duration,
    /// Down all nodes if reachability keeps changing for longer than
    /// `stable_after + this` since the first change. `None` is "off". Default "on" =
    /// [`down_all_when_unstable_on`](Self::down_all_when_unstable_on)`(stable_after)`.
    pub down_all_when_unstable: Option<Duration>,
}

impl SbrSettings {
    /// Settings with `down-all-when-unstable = on`.
    pub fn new(strategy: Strategy, stable_after: Duration) -> Self {
        SbrSettings {
            strategy,
            stable_after,
            down_all_when_unstable: Some(Self::down_all_when_unstable_on(stable_after)),
        }
    }

    /// What `down-all-when-unstable = on` means: `max(4 s, 3/4 · stable_after)`.
    pub fn down_all_when_unstable_on(stable_after: Duration) -> Duration {
        (stable_after * 3 / 4).max(Duration::from_secs(4))
    }
}

impl Default for SbrSettings {
    /// Keep-majority, stable-after 20 s, down-all-when-unstable on (15 s).
    fn default() -> Self {
        SbrSettings::new(
            Strategy::KeepMajority { role: None },
            Duration::from_secs(20),
        )
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

    /// What to do instead when the lease for this decision could not be acquired
    /// (lease-majority seam): keep the others, down this side.
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
        }
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
            records: view
                .records
                .iter()
                .filter(|(_, _, st)| *st != ReachabilityStatus::Reachable)
                .map(|(o, s, _)| (o.clone(), s.clone()))
                .collect(),
            seen_by: &view.seen_by,
            self_addr: &view.self_addr,
        }
    }

    /// Whether `m` is counted. Joining/WeaklyUp are not (they may not have been seen as such
    /// by the other side) unless `including_possibly_up`; Leaving is, unless
    /// `excluding_possibly_exiting`; Down and Exiting (and Removed) never are.
    fn counted(m: &Member, including_possibly_up: bool, excluding_possibly_exiting: bool) -> bool {
        use MemberStatus::*;
        match m.status {
            Joining | WeaklyUp => including_possibly_up,
            Leaving => !excluding_possibly_exiting,
            Down | Exiting | Removed => false,
            Up | PreparingForShutdown | ReadyForShutdown => true,
        }
    }

    fn members_with_role(&self, incl_up: bool, excl_exiting: bool) -> Vec<&'a Member> {
        let role = self.strategy.role();
        self.members
            .iter()
            .copied()
            .filter(|m| Self::counted(m, incl_up, excl_exiting))
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
            Strategy::KeepMajority { .. } | Strategy::LeaseMajority { .. } => self.keep_majority(),
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
/// responsible; [`SplitBrainResolver::tick`] does.
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

/// Lease-majority seam: how long this side should wait before trying to acquire the lease.
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

/// A membership or reachability change the resolver must hear about.
///
/// Report only changes of same-DC members; `Unreachable`/`Reachable` never for self.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SbrChange {
    /// A member became Up. Resets the stable-after deadline.
    MemberUp,
    /// A member became Exiting. Resets the stable-after deadline.
    MemberExited,
    /// A member became unreachable. Resets the deadline and counts as instability.
    Unreachable,
    /// A member became reachable again. Resets the deadline and counts as instability.
    Reachable,
    /// A member was marked Down. Resets the deadline and counts as instability (a Down
    /// member is treated as unreachable).
    MemberDowned,
    /// A member was removed. Does not reset the deadline, but may end an instability period.
    MemberRemoved,
}

/// Instability tracking: when reachability started changing, when it last changed, how often.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Instability {
    /// The first change since the last reset.
    pub first_change: Instant,
    /// The latest change.
    pub latest_change: Instant,
    /// Number of changes since the last reset.
    pub change_count: u64,
}

/// When to decide: the stable-after deadline and down-all-when-unstable tracking.
///
/// Runs on every node; only [`tick`](Self::tick) with `responsible = true` makes strategy
/// decisions, but the instability rule fires everywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitBrainResolver {
    settings: SbrSettings,
    stable_deadline: Instant,
    instability: Option<Instability>,
}

impl SplitBrainResolver {
    /// A resolver started at `now`; the first decision can come `stable_after` later.
    pub fn new(settings: SbrSettings, now: Instant) -> Self {
        let stable_deadline = now + settings.stable_after;
        SplitBrainResolver {
            settings,
            stable_deadline,
            instability: None,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &SbrSettings {
        &self.settings
    }

    /// No decision is taken before this instant.
    pub fn stable_deadline(&self) -> Instant {
        self.stable_deadline
    }

    /// Reachability changes since the last reset, if any.
    pub fn instability(&self) -> Option<Instability> {
        self.instability
    }

    /// Reports a change at `now`; `view` is the view *after* the change.
    ///
    /// Any change but `MemberRemoved` restarts the stable-after period. Reachability changes
    /// (including downing) are counted towards instability; the count is cleared once every
    /// unreachable member is Down or Exiting (or gone), since there is nothing left to decide.
    pub fn note_change(&mut self, now: Instant, change: SbrChange, view: &SbrView) {
        match change {
            SbrChange::MemberUp | SbrChange::MemberExited => self.reset_stable_deadline(now),
            SbrChange::Unreachable | SbrChange::Reachable | SbrChange::MemberDowned => {
                self.instability = Some(match self.instability {
                    None => Instability {
                        first_change: now,
                        latest_change: now,
                        change_count: 1,
                    },
                    Some(i) => Instability {
                        latest_change: now,
                        change_count: i.change_count + 1,
                        ..i
                    },
                });
                self.reset_instability_if_all_unreachable_downed(view);
                self.reset_stable_deadline(now);
            }
            SbrChange::MemberRemoved => self.reset_instability_if_all_unreachable_downed(view),
        }
    }

    fn reset_stable_deadline(&mut self, now: Instant) {
        self.stable_deadline = now + self.settings.stable_after;
    }

    fn reset_instability_if_all_unreachable_downed(&mut self, view: &SbrView) {
        // As the reference: only counted members (not Joining/WeaklyUp) keep it alive.
        let pending = view
            .members
            .iter()
            .any(|m| view.unreachable.contains(&m.addr) && Ctx::counted(m, false, false));
        if !pending {
            self.instability = None;
        }
    }

    /// Called every tick (1 s). `responsible` = self is the leader and has been seen
    /// Up/WeaklyUp.
    ///
    /// Returns the decision and the nodes to down — others first, self last, since downing
    /// self may shut this node down — when a decision was taken and downs at least one node.
    /// That happens when (a) down-all-when-unstable is on and reachability has kept changing
    /// for longer than `stable_after + down_all_when_unstable` since the first change — on
    /// every node, responsible or not, to end the instability as fast as possible; or (b)
    /// this node is responsible, some node is unreachable, and nothing changed for
    /// `stable_after`. Acting resets the deadline and the instability tracking.
    pub fn tick(
        &mut self,
        now: Instant,
        responsible: bool,
        view: &SbrView,
    ) -> Option<(Decision, Vec<UniqueAddress>)> {
        if let Some(i) = self.instability {
            match self.settings.down_all_when_unstable {
                Some(extra) if !extra.is_zero() => {
                    let overdue = now - i.first_change > self.settings.stable_after + extra;
                    // If down-all finds nothing to down, fall through to the normal decision.
                    let acted = if overdue {
                        self.act(now, Decision::DownAll, view)
                    } else {
                        None
                    };
                    if acted.is_some() {
                        return acted;
                    }
                }
                _ => {
                    // Feature off: just forget old changes (the reference keeps them only
                    // for logging).
                    if now - i.latest_change > self.settings.stable_after * 2 {
                        self.instability = None;
                    }
                }
            }
        }
        if responsible && !view.unreachable.is_empty() && now >= self.stable_deadline {
            let decision = decide(&self.settings.strategy, view);
            return self.act(now, decision, view);
        }
        None
    }

    fn act(
        &mut self,
        now: Instant,
        decision: Decision,
        view: &SbrView,
    ) -> Option<(Decision, Vec<UniqueAddress>)> {
        let nodes = nodes_to_down(decision, &self.settings.strategy, view);
        if nodes.is_empty() {
            return None;
        }
        let mut order: Vec<UniqueAddress> = nodes
            .iter()
            .filter(|n| **n != view.self_addr)
            .cloned()
            .collect();
        if nodes.contains(&view.self_addr) {
            order.push(view.self_addr.clone());
        }
        self.instability = None;
        self.reset_stable_deadline(now);
        Some((decision, order))
    }

    /// The earliest instant at which [`tick`](Self::tick) may act: the stable-after deadline,
    /// or the instability limit if that comes first. Always `Some` today; `None` is reserved
    /// for states with nothing timed (e.g. waiting for a lease, once leases exist). Ticks
    /// are still expected every second: this is for schedulers that want to sleep longer.
    pub fn next_deadline(&self) -> Option<Instant> {
        let unstable = match (self.instability, self.settings.down_all_when_unstable) {
            (Some(i), Some(extra)) if !extra.is_zero() => {
                Some(i.first_change + self.settings.stable_after + extra)
            }
            _ => None,
        };
        Some(unstable.map_or(self.stable_deadline, |u| u.min(self.stable_deadline)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::address::Address;
    use crate::membership::member::NOT_YET_UP;
    use MemberStatus::*;

    // ---- SplitBrainResolverSpec fixtures (TestAddresses) ------------------------------

    fn member(host: &str, up: u32, roles: &[&str]) -> Member {
        Member {
            addr: UniqueAddress::new(Address::new(host, 7355), 0),
            status: Up,
            up_number: up,
            roles: roles.iter().map(|r| r.to_string()).collect(),
            app_version: "0.0.0".into(),
        }
    }

    // Up-numbers as the reference fixtures: E is the oldest, then D, C, B, A/F, G.
    fn a() -> Member {
        member("a", 5, &["role3"])
    }
    fn b() -> Member {
        member("b", 4, &["role1", "role3"])
    }
    fn c() -> Member {
        member("c", 3, &["role2"])
    }
    fn d() -> Member {
        member("d", 2, &["role1", "role2", "role3"])
    }
    fn e() -> Member {
        member("e", 1, &[])
    }
    fn f() -> Member {
        member("f", 5, &[])
    }
    fn g() -> Member {
        member("g", 6, &[])
    }

    fn joining(m: Member) -> Member {
        Member {
            status: Joining,
            up_number: NOT_YET_UP,
            ..m
        }
    }
    fn weakly_up(m: Member) -> Member {
        Member {
            status: WeaklyUp,
            up_number: NOT_YET_UP,
            ..m
        }
    }
    fn leaving(m: Member) -> Member {
        Member {
            status: Leaving,
            ..m
        }
    }
    fn exiting(m: Member) -> Member {
        Member {
            status: Exiting,
            ..m
        }
    }
    fn downed(m: Member) -> Member {
        Member { status: Down, ..m }
    }

    fn addrs(ms: &[Member]) -> BTreeSet<UniqueAddress> {
        ms.iter().map(|m| m.addr.clone()).collect()
    }

    /// The spec's `StrategySetup`: up to three sides of a partition plus extra
    /// "indirectly connected" unreachability records.
    struct Setup {
        strategy: Strategy,
        sides: Vec<Vec<Member>>,
        indirect: Vec<(Member, Member)>,
    }

    impl Setup {
        fn new(strategy: Strategy, sides: Vec<Vec<Member>>) -> Self {
            Setup {
                strategy,
                sides,
                indirect: Vec::new(),
            }
        }

        fn indirect(mut self, pairs: Vec<(Member, Member)>) -> Self {
            self.indirect = pairs;
            self
        }

        /// The view of the first node of side `i`: it observes every node of the other
        /// sides as unreachable, the indirect records are present, and its side has seen
        /// the current gossip (as the spec's `strategy(side)`).
        fn view(&self, i: usize) -> SbrView {
            let side = &self.sides[i];
            let me = &side[0];
            let all: Vec<Member> = self.sides.iter().flatten().cloned().collect();
            let side_addrs = addrs(side);
            let mut records: Vec<(UniqueAddress, UniqueAddress, ReachabilityStatus)> = Vec::new();
            let pairs = self
                .indirect
                .iter()
                .map(|(o, s)| (o.addr.clone(), s.addr.clone()))
                .chain(
                    all.iter()
                        .filter(|m| !side_addrs.contains(&m.addr))
                        .map(|o| (me.addr.clone(), o.addr.clone())),
                );
            for (o, s) in pairs {
                if !records.iter().any(|(ro, rs, _)| *ro == o && *rs == s) {
                    records.push((o, s, ReachabilityStatus::Unreachable));
                }
            }
            SbrView {
                self_addr: me.addr.clone(),
                unreachable: records.iter().map(|(_, s, _)| s.clone()).collect(),
                members: all,
                records,
                seen_by: side_addrs,
            }
        }

        fn decide(&self, i: usize) -> Decision {
            decide(&self.strategy, &self.view(i))
        }

        fn down(&self, i: usize) -> BTreeSet<UniqueAddress> {
            let v = self.view(i);
            nodes_to_down(decide(&self.strategy, &v), &self.strategy, &v)
        }

        /// Every side downs exactly `expected`: the sides agree.
        fn assert_downing(&self, expected: &[Member]) {
            for i in 0..self.sides.len() {
                if !self.sides[i].is_empty() {
                    assert_eq!(self.down(i), addrs(expected), "seen from side {}", i + 1);
                }
            }
        }
    }

    fn keep_majority() -> Strategy {
        Strategy::KeepMajority { role: None }
    }
    fn keep_majority_role(r: &str) -> Strategy {
        Strategy::KeepMajority {
            role: Some(r.into()),
        }
    }
    fn static_quorum(q: usize, role: Option<&str>) -> Strategy {
        Strategy::StaticQuorum {
            quorum_size: q,
            role: role.map(String::from),
        }
    }
    fn keep_oldest(down_if_alone: bool) -> Strategy {
        Strategy::KeepOldest {
            down_if_alone,
            role: None,
        }
    }

    use Decision::{DownAll as All, DownReachable as Reach, DownUnreachable as Unreach};

    // ---- SplitBrainResolverIntegrationSpec rows (digest §5.1) -------------------------

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Survivor {
        Side1,
        Side2,
        Nobody,
    }

    /// Nine nodes `n1..n9`, n1 oldest and lowest address; side 1 is the first `s1` nodes,
    /// side 2 the next `s2`. Each side decides from its own view; both must down the same
    /// nodes, leaving exactly the expected survivor.
    fn integration(strategy: Strategy, s1: usize, s2: usize, expected: Survivor) {
        let nodes: Vec<Member> = (1..=9)
            .map(|i| member(&format!("n{i}"), i as u32, &[]))
            .collect();
        let side1 = nodes[..s1].to_vec();
        let side2 = nodes[s1..s1 + s2].to_vec();
        let setup = Setup::new(strategy.clone(), vec![side1.clone(), side2.clone()]);
        let from1 = setup.down(0);
        let from2 = setup.down(1);
        let all: Vec<Member> = side1.iter().chain(&side2).cloned().collect();
        let expected_down = match expected {
            Survivor::Side1 => addrs(&side2),
            Survivor::Side2 => addrs(&side1),
            Survivor::Nobody => addrs(&all),
        };
        let ctx = format!("{strategy:?} ({s1},{s2})");
        if expected == Survivor::Nobody {
            // Each side at least downs itself (both may down everyone, e.g. down-all).
            assert!(from1.is_superset(&addrs(&side1)), "side 1 view, {ctx}");
            assert!(from2.is_superset(&addrs(&side2)), "side 2 view, {ctx}");
        } else {
            assert_eq!(from1, expected_down, "side 1 view, {ctx}");
            assert_eq!(from2, expected_down, "side 2 view, {ctx}");
        }
        // Complementary: every node is downed by its own side or by the other, except the
        // survivors, which nobody downs.
        let downed_by_any: BTreeSet<_> = from1.union(&from2).cloned().collect();
        let survivors: BTreeSet<_> = addrs(&all).difference(&downed_by_any).cloned().collect();
        match expected {
            Survivor::Side1 => assert_eq!(survivors, addrs(&side1), "{ctx}"),
            Survivor::Side2 => assert_eq!(survivors, addrs(&side2), "{ctx}"),
            Survivor::Nobody => assert!(survivors.is_empty(), "{ctx}"),
        }
    }

    #[test]
    fn integration_static_quorum() {
        let sq = || static_quorum(5, None);
        integration(sq(), 1, 2, Survivor::Nobody);
        // 8 members: not too many for quorum 5 (limit 9), but neither side reaches 5.
        integration(sq(), 4, 4, Survivor::Nobody);
        integration(sq(), 5, 4, Survivor::Side1);
        integration(sq(), 1, 5, Survivor::Side2);
        integration(sq(), 4, 5, Survivor::Side2);
        // Too many members for the quorum: 2·3 − 1 = 5 < 6, everybody goes.
        integration(static_quorum(3, None), 3, 3, Survivor::Nobody);
    }

    #[test]
    fn integration_keep_majority() {
        integration(keep_majority(), 2, 1, Survivor::Side1);
        integration(keep_majority(), 1, 2, Survivor::Side2);
        integration(keep_majority(), 4, 5, Survivor::Side2);
        // Tie: the side with the lowest address (n1) survives.
        integration(keep_majority(), 4, 4, Survivor::Side1);
    }

    #[test]
    fn integration_keep_oldest() {
        integration(keep_oldest(true), 3, 3, Survivor::Side1);
        integration(keep_oldest(true), 1, 1, Survivor::Side1);
        // The oldest is alone against two: down-if-alone.
        integration(keep_oldest(true), 1, 2, Survivor::Side2);
        integration(keep_oldest(false), 1, 2, Survivor::Side1);
    }

    #[test]
    fn integration_down_all() {
        integration(Strategy::DownAll, 1, 2, Survivor::Nobody);
    }

    #[test]
    fn integration_lease_majority_acts_as_keep_majority() {
        let lm = Strategy::LeaseMajority {
            role: None,
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
        };
        integration(lm, 4, 5, Survivor::Side2);
    }

    // ---- SplitBrainResolverSpec: StaticQuorum ------------------------------------------

    #[test]
    fn static_quorum_basics() {
        Setup::new(
            static_quorum(3, None),
            vec![vec![a(), c(), e()], vec![b(), d()]],
        )
        .assert_downing(&[b(), d()]);
        let s = Setup::new(static_quorum(3, None), vec![vec![a(), b()], vec![c(), d()]]);
        assert_eq!((s.decide(0), s.decide(1)), (Reach, Reach));
        Setup::new(
            static_quorum(2, Some("role3")),
            vec![vec![a(), b(), c()], vec![d(), e()]],
        )
        .assert_downing(&[d(), e()]);
        Setup::new(
            static_quorum(3, None),
            vec![vec![a(), b(), c()], vec![d(), e(), f()]],
        )
        .assert_downing(&[a(), b(), c(), d(), e(), f()]);
    }

    /// "handle joining": Joining members are not counted.
    #[test]
    fn static_quorum_joining_not_counted() {
        let sq = || static_quorum(3, None);
        let s = Setup::new(
            sq(),
            vec![vec![a(), b(), joining(c())], vec![d(), e(), joining(f())]],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Reach, Reach));
        let s = Setup::new(
            sq(),
            vec![vec![a(), b(), c()], vec![d(), e(), joining(f())]],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Unreach, Reach));
        let s = Setup::new(
            sq(),
            vec![vec![a(), b(), joining(c())], vec![d(), e(), f()]],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Reach, Unreach));
        let s = Setup::new(sq(), vec![vec![a(), b(), c()], vec![d(), e(), f()]]);
        assert_eq!((s.decide(0), s.decide(1)), (All, All));
    }

    /// "handle leaving/exiting": Leaving is counted, Exiting is not.
    #[test]
    fn static_quorum_leaving_counted_exiting_not() {
        let s = Setup::new(
            static_quorum(3, None),
            vec![vec![a(), b(), leaving(c())], vec![d(), e()]],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Unreach, Reach));
        let s = Setup::new(
            static_quorum(3, None),
            vec![vec![a(), b(), exiting(c())], vec![d(), e()]],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Reach, Reach));
    }

    // ---- KeepMajority ------------------------------------------------------------------

    #[test]
    fn keep_majority_partitions() {
        let km = keep_majority;
        Setup::new(km(), vec![vec![a(), c(), e()], vec![b(), d()]]).assert_downing(&[b(), d()]);
        Setup::new(km(), vec![vec![a(), b()], vec![c(), d(), e()]]).assert_downing(&[a(), b()]);
        Setup::new(km(), vec![vec![b()], vec![a(), c()]]).assert_downing(&[b()]);
        // Equal halves: keep the one with the lowest address.
        Setup::new(km(), vec![vec![a(), b()], vec![c(), d()]]).assert_downing(&[c(), d()]);
        Setup::new(km(), vec![vec![a()], vec![b()]]).assert_downing(&[b()]);
        Setup::new(
            keep_majority_role("role3"),
            vec![vec![a(), b()], vec![c(), d(), e()]],
        )
        .assert_downing(&[c(), d(), e()]);
        // C is the lowest address with role2.
        Setup::new(
            keep_majority_role("role2"),
            vec![vec![a(), d(), e()], vec![b(), c()]],
        )
        .assert_downing(&[a(), d(), e()]);
        // Nobody with the role: down all.
        Setup::new(keep_majority_role("role3"), vec![vec![c()], vec![e()]])
            .assert_downing(&[c(), e()]);
        // Three too-small parts each down themselves.
        let s = Setup::new(km(), vec![vec![a(), b()], vec![c(), d()], vec![e()]]);
        assert_eq!(s.down(0), addrs(&[a(), b()]));
        assert_eq!(s.down(1), addrs(&[c(), d()]));
        assert_eq!(s.down(2), addrs(&[e()]));
    }

    /// Joining/WeaklyUp are not counted but are downed with their side.
    #[test]
    fn keep_majority_joining_not_counted_but_downed() {
        Setup::new(
            keep_majority(),
            vec![vec![b(), d()], vec![joining(a()), c()]],
        )
        .assert_downing(&[a(), c()]);
        Setup::new(
            keep_majority(),
            vec![vec![a(), joining(b())], vec![c(), d(), e()]],
        )
        .assert_downing(&[a(), b()]);
        Setup::new(
            keep_majority(),
            vec![vec![b(), d()], vec![weakly_up(a()), c()]],
        )
        .assert_downing(&[a(), c()]);
    }

    /// "detect edge case of membership change": F, G moved Up on side 1 during the partition
    /// are still Joining as seen by side 2, which therefore cannot be sure and downs all.
    #[test]
    fn keep_majority_membership_change_edge_cases() {
        let s1 = Setup::new(
            keep_majority(),
            vec![vec![a(), b(), f(), g()], vec![c(), d(), e()]],
        );
        assert_eq!(s1.decide(0), Unreach);
        assert_eq!(s1.down(0), addrs(&[c(), d(), e()]));
        let s2 = Setup::new(
            keep_majority(),
            vec![
                vec![a(), b(), joining(f()), joining(g())],
                vec![c(), d(), e()],
            ],
        );
        assert_eq!(s2.decide(1), All);
        assert_eq!(s2.down(1), addrs(&[a(), b(), c(), d(), e(), f(), g()]));

        // Equal size when counting the joining F.
        let s = Setup::new(
            keep_majority(),
            vec![vec![a(), b(), joining(f())], vec![c(), d(), e()]],
        );
        assert_eq!(s.decide(1), All);

        // Safe variant: {A, B} | {C, D, E, F'}.
        let s = Setup::new(
            keep_majority(),
            vec![vec![a(), b()], vec![c(), d(), e(), joining(f())]],
        );
        assert_eq!(s.decide(0), Reach);
        assert_eq!(s.down(0), addrs(&[a(), b()]));
        let s = Setup::new(
            keep_majority(),
            vec![vec![a(), b()], vec![c(), d(), e(), f()]],
        );
        assert_eq!(s.decide(1), Unreach);
        assert_eq!(s.down(1), addrs(&[a(), b()]));

        // Leaving/exiting: {A', B, Ej} | {C, D}.
        let s = Setup::new(
            keep_majority(),
            vec![vec![leaving(a()), b(), joining(e())], vec![c(), d()]],
        );
        assert_eq!(s.decide(0), All);
        assert_eq!(s.down(0), addrs(&[a(), b(), c(), d(), e()]));
        let s = Setup::new(
            keep_majority(),
            vec![vec![exiting(a()), b()], vec![c(), d()]],
        );
        assert_eq!(s.decide(1), Unreach);
        assert_eq!(s.down(1), addrs(&[b()]), "A is already Exiting");
    }

    /// Indirectly connected nodes are downed; fully connected ones are kept.
    #[test]
    fn keep_majority_indirectly_connected() {
        let km = keep_majority;
        Setup::new(km(), vec![vec![a(), b()]])
            .indirect(vec![(a(), b()), (b(), a())])
            .assert_downing(&[a(), b()]);
        Setup::new(km(), vec![vec![a(), b(), c()]])
            .indirect(vec![(a(), b()), (b(), a())])
            .assert_downing(&[a(), b()]);
        Setup::new(km(), vec![vec![a(), b(), c()]])
            .indirect(vec![(a(), b()), (b(), c()), (c(), a())])
            .assert_downing(&[a(), b(), c()]);
        Setup::new(km(), vec![vec![a(), b(), c(), d(), e()]])
            .indirect(vec![(a(), b()), (b(), c()), (c(), a())])
            .assert_downing(&[a(), b(), c()]);
        Setup::new(km(), vec![vec![a(), b(), c(), d(), e(), f(), g()]])
            .indirect(vec![(b(), c()), (c(), b()), (e(), f()), (f(), e())])
            .assert_downing(&[b(), c(), e(), f()]);
        // Detected via seen: the subject has seen the current gossip.
        Setup::new(km(), vec![vec![a(), b(), c()]])
            .indirect(vec![(a(), b()), (a(), c())])
            .assert_downing(&[a(), b(), c()]);
        Setup::new(km(), vec![vec![a(), b(), c(), d(), e()]])
            .indirect(vec![(b(), c()), (c(), b()), (a(), d())])
            .assert_downing(&[a(), b(), c(), d()]);
        assert_eq!(
            indirectly_connected(
                &Setup::new(km(), vec![vec![a(), b(), c()]])
                    .indirect(vec![(a(), b()), (b(), a())])
                    .view(0)
            ),
            addrs(&[a(), b()])
        );
    }

    /// Indirectly connected combined with a crash or a clean partition: the second pass
    /// decides the clean part with keep-majority.
    #[test]
    fn keep_majority_indirectly_connected_with_partition() {
        let km = keep_majority;
        // {(A, B), D, E} | {C}: crashed C is downed too.
        let s = Setup::new(km(), vec![vec![a(), b(), d(), e()], vec![c()]])
            .indirect(vec![(a(), b()), (b(), a())]);
        assert_eq!(s.down(0), addrs(&[a(), b(), c()]));

        // {A, (B, C)} | {D, E}
        let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e()]])
            .indirect(vec![(b(), c()), (c(), b())]);
        assert_eq!(s.down(0), addrs(&[b(), c(), d(), e()]));
        let s_clean_first = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e()]]);
        assert_eq!(s_clean_first.down(1), addrs(&[d(), e()]));
        assert_eq!(s.down(1), addrs(&[b(), c(), d(), e()]));

        // Minority side has them: {A, (B, C)} | {D, E, F, G}
        let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]])
            .indirect(vec![(b(), c()), (c(), b())]);
        assert_eq!(s.down(0), addrs(&[a(), b(), c()]));
        assert_eq!(s.down(1), addrs(&[a(), b(), c()]));

        // Majority side has them: {A, B, C} | {(D, E), F, G}
        let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]])
            .indirect(vec![(d(), e()), (e(), d())]);
        assert_eq!(s.down(0), addrs(&[a(), b(), c(), d(), e()]));
        assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));

        // Spanning the partition: {A, (B), C} | {D, (E, F), G}
        let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]])
            .indirect(vec![(b(), e()), (e(), f()), (f(), b())]);
        assert_eq!(s.down(0), addrs(&[a(), b(), c(), e(), f()]));
        assert_eq!(s.down(1), addrs(&[a(), b(), c(), e(), f()]));
    }

    /// "double DownIndirectlyConnected": the second pass is still indirectly connected, so
    /// every downable node is downed (the reference throws and falls back to DownAll).
    #[test]
    fn double_indirect_decision_downs_all() {
        let s = Setup::new(
            keep_majority(),
            vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]],
        )
        .indirect(vec![(d(), e()), (g(), f())]);
        let everyone = addrs(&[a(), b(), c(), d(), e(), f(), g()]);
        assert_eq!(s.decide(0), Decision::DownIndirectlyConnected);
        assert_eq!(s.down(0), everyone);
        assert_eq!(s.down(1), everyone);
    }

    // ---- KeepOldest --------------------------------------------------------------------

    #[test]
    fn keep_oldest_basics() {
        // E is the oldest.
        Setup::new(keep_oldest(true), vec![vec![a(), e()], vec![b(), c(), d()]]).assert_downing(&[
            b(),
            c(),
            d(),
        ]);
        // With role2 (C, D): D is the oldest.
        Setup::new(
            Strategy::KeepOldest {
                down_if_alone: true,
                role: Some("role2".into()),
            },
            vec![vec![a(), e()], vec![b(), c(), d()]],
        )
        .assert_downing(&[a(), e()]);
        Setup::new(keep_oldest(true), vec![vec![e()], vec![a(), b(), c(), d()]])
            .assert_downing(&[e()]);
        Setup::new(keep_oldest(true), vec![vec![b()], vec![a()]]).assert_downing(&[a()]);
        Setup::new(
            keep_oldest(false),
            vec![vec![e()], vec![a(), b(), c(), d()]],
        )
        .assert_downing(&[a(), b(), c(), d()]);
    }

    #[test]
    fn keep_oldest_leaving_exiting_edge_cases() {
        let ko = || keep_oldest(true);
        // Scenario 1: E Exiting on side 2 (not counted as oldest, D is).
        let s = Setup::new(ko(), vec![vec![a(), b(), d()], vec![c(), exiting(e())]]);
        assert_eq!(s.decide(0), Unreach);
        assert_eq!(s.down(0), addrs(&[c()]));
        let s = Setup::new(ko(), vec![vec![a(), b(), d()], vec![c(), leaving(e())]]);
        assert_eq!(s.decide(1), All);
        assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));
        // Scenario 2.
        let s = Setup::new(ko(), vec![vec![a(), leaving(e())], vec![b(), c(), d()]]);
        assert_eq!((s.decide(0), s.decide(1)), (All, Reach));
        // Scenario 3.
        Setup::new(
            ko(),
            vec![vec![a(), e()], vec![leaving(b()), leaving(c()), d()]],
        )
        .assert_downing(&[b(), c(), d()]);
        // Unless alone, scenarios 1, 4, 3.
        let s = Setup::new(ko(), vec![vec![leaving(d()), e()], vec![a(), b(), c()]]);
        assert_eq!((s.decide(0), s.decide(1)), (All, Reach));
        let s = Setup::new(ko(), vec![vec![e()], vec![a(), b(), leaving(c())]]);
        assert_eq!((s.decide(0), s.decide(1)), (Reach, Unreach));
        let s = Setup::new(
            ko(),
            vec![
                vec![e()],
                vec![a(), leaving(b()), leaving(c()), leaving(d())],
            ],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Reach, All));
        // Oldest leaving/exiting and alone.
        let s = Setup::new(ko(), vec![vec![d(), exiting(e())], vec![a(), b(), c()]]);
        assert_eq!(s.decide(0), Reach);
        let s = Setup::new(ko(), vec![vec![d(), leaving(e())], vec![a(), b(), c()]]);
        assert_eq!(s.decide(1), Reach);
        // One single oldest.
        let s = Setup::new(ko(), vec![vec![a()], vec![exiting(b())]]);
        assert_eq!(s.decide(0), Unreach);
        let s = Setup::new(ko(), vec![vec![a()], vec![leaving(b())]]);
        assert_eq!(s.decide(1), All);
    }

    #[test]
    fn keep_oldest_joining_edge_cases() {
        let s = Setup::new(
            keep_oldest(true),
            vec![vec![joining(a()), e()], vec![b(), c(), d()]],
        );
        // E alone when not counting joining A; but A may be Up over there.
        assert_eq!((s.decide(0), s.decide(1)), (Reach, All));
        let s = Setup::new(
            keep_oldest(false),
            vec![vec![joining(a()), e()], vec![b(), c(), d()]],
        );
        assert_eq!((s.decide(0), s.decide(1)), (Unreach, Reach));
    }

    #[test]
    fn keep_oldest_indirectly_connected() {
        Setup::new(keep_oldest(true), vec![vec![a(), b(), c()]])
            .indirect(vec![(a(), b()), (b(), a())])
            .assert_downing(&[a(), b()]);
        let s = Setup::new(
            keep_oldest(true),
            vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]],
        )
        .indirect(vec![(d(), e()), (e(), d())]);
        assert_eq!(s.down(0), addrs(&[a(), b(), c(), d(), e()]));
        assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));
    }

    #[test]
    fn down_all_strategy() {
        Setup::new(Strategy::DownAll, vec![vec![a(), b(), c()], vec![d(), e()]]).assert_downing(&[
            a(),
            b(),
            c(),
            d(),
            e(),
        ]);
        Setup::new(Strategy::DownAll, vec![vec![a(), b(), c()]])
            .indirect(vec![(a(), b()), (b(), a())])
            .assert_downing(&[a(), b(), c()]);
    }

    /// Lease-majority seam: the minority waits before acquiring, and the reversed decisions
    /// down this side instead.
    #[test]
    fn lease_majority_seam() {
        let lm = |role: Option<&str>| Strategy::LeaseMajority {
            role: role.map(String::from),
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
        };
        let s = Setup::new(lm(None), vec![vec![a(), c(), e()], vec![b(), d()]]);
        assert_eq!(s.decide(0), Unreach);
        assert_eq!(lease_acquire_delay(&s.strategy, &s.view(0)), Duration::ZERO);
        assert_eq!(
            lease_acquire_delay(&s.strategy, &s.view(1)),
            Duration::from_secs(2)
        );
        let v = s.view(0);
        assert_eq!(
            nodes_to_down(s.decide(0).reversed(), &s.strategy, &v),
            addrs(&[a(), c(), e()])
        );
        // C is the lowest with role2 and sits on side 2.
        let s = Setup::new(lm(Some("role2")), vec![vec![a(), d(), e()], vec![b(), c()]]);
        assert_eq!(
            lease_acquire_delay(&s.strategy, &s.view(0)),
            Duration::from_secs(2)
        );
        assert_eq!(lease_acquire_delay(&s.strategy, &s.view(1)), Duration::ZERO);
        // Indirectly connected, reversed: indirectly connected plus all reachable.
        let s = Setup::new(lm(None), vec![vec![a(), b(), c()], vec![d(), e()]])
            .indirect(vec![(b(), c()), (c(), b())]);
        let v = s.view(0);
        assert_eq!(s.decide(0), Decision::DownIndirectlyConnected);
        assert_eq!(
            nodes_to_down(Decision::ReverseDownIndirectlyConnected, &s.strategy, &v),
            addrs(&[a(), b(), c()])
        );
        assert_eq!(
            nodes_to_down(Decision::DownIndirectlyConnected, &s.strategy, &v),
            addrs(&[b(), c(), d(), e()])
        );
        // Already downed node during the partition.
        let s = Setup::new(
            lm(None),
            vec![vec![a(), b(), c(), d()], vec![leaving(e()), downed(f())]],
        )
        .indirect(vec![(leaving(e()), downed(f()))]);
        assert_eq!(s.down(0), addrs(&[e()]));
        // The reference (with a real lease) downs A–D too from E's side, because its second
        // pass is "acquire lease and down unreachable". Without a lease we keep majority
        // semantics, so E only downs itself — the same set the majority side downs.
        assert_eq!(s.down(1), addrs(&[e()]));
    }

    #[test]
    fn down_self_quarantined() {
        let s = Setup::new(keep_majority(), vec![vec![a(), b()], vec![c()]]);
        let v = s.view(0);
        assert_eq!(
            nodes_to_down(Decision::DownSelfQuarantinedByRemote, &s.strategy, &v),
            addrs(&[a()])
        );
    }

    #[test]
    fn settings_defaults() {
        let s = SbrSettings::default();
        assert_eq!(s.stable_after, Duration::from_secs(20));
        assert_eq!(s.down_all_when_unstable, Some(Duration::from_secs(15)));
        assert_eq!(s.strategy, keep_majority());
        assert_eq!(
            SbrSettings::down_all_when_unstable_on(Duration::from_secs(2)),
            Duration::from_secs(4)
        );
    }

    #[test]
    fn view_from_reachability_table() {
        let members = vec![a(), b(), c(), downed(d())];
        let mut r = Reachability::new();
        r.unreachable(&a().addr, &b().addr);
        r.unreachable(&d().addr, &c().addr); // D is Down: its observation does not count
        r.unreachable(&b().addr, &a().addr); // self is never unreachable
        let v = SbrView::from_state(a().addr, members, &r, BTreeSet::new());
        assert_eq!(v.unreachable, addrs(&[b(), d()]));
        assert_eq!(v.records.len(), 3);
    }

    // ---- SplitBrainResolver timing -----------------------------------------------------

    fn secs(s: f64) -> Instant {
        Instant::from_nanos((s * 1e9) as u64)
    }

    /// A five-node view from A with `unreachable` nodes unreachable from A.
    fn five(unreachable: &[Member]) -> SbrView {
        let members = vec![a(), b(), c(), d(), e()];
        SbrView {
            self_addr: a().addr,
            unreachable: addrs(unreachable),
            records: unreachable
                .iter()
                .map(|m| (a().addr, m.addr.clone(), ReachabilityStatus::Unreachable))
                .collect(),
            seen_by: members
                .iter()
                .filter(|m| !unreachable.contains(m))
                .map(|m| m.addr.clone())
                .collect(),
            members,
        }
    }

    fn sbr(stable: f64, unstable: Option<f64>) -> SplitBrainResolver {
        SplitBrainResolver::new(
            SbrSettings {
                strategy: keep_majority(),
                stable_after: Duration::from_secs_f64(stable),
                down_all_when_unstable: unstable.map(Duration::from_secs_f64),
            },
            secs(0.0),
        )
    }

    #[test]
    fn decides_only_after_stable_after() {
        let mut r = sbr(20.0, None);
        let v = five(&[d(), e()]);
        r.note_change(secs(1.0), SbrChange::Unreachable, &v);
        r.note_change(secs(2.0), SbrChange::Unreachable, &v);
        assert_eq!(r.next_deadline(), Some(secs(22.0)));
        assert_eq!(r.tick(secs(21.9), true, &v), None, "not stable yet");
        assert_eq!(r.tick(secs(22.0), false, &v), None, "not responsible");
        let (decision, nodes) = r.tick(secs(22.0), true, &v).expect("decision due");
        assert_eq!(decision, Unreach);
        assert_eq!(nodes, vec![d().addr, e().addr]);
        assert_eq!(r.stable_deadline(), secs(42.0), "reset after acting");
        assert_eq!(r.instability(), None);
    }

    #[test]
    fn every_change_but_removal_resets_the_deadline() {
        let mut r = sbr(20.0, None);
        let v = five(&[e()]);
        r.note_change(secs(1.0), SbrChange::Unreachable, &v);
        r.note_change(secs(10.0), SbrChange::MemberUp, &v);
        assert_eq!(r.tick(secs(21.0), true, &v), None);
        r.note_change(secs(15.0), SbrChange::MemberExited, &v);
        r.note_change(secs(16.0), SbrChange::MemberRemoved, &v);
        assert_eq!(r.stable_deadline(), secs(35.0));
        assert!(r.tick(secs(35.0), true, &v).is_some());
    }

    /// The leader of the minority downs its own side, self last.
    #[test]
    fn minority_leader_downs_itself_last() {
        let mut r = sbr(1.0, None);
        let v = SbrView {
            self_addr: a().addr,
            ..five(&[c(), d(), e()])
        };
        r.note_change(secs(0.0), SbrChange::Unreachable, &v);
        let (decision, nodes) = r.tick(secs(1.0), true, &v).unwrap();
        assert_eq!(decision, Reach);
        assert_eq!(nodes, vec![b().addr, a().addr]);
    }

    /// "not down when unreachable become reachable", "… is already Down".
    #[test]
    fn nothing_to_do_when_healed_or_already_down() {
        let mut r = sbr(1.0, None);
        let healed = five(&[]);
        r.note_change(secs(0.0), SbrChange::Unreachable, &five(&[e()]));
        r.note_change(secs(0.5), SbrChange::Reachable, &healed);
        assert_eq!(r.tick(secs(5.0), true, &healed), None);
        assert_eq!(r.instability(), None, "all unreachable healed");

        let mut r = sbr(1.0, None);
        let mut v = five(&[e()]);
        v.members[4] = downed(e());
        r.note_change(secs(0.0), SbrChange::MemberDowned, &v);
        assert_eq!(r.instability(), None, "the only unreachable is Down");
        assert_eq!(r.tick(secs(5.0), true, &v), None);
    }

    /// Joining members do not count for resetting instability (as the reference).
    #[test]
    fn unreachable_joining_does_not_keep_instability_alive() {
        let mut r = sbr(2.0, Some(1.0));
        let mut v = five(&[e()]);
        v.members[4] = joining(e());
        r.note_change(secs(0.0), SbrChange::Unreachable, &v);
        assert_eq!(r.instability(), None);
    }

    /// "down all when unstable, scenario 1" (stable-after 2 s, down-all-when-unstable 1 s):
    /// E flaps every second, D stays unreachable. The stable deadline keeps moving, but after
    /// 3 s of changes everyone goes down — on a node that is not the leader too.
    #[test]
    fn down_all_when_unstable_fires_on_every_node() {
        for responsible in [true, false] {
            let mut r = sbr(2.0, Some(1.0));
            let de = five(&[d(), e()]);
            let dd = five(&[d()]);
            r.note_change(secs(0.0), SbrChange::Unreachable, &de);
            r.note_change(secs(0.0), SbrChange::Unreachable, &de);
            assert_eq!(r.tick(secs(0.1), responsible, &de), None);
            r.note_change(secs(1.0), SbrChange::Reachable, &dd);
            assert_eq!(r.tick(secs(1.1), responsible, &dd), None);
            r.note_change(secs(2.0), SbrChange::Unreachable, &de);
            assert_eq!(r.tick(secs(2.1), responsible, &de), None);
            assert_eq!(r.next_deadline(), Some(secs(3.0)));
            r.note_change(secs(3.0), SbrChange::Reachable, &dd);
            assert_eq!(
                r.tick(secs(3.0), responsible, &dd),
                None,
                "not beyond 3 s yet"
            );
            let (decision, nodes) = r.tick(secs(3.1), responsible, &dd).expect("down all");
            assert_eq!(decision, All);
            assert_eq!(
                nodes,
                vec![b().addr, c().addr, d().addr, e().addr, a().addr]
            );
            assert_eq!(r.instability(), None);
        }
    }

    /// "not down all when becoming stable again".
    #[test]
    fn no_down_all_once_stable_again() {
        let mut r = sbr(2.0, Some(1.0));
        let de = five(&[d(), e()]);
        let dd = five(&[d()]);
        let healed = five(&[]);
        r.note_change(secs(0.0), SbrChange::Unreachable, &de);
        r.note_change(secs(1.0), SbrChange::Reachable, &dd);
        assert_eq!(r.tick(secs(1.5), false, &dd), None);
        r.note_change(secs(2.0), SbrChange::Reachable, &healed);
        assert_eq!(r.instability(), None);
        for t in [2.5, 5.0, 10.0] {
            assert_eq!(r.tick(secs(t), true, &healed), None);
        }
    }

    /// With down-all-when-unstable off nothing is downed for instability, and the tracking
    /// is forgotten after 2 × stable-after without changes; the normal decision still comes.
    #[test]
    fn instability_tracking_expires_when_feature_off() {
        let mut r = sbr(2.0, None);
        let v = five(&[e()]);
        r.note_change(secs(0.0), SbrChange::Unreachable, &v);
        assert_eq!(r.tick(secs(1.0), false, &v), None);
        assert!(r.instability().is_some());
        assert_eq!(r.tick(secs(4.1), false, &v), None);
        assert_eq!(r.instability(), None);
        assert_eq!(r.tick(secs(4.2), true, &v).map(|(d, _)| d), Some(Unreach));
    }
}
