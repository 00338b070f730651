//! What a store keeps for reliable delivery: each durable entity's marks (how far it got with
//! each producer, written in the same commit as what processing a message persisted), and
//! the durable producer queue (messages a producer accepted and its entities have not
//! confirmed yet), with the checks every store runs on them.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::StoreError;

/// How far one entity got with one producer: the newest stream of that producer it followed,
/// and the highest sequence number of it whose processing is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryMark {
    /// The producer's id.
    pub producer: Arc<str>,
    /// The stream's producer incarnation (its epoch).
    pub epoch: u64,
    /// The stream's number within the epoch.
    pub stream: u64,
    /// The highest sequence number processed.
    pub seq: u64,
    /// When the writer wrote the mark, in milliseconds since the Unix epoch by its clock: a
    /// mark not written for a long time is dropped (the entity's next write removes it).
    pub written_at_ms: u64,
}

/// A change to an entity's marks, made by one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkChange {
    /// Sets the entity's mark for the mark's producer (inserted, or replacing the one kept).
    Set(DeliveryMark),
    /// Removes the entity's mark for this producer, if it has one.
    Remove(Arc<str>),
}

impl MarkChange {
    /// The producer whose mark changes.
    pub fn producer(&self) -> &str {
        match self {
            MarkChange::Set(mark) => &mark.producer,
            MarkChange::Remove(producer) => producer,
        }
    }
}

/// Checks the shape of a write's mark changes: each names a producer, and no producer twice
/// (the outcome would depend on the order a store applies them in).
pub(crate) fn check_marks(marks: &[MarkChange]) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::with_capacity(marks.len());
    for change in marks {
        let producer = change.producer();
        if producer.is_empty() {
            return Err("a delivery mark names no producer".into());
        }
        if seen.contains(&producer) {
            return Err(format!(
                "the delivery mark of producer {producer:?} changes twice"
            ));
        }
        seen.push(producer);
    }
    Ok(())
}

/// One message of a durable producer queue: accepted by its producer, not yet confirmed by
/// its entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedMessage {
    /// The entity's kind.
    pub kind: Arc<str>,
    /// The entity's id.
    pub entity: Arc<str>,
    /// The stream's producer incarnation.
    pub epoch: u64,
    /// The stream's number within the epoch.
    pub stream: u64,
    /// The message's sequence number in its stream.
    pub seq: u64,
    /// The message, encoded by the producer.
    pub payload: Bytes,
}

/// One stream of a producer queue as read back: its entity, its stream, and its messages'
/// sequence numbers and payloads in sequence order (what a producer resumes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedStream {
    /// The entity.
    pub entity: Arc<str>,
    /// The stream's producer incarnation.
    pub epoch: u64,
    /// The stream's number within the epoch.
    pub stream: u64,
    /// (sequence number, payload), in sequence order.
    pub messages: Vec<(u64, Bytes)>,
}

/// The messages of kind `kind` among `rows` (a producer's queue, as [`Store::queued`] reads it),
/// grouped by entity and stream, in that order, each stream's in sequence order; and how many
/// rows were of another kind (left out).
///
/// [`Store::queued`]: crate::Store::queued
pub fn queued_streams(kind: &str, rows: Vec<QueuedMessage>) -> (Vec<QueuedStream>, usize) {
    // Keyed by (entity, epoch, stream number).
    type Key = (Arc<str>, u64, u64);
    let mut streams: std::collections::BTreeMap<Key, Vec<(u64, Bytes)>> =
        std::collections::BTreeMap::new();
    let mut other_kinds = 0;
    for row in rows {
        if &*row.kind != kind {
            other_kinds += 1;
            continue;
        }
        streams
            .entry((row.entity, row.epoch, row.stream))
            .or_default()
            .push((row.seq, row.payload));
    }
    let streams = streams
        .into_iter()
        .map(|((entity, epoch, stream), mut messages)| {
            messages.sort_by_key(|(seq, _)| *seq);
            QueuedStream {
                entity,
                epoch,
                stream,
                messages,
            }
        })
        .collect();
    (streams, other_kinds)
}

/// The messages of one stream that its entity confirmed: every one with a sequence number up
/// to `up_to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfirmation {
    /// The stream's producer incarnation.
    pub epoch: u64,
    /// The stream's number within the epoch.
    pub stream: u64,
    /// The highest confirmed sequence number.
    pub up_to: u64,
}

/// What [`Store::remove_kind_data`](crate::Store::remove_kind_data) removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindDataRemoved {
    /// Remembered entities.
    pub remembered: u64,
    /// Leases.
    pub leases: u64,
    /// Fences (the newest tokens accepted per lease).
    pub fences: u64,
    /// Messages of durable producer queues addressed to the kind.
    pub queued: u64,
}

/// Why [`Store::remove_kind_data`](crate::Store::remove_kind_data) removed nothing: a node
/// still holds one of the kind's leases, so the kind may be running.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("lease {lease:?} is held by {owner} for {time_left_ms} ms more")]
pub struct LeaseStillHeld {
    /// The lease.
    pub lease: String,
    /// Its holder.
    pub owner: String,
    /// How long it still has, by the store's clock, unless renewed.
    pub time_left_ms: u64,
}

/// Checks a producer id handed to a queue call.
pub(crate) fn check_producer(producer: &str) -> Result<(), StoreError> {
    if producer.is_empty() {
        return Err(StoreError::InvalidArgument(
            "a producer queue needs a producer id; an empty one was given".into(),
        ));
    }
    Ok(())
}

/// The error of a store that keeps no delivery data (see
/// [`Store::keeps_delivery_data`](crate::Store::keeps_delivery_data)).
pub(crate) fn not_kept(location: &str) -> StoreError {
    StoreError::InvalidArgument(format!(
        "the store at {location} keeps no reliable-delivery data (marks or producer queues)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, entity: &str, epoch: u64, stream: u64, seq: u64) -> QueuedMessage {
        QueuedMessage {
            kind: kind.into(),
            entity: entity.into(),
            epoch,
            stream,
            seq,
            payload: Bytes::from(format!("{entity}{seq}")),
        }
    }

    #[test]
    fn queued_rows_group_into_streams_of_one_kind_in_sequence_order() {
        let rows = vec![
            row("k", "b", 1, 2, 5),
            row("k", "a", 2, 1, 2),
            row("other", "a", 1, 1, 1),
            row("k", "b", 1, 2, 4),
            row("k", "a", 2, 1, 1),
        ];
        let (streams, other) = queued_streams("k", rows);
        assert_eq!(other, 1);
        let shape: Vec<(&str, u64, u64, Vec<u64>)> = streams
            .iter()
            .map(|s| {
                let seqs = s.messages.iter().map(|(seq, _)| *seq).collect();
                (&*s.entity, s.epoch, s.stream, seqs)
            })
            .collect();
        assert_eq!(
            shape,
            vec![("a", 2, 1, vec![1, 2]), ("b", 1, 2, vec![4, 5])]
        );
        assert_eq!(streams[1].messages[0].1, Bytes::from("b4"));
    }
}
