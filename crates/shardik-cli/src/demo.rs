//! `shardik demo`: a local cluster of real node processes, narrated.
//!
//! Starts three `shardik node --demo-counters` processes on free loopback ports, sharing one
//! SQLite file in a temporary directory, prints each membership change as the first node sees
//! it, drives increments to a few thousand event-sourced `counter` entities through all nodes,
//! prints where the shards live, adds a fourth node and shows shards rebalancing to it, kills
//! one node with SIGKILL and shows its shards re-homed once it is downed and removed (the
//! counters it ran keep their values), kills every node and starts a new cluster on the same
//! file (every counter still has its value), starts a node with a reliable producer whose
//! increments to 300 `reliable-counter`s are in flight when it is killed with SIGKILL and
//! started again on its durable queue (every counter ends at exactly the increments accepted
//! for it), and stops everything with SIGTERM (hand-off, then graceful leave). Every answer is checked against the increments acknowledged before it; the
//! run ends with a summary of increments sent, answered, dropped (with reasons) and lost.
//! Timeouts are shortened through environment overrides so the whole run takes about a
//! minute; `--simulated` runs the membership story in the simulator.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

/// Arguments of `shardik demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Run the story in the deterministic simulator instead of real processes.
    #[arg(long)]
    simulated: bool,
    /// Seed of the simulated run.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Settings the demo shortens, so that detection and removal take seconds, not tens of seconds.
const FAST: &[(&str, &str)] = &[
    ("SHARDIK_CLUSTER__GOSSIP_INTERVAL", "300ms"),
    ("SHARDIK_CLUSTER__LEADER_ACTIONS_INTERVAL", "300ms"),
    (
        "SHARDIK_CLUSTER__UNREACHABLE_NODES_REAPER_INTERVAL",
        "300ms",
    ),
    ("SHARDIK_CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "100ms"),
    ("SHARDIK_CLUSTER__SEED_NODE_TIMEOUT", "2s"),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
        "300ms",
    ),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__ACCEPTABLE_HEARTBEAT_PAUSE",
        "1500ms",
    ),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__EXPECTED_RESPONSE_AFTER",
        "500ms",
    ),
    ("SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "3s"),
    ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "100"),
    ("SHARDIK_CLUSTER__SHARDING__REBALANCE_INTERVAL", "1s"),
    ("SHARDIK_CLUSTER__SHARDING__RETRY_INTERVAL", "500ms"),
    ("SHARDIK_CLUSTER__SHARDING__HANDOFF_TIMEOUT", "10s"),
];

/// Counters the demo drives.
const COUNTERS: usize = 3000;

/// How long the demo keeps asking for counters that did not answer a read-back.
const READ_BACK_LIMIT: Duration = Duration::from_secs(20);

struct DemoNode {
    name: String,
    mgmt: u16,
    child: Child,
}

impl Drop for DemoNode {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A line a node logged, already reduced to what the demo shows.
struct Seen {
    node: String,
    text: String,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(crate::ports::free_port()?)
}

fn spawn_node(
    port: u16,
    mgmt: u16,
    seeds: &[u16],
    store: &str,
    tx: &mpsc::Sender<Seen>,
    extra: &[&str],
) -> anyhow::Result<DemoNode> {
    let mut cmd = crate::counter_nodes::command(port, mgmt, seeds, store)?;
    cmd.envs(FAST.iter().copied()).args(extra);
    let mut child = cmd.spawn().context("cannot start a node process")?;
    let name = format!("127.0.0.1:{port}");
    let stderr = child.stderr.take().context("no stderr")?;
    let (tx, node) = (tx.clone(), name.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let fields = &v["fields"];
            let interesting = fields["event"].is_string() || v["level"] == "ERROR";
            if let (true, Some(text)) = (interesting, fields["message"].as_str()) {
                let _ = tx.send(Seen {
                    node: node.clone(),
                    text: text.to_string(),
                });
            }
        }
    });
    Ok(DemoNode { name, mgmt, child })
}

fn sigterm(node: &DemoNode) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(node.child.id().to_string())
        .status();
}

