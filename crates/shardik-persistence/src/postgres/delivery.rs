//! Reliable delivery's data in PostgreSQL (schema version 5): delivery marks, producer epochs
//! and durable producer queues, and the removal of a kind's data.
//!
//! Marks are changed by [`change_marks`] inside the transaction of the append or durable-state
//! write they belong to, and only once that write is known to commit, so a refused write
//! changes none. Every other call is one statement (atomic by itself) but the removal of a
//! kind's data, which is one transaction. Lease expiry is judged by the server's clock
//! (`clock_timestamp()`), as for the lease calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use deadpool_postgres::{Client, GenericClient, Transaction};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::error::PgErr;
use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
    check_producer,
};
use crate::error::StoreError;
use crate::util::{QueueRow, bound, check_queued_numbers, from_sql};

/// Runs one statement, prepared once per connection, and returns its rows.
async fn rows(
    client: &impl GenericClient,
    err: &PgErr,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    doing: &str,
) -> Result<Vec<Row>, StoreError> {
    let stmt = client
        .prepare_cached(sql)
        .await
        .map_err(|e| err.query(doing, e))?;
    client
        .query(&stmt, params)
        .await
        .map_err(|e| err.query(doing, e))
}

/// Runs one statement, prepared once per connection, and returns how many rows it changed.
async fn run(
    client: &impl GenericClient,
    err: &PgErr,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    doing: &str,
) -> Result<u64, StoreError> {
    let stmt = client
        .prepare_cached(sql)
        .await
        .map_err(|e| err.query(doing, e))?;
    client
        .execute(&stmt, params)
        .await
        .map_err(|e| err.query(doing, e))
}

/// Applies the mark changes of accepted writes, in the order given (persistence id, change):
/// when several change one entity's mark for one producer, the last one counts, as if the
/// writes were applied one after the other. At most two statements, whatever the number of
/// changes; their rows go in sorted by key, so two transactions wait for each other's mark
/// rows in one order, never in a cycle. The changes are checked (numbers in range).
pub(super) async fn change_marks(
    tx: &Transaction<'_>,
    err: &PgErr,
    changes: &[(&str, &MarkChange)],
) -> Result<(), StoreError> {
    let mut last: BTreeMap<(&str, &str), &MarkChange> = BTreeMap::new();
    for &(pid, change) in changes {
        last.insert((pid, change.producer()), change);
    }
    if last.is_empty() {
        return Ok(());
    }
    let mut set = MarkColumns::default();
    let (mut removed_pids, mut removed_producers): (Vec<&str>, Vec<&str>) = (vec![], vec![]);
    for ((pid, producer), change) in last {
        match change {
            MarkChange::Set(mark) => set.push(pid, mark),
            MarkChange::Remove(_) => {
                removed_pids.push(pid);
                removed_producers.push(producer);
            }
        }
    }
    if !set.pids.is_empty() {
        run(
            tx,
            err,
            "INSERT INTO shardik_delivery_marks AS m
                 (pid, producer, epoch, stream, seq, written_at_ms)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[],
                                  $5::bigint[], $6::bigint[])
             ON CONFLICT (pid, producer) DO UPDATE SET
                 epoch = excluded.epoch, stream = excluded.stream, seq = excluded.seq,
                 written_at_ms = excluded.written_at_ms",
            &[
                &set.pids,
                &set.producers,
                &set.epochs,
                &set.streams,
                &set.seqs,
                &set.written_at,
            ],
            "setting delivery marks",
        )
        .await?;
    }
    if !removed_pids.is_empty() {
        run(
            tx,
            err,
            "DELETE FROM shardik_delivery_marks AS m
             USING unnest($1::text[], $2::text[]) AS r(pid, producer)
             WHERE m.pid = r.pid AND m.producer = r.producer",
            &[&removed_pids, &removed_producers],
            "removing delivery marks",
        )
        .await?;
    }
    Ok(())
}

/// The marks to set, as the columns `unnest` takes.
#[derive(Default)]
struct MarkColumns<'a> {
    pids: Vec<&'a str>,
    producers: Vec<&'a str>,
    epochs: Vec<i64>,
    streams: Vec<i64>,
    seqs: Vec<i64>,
    written_at: Vec<i64>,
}

impl<'a> MarkColumns<'a> {
    fn push(&mut self, pid: &'a str, mark: &'a DeliveryMark) {
        self.pids.push(pid);
        self.producers.push(&mark.producer);
        // In range: checked with the write's shape.
        self.epochs.push(mark.epoch as i64);
        self.streams.push(mark.stream as i64);
        self.seqs.push(mark.seq as i64);
        self.written_at.push(mark.written_at_ms as i64);
    }
}

