//! What a transport runs with: the `transport.*` settings and the fixed bound on handshake
//! frames, which both directions read before anything else.

use std::time::Duration;

use shardik_wire::DecodeLimits;

use crate::tls::TlsContext;

/// The largest handshake or handshake-reply frame read (or sent): a handshake is a cluster name
/// and two addresses, and a connection that has not handshaken must not make us buffer more.
pub const MAX_HANDSHAKE_FRAME: usize = 16 * 1024;

/// Transport settings (`transport.*`).
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// Largest frame accepted or sent, in bytes.
    pub maximum_frame_size: usize,
    /// Messages queued per peer on the control lane before new ones are dropped (and counted).
    pub outbound_control_queue_size: usize,
    /// Messages queued per peer on the user lane before new ones are dropped (and counted).
    pub outbound_user_queue_size: usize,
    /// Limit on establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Limit on completing the handshake, both ways (also how long a connection may stay
    /// unauthenticated).
    pub handshake_timeout: Duration,
    /// A peer lane with no traffic for this long ends and closes its connection (it reopens on
    /// demand). The receiving side closes an inbound connection only after twice this without
    /// traffic (half-open links), so the side that writes always closes first, under its
    /// lane's lock, and no message is written into a connection its peer is closing.
    pub idle_timeout: Duration,
    /// A frame whose first bytes arrived must be complete within this, or its connection is
    /// closed (a peer that starts frames and stalls holds no buffer for long).
    pub frame_read_timeout: Duration,
    /// Most inbound connections at once; beyond, new ones are accepted and closed at once.
    pub maximum_inbound_connections: usize,
    /// Most inbound connections not yet past our handshake; beyond, the oldest of them is
    /// closed to make room (stalled strangers never keep a member's reconnection out).
    pub maximum_unauthenticated_connections: usize,
    /// Most inbound connections past the handshake whose peer is not a current member
    /// (joiners, strangers that speak our handshake); beyond, new ones are refused. A peer that
    /// becomes a member leaves this pool, so members are never starved by strangers.
    pub maximum_non_member_connections: usize,
    /// Shortest reconnect delay. Each failed attempt waits a random delay between this and a
    /// window that starts at twice this and doubles per attempt up to the maximum (jitter, so
    /// that peers cut off together do not all retry at the same instants).
    pub reconnect_backoff_min: Duration,
    /// Longest reconnect delay.
    pub reconnect_backoff_max: Duration,
    /// Bounds applied while decoding messages.
    pub decode_limits: DecodeLimits,
    /// Messages from the network queued for the node before new ones are dropped.
    pub inbound_queue_size: usize,
    /// User payloads from the network queued for their consumer. When it is full the
    /// connection stops being read (TCP back-pressure reaches the sender's bounded queue)
    /// rather than dropping; separate from the membership queue so that a slow user consumer
    /// never delays heartbeats.
    pub inbound_user_queue_size: usize,
    /// Most peer lanes with a writer at once (each peer uses up to one per lane).
    pub maximum_peers: usize,
    /// Mutual TLS between nodes (`transport.tls.*`); `None`: plain TCP.
    pub tls: Option<TlsContext>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            maximum_frame_size: 8 * 1024 * 1024,
            outbound_control_queue_size: 3072,
            outbound_user_queue_size: 65_536,
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            frame_read_timeout: Duration::from_secs(10),
            maximum_inbound_connections: 4096,
            maximum_unauthenticated_connections: 64,
            maximum_non_member_connections: 64,
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
            decode_limits: DecodeLimits::default(),
            inbound_queue_size: 65_536,
            inbound_user_queue_size: 65_536,
            // Two lanes for each node of a 30 000-node cluster.
            maximum_peers: 65_536,
            tls: None,
        }
    }
}
