//! HTTPS on the management port (`management.http.tls.enabled`): the TLS handshake of each
//! connection before HTTP, what it tells the write guard
//! ([`ClientCertificate`](super::ClientCertificate)), and the answer to a client that speaks
//! plain HTTP to it. Built with the `tls` feature only.
//!
//! The handshake runs in the connection's own task, holding its slot (ordinary or health
//! check), and must finish within the time the request head is given (`header-read-timeout`,
//! shorter on a health-check slot), so a stranger that opens TLS and stalls costs what one
//! that stalls its request head costs. Every failure is counted in
//! `shardik_http_refused_total{reason="tls-<reason>"}` and logged at a bounded rate.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tracing::debug;

use super::client_certificate::ClientCertificate;
use super::observe::{Refusal, refused, refused_because};
use shardik_transport::tls::{FailureReason, TlsContext};

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// How long the plain-HTTP answer waits for the rest of the client's request before closing
/// (closing with unread bytes would reset the connection, and the client might lose the
/// answer), and how much of it it reads.
const PLAIN_DRAIN_TIME: Duration = Duration::from_millis(500);
const PLAIN_DRAIN_BYTES: usize = 64 * 1024;

/// The TLS handshake of an accepted connection, within `timeout`: the stream and the client's
/// certificate if it presented one, or `None` (counted, logged, and the connection closed)
/// when the handshake failed, timed out, or the client spoke plain HTTP (answered with a 400
/// first).
pub(super) async fn handshake(
    stream: TcpStream,
    tls: &TlsContext,
    timeout: Duration,
) -> Option<(TlsStream<TcpStream>, Option<ClientCertificate>)> {
    let deadline = Instant::now() + timeout;
    let peer = stream.peer_addr().ok();
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Err(_) => {
            refused(Refusal::HeaderTimeout);
            return None;
        }
        // Closed before a byte (a TCP probe), or broken: nothing to refuse.
        Ok(Ok(0)) | Ok(Err(_)) => {
            debug!(?peer, "management API: connection closed before TLS");
            return None;
        }
        Ok(Ok(_)) if first[0] != TLS_HANDSHAKE_RECORD => {
            let detail = Peer(peer, "a request that is not TLS");
            refused_because(Refusal::Tls(FailureReason::NotTls), Some(&detail));
            answer_plain_http(stream).await;
            return None;
        }
        Ok(Ok(_)) => {}
    }
    match tokio::time::timeout_at(deadline, tls.accept(stream)).await {
        Err(_) => {
            refused(Refusal::HeaderTimeout);
            None
        }
        Ok(Err(e)) => {
            let detail = Peer(peer, &e);
            refused_because(Refusal::Tls(e.reason()), Some(&detail));
            None
        }
        Ok(Ok((stream, cert))) => Some((stream, cert.map(ClientCertificate::verified))),
    }
}

/// A peer and what happened, for the log line.
struct Peer<'a, D: std::fmt::Display + ?Sized>(Option<SocketAddr>, &'a D);

impl<D: std::fmt::Display + ?Sized> std::fmt::Display for Peer<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(peer) => write!(f, "{} (from {peer})", self.1),
            None => write!(f, "{}", self.1),
        }
    }
}

/// The answer to plain HTTP on the HTTPS port: a 400 whose JSON message says to use https
/// (what `curl http://…` and a misconfigured probe show), then the connection is closed.
async fn answer_plain_http(mut stream: TcpStream) {
    let body = r#"{"message":"this management port speaks HTTPS (management.http.tls.enabled = on): use https:// with the cluster's CA certificate"}"#;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let sent = tokio::time::timeout(PLAIN_DRAIN_TIME, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        return;
    }
    // Read (and drop) what the client sent, a bounded amount for a bounded time, so that the
    // close does not reset the connection under the answer.
    let _ = tokio::time::timeout(PLAIN_DRAIN_TIME, async {
        let mut buf = [0u8; 4096];
        let mut read = 0;
        while read < PLAIN_DRAIN_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}
