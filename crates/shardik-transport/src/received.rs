//! What the transport hands its owner: decoded membership messages and raw user payloads, on
//! bounded queues or, for user payloads once a sink is installed, straight from the reader.

use bytes::Bytes;
use shardik_core::membership::{Message, UniqueAddress};
use tokio::sync::mpsc;

/// A message received from a peer.
#[derive(Debug)]
pub struct Inbound {
    /// The decoded message.
    pub msg: Message,
    /// The peer incarnation that sent it (from its handshake).
    pub from: UniqueAddress,
    /// When it was read off the socket.
    pub received_at: tokio::time::Instant,
}

/// A user payload received from a peer (a [`Frame::User`](shardik_wire::Frame::User) body, not
/// decoded any further).
#[derive(Debug, Clone)]
pub struct InboundUser {
    /// The peer incarnation that sent it (from its handshake).
    pub from: UniqueAddress,
    /// The payload, exactly as the peer queued it.
    pub payload: Bytes,
}

/// Takes user payloads where a connection's reader reads them, instead of through a queue
/// to another task: one hand-off fewer for every message from another node.
pub trait UserSink: Send + Sync + 'static {
    /// A handler for the payloads of one inbound connection (it may keep state, such as
    /// routes it looked up, for as long as the connection lives).
    fn connection(&self) -> Box<dyn UserConnection>;
}

/// What waits before the reader may read on.
pub type Backpressure = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Handles the payloads of one inbound connection, in the order they were read.
pub trait UserConnection: Send {
    /// Takes `payload`, sent by `from`. Returns a future when the payload's consumer has no
    /// room: the reader awaits it before reading on, so TCP flow control pushes back to the
    /// sender's bounded queue instead of anything being dropped or growing.
    fn deliver(&mut self, from: &UniqueAddress, payload: Bytes) -> Option<Backpressure>;
}

/// Where the readers put what they decode.
#[derive(Clone)]
pub(crate) struct Sinks {
    pub(crate) membership: mpsc::Sender<Inbound>,
    pub(crate) user: mpsc::Sender<InboundUser>,
}
