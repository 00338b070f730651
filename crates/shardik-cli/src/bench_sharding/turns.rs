//! `bench sharding remote --transport both`: after the plain and the TLS run, both runs'
//! nodes are measured again in alternating turns, and the ratios TLS/plain come from those.
//!
//! One run after the other meets the machine in two different moods: on the shared VM a plain
//! run's median ask moved between 57 and 244 µs within minutes, and its proxy tells between
//! 1.5 and 2.1 M/s, more than TLS moves either. Turns of a second or less, alternating
//! (plain, TLS, TLS, plain, ...: each transport goes first as often), spread both transports
//! over the same moments. Each transport's turns are merged into one figure.
//!
//! - Tells: [`TELL_TURNS`] turns each of `--messages / TELL_TURNS` tells to an async kind of
//!   its own (`bench-remote-turns`), each timed from the first tell to the peer's report that
//!   its entities handled the turn's last (the peer's `--turn-tells`).
//! - Asks with one in flight: `--duration-s` turns each of [`ASK1_SLICE`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::bail;
use tokio::sync::Notify;

use super::asks::closed_loop_asks;
use super::common::{ASK_TIMEOUT, SendMode};
use super::entities::tell_round_robin;
use super::nodes::{Ref, Region, RemoteSetup};
use super::tally::{Probe, TallyCmd};
use crate::bench_support::{ClosedLoop, Throughput, unix_ns};
use crate::bench_tls::BenchCerts;
use crate::bench_transports::{AskTurns, Interleaved, TellTurns};

/// Kind of the tells' turns: async entities of their own, so that the per-run tells (which
/// the peer counts with a fixed target) are untouched.
pub(super) const TURN_KIND: &str = "bench-remote-turns";
/// Turns of tells of each transport.
pub(super) const TELL_TURNS: u64 = 10;
/// Length of one turn of asks.
pub(super) const ASK1_SLICE: Duration = Duration::from_secs(1);

/// A run's nodes, kept running after it for the turns, with what they need.
pub(super) struct KeptSetup {
    pub(super) setup: RemoteSetup,
    /// The ask kind's entities, and what each holds.
    pub(super) refs: Arc<[Ref<()>]>,
    pub(super) values: Arc<[u64]>,
    /// The turn kind's entities (activated), when tells are measured.
    pub(super) turn_refs: Option<Vec<Ref<()>>>,
    /// The proxies of those kinds, kept as a node keeps the kinds it uses.
    pub(super) _regions: Vec<Region<()>>,
    /// The certificate files the nodes may re-read (TLS), removed when this is dropped.
    pub(super) _certs: Option<BenchCerts>,
}

/// The turns for the parts both runs measured: tells when both have turn entities (`messages`
/// in all per transport, sent as `send` does), asks when `ask_rounds > 0`.
pub(super) async fn interleave(
    plain: &mut KeptSetup,
    tls: &mut KeptSetup,
    messages: u64,
    send: SendMode,
    ask_rounds: u64,
) -> anyhow::Result<Interleaved> {
    let tells = if plain.turn_refs.is_some() && tls.turn_refs.is_some() {
        Some(tell_turns(plain, tls, messages, send).await?)
    } else {
        None
    };
    let ask1 = if ask_rounds > 0 {
        Some(ask_turns(plain, tls, ask_rounds).await?)
    } else {
        None
    };
    Ok(Interleaved { tells, ask1 })
}

/// Which of the two goes first in `round`: plain in even rounds, TLS in odd ones.
fn order(round: u64) -> [usize; 2] {
    if round.is_multiple_of(2) {
        [0, 1]
    } else {
        [1, 0]
    }
}

async fn tell_turns(
    plain: &mut KeptSetup,
    tls: &mut KeptSetup,
    messages: u64,
    send: SendMode,
) -> anyhow::Result<TellTurns> {
    let per_turn = tell_turn_size(messages);
    let mut merged: [Option<Throughput>; 2] = [None, None];
    for round in 0..TELL_TURNS {
        for i in order(round) {
            let kept = if i == 0 { &mut *plain } else { &mut *tls };
            let refs = kept.turn_refs.take().unwrap_or_default();
            let (refs, first, send_time, retries) = tell_round_robin(refs, per_turn, send).await?;
            kept.turn_refs = Some(refs);
            let (count, _, last) = kept.setup.peer.done().await?;
            let turn = Throughput {
                sent: per_turn,
                received: count,
                elapsed: Duration::from_nanos(last.saturating_sub(first)),
                send_time,
                retries,
            };
            merged[i] = Some(match merged[i].take() {
                None => turn,
                Some(so_far) => add_throughputs(so_far, turn),
            });
        }
    }
    let [Some(plain), Some(tls)] = merged else {
        bail!("no turns of tells");
    };
    Ok(TellTurns {
        rounds: TELL_TURNS,
        per_turn,
        plain,
        tls,
    })
}

