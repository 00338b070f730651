//! The TCP transport between nodes, where it always was: `shardik-transport`'s, re-exported.
//!
//! The node driver owns a [`Transport`]; sharding sends with [`UserSender`]s and takes user
//! payloads through a [`UserSink`]. TLS between nodes is [`crate::tls`], also that crate's.

pub use shardik_transport::{
    Backpressure, Identified, Inbound, InboundCounts, InboundUser, Lane, MAX_HANDSHAKE_FRAME,
    MemberDirectory, Outgoing, Receivers, Refused, Transport, TransportConfig, TransportError,
    UserConnection, UserInbound, UserSender, UserSink, limits, recipient,
};