/// `pid`'s marks, sorted by producer (the column's "C" collation sorts by bytes, as Rust does).
pub(super) async fn delivery_marks(
    client: &Client,
    err: &PgErr,
    pid: &str,
) -> Result<Vec<DeliveryMark>, StoreError> {
    let found = rows(
        client,
        err,
        "SELECT producer, epoch, stream, seq, written_at_ms FROM shardik_delivery_marks
         WHERE pid = $1 ORDER BY producer",
        &[&pid],
        "reading delivery marks",
    )
    .await?;
    found
        .iter()
        .map(|row| {
            let decode = |e| err.decode("a delivery mark", e);
            let producer: &str = row.try_get(0).map_err(decode)?;
            let number = |i: usize, what: &str| -> Result<u64, StoreError> {
                let n: i64 = row.try_get(i).map_err(decode)?;
                from_sql(n, what)
            };
            Ok(DeliveryMark {
                producer: Arc::from(producer),
                epoch: number(1, "mark epoch")?,
                stream: number(2, "mark stream")?,
                seq: number(3, "mark sequence number")?,
                written_at_ms: number(4, "mark time")?,
            })
        })
        .collect()
}

/// The next epoch of `producer`: one upsert, so nodes starting the same producer at once wait
/// for each other's row lock and get one epoch each.
pub(super) async fn start_producer(
    client: &Client,
    err: &PgErr,
    producer: &str,
) -> Result<u64, StoreError> {
    check_producer(producer)?;
    let found = rows(
        client,
        err,
        "INSERT INTO shardik_producer_epochs AS p (producer, epoch) VALUES ($1, 1)
         ON CONFLICT (producer) DO UPDATE SET epoch = p.epoch + 1
         RETURNING epoch",
        &[&producer],
        "starting a producer",
    )
    .await?;
    let row = found.first().ok_or_else(|| {
        StoreError::Failed(format!(
            "PostgreSQL at {}: starting producer {producer:?} returned no epoch",
            err.server
        ))
    })?;
    let epoch: i64 = row
        .try_get(0)
        .map_err(|e| err.decode("a producer epoch", e))?;
    from_sql(epoch, "producer epoch")
}

/// Adds `messages` to `producer`'s queue in one statement (so all or none). An upsert may not
/// change one row twice, so of several messages with one key only the last goes in, which is
/// what applying them one after the other would leave.
pub(super) async fn enqueue(
    client: &Client,
    err: &PgErr,
    producer: &str,
    messages: &[QueuedMessage],
) -> Result<(), StoreError> {
    check_producer(producer)?;
    check_queued_numbers(producer, messages)?;
    let mut last: BTreeMap<(u64, u64, u64), &QueuedMessage> = BTreeMap::new();
    for m in messages {
        last.insert((m.epoch, m.stream, m.seq), m);
    }
    if last.is_empty() {
        return Ok(());
    }
    // In range: checked above.
    let epochs: Vec<i64> = last.keys().map(|k| k.0 as i64).collect();
    let streams: Vec<i64> = last.keys().map(|k| k.1 as i64).collect();
    let seqs: Vec<i64> = last.keys().map(|k| k.2 as i64).collect();
    let kinds: Vec<&str> = last.values().map(|m| &*m.kind).collect();
    let entities: Vec<&str> = last.values().map(|m| &*m.entity).collect();
    let payloads: Vec<&[u8]> = last.values().map(|m| &m.payload[..]).collect();
    run(
        client,
        err,
        "INSERT INTO shardik_producer_queue AS q
             (producer, epoch, stream, seq, kind, entity, payload)
         SELECT $1::text, * FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
                                        $6::text[], $7::bytea[])
         ON CONFLICT (producer, epoch, stream, seq) DO UPDATE SET
             kind = excluded.kind, entity = excluded.entity, payload = excluded.payload",
        &[
            &producer, &epochs, &streams, &seqs, &kinds, &entities, &payloads,
        ],
        "queueing messages",
    )
    .await?;
    Ok(())
}

/// Deletes the messages of `producer`'s queue that the confirmations cover, in one statement.
pub(super) async fn confirm_queued(
    client: &Client,
    err: &PgErr,
    producer: &str,
    confirmations: &[QueueConfirmation],
) -> Result<(), StoreError> {
    check_producer(producer)?;
    let mut epochs: Vec<i64> = Vec::with_capacity(confirmations.len());
    let mut streams: Vec<i64> = Vec::with_capacity(confirmations.len());
    let mut up_to: Vec<i64> = Vec::with_capacity(confirmations.len());
    for c in confirmations {
        // A stream numbered past what a BIGINT holds has no messages here.
        if let (Ok(epoch), Ok(stream)) = (i64::try_from(c.epoch), i64::try_from(c.stream)) {
            epochs.push(epoch);
            streams.push(stream);
            up_to.push(bound(c.up_to));
        }
    }
    if epochs.is_empty() {
        return Ok(());
    }
    run(
        client,
        err,
        "DELETE FROM shardik_producer_queue AS q
         USING unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS c(epoch, stream, up_to)
         WHERE q.producer = $1 AND q.epoch = c.epoch AND q.stream = c.stream
               AND q.seq <= c.up_to",
        &[&producer, &epochs, &streams, &up_to],
        "confirming queued messages",
    )
    .await?;
    Ok(())
}

