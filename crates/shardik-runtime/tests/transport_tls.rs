//! The cluster transport with mutual TLS, over real loopback TCP: nodes of one CA and cluster
//! exchange membership and user messages in order; a node whose certificate is from another
//! CA, names another cluster, is expired, or does not name the host it claims delivers
//! nothing, and the refusal is counted; a plain TCP client that speaks our handshake gets
//! nothing through.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shardik_core::membership::{Address, Message, UniqueAddress};
use shardik_runtime::config::Settings;
use shardik_runtime::metrics as m;
use shardik_runtime::tls::TlsContext;
use shardik_runtime::tls::certs::{IssuedCert, NodeCertRequest, Validity};
use shardik_runtime::transport::{Outgoing, Receivers, Transport, TransportConfig};
use shardik_wire::{Frame, FrameCodec, Handshake, LocalIdentity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::pki::{new_ca, node_cert_for};
use common::{BOUND, counter, eventually, free_port, metrics};

const CLUSTER: &str = "orders";
/// A TLS context from `cert`, trusting `ca_pem`, for cluster [`CLUSTER`]; its files in `dir`.
fn context(dir: &Path, name: &str, cert: &IssuedCert, ca_pem: &str) -> TlsContext {
    let path = |suffix: &str| dir.join(format!("{name}{suffix}"));
    std::fs::write(path(".pem"), &cert.cert_pem).unwrap();
    std::fs::write(path("-key.pem"), &cert.key_pem).unwrap();
    std::fs::write(path("-ca.pem"), ca_pem).unwrap();
    let mut settings = Settings::reference().transport.tls;
    settings.enabled = true;
    settings.cert_file = path(".pem").display().to_string();
    settings.key_file = path("-key.pem").display().to_string();
    settings.ca_cert_file = path("-ca.pem").display().to_string();
    settings.require_mutual_authentication = true;
    settings.trust_domain = "shardik".to_string();
    settings.ssl_context_cache_ttl = Duration::from_secs(3600);
    TlsContext::new(&settings, CLUSTER).expect("usable TLS files")
}

/// A transport on a fresh loopback port with `tls`; every peer counts as a member.
async fn transport(tls: Option<TlsContext>) -> (Transport, Receivers) {
    let port = free_port();
    let identity = LocalIdentity {
        cluster_name: CLUSTER.into(),
        address: UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) + 7),
    };
    let config = TransportConfig {
        tls,
        reconnect_backoff_min: Duration::from_millis(20),
        reconnect_backoff_max: Duration::from_millis(200),
        ..TransportConfig::default()
    };
    Transport::start_accepting_everyone(&format!("127.0.0.1:{port}"), identity, config)
        .await
        .expect("transport starts")
}

fn heartbeat(from: &UniqueAddress, seq: u64) -> Outgoing {
    Outgoing::Membership(Message::Heartbeat {
        from: from.clone(),
        seq,
    })
}

fn numbered(i: u32) -> Outgoing {
    Outgoing::User(Bytes::from(i.to_be_bytes().to_vec()))
}

