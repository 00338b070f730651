//! Per-shard passivation strategies: the trait the shard calls, the replacement policies
//! (LRU, SLRU/S4LRU, MRU, LFU, LFUDA), the composite W-TinyLFU strategy, idle timeouts, and `none`.

use std::hash::Hash;
use std::time::Duration;

use crate::frequency::FrequencyList;
use crate::recency::RecencyList;
use crate::segmented::{SegmentedRecencyList, segment_limits, segment_limits_floor};
use crate::sketch::{EntityHash, FrequencySketch, HillClimbing};

/// Per-shard passivation strategy, mirroring the reference's per-shard API.
///
/// Time is passed in by the caller as milliseconds since an arbitrary epoch; ids to passivate are
/// appended to a caller-owned `Vec` (never cleared by the strategy), so steady-state use does not allocate.
pub trait PassivationStrategy<Id> {
    /// An entity is about to receive a message: record the access; push ids to passivate.
    fn entity_touched(&mut self, id: &Id, now_ms: u64, passivate: &mut Vec<Id>);
    /// An entity stopped (for whatever reason): stop tracking it.
    fn entity_terminated(&mut self, id: &Id);
    /// The per-region active entity limit changed.
    fn limit_updated(&mut self, per_region_limit: usize, passivate: &mut Vec<Id>);
    /// The number of active shards in this region changed.
    fn shards_updated(&mut self, active_shards: usize, passivate: &mut Vec<Id>);
    /// Interval at which [`PassivationStrategy::interval_passed`] should be called, if any.
    fn scheduled_interval(&self) -> Option<Duration>;
    /// The scheduled interval passed: push idle ids to passivate.
    fn interval_passed(&mut self, now_ms: u64, passivate: &mut Vec<Id>);

    /// Convenience wrapper of [`PassivationStrategy::entity_touched`] returning a fresh `Vec`.
    fn touched(&mut self, id: &Id, now_ms: u64) -> Vec<Id> {
        let mut out = Vec::new();
        self.entity_touched(id, now_ms, &mut out);
        out
    }
}

/// Idle timeout and check interval, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCheck {
    /// Entities idle for longer than this are passivated.
    pub timeout_ms: u64,
    /// How often to check.
    pub interval_ms: u64,
}

impl IdleCheck {
    /// Timeout with the default interval (timeout / 2).
    pub fn new(timeout: Duration) -> Self {
        let timeout_ms = timeout.as_millis() as u64;
        IdleCheck {
            timeout_ms,
            interval_ms: (timeout_ms / 2).max(1),
        }
    }
}

/// Tracks last-touch times for idle passivation next to a limit-based policy.
#[derive(Debug)]
struct IdleTracker<Id> {
    check: IdleCheck,
    recency: RecencyList<Id>,
}

impl<Id: Hash + Eq + Clone> IdleTracker<Id> {
    fn new(check: IdleCheck) -> Self {
        IdleTracker {
            check,
            recency: RecencyList::new(),
        }
    }

    /// Record `id` as touched, then forget the ids passivated since `from` in `out`.
    fn after_touch(&mut self, id: &Id, now: u64, out: &[Id]) {
        self.recency.update(id, now);
        for gone in out {
            self.recency.remove(gone);
        }
    }

    fn forget(&mut self, out: &[Id]) {
        for gone in out {
            self.recency.remove(gone);
        }
    }
}

/// Which replacement policy an [`ActiveEntities`] area uses.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplacementPolicy {
    /// Least recently used.
    LeastRecentlyUsed,
    /// Segmented LRU with the given level proportions (level 0 first; 2 levels = SLRU, 4 = S4LRU).
    SegmentedLeastRecentlyUsed(Vec<f64>),
    /// Most recently used.
    MostRecentlyUsed,
    /// Least frequently used, optionally with dynamic aging (LFUDA).
    LeastFrequentlyUsed {
        /// Enable dynamic aging.
        dynamic_aging: bool,
    },
}

