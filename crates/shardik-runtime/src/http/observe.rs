//! What the management port records: every refusal (counted in
//! [`HTTP_REFUSED_TOTAL`] by reason and logged at most once per reason per
//! [`REFUSAL_LOG_INTERVAL`], with the count since the last line, because a stranger can cause
//! refusals as fast as it can connect), and every request (counted and timed by route
//! template, method and status, with labels drawn from fixed sets only).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use tracing::{debug, warn};

use crate::metrics::{HTTP_REFUSED_TOTAL, HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUESTS_TOTAL};
use shardik_transport::tls::FailureReason;

/// The longest silence between two log lines about refusals of one reason while refusals go on.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why the management port refused a connection or a request (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A state-changing route while `route-providers-read-only` is true (403).
    ReadOnly,
    /// A state-changing route without the right bearer token, and without a client
    /// certificate where one would do (401).
    Unauthorized,
    /// A state-changing route without a client certificate, on a TLS port without a bearer
    /// token (403).
    NoClientCertificate,
    /// A body over `max-request-body-size` (413).
    BodyTooLarge,
    /// A request head (or, with TLS, the TLS handshake) not complete within
    /// `header-read-timeout` (disconnected).
    HeaderTimeout,
    /// A request other than `/alive`/`/ready` beyond `max-connections` (503, at its first
    /// bytes), or a connection waiting there pushed out by a newer one (closed).
    ConnectionLimit,
    /// `accept` failed (out of file descriptors, say); the loop backs off and goes on.
    AcceptFailed,
    /// With `management.http.tls.enabled`, a TLS handshake that failed, by reason (label
    /// `tls-<reason>`, as the transport's): a client certificate from another CA or cluster,
    /// an expired one, a plain HTTP request (`tls-not-tls`, answered with a 400 that says to
    /// use https), a connection that broke off.
    Tls(FailureReason),
}

/// The reasons that are not TLS handshake failures.
const PLAIN: [Refusal; 7] = [
    Refusal::ReadOnly,
    Refusal::Unauthorized,
    Refusal::NoClientCertificate,
    Refusal::BodyTooLarge,
    Refusal::HeaderTimeout,
    Refusal::ConnectionLimit,
    Refusal::AcceptFailed,
];

/// How many reasons there are (one log gate each).
const REASONS: usize = PLAIN.len() + FailureReason::ALL.len();

impl Refusal {
    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ReadOnly => "read-only",
            Refusal::Unauthorized => "unauthorized",
            Refusal::NoClientCertificate => "no-client-certificate",
            Refusal::BodyTooLarge => "body-too-large",
            Refusal::HeaderTimeout => "header-timeout",
            Refusal::ConnectionLimit => "connection-limit",
            Refusal::AcceptFailed => "accept-failed",
            Refusal::Tls(reason) => reason.refusal_label(),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Refusal::ReadOnly => {
                "state-changing requests refused with 403 \
                 (management.http.route-providers-read-only = true)"
            }
            Refusal::Unauthorized => {
                "state-changing requests refused with 401 (missing or wrong bearer token, \
                 management.http.auth-token-file)"
            }
            Refusal::NoClientCertificate => {
                "state-changing requests refused with 403 (no client certificate, \
                 management.http.tls)"
            }
            Refusal::BodyTooLarge => {
                "requests refused with 413 (body over management.http.max-request-body-size)"
            }
            Refusal::HeaderTimeout => {
                "connections closed for not sending a request head (or finishing the TLS \
                 handshake) within management.http.header-read-timeout"
            }
            Refusal::ConnectionLimit => {
                "connections or requests refused at management.http.max-connections"
            }
            Refusal::AcceptFailed => {
                "accept() failures on the management port (out of file descriptors?); \
                 backing off"
            }
            Refusal::Tls(FailureReason::NotTls) => {
                "plain HTTP requests answered with 400 and closed (the port speaks HTTPS, \
                 management.http.tls.enabled)"
            }
            Refusal::Tls(_) => "TLS handshakes failed on the management port",
        }
    }

    fn index(self) -> usize {
        match self {
            Refusal::Tls(reason) => {
                PLAIN.len()
                    + FailureReason::ALL
                        .iter()
                        .position(|r| *r == reason)
                        .unwrap_or(0)
            }
            plain => PLAIN.iter().position(|r| *r == plain).unwrap_or(0),
        }
    }
}

/// Per reason: refusals not yet logged, and when the last line was written.
struct LogGate {
    unlogged: AtomicU64,
    last: Mutex<Option<Instant>>,
}

#[allow(clippy::declare_interior_mutable_const)]
const GATE: LogGate = LogGate {
    unlogged: AtomicU64::new(0),
    last: Mutex::new(None),
};

static GATES: [LogGate; REASONS] = [GATE; REASONS];

/// Counts a connection that ended in an error, if the error is a refusal of ours.
pub(super) fn connection_ended_with(error: &hyper::Error, served: bool) {
    if error.is_timeout() && !served {
        refused(Refusal::HeaderTimeout);
    } else {
        debug!(error = %error, "management API: connection ended with an error");
    }
}

/// Counts one refusal and logs it, or leaves it for the next line of its reason.
pub fn refused(reason: Refusal) {
    refused_because(reason, None);
}

/// Counts one refusal and logs it with `detail` (the error, the peer), or leaves it for the
/// next line of its reason; the detail of the refusals not logged is lost, their count is not.
pub fn refused_because(reason: Refusal, detail: Option<&dyn std::fmt::Display>) {
    metrics::counter!(HTTP_REFUSED_TOTAL, "reason" => reason.label()).increment(1);
    let gate = &GATES[reason.index()];
    gate.unlogged.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut last = gate.last.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
        return;
    }
    *last = Some(now);
    drop(last);
    let count = gate.unlogged.swap(0, Ordering::Relaxed);
    match detail {
        None => warn!(
            reason = reason.label(),
            count,
            "management API: {count} {} (at most one line per reason every {}s)",
            reason.what(),
            REFUSAL_LOG_INTERVAL.as_secs()
        ),
        Some(detail) => warn!(
            reason = reason.label(),
            count,
            latest = %detail,
            "management API: {count} {} (at most one line per reason every {}s)",
            reason.what(),
            REFUSAL_LOG_INTERVAL.as_secs()
        ),
    }
}

/// The `route` label of requests that matched no route.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The `method` label: the standard methods as written, anything else `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware: counts and times each request under its route template (never the raw path,
/// so that strangers cannot mint label values).
pub async fn record_request(request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    // An application's route served beside the management API (`process.rs`) matched inside
    // the fallback and says which in its response.
    let route = matched
        .or_else(|| response.extensions().get::<MatchedPath>().cloned())
        .map_or_else(|| UNMATCHED_ROUTE.to_string(), |p| p.as_str().to_string());
    let status = response.status().as_u16().to_string();
    metrics::counter!(
        HTTP_REQUESTS_TOTAL,
        "route" => route.clone(),
        "method" => method,
        "status" => status
    )
    .increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, "route" => route, "method" => method)
        .record(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_methods_fold_into_a_fixed_set() {
        let all: Vec<Refusal> = PLAIN
            .into_iter()
            .chain(FailureReason::ALL.into_iter().map(Refusal::Tls))
            .collect();
        assert_eq!(all.len(), REASONS);
        let labels: std::collections::BTreeSet<_> = all.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), REASONS);
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        assert_eq!(method_label(&Method::PUT), "PUT");
        let odd = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "other");
    }
}
