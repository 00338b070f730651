//! The health-check reserve of the management port: connections beyond `max-connections`,
//! served only for `GET`/`HEAD` of `/alive` and `/ready`, so that probes are answered while
//! strangers hold every ordinary slot.
//!
//! A reserve of a few places is easy to fill too, so it keeps strangers out in two ways:
//!
//! - **A connection shows what it asks for with its first bytes.** Anything that cannot be the
//!   start of a health check's request line (`GET /alive`, `GET /ready`, `HEAD /alive`,
//!   `HEAD /ready`, then a space or `?`) is answered 503 and closed as soon as those bytes
//!   arrive, without waiting for the rest of its head. The accept loop itself looks at what
//!   has arrived by the time it accepts a connection ([`look_at_accept`]), so a flood of such
//!   requests is turned away before it takes a place: looked at later, by a task of its own,
//!   a burst took every place before the first of them was read, and pushed probes out. With
//!   the earlier rule (wait for the whole head, then answer 503), 2 000 half-sent requests kept
//!   every probe out for as long as they kept coming, and a few every two seconds sufficed.
//! - **At most [`HEALTH_CHECK_RESERVE`] connections wait for their request at once, oldest
//!   first out.** A new connection pushes out the oldest one still waiting for its head, so
//!   silent connections and slow heads cannot keep a prober out either: its head arrives within
//!   a round trip of connecting, while stalled ones are the oldest.
//!
//! On HTTPS the first bytes are the TLS handshake's: the connection takes its place at accept,
//! may be pushed out during the handshake, and its request is looked at past it.
//!
//! Refusals are counted as `connection-limit` (503, or pushed out) and `header-timeout` (no
//! whole head in time).

use std::io;
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::debug;

use super::observe::{Refusal, connection_ended_with, refused};
use shardik_transport::limits::{Admitted, Pending, PendingPlace};

/// Connections beyond `max-connections` that may wait for their request (which must be a
/// health check, `/alive` or `/ready`) at once; a new one pushes out the oldest. On plain HTTP
/// only those whose first bytes had not arrived when they were accepted need a place: the
/// others are health checks, or refused at once.
pub const HEALTH_CHECK_RESERVE: usize = 8;

/// The request lines a health check starts with (each followed by a space or `?`).
const HEALTH_CHECK_STARTS: [&[u8]; 4] =
    [b"GET /alive", b"GET /ready", b"HEAD /alive", b"HEAD /ready"];

/// What the first bytes of a request say about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FirstBytes {
    /// The request line of a health check.
    HealthCheck,
    /// Anything else.
    Other,
    /// Too few bytes to tell.
    TooFew,
}

/// Classifies the first bytes of a request (only the first dozen matter).
pub(super) fn classify(first: &[u8]) -> FirstBytes {
    let mut too_few = false;
    for start in HEALTH_CHECK_STARTS {
        match first.get(start.len()) {
            Some(b' ' | b'?') if first.starts_with(start) => return FirstBytes::HealthCheck,
            Some(_) => {}
            None => too_few |= start.starts_with(first),
        }
    }
    if too_few {
        FirstBytes::TooFew
    } else {
        FirstBytes::Other
    }
}

/// The connections waiting for their request head in the reserve.
pub(super) struct Reserve {
    waiting: Arc<Pending>,
}

impl Reserve {
    pub(super) fn new() -> Reserve {
        Reserve {
            waiting: Pending::new(HEALTH_CHECK_RESERVE),
        }
    }

    /// A place for a new connection, pushing out (and counting) the oldest waiting one when
    /// [`HEALTH_CHECK_RESERVE`] are waiting already.
    pub(super) fn admit(&self) -> Waiting {
        let Admitted {
            place,
            evicted,
            pushed_out_another,
        } = self.waiting.admit();
        if pushed_out_another {
            refused(Refusal::ConnectionLimit);
        }
        Waiting { place, evicted }
    }
}

/// A connection's place in the reserve, until its request head is complete.
pub(super) struct Waiting {
    place: PendingPlace,
    /// Completes when the place is given up: pushed out by a newer connection, or left.
    evicted: oneshot::Receiver<()>,
}

impl Waiting {
    /// `work`'s output, or `None` if the connection is pushed out first (the TLS handshake of
    /// a connection that waits in the reserve).
    #[cfg(feature = "tls")]
    pub(super) async fn unless_pushed_out<F: std::future::Future>(
        &mut self,
        work: F,
    ) -> Option<F::Output> {
        tokio::select! {
            biased;
            _ = &mut self.evicted => None,
            out = work => Some(out),
        }
    }
}

