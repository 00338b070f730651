//! The in-memory store keeps every rule of the store contract.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shardik_persistence::{LeaseAcquired, MemoryStore, Store, conformance};

#[tokio::test]
async fn the_memory_store_keeps_the_store_rules() {
    let store = MemoryStore::new();
    assert!(store.keeps_delivery_data());
    conformance::run_all(&store).await;
}

/// Clones share their store's identity (the nodes of one process that share a memory store
/// are on one store); a new memory store has another.
#[test]
fn a_memory_store_and_its_clones_have_one_identity() {
    let store = MemoryStore::new();
    conformance::one_identity_per_store(&[&store, &store.clone()], &MemoryStore::new());
    assert_eq!(store.location(), "memory:");
}

#[tokio::test]
async fn two_writers_on_one_memory_store_never_interleave() {
    let store = MemoryStore::new();
    conformance::racing_writers_never_interleave(&store, &store.clone(), 200).await;
}

#[tokio::test]
async fn the_memory_store_answers_each_write_of_a_large_batch() {
    conformance::many_writes_in_one_batch(&MemoryStore::new(), 1_000).await;
}

#[tokio::test]
async fn fenced_writers_on_one_memory_store_take_turns() {
    let store = MemoryStore::new();
    conformance::fenced_writers_racing(&store, &store.clone()).await;
}

/// Leases expire by the injected clock alone: a simulator moves them with its virtual time.
#[tokio::test]
async fn leases_expire_by_the_injected_clock() {
    let millis = Arc::new(AtomicU64::new(1_000));
    let clock = Arc::clone(&millis);
    let store =
        MemoryStore::with_clock(move || Duration::from_millis(clock.load(Ordering::SeqCst)));
    let ttl = Duration::from_secs(10);
    let LeaseAcquired::Granted(first) = store.acquire_lease("l", "a", ttl).await.unwrap() else {
        panic!("a free lease is granted");
    };
    millis.store(1_000 + 9_999, Ordering::SeqCst);
    assert_eq!(
        store.acquire_lease("l", "b", ttl).await.unwrap(),
        LeaseAcquired::HeldByOther {
            owner: "a".into(),
            time_left: Duration::from_millis(1)
        },
        "held until the clock reaches the expiry, however much real time passed"
    );
    millis.store(1_000 + 10_000, Ordering::SeqCst);
    let info = store.read_lease("l").await.unwrap().unwrap();
    assert_eq!((info.holder(), info.time_left), (None, Duration::ZERO));
    let LeaseAcquired::Granted(second) = store.acquire_lease("l", "b", ttl).await.unwrap() else {
        panic!("an expired lease is granted");
    };
    assert!(second.token > first.token);
    assert!(!store.renew_lease("l", "a", first.token, ttl).await.unwrap());
    millis.store(1_000 + 15_000, Ordering::SeqCst);
    assert!(
        store
            .renew_lease("l", "b", second.token, ttl)
            .await
            .unwrap()
    );
    millis.store(1_000 + 24_999, Ordering::SeqCst);
    assert_eq!(
        store.read_lease("l").await.unwrap().unwrap().time_left,
        Duration::from_millis(1),
        "the renewal counted from the clock's time of the renewal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_on_one_memory_store_never_hold_the_lease_at_once() {
    let store = MemoryStore::new();
    let stores: Vec<Arc<dyn Store>> = vec![Arc::new(store.clone()), Arc::new(store)];
    let tenures = conformance::race_for_lease(
        &stores,
        "race",
        "memory",
        3,
        Duration::from_millis(50),
        Duration::from_secs(2),
    )
    .await;
    conformance::check_tenures(&tenures, 5);
}