/// `producer`'s queue in stream order (the primary key's).
pub(super) async fn queued(
    client: &Client,
    err: &PgErr,
    producer: &str,
) -> Result<Vec<QueuedMessage>, StoreError> {
    check_producer(producer)?;
    let found = rows(
        client,
        err,
        "SELECT kind, entity, epoch, stream, seq, payload FROM shardik_producer_queue
         WHERE producer = $1 ORDER BY epoch, stream, seq",
        &[&producer],
        "reading a producer queue",
    )
    .await?;
    let mut messages: Vec<QueuedMessage> = Vec::with_capacity(found.len());
    for row in &found {
        let decode = |e| err.decode("a queued message", e);
        let kind: &str = row.try_get(0).map_err(decode)?;
        let entity: &str = row.try_get(1).map_err(decode)?;
        let epoch: i64 = row.try_get(2).map_err(decode)?;
        let stream: i64 = row.try_get(3).map_err(decode)?;
        let seq: i64 = row.try_get(4).map_err(decode)?;
        let payload: Vec<u8> = row.try_get(5).map_err(decode)?;
        QueueRow {
            kind,
            entity,
            epoch,
            stream,
            seq,
            payload,
        }
        .push_to(&mut messages)?;
    }
    Ok(messages)
}

/// The lease names starting with `prefix`, sorted. `starts_with` compares exactly (`LIKE`
/// would read `%` and `_` as wildcards), and the name column's "C" collation sorts by bytes.
pub(super) async fn lease_names(
    client: &Client,
    err: &PgErr,
    prefix: &str,
) -> Result<Vec<String>, StoreError> {
    let found = rows(
        client,
        err,
        "SELECT name FROM shardik_leases WHERE starts_with(name, $1) ORDER BY name",
        &[&prefix],
        "listing leases",
    )
    .await?;
    found
        .iter()
        .map(|row| row.try_get(0).map_err(|e| err.decode("a lease name", e)))
        .collect()
}

/// Removes `kind`'s remembered entities, the leases `leases` with their fences (a lease's
/// fence scope is its name) and the queued messages addressed to `kind`, in one transaction,
/// unless one of the leases is held by the server's clock.
///
/// The leases go first, in one statement that also says which of them were held: the
/// deletion locks their rows, so no one takes one between the check and the commit, and when
/// one was held the transaction is rolled back, leaving everything as it was.
pub(super) async fn remove_kind_data(
    client: &mut Client,
    err: &PgErr,
    kind: &str,
    leases: &[String],
) -> Result<Result<KindDataRemoved, LeaseStillHeld>, StoreError> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| err.query("starting to remove a kind's data", e))?;
    let deleted = rows(
        &tx,
        err,
        "DELETE FROM shardik_leases WHERE name = ANY($1::text[])
         RETURNING name, owner,
             GREATEST(0, floor(extract(epoch FROM (expires_at - clock_timestamp())) * 1000))::bigint
                 AS left_ms,
             expires_at > clock_timestamp() AS unexpired",
        &[&leases],
        "removing leases",
    )
    .await?;
    let mut held: Vec<LeaseStillHeld> = Vec::new();
    for row in &deleted {
        let decode = |e| err.decode("a removed lease", e);
        let name: String = row.try_get(0).map_err(decode)?;
        let owner: Option<String> = row.try_get(1).map_err(decode)?;
        let left_ms: i64 = row.try_get(2).map_err(decode)?;
        let unexpired: bool = row.try_get(3).map_err(decode)?;
        if let (Some(owner), true) = (owner, unexpired) {
            held.push(LeaseStillHeld {
                lease: name,
                owner,
                time_left_ms: u64::try_from(left_ms).unwrap_or(0),
            });
        }
    }
    // The first held lease in the caller's order, as the memory store names it.
    if let Some(first) = leases
        .iter()
        .find_map(|name| held.iter().position(|h| h.lease == *name))
    {
        // Dropping the transaction would roll it back too; this ends it now.
        tx.rollback()
            .await
            .map_err(|e| err.query("undoing a refused removal", e))?;
        return Ok(Err(held.swap_remove(first)));
    }
    let fences = run(
        &tx,
        err,
        "DELETE FROM shardik_fences WHERE scope = ANY($1::text[])",
        &[&leases],
        "removing fences",
    )
    .await?;
    let remembered = run(
        &tx,
        err,
        "DELETE FROM shardik_remembered WHERE kind = $1",
        &[&kind],
        "forgetting a kind's entities",
    )
    .await?;
    let queued = run(
        &tx,
        err,
        "DELETE FROM shardik_producer_queue WHERE kind = $1",
        &[&kind],
        "removing a kind's queued messages",
    )
    .await?;
    tx.commit()
        .await
        .map_err(|e| err.query("committing the removal of a kind's data", e))?;
    Ok(Ok(KindDataRemoved {
        remembered,
        leases: deleted.len() as u64,
        fences,
        queued,
    }))
}
