//! One writer per peer and lane: connect with timeout and backoff, handshake, then write
//! queued messages, coalescing whatever is queued into one write.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use shardik_core::membership::Address;
use shardik_wire::{Frame, FrameCodec, Handshake, HandshakeReply};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::{Lane, Outgoing, Shared};
use crate::metrics as m;

/// Upper bound on bytes coalesced into one write.
const COALESCE_BYTES: usize = 256 * 1024;

/// Messages taken from the queue per channel operation.
const BATCH: usize = 512;

/// The sending end of one peer lane. Dropping it ends the writer task.
pub(super) struct PeerQueue {
    tx: mpsc::Sender<Outgoing>,
    lane: Lane,
    to: Address,
}

impl PeerQueue {
    pub(super) fn spawn(to: Address, lane: Lane, shared: Arc<Shared>) -> Self {
        let size = match lane {
            Lane::Control => shared.config.outbound_control_queue_size,
            Lane::User => shared.config.outbound_user_queue_size,
        };
        let (tx, rx) = mpsc::channel(size.max(1));
        tokio::spawn(writer(to.clone(), lane, shared, rx));
        PeerQueue { tx, lane, to }
    }

    /// Whether the writer has ended (it does after `idle-timeout` without traffic).
    pub(super) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The queue's sending end, for callers that wait for room instead of dropping.
    pub(super) fn sender(&self) -> mpsc::Sender<Outgoing> {
        self.tx.clone()
    }

    /// Queues a message; false if the queue is full (the message is dropped and counted).
    pub(super) fn push(&self, msg: Outgoing) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(_) => {
                metrics::counter!(m::OUTBOUND_QUEUE_OVERFLOW_TOTAL, "lane" => self.lane.as_str())
                    .increment(1);
                metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "outbound-queue-full")
                    .increment(1);
                debug!(to = %self.to, lane = self.lane.as_str(), "outbound queue full: message dropped");
                false
            }
        }
    }
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
                super::count_membership_bytes(msg, "out", buf.len() - before);
            }
            true
        }
        Err(e) => {
            // Our own message is larger than the frame limit: a configuration problem. Drop it
            // loudly rather than break the connection for everything else.
            metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "oversized-outbound")
                .increment(1);
            warn!(error = %e, "message not sent: larger than transport.maximum-frame-size");
            false
        }
    }
}

