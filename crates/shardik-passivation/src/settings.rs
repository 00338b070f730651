//! Configuration mirroring `cluster.sharding.passivation.*` of the reference, deserializable with
//! serde (kebab-case keys), with a builder API and validation that names the offending key.
//!
//! ```json
//! { "strategy": "default-strategy",
//!   "default-strategy": { "active-entity-limit": 50000, "idle-entity": { "timeout": "30m" } } }
//! ```
//!
//! A strategy block is merged over the built-in block of the same name (for `default-idle-strategy`
//! and `default-strategy`), then over `strategy-defaults`. Strategy names `none` and `off` disable
//! automatic passivation.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sketch::EntityHash;
use crate::strategy::{
    AdmissionFilterSettings, CompositeSettings, CompositeStrategy, HillClimbingSettings, IdleCheck,
    IdleStrategy, LimitStrategy, ReplacementPolicy, Strategy,
};

/// A configuration error naming the key and the rejected value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid passivation setting `{key}` = `{value}`: {reason}")]
pub struct SettingsError {
    /// Full key, e.g. `passivation.default-strategy.admission.window.proportion`.
    pub key: String,
    /// The rejected value as written.
    pub value: String,
    /// Why it was rejected.
    pub reason: String,
}

fn err(key: &str, value: impl std::fmt::Display, reason: &str) -> SettingsError {
    SettingsError {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// A duration given as milliseconds (number), or text such as `"120s"`, `"2 minutes"`, `"30.minutes"`,
/// `"500ms"`, or `"off"` (disabled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DurationSetting {
    /// Milliseconds.
    Millis(u64),
    /// Text form.
    Text(String),
}

impl DurationSetting {
    /// The value as the user wrote it, for error messages.
    pub fn as_written(&self) -> String {
        match self {
            DurationSetting::Millis(ms) => ms.to_string(),
            DurationSetting::Text(t) => t.clone(),
        }
    }

    /// Parse; `Ok(None)` means "off".
    pub fn parse(&self, key: &str) -> Result<Option<Duration>, SettingsError> {
        match self {
            DurationSetting::Millis(ms) => Ok(Some(Duration::from_millis(*ms))),
            DurationSetting::Text(t) => parse_duration(t).map_err(|r| err(key, t, r)),
        }
    }
}

/// Parse a HOCON-like duration text.
pub fn parse_duration(text: &str) -> Result<Option<Duration>, &'static str> {
    let t = text.trim();
    if matches!(t, "off" | "none" | "disabled") {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num = num.trim_end_matches('.');
    let value: f64 = num.parse().map_err(|_| "expected a number with a unit")?;
    let unit = unit.trim().trim_start_matches('.');
    let ms = match unit {
        "" | "ms" | "millis" | "millisecond" | "milliseconds" => 1.0,
        "s" | "second" | "seconds" => 1_000.0,
        "m" | "min" | "minute" | "minutes" => 60_000.0,
        "h" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        _ => return Err("unknown duration unit (use ms, s, m, h or d)"),
    };
    if !value.is_finite() || value < 0.0 {
        return Err("duration must be non-negative");
    }
    Ok(Some(Duration::from_millis((value * ms).round() as u64)))
}

/// `idle-entity` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct IdleEntityConfig {
    /// Idle timeout (`off` disables).
    pub timeout: Option<DurationSetting>,
    /// Check interval (`default` or absent = timeout / 2).
    pub interval: Option<DurationSetting>,
}

/// `replacement.segmented` / `admission.window` segmented settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct SegmentedConfig {
    /// Number of levels (`< 2` = plain LRU).
    pub levels: Option<usize>,
    /// Level proportions (empty = equal).
    pub proportions: Option<Vec<f64>>,
}

/// `least-frequently-used` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct LfuConfig {
    /// LFUDA.
    pub dynamic_aging: Option<bool>,
}

