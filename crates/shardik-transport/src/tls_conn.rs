//! An outbound TLS connection past its handshakes, written like a plain socket: any task may
//! encrypt and write without waiting, so a lane's senders write directly over TLS as they do
//! over plain TCP, without a hop through the lane's writer task.
//!
//! tokio-rustls's stream needs `&mut` for every read and write, so a shared one would sit
//! behind an async lock, and the idle writer's watch for the peer's close holds that lock
//! while it waits. Here the session (rustls's [`ClientConnection`]: the keys and the buffer of
//! encrypted records not yet on the socket) is behind a plain mutex that is only ever held for
//! non-blocking work, and the socket is used through tokio's `try_*` calls and readiness, as
//! `outbound.rs` uses a plain [`TcpStream`]:
//!
//! - [`TlsConn::write_now`] encrypts what the session takes (at most its buffer limit, 64 KiB
//!   of records by default) and writes what the socket takes. Records the socket did not take
//!   stay in the session, ahead of anything encrypted later, so order holds whoever writes
//!   next; [`TlsConn::has_pending`] tells the lane that the writer must send them
//!   ([`TlsConn::write_all`], which waits for the socket).
//! - [`TlsConn::watch_peer`] reads what the peer sends after its handshake reply: nothing but
//!   a `close_notify`, an alert, the end of the stream, or (rarely) a key update that needs an
//!   answer.
//!
//! The mutex is taken after the lane's lock, never before it, so the two cannot deadlock.

use std::io::{self, IoSlice};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use rustls::ClientConnection;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How long a closing connection may take to send its `close_notify`.
const CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// An established TLS session on a socket; see the module documentation.
pub(crate) struct TlsConn {
    tcp: TcpStream,
    session: Mutex<ClientConnection>,
}

/// What the peer did, as [`TlsConn::watch_peer`] saw it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PeerEvent {
    /// Closed the connection (or broke it, or wrote data, which it never does).
    Ended,
    /// Sent something the session must answer: records wait to be written.
    NeedsWrite,
}

