//! `shardik bench`: measurements of the transport (issue 3); `bench sharding` lives in
//! [`crate::bench_sharding`], `bench persistence` in [`crate::bench_persistence`],
//! `bench remembered` in [`crate::bench_remembered`], `bench coordinator` in
//! [`crate::bench_coordinator`]. What they share (runtime choice, peer
//! processes, the open-loop sender, latency percentiles) is in [`crate::bench_support`].
//!
//! - `bench transport`: one-way throughput of user messages and request/response latency at a
//!   fixed rate between this process and a second process of the same binary on loopback,
//!   each measured once through the shardik [`Transport`] and once through a raw tokio
//!   `TcpStream` using the same framing, so the ratio to what the machine can do is visible.
//! - `bench idle`: CPU time and bytes per second of idle nodes in a small real cluster.
//!
//! The peer process is `shardik bench-peer` (hidden). It reports on its stdout, one line each:
//! `READY` once it listens, and `DONE <count> <first-unix-ns> <last-unix-ns>` once it has
//! counted the expected number of one-way messages (or stopped receiving them for a while).
//! Both processes run on the same machine, so their wall clocks are the same clock.
//!
//! Payload layout (every message is `--size` bytes, at least [`HEADER`]): a tag byte
//! ([`TAG_COUNT`] or [`TAG_ECHO`]), the sequence number (u64 BE), the send time in
//! nanoseconds since the sender's epoch (u64 BE), then zero filler. The raw peer also answers
//! [`TAG_SIZED`] requests (tag, answer length u32 BE, filler) with a zero-filled frame of that
//! length: `bench sharding remote` uses them for requests and answers whose sizes differ.

use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{BufMut, Bytes, BytesMut};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use shardik_core::membership::{Address, UniqueAddress};
use shardik_runtime::node::random_uid;
use shardik_runtime::transport::{Outgoing, Transport, TransportConfig};
use shardik_wire::{Frame, FrameCodec, LocalIdentity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::bench_support::{
    LATE, Latencies, Peer, TAG_COUNT, TAG_ECHO, TAG_SIZED, Throughput, exit_with_parent, free_port,
    open_loop, put_frame, put_zero_frame, runtime, set_runtime_kind, sized_reply_len, unix_ns,
    write_coalesced,
};

/// Bytes of the payload header: tag, sequence number, send time.
const HEADER: usize = 17;
/// Cluster name both sides of a shardik measurement use (the handshake checks it).
const CLUSTER: &str = "shardik-bench";
/// The peer gives up waiting for the rest of a one-way run after this long without a message.
const PEER_IDLE: Duration = Duration::from_secs(3);

/// Arguments of `shardik bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchCmd,
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Throughput and latency of the TCP transport against a raw tokio TCP baseline.
    Transport(TransportArgs),
    /// CPU and network cost of idle nodes in a real cluster of node processes.
    Idle(IdleArgs),
    /// Cluster sharding: local and remote tells and asks, entity memory, first-message latency.
    Sharding(crate::bench_sharding::ShardingArgs),
    /// Durable entities: persisted commands against plain appends on one store, and recovery.
    Persistence(crate::bench_persistence::PersistenceArgs),
    /// Remembered entities: a restart of a whole three-node cluster bringing them back.
    Remembered(crate::bench_remembered::RememberedArgs),
    /// Codecs of commands, replies and events: size, encode and decode time per codec.
    Codecs(crate::bench_codecs::CodecsArgs),
    /// The shard coordinator alone: allocation, rebalance and re-homing time, state memory,
    /// from 10 to 1 000 regions and 1 000 to 100 000 shards.
    Coordinator(crate::bench_coordinator::CoordinatorArgs),
    /// Failover: a node of a real cluster SIGKILLed (or, with `--silent`, frozen with
    /// SIGSTOP) under load, timed phase by phase until its entities answer again from the
    /// survivors.
    Failover(crate::bench_failover::FailoverArgs),
    /// Reliable delivery against plain tells to the same entities (durable and in-memory),
    /// and the memory an unconfirmed message holds.
    Reliable(crate::bench_reliable::ReliableArgs),
}

