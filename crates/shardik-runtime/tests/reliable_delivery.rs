//! Reliable delivery on a real node, over the in-memory store: every accepted command is
//! processed once by durable counters; a resend of what an entity already processed (its
//! confirmation lost in a crash) is confirmed again without being processed; a producer
//! started again without a durable queue is not taken for a duplicate of its earlier self; a
//! producer with a durable queue resumes what was not confirmed; streams dropped when idle
//! are rebuilt; entities passivated between commands lose nothing; and an in-memory kind is
//! at least once, as documented.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_persistence::{MemoryStore, Store, persistence_id};
use shardik_runtime::delivery::{
    Delivery, ProducerOptions, ProducerSettings, Reliable, ReliableProducer,
};
use shardik_runtime::node::RunningNode;
use shardik_runtime::persistence::{
    DurableState, DurableStateContext, DurableStateEntity, Effect, EventSourced,
    EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence, StateEffect,
};
use shardik_runtime::sharding::{
    EntityContext, EntityKind, EntityRegion, ReplyTo, Sharding, SyncEntity,
};

use common::{free_port, start_sharding_node, wait_up};

const ASK: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Cmd {
    /// Adds, persisting an event.
    Add(u64),
    /// Adds, then asks to be passivated.
    AddAndStop(u64),
    /// Persists nothing (a reliably delivered command may change nothing).
    Nothing,
    Get(ReplyTo<(u64, u64)>),
}

#[derive(Debug, Serialize, Deserialize)]
struct Added(u64);

/// A counter that also counts its events, so a command processed twice shows.
#[derive(Default)]
struct Counter {
    total: u64,
    events: u64,
}

impl EventSourcedEntity for Counter {
    type Command = Cmd;
    type Event = Added;

    fn handle_command(&self, cmd: Cmd, ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Cmd::Add(n) => Self::persist(Added(n)),
            Cmd::AddAndStop(n) => {
                ctx.passivate();
                Self::persist(Added(n))
            }
            Cmd::Nothing => Effect::none(),
            Cmd::Get(reply_to) => Effect::reply(reply_to, (self.total, self.events)),
        }
    }

    fn apply_event(&mut self, Added(n): &Added) {
        self.total += n;
        self.events += 1;
    }
}

type Counters = Reliable<EventSourced<Counter>>;

async fn one_node() -> (RunningNode, Sharding) {
    let port = free_port();
    let (node, sharding) = start_sharding_node("reliable-test", port, port, &[]).await;
    wait_up(&[&node], 1).await;
    (node, sharding)
}

fn counters(sharding: &Sharding, store: &Arc<MemoryStore>) -> EntityRegion<Counters> {
    let persistence = Persistence::new(Arc::clone(store) as Arc<dyn Store>);
    let kind = EventSourcedKind::new(
        shardik_runtime::sharding::EntityTypeKey::new("counter"),
        &persistence,
        |_| Counter::default(),
    )
    .into_kind()
    .reliable();
    sharding.init(kind).expect("kind registers")
}

async fn read<E>(region: &EntityRegion<Reliable<E>>, id: &str) -> (u64, u64)
where
    E: shardik_runtime::delivery::ReliableConsumer<Command = Cmd>,
{
    region
        .entity_ref(id)
        .ask(|r| Delivery::Plain(Cmd::Get(r)), ASK)
        .await
        .expect("the counter answers")
}