/// A bounded set of active entities managed by one replacement policy (an "area").
#[derive(Debug)]
pub enum ActiveEntities<Id> {
    /// No area (used when the composite strategy has no admission window).
    Disabled,
    /// LRU.
    Lru {
        /// Tracked ids.
        list: RecencyList<Id>,
        /// Capacity.
        limit: usize,
    },
    /// SLRU / S4LRU.
    Slru {
        /// Tracked ids.
        list: SegmentedRecencyList<Id>,
        /// Capacity.
        limit: usize,
        /// Level proportions.
        proportions: Vec<f64>,
        /// Use [`crate::segment_limits_floor`] (the reference's published-table behaviour).
        floor_limits: bool,
    },
    /// MRU.
    Mru {
        /// Tracked ids.
        list: RecencyList<Id>,
        /// Capacity.
        limit: usize,
    },
    /// LFU / LFUDA.
    Lfu {
        /// Tracked ids.
        list: FrequencyList<Id>,
        /// Capacity.
        limit: usize,
    },
}

impl<Id: Hash + Eq + Clone> ActiveEntities<Id> {
    /// A new area with the given policy and capacity.
    pub fn new(policy: &ReplacementPolicy, limit: usize) -> Self {
        match policy {
            ReplacementPolicy::LeastRecentlyUsed => ActiveEntities::Lru {
                list: RecencyList::new(),
                limit,
            },
            ReplacementPolicy::SegmentedLeastRecentlyUsed(p) if p.len() >= 2 => {
                ActiveEntities::Slru {
                    list: SegmentedRecencyList::new(segment_limits(limit, p)),
                    limit,
                    proportions: p.clone(),
                    floor_limits: false,
                }
            }
            ReplacementPolicy::SegmentedLeastRecentlyUsed(_) => ActiveEntities::Lru {
                list: RecencyList::new(),
                limit,
            },
            ReplacementPolicy::MostRecentlyUsed => ActiveEntities::Mru {
                list: RecencyList::new(),
                limit,
            },
            ReplacementPolicy::LeastFrequentlyUsed { dynamic_aging } => ActiveEntities::Lfu {
                list: FrequencyList::new(*dynamic_aging),
                limit,
            },
        }
    }

    /// Segmented LRU whose level limits are all `floor(p_i * limit)` (see
    /// [`crate::segment_limits_floor`]); only for reproducing the reference's published tables.
    pub fn segmented_with_floor_limits(proportions: &[f64], limit: usize) -> Self {
        ActiveEntities::Slru {
            list: SegmentedRecencyList::new(segment_limits_floor(limit, proportions)),
            limit,
            proportions: proportions.to_vec(),
            floor_limits: true,
        }
    }

    /// Number of tracked ids.
    pub fn len(&self) -> usize {
        match self {
            ActiveEntities::Disabled => 0,
            ActiveEntities::Lru { list, .. } | ActiveEntities::Mru { list, .. } => list.len(),
            ActiveEntities::Slru { list, .. } => list.len(),
            ActiveEntities::Lfu { list, .. } => list.len(),
        }
    }

    /// Whether no id is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Current capacity.
    pub fn limit(&self) -> usize {
        match self {
            ActiveEntities::Disabled => 0,
            ActiveEntities::Lru { limit, .. }
            | ActiveEntities::Mru { limit, .. }
            | ActiveEntities::Slru { limit, .. }
            | ActiveEntities::Lfu { limit, .. } => *limit,
        }
    }

    /// Whether `id` is tracked.
    pub fn is_active(&self, id: &Id) -> bool {
        match self {
            ActiveEntities::Disabled => false,
            ActiveEntities::Lru { list, .. } | ActiveEntities::Mru { list, .. } => {
                list.contains(id)
            }
            ActiveEntities::Slru { list, .. } => list.contains(id),
            ActiveEntities::Lfu { list, .. } => list.contains(id),
        }
    }

    /// Change the capacity, pushing evicted ids.
    pub fn update_limit(&mut self, new_limit: usize, out: &mut Vec<Id>) {
        match self {
            ActiveEntities::Disabled => {}
            ActiveEntities::Lru { list, limit } => {
                *limit = new_limit;
                let excess = list.len().saturating_sub(new_limit);
                list.remove_least_recent(excess, out);
            }
            ActiveEntities::Mru { list, limit } => {
                *limit = new_limit;
                let excess = list.len().saturating_sub(new_limit);
                list.remove_most_recent(excess, 0, out);
            }
            ActiveEntities::Slru {
                list,
                limit,
                proportions,
                floor_limits,
            } => {
                *limit = new_limit;
                list.update_limits(if *floor_limits {
                    segment_limits_floor(new_limit, proportions)
                } else {
                    segment_limits(new_limit, proportions)
                });
                list.remove_least_recent_over_limit(out);
            }
            ActiveEntities::Lfu { list, limit } => {
                *limit = new_limit;
                let excess = list.len().saturating_sub(new_limit);
                list.remove_least_frequent(excess, out);
            }
        }
    }

