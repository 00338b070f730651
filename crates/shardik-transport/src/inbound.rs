//! Accepting connections, checking handshakes, and reading frames into messages.
//!
//! Every connection counts against `maximum-inbound-connections` from accept to close, against
//! `maximum-unauthenticated-connections` until it is past our handshake (within
//! `handshake-timeout`), and, when its peer is not a member, against
//! `maximum-non-member-connections` after that. A frame that started must complete within
//! `frame-read-timeout`. User frames are taken only from members.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::SinkExt;
use shardik_core::membership::UniqueAddress;
use shardik_wire::{
    Frame, FrameCodec, Handshake, HandshakeAck, HandshakeRefused, HandshakeReply, RefusalReason,
    check_handshake_peer, decode_message,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{Encoder, FramedWrite};
use tracing::{debug, warn};

use crate::config::MAX_HANDSHAKE_FRAME;
use crate::limits::{Admitted, Slot};
use crate::log_limit::LogLimits;
use crate::members::MemberCache;
use crate::metrics as m;
use crate::received::{Inbound, InboundUser, Sinks, UserConnection};
use crate::shared::Shared;
use crate::tls::PeerCertificate;

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::transport::inbound";

/// One log line per reason per interval for whatever a stranger can make happen often.
static LOG: LogLimits = LogLimits::every_10s();

/// How long the accept loop waits after a failed accept (out of file descriptors, say), so that
/// it neither spins nor dies.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tx: Sinks) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => admit(stream, peer, &shared, &tx),
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                refused("accept-failed");
                if let Some(suppressed) = LOG.check("accept-failed") {
                    warn!(target: LOG_TARGET, error = %e, suppressed, "accept failed; retrying shortly");
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
        if tx.membership.is_closed() {
            return;
        }
    }
}

/// Serves a new connection if the caps allow, else closes it at once (so that the kernel's
/// backlog never fills and members keep getting through).
fn admit(stream: TcpStream, peer: std::net::SocketAddr, shared: &Arc<Shared>, tx: &Sinks) {
    let Some(slot) = shared.inbound.try_take() else {
        refuse_logged(
            "too-many-connections",
            &peer,
            shared.inbound.max(),
            "maximum-inbound-connections",
        );
        return;
    };
    let admitted = shared.pending.admit();
    if admitted.pushed_out_another {
        // The oldest connection still handshaking makes room for this one.
        refuse_logged(
            "too-many-unauthenticated",
            &peer,
            shared.config.maximum_unauthenticated_connections,
            "maximum-unauthenticated-connections",
        );
    }
    let _ = stream.set_nodelay(true);
    let (shared, tx) = (Arc::clone(shared), tx.clone());
    crate::task::spawn(async move {
        let _slot = slot;
        if let Err(reason) = serve_connection(stream, &shared, tx, admitted).await {
            debug!(target: LOG_TARGET, %peer, %reason, "inbound connection closed");
        }
    });
}

/// Counts a refusal (or a connection closed for misbehaving) and logs it at a bounded rate.
fn refuse_logged(reason: &'static str, peer: &dyn std::fmt::Display, limit: usize, key: &str) {
    refused(reason);
    if let Some(suppressed) = LOG.check(reason) {
        warn!(target: LOG_TARGET, %peer, reason, limit, suppressed, "refusing connection: transport.{key} reached");
    }
}

