//! The state all tasks of one transport share. It stands below every other part of the
//! transport (they all read it; it knows none of them but the small tables it holds), so no
//! part has to reach up to the transport's handle for it.

use std::sync::{Arc, OnceLock};

use shardik_wire::LocalIdentity;

use crate::config::TransportConfig;
use crate::connect_errors::ConnectErrors;
use crate::identified::Identified;
use crate::limits::{Pending, Pool};
use crate::members::MemberDirectory;
use crate::received::UserSink;
use crate::recipient::Recipient;
use crate::refused::Refused;
#[cfg(feature = "tls")]
use crate::tls::HandshakeFailureLog;

/// What the transport's handle, its senders, its accept loop and every lane writer and
/// connection reader share. The transport builds it once at start; the tasks hold it by `Arc`.
pub(crate) struct Shared {
    pub(crate) config: TransportConfig,
    pub(crate) identity: LocalIdentity,
    /// Judges whether a handshake's intended recipient is this node (its identity, bind
    /// address, socket addresses, and names that resolve to them).
    pub(crate) recipient: Recipient,
    /// Who answered where our lanes dialled, when that was not the dialled address.
    pub(crate) identified: Arc<Identified>,
    /// Peers whose port refused a connection, for the node driver.
    pub(crate) refused: Arc<Refused>,
    /// Who is a member now (user traffic only from them; the non-member pool for the rest).
    pub(crate) members: MemberDirectory,
    /// Inbound connections, all of them.
    pub(crate) inbound: Arc<Pool>,
    /// Inbound connections not yet past our handshake.
    pub(crate) pending: Arc<Pending>,
    /// Inbound connections past the handshake whose peer is not a member.
    pub(crate) non_members: Arc<Pool>,
    /// Where readers hand user payloads once one is installed (else to the user queue).
    pub(crate) user_sink: OnceLock<Arc<dyn UserSink>>,
    /// Logs failed TLS handshakes, both ways, at most once per peer IP and reason per
    /// interval (strangers can fail as many as they like).
    #[cfg(feature = "tls")]
    pub(crate) tls_failures: HandshakeFailureLog,
    /// Why dialling each peer last failed, while it keeps failing.
    pub(crate) connect_errors: ConnectErrors,
}