    /// Record an access (inserting `id` if new), pushing evicted ids (for MRU never `id` itself;
    /// for LFU evictions happen before the insert, so never `id` itself either).
    pub fn update(&mut self, id: &Id, out: &mut Vec<Id>) {
        match self {
            ActiveEntities::Disabled => out.push(id.clone()),
            ActiveEntities::Lru { list, limit } => {
                list.update(id, 0);
                let excess = list.len().saturating_sub(*limit);
                list.remove_least_recent(excess, out);
            }
            ActiveEntities::Mru { list, limit } => {
                list.update(id, 0);
                let excess = list.len().saturating_sub(*limit);
                list.remove_most_recent(excess, 1, out);
                // only with a limit of 0 can the just-touched entity itself be over the limit
                let still = list.len().saturating_sub(*limit);
                list.remove_most_recent(still, 0, out);
            }
            ActiveEntities::Slru { list, .. } => {
                list.update(id);
                list.remove_least_recent_over_limit(out);
            }
            ActiveEntities::Lfu { list, limit } => {
                let adjustment = usize::from(!list.contains(id));
                let excess = (list.len() + adjustment).saturating_sub(*limit);
                list.remove_least_frequent(excess, out);
                list.update(id);
                // only with a limit of 0 is the newcomer itself still over the limit
                let still = list.len().saturating_sub(*limit);
                list.remove_least_frequent(still, out);
            }
        }
    }

    /// The id this policy would replace next.
    pub fn select(&self) -> Option<&Id> {
        match self {
            ActiveEntities::Disabled => None,
            ActiveEntities::Lru { list, .. } => list.least_recent(),
            ActiveEntities::Mru { list, .. } => list.most_recent(),
            ActiveEntities::Slru { list, .. } => list.least_recent(),
            ActiveEntities::Lfu { list, .. } => list.least_frequent(),
        }
    }

    /// Stop tracking `id`.
    pub fn remove(&mut self, id: &Id) {
        match self {
            ActiveEntities::Disabled => {}
            ActiveEntities::Lru { list, .. } | ActiveEntities::Mru { list, .. } => {
                list.remove(id);
            }
            ActiveEntities::Slru { list, .. } => {
                list.remove(id);
            }
            ActiveEntities::Lfu { list, .. } => {
                list.remove(id);
            }
        }
    }
}

/// Per-region limit split across the region's active shards.
#[derive(Debug, Clone, Copy)]
struct Limits {
    per_region: usize,
    active_shards: usize,
    per_shard: usize,
}

impl Limits {
    fn new(per_region: usize) -> Self {
        Limits {
            per_region,
            active_shards: 1,
            per_shard: per_region,
        }
    }
    fn recompute(&mut self) {
        self.per_shard = self.per_region / self.active_shards.max(1);
    }
}

/// A single replacement policy bounded by the per-shard limit, optionally with idle timeouts.
#[derive(Debug)]
pub struct LimitStrategy<Id> {
    limits: Limits,
    active: ActiveEntities<Id>,
    idle: Option<IdleTracker<Id>>,
}

impl<Id: Hash + Eq + Clone> LimitStrategy<Id> {
    /// `policy` with `per_region_limit` (the whole limit until [`PassivationStrategy::shards_updated`]).
    pub fn new(
        policy: &ReplacementPolicy,
        per_region_limit: usize,
        idle: Option<IdleCheck>,
    ) -> Self {
        LimitStrategy {
            limits: Limits::new(per_region_limit),
            active: ActiveEntities::new(policy, per_region_limit),
            idle: idle.map(IdleTracker::new),
        }
    }

    /// A strategy over an already built area (created for `per_region_limit`).
    pub fn with_area(
        active: ActiveEntities<Id>,
        per_region_limit: usize,
        idle: Option<IdleCheck>,
    ) -> Self {
        LimitStrategy {
            limits: Limits::new(per_region_limit),
            active,
            idle: idle.map(IdleTracker::new),
        }
    }

