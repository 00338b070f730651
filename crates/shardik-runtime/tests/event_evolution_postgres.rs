//! The version-1 journal fixture recovered under version 2 from PostgreSQL: its events,
//! manifests included, loaded into a fresh database of the server `scripts/with-postgres`
//! started, then the same checks as over SQLite (`event_evolution.rs`).
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;
mod evolution;

use std::sync::Arc;

use shardik_persistence::{
    AtomicWrite, NewEvent, PostgresStore, SqliteStore, Store, persistence_id,
};

/// A new database on the test server. Panics, never skips, without the server.
async fn fresh_database() -> String {
    let server = std::env::var("SHARDIK_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "SHARDIK_TEST_POSTGRES_URL is not set: this test needs PostgreSQL. Run it through \
             `scripts/with-postgres cargo test -p shardik-runtime --test event_evolution_postgres`"
        )
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("shardik_evolution_{}_{nanos:x}", std::process::id());
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {server}: {e}"));
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, _) = server.rsplit_once('/').expect("the URL names a database");
    format!("{base}/{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_1_journal_recovers_under_version_2_from_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(&evolution::fixture_copy(dir.path()))
        .await
        .unwrap();
    let postgres = PostgresStore::connect(&fresh_database().await)
        .await
        .unwrap();
    for (cart, count) in evolution::CARTS {
        let pid = persistence_id(evolution::cart_v2::CART.name(), cart);
        let events = sqlite.read_events(&pid, 1, u64::MAX, 100).await.unwrap();
        assert_eq!(events.len(), count, "{pid}");
        let write = AtomicWrite {
            persistence_id: pid,
            events: events
                .into_iter()
                .map(|e| NewEvent {
                    seq: e.seq,
                    payload: e.payload,
                    manifest: e.manifest,
                    tags: e.tags,
                })
                .collect(),
            fence: None,
            marks: Vec::new(),
        };
        assert_eq!(postgres.append(vec![write]).await.unwrap(), vec![Ok(())]);
    }
    sqlite.close().await.unwrap();
    let postgres: Arc<dyn Store> = Arc::new(postgres);
    evolution::recover_with_version_2(Arc::clone(&postgres), "evolve-postgres").await;
    postgres.close().await.unwrap();
}
