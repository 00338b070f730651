//! One store per cluster, enforced: three real `shardik node --demo-counters` processes, each
//! given a data directory of its own (so each its own SQLite file, as three machines with the
//! default store would have). The first forms the cluster and serves counters; the second and
//! third are refused at join, exit with code 4, and say which two stores differ and how to fix
//! it. No acknowledged increment is ever answered from an empty history: the books check every
//! answer. A node started again on the first node's file joins, takes the counters over when
//! the first node leaves, and every counter goes on from where it was.

mod support;

use std::time::Instant;

use support::counters::{Books, SHARDING_FAST, round};
use support::*;

/// Counters driven.
const COUNTERS: usize = 12;

fn counter_node(name: &str, seeds: &[String], data_dir: &std::path::Path) -> NodeSpec {
    SHARDING_FAST
        .iter()
        .fold(NodeSpec::new(name, seeds), |spec, (k, v)| spec.env(k, v))
        .arg("--demo-counters")
        .arg("--data-dir")
        .arg(&data_dir.display().to_string())
}

/// Increments through `managements` until one whole round is answered (every answer checked
/// against the books), within the test's bound.
async fn round_all_answered(
    http: &reqwest::Client,
    managements: &[String],
    books: &mut Books,
    nodes: &mut [&mut Node],
    what: &str,
) {
    let start = Instant::now();
    while round(http, managements, books).await > 0 {
        assert!(start.elapsed() < BOUND, "{what}: {}", reports(nodes));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_their_own_sqlite_files_are_refused_and_no_history_is_lost() {
    let http = client();
    let dirs = tempfile::tempdir().unwrap();
    let dir = |i: usize| dirs.path().join(format!("node-{i}"));

    let mut first = start_cluster_of(&http, vec![counter_node("store0", &[], &dir(0))])
        .await
        .remove(0);
    let seeds = vec![first.addr().to_string()];
    let through_first = vec![first.spec.management.clone()];
    let mut books = Books::new(COUNTERS);
    for _ in 0..3 {
        round_all_answered(
            &http,
            &through_first,
            &mut books,
            &mut [&mut first],
            "the first node's counters never all answered",
        )
        .await;
    }

    // The second and the third node, each on its own file, are refused while the counters go on.
    for i in 1..=2 {
        let mut own = Node::spawn(counter_node(&format!("store{i}"), &seeds, &dir(i)));
        let exit = own.wait_exit(BOUND).await;
        assert_eq!(
            exit.and_then(|s| s.code()),
            Some(4),
            "a node on its own store was not refused: {}",
            reports(&mut [&mut first, &mut own])
        );
        let said = own.stderr();
        let ours = dir(0).join("shardik.db");
        let theirs = dir(i).join("shardik.db");
        for part in [
            "`persistence.store` differs".to_string(),
            format!("sqlite:{}", ours.display()),
            format!("sqlite:{}", theirs.display()),
            "one PostgreSQL server".to_string(),
            "one SQLite file".to_string(),
        ] {
            assert!(said.contains(&part), "{part:?} not said:\n{said}");
        }
        let members = members(&http, &first).await.unwrap();
        exactly_up(&members, &[first.addr()]).unwrap();
        round_all_answered(
            &http,
            &through_first,
            &mut books,
            &mut [&mut first],
            "the counters stopped answering while a node was refused",
        )
        .await;
    }

    // Fixed: the next node shares the first node's file. It joins, the first node leaves, and
    // every counter answers from the second one with its whole history.
    let mut second = Node::spawn(counter_node("store0-shared", &seeds, &dir(0)));
    let expected = [first.addr().to_string(), second.addr().to_string()];
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    wait_all_up(&http, &mut [&mut first, &mut second], &expected).await;
    first.signal("TERM");
    let left = first.wait_exit(BOUND).await;
    assert_eq!(
        left.and_then(|s| s.code()),
        Some(0),
        "{}",
        reports(&mut [&mut first, &mut second])
    );
    let before = books.acked.clone();
    let through_second = vec![second.spec.management.clone()];
    round_all_answered(
        &http,
        &through_second,
        &mut books,
        &mut [&mut second],
        "the counters never answered from the node on the shared file",
    )
    .await;
    for (i, (was, now)) in before.iter().zip(&books.acked).enumerate() {
        assert!(now > was, "c{i} was not incremented after the move");
    }
    // Every answer was checked against the books; a value from an empty journal (1 after
    // several acknowledged increments) would have failed there. The refused nodes' files hold
    // no event: they never served a counter.
    for i in 1..=2 {
        let file = dir(i).join("shardik.db");
        let conn = rusqlite::Connection::open(&file).unwrap();
        let events: i64 = conn
            .query_row("SELECT count(*) FROM shardik_events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(events, 0, "{} holds events", file.display());
    }
}
