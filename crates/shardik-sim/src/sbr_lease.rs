//! The split-brain resolver's lease (lease-majority) in the simulated world: one real
//! [`MemoryStore`] whose lease clock is the world's virtual time, reached from every live node
//! whatever the partitions (the store is elsewhere, as a database is), each call taking a
//! latency each way. What a call does once it reaches the store is the store's own code; the
//! model adds when, and whether, it gets there, and the holder's side of the runtime's
//! `Lease` handle:
//!
//! * an acquire is answered at once, with no store call, while the node's handle still counts
//!   on the lease (its own deadline: the send time of its last successful acquire or renewal,
//!   plus the time-to-live, minus the operation timeout);
//! * a holder renews every `heartbeat-interval`, and stops counting on the lease when a
//!   renewal is refused or none succeeded by its deadline;
//! * an answer that comes later than the operation timeout after its request counts as a
//!   failure, as the runtime's timeout makes it;
//! * a call whose node crashed before it reached the store reaches it or not, by a coin (it
//!   may have left before the crash); answers to a crashed node are lost; a paused node gets
//!   them, and renews, when its pause ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::sbr::SbrAction;
use shardik_core::membership::{Input, UniqueAddress};
use shardik_persistence::{LeaseAcquired, LeaseInfo, MemoryStore, Store, StoreError, StoreFuture};

use crate::node_id::NodeId;

/// The lease's settings in the model (`coordination.lease.*`, and the store's distance).
#[derive(Clone, Debug)]
pub struct SbrLeaseConfig {
    /// The lease's name.
    pub name: String,
    /// One-way latency to the store, drawn uniformly from this range.
    pub latency: (Duration, Duration),
    /// `heartbeat-timeout`: the time-to-live.
    pub heartbeat_timeout: Duration,
    /// `heartbeat-interval`: how often the holder renews.
    pub heartbeat_interval: Duration,
    /// `lease-operation-timeout`: a call answered later than this after it was sent failed.
    pub lease_operation_timeout: Duration,
}

impl Default for SbrLeaseConfig {
    /// The reference's lease timings (120 s, 12 s, 5 s), 1–10 ms to the store.
    fn default() -> Self {
        SbrLeaseConfig {
            name: "shardik-shardik-sbr".to_string(),
            latency: (Duration::from_millis(1), Duration::from_millis(10)),
            heartbeat_timeout: Duration::from_secs(120),
            heartbeat_interval: Duration::from_secs(12),
            lease_operation_timeout: Duration::from_secs(5),
        }
    }
}

/// One node incarnation that uses the lease.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Caller {
    /// The node's slot.
    pub id: NodeId,
    /// The incarnation (the lease's owner is its `address#uid`).
    pub node: UniqueAddress,
}

impl Caller {
    fn owner(&self) -> String {
        self.node.to_string()
    }
}

/// Where a caller is when something reaches it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Running: it gets the answer now.
    Alive,
    /// Frozen until then: it gets the answer then.
    Paused(Instant),
    /// Crashed, stopped, or replaced by a newer incarnation.
    Gone,
}