/// `least-recently-used` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct LruConfig {
    /// Segmented levels.
    pub segmented: SegmentedConfig,
}

/// A replacement policy block (`replacement` or `admission.window`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// `least-recently-used`, `most-recently-used`, `least-frequently-used` or `off`.
    pub policy: Option<String>,
    /// LRU options.
    pub least_recently_used: LruConfig,
    /// LFU options.
    pub least_frequently_used: LfuConfig,
}

/// `admission.window` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct WindowConfig {
    /// Window policy (`off` = no window).
    pub policy: Option<String>,
    /// LRU options for the window.
    pub least_recently_used: LruConfig,
    /// LFU options for the window.
    pub least_frequently_used: LfuConfig,
    /// Initial proportion of the limit.
    pub proportion: Option<f64>,
    /// Minimum proportion when optimized.
    pub minimum_proportion: Option<f64>,
    /// Maximum proportion when optimized.
    pub maximum_proportion: Option<f64>,
    /// `hill-climbing` or `off`.
    pub optimizer: Option<String>,
    /// Hill-climbing constants.
    pub hill_climbing: HillClimbingConfig,
}

/// `admission.window.hill-climbing` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct HillClimbingConfig {
    /// 10.0
    pub adjust_multiplier: Option<f64>,
    /// 0.0625
    pub initial_step: Option<f64>,
    /// 0.05
    pub restart_threshold: Option<f64>,
    /// 0.98
    pub step_decay: Option<f64>,
}

/// `admission.frequency-sketch` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct FrequencySketchConfig {
    /// 4
    pub depth: Option<u32>,
    /// 4
    pub counter_bits: Option<u32>,
    /// 4
    pub width_multiplier: Option<u32>,
    /// 10.0
    pub reset_multiplier: Option<f64>,
}

/// `admission` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct AdmissionConfig {
    /// Admission window.
    pub window: WindowConfig,
    /// `frequency-sketch` or `off`.
    pub filter: Option<String>,
    /// Sketch shape.
    pub frequency_sketch: FrequencySketchConfig,
}

/// A limit value: a number or `"off"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LimitSetting {
    /// Per-region limit.
    Limit(u64),
    /// `off` / `none`.
    Text(String),
}

/// One strategy block (`passivation.<name>`); every field optional, merged over the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct StrategyConfig {
    /// Per-region active entity limit (`off` = none).
    pub active_entity_limit: Option<LimitSetting>,
    /// Idle entity passivation.
    pub idle_entity: IdleEntityConfig,
    /// Replacement (main area) policy.
    pub replacement: PolicyConfig,
    /// Admission window / filter.
    pub admission: AdmissionConfig,
}

macro_rules! merge_opt {
    ($a:expr, $b:expr, $($f:ident).+) => {
        if $a.$($f).+.is_none() { $a.$($f).+ = $b.$($f).+.clone(); }
    };
}

impl StrategyConfig {
    /// Fill every unset field of `self` from `base`.
    pub fn merged_over(&self, base: &StrategyConfig) -> StrategyConfig {
        let mut a = self.clone();
        merge_opt!(a, base, active_entity_limit);
        merge_opt!(a, base, idle_entity.timeout);
        merge_opt!(a, base, idle_entity.interval);
        merge_opt!(a, base, replacement.policy);
        merge_opt!(a, base, replacement.least_recently_used.segmented.levels);
        merge_opt!(
            a,
            base,
            replacement.least_recently_used.segmented.proportions
        );
        merge_opt!(a, base, replacement.least_frequently_used.dynamic_aging);
        merge_opt!(a, base, admission.window.policy);
        merge_opt!(
            a,
            base,
            admission.window.least_recently_used.segmented.levels
        );
        merge_opt!(
            a,
            base,
            admission.window.least_recently_used.segmented.proportions
        );
        merge_opt!(
            a,
            base,
            admission.window.least_frequently_used.dynamic_aging
        );
        merge_opt!(a, base, admission.window.proportion);
        merge_opt!(a, base, admission.window.minimum_proportion);
        merge_opt!(a, base, admission.window.maximum_proportion);
        merge_opt!(a, base, admission.window.optimizer);
        merge_opt!(a, base, admission.window.hill_climbing.adjust_multiplier);
        merge_opt!(a, base, admission.window.hill_climbing.initial_step);
        merge_opt!(a, base, admission.window.hill_climbing.restart_threshold);
        merge_opt!(a, base, admission.window.hill_climbing.step_decay);
        merge_opt!(a, base, admission.filter);
        merge_opt!(a, base, admission.frequency_sketch.depth);
        merge_opt!(a, base, admission.frequency_sketch.counter_bits);
        merge_opt!(a, base, admission.frequency_sketch.width_multiplier);
        merge_opt!(a, base, admission.frequency_sketch.reset_multiplier);
        a
    }

