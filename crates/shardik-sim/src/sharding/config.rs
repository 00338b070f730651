//! Settings of the simulated sharding layer, with timers short enough for tests.

use std::time::Duration;

use shardik_core::membership::MembershipConfig;
use shardik_core::membership::sbr::{SbrSettings, Strategy};
use shardik_core::sharding::{CoordinatorSettings, HandOffMode, LeaseTiming, RegionSettings};

use super::durable::DurableSpec;
use super::entities::EntitySpec;
use crate::world::WorldConfig;

/// One entity kind the simulated cluster shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindSpec {
    /// The kind's name (for messages and the timeline).
    pub name: String,
    /// Nodes with this role host the kind's shards; the others run a proxy. `None`: all host.
    pub role: Option<String>,
    /// Nodes with this role never start the kind (the application there never calls `init`
    /// for it): they answer its coordinator's announcements and its regions' registrations
    /// with `KindNotStarted`, as the runtime's inbound dispatcher does, and run nothing else
    /// of it. `None`: every node starts it.
    pub not_started_with_role: Option<String>,
}

impl KindSpec {
    /// A kind hosted on every node.
    pub fn new(name: &str) -> Self {
        KindSpec {
            name: name.to_string(),
            role: None,
            not_started_with_role: None,
        }
    }

    /// A kind hosted only on nodes with `role`.
    pub fn with_role(name: &str, role: &str) -> Self {
        KindSpec {
            name: name.to_string(),
            role: Some(role.to_string()),
            not_started_with_role: None,
        }
    }

    /// The same kind, never started on nodes with `role`.
    pub fn not_started_with_role(mut self, role: &str) -> Self {
        self.not_started_with_role = Some(role.to_string());
        self
    }
}

/// How every node's sharding layer is set up.
#[derive(Clone, Debug)]
pub struct ShardingConfig {
    /// The entity kinds; a kind is named by its index in this list.
    pub kinds: Vec<KindSpec>,
    /// Shards per kind.
    pub number_of_shards: u32,
    /// Region settings for every region (the hand-off mode among them).
    pub region: RegionSettings,
    /// Coordinator settings (`forward_handoff` must agree with the region's hand-off mode).
    pub coordinator: CoordinatorSettings,
    /// How long a member removed after a failure still counts as possibly running.
    pub down_removal_margin: Duration,
    /// How long a shard's entities take to stop after `StopEntities` (they keep "running"
    /// meanwhile, which is what makes hand-offs overlap with traffic).
    pub entity_stop_delay: Duration,
    /// How long a graceful leave waits for the regions to hand off before stopping them and
    /// leaving anyway (the runtime's `shutdown_timeout`): a region holding messages for shards
    /// that cannot get a home (no other region can host them) would otherwise wait forever.
    pub shutdown_timeout: Duration,
    /// Record shard, coordinator and node events in the sharding timeline.
    pub record_events: bool,
    /// Durable entities: every message is a command that persists events to a shared store
    /// (`None`: entities keep nothing).
    pub durable: Option<DurableSpec>,
    /// Shard and coordinator leases (`use-lease`), kept in the simulated store with this
    /// timing (`None`: no leases).
    pub leases: Option<LeaseTiming>,
    /// Self-fencing after this long without a majority (the runtime sets the resolver's
    /// stable-after when it decides by majority).
    pub self_fence_after: Option<Duration>,
    /// How the entities live (handling time, passivation, remembering, failures, timers).
    pub entities: EntitySpec,
}

/// The split-brain resolver's stable-after in the fast settings (and so the margin): half the
/// reference's 20 s. It must stay well above the failure detector's detection time, which
/// adapts to the heartbeat history: after one node has gone silent for a few seconds (a short
/// partition), the phi detector takes longer to flag that node the next time (11 s was seen).
/// A resolver that decides before every unreachable node is flagged counts some of the far
/// side as its own and can keep both sides; with 5 s the random scenario found such a split.
pub const FAST_STABLE_AFTER: Duration = Duration::from_secs(10);

impl ShardingConfig {
    /// One kind on every node, in the given hand-off mode, with timers scaled down so that a
    /// crash is handled in seconds of simulated time rather than a minute.
    pub fn fast(mode: HandOffMode) -> Self {
        ShardingConfig {
            kinds: vec![KindSpec::new("counter")],
            number_of_shards: 24,
            region: RegionSettings {
                buffer_size: 100_000,
                retry_interval: Duration::from_millis(500),
                handoff_timeout: Duration::from_secs(10),
                handoff_mode: mode,
                lease: None,
            },
            coordinator: CoordinatorSettings {
                rebalance_interval: Duration::from_secs(2),
                handoff_timeout: Duration::from_secs(10),
                shard_start_timeout: Duration::from_secs(2),
                min_members: 1,
                forward_handoff: mode == HandOffMode::Forward,
                unheard_warning_after: Duration::from_secs(5),
            },
            // As the runtime does with the resolver on: the margin equals stable-after, so a
            // downed minority has stopped before its shards start elsewhere.
            down_removal_margin: FAST_STABLE_AFTER,
            entity_stop_delay: Duration::from_millis(50),
            shutdown_timeout: Duration::from_secs(10),
            record_events: true,
            durable: None,
            leases: None,
            self_fence_after: Some(FAST_STABLE_AFTER),
            entities: EntitySpec::default(),
        }
    }

    /// Replaces how the entities live.
    pub fn with_entities(mut self, spec: EntitySpec) -> Self {
        self.entities = spec;
        self
    }

    /// Replaces the kinds.
    pub fn with_kinds(mut self, kinds: Vec<KindSpec>) -> Self {
        self.kinds = kinds;
        self
    }

    /// Makes the entities durable as `spec` says.
    pub fn with_durable(mut self, spec: DurableSpec) -> Self {
        self.durable = Some(spec);
        self
    }

    /// Puts every shard and coordinator under a lease with `timing`.
    pub fn with_leases(mut self, timing: LeaseTiming) -> Self {
        self.leases = Some(timing);
        self.region.lease = Some(timing);
        self
    }

    /// The hand-off mode the regions use.
    pub fn mode(&self) -> HandOffMode {
        self.region.handoff_mode
    }
}

/// Membership settings matching [`ShardingConfig::fast`]: keep-majority downing with a
/// stable-after of [`FAST_STABLE_AFTER`] (down-all-when-unstable at its derived default);
/// failure detection and gossip keep the reference's values.
pub fn fast_membership() -> MembershipConfig {
    MembershipConfig {
        downing: Some(SbrSettings::new(
            Strategy::KeepMajority { role: None },
            FAST_STABLE_AFTER,
        )),
        ..MembershipConfig::default()
    }
}

/// A world configuration with [`fast_membership`] and the given seed.
pub fn fast_world(seed: u64) -> WorldConfig {
    let mut cfg = WorldConfig::new(seed);
    cfg.membership = fast_membership();
    cfg
}

/// Lease timing scaled like [`ShardingConfig::fast`]: a lease lasts 8 s unless renewed every
/// second; a store call may take 1 s; an acquisition that failed is tried again after 1 s.
pub fn fast_leases() -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::from_secs(8),
        renew_interval: Duration::from_secs(1),
        operation_timeout: Duration::from_secs(1),
        retry_interval: Duration::from_secs(1),
    }
}
