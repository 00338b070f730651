//! Shards under leases (`cluster.sharding.use-lease = "store"`) on a real node with a real
//! SQLite store: a shard's entities run only while the node holds the shard's lease, their
//! writes carry its fencing token (so a newer holder's write shuts an older one out), and a
//! lease store that cannot be reached makes commands fail with a clear error and shows in the
//! sharding's failing leases (what `/ready` reports).

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use shardik_core::sharding::{LeaseTiming, shard_id_for};
use shardik_persistence::{AtomicWrite, Fence, NewEvent, SqliteStore, Store, persistence_id};
use shardik_runtime::node::RunningNode;
use shardik_runtime::persistence::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence,
};
use shardik_runtime::sharding::{
    EntityKind, EntityRecovery, EntityTypeKey, InitError, ReplyTo, Sharding, ShardingError,
};

use common::gated_store::GatedStore;
use common::{Echo, free_port, running_entities, start_sharding_node_with, wait_up};

const CLUSTER: &str = "lease-test";
const SHARDS: u32 = 10;
const ASK: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
enum Cmd {
    Add(u64, ReplyTo<u64>),
}

#[derive(Debug, Serialize, Deserialize)]
struct Added(u64);

#[derive(Default)]
struct Counter {
    total: u64,
}

impl EventSourcedEntity for Counter {
    type Command = Cmd;
    type Event = Added;

    fn handle_command(&self, cmd: Cmd, _ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Cmd::Add(n, reply_to) => Self::persist(Added(n)).then_reply(reply_to, |s| s.total),
        }
    }

    fn apply_event(&mut self, Added(n): &Added) {
        self.total += n;
    }
}

const COUNTER: EntityTypeKey<EventSourced<Counter>> = EntityTypeKey::new("leased-counter");

fn timing() -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::from_secs(4),
        renew_interval: Duration::from_millis(500),
        operation_timeout: Duration::from_millis(500),
        retry_interval: Duration::from_millis(300),
    }
}

/// One node with shard leases on, and a SQLite store behind gates.
async fn leased_node(dir: &tempfile::TempDir) -> (RunningNode, Sharding, Arc<GatedStore>) {
    leased_node_remembering(dir, false).await
}

/// [`leased_node`], its counters remembered in the same store when `remember` is set.
async fn leased_node_remembering(
    dir: &tempfile::TempDir,
    remember: bool,
) -> (RunningNode, Sharding, Arc<GatedStore>) {
    let sqlite = SqliteStore::open(dir.path().join("leases.db"))
        .await
        .unwrap();
    let store = Arc::new(GatedStore::over(Arc::new(sqlite)));
    let port = free_port();
    let (node, sharding) = start_sharding_node_with(CLUSTER, port, port, &[], |c| {
        c.number_of_shards = SHARDS;
        c.region.lease = Some(timing());
        c.cluster_name = CLUSTER.into();
    })
    .await;
    wait_up(&[&node], 1).await;
    let persistence = Persistence::new(store.clone() as Arc<dyn Store>);
    let mut kind = EventSourcedKind::new(COUNTER, &persistence, |_| Counter::default()).into_kind();
    if remember {
        kind = kind.with_remember_entities(store.clone(), EntityRecovery::All);
    }
    sharding
        .init(kind)
        .expect("a durable kind brings its store");
    (node, sharding, store)
}

fn lease_name(entity: &str) -> String {
    let shard = shard_id_for(entity, SHARDS).unwrap();
    format!("{CLUSTER}-shard-{}-{shard}", COUNTER.name())
}

