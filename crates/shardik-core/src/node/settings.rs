//! What one node runs with: the membership core's settings and the sharding defaults that
//! every entity kind of the node takes unless its code says otherwise.
//!
//! Both drivers build these the same way: the runtime from its loaded configuration, the
//! simulator from the same reference configuration with its own overrides (the configuration
//! crate's `Settings::node_settings` is that one mapping). What a kind's node and entities are
//! given is derived here, once, so a key reaches the simulated node exactly as the shipped one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use shardik_passivation::{IdleCheck, ResolvedStrategy};

use crate::membership::MembershipConfig;
use crate::sharding::entities::EntitySettings;
use crate::sharding::{
    AllocationChoice, AllocationSettings, CoordinatorSettings, EntityRecovery, HandOffMode,
    KindNodeSettings, LeaseTiming, RegionSettings,
};

/// Everything a node is built from: membership (`cluster.*`) and sharding
/// (`cluster.sharding.*`).
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// The membership core's settings.
    pub membership: MembershipConfig,
    /// The sharding defaults of every entity kind.
    pub sharding: ShardingSettings,
}

/// Sharding settings of a node (`cluster.sharding`): what every entity kind runs with unless
/// its code overrides it.
#[derive(Clone, Debug)]
pub struct ShardingSettings {
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
    pub self_roles: BTreeSet<String>,
    /// How long a region answering another node's statistics request waits for its own
    /// shards (`shard-region-query-timeout`).
    pub query_timeout: Duration,
    /// How long after a remembered entity failed its shard starts it again without a message
    /// (`entity-restart-backoff`; only for kinds that remember their entities).
    pub entity_restart_backoff: Duration,
    /// How many lanes run a kind's handlers on this node when its code does not say
    /// (`handler-lanes`; 0: one per worker thread). A runtime concern: the simulator runs
    /// every handler in the kind's own turn, and a handler on a lane is, to the entity
    /// lifecycle, one that awaited.
    pub handler_lanes: usize,
    /// Whether kinds remember their entities when their code does not say
    /// (`remember-entities`), and then how a shard starts them (`entity-recovery-strategy`).
    pub remember_entities: Option<EntityRecovery>,
    /// The coordinator's lease (`coordinator-singleton.use-lease = "store"`), with its timing;
    /// the shards' leases are `region.lease` (`use-lease = "store"`).
    pub coordinator_lease: Option<LeaseTiming>,
    /// The shards' leases of a kind that has a store of its own (`use-lease = "auto"`):
    /// applied by [`for_kind`](Self::for_kind).
    pub auto_shard_lease: Option<LeaseTiming>,
    /// The coordinator's lease of a kind that has a store of its own
    /// (`coordinator-singleton.use-lease = "auto"`): applied by [`for_kind`](Self::for_kind).
    pub auto_coordinator_lease: Option<LeaseTiming>,
    /// The cluster's name, the prefix of lease names.
    pub cluster_name: Arc<str>,
    /// Self-fencing: a node that has not seen a majority for this long stops running shards
    /// and its coordinator on its own. Set to the split-brain resolver's stable-after when it
    /// decides by majority (keep-majority, lease-majority); `None` otherwise.
    pub self_fence_after: Option<Duration>,
}

impl Default for ShardingSettings {
    /// The reference's values, except that no lease is taken (not even by a kind with a store
    /// of its own), nothing is remembered and no node fences itself.
    fn default() -> Self {
        ShardingSettings {
            number_of_shards: 1000,
            role: None,
            region: RegionSettings::default(),
            coordinator: CoordinatorSettings::default(),
            allocation: AllocationSettings::default(),
            down_removal_margin: Duration::from_secs(20),
            passivation: ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(120))),
            shutdown_timeout: Duration::from_secs(60),
            self_roles: BTreeSet::new(),
            query_timeout: Duration::from_secs(3),
            entity_restart_backoff: Duration::from_secs(10),
            handler_lanes: 0,
            remember_entities: None,
            coordinator_lease: None,
            auto_shard_lease: None,
            auto_coordinator_lease: None,
            cluster_name: "shardik".into(),
            self_fence_after: None,
        }
    }
}

