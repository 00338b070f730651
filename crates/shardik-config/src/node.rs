//! The one mapping from a node's configuration to what it runs with ([`NodeSettings`]): the
//! runtime builds its node from it, and the simulator builds every simulated node from it, so
//! a key reaches both the same way.

use std::time::Duration;

use shardik_core::membership::sbr::Strategy;
use shardik_core::node::{NodeSettings, ShardingSettings};
use shardik_core::sharding::{CoordinatorSettings, HandOffMode, LeaseTiming, RegionSettings};
use shardik_passivation::{IdleCheck, ResolvedStrategy};

use crate::settings::Settings;
use crate::sharding::HandOffModeSetting;

impl Settings {
    /// What a node runs with: membership ([`Settings::membership_config`]) and the sharding
    /// defaults of every entity kind (`cluster.sharding.*`, with `cluster.down-removal-margin`,
    /// `cluster.roles`, the min-nr-of-members settings, the split-brain resolver's
    /// stable-after for self-fencing and `coordination.lease.*` for leases).
    #[doc(hidden)] // the mapping to the cores, for the runtime and the simulator
    pub fn node_settings(&self) -> NodeSettings {
        let membership = self.membership_config();
        let sh = &self.cluster.sharding;
        let mode = match sh.handoff_mode {
            HandOffModeSetting::Forward => HandOffMode::Forward,
            HandOffModeSetting::Drop => HandOffMode::Drop,
        };
        let min_members = match sh.host_role() {
            Some(role) => membership
                .role_min_nr_of_members
                .get(role)
                .copied()
                .unwrap_or(1),
            None => membership.min_nr_of_members,
        };
        let sharding = ShardingSettings {
            number_of_shards: sh.number_of_shards,
            role: sh.host_role().map(str::to_string),
            region: RegionSettings {
                buffer_size: sh.buffer_size,
                retry_interval: sh.retry_interval,
                handoff_timeout: sh.handoff_timeout,
                handoff_mode: mode,
                lease: sh.use_lease.is_on().then(|| self.lease_timing()),
            },
            coordinator: CoordinatorSettings {
                rebalance_interval: sh.rebalance_interval,
                handoff_timeout: sh.handoff_timeout,
                shard_start_timeout: sh.shard_start_timeout,
                min_members,
                forward_handoff: mode == HandOffMode::Forward,
                unheard_warning_after: sh.unheard_region_warning_after,
                // Set per kind, once it is known whether both its shards and its coordinator
                // run under leases (`ShardingSettings::kind_node_settings`).
                lease_takeover: None,
            },
            allocation: sh.allocation_settings(),
            down_removal_margin: self.cluster.effective_down_removal_margin(),
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
            handler_lanes: sh.handler_lanes,
            remember_entities: sh.remember_entities.then(|| sh.entity_recovery()),
            coordinator_lease: sh
                .coordinator_singleton
                .use_lease
                .is_on()
                .then(|| self.lease_timing()),
            auto_shard_lease: sh.use_lease.is_auto().then(|| self.lease_timing()),
            auto_coordinator_lease: sh
                .coordinator_singleton
                .use_lease
                .is_auto()
                .then(|| self.lease_timing()),
            cluster_name: self.cluster.name.as_str().into(),
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
        };
        NodeSettings {
            membership,
            sharding,
        }
    }

    /// The timing of sharding's leases: `coordination.lease.*` and `lease-retry-interval`.
    fn lease_timing(&self) -> LeaseTiming {
        let l = &self.coordination.lease;
        LeaseTiming {
            ttl: l.heartbeat_timeout,
            renew_interval: l.heartbeat_interval,
            operation_timeout: l.lease_operation_timeout,
            retry_interval: self.cluster.sharding.lease_retry_interval,
        }
    }
}
