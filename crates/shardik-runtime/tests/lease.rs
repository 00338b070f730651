//! Leases on real stores (SQLite files, and PostgreSQL through `scripts/with-postgres`): taken,
//! renewed in the background past their time-to-live, released; lost when a renewal is
//! refused, when a stalled holder's lease expires and another owner takes it (whose writes
//! then fence the old holder's out), when the store is closed, and when PostgreSQL stops
//! accepting connections; kept when PostgreSQL kills the pool's connections.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::gated_store::GatedStore;
use shardik_persistence::{
    AtomicWrite, Fence, MemoryStore, NewEvent, PostgresStore, SqliteStore, Store, WriteRefused,
    WriteResult,
};
use shardik_runtime::config::LeaseSettings;
use shardik_runtime::lease::{Lease, LeaseStatus, LostReason};

/// Short enough for a test: 1 s to live, renewed every 150 ms, 200 ms per call (and margin).
fn fast() -> LeaseSettings {
    LeaseSettings {
        heartbeat_timeout: Duration::from_secs(1),
        heartbeat_interval: Duration::from_millis(150),
        lease_operation_timeout: Duration::from_millis(200),
    }
}

fn lease(store: &Arc<dyn Store>, name: &str, owner: &str) -> Lease {
    Lease::new(Arc::clone(store), name, owner, fast()).unwrap()
}

fn write(pid: &str, seq: u64, fence: Option<Fence>) -> AtomicWrite {
    AtomicWrite {
        persistence_id: pid.into(),
        events: vec![NewEvent {
            seq,
            payload: Bytes::from_static(b"e"),
            manifest: "".into(),
            tags: vec![],
        }],
        fence,
    }
}

async fn append_one(store: &Arc<dyn Store>, w: AtomicWrite) -> WriteResult {
    store.append(vec![w]).await.unwrap().remove(0)
}

/// Waits (at most `within`) for the lease to be lost, and returns why.
async fn lost(lease: &Lease, within: Duration) -> (u64, LostReason) {
    let mut status = lease.subscribe();
    let seen = tokio::time::timeout(
        within,
        status.wait_for(|s| matches!(s, LeaseStatus::Lost { .. })),
    )
    .await
    .unwrap_or_else(|_| panic!("the lease was not lost within {within:?}: {lease:?}"))
    .unwrap()
    .clone();
    match seen {
        LeaseStatus::Lost { token, reason } => (token, reason),
        other => unreachable!("{other:?}"),
    }
}

/// Taken, kept by renewals well past its time-to-live, refused to another owner, released,
/// then taken by that owner with a newer token.
async fn acquire_renew_release(store: Arc<dyn Store>) {
    let a = lease(&store, "renewed", "node-a");
    let b = lease(&store, "renewed", "node-b");
    assert_eq!(
        (a.check(), a.token(), a.status()),
        (false, None, LeaseStatus::Free)
    );
    assert!(a.acquire().await.unwrap());
    let token = a.token().expect("held");
    assert_eq!(a.status(), LeaseStatus::Held { token });
    assert_eq!(a.fence("kind|7"), Some(Fence::new("kind|7", token)));

    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(a.check(), "renewals keep it past its 1 s time-to-live");
    assert_eq!(a.token(), Some(token), "renewals keep the token");
    let info = store.read_lease("renewed").await.unwrap().unwrap();
    assert_eq!((info.holder(), info.token), (Some("node-a"), token));
    assert!(!b.acquire().await.unwrap(), "another owner cannot take it");
    assert_eq!((b.check(), b.token()), (false, None));
    assert!(a.acquire().await.unwrap(), "held already");
    assert_eq!(a.renewal_failures(), 0);
    assert_eq!(a.store_error(), None);

    assert!(a.release().await.unwrap());
    assert_eq!(
        (a.check(), a.token(), a.status()),
        (false, None, LeaseStatus::Free)
    );
    let info = store.read_lease("renewed").await.unwrap().unwrap();
    assert_eq!(info.holder(), None);
    assert!(b.acquire().await.unwrap(), "free at once after the release");
    assert!(b.token().unwrap() > token);
    assert!(!a.release().await.unwrap(), "nothing of a's to release");
    assert!(b.check(), "a's release did not touch b's lease");
    assert!(b.release().await.unwrap());
}

