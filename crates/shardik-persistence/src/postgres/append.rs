//! Appending a batch of writes to PostgreSQL in one transaction.
//!
//! All events of the batch go in with one `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO
//! NOTHING RETURNING`, one round trip however many writes. A write that lost any of its rows
//! to a conflict must be refused whole, so then the transaction is rolled back and the batch
//! redone without the refused writes; each round refuses at least one write, so this ends.
//!
//! Two writes of one batch may claim the same number of the same journal; as in the memory
//! store, the earlier one gets it. A later write that clashes with an earlier one still in the
//! running is left out of the round ("shadowed"): refused if the earlier one commits, tried
//! again in the next round if the earlier one is refused.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::Client;

use super::PgErr;
use crate::{AtomicWrite, StoreError, WriteRefused, WriteResult, check_write};

pub(super) async fn append(
    client: &mut Client,
    err: &PgErr,
    writes: &[AtomicWrite],
) -> Result<Vec<WriteResult>, StoreError> {
    let mut results: Vec<Option<WriteResult>> = writes
        .iter()
        .map(|w| check_write(w).and_then(|()| check_range(w)).err().map(Err))
        .collect();
    loop {
        let (running, shadowed) = split_round(writes, &results);
        if running.is_empty() {
            break;
        }
        let tx = client
            .transaction()
            .await
            .map_err(|e| err.query("starting an append", e))?;
        let inserted = insert_events(&tx, err, writes, &running).await?;
        let lost: Vec<(usize, u64)> = running
            .iter()
            .filter_map(|&i| {
                let pid = &*writes[i].persistence_id;
                writes[i]
                    .events
                    .iter()
                    .find(|e| !inserted.contains_key(&(pid, e.seq as i64)))
                    .map(|e| (i, e.seq))
            })
            .collect();
        if lost.is_empty() {
            insert_tags(&tx, err, writes, &running, &inserted).await?;
            tx.commit()
                .await
                .map_err(|e| err.query("committing an append", e))?;
            for i in running {
                results[i] = Some(Ok(()));
            }
            for (i, seq) in shadowed {
                results[i] = Some(Err(taken(&writes[i], seq)));
            }
            break;
        }
        tx.rollback()
            .await
            .map_err(|e| err.query("rolling back an append", e))?;
        for (i, seq) in lost {
            results[i] = Some(Err(taken(&writes[i], seq)));
        }
    }
    // Every write is answered: refused up front, refused in a round, or committed.
    Ok(results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect())
}

fn taken(write: &AtomicWrite, seq: u64) -> WriteRefused {
    WriteRefused::SequenceTaken {
        persistence_id: Arc::clone(&write.persistence_id),
        seq,
    }
}

/// Refuses numbers a BIGINT cannot hold (they are consecutive: the last is the largest).
fn check_range(write: &AtomicWrite) -> WriteResult {
    match write.events.last() {
        Some(last) if i64::try_from(last.seq).is_err() => Err(WriteRefused::Malformed {
            persistence_id: Arc::clone(&write.persistence_id),
            why: format!("sequence number {} is above 2^63-1", last.seq),
        }),
        _ => Ok(()),
    }
}

/// The writes of this round, and the shadowed ones with the number they clash on.
fn split_round(
    writes: &[AtomicWrite],
    results: &[Option<WriteResult>],
) -> (Vec<usize>, Vec<(usize, u64)>) {
    let mut claimed: HashSet<(&str, u64)> = HashSet::new();
    let (mut running, mut shadowed) = (Vec::new(), Vec::new());
    for (i, write) in writes.iter().enumerate() {
        if results[i].is_some() {
            continue;
        }
        let pid = &*write.persistence_id;
        match write
            .events
            .iter()
            .find(|e| claimed.contains(&(pid, e.seq)))
        {
            Some(clash) => shadowed.push((i, clash.seq)),
            None => {
                claimed.extend(write.events.iter().map(|e| (pid, e.seq)));
                running.push(i);
            }
        }
    }
    (running, shadowed)
}