impl TlsConn {
    /// The session `session`, past its TLS handshake (and ours), on `tcp`.
    pub(crate) fn new(tcp: TcpStream, session: ClientConnection) -> TlsConn {
        TlsConn {
            tcp,
            session: Mutex::new(session),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ClientConnection> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encrypts as much of `buf` as the session takes, consuming it from `buf`, and writes
    /// the session's records to the socket as far as it takes them, without waiting.
    pub(crate) fn write_now(&self, buf: &mut BytesMut) -> io::Result<()> {
        let mut session = self.lock();
        let taken = io::Write::write(&mut session.writer(), buf)?;
        buf.advance(taken);
        send_now(&mut session, &self.tcp)
    }

    /// Whether encrypted records wait in the session for the socket.
    pub(crate) fn has_pending(&self) -> bool {
        self.lock().wants_write()
    }

    /// Encrypts and writes all of `bytes`, after whatever records wait, waiting for the
    /// socket to take them.
    pub(crate) async fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        loop {
            let blocked = {
                let mut session = self.lock();
                let taken = io::Write::write(&mut session.writer(), bytes)?;
                bytes = &bytes[taken..];
                send_now(&mut session, &self.tcp)?;
                if bytes.is_empty() && !session.wants_write() {
                    return Ok(());
                }
                // Records left over mean the socket is full; otherwise the session's buffer
                // was, and it has room again now.
                session.wants_write()
            };
            if blocked {
                self.tcp.writable().await?;
            }
        }
    }

    /// Waits until the peer ends the connection or sends something that must be answered.
    /// Safe to cancel: it waits only for readiness, and reads under the lock.
    pub(crate) async fn watch_peer(&self) -> PeerEvent {
        loop {
            if self.tcp.readable().await.is_err() {
                return PeerEvent::Ended;
            }
            let mut session = self.lock();
            match session.read_tls(&mut Socket(&self.tcp)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // The end of the stream (or after a close_notify), or a broken socket.
                Ok(0) | Err(_) => return PeerEvent::Ended,
                Ok(_) => {}
            }
            match session.process_new_packets() {
                // An alert, or records that do not decrypt: this connection is done.
                Err(_) => return PeerEvent::Ended,
                Ok(state) if state.peer_has_closed() || state.plaintext_bytes_to_read() > 0 => {
                    return PeerEvent::Ended;
                }
                Ok(_) if session.wants_write() => return PeerEvent::NeedsWrite,
                Ok(_) => {}
            }
        }
    }

    /// Sends a `close_notify` after whatever records wait (for at most [`CLOSE_LIMIT`]), then
    /// closes our side of the socket.
    pub(crate) async fn close(mut self) {
        self.lock().send_close_notify();
        let _ = tokio::time::timeout(CLOSE_LIMIT, self.write_all(&[])).await;
        let _ = self.tcp.shutdown().await;
    }
}

/// Writes the session's records to the socket until it has none left or the socket is full.
fn send_now(session: &mut ClientConnection, tcp: &TcpStream) -> io::Result<()> {
    while session.wants_write() {
        match session.write_tls(&mut Socket(tcp)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The socket as the blocking-style reader and writer rustls wants, through tokio's
/// non-blocking `try_*` calls (which report `WouldBlock` instead of waiting).
struct Socket<'a>(&'a TcpStream);

impl io::Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl io::Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::TlsContext;
    use crate::tls::certs::{CertificateAuthority, NodeCertRequest, Validity};
    use shardik_config::Settings;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpSocket};

    /// A TLS context for a node at 127.0.0.1 of cluster `bench`, its files in `dir`.
    fn context(dir: &std::path::Path) -> TlsContext {
        let ca = CertificateAuthority::generate("test ca", Validity::days_from_now(1)).unwrap();
        let node = ca
            .issue(&NodeCertRequest::for_node(
                "shardik",
                "bench",
                "127.0.0.1",
                1,
            ))
            .unwrap();
        let path = |name: &str| dir.join(name).display().to_string();
        std::fs::write(path("node.pem"), &node.cert_pem).unwrap();
        std::fs::write(path("node-key.pem"), &node.key_pem).unwrap();
        std::fs::write(path("ca.pem"), ca.cert_pem()).unwrap();
        let mut settings = Settings::reference().transport.tls;
        settings.enabled = true;
        settings.cert_file = path("node.pem");
        settings.key_file = path("node-key.pem");
        settings.ca_cert_file = path("ca.pem");
        settings.require_mutual_authentication = true;
        settings.trust_domain = "shardik".to_string();
        settings.ssl_context_cache_ttl = Duration::from_secs(3600);
        TlsContext::new(&settings, "bench").unwrap()
    }

    /// A client [`TlsConn`] with a small send buffer, and the server's end of the session.
    async fn pair(
        ctx: &TlsContext,
    ) -> (
        TlsConn,
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpSocket::new_v4().unwrap();
        client.set_send_buffer_size(4096).unwrap();
        let (client, accepted) = tokio::join!(client.connect(addr), listener.accept());
        let (client, server) = tokio::join!(
            ctx.connect(client.unwrap(), "127.0.0.1"),
            ctx.accept(accepted.unwrap().0)
        );
        let (client, _) = client.unwrap();
        let (server, _) = server.unwrap();
        let (tcp, session) = client.into_inner();
        (TlsConn::new(tcp, session), server)
    }

    /// Writes that do not wait leave what the socket did not take in the session or the
    /// buffer; the writer's `write_all` sends the rest; the peer reads every byte in order.
    #[tokio::test]
    async fn direct_writes_and_the_writers_rest_arrive_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (conn, mut server) = pair(&ctx).await;
        let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let reader = crate::task::spawn(async move {
            let mut got = vec![0u8; 1_000_000];
            server.read_exact(&mut got).await.unwrap();
            (got, server)
        });

        // Far more than the socket and the session take at once: a direct write stops short.
        let mut buf = BytesMut::from(&payload[..]);
        conn.write_now(&mut buf).unwrap();
        assert!(
            !buf.is_empty() || conn.has_pending(),
            "a direct write of 1 MB does not finish at once"
        );
        // The writer's part: what the session holds goes first, then the rest of the buffer.
        conn.write_all(&buf).await.unwrap();
        assert!(!conn.has_pending());
        let (got, mut server) = tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .expect("all bytes arrive")
            .unwrap();
        assert!(got == payload, "the bytes arrive in order");

        // A small write goes out at once.
        let mut small = BytesMut::from(&b"hello"[..]);
        conn.write_now(&mut small).unwrap();
        assert!(small.is_empty() && !conn.has_pending());
        let mut five = [0u8; 5];
        server.read_exact(&mut five).await.unwrap();
        assert_eq!(&five, b"hello");
    }

    /// The peer's close_notify (or the end of its stream) ends the watch.
    #[tokio::test]
    async fn the_watch_sees_the_peer_close() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (conn, mut server) = pair(&ctx).await;
        server.shutdown().await.unwrap();
        let event = tokio::time::timeout(Duration::from_secs(20), conn.watch_peer())
            .await
            .expect("the watch ends");
        assert_eq!(event, PeerEvent::Ended);
    }

    /// Closing sends a close_notify: the peer reads a clean end of stream.
    #[tokio::test]
    async fn closing_sends_close_notify() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (conn, mut server) = pair(&ctx).await;
        conn.close().await;
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(20), server.read_to_end(&mut rest))
            .await
            .expect("the end arrives")
            .expect("a clean close, not a truncation");
        assert_eq!(n, 0);
    }
}
