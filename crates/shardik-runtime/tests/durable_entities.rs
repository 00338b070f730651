//! Durable entities on real nodes in one process, over the in-memory store (the SQLite and
//! PostgreSQL stores keep the same contract, checked by their own conformance tests, and the
//! multi-process tests run the binary on them): state that survives passivation and a move to
//! another node, snapshots and retention, answers only after the write, a second writer
//! refused, recovery that refuses a gap, durable state by revision, events by tag, and
//! remembered entities that start again after a full restart without a message.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use shardik_persistence::{AtomicWrite, MemoryStore, NewEvent, Store, StoredState, persistence_id};
use shardik_runtime::node::RunningNode;
use shardik_runtime::persistence::{
    DurableState, DurableStateContext, DurableStateEntity, Effect, EventSourced,
    EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence, Retention, StateEffect,
};
use shardik_runtime::sharding::{
    EntityKind, EntityRecovery, EntityTypeKey, InitError, ReplyTo, Sharding, ShardingError,
};

use common::gated_store::GatedStore;
use common::{
    Echo, Echoed, free_port, running_entities, start_sharding_node, start_sharding_node_with,
    wait_up,
};

const ASK: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
enum Cmd {
    Add(u64, ReplyTo<u64>),
    AddTwice(u64, ReplyTo<u64>),
    Get(ReplyTo<u64>),
    /// Answers a text, after persisting.
    AddAndTell(u64, ReplyTo<String>),
    /// Persists, answers, then stops.
    AddAndStop(u64, ReplyTo<u64>),
    /// Answers the address of the node it runs on.
    Where(ReplyTo<String>),
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Added(u64);

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    total: u64,
    events: u64,
}

impl EventSourcedEntity for Counter {
    type Command = Cmd;
    type Event = Added;

    fn handle_command(&self, cmd: Cmd, ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Cmd::Add(n, reply_to) => Self::persist(Added(n)).then_reply(reply_to, |s| s.total),
            Cmd::AddTwice(n, reply_to) => {
                Self::persist_all([Added(n), Added(n)]).then_reply(reply_to, |s| s.total)
            }
            Cmd::Get(reply_to) => Effect::reply(reply_to, self.total),
            Cmd::AddAndTell(n, reply_to) => {
                Self::persist(Added(n)).then_reply(reply_to, |s| format!("total {}", s.total))
            }
            Cmd::AddAndStop(n, reply_to) => {
                ctx.passivate();
                Self::persist(Added(n)).then_reply(reply_to, |s| s.total)
            }
            Cmd::Where(reply_to) => Effect::reply(reply_to, ctx.node().address.to_string()),
        }
    }

    fn apply_event(&mut self, Added(n): &Added) {
        self.total += n;
        self.events += 1;
    }

    fn tags(&self, Added(n): &Added) -> Vec<String> {
        if n % 2 == 0 {
            vec!["even".into()]
        } else {
            Vec::new()
        }
    }
}

const COUNTER: EntityTypeKey<EventSourced<Counter>> = EntityTypeKey::new("es-counter");

async fn one_node() -> (RunningNode, Sharding) {
    let port = free_port();
    let (node, sharding) = start_sharding_node("durable-test", port, port, &[]).await;
    wait_up(&[&node], 1).await;
    (node, sharding)
}

/// One node whose configuration says `remember-entities = on` with `recovery`.
async fn one_remembering_node(recovery: EntityRecovery) -> (RunningNode, Sharding) {
    let port = free_port();
    let (node, sharding) = start_sharding_node_with("durable-test", port, port, &[], |c| {
        c.remember_entities = Some(recovery);
    })
    .await;
    wait_up(&[&node], 1).await;
    (node, sharding)
}

fn register(sharding: &Sharding, persistence: &Persistence, retention: Option<Retention>) {
    let mut kind = EventSourcedKind::new(COUNTER, persistence, |_| Counter::default());
    if let Some(r) = retention {
        kind = kind.with_snapshots(r);
    }
    sharding.init(kind.into_kind()).expect("kind registers");
}

