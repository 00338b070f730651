//! When to decide: the stable-after deadline, instability tracking and
//! down-all-when-unstable. The verdict itself comes from the decision module; for
//! lease-majority, the lease module holds a decision back until the lease answers.

use std::collections::BTreeSet;
use std::time::Duration;

use super::action::SbrAction;
use super::decision::{
    Decision, SbrView, Strategy, counted, decide, lease_acquire_delay, nodes_to_down,
};
use super::lease::{LeaseGate, Outcomes, ReleaseWhen};
use crate::address::UniqueAddress;
use crate::time::Instant;

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
    /// Lease-majority's lease state (idle for the other strategies).
    lease: LeaseGate,
    /// Set when this node was frozen long enough that the other side may have downed it,
    /// and its lease released again, meanwhile (see [`note_stall`](Self::note_stall)).
    stalled: bool,
}

impl SplitBrainResolver {
    /// A resolver started at `now`; the first decision can come `stable_after` later.
    pub fn new(settings: SbrSettings, now: Instant) -> Self {
        let stable_deadline = now + settings.stable_after;
        SplitBrainResolver {
            settings,
            stable_deadline,
            instability: None,
            lease: LeaseGate::default(),
            stalled: false,
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

    /// This node's ticks came `late` after they were due: it was frozen (a long pause, a
    /// stalled process). Under lease-majority, a freeze longer than half of `release-after`
    /// makes this node distrust the lease until it sees every member reachable again: the
    /// other side may have downed it during the freeze, removed it, kept the lease for
    /// `release-after` and given it back, all before this node could ask; the lease would then
    /// be free for it to take, and both sides would survive. So while it distrusts the lease,
    /// its decisions (and one waiting for the lease) are acted on as if the lease were
    /// refused: its side downs itself. (The margin of half `release-after` covers the other
    /// side's slower detection and removal.) The other strategies ignore this.
    pub fn note_stall(&mut self, late: Duration) {
        if let Strategy::LeaseMajority { release_after, .. } = &self.settings.strategy
            && late > *release_after / 2
        {
            self.stalled = true;
        }
    }

    /// Whether this node distrusts the lease after a freeze ([`note_stall`](Self::note_stall)).
    pub fn stalled(&self) -> bool {
        self.stalled
    }

    /// Whether a lease-majority decision waits for the lease (no other decision is taken
    /// meanwhile).
    pub fn waiting_for_lease(&self) -> bool {
        self.lease.is_pending()
    }

    /// When the lease-majority lease this node holds is to be given back; `None` when it does
    /// not hold it (as far as it knows: the lease's own handle may have lost it since).
    pub fn lease_held(&self) -> Option<&ReleaseWhen> {
        self.lease.held()
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
            .any(|m| view.unreachable.contains(&m.addr) && counted(m, false, false));
        if !pending {
            self.instability = None;
        }
    }

    /// Called every tick (1 s). `responsible` = self is the leader and has been seen
    /// Up/WeaklyUp.
    ///
    /// Returns what to do, if anything:
    /// - [`SbrAction::Down`] when (a) down-all-when-unstable is on and reachability has kept
    ///   changing for longer than `stable_after + down_all_when_unstable` since the first
    ///   change — on every node, responsible or not, to end the instability as fast as
    ///   possible; or (b) this node is responsible, some node is unreachable, and nothing
    ///   changed for `stable_after`. Acting resets the deadline and the instability tracking.
    ///   A decision that downs nobody is not reported.
    /// - With lease-majority, (b) first asks for the lease ([`SbrAction::AcquireLease`], after
    ///   the minority's delay) and acts only on the answer ([`lease_answer`]) or when the
    ///   answer is overdue, which counts as a refusal. While it waits, nothing else is
    ///   decided, not even down-all-when-unstable (as the reference, which ignores its ticks
    ///   then). [`SbrAction::ReleaseLease`] comes once the nodes downed under the lease are
    ///   removed and `release-after` has passed.
    ///
    /// [`lease_answer`]: Self::lease_answer
    pub fn tick(&mut self, now: Instant, responsible: bool, view: &SbrView) -> Option<SbrAction> {
        let (timeout, release_after) = self.lease_timings();
        if view.unreachable.is_empty() {
            // Everyone is in sight again: whatever happened during a freeze, this node has
            // heard of it (or was told it is Down, and stopped).
            self.stalled = false;
        }
        if self.lease.is_pending() {
            let action = if self.stalled {
                self.lease.give_up(now, release_after)
            } else {
                self.lease.tick(now, timeout, release_after)
            };
            self.acted(now, &action);
            return action;
        }
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
        if responsible
            && !view.unreachable.is_empty()
            && now < self.stable_deadline
            && let Some(action) = self.act_on_evident_split(now, view)
        {
            return Some(action);
        }
        if responsible && !view.unreachable.is_empty() && now >= self.stable_deadline {
            let decision = decide(&self.settings.strategy, view);
            if !self.settings.strategy.needs_lease() {
                return self.act(now, decision, view);
            }
            let strategy = &self.settings.strategy;
            let outcomes = Outcomes {
                decision,
                win: downing_order(nodes_to_down(decision, strategy, view), view),
                lose: downing_order(nodes_to_down(decision.reversed(), strategy, view), view),
            };
            // Nothing to down (every unreachable node is Down already): nothing to ask for.
            if !outcomes.win.is_empty() {
                if self.stalled {
                    let action = Some(self.lease.without_lease(outcomes));
                    self.acted(now, &action);
                    return action;
                }
                let delay = lease_acquire_delay(strategy, view);
                return self.lease.start(now, delay, timeout, outcomes);
            }
        }
        self.lease.release_due(now, release_after, |n| {
            view.members.iter().any(|m| &m.addr == n)
        })
    }

    /// The answer to [`SbrAction::AcquireLease`] `attempt`: whether the lease was granted (a
    /// refusal, an error and a timeout are all "not granted"). Returns the decision to act on
    /// if this was the answer a decision waited for; [`SbrAction::ReleaseLease`] for a grant
    /// that came too late to be used.
    pub fn lease_answer(&mut self, now: Instant, attempt: u64, granted: bool) -> Option<SbrAction> {
        let (_, release_after) = self.lease_timings();
        let action = self.lease.answer(now, attempt, granted, release_after);
        self.acted(now, &action);
        action
    }

    /// `(lease-operation-timeout, release-after)` of lease-majority; zero for the others
    /// (whose lease gate never starts).
    fn lease_timings(&self) -> (Duration, Duration) {
        match &self.settings.strategy {
            Strategy::LeaseMajority {
                lease_operation_timeout,
                release_after,
                ..
            } => (*lease_operation_timeout, *release_after),
            _ => (Duration::ZERO, Duration::ZERO),
        }
    }

    /// Before stable-after has passed: when the split is evident (every unreachable member is
    /// gone, `SbrView::split_is_evident`) and the strategy keeps this side, downs the gone
    /// members now. A side the strategy would down waits for stable-after as usual: what is
    /// gone may be restarting, and its new incarnations replace the old ones as they join (the
    /// simulator's seed 1512: two of three nodes crash and restart within 2 s, and the third
    /// must not down itself meanwhile). Under lease-majority the lease decides, as always.
    fn act_on_evident_split(&mut self, now: Instant, view: &SbrView) -> Option<SbrAction> {
        if self.settings.strategy.needs_lease() || !view.split_is_evident() {
            return None;
        }
        match decide(&self.settings.strategy, view) {
            Decision::DownUnreachable => self.act(now, Decision::DownUnreachable, view),
            _ => None,
        }
    }

    /// After a decision is acted on, the next one needs a new stable period.
    fn acted(&mut self, now: Instant, action: &Option<SbrAction>) {
        if let Some(SbrAction::Down { .. }) = action {
            self.instability = None;
            self.reset_stable_deadline(now);
        }
    }

    fn act(&mut self, now: Instant, decision: Decision, view: &SbrView) -> Option<SbrAction> {
        let nodes = nodes_to_down(decision, &self.settings.strategy, view);
        if nodes.is_empty() {
            return None;
        }
        let action = Some(SbrAction::Down {
            decision,
            nodes: downing_order(nodes, view),
        });
        self.acted(now, &action);
        action
    }

    /// The earliest instant at which [`tick`](Self::tick) may act: the stable-after deadline,
    /// or the instability limit, or a lease time (the minority's delay, a lease request's
    /// deadline, the release), whichever comes first. While a decision waits for the lease
    /// only the lease's times count. Ticks are still expected every second (removals are
    /// noticed on them): this is for schedulers that want to sleep longer.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.lease.is_pending() {
            return self.lease.next_deadline();
        }
        let unstable = match (self.instability, self.settings.down_all_when_unstable) {
            (Some(i), Some(extra)) if !extra.is_zero() => {
                Some(i.first_change + self.settings.stable_after + extra)
            }
            _ => None,
        };
        [
            Some(self.stable_deadline),
            unstable,
            self.lease.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// `nodes` in downing order: others first (by address), self last.
fn downing_order(nodes: BTreeSet<UniqueAddress>, view: &SbrView) -> Vec<UniqueAddress> {
    let mut order: Vec<UniqueAddress> = nodes
        .iter()
        .filter(|n| **n != view.self_addr)
        .cloned()
        .collect();
    if nodes.contains(&view.self_addr) {
        order.push(view.self_addr.clone());
    }
    order
}
