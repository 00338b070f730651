//! Join compatibility with the real binary: a node whose `cluster.sharding.number-of-shards`
//! differs from the cluster's is refused by the member it asks, on every join path (its seed
//! list, `shardik join` through the management API, cluster bootstrap over config discovery,
//! a restart of a member with a changed value). The refused node exits non-zero naming the key and both values, never shows up in
//! any member's `/cluster/members`, and the members stay Up. With
//! `cluster.configuration-compatibility-check.enforce-on-join = off` on the members, it joins
//! and a member logs the difference at WARN.

mod support;

use std::process::Command;
use std::time::Instant;

use support::*;

const SHARDS: &str = "SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS";
const JOIN_INCOMPATIBLE: &str = "shardik_join_incompatible_total";
const ENFORCE: &str = "SHARDIK_CLUSTER__CONFIGURATION_COMPATIBILITY_CHECK__ENFORCE_ON_JOIN";
/// What both sides say about the difference: the key and both values.
const DIFFERENCE: &str =
    "`cluster.sharding.number-of-shards` differs: the cluster has `1000`, the joiner has `500`";

fn addrs(nodes: &[Node]) -> Vec<String> {
    nodes.iter().map(|n| n.addr().to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Watches until `joiner` exits (bounded): meanwhile no member may list any incarnation at
/// `joiner`'s address other than `allowed_uid` (the old incarnation of a restarted member).
/// Then the joiner must have exited with code 4 and said why, naming the key and both
/// values, and some member must have logged the refusal.
async fn assert_refused(
    http: &reqwest::Client,
    members: &mut [&mut Node],
    joiner: &mut Node,
    allowed_uid: Option<&str>,
) {
    let mgmt = managements(members);
    let joiner_addr = joiner.addr().to_string();
    let deadline = Instant::now() + BOUND;
    let status = loop {
        for m in &mgmt {
            let v = members_at(http, m).await.expect("members");
            let intruder = member_list(&v)
                .into_iter()
                .find(|(a, uid, _)| *a == joiner_addr && Some(uid.as_str()) != allowed_uid);
            if let Some(found) = intruder {
                let mut all: Vec<&mut Node> = members.iter_mut().map(|n| &mut **n).collect();
                all.push(joiner);
                panic!(
                    "{m} lists the refused joiner {found:?}: {v}\n{}",
                    reports(&mut all)
                );
            }
        }
        if let Some(status) = joiner.exited() {
            break status;
        }
        if Instant::now() >= deadline {
            panic!("the joiner still runs after {BOUND:?}\n{}", joiner.report());
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(status.code(), Some(4), "{}", joiner.report());
    let said = joiner.stderr();
    assert!(
        said.contains("the cluster refused this node's configuration") && said.contains(DIFFERENCE),
        "the refused node does not name the key and both values\n{}",
        joiner.report()
    );
    let logged = members.iter().any(|n| {
        n.stderr()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("refused a joiner") && l.contains(DIFFERENCE))
    });
    assert!(logged, "no member logged the refusal\n{}", reports(members));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_number_of_shards_is_refused_through_seeds_shardik_join_and_bootstrap() {
    let http = client();
    let mut nodes = start_cluster(&http, "compat", 2, &[]).await;
    let expected = addrs(&nodes);

    // (a) Through its seed list (InitJoin, then it would send its Join).
    let mut by_seeds = Node::spawn(NodeSpec::new("by-seeds", &expected).env(SHARDS, "500"));
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let nodes_mgmt = managements(&refs);
    assert_refused(&http, &mut refs, &mut by_seeds, None).await;
    wait_all_up(&http, &mut refs, &strs(&expected)).await;

    // (b) Through `shardik join` (POST /cluster/members on the joiner): its Join goes
    // straight to the member named, which refuses it (counted there).
    let refusals = || async {
        metric_sum_with_label(
            &http,
            &nodes_mgmt[1],
            JOIN_INCOMPATIBLE,
            "outcome=\"refused\"",
        )
        .await
        .expect("metrics")
    };
    let before = refusals().await;
    let mut direct = Node::spawn(
        NodeSpec::new("direct", &[])
            .env(SHARDS, "500")
            .env(WRITES_ENABLED.0, WRITES_ENABLED.1),
    );
    let joined = eventually("shardik join is accepted", BOUND, &mut refs, || {
        let (management, target) = (direct.spec.management.clone(), expected[1].clone());
        async move {
            let out = Command::new(env!("CARGO_BIN_EXE_shardik"))
                .args(["join", &target, "--management", &management])
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        }
    })
    .await;
    assert!(!joined.trim().is_empty(), "shardik join printed nothing");
    assert_refused(&http, &mut refs, &mut direct, None).await;
    let after = refusals().await;
    assert!(
        after > before,
        "the member joined did not count the refusal: {before} -> {after}"
    );
    wait_all_up(&http, &mut refs, &strs(&expected)).await;

    // (c) Through cluster bootstrap: no seeds, the members' management APIs as contact points
    // (config discovery; all on one host, so every port is kept); it finds their cluster and
    // asks to join it.
    let config = std::env::temp_dir().join(format!("shardik-compat-{}.toml", std::process::id()));
    let endpoints: Vec<String> = nodes_mgmt
        .iter()
        .map(|m| {
            let (host, port) = m.rsplit_once(':').expect("HOST:PORT");
            format!("{{ host = \"{host}\", port = {port} }}")
        })
        .collect();
    std::fs::write(
        &config,
        format!(
            "[discovery]\nmethod = \"config\"\n\
             [discovery.config.services.compat]\nendpoints = [{}]\n\
             [management.cluster.bootstrap.contact-point-discovery]\nservice-name = \"compat\"\n\
             [management.cluster.bootstrap.contact-point]\nfilter-on-fallback-port = \"off\"\n",
            endpoints.join(", ")
        ),
    )
    .expect("write the bootstrap configuration");
    let mut by_bootstrap = Node::spawn(
        NodeSpec::new("by-bootstrap", &[])
            .env(SHARDS, "500")
            .arg("--config")
            .arg(config.to_str().expect("UTF-8 path")),
    );
    assert_refused(&http, &mut refs, &mut by_bootstrap, None).await;
    let _ = std::fs::remove_file(&config);
    wait_all_up(&http, &mut refs, &strs(&expected)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_with_another_number_of_shards_is_refused() {
    let http = client();
    let mut nodes = start_cluster(&http, "restart-compat", 3, &[]).await;
    let mut old = nodes.pop().expect("three nodes");
    let addr = old.addr().to_string();
    let old_uid = member_list(&members(&http, &nodes[0]).await.expect("members"))
        .into_iter()
        .find(|(a, _, _)| *a == addr)
        .map(|(_, uid, _)| uid)
        .expect("the node to restart is a member");
    old.kill9();
    // At once, on the same addresses, as a redeployed pod would be, with another value.
    let mut spec = old.spec.clone().env(SHARDS, "500");
    spec.name = format!("{}-changed", spec.name);
    drop(old);
    let mut restarted = Node::spawn(spec);

    let survivors = addrs(&nodes);
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    assert_refused(&http, &mut refs, &mut restarted, Some(&old_uid)).await;
    // The crashed incarnation is downed and removed; the two others stay Up.
    wait_all_up(&http, &mut refs, &strs(&survivors)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_enforcement_off_another_number_of_shards_joins_and_is_logged() {
    let http = client();
    let mut nodes = start_cluster(&http, "lenient", 2, &[(ENFORCE, "off")]).await;
    let seeds = addrs(&nodes);
    // The joiner enforces: the members' setting is the one that counts.
    nodes.push(Node::spawn(
        NodeSpec::new("other-shards", &seeds).env(SHARDS, "500"),
    ));
    let all = addrs(&nodes);
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    wait_all_up(&http, &mut refs, &strs(&all)).await;
    let warned = refs[..2].iter().any(|n| {
        n.stderr().lines().any(|l| {
            l.contains("WARN")
                && l.contains("let in a joiner")
                && l.contains("enforce-on-join is off")
                && l.contains(DIFFERENCE)
        })
    });
    assert!(
        warned,
        "no member logged the difference\n{}",
        reports(&mut refs)
    );
}
