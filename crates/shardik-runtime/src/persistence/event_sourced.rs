//! Event-sourced entities (Akka's `EventSourcedBehavior`): a command handler that decides and
//! answers with an [`Effect`], an event handler that applies events to the state, recovery
//! from the latest snapshot and the events after it, snapshots every N events.
//!
//! The adapter [`EventSourced`] is an ordinary sharded [`Entity`]: commands to one entity are
//! handled one at a time, so while a command's events are being written the entity's next
//! commands wait (Akka stashes them), and the events of one entity are written in order. The
//! events of many entities share the node's journal writer and are committed together.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_persistence::journaled::{PageOutcome, RecoveryStep};
use shardik_persistence::{
    AtomicWrite, DeliveryMark, Fence, JournalCursor, MarkChange, Recovery, Retention, Snapshot,
    SnapshotPlan, StoredEvent, persistence_id,
};

use super::adapter::{
    EventAdapterError, EventAdapterFn, EventManifest, EventReader, FIRST_EVENT_VERSION,
    JournalEvent,
};
use super::after_write::AfterWrite;
use super::codec::StorageCodec;
use super::store::Persistence;
use crate::delivery::{Guarantee, ReliableConsumer};
use crate::sharding::{
    Codec, Entity, EntityContext, EntityFailure, EntityKind, EntityTypeKey, Postcard, ReplyTo,
    done_or_panic,
};

/// An entity whose state is the fold of its events (Akka's `EventSourcedBehavior`). The
/// entity value is the state: [`handle_command`](Self::handle_command) reads it and decides,
/// [`apply_event`](Self::apply_event) is the only place it changes.
///
/// Replies go through the [`ReplyTo`] a command carries, once what the command persisted is
/// durable: [`Effect::then_reply`] (Akka's `thenReply`). A refusal is a reply too (a
/// `Result` with the entity's own error type), and a command that answers nothing says
/// [`Effect::none`].
///
/// ```
/// use serde::{Deserialize, Serialize};
/// # use shardik_runtime::facade as shardik;
/// use shardik::ReplyTo;
/// use shardik::persistence::{Effect, EventSourcedContext, EventSourcedEntity};
///
/// #[derive(Serialize, Deserialize)]
/// enum Cmd {
///     Add(u64, ReplyTo<u64>),
///     Get(ReplyTo<u64>),
///     Reset,
/// }
/// #[derive(Serialize, Deserialize)]
/// enum Event {
///     Added(u64),
///     Reset,
/// }
///
/// #[derive(Default)]
/// struct Counter(u64);
///
/// impl EventSourcedEntity for Counter {
///     type Command = Cmd;
///     type Event = Event;
///     fn handle_command(&self, cmd: Cmd, _ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
///         match cmd {
///             // Self::persist, not Effect::persist: with the state's type known, the reply's
///             // closure needs no annotation.
///             Cmd::Add(n, reply_to) => Self::persist(Event::Added(n)).then_reply(reply_to, |s| s.0),
///             Cmd::Get(reply_to) => Effect::reply(reply_to, self.0),
///             Cmd::Reset if self.0 == 0 => Effect::none(),
///             Cmd::Reset => Self::persist(Event::Reset),
///         }
///     }
///     fn apply_event(&mut self, event: &Event) {
///         match event {
///             Event::Added(n) => self.0 += n,
///             Event::Reset => self.0 = 0,
///         }
///     }
/// }
///
/// // The handlers are functions of values: test them without a node or a store.
/// let mut ctx = EventSourcedContext::<Counter>::detached("c1");
/// let mut state = Counter::default();
/// let (reply_to, answer) = ReplyTo::detached();
/// let effect = state.handle_command(Cmd::Add(2, reply_to), &mut ctx);
/// assert_eq!(effect.events().len(), 1);
/// effect.run(&mut state); // applies the events, then replies
/// assert_eq!(answer.take(), Some(2));
/// ```
pub trait EventSourcedEntity: Sized + Send + 'static {
    /// What the entity is told or asked (answers go through a [`ReplyTo`] inside).
    type Command: Serialize + DeserializeOwned + Send + 'static;
    /// What it records.
    type Event: Serialize + DeserializeOwned + Send + 'static;

    /// Decides what `cmd` does: events to persist and what to do once they are written, or
    /// nothing to persist. Must not change the state (the state changes only by
    /// [`apply_event`](Self::apply_event), so that recovery rebuilds exactly what was
    /// answered).
    fn handle_command(
        &self,
        cmd: Self::Command,
        ctx: &mut EventSourcedContext<Self>,
    ) -> Effect<Self>;

    /// Applies one event to the state: after the event is written, and during recovery.
    fn apply_event(&mut self, event: &Self::Event);

    /// Tags to find `event` by across entities (projections). None by default.
    fn tags(&self, _event: &Self::Event) -> Vec<String> {
        Vec::new()
    }

    /// [`Effect::persist`] with the state's type known, so that the closures of
    /// [`then_reply`](Effect::then_reply) and [`then_run`](Effect::then_run) need no type
    /// annotation (`Effect::persist(e).then_reply(r, |s| ..)` leaves Rust without the type of
    /// `s`). Not meant to be implemented.
    fn persist(event: Self::Event) -> Effect<Self> {
        Effect::persist(event)
    }

    /// [`Effect::persist_all`] with the state's type known (see [`persist`](Self::persist)).
    /// Not meant to be implemented.
    fn persist_all(events: impl IntoIterator<Item = Self::Event>) -> Effect<Self> {
        Effect::persist_all(events)
    }
}