#[derive(Clone, Debug)]
enum Op {
    /// An acquire reaches the store.
    Acquire {
        from: Caller,
        attempt: u64,
        sent: Instant,
    },
    /// An acquire's answer (the token granted, if any) reaches its node.
    Answer {
        to: Caller,
        attempt: u64,
        token: Option<u64>,
        sent: Instant,
    },
    /// The holder's renewal timer fires.
    RenewDue { holder: Caller, token: u64 },
    /// A renewal reaches the store.
    Renew {
        from: Caller,
        token: u64,
        sent: Instant,
    },
    /// A renewal's answer reaches its node.
    Renewed {
        to: Caller,
        token: u64,
        ok: bool,
        sent: Instant,
    },
    /// A release reaches the store.
    Release { from: Caller, token: u64 },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Delivery {
    Now,
    Later,
    Never,
}

/// What a holder's handle knows.
#[derive(Clone, Debug)]
struct Holding {
    token: u64,
    /// Until when it counts on the lease.
    deadline: Instant,
}

/// What the model saw over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbrLeaseStats {
    /// Acquire requests made by nodes.
    pub requests: u64,
    /// Of those, answered from the holder's own check, without a store call.
    pub answered_by_holder: u64,
    /// Grants the store made (new tenures and the same owner's re-grants).
    pub granted: u64,
    /// Acquires the store refused (another owner held the lease).
    pub refused: u64,
    /// Acquires that failed: the store errored, or the answer came after the timeout.
    pub failed: u64,
    /// Releases that reached the store and freed the lease.
    pub released: u64,
    /// Renewals that kept the lease.
    pub renewed: u64,
    /// Leases a holder stopped counting on (refused renewal or its deadline passed).
    pub lost: u64,
    /// Calls of crashed nodes that never reached the store.
    pub lost_in_crash: u64,
    /// Answers that found their node gone.
    pub answers_to_the_dead: u64,
    /// Decisions acted on, by decision.
    pub decisions: BTreeMap<&'static str, u64>,
}

/// A grant the store made: when, to whom, with which token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// When the store granted it.
    pub at: Instant,
    /// The owner.
    pub owner: String,
    /// The tenure's fencing token.
    pub token: u64,
}

/// The lease, its store, the calls on their way and the holders' handles.
pub struct SbrLeaseModel {
    cfg: SbrLeaseConfig,
    store: MemoryStore,
    clock: Arc<AtomicU64>,
    ops: BTreeMap<(Instant, u64), Op>,
    seq: u64,
    holding: BTreeMap<Caller, Holding>,
    rng: ChaCha8Rng,
    stats: SbrLeaseStats,
    grants: Vec<Grant>,
}

