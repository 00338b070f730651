//! Cluster bootstrap over real DNS: five `shardik node` processes with no seed list, each in a
//! Linux network namespace of its own (`support/netns.rs`), find each other through a
//! `dnsmasq` server in a sixth namespace that serves what a Kubernetes headless service's DNS
//! serves: SRV records `_management._tcp.shop.shardik.test` → `node-N.shop.shardik.test:8558`,
//! A records for each `node-N`, and A records of `shop.shardik.test` for every node.
//!
//! Asserted, for several start orders (the lowest node last; reverse; a shuffle with a fixed
//! seed; all at once, that one through the plain name's A records):
//! - every node's `/cluster/members` lists the same five members Up, with one leader;
//! - exactly one node formed a cluster (its log says so once), and it is the lowest;
//! - every node counted its probes in `/metrics`, and `/bootstrap/seed-nodes` lists members;
//! - with the lowest node last, nobody formed anything before it came (the others said they
//!   were waiting for its answer).
//!
//! Then the lowest node is stopped (SIGTERM, it leaves) and started again with
//! `new-cluster-enabled = off`: it joins the same cluster (the other four keep their
//! incarnations), and never forms one of its own.
//!
//! Needs root, iproute2's `ip` and `dnsmasq` (`.ci/run` installs `dnsmasq-base`); skipped,
//! with the reason printed, only when this machine cannot create network namespaces at all.
//!
//! ```text
//! cargo test -p shardik-cli --test netns_bootstrap -- --nocapture
//! ```

mod support;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::netns::{Lab, LabError};
use support::*;

const NODES: usize = 5;
/// The namespace of the DNS server (after the nodes').
const DNS: usize = NODES;
const CLUSTER_PORT: u16 = 2552;
const MANAGEMENT_PORT: u16 = 8558;
const ZONE: &str = "shop.shardik.test";
const SRV_NAME: &str = "_management._tcp.shop.shardik.test";

/// Bootstrap timings short enough for a test: a lookup and a round of probes every 300 ms, a
/// stable margin of 2 s. Four contact points required: with the lowest node last, the other
/// four meet every condition but one (its answer), which shows that it alone holds them back.
const BOOTSTRAP: &[(&str, &str)] = &[
    ("SHARDIK_DISCOVERY__METHOD", "dns"),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__REQUIRED_CONTACT_POINT_NR",
        "4",
    ),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__STABLE_MARGIN",
        "2s",
    ),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__INTERVAL",
        "300ms",
    ),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__RESOLVE_TIMEOUT",
        "1s",
    ),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT__PROBE_INTERVAL",
        "300ms",
    ),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT__PROBE_TIMEOUT",
        "700ms",
    ),
    (
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT__PROBING_FAILURE_TIMEOUT",
        "2s",
    ),
];

/// What the node that forms the cluster logs (once).
const FORMED: &str = "cluster bootstrap: forming a new cluster";
/// What a node that joins an existing cluster logs.
const JOINED: &str = "cluster bootstrap: joining the existing cluster";

/// Writes a line to the real stderr, past the test harness's capture.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `dnsmasq` in the DNS namespace; killed when dropped.
struct DnsServer {
    child: Child,
    log: std::path::PathBuf,
}