/// The context an event-sourced command handler gets: the entity's id, timers, messages to
/// itself, passivation (see [`EntityContext`]).
pub type EventSourcedContext<B> = EntityContext<EventSourced<B>>;

/// What a command handler decided (Akka's `Effect`): events to persist, and what to do once
/// they are written (replies made from the new state, side effects), in the order given. To
/// stop the entity after the effect, call `ctx.passivate()` in the handler (Akka's
/// `thenStop`).
///
/// A write the store refuses or loses fails the command instead: nothing after it runs, and
/// an asker waiting on the command gets
/// [`ShardingError::EntityFailed`](crate::sharding::ShardingError::EntityFailed).
#[must_use = "an effect does nothing unless returned from the command handler"]
pub struct Effect<B: EventSourcedEntity> {
    events: Vec<B::Event>,
    then: AfterWrite<B>,
}

impl<B: EventSourcedEntity> Effect<B> {
    /// Persists `event` (then what [`then_reply`](Self::then_reply) and
    /// [`then_run`](Self::then_run) add). In a command handler, `Self::persist` is the same
    /// with the state's type known.
    pub fn persist(event: B::Event) -> Self {
        Effect {
            events: vec![event],
            then: AfterWrite::new(),
        }
    }

    /// Persists `events` atomically (all or none), in order.
    pub fn persist_all(events: impl IntoIterator<Item = B::Event>) -> Self {
        Effect {
            events: events.into_iter().collect(),
            then: AfterWrite::new(),
        }
    }

    /// Persists nothing and answers nothing (Akka's `Effect.none`): a command with no
    /// `ReplyTo`, or one whose `ReplyTo` is kept to answer later.
    pub fn none() -> Self {
        Effect {
            events: Vec::new(),
            then: AfterWrite::new(),
        }
    }

    /// Persists nothing and answers `answer` at once (Akka's `Effect.reply`).
    pub fn reply<R, C>(reply_to: ReplyTo<R, C>, answer: R) -> Self
    where
        R: Serialize + Send + 'static,
        C: Codec + Default + 'static,
    {
        Effect::none().then_reply(reply_to, move |_| answer)
    }

    /// Once the events are written and applied, answers what `answer` makes of the new state
    /// (Akka's `thenReply`).
    pub fn then_reply<R, C>(
        mut self,
        reply_to: ReplyTo<R, C>,
        answer: impl FnOnce(&B) -> R + Send + 'static,
    ) -> Self
    where
        R: Serialize + Send + 'static,
        C: Codec + Default + 'static,
    {
        self.then.reply(reply_to, answer);
        self
    }

    /// Once the events are written and applied, runs `f` on the new state (Akka's
    /// `thenRun`): a side effect, such as telling another entity.
    pub fn then_run(mut self, f: impl FnOnce(&B) + Send + 'static) -> Self {
        self.then.run(f);
        self
    }

