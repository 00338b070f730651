//! What the transport sends and on which of a peer's connections: the two lanes keep
//! membership traffic from ever waiting behind user traffic.

use shardik_core::membership::Message;

/// Which queue and connection a message travels on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Membership: heartbeats and gossip. Small, latency-critical.
    Control,
    /// User traffic (sharding envelopes).
    User,
}

impl Lane {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Control => "control",
            Lane::User => "user",
        }
    }
}

/// A message to put on the wire.
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// A membership message (control lane).
    Membership(Message),
    /// Opaque user bytes (user lane).
    User(bytes::Bytes),
}
