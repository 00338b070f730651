//! Lease-majority on running nodes: the core's lease holder (a `LeaseKeeper`) decides, and
//! the driver carries out its store calls ([`SbrLease`]) and feeds the answers back.
//!
//! First the executor alone (granted, refused, renewed, released; no lease, a store that
//! fails or never answers), then a `LeaseKeeper` driven through it on a real SQLite store (two
//! holders contend and one wins, keeps the lease well past its time-to-live by renewing, and
//! frees it by releasing; a renewal refused loses it), then two in-process nodes sharing one
//! SQLite store, one of which stops without a word: the other takes the lease and downs it,
//! or, when somebody else holds the lease, downs itself. Every wait is for a condition with a
//! generous deadline; no outcome depends on timing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::free_port;
use common::gated_store::GatedStore;
use shardik_core::Instant as CoreInstant;
use shardik_core::lease::{
    LeaseAnswer, LeaseCall, LeaseEvent, LeaseKeeper, LeaseLoss, LeaseRequest, LeaseTiming,
};
use shardik_core::membership::sbr::{Decision, SbrAction};
use shardik_core::membership::{
    Address, ClusterEvent, Input, MemberStatus, ShutdownReason, UniqueAddress,
};
use shardik_persistence::{LeaseAcquired, MemoryStore, SqliteStore, Store};
use shardik_runtime::config::{LeaseSettings, Settings};
use shardik_runtime::lease::owner_for;
use shardik_runtime::node::{StartError, StopRequest};
use shardik_runtime::sbr_lease::{SbrLease, SbrLeaseOptions};
use tokio::sync::mpsc;
use tokio::time::Instant as TokioInstant;

/// 2 s to live, renewed every 200 ms, 500 ms per call.
fn lease_settings() -> LeaseSettings {
    let mut settings = Settings::reference().coordination.lease;
    settings.heartbeat_timeout = Duration::from_secs(2);
    settings.heartbeat_interval = Duration::from_millis(200);
    settings.lease_operation_timeout = Duration::from_millis(500);
    settings
}

