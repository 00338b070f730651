//! Bounded resources on the cluster port, and user traffic only from members: connection caps,
//! the room kept for members, the deadline of a started frame, and user frames from strangers.
//!
//! Peers here are raw TCP clients that speak our framing and handshake by hand
//! (`shardik_wire::FrameCodec`), as a stranger would.

mod common;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use shardik_core::membership::{Address, Message, UniqueAddress};
use shardik_runtime::metrics as m;
use shardik_runtime::transport::{Receivers, Transport, TransportConfig};
use shardik_wire::{Frame, FrameCodec, FrameKind, Handshake, HandshakeReply, LocalIdentity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{BOUND, counter, eventually, free_port, metrics};

const CLUSTER: &str = "limits";
/// A transport on a fresh port; `open` makes every peer a member (no membership behind it).
async fn transport(config: TransportConfig, open: bool) -> (Transport, Receivers) {
    let port = free_port();
    let identity = LocalIdentity {
        cluster_name: CLUSTER.into(),
        address: UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) + 3),
    };
    let bind = format!("127.0.0.1:{port}");
    if open {
        Transport::start_accepting_everyone(&bind, identity, config).await
    } else {
        Transport::start(&bind, identity, config).await
    }
    .expect("transport starts")
}

fn node(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), 1000 + u64::from(port))
}

/// A raw client of `target`'s cluster port.
struct Client {
    stream: TcpStream,
    codec: FrameCodec,
}

impl Client {
    async fn connect(target: &Transport) -> Client {
        let stream = TcpStream::connect(target.local_addr())
            .await
            .expect("connect");
        Client {
            stream,
            codec: FrameCodec::new(1 << 20),
        }
    }

    /// Connects and handshakes as `me`; the reply.
    async fn handshaken(target: &Transport, me: &UniqueAddress) -> (Client, HandshakeReply) {
        let mut c = Client::connect(target).await;
        let identity = LocalIdentity {
            cluster_name: CLUSTER.into(),
            address: me.clone(),
        };
        c.send(&Frame::Handshake(Handshake::new(
            &identity,
            Some(target.identity().address.clone()),
        )))
        .await;
        let reply = match c.read_frame().await {
            Some(Frame::HandshakeAck(r)) => r,
            other => panic!("no handshake reply: {other:?}"),
        };
        (c, reply)
    }

    async fn send(&mut self, frame: &Frame) {
        let mut buf = BytesMut::new();
        self.codec.encode(frame, &mut buf).expect("encodes");
        self.stream.write_all(&buf).await.expect("write");
    }