    /// Current per-shard limit.
    pub fn per_shard_limit(&self) -> usize {
        self.limits.per_shard
    }

    /// Number of tracked (active) entities.
    pub fn len(&self) -> usize {
        self.active.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// The underlying area.
    pub fn active(&self) -> &ActiveEntities<Id> {
        &self.active
    }

    fn on_limit(&mut self, out: &mut Vec<Id>) {
        self.limits.recompute();
        let start = out.len();
        self.active.update_limit(self.limits.per_shard, out);
        if let Some(idle) = &mut self.idle {
            idle.forget(&out[start..]);
        }
    }
}

impl<Id: Hash + Eq + Clone> PassivationStrategy<Id> for LimitStrategy<Id> {
    fn entity_touched(&mut self, id: &Id, now_ms: u64, out: &mut Vec<Id>) {
        let start = out.len();
        self.active.update(id, out);
        if let Some(idle) = &mut self.idle {
            idle.after_touch(id, now_ms, &out[start..]);
        }
    }
    fn entity_terminated(&mut self, id: &Id) {
        self.active.remove(id);
        if let Some(idle) = &mut self.idle {
            idle.recency.remove(id);
        }
    }
    fn limit_updated(&mut self, per_region_limit: usize, out: &mut Vec<Id>) {
        self.limits.per_region = per_region_limit;
        self.on_limit(out);
    }
    fn shards_updated(&mut self, active_shards: usize, out: &mut Vec<Id>) {
        self.limits.active_shards = active_shards;
        self.on_limit(out);
    }
    fn scheduled_interval(&self) -> Option<Duration> {
        self.idle
            .as_ref()
            .map(|i| Duration::from_millis(i.check.interval_ms))
    }
    fn interval_passed(&mut self, now_ms: u64, out: &mut Vec<Id>) {
        if let Some(idle) = &mut self.idle {
            let start = out.len();
            idle.recency
                .remove_least_recent_outside(now_ms, idle.check.timeout_ms, out);
            for gone in &out[start..] {
                self.active.remove(gone);
            }
        }
    }
}

/// Passivate entities idle for longer than a timeout; no limit.
#[derive(Debug)]
pub struct IdleStrategy<Id> {
    idle: IdleTracker<Id>,
}

impl<Id: Hash + Eq + Clone> IdleStrategy<Id> {
    /// Idle-only strategy.
    pub fn new(check: IdleCheck) -> Self {
        IdleStrategy {
            idle: IdleTracker::new(check),
        }
    }
    /// Number of tracked entities.
    pub fn len(&self) -> usize {
        self.idle.recency.len()
    }
    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.idle.recency.is_empty()
    }
}

impl<Id: Hash + Eq + Clone> PassivationStrategy<Id> for IdleStrategy<Id> {
    fn entity_touched(&mut self, id: &Id, now_ms: u64, _out: &mut Vec<Id>) {
        self.idle.recency.update(id, now_ms);
    }
    fn entity_terminated(&mut self, id: &Id) {
        self.idle.recency.remove(id);
    }
    fn limit_updated(&mut self, _: usize, _: &mut Vec<Id>) {}
    fn shards_updated(&mut self, _: usize, _: &mut Vec<Id>) {}
    fn scheduled_interval(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.idle.check.interval_ms))
    }
    fn interval_passed(&mut self, now_ms: u64, out: &mut Vec<Id>) {
        self.idle
            .recency
            .remove_least_recent_outside(now_ms, self.idle.check.timeout_ms, out);
    }
}

/// Admission filter of the composite strategy.
#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionFilterSettings {
    /// Always admit.
    Always,
    /// Frequency sketch (admit iff the candidate's estimate is strictly greater).
    FrequencySketch {
        /// Rows (hash functions).
        depth: u32,
        /// Bits per counter.
        counter_bits: u32,
        /// Width = multiplier x next power of two of the capacity.
        width_multiplier: u32,
        /// Reset (halve) after multiplier x capacity increments.
        reset_multiplier: f64,
    },
}

impl Default for AdmissionFilterSettings {
    fn default() -> Self {
        AdmissionFilterSettings::FrequencySketch {
            depth: 4,
            counter_bits: 4,
            width_multiplier: 4,
            reset_multiplier: 10.0,
        }
    }
}

