//! Settings of the simulated sharding layer: the shipped reference configuration with timers
//! short enough for tests, mapped to each node's settings by the runtime's own mapping
//! (`shardik-config`), so that a key reaches a simulated node exactly as it reaches a shipped
//! one.

use std::time::Duration;

use shardik_config::Settings;
use shardik_core::membership::MembershipConfig;
use shardik_core::node::ShardingSettings;
use shardik_core::sharding::{HandOffMode, LeaseTiming};

use super::durable::DurableSpec;
use super::entities::EntitySpec;
use super::reliable::ReliableSpec;
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

/// How every node's sharding layer is set up: the node's sharding defaults, mapped from a
/// configuration exactly as the runtime maps its own ([`Settings::node_settings`]), and the
/// simulator's own knobs beside them.
#[derive(Clone, Debug)]
pub struct ShardingConfig {
    /// The entity kinds; a kind is named by its index in this list.
    pub kinds: Vec<KindSpec>,
    /// What every kind runs with unless its [`KindSpec`] says otherwise: shards, region,
    /// coordinator, allocation, margins, leases, passivation, remembering, as the shipped node
    /// derives them. Build it from a configuration ([`fast_settings`]); set a field directly
    /// only for what no key says (a scenario that takes a safety net away, say).
    pub sharding: ShardingSettings,
    /// How long a shard's entities take to stop after `StopEntities` (they keep "running"
    /// meanwhile, which is what makes hand-offs overlap with traffic).
    pub entity_stop_delay: Duration,
    /// Record shard, coordinator and node events in the sharding timeline.
    pub record_events: bool,
    /// Durable entities: every message is a command that persists events to a shared store
    /// (`None`: entities keep nothing).
    pub durable: Option<DurableSpec>,
    /// What the entities' handlers do (handling time, failures, timers); how the entities live
    /// (passivation, remembering, restart back-off) is in [`sharding`](Self::sharding).
    pub entities: EntitySpec,
    /// Reliable delivery: producers on some nodes offering messages to the durable entities
    /// of kind 0, which judge them by their marks (`None`: only plain tells). Needs
    /// [`durable`](Self::durable).
    pub reliable: Option<ReliableSpec>,
}

/// The split-brain resolver's stable-after in the fast settings (and so the margin): half the
/// reference's 20 s. It must stay well above the failure detector's detection time, which
/// adapts to the heartbeat history: after one node has gone silent for a few seconds (a short
/// partition), the phi detector takes longer to flag that node the next time (11 s was seen).
/// A resolver that decides before every unreachable node is flagged counts some of the far
/// side as its own and can keep both sides; with 5 s the random scenario found such a split.
/// [`FAST_OVERRIDES`] sets it.
pub const FAST_STABLE_AFTER: Duration = Duration::from_secs(10);

/// What the simulator changes in the shipped reference configuration: timers scaled down so
/// that a crash is handled in seconds of simulated time rather than a minute, 24 shards, and
/// no automatic passivation (a scenario turns it on). Failure detection and gossip keep the
/// reference's values; keep-majority downing decides after [`FAST_STABLE_AFTER`], which is
/// then also the down-removal margin (a downed minority has stopped before its shards start
/// elsewhere) and the self-fencing delay, as the runtime derives them.
pub const FAST_OVERRIDES: &str = r#"
[cluster.split-brain-resolver]
active-strategy = "keep-majority"
stable-after = "10s"

[cluster.sharding]
number-of-shards = 24
buffer-size = 100000
retry-interval = "500ms"
handoff-timeout = "10s"
shard-start-timeout = "2s"
rebalance-interval = "2s"
unheard-region-warning-after = "5s"
entity-restart-backoff = "500ms"

[cluster.sharding.passivation]
strategy = "none"
"#;

/// Leases scaled like [`FAST_OVERRIDES`], on shards and coordinators alike: a lease lasts 8 s
/// unless renewed every second; a store call may take 1 s; an acquisition that failed is tried
/// again after 1 s.
pub const FAST_LEASE_OVERRIDES: &str = r#"
[cluster.sharding]
use-lease = "store"
lease-retry-interval = "1s"

[cluster.sharding.coordinator-singleton]
use-lease = "store"

[coordination.lease]
heartbeat-timeout = "8s"
heartbeat-interval = "1s"
lease-operation-timeout = "1s"
"#;

