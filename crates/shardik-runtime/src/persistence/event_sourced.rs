//! Event-sourced entities (Akka's `EventSourcedBehavior`): a command handler that decides and
//! answers with an [`Effect`], an event handler that applies events to the state, recovery
//! from the latest snapshot and the events after it, snapshots every N events.
//!
//! The adapter [`EventSourced`] is an ordinary sharded [`Entity`]: commands to one entity are
//! handled one at a time, so while a command's events are being written the entity's next
//! commands wait (Akka stashes them), and the events of one entity are written in order. The
//! events of many entities share the node's journal writer and are committed together.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_persistence::{AtomicWrite, NewEvent, Snapshot, persistence_id};

use super::codec::StorageCodec;
use super::{Persistence, ReplyFromState};
use crate::sharding::{
    Entity, EntityContext, EntityFailure, EntityKind, EntityTypeKey, Postcard, reply_or_panic,
};

/// An entity whose state is the fold of its events (Akka's `EventSourcedBehavior`). The
/// entity value is the state: [`handle_command`](Self::handle_command) reads it and decides,
/// [`apply_event`](Self::apply_event) is the only place it changes.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use shardik_runtime::persistence::{Effect, EventSourcedContext, EventSourcedEntity};
///
/// #[derive(Serialize, Deserialize)]
/// enum Cmd { Add(u64), Get }
/// #[derive(Serialize, Deserialize)]
/// struct Added(u64);
///
/// #[derive(Default, Serialize, Deserialize)]
/// struct Counter(u64);
///
/// impl EventSourcedEntity for Counter {
///     type Command = Cmd;
///     type Event = Added;
///     type Reply = u64;
///     fn handle_command(&self, cmd: Cmd, _ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
///         match cmd {
///             // The state's type is named: Rust cannot infer it for the closure here.
///             Cmd::Add(n) => Effect::persist(Added(n), |state: &Self| state.0),
///             Cmd::Get => Effect::reply(self.0),
///         }
///     }
///     fn apply_event(&mut self, Added(n): &Added) {
///         self.0 += n;
///     }
/// }
///
/// // The handlers are functions of values: test them without a node or a store.
/// let mut ctx = EventSourcedContext::<Counter>::detached("c1");
/// let mut state = Counter::default();
/// let effect = state.handle_command(Cmd::Add(2), &mut ctx);
/// assert_eq!(effect.events().len(), 1);
/// assert_eq!(effect.run(&mut state), 2); // applies the events, then makes the reply
/// ```
pub trait EventSourcedEntity: Sized + Send + 'static {
    /// What the entity is told or asked.
    type Command: Serialize + DeserializeOwned + Send + 'static;
    /// What it records.
    type Event: Serialize + DeserializeOwned + Send + 'static;
    /// What it answers.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Decides what `cmd` does: events to persist, then a reply, or a reply alone. Must not
    /// change the state (the state changes only by [`apply_event`](Self::apply_event), so that
    /// recovery rebuilds exactly what was answered).
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
}

/// The context an event-sourced command handler gets: the entity's id, timers, messages to
/// itself, passivation (see [`EntityContext`]).
pub type EventSourcedContext<B> = EntityContext<EventSourced<B>>;

/// What a command handler decided (Akka's `Effect`): events to persist and the reply to make
/// once they are written, or a reply alone. To stop the entity after the effect, call
/// `ctx.passivate()` in the handler (Akka's `thenStop`).
///
/// The reply is a function of the state after the events were applied (Akka's `thenReply`).
/// With a [`ReplyTo`](crate::sharding::ReplyTo) in the command, send through it there and
/// answer `()`.
#[must_use = "an effect does nothing unless returned from the command handler"]
pub struct Effect<B: EventSourcedEntity> {
    events: Vec<B::Event>,
    reply: ReplyFromState<B, B::Reply>,
}

