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
use tracing::warn;

use crate::metrics::{HTTP_REFUSED_TOTAL, HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUESTS_TOTAL};

/// The longest silence between two log lines about refusals of one reason while refusals go on.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why the management port refused a connection or a request (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A state-changing route while `route-providers-read-only` is true (403).
    ReadOnly,
    /// A state-changing route without the right bearer token (401).
    Unauthorized,
    /// A body over `max-request-body-size` (413).
    BodyTooLarge,
    /// A request head not complete within `header-read-timeout` (disconnected).
    HeaderTimeout,
    /// A connection beyond `max-connections` and the health-check reserve (closed at once),
    /// or a request other than `/alive`/`/ready` on a reserve connection (503).
    ConnectionLimit,
    /// `accept` failed (out of file descriptors, say); the loop backs off and goes on.
    AcceptFailed,
}

const ALL: [Refusal; 6] = [
    Refusal::ReadOnly,
    Refusal::Unauthorized,
    Refusal::BodyTooLarge,
    Refusal::HeaderTimeout,
    Refusal::ConnectionLimit,
    Refusal::AcceptFailed,
];

impl Refusal {
    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ReadOnly => "read-only",
            Refusal::Unauthorized => "unauthorized",
            Refusal::BodyTooLarge => "body-too-large",
            Refusal::HeaderTimeout => "header-timeout",
            Refusal::ConnectionLimit => "connection-limit",
            Refusal::AcceptFailed => "accept-failed",
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
            Refusal::BodyTooLarge => {
                "requests refused with 413 (body over management.http.max-request-body-size)"
            }
            Refusal::HeaderTimeout => {
                "connections closed for not sending a request head within \
                 management.http.header-read-timeout"
            }
            Refusal::ConnectionLimit => {
                "connections or requests refused at management.http.max-connections"
            }
            Refusal::AcceptFailed => {
                "accept() failures on the management port (out of file descriptors?); \
                 backing off"
            }
        }
    }

    fn index(self) -> usize {
        ALL.iter().position(|r| *r == self).unwrap_or(0)
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

static GATES: [LogGate; ALL.len()] = [GATE; ALL.len()];

/// Counts one refusal and logs it, or leaves it for the next line of its reason.
pub fn refused(reason: Refusal) {
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
    warn!(
        reason = reason.label(),
        count,
        "management API: {count} {} (at most one line per reason every {}s)",
        reason.what(),
        REFUSAL_LOG_INTERVAL.as_secs()
    );
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
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED_ROUTE.to_string(), |p| p.as_str().to_string());
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
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
        let labels: std::collections::BTreeSet<_> = ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), ALL.len());
        for (i, r) in ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        assert_eq!(method_label(&Method::PUT), "PUT");
        let odd = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "other");
    }
}
