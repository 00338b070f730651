//! Accepting connections, checking handshakes, and reading frames into messages.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::SinkExt;
use shardik_core::membership::{Message, UniqueAddress};
use shardik_wire::{
    Frame, FrameCodec, HandshakeAck, HandshakeRefused, HandshakeReply, check_handshake,
    decode_message,
};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{Encoder, FramedWrite};
use tracing::{debug, info, warn};

use super::Shared;
use crate::metrics as m;

/// A message received from a peer.
#[derive(Debug)]
pub struct Inbound {
    /// The decoded message.
    pub msg: Message,
    /// The peer incarnation that sent it (from its handshake).
    pub from: UniqueAddress,
    /// When it was read off the socket.
    pub received_at: tokio::time::Instant,
}

/// A user payload received from a peer (a [`Frame::User`] body, not decoded any further).
#[derive(Debug, Clone)]
pub struct InboundUser {
    /// The peer incarnation that sent it (from its handshake).
    pub from: UniqueAddress,
    /// The payload, exactly as the peer queued it.
    pub payload: Bytes,
}

/// Takes user payloads where a connection's reader reads them, instead of through a queue
/// to another task: one hand-off fewer for every message from another node.
pub trait UserSink: Send + Sync + 'static {
    /// A handler for the payloads of one inbound connection (it may keep state, such as
    /// routes it looked up, for as long as the connection lives).
    fn connection(&self) -> Box<dyn UserConnection>;
}

/// What waits before the reader may read on.
pub type Backpressure = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Handles the payloads of one inbound connection, in the order they were read.
pub trait UserConnection: Send {
    /// Takes `payload`, sent by `from`. Returns a future when the payload's consumer has no
    /// room: the reader awaits it before reading on, so TCP flow control pushes back to the
    /// sender's bounded queue instead of anything being dropped or growing.
    fn deliver(&mut self, from: &UniqueAddress, payload: Bytes) -> Option<Backpressure>;
}

/// Where the readers put what they decode.
#[derive(Clone)]
pub(super) struct Sinks {
    pub(super) membership: mpsc::Sender<Inbound>,
    pub(super) user: mpsc::Sender<InboundUser>,
}

pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tx: Sinks) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let (shared, tx) = (Arc::clone(&shared), tx.clone());
                tokio::spawn(async move {
                    if let Err(reason) = serve_connection(stream, &shared, tx).await {
                        debug!(%peer, %reason, "inbound connection closed");
                    }
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        if tx.membership.is_closed() {
            return;
        }
    }
}

/// Wraps the pure frame codec for tokio's framed streams.
pub(super) struct TokioFrameCodec(pub(super) FrameCodec);

impl tokio_util::codec::Decoder for TokioFrameCodec {
    type Item = Frame;
    type Error = FrameIoError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameIoError> {
        self.0.decode(src).map_err(FrameIoError::Frame)
    }
}

impl Encoder<Frame> for TokioFrameCodec {
    type Error = FrameIoError;
    fn encode(&mut self, item: Frame, dst: &mut BytesMut) -> Result<(), FrameIoError> {
        self.0.encode(&item, dst).map_err(FrameIoError::Frame)
    }
}

