//! The handshake that opens every connection: protocol version, cluster name, the sender's
//! unique address and whom it believes it is talking to.
//!
//! The connecting side sends a [`Handshake`] frame first; the accepting side checks it with
//! [`check_handshake`] and answers with a [`HandshakeReply`]: accepted (naming its own
//! incarnation) or refused with a reason, after which it closes the connection.

use prost::Message as _;
use shardik_core::membership::{Address, UniqueAddress};

use crate::codec::{
    DecodeError, address_from_pb, address_to_pb, required_unique, unique_address_to_pb,
};
use crate::pb::t as pb;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The oldest protocol version this build still accepts from a peer.
pub const MIN_PROTOCOL_VERSION: u32 = 1;

/// Who this node is, as far as the handshake is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalIdentity {
    /// The cluster this node belongs to.
    pub cluster_name: String,
    /// This incarnation.
    pub address: UniqueAddress,
}

/// The first frame on a connection, sent by the connecting side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The sender's protocol version ([`PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// The sender's cluster name.
    pub cluster_name: String,
    /// The sender's incarnation.
    pub from: UniqueAddress,
    /// Whom the sender believes it is talking to, if it knows.
    pub to: Option<Address>,
}

impl Handshake {
    /// The handshake `me` sends when connecting to `to`.
    pub fn new(me: &LocalIdentity, to: Option<Address>) -> Self {
        Handshake {
            protocol_version: PROTOCOL_VERSION,
            cluster_name: me.cluster_name.clone(),
            from: me.address.clone(),
            to,
        }
    }

    /// The protobuf encoding (payload of a handshake frame).
    pub fn encode(&self) -> Vec<u8> {
        pb::Handshake {
            protocol_version: self.protocol_version,
            cluster_name: self.cluster_name.clone(),
            from: Some(unique_address_to_pb(&self.from)),
            to: self.to.as_ref().map(address_to_pb),
        }
        .encode_to_vec()
    }

    /// Decodes and validates a handshake payload.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let p = pb::Handshake::decode(bytes)?;
        Ok(Handshake {
            protocol_version: p.protocol_version,
            cluster_name: p.cluster_name,
            from: required_unique(p.from, "Handshake.from")?,
            to: p
                .to
                .map(|a| address_from_pb(a, || "Handshake.to".to_string()))
                .transpose()?,
        })
    }
}

/// Acceptance of a handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeAck {
    /// The accepting incarnation.
    pub from: UniqueAddress,
}

/// Refusal of a handshake; the refusing side closes the connection after sending it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeRefused {
    /// Why, for the peer's log.
    pub reason: String,
}

impl From<RefusalReason> for HandshakeRefused {
    fn from(r: RefusalReason) -> Self {
        HandshakeRefused {
            reason: r.to_string(),
        }
    }
}

/// The answer to a [`Handshake`] (payload of a handshake-ack frame).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeReply {
    /// The connection is accepted.
    Accepted(HandshakeAck),
    /// The connection is refused.
    Refused(HandshakeRefused),
}

impl HandshakeReply {
    /// The protobuf encoding.
    pub fn encode(&self) -> Vec<u8> {
        use pb::handshake_ack::Result as R;
        let result = match self {
            HandshakeReply::Accepted(a) => R::AcceptedBy(unique_address_to_pb(&a.from)),
            HandshakeReply::Refused(r) => R::Refused(pb::HandshakeRefused {
                reason: r.reason.clone(),
            }),
        };
        pb::HandshakeAck {
            result: Some(result),
        }
        .encode_to_vec()
    }

    /// Decodes and validates a handshake-ack payload.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        use pb::handshake_ack::Result as R;
        let p = pb::HandshakeAck::decode(bytes)?;
        match p
            .result
            .ok_or(DecodeError::Missing("HandshakeAck.result"))?
        {
            R::AcceptedBy(u) => Ok(HandshakeReply::Accepted(HandshakeAck {
                from: required_unique(Some(u), "HandshakeAck.accepted_by")?,
            })),
            R::Refused(r) => Ok(HandshakeReply::Refused(HandshakeRefused {
                reason: r.reason,
            })),
        }
    }
}

/// Why a handshake is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RefusalReason {
    /// The peer belongs to another cluster.
    #[error("cluster name differs: this node is in cluster `{ours}`, the peer in `{theirs}`")]
    ClusterName {
        /// Our cluster name.
        ours: String,
        /// The peer's cluster name.
        theirs: String,
    },
    /// The peer speaks a protocol version this build does not.
    #[error(
        "incompatible protocol version {theirs}: this node speaks {min}..={max}",
        min = MIN_PROTOCOL_VERSION,
        max = PROTOCOL_VERSION
    )]
    ProtocolVersion {
        /// The peer's version.
        theirs: u32,
    },
    /// The peer meant to reach another address (stale configuration, a reused port).
    #[error("the peer wanted to reach {expected}, but this node is {ours}")]
    WrongRecipient {
        /// Our address.
        ours: Address,
        /// Whom the peer believed it was talking to.
        expected: Address,
    },
    /// The peer named this node by a host name that this node could not resolve, so it
    /// cannot tell whether the name is one of its own.
    #[error(
        "the peer wanted to reach {expected}, a name this node ({ours}) could not resolve: {error}"
    )]
    UnresolvedRecipient {
        /// Our address.
        ours: Address,
        /// Whom the peer believed it was talking to.
        expected: Address,
        /// Why the name could not be resolved.
        error: String,
    },
}

/// Whether `ours` accepts the handshake `theirs`: same cluster name, a supported protocol
/// version, and (if the peer says whom it is calling) our address, exactly.
///
/// A node whose identity is not the only name or address peers reach it by (bound to
/// `0.0.0.0`, behind NAT, named by aliases) checks the first two with
/// [`check_handshake_peer`] and judges the recipient itself, since that may take a name
/// lookup.
pub fn check_handshake(ours: &LocalIdentity, theirs: &Handshake) -> Result<(), RefusalReason> {
    check_handshake_peer(ours, theirs)?;
    if let Some(to) = &theirs.to
        && *to != ours.address.address
    {
        return Err(RefusalReason::WrongRecipient {
            ours: ours.address.address.clone(),
            expected: to.clone(),
        });
    }
    Ok(())
}

/// The checks of [`check_handshake`] that concern the peer alone: a supported protocol
/// version and the same cluster name.
pub fn check_handshake_peer(ours: &LocalIdentity, theirs: &Handshake) -> Result<(), RefusalReason> {
    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&theirs.protocol_version) {
        return Err(RefusalReason::ProtocolVersion {
            theirs: theirs.protocol_version,
        });
    }
    if theirs.cluster_name != ours.cluster_name {
        return Err(RefusalReason::ClusterName {
            ours: ours.cluster_name.clone(),
            theirs: theirs.cluster_name.clone(),
        });
    }
    Ok(())
}