/// Sends `n` heartbeats and `n` numbered user payloads from `a` to `b`; checks that `b` gets
/// them all, in order, from `a`.
async fn exchange(a: &mut Transport, b: &Transport, b_rx: &mut Receivers, n: u32) {
    let to = b.identity().address.clone();
    let me = a.identity().clone();
    for i in 0..n {
        assert!(a.send(&to, heartbeat(&me, u64::from(i))));
        assert!(a.send(&to, numbered(i)));
    }
    for i in 0..n {
        let got = tokio::time::timeout(BOUND, b_rx.user.recv())
            .await
            .expect("user payload in time")
            .expect("open");
        assert_eq!(got.from, me);
        assert_eq!(
            &got.payload[..],
            &i.to_be_bytes(),
            "user payload {i} in order"
        );
    }
    for i in 0..n {
        let got = tokio::time::timeout(BOUND, b_rx.membership.recv())
            .await
            .expect("membership message in time")
            .expect("open");
        assert_eq!(got.from, me);
        match got.msg {
            Message::Heartbeat { seq, .. } => assert_eq!(seq, u64::from(i), "heartbeat in order"),
            other => panic!("not a heartbeat: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_one_ca_and_cluster_exchange_messages_in_order_both_ways() {
    let handle = metrics();
    let sessions = |direction: &str| {
        let labels = format!("direction=\"{direction}\"");
        counter(&handle, m::TRANSPORT_TLS_HANDSHAKES_TOTAL, &labels)
    };
    let (inbound_before, outbound_before) = (sessions("inbound"), sessions("outbound"));
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    let (mut a, mut a_rx) = transport(Some(context(
        dir.path(),
        "a",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    )))
    .await;
    let (mut b, mut b_rx) = transport(Some(context(
        dir.path(),
        "b",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    )))
    .await;
    exchange(&mut a, &b, &mut b_rx, 200).await;
    exchange(&mut b, &a, &mut a_rx, 200).await;
    // Each way, a control and a user connection, each one TLS session counted on both of its
    // ends (other tests of this binary run alongside and can only add to the counts).
    assert!(sessions("outbound") >= outbound_before + 4.0);
    assert!(sessions("inbound") >= inbound_before + 4.0);
    // Larger than a TLS record (16 KiB) and than what a socket takes at once: the writer
    // writes it in pieces, still in order.
    let to = b.identity().address.clone();
    let sender = a.user_sender();
    for i in 0..50u32 {
        let mut p = i.to_be_bytes().to_vec();
        p.resize(100_000, 0x5a);
        assert!(sender.send(&to, Bytes::from(p)).await);
    }
    for i in 0..50u32 {
        let got = tokio::time::timeout(BOUND, b_rx.user.recv())
            .await
            .expect("in time")
            .expect("open");
        assert_eq!(&got.payload[..4], &i.to_be_bytes());
        assert_eq!(got.payload.len(), 100_000);
    }
}

/// `bad` sends to a node with a good certificate; the receiver gets nothing and counts the
/// refusal under `reason`.
async fn refused(bad: TlsContext, good: TlsContext, reason: &str) {
    let handle = metrics();
    let labels = format!("reason=\"{reason}\"");
    let before = counter(&handle, m::TRANSPORT_REFUSED_TOTAL, &labels);
    let (mut sender, _s_rx) = transport(Some(bad)).await;
    let (receiver, mut r_rx) = transport(Some(good)).await;
    let to = receiver.identity().address.clone();
    let me = sender.identity().clone();
    // Keep sending until the receiver has refused a few connections (the sender reconnects
    // after each failure, with backoff), so that delivery had its chances.
    let mut seq = 0;
    eventually(&format!("refusals counted as {reason}"), || {
        seq += 1;
        assert!(sender.send(&to, heartbeat(&me, seq)));
        assert!(sender.send(&to, numbered(seq as u32)));
        counter(&handle, m::TRANSPORT_REFUSED_TOTAL, &labels) >= before + 3.0
    })
    .await;
    assert!(
        r_rx.membership.try_recv().is_err(),
        "no membership message got through"
    );
    assert!(r_rx.user.try_recv().is_err(), "no user payload got through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_delivers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    let other = new_ca("another ca");
    // The stranger trusts our CA (it could know our CA certificate, which is public).
    let bad = context(
        dir.path(),
        "bad",
        &node_cert_for(&other, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    );
    let good = context(
        dir.path(),
        "good",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    );
    refused(bad, good, "tls-unknown-ca").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_cluster_delivers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    let bad = context(
        dir.path(),
        "bad",
        &node_cert_for(&ca, "payments", "127.0.0.1"),
        ca.cert_pem(),
    );
    let good = context(
        dir.path(),
        "good",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    );
    refused(bad, good, "tls-wrong-cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_delivers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    let expired = ca
        .issue(&NodeCertRequest {
            validity: Validity::expired(),
            ..NodeCertRequest::for_node("shardik", CLUSTER, "127.0.0.1", 5)
        })
        .unwrap();
    let bad = context(dir.path(), "bad", &expired, ca.cert_pem());
    let good = context(
        dir.path(),
        "good",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    );
    refused(bad, good, "tls-expired").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_certificate_that_does_not_name_the_claimed_host_delivers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    // A valid member certificate, but for another host than the address its node claims.
    let elsewhere = ca
        .issue(&NodeCertRequest::for_node(
            "shardik",
            CLUSTER,
            "127.0.0.2",
            5,
        ))
        .unwrap();
    let bad = context(dir.path(), "bad", &elsewhere, ca.cert_pem());
    let good = context(
        dir.path(),
        "good",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    );
    refused(bad, good, "tls-bad-name").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_tcp_client_speaking_our_handshake_gets_nothing_through() {
    let handle = metrics();
    let labels = "reason=\"tls-not-tls\"";
    let before = counter(&handle, m::TRANSPORT_REFUSED_TOTAL, labels);
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    let (receiver, mut r_rx) = transport(Some(context(
        dir.path(),
        "good",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    )))
    .await;
    let me = UniqueAddress::new(Address::new("127.0.0.1", free_port()), 99);
    let identity = LocalIdentity {
        cluster_name: CLUSTER.into(),
        address: me.clone(),
    };
    let codec = FrameCodec::new(1 << 20);
    let mut buf = BytesMut::new();
    for frame in [
        Frame::Handshake(Handshake::new(
            &identity,
            Some(receiver.identity().address.clone()),
        )),
        Frame::User(Bytes::from_static(b"hello")),
    ] {
        codec.encode(&frame, &mut buf).unwrap();
    }
    let mut stream = TcpStream::connect(receiver.local_addr()).await.unwrap();
    stream.write_all(&buf).await.unwrap();
    // The node answers with no handshake reply of ours: at most a TLS alert, then the end.
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
        .await
        .expect("the node closed the connection");
    let mut answer = BytesMut::from(&answer[..]);
    assert!(
        !matches!(codec.decode(&mut answer), Ok(Some(Frame::HandshakeAck(_)))),
        "a plain client got a handshake reply"
    );
    eventually("the refusal counted as tls-not-tls", || {
        counter(&handle, m::TRANSPORT_REFUSED_TOTAL, labels) > before
    })
    .await;
    assert!(r_rx.user.try_recv().is_err());
    assert!(r_rx.membership.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_tls_dialling_a_tls_node_counts_that_the_peer_requires_tls() {
    let handle = metrics();
    let labels = "reason=\"peer-requires-tls\"";
    let before = counter(&handle, m::TRANSPORT_REFUSED_TOTAL, labels);
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("cluster ca");
    let (receiver, mut r_rx) = transport(Some(context(
        dir.path(),
        "good",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    )))
    .await;
    let (mut plain, _p_rx) = transport(None).await;
    let to = receiver.identity().address.clone();
    let me = plain.identity().clone();
    // Each attempt is answered with a TLS alert; the plain side tells it from a garbled reply.
    let mut seq = 0;
    eventually("the plain side counts peer-requires-tls", || {
        seq += 1;
        assert!(plain.send(&to, heartbeat(&me, seq)));
        counter(&handle, m::TRANSPORT_REFUSED_TOTAL, labels) >= before + 2.0
    })
    .await;
    assert!(r_rx.membership.try_recv().is_err());
}