/// Hill-climbing optimizer settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HillClimbingSettings {
    /// Adjust every multiplier x limit accesses (10.0).
    pub adjust_multiplier: f64,
    /// First step size (0.0625).
    pub initial_step: f64,
    /// Active-rate change that restarts the climb (0.05).
    pub restart_threshold: f64,
    /// Step decay per adjustment (0.98).
    pub step_decay: f64,
}

impl Default for HillClimbingSettings {
    fn default() -> Self {
        HillClimbingSettings {
            adjust_multiplier: 10.0,
            initial_step: 0.0625,
            restart_threshold: 0.05,
            step_decay: 0.98,
        }
    }
}

/// Resolved composite (W-TinyLFU family) settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CompositeSettings {
    /// Window policy (`None` = no admission window).
    pub window: Option<ReplacementPolicy>,
    /// Initial window proportion (0.01).
    pub initial_window_proportion: f64,
    /// Minimum window proportion (0.01).
    pub minimum_window_proportion: f64,
    /// Maximum window proportion (1.0).
    pub maximum_window_proportion: f64,
    /// Window optimizer (`None` = static window).
    pub optimizer: Option<HillClimbingSettings>,
    /// Admission filter.
    pub filter: AdmissionFilterSettings,
    /// Main area policy.
    pub main: ReplacementPolicy,
}

impl CompositeSettings {
    /// The reference's default strategy: LRU window + hill climbing, frequency sketch, SLRU [0.2, 0.8].
    pub fn default_strategy() -> Self {
        CompositeSettings {
            window: Some(ReplacementPolicy::LeastRecentlyUsed),
            initial_window_proportion: 0.01,
            minimum_window_proportion: 0.01,
            maximum_window_proportion: 1.0,
            optimizer: Some(HillClimbingSettings::default()),
            filter: AdmissionFilterSettings::default(),
            main: ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.2, 0.8]),
        }
    }
}

/// Composite strategy: admission window, admission filter, main area and window optimizer (W-TinyLFU).
#[derive(Debug)]
pub struct CompositeStrategy<Id> {
    limits: Limits,
    window: ActiveEntities<Id>,
    main: ActiveEntities<Id>,
    window_proportion: f64,
    minimum_window_proportion: f64,
    maximum_window_proportion: f64,
    window_limit: usize,
    main_limit: usize,
    optimizer: Option<HillClimbing>,
    filter_settings: AdmissionFilterSettings,
    sketch: Option<FrequencySketch>,
    idle: Option<IdleTracker<Id>>,
    scratch: Vec<Id>,
}

impl<Id: Hash + Eq + Clone + EntityHash> CompositeStrategy<Id> {
    /// A composite strategy for `per_region_limit`.
    pub fn new(
        settings: &CompositeSettings,
        per_region_limit: usize,
        idle: Option<IdleCheck>,
    ) -> Self {
        let has_window = settings.window.is_some();
        let (initial, min, max) = if has_window {
            (
                settings.initial_window_proportion,
                settings.minimum_window_proportion,
                settings.maximum_window_proportion,
            )
        } else {
            (0.0, 0.0, 0.0)
        };
        let optimizer = match (&settings.window, settings.optimizer) {
            (Some(_), Some(hc)) => Some(HillClimbing::new(
                per_region_limit,
                hc.adjust_multiplier,
                hc.initial_step,
                hc.restart_threshold,
                hc.step_decay,
            )),
            _ => None,
        };
        let mut s = CompositeStrategy {
            limits: Limits::new(per_region_limit),
            window: match &settings.window {
                Some(p) => ActiveEntities::new(p, 0),
                None => ActiveEntities::Disabled,
            },
            main: ActiveEntities::new(&settings.main, 0),
            window_proportion: initial,
            minimum_window_proportion: min,
            maximum_window_proportion: max,
            window_limit: 0,
            main_limit: 0,
            optimizer,
            filter_settings: settings.filter.clone(),
            sketch: None,
            idle: idle.map(IdleTracker::new),
            scratch: Vec::new(),
        };
        s.sketch = s.create_sketch(per_region_limit);
        s.calculate_limits();
        let mut ignored = Vec::new();
        s.window.update_limit(s.window_limit, &mut ignored);
        s.main.update_limit(s.main_limit, &mut ignored);
        s
    }

