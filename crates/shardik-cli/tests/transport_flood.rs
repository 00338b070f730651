//! A flood of stalled connections against a real `shardik node` process whose open-file limit
//! is 1 024: 2 000 connections that announce a 256 KiB frame, send most of it and stall (half
//! of them after speaking our handshake as strangers, half without), and 2 000 that connect and
//! say nothing. The node must keep its members Up, keep answering its management API, count
//! what it refused, and stay within a memory bound.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use rustix::process::{Pid, Resource, Rlimit, prlimit};
use shardik_core::membership::{Address, UniqueAddress};
use shardik_wire::{Frame, FrameCodec, FrameKind, Handshake, LocalIdentity};
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
/// The most the node's resident memory may grow under the flood.
const RSS_BOUND_KIB: u64 = 50 * 1024;

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
        let v = members_at(http, m).await?;
        let listed = member_list(&v);
        for e in expected {
            if !listed
                .iter()
                .any(|(node, _, status)| node == e && status == "Up")
            {
                return Err(format!("{m}: {e} is not Up: {v}"));
            }
        }
    }
    all_answer_200(http, &managements[..1], &["/alive"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_stalled_connections_leaves_members_up_and_memory_bounded() {
    raise_own_open_files(2 * FLOOD as u64 + 500);
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

    // The flood: at most 200 connections being opened at once, so the test measures the
    // node, not the listen backlog.
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
        metric_sum(&metrics, &name)
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
    assert!(
        refused("too-many-non-members") > 0.0,
        "strangers beyond the non-member pool refused"
    );
    assert!(
        grown < RSS_BOUND_KIB,
        "the node's memory grew {grown} KiB under the flood (bound {RSS_BOUND_KIB} KiB)"
    );
    drop(held);
    healthy(&http, &managements, &expected)
        .await
        .unwrap_or_else(|e| panic!("unhealthy after the flood: {e}\n{}", nodes[0].report()));
}
