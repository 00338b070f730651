//! Helpers for the multi-process tests: real `shardik node` processes on free local ports (or
//! in network namespaces of their own, `netns.rs`, reaching servers on the test's loopback
//! through `relay.rs`), their stderr captured to files, the management API polled with bounded
//! waits; the demo's counters driven and checked (`counters.rs`); nodes with mutual TLS whose
//! files rotate as in Kubernetes (`tls_nodes.rs`); a client that reads the
//! certificate a node presents (`tls_probe.rs`); a raw client that writes our frames by hand
//! over plain TCP or TLS (`raw.rs`).

#![allow(dead_code)]

pub mod counters;
pub mod netns;
pub mod raw;
pub mod relay;
pub mod tls_nodes;
pub mod tls_probe;

use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Generous bound for anything the cluster should reach on a loaded 2-core machine.
pub const BOUND: Duration = Duration::from_secs(40);
/// Delay between two polls.
pub const POLL: Duration = Duration::from_millis(100);

/// Settings that make every protocol timer fast enough for a test that takes seconds.
pub const FAST: &[(&str, &str)] = &[
    ("SHARDIK_LOGGING__FORMAT", "json"),
    ("SHARDIK_LOGGING__LEVEL", "info"),
    ("SHARDIK_CLUSTER__GOSSIP_INTERVAL", "200ms"),
    ("SHARDIK_CLUSTER__LEADER_ACTIONS_INTERVAL", "200ms"),
    (
        "SHARDIK_CLUSTER__UNREACHABLE_NODES_REAPER_INTERVAL",
        "200ms",
    ),
    ("SHARDIK_CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "100ms"),
    ("SHARDIK_CLUSTER__SEED_NODE_TIMEOUT", "1s"),
    ("SHARDIK_CLUSTER__RETRY_UNSUCCESSFUL_JOIN_AFTER", "2s"),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
        "200ms",
    ),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__ACCEPTABLE_HEARTBEAT_PAUSE",
        "1s",
    ),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__EXPECTED_RESPONSE_AFTER",
        "500ms",
    ),
    (
        "SHARDIK_CLUSTER__FAILURE_DETECTOR__MIN_STD_DEVIATION",
        "100ms",
    ),
    ("SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "2s"),
    ("SHARDIK_TRANSPORT__CONNECT_TIMEOUT", "1s"),
    ("SHARDIK_TRANSPORT__RECONNECT_BACKOFF_MAX", "1s"),
];

/// Enables the management API's state-changing routes (read-only by default, as in Akka
/// Management): for the tests that join, leave or down members through it. The nodes listen
/// on loopback, where no token is needed.
pub const WRITES_ENABLED: (&str, &str) = (
    "SHARDIK_MANAGEMENT__HTTP__ROUTE_PROVIDERS_READ_ONLY",
    "false",
);

/// A port nobody listens on right now, below the kernel's ephemeral range, never handed out
/// twice by this process (see [`shardik_runtime::testkit::free_port`] for why not port 0).
pub fn free_port() -> u16 {
    shardik_runtime::testkit::free_port().expect("a free loopback port")
}

/// A fresh `127.0.0.1:PORT` address.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

static NEXT_LOG: AtomicUsize = AtomicUsize::new(0);

/// How to start one node.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// A name for messages and the log file.
    pub name: String,
    /// `--bind`.
    pub bind: String,
    /// `--management`.
    pub management: String,
    /// `--seed`s.
    pub seeds: Vec<String>,
    /// Environment on top of [`FAST`] (later entries win).
    pub env: Vec<(String, String)>,
    /// Further command-line arguments (e.g. `--demo-counters`).
    pub args: Vec<String>,
    /// A network namespace to run the node in (`ip netns exec NAME shardik ...`; see
    /// `netns.rs`), or `None` for the test's own.
    pub netns: Option<String>,
    /// Whether the membership and transport timers stay as shipped instead of [`FAST`]'s
    /// (only its logging settings apply then).
    pub shipped_timers: bool,
}

