//! A flood of stalled connections against a real `shardik node` process whose open-file limit
//! is 1 024. First its cluster port: 2 000 connections that announce a 256 KiB frame, send most
//! of it and stall (half of them after speaking our handshake as strangers), and 2 000 that
//! connect and say nothing; then strangers that complete the handshake one after another until
//! the non-member pool turns one away. Then, with all those held, its management port: 2 000
//! connections that each send part of a request head and stop, and more that keep coming. The
//! node must keep its members Up, keep answering `/alive` and `/ready` throughout, count what
//! it refused, and stay within a memory bound.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use rustix::process::{Pid, Resource, Rlimit, prlimit};
use shardik_core::membership::{Address, UniqueAddress};
use shardik_wire::{Frame, FrameCodec, FrameKind, Handshake, LocalIdentity};
use support::raw::connect_plain;
use support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Connections of each kind.
const FLOOD: usize = 2_000;
/// What each stalled connection announces (the default `maximum-frame-size`).
const ANNOUNCED: usize = 256 * 1024;
/// What it sends of that before stalling.
const SENT: usize = 200 * 1024;
/// The most the node's resident memory may grow under both floods together.
const RSS_BOUND_KIB: u64 = 50 * 1024;
/// Connections to the management port that send part of a request head and stop.
const HTTP_FLOOD: usize = 2_000;
/// What each of them sends: a request line and one header, without the blank line that ends
/// the head.
const HALF_SENT: &[u8] = b"GET /cluster/members HTTP/1.1\r\nHost: x\r\n";
/// How long the HTTP flood lasts from its first connection: past the header-read timeout
/// (10 s by default), which closes the half-sent requests in ordinary slots.
const HTTP_FLOOD_FOR: Duration = Duration::from_secs(12);
/// After the burst, half-sent requests keep coming: this many every [`TRICKLE_EVERY`].
const TRICKLE_PER_ROUND: usize = 20;
const TRICKLE_EVERY: Duration = Duration::from_millis(250);

/// Sets the open-file limit of process `pid` (after it started: `prlimit` needs no code in
/// the child, and this crate has no unsafe code for a `pre_exec`).
fn limit_open_files(pid: u32, n: u64) {
    let pid = Pid::from_raw(pid as i32).expect("a child's pid is positive");
    let limit = Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    prlimit(Some(pid), Resource::Nofile, limit).expect("prlimit on the node");
}

/// Raises this test process's own open-file limit to its maximum: it holds the flood's
/// connections itself.
fn raise_own_open_files(needed: u64) {
    let limit = rustix::process::getrlimit(Resource::Nofile);
    let max = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        max >= needed,
        "this test holds {needed} connections; the open-file hard limit is {max}"
    );
    rustix::process::setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(max.min(1 << 20)),
            maximum: limit.maximum,
        },
    )
    .expect("raise the soft open-file limit");
}

/// Resident memory of process `pid`, in KiB (`VmRSS` of `/proc/PID/status`).
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// A stranger's handshake to `target` (the default cluster name; an address nobody uses).
fn stranger_handshake(target: &str, i: usize) -> BytesMut {
    let (host, port) = target.rsplit_once(':').expect("host:port");
    let me = LocalIdentity {
        cluster_name: "shardik".into(),
        address: UniqueAddress::new(
            Address::new("127.0.0.9", 10_000 + i as u16),
            0x5eed_0000 + i as u64,
        ),
    };
    let to = Address::new(host, port.parse().expect("port"));
    let mut buf = BytesMut::new();
    FrameCodec::default()
        .encode(&Frame::Handshake(Handshake::new(&me, Some(to))), &mut buf)
        .expect("a handshake fits");
    buf
}

/// Opens one flood connection and leaves it stalled: `Some` while the test holds it.
async fn flood_connection(target: String, i: usize, kind: Kind) -> Option<TcpStream> {
    let mut s = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(&target))
        .await
        .ok()?
        .ok()?;
    let mut bytes = BytesMut::new();
    match kind {
        Kind::Silent => return Some(s),
        Kind::StrangerFrame => bytes.extend_from_slice(&stranger_handshake(&target, i)),
        Kind::RawFrame => {}
    }
    bytes.put_u32(ANNOUNCED as u32);
    bytes.put_u8(FrameKind::User as u8);
    bytes.put_bytes(0x5a, SENT);
    // The node may close at once (a cap) or stop reading (a stalled frame): either way we keep
    // what we have and move on.
    let _ = tokio::time::timeout(Duration::from_secs(2), s.write_all(&bytes)).await;
    Some(s)
}

