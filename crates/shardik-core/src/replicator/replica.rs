//! One node's replicator: the keys it holds, the calls in flight, and the rounds of deltas,
//! gossip and notifications that keep replicas converging.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Instant;
use crate::address::UniqueAddress;
use crate::membership::MemberStatus;

use super::aggregate::{Kind, Operation, targets};
use super::consistency::{Level, ReadConsistency, WriteConsistency};
use super::data::{DataType, Key, ReplicaId};
use super::deltas::DeltaOutbox;
use super::envelope::{DataEnvelope, MergeRules};
use super::erased::{AnyData, TypeMismatch};
use super::gossip::{answer_status, merge_gossip};
use super::messages::{Payload, ReplicatorMessage, Stored};
use super::outcome::{
    ConsistencyNotReached, DeleteError, DropReason, GetError, OpId, Outcome, ReplicatorEffect,
    SubscriberId, UpdateError,
};
use super::peers::Peer;
use super::pruning_round::{self, Round};
use super::settings::ReplicatorSettings;
use super::store::{BUCKETS, Merged, Store};

/// The replicator of one node, I/O-free: calls and messages go in with the time, effects
/// (messages to send, answers, notifications) come out into the caller's buffer, and
/// [`poll_timeout`](Self::poll_timeout) says when to call
/// [`handle_timeout`](Self::handle_timeout).
pub struct Replicator {
    node: UniqueAddress,
    settings: ReplicatorSettings,
    rng: ChaCha8Rng,
    peers: Vec<Peer>,
    store: Store,
    operations: BTreeMap<OpId, Operation>,
    next_op: OpId,
    deltas: DeltaOutbox,
    subscribers: BTreeMap<Arc<str>, BTreeSet<SubscriberId>>,
    /// Subscribers that have not heard the key's value yet.
    new_subscribers: BTreeMap<Arc<str>, BTreeSet<SubscriberId>>,
    /// Keys changed since subscribers last heard.
    changed: BTreeSet<Arc<str>>,
    next_gossip: Instant,
    next_deltas: Instant,
    next_notify: Instant,
    next_pruning: Instant,
    /// This node's own membership status, when the view listed it.
    self_status: Option<MemberStatus>,
    /// Replicas of nodes removed from the cluster (or named in data but never members), with
    /// the all-reachable clock when this replica learnt of them.
    removed: BTreeMap<ReplicaId, Duration>,
    /// Time that passed while every peer was reachable: removed replicas' data spreads only
    /// then, so the wait before pruning counts only that time.
    all_reachable: Duration,
    /// When `all_reachable` was last brought up to date.
    clock_at: Instant,
    /// The wall clock (milliseconds since the Unix epoch) at `started`.
    wall_at_start_ms: u64,
    started: Instant,
}

impl Replicator {
    /// The replicator of `node`, starting at `now`, when the wall clock reads `wall_ms`
    /// (milliseconds since the Unix epoch: pruning markers expire by it, so that every node
    /// agrees when); `seed` drives its choices of peers.
    pub fn new(
        node: UniqueAddress,
        settings: ReplicatorSettings,
        seed: u64,
        now: Instant,
        wall_ms: u64,
    ) -> Self {
        Replicator {
            next_pruning: now + settings.pruning_interval,
            self_status: None,
            removed: BTreeMap::new(),
            all_reachable: Duration::ZERO,
            clock_at: now,
            wall_at_start_ms: wall_ms,
            started: now,
            next_gossip: now + settings.gossip_interval,
            next_deltas: now + settings.delta_interval,
            next_notify: now + settings.notify_subscribers_interval,
            node,
            settings,
            rng: ChaCha8Rng::seed_from_u64(seed),
            peers: Vec::new(),
            store: Store::default(),
            operations: BTreeMap::new(),
            next_op: 1,
            deltas: DeltaOutbox::default(),
            subscribers: BTreeMap::new(),
            new_subscribers: BTreeMap::new(),
            changed: BTreeSet::new(),
        }
    }

    /// This node.
    pub fn node(&self) -> &UniqueAddress {
        &self.node
    }

    /// The replica id this node changes data as.
    pub fn replica_id(&self) -> ReplicaId {
        ReplicaId(self.node.uid)
    }

    /// How many keys this replica holds (deleted ones included).
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether this replica holds no key.
    pub fn is_empty(&self) -> bool {
        self.store.len() == 0
    }