impl NodeSpec {
    /// A node on fresh ports with the fast settings.
    pub fn new(name: &str, seeds: &[String]) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            bind: free_addr(),
            management: free_addr(),
            seeds: seeds.to_vec(),
            env: Vec::new(),
            args: Vec::new(),
            netns: None,
            shipped_timers: false,
        }
    }

    /// Keeps the membership and transport timers as shipped (failure detection, the
    /// resolver's stable-after, gossip): for a test of what the defaults do.
    pub fn with_shipped_timers(mut self) -> NodeSpec {
        self.shipped_timers = true;
        self
    }

    /// Runs the node in the network namespace `name`.
    pub fn in_netns(mut self, name: &str) -> NodeSpec {
        self.netns = Some(name.to_string());
        self
    }

    /// Adds a command-line argument.
    pub fn arg(mut self, arg: &str) -> NodeSpec {
        self.args.push(arg.to_string());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> NodeSpec {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
}

/// A running `shardik node` process. Dropping it kills the process and waits for it.
pub struct Node {
    /// How it was started.
    pub spec: NodeSpec,
    child: Child,
    log: PathBuf,
    exit: Option<ExitStatus>,
}

impl Node {
    /// Starts a node process; its stderr goes to a temporary file.
    pub fn spawn(spec: NodeSpec) -> Node {
        let log = std::env::temp_dir().join(format!(
            "shardik-mp-{}-{}-{}.log",
            std::process::id(),
            NEXT_LOG.fetch_add(1, Ordering::Relaxed),
            spec.name
        ));
        let stderr = File::create(&log).expect("create log file");
        let binary = env!("CARGO_BIN_EXE_shardik");
        let mut cmd = match &spec.netns {
            // `ip netns exec` enters the namespace and execs the program in its own process,
            // so the child's pid is the node's and signals reach it.
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, binary]);
                cmd
            }
            None => Command::new(binary),
        };
        cmd.arg("node")
            .arg("--bind")
            .arg(&spec.bind)
            .arg("--management")
            .arg(&spec.management);
        for s in &spec.seeds {
            cmd.arg("--seed").arg(s);
        }
        cmd.args(&spec.args);
        // Hermetic: nothing from the test's own environment configures the node.
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str()
                && (k.starts_with("SHARDIK_") || k == "RUST_LOG")
            {
                cmd.env_remove(k);
            }
        }
        for (k, v) in FAST {
            if !spec.shipped_timers || k.starts_with("SHARDIK_LOGGING__") {
                cmd.env(k, v);
            }
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr));
        let child = cmd.spawn().expect("spawn shardik node");
        Node {
            spec,
            child,
            log,
            exit: None,
        }
    }

    /// The cluster address (`--bind`).
    pub fn addr(&self) -> &str {
        &self.spec.bind
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://MANAGEMENT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.spec.management, path)
    }

    /// The file stderr goes to.
    pub fn log_path(&self) -> PathBuf {
        self.log.clone()
    }

    /// Everything the node wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of stderr.
    pub fn stderr_tail(&self, n: usize) -> String {
        let all = self.stderr();
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait");
        }
        self.exit
    }

    /// A report of this node for failure messages: state plus the last 40 stderr lines.
    pub fn report(&mut self) -> String {
        let state = match self.exited() {
            Some(s) => format!("exited with {s}"),
            None => "running".to_string(),
        };
        format!(
            "---- node {} (cluster {}, management {}, pid {}, {state}; log {}) last 40 stderr lines:\n{}",
            self.spec.name,
            self.spec.bind,
            self.spec.management,
            self.child.id(),
            self.log.display(),
            self.stderr_tail(40)
        )
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        self.exit = Some(self.child.wait().expect("wait after kill"));
    }

    /// Sends a signal with the `kill` program (the crate has no unsafe code and no nix).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.child.id());
    }

    /// Waits (bounded) for the process to exit.
    pub async fn wait_exit(&mut self, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "shardik node {} log kept at {}",
                self.spec.name,
                self.log.display()
            );
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The reports of several nodes, for a failure message.
pub fn reports(nodes: &mut [&mut Node]) -> String {
    nodes
        .iter_mut()
        .map(|n| n.report())
        .collect::<Vec<_>>()
        .join("\n")
}