/// A connection taken for a health check.
pub(super) struct HealthCheck {
    pub(super) app: Router,
    /// When its request head must be complete (its TLS handshake, if any, included).
    pub(super) deadline: tokio::time::Instant,
    /// Registered at accept, so that a shutdown waits for the connection and ends it.
    pub(super) watcher: Watcher,
    /// Cancelled when the server stops (reaches it before hyper has it).
    pub(super) stopping: CancellationToken,
}

/// Why a reserve connection ended before hyper took it.
enum Early {
    /// Its first bytes are not a health check's.
    NotHealthCheck,
    /// Pushed out by a newer connection (counted when that one was admitted).
    PushedOut,
    /// Too few bytes to tell within the head timeout.
    Timeout,
    /// The server is stopping.
    Stopping,
    /// The client closed, or reading failed.
    Closed(io::Error),
}

impl HealthCheck {
    /// Serves `stream`, whose first bytes `first` were read already (maybe none), holding the
    /// place `waiting` until its request head is complete: answers a health check, refuses
    /// anything else with a 503 as soon as its first bytes tell.
    pub(super) async fn serve<S>(self, mut stream: S, mut first: BytesMut, waiting: Waiting)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let HealthCheck {
            app,
            deadline,
            watcher,
            stopping,
        } = self;
        let Waiting { place, mut evicted } = waiting;
        let early = tokio::select! {
            biased;
            () = stopping.cancelled() => Some(Early::Stopping),
            _ = &mut evicted => Some(Early::PushedOut),
            read = tokio::time::timeout_at(deadline, read_request_start(&mut stream, &mut first)) => {
                match read {
                    Err(_) => Some(Early::Timeout),
                    Ok(Err(e)) => Some(Early::Closed(e)),
                    Ok(Ok(FirstBytes::HealthCheck)) => None,
                    Ok(Ok(_)) => Some(Early::NotHealthCheck),
                }
            }
        };
        match early {
            None => {}
            Some(Early::NotHealthCheck) => {
                drop(place);
                refused(Refusal::ConnectionLimit);
                answer_503_and_close(stream).await;
                return;
            }
            Some(Early::Timeout) => {
                refused(Refusal::HeaderTimeout);
                return;
            }
            Some(Early::PushedOut | Early::Stopping) => return,
            Some(Early::Closed(e)) => {
                debug!(error = %e, "management API: a health-check connection closed early");
                return;
            }
        }

        // A health check: hyper reads the head (the bytes read so far first) within what is
        // left of the head timeout. The connection keeps its place, and may still be pushed
        // out, until the head is complete.
        let head_done = Arc::new(AtomicBool::new(false));
        let place = std::sync::Mutex::new(Some(place));
        let service = {
            let head_done = Arc::clone(&head_done);
            hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                head_done.store(true, Ordering::Release);
                // Leaves the waiting set: this connection is being answered.
                drop(place.lock().unwrap_or_else(|e| e.into_inner()).take());
                let app = app.clone();
                async move { app.oneshot(request.map(Body::new)).await }
            })
        };
        let remaining = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(std::time::Duration::from_millis(1));
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(remaining)
            .keep_alive(false)
            .serve_connection(
                TokioIo::new(Replay {
                    first: first.freeze(),
                    inner: stream,
                }),
                service,
            );
        let conn = watcher.watch(conn);
        tokio::pin!(conn);
        let result = tokio::select! {
            biased;
            result = &mut conn => result,
            // Fires when the place is given up: pushed out, or (head complete) left on purpose.
            _ = &mut evicted => {
                if head_done.load(Ordering::Acquire) {
                    conn.await
                } else {
                    return;
                }
            }
        };
        if let Err(e) = result {
            connection_ended_with(&e, head_done.load(Ordering::Acquire));
        }
    }
}

