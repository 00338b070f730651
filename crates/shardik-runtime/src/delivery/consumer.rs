//! The consumer side of reliable delivery, inside the entity: the [`ReliableConsumer`] trait
//! an entity type implements to be delivered to, the [`Reliable`] entity that wraps one and
//! judges each sequenced command against its marks, and [`EntityKind::reliable`], which makes
//! a kind of such entities.
//!
//! A durable entity (event sourced, durable state) commits the mark of a command in the same
//! write as what the command persisted, so a command is processed exactly once across
//! crashes, moves and restarts. Any other entity keeps its marks in memory, for as long as
//! its incarnation lives: a command resent after the entity was passivated, moved or lost
//! with its node is processed again, so delivery to it is at least once.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardik_core::Instant;
use shardik_core::delivery::{ConsumerMarks, Mark, Sequenced, StreamId, Verdict};
use shardik_persistence::{DeliveryMark, MarkChange};

use super::message::{Delivery, SequencedCommand};
use crate::sharding::{
    Codec, Entity, EntityContext, EntityFailure, EntityKind, SyncEntity, done_or_panic,
};

/// What a kind's entities promise about a reliably delivered command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarantee {
    /// Processed once: the entity records each command's mark in the write that persists
    /// what the command did (event-sourced and durable-state entities).
    ExactlyOnce,
    /// Processed at least once: the marks live in the entity's memory, so a command resent
    /// after its incarnation ended (passivated, moved, lost with its node) before the producer
    /// heard the confirmation is processed again.
    AtLeastOnce,
}

/// An entity that reliably delivered commands can be sent to (see [`EntityKind::reliable`]).
///
/// Event-sourced and durable-state entities implement it with
/// [`Guarantee::ExactlyOnce`]; every [`SyncEntity`] has it with [`Guarantee::AtLeastOnce`].
/// An entity of one's own whose handler awaits gets the at-least-once behaviour with an empty
/// implementation (`impl ReliableConsumer for MyEntity {}`).
pub trait ReliableConsumer: Entity {
    /// What the kind promises (at least once unless the entity records marks durably).
    const GUARANTEE: Guarantee = Guarantee::AtLeastOnce;

    /// The marks the entity has recorded durably, recovering the entity first if it must:
    /// none for an entity that keeps nothing.
    fn recover_marks(
        &mut self,
        entity_id: &str,
    ) -> impl Future<Output = Result<Vec<DeliveryMark>, EntityFailure>> + Send {
        let _ = entity_id;
        std::future::ready(Ok(Vec::new()))
    }

    /// Handles `cmd`, a reliably delivered command, and commits `marks` in the same write as
    /// what it persists (in a write of their own when it persists nothing). The default, for
    /// an entity that persists nothing, handles the command and drops the marks.
    fn handle_delivered(
        &mut self,
        cmd: Self::Command,
        marks: Vec<MarkChange>,
        ctx: &mut EntityContext<Self>,
    ) -> impl Future<Output = Result<(), EntityFailure>> + Send {
        let _ = marks;
        self.try_handle(cmd, ctx)
    }
}

impl<T: SyncEntity> ReliableConsumer for T {}

/// How a reliable kind's entities answer producers and keep their marks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSettings {
    /// How many commands past the last one processed an entity lets a producer send (Akka's
    /// `flow-control-window`, 50).
    pub window: u64,
    /// A producer not heard from for this long loses its mark at the entity's next delivery
    /// (so marks do not pile up for producers that are gone). A producer that comes back
    /// later opens a new stream, which needs no mark; only a copy of an old command delayed
    /// for longer than this could be processed twice. 24 hours.
    pub mark_retention: Duration,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            window: 50,
            mark_retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// An entity of a reliable kind: the user's entity, and the marks it judges sequenced commands
/// by (loaded from the store with the entity's first sequenced command, for a durable entity).
pub struct Reliable<E> {
    inner: E,
    marks: Option<ConsumerMarks>,
    settings: Arc<ConsumerSettings>,
}

impl<E> Reliable<E> {
    /// The user's entity.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: ReliableConsumer, C: Codec> EntityKind<E, C> {
    /// The same kind, whose entities a [`ReliableProducer`](super::ReliableProducer) can
    /// deliver to: each sequenced command is processed once per producer and sequence number,
    /// in order, and confirmed to its producer once what it did is durable (see
    /// [`ReliableConsumer::GUARANTEE`] for what "once" means for the kind). Ordinary tells and
    /// asks still reach the entities, as [`Delivery::Plain`].
    pub fn reliable(self) -> EntityKind<Reliable<E>, C> {
        self.reliable_with(ConsumerSettings::default())
    }