/// An HTTP client for the management API: short timeouts, never a proxy.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(3))
        .build()
        .expect("http client")
}

/// `GET /cluster/members` as JSON.
pub async fn members(http: &reqwest::Client, node: &Node) -> Result<Value, String> {
    let resp = http
        .get(node.url("/cluster/members"))
        .send()
        .await
        .map_err(|e| format!("{}: GET /cluster/members: {e}", node.spec.name))?;
    if !resp.status().is_success() {
        return Err(format!(
            "{}: GET /cluster/members answered {}",
            node.spec.name,
            resp.status()
        ));
    }
    resp.json::<Value>()
        .await
        .map_err(|e| format!("{}: /cluster/members is not JSON: {e}", node.spec.name))
}

/// The HTTP status of `GET path`.
pub async fn status_of(http: &reqwest::Client, node: &Node, path: &str) -> Result<u16, String> {
    http.get(node.url(path))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{}: GET {path}: {e}", node.spec.name))
}

/// `(address, uid, status)` of every member in a `/cluster/members` answer.
pub fn member_list(v: &Value) -> Vec<(String, String, String)> {
    v["members"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    (
                        m["node"].as_str().unwrap_or_default().to_string(),
                        m["nodeUid"].as_str().unwrap_or_default().to_string(),
                        m["status"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The addresses listed as unreachable.
pub fn unreachable_list(v: &Value) -> Vec<String> {
    v["unreachable"]
        .as_array()
        .map(|us| {
            us.iter()
                .map(|u| u["node"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Checks that `v` lists exactly `expected` as members, all Up, with nobody unreachable.
pub fn exactly_up(v: &Value, expected: &[&str]) -> Result<(), String> {
    let ms = member_list(v);
    let mut addrs: Vec<&str> = ms.iter().map(|(a, _, _)| a.as_str()).collect();
    addrs.sort_unstable();
    let mut want = expected.to_vec();
    want.sort_unstable();
    if addrs != want {
        return Err(format!("members {addrs:?}, want {want:?}: {v}"));
    }
    if let Some((a, _, s)) = ms.iter().find(|(_, _, s)| s != "Up") {
        return Err(format!("{a} is {s}, not Up: {v}"));
    }
    if !unreachable_list(v).is_empty() {
        return Err(format!("unreachable members remain: {v}"));
    }
    Ok(())
}

/// Polls `check` until it returns `Ok` or `bound` passes; then panics with what was last
/// wrong and the reports of `nodes`.
pub async fn eventually<T, F, Fut>(
    what: &str,
    bound: Duration,
    nodes: &mut [&mut Node],
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(t) => return t,
            Err(e) => e,
        };
        if start.elapsed() >= bound {
            panic!(
                "timed out after {:?} waiting until {what}; last: {last}\n{}",
                bound,
                reports(nodes)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until every node in `nodes` reports exactly `expected` as Up members and they agree
/// on the leader (one of them). Returns the leader.
pub async fn wait_all_up(
    http: &reqwest::Client,
    nodes: &mut [&mut Node],
    expected: &[&str],
) -> String {
    let addrs: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let names: Vec<String> = nodes.iter().map(|n| n.spec.name.clone()).collect();
    let what = format!("{names:?} all list {expected:?} as Up and agree on the leader");
    eventually(&what, BOUND, nodes, || {
        let addrs = addrs.clone();
        async move {
            let mut leader: Option<String> = None;
            for m in &addrs {
                let v = members_at(http, m).await?;
                exactly_up(&v, expected).map_err(|e| format!("{m}: {e}"))?;
                let l = v["leader"]
                    .as_str()
                    .ok_or_else(|| format!("{m}: no leader: {v}"))?
                    .to_string();
                if !expected.contains(&l.as_str()) {
                    return Err(format!("{m}: leader {l} is not a member: {v}"));
                }
                match &leader {
                    None => leader = Some(l),
                    Some(prev) if *prev == l => {}
                    Some(prev) => return Err(format!("leaders differ: {prev} vs {l}")),
                }
            }
            Ok(leader.expect("at least one node"))
        }
    })
    .await
}

/// `GET http://MANAGEMENT/cluster/members`.
pub async fn members_at(http: &reqwest::Client, management: &str) -> Result<Value, String> {
    let resp = http
        .get(format!("http://{management}/cluster/members"))
        .send()
        .await
        .map_err(|e| format!("{management}: GET /cluster/members: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!(
            "{management}: GET /cluster/members answered {}",
            resp.status()
        ));
    }
    resp.json::<Value>()
        .await
        .map_err(|e| format!("{management}: /cluster/members is not JSON: {e}"))
}

/// Starts `n` nodes (with `env` on top of the fast settings) whose first two (or one, for
/// `n == 1`) are the seeds, and waits until all list all of them as Up. Returns the nodes.
pub async fn start_cluster(
    http: &reqwest::Client,
    prefix: &str,
    n: usize,
    env: &[(&str, &str)],
) -> Vec<Node> {
    start_cluster_with_args(http, prefix, n, env, &[]).await
}

/// As [`start_cluster`], with extra command-line arguments for every node.
pub async fn start_cluster_with_args(
    http: &reqwest::Client,
    prefix: &str,
    n: usize,
    env: &[(&str, &str)],
    args: &[&str],
) -> Vec<Node> {
    let specs: Vec<NodeSpec> = (0..n)
        .map(|i| {
            let spec = env.iter().fold(
                NodeSpec::new(&format!("{prefix}{i}"), &[]),
                |spec, (k, v)| spec.env(k, v),
            );
            args.iter().fold(spec, |spec, a| spec.arg(a))
        })
        .collect();
    start_cluster_of(http, specs).await
}

/// Starts a node for each of `specs`, the first two the seeds of all, and waits until all are
/// Up.
pub async fn start_cluster_of(http: &reqwest::Client, mut specs: Vec<NodeSpec>) -> Vec<Node> {
    let seeds: Vec<String> = specs.iter().take(2).map(|s| s.bind.clone()).collect();
    for s in &mut specs {
        s.seeds = seeds.clone();
    }
    let mut nodes: Vec<Node> = specs.into_iter().map(Node::spawn).collect();
    let expected: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    wait_all_up(http, &mut refs, &expected).await;
    nodes
}

/// Longest a one-shot `shardik` command (a short benchmark, say) may take in a test: generous
/// for a debug build on a loaded 2-core machine.
pub const ONE_SHOT_LIMIT: Duration = Duration::from_secs(300);

/// Runs `shardik ARGS` to its end (killed after [`ONE_SHOT_LIMIT`]): its stdout, or a failure
/// with its stderr.
pub fn run_to_end(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardik"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("shardik starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).map(|_| s)
    });
    let deadline = Instant::now() + ONE_SHOT_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`shardik {}` did not end within {ONE_SHOT_LIMIT:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap().unwrap(), err.join().unwrap().unwrap());
    assert!(status.success(), "{status}: {err}");
    out
}

/// A `sqlite:` store in a file no other test or earlier run uses, so that every cluster starts
/// from an empty store. Used as its URL (`&store`, `store.url()`); the file and its `-wal` and
/// `-shm` companions are removed when it is dropped, at the end of the test.
pub fn fresh_sqlite_store(prefix: &str) -> FreshSqlite {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path = std::env::temp_dir().join(format!(
        "shardik-mp-{}-{prefix}-{nanos:x}.db",
        std::process::id()
    ));
    FreshSqlite {
        url: format!("sqlite:{}", path.display()),
        path,
    }
}

/// A test's own SQLite store: its URL, and its files, removed on drop.
pub struct FreshSqlite {
    url: String,
    path: std::path::PathBuf,
}

impl FreshSqlite {
    /// The `sqlite:` URL of the store.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl std::ops::Deref for FreshSqlite {
    type Target = str;

    fn deref(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for FreshSqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl AsRef<std::ffi::OsStr> for FreshSqlite {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.url.as_ref()
    }
}

impl Drop for FreshSqlite {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = self.path.clone().into_os_string();
            file.push(suffix);
            // Absent files (a test that never started a node) are fine.
            let _ = std::fs::remove_file(file);
        }
    }
}

/// A `postgres://` store URL naming a new, empty database on the test server that
/// `scripts/with-postgres` started (`SHARDIK_TEST_POSTGRES_URL`). Panics, saying how to run the
/// tests, when that server is not there: a test that needs PostgreSQL never skips quietly.
pub fn fresh_postgres_database(prefix: &str) -> String {
    let base = std::env::var("SHARDIK_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "SHARDIK_TEST_POSTGRES_URL is not set: run the tests through `scripts/with-postgres \
             cargo test --workspace`, which starts a throwaway PostgreSQL server"
        )
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{prefix}_{}_{nanos:x}", std::process::id());
    let out = Command::new("psql")
        .arg(&base)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
        .arg(format!("CREATE DATABASE {name}"))
        .output()
        .expect("psql runs (it comes with PostgreSQL)");
    assert!(
        out.status.success(),
        "cannot create database {name} on {base}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (server, _db) = base
        .rsplit_once('/')
        .expect("a postgres URL ends in /database");
    format!("{server}/{name}")
}

/// Sum of all samples of a Prometheus metric family in `text`.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Checks that `GET path` answers 200 on every management address in `managements`.
pub async fn all_answer_200(
    http: &reqwest::Client,
    managements: &[String],
    paths: &[&str],
) -> Result<(), String> {
    for m in managements {
        for path in paths {
            let s = http
                .get(format!("http://{m}{path}"))
                .send()
                .await
                .map_err(|e| format!("{m}{path}: {e}"))?
                .status()
                .as_u16();
            if s != 200 {
                return Err(format!("{m}{path} answered {s}"));
            }
        }
    }
    Ok(())
}

/// The management addresses of `nodes`.
pub fn managements(nodes: &[&mut Node]) -> Vec<String> {
    nodes.iter().map(|n| n.spec.management.clone()).collect()
}

/// The text of `GET /metrics` at the management address `management`.
pub async fn metrics_text(http: &reqwest::Client, management: &str) -> Result<String, String> {
    http.get(format!("http://{management}/metrics"))
        .send()
        .await
        .map_err(|e| format!("{management}/metrics: {e}"))?
        .text()
        .await
        .map_err(|e| format!("{management}/metrics: {e}"))
}

/// Sum of the samples of the metric `name` whose labels contain `label` (such as
/// `reason="tls-`), read from `GET /metrics` at the management address `management`.
pub async fn metric_sum_with_label(
    http: &reqwest::Client,
    management: &str,
    name: &str,
    label: &str,
) -> Result<f64, String> {
    let text = metrics_text(http, management).await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') && rest.contains(label))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Sum of all samples of the metric `name` (whatever their labels), read from `GET /metrics`
/// at the management address `management`.
pub async fn metric_at(
    http: &reqwest::Client,
    management: &str,
    name: &str,
) -> Result<f64, String> {
    let text = metrics_text(http, management).await?;
    Ok(metric_sum(&text, name))
}
