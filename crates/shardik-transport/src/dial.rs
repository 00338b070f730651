//! Dialling a peer for a lane: the TCP connection within `connect-timeout`, the TLS handshake
//! when `transport.tls` is on, then our handshake (ours sent, the reply read within
//! `handshake-timeout`), with what each failure counts and logs. What it hands back is the
//! lane's [`Conn`]; retrying after a failure (the backoff) is the lane writer's.

use std::sync::Arc;

use bytes::BytesMut;
use shardik_core::membership::Address;
use shardik_wire::{Frame, FrameCodec, Handshake, HandshakeReply};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::config::MAX_HANDSHAKE_FRAME;
use crate::conn::Conn;
use crate::log_limit::LogLimits;
use crate::metrics as m;
use crate::shared::Shared;
#[cfg(feature = "tls")]
use crate::tls::FailureReason;
#[cfg(feature = "tls")]
use crate::tls_conn::TlsConn;

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::transport::dial";

/// Bounds the warnings a peer's misconfiguration could repeat at every reconnection.
static LOG: LogLimits = LogLimits::every_10s();

pub(crate) async fn connect(to: &Address, shared: &Shared) -> Result<Conn, String> {
    let cfg = &shared.config;
    let target = format!("{}:{}", to.host, to.port);
    let stream = match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(&target)).await
    {
        Err(_) => return Err(format!("no connection within {:?}", cfg.connect_timeout)),
        Ok(Err(e)) => {
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                shared.refused.record(to);
            }
            return Err(e.to_string());
        }
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    let Some(tls) = &cfg.tls else {
        let mut stream = stream;
        handshake(to, shared, &mut stream, None)
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Conn::Plain(Arc::new(stream)));
    };
    connect_tls(to, shared, stream, tls).await
}

