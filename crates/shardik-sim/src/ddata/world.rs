//! [`DataWorld`]: the membership [`World`] with the real replicator core on every node, one
//! virtual clock for both, a network for the replicators' messages, clients calling the
//! replicators, and the checker watching every answer.
//!
//! Each node's replicator is built when its incarnation starts and dropped, with everything it
//! held, when the node crashes or shuts down; it is fed the membership view its node's core
//! gives (members, statuses, unreachable ones), as the runtime feeds it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::{MemberStatus, UniqueAddress};
use shardik_core::replicator::{
    OpId, Peer, ReadConsistency, Replicator, ReplicatorEffect, ReplicatorMessage,
    ReplicatorSettings, WriteConsistency,
};

use super::checker::{Call, DataChecker, counter_key, set_key};
use crate::world::{NodeId, World, WorldConfig};

/// One message between replicators, in flight.
struct Packet {
    from_id: NodeId,
    from: UniqueAddress,
    to_id: NodeId,
    to: UniqueAddress,
    message: ReplicatorMessage,
}

/// A node slot's replicator, while an incarnation of the node runs.
#[derive(Default)]
struct Slot {
    uid: Option<UniqueAddress>,
    replicator: Option<Replicator>,
}

/// How long a client's call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// A membership world whose nodes also replicate data.
pub struct DataWorld {
    world: World,
    settings: ReplicatorSettings,
    slots: Vec<Slot>,
    queue: BTreeMap<(Instant, u64), Packet>,
    seq: u64,
    /// Arrival of the last message per ordered pair of slots: later ones never overtake (one
    /// connection per pair, as the runtime's lanes).
    last_arrival: BTreeMap<(NodeId, NodeId), Instant>,
    rng: ChaCha8Rng,
    /// When clients next call, and how often.
    clients: Option<(Instant, Duration)>,
    checker: DataChecker,
    next_check: Instant,
    /// Messages delivered and lost over the run.
    pub delivered: u64,
    /// Messages lost to partitions and dead ends.
    pub lost: u64,
    scratch: Vec<ReplicatorEffect>,
}

