//! One line of text for a cluster event ([`describe`]), as the timeline and the reports show
//! it.
//!
//! Kept apart from `effects.rs`, which adds methods to the world, so that the world can offer
//! [`describe`] to its users without importing that file.

use shardik_core::membership::{ClusterEvent, Member};

/// One line for a cluster event.
pub fn describe(ev: &ClusterEvent) -> String {
    let who = |m: &Member| m.addr.address.host.clone();
    match ev {
        ClusterEvent::MemberJoined(m) => format!("MemberJoined {}", who(m)),
        ClusterEvent::MemberWeaklyUp(m) => format!("MemberWeaklyUp {}", who(m)),
        ClusterEvent::MemberUp(m) => format!("MemberUp {} (up#{})", who(m), m.up_number),
        ClusterEvent::MemberLeft(m) => format!("MemberLeft {}", who(m)),
        ClusterEvent::MemberExited(m) => format!("MemberExited {}", who(m)),
        ClusterEvent::MemberDowned(m) => format!("MemberDowned {}", who(m)),
        ClusterEvent::MemberPreparingForShutdown(m) => {
            format!("MemberPreparingForShutdown {}", who(m))
        }
        ClusterEvent::MemberReadyForShutdown(m) => format!("MemberReadyForShutdown {}", who(m)),
        ClusterEvent::MemberRemoved { member, previous } => {
            format!("MemberRemoved {} (was {previous})", who(member))
        }
        ClusterEvent::UnreachableMember(m) => format!("UnreachableMember {}", who(m)),
        ClusterEvent::ReachableMember(m) => format!("ReachableMember {}", who(m)),
        ClusterEvent::LeaderChanged(l) => format!(
            "LeaderChanged {}",
            l.as_ref()
                .map_or("none".to_string(), |a| a.address.host.to_string())
        ),
        ClusterEvent::RoleLeaderChanged { role, leader } => format!(
            "RoleLeaderChanged {role} {}",
            leader
                .as_ref()
                .map_or("none".to_string(), |a| a.address.host.to_string())
        ),
        // The enum is open to new events (`#[non_exhaustive]`).
        other => format!("{other:?}"),
    }
}