impl ShardingSettings {
    /// Sets the hand-off mode in both the region and coordinator settings.
    pub fn with_handoff_mode(mut self, mode: HandOffMode) -> Self {
        self.region.handoff_mode = mode;
        self.coordinator.forward_handoff = mode == HandOffMode::Forward;
        self
    }

    /// These settings as they apply to one kind: the leases set to `"auto"` are on when the
    /// kind has a store of its own (`has_store`), where its entities write and so where the
    /// lease's fencing token is checked; a kind without one runs without them.
    pub fn for_kind(&self, has_store: bool) -> ShardingSettings {
        let mut s = self.clone();
        if has_store {
            s.region.lease = s.region.lease.or(s.auto_shard_lease);
            s.coordinator_lease = s.coordinator_lease.or(s.auto_coordinator_lease);
        }
        s
    }

    /// The role whose members host a kind: the kind's own (`kind_role`, from its code) or,
    /// when it names none, the configured `role`.
    pub fn kind_role(&self, kind_role: Option<&str>) -> Option<String> {
        kind_role.map(str::to_string).or_else(|| self.role.clone())
    }

    /// The settings of one kind's node: these defaults, with the kind's `role` (see
    /// [`kind_role`](Self::kind_role)) and whether this node only routes for it (`proxy`: it
    /// lacks the role). A proxy never hosts a shard nor the coordinator, so it takes no lease.
    pub fn kind_node_settings(&self, role: Option<String>, proxy: bool) -> KindNodeSettings {
        KindNodeSettings {
            region: RegionSettings {
                lease: self.region.lease.filter(|_| !proxy),
                ..self.region.clone()
            },
            coordinator: CoordinatorSettings {
                // Only a kind whose shards and coordinator both run under leases moves a
                // silent member's shards on the store's word (coordinator/takeover.rs), and
                // its coordinator to a stand-in (ShardingView::stand_in). A proxy runs no
                // coordinator, but its region follows the stand-in.
                lease_takeover: self
                    .region
                    .lease
                    .filter(|_| self.coordinator_lease.is_some()),
                ..self.coordinator.clone()
            },
            role,
            proxy,
            down_removal_margin: self.margin_for_kind(),
            shutdown_timeout: self.shutdown_timeout,
            coordinator_lease: self.coordinator_lease.filter(|_| !proxy),
            self_fence_after: self.self_fence_after,
        }
    }

    /// The down-removal margin a kind's sharding waits after a failed member's removal. None
    /// when both its shards and its coordinator run under leases: neither can start elsewhere
    /// before the failed member's lease has run out in the store, whatever the membership says,
    /// and a member that is cut off but alive loses its leases (and stops their entities) by
    /// its own clock first (docs/ARCHITECTURE.md, "Timing"). Otherwise the configured margin,
    /// which must cover the cut-off side's self-fencing.
    pub fn margin_for_kind(&self) -> Duration {
        if self.region.lease.is_some() && self.coordinator_lease.is_some() {
            Duration::ZERO
        } else {
            self.down_removal_margin
        }
    }

    /// How a kind's entities live under these defaults: the configured passivation, the
    /// restart back-off, and whether the kind remembers its entities (`remember`: the
    /// configured [`remember_entities`](Self::remember_entities) unless its code decides). A
    /// kind whose code picks its own passivation replaces `passivation`.
    pub fn entity_settings(&self, remember: bool) -> EntitySettings {
        EntitySettings {
            passivation: self.passivation.clone(),
            remember,
            restart_backoff: self.entity_restart_backoff,
        }
    }

    /// The configured allocation strategy (`least-shard-allocation-strategy.*`), for a kind
    /// whose code does not bring its own.
    pub fn allocation_choice(&self) -> AllocationChoice {
        let settings = self.allocation;
        AllocationChoice::Immediate(Box::new(move || settings.strategy()))
    }
}

#[cfg(test)]
mod tests;