    /// The events this effect persists, in order (none for a reply alone).
    pub fn events(&self) -> &[B::Event] {
        &self.events
    }

    /// What the runtime does once the events are written, on a state value and without a
    /// store: applies the events to `state` with [`apply_event`](EventSourcedEntity::apply_event),
    /// then runs what comes after (replies, side effects) on the result. For unit tests of
    /// command handlers (with [`ReplyTo::detached`]).
    pub fn run(self, state: &mut B) {
        for event in &self.events {
            state.apply_event(event);
        }
        self.then.on(state);
    }
}

/// What the entities of one event-sourced kind share.
struct Shared<B: EventSourcedEntity> {
    kind: Arc<str>,
    /// The state before any event (recovery goes back to it when it starts over).
    initial: Arc<dyn Fn(&str) -> B + Send + Sync>,
    persistence: Persistence,
    /// The codec new events and snapshots are written with.
    events: StorageCodec,
    /// How stored events, of this version or another, become events of the current type.
    reader: EventReader<B::Event>,
    snapshots: Option<(Retention, StateCodec<B>)>,
    /// Set by the test kit only: copies of the events this kind writes, as written, so that
    /// a test sees each command's events come back through the codec. Unset (and never
    /// locked) on a node.
    witness: OnceLock<Mutex<Vec<StoredEvent>>>,
}

/// Encodes and decodes the state for snapshots (only for kinds that snapshot, whose state is
/// then serde).
struct StateCodec<B> {
    encode: fn(&StorageCodec, &B) -> Result<Vec<u8>, String>,
    decode: fn(&StorageCodec, &[u8]) -> Result<B, String>,
}

/// An event-sourced entity as a sharded entity: the state, how far its journal goes, and
/// whether it was recovered yet (recovery runs before the first command of an incarnation).
pub struct EventSourced<B: EventSourcedEntity> {
    state: B,
    /// Where the journal stands, once recovered (`None`: recovery has not run yet).
    journal: Option<JournalCursor>,
    shared: Arc<Shared<B>>,
}

impl<B: EventSourcedEntity> EntityKind<EventSourced<B>, Postcard> {
    /// The event-sourced kind of `key`: `initial` makes an entity's state before any event,
    /// and events go to `persistence`'s store under the persistence id `"{kind}|{entity id}"`.
    pub fn event_sourced(
        key: EntityTypeKey<EventSourced<B>>,
        persistence: &Persistence,
        initial: impl Fn(&str) -> B + Send + Sync + 'static,
    ) -> Self {
        EventSourcedKind::new(key, persistence, initial).into_kind()
    }
}

/// An event-sourced kind being configured: snapshots and the storage codec, then
/// [`into_kind`](Self::into_kind) for the usual [`EntityKind`] options.
pub struct EventSourcedKind<B: EventSourcedEntity> {
    key: EntityTypeKey<EventSourced<B>>,
    persistence: Persistence,
    initial: Arc<dyn Fn(&str) -> B + Send + Sync>,
    events: StorageCodec,
    event_version: u32,
    adapter: Option<EventAdapterFn<B::Event>>,
    snapshots: Option<(Retention, StateCodec<B>)>,
}

impl<B: EventSourcedEntity> EventSourcedKind<B> {
    /// As [`EntityKind::event_sourced`], before the options below.
    pub fn new(
        key: EntityTypeKey<EventSourced<B>>,
        persistence: &Persistence,
        initial: impl Fn(&str) -> B + Send + Sync + 'static,
    ) -> Self {
        EventSourcedKind {
            key,
            persistence: persistence.clone(),
            initial: Arc::new(initial),
            events: StorageCodec::default(),
            event_version: FIRST_EVENT_VERSION,
            adapter: None,
            snapshots: None,
        }
    }

