//! What the checks share: events and writes made from text, payloads read back as text, and
//! fresh names, so that each check keeps to data of its own.

use std::sync::Arc;

use bytes::Bytes;

use crate::records::{NewEvent, PersistenceId, StoredEvent};
use crate::write::AtomicWrite;

pub(super) fn event(seq: u64, text: &str, tags: &[&str]) -> NewEvent {
    NewEvent {
        seq,
        payload: Bytes::copy_from_slice(text.as_bytes()),
        manifest: "text/1".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
    }
}

pub(super) fn write(pid: &PersistenceId, events: Vec<NewEvent>) -> AtomicWrite {
    AtomicWrite {
        persistence_id: Arc::clone(pid),
        events,
        fence: None,
        marks: Vec::new(),
    }
}

pub(super) fn payloads(events: &[StoredEvent]) -> Vec<(u64, String)> {
    events
        .iter()
        .map(|e| (e.seq, String::from_utf8_lossy(&e.payload).into_owned()))
        .collect()
}

/// A prefix no earlier run used, so that checks against a persistent database start clean.
pub(super) fn fresh(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{nanos:x}-{:x}", std::process::id())
}
