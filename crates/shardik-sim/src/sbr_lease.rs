//! The split-brain resolver's lease (lease-majority) in the simulated world: one real
//! [`MemoryStore`] whose lease clock is the world's virtual time, reached from every live node
//! whatever the partitions (the store is elsewhere, as a database is), each call taking a
//! latency each way.
//!
//! Only the world's side is here. The holder's side (when to acquire, renew and release, until
//! when a grant counts, what a late answer means) is the node's membership core, the same
//! `LeaseKeeper` the runtime drives: this model executes the [`LeaseRequest`]s it emits
//! ([`Effect::SbrLease`]) and hands the store's answers back ([`Input::SbrLeaseAnswered`]).
//! What it adds is when, and whether, a call gets there:
//!
//! * one node's calls reach the store in the order they were made, as the runtime's one
//!   worker per node makes them (the core relies on a release never being overtaken);
//! * a call whose node crashed before it reached the store reaches it or not, by a coin (it
//!   may have left before the crash); answers to a crashed node are lost; a paused node gets
//!   them when its pause ends.
//!
//! A call's timeout (`lease-operation-timeout`) is the core's: an answer that comes later is
//! handed over all the same, and the core ignores it or gives a late grant back.
//!
//! [`Effect::SbrLease`]: shardik_core::membership::Effect::SbrLease
//! [`Input::SbrLeaseAnswered`]: shardik_core::membership::Input::SbrLeaseAnswered

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::lease::{LeaseAnswer, LeaseCall, LeaseRequest};
use shardik_core::membership::sbr::{SbrAction, Strategy};
use shardik_core::membership::{Input, UniqueAddress};
use shardik_persistence::{LeaseAcquired, LeaseInfo, MemoryStore, Store, StoreError, StoreFuture};

use crate::node_id::NodeId;

/// The lease's place in the world: its name and how far the store is.
#[derive(Clone, Debug)]
pub struct SbrLeaseConfig {
    /// The lease's name.
    pub name: String,
    /// One-way latency to the store, drawn uniformly from this range.
    pub latency: (Duration, Duration),
}

