//! Invariants of sharding, checked on every event of a simulated run.
//!
//! * **(a) One live instance.** No entity runs on two nodes at the same simulated instant, and
//!   none runs where its shard is not hosted. An entity lives from its first delivery until
//!   its shard's entities stopped (after the stop delay), were force-stopped, or its node died.
//! * **(b) One home.** No shard is hosted by two live nodes at once: hosting runs from the
//!   region's `ShardStarted` to its `ShardStopped` or the node's death. A message is delivered
//!   only where its shard is hosted.
//! * **(c) Order.** Per sender, kind and entity, delivered sequence numbers strictly increase:
//!   nothing is reordered or delivered twice. Gaps are allowed (a crash or a cut link loses
//!   messages, and drop mode drops some, reported).
//! * **(d) One coordinator, among the undisputed.** Stated over *legitimate* coordinators: one
//!   whose node is alive, and which no live node sees as Down, and which no node has removed.
//!   An unconditional "one coordinator" is not an invariant of the design: a node cut off on
//!   the minority side keeps running its coordinator until it learns it is down, and the
//!   majority may start its own once the down-removal margin has passed. That is safe because
//!   the old one can no longer place a shard anywhere the majority uses (that is what (a) and
//!   (b) check). What must never happen is two coordinators that nobody has disowned, which
//!   would mean two nodes each believe they are the oldest. A paused node's coordinator does
//!   not count while the node is paused: it runs nothing, and under leases another node may
//!   stand in for it (its coordinator lease lapsed), the paused one stopping its own first
//!   thing when it runs again.
//!
//! Nodes are named by incarnation ([`UniqueAddress`]), so a restarted node is a new one.
//! A coordinator reporting a shard claimed by two regions (`ConflictingClaim`) is a violation
//! too: the coordinator would only see it if (b) had been broken somewhere.

use std::collections::{BTreeMap, BTreeSet};

use shardik_core::Instant;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{EntityId, Envelope, ShardId};

use super::messages::SimMsg;

/// Collects sharding invariant violations; a run passes when there are none.
#[derive(Default)]
pub struct ShardingChecker {
    live: BTreeMap<(usize, EntityId), BTreeSet<UniqueAddress>>,
    /// The same, by the node and shard they run in.
    by_shard: BTreeMap<(usize, UniqueAddress, ShardId), BTreeSet<EntityId>>,
    hosts: BTreeMap<(usize, ShardId), BTreeSet<UniqueAddress>>,
    last_seq: BTreeMap<(usize, UniqueAddress, EntityId), u64>,
    reported_coordinators: BTreeMap<usize, BTreeSet<UniqueAddress>>,
    violations: Vec<String>,
    fenced_copies: usize,
    /// Client commands their entity handled.
    handled: BTreeSet<u64>,
}

fn name(node: &UniqueAddress) -> String {
    format!("{}#{}", node.address.host, node.uid % 10_000)
}