    /// `strategy-defaults`: everything off except the numeric defaults.
    pub fn strategy_defaults() -> StrategyConfig {
        let mut c = StrategyConfig {
            active_entity_limit: Some(LimitSetting::Text("off".into())),
            ..Default::default()
        };
        c.idle_entity.timeout = Some(DurationSetting::Text("off".into()));
        c.replacement.policy = Some("off".into());
        c.replacement.least_recently_used.segmented.levels = Some(0);
        c.replacement.least_recently_used.segmented.proportions = Some(vec![]);
        c.replacement.least_frequently_used.dynamic_aging = Some(false);
        c.admission.window.policy = Some("off".into());
        c.admission.window.least_recently_used.segmented.levels = Some(0);
        c.admission.window.least_recently_used.segmented.proportions = Some(vec![]);
        c.admission.window.least_frequently_used.dynamic_aging = Some(false);
        c.admission.window.proportion = Some(0.01);
        c.admission.window.minimum_proportion = Some(0.01);
        c.admission.window.maximum_proportion = Some(1.0);
        c.admission.window.optimizer = Some("off".into());
        c.admission.window.hill_climbing.adjust_multiplier = Some(10.0);
        c.admission.window.hill_climbing.initial_step = Some(0.0625);
        c.admission.window.hill_climbing.restart_threshold = Some(0.05);
        c.admission.window.hill_climbing.step_decay = Some(0.98);
        c.admission.filter = Some("off".into());
        c.admission.frequency_sketch.depth = Some(4);
        c.admission.frequency_sketch.counter_bits = Some(4);
        c.admission.frequency_sketch.width_multiplier = Some(4);
        c.admission.frequency_sketch.reset_multiplier = Some(10.0);
        c
    }

    /// Built-in `default-idle-strategy`: idle timeout 120 s.
    pub fn default_idle_strategy() -> StrategyConfig {
        StrategyConfig::new().with_idle_timeout(Duration::from_secs(120))
    }

