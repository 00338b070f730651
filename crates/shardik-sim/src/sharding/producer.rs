//! A simulated reliable producer: the core's [`Outbox`] (a [`Producer`] and its durable
//! queue's rule) driven as the runtime's producer drives it
//! (`shardik-runtime/src/delivery/producer/`), with its store calls made to the simulated
//! store, which take time and may be lost with their node.
//!
//! * A new incarnation first starts its producer in the store (`start_producer`, which gives
//!   its epoch) and reads its durable queue (`queued`); the queue's streams are handed back
//!   to the core ([`Producer::resume`]) before any offer is taken.
//! * Offers are taken whenever the core has room for them (flow control: the application's
//!   senders wait meanwhile), also while a write is out, as the runtime's senders offer under
//!   the producer's lock. What the outbox hands over to store goes in one `enqueue`; nothing
//!   of it is sent or counted accepted before it is stored. Answers and timers are heard
//!   meanwhile; what they release waits for the write, in the outbox.
//! * What the core confirms is deleted from the queue (`confirm_queued`), without waiting.
//!
//! The producer knows nothing of the network or the store model: it says what to do in
//! [`ProducerOut`]s, and the world carries them out.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use shardik_core::Instant;
use shardik_core::delivery::{
    ConsumerReply, Outbox, OutboxStep, Producer, ProducerEffect, StreamId,
};
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::EntityId;
use shardik_persistence::{QueueConfirmation, QueuedMessage, queued_streams};

use super::messages::Sequencing;
use super::reliable::{ReliableSpec, decode_offer, encode_offer, producer_code, producer_id};
use crate::world::NodeId;

/// A call a producer makes to its durable queue.
#[derive(Clone, Debug)]
pub(crate) enum ProducerCall {
    /// `start_producer`, then `queued`.
    Start,
    /// `enqueue` of a batch of accepted offers.
    Enqueue(Vec<QueuedMessage>),
    /// `confirm_queued`.
    Confirm(Vec<QueueConfirmation>),
}

/// What the store answered a [`ProducerCall`].
#[derive(Clone, Debug)]
pub(crate) enum CallAnswer {
    /// The incarnation's epoch and the queue as it stood.
    Started {
        epoch: u64,
        queued: Vec<QueuedMessage>,
    },
    /// The batch is stored.
    Enqueued,
    /// The confirmed messages are deleted.
    Deleted,
}

/// What a producer asks the world to do, and what it tells the checker.
#[derive(Clone, Debug)]
pub(crate) enum ProducerOut {
    /// Send a message through the node's region.
    Send { to: EntityId, header: Sequencing },
    /// Make a call to the durable queue, answered with `token`.
    Call { token: u64, call: ProducerCall },
    /// The core took offer `offer` for `to`, as message `seq` of `stream` (not yet stored).
    Offered {
        offer: u64,
        to: EntityId,
        stream: StreamId,
        seq: u64,
    },
    /// These offers are stored: the application hears they are accepted.
    Accepted(Vec<u64>),
    /// The core heard `to` confirm `stream` up to `seq`.
    Confirmed {
        to: EntityId,
        stream: StreamId,
        seq: u64,
    },
}

/// A batch being stored: the call's token, and the offers the application hears are accepted
/// once it is.
struct Storing {
    token: u64,
    accepted: Vec<u64>,
}

/// What the outbox hands over to store for one accepted offer: the offer, and its row.
type Unstored = (u64, QueuedMessage);

/// One incarnation of one node's producer.
pub(crate) struct SimProducer {
    id: Arc<str>,
    code: u64,
    /// The node incarnation it runs on.
    node: UniqueAddress,
    /// Numbers the producer's incarnations on its node (answers carry it).
    incarnation: u64,
    kind: Arc<str>,
    spec: ReliableSpec,
    /// `None` until the store answered its start.
    core: Option<Outbox<EntityId, u64, Unstored>>,
    /// The start call, while it is out.
    starting: Option<u64>,
    /// Offers the application made that the producer has not taken: senders waiting for
    /// room, or for the producer's start.
    waiting: VecDeque<(EntityId, u64)>,
    storing: Option<Storing>,
    /// Answers heard before the producer started, in order.
    replies: VecDeque<(EntityId, StreamId, ConsumerReply)>,
    /// Confirmations being deleted from the queue.
    deleting: BTreeSet<u64>,
    next_token: u64,
    /// Asked to stop: it takes no more offers, and is stopped once its calls are answered.
    stopping: bool,
}

