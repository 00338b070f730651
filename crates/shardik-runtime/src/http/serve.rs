//! The management port's accept loop, with the bounds a port open to strangers needs
//! (axum's `serve` has none of them):
//!
//! - **Header-read timeout**: a connection that has not sent a whole request head within
//!   `header-read-timeout` of connecting (or of its previous answer) is closed (hyper's
//!   HTTP/1 timer).
//! - **Connection cap**: at most `max-connections` connections are served at once. Beyond it,
//!   connections are taken for the health checks only ([`super::reserve`]): each may send one
//!   `GET`/`HEAD` of `/alive` or `/ready`, whose head must arrive within
//!   [`HEALTH_CHECK_HEAD_TIMEOUT`] (or the header-read timeout if shorter), and is closed after
//!   the answer; a request that starts as anything else answers 503 as soon as its first bytes
//!   arrive. At most [`HEALTH_CHECK_RESERVE`](super::HEALTH_CHECK_RESERVE) of them wait for their request at once; a new
//!   one pushes out the oldest. So the listen backlog never fills and a prober gets a quick
//!   answer even while strangers hold every ordinary slot and keep connecting.
//! - **Body limit**: a body over `max-request-body-size` answers 413, at once when its
//!   `Content-Length` says so, or when a handler reads past the limit.
//! - **`accept` failures** (out of file descriptors, say) are counted and backed off
//!   exponentially up to [`ACCEPT_BACKOFF_MAX`]; the loop never spins and never ends on them.
//!
//! - **HTTPS** ([`serve_https`], `management.http.tls.enabled`): each connection's TLS
//!   handshake runs in its own task within its slot and the head timeout ([`super::https`]);
//!   the verified client certificate, if any, rides along in every request's extensions for
//!   the write guard.
//!
//! Every refusal is counted and logged at a bounded rate ([`super::observe`]).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
#[cfg(feature = "tls")]
use bytes::BytesMut;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use shardik_config::{ManagementHttpSettings, Settings};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::debug;

use super::answer::message;
use super::client_certificate::ClientCertificate;
#[cfg(feature = "tls")]
use super::https::handshake;
use super::observe::{Refusal, connection_ended_with, record_request, refused};
use super::reserve::{AtAccept, HealthCheck, Reserve, look_at_accept};
use shardik_transport::tls::TlsContext;

/// The longest a health-check connection may take to send its request head, by default
/// ([`HttpLimits::health_check_head_timeout`]).
pub const HEALTH_CHECK_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// The first pause after a failed `accept`.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest pause after repeated failed `accept`s.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The bounds of one HTTP port (`management.http.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// `header-read-timeout`.
    pub header_read_timeout: Duration,
    /// `max-connections`.
    pub max_connections: usize,
    /// `max-request-body-size`, in bytes.
    pub max_request_body_size: usize,
    /// How long a connection beyond `max-connections` may take to send its health check's
    /// head (the shorter of this and `header_read_timeout` applies). Not configurable:
    /// [`HEALTH_CHECK_HEAD_TIMEOUT`] unless a test needs otherwise.
    pub health_check_head_timeout: Duration,
}

impl HttpLimits {
    /// The limits `settings` configure.
    pub fn from_settings(settings: &ManagementHttpSettings) -> Self {
        HttpLimits {
            header_read_timeout: settings.header_read_timeout,
            max_connections: settings.max_connections,
            max_request_body_size: settings.max_request_body_size,
            health_check_head_timeout: HEALTH_CHECK_HEAD_TIMEOUT,
        }
    }
}

impl Default for HttpLimits {
    /// The reference configuration's limits.
    fn default() -> Self {
        Self::from_settings(&Settings::reference().management.http)
    }
}

/// Serves `router` on `listener` with the reference configuration's [`HttpLimits`] until
/// `shutdown` completes, then finishes the requests in flight and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, router, HttpLimits::default(), shutdown).await
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then stops
/// accepting, finishes the requests in flight and returns. Requests are counted and timed
/// (`shardik_http_requests_total`, `shardik_http_request_duration_seconds`) by route template.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_listener(listener, router, limits, None, shutdown).await
}

/// As [`serve_with`], over TLS (`management.http.tls`, see [`TlsContext::for_management`]):
/// every connection's TLS handshake must finish within the head timeout of its slot; a client
/// certificate is optional, and a verified one reaches the handlers as a
/// [`ClientCertificate`] request extension (the write guard's authority); plain HTTP is
/// answered with a 400 that says to use https.
pub async fn serve_https(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    tls: TlsContext,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_listener(listener, router, limits, Some(tls), shutdown).await
}

