//! Events that outlive their code: a journal written by version 1 of an event type, kept in
//! the repository (`tests/fixtures/journal-v1.sqlite`), recovered by version 2 through its
//! event adapter, value by value. The same recovery against PostgreSQL is in
//! `event_evolution_postgres.rs`.

mod common;
mod evolution;

use std::sync::Arc;

use shardik_persistence::{SqliteStore, Store};
use shardik_runtime::persistence::Persistence;

use evolution::{ASK, cart_v1, fixture, fixture_copy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_1_journal_recovers_under_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&fixture_copy(dir.path())).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    evolution::recover_with_version_2(Arc::clone(&store), "evolve-sqlite").await;
    store.close().await.unwrap();
}

/// Without the adapter, version 2 cannot read version 1's renamed variant: recovery fails
/// with a message naming the journal, the event and the variant, and the journal is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_adapter_a_renamed_variant_fails_recovery_naming_it() {
    use shardik_runtime::persistence::{EventSourcedKind, StorageCodec};
    use shardik_runtime::sharding::ShardingError;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&fixture_copy(dir.path())).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let (_node, sharding) = evolution::one_node("evolve-no-adapter").await;
    let persistence = Persistence::new(Arc::clone(&store));
    let kind = EventSourcedKind::new(evolution::cart_v2::CART, &persistence, |_| {
        evolution::cart_v2::Cart::default()
    })
    .with_storage_codec(StorageCodec::Cbor)
    .with_event_version(evolution::cart_v2::VERSION);
    sharding.init(kind.into_kind()).unwrap();
    let alice = sharding
        .entity_ref_for(evolution::cart_v2::CART, "alice")
        .unwrap();
    let error = alice
        .ask(evolution::cart_v2::Command::Get, ASK)
        .await
        .unwrap_err();
    let ShardingError::EntityFailed(why) = error else {
        panic!("expected a failed recovery, got {error:?}");
    };
    assert!(why.contains("cart|alice: event 2"), "{why}");
    assert!(why.contains("ItemsAdded"), "{why}");
    assert_eq!(evolution::manifests(&*store, "alice").await.len(), 4);
    store.close().await.unwrap();
}

/// Writes the fixture again with version 1's types (run by hand:
/// `cargo test -p shardik-runtime --test event_evolution -- --ignored regenerate`), then
/// commit the file. Only needed if the fixture's story changes: the point of the file is that
/// it stays as an old program wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes tests/fixtures/journal-v1.sqlite; run by hand to make the fixture again"]
async fn regenerate_the_journal_v1_fixture() {
    let path = fixture();
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let (_node, sharding) = evolution::one_node("evolve-fixture").await;
    evolution::register_v1(&sharding, &Persistence::new(Arc::clone(&store)));
    for (cart, command) in cart_v1::fixture_commands() {
        let cart = sharding.entity_ref_for(cart_v1::CART, cart).unwrap();
        cart.ask(|r| cart_v1::Asked(command, r), ASK).await.unwrap();
    }
    store.close().await.unwrap();
    let mut wal = path.into_os_string();
    wal.push("-wal");
    assert!(
        std::fs::metadata(&wal).is_err(),
        "closing the store leaves the whole journal in the main file"
    );
}