impl SimProducer {
    /// The producer of slot `slot`, incarnation `incarnation`, on node `node`: it starts by
    /// asking the store for its epoch and queue.
    pub(crate) fn start(
        slot: NodeId,
        node: UniqueAddress,
        incarnation: u64,
        kind: &str,
        spec: &ReliableSpec,
        out: &mut Vec<ProducerOut>,
    ) -> Self {
        let mut p = SimProducer {
            id: Arc::from(producer_id(slot)),
            code: producer_code(slot),
            node,
            incarnation,
            kind: Arc::from(kind),
            spec: spec.clone(),
            core: None,
            starting: None,
            waiting: VecDeque::new(),
            storing: None,
            replies: VecDeque::new(),
            deleting: BTreeSet::new(),
            next_token: 1,
            stopping: false,
        };
        let token = p.token();
        p.starting = Some(token);
        out.push(ProducerOut::Call {
            token,
            call: ProducerCall::Start,
        });
        p
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }

    /// The producer's id.
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// The node incarnation it runs on.
    pub(crate) fn node(&self) -> &UniqueAddress {
        &self.node
    }

    /// Its incarnation number.
    pub(crate) fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Whether the application may offer now: the producer runs and its channel has room.
    pub(crate) fn takes_offers(&self) -> bool {
        !self.stopping && self.waiting.len() < self.spec.max_waiting
    }

    /// Messages accepted and not confirmed, plus offers not yet taken: zero once everything
    /// the application handed over is confirmed.
    pub(crate) fn outstanding(&self) -> usize {
        self.core.as_ref().map_or(0, Outbox::unconfirmed)
            + self.waiting.len()
            + usize::from(self.starting.is_some() || self.storing.is_some())
    }