async fn writer(to: Address, lane: Lane, shared: Arc<Shared>, mut rx: mpsc::Receiver<Outgoing>) {
    let cfg = &shared.config;
    let codec = FrameCodec::new(cfg.maximum_frame_size);
    let mut backoff = Backoff::new(cfg.reconnect_backoff_min, cfg.reconnect_backoff_max);
    let mut pending: Option<Outgoing> = None;
    loop {
        // Connect lazily: only when there is something to send.
        let first = match pending.take() {
            Some(m) => m,
            // Nothing to send for `idle-timeout`: end, so that peers we no longer talk to do
            // not keep a task and a queue forever.
            None => match tokio::time::timeout(cfg.idle_timeout, rx.recv()).await {
                Ok(Some(m)) => m,
                Ok(None) | Err(_) => return,
            },
        };
        let mut stream = match connect(&to, &shared).await {
            Ok(s) => {
                backoff.reset();
                s
            }
            Err(reason) => {
                let retry_in = backoff.next_delay(&mut rand::rng());
                debug!(%to, lane = lane.as_str(), %reason, ?retry_in, "connect failed");
                // Messages queued meanwhile for an unreachable peer are dropped: the protocols
                // above retry by themselves, and holding them would only deliver stale state.
                let mut dropped = 1u64;
                while rx.try_recv().is_ok() {
                    dropped += 1;
                }
                metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "peer-unreachable")
                    .increment(dropped);
                tokio::time::sleep(retry_in).await;
                continue;
            }
        };
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut next = Some(first);
        let mut batch: Vec<Outgoing> = Vec::with_capacity(BATCH);
        loop {
            let Some(msg) = next.take() else {
                match tokio::time::timeout(cfg.idle_timeout, rx.recv()).await {
                    Ok(Some(m)) => next = Some(m),
                    Ok(None) | Err(_) => {
                        let _ = stream.shutdown().await;
                        return;
                    }
                }
                continue;
            };
            let mut frames = 0u64;
            if encode(&codec, &msg, &mut buf) {
                frames += 1;
            }
            // Take whatever else is queued in batches (one channel operation per batch rather
            // than per message), up to the coalescing limit.
            while buf.len() < COALESCE_BYTES && !rx.is_empty() {
                if rx.recv_many(&mut batch, BATCH).await == 0 {
                    break;
                }
                for m in batch.drain(..) {
                    if encode(&codec, &m, &mut buf) {
                        frames += 1;
                    }
                }
            }
            let len = buf.len() as u64;
            let write = tokio::time::timeout(
                cfg.handshake_timeout.max(Duration::from_secs(5)),
                stream.write_all(&buf),
            )
            .await;
            buf.clear();
            match write {
                Ok(Ok(())) => {
                    metrics::counter!(m::TRANSPORT_FRAMES_TOTAL, "direction" => "out", "lane" => lane.as_str()).increment(frames);
                    metrics::counter!(m::TRANSPORT_BYTES_TOTAL, "direction" => "out", "lane" => lane.as_str()).increment(len);
                }
                Ok(Err(e)) => {
                    info!(%to, lane = lane.as_str(), error = %e, "connection lost; reconnecting");
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "connection-lost")
                        .increment(frames);
                    break;
                }
                Err(_) => {
                    warn!(%to, lane = lane.as_str(), "write stalled; reconnecting");
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => "write-stalled")
                        .increment(frames);
                    break;
                }
            }
        }
    }
}

async fn connect(to: &Address, shared: &Shared) -> Result<TcpStream, String> {
    let cfg = &shared.config;
    let target = format!("{}:{}", to.host, to.port);
    let mut stream =
        match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(&target)).await {
            Err(_) => return Err(format!("no connection within {:?}", cfg.connect_timeout)),
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(s)) => s,
        };
    let _ = stream.set_nodelay(true);
    let codec = FrameCodec::new(cfg.maximum_frame_size);
    let mut buf = BytesMut::new();
    let hs = Handshake::new(&shared.identity, Some(to.clone()));
    codec
        .encode(&Frame::Handshake(hs), &mut buf)
        .map_err(|e| e.to_string())?;
    let exchange = async {
        stream.write_all(&buf).await.map_err(|e| e.to_string())?;
        buf.clear();
        // The reply comes back on the same connection; after it we only write.
        loop {
            if let Some(frame) = codec.decode(&mut buf).map_err(|e| e.to_string())? {
                return Ok::<Frame, String>(frame);
            }
            buf.reserve(1024);
            let n = tokio::io::AsyncReadExt::read_buf(&mut stream, &mut buf)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed during handshake".to_string());
            }
        }
    };
    match tokio::time::timeout(cfg.handshake_timeout, exchange).await {
        Err(_) => Err(format!(
            "no handshake reply within {:?}",
            cfg.handshake_timeout
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(Frame::HandshakeAck(HandshakeReply::Accepted(ack)))) => {
            debug!(%to, peer = %ack.from, "connected");
            Ok(stream)
        }
        Ok(Ok(Frame::HandshakeAck(HandshakeReply::Refused(r)))) => {
            metrics::counter!(m::TRANSPORT_REFUSED_TOTAL, "reason" => "refused-by-peer")
                .increment(1);
            warn!(%to, reason = %r.reason, "peer refused the connection");
            Err(format!("refused: {}", r.reason))
        }
        Ok(Ok(other)) => Err(format!(
            "unexpected {:?} frame during handshake",
            other.kind()
        )),
    }
}