    /// Snapshots the state after every `every` events, keeps the newest `keep` snapshots,
    /// and, with `delete_events`, deletes the events older than the oldest kept snapshot
    /// (their sequence numbers stay taken). Recovery then starts from the newest snapshot.
    pub fn with_snapshots(mut self, retention: Retention) -> Self
    where
        B: Serialize + DeserializeOwned,
    {
        let retention = retention.normalized();
        self.snapshots = Some((
            retention,
            StateCodec {
                encode: |codec, state| codec.encode(state),
                decode: |codec, bytes| codec.decode(bytes),
            },
        ));
        self
    }

    /// Stores events and snapshots as JSON instead of postcard: larger, but readable and
    /// tolerant of added optional fields.
    pub fn with_json_storage(mut self) -> Self {
        self.events = StorageCodec::Json;
        self
    }

    /// Writes new events and snapshots with `codec` (postcard by default). Events already
    /// stored keep being read with the codec their manifest names, so a kind can move from
    /// postcard to [`StorageCodec::Cbor`] without touching its journals; snapshots are read
    /// with the kind's codec, so a change of codec needs the old snapshots deleted (recovery
    /// then replays the events, which must still be there).
    pub fn with_storage_codec(mut self, codec: StorageCodec) -> Self {
        self.events = codec;
        self
    }

    /// The version of the event type new events are written as (1 by default), stored with
    /// each event. Raise it when the event type changes in a way its codec cannot read across
    /// (docs/EVOLUTION.md), and give an [adapter](Self::with_event_adapter) for the older ones.
    pub fn with_event_version(mut self, version: u32) -> Self {
        self.event_version = version;
        self
    }

    /// Reads events of other versions through `adapter` (Akka's read-side `EventAdapter`):
    /// during recovery, each stored event whose version is not the
    /// [current one](Self::with_event_version) is handed over as it is stored (its bytes,
    /// codec and version; [`JournalEvent::decode`] reads it as an old type kept for the
    /// purpose), and the adapter returns the events of the current type it stands for: one
    /// (upcast), several (split), or none (dropped). An error fails the recovery, and the
    /// journal is left as it was. Events of the current version are decoded directly.
    ///
    /// Versions newer than the current one reach the adapter too: a node of the previous
    /// release that recovers an entity a newer node wrote to, during a rolling update.
    pub fn with_event_adapter(
        mut self,
        adapter: impl Fn(&JournalEvent<'_>) -> Result<Vec<B::Event>, EventAdapterError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.adapter = Some(Arc::new(adapter));
        self
    }

    /// The kind, for the usual options (role, passivation, …) and `Sharding::init`.
    pub fn into_kind(self) -> EntityKind<EventSourced<B>, Postcard> {
        let initial = self.initial;
        let shared = Arc::new(Shared {
            kind: self.key.name().into(),
            initial: Arc::clone(&initial),
            persistence: self.persistence,
            events: self.events,
            reader: EventReader::new(
                EventManifest {
                    codec: self.events,
                    version: self.event_version,
                },
                self.adapter,
            ),
            snapshots: self.snapshots,
            witness: OnceLock::new(),
        });
        let store = Arc::clone(shared.persistence.store());
        EntityKind::for_key(self.key, move |id| EventSourced {
            state: initial(id),
            journal: None,
            shared: Arc::clone(&shared),
        })
        // With `use-lease`, the shards' leases live in the store the journal is in, where
        // the fences of the entities' writes are checked.
        .with_lease_store(store)
    }
}

fn failure(what: &str, e: impl std::fmt::Display) -> EntityFailure {
    EntityFailure(format!("{what}: {e}"))
}

impl<B: EventSourcedEntity> EventSourced<B> {
    /// The state (after recovery; before it, the initial state).
    pub fn state(&self) -> &B {
        &self.state
    }

    /// The sequence number of the last event applied.
    pub fn last_seq(&self) -> u64 {
        self.journal.as_ref().map_or(0, JournalCursor::seq)
    }

    /// Recovers the state from the store unless this incarnation has already.
    pub(crate) async fn recovered(&mut self, entity_id: &str) -> Result<(), EntityFailure> {
        if self.journal.is_none() {
            self.journal = Some(self.recover(entity_id).await?);
        }
        Ok(())
    }

    /// From now on, keeps a copy of every event the entities of this kind write (for the
    /// test kit, which reads them back with [`witnessed`](Self::witnessed)).
    pub(crate) fn witness_writes(&self) {
        self.shared.witness.get_or_init(Mutex::default);
    }