/// The lease is released behind the holder's back and taken by another owner: the holder's
/// next renewal is refused and it learns it lost the lease.
async fn lost_when_a_renewal_is_refused(store: Arc<dyn Store>) {
    let a = lease(&store, "refused", "node-a");
    let b = lease(&store, "refused", "node-b");
    assert!(a.acquire().await.unwrap());
    let token = a.token().unwrap();
    assert!(
        store
            .release_lease("refused", "node-a", token)
            .await
            .unwrap()
    );
    assert!(b.acquire().await.unwrap());
    assert_eq!(
        lost(&a, Duration::from_secs(2)).await,
        (token, LostReason::Refused)
    );
    assert_eq!((a.check(), a.token()), (false, None));
    assert!(!a.acquire().await.unwrap(), "b holds it now");
    b.release().await.unwrap();
}

/// The holder stalls (its renewals wait): it gives the lease up by its own deadline, the
/// store lets another owner take it only after its expiry, and from the new owner's first
/// fenced write on, the old holder's writes with its old token are refused.
async fn lost_by_a_stalled_holder_then_taken_and_fenced(store: Arc<dyn Store>) {
    // The stalled holder: its lease renewals wait while the gate is closed (a long pause, a
    // stopped process, a cut network) while the store and everyone else go on.
    let gate = Arc::new(GatedStore::over(Arc::clone(&store)));
    let stalled: Arc<dyn Store> = gate.clone();
    let a = lease(&stalled, "stalled", "node-a");
    let b = lease(&store, "stalled", "node-b");
    assert!(a.acquire().await.unwrap());
    let old = a.fence("kind|3").unwrap();
    assert_eq!(
        append_one(&store, write("kind|x", 1, Some(old.clone()))).await,
        Ok(())
    );

    gate.renewals.set_open(false);
    assert_eq!(
        lost(&a, Duration::from_secs(3)).await,
        (old.token, LostReason::Expired)
    );
    assert!(!a.check());
    assert!(a.renewal_failures() >= 1, "the stalled renewals timed out");
    assert!(
        a.store_error()
            .is_some_and(|e| e.contains("did not answer"))
    );

    let mut taken = false;
    for _ in 0..40 {
        if b.acquire().await.unwrap() {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(taken, "b takes the lease once it expired");
    let new = b.fence("kind|3").unwrap();
    assert!(new.token > old.token);
    assert_eq!(
        append_one(&store, write("kind|y", 1, Some(new.clone()))).await,
        Ok(())
    );
    match append_one(&store, write("kind|x", 2, Some(old.clone()))).await {
        Err(WriteRefused::Fenced { token, newest, .. }) => {
            assert_eq!((token, newest), (old.token, new.token))
        }
        other => panic!("the old holder's write should be fenced: {other:?}"),
    }
    gate.renewals.set_open(true);
    assert!(!a.acquire().await.unwrap(), "b holds it");
    b.release().await.unwrap();
}

/// A holder whose renewals stall gives the lease up while the store still has it, by the
/// safety margin (`lease-operation-timeout`, large here so that a slow machine cannot blur
/// it), and only after the store's expiry can another owner take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_gives_up_before_the_store_expiry() {
    let settings = LeaseSettings {
        heartbeat_timeout: Duration::from_secs(2),
        heartbeat_interval: Duration::from_millis(100),
        lease_operation_timeout: Duration::from_millis(600),
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let gate = Arc::new(GatedStore::over(Arc::clone(&store)));
    let a = Lease::new(gate.clone(), "margin", "node-a", settings).unwrap();
    let b = Lease::new(Arc::clone(&store), "margin", "node-b", settings).unwrap();
    assert!(a.acquire().await.unwrap());
    let token = a.token().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.renewals.set_open(false);
    assert_eq!(
        lost(&a, Duration::from_secs(5)).await,
        (token, LostReason::Expired)
    );
    let info = store.read_lease("margin").await.unwrap().unwrap();
    assert_eq!(
        info.holder(),
        Some("node-a"),
        "given up while the store still has it: {info:?}"
    );
    assert!(
        info.time_left <= settings.lease_operation_timeout,
        "given up no earlier than the margin: {info:?}"
    );
    assert!(!b.acquire().await.unwrap(), "nobody else can take it yet");
    tokio::time::sleep(info.time_left + Duration::from_millis(10)).await;
    assert!(
        b.acquire().await.unwrap(),
        "taken once the store's expiry passed"
    );
    assert!(b.token().unwrap() > token);
}

fn sqlite(dir: &tempfile::TempDir, name: &str) -> impl Future<Output = Arc<dyn Store>> {
    let path = dir.path().join(name);
    async move { Arc::new(SqliteStore::open(path).await.unwrap()) as Arc<dyn Store> }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_is_acquired_renewed_and_released() {
    let dir = tempfile::tempdir().unwrap();
    acquire_renew_release(sqlite(&dir, "a.db").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_is_lost_when_a_renewal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    lost_when_a_renewal_is_refused(sqlite(&dir, "r.db").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_of_a_stalled_holder_is_taken_and_its_writes_fenced() {
    let dir = tempfile::tempdir().unwrap();
    lost_by_a_stalled_holder_then_taken_and_fenced(sqlite(&dir, "s.db").await).await;
}

/// The store goes away under the holder (closed here, as a file on a lost disk would fail):
/// renewals fail, the failures are reported, and the lease is lost by its deadline and
/// counted in the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_is_lost_when_the_store_is_closed() {
    let metrics = shardik_runtime::metrics::Metrics::install().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir, "c.db").await;
    let a = lease(&store, "closed", "node-a");
    assert!(a.acquire().await.unwrap());
    let token = a.token().unwrap();
    store.close().await.unwrap();
    assert_eq!(
        lost(&a, Duration::from_secs(3)).await,
        (token, LostReason::Expired)
    );
    assert!(a.renewal_failures() >= 1);
    let error = a.store_error().expect("the failure is reported");
    assert!(error.contains("closed"), "{error}");
    let rendered = metrics.render();
    for line in [
        "shardik_lease_losses_total{reason=\"expired\"}",
        "shardik_lease_renewal_failures_total",
        "shardik_lease_acquisitions_total",
    ] {
        let value: f64 = rendered
            .lines()
            .find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("{line} missing from {rendered}"));
        assert!(value >= 1.0, "{line} {value}");
    }
}

#[tokio::test]
async fn bad_settings_are_refused_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir, "b.db").await;
    let settings = LeaseSettings {
        heartbeat_interval: Duration::from_millis(700),
        ..fast()
    };
    let refused = Lease::new(store, "x", "a", settings).unwrap_err();
    assert!(
        refused.to_string().contains("heartbeat-timeout"),
        "{refused}"
    );
}

// ---- PostgreSQL ----

// The PostgreSQL helpers of the store tests: the server `scripts/with-postgres` started (a
// panic, never a skip, without it) and a fresh database per test.
#[allow(dead_code)]
#[path = "../../shardik-persistence/tests/common/mod.rs"]
mod pg;

/// Ends every connection to `database` (from a connection to another database).
async fn terminate(admin: &tokio_postgres::Client, database: &str) -> u64 {
    admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&database],
        )
        .await
        .unwrap()
        .len() as u64
}

