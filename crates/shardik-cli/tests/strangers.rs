//! A stranger that speaks our protocol gets nothing through: a raw client (our frames written
//! by hand, not through the node's own code paths; `support/raw.rs`) passes the handshake of a
//! running cluster under a made-up identity and sends `Down`, `Leave` and `Quarantined` for
//! every member, the kind of attack that once stopped a whole cluster in seconds, and sharding
//! envelopes that would increment a demo counter, which once reached the entity. Every member
//! stays Up and keeps its incarnation, the counter keeps its value, and every refusal is
//! counted.
//!
//! On plain TCP the stranger needs only the cluster name. With mutual TLS it holds a valid
//! certificate from the cluster's CA, for the host it connects from, and is still no member;
//! a plain client that speaks our handshake to a TLS node does not even get that far.

mod support;

use serde_json::Value;
use shardik_core::membership::{Address, UniqueAddress};
use shardik_runtime::tls::certs::{CertificateAuthority, NodeCertRequest, Validity};
use shardik_wire::{ShardingBody, ShardingLimits, WireEnvelope, decode_sharding_bytes};
use support::raw::{
    COUNTER_KIND, FORGED_INCREMENTS_PER_ROUND, INCREMENT_PAYLOAD, RawPeer, RawTls, connect_plain,
    connect_tls, forged_increments, forged_membership,
};
use support::tls_nodes::{CLUSTER, TRUST_DOMAIN, tls_node};
use support::*;
use tokio::io::{AsyncRead, AsyncWrite};

/// `cluster.sharding.number-of-shards` of the clusters here; the forged envelopes compute
/// their shard with it, as a member's region would.
const SHARDS: u32 = 50;
const SHARDS_ENV: (&str, &str) = ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "50");
/// The counter the strangers try to increment.
const TARGET: &str = "stranger-target";
/// Increments through the management API before the attack, so the entity exists and has a
/// value that is not its initial one.
const INCREMENTS_BEFORE: u64 = 3;

/// The forged frames decode to exactly the envelopes a member's region would send to
/// increment [`TARGET`] (the payload is pinned to the counter's codec by a unit test in
/// `counter.rs`): the refusals below are refusals of valid increments, not of garbage.
#[test]
fn the_forged_frames_are_valid_increments_of_the_target_counter() {
    let shard = shardik_core::sharding::shard_id_for(TARGET, SHARDS).unwrap();
    let want = WireEnvelope {
        entity_id: TARGET.into(),
        shard,
        payload: INCREMENT_PAYLOAD.to_vec().into(),
        ask_id: None,
    };
    let mut envelopes = Vec::new();
    for frame in forged_increments(TARGET, SHARDS) {
        let decoded = decode_sharding_bytes(frame, &ShardingLimits::default()).expect("decodes");
        assert_eq!(&*decoded.kind, COUNTER_KIND);
        match decoded.body {
            ShardingBody::Envelope(e) => envelopes.push(e),
            ShardingBody::Envelopes(es) => envelopes.extend(es),
            other => panic!("not an envelope: {other:?}"),
        }
    }
    assert_eq!(envelopes.len() as u64, FORGED_INCREMENTS_PER_ROUND);
    assert!(envelopes.iter().all(|e| *e == want), "{envelopes:?}");
}

/// `POST /demo/counter/{id}/increment` at `management`: the value it answers.
async fn increment(http: &reqwest::Client, management: &str, id: &str) -> Result<u64, String> {
    counter_answer(
        http.post(format!("http://{management}/demo/counter/{id}/increment")),
        management,
    )
    .await
}

/// `GET /demo/counter/{id}` at `management`: the counter's value.
async fn read_counter(http: &reqwest::Client, management: &str, id: &str) -> Result<u64, String> {
    counter_answer(
        http.get(format!("http://{management}/demo/counter/{id}")),
        management,
    )
    .await
}