    /// The events written since the last call, decoded from their stored form as recovery
    /// decodes them (adapter included).
    pub(crate) fn witnessed(&self, entity_id: &str) -> Result<Vec<B::Event>, String> {
        let Some(witness) = self.shared.witness.get() else {
            return Ok(Vec::new());
        };
        let written = std::mem::take(&mut *witness.lock().unwrap_or_else(|e| e.into_inner()));
        let pid = persistence_id(&self.shared.kind, entity_id);
        let mut events = Vec::with_capacity(written.len());
        for stored in &written {
            events.extend(self.shared.reader.read(&pid, stored)?);
        }
        Ok(events)
    }

    /// The state encoded and decoded with the kind's snapshot codec, or `None` when the kind
    /// takes no snapshots (its state then needs no codec).
    pub(crate) fn state_round_trip(&self) -> Option<Result<B, String>> {
        let (_, codec) = self.shared.snapshots.as_ref()?;
        let codec_of_kind = &self.shared.events;
        Some(
            (codec.encode)(codec_of_kind, &self.state)
                .and_then(|bytes| (codec.decode)(codec_of_kind, &bytes)),
        )
    }

    /// Rebuilds the state as the shared [`Recovery`] walks the store: the newest snapshot (if
    /// the kind snapshots), then every event after it, in order. A gap in the sequence numbers
    /// starts over from the newest snapshot, and fails if it stays.
    async fn recover(&mut self, entity_id: &str) -> Result<JournalCursor, EntityFailure> {
        let shared = Arc::clone(&self.shared);
        let store = shared.persistence.store();
        let pid = persistence_id(&shared.kind, entity_id);
        let mut recovery = Recovery::new(Arc::clone(&pid), shared.snapshots.is_some());
        loop {
            match recovery.step() {
                RecoveryStep::ReadSnapshot => {
                    let snapshot = store
                        .latest_snapshot(&pid)
                        .await
                        .map_err(|e| failure("recovery failed reading the snapshot", e))?;
                    self.state = match (&snapshot, &shared.snapshots) {
                        (Some(snapshot), Some((_, codec))) => {
                            (codec.decode)(&shared.events, &snapshot.payload).map_err(|e| {
                                failure(
                                    &format!("{pid}: snapshot at {} does not decode", snapshot.seq),
                                    e,
                                )
                            })?
                        }
                        _ => (shared.initial)(entity_id),
                    };
                    recovery.snapshot_read(snapshot.map(|s| s.seq));
                }
                RecoveryStep::ReadEvents { from, max } => {
                    let page = store
                        .read_events(&pid, from, u64::MAX, max)
                        .await
                        .map_err(|e| failure("recovery failed reading events", e))?;
                    let outcome = recovery
                        .events_read(&page)
                        .map_err(|gap| EntityFailure(gap.to_string()))?;
                    if outcome == PageOutcome::Apply {
                        for stored in &page {
                            let events = shared
                                .reader
                                .read(&pid, stored)
                                .map_err(|e| failure("recovery failed", e))?;
                            for event in &events {
                                self.state.apply_event(event);
                            }
                        }
                    }
                }
                RecoveryStep::Done => return Ok(recovery.finish()),
            }
        }
    }