    /// Built-in `default-strategy`: limit 100 000, LRU window + hill climbing, frequency sketch, SLRU [0.2, 0.8].
    pub fn default_strategy() -> StrategyConfig {
        let mut c = StrategyConfig::new()
            .with_active_entity_limit(100_000)
            .with_replacement(&ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![
                0.2, 0.8,
            ]));
        c.admission.window.policy = Some("least-recently-used".into());
        c.admission.window.optimizer = Some("hill-climbing".into());
        c.admission.filter = Some("frequency-sketch".into());
        c
    }

    /// Empty block (everything inherited).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder: per-region active entity limit.
    pub fn with_active_entity_limit(mut self, limit: u64) -> Self {
        self.active_entity_limit = Some(LimitSetting::Limit(limit));
        self
    }

    /// Builder: idle timeout (interval defaults to timeout / 2).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_entity.timeout = Some(DurationSetting::Millis(timeout.as_millis() as u64));
        self
    }

    /// Builder: idle check interval.
    pub fn with_idle_interval(mut self, interval: Duration) -> Self {
        self.idle_entity.interval = Some(DurationSetting::Millis(interval.as_millis() as u64));
        self
    }

    /// Builder: replacement (main) policy.
    pub fn with_replacement(mut self, policy: &ReplacementPolicy) -> Self {
        set_policy(
            &mut self.replacement.policy,
            &mut self.replacement.least_recently_used,
            &mut self.replacement.least_frequently_used,
            policy,
        );
        self
    }

    /// Builder: admission window policy with hill climbing on or off.
    pub fn with_admission_window(
        mut self,
        policy: &ReplacementPolicy,
        hill_climbing: bool,
    ) -> Self {
        let w = &mut self.admission.window;
        set_policy(
            &mut w.policy,
            &mut w.least_recently_used,
            &mut w.least_frequently_used,
            policy,
        );
        w.optimizer = Some(
            if hill_climbing {
                "hill-climbing"
            } else {
                "off"
            }
            .into(),
        );
        self
    }

    /// Builder: initial admission window proportion.
    pub fn with_window_proportion(mut self, proportion: f64) -> Self {
        self.admission.window.proportion = Some(proportion);
        self
    }

    /// Builder: frequency-sketch admission filter on or off.
    pub fn with_frequency_sketch_filter(mut self, on: bool) -> Self {
        self.admission.filter = Some(if on { "frequency-sketch" } else { "off" }.into());
        self
    }
}

fn set_policy(
    name: &mut Option<String>,
    lru: &mut LruConfig,
    lfu: &mut LfuConfig,
    policy: &ReplacementPolicy,
) {
    match policy {
        ReplacementPolicy::LeastRecentlyUsed => {
            *name = Some("least-recently-used".into());
            lru.segmented.levels = Some(0);
        }
        ReplacementPolicy::SegmentedLeastRecentlyUsed(p) => {
            *name = Some("least-recently-used".into());
            lru.segmented.levels = Some(p.len());
            lru.segmented.proportions = Some(p.clone());
        }
        ReplacementPolicy::MostRecentlyUsed => *name = Some("most-recently-used".into()),
        ReplacementPolicy::LeastFrequentlyUsed { dynamic_aging } => {
            *name = Some("least-frequently-used".into());
            lfu.dynamic_aging = Some(*dynamic_aging);
        }
    }
}

/// `cluster.sharding.passivation` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct PassivationSettings {
    /// Selected strategy name (`default-idle-strategy`, `default-strategy`, `none`, or a custom block).
    pub strategy: String,
    /// Overrides for the built-in idle strategy.
    pub default_idle_strategy: StrategyConfig,
    /// Overrides for the built-in default strategy.
    pub default_strategy: StrategyConfig,
    /// Custom strategy blocks by name.
    #[serde(flatten)]
    pub custom: BTreeMap<String, StrategyConfig>,
}

impl Default for PassivationSettings {
    fn default() -> Self {
        PassivationSettings {
            strategy: "default-idle-strategy".into(),
            default_idle_strategy: StrategyConfig::default(),
            default_strategy: StrategyConfig::default(),
            custom: BTreeMap::new(),
        }
    }
}

/// A validated, fully resolved strategy.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvedStrategy {
    /// No automatic passivation.
    Disabled,
    /// Idle timeout only.
    Idle(IdleCheck),
    /// One replacement policy.
    Limit {
        /// Per-region limit.
        per_region_limit: usize,
        /// Policy.
        policy: ReplacementPolicy,
        /// Optional idle check.
        idle: Option<IdleCheck>,
    },
    /// Composite W-TinyLFU family.
    Composite {
        /// Per-region limit.
        per_region_limit: usize,
        /// Composite settings.
        settings: CompositeSettings,
        /// Optional idle check.
        idle: Option<IdleCheck>,
    },
}

