//! Three real `shopping-cart` processes on one SQLite file: carts are driven through
//! different nodes, the node running the busiest cart is killed with SIGKILL, and every cart
//! is still exactly what its acknowledged changes made it, through the survivors (the busy one
//! recovered from a snapshot plus the events after it). Then a checkout and a refused change,
//! a short run of `shopping-cart-load`, and a graceful leave after which the last node serves
//! every cart.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardik::persistence::Persistence;

/// Generous bound for what a cluster on a loaded 2-core machine should reach.
const BOUND: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// Protocol timers for a test of seconds rather than the production defaults (which wait
/// many seconds before calling a silent node dead).
const FAST: &[(&str, &str)] = &[
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
    ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "30"),
    ("SHARDIK_CLUSTER__SHARDING__RETRY_INTERVAL", "300ms"),
    ("SHARDIK_CLUSTER__SHARDING__REBALANCE_INTERVAL", "1s"),
    ("SHARDIK_CLUSTER__SHARDING__HANDOFF_TIMEOUT", "10s"),
    ("SHARDIK_TRANSPORT__CONNECT_TIMEOUT", "1s"),
    ("SHARDIK_TRANSPORT__RECONNECT_BACKOFF_MAX", "1s"),
];

/// `127.0.0.1:PORT` on a port nobody listens on now, below the kernel's ephemeral range and
/// never the same twice in this process.
fn free_addr() -> String {
    let port = shardik::testkit::free_port().expect("a free loopback port");
    format!("127.0.0.1:{port}")
}

/// A `shopping-cart` process; dropping it kills it. Its stderr goes to a file, kept (and
/// named) when the test fails.
struct CartNode {
    name: String,
    bind: String,
    http: String,
    child: Child,
    log: PathBuf,
}

impl CartNode {
    fn spawn(
        name: &str,
        bind: String,
        http: String,
        seeds: &[String],
        store: &str,
        dir: &std::path::Path,
    ) -> CartNode {
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shopping-cart"));
        cmd.args(["--bind", &bind, "--http", &http, "--store", store]);
        for seed in seeds {
            cmd.args(["--seed", seed]);
        }
        // Nothing from the test's own environment configures the node.
        for (key, _) in std::env::vars_os() {
            if let Some(key) = key.to_str()
                && (key.starts_with("SHARDIK_") || key == "RUST_LOG")
            {
                cmd.env_remove(key);
            }
        }
        cmd.envs(FAST.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("create the log file"));
        CartNode {
            name: name.to_string(),
            bind,
            http,
            child: cmd.spawn().expect("spawn shopping-cart"),
            log,
        }
    }

    fn report(&mut self) -> String {
        let state = match self.child.try_wait() {
            Ok(Some(status)) => format!("exited with {status}"),
            _ => "running".to_string(),
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "---- {} (cluster {}, http {}, {state}; log {}), last 30 lines:\n{}",
            self.name,
            self.bind,
            self.http,
            self.log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }

    fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// SIGTERM through the `kill` program (no unsafe code, no extra crate).
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {}", self.child.id());
    }
}

impl Drop for CartNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{}: log kept at {}", self.name, self.log.display());
        }
    }
}

/// The test's directory (the store and the nodes' logs): removed after a pass, kept after a
/// failure for the logs.
struct TestDir(tempfile::TempDir);

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.disable_cleanup(true);
            eprintln!("store and logs kept in {}", self.0.path().display());
        }
    }
}

