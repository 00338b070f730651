//! Who may say what: the first gate every network message passes.
//!
//! The sender of a message is the peer its connection authenticated (its certificate with
//! mutual TLS, the address it gave in our handshake without), handed in with the message as
//! [`Input::Message`](super::Input::Message)`::from`, never a field the message carries. A
//! message that names a sender of its own must name that peer. Then:
//!
//! | message | accepted from |
//! |---|---|
//! | `InitJoin`, `Join` | anyone (this is how a node asks to become a member) |
//! | `InitJoinAck`, `InitJoinNack` | a seed node this node is asking, while it asks |
//! | `Welcome` | the node this node sent its `Join` to (or a seed, while joining through seeds) |
//! | `JoinRefused` | the node this node sent its `Join` to, while it waits for the answer (never to a member: a refusal cannot stop one) |
//! | gossip, `ExitingConfirmed`, answers to heartbeats | a member (gossip from an unknown incarnation gets `NotKnown` in `exchange.rs`) |
//! | `Heartbeat` | anyone: it is answered and changes nothing (see below) |
//! | `Leave`, `Down` | a member that is not on its way out (Down, Exiting) |
//! | `Quarantined` | a member that is not on its way out, or a newer incarnation at a member's address |
//!
//! A seed or join target named by an alias is, for these rules, also the node the runtime
//! found answering there (`seed_aliases.rs`).
//!
//! Heartbeats are answered whoever sends them, as the reference does: the answer tells the
//! sender nothing our handshake did not, and changes no state here. A joiner monitors the
//! members from the moment one of them welcomed it, before the others have heard of it (and,
//! if its welcomer dies first, until it has joined again through them): refusing its
//! heartbeats made it see every member unreachable, and its resolver downed them or itself.
//!
//! A refused message changes nothing; the runtime counts and logs it. Without TLS a peer's
//! address is only what it claims, so these rules keep out strangers that do not impersonate a
//! member; with TLS the certificate must name the host it claims (see `docs/SECURITY.md`).

use super::io::DropReason;
use super::{Membership, Phase};
use crate::address::{Address, UniqueAddress};
use crate::membership::member::MemberStatus;
use crate::membership::messages::Message;

impl Membership {
    /// Why `msg`, authenticated as coming from `from`, must be refused before any concern
    /// handles it; `None` when it may go on (the concern may still drop it for its own reasons).
    pub(super) fn sender_refusal(&self, from: &UniqueAddress, msg: &Message) -> Option<DropReason> {
        if msg.sender().is_some_and(|named| named != from) {
            return Some(DropReason::SenderMismatch);
        }
        let allowed = match msg {
            Message::InitJoin { .. } | Message::Join { .. } => true,
            Message::InitJoinAck { .. } | Message::InitJoinNack { .. } => match &self.phase {
                Phase::Seeding { seeds, .. } => self.is_seed(seeds, &from.address),
                // Late answers are the concern's to drop as unexpected.
                _ => true,
            },
            Message::Welcome { .. } => match &self.phase {
                Phase::Seeding { seeds, .. } => self.is_seed(seeds, &from.address),
                Phase::Joining { target, seeds, .. } => {
                    self.identity_of(target) == &from.address
                        || *target == from.address
                        || self.is_seed(seeds, &from.address)
                }
                // A member checks a rejoin's welcome against the node it asked
                // (`not_known.rs`); in other phases the concern drops it.
                _ => true,
            },
            Message::JoinRefused { .. } => match &self.phase {
                Phase::Joining { target, .. } => *target == from.address,
                _ => false,
            },
            Message::GossipStatus { .. } | Message::GossipEnvelope { .. } => {
                // The exchange refuses unknown senders itself, and tells them `NotKnown`.
                true
            }
            Message::Heartbeat { .. } => true,
            Message::ExitingConfirmed { .. } | Message::HeartbeatRsp { .. } => {
                self.gossip.has_member(from)
            }
            Message::Leave { .. } | Message::Down { .. } => self.is_steady_member(from),
            Message::Quarantined { .. } => {
                self.is_steady_member(from)
                    || (self.gossip.member(from).is_none() && self.has_member_at(&from.address))
            }
            Message::NotKnown { .. } => {
                self.gossip.has_member(from) || self.has_member_at(&from.address)
            }
        };
        (!allowed).then_some(DropReason::NotFromMember)
    }

    /// Whether `node` is a member of this node's view that is not on its way out: its word on
    /// membership counts. A Down or Exiting member is being removed; its view is no authority.
    fn is_steady_member(&self, node: &UniqueAddress) -> bool {
        self.gossip.member(node).is_some_and(|m| {
            !matches!(
                m.status,
                MemberStatus::Down | MemberStatus::Exiting | MemberStatus::Removed
            )
        })
    }

    /// Whether some incarnation at `address` is a member here (an unknown incarnation there is
    /// likely a newer one of that member, which may know what this node missed).
    fn has_member_at(&self, address: &Address) -> bool {
        self.gossip.members.keys().any(|n| n.address == *address)
    }
}
