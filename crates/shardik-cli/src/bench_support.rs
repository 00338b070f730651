//! What `shardik bench` and `shardik bench sharding` share: the runtime choice of the
//! benchmark processes, peer processes and their `READY`/`DONE` lines, the raw framing the TCP
//! baselines write (the transport's: length, kind byte, payload) and the tags the raw peer
//! understands, the open-loop sender, throughput figures and latency percentiles.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::{BufMut, BytesMut};
use hdrhistogram::Histogram;
use serde_json::json;
use shardik_core::membership::Address;
use tokio::io::AsyncBufReadExt;

/// First payload byte of a one-way message the raw peer counts.
pub(crate) const TAG_COUNT: u8 = 0;
/// First payload byte of a request the peer sends back unchanged.
pub(crate) const TAG_ECHO: u8 = 1;
/// First payload byte of a request the raw peer answers with a payload of the length that
/// follows (u32 BE), zero-filled: a request/answer pair whose two sizes differ, as an ask's
/// envelope and its reply do.
pub(crate) const TAG_SIZED: u8 = 2;
/// Bytes a [`TAG_SIZED`] request needs at least: the tag and the answer's length.
pub(crate) const SIZED_HEADER: usize = 5;
/// Frame kind byte of a user frame (see `shardik_wire::frame`).
const KIND_USER: u8 = 4;
/// Same bound on coalesced bytes as the transport's writer, so the baselines batch alike.
pub(crate) const COALESCE_BYTES: usize = 256 * 1024;

/// Writes `messages` frames, the `i`-th put into the buffer by `put(buf, i)`, coalesced into
/// writes of about [`COALESCE_BYTES`] (the transport's bound): a raw sender's best case.
pub(crate) async fn write_coalesced<W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    messages: u64,
    mut put: impl FnMut(&mut BytesMut, u64),
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut buf = BytesMut::with_capacity(2 * COALESCE_BYTES);
    for i in 0..messages {
        put(&mut buf, i);
        if buf.len() >= COALESCE_BYTES {
            stream.write_all(&buf).await?;
            buf.clear();
        }
    }
    stream.write_all(&buf).await
}

/// Appends one user frame carrying `payload` as the wire codec would: length, kind, payload.
pub(crate) fn put_frame(buf: &mut BytesMut, payload: &[u8]) {
    buf.put_u32((payload.len() + 1) as u32);
    buf.put_u8(KIND_USER);
    buf.put_slice(payload);
}

/// Appends one user frame of a `len`-byte zero payload.
pub(crate) fn put_zero_frame(buf: &mut BytesMut, len: usize) {
    buf.put_u32((len + 1) as u32);
    buf.put_u8(KIND_USER);
    buf.put_bytes(0, len);
}

/// Appends one user frame of `len` payload bytes: `tag`, then zeros.
pub(crate) fn put_tagged_frame(buf: &mut BytesMut, tag: u8, len: usize) {
    buf.put_u32((len + 1) as u32);
    buf.put_u8(KIND_USER);
    buf.put_u8(tag);
    buf.put_bytes(0, len.saturating_sub(1));
}

/// Appends one user frame of `len` payload bytes asking the raw peer for an answer of
/// `answer` payload bytes ([`TAG_SIZED`]). `len` is at least [`SIZED_HEADER`].
pub(crate) fn put_sized_request(buf: &mut BytesMut, len: usize, answer: usize) {
    debug_assert!(len >= SIZED_HEADER);
    buf.put_u32((len + 1) as u32);
    buf.put_u8(KIND_USER);
    buf.put_u8(TAG_SIZED);
    buf.put_u32(answer as u32);
    buf.put_bytes(0, len.saturating_sub(SIZED_HEADER));
}

