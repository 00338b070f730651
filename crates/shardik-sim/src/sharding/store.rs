//! The simulated store: a real [`MemoryStore`] shared by every node (it outlives crashes, as a
//! database does), reached through calls that take time, during which the calling node may
//! crash. What a call does once it reaches the store is the store's own code; what the model
//! adds is when, and whether, it gets there:
//!
//! * a write reaches the store `store_latency` after it was sent; if its node crashed
//!   meanwhile, a coin decides whether the request had already left (it commits anyway, or
//!   it never arrives);
//! * the answer reaches the entity `store_latency` later, if its node still runs;
//! * a snapshot is three calls in a row (save, delete older snapshots, delete older events),
//!   as the runtime's snapshot task makes them; a crash stops the rest.
//!
//! The crash points of [`CrashPoints`](super::durable::CrashPoints) make the writing node crash
//! at exactly those moments; the world restarts it after a while.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::coordinator::LeasesRead;
use shardik_core::sharding::{LeaseAnswer, LeaseKey, LeaseRequest, ShardId};
use shardik_persistence::{AtomicWrite, MemoryStore, WriteResult};

use super::durable::{DurableSpec, SnapshotTask};
use super::producer::{CallAnswer, ProducerCall};
use crate::world::NodeId;

/// A node incarnation that made a store call.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) id: NodeId,
    pub(crate) node: UniqueAddress,
}

/// Something the store model does at its time.
#[derive(Clone, Debug)]
pub(crate) enum StoreOp {
    /// A journal write reaches the store.
    Append {
        from: Caller,
        token: u64,
        write: AtomicWrite,
    },
    /// The store's answer reaches the entity.
    Answer {
        to: Caller,
        token: u64,
        result: WriteResult,
    },
    /// Step `step` (0 save, 1 delete snapshots, 2 delete events) of a snapshot reaches the
    /// store.
    Snapshot {
        from: Caller,
        task: SnapshotTask,
        step: u8,
    },
    /// A crash point chosen when a write left: the node crashes with it in flight.
    Crash { node: Caller },
    /// A node a crash point took down starts again.
    Restart { id: NodeId },
    /// A lease call reaches the store.
    Lease {
        from: Caller,
        kind: usize,
        request: LeaseRequest<LeaseKey>,
    },
    /// A read of shard leases reaches the store.
    ReadLeases {
        from: Caller,
        kind: usize,
        id: u64,
        shards: Vec<ShardId>,
    },
    /// The store's answer to a read of shard leases reaches its node.
    LeasesRead {
        to: Caller,
        kind: usize,
        id: u64,
        answer: LeasesRead,
    },
    /// A reliable producer's call to its durable queue reaches the store.
    ProducerCall {
        from: Caller,
        /// The producer's incarnation on its node.
        incarnation: u64,
        token: u64,
        call: ProducerCall,
    },
    /// The store's answer to a producer's call reaches its node.
    ProducerAnswer {
        to: Caller,
        incarnation: u64,
        token: u64,
        answer: CallAnswer,
    },
    /// The store's answer to a lease call reaches its node.
    LeaseAnswer {
        to: Caller,
        kind: usize,
        key: LeaseKey,
        id: u64,
        answer: LeaseAnswer,
    },
}

/// What the store model saw over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Writes the store committed.
    pub committed: usize,
    /// Writes the store refused (their numbers were taken).
    pub refused: usize,
    /// Writes whose node had crashed that still reached the store and committed.
    pub committed_after_crash: usize,
    /// Writes whose node crashed before they reached the store, and which never did.
    pub lost_in_crash: usize,
    /// Crashes with a write in flight.
    pub crashes_write_in_flight: usize,
    /// Of those, writes of two or more events (caught between events).
    pub crashes_between_events: usize,
    /// Crashes after a commit, before the entity's reply.
    pub crashes_before_reply: usize,
    /// Crashes between two steps of a snapshot.
    pub crashes_during_snapshot: usize,
    /// Snapshots saved.
    pub snapshots_saved: usize,
    /// Snapshot steps that never ran because their node had crashed.
    pub snapshot_steps_cut: usize,
    /// Leases granted (acquisitions that succeeded).
    pub leases_granted: usize,
    /// Acquisitions refused because another node held the lease.
    pub leases_held_by_other: usize,
    /// Renewals refused (the lease was no longer the caller's).
    pub renewals_refused: usize,
    /// Writes refused by a fence (their lease token was older than one already written).
    pub fenced_writes: usize,
    /// Calls of reliable producers to their durable queues that reached the store.
    pub queue_calls: usize,
    /// Such calls whose node crashed before they reached the store, and which never did.
    pub queue_calls_lost_in_crash: usize,
    /// Crashes of a producer's node with a batch of offers on its way to the queue, or stored
    /// and not yet answered.
    pub crashes_storing_offers: usize,
}

