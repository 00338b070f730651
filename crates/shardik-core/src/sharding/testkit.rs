//! A small in-memory cluster of regions and coordinators for the core's tests.
//!
//! Membership is given (every node sees the same member list, changed by the test); messages
//! travel in FIFO order per pair of nodes, with pairs interleaved by a seeded generator; the
//! entity layer is modelled by recording deliveries. After every step the harness checks
//! that no shard runs on two nodes at once.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::Instant;
use crate::membership::{Address, Member, MemberStatus, UniqueAddress};

use super::allocation::LeastShardAllocationStrategy;
use super::coordinator::{Coordinator, CoordinatorSettings};
use super::kind_node::strategy::{AllocationChoice, KindStrategy};
use super::kind_node::{KindEffect, KindInput, KindNode, KindNodeSettings, LeaseKey};
use super::protocol::Protocol;
use super::region::{DropReason, Envelope, HandOffMode, Region, RegionSettings};
use super::shard_id::{EntityId, ShardId, shard_id_for};
use crate::lease::{LeaseAnswer, LeaseCall, LeaseTiming};

/// A test message: who sent it and its sequence number for that sender.
pub(crate) type Msg = (UniqueAddress, u64);

pub(crate) fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("n", i), u64::from(i))
}

enum Wire {
    Proto(Protocol),
    User(Envelope<Msg>),
    EntitiesStopped(ShardId),
    Lease {
        key: LeaseKey,
        id: u64,
        answer: LeaseAnswer,
    },
    LeasesRead {
        id: u64,
        answer: crate::sharding::coordinator::LeasesRead,
    },
}

/// One lease in the test's store: owner, token, expiry by the test's clock.
#[derive(Clone, Debug)]
pub(crate) struct StoredLease {
    pub owner: Option<UniqueAddress>,
    pub token: u64,
    pub expires: Instant,
}

/// The node that stands for the lease store on the test's network (answers come from it, in
/// order, interleaved with everything else).
pub(crate) fn store_node() -> UniqueAddress {
    node(999)
}

struct TestNode {
    kind: KindNode<Msg>,
    alive: bool,
}

pub(crate) struct Net {
    pub now: Instant,
    rng: u64,
    nodes: BTreeMap<UniqueAddress, TestNode>,
    members: BTreeMap<UniqueAddress, Member>,
    queues: BTreeMap<(UniqueAddress, UniqueAddress), VecDeque<Wire>>,
    pub region_settings: RegionSettings,
    pub coordinator_settings: CoordinatorSettings,
    pub number_of_shards: u32,
    /// (node, entity, message) in delivery order.
    pub delivered: Vec<(UniqueAddress, EntityId, Msg)>,
    pub dropped: Vec<(Msg, DropReason)>,
    hosting: BTreeMap<ShardId, BTreeSet<UniqueAddress>>,
    /// Shards whose entities are stopping; they finish at the next timer run, so messages
    /// keep arriving meanwhile (as with entities that take time to stop).
    stopping: Vec<(UniqueAddress, ShardId)>,
    pub violations: Vec<String>,
    next_up: u32,
    /// Leases by (node-independent) key, as a store keeps them; `lease_timing` turns them on.
    pub leases: BTreeMap<LeaseKey, StoredLease>,
    pub lease_timing: Option<LeaseTiming>,
    /// Whether the lease store answers with errors (it is "down").
    pub lease_store_down: bool,
    /// Shards whose lease was lost, per node, in order.
    pub leases_lost: Vec<(UniqueAddress, ShardId)>,
    /// Tokens the entities' writes would carry, per node and shard.
    pub lease_tokens: BTreeMap<(UniqueAddress, ShardId), u64>,
    /// Nodes that are frozen: alive, but they take no input and run no timer until thawed
    /// (what is sent to them waits); the others see them unreachable.
    frozen: BTreeSet<UniqueAddress>,
    /// Nodes cut off from every other node but not from the lease store: they run, renew
    /// their leases, and hear nothing from the others (what is sent either way waits).
    cut_off: BTreeSet<UniqueAddress>,
    /// Protocol messages the network loses, when set (a test that needs one kind missing).
    pub lose: Option<fn(&Protocol) -> bool>,
}

