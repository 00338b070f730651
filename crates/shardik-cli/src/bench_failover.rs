//! `shardik bench failover`: how long the entities of a crashed node take to answer again, phase
//! by phase.
//!
//! Each run starts `--nodes` processes of `shardik node --demo-counters` on loopback, all on one
//! store (a SQLite file in a temporary directory unless `--store` says otherwise), with every
//! setting as shipped except what `--set KEY=VALUE` overrides. It increments `--counters`
//! counters through all nodes, then SIGKILLs one node (the youngest, or with `--victim oldest`
//! the one that runs the coordinator) and asks each counter that node ran, from the survivors,
//! until every one has answered again. With `--silent` the node is frozen with SIGSTOP
//! instead: its process and port stay and it answers nothing, as a hung machine or a long
//! pause would, so no refused connection tells the survivors it is gone. It stays frozen until
//! the run ends.
//!
//! The timeline is read from the survivors' own logs (JSON lines with timestamps, on the same
//! clock as the bench) and from the clients, each phase as the first survivor to log it:
//!
//! | phase | what marks it |
//! |---|---|
//! | `detected` | a survivor logs the victim unreachable (failure detector) |
//! | `downed` | a survivor logs the victim Down (split-brain resolver's decision) |
//! | `removed` | a survivor logs the victim Removed (leader's removal) |
//! | `rehomed` | the coordinator logs that the victim's region is gone, its shards free for new homes (after the down-removal margin) |
//! | `first_served` | the first of the victim's counters answers a client again |
//! | `all_served` | the last of them does: the failover's total |
//!
//! Every answer is checked against the increments acknowledged before the kill: a counter must
//! count all of them and no more than were sent.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde_json::json;

/// Arguments of `shardik bench failover`.
#[derive(Args, Debug)]
pub struct FailoverArgs {
    /// Nodes in the cluster (one of them is killed).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Counters driven through the cluster.
    #[arg(long, default_value_t = 300)]
    counters: usize,
    /// Whole runs (a fresh cluster each); the summary gives the median of each phase.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// The store of the counters: `sqlite` (a file in a temporary directory, the default),
    /// or a URL as `shardik node --store` takes, of a store every node shares (a `memory:`
    /// store is one per process, and the nodes are processes: the first would refuse the
    /// others at join).
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// Which node is killed: the youngest (a plain member), or the oldest (it also runs the
    /// coordinator and the singletons).
    #[arg(long, value_enum, default_value_t = Victim::Youngest)]
    victim: Victim,
    /// A setting changed from its shipped default, as `KEY=VALUE` with the configuration's key
    /// (e.g. `cluster.split-brain-resolver.stable-after=5s`); repeatable. Passed to every node
    /// as its `SHARDIK_` environment variable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Freeze the victim with SIGSTOP instead of killing it: silent, not gone.
    #[arg(long)]
    silent: bool,
    /// Longest wait for the victim's counters to answer again, per run.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "180s")]
    limit: Duration,
    /// Keep every node's log in this directory, one file per run and node
    /// (`run1-node0.log`, node 0 the oldest), to read what happened in a run that was not
    /// served.
    #[arg(long, value_name = "DIR")]
    keep_logs: Option<std::path::PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// The node a run kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Victim {
    Youngest,
    Oldest,
}

/// The phases of one failover, each in milliseconds after the kill (`None`: not seen).
#[derive(Clone, Debug, Default)]
struct Timeline {
    detected: Option<f64>,
    downed: Option<f64>,
    removed: Option<f64>,
    rehomed: Option<f64>,
    first_served: Option<f64>,
    all_served: Option<f64>,
}

const PHASES: [&str; 6] = [
    "detected",
    "downed",
    "removed",
    "rehomed",
    "first_served",
    "all_served",
];

impl Timeline {
    fn phases(&self) -> [Option<f64>; 6] {
        [
            self.detected,
            self.downed,
            self.removed,
            self.rehomed,
            self.first_served,
            self.all_served,
        ]
    }
}

/// What one run measured.
struct RunResult {
    timeline: Timeline,
    /// Counters the victim ran when it was killed.
    victim_counters: usize,
    /// Answers after the kill that did not count every acknowledged increment, or counted
    /// more than were sent.
    wrong: u64,
    /// Requests to the victim's counters that failed before they answered again, by reason.
    failures: BTreeMap<String, u64>,
}