struct Narrator {
    start: Instant,
    rx: mpsc::Receiver<Seen>,
    observer: String,
}

impl Narrator {
    /// Prints what the observer node logs until a line contains `until`, or fails after `limit`.
    fn wait_for(&self, until: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(seen) => {
                    if seen.node == self.observer {
                        self.print(&seen);
                        if seen.text.contains(until) {
                            return Ok(());
                        }
                    }
                }
                Err(_) => {
                    bail!("waited {limit:?} for `{until}` without seeing it; the demo stops here")
                }
            }
        }
    }
}

impl Narrator {
    /// One line of the narration: time since the demo started, node, what it logged.
    fn print(&self, seen: &Seen) {
        println!(
            "{:>6.2}s  {}  {}",
            self.start.elapsed().as_secs_f64(),
            seen.node,
            seen.text
        );
    }

    /// Prints what the observer logged so far, without waiting.
    fn drain(&self) {
        while let Ok(seen) = self.rx.try_recv() {
            if seen.node == self.observer {
                self.print(&seen);
            }
        }
    }

    fn say(&self, text: &str) {
        println!("{:>6.2}s  {text}", self.start.elapsed().as_secs_f64());
    }
}

/// What the demo's traffic achieved.
/// What the demo's clients saw: every increment sent, answered or not, and whether every
/// answer counted all the increments acknowledged before it.
struct Tally {
    sent: u64,
    delivered: u64,
    failed: std::collections::BTreeMap<String, u64>,
    /// Per counter: increments acknowledged (answered 200).
    acked: Vec<u64>,
    /// Per counter: increments sent (an unanswered one may still have been applied).
    tried: Vec<u64>,
    /// Answers whose value was below the acknowledged count (an increment lost) or above the
    /// sent count (one applied twice).
    wrong: u64,
}

impl Tally {
    fn new() -> Self {
        Tally {
            sent: 0,
            delivered: 0,
            failed: Default::default(),
            acked: vec![0; COUNTERS],
            tried: vec![0; COUNTERS],
            wrong: 0,
        }
    }

    /// Checks an answered value of counter `i` against what its clients know.
    fn check(&mut self, i: usize, body: &str) {
        let value = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["value"].as_u64());
        match value {
            Some(v) if v >= self.acked[i] && v <= self.tried[i] => {}
            _ => self.wrong += 1,
        }
    }

    /// One increment of every counter, spread round-robin over `nodes`.
    fn round(&mut self, nodes: &[&DemoNode]) {
        for i in 0..COUNTERS {
            let node = nodes[i % nodes.len()];
            self.sent += 1;
            self.tried[i] += 1;
            match crate::mgmt_client::request(
                node.mgmt,
                "POST",
                &format!("/demo/counter/c{i}/increment"),
            ) {
                Some((200, body)) => {
                    self.delivered += 1;
                    self.acked[i] += 1;
                    self.check(i, &body);
                }
                Some((status, body)) => {
                    let why = crate::counter_nodes::refusal(status, &body);
                    *self.failed.entry(why).or_default() += 1;
                }
                None => *self.failed.entry("no HTTP answer".into()).or_default() += 1,
            }
        }
    }

    /// Reads every counter back through `nodes`, asking again, through the next node, each
    /// that did not answer, for at most [`READ_BACK_LIMIT`]: right after a full restart a
    /// shard's first request waits for its home and its entities' recovery, and may time
    /// out. Returns how many answered, and each that never did with its last answer.
    fn read_all(&mut self, nodes: &[&DemoNode]) -> (usize, Vec<(usize, String)>) {
        let started = Instant::now();
        let mut unanswered: Vec<(usize, String)> =
            (0..COUNTERS).map(|i| (i, String::new())).collect();
        let mut attempt = 0;
        while !unanswered.is_empty() && started.elapsed() < READ_BACK_LIMIT {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(200));
            }
            let mut still = Vec::new();
            for (i, _) in unanswered {
                let node = nodes[(i + attempt) % nodes.len()];
                match crate::mgmt_client::request(node.mgmt, "GET", &format!("/demo/counter/c{i}"))
                {
                    Some((200, body)) => self.check(i, &body),
                    Some((status, body)) => {
                        still.push((i, crate::counter_nodes::refusal(status, &body)));
                    }
                    None => still.push((i, "no HTTP answer".into())),
                }
            }
            unanswered = still;
            attempt += 1;
        }
        (COUNTERS - unanswered.len(), unanswered)
    }
}