impl Net {
    pub fn new(seed: u64, mode: HandOffMode) -> Self {
        Net {
            now: Instant::from_millis(1),
            rng: seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                | 1,
            nodes: BTreeMap::new(),
            members: BTreeMap::new(),
            queues: BTreeMap::new(),
            region_settings: RegionSettings {
                handoff_mode: mode,
                ..RegionSettings::default()
            },
            coordinator_settings: CoordinatorSettings {
                forward_handoff: mode == HandOffMode::Forward,
                ..CoordinatorSettings::default()
            },
            number_of_shards: 10,
            delivered: Vec::new(),
            dropped: Vec::new(),
            hosting: BTreeMap::new(),
            stopping: Vec::new(),
            violations: Vec::new(),
            next_up: 1,
            leases: BTreeMap::new(),
            lease_timing: None,
            lease_store_down: false,
            leases_lost: Vec::new(),
            lease_tokens: BTreeMap::new(),
            frozen: BTreeSet::new(),
            cut_off: BTreeSet::new(),
            lose: None,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: deterministic and good enough to interleave queues.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Adds an Up member (with a region, or a proxy).
    pub fn add(&mut self, i: u16, proxy: bool) -> UniqueAddress {
        let n = node(i);
        let mut m = Member::joining(n.clone(), BTreeSet::new(), "1.0");
        m.status = MemberStatus::Up;
        m.up_number = self.next_up;
        self.next_up += 1;
        self.members.insert(n.clone(), m);
        let settings = KindNodeSettings {
            region: RegionSettings {
                lease: self.lease_timing,
                ..self.region_settings.clone()
            },
            coordinator_lease: self.lease_timing,
            self_fence_after: None,
            coordinator: self.coordinator_settings.clone(),
            role: None,
            proxy,
            down_removal_margin: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(60),
        };
        let allocation = AllocationChoice::Immediate(Box::new(|| {
            Box::new(LeastShardAllocationStrategy::new(20, 0.1))
        }));
        let kind = KindNode::new(n.clone(), settings, allocation, self.now);
        self.nodes.insert(n.clone(), TestNode { kind, alive: true });
        self.views_changed();
        n
    }

    pub fn set_status(&mut self, n: &UniqueAddress, status: MemberStatus) {
        if status == MemberStatus::Removed {
            self.members.remove(n);
        } else if let Some(m) = self.members.get_mut(n) {
            m.status = status;
        }
        self.views_changed();
    }

    /// The node stops dead: its messages are lost, its shards with it.
    pub fn crash(&mut self, n: &UniqueAddress) {
        if let Some(t) = self.nodes.get_mut(n) {
            t.alive = false;
        }
        self.queues.retain(|(from, to), _| from != n && to != n);
        for homes in self.hosting.values_mut() {
            homes.remove(n);
        }
    }

    /// The node freezes (a SIGSTOP, a hung machine): it runs nothing, hears nothing (what is
    /// sent to it waits), and the others see it unreachable, though it stays a member. A
    /// frozen process runs no entity either, whatever its region thinks.
    pub fn freeze(&mut self, n: &UniqueAddress) {
        self.frozen.insert(n.clone());
        for homes in self.hosting.values_mut() {
            homes.remove(n);
        }
        self.views_changed();
    }

    /// The node is cut off from its peers (both ways) but not from the lease store.
    pub fn cut_off(&mut self, n: &UniqueAddress) {
        self.cut_off.insert(n.clone());
        self.views_changed();
    }

    /// The node runs again where it stopped, and is reachable again.
    pub fn thaw(&mut self, n: &UniqueAddress) {
        self.frozen.remove(n);
        self.views_changed();
    }

    /// Node `n` judges the time (`KindNode::catch_up`), as a driver does before its entities
    /// get anything that does not pass through the node; returns how many effects it had.
    pub fn catch_up(&mut self, n: &UniqueAddress) -> usize {
        let now = self.now;
        let mut out = Vec::new();
        if let Some(t) = self.nodes.get_mut(n).filter(|t| t.alive) {
            t.kind.catch_up(now, &mut out);
        }
        let effects = out.len();
        self.effects(n, out);
        effects
    }

    pub fn graceful_shutdown(&mut self, n: &UniqueAddress) {
        self.input(n, KindInput::Shutdown);
    }

    pub fn region(&self, n: &UniqueAddress) -> &Region<Msg> {
        self.nodes[n].kind.region()
    }

    pub fn coordinator(&self, n: &UniqueAddress) -> Option<&Coordinator<KindStrategy>> {
        let t = &self.nodes[n];
        t.kind.coordinator().filter(|_| t.alive)
    }

    /// Feeds `input` to node `n` (if alive) and carries out its effects.
    fn input(&mut self, n: &UniqueAddress, input: KindInput<Msg>) {
        let now = self.now;
        let mut out = Vec::new();
        // The runtime's shortcuts skip `handle` when these say so: check, on every local
        // message of every scenario, that `handle` would have done exactly that.
        let shortcut = match (&input, self.nodes.get(n)) {
            (KindInput::Route { from: None, env }, Some(t)) => Some((
                t.kind.delivers_at_once(&env.shard),
                t.kind.forwards_at_once(&env.shard).cloned(),
            )),
            _ => None,
        };
        match self.nodes.get_mut(n) {
            Some(t) if t.alive && !self.frozen.contains(n) => t.kind.handle(now, input, &mut out),
            _ => return,
        }
        match shortcut {
            Some((true, _)) if !matches!(&out[..], [KindEffect::Deliver(_)]) => {
                self.violations.push(format!(
                    "{:?}: delivers_at_once on {n}, but routing gave {out:?}",
                    self.now
                ));
            }
            Some((_, Some(home))) if !matches!(&out[..], [KindEffect::Forward { to, .. }] if *to == home) =>
            {
                self.violations.push(format!(
                    "{:?}: forwards_at_once to {home} on {n}, but routing gave {out:?}",
                    self.now
                ));
            }
            _ => {}
        }
        self.effects(n, out);
    }

    fn views_changed(&mut self) {
        let members: Vec<Member> = self.members.values().cloned().collect();
        let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
        for id in ids {
            let input = KindInput::Membership {
                members: members.clone(),
                unreachable: self.frozen.union(&self.cut_off).cloned().collect(),
            };
            self.input(&id, input);
        }
    }

    /// The shard of `entity`.
    pub fn shard_of(&self, entity: &str) -> ShardId {
        shard_id_for(entity, self.number_of_shards).unwrap()
    }

    /// A local sender on `at` tells `entity` message number `seq`.
    pub fn tell(&mut self, at: &UniqueAddress, entity: &str, seq: u64) {
        let shard = shard_id_for(entity, self.number_of_shards).unwrap();
        let env = Envelope {
            entity: entity.into(),
            shard,
            msg: (at.clone(), seq),
        };
        self.input(at, KindInput::Route { from: None, env });
    }

    fn push(&mut self, from: &UniqueAddress, to: &UniqueAddress, w: Wire) {
        if !self.nodes.get(to).is_some_and(|t| t.alive) {
            return;
        }
        self.queues
            .entry((from.clone(), to.clone()))
            .or_default()
            .push_back(w);
    }

    fn effects(&mut self, at: &UniqueAddress, out: Vec<KindEffect<Msg>>) {
        for e in out {
            match e {
                KindEffect::Send { msg, .. } if self.lose.is_some_and(|lose| lose(&msg)) => {}
                KindEffect::Send { to, msg } => self.push(at, &to, Wire::Proto(msg)),
                KindEffect::Forward { to, env } => self.push(at, &to, Wire::User(env)),
                KindEffect::Deliver(env) => {
                    let homes = self.hosting.get(&env.shard).cloned().unwrap_or_default();
                    if homes.len() != 1 || !homes.contains(at) {
                        self.violations.push(format!(
                            "{:?}: delivered {} on {at} while hosts are {homes:?}",
                            self.now, env.entity
                        ));
                    }
                    self.delivered.push((at.clone(), env.entity, env.msg));
                }
                KindEffect::ShardStarted(shard) => {
                    let homes = self.hosting.entry(shard.clone()).or_default();
                    homes.insert(at.clone());
                    if homes.len() > 1 {
                        self.violations
                            .push(format!("{:?}: shard {shard} hosted on {homes:?}", self.now));
                    }
                }
                KindEffect::StopEntities(shard) => self.stopping.push((at.clone(), shard)),
                KindEffect::ShardStopped(shard) => {
                    if let Some(h) = self.hosting.get_mut(&shard) {
                        h.remove(at);
                    }
                }
                KindEffect::Dropped { env, reason } => self.dropped.push((env.msg, reason)),
                KindEffect::Lease(request) => {
                    if let Some(answer) = self.lease_call(at, &request.key, request.call) {
                        let key = request.key;
                        let id = request.id;
                        self.push(&store_node(), at, Wire::Lease { key, id, answer });
                    }
                }
                KindEffect::ReadShardLeases { id, shards } => {
                    let answer = self.read_leases(&shards);
                    self.push(&store_node(), at, Wire::LeasesRead { id, answer });
                }
                KindEffect::ShardLeased { shard, token } => {
                    self.lease_tokens.insert((at.clone(), shard), token);
                }
                KindEffect::ShardLeaseLost { shard, .. } => {
                    self.lease_tokens.remove(&(at.clone(), shard.clone()));
                    self.leases_lost.push((at.clone(), shard));
                }
                KindEffect::ForceStopEntities(_)
                | KindEffect::CoordinatorLeaseLost(_)
                | KindEffect::LeaseUnavailable { .. }
                | KindEffect::LeaseRecovered(_)
                | KindEffect::Fenced(_)
                | KindEffect::CoordinatorNodeLacksKind(_)
                | KindEffect::CoordinatorRunning(_)
                | KindEffect::Coordinator(_)
                | KindEffect::AllocationAsked { .. }
                | KindEffect::RebalanceAsked { .. }
                | KindEffect::RegionStopped => {}
            }
        }
    }

    /// Delivers one queued message; false when nothing is queued.
    pub fn step(&mut self) -> bool {
        let keys: Vec<(UniqueAddress, UniqueAddress)> = self
            .queues
            .iter()
            .filter(|((from, to), q)| {
                let store = *from == store_node();
                let cut = from != to
                    && !store
                    && (self.cut_off.contains(from) || self.cut_off.contains(to));
                !q.is_empty() && !self.frozen.contains(to) && !cut
            })
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return false;
        }
        let pick = (self.next_random() % keys.len() as u64) as usize;
        let (from, to) = keys[pick].clone();
        let w = self
            .queues
            .get_mut(&(from.clone(), to.clone()))
            .and_then(VecDeque::pop_front)
            .unwrap();
        self.now += Duration::from_micros(100);
        let input = match w {
            Wire::User(env) => KindInput::Route {
                from: Some(from),
                env,
            },
            Wire::EntitiesStopped(shard) => KindInput::EntitiesStopped(shard),
            Wire::Proto(msg) => KindInput::Protocol { from, msg },
            Wire::Lease { key, id, answer } => KindInput::LeaseAnswered { key, id, answer },
            Wire::LeasesRead { id, answer } => KindInput::ShardLeasesRead { id, answer },
        };
        self.input(&to, input);
        true
    }

    /// Runs until no message is queued (bounded, to catch livelocks).
    pub fn settle(&mut self) {
        for _ in 0..1_000_000 {
            if !self.step() {
                return;
            }
        }
        panic!("the network did not settle");
    }

    /// Advances time by `d`, running timers, and settles after each.
    pub fn advance(&mut self, d: Duration) {
        self.run_timers(d, true);
    }

    /// Advances time by `d` and runs due timers, leaving queued messages in flight.
    pub fn tick(&mut self, d: Duration) {
        self.run_timers(d, false);
    }

    fn run_timers(&mut self, d: Duration, settle: bool) {
        let end = self.now + d;
        if settle {
            self.settle();
        }
        for (at, shard) in std::mem::take(&mut self.stopping) {
            self.push(&at, &at, Wire::EntitiesStopped(shard));
        }
        if settle {
            self.settle();
        }
        loop {
            let next = self
                .nodes
                .iter()
                .filter(|(id, t)| t.alive && !self.frozen.contains(*id))
                .filter_map(|(_, t)| t.kind.poll_timeout())
                .min();
            let Some(at) = next.filter(|t| *t <= end) else {
                break;
            };
            self.now = self.now.max(at);
            let now = self.now;
            let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
            for id in ids {
                let mut out = Vec::new();
                {
                    let t = self.nodes.get_mut(&id).unwrap();
                    if !t.alive
                        || self.frozen.contains(&id)
                        || t.kind.poll_timeout().is_none_or(|x| x > now)
                    {
                        continue;
                    }
                    t.kind.handle_timeout(now, &mut out);
                }
                self.effects(&id, out);
            }
            if settle {
                self.settle();
            }
        }
        self.now = self.now.max(end);
    }

    /// The store's side of a lease call by `by` (`None`: releases are not answered).
    /// The shards' leases as the test's store sees them now.
    fn read_leases(&self, shards: &[ShardId]) -> crate::sharding::coordinator::LeasesRead {
        if self.lease_store_down {
            return Err("the store is down".into());
        }
        Ok(shards
            .iter()
            .map(|shard| {
                let row = self.leases.get(&LeaseKey::Shard(shard.clone())).map(|l| {
                    crate::lease::StoreLease {
                        owner: l.owner.as_ref().map(crate::lease::owner_name),
                        token: l.token,
                        time_left: l.expires.saturating_duration_since(self.now),
                    }
                });
                (shard.clone(), row)
            })
            .collect())
    }

    fn lease_call(
        &mut self,
        by: &UniqueAddress,
        key: &LeaseKey,
        call: LeaseCall,
    ) -> Option<LeaseAnswer> {
        if self.lease_store_down {
            return match call {
                LeaseCall::Release { .. } => None,
                _ => Some(LeaseAnswer::Failed("the store is down".into())),
            };
        }
        let ttl = self.lease_timing.expect("leases are on").ttl;
        let now = self.now;
        let lease = self.leases.entry(key.clone()).or_insert(StoredLease {
            owner: None,
            token: 0,
            expires: Instant::ZERO,
        });
        let live = lease.owner.is_some() && now < lease.expires;
        match call {
            LeaseCall::Acquire => {
                if live && lease.owner.as_ref() != Some(by) {
                    return Some(LeaseAnswer::HeldByOther);
                }
                if !(live && lease.owner.as_ref() == Some(by)) {
                    lease.token += 1;
                    lease.owner = Some(by.clone());
                }
                lease.expires = now + ttl;
                Some(LeaseAnswer::Granted { token: lease.token })
            }
            LeaseCall::Renew { token } => {
                if live && lease.owner.as_ref() == Some(by) && lease.token == token {
                    lease.expires = now + ttl;
                    Some(LeaseAnswer::Renewed)
                } else {
                    Some(LeaseAnswer::Refused)
                }
            }
            LeaseCall::Release { token } => {
                if lease.owner.as_ref() == Some(by) && lease.token == token {
                    lease.owner = None;
                }
                None
            }
        }
    }

    /// Two nodes take traffic for 30 entities, then a third joins and every node keeps
    /// sending while shards rebalance to it (steps interleaved with 100 ms ticks, messages in
    /// flight), and the network settles. `start_after` lets the first two nodes settle first
    /// (a coordinator under a lease needs it). Returns the third node and the last sequence
    /// number each sender used; the third node's first was 4.
    pub fn rebalance_to_a_third_node_under_load(
        &mut self,
        start_after: Duration,
    ) -> (UniqueAddress, u64) {
        self.coordinator_settings.rebalance_interval = Duration::from_secs(1);
        let a = self.add(1, false);
        let b = self.add(2, false);
        self.advance(start_after);
        let ids: Vec<String> = (0..30).map(|i| format!("e{i}")).collect();
        let mut seq = 0;
        for _ in 0..3 {
            seq += 1;
            for e in &ids {
                self.tell(&a, e, seq);
                self.tell(&b, e, seq);
            }
            self.settle();
        }
        let c = self.add(3, false);
        for _ in 0..40 {
            seq += 1;
            for e in &ids {
                self.tell(&a, e, seq);
                self.tell(&b, e, seq);
                self.tell(&c, e, seq);
            }
            // Interleave traffic with the protocol: a few steps, then time, with messages
            // still in flight.
            for _ in 0..50 {
                self.step();
            }
            self.tick(Duration::from_millis(100));
        }
        self.advance(Duration::from_secs(5));
        (c, seq)
    }

    /// Where each shard runs now.
    pub fn hosts(&self) -> BTreeMap<ShardId, BTreeSet<UniqueAddress>> {
        self.hosting
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(s, h)| (s.clone(), h.clone()))
            .collect()
    }

    /// Messages delivered per (sender, entity), in delivery order.
    pub fn per_sender(&self) -> BTreeMap<(UniqueAddress, EntityId), Vec<u64>> {
        let mut out: BTreeMap<(UniqueAddress, EntityId), Vec<u64>> = BTreeMap::new();
        for (_, e, (from, seq)) in &self.delivered {
            out.entry((from.clone(), e.clone())).or_default().push(*seq);
        }
        out
    }
}