#[derive(Clone, Copy)]
enum Kind {
    /// Connects and says nothing.
    Silent,
    /// Announces a large frame as its first frame.
    RawFrame,
    /// Speaks our handshake as a stranger, then announces a large user frame.
    StrangerFrame,
}

/// Checks the cluster's health once: both nodes list both as Up, and the target answers
/// `/alive`.
async fn healthy(
    http: &reqwest::Client,
    managements: &[String],
    expected: &[&str],
) -> Result<(), String> {
    for m in managements {
        all_up_at(http, m, expected).await?;
    }
    all_answer_200(http, &managements[..1], &["/alive"]).await
}

/// Checks that the node at `management` lists every address of `expected` as Up.
async fn all_up_at(
    http: &reqwest::Client,
    management: &str,
    expected: &[&str],
) -> Result<(), String> {
    let v = members_at(http, management).await?;
    let listed = member_list(&v);
    for e in expected {
        if !listed
            .iter()
            .any(|(node, _, status)| node == e && status == "Up")
        {
            return Err(format!("{management}: {e} is not Up: {v}"));
        }
    }
    Ok(())
}

/// Opens one connection to the management port at `target`, sends [`HALF_SENT`] and leaves it
/// there: `Some` while the test holds it.
async fn half_sent_request(target: String) -> Option<TcpStream> {
    let mut s = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(&target))
        .await
        .ok()?
        .ok()?;
    // The node may have closed it at once (beyond its caps): keep it anyway.
    let _ = tokio::time::timeout(Duration::from_secs(2), s.write_all(HALF_SENT)).await;
    Some(s)
}

/// One probe's outcome.
struct Probe {
    at: Instant,
    path: &'static str,
    outcome: Result<(), String>,
}

/// A prober such as the kubelet: `GET /alive` and `GET /ready` in turn, each on a new
/// connection, every 50 ms until stopped. It runs on a thread of its own with blocking
/// sockets, as a prober in another process would, rather than as a task queued behind the
/// flood's thousands in this process's runtime.
struct Prober {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Probe>>,
}

impl Prober {
    fn start(target: &str) -> Prober {
        let addr: SocketAddr = target.parse().expect("a socket address");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut probes = Vec::new();
            for path in ["/alive", "/ready"].into_iter().cycle() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let at = Instant::now();
                probes.push(Probe {
                    at,
                    path,
                    outcome: probe(addr, path),
                });
                std::thread::sleep(Duration::from_millis(50));
            }
            probes
        });
        Prober { stop, thread }
    }

    fn stop(self) -> Vec<Probe> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the prober thread")
    }
}

/// One health check on a new connection: `Ok` if answered 200.
fn probe(addr: SocketAddr, path: &str) -> Result<(), String> {
    use std::io::{Read, Write};
    let timeout = Duration::from_secs(3);
    let mut conn = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("connect: {e}"))?;
    conn.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    conn.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let read = conn.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    match text.lines().next() {
        Some(status) if status.starts_with("HTTP/1.1 200") => Ok(()),
        Some(status) => Err(status.to_string()),
        None => Err(format!("no answer ({read:?})")),
    }
}

/// A summary of `probes` for messages: answered, and the failures.
fn summary(probes: &[&Probe]) -> String {
    let failed: Vec<String> = probes
        .iter()
        .filter_map(|p| p.outcome.as_ref().err().map(|e| format!("{}: {e}", p.path)))
        .collect();
    format!(
        "{} answered, {} failed {failed:?}",
        probes.len() - failed.len(),
        failed.len()
    )
}

/// Checks that the node at `other` lists every address of `expected` as Up, or panics.
async fn members_up_elsewhere(http: &reqwest::Client, other: &str, expected: &[&str]) {
    if let Err(e) = all_up_at(http, other, expected).await {
        panic!("a member is not Up during the HTTP flood: {e}");
    }
}