/// Reads until the first bytes of the request say whether it is a health check. Reads at most
/// a few KiB: a dozen bytes decide.
async fn read_request_start<S: AsyncRead + Unpin>(
    stream: &mut S,
    first: &mut BytesMut,
) -> io::Result<FirstBytes> {
    loop {
        let seen = classify(first);
        if seen != FirstBytes::TooFew {
            return Ok(seen);
        }
        // Room for a whole ordinary head, so that a refused client's request is read whole
        // and the close that follows the 503 is a clean one (unread bytes would make it a
        // reset, and the client might never see the answer).
        first.reserve(4096);
        if stream.read_buf(first).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// The reserve's answer to anything but a health check: a whole HTTP/1.1 503 that closes the
/// connection.
fn refusal_answer() -> &'static [u8] {
    static ANSWER: LazyLock<Vec<u8>> = LazyLock::new(|| {
        let body = serde_json::json!({
            "message": "the management API is at its connection limit \
                        (`management.http.max-connections`); only GET /alive and GET /ready \
                        are answered until connections close",
        })
        .to_string();
        format!(
            "HTTP/1.1 {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            StatusCode::SERVICE_UNAVAILABLE,
            body.len()
        )
        .into_bytes()
    });
    &ANSWER
}

/// Writes the reserve's 503 (the request is not a health check) and closes.
async fn answer_503_and_close<S: AsyncWrite + Unpin>(mut stream: S) {
    // A fresh connection's send buffer takes this at once; a client that reads nothing gets
    // no more than a second of our time.
    let write = async {
        stream.write_all(refusal_answer()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
}

/// What [`look_at_accept`] found.
pub(super) enum AtAccept {
    /// Not a health check: answered 503 and closed (counted).
    Refused,
    /// Maybe a health check: the stream, and what arrived of it so far.
    Take(TcpStream, BytesMut),
}

/// Reads what has arrived on a just-accepted connection beyond the cap, without waiting, and
/// refuses it at once (503, counted) if that is enough to tell it is not a health check.
///
/// Runs in the accept loop, before the connection takes a place in the reserve. tokio's
/// stream would not even try to read before the reactor has reported it readable, so the
/// socket leaves the reactor for one non-blocking `read` (and `write`, if refused) and comes
/// back.
///
/// Plain HTTP only: on a port that speaks TLS the first bytes are a TLS handshake, and the
/// request can be looked at only past it ([`HealthCheck::serve`] takes any stream).
pub(super) fn look_at_accept(stream: TcpStream) -> io::Result<AtAccept> {
    let mut socket = stream.into_std()?;
    let mut first = BytesMut::zeroed(4096);
    let n = match socket.read(&mut first) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(e),
    };
    first.truncate(n);
    if classify(&first) == FirstBytes::Other {
        refused(Refusal::ConnectionLimit);
        // A fresh connection's send buffer takes the answer whole; if it does not, the client
        // gets the close alone.
        let _ = socket.write(refusal_answer());
        let _ = socket.shutdown(std::net::Shutdown::Write);
        return Ok(AtAccept::Refused);
    }
    Ok(AtAccept::Take(TcpStream::from_std(socket)?, first))
}

/// A stream whose first bytes were already read to look at them: reads give them again first.
struct Replay<S> {
    first: Bytes,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.first.has_remaining() {
            let n = this.first.len().min(buf.remaining());
            buf.put_slice(&this.first.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_is_told_apart_from_a_health_check_by_its_first_bytes() {
        for health in [
            &b"GET /alive HTTP/1.1\r\n"[..],
            b"GET /ready HTTP/1.1\r\n",
            b"HEAD /alive HTTP/1.1\r\n",
            b"GET /ready?verbose HTTP/1.1\r\n",
            b"GET /alive ",
        ] {
            assert_eq!(classify(health), FirstBytes::HealthCheck, "{health:?}");
        }
        for other in [
            &b"GET /cluster/members HTTP/1.1\r\nHost: x\r\n"[..],
            b"POST /alive HTTP/1.1\r\n",
            b"GET /alivex HTTP/1.1\r\n",
            b"GET /alive/ HTTP/1.1\r\n",
            b"\x16\x03\x01\x02\x00",
            b"X",
        ] {
            assert_eq!(classify(other), FirstBytes::Other, "{other:?}");
        }
        for too_few in [&b""[..], b"G", b"GET /al", b"HEAD /ready", b"GET /alive"] {
            assert_eq!(classify(too_few), FirstBytes::TooFew, "{too_few:?}");
        }
    }

    #[tokio::test]
    async fn replayed_bytes_come_first_then_the_stream() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b" world").await.unwrap();
        drop(client);
        let mut replay = Replay {
            first: Bytes::from_static(b"hello"),
            inner: server,
        };
        let mut all = String::new();
        replay.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }
}