/// Wraps the pure frame codec for tokio's framed streams.
pub(crate) struct TokioFrameCodec(pub(crate) FrameCodec);

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
pub(crate) enum FrameIoError {
    #[error("{0}")]
    Frame(shardik_wire::FrameError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

fn refused(reason: &'static str) {
    metrics::counter!(m::TRANSPORT_REFUSED_TOTAL, "reason" => reason).increment(1);
}

/// Reads one frame with the pure codec, reading more bytes as needed (the codec reserves room in
/// bounded steps, never past the frame's announced end).
async fn read_frame<R: AsyncRead + Unpin>(
    stream: &mut R,
    codec: &FrameCodec,
    buf: &mut BytesMut,
) -> Result<Option<Frame>, String> {
    loop {
        match codec.decode(buf) {
            Ok(Some(f)) => return Ok(Some(f)),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        buf.reserve(1024);
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

/// A connection past accept (plain TCP, or TLS over it) that splits into a reader and a
/// writer. Plain TCP keeps tokio's owned halves (no lock between them on the hot read loop);
/// TLS has one session state for both directions, so it uses tokio's locked split.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The reading half.
    type Read: AsyncRead + Unpin + Send;
    /// The writing half (kept until the connection ends: dropping it would close our side).
    type Write: AsyncWrite + Unpin + Send;
    fn split_halves(self) -> (Self::Read, Self::Write);
}

impl Connection for TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;
    fn split_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

#[cfg(feature = "tls")]
impl Connection for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;
    fn split_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

async fn serve_connection(
    stream: TcpStream,
    shared: &Shared,
    tx: Sinks,
    admitted: Admitted,
) -> Result<(), String> {
    let cfg = &shared.config;
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr.map(|a| a.to_string()).unwrap_or_default();
    // The address this connection reached us at: a peer that named it in its handshake meant
    // this node.
    let local = stream.local_addr().ok();
    // The TLS handshake and ours together must fit in `handshake-timeout`: that is how long a
    // connection may stay unauthenticated.
    let deadline = tokio::time::Instant::now() + cfg.handshake_timeout;
    let Some(tls) = &cfg.tls else {
        return serve_stream(stream, None, peer, local, shared, tx, admitted, deadline).await;
    };
    let accepted = Accepted {
        peer_addr,
        peer,
        local,
        deadline,
    };
    serve_tls(stream, tls, accepted, shared, tx, admitted).await
}

/// What is known of an inbound connection before any handshake (read by the TLS path only).
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
struct Accepted {
    peer_addr: Option<std::net::SocketAddr>,
    peer: String,
    local: Option<std::net::SocketAddr>,
    /// When the TLS handshake and ours must be done.
    deadline: tokio::time::Instant,
}

/// Serves a connection that must begin with a TLS handshake.
#[cfg(feature = "tls")]
async fn serve_tls(
    stream: TcpStream,
    tls: &crate::tls::TlsContext,
    accepted: Accepted,
    shared: &Shared,
    tx: Sinks,
    admitted: Admitted,
) -> Result<(), String> {
    let Accepted {
        peer_addr,
        peer,
        local,
        deadline,
    } = accepted;
    let Admitted {
        place,
        mut evicted,
        pushed_out_another,
    } = admitted;
    // The TLS handshake runs while the connection holds its place among the unauthenticated
    // ones, so the caps and the oldest-first closing cover it too.
    let accepted = tokio::select! {
        biased;
        _ = &mut evicted => {
            return Err("closed to make room for a newer unauthenticated connection".into());
        }
        accepted = tokio::time::timeout_at(deadline, tls.accept(stream)) => accepted,
    };
    match accepted {
        Err(_) => {
            refused("handshake-timeout");
            Err("no TLS handshake in time".into())
        }
        Ok(Err(e)) => {
            let reason = e.reason();
            refused(reason.refusal_label());
            if let Some(ip) = peer_addr.map(|a| a.ip()) {
                shared.tls_failures.record(ip, reason, true, &e);
            }
            Err(e.to_string())
        }
        Ok(Ok((stream, cert))) => {
            metrics::counter!(m::TRANSPORT_TLS_HANDSHAKES_TOTAL, "direction" => "inbound")
                .increment(1);
            let admitted = Admitted {
                place,
                evicted,
                pushed_out_another,
            };
            serve_stream(stream, cert, peer, local, shared, tx, admitted, deadline).await
        }
    }
}

/// Without the `tls` feature no TLS context exists, so this is never called.
#[cfg(not(feature = "tls"))]
async fn serve_tls(
    _stream: TcpStream,
    tls: &crate::tls::TlsContext,
    _accepted: Accepted,
    _shared: &Shared,
    _tx: Sinks,
    _admitted: Admitted,
) -> Result<(), String> {
    match *tls {}
}

/// Serves a connection (plain, or past its TLS handshake with `cert` the client's verified
/// certificate): our handshake by `deadline`, then its messages.
#[allow(clippy::too_many_arguments)]
async fn serve_stream<S: Connection>(
    mut stream: S,
    cert: Option<PeerCertificate>,
    peer: String,
    local: Option<std::net::SocketAddr>,
    shared: &Shared,
    tx: Sinks,
    admitted: Admitted,
    deadline: tokio::time::Instant,
) -> Result<(), String> {
    let cfg = &shared.config;
    let Admitted {
        place, mut evicted, ..
    } = admitted;
    // Until it is past our handshake, a connection may make us buffer only a handshake.
    let handshake_codec = FrameCodec::new(cfg.maximum_frame_size.min(MAX_HANDSHAKE_FRAME));
    let mut buf = BytesMut::new();
    let first = tokio::select! {
        biased;
        _ = &mut evicted => {
            // Counted when the newer connection pushed this one out.
            return Err("closed to make room for a newer unauthenticated connection".into());
        }
        first = tokio::time::timeout_at(
            deadline,
            read_frame(&mut stream, &handshake_codec, &mut buf),
        ) => first,
    };
    let hs = match first {
        Err(_) => {
            refused("handshake-timeout");
            return Err("no handshake in time".into());
        }
        Ok(Err(e)) => {
            refused("malformed-handshake");
            if let Some(suppressed) = LOG.check("malformed-handshake") {
                warn!(target: LOG_TARGET, %peer, reason = %e, suppressed, "refusing connection: malformed first frame");
            }
            return Err(e);
        }
        Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(Frame::Handshake(hs)))) => hs,
        Ok(Ok(Some(other))) => {
            refused("no-handshake");
            if let Some(suppressed) = LOG.check("no-handshake") {
                warn!(target: LOG_TARGET, %peer, kind = ?other.kind(), suppressed, "refusing connection: first frame is not a handshake");
            }
            return Err("first frame not a handshake".into());
        }
    };
    let (reader, writer) = stream.split_halves();
    let mut out = FramedWrite::new(writer, TokioFrameCodec(handshake_codec));
    let refusal: Option<(&'static str, String, HandshakeRefused)> =
        match check_handshake_peer(&shared.identity, &hs) {
            Err(reason) => Some(("handshake-refused", reason.to_string(), reason.into())),
            Ok(()) => check_recipient(shared, &hs, local, deadline).await,
        };
    // With TLS, the client's certificate must name the host it claims: a member cannot speak
    // for another member's address.
    let refusal = refusal.or_else(|| {
        let cert = cert.as_ref()?;
        let host = &hs.from.address.host;
        if cert.names_host(host) {
            return None;
        }
        Some((
            "tls-bad-name",
            format!(
                "the client certificate (serial {}) does not name the host it claims ({host})",
                cert.serial_hex()
            ),
            HandshakeRefused {
                reason: format!("your certificate does not name host {host}"),
            },
        ))
    });
    // Past our handshake: a peer that is not a member takes a slot of the non-member pool.
    let mut member = MemberCache::new(&shared.members, hs.from.clone());
    let mut non_member_slot = None;
    let refusal = refusal.or_else(|| {
        if member.check(&shared.members).0 {
            return None;
        }
        match shared.non_members.try_take() {
            Some(slot) => {
                non_member_slot = Some(slot);
                None
            }
            None => Some((
                "too-many-non-members",
                format!(
                    "transport.maximum-non-member-connections ({}) reached",
                    shared.non_members.max()
                ),
                HandshakeRefused {
                    reason: "too many connections from nodes that are not members; retry later"
                        .into(),
                },
            )),
        }
    });
    drop(place);
    if let Some((counted, reason, answer)) = refusal {
        refused(counted);
        if let Some(suppressed) = LOG.check(counted) {
            warn!(target: LOG_TARGET, %peer, from = %hs.from, %reason, suppressed, "refusing connection");
        }
        let reply = HandshakeReply::Refused(answer);
        let _ =
            tokio::time::timeout(cfg.handshake_timeout, out.send(Frame::HandshakeAck(reply))).await;
        return Err(reason);
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
    // With TLS, the serial of the certificate the peer presented: which certificate each
    // member uses shows in the log (during a rotation, say). DEBUG: one line per connection
    // and lane is routine, and at INFO it outnumbered what changed in the cluster.
    let serial = cert.as_ref().map(PeerCertificate::serial_hex);
    if non_member_slot.is_none() {
        debug!(target: LOG_TARGET, %peer, from = %hs.from, serial = serial.as_deref(), "accepted connection");
    } else if let Some(suppressed) = LOG.check("accepted-non-member") {
        debug!(target: LOG_TARGET, %peer, from = %hs.from, serial = serial.as_deref(), suppressed, "accepted connection from a node that is not a member (yet)");
    }
    metrics::gauge!(m::TRANSPORT_CONNECTIONS).increment(1.0);
    let codec = FrameCodec::new(cfg.maximum_frame_size);
    let peer_state = Peer {
        from: hs.from.clone(),
        member,
        non_member_slot,
    };
    let result = read_messages(reader, &codec, buf, peer_state, shared, tx).await;
    metrics::gauge!(m::TRANSPORT_CONNECTIONS).decrement(1.0);
    if let Err(reason) = &result
        && let Some(suppressed) = LOG.check("inbound-closed")
    {
        warn!(target: LOG_TARGET, %peer, from = %hs.from, %reason, suppressed, "closing inbound connection");
    }
    result
}

/// Whether the handshake `hs` (from a peer of the right cluster and protocol) is meant for this
/// node: `None` when it is (or names no recipient), else the refusal (`recipient.rs`).
async fn check_recipient(
    shared: &Shared,
    hs: &Handshake,
    local: Option<std::net::SocketAddr>,
    deadline: tokio::time::Instant,
) -> Option<(&'static str, String, HandshakeRefused)> {
    use crate::recipient::Verdict;
    let to = hs.to.as_ref()?;
    let ours = shared.identity.address.address.clone();
    let (counted, reason) = match shared.recipient.judge(to, local, deadline).await {
        Verdict::Us => return None,
        Verdict::NotUs => (
            "wrong-recipient",
            RefusalReason::WrongRecipient {
                ours,
                expected: to.clone(),
            },
        ),
        Verdict::Unresolved(error) => (
            "recipient-unresolved",
            RefusalReason::UnresolvedRecipient {
                ours,
                expected: to.clone(),
                error,
            },
        ),
    };
    Some((counted, reason.to_string(), reason.into()))
}

/// Who is at the other end of a connection, as far as its reader is concerned.
struct Peer {
    /// The incarnation that handshook.
    from: UniqueAddress,
    /// Whether it is a member (re-checked when the directory changes).
    member: MemberCache,
    /// Held while it is not a member.
    non_member_slot: Option<Slot>,
}

impl Peer {
    /// Whether the peer is a member now (one atomic load unless the directory changed). A peer
    /// that became a member leaves the non-member pool; one that stopped being a member joins
    /// it, or the connection ends (`Err`) when the pool is full.
    fn is_member(&mut self, shared: &Shared) -> Result<bool, String> {
        let (member, changed) = self.member.check(&shared.members);
        if changed {
            if member {
                self.non_member_slot = None;
            } else if self.non_member_slot.is_none() {
                match shared.non_members.try_take() {
                    Some(slot) => self.non_member_slot = Some(slot),
                    None => {
                        refused("too-many-non-members");
                        return Err(format!(
                            "{} is no longer a member and transport.maximum-non-member-connections ({}) is reached",
                            self.from,
                            shared.non_members.max()
                        ));
                    }
                }
            }
        }
        Ok(member)
    }
}

async fn read_messages<R: AsyncRead + Unpin>(
    mut reader: R,
    codec: &FrameCodec,
    mut buf: BytesMut,
    mut peer: Peer,
    shared: &Shared,
    tx: Sinks,
) -> Result<(), String> {
    let cfg = &shared.config;
    let from = peer.from.clone();
    // The sending side ends an idle connection after `idle-timeout`; this side waits twice as
    // long, so that it never closes a connection its peer may be writing into.
    let idle_limit = cfg.idle_timeout.saturating_mul(2);
    // When the first bytes of the frame now in `buf` arrived.
    let mut frame_started: Option<tokio::time::Instant> = None;
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
            Ok(Some(f)) => {
                frame_started = None;
                f
            }
            Ok(None) => {
                let now = tokio::time::Instant::now();
                let deadline = if buf.is_empty() {
                    now + idle_limit
                } else {
                    let started = *frame_started.get_or_insert(now);
                    (started + cfg.frame_read_timeout).min(now + idle_limit)
                };
                buf.reserve(8192);
                match tokio::time::timeout_at(deadline, reader.read_buf(&mut buf)).await {
                    Err(_) if frame_started.is_some() => {
                        refused("frame-read-timeout");
                        return Err(format!(
                            "a frame was not completed within transport.frame-read-timeout ({:?})",
                            cfg.frame_read_timeout
                        ));
                    }
                    Err(_) => return Err(format!("idle for {idle_limit:?}")),
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
        let member = peer.is_member(shared)?;
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
                m::count_membership_bytes(
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
                        debug!(target: LOG_TARGET, %from, "inbound queue full: message dropped");
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
                }
            }
            Frame::User(bytes) => {
                user_frames.increment(1);
                if !member {
                    // Sharding traffic only from members: whoever else speaks our handshake
                    // never reaches an entity.
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "not-a-member")
                        .increment(1);
                    if let Some(suppressed) = LOG.check("not-a-member") {
                        warn!(target: LOG_TARGET, %from, suppressed, "user message from a node that is not a member dropped");
                    }
                    continue;
                }
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
                debug!(target: LOG_TARGET, %from, %reason, "peer closed the connection");
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