/// A metric's samples summed, from `/metrics` at `management` (0 when it has none yet).
async fn counted(http: &reqwest::Client, management: &str, name: &str, reason: &str) -> f64 {
    metric_sum_with_label(http, management, name, &format!("reason=\"{reason}\""))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        + 0.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_stalled_connections_leaves_members_up_and_memory_bounded() {
    let trickle_rounds = (HTTP_FLOOD_FOR.as_millis() / TRICKLE_EVERY.as_millis()) as u64;
    raise_own_open_files(
        (2 * FLOOD + HTTP_FLOOD) as u64 + trickle_rounds * TRICKLE_PER_ROUND as u64 + 500,
    );
    let http = client();
    let mut nodes = start_cluster(&http, "flood", 2, &[]).await;
    for n in &nodes {
        limit_open_files(n.pid(), 1024);
    }
    let expected: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    let managements: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let target = nodes[0].addr().to_string();
    let pid = nodes[0].pid();
    let rss_before = vm_rss_kib(pid);

    // The cluster port's flood: at most 200 connections being opened at once, so the test
    // measures the node, not the listen backlog.
    let gate = Arc::new(Semaphore::new(200));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..2 * FLOOD {
        let kind = match i % 4 {
            0 => Kind::RawFrame,
            1 => Kind::StrangerFrame,
            _ => Kind::Silent,
        };
        let (gate, target) = (Arc::clone(&gate), target.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open");
            flood_connection(target, i, kind).await
        });
    }
    let mut held = Vec::new();
    let mut rss_peak = rss_before;
    let mut health_checks = 0;
    while let Some(done) = tasks.join_next().await {
        if let Some(s) = done.expect("a flood task") {
            held.push(s);
        }
        if held.len() % 500 == 0 {
            rss_peak = rss_peak.max(vm_rss_kib(pid));
            if let Err(e) = healthy(&http, &managements, &expected).await {
                panic!("unhealthy during the flood: {e}\n{}", nodes[0].report());
            }
            health_checks += 1;
        }
    }
    assert!(
        held.len() > FLOOD,
        "the test opened its connections ({} of {})",
        held.len(),
        2 * FLOOD
    );
    // Hold them a little while: the members stay Up and the node answers throughout.
    for _ in 0..10 {
        rss_peak = rss_peak.max(vm_rss_kib(pid));
        if let Err(e) = healthy(&http, &managements, &expected).await {
            panic!(
                "unhealthy while the flood is held: {e}\n{}",
                nodes[0].report()
            );
        }
        health_checks += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(health_checks >= 10);

    let metrics = http
        .get(nodes[0].url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    let refused = |reason: &str| {
        let name = format!("shardik_transport_refused_total{{reason=\"{reason}\"}}");
        metric_sum(&metrics, &name) + 0.0
    };
    let grown = rss_peak.saturating_sub(rss_before);
    println!(
        "flood of {} connections held {}: node RSS {rss_before} KiB before, {rss_peak} KiB at the \
         peak, grew {grown} KiB; refused: malformed-handshake {}, too-many-unauthenticated {}, \
         too-many-non-members {}, too-many-connections {}, accept-failed {}, frame-read-timeout {}",
        2 * FLOOD,
        held.len(),
        refused("malformed-handshake"),
        refused("too-many-unauthenticated"),
        refused("too-many-non-members"),
        refused("too-many-connections"),
        refused("accept-failed"),
        refused("frame-read-timeout"),
    );
    assert!(
        refused("malformed-handshake") > 0.0,
        "large first frames refused at their prefix"
    );
    assert!(
        refused("too-many-unauthenticated") > 0.0,
        "silent connections pushed out"
    );
    // Strangers that complete our handshake hold places of the non-member pool; the flood's
    // may or may not have got that far (newer connections push older ones out of the pending
    // set before their handshake is read), so fill the pool for certain: one stranger after
    // another until the node turns one away.
    let mut strangers = Vec::new();
    let turned_away = loop {
        let n = strangers.len() as u16;
        let me = UniqueAddress::new(
            Address::new("127.0.0.1", 20_000 + n),
            0x5eed_1000 + u64::from(n),
        );
        match connect_plain(&target, &me, "shardik").await {
            Ok(peer) => strangers.push(peer),
            Err(e) => break e,
        }
        assert!(
            strangers.len() <= 1_000,
            "1 000 strangers past the handshake at once: the non-member pool has no bound"
        );
    };
    assert!(
        turned_away.contains("not members"),
        "the stranger after {} was refused for being one too many: {turned_away}",
        strangers.len()
    );
    let non_members_refused = counted(
        &http,
        &managements[0],
        "shardik_transport_refused_total",
        "too-many-non-members",
    )
    .await;
    assert!(
        non_members_refused > 0.0,
        "strangers beyond the non-member pool counted as refused"
    );
    assert!(
        grown < RSS_BOUND_KIB,
        "the node's memory grew {grown} KiB under the flood (bound {RSS_BOUND_KIB} KiB)"
    );

    // With the cluster port's flood still held, the management port's, in two parts, while a
    // prober asks for `/alive` and `/ready` throughout. First a burst: connections that send
    // part of a request head and stop, opened 200 at a time.
    let mgmt_target = managements[0].clone();
    let prober = Prober::start(&mgmt_target);
    let rss_cluster_flood = vm_rss_kib(pid);
    let mut rss_http_peak = rss_cluster_flood;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..HTTP_FLOOD {
        let (gate, target) = (Arc::clone(&gate), mgmt_target.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open");
            half_sent_request(target).await
        });
    }
    let mut held_http = Vec::new();
    let mut finished = 0;
    while let Some(done) = tasks.join_next().await {
        finished += 1;
        if let Some(s) = done.expect("an HTTP flood task") {
            held_http.push(s);
        }
        if finished % 250 == 0 {
            rss_http_peak = rss_http_peak.max(vm_rss_kib(pid));
            members_up_elsewhere(&http, &managements[1], &expected).await;
        }
    }
    let burst_ended = Instant::now();
    let burst_held = held_http.len();
    assert!(
        burst_held > HTTP_FLOOD / 2,
        "the test opened its HTTP connections ({burst_held} of {HTTP_FLOOD})"
    );
    // Then, with all of them held past the header-read timeout (10 s by default, which closes
    // those in ordinary slots), more keep coming at a steady rate.
    let hold_until = started + HTTP_FLOOD_FOR;
    let mut trickle = tokio::task::JoinSet::new();
    while Instant::now() < hold_until {
        for _ in 0..TRICKLE_PER_ROUND {
            trickle.spawn(half_sent_request(mgmt_target.clone()));
        }
        rss_http_peak = rss_http_peak.max(vm_rss_kib(pid));
        members_up_elsewhere(&http, &managements[1], &expected).await;
        tokio::time::sleep(TRICKLE_EVERY).await;
    }
    let probes = prober.stop();
    while let Some(done) = trickle.join_next().await {
        if let Some(s) = done.expect("a trickle task") {
            held_http.push(s);
        }
    }
    let (during_burst, after_burst): (Vec<&Probe>, Vec<&Probe>) =
        probes.iter().partition(|p| p.at < burst_ended);
    // Every half-sent request of the burst was refused one way or the other: closed by the
    // header-read timeout (ordinary slots), or turned away beyond the connection cap.
    let http_refused = |reason| counted(&http, &mgmt_target, "shardik_http_refused_total", reason);
    let accounted_by = Instant::now() + BOUND;
    let (header_timeouts, connection_limit) = loop {
        let counts = (
            http_refused("header-timeout").await,
            http_refused("connection-limit").await,
        );
        if counts.0 + counts.1 >= burst_held as f64 || Instant::now() >= accounted_by {
            break counts;
        }
        tokio::time::sleep(POLL).await;
    };
    let accept_failed = http_refused("accept-failed").await;
    let rss_peak = rss_peak.max(rss_http_peak);
    let grown = rss_peak.saturating_sub(rss_before);
    println!(
        "HTTP flood of {HTTP_FLOOD} half-sent requests held {burst_held} (opened in {:?}), then \
         {} more at {TRICKLE_PER_ROUND} every {TRICKLE_EVERY:?}: node RSS {rss_cluster_flood} KiB with the \
         cluster flood held, {rss_http_peak} KiB at the peak, grew {} KiB more ({grown} KiB over \
         both floods); probes during the burst: {}; after it: {}; refused: header-timeout \
         {header_timeouts}, connection-limit {connection_limit}, accept-failed {accept_failed}",
        burst_ended - started,
        held_http.len() - burst_held,
        rss_http_peak.saturating_sub(rss_cluster_flood),
        summary(&during_burst),
        summary(&after_burst),
    );
    // Every probe is answered, during the burst and while more half-sent requests keep coming.
    // (Before the reserve looked at a connection's first bytes, half-sent requests held its
    // places until their heads timed out, two seconds each, and no probe got through while
    // they kept coming.)
    assert!(
        probes.iter().all(|p| p.outcome.is_ok()),
        "/alive or /ready went unanswered during the HTTP flood: during the burst {}; after it \
         {}\n{}",
        summary(&during_burst),
        summary(&after_burst),
        nodes[0].report()
    );
    assert!(
        !during_burst.is_empty() && after_burst.len() >= 20,
        "the prober ran throughout: {} probes during the burst, {} after",
        during_burst.len(),
        after_burst.len()
    );
    assert!(
        header_timeouts + connection_limit >= burst_held as f64,
        "{header_timeouts} header timeouts and {connection_limit} connection-limit refusals for \
         {burst_held} half-sent requests"
    );
    assert!(header_timeouts > 0.0 && connection_limit > 0.0);
    assert!(
        grown < RSS_BOUND_KIB,
        "the node's memory grew {grown} KiB under both floods (bound {RSS_BOUND_KIB} KiB)"
    );
    drop(held_http);
    drop(strangers);
    drop(held);
    healthy(&http, &managements, &expected)
        .await
        .unwrap_or_else(|e| panic!("unhealthy after the flood: {e}\n{}", nodes[0].report()));
}
