//! A write: the events one command persists for one entity, all or none, under its writer's
//! fence when it has one; and the check of its shape that every store runs before it writes.

use std::sync::Arc;

use crate::error::{WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::records::{NewEvent, PersistenceId};

/// The events one command persists for one entity: written all or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtomicWrite {
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// The events, with consecutive sequence numbers; never empty.
    pub events: Vec<NewEvent>,
    /// The writer's lease token, when the entity's kind runs under leases: the write is
    /// refused ([`WriteRefused::Fenced`]) if the store accepted a newer token in its scope.
    pub fence: Option<Fence>,
}

impl AtomicWrite {
    /// The same write under `fence`.
    pub fn fenced(self, fence: Fence) -> Self {
        AtomicWrite {
            fence: Some(fence),
            ..self
        }
    }
}

/// Checks a write's shape: not empty, consecutive sequence numbers starting at 1 or more, and
/// a fence (if any) with a scope and a token a store can hold.
pub fn check_write(write: &AtomicWrite) -> WriteResult {
    if let Some(fence) = &write.fence {
        fence.check_shape(&write.persistence_id)?;
    }
    let malformed = |why: &str| WriteRefused::Malformed {
        persistence_id: Arc::clone(&write.persistence_id),
        why: why.to_string(),
    };
    let Some(first) = write.events.first() else {
        return Err(malformed("no events"));
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
