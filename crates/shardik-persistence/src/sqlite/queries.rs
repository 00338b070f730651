//! The SQL of each store operation, run on the writer's or the reader's connection.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, ffi, params};

use super::delivery::change_marks;
use super::error::{Ctx, map_error};
use super::leases::FenceBars;
use crate::delivery::{MarkChange, check_marks};
use crate::error::{StoreError, WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::records::{PersistenceId, Snapshot, StoredEvent, StoredState, TaggedEvent};
use crate::util::{bound, check_mark_numbers, from_sql, limit, to_sql};
use crate::write::{AtomicWrite, check_write};

/// Writes each write inside a savepoint of its own: a write whose fence is older than its
/// scope's newest token is refused before anything is written; one whose number is taken is
/// undone alone and refused; the others stay, with their delivery marks changed in the same
/// savepoint, and their fences raise their scopes. A write of marks alone inserts no event.
pub(super) fn append(
    conn: &Connection,
    path: &Path,
    writes: Vec<AtomicWrite>,
) -> Result<Vec<WriteResult>, StoreError> {
    let mut results = Vec::with_capacity(writes.len());
    let mut fences = FenceBars::default();
    for write in writes {
        if let Err(refused) = check_write(&write).and_then(|()| check_range(&write)) {
            results.push(Err(refused));
            continue;
        }
        if let Some(fence) = &write.fence
            && let Err(fenced) = fences.judge(conn, path, &write.persistence_id, fence)?
        {
            results.push(Err(fenced));
            continue;
        }
        conn.execute_batch("SAVEPOINT write")
            .ctx(path, "opening a savepoint")?;
        let outcome = insert_write(conn, path, &write).and_then(|taken| {
            if taken.is_none() {
                change_marks(conn, path, &write.persistence_id, &write.marks)?;
                if let Some(fence) = &write.fence {
                    fences.raise(conn, path, fence)?;
                }
            }
            Ok(taken)
        });
        if !matches!(outcome, Ok(None)) {
            conn.execute_batch("ROLLBACK TO write")
                .ctx(path, "undoing a refused write")?;
        }
        conn.execute_batch("RELEASE write")
            .ctx(path, "releasing a savepoint")?;
        match outcome? {
            None => results.push(Ok(())),
            Some(seq) => results.push(Err(WriteRefused::SequenceTaken {
                persistence_id: write.persistence_id,
                seq,
            })),
        }
    }
    Ok(results)
}

/// Refuses numbers SQL cannot store (the events' are consecutive, so the last is the largest;
/// then the marks').
fn check_range(write: &AtomicWrite) -> WriteResult {
    match write.events.last() {
        Some(last) if i64::try_from(last.seq).is_err() => Err(WriteRefused::Malformed {
            persistence_id: Arc::clone(&write.persistence_id),
            why: format!("sequence number {} is above 2^63-1", last.seq),
        }),
        _ => check_mark_numbers(&write.persistence_id, &write.marks),
    }
}

/// Inserts the events of one write; `Some(seq)` when `seq` (the first in the write's order) is
/// taken.
fn insert_write(
    conn: &Connection,
    path: &Path,
    write: &AtomicWrite,
) -> Result<Option<u64>, StoreError> {
    let mut insert_event = conn
        .prepare_cached(
            "INSERT INTO shardik_events (pid, seq, payload, manifest) VALUES (?1, ?2, ?3, ?4)",
        )
        .ctx(path, "preparing an event insert")?;
    let mut insert_tag = conn
        .prepare_cached("INSERT INTO shardik_event_tags (ordinal, pos, tag) VALUES (?1, ?2, ?3)")
        .ctx(path, "preparing a tag insert")?;
    for event in &write.events {
        let seq = to_sql(event.seq, "sequence number")?;
        let inserted = insert_event.execute(params![
            &*write.persistence_id,
            seq,
            &event.payload[..],
            &*event.manifest
        ]);
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Ok(Some(event.seq)),
            Err(e) => return Err(map_error(path, "writing an event", e)),
        }
        let ordinal = conn.last_insert_rowid();
        for (pos, tag) in event.tags.iter().enumerate() {
            insert_tag
                .execute(params![ordinal, pos as i64, tag])
                .ctx(path, "writing an event tag")?;
        }
    }
    Ok(None)
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    e.sqlite_error()
        .is_some_and(|e| e.extended_code == ffi::SQLITE_CONSTRAINT_UNIQUE)
}