impl SbrLeaseModel {
    /// A fresh lease (never held) in a fresh store; `seed` fixes the latencies and coins.
    pub fn new(cfg: SbrLeaseConfig, seed: u64) -> Self {
        let clock = Arc::new(AtomicU64::new(0));
        let read = Arc::clone(&clock);
        SbrLeaseModel {
            cfg,
            store: MemoryStore::with_clock(move || {
                Duration::from_nanos(read.load(Ordering::Relaxed))
            }),
            clock,
            ops: BTreeMap::new(),
            seq: 0,
            holding: BTreeMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5b2_1ea5e),
            stats: SbrLeaseStats::default(),
            grants: Vec::new(),
        }
    }

    /// Totals so far.
    pub fn stats(&self) -> &SbrLeaseStats {
        &self.stats
    }

    /// Every grant of a new tenure or a re-grant, in order.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The lease as the store sees it at `now`.
    pub fn read(&self, now: Instant) -> Option<LeaseInfo> {
        self.clock.store(now.as_nanos(), Ordering::Relaxed);
        at_once(self.store.read_lease(&self.cfg.name))
            .ok()
            .flatten()
    }

    /// The token slot `id`'s handle holds now, if it counts on the lease.
    pub fn held_by(&self, id: NodeId, now: Instant) -> Option<u64> {
        self.holding
            .iter()
            .find(|(c, h)| c.id == id && h.deadline > now)
            .map(|(_, h)| h.token)
    }

    /// A node's resolver asked for something (an [`Effect::Sbr`] of the core).
    ///
    /// [`Effect::Sbr`]: shardik_core::membership::Effect::Sbr
    pub fn request(&mut self, now: Instant, from: Caller, action: SbrAction) {
        match action {
            SbrAction::Down { decision, .. } => {
                *self.stats.decisions.entry(decision.as_str()).or_default() += 1;
            }
            SbrAction::AcquireLease { attempt } => {
                self.stats.requests += 1;
                match self.holding.get(&from) {
                    Some(h) if h.deadline > now => {
                        // The handle's own check: no store call.
                        self.stats.answered_by_holder += 1;
                        let token = Some(h.token);
                        self.schedule(
                            now,
                            Op::Answer {
                                to: from,
                                attempt,
                                token,
                                sent: now,
                            },
                        );
                    }
                    _ => {
                        let at = now + self.latency();
                        self.schedule(
                            at,
                            Op::Acquire {
                                from,
                                attempt,
                                sent: now,
                            },
                        );
                    }
                }
            }
            SbrAction::ReleaseLease => {
                // The handle lets go at once; the store hears of it a latency later.
                if let Some(h) = self.holding.remove(&from) {
                    let at = now + self.latency();
                    self.schedule(
                        at,
                        Op::Release {
                            from,
                            token: h.token,
                        },
                    );
                }
            }
        }
    }

    /// When the next call reaches the store or a node.
    pub fn next_at(&self) -> Option<Instant> {
        self.ops.first_key_value().map(|((t, _), _)| *t)
    }

    /// Runs every call due at `now`; returns the answers to hand to nodes now. `live` says
    /// where a caller is.
    pub fn step(
        &mut self,
        now: Instant,
        live: impl Fn(&Caller) -> Liveness,
    ) -> Vec<(NodeId, Input)> {
        self.clock.store(now.as_nanos(), Ordering::Relaxed);
        let mut inputs = Vec::new();
        while let Some(entry) = self.ops.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let op = entry.remove();
            self.run(now, op, &live, &mut inputs);
        }
        inputs
    }

    fn run(
        &mut self,
        now: Instant,
        op: Op,
        live: &impl Fn(&Caller) -> Liveness,
        inputs: &mut Vec<(NodeId, Input)>,
    ) {
        match op {
            Op::Acquire {
                from,
                attempt,
                sent,
            } => {
                if !self.reaches_store(&from, live) {
                    return;
                }
                let answer = at_once(self.store.acquire_lease(
                    &self.cfg.name,
                    &from.owner(),
                    self.cfg.heartbeat_timeout,
                ));
                let token = match answer {
                    Ok(LeaseAcquired::Granted(g)) => {
                        self.stats.granted += 1;
                        self.grants.push(Grant {
                            at: now,
                            owner: from.owner(),
                            token: g.token,
                        });
                        Some(g.token)
                    }
                    Ok(LeaseAcquired::HeldByOther { .. }) => {
                        self.stats.refused += 1;
                        None
                    }
                    Err(_) => {
                        self.stats.failed += 1;
                        None
                    }
                };
                let at = now + self.latency();
                self.schedule(
                    at,
                    Op::Answer {
                        to: from,
                        attempt,
                        token,
                        sent,
                    },
                );
            }
            Op::Answer {
                to,
                attempt,
                token,
                sent,
            } => {
                if !self.delivered(now, &to, live, |to| Op::Answer {
                    to,
                    attempt,
                    token,
                    sent,
                }) {
                    return;
                }
                let deadline = sent + self.counted_for();
                let in_time = now.saturating_duration_since(sent)
                    <= self.cfg.lease_operation_timeout
                    && deadline > now;
                let granted = match token {
                    Some(token) if in_time => {
                        let renew_at = sent + self.cfg.heartbeat_interval;
                        self.holding.insert(to.clone(), Holding { token, deadline });
                        self.schedule(
                            renew_at,
                            Op::RenewDue {
                                holder: to.clone(),
                                token,
                            },
                        );
                        true
                    }
                    Some(_) => {
                        self.stats.failed += 1;
                        false
                    }
                    None => false,
                };
                inputs.push((to.id, Input::SbrLeaseAnswer { attempt, granted }));
            }
            Op::RenewDue { holder, token } => {
                match self.delivery(now, &holder, live, |holder| Op::RenewDue { holder, token }) {
                    Delivery::Now => {}
                    Delivery::Later => return,
                    Delivery::Never => {
                        // A crashed process renews nothing; its lease expires in the store.
                        self.holding.remove(&holder);
                        return;
                    }
                }
                let Some(h) = self.holding.get(&holder) else {
                    return; // Released meanwhile.
                };
                if h.token != token {
                    return; // A timer of an earlier tenure.
                }
                if now >= h.deadline {
                    self.lose(&holder);
                    return;
                }
                let at = now + self.latency();
                self.schedule(
                    at,
                    Op::Renew {
                        from: holder,
                        token,
                        sent: now,
                    },
                );
            }
            Op::Renew { from, token, sent } => {
                if !self.reaches_store(&from, live) {
                    return;
                }
                let ok = at_once(self.store.renew_lease(
                    &self.cfg.name,
                    &from.owner(),
                    token,
                    self.cfg.heartbeat_timeout,
                ))
                .unwrap_or(false);
                let at = now + self.latency();
                self.schedule(
                    at,
                    Op::Renewed {
                        to: from,
                        token,
                        ok,
                        sent,
                    },
                );
            }
            Op::Renewed {
                to,
                token,
                ok,
                sent,
            } => {
                if !self.delivered(now, &to, live, |to| Op::Renewed {
                    to,
                    token,
                    ok,
                    sent,
                }) {
                    return;
                }
                let counted_for = self.counted_for();
                let interval = self.cfg.heartbeat_interval;
                let Some(h) = self.holding.get_mut(&to).filter(|h| h.token == token) else {
                    return;
                };
                if !ok || now >= h.deadline {
                    self.lose(&to);
                    return;
                }
                self.stats.renewed += 1;
                h.deadline = sent + counted_for;
                self.schedule(sent + interval, Op::RenewDue { holder: to, token });
            }
            Op::Release { from, token } => {
                if !self.reaches_store(&from, live) {
                    return;
                }
                let released = at_once(self.store.release_lease(
                    &self.cfg.name,
                    &from.owner(),
                    token,
                ));
                if released == Ok(true) {
                    self.stats.released += 1;
                }
            }
        }
    }

    /// How long after sending a successful request the holder counts on the lease.
    fn counted_for(&self) -> Duration {
        self.cfg
            .heartbeat_timeout
            .saturating_sub(self.cfg.lease_operation_timeout)
    }

    fn lose(&mut self, holder: &Caller) {
        if self.holding.remove(holder).is_some() {
            self.stats.lost += 1;
        }
    }

    /// Whether a call of `from` reaches the store: always while its node runs (paused or
    /// not: the request left before); by a coin once it crashed.
    fn reaches_store(&mut self, from: &Caller, live: &impl Fn(&Caller) -> Liveness) -> bool {
        if live(from) != Liveness::Gone || self.rng.random_bool(0.5) {
            return true;
        }
        self.stats.lost_in_crash += 1;
        false
    }

    /// Whether something reaching `to` is handled now.
    fn delivered(
        &mut self,
        now: Instant,
        to: &Caller,
        live: &impl Fn(&Caller) -> Liveness,
        again: impl FnOnce(Caller) -> Op,
    ) -> bool {
        self.delivery(now, to, live, again) == Delivery::Now
    }

    /// When something reaching `to` is handled: now; when its pause ends (rescheduled with
    /// `again`); or never, for a node that is gone.
    fn delivery(
        &mut self,
        now: Instant,
        to: &Caller,
        live: &impl Fn(&Caller) -> Liveness,
        again: impl FnOnce(Caller) -> Op,
    ) -> Delivery {
        match live(to) {
            Liveness::Paused(until) if until > now => {
                self.schedule(until, again(to.clone()));
                Delivery::Later
            }
            Liveness::Alive | Liveness::Paused(_) => Delivery::Now,
            Liveness::Gone => {
                self.stats.answers_to_the_dead += 1;
                Delivery::Never
            }
        }
    }

    fn schedule(&mut self, at: Instant, op: Op) {
        self.seq += 1;
        self.ops.insert((at, self.seq), op);
    }

    fn latency(&mut self) -> Duration {
        let (lo, hi) = self.cfg.latency;
        if hi > lo {
            lo + Duration::from_nanos(self.rng.random_range(0..(hi - lo).as_nanos() as u64))
        } else {
            lo
        }
    }
}

/// The answer of a [`MemoryStore`] call, which never waits (a pending one is a failure).
fn at_once<T>(mut f: StoreFuture<'_, T>) -> Result<T, StoreError> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(StoreError::InvalidArgument(
            "the memory store did not answer at once".into(),
        )),
    }
}
