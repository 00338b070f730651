//! Appending a batch of writes to PostgreSQL in one transaction.
//!
//! All events of the batch go in with one `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO
//! NOTHING RETURNING`, one round trip however many writes. A write that lost any of its rows
//! to a conflict must be refused whole, so then the transaction is rolled back and the batch
//! redone without the refused writes; each round refuses at least one write, so this ends.
//!
//! Fenced writes are judged in the same transaction: it first locks the fence rows of the
//! batch's scopes (see [`fences`]) and reads their newest tokens; a write whose token is older
//! than its scope's newest (counting earlier writes of the round) is left out of the round and
//! refused if the round commits, and the round raises the scopes of the writes it commits.
//!
//! The delivery marks of the writes a round commits are changed in the round's transaction,
//! after their events (see [`delivery::change_marks`]); a write of marks alone claims no number
//! and inserts no event.
//!
//! Two writes of one batch may claim the same number of the same journal; as in the memory
//! store, the earlier one gets it. A later write that clashes with an earlier one still in the
//! running is left out of the round ("shadowed"): refused if the earlier one commits, tried
//! again in the next round if the earlier one is refused.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::Client;

use super::delivery;
use super::error::PgErr;
use super::fences;
use crate::delivery::MarkChange;
use crate::error::{StoreError, WriteRefused, WriteResult};
use crate::util::check_mark_numbers;
use crate::write::{AtomicWrite, check_write};

pub(super) async fn append(
    client: &mut Client,
    err: &PgErr,
    writes: &[AtomicWrite],
) -> Result<Vec<WriteResult>, StoreError> {
    let mut results: Vec<Option<WriteResult>> = writes
        .iter()
        .map(|w| check_write(w).and_then(|()| check_range(w)).err().map(Err))
        .collect();
    while results.iter().any(Option::is_none) {
        let tx = client
            .transaction()
            .await
            .map_err(|e| err.query("starting an append", e))?;
        let scopes = fence_scopes(writes, &results);
        let newest = if scopes.is_empty() {
            HashMap::new()
        } else {
            fences::lock(&tx, err, &scopes).await?
        };
        let round = plan_round(writes, &results, newest);
        let no_events = round.running.iter().all(|&i| writes[i].events.is_empty());
        let inserted = if no_events {
            HashMap::new()
        } else {
            insert_events(&tx, err, writes, &round.running).await?
        };
        let lost: Vec<(usize, u64)> = round
            .running
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
            insert_tags(&tx, err, writes, &round.running, &inserted).await?;
            let mut marks: Vec<(&str, &MarkChange)> = Vec::new();
            for &i in &round.running {
                let pid = &*writes[i].persistence_id;
                marks.extend(writes[i].marks.iter().map(|change| (pid, change)));
            }
            delivery::change_marks(&tx, err, &marks).await?;
            fences::raise(&tx, err, &round.raised).await?;
            tx.commit()
                .await
                .map_err(|e| err.query("committing an append", e))?;
            for i in round.running {
                results[i] = Some(Ok(()));
            }
            for (i, seq) in round.shadowed {
                results[i] = Some(Err(taken(&writes[i], seq)));
            }
            for (i, fenced) in round.fenced {
                results[i] = Some(Err(fenced));
            }
            break;
        }
        tx.rollback()
            .await
            .map_err(|e| err.query("rolling back an append", e))?;
        // Only the lost writes are settled; the round's fenced and shadowed ones are judged
        // again without them (a lost write raises no fence and claims no number).
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

/// Refuses numbers a BIGINT cannot hold (the events' are consecutive: the last is the
/// largest; then the marks').
fn check_range(write: &AtomicWrite) -> WriteResult {
    match write.events.last() {
        Some(last) if i64::try_from(last.seq).is_err() => Err(WriteRefused::Malformed {
            persistence_id: Arc::clone(&write.persistence_id),
            why: format!("sequence number {} is above 2^63-1", last.seq),
        }),
        _ => check_mark_numbers(&write.persistence_id, &write.marks),
    }
}

/// The distinct fence scopes of the writes still undecided, sorted (the order their rows are
/// locked in).
fn fence_scopes<'w>(writes: &'w [AtomicWrite], results: &[Option<WriteResult>]) -> Vec<&'w str> {
    let mut scopes: Vec<&str> = writes
        .iter()
        .zip(results)
        .filter(|(_, r)| r.is_none())
        .filter_map(|(w, _)| w.fence.as_ref().map(|f| &*f.scope))
        .collect();
    scopes.sort_unstable();
    scopes.dedup();
    scopes
}