/// Shards and entities of `counter` per node, from `GET /cluster/shards/counter`.
fn distribution(nodes: &[&DemoNode]) -> Vec<(String, usize, usize)> {
    nodes
        .iter()
        .map(|n| {
            let v = crate::mgmt_client::get_ok(n.mgmt, "/cluster/shards/counter")
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
            let regions = v
                .as_ref()
                .and_then(|v| v["regions"].as_array().cloned())
                .unwrap_or_default();
            let entities = regions
                .iter()
                .filter_map(|r| r["numEntities"].as_u64())
                .sum::<u64>() as usize;
            (n.name.clone(), regions.len(), entities)
        })
        .collect()
}

fn print_distribution(nodes: &[&DemoNode]) -> Vec<(String, usize, usize)> {
    let d = distribution(nodes);
    for (name, shards, entities) in &d {
        println!("          {name}: {shards:>3} shards, {entities:>5} counters");
    }
    d
}

/// Sum of `shardik_sharding_dropped_total` per reason over the nodes' metrics.
fn dropped_by_reason(nodes: &[&DemoNode]) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for n in nodes {
        let Some(text) = crate::mgmt_client::get_ok(n.mgmt, "/metrics") else {
            continue;
        };
        for line in text.lines() {
            if !line.starts_with("shardik_sharding_dropped_total{") {
                continue;
            }
            let reason = line
                .split("reason=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?")
                .to_string();
            let value = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0) as u64;
            *out.entry(reason).or_default() += value;
        }
    }
    out
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.simulated {
        return crate::demo_sim::run(args.seed);
    }
    println!("shardik demo: three real node processes on this machine, over TCP on loopback.");
    println!("Timeouts are shortened for the demo (environment overrides):");
    for (k, v) in FAST {
        println!("  {k}={v}");
    }
    let data = tempfile::tempdir().context("cannot make a temporary directory for the store")?;
    let store = format!("sqlite:{}", data.path().join("shardik.db").display());
    println!("Every node keeps its counters in one SQLite file: {store}");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let mgmt: Vec<u16> = (0..4).map(|_| free_port()).collect::<Result<_, _>>()?;
    let seeds = [ports[0], ports[1]];
    let (tx, rx) = mpsc::channel();
    let narrator = Narrator {
        start: Instant::now(),
        rx,
        observer: format!("127.0.0.1:{}", ports[0]),
    };
    println!("\nMembership changes as {} sees them:\n", narrator.observer);
    let mut nodes: Vec<DemoNode> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        nodes.push(spawn_node(*port, mgmt[i], &seeds, &store, &tx, &[])?);
    }
    let third = nodes[2].name.clone();
    narrator.wait_for(&format!("member {third} is Up"), Duration::from_secs(30))?;
    let mut tally = Tally::new();
    println!(
        "\n-> the cluster is formed. Incrementing {COUNTERS} counters, round-robin through all three nodes...\n"
    );
    {
        let live: Vec<&DemoNode> = nodes.iter().collect();
        tally.round(&live);
        narrator.drain();
        narrator.say(&format!(
            "{} increments answered; where the 100 shards of `counter` live:",
            tally.delivered
        ));
        print_distribution(&live);
    }

    println!("\n-> a fourth node joins; traffic goes on while shards rebalance to it.\n");
    let fourth_port = free_port()?;
    nodes.push(spawn_node(fourth_port, mgmt[3], &seeds, &store, &tx, &[])?);
    let fourth = nodes[3].name.clone();
    narrator.wait_for(&format!("member {fourth} is Up"), Duration::from_secs(30))?;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let live: Vec<&DemoNode> = nodes.iter().collect();
        tally.round(&live);
        let d = distribution(&live);
        let on_fourth = d.last().map_or(0, |x| x.1);
        narrator.say(&format!("{fourth} hosts {on_fourth} shards"));
        if on_fourth >= 20 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    narrator.say("after rebalancing:");
    print_distribution(&nodes.iter().collect::<Vec<_>>());

    println!(
        "\n-> {third} is killed with SIGKILL; its shards are re-homed once it is downed and removed.\n"
    );
    let mut victim = nodes.remove(2);
    let _ = victim.child.kill();
    let _ = victim.child.wait();
    narrator.wait_for(
        &format!("member {third} is Removed"),
        Duration::from_secs(40),
    )?;
    // Its shards move after the down-removal margin (the resolver's stable-after here).
    std::thread::sleep(Duration::from_secs(4));
    {
        let live: Vec<&DemoNode> = nodes.iter().collect();
        tally.round(&live);
        narrator.drain();
        narrator.say(&format!(
            "every counter answered again, counting on from its value ({} answers so far lost or doubled an increment); the shards now live on:",
            tally.wrong
        ));
        print_distribution(&live);
    }
    let mut dropped = dropped_by_reason(&nodes.iter().collect::<Vec<_>>());

    println!(
        "\n-> every node is killed with SIGKILL at once, and a new cluster of three starts on the same file.\n"
    );
    for node in nodes.iter_mut() {
        let _ = node.child.kill();
        let _ = node.child.wait();
    }
    nodes.clear();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let mgmt: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let seeds = [ports[0], ports[1]];
    let (tx, rx) = mpsc::channel();
    let narrator = Narrator {
        start: narrator.start,
        rx,
        observer: format!("127.0.0.1:{}", ports[0]),
    };
    for (i, port) in ports.iter().enumerate() {
        nodes.push(spawn_node(*port, mgmt[i], &seeds, &store, &tx, &[])?);
    }
    let last = nodes[2].name.clone();
    narrator.wait_for(&format!("member {last} is Up"), Duration::from_secs(30))?;
    {
        let live: Vec<&DemoNode> = nodes.iter().collect();
        let (answered, unanswered) = tally.read_all(&live);
        narrator.drain();
        narrator.say(&format!(
            "{answered} of {COUNTERS} counters read back after the restart, each recovered from its events and snapshots ({} answers so far lost or doubled an increment)",
            tally.wrong
        ));
        if !unanswered.is_empty() {
            let shown: Vec<String> = unanswered
                .iter()
                .take(5)
                .map(|(i, why)| format!("c{i} ({why})"))
                .collect();
            narrator.say(&format!(
                "{} did not answer within {READ_BACK_LIMIT:?}: {}{}",
                unanswered.len(),
                shown.join(", "),
                if unanswered.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            ));
        }
        tally.round(&live);
        narrator.say("and they count on:");
        print_distribution(&live);
        for (why, n) in dropped_by_reason(&live) {
            *dropped.entry(why).or_default() += n;
        }
    }

    let reliable_wrong = reliable_chapter(&narrator, &mut nodes, &seeds, &store, &tx)?;

    println!("\n-> every node hands off its shards and leaves gracefully (SIGTERM).\n");
    // The newest first, so that the observer narrates their leaving before it leaves itself.
    let mut codes = Vec::new();
    for node in nodes.iter_mut().rev() {
        sigterm(node);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = node.child.try_wait()? {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        narrator.drain();
        let code = status.and_then(|s| s.code());
        println!(
            "          {} exited with {}",
            node.name,
            code.map_or("no status (killed)".into(), |c| c.to_string())
        );
        codes.push(code);
    }
    let failed: u64 = tally.failed.values().sum();
    let reasons = tally
        .failed
        .iter()
        .map(|(why, n)| format!("{n} {why}"))
        .chain(
            dropped
                .iter()
                .map(|(why, n)| format!("{n} dropped inside the cluster ({why})")),
        )
        .collect::<Vec<_>>();
    println!(
        "\nSummary: {} increments sent, {} delivered and answered, {} not answered{}.",
        tally.sent,
        tally.delivered,
        failed,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(": {}", reasons.join("; "))
        }
    );
    println!(
        "Every answer counted every increment acknowledged before it, across a move, a SIGKILL and a full restart: {}.",
        if tally.wrong == 0 {
            "yes, none lost and none applied twice".to_string()
        } else {
            format!("NO, {} answers were wrong", tally.wrong)
        }
    );
    let clean = codes.iter().all(|c| *c == Some(0)) && tally.wrong == 0 && reliable_wrong == 0;
    println!(
        "\nDone in {:.1}s: formed, served, rebalanced, lost a node, re-homed its shards, restarted the whole cluster, delivered reliably through a producer's crash, and left gracefully ({}).",
        narrator.start.elapsed().as_secs_f64(),
        if clean {
            "every node exited with 0"
        } else {
            "some node did not exit cleanly"
        }
    );
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A fifth node runs a reliable producer (its queue in the same file) and hands increments to
/// the reliable counters; it is killed with SIGKILL while some are in flight and started again
/// on its queue, and every counter ends at exactly the increments accepted for it. Returns how
/// many counters did not.
fn reliable_chapter(
    narrator: &Narrator,
    nodes: &mut Vec<DemoNode>,
    seeds: &[u16],
    store: &str,
    tx: &mpsc::Sender<Seen>,
) -> anyhow::Result<usize> {
    use crate::demo_reliable::{
        RELIABLE_COUNTERS, burst, hand_over, mismatches, unconfirmed, wait_all_confirmed,
    };
    const PRODUCER: &[&str] = &["--demo-producer", "demo"];
    println!(
        "\n-> a node with a reliable producer joins (its queue in the same file) and hands increments \
         to {RELIABLE_COUNTERS} reliable counters; it is killed with SIGKILL while some are in flight, \
         and started again on its queue.\n"
    );
    let (port, mgmt) = (free_port()?, free_port()?);
    let mut producer = spawn_node(port, mgmt, seeds, store, tx, PRODUCER)?;
    narrator.wait_for(
        &format!("member {} is Up", producer.name),
        Duration::from_secs(30),
    )?;
    let mut accepted = vec![0u64; RELIABLE_COUNTERS];
    let first = hand_over(mgmt, &mut accepted) + burst(mgmt, &mut accepted);
    let in_flight = unconfirmed(mgmt).unwrap_or(0);
    let _ = producer.child.kill();
    let _ = producer.child.wait();
    narrator.drain();
    narrator.say(&format!(
        "{first} increments accepted (each stored in the producer's queue before it was accepted); \
         {} killed with {in_flight} of them not yet confirmed by their counters",
        producer.name
    ));
    let (port, mgmt) = (free_port()?, free_port()?);
    let producer = spawn_node(port, mgmt, seeds, store, tx, PRODUCER)?;
    narrator.wait_for(
        &format!("member {} is Up", producer.name),
        Duration::from_secs(30),
    )?;
    narrator.say(&format!(
        "the producer started again on {}: a new incarnation, sending again what was not confirmed",
        producer.name
    ));
    let second = hand_over(mgmt, &mut accepted);
    let confirmed = wait_all_confirmed(mgmt, Duration::from_secs(60));
    let reader = nodes.first().map_or(mgmt, |n| n.mgmt);
    let wrong = mismatches(reader, &accepted);
    narrator.drain();
    narrator.say(&format!(
        "{} more accepted; {}; {} of {RELIABLE_COUNTERS} reliable counters hold exactly the \
         increments accepted for them ({} in all: none lost, none applied twice){}",
        second,
        if confirmed {
            "every one confirmed"
        } else {
            "NOT every one confirmed within 60 s"
        },
        RELIABLE_COUNTERS - wrong.len(),
        first + second,
        match wrong.first() {
            None => String::new(),
            Some((i, v)) => format!("; e.g. r{i} holds {v:?}, accepted {}", accepted[*i]),
        }
    ));
    nodes.push(producer);
    Ok(wrong.len())
}
