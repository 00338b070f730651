//! The in-memory store keeps every rule of the store contract.

use shardik_persistence::{MemoryStore, conformance};

#[tokio::test]
async fn the_memory_store_keeps_the_store_rules() {
    conformance::run_all(&MemoryStore::new()).await;
}

#[tokio::test]
async fn two_writers_on_one_memory_store_never_interleave() {
    let store = MemoryStore::new();
    conformance::racing_writers_never_interleave(&store, &store.clone(), 200).await;
}