    fn create_sketch(&self, capacity: usize) -> Option<FrequencySketch> {
        match &self.filter_settings {
            AdmissionFilterSettings::Always => None,
            AdmissionFilterSettings::FrequencySketch {
                depth,
                counter_bits,
                width_multiplier,
                reset_multiplier,
            } => Some(FrequencySketch::new(
                capacity,
                *width_multiplier,
                *reset_multiplier,
                *depth,
                *counter_bits,
            )),
        }
    }

    fn calculate_limits(&mut self) {
        self.window_limit = (self.window_proportion * self.limits.per_shard as f64) as usize;
        self.main_limit = self.limits.per_shard - self.window_limit;
    }

    /// Current window proportion.
    pub fn window_proportion(&self) -> f64 {
        self.window_proportion
    }

    /// Current (window, main) limits.
    pub fn area_limits(&self) -> (usize, usize) {
        (self.window_limit, self.main_limit)
    }

    /// Number of tracked entities (window + main).
    pub fn len(&self) -> usize {
        self.window.len() + self.main.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The window area.
    pub fn window(&self) -> &ActiveEntities<Id> {
        &self.window
    }

    /// The main area.
    pub fn main(&self) -> &ActiveEntities<Id> {
        &self.main
    }

    fn admit(&self, candidate: &Id, selected: &Id) -> bool {
        match &self.sketch {
            None => true,
            Some(s) => s.frequency(candidate.entity_hash()) > s.frequency(selected.entity_hash()),
        }
    }

    /// Offer window evictions (`candidates`) to the main area; push rejected/evicted ids to `out`.
    fn maybe_admit_to_main(&mut self, candidates: &[Id], out: &mut Vec<Id>) {
        for candidate in candidates {
            if self.main.len() >= self.main_limit {
                match self.main.select() {
                    Some(selected) => {
                        if self.admit(candidate, selected) {
                            self.main.update(candidate, out);
                        } else {
                            out.push(candidate.clone());
                        }
                    }
                    None => self.main.update(candidate, out),
                }
            } else {
                self.main.update(candidate, out);
            }
        }
    }

    fn adapt_window(&mut self) {
        let adjustment = match &mut self.optimizer {
            Some(o) => o.calculate_adjustment(),
            None => 0.0,
        };
        if adjustment != 0.0 {
            self.window_proportion = (self.window_proportion + adjustment)
                .min(self.maximum_window_proportion)
                .max(self.minimum_window_proportion);
            self.calculate_limits();
            let mut moved = std::mem::take(&mut self.scratch);
            moved.clear();
            let mut ignored = Vec::new();
            if adjustment > 0.0 {
                self.window.update_limit(self.window_limit, &mut ignored);
                self.main.update_limit(self.main_limit, &mut moved);
                for id in &moved {
                    self.window.update(id, &mut ignored);
                }
            } else {
                self.main.update_limit(self.main_limit, &mut ignored);
                self.window.update_limit(self.window_limit, &mut moved);
                for id in &moved {
                    self.main.update(id, &mut ignored);
                }
            }
            debug_assert!(ignored.is_empty(), "resizing never passivates");
            self.scratch = moved;
        }
    }

    fn on_limit(&mut self, out: &mut Vec<Id>) {
        self.limits.recompute();
        self.calculate_limits();
        let per_shard = self.limits.per_shard;
        if let Some(o) = &mut self.optimizer {
            o.update_limit(per_shard);
        }
        self.sketch = self.create_sketch(per_shard);
        let start = out.len();
        let mut candidates = std::mem::take(&mut self.scratch);
        candidates.clear();
        self.window.update_limit(self.window_limit, &mut candidates);
        self.maybe_admit_to_main(&candidates, out);
        self.main.update_limit(self.main_limit, out);
        self.scratch = candidates;
        if let Some(idle) = &mut self.idle {
            idle.forget(&out[start..]);
        }
    }
}

impl<Id: Hash + Eq + Clone + EntityHash> PassivationStrategy<Id> for CompositeStrategy<Id> {
    fn entity_touched(&mut self, id: &Id, now_ms: u64, out: &mut Vec<Id>) {
        if let Some(s) = &mut self.sketch {
            s.increment(id.entity_hash());
        }
        let start = out.len();
        if self.window.is_active(id) {
            if let Some(o) = &mut self.optimizer {
                o.record_active();
            }
            self.window.update(id, out);
        } else if self.main.is_active(id) {
            if let Some(o) = &mut self.optimizer {
                o.record_active();
            }
            self.main.update(id, out);
        } else {
            if let Some(o) = &mut self.optimizer {
                o.record_passive();
            }
            let mut candidates = std::mem::take(&mut self.scratch);
            candidates.clear();
            self.window.update(id, &mut candidates);
            self.maybe_admit_to_main(&candidates, out);
            self.scratch = candidates;
        }
        self.adapt_window();
        if let Some(idle) = &mut self.idle {
            idle.after_touch(id, now_ms, &out[start..]);
        }
    }
    fn entity_terminated(&mut self, id: &Id) {
        self.window.remove(id);
        self.main.remove(id);
        if let Some(idle) = &mut self.idle {
            idle.recency.remove(id);
        }
    }
    fn limit_updated(&mut self, per_region_limit: usize, out: &mut Vec<Id>) {
        self.limits.per_region = per_region_limit;
        self.on_limit(out);
    }
    fn shards_updated(&mut self, active_shards: usize, out: &mut Vec<Id>) {
        self.limits.active_shards = active_shards;
        self.on_limit(out);
    }
    fn scheduled_interval(&self) -> Option<Duration> {
        self.idle
            .as_ref()
            .map(|i| Duration::from_millis(i.check.interval_ms))
    }
    fn interval_passed(&mut self, now_ms: u64, out: &mut Vec<Id>) {
        if let Some(idle) = &mut self.idle {
            let start = out.len();
            idle.recency
                .remove_least_recent_outside(now_ms, idle.check.timeout_ms, out);
            for gone in &out[start..] {
                self.window.remove(gone);
                self.main.remove(gone);
            }
        }
    }
}

/// Any strategy, dispatched by enum (what [`crate::PassivationSettings::build`] returns).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per shard; inline keeps the hot path free of an indirection
pub enum Strategy<Id> {
    /// Automatic passivation disabled.
    Disabled,
    /// Idle timeout only.
    Idle(IdleStrategy<Id>),
    /// One replacement policy with a limit (optionally idle too).
    Limit(LimitStrategy<Id>),
    /// Composite W-TinyLFU family (optionally idle too).
    Composite(Box<CompositeStrategy<Id>>),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr, $none:expr) => {
        match $self {
            Strategy::Disabled => $none,
            Strategy::Idle($s) => $e,
            Strategy::Limit($s) => $e,
            Strategy::Composite($s) => $e,
        }
    };
}