impl DataWorld {
    /// A world of `cfg` whose nodes run replicators with `settings`.
    pub fn new(cfg: WorldConfig, settings: ReplicatorSettings) -> Self {
        let seed = cfg.seed;
        let world = World::new(cfg);
        let now = world.now();
        DataWorld {
            world,
            settings,
            slots: Vec::new(),
            queue: BTreeMap::new(),
            seq: 0,
            last_arrival: BTreeMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xdda7_a000),
            clients: None,
            checker: DataChecker::default(),
            next_check: now + Duration::from_secs(1),
            delivered: 0,
            lost: 0,
            scratch: Vec::new(),
        }
    }

    /// The membership world.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The membership world, to act on (crash, partition, join, …).
    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// The checker.
    pub fn checker(&self) -> &DataChecker {
        &self.checker
    }

    /// Slot `id`'s replicator, while its node runs.
    pub fn replicator(&self, id: NodeId) -> Option<&Replicator> {
        self.slots.get(id).and_then(|s| s.replicator.as_ref())
    }

    /// Virtual time.
    pub fn now(&self) -> Instant {
        self.world.now()
    }

    /// Starts (or with `None` stops) clients calling a random Up node every `interval`.
    pub fn set_clients(&mut self, interval: Option<Duration>) {
        let now = self.now();
        self.clients = interval.map(|i| (now, i));
    }

    /// Forms a cluster of `n` nodes (the first three are the seeds); the instant it agreed.
    pub fn form_cluster(&mut self, n: usize) -> Option<Instant> {
        let ids: Vec<NodeId> = (0..n).map(|_| self.world.add_node()).collect();
        let seeds: Vec<NodeId> = ids.iter().copied().take(3).collect();
        for &id in &ids {
            self.world.join(id, &seeds);
        }
        self.run_until_pred(Duration::from_secs(120), |d| {
            d.world.all_up(&ids) && d.world.agreed()
        })
    }

    /// When the next thing happens, membership or data.
    pub fn next_event_at(&self) -> Option<Instant> {
        [self.world.next_event_at(), self.next_own_event_at()]
            .into_iter()
            .flatten()
            .min()
    }

    fn next_own_event_at(&self) -> Option<Instant> {
        let timers = self
            .slots
            .iter()
            .filter_map(|s| s.replicator.as_ref())
            .map(Replicator::poll_timeout)
            .min();
        [
            self.queue.first_key_value().map(|((t, _), _)| *t),
            timers,
            self.clients.map(|(t, _)| t),
            Some(self.next_check),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Processes everything due at the next event time.
    pub fn step(&mut self) {
        self.sync();
        let own = self.next_own_event_at();
        match (self.world.next_event_at(), own) {
            (Some(a), Some(b)) if a <= b => {
                self.world.step();
            }
            (Some(_), None) => {
                self.world.step();
            }
            (_, Some(at)) => {
                self.world.run_until(at);
                self.own_events();
            }
            (None, None) => return,
        }
        self.sync();
    }

    /// Runs until virtual time `until`.
    pub fn run_until(&mut self, until: Instant) {
        while self.next_event_at().is_some_and(|t| t <= until) {
            self.step();
        }
        self.world.run_until(until);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now() + d;
        self.run_until(until);
    }

    /// Runs until `pred` holds or `max` passed; the instant it first held.
    pub fn run_until_pred(
        &mut self,
        max: Duration,
        mut pred: impl FnMut(&DataWorld) -> bool,
    ) -> Option<Instant> {
        let deadline = self.now() + max;
        loop {
            if pred(self) {
                return Some(self.now());
            }
            match self.next_event_at() {
                Some(t) if t <= deadline => self.step(),
                _ => {
                    self.world.run_until(deadline);
                    return pred(self).then_some(self.now());
                }
            }
        }
    }

    /// Whether every running replicator holds the same state of every key.
    pub fn converged(&self) -> bool {
        let running: Vec<&Replicator> = self
            .slots
            .iter()
            .filter_map(|s| s.replicator.as_ref())
            .collect();
        let Some((first, rest)) = running.split_first() else {
            return true;
        };
        let keys: BTreeSet<&str> = running
            .iter()
            .flat_map(|r| r.keys().map(|k| &**k))
            .collect();
        rest.iter().all(|r| {
            keys.iter().all(|k| match (first.local(k), r.local(k)) {
                (Some(a), Some(b)) => super::checker::same_stored(a, b),
                (None, None) => true,
                _ => false,
            })
        })
    }

    /// Checks the end state: every running replica converged, and every acknowledged write
    /// that some replica held when the last of its holders died is in it.
    pub fn final_check(&mut self) {
        let converged = self.converged();
        let running: Vec<&Replicator> = self
            .slots
            .iter()
            .filter_map(|s| s.replicator.as_ref())
            .collect();
        self.checker.final_check(&running, converged);
    }

    // ----- the parts in step -----

    /// Builds replicators for new incarnations, drops those of dead nodes, and feeds each
    /// the view its node's core gives when it changed.
    fn sync(&mut self) {
        let now = self.now();
        for id in 0..self.world.len() {
            if id == self.slots.len() {
                self.slots.push(Slot::default());
            }
            let uid = self.world.core(id).self_node().clone();
            let alive = self.world.is_alive(id);
            if self.slots[id].uid.as_ref() != Some(&uid) {
                self.kill(id);
                let seed = self.rng.random();
                let replicator = Replicator::new(
                    uid.clone(),
                    self.settings.clone(),
                    seed,
                    now,
                    now.as_millis(),
                );
                self.slots[id] = Slot {
                    uid: Some(uid),
                    replicator: alive.then_some(replicator),
                };
            } else if !alive {
                self.kill(id);
                continue;
            }
            let Some(view) = self.world.take_view(id) else {
                continue;
            };
            let Some(replicator) = self.slots[id].replicator.as_mut() else {
                continue;
            };
            replicator.set_peers(view.members.iter().map(|m| Peer {
                node: m.addr.clone(),
                status: m.status,
                reachable: !view.unreachable.contains(&m.addr),
            }));
        }
    }

    fn kill(&mut self, id: NodeId) {
        if self.slots[id].replicator.take().is_some() {
            let running: Vec<&Replicator> = self
                .slots
                .iter()
                .filter_map(|s| s.replicator.as_ref())
                .collect();
            self.checker.node_died(&running);
        }
    }

    fn own_events(&mut self) {
        let now = self.now();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let packet = entry.remove();
            self.arrive(packet);
        }
        for id in 0..self.slots.len() {
            let due = self.slots[id]
                .replicator
                .as_ref()
                .is_some_and(|r| r.poll_timeout() <= now);
            if due {
                let mut out = std::mem::take(&mut self.scratch);
                let replicator = self.slots[id].replicator.as_mut().expect("due");
                replicator.handle_timeout(now, &mut out);
                self.dispatch(id, &mut out);
                self.scratch = out;
            }
        }
        if let Some((at, interval)) = self.clients
            && at <= now
        {
            self.clients = Some((now + interval, interval));
            self.client_call();
        }
        if self.next_check <= now {
            self.next_check = now + Duration::from_secs(1);
            let running: Vec<&Replicator> = self
                .slots
                .iter()
                .filter_map(|s| s.replicator.as_ref())
                .collect();
            self.checker.check_pruning(&running);
        }
    }

    fn arrive(&mut self, packet: Packet) {
        let current = |d: &DataWorld, id: NodeId, who: &UniqueAddress| {
            d.slots[id].uid.as_ref() == Some(who) && d.slots[id].replicator.is_some()
        };
        if !self.world.can_reach(packet.from_id, packet.to_id)
            || !current(self, packet.to_id, &packet.to)
            || !current(self, packet.from_id, &packet.from)
        {
            self.lost += 1;
            return;
        }
        self.delivered += 1;
        let now = self.now();
        let mut out = std::mem::take(&mut self.scratch);
        let replicator = self.slots[packet.to_id]
            .replicator
            .as_mut()
            .expect("checked");
        replicator.handle_message(now, &packet.from, packet.message, &mut out);
        self.dispatch(packet.to_id, &mut out);
        self.scratch = out;
    }

    fn dispatch(&mut self, id: NodeId, out: &mut Vec<ReplicatorEffect>) {
        let now = self.now();
        let me = self.slots[id].uid.clone().expect("a running slot");
        for effect in out.drain(..) {
            match effect {
                ReplicatorEffect::Send { to, message } => {
                    let Some(to_id) = self.slots.iter().position(|s| s.uid.as_ref() == Some(&to))
                    else {
                        self.lost += 1;
                        continue;
                    };
                    let (lo, hi) = self.world.config().latency;
                    let span = (hi - lo).as_nanos() as u64;
                    let delay = lo + Duration::from_nanos(self.rng.random_range(0..span.max(1)));
                    let last = self
                        .last_arrival
                        .entry((id, to_id))
                        .or_insert(Instant::ZERO);
                    let at = (now + delay).max(*last);
                    *last = at;
                    self.seq += 1;
                    let packet = Packet {
                        from_id: id,
                        from: me.clone(),
                        to_id,
                        to,
                        message,
                    };
                    self.queue.insert((at, self.seq), packet);
                }
                ReplicatorEffect::Reply { op, outcome } => {
                    let running: Vec<&Replicator> = self
                        .slots
                        .iter()
                        .filter_map(|s| s.replicator.as_ref())
                        .collect();
                    self.checker.answered(now, &me, op, outcome, &running);
                }
                ReplicatorEffect::Changed { .. } => {}
                ReplicatorEffect::Dropped { reason, .. } => self.checker.dropped(reason),
            }
        }
    }

    /// One client call on a random Up node: add a new element to the set, count, or read the
    /// set, at a random consistency.
    fn client_call(&mut self) {
        let now = self.now();
        let up: Vec<NodeId> = (0..self.slots.len())
            .filter(|&id| {
                self.slots[id].replicator.is_some()
                    && self.world.core(id).self_status() == Some(MemberStatus::Up)
            })
            .collect();
        if up.is_empty() {
            return;
        }
        let id = up[self.rng.random_range(0..up.len())];
        let write = match self.rng.random_range(0..10) {
            0..3 => WriteConsistency::Local,
            3..8 => WriteConsistency::Majority { min_cap: 0 },
            _ => WriteConsistency::All,
        };
        let choice = self.rng.random_range(0..10);
        let mut out = std::mem::take(&mut self.scratch);
        let replicator = self.slots[id].replicator.as_mut().expect("up");
        let members = quorum_members(replicator);
        let me = replicator.node().clone();
        let (op, call): (OpId, Call) = match choice {
            0..5 => {
                let element = self.checker.next_element();
                let op = replicator.update(
                    now,
                    &set_key(),
                    write,
                    CALL_TIMEOUT,
                    Default::default,
                    |set, replica| set.add(&replica, element),
                    &mut out,
                );
                (op, Call::Add { element, write })
            }
            5..7 => {
                let op = replicator.update(
                    now,
                    &counter_key(),
                    write,
                    CALL_TIMEOUT,
                    Default::default,
                    |counter, replica| counter.increment(&replica, 1),
                    &mut out,
                );
                (op, Call::Count)
            }
            _ => {
                let read = if self.rng.random_bool(0.8) {
                    ReadConsistency::Majority { min_cap: 0 }
                } else {
                    ReadConsistency::Local
                };
                let op = replicator.get(now, set_key().id(), read, CALL_TIMEOUT, &mut out);
                (op, Call::Read { read })
            }
        };
        self.checker.called(now, me, op, call, members);
        self.dispatch(id, &mut out);
        self.scratch = out;
    }
}

/// The members a replicator counts toward quorums, itself included: two calls with the same
/// set count majorities of the same replicas, so they overlap.
fn quorum_members(replicator: &Replicator) -> BTreeSet<UniqueAddress> {
    replicator
        .quorum_members()
        .chain([replicator.node().clone()])
        .collect()
}