/// The store, the calls on their way, and the crash points still to spend.
pub(crate) struct SimStore {
    pub(crate) store: Arc<MemoryStore>,
    /// The store's clock for lease expiry: the simulated time, set before each call.
    clock: Arc<AtomicU64>,
    pub(crate) spec: DurableSpec,
    rng: ChaCha8Rng,
    ops: BTreeMap<(Instant, u64), StoreOp>,
    next: u64,
    crashes_left: usize,
    pub(crate) stats: StoreStats,
    /// Nodes cut off from the store, until when: their calls do not reach it meanwhile
    /// (lease calls and reads go unanswered, journal writes wait for the cut to end).
    cut: BTreeMap<NodeId, Instant>,
}

impl SimStore {
    pub(crate) fn new(spec: DurableSpec, seed: u64) -> Self {
        let clock = Arc::new(AtomicU64::new(0));
        let reading = Arc::clone(&clock);
        SimStore {
            store: Arc::new(MemoryStore::with_clock(move || {
                Duration::from_nanos(reading.load(Ordering::Relaxed))
            })),
            clock,
            crashes_left: spec.crash_points.limit,
            spec,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5_7042_0003),
            ops: BTreeMap::new(),
            next: 0,
            stats: StoreStats::default(),
            cut: BTreeMap::new(),
        }
    }

    /// Cuts node `id` off from the store until `until`.
    pub(crate) fn cut(&mut self, id: NodeId, until: Instant) {
        let end = self.cut.entry(id).or_insert(until);
        *end = (*end).max(until);
    }

    /// Until when node `id`'s calls cannot reach the store, if they cannot at `now`.
    pub(crate) fn cut_until(&self, id: NodeId, now: Instant) -> Option<Instant> {
        self.cut.get(&id).copied().filter(|until| *until > now)
    }

    /// One store call's time.
    fn latency(&mut self) -> Duration {
        let base = self.spec.store_latency.as_micros().max(2) as u64;
        Duration::from_micros(self.rng.random_range(base / 2..=base + base / 2))
    }

    pub(crate) fn schedule(&mut self, at: Instant, op: StoreOp) {
        self.next += 1;
        self.ops.insert((at, self.next), op);
    }

    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.ops.first_key_value().map(|((t, _), _)| *t)
    }

    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<StoreOp> {
        let (&(t, n), _) = self.ops.first_key_value()?;
        (t <= now).then(|| self.ops.remove(&(t, n)).expect("present"))
    }

    /// Whether a crash point with chance `p` fires now (and spends one crash if so).
    pub(crate) fn crash_point(&mut self, p: f64) -> bool {
        if self.crashes_left == 0 || p <= 0.0 || !self.rng.random_bool(p.min(1.0)) {
            return false;
        }
        self.crashes_left -= 1;
        true
    }

    /// Whether a call whose node crashed had left before the crash.
    pub(crate) fn had_left(&mut self) -> bool {
        self.rng.random_bool(0.5)
    }

    /// A write leaves `from`: it reaches the store after a call's time, unless the crash
    /// point "write in flight" fires and takes the node down half-way.
    pub(crate) fn send_write(
        &mut self,
        now: Instant,
        from: Caller,
        token: u64,
        write: AtomicWrite,
    ) {
        let d = self.latency();
        if self.crash_point(self.spec.crash_points.write_in_flight) {
            self.stats.crashes_write_in_flight += 1;
            if write.events.len() > 1 {
                self.stats.crashes_between_events += 1;
            }
            self.schedule(now + d / 2, StoreOp::Crash { node: from.clone() });
        }
        self.schedule(now + d, StoreOp::Append { from, token, write });
    }

    /// A producer's call to its queue leaves `from`: it reaches the store after a call's time;
    /// a batch of offers may meet the crash point "write in flight" on its way.
    pub(crate) fn send_producer_call(
        &mut self,
        now: Instant,
        from: Caller,
        incarnation: u64,
        token: u64,
        call: ProducerCall,
    ) {
        let d = self.latency();
        if matches!(call, ProducerCall::Enqueue(_))
            && self.crash_point(self.spec.crash_points.write_in_flight)
        {
            self.stats.crashes_storing_offers += 1;
            self.schedule(now + d / 2, StoreOp::Crash { node: from.clone() });
        }
        let op = StoreOp::ProducerCall {
            from,
            incarnation,
            token,
            call,
        };
        self.schedule(now + d, op);
    }

    /// The answer to a producer's call leaves the store.
    pub(crate) fn answer_producer(
        &mut self,
        now: Instant,
        to: Caller,
        incarnation: u64,
        token: u64,
        answer: CallAnswer,
    ) {
        let d = self.latency();
        let op = StoreOp::ProducerAnswer {
            to,
            incarnation,
            token,
            answer,
        };
        self.schedule(now + d, op);
    }

    /// The answer to a write leaves the store for its entity.
    pub(crate) fn answer(&mut self, now: Instant, to: Caller, token: u64, result: WriteResult) {
        let d = self.latency();
        self.schedule(now + d, StoreOp::Answer { to, token, result });
    }

    /// Step `step` of a snapshot leaves `from`.
    pub(crate) fn snapshot_step(
        &mut self,
        now: Instant,
        from: Caller,
        task: SnapshotTask,
        step: u8,
    ) {
        let d = self.latency();
        self.schedule(now + d, StoreOp::Snapshot { from, task, step });
    }

    /// Sets the store's lease clock to the simulated `now` (it never goes back).
    pub(crate) fn set_clock(&self, now: Instant) {
        self.clock.fetch_max(now.as_nanos(), Ordering::Relaxed);
    }

    /// A lease call leaves `from`; it reaches the store after a call's time.
    pub(crate) fn send_lease(
        &mut self,
        now: Instant,
        from: Caller,
        kind: usize,
        request: LeaseRequest<LeaseKey>,
    ) {
        let d = self.latency();
        self.schedule(
            now + d,
            StoreOp::Lease {
                from,
                kind,
                request,
            },
        );
    }

    /// A read of shard leases leaves `from`; it reaches the store after a call's time.
    pub(crate) fn send_read(
        &mut self,
        now: Instant,
        from: Caller,
        kind: usize,
        id: u64,
        shards: Vec<ShardId>,
    ) {
        let d = self.latency();
        self.schedule(
            now + d,
            StoreOp::ReadLeases {
                from,
                kind,
                id,
                shards,
            },
        );
    }

    /// The answer to a read of shard leases leaves the store.
    pub(crate) fn answer_read(
        &mut self,
        now: Instant,
        to: Caller,
        kind: usize,
        id: u64,
        answer: LeasesRead,
    ) {
        let d = self.latency();
        self.schedule(
            now + d,
            StoreOp::LeasesRead {
                to,
                kind,
                id,
                answer,
            },
        );
    }

    /// The answer to a lease call leaves the store.
    pub(crate) fn answer_lease(
        &mut self,
        now: Instant,
        to: Caller,
        kind: usize,
        key: LeaseKey,
        id: u64,
        answer: LeaseAnswer,
    ) {
        let d = self.latency();
        self.schedule(
            now + d,
            StoreOp::LeaseAnswer {
                to,
                kind,
                key,
                id,
                answer,
            },
        );
    }

    /// A node a crash point took down comes back after the configured time.
    pub(crate) fn restart_later(&mut self, now: Instant, id: NodeId) {
        let at = now + self.spec.crash_points.restart_after;
        self.schedule(at, StoreOp::Restart { id });
    }
}