/// The events of a journal in `from..=to`, with their tags, in one statement (so one snapshot
/// of the database).
pub(super) fn read_events(
    conn: &Connection,
    path: &Path,
    pid: &str,
    from: u64,
    to: u64,
    max: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT e.seq, e.payload, t.tag, e.manifest
             FROM (SELECT ordinal, seq, payload, manifest FROM shardik_events
                   WHERE pid = ?1 AND seq BETWEEN ?2 AND ?3 AND payload IS NOT NULL
                   ORDER BY seq LIMIT ?4) AS e
             LEFT JOIN shardik_event_tags AS t ON t.ordinal = e.ordinal
             ORDER BY e.seq, t.pos",
        )
        .ctx(path, "preparing a journal read")?;
    let mut rows = stmt
        .query(params![pid, bound(from), bound(to), limit(max)])
        .ctx(path, "reading a journal")?;
    let mut events: Vec<StoredEvent> = Vec::new();
    while let Some(row) = rows.next().ctx(path, "reading a journal")? {
        let seq: i64 = row.get(0).ctx(path, "reading an event's number")?;
        let seq = from_sql(seq, "sequence number")?;
        let tag: Option<String> = row.get(2).ctx(path, "reading an event's tag")?;
        if events.last().is_none_or(|e| e.seq != seq) {
            let payload: Vec<u8> = row.get(1).ctx(path, "reading an event's payload")?;
            let manifest: Option<String> = row.get(3).ctx(path, "reading an event's manifest")?;
            events.push(StoredEvent {
                seq,
                payload: Bytes::from(payload),
                manifest: manifest.unwrap_or_default().into(),
                tags: Vec::new(),
            });
        }
        if let (Some(tag), Some(event)) = (tag, events.last_mut()) {
            event.tags.push(tag);
        }
    }
    Ok(events)
}

pub(super) fn highest_seq(conn: &Connection, path: &Path, pid: &str) -> Result<u64, StoreError> {
    let highest: Option<i64> = conn
        .prepare_cached("SELECT max(seq) FROM shardik_events WHERE pid = ?1")
        .and_then(|mut stmt| stmt.query_row([pid], |row| row.get(0)))
        .ctx(path, "reading the highest sequence number")?;
    highest.map_or(Ok(0), |seq| from_sql(seq, "sequence number"))
}

/// Clears the payloads (the rows, and so the numbers, stay) and drops the tags, so queries by
/// tag no longer find the events.
pub(super) fn delete_events_to(
    conn: &Connection,
    path: &Path,
    pid: &str,
    to: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "DELETE FROM shardik_event_tags WHERE ordinal IN
           (SELECT ordinal FROM shardik_events WHERE pid = ?1 AND seq <= ?2 AND payload IS NOT NULL)",
    )
    .and_then(|mut stmt| stmt.execute(params![pid, bound(to)]))
    .ctx(path, "deleting event tags")?;
    conn.prepare_cached(
        "UPDATE shardik_events SET payload = NULL
         WHERE pid = ?1 AND seq <= ?2 AND payload IS NOT NULL",
    )
    .and_then(|mut stmt| stmt.execute(params![pid, bound(to)]))
    .ctx(path, "deleting events")?;
    Ok(())
}