async fn add(sharding: &Sharding, id: &str, n: u64) -> Result<u64, ShardingError> {
    let counter = sharding.entity_ref_for(COUNTER, id).unwrap();
    counter.ask(|r| Cmd::Add(n, r), ASK).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_runs_under_its_lease_and_a_newer_holders_write_shuts_its_entities_out() {
    let dir = tempfile::tempdir().unwrap();
    let (node, sharding, store) = leased_node(&dir).await;
    assert_eq!(add(&sharding, "c-1", 2).await, Ok(2));
    assert_eq!(add(&sharding, "c-1", 3).await, Ok(5));

    // The shard's lease is this node's, in the store the journal is in.
    let name = lease_name("c-1");
    let info = store.read_lease(&name).await.unwrap().expect("taken");
    let owner = shardik_runtime::lease::owner_for(&node.self_node);
    assert_eq!(info.holder(), Some(owner.as_str()), "{info:?}");
    // Still held well past its time-to-live: it is renewed in the background.
    tokio::time::sleep(timing().ttl + Duration::from_secs(1)).await;
    let renewed = store.read_lease(&name).await.unwrap().expect("taken");
    assert_eq!(renewed.holder(), Some(owner.as_str()), "{renewed:?}");
    assert_eq!(renewed.token, info.token, "renewals keep the token");
    assert_eq!(add(&sharding, "c-1", 1).await, Ok(6));

    // A newer tenure writes to the shard's scope (a node that took the lease after this one
    // stalled past its deadline, say), for another entity of the same shard, so that no
    // sequence number of c-1's is taken: from then on this node's writes, which carry the
    // older token, are refused by the fence alone, so its copy of c-1 cannot write.
    let sibling = (0..)
        .map(|i| format!("sibling-{i}"))
        .find(|id| shard_id_for(id, SHARDS) == shard_id_for("c-1", SHARDS))
        .expect("some id shares the shard");
    let newer = AtomicWrite {
        persistence_id: persistence_id(COUNTER.name(), &sibling),
        events: vec![NewEvent {
            seq: 1,
            payload: Bytes::from_static(b"\x07"),
            manifest: "".into(),
            tags: Vec::new(),
        }],
        fence: Some(Fence::new(name.clone(), info.token + 1)),
        marks: Vec::new(),
    };
    assert_eq!(store.append(vec![newer]).await.unwrap(), vec![Ok(())]);
    let stale = add(&sharding, "c-1", 1).await;
    assert!(
        matches!(&stale, Err(ShardingError::EntityFailed(why))
            if why.contains(&format!("fenced: token {} is older than {}", info.token, info.token + 1))),
        "{stale:?}"
    );
    let pid = persistence_id(COUNTER.name(), "c-1");
    assert_eq!(
        store.highest_seq(&pid).await.unwrap(),
        3,
        "nothing written after the fence"
    );
}

/// Remembered entities start without a message once their shard's lease is held: after the
/// whole cluster stopped and started again, they run again (and still under the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_start_again_under_their_shards_leases() {
    let dir = tempfile::tempdir().unwrap();
    let (first, sharding, _store) = leased_node_remembering(&dir, true).await;
    let ids = ["m-1", "m-2", "m-3"];
    for id in ids {
        assert_eq!(add(&sharding, id, 1).await, Ok(1));
    }
    first
        .stop
        .send(shardik_runtime::node::StopRequest::Leave)
        .await
        .expect("leave asked");
    tokio::time::timeout(Duration::from_secs(20), first.finished)
        .await
        .expect("the first node leaves")
        .expect("its task ends");

    // A new cluster on the same file: nobody sends anything, yet the three come back.
    let (second, sharding, store) = leased_node_remembering(&dir, true).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now_running = running_entities(&sharding, COUNTER.name()).await;
        if now_running == ids {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "remembered entities did not come back under leases: {now_running:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let owner = shardik_runtime::lease::owner_for(&second.self_node);
    for id in ids {
        let lease = store.read_lease(&lease_name(id)).await.unwrap();
        assert_eq!(
            lease.as_ref().and_then(|l| l.holder()),
            Some(owner.as_str()),
            "{id} runs without its shard's lease: {lease:?}"
        );
    }
    assert_eq!(add(&sharding, "m-2", 1).await, Ok(2), "state kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_lease_store_down_commands_fail_clearly_and_the_lease_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, sharding, store) = leased_node(&dir).await;
    store.leases_down.store(true, Ordering::SeqCst);
    let refused = add(&sharding, "c-2", 1).await;
    assert_eq!(refused, Err(ShardingError::LeaseUnavailable));
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("lease could not be acquired"),
    );
    let failing = sharding.failing_leases();
    let error = failing.get(&lease_name("c-2")).expect("reported");
    assert!(error.contains("connection refused"), "{failing:?}");

    // The store comes back: the next attempt (after lease-retry-interval) takes the lease,
    // the report clears and commands run.
    store.leases_down.store(false, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let answer = loop {
        match add(&sharding, "c-2", 1).await {
            Err(ShardingError::LeaseUnavailable) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => break other,
        }
    };
    assert_eq!(answer, Ok(1));
    assert!(sharding.failing_leases().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_without_a_lease_store_is_refused_when_leases_are_on() {
    let port = free_port();
    let (_node, sharding) = start_sharding_node_with(CLUSTER, port, port, &[], |c| {
        c.region.lease = Some(timing());
    })
    .await;
    let plain = EntityKind::new("plain", |_| Echo);
    let refused = sharding.init(plain).unwrap_err();
    assert!(matches!(refused, InitError::NoLeaseStore(ref k) if k == "plain"));
    assert!(
        refused.to_string().contains("with_lease_store"),
        "{refused}"
    );
}

/// One ticket desk for the cluster, a singleton.
struct Desk(u64);

#[derive(Debug, Serialize, Deserialize)]
struct Take(ReplyTo<u64>);

impl shardik_runtime::sharding::Entity for Desk {
    type Command = Take;
    async fn handle(
        &mut self,
        Take(reply_to): Take,
        _ctx: &mut shardik_runtime::sharding::EntityContext<Self>,
    ) {
        self.0 += 1;
        reply_to.send(self.0);
    }
}

/// A singleton given a lease store (Akka's `cluster.singleton.use-lease`) runs its one shard
/// and its coordinator under leases there, with the default `use-lease = "auto"`; one without
/// takes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_singleton_given_a_lease_store_runs_under_its_lease() {
    use shardik_runtime::sharding::{ClusterSingleton, SingletonSettings};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("singleton.db"))
            .await
            .unwrap(),
    );
    let port = free_port();
    let (node, sharding) = start_sharding_node_with(CLUSTER, port, port, &[], |c| {
        c.auto_shard_lease = Some(timing());
        c.auto_coordinator_lease = Some(timing());
        c.cluster_name = CLUSTER.into();
    })
    .await;
    wait_up(&[&node], 1).await;
    let leased = ClusterSingleton::init(
        &sharding,
        SingletonSettings::new("desk").with_lease_store(store.clone()),
        || Desk(0),
    )
    .unwrap();
    let plain =
        ClusterSingleton::init(&sharding, SingletonSettings::new("plain"), || Desk(0)).unwrap();
    assert_eq!(leased.ask(Take, ASK).await, Ok(1));
    assert_eq!(plain.ask(Take, ASK).await, Ok(1));

    let owner = shardik_runtime::lease::owner_for(&node.self_node);
    for name in [
        format!("{CLUSTER}-shard-cluster-singleton-desk-singleton"),
        format!("{CLUSTER}-coordinator-cluster-singleton-desk"),
    ] {
        let info = store.read_lease(&name).await.unwrap();
        let info = info.unwrap_or_else(|| panic!("{name} not taken"));
        assert_eq!(info.holder(), Some(owner.as_str()), "{name}: {info:?}");
    }
    for name in [
        format!("{CLUSTER}-shard-cluster-singleton-plain-singleton"),
        format!("{CLUSTER}-coordinator-cluster-singleton-plain"),
    ] {
        assert_eq!(store.read_lease(&name).await.unwrap(), None, "{name}");
    }
}

/// A node that leaves gives back every lease it held, its coordinator's included, before
/// `leave()` returns: a release still under way when the process ends would keep the lease
/// held in the store for its whole time-to-live, and the next oldest node's coordinator (and
/// with it every region's registration) would wait that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_leaves_has_given_its_leases_back_when_leave_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = common::fast_settings();
    settings.cluster.name = CLUSTER.into();
    settings.cluster.sharding.number_of_shards = SHARDS;
    settings.persistence.store = format!("sqlite:{}", dir.path().join("node.db").display());
    let me: shardik_core::membership::Address =
        format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let node = shardik_runtime::Node::builder(settings)
        .bind(me.clone())
        .seeds([me])
        .start()
        .await
        .unwrap();
    node.wait_until_up().await.unwrap();
    let persistence = node.persistence().await.unwrap();
    let store = Arc::clone(persistence.store());
    node.sharding()
        .init(EventSourcedKind::new(COUNTER, &persistence, |_| Counter::default()).into_kind())
        .unwrap();
    let entities = ["a", "b", "c", "d", "e"];
    for id in entities {
        assert_eq!(add(node.sharding(), id, 1).await, Ok(1), "{id}");
    }
    let mut names = vec![format!("{CLUSTER}-coordinator-{}", COUNTER.name())];
    names.extend(entities.iter().map(|id| lease_name(id)));
    names.sort();
    names.dedup();
    let owner = shardik_runtime::lease::owner_for(node.self_node());
    for name in &names {
        let info = store.read_lease(name).await.unwrap();
        let info = info.unwrap_or_else(|| panic!("{name} not taken (leases are \"auto\")"));
        assert_eq!(info.holder(), Some(owner.as_str()), "{name}: {info:?}");
    }

    assert_eq!(
        node.leave().await,
        shardik_core::membership::ShutdownReason::Left
    );
    for name in &names {
        let info = store.read_lease(name).await.unwrap().unwrap();
        assert_eq!(
            info.holder(),
            None,
            "{name} still held after leave(): {info:?}"
        );
    }
}
