//! `cluster.sharding.*`: shards, regions, the coordinator, allocation, passivation and the
//! sharding part of the readiness check.

use std::time::Duration;

use figment::Figment;
use figment::value::Value;
use serde::Deserialize;
use shardik_core::sharding::AllocationSettings;
use shardik_passivation::ResolvedStrategy;

use crate::coordination::LeaseImplementation;
use crate::error::{ConfigError, closest, describe_origin};
use crate::validate::{invalid, positive_count, positive_duration};
use crate::values::{DURATION_EXPECTED, de_string, de_string_list, de_switch};

/// The most handler lanes a kind may be given (`handler-lanes`): far more tasks than a machine
/// has cores only adds hand-overs.
pub const MAX_HANDLER_LANES: usize = 1024;

/// `cluster.sharding.*`: cluster sharding, for every entity kind.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ShardingSettings {
    /// `number-of-shards`: entity ids map to this many shards; at least 1, and the same on
    /// every node (checked when a node joins).
    pub number_of_shards: u32,
    /// `role`: only nodes with this role host shards; empty = every node.
    #[serde(deserialize_with = "de_string")]
    pub role: String,
    /// `buffer-size`: most messages a region holds, over all shards, while their homes are
    /// unknown; at least 1.
    pub buffer_size: usize,
    /// `retry-interval`: how often a region retries registering and asking for shard homes.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub retry_interval: Duration,
    /// `handoff-timeout`: the longest a shard hand-off may take before it is abandoned.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub handoff_timeout: Duration,
    /// `shard-start-timeout`: how long the coordinator waits for a region to confirm that it
    /// started a shard before telling it again.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub shard_start_timeout: Duration,
    /// `rebalance-interval`: how often the coordinator asks the allocation strategy what to move.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub rebalance_interval: Duration,
    /// `unheard-region-warning-after`: how long a new coordinator waits for a member's region
    /// (which holds every new allocation back until it registers or its node says it has not
    /// started the kind) before naming the member in a warning, repeated with back-off.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub unheard_region_warning_after: Duration,
    /// `shard-region-query-timeout`: how long the management API waits for a region's answer
    /// to a state or statistics query.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub shard_region_query_timeout: Duration,
    /// `coordinator-failure-backoff`: the delay before a failed coordinator is started again.
    /// Read and checked, not used yet: the in-memory coordinator has no failure of its own to
    /// back off from (it would apply where a kind's task starts its coordinator, once
    /// coordinator state is stored and loading it can fail).
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub coordinator_failure_backoff: Duration,
    /// `handoff-mode`: what happens to messages buffered at a shard's old home during a
    /// hand-off.
    pub handoff_mode: HandOffModeSetting,
    /// `remember-entities`: every kind whose code does not say otherwise remembers its running
    /// entities in its own store (`EntityKind::with_remember_entities` and
    /// `without_remember_entities` override it per kind).
    #[serde(deserialize_with = "de_switch")]
    pub remember_entities: bool,
    /// `entity-recovery-strategy`: `all` or `constant`.
    pub entity_recovery_strategy: EntityRecoveryStrategySetting,
    /// `entity-recovery-constant-rate-strategy.*`.
    pub entity_recovery_constant_rate_strategy: ConstantRateSettings,
    /// `entity-restart-backoff`: how long after a remembered entity failed (stopped without
    /// passivating) its shard starts it again without a message.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub entity_restart_backoff: Duration,
    /// `handler-lanes`: how many tasks run the handlers of one kind's entities on a node
    /// (lanes); 0 means one per worker thread of the node's runtime, 1 keeps every handler in
    /// the kind's own task. `EntityKind::with_handler_lanes` overrides it per kind.
    pub handler_lanes: usize,
    /// `least-shard-allocation-strategy.*`.
    pub least_shard_allocation_strategy: LeastShardAllocationStrategySettings,
    /// `passivation.*`: the strategy that stops entities automatically. The keys, their
    /// merging over built-in blocks and their validation are those of
    /// [`shardik_passivation::PassivationSettings`];
    /// [`Settings::validate`](crate::Settings::validate) resolves them, so a loaded
    /// configuration always names a valid strategy.
    pub passivation: shardik_passivation::PassivationSettings,
    /// `healthcheck.*`.
    pub healthcheck: ShardingHealthCheckSettings,
    /// `use-lease`: a shard under a lease takes it in its kind's store before its entities
    /// run (their writes carry its fencing token) and stops them when it is lost. `"auto"`
    /// (default): for kinds with a shared store of their own (durable kinds); `"store"`: for
    /// every kind; `""`: none.
    pub use_lease: LeaseImplementation,
    /// `lease-retry-interval`: how long a shard (or the coordinator) waits before trying
    /// again to take a lease it did not get.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub lease_retry_interval: Duration,
    /// `coordinator-singleton.*`.
    pub coordinator_singleton: CoordinatorSingletonSettings,
}

