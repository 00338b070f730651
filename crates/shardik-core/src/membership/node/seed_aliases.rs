//! Seeds named by an alias: a seed configured as `seeds.svc:2552` (a DNS alias, a load
//! balancer, an IP where the node's identity is a name) is answered by a node whose identity
//! is another address (`pod-0.svc:2552`).
//!
//! The joiner asks the seed under the configured address, but the answer (`InitJoinAck`,
//! `InitJoinNack`, `Welcome`) comes from the node's identity, which the sender rules
//! (`senders.rs`) would refuse as not from a seed asked. The runtime learns who answered from
//! the handshake reply on the connection it dialled and says so with
//! [`Input::PeerIdentified`](super::Input::PeerIdentified); from then on that identity counts
//! as that seed: its answers are taken, the `Join` goes to the identity (from the
//! `InitJoinAck`'s sender), and a seed that turns out to be this very node is treated as
//! this node (never asked, and a first seed that is this node forms the cluster).
//!
//! The alias is never a member: members are the identities that send `Join`. Only configured
//! seeds and the current join target are learnt, so the table holds at most one entry per
//! configured seed plus one. A newer identification replaces an older one (the alias moved to
//! another node, seen when the connection to it was made again).

use super::io::Effect;
use super::{Membership, Phase};
use crate::address::{Address, UniqueAddress};
use crate::time::Instant;

impl Membership {
    /// The identity's address behind a configured seed or join target: what the runtime found
    /// answering there, or the address itself.
    pub(super) fn identity_of<'a>(&'a self, configured: &'a Address) -> &'a Address {
        self.seed_identities.get(configured).unwrap_or(configured)
    }

    /// Whether `address` is one of `seeds`, under its configured address or its identity.
    pub(super) fn is_seed(&self, seeds: &[Address], address: &Address) -> bool {
        seeds
            .iter()
            .any(|s| s == address || self.identity_of(s) == address)
    }

    /// How many distinct nodes other than this one the seed list names (as far as known).
    pub(super) fn other_seed_count(&self) -> usize {
        let Phase::Seeding { seeds, .. } = &self.phase else {
            return 0;
        };
        let me = &self.self_node.address;
        seeds
            .iter()
            .map(|s| self.identity_of(s))
            .filter(|a| *a != me)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }

    /// The runtime found `node` answering at `dialled`.
    pub(super) fn peer_identified(
        &mut self,
        now: Instant,
        dialled: Address,
        node: UniqueAddress,
        out: &mut Vec<Effect>,
    ) {
        let relevant = match &self.phase {
            Phase::Seeding { seeds, .. } => seeds.contains(&dialled),
            Phase::Joining { target, seeds, .. } => *target == dialled || seeds.contains(&dialled),
            _ => false,
        };
        if !relevant {
            return;
        }
        if dialled == node.address {
            // Back to naming itself (the alias now points at the node it names).
            self.seed_identities.remove(&dialled);
        } else {
            self.seed_identities.insert(dialled, node.address);
        }
        self.seeds_identified(now, out);
    }

    /// What a newly known identity changes while joining: a seed list that names only this
    /// node forms the cluster now; a first seed that is this node forms it `seed-node-timeout`
    /// after seeding began unless another seed takes us; a join target that is this node
    /// forms it now (as joining one's own address does).
    fn seeds_identified(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let me = self.self_node.address.clone();
        match &self.phase {
            Phase::Seeding {
                seeds,
                started_at,
                form_cluster_at,
                ..
            } => {
                if seeds.iter().all(|s| *self.identity_of(s) == me) {
                    return self.join_self(now, out);
                }
                if form_cluster_at.is_none() && *self.identity_of(&seeds[0]) == me {
                    let at = *started_at + self.cfg.seed_node_timeout;
                    if let Phase::Seeding {
                        form_cluster_at, ..
                    } = &mut self.phase
                    {
                        *form_cluster_at = Some(at);
                    }
                    self.timers.join = Some(self.timers.join.map_or(at, |t| t.min(at)));
                }
            }
            Phase::Joining { target, .. } if *self.identity_of(target) == me => {
                self.join_self(now, out);
            }
            _ => {}
        }
    }
}