    /// As [`reliable`](Self::reliable), with `settings`.
    pub fn reliable_with(self, settings: ConsumerSettings) -> EntityKind<Reliable<E>, C> {
        let settings = Arc::new(settings);
        self.map_entity(
            move |inner| Reliable {
                inner,
                marks: None,
                settings: Arc::clone(&settings),
            },
            Delivery::Plain,
        )
    }
}

/// Milliseconds since the Unix epoch by this machine's clock: when marks are written, and
/// what their age is judged by.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<E: ReliableConsumer> Reliable<E> {
    /// The marks, loaded from the store (once per incarnation) for a durable entity.
    async fn marks(&mut self, entity_id: &str) -> Result<&mut ConsumerMarks, EntityFailure> {
        if self.marks.is_none() {
            let mut marks = ConsumerMarks::new();
            for kept in self.inner.recover_marks(entity_id).await? {
                marks.restore(
                    &kept.producer,
                    Mark {
                        stream: StreamId {
                            epoch: kept.epoch,
                            number: kept.stream,
                        },
                        seq: kept.seq,
                        touched: Instant::from_millis(kept.written_at_ms),
                    },
                );
            }
            self.marks = Some(marks);
        }
        Ok(self.marks.get_or_insert_with(ConsumerMarks::new))
    }

    /// Judges each command of a run in turn, processes those that are next, and answers the
    /// producer once for the run, once what processing them wrote is durable. A command that
    /// is not next (a gap, a stream not followed, a stale stream) ends the run: those after
    /// it would be judged the same.
    async fn deliver(
        &mut self,
        run: SequencedCommand<E::Command>,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        let SequencedCommand {
            producer,
            stream,
            seq: first_seq,
            first,
            commands,
            reply_to,
        } = run;
        let retention = self.settings.mark_retention;
        let window = self.settings.window;
        let mut reply = None;
        for (offset, command) in (0u64..).zip(commands) {
            // A run that would number past u64::MAX comes from no producer of ours (it counts
            // from 1): what fits is judged, the rest dropped, rather than overflowing.
            let Some(seq) = first_seq.checked_add(offset) else {
                break;
            };
            let header = Sequenced {
                producer: &producer,
                stream,
                seq,
                first: first && seq == first_seq,
            };
            let written_at_ms = wall_clock_ms();
            let marks = self.marks(ctx.entity_id()).await?;
            let receipt = marks.receive(&header, Instant::from_millis(written_at_ms), retention);
            if let Some(mark) = receipt.mark {
                let mut changes = vec![MarkChange::Set(DeliveryMark {
                    producer: Arc::clone(&producer),
                    epoch: mark.stream.epoch,
                    stream: mark.stream.number,
                    seq: mark.seq,
                    written_at_ms,
                })];
                changes.extend(receipt.expired.into_iter().map(MarkChange::Remove));
                let mut inner_ctx = ctx.for_inner::<E>();
                // On failure the incarnation ends, its marks with it: the next one reloads
                // them, and the producer, unanswered, sends the run again (what was processed
                // of it is then confirmed again, not processed).
                self.inner
                    .handle_delivered(command, changes, &mut inner_ctx)
                    .await?;
                ctx.absorb(inner_ctx, Delivery::Plain);
            }
            reply = receipt.verdict.reply(seq, window);
            if !matches!(
                receipt.verdict,
                Verdict::Deliver | Verdict::Duplicate { .. }
            ) {
                break;
            }
        }
        if let Some(reply) = reply {
            reply_to.send(reply);
        }
        Ok(())
    }
}

impl<E: ReliableConsumer> Entity for Reliable<E> {
    type Command = Delivery<E::Command>;

    async fn handle(&mut self, cmd: Self::Command, ctx: &mut EntityContext<Self>) {
        done_or_panic(self.try_handle(cmd, ctx).await)
    }

    async fn try_handle(
        &mut self,
        cmd: Self::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        match cmd {
            Delivery::Plain(cmd) => {
                let mut inner_ctx = ctx.for_inner::<E>();
                self.inner.try_handle(cmd, &mut inner_ctx).await?;
                ctx.absorb(inner_ctx, Delivery::Plain);
                Ok(())
            }
            Delivery::Sequenced(sequenced) => self.deliver(sequenced, ctx).await,
        }
    }
}