/// Asks the entity to stop and waits until a new incarnation answers (it recovered).
async fn passivate(sharding: &Sharding, id: &str, add: u64) -> u64 {
    let counter = sharding.entity_ref_for(COUNTER, id).unwrap();
    counter.ask(|r| Cmd::AddAndStop(add, r), ASK).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_rebuilt_from_the_journal_after_the_entity_stops() {
    let (_node, sharding) = one_node().await;
    let store = MemoryStore::new();
    let persistence = Persistence::new(Arc::new(store.clone()));
    register(&sharding, &persistence, None);
    let counter = sharding.entity_ref_for(COUNTER, "c1").unwrap();
    assert_eq!(counter.ask(|r| Cmd::Add(2, r), ASK).await.unwrap(), 2);
    assert_eq!(counter.ask(|r| Cmd::AddTwice(3, r), ASK).await.unwrap(), 8);
    let told: String = counter.ask(|r| Cmd::AddAndTell(1, r), ASK).await.unwrap();
    assert_eq!(told, "total 9");
    assert_eq!(passivate(&sharding, "c1", 1).await, 10);
    // A new incarnation: recovered from the five events, not from zero.
    assert_eq!(counter.ask(Cmd::Get, ASK).await.unwrap(), 10);
    let pid = persistence_id("es-counter", "c1");
    let journal = store.read_events(&pid, 1, u64::MAX, 100).await.unwrap();
    let seqs: Vec<u64> = journal.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        vec![1, 2, 3, 4, 5],
        "one event per Add, two for AddTwice"
    );
    // Tagged events (even amounts) are found across the store.
    let even = store.events_by_tag("even", 0, 100).await.unwrap();
    assert_eq!(even.len(), 1, "only Add(2) was even");
    assert_eq!((even[0].persistence_id.clone(), even[0].seq), (pid, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_bound_recovery_and_old_ones_are_deleted() {
    let (_node, sharding) = one_node().await;
    let store = MemoryStore::new();
    let persistence = Persistence::new(Arc::new(store.clone()));
    let retention = Retention {
        every: 10,
        keep: 2,
        delete_events: true,
    };
    register(&sharding, &persistence, Some(retention));
    let counter = sharding.entity_ref_for(COUNTER, "c2").unwrap();
    for i in 1..=35u64 {
        assert_eq!(counter.ask(|r| Cmd::Add(1, r), ASK).await.unwrap(), i);
    }
    let pid = persistence_id("es-counter", "c2");
    // Snapshots are saved in the background: wait for the one at 30 and its clean-up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let latest = store.latest_snapshot(&pid).await.unwrap().map(|s| s.seq);
        let first_event = store.read_events(&pid, 1, u64::MAX, 1).await.unwrap();
        if latest == Some(30) && first_event.first().map(|e| e.seq) == Some(21) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "snapshot at 30 and events from 21: {latest:?} {first_event:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Events up to the oldest kept snapshot (20: two kept, ten apart) are deleted; their
    // numbers stay taken.
    assert_eq!(store.highest_seq(&pid).await.unwrap(), 35);
    assert_eq!(passivate(&sharding, "c2", 1).await, 36);
    // Recovered from the snapshot at 30 plus events 31..36.
    assert_eq!(counter.ask(Cmd::Get, ASK).await.unwrap(), 36);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_answered_only_after_its_events_are_written() {
    let (_node, sharding) = one_node().await;
    // Every append waits until the gate opens, to see when the answer goes out.
    let gated = Arc::new(GatedStore::over(Arc::new(MemoryStore::new())));
    gated.appends.set_open(false);
    let persistence = Persistence::new(gated.clone());
    register(&sharding, &persistence, None);
    let counter = sharding.entity_ref_for(COUNTER, "c3").unwrap();
    let asked = tokio::spawn({
        let counter = counter.clone();
        async move { counter.ask(|r| Cmd::Add(4, r), ASK).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!asked.is_finished(), "answered before the write was done");
    let pid = persistence_id("es-counter", "c3");
    assert_eq!(gated.inner.highest_seq(&pid).await.unwrap(), 0);
    gated.appends.set_open(true);
    assert_eq!(asked.await.unwrap().unwrap(), 4);
    assert_eq!(gated.inner.highest_seq(&pid).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_is_refused_and_the_entity_recovers_what_the_first_wrote() {
    let (_node, sharding) = one_node().await;
    let store = MemoryStore::new();
    let persistence = Persistence::new(Arc::new(store.clone()));
    register(&sharding, &persistence, None);
    let counter = sharding.entity_ref_for(COUNTER, "c4").unwrap();
    assert_eq!(counter.ask(|r| Cmd::Add(1, r), ASK).await.unwrap(), 1);
    // Another live copy (as a split brain would make) writes event 2 first.
    let pid = persistence_id("es-counter", "c4");
    let rival = AtomicWrite {
        persistence_id: pid.clone(),
        events: vec![NewEvent {
            seq: 2,
            payload: Bytes::from(postcard::to_allocvec(&Added(100)).unwrap()),
            manifest: "postcard/1".into(),
            tags: Vec::new(),
        }],
        fence: None,
        marks: Vec::new(),
    };
    assert_eq!(store.append(vec![rival]).await.unwrap(), vec![Ok(())]);
    // This copy's write of event 2 is refused: the asker is told, nothing is applied.
    match counter.ask(|r| Cmd::Add(5, r), ASK).await {
        Err(ShardingError::EntityFailed(why)) => {
            assert!(why.contains("refused"), "{why}")
        }
        other => panic!("expected a refused write, got {other:?}"),
    }
    // The failed incarnation was dropped; the next one recovers both writers' events in order.
    assert_eq!(counter.ask(Cmd::Get, ASK).await.unwrap(), 101);
    let events = store.read_events(&pid, 1, u64::MAX, 10).await.unwrap();
    assert_eq!(events.len(), 2, "the refused event is not in the journal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_refuses_a_journal_with_a_gap() {
    let (_node, sharding) = one_node().await;
    let store = MemoryStore::new();
    let pid = persistence_id("es-counter", "c5");
    for seq in [1, 3] {
        let write = AtomicWrite {
            persistence_id: pid.clone(),
            events: vec![NewEvent {
                seq,
                payload: Bytes::from(postcard::to_allocvec(&Added(1)).unwrap()),
                manifest: "postcard/1".into(),
                tags: Vec::new(),
            }],
            fence: None,
            marks: Vec::new(),
        };
        assert_eq!(store.append(vec![write]).await.unwrap(), vec![Ok(())]);
    }
    let persistence = Persistence::new(Arc::new(store.clone()));
    register(&sharding, &persistence, None);
    let counter = sharding.entity_ref_for(COUNTER, "c5").unwrap();
    match counter.ask(Cmd::Get, ASK).await {
        Err(ShardingError::EntityFailed(why)) => {
            assert!(why.contains("jumps from event 1 to 3"), "{why}")
        }
        other => panic!("expected a recovery failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_that_moves_to_another_node_keeps_its_state() {
    let (pa, pb) = (free_port(), free_port());
    let (a, sharding_a) = start_sharding_node("durable-move", pa, pa, &[]).await;
    let (b, sharding_b) = start_sharding_node("durable-move", pb, pa, &[]).await;
    wait_up(&[&a, &b], 2).await;
    // Both nodes share one store, as processes share one database.
    let store = Arc::new(MemoryStore::new());
    register(&sharding_a, &Persistence::new(store.clone()), None);
    register(&sharding_b, &Persistence::new(store.clone()), None);
    let (ref_a, ref_b) = (
        sharding_a.entity_ref_for(COUNTER, "mover").unwrap(),
        sharding_b.entity_ref_for(COUNTER, "mover").unwrap(),
    );
    let mut expected = 0;
    for n in 1..=5 {
        expected += n;
        assert_eq!(ref_b.ask(|r| Cmd::Add(n, r), ASK).await.unwrap(), expected);
    }
    // The node that hosts the counter leaves; its shards are handed to the other.
    let host: String = ref_b.ask(Cmd::Where, ASK).await.unwrap();
    let a_addr = a.self_node.address.to_string();
    let (leaving, staying, survivor) = if host == a_addr {
        (&a, &ref_b, &b)
    } else {
        (&b, &ref_a, &a)
    };
    leaving
        .handle
        .leave(leaving.self_node.address.clone())
        .await
        .expect("leave asked");
    for n in 6..=8 {
        expected += n;
        let got = staying.ask(|r| Cmd::Add(n, r), ASK).await.unwrap();
        assert_eq!(got, expected, "no increment lost across the move");
    }
    let now: String = staying.ask(Cmd::Where, ASK).await.unwrap();
    assert_eq!(
        now,
        survivor.self_node.address.to_string(),
        "the counter moved"
    );
    let pid = persistence_id("es-counter", "mover");
    assert_eq!(store.highest_seq(&pid).await.unwrap(), 8);
}

// Durable state.

#[derive(Debug, Serialize, Deserialize)]
enum CartCmd {
    Add(String, ReplyTo<Vec<String>>),
    Items(ReplyTo<Vec<String>>),
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct Cart {
    items: Vec<String>,
}

impl DurableStateEntity for Cart {
    type Command = CartCmd;

    fn handle_command(
        &self,
        cmd: CartCmd,
        _ctx: &mut DurableStateContext<Self>,
    ) -> StateEffect<Self> {
        match cmd {
            CartCmd::Add(item, reply_to) => {
                let mut next = self.clone();
                next.items.push(item);
                StateEffect::persist(next).then_reply(reply_to, |s| s.items.clone())
            }
            CartCmd::Items(reply_to) => StateEffect::reply(reply_to, self.items.clone()),
        }
    }
}

const CART: EntityTypeKey<DurableState<Cart>> = EntityTypeKey::new("ds-cart");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_state_is_stored_by_revision_and_a_stale_copy_is_refused() {
    let (_node, sharding) = one_node().await;
    let store = MemoryStore::new();
    let persistence = Persistence::new(Arc::new(store.clone()));
    sharding
        .init(EntityKind::durable_state(CART, &persistence, |_| {
            Cart::default()
        }))
        .unwrap();
    let cart = sharding.entity_ref_for(CART, "cart-1").unwrap();
    assert_eq!(
        cart.ask(|r| CartCmd::Add("apple".into(), r), ASK)
            .await
            .unwrap(),
        ["apple"]
    );
    assert_eq!(
        cart.ask(|r| CartCmd::Add("pear".into(), r), ASK)
            .await
            .unwrap(),
        ["apple", "pear"]
    );
    let pid = persistence_id("ds-cart", "cart-1");
    assert_eq!(store.load_state(&pid).await.unwrap().unwrap().revision, 2);
    // Another copy writes revision 3 first: this one's write is refused, and its next
    // incarnation loads what the other wrote.
    let other = Cart {
        items: vec!["plum".into()],
    };
    let written = store
        .write_state(
            &pid,
            StoredState {
                revision: 3,
                payload: Bytes::from(postcard::to_allocvec(&other).unwrap()),
            },
            None,
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(written, Ok(()));
    match cart.ask(|r| CartCmd::Add("fig".into(), r), ASK).await {
        Err(ShardingError::EntityFailed(why)) => assert!(why.contains("refused"), "{why}"),
        other => panic!("expected a refused write, got {other:?}"),
    }
    assert_eq!(cart.ask(CartCmd::Items, ASK).await.unwrap(), ["plum"]);
}

// Remembered entities.

/// Where a kind's choice to remember its entities comes from.
#[derive(Clone, Copy)]
enum Remembering {
    /// The kind's code: `with_remember_entities`.
    InCode(EntityRecovery),
    /// The node's configuration (`remember-entities = on`), the kind saying nothing.
    Configured(EntityRecovery),
}

impl Remembering {
    async fn node(self) -> (RunningNode, Sharding) {
        match self {
            Remembering::InCode(_) => one_node().await,
            Remembering::Configured(recovery) => one_remembering_node(recovery).await,
        }
    }
}

/// Registers the event-sourced counter remembering its entities in `store`.
fn register_remembering(sharding: &Sharding, store: &Arc<MemoryStore>, how: Remembering) {
    let persistence = Persistence::new(store.clone());
    let kind = EventSourcedKind::new(COUNTER, &persistence, |_| Counter::default()).into_kind();
    let kind = match how {
        Remembering::InCode(recovery) => kind.with_remember_entities(store.clone(), recovery),
        Remembering::Configured(_) => kind,
    };
    sharding.init(kind).expect("kind registers");
}

async fn remembered_entities_come_back(how: Remembering) {
    let store = Arc::new(MemoryStore::new());
    let (first, sharding) = how.node().await;
    register_remembering(&sharding, &store, how);
    let ids = ["r1", "r2", "r3", "r4", "r5", "r6", "r7"];
    for id in ids {
        let counter = sharding.entity_ref_for(COUNTER, id).unwrap();
        assert_eq!(counter.ask(|r| Cmd::Add(1, r), ASK).await.unwrap(), 1);
    }
    // r7 stops by itself: it is forgotten. The others are handed off when the node leaves,
    // which keeps them remembered.
    assert_eq!(passivate(&sharding, "r7", 1).await, 2);
    first
        .stop
        .send(shardik_runtime::node::StopRequest::Leave)
        .await
        .expect("leave asked");
    let reason = tokio::time::timeout(Duration::from_secs(20), first.finished)
        .await
        .expect("the first node leaves")
        .expect("its task ends");
    assert_eq!(reason, shardik_core::membership::ShutdownReason::Left);

    // A new cluster on the same store: nobody sends anything, yet the six come back.
    let (_second, sharding) = how.node().await;
    register_remembering(&sharding, &store, how);
    let expected: Vec<String> = ids[..6].iter().map(|s| s.to_string()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now_running = running_entities(&sharding, "es-counter").await;
        if now_running == expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "remembered entities did not come back: {now_running:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // They recover their state on their first command, as any entity.
    let r1 = sharding.entity_ref_for(COUNTER, "r1").unwrap();
    assert_eq!(r1.ask(Cmd::Get, ASK).await.unwrap(), 1);
    let r7 = sharding.entity_ref_for(COUNTER, "r7").unwrap();
    assert_eq!(
        r7.ask(Cmd::Get, ASK).await.unwrap(),
        2,
        "r7 restarts on demand"
    );
}

/// A shard's remembered set is loaded when the shard starts; an entity that passivates while
/// the load is under way may be in what the load read. It must stay stopped: its passivation
/// ended its remembered life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_passivated_while_its_shard_loads_its_remembered_set_stays_stopped() {
    let (_node, sharding) = one_node().await;
    // Loads of remembered entities wait, then answer as if read before p's passivation.
    let store = Arc::new(GatedStore {
        stale_remembered: vec!["p".into()],
        ..GatedStore::over(Arc::new(MemoryStore::new()))
    });
    store.loads.set_open(false);
    let persistence = Persistence::new(store.clone());
    let kind = EventSourcedKind::new(COUNTER, &persistence, |_| Counter::default())
        .into_kind()
        .with_remember_entities(store.clone(), EntityRecovery::All);
    sharding.init(kind).expect("kind registers");
    // p's command starts p's shard (whose load now waits), then p passivates.
    assert_eq!(passivate(&sharding, "p", 1).await, 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !running_entities(&sharding, "es-counter").await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "p did not stop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The load answers with p in it.
    store.loads.set_open(true);
    while store
        .loads_answered
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        assert!(tokio::time::Instant::now() < deadline, "the load never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..30 {
        assert_eq!(
            running_entities(&sharding, "es-counter").await,
            Vec::<String>::new(),
            "p was started again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_start_again_after_a_full_restart_without_a_message() {
    remembered_entities_come_back(Remembering::InCode(EntityRecovery::All)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_start_at_a_constant_rate_when_asked() {
    remembered_entities_come_back(Remembering::InCode(EntityRecovery::ConstantRate {
        entities: 2,
        frequency: Duration::from_millis(20),
    }))
    .await;
}

/// `remember-entities = on` in the configuration reaches a kind whose code says nothing (it
/// remembers in its own store, and starts as `entity-recovery-strategy` says), not only the
/// binary's demo counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_remember_entities_reaches_every_kind() {
    remembered_entities_come_back(Remembering::Configured(EntityRecovery::ConstantRate {
        entities: 2,
        frequency: Duration::from_millis(20),
    }))
    .await;
}

/// With `remember-entities = on`, a kind with no store of its own is refused at registration
/// with what to do, and one that opts out registers and is not remembered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_with_no_store_is_refused_when_remember_entities_is_on_unless_it_opts_out() {
    let (_node, sharding) = one_remembering_node(EntityRecovery::All).await;
    let refused = sharding
        .init(EntityKind::new("plain", |_| Echo))
        .unwrap_err();
    assert!(
        matches!(refused, InitError::NoRememberStore(ref k) if k == "plain"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("without_remember_entities"),
        "{refused}"
    );
    let plain = sharding
        .init(EntityKind::new("plain", |_| Echo).without_remember_entities())
        .expect("an opted-out kind registers");
    assert_eq!(
        plain
            .entity_ref("p")
            .ask(|r| Echoed(7, r), ASK)
            .await
            .unwrap(),
        7
    );
}
