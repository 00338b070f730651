//! The store's own sessions against the test server (`scripts/with-postgres`): the server ends
//! one that a frozen client left idle inside a transaction, releasing its locks.

use std::time::Duration;

use super::{IDLE_IN_TRANSACTION_TIMEOUT, PostgresStore};

/// The test server's maintenance database. Panics, never skips, outside `scripts/with-postgres`.
fn server_url() -> String {
    std::env::var("SHARDIK_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "SHARDIK_TEST_POSTGRES_URL is not set: this test needs PostgreSQL. Run it through \
             scripts/with-postgres, e.g. `scripts/with-postgres cargo test -p shardik-persistence`"
        )
    })
}

/// A database of its own, so that the store's schema lands nowhere else; its URL.
async fn fresh_database() -> String {
    let server = server_url();
    let (admin, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {server}: {e}"));
    tokio::spawn(connection);
    let name = format!("shardik_session_test_{}", std::process::id());
    // One statement each: CREATE DATABASE cannot run inside the implicit transaction of a
    // multi-statement query.
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    let (head, query) = server.split_once('?').unwrap_or((&server, ""));
    let base = head.rsplit_once('/').map_or(head, |(base, _)| base);
    if query.is_empty() {
        format!("{base}/{name}")
    } else {
        format!("{base}/{name}?{query}")
    }
}

/// A client frozen inside a transaction holds its row locks for as long as it is frozen; the
/// server ends such a session of ours after [`IDLE_IN_TRANSACTION_TIMEOUT`], so a shard's next
/// home is not kept from writing by a frozen former holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_left_idle_inside_a_transaction_is_ended_by_the_server() {
    let store = PostgresStore::connect(&fresh_database().await)
        .await
        .expect("connect");
    let client = store.client().await.expect("a connection");
    let shown: String = client
        .query_one("SHOW idle_in_transaction_session_timeout", &[])
        .await
        .expect("SHOW")
        .get(0);
    assert_eq!(shown, "5s");
    client.batch_execute("BEGIN").await.expect("BEGIN");
    // As a frozen client: nothing sent for longer than the timeout.
    tokio::time::sleep(IDLE_IN_TRANSACTION_TIMEOUT + Duration::from_millis(700)).await;
    let after = client.query_one("SELECT 1", &[]).await;
    assert!(
        after.is_err(),
        "the session outlived its idle transaction: {after:?}"
    );
}