    /// The keys this replica holds, deleted ones included.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.store.keys()
    }

    /// The peers a majority counts now (Up members and those on their way out).
    pub fn quorum_members(&self) -> impl Iterator<Item = UniqueAddress> + '_ {
        self.peers
            .iter()
            .filter(|p| p.counts_for_quorum(false))
            .map(|p| p.node.clone())
    }

    /// Replaces the view of the members: every member membership lists, this node
    /// included (its own status decides whether it may lead pruning). A peer that was listed
    /// and no longer is was removed: its replica's data is pruned in time.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = Peer>) {
        let mut listed = Vec::new();
        self.self_status = None;
        for peer in peers {
            if peer.node == self.node {
                self.self_status = Some(peer.status);
            } else {
                listed.push(peer);
            }
        }
        for old in &self.peers {
            let gone = !listed
                .iter()
                .any(|p| p.node == old.node && p.status != MemberStatus::Removed);
            if gone {
                self.removed
                    .entry(ReplicaId(old.node.uid))
                    .or_insert(self.all_reachable);
            }
        }
        self.peers = listed;
    }

    /// The key's state on this replica, without asking any other.
    pub fn local(&self, key: &str) -> Option<&Stored> {
        self.store.get(key)
    }

    /// The key's value here, typed; `None` if absent, deleted or of another type.
    pub fn local_value<T: DataType>(&self, key: &Key<T>) -> Option<&T> {
        match self.store.get(key.id())? {
            Stored::Value(envelope) => envelope.data.as_any().downcast_ref::<T>(),
            Stored::Deleted => None,
        }
    }

    /// Changes the key's value here (starting from `init()` if the key is new) with
    /// `modify`, which is given this replica's id to change the data as; then writes it to
    /// as many replicas as `consistency` asks, within `timeout`. The answer comes as a
    /// [`ReplicatorEffect::Reply`].
    #[allow(clippy::too_many_arguments)] // a call's key, level, time limit and change
    pub fn update<T: DataType>(
        &mut self,
        now: Instant,
        key: &Key<T>,
        consistency: WriteConsistency,
        timeout: Duration,
        init: impl FnOnce() -> T,
        modify: impl FnOnce(&mut T, ReplicaId),
        out: &mut Vec<ReplicatorEffect>,
    ) -> OpId {
        let op = self.take_op();
        let id = key.shared_id();
        let me = self.replica_id();
        let delta = match self.store.get(&id) {
            Some(Stored::Deleted) => {
                reply(out, op, Outcome::Update(Err(UpdateError::KeyDeleted)));
                return op;
            }
            Some(Stored::Value(envelope))
                if envelope.data.as_any().downcast_ref::<T>().is_none() =>
            {
                let mismatch = TypeMismatch {
                    held: envelope.data.type_name(),
                    got: T::type_name(),
                };
                reply(out, op, Outcome::Update(Err(mismatch.into())));
                return op;
            }
            Some(Stored::Value(_)) => {
                let envelope = self.store.value_mut(&id).expect("the key holds a value");
                let value = envelope.data.as_any_mut().downcast_mut::<T>();
                modify(value.expect("type checked"), me);
                let delta = envelope.data.take_delta();
                // While a key carries pruning markers it travels whole: a delta does not carry
                // the markers, and one reaching a replica that has not pruned yet could count
                // the pruned replica twice there (the lesson of akka.net#8219).
                delta.filter(|_| envelope.pruning.is_empty())
            }
            None => {
                let mut value = init();
                modify(&mut value, me);
                let delta = AnyData::take_delta(&mut value);
                let envelope = DataEnvelope::new(Box::new(value));
                self.store.insert(id.clone(), Stored::Value(envelope));
                delta
            }
        };
        self.changed.insert(id.clone());
        if let Some(delta) = delta.as_ref().filter(|_| self.settings.delta_crdt_enabled) {
            let peers = self
                .peers
                .iter()
                .filter(|p| p.disseminates())
                .map(|p| &p.node);
            self.deltas
                .record(&id, delta.as_ref(), peers, self.settings.max_delta_size);
        }
        let payload = match delta {
            Some(delta) => Payload::Delta(delta),
            None => Payload::Full(self.store.get(&id).expect("just written").clone()),
        };
        self.start_write(
            now,
            op,
            id,
            Kind::Update,
            consistency,
            timeout,
            payload,
            out,
        );
        op
    }

    /// Deletes the key, for good, here and on as many replicas as `consistency` asks.
    pub fn delete(
        &mut self,
        now: Instant,
        key: &str,
        consistency: WriteConsistency,
        timeout: Duration,
        out: &mut Vec<ReplicatorEffect>,
    ) -> OpId {
        let op = self.take_op();
        let id: Arc<str> = key.into();
        if matches!(self.store.get(&id), Some(Stored::Deleted)) {
            reply(out, op, Outcome::Delete(Err(DeleteError::AlreadyDeleted)));
            return op;
        }
        self.store.insert(id.clone(), Stored::Deleted);
        self.changed.insert(id.clone());
        let payload = Payload::Full(Stored::Deleted);
        self.start_write(
            now,
            op,
            id,
            Kind::Delete,
            consistency,
            timeout,
            payload,
            out,
        );
        op
    }

    /// Reads the key from as many replicas as `consistency` asks, within `timeout`; what
    /// they answer is merged into this replica before the answer goes out.
    pub fn get(
        &mut self,
        now: Instant,
        key: &str,
        consistency: ReadConsistency,
        timeout: Duration,
        out: &mut Vec<ReplicatorEffect>,
    ) -> OpId {
        let op = self.take_op();
        let id: Arc<str> = key.into();
        let Some((required, primaries, secondaries)) =
            targets(&self.peers, Level::from(consistency), &mut self.rng)
        else {
            let error = self.not_reached(Level::from(consistency), 1, false);
            reply(out, op, Outcome::Get(Err(error.into())));
            return op;
        };
        let operation = Operation {
            key: id.clone(),
            kind: Kind::Get {
                answers: Vec::new(),
            },
            required,
            answered: BTreeSet::new(),
            primaries,
            secondaries,
            deadline: now + timeout,
            secondary_at: Some(now + timeout / 5),
        };
        for peer in &operation.primaries {
            send(
                out,
                peer,
                ReplicatorMessage::Read {
                    key: id.clone(),
                    op,
                },
            );
        }
        self.operations.insert(op, operation);
        self.finish_if_done(op, out);
        op
    }

    /// Subscribes `subscriber` to the key's changes: it hears the current value (if any) at
    /// the next notification round, and every change after.
    pub fn subscribe(&mut self, key: &str, subscriber: SubscriberId) {
        let id: Arc<str> = key.into();
        self.subscribers
            .entry(id.clone())
            .or_default()
            .insert(subscriber);
        self.new_subscribers
            .entry(id)
            .or_default()
            .insert(subscriber);
    }

    /// Ends a subscription.
    pub fn unsubscribe(&mut self, key: &str, subscriber: SubscriberId) {
        for subs in [&mut self.subscribers, &mut self.new_subscribers] {
            if let Some(set) = subs.get_mut(key) {
                set.remove(&subscriber);
                if set.is_empty() {
                    subs.remove(key);
                }
            }
        }
    }

    /// Tells subscribers of every change now, instead of at the next round.
    pub fn flush_changes(&mut self, out: &mut Vec<ReplicatorEffect>) {
        for key in std::mem::take(&mut self.changed) {
            let Some(subs) = self.subscribers.get(&key) else {
                continue;
            };
            let Some(stored) = self.store.get(&key) else {
                continue;
            };
            self.new_subscribers.remove(&key);
            for &subscriber in subs {
                out.push(ReplicatorEffect::Changed {
                    subscriber,
                    key: key.clone(),
                    stored: stored.clone(),
                });
            }
        }
        for (key, subs) in std::mem::take(&mut self.new_subscribers) {
            if let Some(stored) = self.store.get(&key) {
                for subscriber in subs {
                    out.push(ReplicatorEffect::Changed {
                        subscriber,
                        key: key.clone(),
                        stored: stored.clone(),
                    });
                }
            }
        }
    }

    /// Handles a message from another node's replicator.
    pub fn handle_message(
        &mut self,
        _now: Instant,
        from: &UniqueAddress,
        message: ReplicatorMessage,
        out: &mut Vec<ReplicatorEffect>,
    ) {
        if !self.peers.iter().any(|p| &p.node == from && p.is_member()) {
            out.push(ReplicatorEffect::Dropped {
                from: from.clone(),
                reason: DropReason::UnknownSender,
            });
            return;
        }
        match message {
            ReplicatorMessage::Write { key, payload, op } => {
                let rules = MergeRules::of(&self.node, &self.settings);
                let merged = match &payload {
                    Payload::Delta(delta) => self.store.merge_delta(&key, delta.as_ref(), rules),
                    Payload::Full(stored) => self.store.merge(&key, stored, rules),
                };
                let answer = match self.note_merge(from, &key, merged, out) {
                    true => ReplicatorMessage::WriteAck { op },
                    false => ReplicatorMessage::WriteNack { op },
                };
                send(out, from, answer);
            }
            ReplicatorMessage::WriteAck { op } => {
                if let Some(operation) = self.operations.get_mut(&op)
                    && operation.count_answer(from)
                {
                    self.finish_if_done(op, out);
                }
            }
            ReplicatorMessage::WriteNack { .. } => {}
            ReplicatorMessage::Read { key, op } => {
                let stored = self.store.get(&key).cloned();
                send(out, from, ReplicatorMessage::ReadResult { op, stored });
            }
            ReplicatorMessage::ReadResult { op, stored } => {
                if let Some(operation) = self.operations.get_mut(&op)
                    && matches!(operation.kind, Kind::Get { .. })
                    && operation.count_answer(from)
                {
                    if let Kind::Get { answers } = &mut operation.kind {
                        answers.extend(stored);
                    }
                    self.finish_if_done(op, out);
                }
            }
            ReplicatorMessage::Deltas { deltas } => {
                for (key, delta) in deltas {
                    let rules = MergeRules::of(&self.node, &self.settings);
                    let merged = self.store.merge_delta(&key, delta.as_ref(), rules);
                    self.note_merge(from, &key, merged, out);
                }
            }
            ReplicatorMessage::Status { digests } => {
                let start = self.rng.random_range(0..BUCKETS);
                let budget = self.settings.max_gossip_bytes;
                if let Some(answer) = answer_status(&mut self.store, &digests, budget, start) {
                    send(out, from, answer);
                }
            }
            ReplicatorMessage::Gossip {
                buckets,
                entries,
                send_back,
                more,
            } => {
                let rules = MergeRules::of(&self.node, &self.settings);
                let budget = self.settings.max_gossip_bytes;
                let merged = merge_gossip(
                    &mut self.store,
                    &buckets,
                    &entries,
                    send_back,
                    budget,
                    rules,
                );
                self.changed.extend(merged.changed);
                for (key, mismatch) in merged.mismatched {
                    out.push(ReplicatorEffect::Dropped {
                        from: from.clone(),
                        reason: DropReason::TypeMismatch { key, mismatch },
                    });
                }
                if !merged.send_back.is_empty() {
                    send(
                        out,
                        from,
                        ReplicatorMessage::Gossip {
                            buckets: Vec::new(),
                            entries: merged.send_back,
                            send_back: false,
                            more: false,
                        },
                    );
                }
                if more || merged.more_to_send_back {
                    let digests = self.store.bucket_digests();
                    send(out, from, ReplicatorMessage::Status { digests });
                }
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Instant {
        let mut next = self
            .next_gossip
            .min(self.next_deltas)
            .min(self.next_notify)
            .min(self.next_pruning);
        for operation in self.operations.values() {
            next = next.min(operation.deadline);
            if let Some(at) = operation.secondary_at {
                next = next.min(at);
            }
        }
        next
    }

    /// Runs what is due at `now`: operations timing out or asking their secondaries, a round
    /// of deltas, of gossip, of notifications.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<ReplicatorEffect>) {
        if self.peers.iter().all(|p| p.reachable) {
            self.all_reachable += now.saturating_duration_since(self.clock_at);
        }
        self.clock_at = now;
        self.expire_operations(now, out);
        if now >= self.next_pruning {
            self.next_pruning = now + self.settings.pruning_interval;
            self.prune(now);
        }
        if now >= self.next_deltas {
            self.next_deltas = now + self.settings.delta_interval;
            self.send_deltas(out);
        }
        if now >= self.next_gossip {
            self.next_gossip = now + self.settings.gossip_interval;
            self.gossip(out);
        }
        if now >= self.next_notify {
            self.next_notify = now + self.settings.notify_subscribers_interval;
            self.flush_changes(out);
        }
    }

    #[allow(clippy::too_many_arguments)] // one write's whole description
    fn start_write(
        &mut self,
        now: Instant,
        op: OpId,
        key: Arc<str>,
        kind: Kind,
        consistency: WriteConsistency,
        timeout: Duration,
        payload: Payload,
        out: &mut Vec<ReplicatorEffect>,
    ) {
        let level = Level::from(consistency);
        let Some((required, primaries, secondaries)) = targets(&self.peers, level, &mut self.rng)
        else {
            let error = self.not_reached(level, 1, true);
            let outcome = match kind {
                Kind::Delete => Outcome::Delete(Err(error.into())),
                _ => Outcome::Update(Err(error.into())),
            };
            reply(out, op, outcome);
            return;
        };
        for peer in &primaries {
            let message = ReplicatorMessage::Write {
                key: key.clone(),
                payload: payload.clone(),
                op,
            };
            send(out, peer, message);
        }
        let operation = Operation {
            key,
            kind,
            required,
            answered: BTreeSet::new(),
            primaries,
            secondaries,
            deadline: now + timeout,
            secondary_at: Some(now + timeout / 5),
        };
        self.operations.insert(op, operation);
        self.finish_if_done(op, out);
    }

    /// Answers the operation if enough replicas answered; a read first merges what they sent
    /// into this replica (read repair of the local copy).
    fn finish_if_done(&mut self, op: OpId, out: &mut Vec<ReplicatorEffect>) {
        let short = self.settings.faults.acknowledge_one_reply_short;
        let done = self.operations.get(&op).is_some_and(|o| {
            let write = !matches!(o.kind, Kind::Get { .. });
            o.is_done() || (short && write && o.reached() + 1 >= o.required)
        });
        if !done {
            return;
        }
        let operation = self.operations.remove(&op).expect("checked");
        let outcome = match operation.kind {
            Kind::Update => Outcome::Update(Ok(())),
            Kind::Delete => Outcome::Delete(Ok(())),
            Kind::Get { answers } => {
                for stored in &answers {
                    let rules = MergeRules::of(&self.node, &self.settings);
                    let merged = self.store.merge(&operation.key, stored, rules);
                    if merged == Ok(Merged::Changed) {
                        self.changed.insert(operation.key.clone());
                    }
                }
                Outcome::Get(match self.store.get(&operation.key) {
                    Some(Stored::Deleted) => Err(GetError::KeyDeleted),
                    found => Ok(found.cloned()),
                })
            }
        };
        reply(out, op, outcome);
    }

    fn expire_operations(&mut self, now: Instant, out: &mut Vec<ReplicatorEffect>) {
        let due: Vec<OpId> = self
            .operations
            .iter()
            .filter(|(_, o)| o.deadline <= now || o.secondary_at.is_some_and(|at| at <= now))
            .map(|(&op, _)| op)
            .collect();
        for op in due {
            let operation = self.operations.get_mut(&op).expect("listed");
            if operation.deadline <= now {
                let operation = self.operations.remove(&op).expect("listed");
                let applied = !matches!(operation.kind, Kind::Get { .. });
                let error = ConsistencyNotReached {
                    required: operation.required,
                    reached: operation.reached(),
                    applied_locally: applied,
                };
                let outcome = match operation.kind {
                    Kind::Update => Outcome::Update(Err(error.into())),
                    Kind::Delete => Outcome::Delete(Err(error.into())),
                    Kind::Get { .. } => Outcome::Get(Err(error.into())),
                };
                reply(out, op, outcome);
                continue;
            }
            // The primaries are slow: ask the secondaries too, and send a writer's primaries
            // that have not answered the whole state (they may have missed earlier deltas).
            operation.secondary_at = None;
            let key = operation.key.clone();
            let silent: Vec<UniqueAddress> = operation
                .primaries
                .iter()
                .filter(|p| !operation.answered.contains(*p))
                .chain(&operation.secondaries)
                .cloned()
                .collect();
            let message = match &operation.kind {
                Kind::Get { .. } => ReplicatorMessage::Read { key, op },
                Kind::Update | Kind::Delete => match self.store.get(&key) {
                    Some(stored) => ReplicatorMessage::Write {
                        key,
                        payload: Payload::Full(stored.clone()),
                        op,
                    },
                    None => continue,
                },
            };
            for peer in silent {
                send(out, &peer, message.clone());
            }
        }
    }

    /// A round of pruning, while every peer is reachable (a replica cut off could still hold
    /// and spread a removed replica's data unseen).
    fn prune(&mut self, now: Instant) {
        if !self.peers.iter().all(|p| p.reachable) {
            return;
        }
        let members: BTreeSet<UniqueAddress> = self
            .peers
            .iter()
            .filter(|p| p.disseminates())
            .map(|p| p.node.clone())
            .chain([self.node.clone()])
            .collect();
        let member_replicas: BTreeSet<ReplicaId> = self
            .peers
            .iter()
            .map(|p| ReplicaId(p.node.uid))
            .chain([self.replica_id()])
            .collect();
        self.removed.retain(|r, _| !member_replicas.contains(r));
        let dissemination = self.settings.max_pruning_dissemination;
        let ready: BTreeSet<ReplicaId> = self
            .removed
            .iter()
            .filter(|&(_, &at)| self.all_reachable.saturating_sub(at) >= dissemination)
            .map(|(&r, _)| r)
            .collect();
        let round = Round {
            me: &self.node,
            leads: self.leads(),
            members: &members,
            ready: &ready,
            wall_ms: self.wall_ms(now),
            marker_ttl: self.settings.pruning_marker_time_to_live,
        };
        let outcome = pruning_round::run(&mut self.store, &round);
        self.changed.extend(outcome.changed);
        // Replicas named in data that are not members are removed ones this replica never
        // saw leave; replicas no data names any longer need no pruning.
        for &named in outcome.named.difference(&member_replicas) {
            self.removed.entry(named).or_insert(self.all_reachable);
        }
        self.removed.retain(|r, _| outcome.named.contains(r));
    }

    /// Whether this node leads pruning: the lowest address among the Up members, this one
    /// included (the reference's leader, computed from the same view).
    fn leads(&self) -> bool {
        if self.self_status != Some(MemberStatus::Up) {
            return false;
        }
        !self
            .peers
            .iter()
            .any(|p| p.status == MemberStatus::Up && p.node < self.node)
    }

    fn wall_ms(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.started).as_millis();
        self.wall_at_start_ms
            .saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }

    fn send_deltas(&mut self, out: &mut Vec<ReplicatorEffect>) {
        let peers: Vec<UniqueAddress> = self
            .peers
            .iter()
            .filter(|p| p.disseminates() && p.reachable)
            .map(|p| p.node.clone())
            .collect();
        for (peer, deltas) in self.deltas.take_turn(&peers) {
            send(out, &peer, ReplicatorMessage::Deltas { deltas });
        }
    }

    fn gossip(&mut self, out: &mut Vec<ReplicatorEffect>) {
        let candidates: Vec<&Peer> = self
            .peers
            .iter()
            .filter(|p| p.disseminates() && p.reachable)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let peer = candidates[self.rng.random_range(0..candidates.len())]
            .node
            .clone();
        let digests = self.store.bucket_digests();
        send(out, &peer, ReplicatorMessage::Status { digests });
    }

    /// Records a merged write or delta: whether it was taken (`false`: another type here,
    /// dropped and reported).
    fn note_merge(
        &mut self,
        from: &UniqueAddress,
        key: &Arc<str>,
        merged: Result<Merged, TypeMismatch>,
        out: &mut Vec<ReplicatorEffect>,
    ) -> bool {
        match merged {
            Ok(Merged::Changed) => {
                self.changed.insert(key.clone());
                true
            }
            Ok(Merged::Unchanged) => true,
            Err(mismatch) => {
                out.push(ReplicatorEffect::Dropped {
                    from: from.clone(),
                    reason: DropReason::TypeMismatch {
                        key: key.clone(),
                        mismatch,
                    },
                });
                false
            }
        }
    }

    fn not_reached(&self, level: Level, reached: usize, applied: bool) -> ConsistencyNotReached {
        let counted = self
            .peers
            .iter()
            .filter(|p| p.counts_for_quorum(level == Level::All))
            .count();
        ConsistencyNotReached {
            required: match level {
                Level::Exactly(n) => n,
                _ => counted + 1,
            },
            reached,
            applied_locally: applied,
        }
    }

    fn take_op(&mut self) -> OpId {
        let op = self.next_op;
        self.next_op += 1;
        op
    }
}

fn send(out: &mut Vec<ReplicatorEffect>, to: &UniqueAddress, message: ReplicatorMessage) {
    out.push(ReplicatorEffect::Send {
        to: to.clone(),
        message,
    });
}

fn reply(out: &mut Vec<ReplicatorEffect>, op: OpId, outcome: Outcome) {
    out.push(ReplicatorEffect::Reply { op, outcome });
}
