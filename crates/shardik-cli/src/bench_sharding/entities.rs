//! Driving the benchmark's entities: references to them, activation, ids in distinct shards,
//! round-robin tells (retrying or waiting on a full queue), and the check that each handled its
//! share.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use shardik_runtime::sharding::{Entity, EntityRef, EntityRegion, TellError};

use super::common::{ASK_TIMEOUT, SendMode};
use super::nodes::Region;
use super::tally::{Probe, TallyCmd};
use crate::bench_support::unix_ns;

/// References to entities `<prefix>0 .. <prefix><n-1>`.
pub(super) fn entity_refs<E: Entity<Command = TallyCmd>>(
    region: &EntityRegion<E>,
    prefix: &str,
    n: u64,
) -> Vec<EntityRef<E>> {
    (0..n)
        .map(|i| region.entity_ref(&format!("{prefix}{i}")))
        .collect()
}

/// Asks every entity once (read only): creates them and allocates their shards.
pub(super) async fn activate<E: Entity<Command = TallyCmd>>(
    refs: &[EntityRef<E>],
) -> anyhow::Result<()> {
    for r in refs {
        r.ask(TallyCmd::Read, ASK_TIMEOUT)
            .await
            .with_context(|| format!("entity {} did not answer", r.entity_id()))?;
    }
    Ok(())
}

/// Tells of a round-robin run of `messages` over `entities` that entity `k` gets.
pub(super) fn share(k: u64, entities: u64, messages: u64) -> u64 {
    messages / entities + u64::from(k < messages % entities)
}

/// Checks that every entity handled exactly its share of the round-robin tells.
pub(super) async fn verify_shares<E: Entity<Command = TallyCmd>>(
    refs: &[EntityRef<E>],
    messages: u64,
) -> anyhow::Result<()> {
    let n = refs.len() as u64;
    for (k, r) in refs.iter().enumerate() {
        let value = r.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
        let want = share(k as u64, n, messages);
        if value != want {
            bail!(
                "entity {} handled {value} tells, expected {want}",
                r.entity_id()
            );
        }
    }
    Ok(())
}

/// Sends `messages` one after the other: `send(i)` returns false when a bounded queue is full,
/// and is then retried after yielding. Returns the number of retries.
pub(super) async fn produce(
    messages: u64,
    mut send: impl FnMut(u64) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let mut retries = 0;
    for i in 0..messages {
        while !send(i)? {
            retries += 1;
            tokio::task::yield_now().await;
        }
    }
    Ok(retries)
}

/// Sends `messages` one after the other, each waiting for room in its queue.
pub(super) async fn produce_waiting<F: Future<Output = anyhow::Result<()>>>(
    messages: u64,
    mut send: impl FnMut(u64) -> F,
) -> anyhow::Result<u64> {
    for i in 0..messages {
        send(i).await?;
    }
    Ok(0)
}

/// A `tell` as [`produce`] wants it: false when the region's queue is full.
pub(super) fn tell<E: Entity<Command = TallyCmd>>(
    r: &EntityRef<E>,
    add: u64,
) -> anyhow::Result<bool> {
    match r.try_tell(TallyCmd::Add(add)) {
        Ok(()) => Ok(true),
        Err(TellError::BufferFull) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Tells `messages` round-robin to `refs` from one spawned producer task; returns the refs,
/// the unix time (ns) of the first tell, how long sending took and the retries.
pub(super) async fn tell_round_robin<E: Entity<Command = TallyCmd>>(
    refs: Vec<EntityRef<E>>,
    messages: u64,
    mode: SendMode,
) -> anyhow::Result<(Vec<EntityRef<E>>, u64, Duration, u64)> {
    let producer = tokio::spawn(async move {
        let n = refs.len() as u64;
        let pick = |i: u64| &refs[(i % n) as usize];
        let first = unix_ns();
        let started = Instant::now();
        let retries = match mode {
            SendMode::Retry => produce(messages, |i| tell(pick(i), 1)).await?,
            SendMode::Wait => {
                produce_waiting(messages, |i| async move {
                    Ok(pick(i).tell(TallyCmd::Add(1)).await?)
                })
                .await?
            }
        };
        anyhow::Ok((refs, first, started.elapsed(), retries))
    });
    producer.await?
}

/// Entity ids `<prefix><i>`, one in each of `n` distinct shards none of which is in `exclude`.
pub(super) fn ids_in_distinct_shards<P: Probe>(
    region: &Region<P>,
    prefix: &str,
    n: usize,
    exclude: &BTreeSet<String>,
) -> anyhow::Result<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut ids = Vec::with_capacity(n);
    for i in 0..10_000_000u64 {
        if ids.len() == n {
            return Ok(ids);
        }
        let id = format!("{prefix}{i}");
        let shard = region.shard_of(&id).to_string();
        if !exclude.contains(&shard) && seen.insert(shard) {
            ids.push(id);
        }
    }
    bail!("could not find {n} distinct shards (is --shards above number-of-shards?)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_messages() {
        for (n, m) in [(1, 5), (3, 10), (1000, 5_000_000), (7, 3)] {
            let total: u64 = (0..n).map(|k| share(k, n, m)).sum();
            assert_eq!(total, m);
        }
    }
}
