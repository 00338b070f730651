//! One lane per peer: an ordered buffer of encoded frames, bounded in messages.
//!
//! A sender that finds the lane idle (nothing buffered, no write in progress, connected)
//! writes its frames to the socket itself, without waking another task: that is the common
//! case for request/response traffic, and it saves a hand-off per message. Whatever cannot be
//! written at once (the socket's buffer is full, a write is in progress, not connected yet)
//! stays in the buffer, in order, for the lane's writer task, which connects (timeout,
//! backoff, handshake) and drains it. Order is kept because a sender writes directly only
//! when nothing is buffered and the writer is not writing, and it decides and writes under
//! the lane's lock. A sender that comes back within a few microseconds of its last direct
//! write is sending a burst: its frames go to the writer, which coalesces them into fewer
//! system calls, made on another core.
//!
//! A lane ends `idle-timeout` (plus at most a quarter of it) after its last message, deciding
//! so under the lane's lock: a sender after that finds it closed and takes a new lane (a new connection), so nothing is
//! written into a connection that is closing. The receiving side waits twice as long before it
//! closes an idle connection itself; if the peer closes anyway (it restarted, or refused us),
//! the idle writer sees the end of the stream and forgets the connection, so that the next
//! message goes on a new one.
//!
//! With TLS (`transport.tls`), the connection is a TLS session after the TLS handshake
//! ([`TlsConn`]), written the same way: a sender that finds the lane idle encrypts and writes
//! itself, and records the socket does not take wait in the session, ahead of anything later,
//! for the writer. Ordering, the burst rule, the write limit and what a failed write does are
//! the same as for plain TCP.
//!
//! This file holds the lane and its writer task. How a peer is dialled (TCP, TLS, our
//! handshake) is `dial.rs`; the connection the lane writes on, and its two ways of writing,
//! are `conn.rs`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use shardik_core::membership::Address;
use shardik_wire::{Frame, FrameCodec};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::conn::{Conn, ended_by_peer, write_all};
use crate::dial::connect;
use crate::lane::{Lane, Outgoing};
use crate::metrics as m;
use crate::shared::Shared;

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::transport::outbound";

/// The owner's handle on one peer lane (kept in the transport's peer table). Dropping it
/// closes the lane: its writer ends and its connection is closed.
pub(crate) struct PeerQueue {
    lane: Arc<PeerLane>,
}

impl Drop for PeerQueue {
    fn drop(&mut self) {
        self.lane.close();
    }
}

/// How much of a run [`PeerLane::push_run`] took.
pub(crate) enum RunPushed {
    /// Every message.
    All,
    /// Some: the lane filled up.
    Full,
    /// None: the lane has closed.
    Closed,
}

/// Why a message was not taken (it is dropped; a caller that wants it back keeps a copy).
pub(crate) enum Refused {
    /// The lane holds as many messages as it may.
    Full,
    /// The lane has closed (its writer ended after idling, or the peer was forgotten).
    Closed,
}

impl PeerQueue {
    pub(crate) fn spawn(to: Address, lane: Lane, shared: Arc<Shared>) -> Self {
        let capacity = match lane {
            Lane::Control => shared.config.outbound_control_queue_size,
            Lane::User => shared.config.outbound_user_queue_size,
        };
        let peer_lane = Arc::new(PeerLane {
            to,
            lane,
            capacity: capacity.max(1),
            codec: FrameCodec::new(shared.config.maximum_frame_size),
            state: Mutex::new(LaneState {
                buf: BytesMut::new(),
                frames: 0,
                writing: false,
                stream: None,
                closed: false,
                used: false,
                last_direct: None,
            }),
            work: Notify::new(),
            room: Notify::new(),
            frames_out: metrics::counter!(m::TRANSPORT_FRAMES_TOTAL, "direction" => "out", "lane" => lane.as_str()),
            bytes_out: metrics::counter!(m::TRANSPORT_BYTES_TOTAL, "direction" => "out", "lane" => lane.as_str()),
        });
        crate::task::spawn(writer(Arc::clone(&peer_lane), shared));
        PeerQueue { lane: peer_lane }
    }

    /// Whether the lane has closed (its writer ends after `idle-timeout` without traffic).
    pub(crate) fn is_closed(&self) -> bool {
        self.lane.is_closed()
    }