impl<Id: Hash + Eq + Clone + EntityHash> PassivationStrategy<Id> for Strategy<Id> {
    fn entity_touched(&mut self, id: &Id, now_ms: u64, out: &mut Vec<Id>) {
        dispatch!(self, s => s.entity_touched(id, now_ms, out), ())
    }
    fn entity_terminated(&mut self, id: &Id) {
        dispatch!(self, s => s.entity_terminated(id), ())
    }
    fn limit_updated(&mut self, per_region_limit: usize, out: &mut Vec<Id>) {
        dispatch!(self, s => s.limit_updated(per_region_limit, out), ())
    }
    fn shards_updated(&mut self, active_shards: usize, out: &mut Vec<Id>) {
        dispatch!(self, s => s.shards_updated(active_shards, out), ())
    }
    fn scheduled_interval(&self) -> Option<Duration> {
        dispatch!(self, s => s.scheduled_interval(), None)
    }
    fn interval_passed(&mut self, now_ms: u64, out: &mut Vec<Id>) {
        dispatch!(self, s => s.interval_passed(now_ms, out), ())
    }
}

impl<Id: Hash + Eq + Clone + EntityHash> Strategy<Id> {
    /// Number of entities currently tracked as active.
    pub fn len(&self) -> usize {
        match self {
            Strategy::Disabled => 0,
            Strategy::Idle(s) => s.len(),
            Strategy::Limit(s) => s.len(),
            Strategy::Composite(s) => s.len(),
        }
    }
    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