/// Converts `cluster.split-brain-resolver.stable-after=5s` into the node's environment
/// variable `SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER` and its value.
fn setting_to_env(setting: &str) -> anyhow::Result<(String, String)> {
    let Some((key, value)) = setting.split_once('=') else {
        bail!("--set {setting}: expected KEY=VALUE");
    };
    let key = key.trim();
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
    {
        bail!(
            "--set {setting}: the key must be a configuration key such as cluster.gossip-interval"
        );
    }
    let var = format!(
        "SHARDIK_{}",
        key.to_ascii_uppercase()
            .replace('.', "__")
            .replace('-', "_")
    );
    Ok((var, value.trim().to_string()))
}

/// One line a node logged, reduced to what the timeline needs.
#[derive(Clone, Debug)]
struct LogLine {
    node: String,
    at: SystemTime,
    event: Option<String>,
    member: Option<String>,
    status: Option<String>,
}

/// Reads a node's JSON log line; `None` for anything else.
fn parse_log_line(node: &str, line: &str) -> Option<LogLine> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let at = humantime::parse_rfc3339_weak(v["timestamp"].as_str()?).ok()?;
    let fields = &v["fields"];
    let text = |k: &str| fields[k].as_str().map(str::to_string);
    Some(LogLine {
        node: node.to_string(),
        at,
        event: text("event"),
        member: text("member"),
        status: text("status"),
    })
}

/// The phases the survivors logged about `victim` (its address), after `killed_at`.
fn logged_phases(lines: &[LogLine], victim: &str, killed_at: SystemTime) -> Timeline {
    let first = |matches: &dyn Fn(&LogLine) -> bool| {
        lines
            .iter()
            .filter(|l| l.node != victim && matches(l))
            .filter_map(|l| l.at.duration_since(killed_at).ok())
            .map(|d| d.as_secs_f64() * 1000.0)
            .reduce(f64::min)
    };
    let about = |l: &LogLine, event: &str, status: &str| {
        l.event.as_deref() == Some(event)
            && l.member.as_deref() == Some(victim)
            && l.status.as_deref() == Some(status)
    };
    Timeline {
        detected: first(&|l| about(l, "reachability", "Unreachable")),
        downed: first(&|l| about(l, "member", "Down")),
        removed: first(&|l| about(l, "member", "Removed")),
        rehomed: first(&|l| {
            l.event.as_deref() == Some("region-gone") && l.member.as_deref() == Some(victim)
        }),
        ..Timeline::default()
    }
}

/// A node process of a run.
struct BenchNode {
    addr: String,
    mgmt: u16,
    child: Child,
    /// The last lines it wrote that were not JSON log lines (a configuration error, say).
    other_output: Arc<Mutex<Vec<String>>>,
}

impl Drop for BenchNode {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a node that logs JSON into `log` (and every line it writes into `keep`, if given)
/// and serves the demo counters.
fn spawn_node(
    port: u16,
    mgmt: u16,
    seeds: &[u16],
    store: &str,
    env: &[(String, String)],
    log: &Arc<Mutex<Vec<LogLine>>>,
    keep: Option<std::fs::File>,
) -> anyhow::Result<BenchNode> {
    let mut cmd = crate::counter_nodes::command(port, mgmt, seeds, store)?;
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut child = cmd.spawn().context("cannot start a node process")?;
    let addr = format!("127.0.0.1:{port}");
    let stderr = child.stderr.take().context("no stderr")?;
    let other_output = Arc::new(Mutex::new(Vec::new()));
    let (log, other, node) = (Arc::clone(log), Arc::clone(&other_output), addr.clone());
    std::thread::spawn(move || {
        let mut keep = keep.map(std::io::BufWriter::new);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(keep) = &mut keep {
                // A full disk loses the copy, not the run.
                let _ = writeln!(keep, "{line}");
            }
            match parse_log_line(&node, &line) {
                Some(l) => log.lock().unwrap_or_else(|e| e.into_inner()).push(l),
                None => {
                    let mut other = other.lock().unwrap_or_else(|e| e.into_inner());
                    if other.len() == 10 {
                        other.remove(0);
                    }
                    other.push(line);
                }
            }
        }
    });
    Ok(BenchNode {
        addr,
        mgmt,
        child,
        other_output,
    })
}

