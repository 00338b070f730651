//! Real processes in a real partition: five `shardik node --demo-counters` processes, each in a
//! Linux network namespace of its own on one bridge (`support/netns.rs`), with their durable
//! counters in a PostgreSQL server that every namespace reaches through a relay in the test
//! process (`support/relay.rs`). Under steady increments sent to nodes on both sides, the links
//! between {n0, n1, n2} and {n3, n4} are cut (the path to the store stays up), later restored;
//! a second test cuts n4 alone off from its peers, again not from the store, where the silent
//! node's lease takeover must not move anything early (it still renews its leases).
//!
//! Asserted:
//! - no counter is live on both sides at any moment: proven from the nodes' own reports of
//!   when each incarnation began and when it was last live, on the machine's one monotonic
//!   clock (`netns_partition/liveness.rs`), polled every 100 ms on every node;
//! - no acknowledged increment is lost and none is applied twice, judged answer by answer and
//!   at the end (`netns_partition/books.rs`);
//! - the minority side downs itself (its processes exit with 3) and its counters move to the
//!   majority, which serves all of them;
//! - after the heal the minority's nodes, restarted on the same addresses as a deployment
//!   would restart them, rejoin: all five Up, counters running on them again, every counter
//!   readable.
//!
//! Needs root and iproute2's `ip`: skipped, with the reason printed, only when this machine
//! cannot create network namespaces. Needs PostgreSQL: run it through `scripts/with-postgres`,
//! as `.ci/run` does:
//!
//! ```text
//! scripts/with-postgres cargo test -p shardik-cli --test netns_partition -- --nocapture
//! ```
//!
//! Shard leases (`cluster.sharding.use-lease`) are off unless [`USE_LEASE`] or the environment
//! variable `SHARDIK_TEST_NETNS_USE_LEASE` turns them on; their settings are all in
//! [`lease_settings`].

#[path = "netns_partition/books.rs"]
mod books;
#[path = "netns_partition/liveness.rs"]
mod liveness;
mod support;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use books::Books;
use liveness::{Liveness, Report};
use serde_json::Value;
use support::netns::{Lab, LabError};
use support::relay::Relay;
use support::*;

/// Node processes.
const NODES: usize = 5;
/// Every node listens on these ports of its own namespace's address.
const CLUSTER_PORT: u16 = 2552;
const MANAGEMENT_PORT: u16 = 8558;

/// Counters driven; each gets an increment from every node once per [`LANE_PERIOD`] (2.5 a
/// second with five nodes).
const COUNTERS: usize = 30;
const LANE_PERIOD: Duration = Duration::from_millis(2000);
/// How often every node is asked which counters it runs.
const LIVE_POLL: Duration = Duration::from_millis(100);

const SHARDING: &[(&str, &str)] = &[
    ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "30"),
    ("SHARDIK_CLUSTER__SHARDING__RETRY_INTERVAL", "300ms"),
    ("SHARDIK_CLUSTER__SHARDING__REBALANCE_INTERVAL", "1s"),
    ("SHARDIK_CLUSTER__SHARDING__HANDOFF_TIMEOUT", "10s"),
];

/// `cluster.sharding.use-lease` for this test: `"auto"` (the shipped default: the durable
/// counters' shards and coordinator hold leases in their store, here PostgreSQL, with the
/// shipped timing), `"store"` (the same with the short timing below) or `""` (off).
/// Overridden by `SHARDIK_TEST_NETNS_USE_LEASE`.
const USE_LEASE: &str = "auto";

/// The settings for `use_lease`: the one place that names them.
fn lease_settings(use_lease: &str) -> Vec<(&'static str, String)> {
    match use_lease {
        "auto" => return Vec::new(),
        "" => {
            return vec![
                ("SHARDIK_CLUSTER__SHARDING__USE_LEASE", String::new()),
                (
                    "SHARDIK_CLUSTER__SHARDING__COORDINATOR_SINGLETON__USE_LEASE",
                    String::new(),
                ),
            ];
        }
        _ => {}
    }
    vec![
        (
            "SHARDIK_CLUSTER__SHARDING__USE_LEASE",
            use_lease.to_string(),
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__COORDINATOR_SINGLETON__USE_LEASE",
            use_lease.to_string(),
        ),
        // A shard whose lease another node still holds is tried again this often.
        (
            "SHARDIK_CLUSTER__SHARDING__LEASE_RETRY_INTERVAL",
            "500ms".into(),
        ),
        // Short leases: a downed side's leases lapse within seconds, not the default two
        // minutes (renewal every second, each call bounded by a second: 1 + 2 × 1 < 6).
        (
            "SHARDIK_COORDINATION__LEASE__HEARTBEAT_TIMEOUT",
            "6s".into(),
        ),
        (
            "SHARDIK_COORDINATION__LEASE__HEARTBEAT_INTERVAL",
            "1s".into(),
        ),
        (
            "SHARDIK_COORDINATION__LEASE__LEASE_OPERATION_TIMEOUT",
            "1s".into(),
        ),
    ]
}

