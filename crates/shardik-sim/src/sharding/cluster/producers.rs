//! Reliable producers in the world: one per producer slot, started with each incarnation of
//! its node (from its durable queue), fed the offers of the simulated application, the
//! entities' answers and its timers, its sends carried through the node's region like any
//! client message, and its calls to the durable queue made to the simulated store, where
//! they take time and may be lost with their node.

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::Rng;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::EntityId;
use shardik_persistence::{PersistenceId, Store, persistence_id};

use super::ShardingWorld;
use super::store_calls::{Due, answer_due};
use crate::sharding::durable::at_once;
use crate::sharding::messages::{DeliveryReply, Sequencing};
use crate::sharding::producer::{CallAnswer, ProducerCall, ProducerOut, SimProducer};
use crate::sharding::store::{Caller, StoreOp};
use crate::sharding::traffic::entity_name;
use crate::world::NodeId;

/// The kind reliable producers address (its entities are durable).
const KIND: usize = 0;

impl ShardingWorld {
    /// The journal of `entity` of the kind producers address.
    fn reliable_pid(&self, entity: &str) -> PersistenceId {
        persistence_id(&self.cfg.kinds[KIND].name, entity)
    }

    /// Starts a new incarnation of slot `id`'s producer on the node's current incarnation, if
    /// the slot runs one: it asks the store for its epoch and its queue first.
    pub(super) fn start_producer(&mut self, id: NodeId) {
        let Some(spec) = self.cfg.reliable.as_ref() else {
            return;
        };
        if !spec.runs_producer(id) || self.store.is_none() {
            return;
        }
        let Some(node) = self.slots[id].layer.as_ref().map(|l| l.me().clone()) else {
            return;
        };
        self.producer_incarnations += 1;
        let again = std::mem::replace(&mut self.slots[id].producer_ran, true);
        self.delivery.producer_started(again);
        let mut out = Vec::new();
        let kind = self.cfg.kinds[KIND].name.clone();
        let p = SimProducer::start(id, node, self.producer_incarnations, &kind, spec, &mut out);
        self.note(Some(id), format!("producer {} started", p.id()));
        self.slots[id].producer = Some(p);
        self.producer_out(id, out);
    }

    /// Stops slot `id`'s producer and starts it again from its durable queue, as an
    /// application that restarts its producer does: once the calls it has out are answered.
    pub fn restart_producer(&mut self, id: NodeId) {
        let Some(p) = self.slots.get_mut(id).and_then(|s| s.producer.as_mut()) else {
            return;
        };
        p.stop();
        self.note(Some(id), "producer stopping, to start again".into());
        self.start_stopped_producer(id);
    }

    /// Starts slot `id`'s producer again if it was stopped and is done.
    fn start_stopped_producer(&mut self, id: NodeId) {
        if self.slots[id]
            .producer
            .as_ref()
            .is_some_and(SimProducer::is_stopped)
        {
            self.slots[id].producer = None;
            self.start_producer(id);
        }
    }

    /// The simulated applications offer: each producer's, with the spec's chance, one
    /// message to a random entity (the draws are the producers' own, so that the rest of the
    /// traffic is the same with or without them).
    pub(super) fn offer_burst(&mut self) {
        let Some(spec) = self.cfg.reliable.clone() else {
            return;
        };
        let now = self.now();
        for &id in &spec.producers {
            let offers = self.reliable_rng.random_bool(spec.offer_chance);
            let entity = entity_name(self.reliable_rng.random_range(0..spec.entities));
            if !offers || self.world.paused_until(id).is_some() {
                continue;
            }
            let Some(p) = self.slots.get_mut(id).and_then(|s| s.producer.as_mut()) else {
                continue;
            };
            if !p.takes_offers() {
                continue;
            }
            let offer = self.next_offer;
            self.next_offer += 1;
            let mut out = Vec::new();
            p.offer(now, entity.into(), offer, &mut out);
            self.producer_out(id, out);
        }
    }

    /// Runs slot `id`'s producer's resends and forgetting, if due.
    pub(super) fn producer_timer(&mut self, id: NodeId) {
        let now = self.now();
        let Some(p) = self.slots[id].producer.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        p.timer(now, &mut out);
        self.producer_out(id, out);
    }

    /// An entity's answer reached node incarnation `to` of slot `id`: its producer hears it
    /// if it is the producer incarnation that sent the message answered.
    pub(super) fn producer_reply(&mut self, id: NodeId, to: &UniqueAddress, r: DeliveryReply) {
        let now = self.now();
        let Some(p) = self.slots[id].producer.as_mut() else {
            return;
        };
        if p.node() != to || p.incarnation() != r.incarnation || *p.id() != r.producer {
            return;
        }
        let mut out = Vec::new();
        p.on_reply(now, r.entity, r.stream, r.reply, &mut out);
        self.producer_out(id, out);
    }

    /// Carries out what slot `id`'s producer asked for, tells the checker, and reschedules
    /// the node.
    fn producer_out(&mut self, id: NodeId, outs: Vec<ProducerOut>) {
        let now = self.now();
        let Some((producer, incarnation)) = self.slots[id]
            .producer
            .as_ref()
            .map(|p| (Arc::clone(p.id()), p.incarnation()))
        else {
            return;
        };
        for o in outs {
            match o {
                ProducerOut::Send { to, header } => self.send_sequenced(id, to, header),
                ProducerOut::Call { token, call } => {
                    let Some(node) = self.slots[id].layer.as_ref().map(|l| l.me().clone()) else {
                        continue;
                    };
                    let from = Caller { id, node };
                    Self::store_of(&mut self.store).send_producer_call(
                        now,
                        from,
                        incarnation,
                        token,
                        call,
                    );
                }
                ProducerOut::Offered {
                    offer,
                    to,
                    stream,
                    seq,
                } => {
                    let pid = self.reliable_pid(&to);
                    self.delivery
                        .offered(now, offer, &producer, pid, stream, seq);
                }
                ProducerOut::Accepted(offers) => self.delivery.accepted(&offers),
                ProducerOut::Confirmed { to, stream, seq } => {
                    let pid = self.reliable_pid(&to);
                    self.delivery.confirmed(now, &producer, &pid, stream, seq);
                }
            }
        }
        self.reschedule(id);
    }

