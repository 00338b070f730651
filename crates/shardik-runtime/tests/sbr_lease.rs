//! Lease-majority on running nodes: the driver carries out the resolver's lease calls with a
//! [`Lease`] in the node's store and feeds the answers back.
//!
//! First the executor alone (granted, refused, released, no lease, a store that fails or
//! never answers), then two in-process nodes sharing one SQLite store, one of which stops
//! without a word: the other takes the lease and downs it, or, when somebody else holds the
//! lease, downs itself. Every wait is for a condition with a generous deadline; no outcome
//! depends on timing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::free_port;
use common::gated_store::GatedStore;
use shardik_core::membership::sbr::{Decision, SbrAction};
use shardik_core::membership::{
    Address, ClusterEvent, Input, MemberStatus, ShutdownReason, UniqueAddress,
};
use shardik_persistence::{LeaseAcquired, MemoryStore, SqliteStore, Store};
use shardik_runtime::config::{LeaseSettings, Settings};
use shardik_runtime::lease::Lease;
use shardik_runtime::node::{StartError, StopRequest};
use shardik_runtime::sbr_lease::{SbrLease, SbrLeaseOptions};
use tokio::sync::mpsc;

/// 10 s to live, renewed every second, 1 s per call.
fn lease_settings() -> LeaseSettings {
    LeaseSettings {
        heartbeat_timeout: Duration::from_secs(10),
        heartbeat_interval: Duration::from_secs(1),
        lease_operation_timeout: Duration::from_secs(1),
    }
}

fn node(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 7 + 1)
}

fn executor(store: &Arc<dyn Store>, who: &UniqueAddress) -> (SbrLease, mpsc::Receiver<Input>) {
    let options = SbrLeaseOptions {
        store: Arc::clone(store),
        name: "test-sbr".into(),
        settings: lease_settings(),
    };
    let mut e = SbrLease::start(Some(options), who).expect("valid settings");
    let answers = e.take_answers().expect("answers taken once");
    (e, answers)
}

/// Asks for the lease as `attempt` and returns whether it was granted (within 10 s).
async fn ask(e: &mut SbrLease, answers: &mut mpsc::Receiver<Input>, attempt: u64) -> bool {
    e.carry_out(SbrAction::AcquireLease { attempt });
    let answer = tokio::time::timeout(Duration::from_secs(10), answers.recv())
        .await
        .expect("an answer within 10 s")
        .expect("the executor runs");
    match answer {
        Input::SbrLeaseAnswer {
            attempt: a,
            granted,
        } => {
            assert_eq!(a, attempt, "the answer names its request");
            granted
        }
        other => panic!("not a lease answer: {other:?}"),
    }
}

