//! Opening stores by URL: each accepted form opens its store; anything else is a bad URL that
//! says what is accepted.

#[cfg(feature = "postgres")]
mod common;

use shardik_persistence::{StoreError, conformance, open_store};

#[tokio::test]
async fn memory_opens_a_memory_store() {
    let store = open_store("memory:").await.unwrap();
    conformance::journal_round_trip(&*store).await;
    store.close().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_opens_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for (i, form) in ["sqlite:", "sqlite://"].iter().enumerate() {
        let path = dir.path().join(format!("by-url-{i}.db"));
        let store = open_store(&format!("{form}{}", path.display()))
            .await
            .unwrap();
        conformance::journal_round_trip(&*store).await;
        store.close().await.unwrap();
        assert!(path.exists(), "{form} opened {}", path.display());
    }
}

/// A path in a directory that does not exist is refused, naming it, and nothing is created:
/// a typo must not give a new, empty store.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_path_in_a_missing_directory_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("sub");
    let url = format!("sqlite:{}", missing.join("bank.db").display());
    match open_store(&url).await {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.contains("does not exist"), "{why}");
            assert!(why.contains(&missing.display().to_string()), "{why}");
        }
        other => panic!(
            "{url}: expected Unavailable, got {:?}",
            other.map(|_| "a store")
        ),
    }
    assert!(!dir.path().join("no-such-dir").exists());
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_and_postgresql_open_a_postgres_store() {
    let url = common::fresh_database().await;
    let store = open_store(&url).await.unwrap();
    conformance::journal_round_trip(&*store).await;
    store.close().await.unwrap();
    let url = url.replacen("postgres://", "postgresql://", 1);
    let store = open_store(&url).await.unwrap();
    conformance::journal_round_trip(&*store).await;
    store.close().await.unwrap();
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn an_unreachable_postgres_url_is_unavailable() {
    let port = common::closed_port();
    let refused = open_store(&format!("postgres://postgres@127.0.0.1:{port}/x"))
        .await
        .err()
        .expect("no server there");
    assert!(
        matches!(&refused, StoreError::Unavailable(why) if why.contains(&port.to_string())),
        "{refused:?}"
    );
}

#[tokio::test]
async fn other_urls_are_bad_urls_listing_the_accepted_forms() {
    for url in [
        "",
        "store.db",
        "mysql://localhost/db",
        "file:/tmp/x.db",
        "redis://localhost",
    ] {
        match open_store(url).await.err() {
            Some(StoreError::BadUrl { url: u, why }) => {
                assert_eq!(u, url);
                for form in ["memory:", "sqlite:PATH", "postgres://", "postgresql://"] {
                    assert!(why.contains(form), "{url:?}: {why}");
                }
            }
            other => panic!("{url:?}: expected BadUrl, got {other:?}"),
        }
    }
    for url in ["sqlite:", "memory:extra", "postgres://u@h:notaport/db"] {
        let refused = open_store(url).await.err();
        assert!(
            matches!(&refused, Some(StoreError::BadUrl { .. })),
            "{url:?}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn a_bad_url_never_shows_its_password() {
    for url in [
        "postgre://app:hunter2@db/x",
        "postgres://app:hunter2@db:notaport/x",
        "postgres://app@db/x?password=hunter2&sslmode=bad",
    ] {
        match open_store(url).await.err() {
            Some(StoreError::BadUrl { url: shown, why }) => {
                assert!(!shown.contains("hunter2"), "{shown}");
                assert!(!why.contains("hunter2"), "{why}");
                assert_eq!(shown, shardik_persistence::redact_store_url(url));
            }
            other => panic!("{url:?}: expected BadUrl, got {other:?}"),
        }
    }
}

/// A build without SQLite refuses `sqlite:` URLs as bad, naming the feature to turn on.
#[cfg(not(feature = "sqlite"))]
#[tokio::test]
async fn without_the_sqlite_feature_a_sqlite_url_is_bad_and_names_it() {
    for url in [
        "sqlite:/tmp/never-created.db",
        "SQLITE:///tmp/never-created.db",
    ] {
        match open_store(url).await.err() {
            Some(StoreError::BadUrl { why, .. }) => {
                assert!(why.contains("`sqlite` feature"), "{url:?}: {why}");
            }
            other => panic!("{url:?}: expected BadUrl, got {other:?}"),
        }
    }
}

/// A build without PostgreSQL refuses `postgres://` URLs as bad, naming the feature to turn
/// on, and still hides their passwords.
#[cfg(not(feature = "postgres"))]
#[tokio::test]
async fn without_the_postgres_feature_a_postgres_url_is_bad_and_names_it() {
    for url in [
        "postgres://app:hunter2@db/x",
        "postgresql://db/x?password=hunter2",
    ] {
        match open_store(url).await.err() {
            Some(StoreError::BadUrl { url: shown, why }) => {
                assert!(why.contains("`postgres` feature"), "{url:?}: {why}");
                assert!(!shown.contains("hunter2"), "{shown}");
            }
            other => panic!("{url:?}: expected BadUrl, got {other:?}"),
        }
    }
}
