//! The strategy interface and what a strategy sees: [`ShardAllocationStrategy`], the
//! [`AllocationSnapshot`] of every region with its [`RegionEntry`], and the app-version order
//! ([`compare_app_versions`]) that ranks regions.
//!
//! Kept apart from the parent module so that the strategies (`least`, `threshold`,
//! `oldest_up`) build on it from above, while the parent only names the strategies and picks
//! one from the settings.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::membership::member::{Member, MemberStatus};
use crate::sharding::shard_id::ShardId;

/// Decides where shards live. Implementations must be deterministic functions of their inputs
/// (and their own state): the coordinator re-asks every `rebalance-interval` and only records the
/// decisions, so a strategy that flips its mind between calls causes needless hand-offs.
///
/// The reference's interface returns futures so a custom strategy may consult an external
/// service. The core keeps it synchronous so the coordinator stays I/O-free and replayable; the
/// runtime adapts an asynchronous strategy (`shardik_runtime::sharding::
/// AsyncShardAllocationStrategy`) by answering "not yet" (`None`, an empty rebalance) while its
/// future runs and asking the coordinator again once the answer is in.
pub trait ShardAllocationStrategy<R> {
    /// Where to put a new shard. `requester` is the region asking; `current` every region with
    /// its shards. Must return one of the regions of `current`, or `None` when no region is
    /// usable right now (for example the membership view has not caught up yet; the reference
    /// retries after 50 ms), in which case the caller retries later.
    fn allocate_shard(
        &mut self,
        requester: &R,
        shard: &ShardId,
        current: &AllocationSnapshot<R>,
    ) -> Option<R>;

    /// Which shards to move now (a subset of allocated shards); `in_progress` are shards already
    /// rebalancing. The caller hands each returned shard off and then re-allocates it with
    /// [`allocate_shard`](Self::allocate_shard), which is what moves it to the emptier regions.
    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<R>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId>;
}

/// A boxed strategy is a strategy (so the coordinator can hold one chosen by configuration).
impl<R, S: ShardAllocationStrategy<R> + ?Sized> ShardAllocationStrategy<R> for Box<S> {
    fn allocate_shard(
        &mut self,
        requester: &R,
        shard: &ShardId,
        current: &AllocationSnapshot<R>,
    ) -> Option<R> {
        (**self).allocate_shard(requester, shard, current)
    }

    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<R>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        (**self).rebalance(current, in_progress)
    }
}

/// One shard region as the strategy sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionEntry<R> {
    /// The region's identity (opaque to the strategy; only its order is used, for tie-breaks).
    pub region: R,
    /// The cluster member hosting the region, as currently known. `None` when the membership
    /// view does not (yet) contain it: such a region is ignored for this call, neither chosen for
    /// allocation nor counted for rebalancing, exactly as the reference skips regions whose
    /// member it cannot find. The caller maps its own local region to the self member.
    pub member: Option<Member>,
    /// The shards hosted there, in allocation order (oldest first): the least-shard strategy
    /// moves the oldest ones, so the order matters.
    pub shards: Vec<ShardId>,
}

impl<R: Ord> RegionEntry<R> {
    /// Whether the hosting member is on its way out (Leaving, Exiting, Down, Removed).
    ///
    /// Such regions sort last for allocation; their shards are moved by the coordinator's
    /// graceful hand-off, not by the strategy.
    pub fn is_leaving(&self) -> bool {
        self.member.as_ref().is_some_and(|m| {
            matches!(
                m.status,
                MemberStatus::Leaving
                    | MemberStatus::Exiting
                    | MemberStatus::Down
                    | MemberStatus::Removed
            )
        })
    }

    /// The reference's "shard suitability" order; `Less` means `self` is the better home.
    ///
    /// 1. regions on members that are not leaving first;
    /// 2. then the newest application version first (during a rolling update new shards go to
    ///    upgraded nodes, so fewer of them have to move again);
    /// 3. then the fewest shards first;
    /// 4. then the smaller region id (our deterministic replacement for map iteration order).
    ///
    /// Entries without a member sort after all others (they are filtered out before use).
    pub fn suitability_cmp(&self, other: &Self) -> Ordering {
        let (a, b) = match (&self.member, &other.member) {
            (Some(a), Some(b)) => (a, b),
            (Some(_), None) => return Ordering::Less,
            (None, Some(_)) => return Ordering::Greater,
            (None, None) => return self.region.cmp(&other.region),
        };
        self.is_leaving()
            .cmp(&other.is_leaving())
            .then_with(|| compare_app_versions(&b.app_version, &a.app_version))
            .then_with(|| self.shards.len().cmp(&other.shards.len()))
            .then_with(|| self.region.cmp(&other.region))
    }
}

