//! The curated public surface: what an application writes against, as the `shardik` crate
//! re-exports it (`pub use shardik_runtime::facade::*`).
//!
//! Kept here, beside the code, so that the list exists once: the facade crate re-exports it
//! whole, and the runtime's own doc examples import it under the facade's name
//! (`# use shardik_runtime::facade as shardik;`) so that what a reader of the facade's docs
//! sees is a path that compiles for them. Everything here is covered by the facade's semver
//! promise; what is not here is reachable through `shardik::advanced` without one.
//!
//! What belongs: what the README, the examples and the doc examples use, and the extension
//! points (allocation strategies, codecs, stores).

// Starting a node, configuring it, watching the cluster.
pub use crate::cluster_node::{Node, NodeBuilder};
pub use crate::node::StartError;
pub use crate::node::handle::{ControlError, MembershipSnapshot, NodeHandle, UnreachableMember};
pub use crate::node::member_up::{NotUp, StoppedBeforeUp};
pub use shardik_config::Settings;
pub use shardik_core::membership::{
    Address, AddressParseError, ClusterEvent, CommandError, Member, MemberStatus, ShutdownReason,
    UniqueAddress,
};
// What a node that cannot start says (inside [`StartError`]).
#[cfg(feature = "management")]
pub use crate::bootstrap::BootstrapError;
pub use crate::discovery::DiscoveryError;
pub use shardik_transport::TransportError;
pub use shardik_transport::tls::{PeerCertificate, TlsError};

// Entities and how to reach them.
pub use crate::sharding::{
    AskError, DetachedAnswer, EntityContext, EntityFailure, EntityKind, EntityRecovery, EntityRef,
    EntityRegion, EntityTypeKey, InitError, ReplyTo, Sharding, ShardingError, SyncEntity,
    TellError,
};
// Ids, and a kind's own mapping of entities to shards.
/// What an application implements for a plain sharded entity; [`SyncEntity`] for one whose
/// handler never awaits.
pub use crate::sharding::Entity;
pub use crate::sharding::{EntityId, ShardExtractor, ShardId};

// Codecs (an extension point: a kind may bring its own).
pub use crate::sharding::{Cbor, Codec, CodecError, Postcard};

// Allocation strategies (an extension point).
pub use crate::sharding::{
    AllocationSnapshot, AsyncShardAllocationStrategy, RegionEntry, ShardAllocationStrategy,
    StrategyFuture,
};

// One instance in the cluster, and a fixed set of workers kept alive.
pub use crate::sharding::{
    ClusterSingleton, DaemonSettings, ManagedInitError, ManagedRef, ShardedDaemonProcess,
    SingletonRef, SingletonSettings, WorkerRef,
};

/// Testing an application's entities: one event-sourced entity command by command, and a
/// cluster of real nodes in the test's process, and loopback ports for nodes started by hand.
pub mod testkit {
    pub use crate::testkit::{
        CommandResult, EventSourcedTestKit, TestCluster, TestClusterError, TestKitError, free_port,
    };
}

// Inspection.
pub use crate::sharding::{ClusterShardingStats, HeldBackKind, NotHosted, RegionState};

/// The management HTTP API's pieces an application's own routes use (`management` feature).
#[cfg(feature = "management")]
pub use crate::cluster_node::NoManagementApi;
#[cfg(feature = "management")]
pub use crate::http::{ClientCertificate, GuardRefusal, WriteGuard};
/// The HTTP framework the management API is built on, at the version it uses: the routes an
/// application merges ([`Node::merge_routes`]) are its `Router`s (`management` feature).
#[cfg(feature = "management")]
pub use axum;

/// The settings of a node, section by section: what [`Settings`]' fields hold (keys and
/// defaults as in the built-in `reference.toml`, [`config::REFERENCE_TOML`]).
pub mod config {
    pub use shardik_config::*;
    /// A check of one's own on whether a joining node's configuration fits the cluster's
    /// ([`NodeBuilder::join_config_compat_checker`](crate::cluster_node::NodeBuilder::join_config_compat_checker)).
    pub use shardik_core::membership::JoinConfigCompatChecker;
    /// The allocation strategy's settings (`cluster.sharding.least-shard-allocation-strategy`).
    pub use shardik_core::sharding::AllocationSettings;
}

/// Passivation: which idle or least-valuable entities a region stops to bound memory
/// (`cluster.sharding.passivation`, or per kind with
/// [`EntityKind::with_passivation`](crate::sharding::EntityKind::with_passivation)).
pub mod passivation {
    pub use shardik_passivation::{
        AdmissionConfig, DurationSetting, FrequencySketchConfig, HillClimbingConfig,
        IdleEntityConfig, LfuConfig, LimitSetting, LruConfig, PassivationSettings, PolicyConfig,
        ResolvedStrategy, SegmentedConfig, SettingsError, StrategyConfig, WindowConfig,
    };
    /// What a resolved strategy is made of.
    pub use shardik_passivation::{
        AdmissionFilterSettings, CompositeSettings, HillClimbingSettings, IdleCheck,
        ReplacementPolicy,
    };
}

/// Durable entities: event-sourced ([`EventSourcedEntity`](persistence::EventSourcedEntity),
/// its [`Effect`](persistence::Effect)s and [`EventSourcedKind`](persistence::EventSourcedKind))
/// and durable-state ones ([`DurableStateEntity`](persistence::DurableStateEntity)), kept in
/// the node's store ([`Node::persistence`]: `persistence.store`, by default a SQLite file in
/// `persistence.data-dir`).
pub mod persistence {
    pub use crate::persistence::{
        DurableState, DurableStateContext, DurableStateEntity, Effect, EventAdapterError,
        EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind,
        FIRST_EVENT_VERSION, JournalEvent, Persistence, StateEffect, StorageCodec,
    };
    pub use shardik_persistence::{MemoryStore, Retention, Store, StoreError};

    /// What a store of one's own implements ([`Store`]), and what its methods take and give.
    pub mod store {
        /// The bytes of events, snapshots and states.
        pub use bytes::Bytes;
        /// The conformance suite a store of one's own must pass (the built-in ones do).
        pub use shardik_persistence::conformance;
        pub use shardik_persistence::{
            AtomicWrite, DeliveryMark, Fence, JournalCursor, KindDataRemoved, LeaseAcquired,
            LeaseGrant, LeaseInfo, LeaseStillHeld, MarkChange, NewEvent, PersistenceId,
            QueueConfirmation, QueuedMessage, Recovery, Snapshot, SnapshotPlan, StoreFuture,
            StoredEvent, StoredState, TaggedEvent, WriteRefused, WriteResult, check_write,
            open_store, persistence_id, redact_store_url,
        };
        /// What a recovery reads, page by page.
        pub use shardik_persistence::{JournalGap, PageOutcome, RecoveryStep};
    }
}

/// Reliable delivery: a [`ReliableProducer`](delivery::ReliableProducer) sends commands to the
/// entities of a [reliable kind](EntityKind::reliable) until each is confirmed; durable
/// entities process each exactly once, in-memory ones at least once
/// ([`Guarantee`](delivery::Guarantee)).
pub mod delivery {
    pub use crate::delivery::{
        Accepted, ConsumerSettings, Delivery, Guarantee, ProducerError, ProducerOptions,
        ProducerSettings, Reliable, ReliableConsumer, ReliableProducer, SequencedCommand, StreamId,
    };
}