async fn counter_answer(req: reqwest::RequestBuilder, management: &str) -> Result<u64, String> {
    let resp = req.send().await.map_err(|e| format!("{management}: {e}"))?;
    let status = resp.status().as_u16();
    let body: Value = resp
        .json()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    if status != 200 {
        return Err(format!("{management}: {status} {body}"));
    }
    body["value"]
        .as_u64()
        .ok_or_else(|| format!("{management}: no value in {body}"))
}

/// Waits until every node's counter region is registered with the coordinator, then
/// increments [`TARGET`] [`INCREMENTS_BEFORE`] times through the first node and waits until
/// every node reads the same value. Returns that value.
async fn counter_with_known_value(http: &reqwest::Client, nodes: &mut [&mut Node]) -> u64 {
    let mgmt = managements(nodes);
    eventually("every counter region is registered", BOUND, nodes, || {
        let mgmt = &mgmt;
        async move {
            for m in mgmt {
                let v: Value = http
                    .get(format!("http://{m}/cluster/shards/counter"))
                    .send()
                    .await
                    .map_err(|e| format!("{m}: {e}"))?
                    .json()
                    .await
                    .map_err(|e| format!("{m}: {e}"))?;
                if v["registered"] != Value::Bool(true) {
                    return Err(format!("{m} not registered yet: {v}"));
                }
            }
            Ok(())
        }
    })
    .await;
    let mut answered = 0;
    for _ in 0..INCREMENTS_BEFORE {
        answered = eventually("an increment is answered", BOUND, nodes, || {
            increment(http, &mgmt[0], TARGET)
        })
        .await;
    }
    assert!(answered >= INCREMENTS_BEFORE, "answered {answered}");
    eventually("every node reads the counter", BOUND, nodes, || {
        let mgmt = &mgmt;
        async move {
            for m in mgmt {
                let v = read_counter(http, m, TARGET).await?;
                if v != answered {
                    return Err(format!(
                        "{m} reads {v}, the last increment answered {answered}"
                    ));
                }
            }
            Ok(answered)
        }
    })
    .await
}

/// What each node counted as refused from strangers so far.
#[derive(Clone, Copy, Debug, Default)]
struct Refusals {
    /// Membership messages refused as not from a member.
    membership: f64,
    /// User frames (sharding traffic) dropped as not from a member.
    sharding: f64,
}

async fn refusals(http: &reqwest::Client, management: &str) -> Result<Refusals, String> {
    let dropped =
        |label| metric_sum_with_label(http, management, "shardik_dropped_messages_total", label);
    Ok(Refusals {
        membership: dropped("reason=\"not-from-member\"").await?,
        sharding: dropped("reason=\"not-a-member\"").await?,
    })
}

/// The sorted `(address, uid, status)` members each node lists.
async fn views(http: &reqwest::Client, nodes: &[&mut Node]) -> Vec<Vec<(String, String, String)>> {
    let mut views = Vec::new();
    for n in nodes {
        let mut list = member_list(&members(http, n).await.expect("members"));
        list.sort();
        views.push(list);
    }
    views
}

/// What a cluster looked like before an attack.
struct Before {
    views: Vec<Vec<(String, String, String)>>,
    refusals: Vec<Refusals>,
    counter: u64,
}

async fn before_attack(http: &reqwest::Client, nodes: &mut [&mut Node]) -> Before {
    let counter = counter_with_known_value(http, nodes).await;
    let mut refused = Vec::new();
    for m in managements(nodes) {
        refused.push(refusals(http, &m).await.expect("metrics"));
    }
    Before {
        views: views(http, nodes).await,
        refusals: refused,
        counter,
    }
}

/// What one stranger's connection sent.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    membership: usize,
    user_frames: usize,
}