/// The configuration of a simulated node: the shipped reference, then [`FAST_OVERRIDES`], then
/// each of `layers` (TOML texts, a later one winning).
///
/// # Panics
/// If the configuration is refused: a scenario's settings are code, and the error names the
/// key, the value and what is expected.
pub fn fast_settings(layers: &[&str]) -> Settings {
    let mut all = vec![FAST_OVERRIDES];
    all.extend_from_slice(layers);
    Settings::from_toml_layers(&all).unwrap_or_else(|e| panic!("simulator configuration: {e}"))
}

/// The TOML that sets the hand-off mode.
pub fn handoff_mode_toml(mode: HandOffMode) -> &'static str {
    match mode {
        HandOffMode::Forward => "[cluster.sharding]\nhandoff-mode = \"forward\"\n",
        HandOffMode::Drop => "[cluster.sharding]\nhandoff-mode = \"drop\"\n",
    }
}

impl ShardingConfig {
    /// One kind on every node, in the given hand-off mode, with [`FAST_OVERRIDES`].
    pub fn fast(mode: HandOffMode) -> Self {
        Self::fast_with(mode, &[])
    }

    /// As [`fast`](Self::fast), with `layers` of configuration on top (TOML texts, as a
    /// node's configuration file would hold them).
    pub fn fast_with(mode: HandOffMode, layers: &[&str]) -> Self {
        let mut all = vec![handoff_mode_toml(mode)];
        all.extend_from_slice(layers);
        Self::from_settings(&fast_settings(&all))
    }

    /// One kind on every node, with the sharding defaults `settings` map to (the mapping the
    /// runtime uses) and the simulator's own knobs at their defaults.
    pub fn from_settings(settings: &Settings) -> Self {
        Self::with_sharding(settings.node_settings().sharding)
    }

    /// One kind on every node with these sharding defaults, and the simulator's own knobs at
    /// their defaults.
    pub fn with_sharding(sharding: ShardingSettings) -> Self {
        ShardingConfig {
            kinds: vec![KindSpec::new("counter")],
            sharding,
            entity_stop_delay: Duration::from_millis(50),
            record_events: true,
            durable: None,
            entities: EntitySpec::default(),
            reliable: None,
        }
    }

    /// Replaces what the entities' handlers do.
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

    /// Adds reliable delivery as `spec` says (the entities must be durable).
    pub fn with_reliable(mut self, spec: ReliableSpec) -> Self {
        self.reliable = Some(spec);
        self
    }

    /// The hand-off mode the regions use.
    pub fn mode(&self) -> HandOffMode {
        self.sharding.region.handoff_mode
    }

    /// The sharding settings every kind runs with: the node's defaults as they apply to a kind
    /// (`ShardingSettings::for_kind`, as the runtime applies them), which has a store of its
    /// own when the entities are durable, so that leases set to `"auto"` are on for it.
    pub fn kind_sharding(&self) -> ShardingSettings {
        self.sharding.for_kind(self.durable.is_some())
    }

    /// The timing of the shards' and coordinators' leases, when they are on.
    pub fn leases(&self) -> Option<LeaseTiming> {
        let s = self.kind_sharding();
        s.region.lease.or(s.coordinator_lease)
    }

    /// Whether the entities are remembered (`remember-entities`).
    pub fn remembers(&self) -> bool {
        self.sharding.remember_entities.is_some()
    }
}

/// Membership settings matching [`ShardingConfig::fast`]: what [`FAST_OVERRIDES`] maps to
/// (keep-majority downing with a stable-after of [`FAST_STABLE_AFTER`]; failure detection and
/// gossip at the reference's values).
pub fn fast_membership() -> MembershipConfig {
    fast_settings(&[]).node_settings().membership
}

/// A world configuration with the given membership settings and seed.
pub fn world_with(seed: u64, membership: MembershipConfig) -> WorldConfig {
    let mut cfg = WorldConfig::new(seed);
    cfg.membership = membership;
    cfg
}

/// A world configuration with [`fast_membership`] and the given seed.
pub fn fast_world(seed: u64) -> WorldConfig {
    world_with(seed, fast_membership())
}

/// The lease timing of [`FAST_LEASE_OVERRIDES`], as the mapping reads it.
pub fn fast_leases() -> LeaseTiming {
    fast_settings(&[FAST_LEASE_OVERRIDES])
        .node_settings()
        .sharding
        .region
        .lease
        .expect("FAST_LEASE_OVERRIDES turns use-lease on")
}