impl ResolvedStrategy {
    /// Instantiate the strategy for one shard.
    #[doc(hidden)] // the regions' (and the simulator's) instantiation, not an application's
    pub fn build<Id: Hash + Eq + Clone + EntityHash>(&self) -> Strategy<Id> {
        match self {
            ResolvedStrategy::Disabled => Strategy::Disabled,
            ResolvedStrategy::Idle(c) => Strategy::Idle(IdleStrategy::new(*c)),
            ResolvedStrategy::Limit {
                per_region_limit,
                policy,
                idle,
            } => Strategy::Limit(LimitStrategy::new(policy, *per_region_limit, *idle)),
            ResolvedStrategy::Composite {
                per_region_limit,
                settings,
                idle,
            } => Strategy::Composite(Box::new(CompositeStrategy::new(
                settings,
                *per_region_limit,
                *idle,
            ))),
        }
    }
}

impl PassivationSettings {
    /// Settings selecting `strategy`.
    pub fn with_strategy(mut self, name: &str) -> Self {
        self.strategy = name.to_string();
        self
    }

    /// Add (or replace) a custom strategy block and select it.
    pub fn with_custom_strategy(mut self, name: &str, config: StrategyConfig) -> Self {
        self.custom.insert(name.to_string(), config);
        self.strategy = name.to_string();
        self
    }

    /// Parse from JSON text (keys as in the reference, kebab-case).
    pub fn from_json(text: &str) -> Result<Self, SettingsError> {
        serde_json::from_str(text).map_err(|e| err("passivation", text.trim(), &e.to_string()))
    }

    /// Validate and resolve the selected strategy.
    pub fn validate(&self) -> Result<ResolvedStrategy, SettingsError> {
        let name = self.strategy.trim();
        let prefix = format!("passivation.{name}");
        let block = match name {
            "none" | "off" | "disabled" => return Ok(ResolvedStrategy::Disabled),
            "default-idle-strategy" => self
                .default_idle_strategy
                .merged_over(&StrategyConfig::default_idle_strategy()),
            "default-strategy" => self
                .default_strategy
                .merged_over(&StrategyConfig::default_strategy()),
            other => match self.custom.get(other) {
                Some(c) => c.clone(),
                None => {
                    return Err(err(
                        "passivation.strategy",
                        other,
                        "no strategy block with this name (expected default-idle-strategy, default-strategy, none, or a custom block)",
                    ));
                }
            },
        };
        resolve(
            &block.merged_over(&StrategyConfig::strategy_defaults()),
            &prefix,
        )
    }

    /// Validate and instantiate the strategy for one shard.
    #[doc(hidden)] // the simulator's instantiation, not an application's
    pub fn build<Id: Hash + Eq + Clone + EntityHash>(&self) -> Result<Strategy<Id>, SettingsError> {
        Ok(self.validate()?.build())
    }
}

fn is_off(s: &str) -> bool {
    matches!(s, "off" | "none" | "disabled" | "")
}