    /// The lane itself, for senders that wait for room instead of dropping.
    pub(crate) fn lane(&self) -> Arc<PeerLane> {
        Arc::clone(&self.lane)
    }

    /// Queues (or writes) a message: `Ok(true)` if taken, `Ok(false)` if the lane is full (the
    /// message is dropped and counted), `Err` with the message if the lane has closed (it
    /// ended when idle: the caller sends it on a new lane).
    pub(crate) fn push(&self, msg: Outgoing) -> Result<bool, Outgoing> {
        match self.lane.push(msg) {
            Ok(()) => Ok(true),
            Err((Refused::Closed, msg)) => Err(msg),
            Err((Refused::Full, _)) => {
                metrics::counter!(m::OUTBOUND_QUEUE_OVERFLOW_TOTAL, "lane" => self.lane.lane.as_str())
                    .increment(1);
                metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "outbound-queue-full")
                    .increment(1);
                debug!(target: LOG_TARGET, to = %self.lane.to, lane = self.lane.lane.as_str(), "outbound queue full: message dropped");
                Ok(false)
            }
        }
    }
}

/// One peer lane, shared by its senders and its writer task.
pub(crate) struct PeerLane {
    to: Address,
    lane: Lane,
    /// The most messages buffered at once.
    capacity: usize,
    codec: FrameCodec,
    state: Mutex<LaneState>,
    /// Wakes the writer: bytes wait to be written, or the lane closed.
    work: Notify,
    /// Wakes senders that wait for room.
    room: Notify,
    frames_out: metrics::Counter,
    bytes_out: metrics::Counter,
}

struct LaneState {
    /// Encoded frames not yet handed to the socket, in order. After a partial direct write
    /// it may start in the middle of a frame: it is then written before anything else, on the
    /// same connection, or dropped with that connection.
    buf: BytesMut,
    /// Messages whose bytes are (at least partly) in `buf`: the bound counts messages, as the
    /// queue it replaces did.
    frames: usize,
    /// The writer holds bytes it took from `buf` and is writing them.
    writing: bool,
    /// The connection, once connected and handshaken.
    stream: Option<Conn>,
    closed: bool,
    /// Something was pushed since the writer last looked: the lane is not idle, even if every
    /// message went out by direct writes the writer never saw. (A flag rather than a time, so
    /// that a push reads no clock.)
    used: bool,
    /// When the last direct write ended: a sender that comes back sooner is sending a burst,
    /// which the writer coalesces better (see [`DIRECT_WRITE_GAP`]).
    last_direct: Option<Instant>,
}

/// The least time since the last direct write for a sender to write directly again. A sender
/// of requests or replies comes back a round trip later at the soonest (tens of microseconds
/// on loopback) and writes at once; one sending message after message in a loop comes back
/// within a microsecond, and its messages then go to the writer task, which takes many per
/// system call on the other core instead of one system call per message on the sender's.
const DIRECT_WRITE_GAP: Duration = Duration::from_micros(5);

impl PeerLane {
    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn close(&self) {
        self.lock().closed = true;
        self.work.notify_one();
        self.room.notify_waiters();
    }

    /// Takes one message: written at once when the lane is idle, else buffered for the writer.
    /// A refused message is handed back.
    pub(crate) fn push(&self, msg: Outgoing) -> Result<(), (Refused, Outgoing)> {
        let mut st = self.lock();
        if st.closed {
            return Err((Refused::Closed, msg));
        }
        if st.frames >= self.capacity {
            return Err((Refused::Full, msg));
        }
        let idle = st.buf.is_empty() && !st.writing;
        if encode(&self.codec, &msg, &mut st.buf) {
            st.frames += 1;
        }
        self.written_or_wake(&mut st, idle);
        Ok(())
    }

    /// Takes messages from `msgs` while there is room, then writes them at once if the lane
    /// was idle (one system call for the lot). A closed lane takes nothing.
    pub(crate) fn push_run<I: Iterator<Item = Outgoing>>(
        &self,
        msgs: &mut std::iter::Peekable<I>,
    ) -> RunPushed {
        let mut st = self.lock();
        if st.closed {
            return RunPushed::Closed;
        }
        let idle = st.buf.is_empty() && !st.writing;
        while st.frames < self.capacity {
            let Some(msg) = msgs.next() else { break };
            if encode(&self.codec, &msg, &mut st.buf) {
                st.frames += 1;
            }
        }
        self.written_or_wake(&mut st, idle);
        if msgs.peek().is_none() {
            RunPushed::All
        } else {
            RunPushed::Full
        }
    }