/// Waits until `observer` has logged every node Up; fails at once if a node exited.
fn wait_all_up(
    log: &Arc<Mutex<Vec<LogLine>>>,
    observer: &str,
    nodes: &mut [BenchNode],
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        for node in nodes.iter_mut() {
            if let Ok(Some(status)) = node.child.try_wait() {
                // Its last words come through the reader thread a moment later.
                std::thread::sleep(Duration::from_millis(200));
                let said = node
                    .other_output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .join("\n");
                bail!(
                    "node {} exited ({status}) before the cluster formed: {said}",
                    node.addr
                );
            }
        }
        let up: BTreeSet<String> = log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|l| l.node == observer && l.event.as_deref() == Some("member"))
            .filter(|l| l.status.as_deref() == Some("Up"))
            .filter_map(|l| l.member.clone())
            .collect();
        if nodes.iter().all(|n| up.contains(&n.addr)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the cluster did not form within {limit:?} (up: {up:?})");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long a client of a victim's counter waits for one answer before it asks again: the
/// resolution of the served phases (the counter route itself waits 5 s for its entity, so a
/// command sent towards the dead node would otherwise hold the client that long).
const CLIENT_PATIENCE: Duration = Duration::from_millis(500);

/// Increments counter `i` through the node with management port `mgmt`, waiting at most
/// `limit`: its value, or why not.
fn increment(mgmt: u16, i: usize, limit: Duration) -> Result<u64, String> {
    let path = format!("/demo/counter/c{i}/increment");
    match crate::mgmt_client::request_within(mgmt, "POST", &path, limit) {
        Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["value"].as_u64())
            .ok_or_else(|| "an answer without a value".to_string()),
        Some((status, body)) => Err(crate::counter_nodes::refusal(status, &body)),
        None => Err(format!("no HTTP answer within {limit:?}")),
    }
}