/// The answer length a [`TAG_SIZED`] request asks for; an error if the request is too short
/// or asks for more than a frame may carry (the peer must not allocate what a request says).
pub(crate) fn sized_reply_len(payload: &[u8]) -> anyhow::Result<usize> {
    let Some(len) = payload.get(1..SIZED_HEADER) else {
        bail!(
            "sized request of {} bytes, expected at least {SIZED_HEADER}",
            payload.len()
        );
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    // The kind byte counts towards the frame's length.
    let max = shardik_wire::DEFAULT_MAX_FRAME_SIZE - 1;
    if len > max {
        bail!("sized request asks for a {len}-byte answer, more than a frame's {max}");
    }
    Ok(len)
}

/// Which tokio runtime the benchmark processes use; the peer inherits it through the
/// `SHARDIK_BENCH_RUNTIME` environment variable of its process.
static RUNTIME_KIND: std::sync::OnceLock<String> = std::sync::OnceLock::new();
const RUNTIME_ENV: &str = "SHARDIK_BENCH_RUNTIME";

/// Chooses the runtime of this process and of the peers it starts (`multi` or `current`).
pub(crate) fn set_runtime_kind(kind: &str) {
    let _ = RUNTIME_KIND.set(kind.to_string());
}

/// The runtime chosen with [`set_runtime_kind`] (or inherited by a peer), `multi` by default.
fn runtime_kind() -> String {
    RUNTIME_KIND
        .get()
        .cloned()
        .or_else(|| std::env::var(RUNTIME_ENV).ok())
        .unwrap_or_else(|| "multi".to_string())
}

/// By default two workers: the shape `shardik node` had on a two-core machine when these
/// benchmarks' recorded numbers were taken, kept so that they stay comparable (a node now
/// starts one worker per core, `runtime.worker-threads`; `bench sharding cores` measures each
/// worker count). `--runtime current` runs everything on one thread.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let kind = runtime_kind();
    let mut builder = if kind == "current" {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    };
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The one-minute load average (from `/proc/loadavg`), recorded with each result: the machine
/// is shared, and a number means little without the load it was measured under.
pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

pub(crate) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(crate::ports::free_port()?)
}

/// Exits this (peer) process when its parent goes away, even if the parent was killed: the
/// parent holds our stdin, so reading it ends then.
pub(crate) fn exit_with_parent() {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        std::process::exit(0);
    });
}

/// A running peer process, killed when dropped.
pub(crate) struct Peer {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    pub(crate) addr: Address,
}

impl Peer {
    /// Starts `shardik <subcommand> --bind 127.0.0.1:<free port> <args>` with this process's
    /// runtime choice, and waits for its `READY` line.
    pub(crate) async fn start(subcommand: &str, args: &[&str]) -> anyhow::Result<Peer> {
        let port = free_port()?;
        let exe = std::env::current_exe().context("cannot find the shardik executable")?;
        let mut child = tokio::process::Command::new(exe)
            .env(RUNTIME_ENV, runtime_kind())
            .arg(subcommand)
            .arg("--bind")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the peer process")?;
        let stdout = child.stdout.take().context("no peer stdout")?;
        let mut peer = Peer {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
            addr: Address::new("127.0.0.1", port),
        };
        let ready = peer.line(Duration::from_secs(30)).await?;
        if ready != "READY" {
            bail!("peer said {ready:?} instead of READY");
        }
        Ok(peer)
    }