/// Tagged events after `offset` in ordinal (commit) order.
pub(super) fn events_by_tag(
    conn: &Connection,
    path: &Path,
    tag: &str,
    offset: u64,
    max: usize,
) -> Result<Vec<TaggedEvent>, StoreError> {
    // DISTINCT: an event carrying the same tag twice is found once.
    let mut stmt = conn
        .prepare_cached(
            "SELECT e.ordinal, e.pid, e.seq, e.payload, e.manifest
             FROM (SELECT DISTINCT ordinal FROM shardik_event_tags
                   WHERE tag = ?1 AND ordinal > ?2 ORDER BY ordinal LIMIT ?3) AS t
             JOIN shardik_events AS e ON e.ordinal = t.ordinal
             WHERE e.payload IS NOT NULL
             ORDER BY e.ordinal",
        )
        .ctx(path, "preparing a query by tag")?;
    let mut rows = stmt
        .query(params![tag, bound(offset), limit(max)])
        .ctx(path, "querying by tag")?;
    let mut found = Vec::new();
    // Many events of one journal come in a row: share their persistence id.
    let mut last_pid: Option<PersistenceId> = None;
    while let Some(row) = rows.next().ctx(path, "querying by tag")? {
        let ordinal: i64 = row.get(0).ctx(path, "reading an event's offset")?;
        let pid: String = row.get(1).ctx(path, "reading an event's journal")?;
        let seq: i64 = row.get(2).ctx(path, "reading an event's number")?;
        let payload: Vec<u8> = row.get(3).ctx(path, "reading an event's payload")?;
        let manifest: Option<String> = row.get(4).ctx(path, "reading an event's manifest")?;
        let persistence_id = match &last_pid {
            Some(p) if **p == *pid => Arc::clone(p),
            _ => PersistenceId::from(pid),
        };
        last_pid = Some(Arc::clone(&persistence_id));
        found.push(TaggedEvent {
            offset: from_sql(ordinal, "event offset")?,
            persistence_id,
            seq: from_sql(seq, "sequence number")?,
            payload: Bytes::from(payload),
            manifest: manifest.unwrap_or_default().into(),
        });
    }
    Ok(found)
}

pub(super) fn save_snapshot(
    conn: &Connection,
    path: &Path,
    pid: &str,
    snapshot: &Snapshot,
) -> Result<(), StoreError> {
    let seq = to_sql(snapshot.seq, "snapshot sequence number")?;
    conn.prepare_cached(
        "INSERT INTO shardik_snapshots (pid, seq, payload) VALUES (?1, ?2, ?3)
         ON CONFLICT (pid, seq) DO UPDATE SET payload = excluded.payload",
    )
    .and_then(|mut stmt| stmt.execute(params![pid, seq, &snapshot.payload[..]]))
    .ctx(path, "saving a snapshot")?;
    Ok(())
}