impl<B: EventSourcedEntity> Effect<B> {
    /// Persists `event`, then answers what `reply` makes of the new state.
    pub fn persist(event: B::Event, reply: impl FnOnce(&B) -> B::Reply + Send + 'static) -> Self {
        Effect {
            events: vec![event],
            reply: Box::new(reply),
        }
    }

    /// Persists `events` atomically (all or none), in order, then answers what `reply` makes
    /// of the new state.
    pub fn persist_all(
        events: impl IntoIterator<Item = B::Event>,
        reply: impl FnOnce(&B) -> B::Reply + Send + 'static,
    ) -> Self {
        Effect {
            events: events.into_iter().collect(),
            reply: Box::new(reply),
        }
    }

    /// Answers `reply` without persisting anything.
    pub fn reply(reply: B::Reply) -> Self {
        Effect {
            events: Vec::new(),
            reply: Box::new(move |_| reply),
        }
    }

    /// The events this effect persists, in order (none for a reply alone).
    pub fn events(&self) -> &[B::Event] {
        &self.events
    }

    /// What the runtime does once the events are written, on a state value and without a
    /// store: applies the events to `state` with [`apply_event`](EventSourcedEntity::apply_event),
    /// then makes the reply from the result. For unit tests of command handlers.
    pub fn run(self, state: &mut B) -> B::Reply {
        for event in &self.events {
            state.apply_event(event);
        }
        (self.reply)(state)
    }
}

/// When to snapshot, and what to keep (Akka's `RetentionCriteria.snapshotEvery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A snapshot after every this many events.
    pub every: u64,
    /// How many snapshots to keep; older ones are deleted.
    pub keep: u64,
    /// Also delete the events before the oldest kept snapshot.
    pub delete_events: bool,
}

/// What the entities of one event-sourced kind share.
struct Shared<B: EventSourcedEntity> {
    kind: Arc<str>,
    persistence: Persistence,
    events: StorageCodec,
    snapshots: Option<(Retention, StateCodec<B>)>,
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
    seq: u64,
    recovered: bool,
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
        let retention = Retention {
            every: retention.every.max(1),
            keep: retention.keep.max(1),
            ..retention
        };
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

    /// The kind, for the usual options (role, passivation, …) and `Sharding::init`.
    pub fn into_kind(self) -> EntityKind<EventSourced<B>, Postcard> {
        let shared = Arc::new(Shared {
            kind: self.key.name().into(),
            persistence: self.persistence,
            events: self.events,
            snapshots: self.snapshots,
        });
        let initial = self.initial;
        EntityKind::for_key(self.key, move |id| EventSourced {
            state: initial(id),
            seq: 0,
            recovered: false,
            shared: Arc::clone(&shared),
        })
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
        self.seq
    }

    /// Rebuilds the state: the newest snapshot (if the kind snapshots), then every event after
    /// it, in order. A gap in the sequence numbers is a failure, not a silent skip.
    async fn recover(&mut self, entity_id: &str) -> Result<(), EntityFailure> {
        const PAGE: usize = 1024;
        let shared = Arc::clone(&self.shared);
        let store = shared.persistence.store();
        let pid = persistence_id(&shared.kind, entity_id);
        if let Some((_, codec)) = &shared.snapshots {
            let snapshot = store
                .latest_snapshot(&pid)
                .await
                .map_err(|e| failure("recovery failed reading the snapshot", e))?;
            if let Some(snapshot) = snapshot {
                self.state = (codec.decode)(&shared.events, &snapshot.payload).map_err(|e| {
                    failure(
                        &format!("{pid}: snapshot at {} does not decode", snapshot.seq),
                        e,
                    )
                })?;
                self.seq = snapshot.seq;
            }
        }
        loop {
            let page = store
                .read_events(&pid, self.seq + 1, u64::MAX, PAGE)
                .await
                .map_err(|e| failure("recovery failed reading events", e))?;
            let full = page.len() == PAGE;
            for stored in page {
                if stored.seq != self.seq + 1 {
                    return Err(EntityFailure(format!(
                        "{pid}: the journal jumps from event {} to {} (events deleted without a snapshot to start from?)",
                        self.seq, stored.seq
                    )));
                }
                let event: B::Event = shared.events.decode(&stored.payload).map_err(|e| {
                    failure(&format!("{pid}: event {} does not decode", stored.seq), e)
                })?;
                self.state.apply_event(&event);
                self.seq = stored.seq;
            }
            if !full {
                break;
            }
        }
        self.recovered = true;
        Ok(())
    }