/// Arguments of `shardik bench transport`.
#[derive(Args, Debug)]
pub struct TransportArgs {
    /// One-way messages per throughput measurement.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Payload bytes per message (at least 17: tag, sequence number, timestamp).
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Requests per second of the latency measurement (open loop).
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Seconds of the latency measurement.
    #[arg(long = "duration-s", default_value_t = 10)]
    duration_s: u64,
    /// Print one JSON object per measurement instead of a table.
    #[arg(long)]
    json: bool,
    /// Runtime of both processes: `multi` (two worker threads, as `shardik node`) or `current`
    /// (one thread: task hand-offs never cross threads).
    #[arg(long, default_value = "multi", value_parser = ["multi", "current"])]
    runtime: String,
}

/// Arguments of `shardik bench idle`.
#[derive(Args, Debug)]
pub struct IdleArgs {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Seconds measured once the cluster has formed and settled.
    #[arg(long = "duration-s", default_value_t = 30)]
    duration_s: u64,
    /// Seconds waited after formation before measuring (the joins' gossip dies down).
    #[arg(long = "settle-s", default_value_t = 5)]
    settle_s: u64,
    /// Print one JSON object per node instead of a table.
    #[arg(long)]
    json: bool,
}

/// What the peer process runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PeerMode {
    /// A shardik `Transport`; echoes go back over its own outbound connection.
    Shardik,
    /// Plain tokio TCP; echoes go back over the same socket they arrived on.
    Raw,
}

/// Arguments of the hidden `shardik bench-peer`.
#[derive(Args, Debug)]
pub struct PeerArgs {
    /// HOST:PORT to listen on (also the peer's cluster address in shardik mode).
    #[arg(long)]
    bind: Address,
    /// Shardik transport or raw TCP.
    #[arg(long, value_enum)]
    mode: PeerMode,
    /// One-way messages to count before reporting `DONE`.
    #[arg(long)]
    expect: u64,
}

/// Runs `shardik bench ...`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        BenchCmd::Transport(a) => {
            if a.size < HEADER {
                bail!("--size must be at least {HEADER} bytes (tag, sequence, timestamp)");
            }
            if a.rate == 0 || a.messages == 0 || a.duration_s == 0 {
                bail!("--messages, --rate and --duration-s must be positive");
            }
            set_runtime_kind(&a.runtime);
            runtime()?.block_on(transport_bench(a))
        }
        BenchCmd::Idle(a) => idle_bench(a),
        BenchCmd::Sharding(a) => crate::bench_sharding::run(a),
        BenchCmd::Persistence(a) => crate::bench_persistence::run(a),
        BenchCmd::Remembered(a) => crate::bench_remembered::run(a),
        BenchCmd::Codecs(a) => crate::bench_codecs::run(a),
        BenchCmd::Coordinator(a) => crate::bench_coordinator::run(a),
        BenchCmd::Failover(a) => crate::bench_failover::run(a),
        BenchCmd::Reliable(a) => crate::bench_reliable::run(a),
    }
}

fn payload(tag: u8, seq: u64, sent_ns: u64, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size);
    b.put_u8(tag);
    b.put_u64(seq);
    b.put_u64(sent_ns);
    b.put_bytes(0, size - HEADER);
    b.freeze()
}

/// Tag and send time of a payload, if it is long enough to carry them.
fn parse(p: &[u8]) -> Option<(u8, u64)> {
    if p.len() < HEADER {
        return None;
    }
    let sent = u64::from_be_bytes(p[9..17].try_into().ok()?);
    Some((p[0], sent))
}

// ---------------------------------------------------------------------------------------------
// The peer process.

/// Runs the hidden `shardik bench-peer`.
pub fn run_peer(args: PeerArgs) -> anyhow::Result<ExitCode> {
    exit_with_parent();
    runtime()?.block_on(async move {
        match args.mode {
            PeerMode::Shardik => shardik_peer(args).await,
            PeerMode::Raw => raw_peer(args).await,
        }
    })
}

/// Counts one-way messages and prints `DONE` once, when all arrived or they stopped coming.
struct Counter {
    expect: u64,
    count: u64,
    first: u64,
    last: u64,
    reported: bool,
}

impl Counter {
    fn new(expect: u64) -> Self {
        Counter {
            expect,
            count: 0,
            first: 0,
            last: 0,
            reported: false,
        }
    }

    fn hit(&mut self) {
        let now = unix_ns();
        if self.count == 0 {
            self.first = now;
        }
        self.count += 1;
        self.last = now;
        if self.count == self.expect {
            self.report();
        }
    }

