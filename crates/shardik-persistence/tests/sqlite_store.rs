//! The SQLite store against real files: the store rules, two stores racing on one file, large
//! batches, reopening, and files it must refuse without touching them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shardik_persistence::{
    AtomicWrite, DeliveryMark, MarkChange, NewEvent, QueuedMessage, Snapshot, SqliteStore, Store,
    StoreError, StoredState, conformance, persistence_id,
};

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// The files of `dir` with their contents, to show a failed open changed nothing.
fn dir_contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

fn one_event(pid: &str, seq: u64, payload: Vec<u8>) -> AtomicWrite {
    AtomicWrite {
        persistence_id: pid.into(),
        events: vec![NewEvent {
            seq,
            payload: Bytes::from(payload),
            manifest: "".into(),
            tags: vec!["t".into()],
        }],
        fence: None,
        marks: Vec::new(),
    }
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_store_rules() {
    let dir = temp_dir();
    let store = SqliteStore::open(dir.path().join("store.db"))
        .await
        .unwrap();
    assert!(store.keeps_delivery_data());
    conformance::run_all(&store).await;
    store.close().await.unwrap();
}

/// Two stores on one file (as two processes open it, each with its own connections) start
/// one producer at once: every start gets an epoch of its own, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_started_through_two_stores_of_one_file_get_distinct_epochs() {
    let dir = temp_dir();
    let path = dir.path().join("shared.db");
    let first = SqliteStore::open(&path).await.unwrap();
    let second = SqliteStore::open(&path).await.unwrap();
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
async fn two_sqlite_stores_on_one_file_never_interleave() {
    let dir = temp_dir();
    let path = dir.path().join("shared.db");
    let first = SqliteStore::open(&path).await.unwrap();
    let second = SqliteStore::open(&path).await.unwrap();
    conformance::racing_writers_never_interleave(&first, &second, 200).await;
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// A file keeps the identity it got when it was created, under any path that leads to it
/// (a symbolic link here), and another file has another.
#[tokio::test]
async fn a_file_has_one_identity_under_every_path_and_another_file_another() {
    let dir = temp_dir();
    let path = dir.path().join("one.db");
    let first = SqliteStore::open(&path).await.unwrap();
    let created = first.identity().to_string();
    first.close().await.unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let again = SqliteStore::open(&path).await.unwrap();
    let linked = SqliteStore::open(&link).await.unwrap();
    let other = SqliteStore::open(dir.path().join("other.db"))
        .await
        .unwrap();
    conformance::one_identity_per_store(&[&again, &linked], &other);
    assert_eq!(again.identity(), created, "kept across a reopen");
    assert_eq!(created.len(), 32, "128 random bits in hex: {created}");
    assert_eq!(
        other.location(),
        format!("sqlite:{}", dir.path().join("other.db").display())
    );
    for store in [again, linked, other] {
        store.close().await.unwrap();
    }
}

/// Processes started together (the nodes of a local cluster) open a new file at the same
/// moment: every one of them opens it. Switching a new file to WAL mode needs it to itself,
/// and SQLite refuses that at once, without waiting, when another connection is in the middle
/// of the same switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opened_at_the_same_moment_on_a_new_file_all_open() {
    for round in 0..30 {
        let dir = temp_dir();
        let path = dir.path().join("new.db");
        let opening: Vec<_> = (0..6)
            .map(|_| tokio::spawn(SqliteStore::open(path.clone())))
            .collect();
        let mut identities = std::collections::BTreeSet::new();
        for open in opening {
            let store = open
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            identities.insert(store.identity().to_string());
            store.close().await.unwrap();
        }
        // The file got one identity, however many created it together.
        assert_eq!(identities.len(), 1, "round {round}: {identities:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_store_answers_each_write_of_a_large_batch() {
    let dir = temp_dir();
    let store = SqliteStore::open(dir.path().join("batch.db"))
        .await
        .unwrap();
    conformance::many_writes_in_one_batch(&store, 1_000).await;
    store.close().await.unwrap();
}

/// Many tasks appending at once: the writer thread gathers their requests into shared commits,
/// and every one is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_all_answered() {
    let dir = temp_dir();
    let store = Arc::new(SqliteStore::open(dir.path().join("many.db")).await.unwrap());
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let pid = persistence_id("concurrent", &task.to_string());
                for seq in 1..=20 {
                    let r = store
                        .append(vec![one_event(&pid, seq, vec![task as u8])])
                        .await
                        .unwrap();
                    assert_eq!(r, vec![Ok(())]);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    for task in 0..64 {
        let pid = persistence_id("concurrent", &task.to_string());
        assert_eq!(store.highest_seq(&pid).await.unwrap(), 20);
    }
    store.close().await.unwrap();
}

#[tokio::test]
async fn what_was_written_is_there_after_reopening() {
    let dir = temp_dir();
    // The store creates its file, not directories (a mistyped path must be an error).
    std::fs::create_dir_all(dir.path().join("nested").join("dirs")).unwrap();
    let path = dir.path().join("nested").join("dirs").join("kept.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append(vec![one_event("k|a", 1, b"event".to_vec())])
        .await
        .unwrap();
    let snapshot = Snapshot {
        seq: 1,
        payload: Bytes::from_static(b"snap"),
    };
    store.save_snapshot("k|a", snapshot.clone()).await.unwrap();
    let state = StoredState {
        revision: 1,
        payload: Bytes::from_static(b"state"),
    };
    store
        .write_state("k|b", state.clone(), None, Vec::new())
        .await
        .unwrap()
        .unwrap();
    store
        .update_remembered("k", "3", &["a".to_string()], &[])
        .await
        .unwrap();
    store.delete_events_to("k|none", 5).await.unwrap();
    store.close().await.unwrap();
    let after_close = store.highest_seq("k|a").await;
    assert!(
        matches!(after_close, Err(StoreError::Unavailable(_))),
        "{after_close:?}"
    );
    store.close().await.unwrap();

    let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["kept.db"],
        "closing leaves no -wal or -shm file"
    );

    let store = SqliteStore::open(&path).await.unwrap();
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(&events[0].payload[..], b"event");
    assert_eq!(events[0].tags, vec!["t".to_string()]);
    assert_eq!(store.latest_snapshot("k|a").await.unwrap(), Some(snapshot));
    assert_eq!(store.load_state("k|b").await.unwrap(), Some(state));
    assert_eq!(
        store.remembered_entities("k", "3").await.unwrap(),
        vec!["a".to_string()]
    );
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_unchanged() {
    let dir = temp_dir();
    let path = dir.path().join("newer.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append(vec![one_event("k|a", 1, b"x".to_vec())])
        .await
        .unwrap();
    store.close().await.unwrap();
    let current: u32 = {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE shardik_schema SET version = version + 1", [])
            .unwrap();
        conn.query_row("SELECT version FROM shardik_schema", [], |row| row.get(0))
            .unwrap()
    };
    let before = dir_contents(dir.path());

    let refused = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(
        refused,
        StoreError::SchemaTooNew {
            found: current,
            supported: current - 1
        }
    );
    assert_eq!(dir_contents(dir.path()), before, "nothing on disk changed");
}

/// A newer schema is also refused when another connection holds the file open (so the check
/// before opening cannot read it alone): the migration transaction finds it.
#[tokio::test]
async fn a_newer_schema_is_refused_while_the_file_is_in_use() {
    let dir = temp_dir();
    let path = dir.path().join("busy.db");
    SqliteStore::open(&path)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE shardik_schema SET version = version + 1", [])
        .unwrap();
    let version = |conn: &rusqlite::Connection| -> u32 {
        conn.query_row("SELECT version FROM shardik_schema", [], |row| row.get(0))
            .unwrap()
    };
    let bumped = version(&conn);
    let refused = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(
        refused,
        StoreError::SchemaTooNew {
            found: bumped,
            supported: bumped - 1
        }
    );
    assert_eq!(version(&conn), bumped, "the version row is unchanged");
}

/// Bytes that no SQLite wrote (a fixed pseudo-random sequence).
fn garbage(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn assert_refused_as_corrupt(dir: &Path, path: &Path) {
    let before = dir_contents(dir);
    let refused = SqliteStore::open(path).await.unwrap_err();
    match &refused {
        StoreError::Corrupt(why) => assert!(
            why.contains(&path.display().to_string()),
            "the message names the file: {why}"
        ),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        dir_contents(dir),
        before,
        "the file is unchanged, nothing added"
    );
}

#[tokio::test]
async fn a_file_of_garbage_is_refused_as_corrupt() {
    let dir = temp_dir();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, garbage(8192)).unwrap();
    assert_refused_as_corrupt(dir.path(), &path).await;
    let short = dir.path().join("short.db");
    std::fs::write(&short, b"SQLite format 3\0 but short").unwrap();
    assert_refused_as_corrupt(dir.path(), &short).await;
}

#[tokio::test]
async fn a_truncated_database_is_refused_as_corrupt() {
    let dir = temp_dir();
    let path = dir.path().join("cut.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let writes = (1..=500)
        .map(|i| one_event(&persistence_id("cut", &i.to_string()), 1, garbage(300)))
        .collect();
    store.append(writes).await.unwrap();
    store.close().await.unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 100_000, "a file of many pages");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_refused_as_corrupt(dir.path(), &path).await;
}

/// A real database whose pages after the first are overwritten: the header is sound, the
/// tables are not.
#[tokio::test]
async fn a_database_with_damaged_pages_is_refused_as_corrupt() {
    let dir = temp_dir();
    let path = dir.path().join("damaged.db");
    SqliteStore::open(&path)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    let len = bytes.len();
    bytes[page..].copy_from_slice(&garbage(len - page));
    std::fs::write(&path, &bytes).unwrap();
    assert_refused_as_corrupt(dir.path(), &path).await;
}

#[tokio::test]
async fn an_uncreatable_directory_is_unavailable() {
    let dir = temp_dir();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let refused = SqliteStore::open(file.join("sub").join("store.db"))
        .await
        .unwrap_err();
    match refused {
        StoreError::Unavailable(why) => assert!(why.contains("a-file"), "{why}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let refused = SqliteStore::open(dir.path()).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::Unavailable(_)),
        "a directory is not a database: {refused:?}"
    );
}

/// Set in the child process of the test below: the database file it writes to.
const CHILD_ENV: &str = "SHARDIK_TEST_SQLITE_CHILD_DB";
const KILL_TEST: &str = "acknowledged_writes_survive_a_sigkill_while_another_process_writes";

/// Two processes write to one file at once; one is SIGKILLed mid-stream. Every write it had
/// seen acknowledged is in the file, and the other process's writes are all there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_sigkill_while_another_process_writes() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child_writes_until_killed(PathBuf::from(path)).await;
    }
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let dir = temp_dir();
    let path = dir.path().join("two-processes.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", KILL_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // The child prints "ack N" once write N is acknowledged; kill it after 200 of them.
    let acks = tokio::task::spawn_blocking(move || {
        let mut last = 0;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("ack ") {
                last = n.parse::<u64>().unwrap();
                if last == 200 {
                    child.kill().unwrap();
                    child.wait().unwrap();
                    return last;
                }
            }
        }
        let status = child.wait().unwrap();
        panic!("the child stopped ({status}) after {last} acknowledged writes");
    });
    let mut mine = 0;
    while !acks.is_finished() {
        mine += 1;
        let r = store
            .append(vec![one_event("parent|a", mine, b"p".to_vec())])
            .await
            .unwrap();
        assert_eq!(r, vec![Ok(())]);
        assert!(mine < 100_000, "the child never got to 200 writes");
    }
    let acknowledged = acks.await.unwrap();
    store.close().await.unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let child_events = store
        .read_events("child|a", 1, acknowledged, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        child_events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=acknowledged).collect::<Vec<_>>(),
        "every acknowledged write of the killed process is there"
    );
    assert_eq!(store.highest_seq("parent|a").await.unwrap(), mine);
    store.close().await.unwrap();
}

async fn child_writes_until_killed(path: PathBuf) {
    use std::io::Write;
    let store = SqliteStore::open(&path).await.unwrap();
    // Bounded, in case the parent died without killing this process.
    for seq in 1..=10_000 {
        let r = store
            .append(vec![one_event("child|a", seq, b"c".to_vec())])
            .await
            .unwrap();
        assert_eq!(r, vec![Ok(())]);
        let mut out = std::io::stdout().lock();
        writeln!(out, "ack {seq}").unwrap();
        out.flush().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writers_on_one_file_take_turns() {
    let dir = temp_dir();
    let path = dir.path().join("fenced.db");
    let first = SqliteStore::open(&path).await.unwrap();
    let second = SqliteStore::open(&path).await.unwrap();
    conformance::fenced_writers_racing(&first, &second).await;
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// A file written by the first schema (journals, no leases or fences) is migrated forward when
/// opened: what it held stays, and leases and fences work.
#[tokio::test]
async fn a_version_1_file_migrates_forward() {
    let dir = temp_dir();
    let path = dir.path().join("v1.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append(vec![one_event("k|a", 1, b"old".to_vec())])
        .await
        .unwrap();
    store.close().await.unwrap();
    // Back to version 1: what versions 2 to 5 added goes.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE shardik_leases; DROP TABLE shardik_fences;
             ALTER TABLE shardik_events DROP COLUMN manifest; DROP TABLE shardik_store;
             DROP TABLE shardik_delivery_marks; DROP TABLE shardik_producer_epochs;
             DROP TABLE shardik_producer_queue;
             UPDATE shardik_schema SET version = 1;",
        )
        .unwrap();
    }

    let store = SqliteStore::open(&path).await.unwrap();
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    assert_eq!(&events[0].payload[..], b"old");
    assert_eq!(store.read_lease("l").await.unwrap(), None);
    conformance::leases_acquire_renew_release(&store).await;
    conformance::fences_refuse_older_tokens(&store).await;
    store.close().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("SELECT version FROM shardik_schema", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

/// A file of schema version 2 (events without manifests) is migrated forward when opened: its
/// events read back whole with an empty manifest, tags and all, and new events keep theirs.
#[tokio::test]
async fn a_version_2_file_gains_event_manifests() {
    let dir = temp_dir();
    let path = dir.path().join("v2.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append(vec![one_event("k|a", 1, b"old".to_vec())])
        .await
        .unwrap();
    store.close().await.unwrap();
    // Back to version 2: what versions 3 to 5 added goes.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE shardik_events DROP COLUMN manifest; DROP TABLE shardik_store;
             DROP TABLE shardik_delivery_marks; DROP TABLE shardik_producer_epochs;
             DROP TABLE shardik_producer_queue;
             UPDATE shardik_schema SET version = 2;",
        )
        .unwrap();
    }

    let store = SqliteStore::open(&path).await.unwrap();
    let newer = AtomicWrite {
        persistence_id: "k|a".into(),
        events: vec![NewEvent {
            seq: 2,
            payload: Bytes::from_static(b"new"),
            manifest: "cbor/2".into(),
            tags: vec!["t".into()],
        }],
        fence: None,
        marks: Vec::new(),
    };
    assert_eq!(store.append(vec![newer]).await.unwrap(), vec![Ok(())]);
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    let read: Vec<(&[u8], &str, &[String])> = events
        .iter()
        .map(|e| (&e.payload[..], &*e.manifest, &e.tags[..]))
        .collect();
    let t = ["t".to_string()];
    assert_eq!(
        read,
        [(&b"old"[..], "", &t[..]), (&b"new"[..], "cbor/2", &t[..])]
    );
    let tagged = store.events_by_tag("t", 0, 10).await.unwrap();
    let tagged: Vec<&str> = tagged.iter().map(|e| &*e.manifest).collect();
    assert_eq!(tagged, ["", "cbor/2"]);
    store.close().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("SELECT version FROM shardik_schema", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

/// A file of schema version 4 (no delivery data) gains it when opened: what it held stays,
/// the delivery rules hold, and what they wrote is there after reopening.
#[tokio::test]
async fn a_version_4_file_gains_delivery_data() {
    let dir = temp_dir();
    let path = dir.path().join("v4.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append(vec![one_event("k|a", 1, b"old".to_vec())])
        .await
        .unwrap();
    store.close().await.unwrap();
    // Back to version 4: what version 5 added goes.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE shardik_delivery_marks; DROP TABLE shardik_producer_epochs;
             DROP TABLE shardik_producer_queue;
             UPDATE shardik_schema SET version = 4;",
        )
        .unwrap();
    }

    let store = SqliteStore::open(&path).await.unwrap();
    let events = store.read_events("k|a", 1, 10, 10).await.unwrap();
    assert_eq!(&events[0].payload[..], b"old");
    conformance::run_delivery(&store).await;
    let kept = delivery_data_to_keep(&store).await;
    store.close().await.unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        read_delivery_data(&store).await,
        kept,
        "kept across reopening"
    );
    assert_eq!(store.start_producer("kept").await.unwrap(), 2);
    store.close().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("SELECT version FROM shardik_schema", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

type DeliveryData = (Vec<DeliveryMark>, Vec<QueuedMessage>);

/// Writes a mark and a queued message (and starts producer `kept` once), and returns them as
/// read back.
async fn delivery_data_to_keep(store: &SqliteStore) -> DeliveryData {
    assert_eq!(store.start_producer("kept").await.unwrap(), 1);
    let mark = DeliveryMark {
        producer: "kept".into(),
        epoch: 1,
        stream: 2,
        seq: 3,
        written_at_ms: 4,
    };
    let write = AtomicWrite::new("k|a".into(), Vec::new()).with_marks(vec![MarkChange::Set(mark)]);
    assert_eq!(store.append(vec![write]).await.unwrap(), vec![Ok(())]);
    let message = QueuedMessage {
        kind: "k".into(),
        entity: "a".into(),
        epoch: 1,
        stream: 2,
        seq: 4,
        payload: Bytes::from_static(b"queued"),
    };
    store.enqueue("kept", vec![message]).await.unwrap();
    let data = read_delivery_data(store).await;
    assert_eq!((data.0.len(), data.1.len()), (1, 1));
    data
}

async fn read_delivery_data(store: &SqliteStore) -> DeliveryData {
    (
        store.delivery_marks("k|a").await.unwrap(),
        store.queued("kept").await.unwrap(),
    )
}

/// Set in the child process of the test below: the database file its contenders use.
const LEASE_CHILD_ENV: &str = "SHARDIK_TEST_SQLITE_LEASE_CHILD_DB";
const LEASE_RACE_TEST: &str = "lease_contenders_in_two_processes_never_hold_it_at_once";
const RACE_TTL: Duration = Duration::from_millis(100);
const RACE_FOR: Duration = Duration::from_secs(3);

/// Contenders in this process (on two stores, so two writer connections) and in a second
/// process race for one lease on one file for a few seconds, renewing, stalling past the
/// time-to-live and releasing: no two of them ever held it at once, and tokens grow with time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_contenders_in_two_processes_never_hold_it_at_once() {
    if let Ok(path) = std::env::var(LEASE_CHILD_ENV) {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let tenures =
            conformance::race_for_lease(&[store], "race", "child", 2, RACE_TTL, RACE_FOR).await;
        // A line of its own: the test harness's "test … " has no newline before the output.
        let mut out = String::from("\n");
        for tenure in tenures {
            out.push_str(&format!("{tenure}\n"));
        }
        print!("{out}");
        return;
    }
    use std::process::{Command, Stdio};

    let dir = temp_dir();
    let path = dir.path().join("lease-race.db");
    let stores: Vec<Arc<dyn Store>> = vec![
        Arc::new(SqliteStore::open(&path).await.unwrap()),
        Arc::new(SqliteStore::open(&path).await.unwrap()),
    ];
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            LEASE_RACE_TEST,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LEASE_CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let child = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let mut tenures =
        conformance::race_for_lease(&stores, "race", "parent", 2, RACE_TTL, RACE_FOR).await;
    let output = child.await.unwrap();
    assert!(
        output.status.success(),
        "the child failed: {}",
        output.status
    );
    let theirs: Vec<conformance::Tenure> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with("tenure "))
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(!theirs.is_empty(), "the other process never held the lease");
    tenures.extend(theirs);
    let handovers = conformance::check_tenures(&tenures, 10);
    eprintln!("{} tenures, {handovers} handovers", tenures.len());
    for store in stores {
        store.close().await.unwrap();
    }
}
