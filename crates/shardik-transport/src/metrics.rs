//! The names of the metrics the transport and TLS emit. The runtime re-exports them beside
//! its own (`shardik_runtime::metrics`), lists them and registers their descriptions; they
//! are defined here, where they are emitted, so that this crate needs nothing of the runtime.

use shardik_core::membership::Message;

/// Gossip messages received (counter).
pub const GOSSIP_RECEIVED_TOTAL: &str = "shardik_gossip_received_total";

/// Gossip bytes on the wire (counter; label `direction` = `in` | `out`).
pub const GOSSIP_BYTES_TOTAL: &str = "shardik_gossip_bytes_total";

/// Heartbeat bytes on the wire (counter; label `direction` = `in` | `out`).
pub const HEARTBEAT_BYTES_TOTAL: &str = "shardik_heartbeat_bytes_total";

/// Messages dropped, by reason (counter; label `reason`). Nothing is dropped uncounted.
/// `not-a-member`: a user frame from a peer that is not a current member.
pub const DROPPED_MESSAGES_TOTAL: &str = "shardik_dropped_messages_total";

/// Transport frames (counter; labels `direction` = `in` | `out`, `lane` = `control` | `user`).
pub const TRANSPORT_FRAMES_TOTAL: &str = "shardik_transport_frames_total";

/// Transport bytes (counter; labels `direction`, `lane`).
pub const TRANSPORT_BYTES_TOTAL: &str = "shardik_transport_bytes_total";

/// Open transport connections (gauge).
pub const TRANSPORT_CONNECTIONS: &str = "shardik_transport_connections";

/// Connections refused, or closed for misbehaving, by reason (counter; label `reason`:
/// `too-many-connections` (`transport.maximum-inbound-connections`), `too-many-unauthenticated`
/// (the oldest connection still handshaking closed for a newer one,
/// `transport.maximum-unauthenticated-connections`), `too-many-non-members`
/// (`transport.maximum-non-member-connections`), `accept-failed` (out of file descriptors and
/// the like), `frame-read-timeout`, `handshake-timeout`, `malformed-handshake`, `no-handshake`,
/// `handshake-refused` (another cluster name or protocol version), `wrong-recipient` (the
/// handshake names another node), `recipient-unresolved` (it names a host this node could not
/// resolve), `refused-by-peer`, `peer-requires-tls` (this node, without TLS, dialled
/// a node that answered in TLS), and with TLS `tls-<reason>` for a failed TLS
/// handshake (`tls-unknown-ca`, `tls-expired`, `tls-wrong-cluster`, `tls-no-certificate`,
/// `tls-bad-certificate`, `tls-not-tls`, `tls-closed`, `tls-other`) and `tls-bad-name` for a
/// client certificate that does not name the host the client claims, or a dialled node's
/// certificate that does not name the host it answered as).
pub const TRANSPORT_REFUSED_TOTAL: &str = "shardik_transport_refused_total";

/// Failed TLS handshakes between nodes (counter; labels `direction` = `inbound` or
/// `outbound`, `reason` = `tls-<reason>` as in [`TRANSPORT_REFUSED_TOTAL`]). Outbound ones
/// include our certificate refused by the peer, seen on the first read after the handshake.
pub const TRANSPORT_TLS_FAILURES_TOTAL: &str = "shardik_transport_tls_failures_total";

/// TLS sessions established between nodes (counter; label `direction` = `inbound` or
/// `outbound`): inbound once the client's certificate is verified, outbound once the peer
/// accepted our handshake over the session (so it accepted our certificate too). A count that
/// keeps rising under steady traffic means connections churn.
pub const TRANSPORT_TLS_HANDSHAKES_TOTAL: &str = "shardik_transport_tls_handshakes_total";

/// Successful reloads of changed TLS certificate, key or CA files (counter; label `port` =
/// `cluster` for `transport.tls`, `management` for `management.http.tls`).
pub const TLS_RELOADS_TOTAL: &str = "shardik_tls_reloads_total";

/// Changed TLS files that could not be loaded, so the previous ones stayed in use (counter;
/// label `port` as for [`TLS_RELOADS_TOTAL`]; counted once per change, not per connection).
pub const TLS_RELOAD_FAILURES_TOTAL: &str = "shardik_tls_reload_failures_total";

/// Messages dropped because an outbound queue was full (counter; label `lane`).
pub const OUTBOUND_QUEUE_OVERFLOW_TOTAL: &str = "shardik_outbound_queue_overflow_total";

/// Counts the bytes of a membership frame under the gossip or heartbeat metric.
pub(crate) fn count_membership_bytes(msg: &Message, direction: &'static str, bytes: usize) {
    let name = match msg {
        Message::Heartbeat { .. } | Message::HeartbeatRsp { .. } => HEARTBEAT_BYTES_TOTAL,
        Message::GossipEnvelope { .. } | Message::GossipStatus { .. } | Message::Welcome { .. } => {
            GOSSIP_BYTES_TOTAL
        }
        _ => return,
    };
    metrics::counter!(name, "direction" => direction).increment(bytes as u64);
    if direction == "in" && matches!(msg, Message::GossipEnvelope { .. }) {
        metrics::counter!(GOSSIP_RECEIVED_TOTAL).increment(1);
    }
}