    /// One frame, or `None` when the node closed the connection first.
    async fn read_frame(&mut self) -> Option<Frame> {
        let mut buf = BytesMut::new();
        tokio::time::timeout(BOUND, async {
            loop {
                if let Some(f) = self.codec.decode(&mut buf).expect("well-formed") {
                    return Some(f);
                }
                buf.reserve(1024);
                match self.stream.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("a frame or the end of the connection in time")
    }

    /// Waits (bounded) until the node closes the connection.
    async fn closed_by_node(&mut self) -> bool {
        let mut scratch = [0u8; 256];
        tokio::time::timeout(BOUND, async {
            loop {
                match self.stream.read(&mut scratch).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }

    /// Whether the connection is still open (nothing to read, no end of stream).
    fn still_open(&self) -> bool {
        let mut scratch = [0u8; 16];
        matches!(self.stream.try_read(&mut scratch), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

fn accepted(reply: &HandshakeReply) -> bool {
    matches!(reply, HandshakeReply::Accepted(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_total_cap_are_closed_at_once_and_counted() {
    let handle = metrics();
    let config = TransportConfig {
        maximum_inbound_connections: 5,
        maximum_unauthenticated_connections: 2,
        maximum_non_member_connections: 2,
        ..TransportConfig::default()
    };
    let (t, _rx) = transport(config, true).await;
    let mut members = Vec::new();
    for port in 1..=5 {
        let (c, reply) = Client::handshaken(&t, &node(port)).await;
        assert!(accepted(&reply), "room for five members");
        members.push(c);
    }
    assert_eq!(t.inbound_connections().total, 5);
    let before = counter(
        &handle,
        m::TRANSPORT_REFUSED_TOTAL,
        "reason=\"too-many-connections\"",
    );
    let mut sixth = Client::connect(&t).await;
    assert!(sixth.closed_by_node().await, "the sixth is closed at once");
    assert!(
        counter(
            &handle,
            m::TRANSPORT_REFUSED_TOTAL,
            "reason=\"too-many-connections\""
        ) >= before + 1.0
    );
    assert!(members.iter().all(Client::still_open));
    // A member leaving makes room again.
    drop(members.pop());
    eventually("a slot is free again", || {
        t.inbound_connections().total == 4
    })
    .await;
    let (_c, reply) = Client::handshaken(&t, &node(9)).await;
    assert!(accepted(&reply));
}

/// Strangers hold both the pool of connections still handshaking (connecting and saying
/// nothing) and the pool of non-members (speaking our handshake): a member still gets in, and
/// one more stranger does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_gets_through_while_strangers_hold_both_pools() {
    let handle = metrics();
    let config = TransportConfig {
        maximum_unauthenticated_connections: 3,
        maximum_non_member_connections: 2,
        ..TransportConfig::default()
    };
    let (t, _rx) = transport(config, false).await;
    let member = node(1);
    t.members().set([member.clone()]);

    // Two strangers that handshake fill the non-member pool; a third is refused.
    let (s1, r1) = Client::handshaken(&t, &node(101)).await;
    let (_s2, r2) = Client::handshaken(&t, &node(102)).await;
    assert!(accepted(&r1) && accepted(&r2), "room for two non-members");
    let refused_before = counter(
        &handle,
        m::TRANSPORT_REFUSED_TOTAL,
        "reason=\"too-many-non-members\"",
    );
    let (_s3, r3) = Client::handshaken(&t, &node(103)).await;
    assert!(
        matches!(&r3, HandshakeReply::Refused(r) if r.reason.contains("not members")),
        "a third non-member is refused: {r3:?}"
    );
    assert!(
        counter(
            &handle,
            m::TRANSPORT_REFUSED_TOTAL,
            "reason=\"too-many-non-members\""
        ) >= refused_before + 1.0
    );
    assert_eq!(t.inbound_connections().non_member, 2);

    // Strangers that connect and say nothing fill the pool of connections still handshaking.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(Client::connect(&t).await);
    }
    eventually("three connections handshaking", || {
        t.inbound_connections().unauthenticated == 3
    })
    .await;
    let evicted_before = counter(
        &handle,
        m::TRANSPORT_REFUSED_TOTAL,
        "reason=\"too-many-unauthenticated\"",
    );

    // The member gets in all the same: its connection pushes the oldest silent one out.
    let (_m, reply) = Client::handshaken(&t, &member).await;
    assert!(accepted(&reply), "the member is accepted: {reply:?}");
    assert!(
        silent[0].closed_by_node().await,
        "the oldest silent stranger made room"
    );
    assert!(
        counter(
            &handle,
            m::TRANSPORT_REFUSED_TOTAL,
            "reason=\"too-many-unauthenticated\""
        ) >= evicted_before + 1.0
    );
    assert!(t.inbound_connections().unauthenticated <= 3);
    assert_eq!(
        t.inbound_connections().non_member,
        2,
        "the member took no non-member slot"
    );

    // A stranger that becomes a member leaves the non-member pool at its next frame, which
    // makes room for another non-member.
    let mut s1 = s1;
    t.members().set([member.clone(), node(101)]);
    s1.send(&Frame::User(Bytes::from_static(b"hello"))).await;
    eventually("the new member left the pool", || {
        t.inbound_connections().non_member == 1
    })
    .await;
    let (_s4, r4) = Client::handshaken(&t, &node(104)).await;
    assert!(accepted(&r4), "room for a non-member again: {r4:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_not_completed_in_time_closes_its_connection() {
    let handle = metrics();
    let config = TransportConfig {
        frame_read_timeout: Duration::from_millis(300),
        ..TransportConfig::default()
    };
    let (t, _rx) = transport(config, true).await;
    let before = counter(
        &handle,
        m::TRANSPORT_REFUSED_TOTAL,
        "reason=\"frame-read-timeout\"",
    );
    let (quiet, _) = Client::handshaken(&t, &node(1)).await;
    let (mut stalling, reply) = Client::handshaken(&t, &node(2)).await;
    assert!(accepted(&reply));
    // Announce a 100 000-byte user frame, send 1 000 bytes of it, and stall.
    let mut partial = BytesMut::new();
    partial.put_u32(100_000);
    partial.put_u8(FrameKind::User as u8);
    partial.put_slice(&[0u8; 999]);
    stalling.stream.write_all(&partial).await.unwrap();
    assert!(
        stalling.closed_by_node().await,
        "the stalled frame closes its connection"
    );
    assert!(
        counter(
            &handle,
            m::TRANSPORT_REFUSED_TOTAL,
            "reason=\"frame-read-timeout\""
        ) >= before + 1.0
    );
    // A connection with no frame started is only subject to the (much longer) idle timeout.
    eventually("one connection left", || t.inbound_connections().total == 1).await;
    assert!(quiet.still_open());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_frames_from_a_node_that_is_not_a_member_are_dropped() {
    let handle = metrics();
    let (t, mut rx) = transport(TransportConfig::default(), false).await;
    let member = node(1);
    let stranger = node(2);
    t.members().set([member.clone()]);
    let before = counter(
        &handle,
        m::DROPPED_MESSAGES_TOTAL,
        "reason=\"not-a-member\"",
    );

    let (mut s, reply) = Client::handshaken(&t, &stranger).await;
    assert!(
        accepted(&reply),
        "a non-member may connect (it may be joining)"
    );
    for _ in 0..3 {
        s.send(&Frame::User(Bytes::from_static(b"crafted envelope")))
            .await;
    }
    // Membership traffic from it still reaches the node: a joiner must get through.
    s.send(&Frame::membership(&Message::InitJoinNack {
        from: stranger.clone(),
    }))
    .await;
    let got = tokio::time::timeout(BOUND, rx.membership.recv())
        .await
        .expect("in time")
        .expect("open");
    assert_eq!(got.from, stranger);
    // The frames before it were read, and dropped.
    assert!(
        counter(
            &handle,
            m::DROPPED_MESSAGES_TOTAL,
            "reason=\"not-a-member\""
        ) >= before + 3.0
    );

    let (mut mc, reply) = Client::handshaken(&t, &member).await;
    assert!(accepted(&reply));
    mc.send(&Frame::User(Bytes::from_static(b"from a member")))
        .await;
    let got = tokio::time::timeout(BOUND, rx.user.recv())
        .await
        .expect("in time")
        .expect("open");
    assert_eq!(got.from, member);
    assert_eq!(&got.payload[..], b"from a member");
    assert!(rx.user.try_recv().is_err(), "nothing from the stranger");

    // Once it is a member, its user frames are taken.
    t.members().set([member.clone(), stranger.clone()]);
    s.send(&Frame::User(Bytes::from_static(b"now a member")))
        .await;
    let got = tokio::time::timeout(BOUND, rx.user.recv())
        .await
        .expect("in time")
        .expect("open");
    assert_eq!(got.from, stranger);
    assert_eq!(&got.payload[..], b"now a member");
}

/// A first frame larger than a handshake can be is refused at its prefix: a connection that
/// has not handshaken cannot make the node buffer a large frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_first_frame_is_refused_at_its_prefix() {
    let handle = metrics();
    let (t, _rx) = transport(TransportConfig::default(), true).await;
    let before = counter(
        &handle,
        m::TRANSPORT_REFUSED_TOTAL,
        "reason=\"malformed-handshake\"",
    );
    let mut c = Client::connect(&t).await;
    let mut partial = BytesMut::new();
    partial.put_u32(256 * 1024);
    partial.put_u8(FrameKind::Handshake as u8);
    c.stream.write_all(&partial).await.unwrap();
    assert!(c.closed_by_node().await);
    assert!(
        counter(
            &handle,
            m::TRANSPORT_REFUSED_TOTAL,
            "reason=\"malformed-handshake\""
        ) >= before + 1.0
    );
}