    /// Waits until the lane may have room (or closed). Create the future before trying, so
    /// that a wake-up between the try and the wait is not lost.
    pub(crate) fn room(&self) -> tokio::sync::futures::Notified<'_> {
        self.room.notified()
    }

    /// After frames were added to `buf`: writes them now if the lane was idle and connected,
    /// else makes sure the writer will.
    fn written_or_wake(&self, st: &mut LaneState, was_idle: bool) {
        st.used = true;
        if st.buf.is_empty() {
            return;
        }
        let burst = || {
            st.last_direct
                .is_some_and(|t| t.elapsed() < DIRECT_WRITE_GAP)
        };
        if was_idle
            && !burst()
            && let Some(stream) = st.stream.clone()
        {
            let before = st.buf.len();
            match stream.write_now(&mut st.buf) {
                Ok(()) => {
                    st.last_direct = Some(Instant::now());
                    self.bytes_out.increment((before - st.buf.len()) as u64);
                    if st.buf.is_empty() {
                        self.frames_out.increment(st.frames as u64);
                        st.frames = 0;
                        // TLS records the socket did not take are the writer's to send.
                        if !stream.has_pending() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    connection_lost(&self.to, self.lane.as_str(), &e, st.frames);
                    st.buf.clear();
                    st.frames = 0;
                    st.stream = None;
                    return;
                }
            }
        }
        self.work.notify_one();
    }
}

impl PeerLane {
    /// What the writer is to do next; taking bytes to write marks the lane as writing, so that
    /// no sender writes directly until [`write_finished`](Self::write_finished).
    fn next_work(&self) -> Work {
        let mut st = self.lock();
        // A closed lane still writes what it buffered when it has a connection (as a closed
        // queue was drained); what it cannot send is counted when the writer ends.
        if st.closed && (st.buf.is_empty() || st.stream.is_none()) {
            // A connection's own pending records go out when it is shut down.
            Work::Stop
        } else if st.buf.is_empty() && !st.stream.as_ref().is_some_and(Conn::has_pending) {
            Work::Idle(st.stream.clone())
        } else if let Some(stream) = st.stream.clone() {
            // (With only a TLS session's pending records to send, `bytes` is empty.)
            let bytes = st.buf.split();
            let frames = std::mem::take(&mut st.frames);
            st.writing = true;
            Work::Write(stream, bytes, frames)
        } else {
            Work::Connect
        }
    }

    /// One look of the idle writer: a push since the last look moves `quiet_since` to now;
    /// with none for `idle` since then, the lane ends (decided under the lock, so no sender
    /// can write into the connection after this). True if it ended.
    fn close_if_idle(&self, quiet_since: &mut Instant, idle: Duration) -> bool {
        let mut st = self.lock();
        if std::mem::take(&mut st.used) || !st.buf.is_empty() || st.writing {
            *quiet_since = Instant::now();
            false
        } else if quiet_since.elapsed() >= idle {
            st.closed = true;
            true
        } else {
            false
        }
    }

    /// The peer ended the connection `stream` (or broke the protocol by writing on it): forget
    /// it, so that the next message goes on a new connection instead of into this one.
    fn peer_closed(&self, stream: &Conn) {
        let mut st = self.lock();
        if st.stream.as_ref().is_some_and(|s| s.same(stream)) {
            debug!(target: LOG_TARGET, to = %self.to, lane = self.lane.as_str(), "peer closed the connection; reconnecting on demand");
            forget_stream(&mut st, stream);
        }
    }

    /// The writer is done with the `frames` messages (`bytes` bytes) it took from the lane.
    fn write_finished(&self, stream: &Conn, frames: usize, bytes: usize, outcome: WriteOutcome) {
        let (to, name) = (&self.to, self.lane.as_str());
        let mut st = self.lock();
        st.writing = false;
        match outcome {
            WriteOutcome::Done => {
                self.frames_out.increment(frames as u64);
                self.bytes_out.increment(bytes as u64);
            }
            WriteOutcome::Failed(e) => {
                connection_lost(to, name, &e, frames);
                forget_stream(&mut st, stream);
            }
            WriteOutcome::Stalled => {
                warn!(target: LOG_TARGET, %to, lane = name, "write stalled; reconnecting");
                metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "write-stalled")
                    .increment(frames as u64);
                forget_stream(&mut st, stream);
            }
        }
    }
}