/// Sends every forged membership command and every forged increment on `peer`.
async fn attack<S: AsyncRead + AsyncWrite + Unpin>(
    peer: &mut RawPeer<S>,
    stranger: &UniqueAddress,
    members: &[String],
) -> Sent {
    // The handshake reply told the stranger the node's uid: just what a forged
    // `Quarantined` needs.
    let victim = peer.accepted_by().clone();
    let forged = forged_membership(stranger, &victim, members);
    for msg in &forged {
        peer.send_membership(msg).await.expect("the node reads on");
    }
    let increments = forged_increments(TARGET, SHARDS);
    for frame in &increments {
        peer.send_user(frame.clone())
            .await
            .expect("the node reads on");
    }
    Sent {
        membership: forged.len(),
        user_frames: increments.len(),
    }
}

/// Waits until each node counted every message its stranger sent as refused (the outcome to
/// wait for before judging the state: a counted refusal is a message that went nowhere).
async fn wait_for_refusals(
    http: &reqwest::Client,
    nodes: &mut [&mut Node],
    before: &[Refusals],
    sent: &[Sent],
) {
    let mgmt = managements(nodes);
    eventually(
        "every node counts every forged message as refused",
        BOUND,
        nodes,
        || {
            let mgmt = &mgmt;
            async move {
                for ((m, before), sent) in mgmt.iter().zip(before).zip(sent) {
                    let now = refusals(http, m).await?;
                    let membership = now.membership - before.membership;
                    let sharding = now.sharding - before.sharding;
                    if membership < sent.membership as f64 || sharding < sent.user_frames as f64 {
                        return Err(format!(
                            "{m} refused {membership} of {} membership messages and {sharding} of \
                             {} user frames",
                            sent.membership, sent.user_frames
                        ));
                    }
                }
                Ok(())
            }
        },
    )
    .await;
}

/// Every node is alive and lists the members it listed before, all Up with the same
/// incarnations, the stranger nowhere; the counter has the value it had and the cluster
/// serves it.
async fn nothing_changed(
    http: &reqwest::Client,
    nodes: &mut [&mut Node],
    before: &Before,
    stranger: &UniqueAddress,
) {
    for n in nodes.iter_mut() {
        if n.exited().is_some() {
            panic!("a node stopped:\n{}", n.report());
        }
    }
    let now = views(http, nodes).await;
    for (i, (now, before)) in now.iter().zip(&before.views).enumerate() {
        assert_eq!(now, before, "{} changed its view", nodes[i].spec.name);
        assert!(now.iter().all(|(_, _, status)| status == "Up"), "{now:?}");
        assert!(
            !now.iter()
                .any(|(a, _, _)| *a == stranger.address.to_string()),
            "{} lists the stranger: {now:?}",
            nodes[i].spec.name
        );
    }
    let mgmt = managements(nodes);
    for m in &mgmt {
        let value = read_counter(http, m, TARGET)
            .await
            .expect("the counter reads");
        assert_eq!(
            value, before.counter,
            "{m}: the counter moved under forged increments"
        );
    }
    let next = increment(http, &mgmt[1], TARGET)
        .await
        .expect("the cluster still serves increments");
    assert_eq!(next, before.counter + 1);
}

/// A made-up incarnation at a local port nobody uses.
fn made_up_stranger() -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", free_port()), 0x5eed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_membership_and_sharding_traffic_from_a_stranger_change_nothing() {
    let http = client();
    let store = fresh_sqlite_store("strangers");
    let mut nodes = start_cluster_with_args(
        &http,
        "stranger",
        3,
        &[SHARDS_ENV],
        &["--demo-counters", "--store", &store],
    )
    .await;
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let before = before_attack(&http, &mut refs).await;

    let stranger = made_up_stranger();
    let mut peers = Vec::new();
    let mut sent = Vec::new();
    for target in &addrs {
        let mut peer = connect_plain(target, &stranger, CLUSTER)
            .await
            .expect("the stranger passes the handshake: it names the right cluster");
        sent.push(attack(&mut peer, &stranger, &addrs).await);
        // Held open until the checks are done: the node must not need to close it to be safe.
        peers.push(peer);
    }

    wait_for_refusals(&http, &mut refs, &before.refusals, &sent).await;
    nothing_changed(&http, &mut refs, &before, &stranger).await;
    drop(peers);
}