impl ShardingChecker {
    /// An empty checker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Violations found so far, each with the time and node.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    fn violation(&mut self, now: Instant, node: &UniqueAddress, what: String) {
        self.violations
            .push(format!("{now:?} {}: {what}", name(node)));
    }

    /// Client command `msg` was handled by its entity on `node`: once at most, ever.
    pub fn handled(
        &mut self,
        now: Instant,
        kind: usize,
        node: &UniqueAddress,
        msg: u64,
        entity: &EntityId,
    ) {
        if !self.handled.insert(msg) {
            self.violation(
                now,
                node,
                format!("command {msg} to entity {entity} of kind {kind} was handled twice"),
            );
        }
    }

    /// Client command `msg` reached its entity's queue on `node` but was answered with an
    /// error. Allowed when the command itself fails, or when the shard was stopped by force
    /// (the region counted it stopped: a crash, a lost lease, a region stopping); never by a
    /// passivation or a hand-off, which stop an entity behind what is queued.
    pub fn unhandled(&mut self, now: Instant, node: &UniqueAddress, msg: u64, why: &str) {
        // A durable entity's command fails when the store refuses its write (a newer lease
        // holder's fence) or its recovery fails: the asker hears, nothing is half-kept.
        let allowed = why.contains("told to fail")
            || why.contains("the shard was stopped")
            || why.contains("journal write refused")
            || why.contains("recovery failed");
        if !allowed {
            self.violation(now, node, format!("command {msg} was not handled: {why}"));
        }
    }

    /// A timer of entity `entity` reached another incarnation than the one that set it.
    pub fn stray_tick(
        &mut self,
        now: Instant,
        node: &UniqueAddress,
        entity: &EntityId,
        set_by: u64,
        got: u64,
    ) {
        self.violation(
            now,
            node,
            format!(
                "a timer set by incarnation {set_by} of entity {entity} reached incarnation {got}"
            ),
        );
    }

    /// Whether client command `msg` was handled by its entity.
    pub fn was_handled(&self, msg: u64) -> bool {
        self.handled.contains(&msg)
    }

    /// How many client commands entities handled.
    pub fn handled_count(&self) -> usize {
        self.handled.len()
    }

    /// Nodes hosting `shard` of `kind` right now.
    pub fn hosts_of(&self, kind: usize, shard: &ShardId) -> Option<&BTreeSet<UniqueAddress>> {
        self.hosts.get(&(kind, shard.clone()))
    }

    /// `node`'s copy of `shard` can no longer act: its lease passed its deadline (see the
    /// module's docs). Its hosting and its entities stop counting; they are counted in
    /// [`fenced_copies`](Self::fenced_copies).
    pub fn fenced(&mut self, kind: usize, node: &UniqueAddress, shard: &ShardId) {
        if let Some(hosts) = self.hosts.get_mut(&(kind, shard.clone())) {
            if hosts.remove(node) {
                self.fenced_copies += 1;
            }
            if hosts.is_empty() {
                self.hosts.remove(&(kind, shard.clone()));
            }
        }
        if let Some(entities) = self.by_shard.remove(&(kind, node.clone(), shard.clone())) {
            for entity in entities {
                if let Some(live) = self.live.get_mut(&(kind, entity.clone())) {
                    live.remove(node);
                    if live.is_empty() {
                        self.live.remove(&(kind, entity));
                    }
                }
            }
        }
    }

    /// How many shard copies stopped counting because their node's lease had passed its
    /// deadline before the node noticed (a pause).
    pub fn fenced_copies(&self) -> usize {
        self.fenced_copies
    }

    /// An entity started on `node`.
    pub fn entity_started(
        &mut self,
        now: Instant,
        kind: usize,
        node: &UniqueAddress,
        shard: &ShardId,
        entity: &EntityId,
    ) {
        let hosted_here = self
            .hosts
            .get(&(kind, shard.clone()))
            .is_some_and(|h| h.contains(node));
        if !hosted_here {
            self.violation(
                now,
                node,
                format!(
                    "entity {entity} of kind {kind} started but shard {shard} is not hosted here"
                ),
            );
        }
        self.by_shard
            .entry((kind, node.clone(), shard.clone()))
            .or_default()
            .insert(entity.clone());
        let live = self.live.entry((kind, entity.clone())).or_default();
        live.insert(node.clone());
        if live.len() > 1 {
            let others: Vec<String> = live.iter().filter(|n| *n != node).map(name).collect();
            self.violation(
                now,
                node,
                format!("entity {entity} of kind {kind} started while live on {others:?}"),
            );
        }
    }

    /// An entity stopped on `node`.
    pub fn entity_stopped(
        &mut self,
        kind: usize,
        node: &UniqueAddress,
        shard: &ShardId,
        entity: &EntityId,
    ) {
        let key = (kind, node.clone(), shard.clone());
        if let Some(entities) = self.by_shard.get_mut(&key) {
            entities.remove(entity);
            if entities.is_empty() {
                self.by_shard.remove(&key);
            }
        }
        if let Some(live) = self.live.get_mut(&(kind, entity.clone())) {
            live.remove(node);
            if live.is_empty() {
                self.live.remove(&(kind, entity.clone()));
            }
        }
    }

    /// `node`'s region started hosting `shard`.
    pub fn shard_started(
        &mut self,
        now: Instant,
        kind: usize,
        node: &UniqueAddress,
        shard: &ShardId,
    ) {
        let hosts = self.hosts.entry((kind, shard.clone())).or_default();
        hosts.insert(node.clone());
        if hosts.len() > 1 {
            let others: Vec<String> = hosts.iter().filter(|n| *n != node).map(name).collect();
            self.violation(
                now,
                node,
                format!("shard {shard} of kind {kind} started while hosted on {others:?}"),
            );
        }
    }

    /// `node`'s region stopped hosting `shard`. Its entities there must have stopped first.
    pub fn shard_stopped(
        &mut self,
        now: Instant,
        kind: usize,
        node: &UniqueAddress,
        shard: &ShardId,
    ) {
        if let Some(hosts) = self.hosts.get_mut(&(kind, shard.clone())) {
            hosts.remove(node);
            if hosts.is_empty() {
                self.hosts.remove(&(kind, shard.clone()));
            }
        }
        let key = (kind, node.clone(), shard.clone());
        if let Some(entities) = self.by_shard.get(&key).filter(|e| !e.is_empty()) {
            let entities: Vec<EntityId> = entities.iter().cloned().collect();
            self.violation(
                now,
                node,
                format!("shard {shard} of kind {kind} stopped with entities {entities:?} live"),
            );
        }
    }

    /// A message was delivered to its entity on `node`.
    pub fn delivered(
        &mut self,
        now: Instant,
        kind: usize,
        node: &UniqueAddress,
        env: &Envelope<SimMsg>,
    ) {
        let hosted_here = self
            .hosts
            .get(&(kind, env.shard.clone()))
            .is_some_and(|h| h.len() == 1 && h.contains(node));
        if !hosted_here {
            let hosts: Vec<String> = self
                .hosts
                .get(&(kind, env.shard.clone()))
                .map(|h| h.iter().map(name).collect())
                .unwrap_or_default();
            self.violation(
                now,
                node,
                format!(
                    "message {} for {} delivered while shard {} is hosted on {hosts:?}",
                    env.msg.id, env.entity, env.shard
                ),
            );
        }
        let key = (kind, env.msg.sender.clone(), env.entity.clone());
        if let Some(prev) = self.last_seq.get(&key)
            && env.msg.seq <= *prev
        {
            self.violation(
                now,
                node,
                format!(
                    "{} got seq {} (message {}) from {} after seq {prev} (reordered or \
                         duplicated)",
                    env.entity,
                    env.msg.seq,
                    env.msg.id,
                    name(&env.msg.sender)
                ),
            );
        }
        let last = self.last_seq.entry(key).or_insert(0);
        *last = (*last).max(env.msg.seq);
    }

    /// The coordinators of `kind` that are legitimate right now (see the module docs).
    pub fn coordinators(&mut self, now: Instant, kind: usize, legitimate: BTreeSet<UniqueAddress>) {
        if legitimate.len() > 1 {
            if self.reported_coordinators.get(&kind) != Some(&legitimate) {
                let names: Vec<String> = legitimate.iter().map(name).collect();
                let first = legitimate.first().cloned().expect("two or more");
                self.violation(
                    now,
                    &first,
                    format!("kind {kind} has coordinators on {names:?}, none of them disowned"),
                );
                self.reported_coordinators.insert(kind, legitimate);
            }
        } else {
            self.reported_coordinators.remove(&kind);
        }
    }

    /// The coordinator took `shard` from `region`'s node on the store's word that its lease
    /// had lapsed, while that node (`holder_deadline`: the deadline its own lease keeper still
    /// counts on, if any) may still serve it: the store's word was wrong, or read wrongly.
    /// The new home's acquisition would still keep a second copy out, so this is checked on
    /// its own.
    pub fn taken_while_held(
        &mut self,
        now: Instant,
        kind: usize,
        coordinator: &UniqueAddress,
        region: &UniqueAddress,
        shard: &ShardId,
        holder_deadline: Instant,
    ) {
        self.violation(
            now,
            coordinator,
            format!(
                "coordinator of kind {kind} took shard {shard} from {} while its lease there \
                 still counted until {holder_deadline:?}",
                name(region)
            ),
        );
    }

    /// A coordinator reported that two regions claim one shard.
    pub fn conflicting_claim(
        &mut self,
        now: Instant,
        kind: usize,
        coordinator: &UniqueAddress,
        shard: &ShardId,
        home: &UniqueAddress,
        claimant: &UniqueAddress,
    ) {
        self.violation(
            now,
            coordinator,
            format!(
                "coordinator of kind {kind} saw shard {shard} claimed by {} while homed on {}",
                name(claimant),
                name(home)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::Address;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new(format!("node-{i:05}"), 2552), u64::from(i))
    }

    fn env(entity: &str, shard: &str, sender: u16, seq: u64) -> Envelope<SimMsg> {
        Envelope {
            entity: entity.into(),
            shard: shard.into(),
            msg: SimMsg::plain(seq, node(sender), seq),
        }
    }

    const T: Instant = Instant::ZERO;

    #[test]
    fn a_clean_move_is_no_violation() {
        let mut c = ShardingChecker::new();
        let (s, e) = (ShardId::from("1"), EntityId::from("e"));
        c.shard_started(T, 0, &node(1), &s);
        c.entity_started(T, 0, &node(1), &s, &e);
        c.delivered(T, 0, &node(1), &env("e", "1", 9, 1));
        c.entity_stopped(0, &node(1), &s, &e);
        c.shard_stopped(T, 0, &node(1), &s);
        c.shard_started(T, 0, &node(2), &s);
        c.entity_started(T, 0, &node(2), &s, &e);
        c.delivered(T, 0, &node(2), &env("e", "1", 9, 2));
        c.coordinators(T, 0, [node(1)].into());
        assert!(c.violations().is_empty(), "{:?}", c.violations());
    }

    #[test]
    fn two_homes_two_instances_reordering_and_two_coordinators_are_caught() {
        let mut c = ShardingChecker::new();
        let (s, e) = (ShardId::from("1"), EntityId::from("e"));
        c.shard_started(T, 0, &node(1), &s);
        c.shard_started(T, 0, &node(2), &s); // (b)
        c.entity_started(T, 0, &node(1), &s, &e);
        c.entity_started(T, 0, &node(2), &s, &e); // (a)
        c.delivered(T, 0, &node(1), &env("e", "1", 9, 2)); // delivered with two homes
        c.delivered(T, 0, &node(1), &env("e", "1", 9, 1)); // (c)
        c.coordinators(T, 0, [node(1), node(2)].into()); // (d)
        c.coordinators(T, 0, [node(1), node(2)].into()); // reported once
        let v = c.violations();
        assert_eq!(v.len(), 6, "{v:#?}");
        assert!(v[0].contains("shard 1 of kind 0 started while hosted"));
        assert!(v[1].contains("entity e of kind 0 started while live"));
        assert!(v[4].contains("after seq 2"));
        assert!(v[5].contains("coordinators"));
    }

    #[test]
    fn an_entity_outside_its_home_or_outliving_it_is_caught() {
        let mut c = ShardingChecker::new();
        let (s, e) = (ShardId::from("1"), EntityId::from("e"));
        c.entity_started(T, 0, &node(1), &s, &e);
        c.shard_started(T, 0, &node(1), &s);
        c.shard_stopped(T, 0, &node(1), &s);
        let v = c.violations();
        assert_eq!(v.len(), 2, "{v:#?}");
        assert!(v[0].contains("is not hosted here"));
        assert!(v[1].contains("stopped with entities"));
    }
}
