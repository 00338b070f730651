//! A node frozen with SIGSTOP past the shipped timeouts and then resumed (issues 24 and 43):
//! while it is frozen its durable counters run again on the survivors (moved once their leases
//! lapsed in the store, by a stand-in coordinator when the frozen node is the oldest), and
//! once it wakes it answers nothing stale and writes nothing. The timers are as shipped
//! (failure detection, the resolver's 20 s stable-after, leases "auto" on the SQLite store
//! with their 6 s time-to-live); only the shard count and the sharding retry timers are the
//! fast ones.

mod support;

use std::time::{Duration, Instant};

use support::counters::{Books, SHARDING_FAST, read_counter, round};
use support::*;
use tokio::task::JoinSet;

/// Counters driven.
const COUNTERS: usize = 30;
/// How long the survivors may take to serve every counter again.
const FAILOVER_BOUND: Duration = Duration::from_secs(150);
/// How long the woken node is watched.
const AWAKE_FOR: Duration = Duration::from_secs(12);
/// How many times a read refused with a reported drop is asked again.
const REREADS: usize = 10;

/// Three counter nodes on one SQLite store, every timer but sharding's as shipped.
async fn cluster(http: &reqwest::Client, store: &str) -> Vec<Node> {
    let specs: Vec<NodeSpec> = (0..3)
        .map(|i| {
            let spec = SHARDING_FAST.iter().fold(
                NodeSpec::new(&format!("frozen{i}"), &[]).with_shipped_timers(),
                |spec, (k, v)| spec.env(k, v),
            );
            spec.arg("--demo-counters").arg("--store").arg(store)
        })
        .collect();
    start_cluster_of(http, specs).await
}

/// Every counter read through `management` at once: its value, or why not.
async fn read_all(http: &reqwest::Client, management: &str) -> Vec<Result<u64, String>> {
    let mut reads = JoinSet::new();
    for i in 0..COUNTERS {
        let (http, management) = (http.clone(), management.to_string());
        reads.spawn(async move { (i, read_counter(&http, &management, i).await) });
    }
    let mut values = vec![Err("not read".to_string()); COUNTERS];
    while let Some(Ok((i, value))) = reads.join_next().await {
        values[i] = value;
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_frozen_past_its_leases_answers_nothing_stale_and_writes_nothing_when_resumed() {
    // A node that is not the oldest (the coordinators run there). Its shards move once their
    // leases have run out in the store, before the resolver downs it (issue 43).
    freeze_and_resume(Victim::NotOldest, "frozen").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oldest_node_frozen_past_its_leases_answers_nothing_stale_and_writes_nothing_when_resumed()
 {
    // The oldest node runs every coordinator: the next oldest stands in for it once the
    // coordinator's lease has run out, and moves its shards as their leases run out.
    freeze_and_resume(Victim::Oldest, "frozen-oldest").await;
}

/// Which node is frozen.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// The oldest member: it runs every coordinator.
    Oldest,
    /// Another one.
    NotOldest,
}

/// Drives every counter, freezes the `victim` with SIGSTOP until the others serve every
/// counter again, then resumes it and checks that it answers nothing stale and that nothing
/// changes after it woke.
async fn freeze_and_resume(victim: Victim, name: &str) {
    let http = client();
    let store = fresh_sqlite_store(name);
    let mut nodes = cluster(&http, &store).await;
    // The nodes start together: which one is the oldest is read back.
    let view = members(&http, &nodes[0]).await.expect("the members");
    let oldest = view["oldest"]
        .as_str()
        .expect("an oldest member")
        .to_string();
    let oldest = nodes
        .iter()
        .position(|n| n.addr() == oldest)
        .unwrap_or_else(|| panic!("the oldest, {oldest}, is one of the nodes"));
    let victim = match victim {
        Victim::Oldest => oldest,
        Victim::NotOldest => (oldest + 1) % nodes.len(),
    };
    let managements: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let mut books = Books::new(COUNTERS);
    let start = Instant::now();
    while books.acked.iter().any(|a| *a < 2) {
        round(&http, &managements, &mut books).await;
        assert!(start.elapsed() < BOUND, "the counters never all answered");
    }

    // Its counters answer again through the survivors once its leases have run out in the
    // store, before the resolver downs it, so it may wake still a member.
    let frozen_at = Instant::now();
    nodes[victim].signal("STOP");
    let survivors: Vec<String> = (0..managements.len())
        .filter(|i| *i != victim)
        .map(|i| managements[i].clone())
        .collect();
    let survivors = &survivors[..];
    while round(&http, survivors, &mut books).await > 0 {
        assert!(
            frozen_at.elapsed() < FAILOVER_BOUND,
            "the survivors did not serve every counter within {FAILOVER_BOUND:?}\n{}",
            reports(&mut nodes.iter_mut().collect::<Vec<_>>())
        );
    }
    let failover = frozen_at.elapsed();
    // Once more, so that every counter has been written by its new home.
    assert_eq!(round(&http, survivors, &mut books).await, 0);
    let mut before = Vec::new();
    for (i, value) in read_all(&http, &survivors[0]).await.into_iter().enumerate() {
        let value = value.unwrap_or_else(|e| panic!("c{i} read through a survivor: {e}"));
        books.check(i, value, "read before the resume");
        before.push(value);
    }

    // From here on nothing is sent but reads. The woken node answers each one with the value
    // the survivors hold, or not at all: never with the one it held when it froze.
    nodes[victim].signal("CONT");
    let woke_at = Instant::now();
    let mut answered = 0;
    while woke_at.elapsed() < AWAKE_FOR && nodes[victim].exited().is_none() {
        for (i, value) in read_all(&http, &managements[victim])
            .await
            .into_iter()
            .enumerate()
        {
            if let Ok(value) = value {
                assert_eq!(
                    value, before[i],
                    "c{i}: the woken node answered a stale value"
                );
                answered += 1;
            }
        }
    }
    // It wrote nothing: what it took in before it froze (increments forwarded to it, queued
    // unread) was neither applied nor persisted, so the survivors still read the same values.
    // A read the survivors refuse with a reported drop is asked again: a shard that comes back
    // to the woken node (the rebalance gives it shards again) takes another node's messages
    // only after that node has heard it was the home again, and it drops and reports the first
    // one (see `region/routing_order.rs`). What is read is never a new value.
    let mut refused = 0;
    for (i, value) in read_all(&http, &survivors[0]).await.into_iter().enumerate() {
        let mut value = value;
        for _ in 0..REREADS {
            match &value {
                Err(why) if why.contains("dropped") => {
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    value = read_counter(&http, &survivors[0], i).await;
                }
                _ => break,
            }
        }
        assert_eq!(
            value,
            Ok(before[i]),
            "c{i} changed after the frozen node woke"
        );
    }
    eprintln!(
        "frozen node {victim}: every counter answered through the survivors {failover:.1?} \
         after SIGSTOP; after SIGCONT it answered {answered} reads, all current, and {}; \
         {refused} reads through a survivor were refused (reported) and asked again",
        match nodes[victim].exited() {
            Some(status) => format!("exited ({status})"),
            None => "was still running".to_string(),
        }
    );
}
