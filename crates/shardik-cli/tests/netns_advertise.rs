//! Nodes known by host names, in real network namespaces: three `shardik node --demo-counters`
//! processes, each in a Linux network namespace of its own (`support/netns.rs`), bound to
//! `0.0.0.0:2552` and advertising `node-N.shardik.test:2552`. The names resolve through a hosts
//! file inside each namespace (`ip netns exec` bind-mounts `/etc/netns/NAME/hosts` over
//! `/etc/hosts`), as a headless service's DNS names would in Kubernetes; every node is seeded
//! by the name `seeds.shardik.test:2552`, an alias of node 0 that is no node's identity.
//!
//! Asserted: the three form one cluster whose members are the advertised names (never the
//! alias, never `0.0.0.0`), and serve increments of durable counters through every node, the
//! counters living on more than one node.
//!
//! Needs root and iproute2's `ip`: skipped, with the reason printed, only when this machine
//! cannot create network namespaces. Namespaces, links and hosts files carry the test process's
//! id (no collision with `netns_partition.rs` running beside it) and are removed when the test
//! ends, also when it fails.

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::Value;
use support::netns::{Lab, LabError};
use support::*;

const NODES: usize = 3;
const CLUSTER_PORT: u16 = 2552;
const MANAGEMENT_PORT: u16 = 8558;
const SEED_ALIAS: &str = "seeds.shardik.test";
/// Counters incremented, each once through every node.
const COUNTERS: usize = 30;
/// The management API listens beyond loopback: increments need the bearer token.
const TOKEN: &str = "netns-advertise-test-token";

fn name_of(i: usize) -> String {
    format!("node-{i}.shardik.test")
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The hosts file of every namespace: each node's name, and the seed alias for node 0.
fn hosts(lab: &Lab) -> String {
    let mut text = String::from("127.0.0.1 localhost\n");
    for (i, node) in lab.nodes.iter().enumerate() {
        text.push_str(&format!("{} {}\n", node.addr, name_of(i)));
    }
    text.push_str(&format!("{} {SEED_ALIAS}\n", lab.nodes[0].addr));
    text
}

fn spec(lab: &Lab, i: usize, store: &str, token_file: &std::path::Path) -> NodeSpec {
    let net = &lab.nodes[i];
    let mut spec = NodeSpec::new(&format!("n{i}"), &[format!("{SEED_ALIAS}:{CLUSTER_PORT}")])
        .in_netns(&net.netns)
        .arg("--advertise")
        .arg(&format!("{}:{CLUSTER_PORT}", name_of(i)))
        .arg("--demo-counters")
        .arg("--store")
        .arg(store)
        .env(WRITES_ENABLED.0, WRITES_ENABLED.1)
        .env(
            "SHARDIK_MANAGEMENT__HTTP__AUTH_TOKEN_FILE",
            &token_file.display().to_string(),
        )
        .env("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "30");
    spec.bind = format!("0.0.0.0:{CLUSTER_PORT}");
    spec.management = format!("{}:{MANAGEMENT_PORT}", net.addr);
    spec
}

async fn increment(
    http: &reqwest::Client,
    management: &str,
    counter: usize,
) -> Result<Value, String> {
    let resp = http
        .post(format!(
            "http://{management}/demo/counter/c{counter}/increment"
        ))
        .bearer_auth(TOKEN)
        .timeout(Duration::from_secs(6))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("{status} {body}"));
    }
    Ok(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_bound_to_every_address_and_known_by_name_form_one_cluster_and_serve_counters() {
    // Declared first, dropped last: the nodes die before their namespaces and hosts files go.
    let lab = match Lab::create(NODES) {
        Ok(lab) => lab,
        Err(LabError::CannotCreateNamespaces(why)) => {
            say(&format!(
                "SKIPPED netns_advertise: this machine cannot create network namespaces \
                 (it needs root and iproute2's `ip`): {why}"
            ));
            return;
        }
        Err(LabError::Failed(why)) => panic!("building the test network failed: {why}"),
    };
    lab.write_hosts(&hosts(&lab))
        .unwrap_or_else(|e| panic!("cannot write the namespaces' hosts files: {e}"));
    let token_file =
        std::env::temp_dir().join(format!("shardik-netns-adv-token-{}", std::process::id()));
    std::fs::write(&token_file, TOKEN).expect("write the token file");
    let store = fresh_sqlite_store("netns-advertise");
    say(&format!(
        "netns_advertise: namespaces {}-*, store {store}",
        lab.prefix()
    ));
    let http = client();
    // Started last-to-first: the joiners ask the alias before node 0 listens.
    let mut nodes: Vec<Node> = (0..NODES)
        .rev()
        .map(|i| Node::spawn(spec(&lab, i, &store, &token_file)))
        .collect();
    nodes.reverse();
    let names: Vec<String> = (0..NODES)
        .map(|i| format!("{}:{CLUSTER_PORT}", name_of(i)))
        .collect();
    let expected: Vec<&str> = names.iter().map(String::as_str).collect();
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        wait_all_up(&http, &mut refs, &expected).await;
    }

    // Every counter incremented once through every node. An attempt that got no answer may
    // still have been applied, so an answer's value lies between the increments answered
    // before it (plus itself) and those attempted; normally the two are equal. The counters
    // live on more than one node, named by their advertised names.
    let managements: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let mut homes = std::collections::BTreeSet::new();
    let mut attempts = [0u64; COUNTERS];
    let mut acked = [0u64; COUNTERS];
    let started = std::time::Instant::now();
    for round in 0..NODES {
        for c in 0..COUNTERS {
            let via = &managements[(c + round) % NODES];
            let body = loop {
                attempts[c] += 1;
                match increment(&http, via, c).await {
                    Ok(body) => break body,
                    Err(e) if started.elapsed() < BOUND => {
                        say(&format!("c{c} through {via}: {e}; trying again"));
                        tokio::time::sleep(POLL).await;
                    }
                    Err(e) => {
                        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
                        panic!("c{c} through {via}: {e}\n{}", reports(&mut refs));
                    }
                }
            };
            acked[c] += 1;
            let value = body["value"].as_u64().unwrap_or_default();
            assert!(
                (acked[c]..=attempts[c]).contains(&value),
                "c{c}: {value} after {} answered of {} attempted: {body}",
                acked[c],
                attempts[c]
            );
            let home = body["node"].as_str().unwrap_or_default().to_string();
            assert!(expected.contains(&home.as_str()), "c{c} lives on {home}");
            homes.insert(home);
        }
    }
    assert!(homes.len() > 1, "counters spread over the nodes: {homes:?}");
    say(&format!("netns_advertise: counters on {homes:?}"));

    drop(nodes);
    let _ = std::fs::remove_file(&token_file);
    // The nodes are gone: the store's files go with it.
    drop(store);
    drop(lab);
}