fn settings(window: u64) -> ProducerSettings {
    ProducerSettings {
        window,
        resend_min: Duration::from_millis(200),
        resend_max: Duration::from_secs(1),
        ..ProducerSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_command_is_processed_once_by_durable_counters() {
    let (node, sharding) = one_node().await;
    let store = Arc::new(MemoryStore::new());
    let region = counters(&sharding, &store);
    let producer = ReliableProducer::start(&region, ProducerOptions::new("p1"))
        .await
        .unwrap();
    let mut expected = [0u64; 30];
    for i in 0..1_500u64 {
        let counter = (i * 7 % 30) as usize;
        // Every third command persists nothing: its mark is written alone.
        let cmd = if i % 3 == 0 {
            Cmd::Nothing
        } else {
            Cmd::Add(1)
        };
        if matches!(cmd, Cmd::Add(_)) {
            expected[counter] += 1;
        }
        producer.send(&format!("c{counter}"), cmd).await.unwrap();
    }
    assert!(producer.all_confirmed(SETTLE).await, "all confirmed");
    for (counter, want) in expected.iter().enumerate() {
        let (total, events) = read(&region, &format!("c{counter}")).await;
        assert_eq!((total, events), (*want, *want), "counter c{counter}");
    }
    // Each counter keeps one mark, for the one producer, at the last sequence number.
    let marks = store
        .delivery_marks(&persistence_id("counter", "c0"))
        .await
        .unwrap();
    assert_eq!(marks.len(), 1);
    assert_eq!((&*marks[0].producer, marks[0].seq), ("p1", 50));
    producer.stop().await;
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_of_what_was_processed_is_confirmed_again_not_processed() {
    let (node, sharding) = one_node().await;
    let store = Arc::new(MemoryStore::new());
    let region = counters(&sharding, &store);
    let queue = Arc::clone(&store) as Arc<dyn Store>;
    let options = ProducerOptions::new("p-durable")
        .with_settings(settings(10))
        .with_durable_queue(Arc::clone(&queue));
    let producer = ReliableProducer::start(&region, options.clone())
        .await
        .unwrap();
    for _ in 0..25 {
        producer.send("a", Cmd::AddAndStop(1)).await.unwrap();
    }
    assert!(producer.all_confirmed(SETTLE).await);
    producer.stop().await;
    let left = queue.queued("p-durable").await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(read(&region, "a").await, (25, 25));

    // The producer's node crashed after the entity processed its last commands and before
    // their confirmations were deleted from the queue: the queue still holds them.
    let stream = store
        .delivery_marks(&persistence_id("counter", "a"))
        .await
        .unwrap()[0]
        .clone();
    let lost_confirmations = (20..=25)
        .map(|seq| shardik_persistence::QueuedMessage {
            kind: "counter".into(),
            entity: "a".into(),
            epoch: stream.epoch,
            stream: stream.stream,
            seq,
            payload: postcard::to_allocvec(&Cmd::AddAndStop(1)).unwrap().into(),
        })
        .collect();
    queue
        .enqueue("p-durable", lost_confirmations)
        .await
        .unwrap();

    // Started again, the producer sends them again; the entity (a new incarnation: each
    // command passivated it) reads its marks with its events and processes none of them.
    // (That they were sent and confirmed shows at the end: the queue is empty.)
    let again = ReliableProducer::start(&region, options).await.unwrap();
    assert!(again.all_confirmed(SETTLE).await);
    assert_eq!(
        read(&region, "a").await,
        (25, 25),
        "nothing processed twice"
    );

    // New commands continue the resumed stream.
    again.send("a", Cmd::Add(5)).await.unwrap();
    assert!(again.all_confirmed(SETTLE).await);
    assert_eq!(read(&region, "a").await, (30, 26));
    again.stop().await;
    let left = queue.queued("p-durable").await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_started_again_without_a_durable_queue_is_a_new_incarnation() {
    let (node, sharding) = one_node().await;
    let store = Arc::new(MemoryStore::new());
    let region = counters(&sharding, &store);
    let first = ReliableProducer::start(&region, ProducerOptions::new("p-mem"))
        .await
        .unwrap();
    for _ in 0..10 {
        first.send("b", Cmd::Add(1)).await.unwrap();
    }
    assert!(first.all_confirmed(SETTLE).await);
    first.stop().await;
    // Its sequence numbers start at 1 again: were they taken for the first incarnation's,
    // every one of them would be confirmed as a duplicate and dropped.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = ReliableProducer::start(&region, ProducerOptions::new("p-mem"))
        .await
        .unwrap();
    for _ in 0..10 {
        second.send("b", Cmd::Add(1)).await.unwrap();
    }
    assert!(second.all_confirmed(SETTLE).await);
    assert_eq!(read(&region, "b").await, (20, 20));
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_when_idle_is_rebuilt_on_the_next_command() {
    let (node, sharding) = one_node().await;
    let store = Arc::new(MemoryStore::new());
    let region = counters(&sharding, &store);
    let options = ProducerOptions::new("p-idle").with_settings(ProducerSettings {
        idle_after: Duration::from_millis(100),
        ..settings(10)
    });
    let producer = ReliableProducer::start(&region, options).await.unwrap();
    for _ in 0..5 {
        producer.send("c", Cmd::Add(1)).await.unwrap();
    }
    assert!(producer.all_confirmed(SETTLE).await);
    let before = store
        .delivery_marks(&persistence_id("counter", "c"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    for _ in 0..5 {
        let placed = producer.send("c", Cmd::Add(1)).await.unwrap();
        assert!(
            placed.stream.number > before[0].stream,
            "a new stream once the idle one was dropped"
        );
    }
    assert!(producer.all_confirmed(SETTLE).await);
    assert_eq!(read(&region, "c").await, (10, 10));
    drop(node);
}

/// A durable-state cart of item counts.
#[derive(Clone, Default, Serialize, Deserialize)]
struct Tally {
    total: u64,
}

impl DurableStateEntity for Tally {
    type Command = Cmd;

    fn handle_command(&self, cmd: Cmd, ctx: &mut DurableStateContext<Self>) -> StateEffect<Self> {
        match cmd {
            Cmd::Add(n) => StateEffect::persist(Tally {
                total: self.total + n,
            }),
            Cmd::AddAndStop(n) => {
                ctx.passivate();
                StateEffect::persist(Tally {
                    total: self.total + n,
                })
            }
            Cmd::Nothing => StateEffect::none(),
            Cmd::Get(reply_to) => StateEffect::reply(reply_to, (self.total, 0)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_state_entities_record_their_marks_with_their_state() {
    let (node, sharding) = one_node().await;
    let store = Arc::new(MemoryStore::new());
    let persistence = Persistence::new(Arc::clone(&store) as Arc<dyn Store>);
    let kind = EntityKind::<DurableState<Tally>>::durable_state(
        shardik_runtime::sharding::EntityTypeKey::new("tally"),
        &persistence,
        |_| Tally::default(),
    )
    .reliable();
    let region = sharding.init(kind).unwrap();
    let producer = ReliableProducer::start(
        &region,
        ProducerOptions::new("p-state").with_settings(settings(10)),
    )
    .await
    .unwrap();
    for i in 0..40 {
        let cmd = match i % 4 {
            0 => Cmd::Nothing,
            1 => Cmd::AddAndStop(1),
            _ => Cmd::Add(1),
        };
        producer.send(&format!("t{}", i % 3), cmd).await.unwrap();
    }
    assert!(producer.all_confirmed(SETTLE).await);
    let totals: u64 = [
        read(&region, "t0").await.0,
        read(&region, "t1").await.0,
        read(&region, "t2").await.0,
    ]
    .iter()
    .sum();
    assert_eq!(totals, 30);
    for t in ["t0", "t1", "t2"] {
        let marks = store
            .delivery_marks(&persistence_id("tally", t))
            .await
            .unwrap();
        assert_eq!(marks.len(), 1, "{t}");
    }
    drop(node);
}

/// An in-memory counter: at least once.
#[derive(Default)]
struct Plain {
    total: u64,
}

impl SyncEntity for Plain {
    type Command = Cmd;
    fn handle(&mut self, cmd: Cmd, ctx: &mut EntityContext<Self>) {
        match cmd {
            Cmd::Add(n) => self.total += n,
            Cmd::AddAndStop(n) => {
                self.total += n;
                ctx.passivate();
            }
            Cmd::Nothing => {}
            Cmd::Get(reply_to) => reply_to.send((self.total, 0)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_entities_process_each_command_while_they_live() {
    let (node, sharding) = one_node().await;
    let kind = EntityKind::new("plain", |_| Plain::default()).reliable();
    let region = sharding.init(kind).unwrap();
    let producer = ReliableProducer::start(
        &region,
        ProducerOptions::new("p-plain").with_settings(settings(10)),
    )
    .await
    .unwrap();
    for i in 0..300 {
        producer
            .send(&format!("m{}", i % 10), Cmd::Add(1))
            .await
            .unwrap();
    }
    assert!(producer.all_confirmed(SETTLE).await);
    for i in 0..10 {
        assert_eq!(read(&region, &format!("m{i}")).await.0, 30);
    }
    drop(node);
}