fn reports(nodes: &mut [CartNode]) -> String {
    nodes
        .iter_mut()
        .map(CartNode::report)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `check` until it succeeds; after [`BOUND`], panics with its last error and the
/// nodes' logs.
async fn eventually<T, Fut>(what: &str, nodes: &mut [CartNode], mut check: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(t) => return t,
            Err(last) if start.elapsed() > BOUND => {
                panic!(
                    "not reached in {BOUND:?}: {what}; last: {last}\n{}",
                    reports(nodes)
                )
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Sends a request; `Ok((status, JSON answer))`, or `Err` when nothing (or no JSON) came back.
async fn call(
    http: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    let answer = response
        .json::<Value>()
        .await
        .map_err(|e| format!("{url}: {status}, not JSON: {e}"))?;
    Ok((status, answer))
}

/// Every node lists the three as Up and nobody as unreachable.
async fn all_up(http: &reqwest::Client, https: &[String], binds: &[String]) -> Result<(), String> {
    let want: BTreeSet<&str> = binds.iter().map(String::as_str).collect();
    for node in https {
        let (_, members) =
            call(http, "GET", &format!("http://{node}/cluster/members"), None).await?;
        let up: BTreeSet<&str> = members["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["status"] == "Up")
            .filter_map(|m| m["node"].as_str())
            .collect();
        let unreachable = members["unreachable"].as_array().map_or(0, Vec::len);
        if up != want || unreachable > 0 {
            return Err(format!("{node} sees {members}"));
        }
    }
    Ok(())
}

/// What the test knows each cart holds: the effect of every change answered 200.
type Model = BTreeMap<String, BTreeMap<String, u32>>;

fn items_of(answer: &Value) -> BTreeMap<String, u32> {
    serde_json::from_value(answer["items"].clone()).expect("items is a map of quantities")
}

/// Makes a change through `node` that must succeed, retrying while the cluster cannot reach
/// the cart (503, 504, no answer). A retried change that is then refused may have been made
/// by the attempt that went unanswered: the cart is read back instead. Returns the cart's
/// answer (the caller compares its items with the model).
async fn change(
    http: &reqwest::Client,
    nodes: &mut [CartNode],
    node: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Value {
    let url = format!("http://{node}{path}");
    let cart = path.split('/').nth(2).expect("a /carts/{id}/... path");
    let start = Instant::now();
    let mut unanswered = false;
    loop {
        let last = match call(http, method, &url, body.clone()).await {
            Ok((200, answer)) => return answer,
            Ok((status @ (400 | 409), answer)) if !unanswered => {
                panic!("{method} {path} through {node}: refused with {status}: {answer}")
            }
            Ok((400 | 409, _)) => {
                match call(http, "GET", &format!("http://{node}/carts/{cart}"), None).await {
                    Ok((200, answer)) => return answer,
                    other => format!("reading {cart} back: {other:?}"),
                }
            }
            other => format!("{other:?}"),
        };
        unanswered = true;
        if start.elapsed() > BOUND {
            panic!(
                "{method} {path} through {node} never succeeded; last: {last}\n{}",
                reports(nodes)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Reads every cart of `model` through `nodes_http` (in turn) until each answers, and checks
/// it holds exactly what the model says. Returns the node each cart answered from.
async fn check_all(
    http: &reqwest::Client,
    nodes: &mut [CartNode],
    nodes_http: &[String],
    model: &Model,
    what: &str,
) -> BTreeMap<String, String> {
    let hosts = Mutex::new(BTreeMap::new());
    eventually(what, nodes, || {
        let hosts = &hosts;
        async move {
            for (i, (cart, want)) in model.iter().enumerate() {
                if hosts.lock().unwrap().contains_key(cart) {
                    continue;
                }
                let node = &nodes_http[i % nodes_http.len()];
                let (status, answer) =
                    call(http, "GET", &format!("http://{node}/carts/{cart}"), None).await?;
                if status != 200 {
                    return Err(format!("{cart} through {node}: {status} {answer}"));
                }
                let got = items_of(&answer);
                assert_eq!(&got, want, "{cart} ({what}) through {node}: {answer}");
                let host = answer["node"].as_str().unwrap_or_default().to_string();
                hosts.lock().unwrap().insert(cart.clone(), host);
            }
            Ok(())
        }
    })
    .await;
    hosts.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carts_stay_correct_when_a_node_is_killed_and_a_checked_out_cart_refuses_changes() {
    let dir = TestDir(tempfile::tempdir().expect("a temporary directory"));
    let store = format!("sqlite:{}", dir.0.path().join("carts.db").display());
    carts_stay_correct(dir, store).await;
}

/// The same on PostgreSQL: the server `scripts/with-postgres` started, in a database of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carts_stay_correct_on_postgres_when_a_node_is_killed() {
    let dir = TestDir(tempfile::tempdir().expect("a temporary directory"));
    carts_stay_correct(dir, new_postgres_database()).await;
}

/// A new database on the test server (`SHARDIK_TEST_POSTGRES_URL`, set by
/// `scripts/with-postgres`), as a store URL. Without the server the test fails and says how to
/// run it: it never skips quietly.
fn new_postgres_database() -> String {
    let Ok(server_url) = std::env::var("SHARDIK_TEST_POSTGRES_URL") else {
        panic!("no PostgreSQL: run `scripts/with-postgres cargo test -p shopping-cart`");
    };
    let db = format!("carts_{}_{:x}", std::process::id(), rand_suffix());
    let created = Command::new("psql")
        .args([server_url.as_str(), "-qc", &format!("CREATE DATABASE {db}")])
        .status()
        .expect("psql runs");
    assert!(
        created.success(),
        "CREATE DATABASE {db} failed on {server_url}"
    );
    let base = &server_url[..server_url.rfind('/').expect("a URL ending in /database")];
    format!("{base}/{db}")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Three nodes on `store`: carts changed through every node, a node SIGKILLed, every cart's
/// items still exactly what was acknowledged, a checked-out cart refusing changes.
async fn carts_stay_correct(dir: TestDir, store: String) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(8))
        .build()
        .unwrap();

    // Three processes, one SQLite file; the first two are the seeds of all three (the first
    // forms the cluster, finding itself first in the list).
    let addrs: Vec<(String, String)> = (0..3).map(|_| (free_addr(), free_addr())).collect();
    let seeds: Vec<String> = addrs[..2].iter().map(|(bind, _)| bind.clone()).collect();
    let mut nodes: Vec<CartNode> = addrs
        .into_iter()
        .enumerate()
        .map(|(i, (bind, http))| {
            CartNode::spawn(
                &format!("cart{i}"),
                bind,
                http,
                &seeds,
                &store,
                dir.0.path(),
            )
        })
        .collect();
    let https: Vec<String> = nodes.iter().map(|n| n.http.clone()).collect();
    let binds: Vec<String> = nodes.iter().map(|n| n.bind.clone()).collect();
    eventually("the three nodes are Up", &mut nodes, || {
        all_up(&http, &https, &binds)
    })
    .await;

    // A few carts, each changed through all three nodes.
    let mut model = Model::new();
    for i in 0..6 {
        let cart = format!("cart-{i}");
        let items = model.entry(cart.clone()).or_default();
        let apple = json!({"item": "apple", "quantity": i + 1});
        let path = format!("/carts/{cart}/items");
        let answer = change(&http, &mut nodes, &https[i % 3], "POST", &path, Some(apple)).await;
        items.insert("apple".into(), i as u32 + 1);
        assert_eq!(&items_of(&answer), items, "{answer}");
        let pear = json!({"item": "pear", "quantity": 2});
        let answer = change(
            &http,
            &mut nodes,
            &https[(i + 1) % 3],
            "POST",
            &path,
            Some(pear),
        )
        .await;
        items.insert("pear".into(), 2);
        assert_eq!(&items_of(&answer), items, "{answer}");
        let path = format!("/carts/{cart}/items/apple");
        let quantity = json!({"quantity": 10 + i});
        let answer = change(
            &http,
            &mut nodes,
            &https[(i + 2) % 3],
            "PUT",
            &path,
            Some(quantity),
        )
        .await;
        items.insert("apple".into(), 10 + i as u32);
        assert_eq!(&items_of(&answer), items, "{answer}");
        if i % 2 == 0 {
            let path = format!("/carts/{cart}/items/pear");
            let answer = change(&http, &mut nodes, &https[i % 3], "DELETE", &path, None).await;
            items.remove("pear");
            assert_eq!(&items_of(&answer), items, "{answer}");
        }
    }
    // A busy cart: 130 events, so that it recovers from its snapshot at 100 plus 30 events.
    let busy = "/carts/busy/items";
    let socks = json!({"item": "socks", "quantity": 1});
    change(&http, &mut nodes, &https[0], "POST", busy, Some(socks)).await;
    for quantity in 2..=130u32 {
        let node = &https[quantity as usize % 3];
        let body = json!({ "quantity": quantity });
        let answer = change(
            &http,
            &mut nodes,
            node,
            "PUT",
            "/carts/busy/items/socks",
            Some(body),
        )
        .await;
        assert_eq!(answer["items"]["socks"], quantity, "{answer}");
    }
    model.insert("busy".into(), BTreeMap::from([("socks".into(), 130)]));

    // Refusals, through any node.
    let (status, answer) = call(
        &http,
        "POST",
        &format!("http://{}/carts/cart-1/items", https[2]),
        Some(json!({"item": "apple", "quantity": 1})),
    )
    .await
    .unwrap();
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("already in the cart")
    );
    let (status, _) = call(
        &http,
        "PUT",
        &format!("http://{}/carts/cart-1/items/apple", https[1]),
        Some(json!({"quantity": 0})),
    )
    .await
    .unwrap();
    assert_eq!(status, 400);

    let hosts = check_all(&http, &mut nodes, &https, &model, "before the kill").await;
    // The busy cart's snapshot (saved in the background after event 100) is in the file the
    // nodes share, so that its recovery below starts from it.
    let persistence = Persistence::open(&store).await.expect("the store opens");
    eventually("the busy cart has a snapshot", &mut nodes, || async {
        match persistence.store().latest_snapshot("cart|busy").await {
            Ok(Some(snapshot)) if snapshot.seq == 100 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    persistence.store().close().await.expect("the store closes");

    // SIGKILL the node running the busy cart.
    let victim_at = binds
        .iter()
        .position(|b| *b == hosts["busy"])
        .unwrap_or_else(|| panic!("busy runs on {}, not a node of the test", hosts["busy"]));
    let mut victim = nodes.remove(victim_at);
    victim.kill9();
    let survivors: Vec<String> = nodes.iter().map(|n| n.http.clone()).collect();
    let hosts = check_all(&http, &mut nodes, &survivors, &model, "after the SIGKILL").await;
    assert!(
        hosts.values().all(|h| *h != victim.bind),
        "every cart runs on a survivor: {hosts:?}"
    );
    drop(victim);

    // The busy cart goes on, is checked out, and then refuses every change.
    let body = json!({"quantity": 7});
    let answer = change(
        &http,
        &mut nodes,
        &survivors[0],
        "PUT",
        "/carts/busy/items/socks",
        Some(body),
    )
    .await;
    assert_eq!(answer["items"], json!({"socks": 7}));
    model.insert("busy".into(), BTreeMap::from([("socks".into(), 7)]));
    let answer = change(
        &http,
        &mut nodes,
        &survivors[1],
        "POST",
        "/carts/busy/checkout",
        None,
    )
    .await;
    assert_eq!(answer["checked_out"], true, "{answer}");
    for (method, path, body) in [
        (
            "POST",
            "/carts/busy/items",
            Some(json!({"item": "hat", "quantity": 1})),
        ),
        (
            "PUT",
            "/carts/busy/items/socks",
            Some(json!({"quantity": 9})),
        ),
        ("DELETE", "/carts/busy/items/socks", None),
    ] {
        let (status, answer) = call(
            &http,
            method,
            &format!("http://{}{path}", survivors[0]),
            body,
        )
        .await
        .unwrap();
        assert_eq!(status, 409, "{method} {path}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("checked out"), "{message}");
    }
    let (status, answer) = call(
        &http,
        "GET",
        &format!("http://{}/carts/busy", survivors[1]),
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["checked_out"], true);
    assert_eq!(answer["items"], json!({"socks": 7}));

    // The load generator, briefly, through both survivors.
    let out = Command::new(env!("CARGO_BIN_EXE_shopping-cart-load"))
        .args(["--target", &survivors.join(",")])
        .args([
            "--rate",
            "100/s",
            "--duration",
            "2s",
            "--carts",
            "10",
            "--json",
        ])
        .output()
        .expect("run shopping-cart-load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "shopping-cart-load failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("a JSON report");
    let all = &report["all"];
    assert_eq!(all["sent"], 200, "{report}");
    assert!(all["ok"].as_u64().unwrap() >= 190, "{report}");
    assert!(report["throughput"].as_f64().unwrap() > 50.0, "{report}");
    assert!(all["latency_ms"]["p99"].as_f64().is_some(), "{report}");

    // A graceful leave (SIGTERM, exit 0); the last node then serves every cart.
    let mut leaving = nodes.remove(0);
    leaving.terminate();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = leaving.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            start.elapsed() < BOUND,
            "no exit after SIGTERM\n{}",
            leaving.report()
        );
        tokio::time::sleep(POLL).await;
    };
    assert!(
        status.success(),
        "exit status after SIGTERM: {status}\n{}",
        leaving.report()
    );
    let last = vec![nodes[0].http.clone()];
    check_all(&http, &mut nodes, &last, &model, "after the leave").await;
}
