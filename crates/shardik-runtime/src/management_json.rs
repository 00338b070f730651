//! The JSON bodies of the management HTTP API, with Akka Management's field names: what its
//! routes answer (served by `http`) and what cluster bootstrap's probes read from another
//! node's `GET /bootstrap/seed-nodes` (`bootstrap::probe`). They live below both, so that the
//! client and the server share one vocabulary without either importing the other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shardik_core::membership::{Member, UniqueAddress};

use crate::node::handle::MembershipSnapshot;

/// `GET /cluster/members` (Akka Management's `ClusterMembers`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembers {
    /// This node, `host:port`.
    pub self_node: String,
    /// All members.
    pub members: Vec<ClusterMember>,
    /// Unreachable members and their observers.
    pub unreachable: Vec<ClusterUnreachableMember>,
    /// The leader, if any.
    pub leader: Option<String>,
    /// The oldest member, if any.
    pub oldest: Option<String>,
    /// The oldest member per role.
    pub oldest_per_role: BTreeMap<String, String>,
}

/// One member (Akka Management's `ClusterMember`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMember {
    /// `host:port`.
    pub node: String,
    /// The incarnation uid, as a decimal string (a JSON number would lose precision above
    /// 2^53 in JavaScript and many JSON tools).
    pub node_uid: String,
    /// `Joining`, `WeaklyUp`, `Up`, `Leaving`, `Exiting`, `Down`, …
    pub status: String,
    /// The member's roles.
    pub roles: Vec<String>,
}

/// One unreachable member (Akka Management's `ClusterUnreachableMember`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMember {
    /// `host:port`.
    pub node: String,
    /// The members that observe it as unreachable, `host:port`.
    pub observed_by: Vec<String>,
}

/// `GET /bootstrap/seed-nodes` (Akka Management's `SeedNodes`): what cluster bootstrap on
/// another node asks a contact point. `seedNodes` lists at most [`MAX_EXPOSED_SEED_NODES`]
/// members that are Up, WeaklyUp or Joining and reachable, lowest addresses first; empty
/// while this node is in no cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedNodes {
    /// This node's cluster address, `host:port`.
    pub self_node: String,
    /// Members to join through.
    pub seed_nodes: Vec<ClusterMember>,
}

/// Seed nodes `GET /bootstrap/seed-nodes` lists at most (Akka's
/// `httpMaxSeedNodesToExpose`).
pub const MAX_EXPOSED_SEED_NODES: usize = 5;

impl SeedNodes {
    /// The answer for a snapshot.
    pub fn from_snapshot(s: &MembershipSnapshot) -> Self {
        use shardik_core::membership::MemberStatus;
        let unreachable: Vec<&UniqueAddress> = s.unreachable.iter().map(|u| &u.node).collect();
        SeedNodes {
            self_node: s.self_node.address.to_string(),
            seed_nodes: s
                .members
                .iter()
                .filter(|m| {
                    matches!(
                        m.status,
                        MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Joining
                    ) && !unreachable.contains(&&m.addr)
                })
                .take(MAX_EXPOSED_SEED_NODES)
                .map(ClusterMember::from_member)
                .collect(),
        }
    }
}

/// A JSON answer that is only a message (all error answers have this shape).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// What happened, or what went wrong and what to do.
    pub message: String,
}

impl ClusterMember {
    /// The JSON view of one member.
    pub(crate) fn from_member(m: &Member) -> Self {
        ClusterMember {
            node: m.addr.address.to_string(),
            node_uid: m.addr.uid.to_string(),
            status: m.status.as_str().to_string(),
            roles: m.roles.iter().cloned().collect(),
        }
    }
}

impl ClusterMembers {
    /// The JSON view of a snapshot.
    pub fn from_snapshot(s: &MembershipSnapshot) -> Self {
        let node = |u: &UniqueAddress| u.address.to_string();
        ClusterMembers {
            self_node: node(&s.self_node),
            members: s.members.iter().map(ClusterMember::from_member).collect(),
            unreachable: s
                .unreachable
                .iter()
                .map(|u| ClusterUnreachableMember {
                    node: node(&u.node),
                    observed_by: u.observed_by.iter().map(node).collect(),
                })
                .collect(),
            leader: s.leader.as_ref().map(node),
            oldest: s.oldest.as_ref().map(node),
            oldest_per_role: s
                .oldest_per_role
                .iter()
                .map(|(role, u)| (role.clone(), node(u)))
                .collect(),
        }
    }
}
