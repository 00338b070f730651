//! The PostgreSQL store over TLS against the server `scripts/with-postgres` started: what each
//! `sslmode` accepts and refuses, that sessions are really encrypted, client certificates, and
//! certificate files re-read for new connections.
//!
//! The script's server certificate names `localhost` only, signed by the CA it exports as
//! `SHARDIK_TEST_POSTGRES_CA`; beside that file are `other-ca.pem` (a CA that signed nothing)
//! and `client.pem`/`client.key` (a client certificate the same CA signed).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shardik_persistence::{PostgresStore, Store, StoreError, conformance};

/// The CA that signed the test server's certificate. Panics, never skips, when the tests were
/// not started through `scripts/with-postgres`.
fn test_ca() -> PathBuf {
    std::env::var_os("SHARDIK_TEST_POSTGRES_CA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "SHARDIK_TEST_POSTGRES_CA is not set: these tests need PostgreSQL with TLS. Run \
                 them through scripts/with-postgres, which starts a throwaway server and makes \
                 its certificates, e.g. `scripts/with-postgres cargo test -p shardik-persistence`"
            )
        })
}

/// A file the script made beside the CA.
fn beside_ca(name: &str) -> PathBuf {
    let path = test_ca().with_file_name(name);
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// `url` (a fresh database's, with no query) with the TLS parameters `params` added.
fn with_params(url: &str, params: &[(&str, &Path)]) -> String {
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", v.display()))
        .collect();
    format!("{url}?{}", query.join("&"))
}

/// `url` naming the server `localhost` (what its certificate names), still reaching it at
/// 127.0.0.1 (where it listens; `localhost` may resolve to ::1 first).
fn by_name(url: &str) -> String {
    let named = url.replacen("@127.0.0.1:", "@localhost:", 1);
    assert_ne!(named, url, "the test server's URL names 127.0.0.1: {url}");
    let (head, query) = named.split_once('?').unwrap_or((&named, ""));
    format!("{head}?hostaddr=127.0.0.1&{query}")
}

/// The database a URL names.
fn database(url: &str) -> String {
    let head = url.split('?').next().unwrap_or(url);
    head.rsplit('/').next().unwrap_or(head).to_string()
}

/// `(ssl, client_dn)` of every session of `database` on the test server, seen by the server.
async fn sessions(database: &str) -> Vec<(bool, Option<String>)> {
    let admin = common::admin(&common::server_url()).await;
    admin
        .query(
            "SELECT s.ssl, s.client_dn FROM pg_stat_ssl AS s
             JOIN pg_stat_activity AS a USING (pid) WHERE a.datname = $1",
            &[&database],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// The store's error when connecting to `url` fails.
async fn refusal(url: &str) -> StoreError {
    match PostgresStore::connect(url).await {
        Ok(store) => {
            store.close().await.unwrap();
            panic!("{url}: connected, expected a refusal")
        }
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_ca_connects_to_the_name_on_the_certificate() {
    let url = common::fresh_database().await;
    let tls_url = by_name(&with_params(
        &url,
        &[
            ("sslmode", Path::new("verify-full")),
            ("sslrootcert", &test_ca()),
        ],
    ));
    let store = PostgresStore::connect(&tls_url)
        .await
        .unwrap_or_else(|e| panic!("{tls_url}: {e}"));
    conformance::journal_round_trip(&store).await;
    let seen = sessions(&database(&url)).await;
    assert!(!seen.is_empty(), "the store's connections are seen");
    assert!(seen.iter().all(|(ssl, _)| *ssl), "all encrypted: {seen:?}");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_host_the_certificate_does_not_name() {
    let url = common::fresh_database().await;
    let ca = test_ca();
    // The certificate names localhost, not 127.0.0.1.
    let full = with_params(
        &url,
        &[("sslmode", Path::new("verify-full")), ("sslrootcert", &ca)],
    );
    match refusal(&full).await {
        StoreError::Unavailable(why) => {
            assert!(why.contains("127.0.0.1"), "names the server: {why}");
            assert!(
                why.contains("does not name the host \"127.0.0.1\""),
                "says why: {why}"
            );
            assert!(why.contains("verify-full"), "{why}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // The chain itself is good: verify-ca, which does not check the name, connects.
    let ca_only = with_params(
        &url,
        &[("sslmode", Path::new("verify-ca")), ("sslrootcert", &ca)],
    );
    let store = PostgresStore::connect(&ca_only)
        .await
        .unwrap_or_else(|e| panic!("{ca_only}: {e}"));
    conformance::journal_round_trip(&store).await;
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_another_ca_signed_is_refused() {
    let url = common::fresh_database().await;
    let other = beside_ca("other-ca.pem");
    // verify-ca, and require with sslrootcert (which libpq checks as verify-ca does).
    for mode in ["verify-ca", "require", "verify-full"] {
        let tls_url = by_name(&with_params(
            &url,
            &[("sslmode", Path::new(mode)), ("sslrootcert", &other)],
        ));
        match refusal(&tls_url).await {
            StoreError::Unavailable(why) => {
                let expected = format!(
                    "the server's certificate is not signed by a CA of sslrootcert={}",
                    other.display()
                );
                assert!(why.contains(&expected), "{mode}: {why}");
            }
            other => panic!("{mode}: expected Unavailable, got {other:?}"),
        }
    }
    assert!(
        sessions(&database(&url)).await.is_empty(),
        "no session was opened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_the_default_encrypt_and_disable_does_not() {
    for (mode, encrypted) in [
        (Some("require"), true),
        (None, true),
        (Some("disable"), false),
    ] {
        let url = common::fresh_database().await;
        let store_url = match mode {
            Some(mode) => with_params(&url, &[("sslmode", Path::new(mode))]),
            None => url.clone(),
        };
        let store = PostgresStore::connect(&store_url)
            .await
            .unwrap_or_else(|e| panic!("{store_url}: {e}"));
        conformance::journal_round_trip(&store).await;
        let seen = sessions(&database(&url)).await;
        assert!(
            !seen.is_empty(),
            "{mode:?}: the store's connections are seen"
        );
        assert!(
            seen.iter().all(|(ssl, _)| *ssl == encrypted),
            "{mode:?}: expected ssl = {encrypted}: {seen:?}"
        );
        store.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_shown_to_the_server() {
    let url = common::fresh_database().await;
    let tls_url = by_name(&with_params(
        &url,
        &[
            ("sslmode", Path::new("verify-full")),
            ("sslrootcert", &test_ca()),
            ("sslcert", &beside_ca("client.pem")),
            ("sslkey", &beside_ca("client.key")),
        ],
    ));
    let store = PostgresStore::connect(&tls_url)
        .await
        .unwrap_or_else(|e| panic!("{tls_url}: {e}"));
    let seen = sessions(&database(&url)).await;
    assert!(!seen.is_empty(), "the store's connections are seen");
    for (ssl, client_dn) in &seen {
        assert!(*ssl);
        assert_eq!(client_dn.as_deref(), Some("/CN=postgres"), "{seen:?}");
    }
    store.close().await.unwrap();
}

#[tokio::test]
async fn bad_tls_parameters_are_bad_urls_naming_them_without_the_password() {
    let missing = std::env::temp_dir().join("shardik-no-such-ca.pem");
    // Nothing listens there: were the parameters accepted, the error would be Unavailable.
    let port = common::closed_port();
    for (url, expected) in [
        (
            format!("postgres://app:hunter2@127.0.0.1:{port}/db?sslmode=verify"),
            "sslmode=\"verify\" is not one of disable, prefer, require, verify-ca or verify-full",
        ),
        (
            format!("postgres://app:hunter2@127.0.0.1:{port}/db?sslmode=verify-full"),
            "sslmode=verify-full needs sslrootcert=PATH",
        ),
        (
            format!(
                "postgres://app:hunter2@127.0.0.1:{port}/db?sslmode=verify-ca&sslrootcert={}",
                missing.display()
            ),
            "cannot read it",
        ),
        (
            format!("host=127.0.0.1 port={port} password=hunter2 sslmode=verify-full"),
            "sslmode=verify-full needs sslrootcert=PATH",
        ),
    ] {
        match PostgresStore::connect(&url).await.err() {
            Some(StoreError::BadUrl { url: shown, why }) => {
                assert!(why.contains(expected), "{url}: {why}");
                assert!(!shown.contains("hunter2"), "the password is shown: {shown}");
                assert!(shown.contains("***"), "{shown}");
            }
            other => panic!("{url}: expected BadUrl, got {other:?}"),
        }
    }
}

/// A rotated CA file is read for the next new connection: replaced by a CA that did not sign
/// the server's certificate, new connections are refused; put back, they work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_ca_file_is_used_for_new_connections() {
    let url = common::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::copy(test_ca(), &ca).unwrap();
    let tls_url = with_params(
        &url,
        &[("sslmode", Path::new("verify-ca")), ("sslrootcert", &ca)],
    );
    let store = PostgresStore::connect(&tls_url)
        .await
        .unwrap_or_else(|e| panic!("{tls_url}: {e}"));
    conformance::journal_round_trip(&store).await;

    std::fs::copy(beside_ca("other-ca.pem"), &ca).unwrap();
    let not_signed = format!(
        "the server's certificate is not signed by a CA of sslrootcert={}",
        ca.display()
    );
    // The open connections were checked already: end them, so the pool makes new ones.
    let refused = poll(|| async {
        end_sessions(&database(&url)).await;
        match store.highest_seq("k|rotation").await {
            Err(StoreError::Unavailable(why)) if why.contains(&not_signed) => Some(why),
            _ => None,
        }
    })
    .await;
    assert!(refused.is_some(), "new connections were never refused");

    std::fs::copy(test_ca(), &ca).unwrap();
    let works = poll(|| async { store.highest_seq("k|rotation").await.ok() }).await;
    assert_eq!(works, Some(0), "new connections never worked again");
    store.close().await.unwrap();
}

/// Ends every session of `database` on the test server.
async fn end_sessions(database: &str) {
    let admin = common::admin(&common::server_url()).await;
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&database],
        )
        .await
        .unwrap();
}

/// Calls `attempt` until it gives something, for up to a generous deadline.
async fn poll<T, F, Fut>(mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(found) = attempt().await {
            return Some(found);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
