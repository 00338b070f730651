//! A stranger that speaks our protocol gets no membership command through: a raw client (our
//! frames written by hand, not through the node's own code paths) passes the handshake of a
//! running cluster under a made-up identity and sends `Down`, `Leave` and `Quarantined` for
//! every member, the kind of attack that once stopped a whole cluster in seconds. Every member
//! stays Up, keeps its incarnation, and counts the refusals.

mod support;

use bytes::BytesMut;
use shardik_core::membership::{Address, Message, UniqueAddress};
use shardik_wire::{Frame, FrameCodec, Handshake, HandshakeReply, LocalIdentity};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection that passed the handshake as `me`, and the incarnation that accepted it.
struct RawPeer {
    stream: TcpStream,
    codec: FrameCodec,
    accepted_by: UniqueAddress,
}

impl RawPeer {
    async fn connect(target: &str, me: &UniqueAddress, cluster: &str) -> Result<RawPeer, String> {
        let mut stream = TcpStream::connect(target)
            .await
            .map_err(|e| format!("connect {target}: {e}"))?;
        let codec = FrameCodec::new(256 * 1024);
        let identity = LocalIdentity {
            cluster_name: cluster.to_string(),
            address: me.clone(),
        };
        let (host, port) = target.rsplit_once(':').expect("host:port");
        let to = Address::new(host, port.parse().expect("port"));
        let mut buf = BytesMut::new();
        codec
            .encode(
                &Frame::Handshake(Handshake::new(&identity, Some(to))),
                &mut buf,
            )
            .map_err(|e| e.to_string())?;
        stream.write_all(&buf).await.map_err(|e| e.to_string())?;
        buf.clear();
        let reply = tokio::time::timeout(BOUND, async {
            loop {
                if let Some(frame) = codec.decode(&mut buf).map_err(|e| e.to_string())? {
                    return Ok::<Frame, String>(frame);
                }
                if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                    return Err("closed during the handshake".to_string());
                }
            }
        })
        .await
        .map_err(|_| "no handshake reply".to_string())??;
        match reply {
            Frame::HandshakeAck(HandshakeReply::Accepted(ack)) => Ok(RawPeer {
                stream,
                codec,
                accepted_by: ack.from,
            }),
            other => Err(format!("handshake not accepted: {other:?}")),
        }
    }

    async fn send(&mut self, msg: &Message) -> Result<(), String> {
        let mut buf = BytesMut::new();
        self.codec
            .encode(&Frame::membership(msg), &mut buf)
            .map_err(|e| e.to_string())?;
        self.stream
            .write_all(&buf)
            .await
            .map_err(|e| format!("write: {e}"))
    }
}

/// The count of membership messages `node` refused as not coming from a member.
async fn refused_from_strangers(http: &reqwest::Client, node: &Node) -> Result<f64, String> {
    metric_sum_with_label(
        http,
        &node.spec.management,
        "shardik_dropped_messages_total",
        "reason=\"not-from-member\"",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_membership_commands_from_a_stranger_change_nothing() {
    let http = client();
    let mut nodes = start_cluster(&http, "stranger", 3, &[]).await;
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let before: Vec<Vec<(String, String, String)>> = {
        let mut views = Vec::new();
        for n in &nodes {
            let mut list = member_list(&members(&http, n).await.expect("members"));
            list.sort();
            views.push(list);
        }
        views
    };

    let stranger = UniqueAddress::new(Address::new("127.0.0.1", free_port()), 0x5eed);
    let mut per_node_sent = Vec::new();
    for target in &addrs {
        let mut peer = RawPeer::connect(target, &stranger, "shardik")
            .await
            .expect("the stranger passes the handshake: it names the right cluster");
        // The handshake reply tells the stranger the node's uid: just what a forged
        // `Quarantined` needs.
        let victim = peer.accepted_by.clone();
        let mut attacks = vec![Message::Quarantined {
            from: stranger.clone(),
            to: victim.clone(),
        }];
        for a in &addrs {
            let (host, port) = a.rsplit_once(':').unwrap();
            let address = Address::new(host, port.parse().unwrap());
            attacks.push(Message::Down {
                address: address.clone(),
            });
            attacks.push(Message::Leave { address });
        }
        for msg in &attacks {
            peer.send(msg).await.expect("the node reads on");
        }
        per_node_sent.push((peer, attacks.len()));
    }

    // Each node refused every message (the outcome to wait for before judging the state).
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    for i in 0..refs.len() {
        let want = per_node_sent[i].1 as f64;
        let name = refs[i].spec.name.clone();
        let mut last = 0.0;
        let deadline = std::time::Instant::now() + BOUND;
        loop {
            last = refused_from_strangers(&http, refs[i]).await.unwrap_or(last);
            if last >= want {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} counted {last} of {want} refusals\n{}",
                reports(&mut refs)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    // Nothing changed: every node is alive, every member Up with the same incarnation.
    for (i, n) in refs.iter_mut().enumerate() {
        assert!(n.exited().is_none(), "{} stopped", n.spec.name);
        let mut now = member_list(&members(&http, n).await.expect("members"));
        now.sort();
        assert_eq!(now, before[i], "{} changed its view", n.spec.name);
        assert!(now.iter().all(|(_, _, status)| status == "Up"), "{now:?}");
    }
    // The stranger never became a member anywhere.
    for n in refs.iter() {
        let v = members(&http, n).await.expect("members");
        assert!(
            !member_list(&v)
                .iter()
                .any(|(a, _, _)| *a == stranger.address.to_string()),
            "{v}"
        );
    }
    drop(per_node_sent);
}