/// Inserts the events of `running`; the rows that went in, by (pid, seq), with their ordinals.
async fn insert_events<'w>(
    tx: &deadpool_postgres::Transaction<'_>,
    err: &PgErr,
    writes: &'w [AtomicWrite],
    running: &[usize],
) -> Result<HashMap<(&'w str, i64), i64>, StoreError> {
    let mut rows: Vec<(&str, i64, &[u8])> = running
        .iter()
        .flat_map(|&i| {
            let pid: &str = &writes[i].persistence_id;
            // In range: checked before the first round.
            writes[i]
                .events
                .iter()
                .map(move |e| (pid, e.seq as i64, &e.payload[..]))
        })
        .collect();
    // Rows go in sorted by key: two batches that claim some of the same keys then wait for
    // each other in one order, never in a cycle (a deadlock PostgreSQL would break by failing
    // one batch). unnest keeps the arrays' order, so a journal's ordinals follow its numbers.
    rows.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let pids: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let seqs: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let payloads: Vec<&[u8]> = rows.iter().map(|r| r.2).collect();
    let stmt = tx
        .prepare_cached(
            "INSERT INTO shardik_events (pid, seq, payload)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
             ON CONFLICT (pid, seq) DO NOTHING
             RETURNING pid, seq, ordinal",
        )
        .await
        .map_err(|e| err.query("preparing the event insert", e))?;
    let rows = tx
        .query(&stmt, &[&pids, &seqs, &payloads])
        .await
        .map_err(|e| err.query("writing events", e))?;
    // Look the returned rows up by the batch's own strings, to keep their lifetime.
    let wanted: HashMap<(&str, i64), &'w str> = running
        .iter()
        .flat_map(|&i| {
            let pid: &'w str = &writes[i].persistence_id;
            writes[i]
                .events
                .iter()
                .map(move |e| ((pid, e.seq as i64), pid))
        })
        .collect();
    let mut inserted = HashMap::with_capacity(rows.len());
    for row in rows {
        let pid: &str = row
            .try_get(0)
            .map_err(|e| err.decode("an inserted event", e))?;
        let seq: i64 = row
            .try_get(1)
            .map_err(|e| err.decode("an inserted event", e))?;
        let ordinal: i64 = row
            .try_get(2)
            .map_err(|e| err.decode("an inserted event", e))?;
        if let Some(&pid) = wanted.get(&(pid, seq)) {
            inserted.insert((pid, seq), ordinal);
        }
    }
    Ok(inserted)
}

/// Inserts the tags of the events of `running`, by the ordinals their rows got.
async fn insert_tags(
    tx: &deadpool_postgres::Transaction<'_>,
    err: &PgErr,
    writes: &[AtomicWrite],
    running: &[usize],
    inserted: &HashMap<(&str, i64), i64>,
) -> Result<(), StoreError> {
    let mut ordinals: Vec<i64> = Vec::new();
    let mut positions: Vec<i32> = Vec::new();
    let mut tags: Vec<&str> = Vec::new();
    for &i in running {
        let pid = &*writes[i].persistence_id;
        for event in &writes[i].events {
            let Some(&ordinal) = inserted.get(&(pid, event.seq as i64)) else {
                continue;
            };
            for (pos, tag) in event.tags.iter().enumerate() {
                ordinals.push(ordinal);
                positions.push(i32::try_from(pos).map_err(|_| {
                    StoreError::Failed(format!(
                        "{pid}: event {} has more than 2^31 tags",
                        event.seq
                    ))
                })?);
                tags.push(tag);
            }
        }
    }
    if tags.is_empty() {
        return Ok(());
    }
    let stmt = tx
        .prepare_cached(
            "INSERT INTO shardik_event_tags (ordinal, pos, tag)
             SELECT * FROM unnest($1::bigint[], $2::integer[], $3::text[])",
        )
        .await
        .map_err(|e| err.query("preparing the tag insert", e))?;
    tx.execute(&stmt, &[&ordinals, &positions, &tags])
        .await
        .map_err(|e| err.query("writing event tags", e))?;
    Ok(())
}