/// Tells of one turn when a transport's turns add up to `messages`.
pub(super) fn tell_turn_size(messages: u64) -> u64 {
    (messages / TELL_TURNS).max(1)
}

fn add_throughputs(a: Throughput, b: Throughput) -> Throughput {
    Throughput {
        sent: a.sent + b.sent,
        received: a.received + b.received,
        elapsed: a.elapsed + b.elapsed,
        send_time: a.send_time + b.send_time,
        retries: a.retries + b.retries,
    }
}

async fn ask_turns(plain: &KeptSetup, tls: &KeptSetup, rounds: u64) -> anyhow::Result<AskTurns> {
    let mut merged: [Option<ClosedLoop>; 2] = [None, None];
    for round in 0..rounds {
        for i in order(round) {
            let kept = [plain, tls][i];
            let turn = closed_loop_asks(
                Arc::clone(&kept.refs),
                1,
                ASK1_SLICE,
                Arc::clone(&kept.values),
            )
            .await?;
            merged[i] = Some(match merged[i].take() {
                None => turn,
                Some(so_far) => merge_closed_loops(so_far, turn)?,
            });
        }
    }
    let [Some(plain), Some(tls)] = merged else {
        bail!("no turns of asks");
    };
    Ok(AskTurns {
        rounds,
        slice: ASK1_SLICE,
        plain,
        tls,
    })
}

/// Two closed loops of the same width as one.
fn merge_closed_loops(mut a: ClosedLoop, b: ClosedLoop) -> anyhow::Result<ClosedLoop> {
    a.latencies.merge(&b.latencies)?;
    a.completed += b.completed;
    a.failed += b.failed;
    a.elapsed += b.elapsed;
    Ok(a)
}

/// The peer's count of the turn kind's tells: every `per_turn` handled, it notes when and
/// wakes [`Turns::wait`].
pub(super) struct Turns {
    per_turn: u64,
    handled: AtomicU64,
    /// Turns completed, and when the last of them ended (unix ns).
    completed: AtomicU64,
    last_ns: AtomicU64,
    done: Notify,
}

impl Turns {
    pub(super) fn new(per_turn: u64) -> Arc<Turns> {
        Arc::new(Turns {
            per_turn: per_turn.max(1),
            handled: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            done: Notify::new(),
        })
    }

    /// Waits until turn `turn` (from 1) is complete; when its last tell was handled. The
    /// benchmark starts a turn only after the previous one's report, so the time read is
    /// that turn's.
    pub(super) async fn wait(&self, turn: u64) -> u64 {
        loop {
            let notified = self.done.notified();
            if self.completed.load(Ordering::Acquire) >= turn {
                return self.last_ns.load(Ordering::Relaxed);
            }
            notified.await;
        }
    }

    /// The number of tells per turn.
    pub(super) fn per_turn(&self) -> u64 {
        self.per_turn
    }
}

impl Probe for Arc<Turns> {
    fn told(&self) {
        let n = self.handled.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(self.per_turn) {
            self.last_ns.store(unix_ns(), Ordering::Relaxed);
            self.completed.store(n / self.per_turn, Ordering::Release);
            self.done.notify_waiters();
        }
    }
}

/// Asks every entity of `refs` once, so that the turns find them running.
pub(super) async fn activate_turn_entities(refs: &[Ref<()>]) -> anyhow::Result<()> {
    for r in refs {
        r.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_transport_goes_first_as_often() {
        let firsts: Vec<usize> = (0..4).map(|r| order(r)[0]).collect();
        assert_eq!(firsts, vec![0, 1, 0, 1]);
    }

    #[test]
    fn turns_add_up_to_the_messages() {
        assert_eq!(tell_turn_size(1_000_000) * TELL_TURNS, 1_000_000);
        assert_eq!(tell_turn_size(3), 1);
    }

    #[tokio::test]
    async fn a_turn_is_reported_once_its_last_tell_is_handled() {
        let turns = Turns::new(3);
        for _ in 0..5 {
            turns.told();
        }
        assert!(turns.wait(1).await > 0);
        let waiter = {
            let turns = Arc::clone(&turns);
            tokio::spawn(async move { turns.wait(2).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "turn 2 is not complete at 5 of 6");
        turns.told();
        let ended = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("turn 2 reported")
            .unwrap();
        assert!(ended > 0);
    }
}