/// The counters (their numbers) that the node with management port `mgmt` runs.
fn counters_on(mgmt: u16) -> anyhow::Result<BTreeSet<usize>> {
    let body = crate::mgmt_client::get_ok(mgmt, "/cluster/shards/counter")
        .context("the victim did not list its shards")?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    let ids = v["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["entityIds"].as_array().cloned().unwrap_or_default())
        .filter_map(|id| id.as_str()?.strip_prefix('c')?.parse().ok())
        .collect();
    Ok(ids)
}

/// What a client of one of the victim's counters saw after the kill.
struct Recovered {
    /// When it answered again, after the kill.
    after: Option<Duration>,
    wrong: bool,
    failures: BTreeMap<String, u64>,
}

/// Asks counter `i` through the survivors, round-robin, until it answers or `limit` passes.
/// `acked` increments were acknowledged before the kill: the answer must count them.
fn recover(i: usize, survivors: &[u16], killed: Instant, limit: Duration, acked: u64) -> Recovered {
    let mut failures = BTreeMap::new();
    let mut attempt = i;
    while killed.elapsed() < limit {
        let mgmt = survivors[attempt % survivors.len()];
        attempt += 1;
        let asked = Instant::now();
        match increment(mgmt, i, CLIENT_PATIENCE) {
            Ok(value) => {
                // It counts every acknowledged increment, the one just made, and at most the
                // increments that failed on the way (each may have been applied).
                let tried = acked + 1 + failures.values().sum::<u64>();
                let wrong = !(acked < value && value <= tried);
                return Recovered {
                    after: Some(killed.elapsed()),
                    wrong,
                    failures,
                };
            }
            Err(why) => {
                *failures.entry(why).or_default() += 1;
                // A quick refusal is asked again soon; a timed-out ask already waited.
                if asked.elapsed() < Duration::from_millis(50) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    Recovered {
        after: None,
        wrong: false,
        failures,
    }
}

/// One run: a fresh cluster, one kill, the timeline.
fn run_once(
    args: &FailoverArgs,
    run: usize,
    env: &[(String, String)],
) -> anyhow::Result<RunResult> {
    let data = tempfile::tempdir().context("cannot make a temporary directory")?;
    let store = match args.store.as_str() {
        "sqlite" => format!("sqlite:{}", data.path().join("shardik.db").display()),
        other => other.to_string(),
    };
    if store.starts_with("memory:") {
        bail!(
            "--store memory: gives each node process a store of its own, and a node on another \
             store is refused at join: use sqlite (the default) or a postgres:// URL"
        );
    }
    let ports: Vec<u16> = (0..args.nodes)
        .map(|_| crate::ports::free_port())
        .collect::<Result<_, _>>()?;
    let mgmts: Vec<u16> = (0..args.nodes)
        .map(|_| crate::ports::free_port())
        .collect::<Result<_, _>>()?;
    let seeds = [ports[0]];
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut nodes = Vec::new();
    // One after the other, so that their ages (and so the oldest) are known.
    for (i, port) in ports.iter().enumerate() {
        let keep = match &args.keep_logs {
            Some(dir) => {
                let path = dir.join(format!("run{run}-node{i}.log"));
                Some(
                    std::fs::File::create(&path)
                        .with_context(|| format!("cannot create {}", path.display()))?,
                )
            }
            None => None,
        };
        nodes.push(spawn_node(
            *port, mgmts[i], &seeds, &store, env, &log, keep,
        )?);
        let observer = nodes[0].addr.clone();
        wait_all_up(&log, &observer, &mut nodes, Duration::from_secs(60))?;
    }

    // Every counter incremented once through every node: created, placed, and counted.
    let mut acked = vec![0u64; args.counters];
    for round in 0..args.nodes {
        for (i, acked) in acked.iter_mut().enumerate() {
            let node = &nodes[(i + round) % nodes.len()];
            let value = increment(node.mgmt, i, Duration::from_secs(10)).map_err(|why| {
                anyhow::anyhow!("counter c{i} did not answer before the kill: {why}")
            })?;
            *acked += 1;
            if value != *acked {
                bail!("counter c{i} answered {value} after {acked} increments");
            }
        }
    }

    let victim_index = match args.victim {
        Victim::Youngest => nodes.len() - 1,
        Victim::Oldest => 0,
    };
    let on_victim = counters_on(nodes[victim_index].mgmt)?;
    if on_victim.is_empty() {
        bail!("the victim runs no counter: use more counters");
    }
    let mut victim = nodes.remove(victim_index);
    let survivors: Vec<u16> = nodes.iter().map(|n| n.mgmt).collect();

    let killed_at = SystemTime::now();
    let killed = Instant::now();
    if args.silent {
        // Frozen, not gone: dropping `victim` at the end of the run kills it (SIGKILL ends a
        // stopped process too).
        freeze(&victim.child)?;
    } else {
        victim.child.kill().context("cannot SIGKILL the victim")?;
        let _ = victim.child.wait();
    }

    let clients: Vec<_> = on_victim
        .iter()
        .map(|&i| {
            let (survivors, limit, acked) = (survivors.clone(), args.limit, acked[i]);
            std::thread::spawn(move || recover(i, &survivors, killed, limit, acked))
        })
        .collect();
    let recovered: Vec<Recovered> = clients
        .into_iter()
        .map(|c| {
            c.join()
                .unwrap_or_else(|_| panic!("a client thread panicked"))
        })
        .collect();

    let lines = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut timeline = logged_phases(&lines, &victim.addr, killed_at);
    let served: Vec<f64> = recovered
        .iter()
        .filter_map(|r| r.after.map(|d| d.as_secs_f64() * 1000.0))
        .collect();
    timeline.first_served = served.iter().copied().reduce(f64::min);
    timeline.all_served = (served.len() == recovered.len())
        .then(|| served.iter().copied().reduce(f64::max))
        .flatten();
    let mut failures = BTreeMap::new();
    for r in &recovered {
        for (why, n) in &r.failures {
            *failures.entry(why.clone()).or_default() += n;
        }
    }
    Ok(RunResult {
        timeline,
        victim_counters: on_victim.len(),
        wrong: recovered.iter().filter(|r| r.wrong).count() as u64,
        failures,
    })
}

/// Stops `child` with SIGSTOP (through the `kill` program: this crate makes no signal calls
/// of its own).
fn freeze(child: &Child) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg("-STOP")
        .arg(child.id().to_string())
        .status()
        .context("cannot run kill -STOP")?;
    if !status.success() {
        bail!("kill -STOP {} failed ({status})", child.id());
    }
    Ok(())
}

/// The median of the values seen (`None` if a run did not see the phase).
fn median(values: &[Option<f64>]) -> Option<f64> {
    let mut seen: Vec<f64> = values.iter().copied().collect::<Option<_>>()?;
    if seen.is_empty() {
        return None;
    }
    seen.sort_by(f64::total_cmp);
    let mid = seen.len() / 2;
    Some(if seen.len() % 2 == 1 {
        seen[mid]
    } else {
        (seen[mid - 1] + seen[mid]) / 2.0
    })
}

fn seconds(ms: Option<f64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.1} s", ms / 1000.0))
}

/// Runs the benchmark.
pub fn run(args: FailoverArgs) -> anyhow::Result<ExitCode> {
    if args.nodes < 2 || args.runs == 0 || args.counters == 0 {
        bail!("--nodes must be at least 2, --runs and --counters at least 1");
    }
    let env = args
        .settings
        .iter()
        .map(|s| setting_to_env(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(dir) = &args.keep_logs {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut results = Vec::new();
    for run in 0..args.runs {
        let r = run_once(&args, run + 1, &env).with_context(|| format!("run {}", run + 1))?;
        if !args.json {
            let t = r.timeline.phases();
            println!(
                "run {}: {} counters on the victim; {}",
                run + 1,
                r.victim_counters,
                PHASES
                    .iter()
                    .zip(t)
                    .map(|(p, v)| format!("{p} {}", seconds(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        results.push(r);
    }
    let per_phase: Vec<Option<f64>> = (0..PHASES.len())
        .map(|k| {
            median(
                &results
                    .iter()
                    .map(|r| r.timeline.phases()[k])
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let wrong: u64 = results.iter().map(|r| r.wrong).sum();
    let unserved = results
        .iter()
        .filter(|r| r.timeline.all_served.is_none())
        .count();
    if args.json {
        let runs: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                let mut o = serde_json::Map::new();
                for (p, v) in PHASES.iter().zip(r.timeline.phases()) {
                    o.insert(format!("{p}_ms"), json!(v));
                }
                o.insert("victim_counters".into(), json!(r.victim_counters));
                o.insert("wrong_answers".into(), json!(r.wrong));
                o.insert("failed_requests".into(), json!(r.failures));
                serde_json::Value::Object(o)
            })
            .collect();
        let medians: serde_json::Map<String, serde_json::Value> = PHASES
            .iter()
            .zip(&per_phase)
            .map(|(p, v)| (format!("{p}_ms"), json!(v)))
            .collect();
        println!(
            "{}",
            json!({
                "nodes": args.nodes,
                "counters": args.counters,
                "store": args.store,
                "victim": format!("{:?}", args.victim).to_lowercase(),
                "failure": if args.silent { "sigstop" } else { "sigkill" },
                "settings": args.settings,
                "runs": runs,
                "median": medians,
                "wrong_answers": wrong,
                "runs_not_served": unserved,
                "load1": crate::bench_support::load_average(),
            })
        );
    } else {
        println!(
            "median of {} runs: {}",
            results.len(),
            PHASES
                .iter()
                .zip(&per_phase)
                .map(|(p, v)| format!("{p} {}", seconds(*v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!("answers that lost or doubled an increment: {wrong}");
    }
    Ok(if wrong == 0 && unserved == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_becomes_its_environment_variable() {
        assert_eq!(
            setting_to_env("cluster.split-brain-resolver.stable-after=5s").unwrap(),
            (
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER".to_string(),
                "5s".to_string()
            )
        );
        assert!(setting_to_env("no-value").is_err());
        assert!(setting_to_env("bad key=1").is_err());
    }

    #[test]
    fn phases_are_the_first_survivor_lines_about_the_victim_after_the_kill() {
        let line = |node: &str, ms: u64, event: &str, member: &str, status: &str| LogLine {
            node: node.into(),
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
            event: Some(event.into()),
            member: Some(member.into()),
            status: Some(status.into()),
        };
        let killed = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000);
        let lines = vec![
            // Before the kill, and from the victim itself: not part of the failover.
            line("a", 500, "reachability", "v", "Unreachable"),
            line("v", 1_100, "reachability", "v", "Unreachable"),
            line("b", 4_000, "reachability", "v", "Unreachable"),
            line("a", 3_000, "reachability", "v", "Unreachable"),
            line("a", 9_000, "member", "v", "Down"),
            line("a", 9_500, "member", "v", "Removed"),
            line("b", 9_400, "member", "v", "Removed"),
            line("a", 9_400, "member", "other", "Removed"),
            line("a", 29_400, "region-gone", "v", ""),
        ];
        let t = logged_phases(&lines, "v", killed);
        assert_eq!(t.detected, Some(2_000.0));
        assert_eq!(t.downed, Some(8_000.0));
        assert_eq!(t.removed, Some(8_400.0));
        assert_eq!(t.rehomed, Some(28_400.0));
        assert_eq!(t.first_served, None);
    }

    #[test]
    fn a_json_log_line_gives_its_time_and_fields() {
        let l = parse_log_line(
            "n",
            r#"{"timestamp":"2026-11-29T07:53:24.517314Z","level":"INFO","fields":{"message":"member x is Up","event":"member","member":"x","status":"Up"}}"#,
        )
        .unwrap();
        assert_eq!(l.member.as_deref(), Some("x"));
        assert_eq!(l.status.as_deref(), Some("Up"));
        assert_eq!(
            l.at,
            humantime::parse_rfc3339("2026-11-29T07:53:24.517314Z").unwrap()
        );
        assert!(parse_log_line("n", "not json").is_none());
    }

    #[test]
    fn the_median_needs_every_run_to_have_seen_the_phase() {
        assert_eq!(median(&[Some(3.0), Some(1.0), Some(2.0)]), Some(2.0));
        assert_eq!(median(&[Some(4.0), Some(1.0)]), Some(2.5));
        assert_eq!(median(&[Some(4.0), None]), None);
    }
}
