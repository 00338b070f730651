//! The raw TCP baselines of `bench sharding remote`: the operations it measures through
//! sharding, done with plain tokio over one `TcpStream` to the raw `bench-peer` (another
//! process on the same runtime kind), in the transport's framing and with frames of the sizes
//! sharding puts on the wire ([`crate::bench_frames`]). No queue, no routing, no codec: what
//! the machine does with the same bytes.
//!
//! - [`one_way`]: frames of the tells' sizes written back to back, coalesced up to the
//!   transport's bound per write, counted by the peer.
//! - [`closed_loop`]: requests of the asks' sizes, each answered by the peer with a frame of
//!   the reply's size. One slot: a ping-pong in one task (write, read the answer, repeat).
//!   More slots: one task per slot on one connection, a writer task that coalesces what the
//!   slots queued into one write, and a reader task that hands each answer to the oldest slot
//!   waiting (the peer answers in order).
//! - [`open_loop_requests`]: the same requests at a fixed rate from the open-loop thread,
//!   through that writer and reader, one task per request awaiting its answer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::BytesMut;
use shardik_core::membership::Address;
use shardik_wire::{Frame, FrameCodec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::bench_support::{
    ClosedLoop, Latencies, Peer, SIZED_HEADER, TAG_COUNT, Throughput, entity_of, open_loop,
    put_sized_request, put_tagged_frame, unix_ns, write_coalesced,
};

/// Longest wait for one answer; as the sharding side's ask timeout.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// A request of `request` payload bytes answered with `answer` payload bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exchange {
    pub(crate) request: usize,
    pub(crate) answer: usize,
}