fn use_lease() -> String {
    std::env::var("SHARDIK_TEST_NETNS_USE_LEASE").unwrap_or_else(|_| USE_LEASE.to_string())
}

/// Writes a line to the real stderr, past the test harness's capture: a skip's reason and the
/// summary belong in CI's log even when the test passes.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of the nodes' reports.
fn monotonic_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// A fresh database on the test server, and the relay through which the namespaces reach it:
/// the nodes' store URL names the relay instead of the server's loopback address.
fn relayed_store(lab: &Lab) -> (Relay, String) {
    let url = fresh_postgres_database("netns");
    // postgres://USER@HOST:PORT/DB
    let (scheme_user, rest) = url.split_once('@').expect("a postgres URL has USER@");
    let (server, db) = rest.split_once('/').expect("a postgres URL ends in /DB");
    let target: SocketAddr = server
        .parse()
        .unwrap_or_else(|e| panic!("the test server {server} is not IP:PORT: {e}"));
    let relay = Relay::start(SocketAddr::new(lab.host_addr.into(), 0), target)
        .unwrap_or_else(|e| panic!("cannot start the relay on {}: {e}", lab.host_addr));
    let store = format!("{scheme_user}@{}/{db}", relay.addr());
    (relay, store)
}

/// How node `i` is started (`generation` tells a restarted process from the first).
fn spec(lab: &Lab, i: usize, generation: usize, store: &str, use_lease: &str) -> NodeSpec {
    let seeds: Vec<String> = [0, 1]
        .iter()
        .map(|&s| format!("{}:{CLUSTER_PORT}", lab.nodes[s].addr))
        .collect();
    let net = &lab.nodes[i];
    let mut spec = NodeSpec::new(&format!("n{i}-{generation}"), &seeds)
        .in_netns(&net.netns)
        .arg("--demo-counters")
        .arg("--store")
        .arg(store);
    spec.bind = format!("{}:{CLUSTER_PORT}", net.addr);
    spec.management = format!("{}:{MANAGEMENT_PORT}", net.addr);
    for (k, v) in SHARDING {
        spec = spec.env(k, v);
    }
    for (k, v) in lease_settings(use_lease) {
        spec = spec.env(k, &v);
    }
    // The management API listens beyond loopback here: the increments are state-changing
    // requests, which need writes enabled and the bearer token.
    spec.env(WRITES_ENABLED.0, WRITES_ENABLED.1).env(
        "SHARDIK_MANAGEMENT__HTTP__AUTH_TOKEN_FILE",
        &token_file().display().to_string(),
    )
}

/// The management API's bearer token in these tests.
const TOKEN: &str = "netns-partition-test-token";

/// A file holding [`TOKEN`], written once per test process.
fn token_file() -> std::path::PathBuf {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("shardik-netns-token-{}", std::process::id()));
        std::fs::write(&path, TOKEN).expect("write the token file");
        path
    })
    .clone()
}

/// What the clients and the pollers share.
struct Shared {
    books: Mutex<Books>,
    liveness: Mutex<Liveness>,
    /// Increments acknowledged through each node's address.
    acked_via: Vec<AtomicU64>,
    stop: AtomicBool,
}

impl Shared {
    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn liveness(&self) -> std::sync::MutexGuard<'_, Liveness> {
        self.liveness.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acked_via(&self, nodes: &[usize]) -> u64 {
        nodes
            .iter()
            .map(|&k| self.acked_via[k].load(Ordering::Relaxed))
            .sum()
    }
}

