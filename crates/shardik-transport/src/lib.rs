//! The TCP transport between shardik nodes, and mutual TLS over it.
//!
//! This crate carries membership messages and user payloads from one node to another: it
//! listens, dials, handshakes, frames, bounds and counts. It decides nothing about the cluster:
//! who is a member is told to it by its owner ([`MemberDirectory`], kept up to date by the
//! runtime's node driver), and what a message means is the protocol cores' business. It is
//! what `shardik-runtime` links for its network; an application uses it through the runtime
//! (`shardik_runtime::transport`, `shardik_runtime::tls`) or the `shardik` facade, not alone.
//! It needs tokio and nothing of the runtime above it: no node, no sharding, no management API.
//!
//! # The transport
//!
//! Connections are one-way, as in Akka's Artery: a node writes to a peer only over
//! connections it opened itself, and only reads from connections the peer opened. Each peer
//! gets one outbound connection per [`Lane`], each fed by its own bounded queue, so membership
//! traffic (heartbeats, gossip) never waits behind user messages. A writer drains everything
//! queued into one buffer before writing, so many small messages share a syscall.
//!
//! Nothing read from the network can panic the node or make it allocate without bound:
//! frames are capped by `maximum-frame-size` before any allocation and their buffers grow with
//! what arrives, a started frame must complete within `frame-read-timeout`, compressed gossip is
//! capped by a decompression limit, inbound connections are capped in total, while handshaking
//! and for peers that are not members ([`limits`]), and every rejected connection or message is
//! counted and logged (at a bounded rate where a stranger could flood the log, [`log_limit`]).
//!
//! User traffic is accepted only from current members (`members.rs`, kept up to date by the
//! node driver); membership traffic from anyone who completed the handshake, since joiners must
//! get through and the membership core applies its own rules.
//!
//! # TLS
//!
//! [`tls`] holds the identity rule, the contexts (between nodes, and for the runtime's HTTPS
//! management port), certificate issuing for `shardik certs`, and the classification of
//! handshake failures. With the `tls` feature off there is no rustls in the build:
//! `tls::TlsContext` and `tls::PeerCertificate` are uninhabited types (`tls/absent.rs`), so the
//! code that holds an `Option` of them needs no `cfg` of its own.
//!
//! # Metrics and log targets
//!
//! The metrics this crate emits are named in [`metrics`]; the runtime lists and describes them
//! with its own, under the same names as before this crate was split from it. For the same
//! reason its log lines keep the targets they had in the runtime (`shardik_runtime::transport::
//! inbound`, `shardik_runtime::tls::context`, ...): a filter such as `shardik_runtime=debug`
//! still covers the transport, and the lines read as they did. A module that logs says so in
//! its `LOG_TARGET`.
//!
//! # Layout
//!
//! [`Transport`] (`transport.rs`) is the node's handle: it starts the accept loop
//! (`inbound.rs`) and one writer per peer and lane (`outbound.rs`, dialling in `dial.rs`);
//! [`UserSender`] (`user_sender.rs`) gives other tasks writers of their own. All of them share
//! one `Shared` (`shared.rs`), which stands below them and knows none of them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backoff;
mod config;
mod conn;
mod connect_errors;
mod dial;
mod driver_notes;
mod identified;
mod inbound;
mod lane;
pub mod limits;
pub mod log_limit;
mod members;
pub mod metrics;
mod outbound;
mod received;
pub mod recipient;
mod refused;
mod shared;
pub mod task;
// The module's docs describe TLS as built; without the `tls` feature they name items left out.
#[cfg_attr(not(feature = "tls"), allow(rustdoc::broken_intra_doc_links))]
pub mod tls;
#[cfg(feature = "tls")]
mod tls_conn;
mod transport;
mod user_sender;

pub use config::{MAX_HANDSHAKE_FRAME, TransportConfig};
pub use identified::Identified;
pub use lane::{Lane, Outgoing};
pub use members::MemberDirectory;
pub use received::{Backpressure, Inbound, InboundUser, UserConnection, UserSink};
pub use refused::Refused;
pub use transport::{InboundCounts, Receivers, Transport, TransportError, UserInbound};
pub use user_sender::UserSender;