    /// Sends a producer's message through node `id`'s region, as the runtime's producer sends
    /// an ask. A node whose region cannot take it (not Up yet, leaving, stopped) does not
    /// send it: the producer's resend timer tries again, as it does when the runtime's region
    /// refuses an ask.
    fn send_sequenced(&mut self, id: NodeId, to: EntityId, header: Sequencing) {
        if !self.senders(KIND).contains(&id) {
            return;
        }
        let offer = header.offer;
        if self
            .tell_with(id, KIND, &to, Some(Arc::new(header)))
            .is_some()
        {
            self.delivery.sent(offer);
        }
    }

    /// A producer's call reaches the store: it runs even when its node has crashed since, if
    /// it had left; the answer goes back unless a crash point takes the node down between a
    /// stored batch and its answer.
    pub(super) fn producer_call_arrives(
        &mut self,
        from: Caller,
        incarnation: u64,
        token: u64,
        call: ProducerCall,
    ) {
        let now = self.now();
        let current = self.is_current(from.id, &from.node);
        let st = Self::store_of(&mut self.store);
        if !current && !st.had_left() {
            st.stats.queue_calls_lost_in_crash += 1;
            return;
        }
        st.stats.queue_calls += 1;
        let producer = crate::sharding::reliable::producer_id(from.id);
        let store = &st.store;
        let enqueue = matches!(call, ProducerCall::Enqueue(_));
        let answer = match call {
            ProducerCall::Start => {
                let epoch = at_once(store.start_producer(&producer));
                let queued = at_once(store.queued(&producer));
                match (epoch, queued) {
                    (Ok(epoch), Ok(queued)) => CallAnswer::Started { epoch, queued },
                    other => panic!("the memory store failed a producer start: {other:?}"),
                }
            }
            ProducerCall::Enqueue(rows) => {
                if let Err(e) = at_once(store.enqueue(&producer, rows)) {
                    panic!("the memory store failed an enqueue: {e}");
                }
                CallAnswer::Enqueued
            }
            ProducerCall::Confirm(confirmations) => {
                if let Err(e) = at_once(store.confirm_queued(&producer, confirmations)) {
                    panic!("the memory store failed a queue confirmation: {e}");
                }
                CallAnswer::Deleted
            }
        };
        if !current {
            return;
        }
        if enqueue && st.crash_point(st.spec.crash_points.before_reply) {
            st.stats.crashes_storing_offers += 1;
            st.restart_later(now, from.id);
            self.note(
                Some(from.id),
                "crash point: offers stored, before the producer heard".into(),
            );
            self.crash(from.id);
        } else {
            st.answer_producer(now, from, incarnation, token, answer);
        }
    }

    /// The store's answer to a producer's call reaches its node (after the pause, if it is
    /// paused; never, if that incarnation is gone).
    pub(super) fn producer_call_answered(
        &mut self,
        to: Caller,
        incarnation: u64,
        token: u64,
        answer: CallAnswer,
    ) {
        let now = self.now();
        match answer_due(&self.slots, &self.world, &to) {
            Due::Never => {}
            Due::After(until) => {
                let op = StoreOp::ProducerAnswer {
                    to,
                    incarnation,
                    token,
                    answer,
                };
                Self::store_of(&mut self.store).schedule(until, op);
            }
            Due::Now => {
                let id = to.id;
                let Some(p) = self.slots[id]
                    .producer
                    .as_mut()
                    .filter(|p| p.incarnation() == incarnation)
                else {
                    return;
                };
                let mut out = Vec::new();
                p.answered(now, token, answer, &mut out);
                self.producer_out(id, out);
                self.start_stopped_producer(id);
            }
        }
    }

    // ----- what tests look at -----

    /// Whether every producer slot runs its producer and has nothing outstanding: every
    /// offer taken, stored and confirmed.
    pub fn producers_settled(&self) -> bool {
        let Some(spec) = self.cfg.reliable.as_ref() else {
            return true;
        };
        spec.producers.iter().all(|&id| {
            self.slots
                .get(id)
                .and_then(|s| s.producer.as_ref())
                .is_some_and(|p| p.outstanding() == 0)
        })
    }

    /// The producers running now, by id.
    fn running_producers(&self) -> BTreeSet<Arc<str>> {
        self.slots
            .iter()
            .filter_map(|s| s.producer.as_ref().map(|p| Arc::clone(p.id())))
            .collect()
    }

    /// The end of a run, healed and settled: every accepted offer of a running producer must
    /// have been processed exactly once (see [`DeliveryChecker::check_end`]). A producer that
    /// still holds unconfirmed messages is a violation too: it should have none by now.
    ///
    /// [`DeliveryChecker::check_end`]: crate::sharding::delivery_checker::DeliveryChecker::check_end
    pub fn check_delivery(&mut self) {
        let now = self.now();
        let running = self.running_producers();
        self.delivery.check_end(now, &running);
        let stuck: Vec<String> = self
            .slots
            .iter()
            .filter_map(|s| s.producer.as_ref())
            .filter(|p| p.outstanding() > 0)
            .map(SimProducer::describe)
            .collect();
        if !stuck.is_empty() {
            self.delivery.stuck(now, &stuck);
        }
    }
}
