//! The cluster singleton and the sharded daemon process on real nodes in one process, over
//! loopback TCP: where they run, that they start without a user message, and that they move
//! when a node leaves.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use common::{fast_membership, free_port};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_core::membership::{Address, MemberStatus, MembershipConfig};
use shardik_runtime::node::{self, NodeOptions, RunningNode, StopRequest};
use shardik_runtime::sharding::{
    ClusterSingleton, DaemonSettings, Entity, EntityContext, ManagedInitError, ReplyTo,
    ShardedDaemonProcess, Sharding, ShardingConfig, SingletonRef, SingletonSettings,
};
use shardik_runtime::transport::TransportConfig;

fn membership() -> MembershipConfig {
    fast_membership("singleton-test", &[])
}

fn sharding_config() -> ShardingConfig {
    let mut c = ShardingConfig {
        down_removal_margin: Duration::from_secs(1),
        shutdown_timeout: Duration::from_secs(20),
        ..ShardingConfig::default()
    };
    c.region.retry_interval = Duration::from_millis(200);
    c.coordinator.rebalance_interval = Duration::from_millis(500);
    c
}

struct TestNode {
    running: RunningNode,
    sharding: Sharding,
}

impl TestNode {
    fn address(&self) -> String {
        self.running.self_node.address.to_string()
    }
}

/// Starts the nodes one after the other (so their ages are their order) and waits until all
/// are Up.
async fn cluster(n: usize) -> Vec<TestNode> {
    cluster_with_roles(&vec![&[][..]; n]).await
}

/// As [`cluster`], one node per entry of `roles`, with those roles.
async fn cluster_with_roles(roles: &[&[&str]]) -> Vec<TestNode> {
    let ports: Vec<u16> = roles.iter().map(|_| free_port()).collect();
    let mut nodes = Vec::new();
    for (&port, node_roles) in ports.iter().zip(roles) {
        let roles: BTreeSet<String> = node_roles.iter().map(|r| r.to_string()).collect();
        let running = node::start(NodeOptions {
            bind: Address::new("127.0.0.1", port),
            advertise: None,
            seeds: vec![Address::new("127.0.0.1", ports[0])],
            membership: MembershipConfig {
                roles: roles.clone(),
                ..membership()
            },
            transport: TransportConfig::default(),
            leave_timeout: Duration::from_secs(20),
        })
        .await
        .expect("node starts");
        let config = ShardingConfig {
            self_roles: roles,
            ..sharding_config()
        };
        let sharding = Sharding::start(&running, config).expect("sharding starts");
        nodes.push(TestNode { running, sharding });
        let up = nodes.len();
        eventually("the new node is Up everywhere", || {
            nodes.iter().all(|t| {
                t.running
                    .handle
                    .snapshot()
                    .members
                    .iter()
                    .filter(|m| m.status == MemberStatus::Up)
                    .count()
                    == up
            })
        })
        .await;
    }
    nodes
}

/// Waits up to 30 s for `cond`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the test singleton is told.
#[derive(Debug, Serialize, Deserialize)]
enum LogCommand {
    Record(u64),
    /// Answers the node that runs the singleton.
    Where(ReplyTo<String>),
}

/// A singleton that appends what it is told to a log shared by the whole test (all nodes run
/// in this process), with the node that handled it.
struct Logger {
    node: String,
    log: Arc<Mutex<Vec<(u64, String)>>>,
}

impl Entity for Logger {
    type Command = LogCommand;