fn resolve_policy(
    name: &str,
    lru: &LruConfig,
    lfu: &LfuConfig,
    key: &str,
) -> Result<Option<ReplacementPolicy>, SettingsError> {
    match name {
        n if is_off(n) => Ok(None),
        "least-recently-used" => {
            let levels = lru.segmented.levels.unwrap_or(0);
            let props = lru.segmented.proportions.clone().unwrap_or_default();
            if levels > 255 {
                return Err(err(
                    &format!("{key}.least-recently-used.segmented.levels"),
                    levels,
                    "at most 255 levels",
                ));
            }
            if levels < 2 {
                return Ok(Some(ReplacementPolicy::LeastRecentlyUsed));
            }
            let props = if props.is_empty() {
                vec![1.0 / levels as f64; levels]
            } else {
                props
            };
            let pkey = format!("{key}.least-recently-used.segmented.proportions");
            if props.len() != levels {
                return Err(err(
                    &pkey,
                    format!("{props:?}"),
                    &format!("expected {levels} proportions (one per level)"),
                ));
            }
            if props.iter().any(|p| !(0.0..=1.0).contains(p)) {
                return Err(err(
                    &pkey,
                    format!("{props:?}"),
                    "proportions must be in [0, 1]",
                ));
            }
            let sum: f64 = props.iter().sum();
            if (sum - 1.0).abs() > 1e-9 {
                return Err(err(
                    &pkey,
                    format!("{props:?}"),
                    "proportions must sum to 1",
                ));
            }
            Ok(Some(ReplacementPolicy::SegmentedLeastRecentlyUsed(props)))
        }
        "most-recently-used" => Ok(Some(ReplacementPolicy::MostRecentlyUsed)),
        "least-frequently-used" => Ok(Some(ReplacementPolicy::LeastFrequentlyUsed {
            dynamic_aging: lfu.dynamic_aging.unwrap_or(false),
        })),
        other => Err(err(
            &format!("{key}.policy"),
            other,
            "unknown policy (least-recently-used, most-recently-used, least-frequently-used, off)",
        )),
    }
}

fn proportion(v: Option<f64>, key: &str) -> Result<f64, SettingsError> {
    let v = v.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&v) {
        return Err(err(key, v, "must be between 0.0 and 1.0"));
    }
    Ok(v)
}

fn positive(v: Option<f64>, key: &str) -> Result<f64, SettingsError> {
    let v = v.unwrap_or(0.0);
    if !(v.is_finite() && v > 0.0) {
        return Err(err(key, v, "must be a positive number"));
    }
    Ok(v)
}