async fn serve_listener(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    tls: Option<TlsContext>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let app = router
        .layer(DefaultBodyLimit::max(limits.max_request_body_size))
        .layer(middleware::from_fn_with_state(
            limits.max_request_body_size,
            limit_body,
        ))
        .layer(middleware::from_fn(record_request));
    let ordinary = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Reserve::new();
    let graceful = GracefulShutdown::new();
    // Tells reserve connections still reading their first bytes (not yet hyper's, so not
    // reached by the graceful shutdown) that the server stops.
    let stopping = CancellationToken::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                stream
            }
            // The client gave up before we took the connection: nothing of ours failed.
            Err(e) if is_connection_error(&e) => {
                debug!(error = %e, "management API: a connection closed before it was accepted");
                continue;
            }
            Err(e) => {
                debug!(error = %e, "management API: accept failed");
                refused(Refusal::AcceptFailed);
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&ordinary).try_acquire_owned() else {
            // Beyond the cap: health checks only.
            let health = HealthCheck {
                app: app.clone(),
                deadline: tokio::time::Instant::now()
                    + limits
                        .header_read_timeout
                        .min(limits.health_check_head_timeout),
                watcher: graceful.watcher(),
                stopping: stopping.clone(),
            };
            match &tls {
                None => match look_at_accept(stream) {
                    Ok(AtAccept::Take(stream, first)) => {
                        let waiting = reserve.admit();
                        crate::task::spawn(health.serve(stream, first, waiting));
                    }
                    Ok(AtAccept::Refused) => continue,
                    Err(e) => {
                        debug!(error = %e, "management API: a connection failed at accept");
                        continue;
                    }
                },
                #[cfg(not(feature = "tls"))]
                Some(tls) => match *tls {},
                #[cfg(feature = "tls")]
                Some(tls) => {
                    // The request can be looked at only past the handshake, which runs
                    // within the same head timeout and may be pushed out meanwhile.
                    let mut waiting = reserve.admit();
                    let tls = tls.clone();
                    crate::task::spawn(async move {
                        let timeout = health
                            .deadline
                            .saturating_duration_since(tokio::time::Instant::now());
                        let handshake = handshake(stream, &tls, timeout);
                        if let Some(Some((stream, _))) = waiting.unless_pushed_out(handshake).await
                        {
                            health.serve(stream, BytesMut::new(), waiting).await;
                        }
                    });
                }
            }
            // Lets the new connection's task read its request before this loop takes more:
            // under a burst the loop would otherwise accept on (a ready listener does not
            // make it yield), and newer connections would push this one out of the reserve
            // before it was ever read. (Measured in `tests/transport_flood.rs`: without it, 7
            // of 316 probes failed during bursts of 2 000 half-sent requests, with a reserve
            // of 8 or of 32; with it, none of 274.)
            tokio::task::yield_now().await;
            continue;
        };
        let connection = Connection {
            app: app.clone(),
            head_timeout: limits.header_read_timeout,
            permit,
            watcher: graceful.watcher(),
        };
        let tls = tls.clone();
        crate::task::spawn(async move {
            match tls {
                None => connection.serve(stream, None).await,
                #[cfg(not(feature = "tls"))]
                Some(tls) => match tls {},
                #[cfg(feature = "tls")]
                Some(tls) => {
                    if let Some((stream, client)) =
                        handshake(stream, &tls, connection.head_timeout).await
                    {
                        connection.serve(stream, client).await;
                    }
                }
            }
        });
    }
    drop(listener);
    stopping.cancel();
    graceful.shutdown().await;
    Ok(())
}

/// One accepted connection within `max-connections`, ready to serve HTTP/1 once its stream is
/// (past TLS, if any).
struct Connection {
    app: Router,
    /// Its slot, released when it ends.
    permit: OwnedSemaphorePermit,
    /// How long it may take to send a request head (and, with TLS, to finish the handshake
    /// before it).
    head_timeout: Duration,
    /// Registered at accept, so that a shutdown waits for the connection (whose handshake is
    /// bounded by `head_timeout`) and ends it gracefully.
    watcher: Watcher,
}

impl Connection {
    /// Serves the connection on `stream` until it closes, for as many requests as it sends;
    /// `client` is its verified client certificate, handed to every request.
    async fn serve<S>(self, stream: S, client: Option<ClientCertificate>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            app,
            permit,
            head_timeout,
            watcher,
        } = self;
        // Whether a request has been served: a header timeout after one is an idle kept-alive
        // connection closing, not a client that failed to send its head.
        let served = Arc::new(AtomicBool::new(false));
        let service = {
            let served = Arc::clone(&served);
            hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                served.store(true, Ordering::Relaxed);
                app.clone().oneshot(with_client(request, &client))
            })
        };
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(head_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let result = watcher.watch(conn).await;
        drop(permit);
        if let Err(e) = result {
            connection_ended_with(&e, served.load(Ordering::Relaxed));
        }
    }
}

/// The request as axum takes it, carrying the connection's client certificate if it has one.
fn with_client(
    request: hyper::Request<Incoming>,
    client: &Option<ClientCertificate>,
) -> Request<Body> {
    let mut request = request.map(Body::new);
    if let Some(client) = client {
        request.extensions_mut().insert(client.clone());
    }
    request
}

/// Errors of one connection that `accept` reports, as opposed to the listener's own.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

/// Middleware: a body whose `Content-Length` is over the limit is refused before anyone reads
/// it; a 413 from a handler that read past the limit (a chunked body) is counted too.
async fn limit_body(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        refused(Refusal::BodyTooLarge);
        return too_large(limit);
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        refused(Refusal::BodyTooLarge);
        return too_large(limit);
    }
    response
}

/// The 413 answer.
fn too_large(limit: usize) -> Response {
    let mut response = message(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the request body is larger than {limit} bytes \
             (`management.http.max-request-body-size`)"
        ),
    );
    // The rest of the body is not read: the connection cannot carry another request.
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}