/// `cluster.sharding.coordinator-singleton.*`: the coordinator's placement as a singleton.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct CoordinatorSingletonSettings {
    /// `use-lease`: a coordinator under a lease starts only once its node holds the kind's
    /// coordinator lease, and stops when it is lost; `"auto"` (default), `"store"` and `""`
    /// as for the shards' `use-lease`.
    pub use_lease: LeaseImplementation,
}

/// `entity-recovery-strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntityRecoveryStrategySetting {
    /// Start a shard's remembered entities all at once.
    All,
    /// Start them `number-of-entities` every `frequency`.
    Constant,
}

/// `entity-recovery-constant-rate-strategy.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ConstantRateSettings {
    /// `frequency`: the time between two steps.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub frequency: Duration,
    /// `number-of-entities`: how many start per step; at least 1.
    pub number_of_entities: usize,
}

impl ShardingSettings {
    /// How remembered entities start, from `entity-recovery-strategy` and its block.
    pub fn entity_recovery(&self) -> shardik_core::sharding::EntityRecovery {
        match self.entity_recovery_strategy {
            EntityRecoveryStrategySetting::All => shardik_core::sharding::EntityRecovery::All,
            EntityRecoveryStrategySetting::Constant => {
                let c = &self.entity_recovery_constant_rate_strategy;
                shardik_core::sharding::EntityRecovery::ConstantRate {
                    entities: c.number_of_entities,
                    frequency: c.frequency,
                }
            }
        }
    }

    /// The allocation core's settings from `least-shard-allocation-strategy.*`.
    pub fn allocation_settings(&self) -> AllocationSettings {
        let a = &self.least_shard_allocation_strategy;
        AllocationSettings {
            rebalance_absolute_limit: a.rebalance_absolute_limit,
            rebalance_relative_limit: a.rebalance_relative_limit,
            rebalance_threshold: a.rebalance_threshold,
            max_simultaneous_rebalance: a.max_simultaneous_rebalance,
        }
    }

    /// The passivation strategy that `passivation.strategy` selects, resolved (blocks merged,
    /// values checked). Errors name the full key, e.g.
    /// `cluster.sharding.passivation.default-strategy.active-entity-limit`.
    pub fn passivation_strategy(&self) -> Result<ResolvedStrategy, ConfigError> {
        self.passivation.validate().map_err(passivation_error)
    }

    /// The role that hosts shards, or `None` when every node does (`role = ""`).
    pub fn host_role(&self) -> Option<&str> {
        (!self.role.is_empty()).then_some(self.role.as_str())
    }
}

/// `cluster.sharding.handoff-mode`: the fate of messages that a shard's old home buffered
/// between the start of a hand-off and the shard's stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandOffModeSetting {
    /// `forward` (default): they are delivered to the new home, without reordering any
    /// sender's messages.
    Forward,
    /// `drop`: they are dropped (each counted and logged), as the reference does, which keeps
    /// per-sender order without any further protocol.
    Drop,
}

impl HandOffModeSetting {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HandOffModeSetting::Forward => "forward",
            HandOffModeSetting::Drop => "drop",
        }
    }
}