async fn holder(store: &Arc<dyn Store>, name: &str) -> Option<String> {
    store
        .read_lease(name)
        .await
        .unwrap()
        .and_then(|l| l.holder().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_refused_released_then_granted_to_the_other() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = (node(1), node(2));
    let (mut ea, mut answers_a) = executor(&store, &a);
    let (mut eb, mut answers_b) = executor(&store, &b);
    assert!(ask(&mut ea, &mut answers_a, 1).await);
    assert_eq!(holder(&store, "test-sbr").await, Some(Lease::owner_for(&a)));
    assert!(!ask(&mut eb, &mut answers_b, 1).await, "held by a");
    // Asked again while held: answered from the handle, still granted.
    assert!(ask(&mut ea, &mut answers_a, 2).await);
    ea.carry_out(SbrAction::ReleaseLease);
    let freed = async {
        while holder(&store, "test-sbr").await.is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), freed)
        .await
        .expect("released");
    assert!(ask(&mut eb, &mut answers_b, 2).await, "free again");
    assert_eq!(holder(&store, "test-sbr").await, Some(Lease::owner_for(&b)));
    // A decision is only reported: no answer, no store call.
    eb.carry_out(SbrAction::Down {
        decision: Decision::DownUnreachable,
        nodes: vec![a.clone()],
    });
    assert!(answers_b.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_lease_every_request_is_refused() {
    let mut e = SbrLease::start(None, &node(3)).unwrap();
    let mut answers = e.take_answers().unwrap();
    assert!(e.lease().is_none());
    assert!(!ask(&mut e, &mut answers, 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_answers_is_a_refusal_after_the_operation_timeout() {
    let gated = Arc::new(GatedStore::over(Arc::new(MemoryStore::new())));
    gated.acquires.set_open(false);
    let store: Arc<dyn Store> = gated.clone();
    let (mut e, mut answers) = executor(&store, &node(4));
    let asked = tokio::time::Instant::now();
    assert!(!ask(&mut e, &mut answers, 1).await);
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "refused by the timeout, not at once"
    );
    assert!(
        e.lease().unwrap().store_error().is_some(),
        "the failure is reported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_is_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("c.db")).await.unwrap());
    store.close().await.unwrap();
    let (mut e, mut answers) = executor(&store, &node(5));
    assert!(!ask(&mut e, &mut answers, 1).await);
}

#[test]
fn settings_that_cannot_keep_a_lease_are_refused() {
    let options = SbrLeaseOptions {
        store: Arc::new(MemoryStore::new()),
        name: "x".into(),
        settings: LeaseSettings {
            heartbeat_interval: Duration::from_secs(20),
            ..lease_settings()
        },
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let e = SbrLease::start(Some(options), &node(6)).unwrap_err();
    assert!(e.to_string().contains("heartbeat-interval"), "{e}");
}

// ---- two in-process nodes on one SQLite store ----

/// Settings for a quick lease-majority cluster: the reference's failure detector (tolerant
/// of a loaded test machine), decided 2 s after a failure is seen, the lease kept 3 s after
/// removal.
fn settings(cluster: &str) -> Settings {
    let toml = format!(
        r#"
[cluster]
name = "{cluster}"
seed-node-timeout = "500ms"
periodic-tasks-initial-delay = "100ms"
gossip-interval = "200ms"
leader-actions-interval = "200ms"
unreachable-nodes-reaper-interval = "200ms"
[cluster.split-brain-resolver]
active-strategy = "lease-majority"
stable-after = "2s"
[cluster.split-brain-resolver.lease-majority]
lease-implementation = "store"
acquire-lease-delay-for-minority = "200ms"
release-after = "3s"
[coordination.lease]
heartbeat-timeout = "10s"
heartbeat-interval = "1s"
lease-operation-timeout = "1s"
[cluster.sharding]
number-of-shards = 10
"#
    );
    Settings::from_toml_str(&toml).expect("valid settings")
}

async fn start(
    settings: &Settings,
    port: u16,
    seed: u16,
    store: &Arc<dyn Store>,
) -> shardik_runtime::Node {
    shardik_runtime::Node::builder(settings.clone())
        .bind(Address::new("127.0.0.1", port))
        .seeds([Address::new("127.0.0.1", seed)])
        .store(Arc::clone(store))
        .start()
        .await
        .expect("the node starts")
}

/// Two nodes Up; returns them.
async fn two_nodes(
    settings: &Settings,
    store: &Arc<dyn Store>,
) -> (shardik_runtime::Node, shardik_runtime::Node) {
    let (pa, pb) = (free_port(), free_port());
    let a = start(settings, pa, pa, store).await;
    let b = start(settings, pb, pa, store).await;
    let up = async {
        loop {
            let both = [&a, &b].iter().all(|n| {
                let s = n.handle().snapshot();
                s.members
                    .iter()
                    .filter(|m| m.status == MemberStatus::Up)
                    .count()
                    == 2
            });
            if both {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), up)
        .await
        .expect("the cluster forms");
    (a, b)
}

async fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(
        SqliteStore::open(dir.path().join("shardik.db"))
            .await
            .unwrap(),
    )
}

/// Stops `node` as a crash would: no leave, no goodbye.
async fn crash(node: shardik_runtime::Node) {
    let (running, _sharding) = node.into_parts();
    let _ = running.stop.send(StopRequest::Now).await;
    let _ = running.finished.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_survivor_takes_the_lease_downs_the_silent_node_and_gives_the_lease_back() {
    let metrics = shardik_runtime::metrics::Metrics::install().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let s = settings("sbr-granted");
    let (a, b) = two_nodes(&s, &store).await;
    let b_node = b.self_node().clone();
    let mut events = a.subscribe();
    crash(b).await;
    let downed = async {
        loop {
            match events.recv().await {
                Ok(ClusterEvent::MemberDowned(m)) if m.addr == b_node => return,
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), downed)
        .await
        .expect("the silent node is downed");
    // Downed under the lease, which is kept until b is removed and 3 s more.
    assert_eq!(
        holder(&store, "sbr-granted-shardik-sbr").await,
        Some(Lease::owner_for(a.self_node())),
        "the survivor holds the lease named after the cluster"
    );
    let released = async {
        while holder(&store, "sbr-granted-shardik-sbr").await.is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), released)
        .await
        .expect("the lease is given back after removal and release-after");
    let snapshot = a.handle().snapshot();
    assert_eq!(
        snapshot.self_status,
        Some(MemberStatus::Up),
        "the survivor lives"
    );
    assert!(
        snapshot.members.iter().all(|m| m.addr != b_node),
        "b is removed"
    );
    let text = metrics.render();
    assert!(
        text.contains("shardik_sbr_lease_requests_total{result=\"granted\"}"),
        "{text}"
    );
    assert!(
        text.contains("shardik_sbr_decisions_total{decision=\"down-unreachable\"}"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_the_lease_the_survivor_downs_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let s = settings("sbr-refused");
    let (a, b) = two_nodes(&s, &store).await;
    // Another side of the cluster holds the lease.
    let taken = store
        .acquire_lease(
            "sbr-refused-shardik-sbr",
            "the-other-side",
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    assert!(matches!(taken, LeaseAcquired::Granted(_)));
    crash(b).await;
    let reason = tokio::time::timeout(Duration::from_secs(30), a.wait())
        .await
        .expect("the survivor stops itself");
    assert_eq!(reason, ShutdownReason::Downed);
    assert_eq!(
        holder(&store, "sbr-refused-shardik-sbr").await.as_deref(),
        Some("the-other-side")
    );
}

#[tokio::test]
async fn a_store_that_cannot_be_opened_stops_the_start_with_the_cause() {
    let mut s = settings("sbr-nostore");
    s.persistence.store = "nosuch:x".into();
    let e = shardik_runtime::Node::builder(s)
        .bind(Address::new("127.0.0.1", free_port()))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(e, StartError::SbrLease(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("nosuch:x") && text.contains("persistence.store"),
        "{text}"
    );
}
