//! The PostgreSQL store against a real server (started by `scripts/with-postgres`): the store
//! rules, two pools racing, large batches, migrations, and servers it cannot use.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardik_persistence::{AtomicWrite, NewEvent, PostgresStore, Store, StoreError, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_keeps_the_store_rules() {
    let store = PostgresStore::connect(&common::fresh_database().await)
        .await
        .unwrap();
    assert!(store.keeps_delivery_data());
    conformance::run_all(&store).await;
    store.close().await.unwrap();
}

/// Two pools (as two nodes have) start one producer at once, on many connections: every
/// start gets an epoch of its own, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_started_through_two_pools_get_distinct_epochs() {
    let url = common::fresh_database().await;
    let first = PostgresStore::connect(&url).await.unwrap();
    let second = PostgresStore::connect(&url).await.unwrap();
    let starts = futures_util::future::join_all((0..16).map(|i| {
        let store = if i % 2 == 0 { &first } else { &second };
        store.start_producer("p")
    }))
    .await;
    let mut epochs: Vec<u64> = starts.into_iter().map(Result::unwrap).collect();
    epochs.sort_unstable();
    assert_eq!(epochs, (1..=16).collect::<Vec<u64>>());
    first.close().await.unwrap();
    second.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_pools_never_interleave() {
    let url = common::fresh_database().await;
    let first = PostgresStore::connect(&url).await.unwrap();
    let second = PostgresStore::connect(&url).await.unwrap();
    conformance::racing_writers_never_interleave(&first, &second, 200).await;
    first.close().await.unwrap();
    second.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_answers_each_write_of_a_large_batch() {
    let store = PostgresStore::connect(&common::fresh_database().await)
        .await
        .unwrap();
    conformance::many_writes_in_one_batch(&store, 1_000).await;
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writers_on_two_pools_take_turns() {
    let url = common::fresh_database().await;
    let first = PostgresStore::connect(&url).await.unwrap();
    let second = PostgresStore::connect(&url).await.unwrap();
    conformance::fenced_writers_racing(&first, &second).await;
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// Contenders on three pools (so on many connections) race for one lease for a few seconds,
/// renewing, stalling past the time-to-live and releasing: no two of them ever held it at
/// once by the server's clock, and tokens grow with time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_contenders_on_three_pools_never_hold_it_at_once() {
    let url = common::fresh_database().await;
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(PostgresStore::connect(&url).await.unwrap()));
    }
    let tenures = conformance::race_for_lease(
        &stores,
        "race",
        "pool",
        2,
        Duration::from_millis(100),
        Duration::from_secs(3),
    )
    .await;
    let handovers = conformance::check_tenures(&tenures, 10);
    eprintln!("{} tenures, {handovers} handovers", tenures.len());
    for store in stores {
        store.close().await.unwrap();
    }
}

/// A database written by the first schema (journals, no leases or fences) is migrated forward
/// at connect: what it held stays, and leases and fences work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_migrates_forward() {
    let url = common::fresh_database().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let old = AtomicWrite {
        persistence_id: "k|a".into(),
        events: vec![NewEvent {
            seq: 1,
            payload: bytes::Bytes::from_static(b"old"),
            manifest: "".into(),
            tags: vec![],
        }],
        fence: None,
        marks: Vec::new(),
    };
    assert_eq!(store.append(vec![old]).await.unwrap(), vec![Ok(())]);
    store.close().await.unwrap();
    let client = common::admin(&url).await;
    client
        .batch_execute(
            "DROP TABLE shardik_leases; DROP TABLE shardik_fences;
             ALTER TABLE shardik_events DROP COLUMN manifest; DROP TABLE shardik_store;
             DROP TABLE shardik_delivery_marks; DROP TABLE shardik_producer_epochs;
             DROP TABLE shardik_producer_queue;
             UPDATE shardik_schema SET version = 1;",
        )
        .await
        .unwrap();

    let store = PostgresStore::connect(&url).await.unwrap();
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    assert_eq!(&events[0].payload[..], b"old");
    assert_eq!(store.read_lease("l").await.unwrap(), None);
    conformance::leases_acquire_renew_release(&store).await;
    conformance::fences_refuse_older_tokens(&store).await;
    store.close().await.unwrap();
    let version: i32 = client
        .query_one("SELECT version FROM shardik_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 5);
}