    /// Writes `events` as the next entries of the journal; applies them once written.
    async fn persist(
        &mut self,
        entity_id: &str,
        events: Vec<B::Event>,
    ) -> Result<(), EntityFailure> {
        let shared = Arc::clone(&self.shared);
        let pid = persistence_id(&shared.kind, entity_id);
        let mut new_events = Vec::with_capacity(events.len());
        for (seq, event) in (self.seq + 1..).zip(&events) {
            let payload = shared
                .events
                .encode(event)
                .map_err(|e| failure(&format!("{pid}: event {seq} does not encode"), e))?;
            new_events.push(NewEvent {
                seq,
                payload: Bytes::from(payload),
                tags: self.state.tags(event),
            });
        }
        let written = shared
            .persistence
            .journal()
            .write(AtomicWrite {
                persistence_id: Arc::clone(&pid),
                events: new_events,
            })
            .await
            .map_err(|e| failure("journal write failed", e))?;
        written.map_err(|refused| failure("journal write refused", refused))?;
        let before = self.seq;
        for event in &events {
            self.state.apply_event(event);
        }
        self.seq += events.len() as u64;
        if let Some((retention, codec)) = &shared.snapshots {
            if before / retention.every != self.seq / retention.every {
                self.snapshot(pid, *retention, codec);
            }
        }
        Ok(())
    }

    /// Saves a snapshot of the current state in the background and applies the retention.
    /// A failed snapshot costs only a longer recovery, so it is logged, not fatal.
    fn snapshot(&self, pid: Arc<str>, retention: Retention, codec: &StateCodec<B>) {
        let payload = match (codec.encode)(&self.shared.events, &self.state) {
            Ok(p) => Bytes::from(p),
            Err(e) => {
                tracing::warn!(%pid, error = %e, "state does not encode; no snapshot");
                return;
            }
        };
        let seq = self.seq;
        let store = Arc::clone(self.shared.persistence.store());
        tokio::spawn(async move {
            if let Err(e) = store.save_snapshot(&pid, Snapshot { seq, payload }).await {
                tracing::warn!(%pid, seq, error = %e, "snapshot not saved");
                return;
            }
            // Keep `keep` snapshots: the oldest kept one is `keep - 1` periods back.
            let oldest_kept = seq.saturating_sub((retention.keep - 1) * retention.every);
            if let Err(e) = store.delete_snapshots_below(&pid, oldest_kept).await {
                tracing::warn!(%pid, error = %e, "old snapshots not deleted");
            }
            if retention.delete_events && oldest_kept > 0 {
                if let Err(e) = store.delete_events_to(&pid, oldest_kept).await {
                    tracing::warn!(%pid, error = %e, "events before the snapshot not deleted");
                }
            }
        });
    }
}

impl<B: EventSourcedEntity> Entity for EventSourced<B> {
    type Command = B::Command;
    type Reply = B::Reply;

    async fn handle(&mut self, cmd: B::Command, ctx: &mut EntityContext<Self>) -> B::Reply {
        reply_or_panic(self.try_handle(cmd, ctx).await)
    }

    async fn try_handle(
        &mut self,
        cmd: B::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<B::Reply, EntityFailure> {
        if !self.recovered {
            self.recover(ctx.entity_id()).await?;
        }
        let Effect { events, reply } = self.state.handle_command(cmd, ctx);
        if !events.is_empty() {
            self.persist(ctx.entity_id(), events).await?;
        }
        Ok(reply(&self.state))
    }
}