    /// Called when nothing arrived for [`PEER_IDLE`]: report a partial run (messages lost).
    fn idle(&mut self) {
        if self.count > 0 {
            self.report();
        }
    }

    fn report(&mut self) {
        if !self.reported {
            self.reported = true;
            println!("DONE {} {} {}", self.count, self.first, self.last);
        }
    }
}

async fn shardik_peer(args: PeerArgs) -> anyhow::Result<ExitCode> {
    let bind = format!("{}:{}", args.bind.host, args.bind.port);
    let identity = LocalIdentity {
        cluster_name: CLUSTER.into(),
        address: UniqueAddress::new(args.bind.clone(), random_uid()),
    };
    let (mut transport, receivers) =
        Transport::start_accepting_everyone(&bind, identity, TransportConfig::default()).await?;
    // Held, not read: the accept loop stops once the membership receiver is gone.
    let _membership = receivers.membership;
    let mut user = receivers.user;
    println!("READY");
    let mut counter = Counter::new(args.expect);
    loop {
        let msg = match tokio::time::timeout(PEER_IDLE, user.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(_) => {
                counter.idle();
                continue;
            }
        };
        match msg.payload.first() {
            Some(&TAG_COUNT) => counter.hit(),
            Some(&TAG_ECHO) => {
                // Back over our own connection to the sender: connections are one-way.
                while !transport.send(&msg.from.address, Outgoing::User(msg.payload.clone())) {
                    tokio::task::yield_now().await;
                }
            }
            _ => {}
        }
    }
}

async fn raw_peer(args: PeerArgs) -> anyhow::Result<ExitCode> {
    let listener = TcpListener::bind(format!("{}:{}", args.bind.host, args.bind.port)).await?;
    println!("READY");
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let expect = args.expect;
        tokio::spawn(async move {
            // Said on stderr, which the measuring process passes through: a broken baseline
            // must not go unnoticed. A closed connection is the normal end.
            if let Err(e) = raw_peer_connection(stream, expect).await {
                eprintln!("bench-peer: connection ended: {e:#}");
            }
        });
    }
}