/// A database of schema version 2 (events without manifests) is migrated forward at connect:
/// its events read back whole with an empty manifest, and new events keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_gains_event_manifests() {
    let url = common::fresh_database().await;
    let event = |seq, payload: &'static [u8], manifest: &str| AtomicWrite {
        persistence_id: "k|a".into(),
        events: vec![NewEvent {
            seq,
            payload: bytes::Bytes::from_static(payload),
            manifest: manifest.into(),
            tags: vec!["t".into()],
        }],
        fence: None,
        marks: Vec::new(),
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    let written = store.append(vec![event(1, b"old", "")]).await.unwrap();
    assert_eq!(written, vec![Ok(())]);
    store.close().await.unwrap();
    let client = common::admin(&url).await;
    client
        .batch_execute(
            "ALTER TABLE shardik_events DROP COLUMN manifest; DROP TABLE shardik_store;
             DROP TABLE shardik_delivery_marks; DROP TABLE shardik_producer_epochs;
             DROP TABLE shardik_producer_queue;
             UPDATE shardik_schema SET version = 2;",
        )
        .await
        .unwrap();

    let store = PostgresStore::connect(&url).await.unwrap();
    let written = store.append(vec![event(2, b"new", "cbor/2")]).await;
    assert_eq!(written.unwrap(), vec![Ok(())]);
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    let read: Vec<(&[u8], &str)> = events
        .iter()
        .map(|e| (&e.payload[..], &*e.manifest))
        .collect();
    assert_eq!(read, [(&b"old"[..], ""), (&b"new"[..], "cbor/2")]);
    let tagged = store.events_by_tag("t", 0, 10).await.unwrap();
    let tagged: Vec<&str> = tagged.iter().map(|e| &*e.manifest).collect();
    assert_eq!(tagged, ["", "cbor/2"]);
    store.close().await.unwrap();
    let version: i32 = client
        .query_one("SELECT version FROM shardik_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 5);
}

/// A database of schema version 4 (no delivery data) gains it at connect: what it held stays,
/// and the delivery rules hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_database_gains_delivery_data() {
    let url = common::fresh_database().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let old = AtomicWrite::new(
        "k|a".into(),
        vec![NewEvent {
            seq: 1,
            payload: bytes::Bytes::from_static(b"old"),
            manifest: "".into(),
            tags: vec![],
        }],
    );
    assert_eq!(store.append(vec![old]).await.unwrap(), vec![Ok(())]);
    store.close().await.unwrap();
    let client = common::admin(&url).await;
    client
        .batch_execute(
            "DROP TABLE shardik_delivery_marks; DROP TABLE shardik_producer_epochs;
             DROP TABLE shardik_producer_queue;
             UPDATE shardik_schema SET version = 4;",
        )
        .await
        .unwrap();

    let store = PostgresStore::connect(&url).await.unwrap();
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    assert_eq!(&events[0].payload[..], b"old");
    conformance::run_delivery(&store).await;
    store.close().await.unwrap();
    let version: i32 = client
        .query_one("SELECT version FROM shardik_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 5);
}

/// Nodes starting together on an empty database migrate it once (the advisory lock), and all
/// start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_migrate_once() {
    let url = common::fresh_database().await;
    let starts = futures_util::future::join_all((0..4).map(|_| PostgresStore::connect(&url))).await;
    let stores: Vec<PostgresStore> = starts.into_iter().map(Result::unwrap).collect();
    // One identity for the database, however many nodes created it together; another
    // database has another.
    let other = PostgresStore::connect(&common::fresh_database().await)
        .await
        .unwrap();
    let same: Vec<&dyn Store> = stores.iter().map(|s| s as &dyn Store).collect();
    conformance::one_identity_per_store(&same, &other);
    assert!(
        other.location().starts_with("postgres://") && !other.location().contains('@'),
        "{}",
        other.location()
    );
    other.close().await.unwrap();
    for store in stores {
        store.close().await.unwrap();
    }
    let client = common::admin(&url).await;
    let rows = client
        .query("SELECT version FROM shardik_schema", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one version row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_left_unchanged() {
    let url = common::fresh_database().await;
    PostgresStore::connect(&url)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let client = common::admin(&url).await;
    let bumped: i32 = client
        .query_one(
            "UPDATE shardik_schema SET version = version + 1 RETURNING version",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let tables = "SELECT string_agg(table_name, ',' ORDER BY table_name)
                  FROM information_schema.tables WHERE table_schema = current_schema()";
    let tables_before: String = client.query_one(tables, &[]).await.unwrap().get(0);

    let refused = PostgresStore::connect(&url).await.unwrap_err();
    assert_eq!(
        refused,
        StoreError::SchemaTooNew {
            found: bumped as u32,
            supported: bumped as u32 - 1
        }
    );
    let version: i32 = client
        .query_one("SELECT version FROM shardik_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, bumped, "the version row is unchanged");
    let tables_after: String = client.query_one(tables, &[]).await.unwrap().get(0);
    assert_eq!(tables_after, tables_before, "no table was added or dropped");
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_naming_it() {
    let port = common::closed_port();
    let started = Instant::now();
    let refused = PostgresStore::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .await
        .unwrap_err();
    match refused {
        StoreError::Unavailable(why) => {
            assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
            assert!(why.to_lowercase().contains("refused"), "the cause: {why}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A server that accepts the connection but never answers the login: the store gives up after
/// its timeout instead of hanging.
#[tokio::test]
async fn a_silent_server_times_out_as_unavailable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let started = Instant::now();
    let refused = PostgresStore::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .await
        .unwrap_err();
    match refused {
        StoreError::Unavailable(why) => {
            assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    silent.abort();
}

#[tokio::test]
async fn an_unparseable_url_is_a_bad_url() {
    for url in [
        "postgres://postgres@127.0.0.1:notaport/db",
        "postgres://postgres@127.0.0.1:99999999/db",
        "postgresql://host/db?no_such_option=1",
    ] {
        let refused = PostgresStore::connect(url).await.unwrap_err();
        assert!(
            matches!(&refused, StoreError::BadUrl { url: u, .. } if u == url),
            "{url}: {refused:?}"
        );
    }
}