fn resolve(c: &StrategyConfig, prefix: &str) -> Result<ResolvedStrategy, SettingsError> {
    let limit = match &c.active_entity_limit {
        Some(LimitSetting::Limit(0)) => {
            return Err(err(
                &format!("{prefix}.active-entity-limit"),
                0,
                "expected at least 1 (or off): a limit of 0 would stop every entity at once",
            ));
        }
        Some(LimitSetting::Limit(n)) => Some(*n as usize),
        Some(LimitSetting::Text(t)) if is_off(t) => None,
        Some(LimitSetting::Text(t)) => {
            return Err(err(
                &format!("{prefix}.active-entity-limit"),
                t,
                "expected a number or off",
            ));
        }
        None => None,
    };
    let tkey = format!("{prefix}.idle-entity.timeout");
    let timeout = match &c.idle_entity.timeout {
        Some(t) => t.parse(&tkey)?,
        None => None,
    };
    let idle = match timeout {
        None => None,
        Some(t) if t.is_zero() => {
            let written = c
                .idle_entity
                .timeout
                .as_ref()
                .map(DurationSetting::as_written);
            return Err(err(
                &tkey,
                written.unwrap_or_default(),
                "idle timeout must be positive (or off)",
            ));
        }
        Some(t) => {
            let ikey = format!("{prefix}.idle-entity.interval");
            let interval = match &c.idle_entity.interval {
                Some(DurationSetting::Text(s)) if s.trim() == "default" => None,
                Some(i) => i.parse(&ikey)?,
                None => None,
            };
            let mut check = IdleCheck::new(t);
            if let Some(i) = interval {
                if i.is_zero() {
                    return Err(err(&ikey, "0", "interval must be positive"));
                }
                check.interval_ms = i.as_millis() as u64;
            }
            Some(check)
        }
    };
    let Some(limit) = limit else {
        return Ok(match idle {
            Some(i) => ResolvedStrategy::Idle(i),
            None => ResolvedStrategy::Disabled,
        });
    };
    let rkey = format!("{prefix}.replacement");
    let main = resolve_policy(
        c.replacement.policy.as_deref().unwrap_or("off"),
        &c.replacement.least_recently_used,
        &c.replacement.least_frequently_used,
        &rkey,
    )?;
    let w = &c.admission.window;
    let wkey = format!("{prefix}.admission.window");
    let window = resolve_policy(
        w.policy.as_deref().unwrap_or("off"),
        &w.least_recently_used,
        &w.least_frequently_used,
        &wkey,
    )?;
    let fkey = format!("{prefix}.admission.filter");
    let filter_name = c.admission.filter.clone().unwrap_or_default();
    let filter = match filter_name.as_str() {
        n if is_off(n) => None,
        "frequency-sketch" => {
            let fs = &c.admission.frequency_sketch;
            let skey = format!("{prefix}.admission.frequency-sketch");
            let depth = fs.depth.unwrap_or(4);
            if !(1..=64).contains(&depth) {
                return Err(err(&format!("{skey}.depth"), depth, "must be 1..=64"));
            }
            let bits = fs.counter_bits.unwrap_or(4);
            if !matches!(bits, 2 | 4 | 8 | 16 | 32 | 64) {
                return Err(err(
                    &format!("{skey}.counter-bits"),
                    bits,
                    "must be 2, 4, 8, 16, 32 or 64",
                ));
            }
            let wm = fs.width_multiplier.unwrap_or(4);
            if wm == 0 || !wm.is_power_of_two() {
                return Err(err(
                    &format!("{skey}.width-multiplier"),
                    wm,
                    "must be a positive power of two",
                ));
            }
            let rm = positive(fs.reset_multiplier, &format!("{skey}.reset-multiplier"))?;
            Some(AdmissionFilterSettings::FrequencySketch {
                depth,
                counter_bits: bits,
                width_multiplier: wm,
                reset_multiplier: rm,
            })
        }
        other => {
            return Err(err(
                &fkey,
                other,
                "unknown filter (frequency-sketch or off)",
            ));
        }
    };
    if window.is_none() && filter.is_none() {
        let policy = main.ok_or_else(|| {
            err(
                &format!("{rkey}.policy"),
                "off",
                "a replacement policy is required when active-entity-limit is set",
            )
        })?;
        return Ok(ResolvedStrategy::Limit {
            per_region_limit: limit,
            policy,
            idle,
        });
    }
    let main = main.unwrap_or(ReplacementPolicy::LeastRecentlyUsed);
    let initial = proportion(w.proportion, &format!("{wkey}.proportion"))?;
    let min = proportion(w.minimum_proportion, &format!("{wkey}.minimum-proportion"))?;
    let max = proportion(w.maximum_proportion, &format!("{wkey}.maximum-proportion"))?;
    if min > max {
        return Err(err(
            &format!("{wkey}.minimum-proportion"),
            min,
            "must not exceed maximum-proportion",
        ));
    }
    let okey = format!("{wkey}.optimizer");
    let optimizer = match w.optimizer.as_deref().unwrap_or("off") {
        n if is_off(n) => None,
        "hill-climbing" => {
            let hc = &w.hill_climbing;
            let hkey = format!("{wkey}.hill-climbing");
            let s = HillClimbingSettings {
                adjust_multiplier: positive(
                    hc.adjust_multiplier,
                    &format!("{hkey}.adjust-multiplier"),
                )?,
                initial_step: positive(hc.initial_step, &format!("{hkey}.initial-step"))?,
                restart_threshold: positive(
                    hc.restart_threshold,
                    &format!("{hkey}.restart-threshold"),
                )?,
                step_decay: proportion(hc.step_decay, &format!("{hkey}.step-decay"))?,
            };
            Some(s)
        }
        other => {
            return Err(err(
                &okey,
                other,
                "unknown optimizer (hill-climbing or off)",
            ));
        }
    };
    Ok(ResolvedStrategy::Composite {
        per_region_limit: limit,
        settings: CompositeSettings {
            window,
            initial_window_proportion: initial,
            minimum_window_proportion: min,
            maximum_window_proportion: max,
            optimizer,
            filter: filter.unwrap_or(AdmissionFilterSettings::Always),
            main,
        },
        idle,
    })
}