    async fn handle(&mut self, cmd: LogCommand, _: &mut EntityContext<Self>) {
        match cmd {
            LogCommand::Record(n) => self.log.lock().unwrap().push((n, self.node.clone())),
            LogCommand::Where(reply_to) => reply_to.send(self.node.clone()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_singleton_runs_on_the_oldest_and_moves_to_the_next_oldest_losing_nothing() {
    let nodes = cluster(3).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let starts = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut refs: Vec<SingletonRef<Logger>> = Vec::new();
    // The youngest registers first, so a naive "first region that asks" placement would pick
    // it.
    for n in nodes.iter().rev() {
        let (node, log, starts) = (n.address(), Arc::clone(&log), Arc::clone(&starts));
        let settings =
            SingletonSettings::new("logger").with_keep_alive_interval(Duration::from_millis(300));
        let r = ClusterSingleton::init(&n.sharding, settings, move || {
            starts.lock().unwrap().push(node.clone());
            Logger {
                node: node.clone(),
                log: Arc::clone(&log),
            }
        })
        .expect("singleton registers");
        refs.push(r);
    }
    refs.reverse();
    let (oldest, next) = (nodes[0].address(), nodes[1].address());

    // Started by the keep-alive alone, on the oldest node.
    eventually("the singleton starts without a user message", || {
        !starts.lock().unwrap().is_empty()
    })
    .await;
    for r in &refs {
        let home = r
            .ask(LogCommand::Where, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(home, oldest, "the singleton lives on the oldest node");
    }
    assert_eq!(*starts.lock().unwrap(), vec![oldest.clone()]);

    // The oldest leaves while the youngest keeps telling the singleton; every message arrives.
    const N: u64 = 200;
    let sender = refs[2].clone();
    let sending = tokio::spawn(async move {
        for i in 0..N {
            sender.tell(LogCommand::Record(i)).await.expect("sent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes[0]
        .running
        .stop
        .send(StopRequest::Leave)
        .await
        .expect("leave requested");
    sending.await.expect("sender finished");
    eventually("every message was handled", || {
        log.lock().unwrap().len() >= N as usize
    })
    .await;
    let log = log.lock().unwrap().clone();
    let numbers: Vec<u64> = log.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        numbers,
        (0..N).collect::<Vec<_>>(),
        "all delivered, once each, in order"
    );
    let homes: BTreeSet<&String> = log.iter().map(|(_, node)| node).collect();
    assert!(
        homes.contains(&next),
        "the singleton moved to the next oldest: {homes:?}"
    );
    assert!(homes.iter().all(|h| **h == oldest || **h == next));
    let home = refs[2]
        .ask(LogCommand::Where, Duration::from_secs(10))
        .await
        .expect("answered");
    assert_eq!(home, next);
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts, [oldest, next], "one incarnation per home");
}

/// With a role, the singleton runs on the oldest member that has it; the others, the oldest
/// node included, reach it through their proxies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_singleton_runs_on_the_oldest_member_with_its_role() {
    let nodes = cluster_with_roles(&[&[], &["backend"], &["backend"]]).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut refs = Vec::new();
    for n in &nodes {
        let (node, log) = (n.address(), Arc::clone(&log));
        let settings = SingletonSettings::new("logger")
            .with_role("backend")
            .with_keep_alive_interval(Duration::from_millis(300));
        refs.push(
            ClusterSingleton::init(&n.sharding, settings, move || Logger {
                node: node.clone(),
                log: Arc::clone(&log),
            })
            .expect("singleton registers"),
        );
    }
    for (i, r) in refs.iter().enumerate() {
        r.tell(LogCommand::Record(i as u64)).await.expect("sent");
        let home = r
            .ask(LogCommand::Where, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(home, nodes[1].address(), "the oldest with the role");
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        [0, 1, 2],
        "told from every node, the proxy included"
    );
}

/// The incarnations of the daemon's workers now alive: incarnation number → (index, node).
type Live = Arc<Mutex<BTreeMap<u64, (u32, String)>>>;

/// A worker that is listed in [`Live`] from its creation until it is dropped.
struct Worker {
    index: u32,
    incarnation: u64,
    live: Live,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.live.lock().unwrap().remove(&self.incarnation);
    }
}

/// Asks a worker its index.
#[derive(Debug, Serialize, Deserialize)]
struct WhichIndex(ReplyTo<u32>);

impl Entity for Worker {
    type Command = WhichIndex;

    async fn handle(&mut self, WhichIndex(reply_to): WhichIndex, _: &mut EntityContext<Self>) {
        reply_to.send(self.index);
    }
}

/// Which node runs each worker, if every worker runs exactly once.
fn placement(live: &Live, workers: u32) -> Option<BTreeMap<u32, String>> {
    let live = live.lock().unwrap();
    let by_index: BTreeMap<u32, String> = live.values().cloned().collect();
    (live.len() == workers as usize && by_index.len() == workers as usize).then_some(by_index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_workers_spread_and_restart_on_the_survivors_without_messages() {
    const WORKERS: u32 = 4;
    let nodes = cluster(3).await;
    let live: Live = Arc::default();
    let next_incarnation = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut daemons = Vec::new();
    for n in &nodes {
        let (node, live, next) = (
            n.address(),
            Arc::clone(&live),
            Arc::clone(&next_incarnation),
        );
        let settings = DaemonSettings::new("workers", WORKERS)
            .with_keep_alive_interval(Duration::from_millis(300));
        let d = ShardedDaemonProcess::init_with_settings(&n.sharding, settings, move |index| {
            let incarnation = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            live.lock()
                .unwrap()
                .insert(incarnation, (index, node.clone()));
            Worker {
                index,
                incarnation,
                live: Arc::clone(&live),
            }
        })
        .expect("daemon registers");
        daemons.push(d);
    }

    eventually("all workers run, once each, on more than one node", || {
        placement(&live, WORKERS).is_some_and(|p| p.values().collect::<BTreeSet<_>>().len() > 1)
    })
    .await;
    let before = placement(&live, WORKERS).expect("placed");

    // The busiest node other than the oldest (which also runs the coordinator) leaves.
    let leaving = (1..nodes.len())
        .max_by_key(|&i| {
            before
                .values()
                .filter(|n| **n == nodes[i].address())
                .count()
        })
        .expect("two candidates");
    let gone = nodes[leaving].address();
    assert!(before.values().any(|n| *n == gone), "it runs a worker");
    nodes[leaving]
        .running
        .stop
        .send(StopRequest::Leave)
        .await
        .expect("leave requested");

    eventually("every worker runs again, on the survivors only", || {
        placement(&live, WORKERS).is_some_and(|p| p.values().all(|n| *n != gone))
    })
    .await;
    let after = placement(&live, WORKERS).expect("placed");
    for (index, node) in &before {
        if *node != gone {
            assert_eq!(
                after[index], *node,
                "worker {index} on a survivor stayed put"
            );
        }
    }

    // Workers also answer commands, through any surviving node.
    let survivor = if leaving == 1 { 2 } else { 1 };
    for i in 0..WORKERS {
        let r = daemons[survivor].worker(i).expect("in range");
        assert_eq!(r.ask(WhichIndex, Duration::from_secs(10)).await, Ok(i));
    }
    assert!(daemons[0].worker(WORKERS).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_with_a_clear_error() {
    let nodes = cluster(1).await;
    let s = &nodes[0].sharding;
    assert!(matches!(
        ShardedDaemonProcess::init(s, "none", 0, |_| Worker {
            index: 0,
            incarnation: 0,
            live: Arc::default(),
        }),
        Err(ManagedInitError::NoWorkers)
    ));
    let zero = SingletonSettings::new("z").with_keep_alive_interval(Duration::ZERO);
    assert!(matches!(
        ClusterSingleton::init(s, zero, || Logger {
            node: String::new(),
            log: Arc::default(),
        }),
        Err(ManagedInitError::ZeroKeepAliveInterval)
    ));
    ClusterSingleton::init(s, SingletonSettings::new("twice"), || Logger {
        node: String::new(),
        log: Arc::default(),
    })
    .expect("first registration");
    assert!(matches!(
        ClusterSingleton::init(s, SingletonSettings::new("twice"), || Logger {
            node: String::new(),
            log: Arc::default(),
        }),
        Err(ManagedInitError::Init(_))
    ));
}
