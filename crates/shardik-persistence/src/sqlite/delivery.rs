//! Reliable delivery's data in SQLite (schema version 5): delivery marks, producer epochs and
//! durable producer queues, and the removal of a kind's data.
//!
//! Marks are changed by the append and the durable-state write in [`super::queries`], inside
//! the savepoint of the write they belong to, so a refused or undone write changes none. The
//! other writes here run as jobs of the writer's batch: under its `BEGIN IMMEDIATE`
//! transaction, a read followed by a write (an epoch's increment, a removal's check of its
//! leases) is atomic across every process sharing the file.

use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, params};

use super::error::Ctx;
use super::leases::now_micros;
use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
    check_producer,
};
use crate::error::StoreError;
use crate::util::{QueueRow, bound, check_queued_numbers, from_sql};

/// Applies one write's mark changes to `pid`'s marks. Call it inside the write's savepoint,
/// once the write is accepted; the changes are checked (one per producer, numbers in range).
pub(super) fn change_marks(
    conn: &Connection,
    path: &Path,
    pid: &str,
    changes: &[MarkChange],
) -> Result<(), StoreError> {
    for change in changes {
        match change {
            MarkChange::Set(mark) => {
                // In range: checked with the write's shape.
                let numbers =
                    [mark.epoch, mark.stream, mark.seq, mark.written_at_ms].map(|n| n as i64);
                conn.prepare_cached(
                    "INSERT INTO shardik_delivery_marks
                         (pid, producer, epoch, stream, seq, written_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (pid, producer) DO UPDATE SET
                         epoch = excluded.epoch, stream = excluded.stream,
                         seq = excluded.seq, written_at_ms = excluded.written_at_ms",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        pid,
                        &*mark.producer,
                        numbers[0],
                        numbers[1],
                        numbers[2],
                        numbers[3]
                    ])
                })
                .ctx(path, "setting a delivery mark")?;
            }
            MarkChange::Remove(producer) => {
                conn.prepare_cached(
                    "DELETE FROM shardik_delivery_marks WHERE pid = ?1 AND producer = ?2",
                )
                .and_then(|mut stmt| stmt.execute(params![pid, &**producer]))
                .ctx(path, "removing a delivery mark")?;
            }
        }
    }
    Ok(())
}

/// `pid`'s marks, sorted by producer (SQLite's binary collation sorts by bytes, as Rust does).
pub(super) fn delivery_marks(
    conn: &Connection,
    path: &Path,
    pid: &str,
) -> Result<Vec<DeliveryMark>, StoreError> {
    let doing = "reading delivery marks";
    let mut stmt = conn
        .prepare_cached(
            "SELECT producer, epoch, stream, seq, written_at_ms FROM shardik_delivery_marks
             WHERE pid = ?1 ORDER BY producer",
        )
        .ctx(path, doing)?;
    let rows = stmt
        .query_map([pid], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, i64>(4)?,
            ))
        })
        .ctx(path, doing)?;
    let mut marks = Vec::new();
    for row in rows {
        let (producer, epoch, stream, seq, written_at_ms) = row.ctx(path, doing)?;
        marks.push(DeliveryMark {
            producer: Arc::from(producer),
            epoch: from_sql(epoch, "mark epoch")?,
            stream: from_sql(stream, "mark stream")?,
            seq: from_sql(seq, "mark sequence number")?,
            written_at_ms: from_sql(written_at_ms, "mark time")?,
        });
    }
    Ok(marks)
}

/// The next epoch of `producer`: one statement under the batch's write lock, so two processes
/// starting the same producer at once get two epochs.
pub(super) fn start_producer(
    conn: &Connection,
    path: &Path,
    producer: &str,
) -> Result<u64, StoreError> {
    check_producer(producer)?;
    let epoch: i64 = conn
        .prepare_cached(
            "INSERT INTO shardik_producer_epochs (producer, epoch) VALUES (?1, 1)
             ON CONFLICT (producer) DO UPDATE SET epoch = epoch + 1
             RETURNING epoch",
        )
        .and_then(|mut stmt| stmt.query_row([producer], |row| row.get(0)))
        .ctx(path, "starting a producer")?;
    from_sql(epoch, "producer epoch")
}

/// Adds `messages` to `producer`'s queue in order, a message replacing the one of the same
/// stream and number. All or none: a failure fails the job, whose savepoint undoes the rest.
pub(super) fn enqueue(
    conn: &Connection,
    path: &Path,
    producer: &str,
    messages: &[QueuedMessage],
) -> Result<(), StoreError> {
    check_producer(producer)?;
    check_queued_numbers(producer, messages)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO shardik_producer_queue
                 (producer, epoch, stream, seq, kind, entity, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (producer, epoch, stream, seq) DO UPDATE SET
                 kind = excluded.kind, entity = excluded.entity, payload = excluded.payload",
        )
        .ctx(path, "preparing to queue messages")?;
    for m in messages {
        // In range: checked above.
        insert
            .execute(params![
                producer,
                m.epoch as i64,
                m.stream as i64,
                m.seq as i64,
                &*m.kind,
                &*m.entity,
                &m.payload[..]
            ])
            .ctx(path, "queueing a message")?;
    }
    Ok(())
}