impl Default for SbrLeaseConfig {
    /// 1–10 ms to the store.
    fn default() -> Self {
        SbrLeaseConfig {
            name: "shardik-shardik-sbr".to_string(),
            latency: (Duration::from_millis(1), Duration::from_millis(10)),
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
    /// The lease's time-to-live its settings ask the store for
    /// (`coordination.lease.heartbeat-timeout`).
    pub ttl: Duration,
}

impl Caller {
    /// `node` in slot `id`, asking for the time-to-live of `strategy` (none but
    /// lease-majority takes the lease).
    pub fn new(id: NodeId, node: UniqueAddress, strategy: Option<&Strategy>) -> Self {
        let ttl = match strategy {
            Some(Strategy::LeaseMajority { lease_ttl, .. }) => *lease_ttl,
            _ => Duration::ZERO,
        };
        Caller { id, node, ttl }
    }

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
    /// A call reaches the store.
    Call {
        from: Caller,
        request: LeaseRequest<()>,
    },
    /// The store's answer to call `id` reaches its node.
    Answer {
        to: Caller,
        id: u64,
        answer: LeaseAnswer,
    },
}

/// What the model saw over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbrLeaseStats {
    /// Acquisitions that went to the store (an acquisition the holder answered itself, while
    /// it held the lease, never comes here).
    pub requests: u64,
    /// Grants the store made (new tenures and the same owner's re-grants).
    pub granted: u64,
    /// Acquires the store refused (another owner held the lease).
    pub refused: u64,
    /// Calls the store failed.
    pub failed: u64,
    /// Releases that reached the store and freed the lease.
    pub released: u64,
    /// Renewals that kept the lease.
    pub renewed: u64,
    /// Renewals the store refused (the lease was no longer the caller's).
    pub renewals_refused: u64,
    /// Leases a holder reported lost (a refused renewal, or its deadline passed).
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

/// The lease's store and the calls on their way to and from it.
pub struct SbrLeaseModel {
    cfg: SbrLeaseConfig,
    store: MemoryStore,
    clock: Arc<AtomicU64>,
    ops: BTreeMap<(Instant, u64), Op>,
    seq: u64,
    /// When each caller's last call reaches the store: the next one gets there no earlier.
    last_arrival: BTreeMap<Caller, Instant>,
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
            last_arrival: BTreeMap::new(),
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

    /// A node's resolver acted ([`Effect::Sbr`]): counted by decision.
    ///
    /// [`Effect::Sbr`]: shardik_core::membership::Effect::Sbr
    pub fn decided(&mut self, action: &SbrAction) {
        if let SbrAction::Down { decision, .. } = action {
            *self.stats.decisions.entry(decision.as_str()).or_default() += 1;
        }
    }

    /// A node's holder reported its lease lost ([`Effect::SbrLeaseLost`]).
    ///
    /// [`Effect::SbrLeaseLost`]: shardik_core::membership::Effect::SbrLeaseLost
    pub fn lost(&mut self) {
        self.stats.lost += 1;
    }

    /// A node's holder makes a call on the store ([`Effect::SbrLease`]): it gets there a
    /// latency later, after that node's earlier calls.
    ///
    /// [`Effect::SbrLease`]: shardik_core::membership::Effect::SbrLease
    pub fn call(&mut self, now: Instant, from: Caller, request: LeaseRequest<()>) {
        if request.call == LeaseCall::Acquire {
            self.stats.requests += 1;
        }
        let mut at = now + self.latency();
        if let Some(last) = self.last_arrival.get(&from) {
            at = at.max(*last);
        }
        self.last_arrival.insert(from.clone(), at);
        self.schedule(at, Op::Call { from, request });
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
            Op::Call { from, request } => {
                if !self.reaches_store(&from, live) {
                    return;
                }
                let Some(answer) = self.execute(now, &from, request.call) else {
                    return; // A release: not answered.
                };
                let at = now + self.latency();
                let id = request.id;
                self.schedule(
                    at,
                    Op::Answer {
                        to: from,
                        id,
                        answer,
                    },
                );
            }
            Op::Answer { to, id, answer } => match live(&to) {
                Liveness::Paused(until) if until > now => {
                    self.schedule(until, Op::Answer { to, id, answer });
                }
                Liveness::Alive | Liveness::Paused(_) => {
                    inputs.push((to.id, Input::SbrLeaseAnswered { id, answer }));
                }
                Liveness::Gone => self.stats.answers_to_the_dead += 1,
            },
        }
    }

    /// The store's own code carries `call` out; `None` for a release, which is not answered.
    fn execute(&mut self, now: Instant, from: &Caller, call: LeaseCall) -> Option<LeaseAnswer> {
        let name = &self.cfg.name;
        let owner = from.owner();
        match call {
            LeaseCall::Acquire => {
                let answer = match at_once(self.store.acquire_lease(name, &owner, from.ttl)) {
                    Ok(LeaseAcquired::Granted(g)) => {
                        self.stats.granted += 1;
                        self.grants.push(Grant {
                            at: now,
                            owner,
                            token: g.token,
                        });
                        LeaseAnswer::Granted { token: g.token }
                    }
                    Ok(LeaseAcquired::HeldByOther { .. }) => {
                        self.stats.refused += 1;
                        LeaseAnswer::HeldByOther
                    }
                    Err(e) => {
                        self.stats.failed += 1;
                        LeaseAnswer::Failed(e.to_string())
                    }
                };
                Some(answer)
            }
            LeaseCall::Renew { token } => {
                let answer = match at_once(self.store.renew_lease(name, &owner, token, from.ttl)) {
                    Ok(true) => {
                        self.stats.renewed += 1;
                        LeaseAnswer::Renewed
                    }
                    Ok(false) => {
                        self.stats.renewals_refused += 1;
                        LeaseAnswer::Refused
                    }
                    Err(e) => {
                        self.stats.failed += 1;
                        LeaseAnswer::Failed(e.to_string())
                    }
                };
                Some(answer)
            }
            LeaseCall::Release { token } => {
                if at_once(self.store.release_lease(name, &owner, token)) == Ok(true) {
                    self.stats.released += 1;
                }
                None
            }
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