pub(super) fn latest_snapshot(
    conn: &Connection,
    path: &Path,
    pid: &str,
) -> Result<Option<Snapshot>, StoreError> {
    let row: Option<(i64, Vec<u8>)> = conn
        .prepare_cached(
            "SELECT seq, payload FROM shardik_snapshots WHERE pid = ?1 ORDER BY seq DESC LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([pid], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .ctx(path, "reading the latest snapshot")?;
    row.map(|(seq, payload)| {
        Ok(Snapshot {
            seq: from_sql(seq, "snapshot sequence number")?,
            payload: Bytes::from(payload),
        })
    })
    .transpose()
}

pub(super) fn delete_snapshots_below(
    conn: &Connection,
    path: &Path,
    pid: &str,
    below: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM shardik_snapshots WHERE pid = ?1 AND seq < ?2")
        .and_then(|mut stmt| stmt.execute(params![pid, bound(below)]))
        .ctx(path, "deleting snapshots")?;
    Ok(())
}

pub(super) fn load_state(
    conn: &Connection,
    path: &Path,
    pid: &str,
) -> Result<Option<StoredState>, StoreError> {
    let row: Option<(i64, Vec<u8>)> = conn
        .prepare_cached("SELECT revision, payload FROM shardik_states WHERE pid = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([pid], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .ctx(path, "reading a durable state")?;
    row.map(|(revision, payload)| {
        Ok(StoredState {
            revision: from_sql(revision, "state revision")?,
            payload: Bytes::from(payload),
        })
    })
    .transpose()
}

/// Revision 1 is an insert that must find no row; revision n an update that must find n - 1.
/// A fence is judged first; the marks are changed and the fence raised once the state is
/// written (the writer's transaction holds the write lock throughout, and its savepoint undoes
/// all of it together on an error). A refused write has changed nothing.
pub(super) fn write_state(
    conn: &Connection,
    path: &Path,
    pid: &str,
    state: &StoredState,
    fence: Option<&Fence>,
    marks: &[MarkChange],
) -> Result<WriteResult, StoreError> {
    let malformed = |why: String| WriteRefused::Malformed {
        persistence_id: pid.into(),
        why,
    };
    if let Err(refused) = check_marks(marks)
        .map_err(malformed)
        .and_then(|()| check_mark_numbers(pid, marks))
    {
        return Ok(Err(refused));
    }
    let mut fences = FenceBars::default();
    if let Some(fence) = fence {
        if let Err(malformed) = fence.check_shape(pid) {
            return Ok(Err(malformed));
        }
        if let Err(fenced) = fences.judge(conn, path, pid, fence)? {
            return Ok(Err(fenced));
        }
    }
    let conflict = || {
        Ok(Err(WriteRefused::RevisionConflict {
            persistence_id: pid.into(),
            expected: state.revision.saturating_sub(1),
        }))
    };
    let changed = match state.revision {
        0 => return conflict(),
        1 => conn
            .prepare_cached(
                "INSERT INTO shardik_states (pid, revision, payload) VALUES (?1, 1, ?2)
                 ON CONFLICT (pid) DO NOTHING",
            )
            .and_then(|mut stmt| stmt.execute(params![pid, &state.payload[..]])),
        revision => {
            let revision = to_sql(revision, "state revision")?;
            conn.prepare_cached(
                "UPDATE shardik_states SET revision = ?2, payload = ?3
                 WHERE pid = ?1 AND revision = ?2 - 1",
            )
            .and_then(|mut stmt| stmt.execute(params![pid, revision, &state.payload[..]]))
        }
    }
    .ctx(path, "writing a durable state")?;
    if changed != 1 {
        return conflict();
    }
    change_marks(conn, path, pid, marks)?;
    if let Some(fence) = fence {
        fences.raise(conn, path, fence)?;
    }
    Ok(Ok(()))
}

pub(super) fn update_remembered(
    conn: &Connection,
    path: &Path,
    kind: &str,
    shard: &str,
    started: &[String],
    stopped: &[String],
) -> Result<(), StoreError> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO shardik_remembered (kind, shard, entity) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
        )
        .ctx(path, "preparing to remember entities")?;
    for entity in started {
        insert
            .execute(params![kind, shard, entity])
            .ctx(path, "remembering an entity")?;
    }
    let mut delete = conn
        .prepare_cached(
            "DELETE FROM shardik_remembered WHERE kind = ?1 AND shard = ?2 AND entity = ?3",
        )
        .ctx(path, "preparing to forget entities")?;
    for entity in stopped {
        delete
            .execute(params![kind, shard, entity])
            .ctx(path, "forgetting an entity")?;
    }
    Ok(())
}

/// Column 0 of every row as text. SQLite's default (binary) collation sorts UTF-8 text by
/// bytes, as Rust sorts strings.
fn strings(
    conn: &Connection,
    path: &Path,
    sql: &str,
    args: &[&str],
    doing: &str,
) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).ctx(path, doing)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args), |row| row.get(0))
        .ctx(path, doing)?;
    rows.collect::<Result<Vec<String>, _>>().ctx(path, doing)
}

pub(super) fn remembered_shards(
    conn: &Connection,
    path: &Path,
    kind: &str,
) -> Result<Vec<String>, StoreError> {
    strings(
        conn,
        path,
        "SELECT DISTINCT shard FROM shardik_remembered WHERE kind = ?1 ORDER BY shard",
        &[kind],
        "reading remembered shards",
    )
}

pub(super) fn remembered_entities(
    conn: &Connection,
    path: &Path,
    kind: &str,
    shard: &str,
) -> Result<Vec<String>, StoreError> {
    strings(
        conn,
        path,
        "SELECT entity FROM shardik_remembered WHERE kind = ?1 AND shard = ?2 ORDER BY entity",
        &[kind, shard],
        "reading remembered entities",
    )
}