/// What one round does with the undecided writes, judged one after the other as the memory
/// store would apply them.
struct Round<'w> {
    /// Written in this round.
    running: Vec<usize>,
    /// Refused if the round commits: an earlier running write claims the number given.
    shadowed: Vec<(usize, u64)>,
    /// Refused if the round commits: its token is older than its scope's newest, counting the
    /// tokens of earlier running writes.
    fenced: Vec<(usize, WriteRefused)>,
    /// The scopes the running writes raise, with their new newest tokens.
    raised: Vec<(&'w str, u64)>,
}

fn plan_round<'w>(
    writes: &'w [AtomicWrite],
    results: &[Option<WriteResult>],
    mut newest: HashMap<&'w str, u64>,
) -> Round<'w> {
    let before = newest.clone();
    let mut claimed: HashSet<(&str, u64)> = HashSet::new();
    let mut round = Round {
        running: Vec::new(),
        shadowed: Vec::new(),
        fenced: Vec::new(),
        raised: Vec::new(),
    };
    for (i, write) in writes.iter().enumerate() {
        if results[i].is_some() {
            continue;
        }
        let pid = &*write.persistence_id;
        if let Some(fence) = &write.fence
            && let Err(fenced) = fence.judge(pid, newest.get(&*fence.scope).copied())
        {
            round.fenced.push((i, fenced));
            continue;
        }
        match write
            .events
            .iter()
            .find(|e| claimed.contains(&(pid, e.seq)))
        {
            Some(clash) => round.shadowed.push((i, clash.seq)),
            None => {
                claimed.extend(write.events.iter().map(|e| (pid, e.seq)));
                round.running.push(i);
                if let Some(fence) = &write.fence {
                    let bar = newest.entry(&*fence.scope).or_insert(fence.token);
                    *bar = (*bar).max(fence.token);
                }
            }
        }
    }
    round.raised = newest
        .into_iter()
        .filter(|(scope, token)| before.get(scope).is_none_or(|old| old < token))
        .collect();
    round.raised.sort_unstable();
    round
}

/// Inserts the events of `running`; the rows that went in, by (pid, seq), with their ordinals.
async fn insert_events<'w>(
    tx: &deadpool_postgres::Transaction<'_>,
    err: &PgErr,
    writes: &'w [AtomicWrite],
    running: &[usize],
) -> Result<HashMap<(&'w str, i64), i64>, StoreError> {
    let mut rows: Vec<(&str, i64, &[u8], &str)> = running
        .iter()
        .flat_map(|&i| {
            let pid: &str = &writes[i].persistence_id;
            // In range: checked before the first round.
            writes[i]
                .events
                .iter()
                .map(move |e| (pid, e.seq as i64, &e.payload[..], &*e.manifest))
        })
        .collect();
    // Rows go in sorted by key: two batches that claim some of the same keys then wait for
    // each other in one order, never in a cycle (a deadlock PostgreSQL would break by failing
    // one batch). unnest keeps the arrays' order, so a journal's ordinals follow its numbers.
    rows.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let pids: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let seqs: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let payloads: Vec<&[u8]> = rows.iter().map(|r| r.2).collect();
    let manifests: Vec<&str> = rows.iter().map(|r| r.3).collect();
    let stmt = tx
        .prepare_cached(
            "INSERT INTO shardik_events (pid, seq, payload, manifest)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[])
             ON CONFLICT (pid, seq) DO NOTHING
             RETURNING pid, seq, ordinal",
        )
        .await
        .map_err(|e| err.query("preparing the event insert", e))?;
    let rows = tx
        .query(&stmt, &[&pids, &seqs, &payloads, &manifests])
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
