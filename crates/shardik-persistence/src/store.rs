//! The [`Store`] trait: the calls every store answers (journals, snapshots, durable state,
//! remembered entities, leases, reliable delivery's marks and producer queues), and the
//! future they return.

use std::time::Duration;

use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
    not_kept,
};
use crate::error::{StoreError, WriteResult};
use crate::fence::Fence;
use crate::lease::{LeaseAcquired, LeaseInfo};
use crate::records::{Snapshot, StoredEvent, StoredState, TaggedEvent};
use crate::write::AtomicWrite;

/// A future a store returns (what `Box::pin(async move { .. })` makes; spelt out rather than
/// as `futures::future::BoxFuture`, the same type, so that a store of one's own needs no
/// futures crate to name it).
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Storage for journals, snapshots, durable state and remembered entities.
///
/// Every method is safe to call from many tasks and many processes at once. A method that
/// returns `Err(StoreError)` may or may not have taken effect; `Ok` means durable (committed).
pub trait Store: Send + Sync + 'static {
    /// Writes every write of `writes` in one commit, and answers each in order, as if they were
    /// applied one after the other: a write is refused when its fence's token is older than
    /// the newest accepted in its scope ([`WriteRefused::Fenced`]) or when any of its sequence
    /// numbers exists ([`WriteRefused::SequenceTaken`]), and then none of its events is
    /// written and its fence raises nothing; the others are written, and their fences raise
    /// their scopes' newest tokens.
    ///
    /// [`WriteRefused::Fenced`]: crate::WriteRefused::Fenced
    /// [`WriteRefused::SequenceTaken`]: crate::WriteRefused::SequenceTaken
    fn append(&self, writes: Vec<AtomicWrite>) -> StoreFuture<'_, Vec<WriteResult>>;

    /// The events of `persistence_id` with `from <= seq <= to`, in order, at most `max` of
    /// them. Deleted events are skipped.
    fn read_events<'a>(
        &'a self,
        persistence_id: &'a str,
        from: u64,
        to: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<StoredEvent>>;

    /// The highest sequence number ever written for `persistence_id` (deleted ones included);
    /// 0 when none.
    fn highest_seq<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, u64>;

    /// Deletes the events of `persistence_id` up to `to` inclusive: their payloads go, their
    /// sequence numbers stay taken.
    fn delete_events_to<'a>(&'a self, persistence_id: &'a str, to: u64) -> StoreFuture<'a, ()>;

    /// Events with `tag`, after `offset` in the store's global order, at most `max`.
    fn events_by_tag<'a>(
        &'a self,
        tag: &'a str,
        offset: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<TaggedEvent>>;

    /// Stores `snapshot` (replacing one at the same `seq`).
    fn save_snapshot<'a>(
        &'a self,
        persistence_id: &'a str,
        snapshot: Snapshot,
    ) -> StoreFuture<'a, ()>;

    /// The snapshot of `persistence_id` with the highest `seq`, if any.
    fn latest_snapshot<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<Snapshot>>;

    /// Deletes the snapshots of `persistence_id` with `seq < below`.
    fn delete_snapshots_below<'a>(
        &'a self,
        persistence_id: &'a str,
        below: u64,
    ) -> StoreFuture<'a, ()>;

    /// The durable state of `persistence_id`, if it was ever written.
    fn load_state<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<StoredState>>;

    /// Writes `state` as revision `state.revision`, which must be one more than the stored
    /// revision (1 when none), under `fence` if given (judged as for [`append`]), and applies
    /// `marks` to the entity's delivery marks in the same commit: otherwise the write is
    /// refused ([`WriteRefused::RevisionConflict`], [`WriteRefused::Fenced`],
    /// [`WriteRefused::Malformed`] for marks that change one producer twice) and nothing
    /// changes.
    ///
    /// [`append`]: Store::append
    /// [`WriteRefused::Fenced`]: crate::WriteRefused::Fenced
    /// [`WriteRefused::Malformed`]: crate::WriteRefused::Malformed
    /// [`WriteRefused::RevisionConflict`]: crate::WriteRefused::RevisionConflict
    fn write_state<'a>(
        &'a self,
        persistence_id: &'a str,
        state: StoredState,
        fence: Option<Fence>,
        marks: Vec<MarkChange>,
    ) -> StoreFuture<'a, WriteResult>;

    /// Records that the entities `started` of shard `shard` of kind `kind` now run, and that
    /// `stopped` no longer do (applied after `started`, so an id in both ends stopped).
    fn update_remembered<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
        started: &'a [String],
        stopped: &'a [String],
    ) -> StoreFuture<'a, ()>;

    /// Takes the lease `name` for `owner` for `ttl` (by the store's clock) if it is free,
    /// expired, or already `owner`'s. A lease that changes hands (or is taken again after it
    /// expired or was released) gets a token higher than any it had; one that `owner` still
    /// holds keeps its token and gets `ttl` from now.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for an empty name or owner, or a `ttl` under
    /// 1 ms or over [`lease::MAX_LEASE_TTL`].
    ///
    /// [`lease::MAX_LEASE_TTL`]: crate::lease::MAX_LEASE_TTL
    fn acquire_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, LeaseAcquired>;

    /// Extends `owner`'s tenure `token` of lease `name` to `ttl` from now, keeping the token.
    /// `false` (and nothing changes) when the lease is no longer `owner`'s with `token`: it
    /// expired, was released, or changed hands. An expired lease is never renewed, even when
    /// nobody took it: its holder must acquire it again, for a new token.
    fn renew_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, bool>;

    /// Ends `owner`'s tenure `token` of lease `name`, so that anyone can take it at once.
    /// `false` (and nothing changes) when the lease is not `owner`'s with `token`.
    fn release_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
    ) -> StoreFuture<'a, bool>;

    /// The lease `name` as the store sees it now; `None` when it was never taken.
    fn read_lease<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<LeaseInfo>>;

    /// Whether every process that opens this store (the same SQLite file, the same PostgreSQL
    /// database) sees the same data, so that a lease held in it keeps every other node out.
    /// `cluster.sharding.use-lease = "auto"` takes leases only in such a store. The default
    /// says yes; [`MemoryStore`] says no (only the nodes of one process share one).
    ///
    /// [`MemoryStore`]: crate::MemoryStore
    fn is_shared(&self) -> bool {
        true
    }

    /// The store's identity: chosen at random when the store was created and kept with its
    /// data, so every process that opens the same store (the same SQLite file under any path,
    /// the same PostgreSQL database through any host name) reads the same one, and two
    /// stores never share one. Nodes compare it when one joins another: a durable entity
    /// that moves between nodes keeps its history only if both use the same store.
    fn identity(&self) -> &str;

    /// Where the store is, for messages: `sqlite:PATH`, `postgres://HOST:PORT/DATABASE`
    /// (never a password), `memory:`.
    fn location(&self) -> String;

    /// Stops the store: waits for the writes it already accepted to be answered, then releases
    /// its connections, threads and files. Calls after `close` fail with
    /// [`StoreError::Unavailable`]; closing twice is harmless. Dropping a store without closing
    /// it releases the same things, but in the background.
    ///
    /// The default does nothing, for stores with nothing to release (such as [`MemoryStore`]).
    ///
    /// [`MemoryStore`]: crate::MemoryStore
    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The shards of `kind` with at least one remembered entity, sorted.
    fn remembered_shards<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>>;

    /// The remembered entities of shard `shard` of `kind`, sorted.
    fn remembered_entities<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
    ) -> StoreFuture<'a, Vec<String>>;

    /// Whether the store keeps reliable delivery's data: the marks of [`AtomicWrite::marks`]
    /// and [`write_state`](Store::write_state), and durable producer queues. Reliable delivery
    /// to durable entities, and durable producer queues, refuse a store that does not. The
    /// default says no, and the default methods below refuse; shardik's stores say yes.
    fn keeps_delivery_data(&self) -> bool {
        false
    }

    /// The delivery marks of `persistence_id`, one per producer, sorted by producer.
    fn delivery_marks<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Vec<DeliveryMark>> {
        let _ = persistence_id;
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }

    /// Starts an incarnation of the durable producer `producer`: its epoch, one more than the
    /// last one this store handed out for `producer` (1 the first time), whichever processes
    /// start it at once.
    fn start_producer<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, u64> {
        let _ = producer;
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }

    /// Adds `messages` to `producer`'s queue, all or none. A message whose stream and sequence
    /// number the queue holds already replaces it.
    fn enqueue<'a>(
        &'a self,
        producer: &'a str,
        messages: Vec<QueuedMessage>,
    ) -> StoreFuture<'a, ()> {
        let _ = (producer, messages);
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }

    /// Removes from `producer`'s queue, in one commit, the messages each confirmation covers
    /// (its stream's messages with sequence numbers up to its `up_to`).
    fn confirm_queued<'a>(
        &'a self,
        producer: &'a str,
        confirmations: Vec<QueueConfirmation>,
    ) -> StoreFuture<'a, ()> {
        let _ = (producer, confirmations);
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }

    /// The messages of `producer`'s queue, ordered by stream (epoch, then number) and
    /// sequence number.
    fn queued<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, Vec<QueuedMessage>> {
        let _ = producer;
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }

    /// The names of the leases whose names start with `prefix`, sorted, whether held or not.
    fn lease_names<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<String>> {
        let _ = prefix;
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }

    /// Removes, in one commit, what sharding keeps for entity kind `kind` outside its
    /// entities' own data: its remembered entities, the leases named in `leases` with their
    /// fences, and the messages of every producer queue addressed to `kind`. Journals,
    /// snapshots, durable state and delivery marks stay. Removes nothing, and answers
    /// `Ok(Err(LeaseStillHeld))`, while any lease of `leases` is held.
    fn remove_kind_data<'a>(
        &'a self,
        kind: &'a str,
        leases: &'a [String],
    ) -> StoreFuture<'a, Result<KindDataRemoved, LeaseStillHeld>> {
        let _ = (kind, leases);
        Box::pin(std::future::ready(Err(not_kept(&self.location()))))
    }
}