/// The keeper's timing for [`lease_settings`], trying a refused acquisition again every
/// 200 ms.
fn timing() -> LeaseTiming {
    let s = lease_settings();
    LeaseTiming {
        ttl: s.heartbeat_timeout,
        renew_interval: s.heartbeat_interval,
        operation_timeout: s.lease_operation_timeout,
        retry_interval: Duration::from_millis(200),
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

/// Makes `call` as request `id` and returns the answer (within 10 s).
async fn ask(
    e: &SbrLease,
    answers: &mut mpsc::Receiver<Input>,
    id: u64,
    call: LeaseCall,
) -> LeaseAnswer {
    e.call(LeaseRequest { key: (), id, call });
    let answer = tokio::time::timeout(Duration::from_secs(10), answers.recv())
        .await
        .expect("an answer within 10 s")
        .expect("the executor runs");
    match answer {
        Input::SbrLeaseAnswered { id: a, answer } => {
            assert_eq!(a, id, "the answer names its request");
            answer
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

async fn sqlite_at(dir: &tempfile::TempDir, file: &str) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(dir.path().join(file)).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_acquires_renews_and_releases_as_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_at(&dir, "executor.db").await;
    let (a, b) = (node(1), node(2));
    let (ea, mut answers_a) = executor(&store, &a);
    let (eb, mut answers_b) = executor(&store, &b);
    let LeaseAnswer::Granted { token } = ask(&ea, &mut answers_a, 1, LeaseCall::Acquire).await
    else {
        panic!("a free lease is granted");
    };
    assert_eq!(holder(&store, "test-sbr").await, Some(owner_for(&a)));
    assert_eq!(
        ask(&eb, &mut answers_b, 1, LeaseCall::Acquire).await,
        LeaseAnswer::HeldByOther
    );
    assert_eq!(
        ask(&ea, &mut answers_a, 2, LeaseCall::Renew { token }).await,
        LeaseAnswer::Renewed
    );
    assert_eq!(
        ask(&eb, &mut answers_b, 2, LeaseCall::Renew { token }).await,
        LeaseAnswer::Refused,
        "not b's tenure"
    );
    // A release is not answered; the lease is free once it is through.
    ea.call(LeaseRequest {
        key: (),
        id: 3,
        call: LeaseCall::Release { token },
    });
    let freed = async {
        while holder(&store, "test-sbr").await.is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), freed)
        .await
        .expect("released");
    assert!(answers_a.try_recv().is_err(), "a release is not answered");
    assert_eq!(
        ask(&eb, &mut answers_b, 3, LeaseCall::Acquire).await,
        LeaseAnswer::Granted { token: token + 1 },
        "free again, for a newer token"
    );
    // A decision is only reported: no answer, no store call.
    eb.report(&SbrAction::Down {
        decision: Decision::DownUnreachable,
        nodes: vec![a.clone()],
    });
    assert!(answers_b.try_recv().is_err());
    assert_eq!(holder(&store, "test-sbr").await, Some(owner_for(&b)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_lease_every_acquisition_fails() {
    let mut e = SbrLease::start(None, &node(3)).unwrap();
    let mut answers = e.take_answers().unwrap();
    assert!(e.name().is_none());
    assert!(matches!(
        ask(&e, &mut answers, 1, LeaseCall::Acquire).await,
        LeaseAnswer::Failed(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_answers_fails_the_call_after_the_operation_timeout() {
    let gated = Arc::new(GatedStore::over(Arc::new(MemoryStore::new())));
    gated.acquires.set_open(false);
    let store: Arc<dyn Store> = gated.clone();
    let (e, mut answers) = executor(&store, &node(4));
    let asked = TokioInstant::now();
    let answer = ask(&e, &mut answers, 1, LeaseCall::Acquire).await;
    assert!(
        matches!(&answer, LeaseAnswer::Failed(why) if why.contains("did not answer")),
        "{answer:?}"
    );
    assert!(
        asked.elapsed() >= lease_settings().lease_operation_timeout,
        "failed by the timeout, not at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_fails_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_at(&dir, "c.db").await;
    store.close().await.unwrap();
    let (e, mut answers) = executor(&store, &node(5));
    assert!(matches!(
        ask(&e, &mut answers, 1, LeaseCall::Acquire).await,
        LeaseAnswer::Failed(_)
    ));
}

#[test]
fn settings_that_cannot_keep_a_lease_are_refused() {
    let options = SbrLeaseOptions {
        store: Arc::new(MemoryStore::new()),
        name: "x".into(),
        settings: {
            let mut settings = lease_settings();
            settings.heartbeat_interval = Duration::from_secs(20);
            settings
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

// ---- a LeaseKeeper driven through the executor on a real store ----

/// One holder: a core `LeaseKeeper` whose calls the executor makes on the store, its answers
/// and timers fed back as a node's driver does.
struct Holder {
    keeper: LeaseKeeper<()>,
    executor: SbrLease,
    answers: mpsc::Receiver<Input>,
    epoch: TokioInstant,
    /// Everything the keeper reported, in order.
    events: Vec<LeaseEvent<()>>,
}

impl Holder {
    fn new(store: &Arc<dyn Store>, who: &UniqueAddress) -> Self {
        let (executor, answers) = executor(store, who);
        Holder {
            keeper: LeaseKeeper::new(timing()),
            executor,
            answers,
            epoch: TokioInstant::now(),
            events: Vec::new(),
        }
    }

    fn now(&self) -> CoreInstant {
        CoreInstant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn send(&self, requests: Vec<LeaseRequest<()>>) {
        for r in requests {
            self.executor.call(r);
        }
    }

    fn want(&mut self) {
        let mut out = Vec::new();
        self.keeper.want(self.now(), (), &mut out);
        self.send(out);
    }

    fn give_up(&mut self) {
        let mut out = Vec::new();
        self.keeper.give_up(&(), &mut out);
        self.send(out);
    }

    fn held(&self) -> Option<u64> {
        self.keeper.held(self.now(), &())
    }

    /// Feeds answers and timers for `d`.
    async fn run_for(&mut self, d: Duration) {
        let end = TokioInstant::now() + d;
        loop {
            let next = self
                .keeper
                .poll_timeout()
                .map(|t| self.epoch + Duration::from_nanos(t.as_nanos()))
                .unwrap_or(end)
                .min(end);
            tokio::select! {
                Some(input) = self.answers.recv() => {
                    let Input::SbrLeaseAnswered { id, answer } = input else {
                        panic!("not a lease answer: {input:?}");
                    };
                    let mut out = Vec::new();
                    let now = self.now();
                    let event = self.keeper.answer(now, &(), id, answer, &mut out);
                    self.events.extend(event);
                    self.send(out);
                }
                _ = tokio::time::sleep_until(next) => {
                    if TokioInstant::now() >= end {
                        return;
                    }
                    let mut out = Vec::new();
                    let now = self.now();
                    let events = self.keeper.handle_timeout(now, &mut out);
                    self.events.extend(events);
                    self.send(out);
                }
            }
        }
    }

    fn acquisitions(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, LeaseEvent::Acquired { .. }))
            .count()
    }
}

/// Runs both holders for `d`, side by side.
async fn run_both(a: &mut Holder, b: &mut Holder, d: Duration) {
    tokio::join!(a.run_for(d), b.run_for(d));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_holders_contend_one_wins_keeps_it_past_its_ttl_and_frees_it_by_releasing() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_at(&dir, "contend.db").await;
    let (na, nb) = (node(11), node(12));
    let (mut a, mut b) = (Holder::new(&store, &na), Holder::new(&store, &nb));
    a.want();
    b.want();
    let mut waited = Duration::ZERO;
    while a.held().is_none() && b.held().is_none() {
        assert!(waited < Duration::from_secs(10), "nobody got the lease");
        run_both(&mut a, &mut b, Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    let (winner, loser, winner_node) = if a.held().is_some() {
        (&mut a, &mut b, &na)
    } else {
        (&mut b, &mut a, &nb)
    };
    let token = winner.held().expect("held");
    // Three times its time-to-live: renewals keep it, the loser's retries are refused.
    run_both(winner, loser, timing().ttl * 3).await;
    assert_eq!(
        winner.held(),
        Some(token),
        "kept by renewing: {:?}",
        winner.events
    );
    assert_eq!(winner.acquisitions(), 1, "{:?}", winner.events);
    assert_eq!(loser.acquisitions(), 0, "{:?}", loser.events);
    assert_eq!(
        holder(&store, "test-sbr").await,
        Some(owner_for(winner_node))
    );
    // Given up, it is released; the loser's next try takes it, for a newer token.
    winner.give_up();
    let mut waited = Duration::ZERO;
    while loser.held().is_none() {
        assert!(waited < Duration::from_secs(10), "the loser never got it");
        run_both(winner, loser, Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    assert!(loser.held() > Some(token));
    assert_eq!(winner.held(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_refused_by_the_store_loses_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_at(&dir, "refused.db").await;
    let me = node(13);
    let mut h = Holder::new(&store, &me);
    h.want();
    let mut waited = Duration::ZERO;
    while h.held().is_none() {
        assert!(
            waited < Duration::from_secs(10),
            "never acquired: {:?}",
            h.events
        );
        h.run_for(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    let token = h.held().unwrap();
    // Released behind its back and taken by another owner.
    assert!(
        store
            .release_lease("test-sbr", &owner_for(&me), token)
            .await
            .unwrap()
    );
    let taken = store
        .acquire_lease("test-sbr", "someone-else", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(matches!(taken, LeaseAcquired::Granted(_)));
    let mut waited = Duration::ZERO;
    while h.held().is_some() {
        assert!(
            waited < Duration::from_secs(10),
            "never lost: {:?}",
            h.events
        );
        h.run_for(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    assert!(
        h.events.iter().any(|e| matches!(
            e,
            LeaseEvent::Lost {
                reason: LeaseLoss::Refused,
                ..
            }
        )),
        "{:?}",
        h.events
    );
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
    sqlite_at(dir, "shardik.db").await
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
        Some(owner_for(a.self_node())),
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
