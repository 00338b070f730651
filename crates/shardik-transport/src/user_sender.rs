//! Sending user payloads (sharding traffic) from any task, each sender with writers of its
//! own, so that user traffic never contends with the node driver's membership sends.

use std::collections::BTreeMap;
use std::sync::Arc;

use shardik_core::membership::Address;

use crate::lane::{Lane, Outgoing};
use crate::outbound;
use crate::shared::Shared;

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::transport";

/// Sends user payloads on the user lane from any task; clones share the writers.
///
/// [`send`](UserSender::send) waits while the peer's queue is full, so a fast producer is
/// slowed to the speed of the connection instead of losing messages; a peer that cannot be
/// reached still loses what was queued for it (counted as `peer-unreachable`), as the layers
/// above retry or report by themselves.
#[derive(Clone)]
pub struct UserSender {
    shared: Arc<Shared>,
    peers: Arc<std::sync::Mutex<BTreeMap<Address, outbound::PeerQueue>>>,
}

impl std::fmt::Debug for UserSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSender").finish_non_exhaustive()
    }
}

impl UserSender {
    /// A sender with no writers yet, over the transport's shared state.
    pub(crate) fn new(shared: Arc<Shared>) -> UserSender {
        UserSender {
            shared,
            peers: Arc::new(std::sync::Mutex::new(BTreeMap::new())),
        }
    }

    /// The lane of `to`, created on first use; `None` when the peer cap is reached.
    fn lane(&self, to: &Address) -> Option<Arc<outbound::PeerLane>> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = peers.get(to)
            && !q.is_closed()
        {
            return Some(q.lane());
        }
        if !peers.contains_key(to) && peers.len() >= self.shared.config.maximum_peers {
            peers.retain(|_, q| !q.is_closed());
            if peers.len() >= self.shared.config.maximum_peers {
                metrics::counter!(crate::metrics::DROPPED_MESSAGES_TOTAL, "reason" => "too-many-peers").increment(1);
                tracing::warn!(target: LOG_TARGET, %to, limit = self.shared.config.maximum_peers, "not sending: too many peers");
                return None;
            }
        }
        let q = outbound::PeerQueue::spawn(to.clone(), Lane::User, Arc::clone(&self.shared));
        let lane = q.lane();
        peers.insert(to.clone(), q);
        Some(lane)
    }

    /// The lane that replaces `closed` (it ended when idle, or on a failure).
    fn next_lane(
        &self,
        to: &Address,
        closed: &Arc<outbound::PeerLane>,
    ) -> Option<Arc<outbound::PeerLane>> {
        {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            if peers
                .get(to)
                .is_some_and(|q| Arc::ptr_eq(&q.lane(), closed))
            {
                peers.remove(to);
            }
        }
        self.lane(to)
    }

    /// Sends `payload` to `to`, waiting while the peer's lane is full. When the lane is idle
    /// the payload is written to the socket from this task, without waking the writer. False
    /// when it could not be queued (peer cap reached); the caller counts and reports that.
    pub async fn send(&self, to: &Address, payload: bytes::Bytes) -> bool {
        self.send_all(to, std::iter::once(payload)).await == 0
    }

    /// Sends `payload` to `to` if its lane has room now, without waiting. `Err` hands the
    /// payload back when the lane is full (or the peer cap is reached), for a caller that
    /// then waits with [`send`](Self::send) elsewhere.
    pub fn try_send(&self, to: &Address, payload: bytes::Bytes) -> Result<(), bytes::Bytes> {
        let Some(mut lane) = self.lane(to) else {
            return Err(payload);
        };
        // A refused message is dropped and the caller wants its bytes back: push a clone (a
        // reference count) and hand back the original.
        loop {
            match lane.push(Outgoing::User(payload.clone())) {
                Ok(()) => return Ok(()),
                Err((outbound::Refused::Full, _)) => return Err(payload),
                Err((outbound::Refused::Closed, _)) => match self.next_lane(to, &lane) {
                    Some(next) => lane = next,
                    None => return Err(payload),
                },
            }
        }
    }

    /// Queues `payloads` for `to`, in order, as far as its lane has room now, without
    /// waiting (written together when the lane is idle). Returns those that found no room
    /// (all of them when the peer cap is reached), for a caller that then waits elsewhere.
    pub fn try_send_run(&self, to: &Address, payloads: Vec<bytes::Bytes>) -> Vec<bytes::Bytes> {
        let Some(mut lane) = self.lane(to) else {
            return payloads;
        };
        let mut msgs = payloads.into_iter().map(Outgoing::User).peekable();
        loop {
            match lane.push_run(&mut msgs) {
                outbound::RunPushed::All => return Vec::new(),
                outbound::RunPushed::Full => break,
                outbound::RunPushed::Closed => match self.next_lane(to, &lane) {
                    Some(next) => lane = next,
                    None => break,
                },
            }
        }
        msgs.filter_map(|m| match m {
            Outgoing::User(b) => Some(b),
            Outgoing::Membership(_) => None,
        })
        .collect()
    }

    /// Sends every payload of `payloads` to `to`, in order, looking the peer's lane up once
    /// and writing them together. Waits while the lane is full. Returns how many could not be
    /// queued (as [`send`](Self::send) would report).
    pub async fn send_all(
        &self,
        to: &Address,
        payloads: impl IntoIterator<Item = bytes::Bytes>,
    ) -> usize {
        let mut msgs = payloads.into_iter().map(Outgoing::User).peekable();
        let Some(mut lane) = self.lane(to) else {
            return msgs.count();
        };
        loop {
            let closed = {
                // Registered before trying, so that room made between the try and the wait
                // wakes us.
                let room = lane.room();
                tokio::pin!(room);
                room.as_mut().enable();
                match lane.push_run(&mut msgs) {
                    outbound::RunPushed::All => return 0,
                    outbound::RunPushed::Full => {
                        room.await;
                        false
                    }
                    outbound::RunPushed::Closed => true,
                }
            };
            if closed {
                match self.next_lane(to, &lane) {
                    Some(next) => lane = next,
                    None => return msgs.count(),
                }
            }
        }
    }

    /// Stops the writer of a peer that is gone.
    pub fn forget_peer(&self, address: &Address) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(address);
    }
}