/// `cluster.sharding.least-shard-allocation-strategy.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct LeastShardAllocationStrategySettings {
    /// `rebalance-absolute-limit`: most shards moved per rebalance round; 0 selects the older
    /// threshold algorithm.
    pub rebalance_absolute_limit: u32,
    /// `rebalance-relative-limit`: most shards moved per round as a fraction of all shards,
    /// in (0, 1].
    pub rebalance_relative_limit: f64,
    /// `rebalance-threshold` (threshold algorithm only): the difference in shard counts above
    /// which shards are moved; at least 1.
    pub rebalance_threshold: u32,
    /// `max-simultaneous-rebalance` (threshold algorithm only): most shards moving at once; at
    /// least 1.
    pub max_simultaneous_rebalance: u32,
}

/// `cluster.sharding.healthcheck.*`: the sharding part of the readiness check.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ShardingHealthCheckSettings {
    /// `names`: entity kinds whose region must have registered with its coordinator for the
    /// node to be ready; empty = no sharding check.
    #[serde(deserialize_with = "de_string_list")]
    pub names: Vec<String>,
    /// `timeout`: how long the check waits for a region's answer.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub timeout: Duration,
    /// `disabled-after`: the check passes unconditionally once this long has passed since it
    /// first saw this node as a member neither Joining nor Removed.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub disabled_after: Duration,
}

impl ShardingSettings {
    /// The checks of `cluster.sharding.*`, passivation included.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        validate_sharding(self)
    }
}

fn validate_sharding(s: &ShardingSettings) -> Result<(), ConfigError> {
    if s.number_of_shards == 0 {
        return Err(invalid(
            "cluster.sharding.number-of-shards",
            0,
            "a whole number of at least 1, the same on every node (1000 by default; about ten \
             times the largest planned number of nodes is a good choice)",
        ));
    }
    positive_count("cluster.sharding.buffer-size", s.buffer_size)?;
    if s.handler_lanes > MAX_HANDLER_LANES {
        return Err(invalid(
            "cluster.sharding.handler-lanes",
            s.handler_lanes,
            &format!(
                "0 (one lane per worker thread), 1 (every handler in the kind's own task) or a \
                 count up to {MAX_HANDLER_LANES}"
            ),
        ));
    }
    positive_count(
        "cluster.sharding.entity-recovery-constant-rate-strategy.number-of-entities",
        s.entity_recovery_constant_rate_strategy.number_of_entities,
    )?;
    positive_duration(
        "cluster.sharding.entity-recovery-constant-rate-strategy.frequency",
        s.entity_recovery_constant_rate_strategy.frequency,
    )?;
    for (key, d) in [
        ("cluster.sharding.retry-interval", s.retry_interval),
        ("cluster.sharding.handoff-timeout", s.handoff_timeout),
        (
            "cluster.sharding.shard-start-timeout",
            s.shard_start_timeout,
        ),
        ("cluster.sharding.rebalance-interval", s.rebalance_interval),
        (
            "cluster.sharding.unheard-region-warning-after",
            s.unheard_region_warning_after,
        ),
        (
            "cluster.sharding.shard-region-query-timeout",
            s.shard_region_query_timeout,
        ),
        (
            "cluster.sharding.coordinator-failure-backoff",
            s.coordinator_failure_backoff,
        ),
        (
            "cluster.sharding.entity-restart-backoff",
            s.entity_restart_backoff,
        ),
        (
            "cluster.sharding.lease-retry-interval",
            s.lease_retry_interval,
        ),
        (
            "cluster.sharding.healthcheck.timeout",
            s.healthcheck.timeout,
        ),
        (
            "cluster.sharding.healthcheck.disabled-after",
            s.healthcheck.disabled_after,
        ),
    ] {
        positive_duration(key, d)?;
    }
    let a = &s.least_shard_allocation_strategy;
    let relative = a.rebalance_relative_limit;
    let relative_ok = relative > 0.0 && relative <= 1.0;
    if !relative_ok {
        return Err(invalid(
            "cluster.sharding.least-shard-allocation-strategy.rebalance-relative-limit",
            relative,
            "a fraction of all shards greater than 0 and at most 1 (0.1 by default)",
        ));
    }
    for (key, n) in [
        (
            "cluster.sharding.least-shard-allocation-strategy.rebalance-threshold",
            a.rebalance_threshold,
        ),
        (
            "cluster.sharding.least-shard-allocation-strategy.max-simultaneous-rebalance",
            a.max_simultaneous_rebalance,
        ),
    ] {
        if n == 0 {
            return Err(invalid(
                key,
                n,
                "a number greater than zero (with 0 the threshold algorithm would never move a \
                 shard)",
            ));
        }
    }
    validate_passivation(s)?;
    if s.healthcheck.names.iter().any(|n| n.trim().is_empty()) {
        return Err(invalid(
            "cluster.sharding.healthcheck.names",
            format!("{:?}", s.healthcheck.names),
            "a list of entity kind names, none of them empty",
        ));
    }
    Ok(())
}

