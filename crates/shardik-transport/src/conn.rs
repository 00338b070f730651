//! A lane's connection once its handshakes are done ([`Conn`]: plain TCP, or a TLS session),
//! and the ways the lane writes on it: at once, as much as the socket takes without waiting
//! (a sender under the lane's lock), or all of it, waiting (the lane's writer); and how the
//! idle writer notices that the peer ended it.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[cfg(feature = "tls")]
use crate::tls_conn::{PeerEvent, TlsConn};

/// A lane's connection, past its handshakes. Clones share it.
#[derive(Clone)]
pub(crate) enum Conn {
    /// Plain TCP: senders may write directly with `try_write`, under the lane's lock.
    Plain(Arc<TcpStream>),
    /// TLS: senders may encrypt and write directly too, under the lane's lock.
    #[cfg(feature = "tls")]
    Tls(Arc<TlsConn>),
}

impl Conn {
    /// Writes as much of `buf` as the connection takes without waiting, consuming it (with
    /// TLS, what the session took; see [`Conn::has_pending`]).
    pub(crate) fn write_now(&self, buf: &mut BytesMut) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => write_now(s, buf),
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.write_now(buf),
        }
    }

    /// Whether bytes taken from the lane still wait to go to the socket (TLS records the
    /// socket did not take yet); never for plain TCP, whose socket takes them directly.
    pub(crate) fn has_pending(&self) -> bool {
        match self {
            Conn::Plain(_) => false,
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.has_pending(),
        }
    }

    /// Whether both are the same connection.
    pub(crate) fn same(&self, other: &Conn) -> bool {
        match (self, other) {
            (Conn::Plain(a), Conn::Plain(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "tls")]
            (Conn::Tls(a), Conn::Tls(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "tls")]
            _ => false,
        }
    }

    /// Closes our side (for TLS, with a close_notify) if no one else holds the connection.
    pub(crate) async fn shutdown(self) {
        match self {
            Conn::Plain(s) => {
                if let Ok(mut s) = Arc::try_unwrap(s) {
                    let _ = s.shutdown().await;
                }
            }
            #[cfg(feature = "tls")]
            Conn::Tls(s) => {
                if let Ok(s) = Arc::try_unwrap(s) {
                    s.close().await;
                }
            }
        }
    }
}

/// Writes as much of `buf` as the socket takes without waiting, consuming what was written.
fn write_now(stream: &TcpStream, buf: &mut BytesMut) -> std::io::Result<()> {
    while !buf.is_empty() {
        match stream.try_write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf.advance(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `bytes` on `conn`, waiting for it to take them (with TLS, after the
/// records waiting in the session, and until none is left).
pub(crate) async fn write_all(conn: &Conn, bytes: &[u8]) -> std::io::Result<()> {
    match conn {
        Conn::Plain(stream) => write_all_plain(stream, bytes).await,
        #[cfg(feature = "tls")]
        Conn::Tls(tls) => tls.write_all(bytes).await,
    }
}

/// Writes all of `bytes`, waiting for the socket to take them.
async fn write_all_plain(stream: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Completes with `true` when the peer ends `stream` (or writes on it, which it never does
/// after its handshake reply: connections carry one direction), with `false` when a TLS
/// session got something it must answer (its records then wait for the writer). Never
/// completes without a stream.
///
/// Cancelled whenever work arrives; that loses nothing: both kinds read only after
/// readiness, and a TLS session keeps a partly received record.
pub(crate) async fn ended_by_peer(stream: Option<&Conn>) -> bool {
    let stream = match stream {
        None => return std::future::pending().await,
        Some(Conn::Plain(s)) => s,
        #[cfg(feature = "tls")]
        Some(Conn::Tls(tls)) => return tls.watch_peer().await == PeerEvent::Ended,
    };
    let mut scratch = [0u8; 64];
    loop {
        if stream.readable().await.is_err() {
            return true;
        }
        match stream.try_read(&mut scratch) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // End of stream, stray bytes or an error: this connection is done.
            _ => return true,
        }
    }
}