impl DnsServer {
    /// Starts dnsmasq on the DNS namespace's address with the zone's records, and waits until
    /// it says it started.
    fn start(lab: &Lab) -> DnsServer {
        let dnsmasq = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or_else(|| {
                panic!(
                    "dnsmasq is not installed: `apt-get install dnsmasq-base` (.ci/run installs \
                     it); this test needs a real DNS server"
                )
            });
        let dns = &lab.nodes[DNS];
        let mut args: Vec<String> = vec![
            "--keep-in-foreground".into(),
            "--conf-file=/dev/null".into(),
            "--no-resolv".into(),
            "--no-hosts".into(),
            "--bind-interfaces".into(),
            format!("--listen-address={}", dns.addr),
            "--port=53".into(),
            "--log-facility=-".into(),
            // Answers are not cached for long: a restarted node must be found again.
            "--local-ttl=1".into(),
            "--user=root".into(),
            "--pid-file".into(),
        ];
        for i in 0..NODES {
            let name = format!("node-{}.{ZONE}", i + 1);
            let ip = lab.nodes[i].addr;
            args.push(format!("--host-record={name},{ip}"));
            args.push(format!("--host-record={ZONE},{ip}"));
            args.push(format!("--srv-host={SRV_NAME},{name},{MANAGEMENT_PORT}"));
        }
        let log = std::env::temp_dir().join(format!("shardik-bs-dns-{}.log", std::process::id()));
        let stderr = std::fs::File::create(&log).expect("create the DNS server's log");
        let child = Command::new("ip")
            .args(["netns", "exec", &dns.netns, dnsmasq])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("start dnsmasq");
        let mut server = DnsServer { child, log };
        let deadline = Instant::now() + BOUND;
        loop {
            let text = std::fs::read_to_string(&server.log).unwrap_or_default();
            if text.contains("started") {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("dnsmasq exited with {status}: {text}");
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq did not start within {BOUND:?}: {text}"
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// How node `i` (0-based; its DNS name is `node-{i+1}`) is started: no seed nodes,
/// discovery through `service` on the lab's DNS server.
fn spec(lab: &Lab, i: usize, service: &str, generation: usize) -> NodeSpec {
    let net = &lab.nodes[i];
    let mut spec = NodeSpec::new(&format!("node-{}-{generation}", i + 1), &[]).in_netns(&net.netns);
    spec.bind = format!("{}:{CLUSTER_PORT}", net.addr);
    spec.management = format!("{}:{MANAGEMENT_PORT}", net.addr);
    for (k, v) in BOOTSTRAP {
        spec = spec.env(k, v);
    }
    spec.env(
        "SHARDIK_DISCOVERY__DNS__NAMESERVERS",
        &format!("{}:53", lab.nodes[DNS].addr),
    )
    .env(
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__SERVICE_NAME",
        service,
    )
}

fn addresses(lab: &Lab) -> Vec<String> {
    (0..NODES)
        .map(|i| format!("{}:{CLUSTER_PORT}", lab.nodes[i].addr))
        .collect()
}

/// A start order from a fixed seed (xorshift; no dependency for one shuffle).
fn shuffled(seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..NODES).collect();
    let mut x = seed;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

/// Waits until all five list each other Up; then checks that exactly one node formed the
/// cluster, the lowest, and that the others joined. Returns the members' uids by address.
async fn one_cluster(
    http: &reqwest::Client,
    lab: &Lab,
    nodes: &mut [Node],
    what: &str,
) -> Vec<(String, String)> {
    let expected = addresses(lab);
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    let started = Instant::now();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let leader = wait_all_up(http, &mut refs, &expected).await;
    let formers: Vec<String> = nodes
        .iter()
        .filter(|n| n.stderr().contains(FORMED))
        .map(|n| n.spec.name.clone())
        .collect();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    assert_eq!(
        formers,
        vec!["node-1-0".to_string()],
        "{what}: exactly the lowest node forms the cluster\n{}",
        reports(&mut refs)
    );
    for n in nodes.iter() {
        let log = n.stderr();
        assert_eq!(
            log.matches(FORMED).count(),
            usize::from(n.spec.name == "node-1-0")
        );
        if n.spec.name != "node-1-0" {
            assert!(log.contains(JOINED), "{what}: {} joined", n.spec.name);
        }
    }
    // Probes counted, and the contact point's answer lists members.
    for n in nodes.iter() {
        let probes = metric_at(http, &n.spec.management, "shardik_bootstrap_probes_total")
            .await
            .expect("metrics");
        assert!(probes >= 1.0, "{what}: {} counted its probes", n.spec.name);
    }
    let seeds: Value = http
        .get(nodes[0].url("/bootstrap/seed-nodes"))
        .send()
        .await
        .expect("GET /bootstrap/seed-nodes")
        .json()
        .await
        .expect("JSON");
    assert_eq!(seeds["selfNode"], expected[0], "{seeds}");
    assert_eq!(
        seeds["seedNodes"].as_array().map(Vec::len),
        Some(5),
        "{seeds}"
    );
    say(&format!(
        "{what}: one cluster of {NODES} (leader {leader}), all Up {:.1} s after the last start",
        started.elapsed().as_secs_f64()
    ));
    let v = members(http, &nodes[0]).await.expect("members");
    member_list(&v)
        .into_iter()
        .map(|(a, u, _)| (a, u))
        .collect()
}

/// Starts the nodes in `order`, `gap` apart.
async fn start_in_order(lab: &Lab, order: &[usize], gap: Duration, service: &str) -> Vec<Node> {
    let mut started: Vec<Option<Node>> = (0..NODES).map(|_| None).collect();
    for (k, &i) in order.iter().enumerate() {
        if k > 0 {
            tokio::time::sleep(gap).await;
        }
        started[i] = Some(Node::spawn(spec(lab, i, service, 0)));
    }
    started
        .into_iter()
        .map(|n| n.expect("every node started"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_find_each_other_through_dns_and_form_one_cluster_whatever_the_order() {
    let lab = match Lab::create_named("shardik-bs", "shbs", NODES + 1) {
        Ok(lab) => lab,
        Err(LabError::CannotCreateNamespaces(why)) => {
            say(&format!(
                "SKIPPED netns_bootstrap: this machine cannot create network namespaces ({why})"
            ));
            return;
        }
        Err(LabError::Failed(why)) => panic!("cannot build the test network: {why}"),
    };
    let _dns = DnsServer::start(&lab);
    let http = client();
    let test_started = Instant::now();

    // 1. The lowest node last: the others wait for its answer, forming nothing meanwhile.
    let mut waiting: Vec<Node> = (1..NODES)
        .map(|i| Node::spawn(spec(&lab, i, SRV_NAME, 0)))
        .collect();
    {
        let log_paths: Vec<std::path::PathBuf> = waiting.iter().map(Node::log_path).collect();
        let mut refs: Vec<&mut Node> = waiting.iter_mut().collect();
        eventually(
            "nodes 2-5 wait for node 1's answer (the stable margin has passed)",
            BOUND,
            &mut refs,
            || {
                let logs: Vec<String> = log_paths
                    .iter()
                    .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                    .collect();
                async move {
                    match logs
                        .iter()
                        .position(|l| !l.contains(&format!("no recent answer from node-1.{ZONE}")))
                    {
                        None => Ok(()),
                        Some(k) => Err(format!("node {} is not waiting for node 1 yet", k + 2)),
                    }
                }
            },
        )
        .await;
    }
    for n in &waiting {
        let v = members(&http, n).await.expect("members");
        assert!(
            member_list(&v).is_empty(),
            "{} is in a cluster before the lowest node started: {v}",
            n.spec.name
        );
        assert!(
            !n.stderr().contains(FORMED),
            "{} formed a cluster",
            n.spec.name
        );
    }
    let mut nodes = vec![Node::spawn(spec(&lab, 0, SRV_NAME, 0))];
    nodes.append(&mut waiting);
    let first = one_cluster(&http, &lab, &mut nodes, "lowest last").await;

    // The lowest node leaves and comes back with new-cluster-enabled = off: it joins the
    // cluster the other four still form, and forms nothing of its own.
    nodes[0].signal("TERM");
    let status = nodes[0].wait_exit(BOUND).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "node 1 leaves and exits 0: {status:?}\n{}",
        nodes[0].report()
    );
    let mut restarted = Node::spawn(spec(&lab, 0, SRV_NAME, 1).env(
        "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__NEW_CLUSTER_ENABLED",
        "off",
    ));
    {
        let expected = addresses(&lab);
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        let (_, rest) = nodes.split_at_mut(1);
        let mut refs: Vec<&mut Node> = rest.iter_mut().collect();
        refs.push(&mut restarted);
        // Polled every 100 ms until all five are Up again: at no poll may the restarted node
        // be a member of a cluster without the other four.
        let http = &http;
        let restarted_mgmt = refs[NODES - 1].spec.management.clone();
        let want = &expected;
        eventually("the restarted node rejoins", BOUND, &mut refs, || {
            let restarted_mgmt = restarted_mgmt.clone();
            async move {
                let v = members_at(http, &restarted_mgmt).await?;
                let ms = member_list(&v);
                if !ms.is_empty() && ms.len() < NODES - 1 {
                    panic!(
                        "the restarted node is in a cluster of {} members: {v}",
                        ms.len()
                    );
                }
                exactly_up(&v, want)
            }
        })
        .await;
        wait_all_up(http, &mut refs, &expected).await;
    }
    let log = restarted.stderr();
    assert!(
        !log.contains(FORMED),
        "the restarted node formed a cluster:\n{log}"
    );
    assert!(
        log.contains(JOINED),
        "the restarted node joined through bootstrap"
    );
    let after = member_list(&members(&http, &restarted).await.expect("members"));
    for (addr, uid) in first.iter().skip(1) {
        assert!(
            after.iter().any(|(a, u, _)| a == addr && u == uid),
            "{addr} kept its incarnation {uid}: the same cluster ({after:?})"
        );
    }
    say("restart: node 1 rejoined the cluster of the other four with new-cluster-enabled = off");
    drop(nodes);
    drop(restarted);

    // 2. Reverse order, 300 ms apart; 3. a shuffle with a fixed seed, 450 ms apart.
    for (what, order, gap) in [
        ("reverse", vec![4, 3, 2, 1, 0], Duration::from_millis(300)),
        (
            "shuffled (seed 21)",
            shuffled(21),
            Duration::from_millis(450),
        ),
    ] {
        say(&format!("{what}: start order {order:?}"));
        let mut nodes = start_in_order(&lab, &order, gap, SRV_NAME).await;
        one_cluster(&http, &lab, &mut nodes, what).await;
    }

    // 4. All at once, through the A records of the plain name.
    let mut nodes = start_in_order(&lab, &[0, 1, 2, 3, 4], Duration::ZERO, ZONE).await;
    one_cluster(&http, &lab, &mut nodes, "all at once (A records)").await;
    drop(nodes);
    say(&format!(
        "netns_bootstrap: all scenarios in {:.1} s",
        test_started.elapsed().as_secs_f64()
    ));
}
