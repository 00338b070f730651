//! A node's identity apart from where it listens (`--bind` and `--advertise`, the settings
//! `cluster.bind-address` and `cluster.canonical-address`), over loopback: nodes bound to
//! `0.0.0.0` advertise `127.0.0.2`/`127.0.0.3` addresses and are seeded by an alias
//! (`localhost:PORT`, and the IP `127.0.0.1:PORT`, where the seed is `127.0.0.2:PORT`). They
//! form one cluster whose members are the advertised addresses only; a handshake addressed to
//! a different node, or to a name nobody can resolve, is still refused and counted; an
//! identity that peers cannot dial stops the node at start, naming the key.
//!
//! The same in network namespaces, with host names resolved through `/etc/hosts` entries:
//! `netns_advertise.rs`.

mod support;

use std::time::Duration;

use shardik_core::membership::{Address, UniqueAddress};
use support::raw::connect_plain_to;
use support::*;

const CLUSTER: &str = "shardik";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_bound_to_every_address_and_seeded_by_an_alias_form_one_cluster_of_advertised_addresses()
 {
    let http = client();
    let (pa, pb) = (free_port(), free_port());
    let a_id = format!("127.0.0.2:{pa}");
    let b_id = format!("127.0.0.3:{pb}");
    // The seed as the others name it: an alias of node a, which a itself is given too (it
    // learns the alias is itself and forms the cluster).
    let alias = format!("localhost:{pa}");
    let spec = |name: &str, port: u16, id: &str, seed: &str| {
        let mut spec = NodeSpec::new(name, &[seed.to_string()])
            .arg("--advertise")
            .arg(id)
            .env(WRITES_ENABLED.0, WRITES_ENABLED.1);
        spec.bind = format!("0.0.0.0:{port}");
        spec
    };
    let mut a = Node::spawn(spec("a", pa, &a_id, &alias));
    let mut b = Node::spawn(spec("b", pb, &b_id, &alias));
    // A node whose identity is its bind address, seeded by another address of node a.
    let mut c = Node::spawn(NodeSpec::new("c", &[format!("127.0.0.1:{pa}")]));
    let c_id = c.spec.bind.clone();
    let expected = [a_id.as_str(), b_id.as_str(), c_id.as_str()];
    wait_all_up(&http, &mut [&mut a, &mut b, &mut c], &expected).await;

    // The joiners learnt who answered at the alias, and closed their lanes to it once members.
    let learnt = format!("{alias} is {a_id}");
    let closed = format!("closing the lanes to seed alias {alias}");
    let b_log = b.log_path();
    eventually(
        "b logged that the alias is a, then closed its lanes to it",
        BOUND,
        &mut [&mut b],
        || {
            let log = std::fs::read_to_string(&b_log).unwrap_or_default();
            let (learnt, closed) = (learnt.clone(), closed.clone());
            async move {
                if log.contains(&learnt) && log.contains(&closed) {
                    Ok(())
                } else {
                    Err(format!("no `{learnt}` and `{closed}` in b's log yet"))
                }
            }
        },
    )
    .await;

    // A stranger dialling a's advertised address but naming c, a node really listening
    // elsewhere, is refused (as before), and so is one naming a host nobody can resolve; both
    // are counted by reason, and the answer comes within the handshake bound.
    let me = UniqueAddress::new(Address::new("127.0.0.9", 1), 99);
    let a_management = a.spec.management.clone();
    let refused_before = |reason: &'static str| {
        let http = http.clone();
        let management = a_management.clone();
        async move {
            metric_sum_with_label(
                &http,
                &management,
                "shardik_transport_refused_total",
                &format!("reason=\"{reason}\""),
            )
            .await
            .expect("metrics")
        }
    };
    let wrong_before = refused_before("wrong-recipient").await;
    let unresolved_before = refused_before("recipient-unresolved").await;
    let other_node: Address = c_id.parse().expect("address");
    let started = std::time::Instant::now();
    let err = connect_plain_to(&a_id, other_node.clone(), &me, CLUSTER)
        .await
        .err()
        .expect("a handshake meant for c is refused by a");
    assert!(
        err.contains(&format!("wanted to reach {other_node}")),
        "the refusal says why: {err}"
    );
    let nowhere = Address::new("nowhere.invalid", pa);
    let err = connect_plain_to(&a_id, nowhere, &me, CLUSTER)
        .await
        .err()
        .expect("a handshake naming a host nobody resolves is refused");
    assert!(err.contains("could not resolve"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refusals come within the handshake bounds, took {:?}",
        started.elapsed()
    );
    // One naming a's alias, dialled where the alias leads, is accepted, like the joiners'
    // were; dialled at a's advertised address it is not, since `localhost` does not lead
    // there.
    let via_alias = format!("127.0.0.1:{pa}");
    connect_plain_to(&via_alias, alias.parse().expect("address"), &me, CLUSTER)
        .await
        .expect("a handshake naming a's alias where it leads is accepted");
    connect_plain_to(&a_id, alias.parse().expect("address"), &me, CLUSTER)
        .await
        .err()
        .expect("a handshake naming a's alias at another of its addresses is refused");
    eventually("a counted both refusals", BOUND, &mut [&mut a], || {
        let wrong = refused_before("wrong-recipient");
        let unresolved = refused_before("recipient-unresolved");
        async move {
            let (w, u) = (wrong.await, unresolved.await);
            if w >= wrong_before + 2.0 && u > unresolved_before {
                Ok(())
            } else {
                Err(format!(
                    "wrong-recipient {wrong_before} -> {w}, recipient-unresolved \
                         {unresolved_before} -> {u}"
                ))
            }
        }
    })
    .await;

    // Nothing changed for the members.
    wait_all_up(&http, &mut [&mut a, &mut b, &mut c], &expected).await;
}

/// An identity peers cannot dial (`0.0.0.0` without `--advertise`, an advertised `0.0.0.0`
/// or port 0) stops the node at start with exit code 2 and a message naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_peers_cannot_dial_stops_the_node_naming_the_key() {
    let port = free_port();
    for (extra, key) in [
        (vec![], "cluster.bind-address"),
        (
            vec!["--advertise", "0.0.0.0:2552"],
            "cluster.canonical-address",
        ),
        (
            vec!["--advertise", "pod-7.svc:0"],
            "cluster.canonical-address",
        ),
    ] {
        let mut spec = NodeSpec::new("bad", &[]);
        spec.bind = format!("0.0.0.0:{port}");
        for a in &extra {
            spec = spec.arg(a);
        }
        let mut node = Node::spawn(spec);
        let status = node
            .wait_exit(BOUND)
            .await
            .unwrap_or_else(|| panic!("{extra:?}: still running\n{}", node.report()));
        assert_eq!(status.code(), Some(2), "{extra:?}: {}", node.report());
        let log = node.stderr();
        assert!(log.contains(key), "{extra:?}: names {key}: {log}");
    }
}