/// The TLS handshake over a fresh connection to `to`, then ours inside the session.
#[cfg(feature = "tls")]
async fn connect_tls(
    to: &Address,
    shared: &Shared,
    stream: TcpStream,
    tls: &crate::tls::TlsContext,
) -> Result<Conn, String> {
    let cfg = &shared.config;
    let peer_ip = stream.peer_addr().ok().map(|a| a.ip());
    let tls_failed = |reason: FailureReason, error: &dyn std::fmt::Display| {
        count_tls_failure(reason, "outbound");
        if let Some(ip) = peer_ip {
            shared.tls_failures.record(ip, reason, false, error);
        }
    };
    // Our own certificate's refusal shows up on the first read (TLS 1.3): in the handshake
    // exchange below, classified from its error.
    let (mut stream, cert) =
        match tokio::time::timeout(cfg.handshake_timeout, tls.connect(stream, &to.host)).await {
            Err(_) => {
                return Err(format!(
                    "no TLS handshake within {:?}",
                    cfg.handshake_timeout
                ));
            }
            Ok(Err(e)) => {
                tls_failed(e.reason(), &e);
                return Err(e.to_string());
            }
            Ok(Ok(accepted)) => accepted,
        };
    match handshake(to, shared, &mut stream, Some(&cert)).await {
        Ok(()) => {
            // The peer answered over the session: it accepted our certificate too.
            count_tls_handshake();
            let (tcp, session) = stream.into_inner();
            Ok(Conn::Tls(Arc::new(TlsConn::new(tcp, session))))
        }
        Err(HandshakeFailed::Io(e)) if is_tls_error(&e) => {
            let reason = FailureReason::of_io(&e);
            tls_failed(reason, &e);
            Err(format!("TLS refused ({reason}): {e}"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Without the `tls` feature no TLS context exists, so this is never called.
#[cfg(not(feature = "tls"))]
async fn connect_tls(
    _to: &Address,
    _shared: &Shared,
    _stream: TcpStream,
    tls: &crate::tls::TlsContext,
) -> Result<Conn, String> {
    match *tls {}
}

/// Whether a read or write failed because of TLS (an alert from the peer, say), not the
/// socket.
#[cfg(feature = "tls")]
fn is_tls_error(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
}

/// Counts a TLS session established by dialling.
#[cfg(feature = "tls")]
fn count_tls_handshake() {
    metrics::counter!(m::TRANSPORT_TLS_HANDSHAKES_TOTAL, "direction" => "outbound").increment(1);
}

/// Counts a failed TLS handshake.
#[cfg(feature = "tls")]
fn count_tls_failure(reason: FailureReason, direction: &'static str) {
    metrics::counter!(
        m::TRANSPORT_TLS_FAILURES_TOTAL,
        "direction" => direction,
        "reason" => reason.refusal_label()
    )
    .increment(1);
}

/// Why our handshake failed.
#[derive(Debug, thiserror::Error)]
enum HandshakeFailed {
    #[error("{0}")]
    Io(std::io::Error),
    #[error(
        "the peer answered in TLS: it requires TLS between nodes, and this node has \
         transport.tls.enabled off"
    )]
    PeerRequiresTls,
    #[error("{0}")]
    Other(String),
}

impl From<String> for HandshakeFailed {
    fn from(s: String) -> Self {
        HandshakeFailed::Other(s)
    }
}

/// Whether `bytes` start as a TLS record of the kinds a TLS server answers a client that does
/// not speak TLS with (an alert, or a handshake message): content type 21 or 22, then major
/// version 3. No reply of ours starts so: read as a frame's length prefix, these bytes
/// announce over 350 MB, far more than a handshake frame may hold.
fn looks_like_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [0x15 | 0x16, 0x03, ..])
}

/// Our handshake on a fresh connection (plain, or TLS after its handshake, `cert` the peer's
/// verified certificate): send ours, read the reply, within `handshake-timeout`. A reply
/// from an incarnation at another address than `to` (we dialled an alias, or another address
/// of the node) is recorded for the membership core; with TLS the certificate must name that
/// incarnation's host too, as the accepting side requires of ours.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    to: &Address,
    shared: &Shared,
    stream: &mut S,
    cert: Option<&crate::tls::PeerCertificate>,
) -> Result<(), HandshakeFailed> {
    let cfg = &shared.config;
    // Only the handshake and its reply are read here: they are small, and so is what a peer
    // may make us buffer for them.
    let codec = FrameCodec::new(cfg.maximum_frame_size.min(MAX_HANDSHAKE_FRAME));
    let mut buf = BytesMut::new();
    let hs = Handshake::new(&shared.identity, Some(to.clone()));
    codec
        .encode(&Frame::Handshake(hs), &mut buf)
        .map_err(|e| e.to_string())?;
    let exchange = async {
        stream.write_all(&buf).await.map_err(HandshakeFailed::Io)?;
        stream.flush().await.map_err(HandshakeFailed::Io)?;
        buf.clear();
        // The reply comes back on the same connection; after it we only write.
        loop {
            if cfg.tls.is_none() && looks_like_tls_record(&buf) {
                return Err(HandshakeFailed::PeerRequiresTls);
            }
            if let Some(frame) = codec.decode(&mut buf).map_err(|e| e.to_string())? {
                return Ok::<Frame, HandshakeFailed>(frame);
            }
            buf.reserve(1024);
            let n = tokio::io::AsyncReadExt::read_buf(stream, &mut buf)
                .await
                .map_err(HandshakeFailed::Io)?;
            if n == 0 {
                return Err("closed during handshake".to_string().into());
            }
        }
    };
    match tokio::time::timeout(cfg.handshake_timeout, exchange).await {
        Err(_) => Err(format!("no handshake reply within {:?}", cfg.handshake_timeout).into()),
        Ok(Err(HandshakeFailed::PeerRequiresTls)) => {
            // A configuration mistake on one side or the other: say so, or this node would
            // retry its seeds in silence.
            metrics::counter!(m::TRANSPORT_REFUSED_TOTAL, "reason" => "peer-requires-tls")
                .increment(1);
            if let Some(suppressed) = LOG.check("peer-requires-tls") {
                warn!(target: LOG_TARGET, %to, suppressed, "{}", HandshakeFailed::PeerRequiresTls);
            }
            Err(HandshakeFailed::PeerRequiresTls)
        }
        Ok(Err(e)) => Err(e),
        Ok(Ok(Frame::HandshakeAck(HandshakeReply::Accepted(ack)))) => {
            let host = &ack.from.address.host;
            if ack.from.address.host != to.host && cert.is_some_and(|c| !c.names_host(host)) {
                metrics::counter!(m::TRANSPORT_REFUSED_TOTAL, "reason" => "tls-bad-name")
                    .increment(1);
                if let Some(suppressed) = LOG.check("tls-bad-name-outbound") {
                    warn!(target: LOG_TARGET, %to, peer = %ack.from, suppressed, "the peer's certificate does not name the host it answers as");
                }
                return Err(format!(
                    "the peer answered as {}, which its certificate does not name",
                    ack.from
                )
                .into());
            }
            if ack.from.address != *to {
                debug!(target: LOG_TARGET, %to, peer = %ack.from, "connected to an alias");
                shared.identified.record(to, &ack.from);
            } else {
                debug!(target: LOG_TARGET, %to, peer = %ack.from, "connected");
            }
            Ok(())
        }
        Ok(Ok(Frame::HandshakeAck(HandshakeReply::Refused(r)))) => {
            metrics::counter!(m::TRANSPORT_REFUSED_TOTAL, "reason" => "refused-by-peer")
                .increment(1);
            warn!(target: LOG_TARGET, %to, reason = %r.reason, "peer refused the connection");
            Err(format!("refused: {}", r.reason).into())
        }
        Ok(Ok(other)) => {
            Err(format!("unexpected {:?} frame during handshake", other.kind()).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_answer_is_told_from_our_handshake_replies() {
        // What rustls answers a client that does not speak TLS: a fatal `decode_error` alert.
        assert!(looks_like_tls_record(&[
            0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32
        ]));
        // A TLS handshake record (a server hello, say).
        assert!(looks_like_tls_record(&[0x16, 0x03, 0x03, 0x00, 0x7a]));
        // Our replies, accepted and refused, and too little to tell.
        let codec = FrameCodec::new(MAX_HANDSHAKE_FRAME);
        let from = shardik_core::membership::UniqueAddress::new(Address::new("127.0.0.1", 2552), 7);
        for reply in [
            HandshakeReply::Accepted(shardik_wire::HandshakeAck { from }),
            HandshakeReply::Refused(shardik_wire::HandshakeRefused {
                reason: "no".into(),
            }),
        ] {
            let mut buf = BytesMut::new();
            codec.encode(&Frame::HandshakeAck(reply), &mut buf).unwrap();
            assert!(!looks_like_tls_record(&buf), "{buf:?}");
        }
        assert!(!looks_like_tls_record(&[0x15]));
        assert!(!looks_like_tls_record(&[]));
    }
}
