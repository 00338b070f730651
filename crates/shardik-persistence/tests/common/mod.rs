//! What the tests that need PostgreSQL share: the server `scripts/with-postgres` started, and
//! a fresh database per test so tests never see each other's rows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The URL of the test server's maintenance database. Panics, never skips, when the tests were
/// not started through `scripts/with-postgres`.
pub fn server_url() -> String {
    std::env::var("SHARDIK_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "SHARDIK_TEST_POSTGRES_URL is not set: these tests need PostgreSQL. Run them through \
             scripts/with-postgres, which starts a throwaway server, e.g. \
             `scripts/with-postgres cargo test -p shardik-persistence`"
        )
    })
}

/// Creates a database no other test uses and returns its URL.
pub async fn fresh_database() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let server = server_url();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!(
        "shardik_test_{}_{nanos:x}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let client = admin(&server).await;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} on {server}: {e}"));
    with_database(&server, &name)
}

/// A plain client of the database at `url`, for what tests do by hand.
pub async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// `url` with its database name replaced by `name` (the query string kept).
fn with_database(url: &str, name: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = head.find("://").map_or(0, |i| i + 3);
    let path = head[authority..]
        .find('/')
        .map_or(head.len(), |i| authority + i);
    format!("{}/{name}{query}", &head[..path])
}

/// A loopback port with nothing listening on it.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}
