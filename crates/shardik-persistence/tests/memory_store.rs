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

#[tokio::test]
async fn the_memory_store_answers_each_write_of_a_large_batch() {
    conformance::many_writes_in_one_batch(&MemoryStore::new(), 1_000).await;
}
