//! A node's sharding settings (`cluster.sharding`), read from its configuration.

use std::sync::Arc;
use std::time::Duration;

use shardik_core::membership::sbr::Strategy;
use shardik_core::sharding::{
    AllocationSettings, CoordinatorSettings, HandOffMode, LeaseTiming, RegionSettings,
};
use shardik_passivation::{IdleCheck, ResolvedStrategy};

use super::remember_settings::EntityRecovery;

/// Sharding settings of a node (`cluster.sharding`).
#[derive(Clone, Debug)]
pub struct ShardingConfig {
    /// Shards per kind; every node must agree.
    pub number_of_shards: u32,
    /// Role whose nodes host shards (`None`: all).
    pub role: Option<String>,
    /// Region settings.
    pub region: RegionSettings,
    /// Coordinator settings.
    pub coordinator: CoordinatorSettings,
    /// Allocation strategy settings.
    pub allocation: AllocationSettings,
    /// How long a crashed member counts as possibly alive after its removal.
    pub down_removal_margin: Duration,
    /// How entities are passivated when their kind does not say
    /// (`cluster.sharding.passivation`; by default those idle for 120 s).
    pub passivation: ResolvedStrategy,
    /// How long a graceful shutdown of all regions may take.
    pub shutdown_timeout: Duration,
    /// This node's roles (decides region or proxy before the node has joined).
    pub self_roles: std::collections::BTreeSet<String>,
    /// How long a region answering another node's statistics request waits for its own
    /// shards (`shard-region-query-timeout`).
    pub query_timeout: Duration,
    /// How long after a remembered entity failed its shard starts it again without a message
    /// (`entity-restart-backoff`; only for kinds that remember their entities).
    pub entity_restart_backoff: Duration,
    /// Whether kinds remember their entities when their code does not say
    /// (`remember-entities`), and then how a shard starts them (`entity-recovery-strategy`).
    pub remember_entities: Option<EntityRecovery>,
    /// The coordinator's lease (`coordinator-singleton.use-lease`), with its timing; the
    /// shards' leases are `region.lease` (`use-lease`).
    pub coordinator_lease: Option<LeaseTiming>,
    /// The cluster's name, the prefix of lease names.
    pub cluster_name: Arc<str>,
    /// Self-fencing: a node that has not seen a majority for this long stops running shards
    /// and its coordinator on its own. Set to the split-brain resolver's stable-after when it
    /// decides by majority (keep-majority, lease-majority); `None` otherwise.
    pub self_fence_after: Option<Duration>,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        ShardingConfig {
            number_of_shards: 1000,
            role: None,
            region: RegionSettings::default(),
            coordinator: CoordinatorSettings::default(),
            allocation: AllocationSettings::default(),
            down_removal_margin: Duration::from_secs(20),
            passivation: ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(120))),
            shutdown_timeout: Duration::from_secs(60),
            self_roles: Default::default(),
            query_timeout: Duration::from_secs(3),
            entity_restart_backoff: Duration::from_secs(10),
            remember_entities: None,
            coordinator_lease: None,
            cluster_name: "shardik".into(),
            self_fence_after: None,
        }
    }
}

impl ShardingConfig {
    /// The sharding settings of a node's configuration (`cluster.sharding.*`, with
    /// `cluster.down-removal-margin`, `cluster.roles` and the min-nr-of-members settings).
    pub fn from_settings(s: &crate::config::Settings) -> Self {
        let sh = &s.cluster.sharding;
        let mode = match sh.handoff_mode {
            crate::config::HandOffModeSetting::Forward => HandOffMode::Forward,
            crate::config::HandOffModeSetting::Drop => HandOffMode::Drop,
        };
        let membership = s.membership_config();
        let min_members = match sh.host_role() {
            Some(role) => membership
                .role_min_nr_of_members
                .get(role)
                .copied()
                .unwrap_or(1),
            None => membership.min_nr_of_members,
        };
        ShardingConfig {
            number_of_shards: sh.number_of_shards,
            role: sh.host_role().map(str::to_string),
            region: RegionSettings {
                buffer_size: sh.buffer_size,
                retry_interval: sh.retry_interval,
                handoff_timeout: sh.handoff_timeout,
                handoff_mode: mode,
                lease: sh.use_lease.is_on().then(|| lease_timing(s)),
            },
            coordinator: CoordinatorSettings {
                rebalance_interval: sh.rebalance_interval,
                handoff_timeout: sh.handoff_timeout,
                shard_start_timeout: sh.shard_start_timeout,
                min_members,
                forward_handoff: mode == HandOffMode::Forward,
                unheard_warning_after: sh.unheard_region_warning_after,
            },
            allocation: sh.allocation_settings(),
            down_removal_margin: s.cluster.effective_down_removal_margin(),
            // A loaded configuration has been validated; settings built in code with a bad
            // strategy fall back to the reference default, loudly.
            passivation: sh.passivation_strategy().unwrap_or_else(|e| {
                tracing::error!(error = %e, "invalid passivation settings; using default-idle-strategy");
                ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(120)))
            }),
            // The reference gives the region's shutdown phase 10 s; a hand-off may take up to
            // handoff-timeout, so allow that.
            shutdown_timeout: sh.handoff_timeout,
            self_roles: membership.roles.clone(),
            query_timeout: sh.shard_region_query_timeout,
            entity_restart_backoff: sh.entity_restart_backoff,
            remember_entities: sh.remember_entities.then(|| sh.entity_recovery()),
            coordinator_lease: sh
                .coordinator_singleton
                .use_lease
                .is_on()
                .then(|| lease_timing(s)),
            cluster_name: s.cluster.name.as_str().into(),
            self_fence_after: membership
                .downing
                .as_ref()
                .filter(|d| {
                    matches!(
                        d.strategy,
                        Strategy::KeepMajority { .. } | Strategy::LeaseMajority { .. }
                    )
                })
                .map(|d| d.stable_after),
        }
    }

    /// Sets the hand-off mode in both the region and coordinator settings.
    pub fn with_handoff_mode(mut self, mode: HandOffMode) -> Self {
        self.region.handoff_mode = mode;
        self.coordinator.forward_handoff = mode == HandOffMode::Forward;
        self
    }
}

/// The timing of sharding's leases: `coordination.lease.*` and `lease-retry-interval`.
fn lease_timing(s: &crate::config::Settings) -> LeaseTiming {
    let l = &s.coordination.lease;
    LeaseTiming {
        ttl: l.heartbeat_timeout,
        renew_interval: l.heartbeat_interval,
        operation_timeout: l.lease_operation_timeout,
        retry_interval: s.cluster.sharding.lease_retry_interval,
    }
}