    /// Writes `events` as the next entries of the journal, with `marks` (reliable delivery's,
    /// in the same commit); applies the events once written. Writes nothing when there is
    /// nothing to write.
    async fn persist(
        &mut self,
        events: Vec<B::Event>,
        fence: Option<Fence>,
        marks: Vec<MarkChange>,
    ) -> Result<(), EntityFailure> {
        if events.is_empty() && marks.is_empty() {
            return Ok(());
        }
        let shared = Arc::clone(&self.shared);
        let journal = self.journal.as_mut().expect("recovered before persisting");
        let pid = Arc::clone(journal.persistence_id());
        let mut encoded = Vec::with_capacity(events.len());
        for (seq, event) in (journal.seq() + 1..).zip(&events) {
            let payload = shared
                .events
                .encode(event)
                .map_err(|e| failure(&format!("{pid}: event {seq} does not encode"), e))?;
            encoded.push((Bytes::from(payload), self.state.tags(event)));
        }
        let write = AtomicWrite {
            fence,
            ..journal
                .next_write(&shared.reader.written_manifest, encoded)
                .with_marks(marks)
        };
        let witnessed = shared.witness.get().map(|_| write.events.clone());
        let written = shared
            .persistence
            .journal()
            .write(write)
            .await
            .map_err(|e| failure("journal write failed", e))?;
        written.map_err(|refused| failure("journal write refused", refused))?;
        if let (Some(witness), Some(events)) = (shared.witness.get(), witnessed) {
            let stored = events.into_iter().map(|e| StoredEvent {
                seq: e.seq,
                payload: e.payload,
                manifest: e.manifest,
                tags: e.tags,
            });
            witness
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(stored);
        }
        for event in &events {
            self.state.apply_event(event);
        }
        let retention = shared.snapshots.as_ref().map(|(r, _)| r);
        if let Some(plan) = journal.written(events.len(), retention) {
            let (_, codec) = shared.snapshots.as_ref().expect("a plan needs a retention");
            self.snapshot(pid, plan, codec);
        }
        Ok(())
    }

    /// Carries out `plan` in the background: saves the snapshot, then applies the retention.
    /// A failed snapshot costs only a longer recovery, so it is logged, not fatal.
    fn snapshot(&self, pid: Arc<str>, plan: SnapshotPlan, codec: &StateCodec<B>) {
        let payload = match (codec.encode)(&self.shared.events, &self.state) {
            Ok(p) => Bytes::from(p),
            Err(e) => {
                tracing::warn!(%pid, error = %e, "state does not encode; no snapshot");
                return;
            }
        };
        let store = Arc::clone(self.shared.persistence.store());
        crate::task::spawn(async move {
            let seq = plan.seq;
            if let Err(e) = store.save_snapshot(&pid, Snapshot { seq, payload }).await {
                tracing::warn!(%pid, seq, error = %e, "snapshot not saved");
                return;
            }
            if let Err(e) = store
                .delete_snapshots_below(&pid, plan.delete_snapshots_below)
                .await
            {
                tracing::warn!(%pid, error = %e, "old snapshots not deleted");
            }
            if let Some(to) = plan.delete_events_to
                && let Err(e) = store.delete_events_to(&pid, to).await
            {
                tracing::warn!(%pid, error = %e, "events before the snapshot not deleted");
            }
        });
    }
}

impl<B: EventSourcedEntity> Entity for EventSourced<B> {
    type Command = B::Command;

    async fn handle(&mut self, cmd: B::Command, ctx: &mut EntityContext<Self>) {
        done_or_panic(self.try_handle(cmd, ctx).await)
    }

    async fn try_handle(
        &mut self,
        cmd: B::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        self.recovered(ctx.entity_id()).await?;
        let Effect { events, then } = self.state.handle_command(cmd, ctx);
        let fence = ctx.fence().cloned();
        // On a failed write, `then` is dropped unanswered: the asker hears of the failure.
        self.persist(events, fence, Vec::new()).await?;
        then.on(&self.state);
        Ok(())
    }
}

impl<B: EventSourcedEntity> ReliableConsumer for EventSourced<B> {
    const GUARANTEE: Guarantee = Guarantee::ExactlyOnce;

    async fn recover_marks(&mut self, entity_id: &str) -> Result<Vec<DeliveryMark>, EntityFailure> {
        self.recovered(entity_id).await?;
        let pid = persistence_id(&self.shared.kind, entity_id);
        super::store::delivery_marks(self.shared.persistence.store(), &pid).await
    }

    async fn handle_delivered(
        &mut self,
        cmd: B::Command,
        marks: Vec<MarkChange>,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        self.recovered(ctx.entity_id()).await?;
        let Effect { events, then } = self.state.handle_command(cmd, ctx);
        let fence = ctx.fence().cloned();
        // The command's mark goes in the write of its events (alone, if it has none), so the
        // command counts as processed exactly when what it did is durable.
        self.persist(events, fence, marks).await?;
        then.on(&self.state);
        Ok(())
    }
}
