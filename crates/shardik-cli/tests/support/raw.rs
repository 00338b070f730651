//! A raw client of the cluster port: our frames written by hand, not through the node's own
//! code paths, over any byte stream (plain TCP, or TLS holding whatever certificate a test
//! gives it). It is how the tests play a stranger that speaks our protocol: it passes the
//! handshake under a made-up identity and then sends what it likes.
//!
//! It also builds the crafted sharding traffic the strangers send: user frames carrying
//! envelopes that would increment a demo counter (`shardik node --demo-counters`).

use std::net::IpAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use shardik_core::membership::{Address, Message, UniqueAddress};
use shardik_core::sharding::shard_id_for;
use shardik_wire::{
    BatchFrameBuilder, Frame, FrameCodec, Handshake, HandshakeReply, LocalIdentity,
    encode_batch_item, encode_envelope,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::BOUND;

/// The entity kind of the demo counters.
pub const COUNTER_KIND: &str = "counter";

/// The demo counter's `CounterCommand::Increment` as its kind's codec (postcard) writes it:
/// the variant index 0 as a varint. `counter.rs` in the binary pins these bytes with a unit
/// test, so that this crafted payload cannot silently stop meaning "increment".
pub const INCREMENT_PAYLOAD: &[u8] = &[0];

/// A connection that passed our handshake, and the incarnation that accepted it.
pub struct RawPeer<S> {
    stream: S,
    codec: FrameCodec,
    accepted_by: UniqueAddress,
}

/// A raw peer over plain TCP.
pub type PlainPeer = RawPeer<TcpStream>;

/// A raw peer over TLS.
pub type TlsPeer = RawPeer<TlsStream<TcpStream>>;

impl<S: AsyncRead + AsyncWrite + Unpin> RawPeer<S> {
    /// Speaks our handshake on `stream` (already connected to `target`, `host:port`) as `me`
    /// of cluster `cluster`, and waits (bounded) for the answer. `Err` says why the node did
    /// not accept: a refusal, a close, bytes that are not our frames, or silence.
    pub async fn handshake(
        stream: S,
        target: &str,
        me: &UniqueAddress,
        cluster: &str,
    ) -> Result<RawPeer<S>, String> {
        RawPeer::handshake_to(stream, address_of(target), me, cluster).await
    }

    /// [`handshake`](Self::handshake), naming `to` as the node it wants to reach, whatever
    /// the stream is connected to.
    pub async fn handshake_to(
        mut stream: S,
        to: Address,
        me: &UniqueAddress,
        cluster: &str,
    ) -> Result<RawPeer<S>, String> {
        let codec = FrameCodec::new(256 * 1024);
        let identity = LocalIdentity {
            cluster_name: cluster.to_string(),
            address: me.clone(),
        };
        let mut buf = BytesMut::new();
        codec
            .encode(
                &Frame::Handshake(Handshake::new(&identity, Some(to))),
                &mut buf,
            )
            .map_err(|e| e.to_string())?;
        stream
            .write_all(&buf)
            .await
            .map_err(|e| format!("write the handshake: {e}"))?;
        stream
            .flush()
            .await
            .map_err(|e| format!("flush the handshake: {e}"))?;
        buf.clear();
        let reply = tokio::time::timeout(BOUND, async {
            loop {
                if let Some(frame) = codec.decode(&mut buf).map_err(|e| e.to_string())? {
                    return Ok::<Frame, String>(frame);
                }
                let read = stream
                    .read_buf(&mut buf)
                    .await
                    .map_err(|e| format!("read the handshake reply: {e}"))?;
                if read == 0 {
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

    /// The incarnation that accepted the handshake (its reply tells any caller the node's uid).
    pub fn accepted_by(&self) -> &UniqueAddress {
        &self.accepted_by
    }

    /// Sends one membership message.
    pub async fn send_membership(&mut self, msg: &Message) -> Result<(), String> {
        self.send(&Frame::membership(msg)).await
    }

    /// Sends one user frame (sharding traffic) with `payload`.
    pub async fn send_user(&mut self, payload: Bytes) -> Result<(), String> {
        self.send(&Frame::User(payload)).await
    }

    async fn send(&mut self, frame: &Frame) -> Result<(), String> {
        let mut buf = BytesMut::new();
        self.codec
            .encode(frame, &mut buf)
            .map_err(|e| e.to_string())?;
        self.stream
            .write_all(&buf)
            .await
            .map_err(|e| format!("write: {e}"))?;
        // TLS buffers records until flushed.
        self.stream.flush().await.map_err(|e| format!("flush: {e}"))
    }
}

/// Connects to `target` over plain TCP and speaks our handshake as `me`.
pub async fn connect_plain(
    target: &str,
    me: &UniqueAddress,
    cluster: &str,
) -> Result<PlainPeer, String> {
    let stream = tcp_connect(target).await?;
    RawPeer::handshake(stream, target, me, cluster).await
}

/// Connects to `target` over plain TCP and speaks our handshake as `me`, naming `to` as the
/// node it wants to reach.
pub async fn connect_plain_to(
    target: &str,
    to: Address,
    me: &UniqueAddress,
    cluster: &str,
) -> Result<PlainPeer, String> {
    let stream = tcp_connect(target).await?;
    RawPeer::handshake_to(stream, to, me, cluster).await
}

/// Connects to `target` over TLS with `tls`, then speaks our handshake as `me`. `Err` if
/// either handshake fails.
pub async fn connect_tls(
    target: &str,
    me: &UniqueAddress,
    cluster: &str,
    tls: &RawTls,
) -> Result<TlsPeer, String> {
    let tcp = tcp_connect(target).await?;
    let host = &address_of(target).host;
    let ip: IpAddr = host
        .parse()
        .map_err(|e| format!("{host} is not an IP address: {e}"))?;
    let stream = tokio::time::timeout(
        BOUND,
        tls.connector.connect(ServerName::IpAddress(ip.into()), tcp),
    )
    .await
    .map_err(|_| format!("no TLS handshake with {target} in time"))?
    .map_err(|e| format!("TLS handshake with {target}: {e}"))?;
    RawPeer::handshake(stream, target, me, cluster).await
}

async fn tcp_connect(target: &str) -> Result<TcpStream, String> {
    tokio::time::timeout(BOUND, TcpStream::connect(target))
        .await
        .map_err(|_| format!("connect {target}: timed out"))?
        .map_err(|e| format!("connect {target}: {e}"))
}

/// `host:port` as an [`Address`].
pub fn address_of(target: &str) -> Address {
    let (host, port) = target.rsplit_once(':').expect("host:port");
    Address::new(host, port.parse().expect("a port number"))
}

/// A TLS client identity of the raw client, built with rustls directly (ring, TLS 1.3), not
/// with the runtime's TLS module: a certificate and key of the test's choosing, and the CA
/// that the node's server certificate must chain to.
pub struct RawTls {
    connector: TlsConnector,
}

impl RawTls {
    /// Presents `cert_pem` (with its key `key_pem`) and trusts servers whose certificates
    /// chain to `ca_pem` and name the host dialled.
    pub fn new(cert_pem: &str, key_pem: &str, ca_pem: &str) -> RawTls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(ca.expect("a CA certificate"))
                .expect("a usable CA");
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("a certificate");
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("a private key");
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3 with ring")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("a client certificate");
        RawTls {
            connector: TlsConnector::from(Arc::new(config)),
        }
    }
}

/// The membership commands a stranger forges against `victim` (the incarnation that accepted
/// its handshake) in a cluster whose members listen at `members`: a `Quarantined` of the
/// victim in the stranger's own name (a peer may only speak for itself, so the sender field
/// must be its own), and a `Down` and a `Leave` of every member.
pub fn forged_membership(
    stranger: &UniqueAddress,
    victim: &UniqueAddress,
    members: &[String],
) -> Vec<Message> {
    let mut forged = vec![Message::Quarantined {
        from: stranger.clone(),
        to: victim.clone(),
    }];
    for m in members {
        let address = address_of(m);
        forged.push(Message::Down {
            address: address.clone(),
        });
        forged.push(Message::Leave { address });
    }
    forged
}

/// The user frames a stranger forges to increment the demo counter `entity_id` of a cluster
/// with `number_of_shards` shards: one single-envelope frame and one batch of two envelopes
/// (the form a region sends in), all tells. Each frame's envelopes, in order.
pub fn forged_increments(entity_id: &str, number_of_shards: u32) -> Vec<Bytes> {
    let shard = shard_id_for(entity_id, number_of_shards).expect("at least one shard");
    let mut single = BytesMut::new();
    encode_envelope(
        COUNTER_KIND,
        entity_id,
        &shard,
        INCREMENT_PAYLOAD,
        None,
        &mut single,
    );
    let mut buf = BytesMut::new();
    let builder = BatchFrameBuilder::begin(COUNTER_KIND, &mut buf);
    for _ in 0..2 {
        encode_batch_item(entity_id, &shard, INCREMENT_PAYLOAD, None, &mut buf);
    }
    vec![single.freeze(), builder.finish(COUNTER_KIND, buf)]
}

/// The increments the frames of [`forged_increments`] carry.
pub const FORGED_INCREMENTS_PER_ROUND: u64 = 3;