    /// What it holds, for a violation's message.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{}: {} unconfirmed, {} offers waiting{}{}{}",
            self.id,
            self.core.as_ref().map_or(0, Outbox::unconfirmed),
            self.waiting.len(),
            if self.starting.is_some() {
                ", starting"
            } else {
                ""
            },
            if self.storing.is_some() {
                ", storing offers"
            } else {
                ""
            },
            if self.stopping { ", stopping" } else { "" },
        )
    }

    /// Whether it asked to stop and every call it made is answered.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopping
            && self.starting.is_none()
            && self.storing.is_none()
            && self.deleting.is_empty()
    }

    /// Asks it to stop (the application stops the producer to start it again): offers not
    /// taken are refused, and it stops once its calls are answered.
    pub(crate) fn stop(&mut self) {
        self.stopping = true;
        self.waiting.clear();
    }

    /// The application offers `offer` for `to`.
    pub(crate) fn offer(
        &mut self,
        now: Instant,
        to: EntityId,
        offer: u64,
        out: &mut Vec<ProducerOut>,
    ) {
        self.waiting.push_back((to, offer));
        self.take_offers(now, out);
    }

    /// When [`timer`](Self::timer) has work: the core's next deadline, while it runs.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.stopping {
            return None;
        }
        self.core.as_ref()?.poll_timeout()
    }

    /// Resends and forgets what is due at `now`.
    pub(crate) fn timer(&mut self, now: Instant, out: &mut Vec<ProducerOut>) {
        if self.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        if let Some(core) = self.core.as_mut() {
            core.handle_timeout(now);
        }
        self.step(out);
    }

    /// An entity's answer reached the producer.
    pub(crate) fn on_reply(
        &mut self,
        now: Instant,
        to: EntityId,
        stream: StreamId,
        reply: ConsumerReply,
        out: &mut Vec<ProducerOut>,
    ) {
        if self.stopping {
            return;
        }
        let Some(core) = self.core.as_mut() else {
            self.replies.push_back((to, stream, reply));
            return;
        };
        core.on_reply(now, &to, stream, reply);
        // What it confirmed makes room for offers that waited (flow control).
        self.take_offers(now, out);
        self.step(out);
    }

    /// The store answered call `token`.
    pub(crate) fn answered(
        &mut self,
        now: Instant,
        token: u64,
        answer: CallAnswer,
        out: &mut Vec<ProducerOut>,
    ) {
        match answer {
            CallAnswer::Started { epoch, queued } => {
                if self.starting != Some(token) {
                    return;
                }
                self.starting = None;
                if self.stopping {
                    return;
                }
                let mut core = Producer::new(self.spec.producer.clone(), epoch);
                let mut effects = Vec::new();
                // Queued messages of another kind are not this producer's to resume.
                let (streams, _) = queued_streams(&self.kind, queued);
                for queued in streams {
                    let stream = StreamId {
                        epoch: queued.epoch,
                        number: queued.stream,
                    };
                    // A payload that does not decode is a bug of the simulator: stop the run.
                    let held = queued
                        .messages
                        .iter()
                        .map(|(seq, payload)| {
                            (*seq, decode_offer(payload).expect("a queued offer decodes"))
                        })
                        .collect();
                    core.resume(now, queued.entity, stream, held, &mut effects);
                }
                self.core = Some(Outbox::new(core, effects));
                // The answers heard before the start, then the offers that waited for it.
                while let Some((to, stream, reply)) = self.replies.pop_front() {
                    if let Some(core) = self.core.as_mut() {
                        core.on_reply(now, &to, stream, reply);
                    }
                }
                self.take_offers(now, out);
            }
            CallAnswer::Enqueued => {
                let Some(storing) = self.storing.take_if(|s| s.token == token) else {
                    return;
                };
                let released = self.core.as_mut().map(Outbox::stored).unwrap_or_default();
                out.push(ProducerOut::Accepted(storing.accepted));
                self.carry_out(released, out);
            }
            CallAnswer::Deleted => {
                self.deleting.remove(&token);
                return;
            }
        }
        self.step(out);
    }

    /// Does what the outbox says is next until it says nothing more: stores what was
    /// accepted (one call at a time), and carries out what it released.
    fn step(&mut self, out: &mut Vec<ProducerOut>) {
        loop {
            let Some(core) = self.core.as_mut() else {
                return;
            };
            match core.next_step() {
                None => return,
                Some(OutboxStep::CarryOut(effects)) => self.carry_out(effects, out),
                Some(OutboxStep::Store(unstored)) => {
                    let (accepted, rows) = unstored.into_iter().unzip();
                    let token = self.token();
                    self.storing = Some(Storing { token, accepted });
                    out.push(ProducerOut::Call {
                        token,
                        call: ProducerCall::Enqueue(rows),
                    });
                }
            }
        }
    }

    /// Takes as many waiting offers as the core has room for, each stored before anything of
    /// it is sent, then does what the outbox says is next.
    fn take_offers(&mut self, now: Instant, out: &mut Vec<ProducerOut>) {
        if self.stopping {
            return;
        }
        let Some(core) = self.core.as_mut() else {
            return;
        };
        while !core.is_full()
            && let Some((to, offer)) = self.waiting.pop_front()
        {
            let kind = &self.kind;
            let row = |stream: StreamId, seq| {
                let row = QueuedMessage {
                    kind: Arc::clone(kind),
                    entity: to.clone(),
                    epoch: stream.epoch,
                    stream: stream.number,
                    seq,
                    payload: encode_offer(offer),
                };
                (offer, row)
            };
            let Ok((stream, seq)) = core.offer_stored(now, to.clone(), offer, row) else {
                // Not reached: no more is taken than the core has room for.
                continue;
            };
            out.push(ProducerOut::Offered {
                offer,
                to,
                stream,
                seq,
            });
        }
        self.step(out);
    }

    /// Sends what the core asks to send, and deletes what it confirmed from the queue.
    fn carry_out(
        &mut self,
        effects: Vec<ProducerEffect<EntityId, u64>>,
        out: &mut Vec<ProducerOut>,
    ) {
        let mut confirmations = Vec::new();
        for effect in effects {
            match effect {
                ProducerEffect::Send {
                    to,
                    stream,
                    seq,
                    first,
                    payload,
                } => out.push(ProducerOut::Send {
                    to,
                    header: Sequencing {
                        offer: payload,
                        producer: Arc::clone(&self.id),
                        code: self.code,
                        stream,
                        seq,
                        first,
                        reply_to: self.node.clone(),
                        incarnation: self.incarnation,
                    },
                }),
                ProducerEffect::Confirmed { to, stream, seq } => {
                    out.push(ProducerOut::Confirmed { to, stream, seq });
                    confirmations.push(QueueConfirmation {
                        epoch: stream.epoch,
                        stream: stream.number,
                        up_to: seq,
                    });
                }
            }
        }
        if !confirmations.is_empty() {
            let token = self.token();
            self.deleting.insert(token);
            out.push(ProducerOut::Call {
                token,
                call: ProducerCall::Confirm(confirmations),
            });
        }
    }
}