fn passivation_error(e: shardik_passivation::SettingsError) -> ConfigError {
    ConfigError::Refused {
        key: format!("cluster.sharding.{}", e.key),
        value: e.value,
        reason: e.reason,
        origin: None,
    }
}

/// Key names directly under `cluster.sharding.passivation` that are not strategy blocks.
const PASSIVATION_KEYS: &[&str] = &["strategy", "default-idle-strategy", "default-strategy"];

/// Any table under `cluster.sharding.passivation` other than the built-in ones is a custom
/// strategy block (as in the reference), so serde cannot refuse unknown keys there. Check the
/// names before extraction: a misspelt built-in name would otherwise become an unused block,
/// and a misspelt `strategy` a confusing type error about the whole table.
pub(super) fn check_passivation_names(figment: &Figment) -> Result<(), ConfigError> {
    const PATH: &str = "cluster.sharding.passivation";
    let Ok(Value::Dict(_, dict)) = figment.find_value(PATH) else {
        return Ok(());
    };
    for (name, value) in &dict {
        if PASSIVATION_KEYS.contains(&name.as_str()) {
            continue;
        }
        let meant = closest(name, PASSIVATION_KEYS);
        if meant.is_some() || !matches!(value, Value::Dict(..)) {
            let key = format!("{PATH}.{name}");
            return Err(ConfigError::UnknownKey {
                origin: figment.find_metadata(&key).map(describe_origin),
                suggestion: meant.map(|m| format!("{PATH}.{m}")),
                key,
            });
        }
    }
    Ok(())
}

fn validate_passivation(s: &ShardingSettings) -> Result<(), ConfigError> {
    let p = &s.passivation;
    // The passivation crate reads a bare number as milliseconds; every other duration of the
    // node configuration refuses a number without a unit, and so does this one.
    let blocks = [
        ("default-idle-strategy", &p.default_idle_strategy),
        ("default-strategy", &p.default_strategy),
    ];
    let custom = p.custom.iter().map(|(k, v)| (k.as_str(), v));
    for (name, block) in blocks.into_iter().chain(custom) {
        let idle = &block.idle_entity;
        for (leaf, value) in [("timeout", &idle.timeout), ("interval", &idle.interval)] {
            if let Some(shardik_passivation::DurationSetting::Millis(ms)) = value {
                return Err(invalid(
                    &format!("cluster.sharding.passivation.{name}.idle-entity.{leaf}"),
                    ms,
                    &format!("{DURATION_EXPECTED}, or `off`"),
                ));
            }
        }
    }
    // Check every block, not only the selected one, so that a mistake surfaces when it is
    // made rather than on the day someone switches strategies.
    for name in PASSIVATION_KEYS[1..]
        .iter()
        .copied()
        .chain(p.custom.keys().map(String::as_str))
    {
        p.clone()
            .with_strategy(name)
            .validate()
            .map_err(passivation_error)?;
    }
    s.passivation_strategy().map(|_| ())
}

#[cfg(test)]
#[path = "sharding_tests.rs"]
mod tests;