    async fn line(&mut self, limit: Duration) -> anyhow::Result<String> {
        match tokio::time::timeout(limit, self.lines.next_line()).await {
            Err(_) => bail!("the peer said nothing for {limit:?}"),
            Ok(Ok(Some(l))) => Ok(l),
            Ok(Ok(None)) => bail!("the peer exited"),
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// Waits for the peer's `DONE count first last` line.
    pub(crate) async fn done(&mut self) -> anyhow::Result<(u64, u64, u64)> {
        let line = self.line(Duration::from_secs(120)).await?;
        let f: Vec<u64> = line
            .strip_prefix("DONE ")
            .context("expected DONE")?
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("bad DONE line {line:?}"))?;
        match f[..] {
            [count, first, last] => Ok((count, first, last)),
            _ => bail!("bad DONE line {line:?}"),
        }
    }

    /// The peer's process id (`None` once it has exited).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub(crate) async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// One throughput measurement.
pub(crate) struct Throughput {
    pub(crate) sent: u64,
    pub(crate) received: u64,
    /// From the first send to the last message counted by the receiver.
    pub(crate) elapsed: Duration,
    /// How long the sender took to hand every message over (queue or socket).
    pub(crate) send_time: Duration,
    /// Times a send was refused because a bounded queue was full (then retried).
    pub(crate) retries: u64,
}

impl Throughput {
    pub(crate) fn per_second(&self) -> f64 {
        self.received as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// One closed-loop measurement: a fixed number of requests in flight, each slot sending its
/// next request as soon as its previous one was answered.
pub(crate) struct ClosedLoop {
    /// Requests in flight (one task each).
    pub(crate) slots: usize,
    /// Requests answered (the latencies recorded).
    pub(crate) completed: u64,
    /// Requests that failed (an error or no answer in time); not in the latencies.
    pub(crate) failed: u64,
    /// From the first request to the last answer.
    pub(crate) elapsed: Duration,
    /// From each request to its answer.
    pub(crate) latencies: Latencies,
}

impl ClosedLoop {
    /// Answered requests per second.
    pub(crate) fn per_second(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Requests per second and the latency percentiles, as a JSON object.
    pub(crate) fn summary(&self) -> serde_json::Value {
        json!({
            "in_flight": self.slots,
            "completed": self.completed,
            "failed": self.failed,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "requests_per_s": self.per_second(),
            "latency": self.latencies.summary(),
        })
    }
}

/// The entity (index among `entities`) that slot `slot` of `slots` addresses with its `k`-th
/// request: the slots interleave, so together they go round-robin over the entities. Sharding
/// and its raw baseline use the same sequence, so their frames have the same sizes.
pub(crate) fn entity_of(slot: usize, k: u64, slots: usize, entities: usize) -> usize {
    ((slot as u64 + k * slots as u64) % entities as u64) as usize
}

/// A request sent this long after its slot means the open-loop scheduler fell behind.
pub(crate) const LATE: Duration = Duration::from_millis(1);

/// Sends `rate` requests per second for `duration` on their own thread, in an open loop: each
/// request goes at its slot whether or not earlier answers came back. `send` gets the sequence
/// number and the send time (ns since `epoch`). `thread::sleep` is used because tokio's timer
/// has a 1 ms resolution, ten times the 100 µs period at 10 000/s.
pub(crate) fn open_loop(
    rate: u64,
    duration: Duration,
    epoch: Instant,
    mut send: impl FnMut(u64, u64),
) -> (u64, u64, Duration) {
    let total = rate * duration.as_secs();
    let period_ns = 1_000_000_000 / rate;
    let start = Instant::now() + Duration::from_millis(10);
    let (mut late, mut max_lag) = (0, Duration::ZERO);
    let mut seq = 0;
    while seq < total {
        let due = start + Duration::from_nanos(period_ns * seq);
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
            continue;
        }
        let lag = now - due;
        if lag > LATE {
            late += 1;
        }
        max_lag = max_lag.max(lag);
        send(seq, (Instant::now() - epoch).as_nanos() as u64);
        seq += 1;
    }
    (total, late, max_lag)
}

/// Latency samples, recorded in nanoseconds into an HDR histogram, reported in microseconds.
/// Fixed memory however many samples a run takes. With 3 significant digits a percentile is
/// the upper end of its sample's bucket, at most 0.1 % above the sample (exact below 2 µs).
pub(crate) struct Latencies(Histogram<u64>);

impl Latencies {
    pub(crate) fn new() -> Self {
        // Auto-resizing, so any nanosecond value fits; 3 significant digits is always valid.
        Latencies(Histogram::new(3).expect("3 significant digits is a valid histogram precision"))
    }

    /// Records one sample in nanoseconds.
    pub(crate) fn record(&mut self, ns: u64) {
        // The histogram grows its range to fit (auto-resize); `saturating_record` alone would
        // clamp to the current range instead. A value beyond any range is kept as the maximum.
        if self.0.record(ns).is_err() {
            self.0.saturating_record(ns);
        }
    }

    /// Number of samples.
    pub(crate) fn len(&self) -> u64 {
        self.0.len()
    }

    /// Adds the samples of `other` (each concurrent writer keeps its own, merged at the end).
    pub(crate) fn merge(&mut self, other: &Latencies) -> anyhow::Result<()> {
        self.0
            .add(&other.0)
            .map_err(|e| anyhow::anyhow!("cannot merge latency samples: {e:?}"))
    }

    /// The `q` quantile (0..=1; 1 is the maximum) in microseconds: the nearest-rank sample
    /// (the smallest one that at least `q` of the samples do not exceed), as the upper end of
    /// its bucket; NaN without samples.
    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    /// Sample count and the usual percentiles in microseconds, as a JSON object.
    pub(crate) fn summary(&self) -> serde_json::Value {
        json!({
            "samples": self.len(),
            "p50_us": self.quantile_us(0.5),
            "p99_us": self.quantile_us(0.99),
            "p999_us": self.quantile_us(0.999),
            "max_us": self.quantile_us(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_wire::{Frame, FrameCodec};

    fn decode_all(mut buf: BytesMut) -> Vec<bytes::Bytes> {
        let codec = FrameCodec::default();
        let mut out = Vec::new();
        while let Some(f) = codec.decode(&mut buf).expect("a valid frame") {
            match f {
                Frame::User(p) => out.push(p),
                other => panic!("not a user frame: {other:?}"),
            }
        }
        assert!(buf.is_empty(), "bytes left over");
        out
    }

    /// Every frame helper writes what the wire codec reads back as a user frame of exactly
    /// the payload length asked for: the baselines' bytes on the wire are the sizes we say.
    #[test]
    fn raw_frames_decode_with_the_wire_codec_at_their_stated_sizes() {
        let mut buf = BytesMut::new();
        put_frame(&mut buf, b"hello");
        put_zero_frame(&mut buf, 24);
        put_tagged_frame(&mut buf, TAG_COUNT, 26);
        put_sized_request(&mut buf, 37, 24);
        assert_eq!(buf.len(), 4 * 5 + 5 + 24 + 26 + 37);
        let frames = decode_all(buf);
        assert_eq!(frames[0].as_ref(), b"hello");
        assert_eq!(frames[1].as_ref(), &[0u8; 24][..]);
        assert_eq!(frames[2].len(), 26);
        assert_eq!(frames[2][0], TAG_COUNT);
        assert_eq!(frames[3].len(), 37);
        assert_eq!(frames[3][0], TAG_SIZED);
        assert_eq!(sized_reply_len(&frames[3]).unwrap(), 24);
    }

    #[test]
    fn slots_together_go_round_robin_over_the_entities() {
        let (slots, entities) = (4, 10);
        let mut seen = vec![0; entities];
        for k in 0..5 {
            for slot in 0..slots {
                seen[entity_of(slot, k, slots, entities)] += 1;
            }
        }
        // 20 requests over 10 entities: two each.
        assert_eq!(seen, vec![2; entities]);
        assert_eq!(entity_of(0, 0, 1, 3), 0);
        assert_eq!(entity_of(0, 4, 1, 3), 1);
    }

    #[test]
    fn closed_loop_rate_is_completed_over_elapsed() {
        let c = ClosedLoop {
            slots: 1,
            completed: 500,
            failed: 0,
            elapsed: Duration::from_millis(250),
            latencies: Latencies::new(),
        };
        assert_eq!(c.per_second(), 2000.0);
        assert_eq!(c.summary()["requests_per_s"], 2000.0);
    }

    #[test]
    fn a_sized_request_that_is_short_or_asks_too_much_is_refused() {
        let err = sized_reply_len(&[TAG_SIZED, 0, 0]).unwrap_err().to_string();
        assert!(err.contains("at least 5"), "{err}");
        let mut buf = BytesMut::new();
        put_sized_request(&mut buf, 5, u32::MAX as usize);
        let frames = decode_all(buf);
        let err = sized_reply_len(&frames[0]).unwrap_err().to_string();
        assert!(err.contains("more than a frame"), "{err}");
    }

    fn latencies(ns: impl IntoIterator<Item = u64>) -> Latencies {
        let mut l = Latencies::new();
        for v in ns {
            l.record(v);
        }
        l
    }

    /// Nearest-rank percentiles of 1..=1000 µs, within the histogram's 0.1 % precision.
    #[test]
    fn percentiles_are_nearest_rank_within_a_tenth_of_a_percent() {
        let l = latencies((1..=1000).map(|us| us * 1000));
        assert_eq!(l.len(), 1000);
        for (q, want_us) in [(0.5, 500.0), (0.99, 990.0), (0.999, 999.0), (1.0, 1000.0)] {
            let got = l.quantile_us(q);
            assert!(
                got >= want_us && got <= want_us * 1.001,
                "q {q}: {got} µs, expected {want_us} µs"
            );
        }
        // Below 2 048 ns (the histogram's sub-bucket count) every nanosecond has its own
        // bucket: exact.
        let l = latencies([1_000, 1_500, 2_000]);
        assert_eq!(l.quantile_us(0.0), 1.0);
        assert_eq!(l.quantile_us(0.5), 1.5);
        assert_eq!(l.quantile_us(1.0), 2.0);
    }

    #[test]
    fn no_samples_give_nan_and_a_zero_count() {
        let l = Latencies::new();
        assert!(l.quantile_us(0.5).is_nan());
        let s = l.summary();
        assert_eq!(s["samples"], 0);
        assert!(s["p50_us"].is_null(), "NaN is written as null");
    }

    /// Ten-second outliers (ask timeouts) fit without losing the small values' precision.
    #[test]
    fn outliers_do_not_cost_precision_of_the_rest() {
        let mut l = latencies((0..999).map(|_| 50_000));
        l.record(10_000_000_000);
        let p50 = l.quantile_us(0.5);
        assert!((50.0..=50.05).contains(&p50), "{p50}");
        let max = l.quantile_us(1.0);
        assert!((10_000_000.0..=10_010_000.0).contains(&max), "{max}");
    }
}