async fn postgres() -> (Arc<dyn Store>, String, String) {
    let url = pg::fresh_database().await;
    let path = url.split('?').next().unwrap_or(&url);
    let name = path[path.rfind('/').expect("a URL ending in /database") + 1..].to_string();
    let store = PostgresStore::connect(&url).await.unwrap();
    (Arc::new(store), name, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_is_acquired_renewed_and_released() {
    acquire_renew_release(postgres().await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_is_lost_when_a_renewal_is_refused() {
    lost_when_a_renewal_is_refused(postgres().await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_of_a_stalled_holder_is_taken_and_its_writes_fenced() {
    lost_by_a_stalled_holder_then_taken_and_fenced(postgres().await.0).await;
}

/// The server kills the pool's connections (`pg_terminate_backend`): the pool connects again
/// and the lease stays held with its token. Then the database refuses every connection: the
/// renewals fail, the failure names the server, and the lease is lost by its deadline. Once
/// connections are allowed again (and the lease expired in the store), it is taken again for
/// a newer token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_survives_killed_connections_and_is_lost_when_the_database_is_down() {
    let (store, database, _) = postgres().await;
    // On the maintenance database: a database cannot refuse connections from its own sessions.
    let admin = pg::admin(&pg::server_url()).await;
    let a = lease(&store, "killed", "node-a");
    assert!(a.acquire().await.unwrap());
    let token = a.token().unwrap();

    assert!(
        terminate(&admin, &database).await >= 1,
        "the pool had a connection"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(a.check(), "renewed over new connections");
    assert_eq!(a.token(), Some(token));
    assert_eq!(a.store_error(), None);

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {database} ALLOW_CONNECTIONS false"
        ))
        .await
        .unwrap();
    terminate(&admin, &database).await;
    assert_eq!(
        lost(&a, Duration::from_secs(3)).await,
        (token, LostReason::Expired)
    );
    assert!(a.renewal_failures() >= 1);
    let error = a.store_error().expect("the failure is reported");
    assert!(error.contains("127.0.0.1"), "names the server: {error}");

    admin
        .batch_execute(&format!("ALTER DATABASE {database} ALLOW_CONNECTIONS true"))
        .await
        .unwrap();
    // Until the store's expiry has certainly passed: then a takes it as a new tenure.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(a.acquire().await.unwrap());
    assert!(a.token().unwrap() > token, "a new tenure, a newer token");
    assert!(a.release().await.unwrap());
}