/// A frame-level or socket-level failure.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameIoError {
    #[error("{0}")]
    Frame(shardik_wire::FrameError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

fn refused(reason: &'static str) {
    metrics::counter!(m::TRANSPORT_REFUSED_TOTAL, "reason" => reason).increment(1);
}

/// Reads one frame with the pure codec, reading more bytes as needed (never past the maximum).
async fn read_frame(
    stream: &mut TcpStream,
    codec: &FrameCodec,
    buf: &mut BytesMut,
) -> Result<Option<Frame>, String> {
    loop {
        match codec.decode(buf) {
            Ok(Some(f)) => return Ok(Some(f)),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        buf.reserve(8192.min(codec.max_frame_size() + 4));
        match stream.read_buf(buf).await {
            Ok(0) => {
                return if buf.is_empty() {
                    Ok(None)
                } else {
                    Err("connection closed mid-frame".into())
                };
            }
            Ok(_) => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}

async fn serve_connection(mut stream: TcpStream, shared: &Shared, tx: Sinks) -> Result<(), String> {
    let cfg = &shared.config;
    let codec = FrameCodec::new(cfg.maximum_frame_size);
    let mut buf = BytesMut::with_capacity(8192);
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();

    let first = tokio::time::timeout(
        cfg.handshake_timeout,
        read_frame(&mut stream, &codec, &mut buf),
    )
    .await;
    let hs = match first {
        Err(_) => {
            refused("handshake-timeout");
            return Err("no handshake in time".into());
        }
        Ok(Err(e)) => {
            refused("malformed-handshake");
            warn!(%peer, reason = %e, "refusing connection: malformed first frame");
            return Err(e);
        }
        Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(Frame::Handshake(hs)))) => hs,
        Ok(Ok(Some(other))) => {
            refused("no-handshake");
            warn!(%peer, kind = ?other.kind(), "refusing connection: first frame is not a handshake");
            return Err("first frame not a handshake".into());
        }
    };
    let (reader, writer) = stream.into_split();
    let mut out = FramedWrite::new(writer, TokioFrameCodec(codec.clone()));
    if let Err(reason) = check_handshake(&shared.identity, &hs) {
        refused("handshake-refused");
        warn!(%peer, from = %hs.from, %reason, "refusing connection");
        let reply = HandshakeReply::Refused(HandshakeRefused::from(reason.clone()));
        let _ =
            tokio::time::timeout(cfg.handshake_timeout, out.send(Frame::HandshakeAck(reply))).await;
        return Err(reason.to_string());
    }
    let ack = HandshakeReply::Accepted(HandshakeAck {
        from: shared.identity.address.clone(),
    });
    if tokio::time::timeout(cfg.handshake_timeout, out.send(Frame::HandshakeAck(ack)))
        .await
        .is_err()
    {
        return Err("handshake ack not sent in time".into());
    }
    info!(%peer, from = %hs.from, "accepted connection");
    metrics::gauge!(m::TRANSPORT_CONNECTIONS).increment(1.0);
    let result = read_messages(reader, &codec, buf, hs.from.clone(), shared, tx).await;
    metrics::gauge!(m::TRANSPORT_CONNECTIONS).decrement(1.0);
    if let Err(reason) = &result {
        warn!(%peer, from = %hs.from, %reason, "closing inbound connection");
    }
    result
}

async fn read_messages(
    mut reader: tokio::net::tcp::OwnedReadHalf,
    codec: &FrameCodec,
    mut buf: BytesMut,
    from: UniqueAddress,
    shared: &Shared,
    tx: Sinks,
) -> Result<(), String> {
    let cfg = &shared.config;
    // Until a sink is installed (sharding not started yet), payloads go to the queue.
    let mut sink: Option<Box<dyn UserConnection>> = None;
    let user_frames =
        metrics::counter!(m::TRANSPORT_FRAMES_TOTAL, "direction" => "in", "lane" => "user");
    let bytes_in =
        metrics::counter!(m::TRANSPORT_BYTES_TOTAL, "direction" => "in", "lane" => "any");
    loop {
        // Decode everything already buffered before reading again.
        let frame = match codec.decode(&mut buf) {
            Err(e) => {
                metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "bad-frame").increment(1);
                return Err(e.to_string());
            }
            Ok(Some(f)) => f,
            Ok(None) => {
                buf.reserve(8192);
                match tokio::time::timeout(cfg.idle_timeout, reader.read_buf(&mut buf)).await {
                    Err(_) => return Err(format!("idle for {:?}", cfg.idle_timeout)),
                    Ok(Ok(0)) => {
                        return if buf.is_empty() {
                            Ok(())
                        } else {
                            Err("closed mid-frame".into())
                        };
                    }
                    Ok(Ok(n)) => {
                        bytes_in.increment(n as u64);
                        continue;
                    }
                    Ok(Err(e)) => return Err(format!("read failed: {e}")),
                }
            }
        };
        let received_at = tokio::time::Instant::now();
        match frame {
            Frame::Membership(bytes) => {
                let msg = match decode_message(&bytes, &cfg.decode_limits) {
                    Ok(msg) => msg,
                    Err(e) => {
                        metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "undecodable")
                            .increment(1);
                        return Err(format!("undecodable membership message: {e}"));
                    }
                };
                super::count_membership_bytes(
                    &msg,
                    "in",
                    bytes.len() + shardik_wire::LENGTH_PREFIX + 1,
                );
                if msg.sender().is_some_and(|s| *s != from) {
                    // A peer may only speak for itself.
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "sender-mismatch")
                        .increment(1);
                    return Err(format!("{} sent a message claiming another sender", from));
                }
                metrics::counter!(m::TRANSPORT_FRAMES_TOTAL, "direction" => "in", "lane" => "control").increment(1);
                let inbound = Inbound {
                    msg,
                    from: from.clone(),
                    received_at,
                };
                match tx.membership.try_send(inbound) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "inbound-queue-full").increment(1);
                        debug!(%from, "inbound queue full: message dropped");
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
                }
            }
            Frame::User(bytes) => {
                user_frames.increment(1);
                if sink.is_none() {
                    sink = shared.user_sink.get().map(|s| s.connection());
                }
                if let Some(sink) = sink.as_mut() {
                    if let Some(wait) = sink.deliver(&from, bytes) {
                        wait.await;
                    }
                    continue;
                }
                let msg = InboundUser {
                    from: from.clone(),
                    payload: bytes,
                };
                // User traffic is not dropped when the consumer falls behind: waiting here stops
                // reading this connection, TCP flow control pushes back, and the sender's
                // bounded queue tells the sending code (which can retry or report). This is the
                // user lane only; the membership lane never waits behind it.
                if tx.user.send(msg).await.is_err() {
                    // Nobody consumes user traffic: drop it, but keep the connection.
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "no-user-receiver")
                        .increment(1);
                }
            }
            Frame::Close(reason) => {
                debug!(%from, %reason, "peer closed the connection");
                return Ok(());
            }
            Frame::Handshake(_) | Frame::HandshakeAck(_) => {
                metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "unexpected-frame")
                    .increment(1);
                return Err("unexpected handshake frame mid-connection".into());
            }
        }
    }
}
