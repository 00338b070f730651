//! A write: the events one command persists for one entity, all or none, under its writer's
//! fence when it has one, with the entity's reliable-delivery marks that change with them;
//! and the check of its shape that every store runs before it writes.

use std::sync::Arc;

use crate::delivery::{MarkChange, check_marks};
use crate::error::{WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::records::{NewEvent, PersistenceId};

/// The events one command persists for one entity, and the changes to its delivery marks:
/// written all or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtomicWrite {
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// The events, with consecutive sequence numbers; empty only when `marks` is not (a
    /// reliably delivered command that persisted nothing still records that it was processed).
    pub events: Vec<NewEvent>,
    /// Changes to the entity's delivery marks, committed with the events: a message is
    /// recorded as processed exactly when what processing it persisted is (see
    /// [`Store::delivery_marks`](crate::Store::delivery_marks)). Empty for most writes.
    pub marks: Vec<MarkChange>,
    /// The writer's lease token, when the entity's kind runs under leases: the write is
    /// refused ([`WriteRefused::Fenced`]) if the store accepted a newer token in its scope.
    pub fence: Option<Fence>,
}

impl AtomicWrite {
    /// A write of `events` to `persistence_id`'s journal, with no fence and no marks.
    pub fn new(persistence_id: PersistenceId, events: Vec<NewEvent>) -> Self {
        AtomicWrite {
            persistence_id,
            events,
            marks: Vec::new(),
            fence: None,
        }
    }

    /// The same write, changing the entity's delivery marks too.
    pub fn with_marks(self, marks: Vec<MarkChange>) -> Self {
        AtomicWrite { marks, ..self }
    }

    /// The same write under `fence`.
    pub fn fenced(self, fence: Fence) -> Self {
        AtomicWrite {
            fence: Some(fence),
            ..self
        }
    }
}

/// Checks a write's shape: not empty, consecutive sequence numbers starting at 1 or more,
/// each producer's mark changed at most once, and a fence (if any) with a scope and a token a
/// store can hold.
pub fn check_write(write: &AtomicWrite) -> WriteResult {
    if let Some(fence) = &write.fence {
        fence.check_shape(&write.persistence_id)?;
    }
    let malformed = |why: &str| WriteRefused::Malformed {
        persistence_id: Arc::clone(&write.persistence_id),
        why: why.to_string(),
    };
    check_marks(&write.marks).map_err(|why| malformed(&why))?;
    let Some(first) = write.events.first() else {
        if write.marks.is_empty() {
            return Err(malformed("no events"));
        }
        return Ok(());
    };
    if first.seq == 0 {
        return Err(malformed("sequence numbers start at 1"));
    }
    let consecutive = write
        .events
        .windows(2)
        .all(|w| w[0].seq.checked_add(1) == Some(w[1].seq));
    if !consecutive {
        return Err(malformed("sequence numbers are not consecutive"));
    }
    Ok(())
}