/// The sum of `shardik_transport_refused_total{reason="REASON"}` at `management`.
async fn transport_refused(
    http: &reqwest::Client,
    management: &str,
    reason: &str,
) -> Result<f64, String> {
    metric_sum_with_label(
        http,
        management,
        "shardik_transport_refused_total",
        &format!("reason=\"{reason}\""),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_with_a_valid_certificate_gets_nothing_through_over_tls() {
    let http = client();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cluster ca", Validity::days_from_now(30)).unwrap();
    let store = fresh_sqlite_store("tls-strangers");
    let specs: Vec<NodeSpec> = (0..3)
        .map(|i| {
            tls_node(
                dir.path(),
                &format!("tls-stranger{i}"),
                &[],
                &ca,
                ca.cert_pem(),
            )
            .env(SHARDS_ENV.0, SHARDS_ENV.1)
            .arg("--demo-counters")
            .arg("--store")
            .arg(&store)
        })
        .collect();
    let seeds: Vec<String> = specs.iter().take(2).map(|s| s.bind.clone()).collect();
    let mut nodes: Vec<Node> = specs
        .into_iter()
        .map(|mut s| {
            s.seeds = seeds.clone();
            Node::spawn(s)
        })
        .collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let expected: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    wait_all_up(&http, &mut refs, &expected).await;
    let before = before_attack(&http, &mut refs).await;

    // A valid certificate of this cluster from its CA, naming the host the stranger connects
    // from (the node checks that the host claimed in our handshake is named by it): what a
    // machine that once held a member's certificate, or a second service sharing the CA's
    // certificates, might have.
    let issued = ca
        .issue(&NodeCertRequest::for_node(
            TRUST_DOMAIN,
            CLUSTER,
            "127.0.0.1",
            5,
        ))
        .unwrap();
    let tls = RawTls::new(&issued.cert_pem, &issued.key_pem, ca.cert_pem());
    let stranger = made_up_stranger();
    let mut peers = Vec::new();
    let mut sent = Vec::new();
    for target in &addrs {
        let mut peer = connect_tls(target, &stranger, CLUSTER, &tls)
            .await
            .expect("a holder of a valid certificate passes both handshakes");
        sent.push(attack(&mut peer, &stranger, &addrs).await);
        peers.push(peer);
    }
    wait_for_refusals(&http, &mut refs, &before.refusals, &sent).await;
    nothing_changed(&http, &mut refs, &before, &stranger).await;

    // A plain client that speaks our handshake to a TLS node is not answered with ours: the
    // node reads its first bytes as TLS, refuses them and closes; the refusal is counted.
    let mgmt = managements(&refs);
    let mut not_tls_before = Vec::new();
    for m in &mgmt {
        not_tls_before.push(transport_refused(&http, m, "tls-not-tls").await.unwrap());
    }
    for target in &addrs {
        match connect_plain(target, &made_up_stranger(), CLUSTER).await {
            Ok(peer) => panic!(
                "{target} accepted our handshake over plain TCP (from {})",
                peer.accepted_by()
            ),
            Err(e) => println!("plain client to TLS node {target}: {e}"),
        }
    }
    eventually(
        "every TLS node counts the plain client's refusal",
        BOUND,
        &mut refs,
        || {
            let (mgmt, not_tls_before, http) = (&mgmt, &not_tls_before, &http);
            async move {
                for (m, before) in mgmt.iter().zip(not_tls_before) {
                    let now = transport_refused(http, m, "tls-not-tls").await?;
                    if now <= *before {
                        return Err(format!("{m}: {now} tls-not-tls refusals, as before"));
                    }
                }
                Ok(())
            }
        },
    )
    .await;
    nothing_changed(&http, &mut refs, &before_with_one_more(&before), &stranger).await;
    drop(peers);
}

/// `before`, with the increment [`nothing_changed`] made through the API counted.
fn before_with_one_more(before: &Before) -> Before {
    Before {
        views: before.views.clone(),
        refusals: before.refusals.clone(),
        counter: before.counter + 1,
    }
}