/// Deletes the messages of `producer`'s queue that the confirmations cover.
pub(super) fn confirm_queued(
    conn: &Connection,
    path: &Path,
    producer: &str,
    confirmations: &[QueueConfirmation],
) -> Result<(), StoreError> {
    check_producer(producer)?;
    let mut delete = conn
        .prepare_cached(
            "DELETE FROM shardik_producer_queue
             WHERE producer = ?1 AND epoch = ?2 AND stream = ?3 AND seq <= ?4",
        )
        .ctx(path, "preparing to confirm queued messages")?;
    for c in confirmations {
        // A stream numbered past what SQL stores has no messages here.
        let (Ok(epoch), Ok(stream)) = (i64::try_from(c.epoch), i64::try_from(c.stream)) else {
            continue;
        };
        delete
            .execute(params![producer, epoch, stream, bound(c.up_to)])
            .ctx(path, "confirming queued messages")?;
    }
    Ok(())
}

/// `producer`'s queue in stream order (the primary key's).
pub(super) fn queued(
    conn: &Connection,
    path: &Path,
    producer: &str,
) -> Result<Vec<QueuedMessage>, StoreError> {
    check_producer(producer)?;
    let doing = "reading a producer queue";
    let mut stmt = conn
        .prepare_cached(
            "SELECT kind, entity, epoch, stream, seq, payload FROM shardik_producer_queue
             WHERE producer = ?1 ORDER BY epoch, stream, seq",
        )
        .ctx(path, doing)?;
    let rows = stmt
        .query_map([producer], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, i64>(4)?,
                row.get::<_, Vec<u8>>(5)?,
            ))
        })
        .ctx(path, doing)?;
    let mut messages: Vec<QueuedMessage> = Vec::new();
    for row in rows {
        let (kind, entity, epoch, stream, seq, payload) = row.ctx(path, doing)?;
        QueueRow {
            kind: &kind,
            entity: &entity,
            epoch,
            stream,
            seq,
            payload,
        }
        .push_to(&mut messages)?;
    }
    Ok(messages)
}

/// The lease names starting with `prefix`, sorted. The names are compared as bytes (as blobs,
/// `substr` and `length` count bytes, and a NUL does not end them): exactly the names that
/// start with `prefix` (`LIKE` would fold ASCII case and read `%` and `_` as wildcards). The
/// range condition lets the primary key skip the names before `prefix`.
pub(super) fn lease_names(
    conn: &Connection,
    path: &Path,
    prefix: &str,
) -> Result<Vec<String>, StoreError> {
    let doing = "listing leases";
    let mut stmt = conn
        .prepare_cached(
            "SELECT name FROM shardik_leases
             WHERE name >= ?1
                   AND substr(CAST(name AS BLOB), 1, length(CAST(?1 AS BLOB))) = CAST(?1 AS BLOB)
             ORDER BY name",
        )
        .ctx(path, doing)?;
    let rows = stmt
        .query_map([prefix], |row| row.get(0))
        .ctx(path, doing)?;
    rows.collect::<Result<Vec<String>, _>>().ctx(path, doing)
}

/// Removes `kind`'s remembered entities, the leases `leases` with their fences (a lease's
/// fence scope is its name) and the queued messages addressed to `kind`, unless one of the
/// leases is held by this machine's clock. Runs as one job of the writer's batch, so the check
/// and the deletions are one step under the file's write lock.
pub(super) fn remove_kind_data(
    conn: &Connection,
    path: &Path,
    kind: &str,
    leases: &[String],
) -> Result<Result<KindDataRemoved, LeaseStillHeld>, StoreError> {
    let now = now_micros();
    let mut held = conn
        .prepare_cached(
            "SELECT owner, expires_at FROM shardik_leases
             WHERE name = ?1 AND owner IS NOT NULL AND expires_at > ?2",
        )
        .ctx(path, "preparing to check leases")?;
    for name in leases {
        let mut rows = held
            .query(params![name, now])
            .ctx(path, "checking a lease")?;
        if let Some(row) = rows.next().ctx(path, "checking a lease")? {
            let owner: String = row.get(0).ctx(path, "reading a lease's owner")?;
            let expires_at: i64 = row.get(1).ctx(path, "reading a lease's expiry")?;
            return Ok(Err(LeaseStillHeld {
                lease: name.clone(),
                owner,
                time_left_ms: u64::try_from((expires_at - now) / 1000).unwrap_or(0),
            }));
        }
    }
    let mut removed = KindDataRemoved {
        remembered: count(
            conn,
            path,
            "DELETE FROM shardik_remembered WHERE kind = ?1",
            kind,
            "forgetting a kind's entities",
        )?,
        ..KindDataRemoved::default()
    };
    for name in leases {
        removed.leases += count(
            conn,
            path,
            "DELETE FROM shardik_leases WHERE name = ?1",
            name,
            "removing a lease",
        )?;
        removed.fences += count(
            conn,
            path,
            "DELETE FROM shardik_fences WHERE scope = ?1",
            name,
            "removing a fence",
        )?;
    }
    removed.queued = count(
        conn,
        path,
        "DELETE FROM shardik_producer_queue WHERE kind = ?1",
        kind,
        "removing a kind's queued messages",
    )?;
    Ok(Ok(removed))
}

/// Runs a deletion of one argument and counts the rows it removed.
fn count(
    conn: &Connection,
    path: &Path,
    sql: &str,
    arg: &str,
    doing: &str,
) -> Result<u64, StoreError> {
    let deleted = conn
        .prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([arg]))
        .ctx(path, doing)?;
    Ok(deleted as u64)
}