async fn post_increment(
    http: &reqwest::Client,
    management: &str,
    counter: usize,
) -> Result<u64, String> {
    let resp = http
        .post(format!(
            "http://{management}/demo/counter/c{counter}/increment"
        ))
        .bearer_auth(TOKEN)
        // The node's own ask gives up after 5 s.
        .timeout(Duration::from_secs(6))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("{status} {body}"));
    }
    body["value"]
        .as_u64()
        .ok_or_else(|| format!("no value in {body}"))
}

async fn read_counter(
    http: &reqwest::Client,
    management: &str,
    counter: usize,
) -> Result<u64, String> {
    let resp = http
        .get(format!("http://{management}/demo/counter/c{counter}"))
        .timeout(Duration::from_secs(6))
        .send()
        .await
        .map_err(|e| format!("c{counter} via {management}: {e}"))?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("c{counter} via {management}: {status} {body}"));
    }
    body["value"]
        .as_u64()
        .ok_or_else(|| format!("no value in {body}"))
}

/// One client lane: an increment of `counter` through node `via` every [`LANE_PERIOD`], one
/// at a time, until told to stop.
async fn lane(
    shared: Arc<Shared>,
    http: reqwest::Client,
    managements: Arc<Vec<String>>,
    counter: usize,
    via: usize,
    offset: Duration,
) {
    let mut next = tokio::time::Instant::now() + offset;
    loop {
        tokio::time::sleep_until(next).await;
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let sent = shared.books().send(counter);
        match post_increment(&http, &managements[via], counter).await {
            Ok(value) => {
                shared
                    .books()
                    .acked(sent, value, &format!("n{via} ({})", managements[via]));
                shared.acked_via[via].fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => shared.books().unanswered(sent),
        }
        // Steady, not bursty: after a slow answer the lane goes on from now.
        next = (next + LANE_PERIOD).max(tokio::time::Instant::now());
    }
}

/// Asks node `via` which counters it runs, every [`LIVE_POLL`], until told to stop.
async fn poller(
    shared: Arc<Shared>,
    http: reqwest::Client,
    management: String,
    errors: Arc<AtomicU64>,
) {
    while !shared.stop.load(Ordering::Relaxed) {
        let report = async {
            let v: Value = http
                .get(format!("http://{management}/demo/counters/live"))
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            Report::parse(&v)
        }
        .await;
        match report {
            Ok(r) => shared.liveness().record(r),
            // A node that is gone or not up yet: nothing to learn.
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(LIVE_POLL).await;
    }
}

/// The uid of the newest process at the cluster address `addr` that reported, if any.
fn current_uid(shared: &Shared, addr: &str) -> Option<String> {
    shared.liveness().uids_at(addr).pop()
}

/// Reads every counter, counter `i` through `vias[i % vias.len()]`, all at once, again and
/// again until each has answered once (bounded); returns the values.
async fn read_all_counters(
    http: &reqwest::Client,
    vias: &[String],
    nodes: &mut [Node],
    what: &str,
) -> Vec<u64> {
    let mut values: Vec<Option<u64>> = vec![None; COUNTERS];
    let start = Instant::now();
    loop {
        let mut reads = tokio::task::JoinSet::new();
        for (i, _) in values.iter().enumerate().filter(|(_, v)| v.is_none()) {
            let (http, via) = (http.clone(), vias[i % vias.len()].clone());
            reads.spawn(async move { (i, read_counter(&http, &via, i).await) });
        }
        let mut last_error = String::new();
        while let Some(done) = reads.join_next().await {
            match done.expect("a read task panicked") {
                (i, Ok(v)) => values[i] = Some(v),
                (_, Err(e)) => last_error = e,
            }
        }
        if values.iter().all(Option::is_some) {
            return values.into_iter().flatten().collect();
        }
        if start.elapsed() >= BOUND {
            let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
            panic!(
                "timed out after {BOUND:?} waiting until {what}; last: {last_error}\n{}",
                reports(&mut refs)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` until it holds or [`BOUND`] passes; then panics with what was last wrong
/// and the nodes' reports.
async fn wait_for<T>(
    what: &str,
    nodes: &mut [Node],
    mut check: impl FnMut(&mut [Node]) -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        let last = match check(nodes) {
            Ok(t) => return t,
            Err(e) => e,
        };
        if start.elapsed() >= BOUND {
            let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
            panic!(
                "timed out after {BOUND:?} waiting until {what}; last: {last}\n{}",
                reports(&mut refs)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One lab at a time: each test runs five nodes under load, and two at once on two cores
/// would measure the machine rather than the cluster.
static ONE_LAB_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_two_split_under_load_never_runs_a_counter_on_both_sides() {
    split_under_load(&[0, 1, 2], &[3, 4], None).await;
}

/// One node cut off from its peers but not from the store (it keeps renewing its leases):
/// its counters stay where they are until the resolver decides, which it does no sooner than
/// `stable-after` after the cut. Here that is the shipped 20 s, well past the 6 s in which a
/// silent node's leases lapse: moving them on the lease takeover's word would be seconds
/// earlier, and wrong, since the node still serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_cut_off_from_its_peers_but_not_the_store_keeps_its_counters_until_downed() {
    const STABLE_AFTER: Duration = Duration::from_secs(20);
    let (split_mono, first_takeover) =
        split_under_load(&[0, 1, 2, 3], &[4], Some(STABLE_AFTER)).await;
    let Some(first_takeover) = first_takeover else {
        return; // skipped: no network namespaces here (said so)
    };
    let after = Duration::from_nanos(first_takeover.saturating_sub(split_mono));
    assert!(
        after >= STABLE_AFTER,
        "a counter of the cut-off node started elsewhere {after:.1?} after the cut, before \
         the resolver could have decided ({STABLE_AFTER:?})"
    );
}

/// Five nodes under load, split into `majority` and `minority` (the path to the store stays
/// up), healed, restarted: every verdict of the module's doc. `stable_after` replaces the
/// tests' short resolver wait. Returns the split's moment and the first moment the majority
/// ran a counter taken from the minority, on the nodes' monotonic clock (`None` when
/// skipped).
async fn split_under_load(
    majority: &[usize],
    minority: &[usize],
    stable_after: Option<Duration>,
) -> (u64, Option<u64>) {
    let _one_lab = ONE_LAB_AT_A_TIME.lock().await;
    // Declared first, dropped last: the nodes die before their namespaces go.
    let mut lab = match Lab::create(NODES) {
        Ok(lab) => lab,
        Err(LabError::CannotCreateNamespaces(why)) => {
            say(&format!(
                "SKIPPED netns_partition: this machine cannot create network namespaces \
                 (it needs root and iproute2's `ip`): {why}"
            ));
            return (0, None);
        }
        Err(LabError::Failed(why)) => panic!("building the test network failed: {why}"),
    };
    let (relay, store) = relayed_store(&lab);
    let use_lease = use_lease();
    say(&format!(
        "netns_partition: namespaces {}-*, store {store} (relay {} -> PostgreSQL), \
         use-lease {:?}",
        lab.prefix(),
        relay.addr(),
        use_lease
    ));

    let test_start = Instant::now();
    let http = client();
    let spec = |lab: &Lab, i: usize, generation: usize| {
        let spec = spec(lab, i, generation, &store, &use_lease);
        match stable_after {
            Some(d) => spec.env(
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER",
                &format!("{}ms", d.as_millis()),
            ),
            None => spec,
        }
    };
    let mut nodes: Vec<Node> = (0..NODES).map(|i| Node::spawn(spec(&lab, i, 0))).collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let managements: Arc<Vec<String>> =
        Arc::new(nodes.iter().map(|n| n.spec.management.clone()).collect());
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        let expected: Vec<&str> = addrs.iter().map(String::as_str).collect();
        wait_all_up(&http, &mut refs, &expected).await;
    }
    let formed = test_start.elapsed();

    let shared = Arc::new(Shared {
        books: Mutex::new(Books::new(COUNTERS)),
        liveness: Mutex::new(Liveness::default()),
        acked_via: (0..NODES).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    let poll_errors = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for m in managements.iter() {
        tasks.spawn(poller(
            Arc::clone(&shared),
            http.clone(),
            m.clone(),
            Arc::clone(&poll_errors),
        ));
    }
    // Lanes start spread over one period, so the load is steady rather than in waves.
    let lanes = (COUNTERS * NODES) as u32;
    for counter in 0..COUNTERS {
        for via in 0..NODES {
            let nth = (counter * NODES + via) as u32;
            tasks.spawn(lane(
                Arc::clone(&shared),
                http.clone(),
                Arc::clone(&managements),
                counter,
                via,
                LANE_PERIOD * nth / lanes,
            ));
        }
    }

    // Warm up: every counter answered, and the minority runs some of them.
    wait_for("every counter has answered twice", &mut nodes, |_| {
        let books = shared.books();
        match (0..COUNTERS).find(|&i| books.counts(i).acked < 2) {
            None => Ok(()),
            Some(i) => Err(format!("c{i}: {:?}", books.counts(i))),
        }
    })
    .await;
    let minority_uids: Vec<String> = wait_for("the minority runs counters", &mut nodes, |_| {
        let uids: Vec<String> = minority
            .iter()
            .filter_map(|&k| current_uid(&shared, &addrs[k]))
            .collect();
        let running: usize = uids
            .iter()
            .map(|u| shared.liveness().live_on(u).len())
            .sum();
        if uids.len() == minority.len() && running > 0 {
            Ok(uids)
        } else {
            Err(format!("minority uids {uids:?} run {running} counters"))
        }
    })
    .await;
    let on_minority: Vec<String> = minority_uids
        .iter()
        .flat_map(|u| shared.liveness().live_on(u))
        .collect();

    // The split.
    let acked_minority_before = shared.acked_via(minority);
    let split_at = Instant::now();
    let split_mono = monotonic_nanos();
    lab.partition(majority, minority)
        .unwrap_or_else(|e| panic!("cannot cut the links: {e}"));
    say(&format!(
        "netns_partition: split {majority:?} | {minority:?} at {:.1} s; the minority ran {} \
         counters",
        test_start.elapsed().as_secs_f64(),
        on_minority.len()
    ));

    // The minority downs itself: its processes exit, with 3 (downed).
    let mut exited_after = [None; NODES];
    wait_for("the minority's processes exit", &mut nodes, |nodes| {
        for &k in minority {
            if exited_after[k].is_none() && nodes[k].exited().is_some() {
                exited_after[k] = Some(split_at.elapsed());
            }
        }
        for &k in majority {
            if let Some(status) = nodes[k].exited() {
                return Err(format!("majority node n{k} exited: {status}"));
            }
        }
        if minority.iter().all(|&k| exited_after[k].is_some()) {
            Ok(())
        } else {
            Err(format!("exited after the split: {exited_after:?}"))
        }
    })
    .await;
    for &k in minority {
        let status = nodes[k].exited().expect("exited");
        assert_eq!(
            status.code(),
            Some(3),
            "n{k} exits with 3, downed by the cluster\n{}",
            nodes[k].report()
        );
    }
    let acked_minority_during_split = shared.acked_via(minority) - acked_minority_before;

    // The majority sees only itself, and serves every counter.
    let majority_addrs: Vec<&str> = majority.iter().map(|&k| addrs[k].as_str()).collect();
    {
        let mut refs: Vec<&mut Node> = nodes
            .iter_mut()
            .enumerate()
            .filter(|(k, _)| majority.contains(k))
            .map(|(_, n)| n)
            .collect();
        wait_all_up(&http, &mut refs, &majority_addrs).await;
    }
    let majority_alone_after = split_at.elapsed();
    let vias: Vec<String> = majority.iter().map(|&k| managements[k].clone()).collect();
    read_all_counters(
        &http,
        &vias,
        &mut nodes,
        "the majority serves every counter",
    )
    .await;
    let majority_serves_all_after = split_at.elapsed();

    // The heal: links back, the downed nodes restarted on their addresses.
    lab.heal()
        .unwrap_or_else(|e| panic!("cannot restore the links: {e}"));
    let healed_at = Instant::now();
    for &k in minority {
        nodes[k] = Node::spawn(spec(&lab, k, 1));
    }
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        let expected: Vec<&str> = addrs.iter().map(String::as_str).collect();
        wait_all_up(&http, &mut refs, &expected).await;
    }
    let whole_after = healed_at.elapsed();
    // Shards come back to the restarted nodes (rebalance), under load.
    wait_for("the restarted nodes run counters again", &mut nodes, |_| {
        let running: usize = minority
            .iter()
            .filter_map(|&k| current_uid(&shared, &addrs[k]))
            .filter(|u| !minority_uids.contains(u))
            .map(|u| shared.liveness().live_on(&u).len())
            .sum();
        if running > 0 {
            Ok(())
        } else {
            Err("no counter runs on a restarted node".to_string())
        }
    })
    .await;
    let rebalanced_after = healed_at.elapsed();
    // Two more increments acknowledged for every counter with everyone back.
    let acked_at_rebalance: Vec<u64> = (0..COUNTERS)
        .map(|i| shared.books().counts(i).acked)
        .collect();
    wait_for("every counter counts on after the heal", &mut nodes, |_| {
        let books = shared.books();
        match (0..COUNTERS).find(|&i| books.counts(i).acked < acked_at_rebalance[i] + 2) {
            None => Ok(()),
            Some(i) => Err(format!("c{i}: {:?}", books.counts(i))),
        }
    })
    .await;

    // Stop the load; every increment in flight is settled before the final reads.
    shared.stop.store(true, Ordering::Relaxed);
    while let Some(done) = tasks.join_next().await {
        done.expect("a client task panicked");
    }
    let values = read_all_counters(
        &http,
        &managements,
        &mut nodes,
        "every counter is readable after the heal",
    )
    .await;
    let books = shared.books();
    let liveness = shared.liveness();
    let overlaps = liveness.overlaps();
    let moves = liveness.moves();
    // Moves away from the minority's processes across the split.
    let away: Vec<&liveness::Move> = moves
        .iter()
        .filter(|m| minority_uids.contains(&m.from.node_uid) && m.to.started > split_mono)
        .collect();
    let closest = away.iter().map(|m| m.gap_ns).min();
    // Seconds after the split, on the nodes' clock.
    let after_split = |t: Option<u64>| {
        t.map_or("-".to_string(), |t| {
            format!(
                "{:.2} s",
                (i128::from(t) - i128::from(split_mono)) as f64 / 1e9
            )
        })
    };
    let minority_timeline: Vec<String> = minority_uids
        .iter()
        .map(|u| {
            format!(
                "uid {u} last ran a counter at {}, last answered at {}",
                after_split(liveness.last_running(u)),
                after_split(liveness.last_report(u))
            )
        })
        .collect();
    let first_takeover = away.iter().map(|m| m.to.started).min();
    let summary = format!(
        "netns_partition summary (use-lease {use_lease:?}): cluster formed in {formed:.1?}; \
         split after {:.1?}; minority exited {} after the split ({}); first counter \
         taken over by the majority at {}; majority alone after {majority_alone_after:.1?}, serving every counter after \
         {majority_serves_all_after:.1?}; whole again {whole_after:.1?} after the heal, \
         rebalanced after {rebalanced_after:.1?}; {} increments acknowledged ({} during the \
         split through the minority), {} unanswered; {} liveness reports ({} failed polls); \
         {} counters moved off the minority, the closest handover {} ms apart; {} overlaps; \
         total {:.1?}",
        split_at - test_start,
        minority
            .iter()
            .map(|&k| format!("{:.1?}", exited_after[k].expect("exited")))
            .collect::<Vec<_>>()
            .join(" / "),
        minority_timeline.join("; "),
        after_split(first_takeover),
        books.total_acked(),
        acked_minority_during_split,
        books.total_unanswered(),
        liveness.reports(),
        poll_errors.load(Ordering::Relaxed),
        away.len(),
        closest.map_or("-".to_string(), |g| format!("{:.1}", g as f64 / 1e6)),
        overlaps.len(),
        test_start.elapsed(),
    );
    say(&summary);

    // The verdicts.
    let overlap_text: Vec<String> = overlaps.iter().map(ToString::to_string).collect();
    assert!(
        overlaps.is_empty(),
        "counters live on two nodes at once:\n{}\n{summary}",
        overlap_text.join("\n")
    );
    assert!(
        books.breaches().is_empty(),
        "impossible answers:\n{}\n{summary}",
        books.breaches().join("\n")
    );
    let wrong: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| books.check_final(i, *v).err())
        .collect();
    assert!(
        wrong.is_empty(),
        "final values:\n{}\n{summary}",
        wrong.join("\n")
    );
    assert!(
        acked_minority_during_split > 0,
        "the minority acknowledged nothing during the split: both sides were not live, the \
         test proved little\n{summary}"
    );
    assert!(
        !away.is_empty(),
        "no counter was seen moving from the minority to the majority\n{summary}"
    );
    drop((books, liveness));
    drop(nodes);
    drop(relay);
    (split_mono, first_takeover)
}
