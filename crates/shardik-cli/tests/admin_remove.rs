//! `shardik admin remove-internal-data` on SQLite and on a real PostgreSQL server: it refuses
//! on a store that does not exist and while one of the kind's leases is held, and otherwise
//! removes exactly that kind's remembered entities, leases, fences and queued commands,
//! leaving another kind's and every entity's own data alone.
//!
//! The PostgreSQL test needs `SHARDIK_TEST_POSTGRES_URL` (`scripts/with-postgres`); without it
//! the test fails and says so.

mod support;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use shardik_persistence::{
    AtomicWrite, Fence, LeaseAcquired, NewEvent, QueuedMessage, Store, open_store, persistence_id,
};
use support::{fresh_postgres_database, fresh_sqlite_store};

fn remove(store: &str, kind: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardik"))
        .args([
            "admin",
            "remove-internal-data",
            "--kind",
            kind,
            "--store",
            store,
            "--cluster",
            "c",
        ])
        .output()
        .expect("runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A queued command of `kind` on stream `stream` of producer incarnation 1.
fn queued(kind: &str, stream: u64, seq: u64) -> QueuedMessage {
    QueuedMessage {
        kind: kind.into(),
        entity: "a".into(),
        epoch: 1,
        stream,
        seq,
        payload: bytes::Bytes::from_static(b"x"),
    }
}

/// Two kinds' worth of sharding data: `cart` (to remove) and `cart-items` (to keep, and
/// whose name starts like the other's).
async fn fill(store: &Arc<dyn Store>) {
    for (stream, kind) in [(1, "cart"), (2, "cart-items")] {
        store
            .update_remembered(kind, "3", &["a".to_string(), "b".to_string()], &[])
            .await
            .unwrap();
        for name in [format!("c-shard-{kind}-3"), format!("c-coordinator-{kind}")] {
            let LeaseAcquired::Granted(grant) = store
                .acquire_lease(&name, "node-1", Duration::from_secs(60))
                .await
                .unwrap()
            else {
                panic!("{name} is free")
            };
            // A write under the lease leaves the lease's fence in the store.
            let pid = persistence_id(kind, &format!("e-{name}"));
            let write = AtomicWrite::new(
                pid,
                vec![NewEvent {
                    seq: 1,
                    payload: bytes::Bytes::from_static(b"e"),
                    manifest: "".into(),
                    tags: Vec::new(),
                }],
            )
            .fenced(Fence::new(name.as_str(), grant.token));
            assert_eq!(store.append(vec![write]).await.unwrap(), vec![Ok(())]);
        }
        store
            .enqueue("p1", vec![queued(kind, stream, 1), queued(kind, stream, 2)])
            .await
            .unwrap();
    }
}

async fn release_all(store: &Arc<dyn Store>, kind: &str) {
    for name in [format!("c-shard-{kind}-3"), format!("c-coordinator-{kind}")] {
        let info = store.read_lease(&name).await.unwrap().unwrap();
        assert!(
            store
                .release_lease(&name, "node-1", info.token)
                .await
                .unwrap()
        );
    }
}

async fn removes_exactly_one_kinds_data(url: &str) {
    let store = open_store(url).await.unwrap();
    fill(&store).await;

    // While the kind's leases are held, nothing goes.
    let out = remove(url, "cart");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("refused") && text(&out).contains("node-1"),
        "{}",
        text(&out)
    );
    assert_eq!(store.remembered_shards("cart").await.unwrap(), ["3"]);
    assert_eq!(store.queued("p1").await.unwrap().len(), 4);

    // Once they are released (the nodes stopped), exactly the kind's rows go.
    release_all(&store, "cart").await;
    let out = remove(url, "cart");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("2 remembered entities, 2 leases, 2 fences, 2 queued commands"),
        "{}",
        text(&out)
    );
    assert!(store.remembered_shards("cart").await.unwrap().is_empty());
    assert_eq!(
        store.lease_names("c-shard-cart-3").await.unwrap(),
        Vec::<String>::new()
    );
    let left: Vec<String> = store
        .queued("p1")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.kind.to_string())
        .collect();
    assert_eq!(left, ["cart-items", "cart-items"]);
    // The other kind keeps everything, its held leases included.
    assert_eq!(store.remembered_shards("cart-items").await.unwrap(), ["3"]);
    let other = store
        .read_lease("c-shard-cart-items-3")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.holder(), Some("node-1"));
    // Entities' own data stays.
    assert_eq!(
        store
            .highest_seq(&persistence_id("cart", "e-c-shard-cart-3"))
            .await
            .unwrap(),
        1
    );
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_removal_takes_exactly_one_kinds_sharding_data() {
    let store = fresh_sqlite_store("admin");
    removes_exactly_one_kinds_data(&store).await;
    let missing = format!("sqlite:{}/no-such-store.db", std::env::temp_dir().display());
    let out = remove(&missing, "cart");
    assert!(!out.status.success());
    assert!(text(&out).contains("does not exist"), "{}", text(&out));
    assert!(
        !std::path::Path::new(missing.trim_start_matches("sqlite:")).exists(),
        "no store was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_removal_takes_exactly_one_kinds_sharding_data() {
    let url = fresh_postgres_database("admin");
    removes_exactly_one_kinds_data(&url).await;
    let (base, _) = url.rsplit_once('/').unwrap();
    let out = remove(&format!("{base}/no_such_database"), "cart");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("cannot open the store"),
        "{}",
        text(&out)
    );
}