/// Reads frames with the wire codec; counts one-way messages and writes echoes back on the
/// same socket, all echoes of one read in one write (the same coalescing as the transport).
/// Echoes leave in the order their requests arrived, which the pipelined closed loop of
/// `bench sharding remote` relies on to match each answer to its request.
async fn raw_peer_connection(mut stream: TcpStream, expect: u64) -> anyhow::Result<()> {
    let codec = FrameCodec::default();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut out = BytesMut::with_capacity(64 * 1024);
    let mut counter = Counter::new(expect);
    loop {
        while let Some(frame) = codec.decode(&mut buf)? {
            if let Frame::User(p) = frame {
                match p.first() {
                    Some(&TAG_COUNT) => counter.hit(),
                    Some(&TAG_ECHO) => put_frame(&mut out, &p),
                    // An answer of the size the request names (a sharding ask's reply).
                    Some(&TAG_SIZED) => put_zero_frame(&mut out, sized_reply_len(&p)?),
                    _ => {}
                }
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        buf.reserve(8192);
        match tokio::time::timeout(PEER_IDLE, stream.read_buf(&mut buf)).await {
            Err(_) => counter.idle(),
            Ok(Ok(0)) => {
                counter.idle();
                return Ok(());
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The measuring side.

/// Starts a `shardik bench-peer` in `mode`, expecting `expect` one-way messages.
async fn spawn_peer(mode: PeerMode, expect: u64) -> anyhow::Result<Peer> {
    let mode = match mode {
        PeerMode::Shardik => "shardik",
        PeerMode::Raw => "raw",
    };
    let expect = expect.to_string();
    Peer::start("bench-peer", &["--mode", mode, "--expect", &expect]).await
}

/// One latency measurement.
struct Latency {
    sent: u64,
    /// Round-trip times.
    rtts: Latencies,
    /// Requests sent more than [`LATE`] after their scheduled time.
    late: u64,
    /// Worst lag of a send behind its schedule.
    max_lag: Duration,
}

/// Collects round trips until `expected` (set once sending ends) arrived, or none came for 2 s.
struct Collector {
    epoch: Instant,
    rtts: Latencies,
    expected: Arc<AtomicU64>,
    quiet_since: Option<Instant>,
}

impl Collector {
    fn new(epoch: Instant, expected: Arc<AtomicU64>) -> Self {
        Collector {
            epoch,
            rtts: Latencies::new(),
            expected,
            quiet_since: None,
        }
    }

    fn record(&mut self, p: &[u8]) {
        if let Some((TAG_ECHO, sent)) = parse(p) {
            let now = (Instant::now() - self.epoch).as_nanos() as u64;
            self.rtts.record(now.saturating_sub(sent));
        }
        self.quiet_since = None;
    }

    /// Whether to stop: everything arrived, or sending ended and answers stopped coming.
    fn finished(&mut self, timed_out: bool) -> bool {
        let expected = self.expected.load(Ordering::Acquire);
        if self.rtts.len() >= expected {
            return true;
        }
        if timed_out && expected != u64::MAX {
            let since = *self.quiet_since.get_or_insert_with(Instant::now);
            return since.elapsed() > Duration::from_secs(2);
        }
        false
    }
}

const POLL: Duration = Duration::from_millis(200);

async fn shardik_measurements(
    a: &TransportArgs,
    epoch: Instant,
) -> anyhow::Result<(Throughput, Latency)> {
    let mut peer = spawn_peer(PeerMode::Shardik, a.messages).await?;
    let port = free_port()?;
    let me = Address::new("127.0.0.1", port);
    let identity = LocalIdentity {
        cluster_name: CLUSTER.into(),
        address: UniqueAddress::new(me, random_uid()),
    };
    let (mut transport, receivers) = Transport::start_accepting_everyone(
        &format!("127.0.0.1:{port}"),
        identity,
        TransportConfig::default(),
    )
    .await?;
    let _membership = receivers.membership;
    let mut user = receivers.user;
    let to = peer.addr.clone();

    // Warm-up: one echo, so both connections are up and handshaken before anything is timed.
    transport.send(&to, Outgoing::User(payload(TAG_ECHO, 0, 0, a.size)));
    tokio::time::timeout(Duration::from_secs(10), user.recv())
        .await
        .context("no warm-up echo from the shardik peer")?;

    let first = unix_ns();
    let started = Instant::now();
    let mut retries = 0;
    for seq in 0..a.messages {
        let p = payload(TAG_COUNT, seq, 0, a.size);
        // A full lane queue refuses the message; retry it so that nothing is lost.
        while !transport.send(&to, Outgoing::User(p.clone())) {
            retries += 1;
            tokio::task::yield_now().await;
        }
    }
    let send_time = started.elapsed();
    let (received, _, last) = peer.done().await?;
    let throughput = Throughput {
        sent: a.messages,
        received,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries,
    };

    let expected = Arc::new(AtomicU64::new(u64::MAX));
    let mut collector = Collector::new(epoch, Arc::clone(&expected));
    let collect = tokio::spawn(async move {
        loop {
            let timed_out = match tokio::time::timeout(POLL, user.recv()).await {
                Ok(Some(m)) => {
                    collector.record(&m.payload);
                    false
                }
                Ok(None) => break,
                Err(_) => true,
            };
            if collector.finished(timed_out) {
                break;
            }
        }
        collector.rtts
    });
    let (rate, duration, size) = (a.rate, Duration::from_secs(a.duration_s), a.size);
    let (sent, late, max_lag) = tokio::task::spawn_blocking(move || {
        open_loop(rate, duration, epoch, |seq, sent_ns| {
            // Never refused at this rate; if it were, the request counts as lost.
            transport.send(&to, Outgoing::User(payload(TAG_ECHO, seq, sent_ns, size)));
        })
    })
    .await?;
    expected.store(sent, Ordering::Release);
    let rtts = collect.await?;
    peer.stop().await;
    Ok((
        throughput,
        Latency {
            sent,
            rtts,
            late,
            max_lag,
        },
    ))
}

async fn raw_measurements(
    a: &TransportArgs,
    epoch: Instant,
) -> anyhow::Result<(Throughput, Latency)> {
    let mut peer = spawn_peer(PeerMode::Raw, a.messages).await?;
    let target = format!("{}:{}", peer.addr.host, peer.addr.port);

    // One-way: frames go straight into a buffer, flushed with write_all at the transport's
    // coalescing bound. No queue in between: this is the machine's limit with this framing.
    let mut stream = TcpStream::connect(&target).await?;
    stream.set_nodelay(true)?;
    let first = unix_ns();
    let started = Instant::now();
    write_coalesced(&mut stream, a.messages, |buf, seq| {
        put_frame(buf, &payload(TAG_COUNT, seq, 0, a.size))
    })
    .await?;
    let send_time = started.elapsed();
    let (received, _, last) = peer.done().await?;
    let throughput = Throughput {
        sent: a.messages,
        received,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries: 0,
    };
    drop(stream);

    // Request/response: a second connection, requests and echoes both ways on the same socket.
    let stream = TcpStream::connect(&target).await?;
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let expected = Arc::new(AtomicU64::new(u64::MAX));
    let mut collector = Collector::new(epoch, Arc::clone(&expected));
    let collect = tokio::spawn(async move {
        let codec = FrameCodec::default();
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            while let Ok(Some(Frame::User(p))) = codec.decode(&mut buf) {
                collector.record(&p);
            }
            if collector.finished(false) {
                break;
            }
            buf.reserve(8192);
            match tokio::time::timeout(POLL, reader.read_buf(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => {}
                Err(_) => {
                    if collector.finished(true) {
                        break;
                    }
                }
            }
        }
        collector.rtts
    });
    let (rate, duration, size) = (a.rate, Duration::from_secs(a.duration_s), a.size);
    let handle = tokio::runtime::Handle::current();
    let (sent, late, max_lag) = tokio::task::spawn_blocking(move || {
        let mut frame = BytesMut::with_capacity(size + 5);
        open_loop(rate, duration, epoch, |seq, sent_ns| {
            frame.clear();
            put_frame(&mut frame, &payload(TAG_ECHO, seq, sent_ns, size));
            // Written directly from the sending thread: no queue, no writer task.
            let _ = handle.block_on(writer.write_all(&frame));
        })
    })
    .await?;
    expected.store(sent, Ordering::Release);
    let rtts = collect.await?;
    peer.stop().await;
    Ok((
        throughput,
        Latency {
            sent,
            rtts,
            late,
            max_lag,
        },
    ))
}

async fn transport_bench(a: TransportArgs) -> anyhow::Result<ExitCode> {
    let epoch = Instant::now();
    if !a.json {
        println!(
            "shardik bench transport: {} one-way messages of {} bytes; request/response at {}/s for {} s",
            a.messages, a.size, a.rate, a.duration_s
        );
        println!("measuring shardik transport ...");
    }
    let (st, sl) = shardik_measurements(&a, epoch).await?;
    if !a.json {
        println!("measuring raw tokio TCP baseline ...");
    }
    let (rt, rl) = raw_measurements(&a, epoch).await?;
    let ratio = st.per_second() / rt.per_second();
    if a.json {
        for (name, t) in [("shardik", &st), ("raw", &rt)] {
            let mut v = json!({
                "measurement": "throughput",
                "impl": name,
                "size": a.size,
                "sent": t.sent,
                "received": t.received,
                "lost": t.sent - t.received.min(t.sent),
                "elapsed_s": t.elapsed.as_secs_f64(),
                "send_s": t.send_time.as_secs_f64(),
                "msgs_per_s": t.per_second(),
                "mb_per_s": t.per_second() * a.size as f64 / 1e6,
                "send_retries": t.retries,
            });
            if name == "shardik" {
                v["ratio_to_raw"] = json!(ratio);
            }
            println!("{v}");
        }
        for (name, l) in [("shardik", &sl), ("raw", &rl)] {
            let mut v = json!({
                "measurement": "latency",
                "impl": name,
                "size": a.size,
                "rate": a.rate,
                "duration_s": a.duration_s,
                "sent": l.sent,
                "received": l.rtts.len(),
                "lost": l.sent - l.rtts.len().min(l.sent),
                "late": l.late,
                "max_send_lag_us": l.max_lag.as_secs_f64() * 1e6,
                "p50_us": l.rtts.quantile_us(0.5),
                "p99_us": l.rtts.quantile_us(0.99),
                "p999_us": l.rtts.quantile_us(0.999),
                "max_us": l.rtts.quantile_us(1.0),
            });
            if name == "shardik" {
                v["p50_ratio_to_raw"] = json!(l.rtts.quantile_us(0.5) / rl.rtts.quantile_us(0.5));
            }
            println!("{v}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!();
    println!(
        "{:<10} {:>14} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "one-way", "msgs/s", "MB/s", "elapsed", "received", "lost", "retries"
    );
    for (name, t) in [("shardik", &st), ("raw", &rt)] {
        println!(
            "{:<10} {:>14.0} {:>10.1} {:>9.3}s {:>9} {:>9} {:>9}",
            name,
            t.per_second(),
            t.per_second() * a.size as f64 / 1e6,
            t.elapsed.as_secs_f64(),
            t.received,
            t.sent - t.received.min(t.sent),
            t.retries
        );
    }
    println!("shardik / raw throughput: {ratio:.2}");
    println!();
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>6} {:>10}",
        "round trip",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "received",
        "lost",
        "late",
        "max lag µs"
    );
    for (name, l) in [("shardik", &sl), ("raw", &rl)] {
        println!(
            "{:<10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>7} {:>6} {:>10.0}",
            name,
            l.rtts.quantile_us(0.5),
            l.rtts.quantile_us(0.99),
            l.rtts.quantile_us(0.999),
            l.rtts.quantile_us(1.0),
            l.rtts.len(),
            l.sent - l.rtts.len().min(l.sent),
            l.late,
            l.max_lag.as_secs_f64() * 1e6
        );
    }
    println!(
        "shardik / raw p50: {:.2}   (late = sent more than {} ms after its slot)",
        sl.rtts.quantile_us(0.5) / rl.rtts.quantile_us(0.5),
        LATE.as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// Idle cost.

/// A node process, killed when dropped if still running.
struct IdleNode {
    child: Child,
    mgmt: u16,
}

impl Drop for IdleNode {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A GET of a node's management API answered with 200: its body.
fn http_get(port: u16, path: &str) -> Option<String> {
    crate::mgmt_client::get_ok(port, path)
}

/// Sum of `shardik_transport_bytes_total` samples with `direction="<dir>"` (all lanes).
fn transport_bytes(metrics: &str, dir: &str) -> u64 {
    let label = format!("direction=\"{dir}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("shardik_transport_bytes_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// utime + stime of a process, in clock ticks (`/proc/<pid>/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces; the fields after it are fixed.
    let rest = stat.rsplit_once(')').context("bad /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state), so field 14 is index 11.
    Ok(f.get(11).context("no utime")?.parse::<u64>()?
        + f.get(12).context("no stime")?.parse::<u64>()?)
}

fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn up_members(port: u16) -> usize {
    http_get(port, "/cluster/members")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v["members"]
                .as_array()
                .map(|ms| ms.iter().filter(|m| m["status"] == "Up").count())
        })
        .unwrap_or(0)
}

struct Sample {
    ticks: u64,
    out: u64,
    inb: u64,
}

fn sample(n: &IdleNode) -> anyhow::Result<Sample> {
    let m = http_get(n.mgmt, "/metrics").context("cannot read a node's /metrics")?;
    Ok(Sample {
        ticks: cpu_ticks(n.child.id())?,
        out: transport_bytes(&m, "out"),
        inb: transport_bytes(&m, "in"),
    })
}

fn idle_bench(a: IdleArgs) -> anyhow::Result<ExitCode> {
    if a.nodes < 2 {
        bail!("--nodes must be at least 2");
    }
    let exe = std::env::current_exe().context("cannot find the shardik executable")?;
    let ports: Vec<u16> = (0..a.nodes)
        .map(|_| free_port())
        .collect::<Result<_, _>>()?;
    let mgmt: Vec<u16> = (0..a.nodes)
        .map(|_| free_port())
        .collect::<Result<_, _>>()?;
    let mut nodes = Vec::new();
    for (p, m) in ports.iter().zip(&mgmt) {
        // Default settings: the point is the cost of a node as it would be deployed.
        let child = Command::new(&exe)
            .arg("node")
            .arg("--bind")
            .arg(format!("127.0.0.1:{p}"))
            .arg("--management")
            .arg(format!("127.0.0.1:{m}"))
            .arg("--seed")
            .arg(format!("127.0.0.1:{}", ports[0]))
            .arg("--seed")
            .arg(format!("127.0.0.1:{}", ports[1]))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start a node process")?;
        nodes.push(IdleNode { child, mgmt: *m });
    }
    let began = Instant::now();
    while up_members(mgmt[0]) < a.nodes {
        if began.elapsed() > Duration::from_secs(60) {
            bail!("the cluster did not form within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let formed = began.elapsed();
    if !a.json {
        println!(
            "shardik bench idle: {} nodes formed in {:.1}s; settling {} s, measuring {} s",
            a.nodes,
            formed.as_secs_f64(),
            a.settle_s,
            a.duration_s
        );
    }
    std::thread::sleep(Duration::from_secs(a.settle_s));
    let before: Vec<Sample> = nodes.iter().map(sample).collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(a.duration_s));
    let after: Vec<Sample> = nodes.iter().map(sample).collect::<Result<_, _>>()?;
    let secs = t0.elapsed().as_secs_f64();
    let hz = clock_ticks_per_second() as f64;

    if !a.json {
        println!(
            "\n{:<6} {:<16} {:>10} {:>12} {:>12}",
            "node", "address", "CPU %", "out B/s", "in B/s"
        );
    }
    let (mut cpu_sum, mut out_sum) = (0.0, 0.0);
    for (i, (b, e)) in before.iter().zip(&after).enumerate() {
        let cpu = (e.ticks - b.ticks) as f64 / hz / secs * 100.0;
        let out = (e.out - b.out) as f64 / secs;
        let inb = (e.inb - b.inb) as f64 / secs;
        cpu_sum += cpu;
        out_sum += out;
        if a.json {
            println!(
                "{}",
                json!({
                    "measurement": "idle",
                    "node": i,
                    "address": format!("127.0.0.1:{}", ports[i]),
                    "nodes": a.nodes,
                    "duration_s": secs,
                    "cpu_percent_of_one_core": cpu,
                    "bytes_out_per_s": out,
                    "bytes_in_per_s": inb,
                    "clock_ticks_per_s": hz,
                })
            );
        } else {
            println!(
                "{:<6} 127.0.0.1:{:<6} {:>10.3} {:>12.1} {:>12.1}",
                i, ports[i], cpu, out, inb
            );
        }
    }
    if !a.json {
        println!(
            "mean   {:<16} {:>10.3} {:>12.1}   (CPU % of one core; {} ticks/s resolution)",
            "",
            cpu_sum / a.nodes as f64,
            out_sum / a.nodes as f64,
            hz
        );
    }
    // Graceful leave, newest first, as an operator would.
    for n in nodes.iter_mut().rev() {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(n.child.id().to_string())
            .status();
    }
    for n in nodes.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(n.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::bench_raw::{Exchange, closed_loop, open_loop_requests};

    /// A raw peer connection handler on a loopback listener in this process.
    async fn raw_peer_here() -> Address {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                stream.set_nodelay(true).unwrap();
                tokio::spawn(raw_peer_connection(stream, 0));
            }
        });
        Address::new("127.0.0.1", port)
    }

    /// Every raw request gets an answer of the size it named (the closed loops check each
    /// answer's size and fail otherwise), with one request in flight and with many pipelined.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_raw_peer_answers_each_request_in_order_with_the_size_it_asks_for() {
        let peer = raw_peer_here().await;
        let exchanges: Arc<[Exchange]> = [(38, 29), (40, 30), (5, 0), (200, 7)]
            .into_iter()
            .map(|(request, answer)| Exchange { request, answer })
            .collect();
        for slots in [1, 8] {
            let c = closed_loop(&peer, slots, Duration::from_millis(200), exchanges.clone())
                .await
                .unwrap();
            assert_eq!(c.slots, slots);
            assert!(c.completed > 10, "{slots} slots: {} answers", c.completed);
            assert_eq!(c.latencies.len(), c.completed);
            assert_eq!(c.failed, 0);
        }
        let o = open_loop_requests(&peer, 1000, Duration::from_secs(1), exchanges)
            .await
            .unwrap();
        assert_eq!(o.sent, 1000);
        assert_eq!(o.failed, 0);
        assert_eq!(o.from_send.len(), 1000);
    }

    /// A request for an answer larger than a frame ends its connection with an error instead
    /// of allocating it.
    #[tokio::test]
    async fn a_sized_request_beyond_the_frame_limit_closes_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            raw_peer_connection(stream, 0).await
        });
        let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut buf = BytesMut::new();
        crate::bench_support::put_sized_request(&mut buf, 5, u32::MAX as usize);
        client.write_all(&buf).await.unwrap();
        let err = server.await.unwrap().unwrap_err().to_string();
        assert!(err.contains("more than a frame"), "{err}");
    }
}