/// How the writer's write of the bytes it took ended.
enum WriteOutcome {
    Done,
    Failed(std::io::Error),
    /// Not done within the write limit.
    Stalled,
}

fn encode(codec: &FrameCodec, msg: &Outgoing, buf: &mut BytesMut) -> bool {
    let frame = match msg {
        Outgoing::Membership(m) => Frame::membership(m),
        Outgoing::User(b) => Frame::User(b.clone()),
    };
    let before = buf.len();
    match codec.encode(&frame, buf) {
        Ok(()) => {
            if let Outgoing::Membership(msg) = msg {
                m::count_membership_bytes(msg, "out", buf.len() - before);
            }
            true
        }
        Err(e) => {
            // Our own message is larger than the frame limit: a configuration problem. Drop it
            // loudly rather than break the connection for everything else.
            metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "oversized-outbound")
                .increment(1);
            warn!(target: LOG_TARGET, error = %e, "message not sent: larger than transport.maximum-frame-size");
            false
        }
    }
}

/// What the writer found to do.
enum Work {
    /// Connect first: bytes wait and there is no connection.
    Connect,
    /// Write these bytes (this many messages) on this connection.
    Write(Conn, BytesMut, usize),
    /// Nothing waits; the connection, if any.
    Idle(Option<Conn>),
    /// The lane closed.
    Stop,
}

async fn writer(lane: Arc<PeerLane>, shared: Arc<Shared>) {
    let cfg = &shared.config;
    let (to, name) = (&lane.to, lane.lane.as_str());
    let mut backoff = Backoff::new(cfg.reconnect_backoff_min, cfg.reconnect_backoff_max);
    let write_limit = cfg.handshake_timeout.max(Duration::from_secs(5));
    // The idle writer looks every eighth of `idle-timeout`: the lane ends between `idle-timeout`
    // and a quarter more after its last message, well before the receiving side's twice.
    let idle_tick = (cfg.idle_timeout / 8).max(Duration::from_millis(1));
    let mut quiet_since = Instant::now();
    loop {
        let work = lane.next_work();
        match work {
            Work::Stop => break,
            Work::Idle(stream) => {
                // Nothing pushed for `idle-timeout` (direct writes included): end, so that peers
                // we no longer talk to do not keep a task and a connection. Meanwhile, watch for
                // the peer ending the connection.
                tokio::select! {
                    biased;
                    _ = lane.work.notified() => {}
                    _ = tokio::time::sleep(idle_tick) => {
                        if lane.close_if_idle(&mut quiet_since, cfg.idle_timeout) {
                            break;
                        }
                    }
                    ended = ended_by_peer(stream.as_ref()) => {
                        if let (true, Some(stream)) = (ended, &stream) {
                            lane.peer_closed(stream);
                        }
                    }
                }
            }
            Work::Connect => match connect(to, &shared).await {
                Ok(stream) => {
                    backoff.reset();
                    shared.connect_errors.connected(to);
                    let mut st = lane.lock();
                    if st.closed {
                        break;
                    }
                    st.stream = Some(stream);
                }
                Err(reason) => {
                    let retry_in = backoff.next_delay(&mut rand::rng());
                    debug!(target: LOG_TARGET, %to, lane = name, %reason, ?retry_in, "connect failed");
                    shared.connect_errors.failed(to, &reason);
                    // Messages queued meanwhile for an unreachable peer are dropped: the
                    // protocols above retry by themselves, and holding them would only deliver
                    // stale state.
                    let dropped = {
                        let mut st = lane.lock();
                        st.buf.clear();
                        std::mem::take(&mut st.frames)
                    };
                    lane.room.notify_waiters();
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "peer-unreachable")
                        .increment(dropped as u64);
                    tokio::time::sleep(retry_in).await;
                }
            },
            Work::Write(stream, bytes, frames) => {
                // Room again for senders that wait.
                lane.room.notify_waiters();
                let outcome =
                    match tokio::time::timeout(write_limit, write_all(&stream, &bytes)).await {
                        Ok(Ok(())) => WriteOutcome::Done,
                        Ok(Err(e)) => WriteOutcome::Failed(e),
                        Err(_) => WriteOutcome::Stalled,
                    };
                lane.write_finished(&stream, frames, bytes.len(), outcome);
            }
        }
    }
    // Closed: what is still buffered cannot be sent (no connection), and the connection goes.
    let stream = {
        let mut st = lane.lock();
        st.closed = true;
        if st.frames > 0 {
            metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "peer-forgotten")
                .increment(st.frames as u64);
        }
        st.buf = BytesMut::new();
        st.frames = 0;
        st.stream.take()
    };
    lane.room.notify_waiters();
    if let Some(stream) = stream {
        stream.shutdown().await;
    }
}

