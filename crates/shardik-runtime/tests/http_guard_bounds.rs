//! The management port as a stranger meets it: the write guard (403 by default, 401 without
//! the bearer token), the body limit (413), the header-read timeout, the connection cap with
//! its reserve for `/alive` and `/ready`, and the request and refusal metrics. A fake node (a
//! snapshot of two members and a command responder that accepts everything) stands behind
//! the API.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use shardik_runtime::config::Settings;
use shardik_runtime::http::{self, HttpLimits, ManagementApi, WriteGuard};
use shardik_runtime::metrics::{HTTP_REFUSED_TOTAL, HTTP_REQUESTS_TOTAL, Metrics, MetricsHandle};
use shardik_runtime::{MembershipSnapshot, NodeHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

use common::fake_node::two_up_members;

const TOKEN: &str = "a-test-token-0123456789";

/// A served API over a fake node; the node counts the commands that reached it.
struct Served {
    addr: std::net::SocketAddr,
    base: String,
    commands: Arc<AtomicUsize>,
    client: reqwest::Client,
    _shutdown: oneshot::Sender<()>,
    // Kept alive so the handle's snapshot stays readable.
    _snapshot: watch::Sender<Arc<MembershipSnapshot>>,
}

async fn serve(
    configure: impl FnOnce(ManagementApi) -> ManagementApi,
    limits: HttpLimits,
    metrics: Option<MetricsHandle>,
) -> Served {
    let (snap_tx, snap_rx) = watch::channel(Arc::new(two_up_members()));
    let (cmd_tx, commands) = common::fake_node::accepting_control();
    let handle = NodeHandle::new(snap_rx, cmd_tx);
    let router = configure(ManagementApi::new(handle).metrics(metrics)).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    tokio::spawn(http::serve_with(listener, router, limits, async {
        let _ = shutdown_rx.await;
    }));
    Served {
        addr,
        base: format!("http://{addr}"),
        commands,
        client: reqwest::Client::new(),
        _shutdown: shutdown_tx,
        _snapshot: snap_tx,
    }
}

/// Every state-changing request the API has: method, path, form body.
const WRITES: [(&str, &str, &str); 4] = [
    ("POST", "/cluster/members", "address=127.0.0.1:2551"),
    ("PUT", "/cluster/members/127.0.0.1:2552", "operation=Leave"),
    ("PUT", "/cluster/members/127.0.0.1:2552", "operation=Down"),
    ("DELETE", "/cluster/members/127.0.0.1:2552", ""),
];

impl Served {
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: &str,
        token: Option<&str>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .client
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        (status, headers, r.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> StatusCode {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .status()
    }
}

fn message(v: &Value) -> &str {
    v["message"].as_str().expect("error bodies have a message")
}

fn limits() -> HttpLimits {
    HttpLimits::default()
}

#[tokio::test]
async fn every_write_route_answers_403_by_default_and_reads_stay_open() {
    // `ManagementApi::new` alone, and with the reference settings: both read-only.
    for from_settings in [false, true] {
        let s = serve(
            |api| {
                if from_settings {
                    api.settings(&Settings::reference())
                } else {
                    api
                }
            },
            limits(),
            None,
        )
        .await;
        for (method, path, body) in WRITES {
            let (status, _, v) = s.send(method, path, body, None).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {v}");
            assert!(
                message(&v).contains("management.http.route-providers-read-only"),
                "{v}"
            );
            // A token changes nothing while writes are disabled.
            let (status, _, _) = s.send(method, path, body, Some(TOKEN)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
        }
        assert_eq!(
            s.commands.load(Ordering::SeqCst),
            0,
            "nothing reached the node"
        );
        for path in [
            "/alive",
            "/ready",
            "/cluster/members",
            "/cluster/members/127.0.0.1:2552",
        ] {
            assert_eq!(s.get(path).await, StatusCode::OK, "{path}");
        }
    }
}

#[tokio::test]
async fn enabled_writes_with_a_token_refuse_requests_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut settings = Settings::reference();
    settings.management.http.route_providers_read_only = false;
    settings.management.http.auth_token_file = token_file.display().to_string();
    let guard = WriteGuard::from_settings(&settings.management.http).unwrap();
    assert!(guard.writes_enabled() && guard.requires_token());
    let s = serve(|api| api.write_guard(guard), limits(), None).await;

    for (method, path, body) in WRITES {
        for token in [None, Some("a-wrong-token-0123456789"), Some("")] {
            let (status, headers, v) = s.send(method, path, body, token).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} {token:?}: {v}"
            );
            assert!(
                headers["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Bearer"),
                "{headers:?}"
            );
        }
    }
    assert_eq!(
        s.commands.load(Ordering::SeqCst),
        0,
        "nothing reached the node"
    );
    // A token that is not in a `Bearer` header does not count either.
    let r = s
        .client
        .delete(format!("{}/cluster/members/127.0.0.1:2552", s.base))
        .basic_auth("shardik", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    for (method, path, body) in WRITES {
        let (status, _, v) = s.send(method, path, body, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK, "{method} {path}: {v}");
    }
    assert_eq!(s.commands.load(Ordering::SeqCst), WRITES.len());
    // Reads need no token.
    assert_eq!(s.get("/cluster/members").await, StatusCode::OK);
}

#[tokio::test]
async fn a_body_over_the_limit_answers_413() {
    let limits = HttpLimits {
        max_request_body_size: 1024,
        ..HttpLimits::default()
    };
    let s = serve(|api| api.read_only(false), limits, None).await;
    let big = format!("operation=Leave&padding={}", "x".repeat(2048));
    let (status, _, v) = s
        .send("PUT", "/cluster/members/127.0.0.1:2552", &big, None)
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(
        message(&v).contains("management.http.max-request-body-size"),
        "{v}"
    );
    // Without a Content-Length (chunked), the limit holds while the form is read.
    let mut conn = TcpStream::connect(s.addr).await.unwrap();
    let head = "PUT /cluster/members/127.0.0.1:2552 HTTP/1.1\r\nhost: x\r\n\
                content-type: application/x-www-form-urlencoded\r\n\
                transfer-encoding: chunked\r\n\r\n";
    conn.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    // The server may answer and close before reading it all.
    let _ = conn.write_all(chunk.as_bytes()).await;
    let answer = read_until_closed(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("max-request-body-size"), "{answer}");
    assert_eq!(s.commands.load(Ordering::SeqCst), 0);
    // A body within the limit still works.
    let (status, _, v) = s
        .send(
            "PUT",
            "/cluster/members/127.0.0.1:2552",
            "operation=Leave",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

/// Reads until the server closes the connection (or resets it), at most 30 s.
async fn read_until_closed(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => panic!(
                "the server did not close the connection within 30 s; read so far: {}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&out).into_owned(),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// One request on a fresh connection that asks to be closed after: the whole answer.
async fn raw_request(addr: std::net::SocketAddr, method: &str, path: &str) -> String {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    read_until_closed(&mut conn).await
}

#[tokio::test]
async fn a_client_that_never_finishes_its_request_head_is_disconnected() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let s = serve(|api| api, limits, None).await;
    let mut slow = TcpStream::connect(s.addr).await.unwrap();
    // Half a head: the request line and one header, never the blank line that ends it.
    slow.write_all(b"GET /alive HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut slow).await;
    assert!(!answer.contains("200 OK"), "never served: {answer}");
    // One that says nothing at all is closed too.
    let mut silent = TcpStream::connect(s.addr).await.unwrap();
    read_until_closed(&mut silent).await;
    // The server goes on serving.
    assert!(
        raw_request(s.addr, "GET", "/alive")
            .await
            .starts_with("HTTP/1.1 200")
    );
}

#[tokio::test]
async fn alive_and_ready_answer_while_strangers_hold_every_connection() {
    let metrics = Metrics::install().unwrap();
    const CAP: usize = 3;
    let limits = HttpLimits {
        max_connections: CAP,
        // Strangers hold their slots for the whole test.
        header_read_timeout: Duration::from_secs(120),
        health_check_head_timeout: Duration::from_secs(120),
        ..HttpLimits::default()
    };
    let s = serve(|api| api, limits, Some(metrics)).await;
    // The listener accepts in connection order: these take every ordinary slot.
    let mut strangers = Vec::new();
    for _ in 0..CAP {
        strangers.push(TcpStream::connect(s.addr).await.unwrap());
    }
    for path in ["/alive", "/ready"] {
        let answer = raw_request(s.addr, "GET", path).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    }
    // Anything else on a reserve connection is refused with a reason.
    let answer = raw_request(s.addr, "GET", "/cluster/members").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("management.http.max-connections"),
        "{answer}"
    );

    // Strangers that fill the reserve with silent connections too (twice over) are pushed out,
    // oldest first, by newer connections: a prober still gets its answer.
    for _ in 0..2 * http::HEALTH_CHECK_RESERVE {
        strangers.push(TcpStream::connect(s.addr).await.unwrap());
    }
    for path in ["/alive", "/ready"] {
        let answer = raw_request(s.addr, "GET", path).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    }
    drop(strangers);
    // Once the strangers are gone, everything is served again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = raw_request(s.addr, "GET", "/cluster/members").await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still refused: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics_text = raw_request(s.addr, "GET", "/metrics").await;
    let refused = counter_value(
        &metrics_text,
        HTTP_REFUSED_TOTAL,
        &[("reason", "connection-limit")],
    );
    assert!(refused >= 2.0, "{metrics_text}");
}

#[tokio::test]
async fn half_sent_requests_beyond_the_cap_are_refused_at_once_and_probes_still_answered() {
    const CAP: usize = 3;
    const HALF_SENT: usize = 100;
    let limits = HttpLimits {
        max_connections: CAP,
        // Nothing here is closed by a timeout within the test: what is refused is refused
        // for what it sent.
        header_read_timeout: Duration::from_secs(120),
        health_check_head_timeout: Duration::from_secs(120),
        ..HttpLimits::default()
    };
    let s = serve(|api| api, limits, None).await;
    let mut holders = Vec::new();
    for _ in 0..CAP {
        holders.push(TcpStream::connect(s.addr).await.unwrap());
    }
    // Many more than the reserve's places, each sending part of a request head for another
    // route and stopping: once they were held until their head timed out, and the reserve
    // turned every prober away meanwhile.
    let mut half_sent = Vec::new();
    for _ in 0..HALF_SENT {
        let mut conn = TcpStream::connect(s.addr).await.unwrap();
        conn.write_all(b"GET /cluster/members HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        half_sent.push(conn);
    }
    for path in ["/alive", "/ready"] {
        let answer = raw_request(s.addr, "GET", path).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    }
    // Each was answered 503 and closed without the rest of its head (the timeouts are two
    // minutes; `read_until_closed` gives up after 30 s).
    for mut conn in half_sent {
        let answer = read_until_closed(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            answer.contains("management.http.max-connections"),
            "{answer}"
        );
    }
    drop(holders);
}

/// The value of the first sample of `name` whose labels include `labels`, or 0.
fn counter_value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn requests_and_refusals_are_counted_by_route_template() {
    let metrics = Metrics::install().unwrap();
    let s = serve(|api| api, limits(), Some(metrics)).await;
    assert_eq!(
        s.get("/cluster/members/127.0.0.1:2552").await,
        StatusCode::OK
    );
    assert_eq!(s.get("/no-such-route-f00d").await, StatusCode::NOT_FOUND);
    let (status, _, _) = s
        .send("DELETE", "/cluster/members/127.0.0.1:2552", "", None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let text = s
        .client
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (labels, what) in [
        (
            &[
                ("route", "/cluster/members/{address}"),
                ("method", "GET"),
                ("status", "200"),
            ][..],
            "the member read",
        ),
        (
            &[("route", http::UNMATCHED_ROUTE), ("status", "404")][..],
            "the unknown path",
        ),
        (
            &[
                ("route", "/cluster/members/{address}"),
                ("method", "DELETE"),
                ("status", "403"),
            ][..],
            "the refused write",
        ),
    ] {
        assert!(
            counter_value(&text, HTTP_REQUESTS_TOTAL, labels) >= 1.0,
            "{what}: {text}"
        );
    }
    assert!(
        counter_value(&text, HTTP_REFUSED_TOTAL, &[("reason", "read-only")]) >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("shardik_http_request_duration_seconds"),
        "{text}"
    );
    // Raw paths never become label values.
    assert!(!text.contains("f00d"), "{text}");
    assert!(!text.contains("127.0.0.1:2552"), "{text}");
}
