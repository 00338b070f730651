//! Ask measurements: closed loops with a number of asks in flight, asks at a fixed rate (open
//! loop), and the ratios of a closed loop to its raw baseline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::common::ASK_TIMEOUT;
use super::nodes::Ref;
use super::tally::{Probe, TallyCmd};
use crate::bench_support::{ClosedLoop, Latencies, entity_of, open_loop};

/// Sharding against its raw baseline: each figure divided by the raw one.
pub(super) struct ClosedLoopComparison {
    pub(super) p50: f64,
    pub(super) p99: f64,
    pub(super) p999: f64,
    pub(super) rate: f64,
}

impl ClosedLoopComparison {
    pub(super) fn new(sharding: &ClosedLoop, raw: &ClosedLoop) -> Self {
        let q = |c: &ClosedLoop, q: f64| c.latencies.quantile_us(q);
        ClosedLoopComparison {
            p50: q(sharding, 0.5) / q(raw, 0.5),
            p99: q(sharding, 0.99) / q(raw, 0.99),
            p999: q(sharding, 0.999) / q(raw, 0.999),
            rate: sharding.per_second() / raw.per_second(),
        }
    }
}

/// Asks (reads) with `slots` in flight for `duration`: one task per slot in this runtime,
/// each asking, awaiting the answer and asking again, over the entities in the order of
/// [`entity_of`]. Every answer is checked against `values` (what each entity holds).
pub(super) async fn closed_loop_asks(
    refs: Arc<[Ref<()>]>,
    slots: usize,
    duration: Duration,
    values: Arc<[u64]>,
) -> anyhow::Result<ClosedLoop> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(slots);
    for slot in 0..slots {
        let (refs, values) = (Arc::clone(&refs), Arc::clone(&values));
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut failed) = (Latencies::new(), 0u64);
            let mut k = 0;
            while Instant::now() < deadline {
                let e = entity_of(slot, k, slots, refs.len());
                let t = Instant::now();
                match refs[e].ask(TallyCmd::Read, ASK_TIMEOUT).await {
                    Ok(v) if v == values[e] => latencies.record(t.elapsed().as_nanos() as u64),
                    Ok(v) => bail!(
                        "entity {} answered {v}, expected {}",
                        refs[e].entity_id(),
                        values[e]
                    ),
                    Err(_) => failed += 1,
                }
                k += 1;
            }
            anyhow::Ok((latencies, failed))
        }));
    }
    let (mut latencies, mut failed) = (Latencies::new(), 0);
    for t in tasks {
        let (l, f) = t.await??;
        latencies.merge(&l)?;
        failed += f;
    }
    Ok(ClosedLoop {
        slots,
        completed: latencies.len(),
        failed,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// Asks at a fixed rate.
pub(super) struct AskLatency {
    pub(super) sent: u64,
    pub(super) failed: u64,
    pub(super) late: u64,
    /// From the `ask` call to its answer.
    pub(super) ask: Latencies,
    /// From the open-loop sender's send time (before the task that asks is spawned).
    pub(super) from_send: Latencies,
}

/// Asks (reads) round-robin over `refs` at `rate` per second for `duration`, in an open loop:
/// the sending thread spawns one task per ask at its slot, whatever earlier asks are doing.
pub(super) async fn ask_latency<P: Probe>(
    refs: Vec<Ref<P>>,
    rate: u64,
    duration: Duration,
) -> anyhow::Result<AskLatency> {
    let epoch = Instant::now();
    let handle = tokio::runtime::Handle::current();
    let (sent, late, tasks) = tokio::task::spawn_blocking(move || {
        let n = refs.len() as u64;
        let mut tasks = Vec::new();
        let (sent, late, _) = open_loop(rate, duration, epoch, |seq, sent_ns| {
            let r = refs[(seq % n) as usize].clone();
            tasks.push(handle.spawn(async move {
                let asked = Instant::now();
                let answered = r.ask(TallyCmd::Read, ASK_TIMEOUT).await.is_ok();
                let end = Instant::now();
                let from_send = ((end - epoch).as_nanos() as u64).saturating_sub(sent_ns);
                answered.then(|| ((end - asked).as_nanos() as u64, from_send))
            }));
        });
        (sent, late, tasks)
    })
    .await?;
    let mut out = AskLatency {
        sent,
        failed: 0,
        late,
        ask: Latencies::new(),
        from_send: Latencies::new(),
    };
    for t in tasks {
        match t.await? {
            Some((ask, from_send)) => {
                out.ask.record(ask);
                out.from_send.record(from_send);
            }
            None => out.failed += 1,
        }
    }
    Ok(out)
}