/// Drops the lane's connection after a failed write (unless a newer one replaced it), with
/// what was buffered for it: a partial frame must not start the next connection.
fn forget_stream(st: &mut LaneState, failed: &Conn) {
    if st.stream.as_ref().is_some_and(|s| s.same(failed)) {
        st.stream = None;
        if st.frames > 0 {
            metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "connection-lost")
                .increment(st.frames as u64);
        }
        st.buf.clear();
        st.frames = 0;
    }
}

/// A connection that broke, taking `dropped` messages with it. Peers close connections as a
/// matter of course (a node that leaves or stops, an idle lane), so that alone is DEBUG; the
/// messages it took down are drops, counted and told at INFO with their number.
fn connection_lost(to: &Address, lane: &str, error: &std::io::Error, dropped: usize) {
    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "connection-lost")
        .increment(dropped as u64);
    if dropped == 0 {
        debug!(target: LOG_TARGET, %to, lane, %error, "connection closed; reconnecting when there is something to send");
    } else {
        info!(target: LOG_TARGET, %to, lane, %error, dropped, "connection lost with {dropped} messages unsent (counted as dropped); reconnecting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tokio::net::{TcpSocket, TcpStream};
    use tokio::sync::watch;

    const MAX_FRAME: usize = 4 << 20;
    /// Larger than any loopback socket's buffers at their smallest: a direct write of it is
    /// always partial.
    const LARGE: usize = 1 << 20;

    /// A lane connected to a loopback peer, with small socket buffers, and no writer task:
    /// the test takes the writer's steps itself, in the order it wants.
    async fn lane_and_peer() -> (PeerLane, TcpStream) {
        let listener = TcpSocket::new_v4().unwrap();
        listener.set_recv_buffer_size(4096).unwrap();
        listener.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = listener.listen(1).unwrap();
        let client = TcpSocket::new_v4().unwrap();
        client.set_send_buffer_size(4096).unwrap();
        let (client, accepted) = tokio::join!(client.connect(addr), listener.accept());
        let lane = PeerLane {
            to: Address::new("127.0.0.1", addr.port()),
            lane: Lane::User,
            capacity: 1000,
            codec: FrameCodec::new(MAX_FRAME),
            state: Mutex::new(LaneState {
                buf: BytesMut::new(),
                frames: 0,
                writing: false,
                stream: Some(Conn::Plain(Arc::new(client.unwrap()))),
                closed: false,
                used: false,
                last_direct: None,
            }),
            work: Notify::new(),
            room: Notify::new(),
            frames_out: metrics::Counter::noop(),
            bytes_out: metrics::Counter::noop(),
        };
        (lane, accepted.unwrap().0)
    }

    /// A user frame of `len` bytes that starts with its number.
    fn numbered(n: u32, len: usize) -> Outgoing {
        let mut b = vec![0u8; len.max(4)];
        b[..4].copy_from_slice(&n.to_be_bytes());
        Outgoing::User(Bytes::from(b))
    }

    /// Reads `count` frames from `peer`, publishing how many bytes arrived so far; returns
    /// the frames' numbers in arrival order.
    async fn read_numbers(
        mut peer: TcpStream,
        count: usize,
        got: watch::Sender<usize>,
    ) -> Vec<u32> {
        let codec = FrameCodec::new(MAX_FRAME);
        let mut buf = BytesMut::new();
        let mut numbers = Vec::new();
        let mut total = 0;
        while numbers.len() < count {
            while let Some(frame) = codec.decode(&mut buf).expect("a well-formed stream") {
                let Frame::User(b) = frame else {
                    panic!("not a user frame")
                };
                numbers.push(u32::from_be_bytes(b[..4].try_into().unwrap()));
            }
            if numbers.len() == count {
                break;
            }
            buf.reserve(64 * 1024);
            let n = tokio::io::AsyncReadExt::read_buf(&mut peer, &mut buf)
                .await
                .unwrap();
            assert!(n > 0, "the lane's connection closed early");
            total += n;
            let _ = got.send(total);
        }
        numbers
    }

    /// Waits past the burst window, so that the next sender may write directly if the lane
    /// lets it.
    async fn pause() {
        tokio::time::sleep(DIRECT_WRITE_GAP * 200).await;
    }

    fn take_write(lane: &PeerLane) -> (Conn, BytesMut, usize) {
        match lane.next_work() {
            Work::Write(stream, bytes, frames) => (stream, bytes, frames),
            _ => panic!("the writer found nothing to write"),
        }
    }

    #[tokio::test]
    async fn frames_leave_in_the_order_they_were_pushed_whoever_writes_them() {
        let (lane, peer) = lane_and_peer().await;
        let (got_tx, mut got) = watch::channel(0);
        let reader = crate::task::spawn(read_numbers(peer, 6, got_tx));

        // An idle, connected lane: the sender writes itself, and the socket takes only part
        // of a large frame; its tail waits in the lane.
        let mut encoded = BytesMut::new();
        assert!(encode(&lane.codec, &numbered(0, LARGE), &mut encoded));
        lane.push(numbered(0, LARGE)).ok().unwrap();
        let left = lane.lock().buf.len();
        assert!(left > 0, "a partial direct write leaves the frame's tail");
        let written = encoded.len() - left;

        // Behind that tail, a sender does not write directly, pause or not.
        pause().await;
        lane.push(numbered(1, 100)).ok().unwrap();
        assert_eq!(lane.lock().frames, 2);

        // The writer takes what waits. Once the peer has read every byte the socket took,
        // the socket has room; still, while the writer holds its bytes, senders buffer.
        let (stream, bytes, frames) = take_write(&lane);
        assert_eq!(frames, 2);
        tokio::time::timeout(Duration::from_secs(10), got.wait_for(|n| *n >= written))
            .await
            .expect("the peer read what the socket took")
            .unwrap();
        pause().await;
        lane.push(numbered(2, 100)).ok().unwrap();
        lane.push(numbered(3, 100)).ok().unwrap();
        assert_eq!(
            lane.lock().frames,
            2,
            "a sender wrote while the writer held earlier bytes"
        );
        write_all(&stream, &bytes).await.unwrap();
        lane.write_finished(&stream, frames, bytes.len(), WriteOutcome::Done);

        // What waited goes out on the writer's next turn; then the lane is idle again and a
        // sender after a pause may write itself.
        let (stream, bytes, frames) = take_write(&lane);
        assert_eq!(frames, 2);
        write_all(&stream, &bytes).await.unwrap();
        lane.write_finished(&stream, frames, bytes.len(), WriteOutcome::Done);
        assert!(matches!(lane.next_work(), Work::Idle(..)));
        pause().await;
        lane.push(numbered(4, 100)).ok().unwrap();
        lane.push(numbered(5, 100)).ok().unwrap();
        // Whether those two went directly depends on the socket's room: drain what is left.
        while let Work::Write(stream, bytes, frames) = lane.next_work() {
            write_all(&stream, &bytes).await.unwrap();
            lane.write_finished(&stream, frames, bytes.len(), WriteOutcome::Done);
        }

        let numbers = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("every frame arrived")
            .unwrap();
        assert_eq!(numbers, vec![0, 1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_failed_write_forgets_its_connection_with_what_was_buffered_for_it() {
        let (lane, peer) = lane_and_peer().await;
        lane.push(numbered(0, LARGE)).ok().unwrap();
        let (stream, _bytes, frames) = take_write(&lane);
        // A sender meanwhile buffers behind the writer.
        lane.push(numbered(1, 100)).ok().unwrap();
        drop(peer);
        lane.write_finished(
            &stream,
            frames,
            0,
            WriteOutcome::Failed(std::io::ErrorKind::BrokenPipe.into()),
        );
        // The connection is forgotten with what was buffered for it: a partial frame must not
        // start the next connection, so the writer connects afresh with nothing to write.
        let st = lane.lock();
        assert!(st.stream.is_none());
        assert!(st.buf.is_empty());
        assert_eq!(st.frames, 0);
        assert!(!st.writing);
    }
}
