//! `shardik demo`: a local cluster of real node processes, narrated.
//!
//! Starts three `shardik node` processes on free loopback ports, prints each membership change
//! as the first node sees it, kills one with SIGKILL and shows it become unreachable, downed by
//! the split-brain resolver and removed, starts a replacement that joins, and stops everything
//! with SIGTERM (graceful leave). Timeouts are shortened through environment overrides so the
//! whole run takes well under a minute; `--simulated` runs the same story in the simulator.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
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
];

struct DemoNode {
    name: String,
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
    tx: &mpsc::Sender<Seen>,
) -> anyhow::Result<DemoNode> {
    let exe = std::env::current_exe().context("cannot find the shardik executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("node")
        .arg("--bind")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--management")
        .arg(format!("127.0.0.1:{mgmt}"));
    for s in seeds {
        cmd.arg("--seed").arg(format!("127.0.0.1:{s}"));
    }
    cmd.envs(FAST.iter().copied())
        .env("SHARDIK_LOGGING__FORMAT", "json")
        .env("SHARDIK_LOGGING__LEVEL", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
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
    Ok(DemoNode { name, child })
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
                        println!(
                            "{:>6.2}s  {}  {}",
                            self.start.elapsed().as_secs_f64(),
                            seen.node,
                            seen.text
                        );
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
        nodes.push(spawn_node(*port, mgmt[i], &seeds, &tx)?);
    }
    let third = nodes[2].name.clone();
    narrator.wait_for(&format!("member {third} is Up"), Duration::from_secs(30))?;
    println!("\n-> the cluster is formed. Now {third} is killed with SIGKILL.\n");
    let mut victim = nodes.pop().context("three nodes")?;
    let _ = victim.child.kill();
    let _ = victim.child.wait();
    narrator.wait_for(
        &format!("member {third} is Removed"),
        Duration::from_secs(40),
    )?;
    println!(
        "\n-> {third} was detected, downed by the split-brain resolver (keep-majority) and removed."
    );
    println!("   A replacement starts on the same address (a new incarnation).\n");
    nodes.push(spawn_node(ports[2], mgmt[3], &seeds, &tx)?);
    narrator.wait_for(&format!("member {third} is Up"), Duration::from_secs(30))?;
    println!("\n-> the replacement is Up. Now every node leaves gracefully (SIGTERM).\n");
    // The newest first, so that the observer narrates their leaving before it leaves itself.
    let mut codes = Vec::new();
    for node in nodes.iter_mut().rev() {
        sigterm(node);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = node.child.try_wait()? {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(seen) = narrator.rx.try_recv() {
            if seen.node == narrator.observer {
                println!(
                    "{:>6.2}s  {}  {}",
                    narrator.start.elapsed().as_secs_f64(),
                    seen.node,
                    seen.text
                );
            }
        }
        let code = status.and_then(|s| s.code());
        println!(
            "          {} exited with {}",
            node.name,
            code.map_or("no status (killed)".into(), |c| c.to_string())
        );
        codes.push(code);
    }
    let clean = codes.iter().all(|c| *c == Some(0));
    println!(
        "\nDone in {:.1}s: formed, lost a node, healed, and left gracefully ({}).",
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