/// What the strategy sees: every region with its shards, plus cluster-wide facts.
///
/// Regions are kept in region-id order, so iteration (and hence every decision) is
/// deterministic.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocationSnapshot<R> {
    pub(super) regions: BTreeMap<R, RegionEntry<R>>,
    /// Some member (in the coordinator's data center, whether or not it hosts a region) is
    /// unreachable. Rebalancing needs acknowledgements from every region and proxy, so it would
    /// only stall: no rebalance while this is set.
    pub unreachable_members: bool,
    /// Some member (same scope) is Joining or WeaklyUp. Such a node should be Up shortly and
    /// will then take shards; rebalancing before that would move shards twice: no rebalance
    /// while this is set.
    pub joining_members: bool,
}

impl<R> Default for AllocationSnapshot<R> {
    fn default() -> Self {
        AllocationSnapshot {
            regions: BTreeMap::new(),
            unreachable_members: false,
            joining_members: false,
        }
    }
}

impl<R: Ord + Clone> AllocationSnapshot<R> {
    /// An empty snapshot with no unreachable or joining members.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a region; returns the entry it replaced.
    pub fn insert(&mut self, entry: RegionEntry<R>) -> Option<RegionEntry<R>> {
        self.regions.insert(entry.region.clone(), entry)
    }

    /// Builder form of [`insert`](Self::insert).
    pub fn with_region<S: Into<ShardId>>(
        mut self,
        region: R,
        member: Option<Member>,
        shards: impl IntoIterator<Item = S>,
    ) -> Self {
        self.insert(RegionEntry {
            region,
            member,
            shards: shards.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Builder form of setting [`unreachable_members`](Self::unreachable_members).
    pub fn with_unreachable_members(mut self, any: bool) -> Self {
        self.unreachable_members = any;
        self
    }

    /// Builder form of setting [`joining_members`](Self::joining_members).
    pub fn with_joining_members(mut self, any: bool) -> Self {
        self.joining_members = any;
        self
    }

    /// The entry of `region`, if present.
    pub fn region(&self, region: &R) -> Option<&RegionEntry<R>> {
        self.regions.get(region)
    }

    /// Every region, in region-id order.
    pub fn regions(&self) -> impl Iterator<Item = &RegionEntry<R>> {
        self.regions.values()
    }

    /// Number of regions (with or without a known member).
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether there are no regions at all.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Total number of allocated shards over all regions.
    pub fn shard_count(&self) -> usize {
        self.regions.values().map(|e| e.shards.len()).sum()
    }

    /// The regions whose member is known, most suitable first (the reference's
    /// `regionEntriesFor(..).sorted(ShardSuitabilityOrdering)`).
    pub(crate) fn sorted_candidates(&self) -> Vec<&RegionEntry<R>> {
        let mut v: Vec<&RegionEntry<R>> = self
            .regions
            .values()
            .filter(|e| e.member.is_some())
            .collect();
        v.sort_by(|a, b| a.suitability_cmp(b));
        v
    }

    /// The most suitable region for a new shard, if any region has a known member.
    pub(crate) fn most_suitable(&self) -> Option<&RegionEntry<R>> {
        self.regions
            .values()
            .filter(|e| e.member.is_some())
            .min_by(|a, b| a.suitability_cmp(b))
    }

    /// The reference's `isAGoodTimeToRebalance`: not with no regions, not during a rolling
    /// update (members of the regions on different app versions: the old nodes are about to go
    /// anyway), not while members are unreachable or joining.
    pub(crate) fn is_good_time_to_rebalance(&self, sorted: &[&RegionEntry<R>]) -> bool {
        let Some(first) = sorted.first().and_then(|e| e.member.as_ref()) else {
            return false;
        };
        let same_version = sorted.iter().all(|e| {
            e.member.as_ref().is_some_and(|m| {
                compare_app_versions(&m.app_version, &first.app_version) == Ordering::Equal
            })
        });
        same_version && !self.unreachable_members && !self.joining_members
    }
}

/// Compares application versions the way rolling updates need (`Less` = older).
///
/// A version is `NUMBERS[-QUALIFIER]`: dot-separated segments compared numerically when both are
/// digits (so `1.10` > `1.9`), otherwise as strings, with a numeric segment below a textual one;
/// missing segments count as `0` (so `1.0` equals `1.0.0`). A release sorts above any of its
/// qualified pre-releases (`1.0.0` > `1.0.0-M1`); qualifiers compare as strings. This follows the
/// reference's `Version` closely enough for "prefer the newest", without its exact parser.
pub fn compare_app_versions(a: &str, b: &str) -> Ordering {
    fn split(v: &str) -> (&str, Option<&str>) {
        match v.split_once('-') {
            Some((n, q)) => (n, Some(q)),
            None => (v, None),
        }
    }
    fn segment_cmp(x: &str, y: &str) -> Ordering {
        match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            (Err(_), Err(_)) => x.cmp(y),
        }
    }
    let (an, aq) = split(a.trim());
    let (bn, bq) = split(b.trim());
    let mut asegs = an.split('.').filter(|s| !s.is_empty());
    let mut bsegs = bn.split('.').filter(|s| !s.is_empty());
    loop {
        let ord = match (asegs.next(), bsegs.next()) {
            (None, None) => break,
            (x, y) => segment_cmp(x.unwrap_or("0"), y.unwrap_or("0")),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    match (aq, bq) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => x.cmp(y),
    }
}