async fn connect(to: &Address) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect(format!("{}:{}", to.host, to.port))
        .await
        .with_context(|| format!("cannot connect to the raw peer on {to}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes `messages` one-way frames to the raw `peer` (started expecting as many), message
/// `i` with a payload of `sizes[i % sizes.len()]` bytes; timed from the first write to the
/// peer counting the last frame, as the sharding tells are.
pub(crate) async fn one_way(
    peer: &mut Peer,
    sizes: &[usize],
    messages: u64,
) -> anyhow::Result<Throughput> {
    if sizes.is_empty() {
        bail!("no frame sizes for the raw one-way baseline");
    }
    let mut stream = connect(&peer.addr).await?;
    let n = sizes.len() as u64;
    let first = unix_ns();
    let started = Instant::now();
    write_coalesced(&mut stream, messages, |buf, i| {
        put_tagged_frame(buf, TAG_COUNT, sizes[(i % n) as usize])
    })
    .await?;
    let send_time = started.elapsed();
    let (received, _, last) = peer.done().await?;
    Ok(Throughput {
        sent: messages,
        received,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries: 0,
    })
}

/// Runs `slots` requests in flight for `duration` against the raw peer at `to`: slot `s`
/// sends its `k`-th request as `exchanges[entity_of(s, k, ..)]`, waits for the answer and
/// records the time between.
pub(crate) async fn closed_loop(
    to: &Address,
    slots: usize,
    duration: Duration,
    exchanges: Arc<[Exchange]>,
) -> anyhow::Result<ClosedLoop> {
    if slots == 0 || exchanges.is_empty() {
        bail!("a closed loop needs at least one slot and one exchange");
    }
    if let Some(e) = exchanges.iter().find(|e| e.request < SIZED_HEADER) {
        bail!(
            "a raw request of {} bytes cannot carry its {SIZED_HEADER}-byte header",
            e.request
        );
    }
    let stream = connect(to).await?;
    if slots == 1 {
        ping_pong(stream, duration, &exchanges).await
    } else {
        pipelined(stream, slots, duration, exchanges).await
    }
}

/// Reads from `reader` into `buf` until one whole frame is there; its payload length.
async fn read_answer(
    reader: &mut (impl AsyncReadExt + Unpin),
    codec: &FrameCodec,
    buf: &mut BytesMut,
) -> anyhow::Result<usize> {
    loop {
        if let Some(frame) = codec.decode(buf)? {
            return match frame {
                Frame::User(p) => Ok(p.len()),
                other => bail!("the raw peer answered with a {:?} frame", other.kind()),
            };
        }
        buf.reserve(8192);
        let n = tokio::time::timeout(ANSWER_LIMIT, reader.read_buf(buf))
            .await
            .context("no answer from the raw peer")??;
        if n == 0 {
            bail!("the raw peer closed the connection");
        }
    }
}

/// One request at a time, in this task: the machine's round trip with these frames.
async fn ping_pong(
    mut stream: TcpStream,
    duration: Duration,
    exchanges: &[Exchange],
) -> anyhow::Result<ClosedLoop> {
    let codec = FrameCodec::default();
    let mut out = BytesMut::with_capacity(1024);
    let mut inb = BytesMut::with_capacity(64 * 1024);
    let mut latencies = Latencies::new();
    // Warm-up round trip (the peer's task and buffers), not timed.
    put_sized_request(&mut out, exchanges[0].request, exchanges[0].answer);
    stream.write_all(&out).await?;
    read_answer(&mut stream, &codec, &mut inb).await?;

    let started = Instant::now();
    let deadline = started + duration;
    let mut k = 0;
    while Instant::now() < deadline {
        let e = exchanges[entity_of(0, k, 1, exchanges.len())];
        out.clear();
        put_sized_request(&mut out, e.request, e.answer);
        let t = Instant::now();
        stream.write_all(&out).await?;
        let got = read_answer(&mut stream, &codec, &mut inb).await?;
        latencies.record(t.elapsed().as_nanos() as u64);
        if got != e.answer {
            bail!("the raw peer answered {got} bytes, expected {}", e.answer);
        }
        k += 1;
    }
    Ok(ClosedLoop {
        slots: 1,
        completed: latencies.len(),
        failed: 0,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// A request queued for the writer: its exchange and where its answer goes.
struct Queued {
    exchange: Exchange,
    answered: oneshot::Sender<usize>,
}

/// Requests waiting for their answers, oldest first (the order they were written).
type Waiting = Arc<Mutex<VecDeque<oneshot::Sender<usize>>>>;

/// One connection carrying many requests at once: a writer task that writes whatever was
/// queued since its last write in one write, and a reader task that hands each answer to the
/// oldest request waiting (the peer answers in order).
struct Pipeline {
    queue: mpsc::Sender<Queued>,
    write_task: JoinHandle<anyhow::Result<()>>,
    read_task: JoinHandle<anyhow::Result<()>>,
}

impl Pipeline {
    /// Starts the tasks on `stream`; at most `depth` requests wait for the writer.
    fn start(stream: TcpStream, depth: usize) -> Pipeline {
        let (reader, mut writer) = stream.into_split();
        let waiting: Waiting = Arc::default();
        let (queue, mut rx) = mpsc::channel::<Queued>(depth);
        let writer_waiting = Arc::clone(&waiting);
        let write_task = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(depth);
            let mut out = BytesMut::with_capacity(64 * 1024);
            while rx.recv_many(&mut batch, depth).await > 0 {
                {
                    // Waiting in the order written: the peer answers in that order.
                    let mut w = writer_waiting.lock().unwrap_or_else(|e| e.into_inner());
                    for q in batch.drain(..) {
                        put_sized_request(&mut out, q.exchange.request, q.exchange.answer);
                        w.push_back(q.answered);
                    }
                }
                writer.write_all(&out).await?;
                out.clear();
            }
            anyhow::Ok(())
        });
        let read_task = tokio::spawn(read_answers(reader, waiting));
        Pipeline {
            queue,
            write_task,
            read_task,
        }
    }

    /// Stops both tasks once every request has its answer; what the writer failed with.
    async fn finish(self) -> anyhow::Result<()> {
        drop(self.queue);
        self.read_task.abort();
        // Nothing is queued any more, so the writer ends with its channel.
        self.write_task.await?
    }
}

/// Waits (at most [`ANSWER_LIMIT`]) for the answer to a request of `exchange`; an error if it
/// does not come or has the wrong size.
async fn answer_of(exchange: Exchange, answer: oneshot::Receiver<usize>) -> anyhow::Result<()> {
    let got = tokio::time::timeout(ANSWER_LIMIT, answer)
        .await
        .context("no answer from the raw peer")?
        .context("the raw reader stopped")?;
    if got != exchange.answer {
        bail!(
            "the raw peer answered {got} bytes, expected {}",
            exchange.answer
        );
    }
    Ok(())
}

async fn pipelined(
    stream: TcpStream,
    slots: usize,
    duration: Duration,
    exchanges: Arc<[Exchange]>,
) -> anyhow::Result<ClosedLoop> {
    let pipeline = Pipeline::start(stream, slots);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(slots);
    for slot in 0..slots {
        let (queue, exchanges) = (pipeline.queue.clone(), Arc::clone(&exchanges));
        tasks.push(tokio::spawn(async move {
            let mut latencies = Latencies::new();
            let mut k = 0;
            while Instant::now() < deadline {
                let exchange = exchanges[entity_of(slot, k, slots, exchanges.len())];
                let (answered, answer) = oneshot::channel();
                let t = Instant::now();
                queue
                    .send(Queued { exchange, answered })
                    .await
                    .context("the raw writer stopped")?;
                answer_of(exchange, answer).await?;
                latencies.record(t.elapsed().as_nanos() as u64);
                k += 1;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Latencies::new();
    let mut first_error = None;
    for t in tasks {
        match t.await? {
            Ok(l) => latencies.merge(&l)?,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let elapsed = started.elapsed();
    let written = pipeline.finish().await;
    if let Some(e) = first_error {
        return Err(e);
    }
    written?;
    Ok(ClosedLoop {
        slots,
        completed: latencies.len(),
        failed: 0,
        elapsed,
        latencies,
    })
}

/// A raw open-loop measurement.
pub(crate) struct RawOpenLoop {
    pub(crate) sent: u64,
    /// Requests without a (correct) answer within [`ANSWER_LIMIT`].
    pub(crate) failed: u64,
    /// Requests sent more than [`crate::bench_support::LATE`] after their slot.
    pub(crate) late: u64,
    /// From the open-loop send (before the request is queued) to its answer.
    pub(crate) from_send: Latencies,
}

/// Sends requests at `rate` per second for `duration` to the raw peer at `to` on one
/// connection, in an open loop from its own thread as the sharding open loop does: request
/// `seq` is `exchanges[seq % n]`, and one task per request awaits its answer.
pub(crate) async fn open_loop_requests(
    to: &Address,
    rate: u64,
    duration: Duration,
    exchanges: Arc<[Exchange]>,
) -> anyhow::Result<RawOpenLoop> {
    if exchanges.iter().any(|e| e.request < SIZED_HEADER) || exchanges.is_empty() {
        bail!("raw requests need at least one exchange of {SIZED_HEADER} bytes or more");
    }
    // Deep enough that the writer never holds the sender up at this rate.
    let pipeline = Pipeline::start(connect(to).await?, 1024);
    let queue = pipeline.queue.clone();
    let epoch = Instant::now();
    let handle = tokio::runtime::Handle::current();
    let (sent, late, tasks) = tokio::task::spawn_blocking(move || {
        let n = exchanges.len() as u64;
        let mut tasks = Vec::new();
        let (sent, late, _) = open_loop(rate, duration, epoch, |seq, sent_ns| {
            let exchange = exchanges[(seq % n) as usize];
            let (answered, answer) = oneshot::channel();
            let queued = queue.blocking_send(Queued { exchange, answered }).is_ok();
            tasks.push(handle.spawn(async move {
                if !queued || answer_of(exchange, answer).await.is_err() {
                    return None;
                }
                Some(((Instant::now() - epoch).as_nanos() as u64).saturating_sub(sent_ns))
            }));
        });
        (sent, late, tasks)
    })
    .await?;
    let mut out = RawOpenLoop {
        sent,
        failed: 0,
        late,
        from_send: Latencies::new(),
    };
    for t in tasks {
        match t.await? {
            Some(ns) => out.from_send.record(ns),
            None => out.failed += 1,
        }
    }
    pipeline.finish().await?;
    Ok(out)
}

/// Hands each answer frame to the oldest waiting slot, until the connection ends.
async fn read_answers(mut reader: OwnedReadHalf, waiting: Waiting) -> anyhow::Result<()> {
    let codec = FrameCodec::default();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        while let Some(frame) = codec.decode(&mut buf)? {
            let Frame::User(p) = frame else {
                bail!("the raw peer answered with a {:?} frame", frame.kind());
            };
            let next = waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            match next {
                // A slot that gave up no longer listens; nothing to do.
                Some(slot) => {
                    let _ = slot.send(p.len());
                }
                None => bail!("the raw peer answered a request that was never sent"),
            }
        }
        buf.reserve(8192);
        if reader.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}
