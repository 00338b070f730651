//! The store as a witness: what a lease's row in the store proves about its holder.
//!
//! A holder counts on its lease only until its own deadline, which comes before the store's
//! expiry (see the module above), and a lease that expired is never renewed. So once the
//! store, judging by its own clock, says a member's lease has expired with nobody holding it
//! since, that member no longer serves what the lease protects, whether it crashed, froze or
//! lost the store: silence from a member becomes evidence about that one lease. The
//! coordinator uses it to move a silent member's shards before the member is downed (see
//! `sharding/coordinator/takeover.rs`); a lease still held says nothing, and nothing moves.

use std::time::Duration;

use crate::address::UniqueAddress;

/// The owner name a node holds its leases under: its address and uid (`host:port#uid`), so
/// that a restarted node is a new owner and never mistakes its predecessor's tenure for its
/// own. The runtime and the simulator both name owners with it, so the core compares names it
/// made and never parses one.
pub fn owner_name(node: &UniqueAddress) -> String {
    node.to_string()
}

/// A lease's row as the store reported it when read (the store's `LeaseInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreLease {
    /// The last owner; `None` once released.
    pub owner: Option<String>,
    /// The token of the last tenure.
    pub token: u64,
    /// What the lease had left by the store's clock when it was read; zero once expired or
    /// released.
    pub time_left: Duration,
}

/// What a lease read from the store says about a suspect holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lapse {
    /// The suspect held the lease (tenure `token`) and it expired by the store's clock, with
    /// nobody holding it since: the suspect no longer serves under it, and never will again
    /// under that tenure.
    Lapsed {
        /// The token of the suspect's last tenure.
        token: u64,
    },
    /// The suspect still holds it, for `time_left` by the store's clock: it may still serve.
    Held {
        /// What it has left.
        time_left: Duration,
    },
    /// The lease says nothing about the suspect: never taken, released, or last held by
    /// another owner. The suspect may have been given the shard without ever taking its lease
    /// (and messages may be on their way to it), so this proves nothing either way.
    NotTheSuspects,
}

impl Lapse {
    /// Judges `lease` (`None`: the store has no row for it) about `suspect`.
    pub fn judge(lease: Option<&StoreLease>, suspect: &UniqueAddress) -> Lapse {
        let Some(lease) = lease else {
            return Lapse::NotTheSuspects;
        };
        if lease.owner.as_deref() != Some(owner_name(suspect).as_str()) {
            return Lapse::NotTheSuspects;
        }
        if lease.time_left.is_zero() {
            Lapse::Lapsed { token: lease.token }
        } else {
            Lapse::Held {
                time_left: lease.time_left,
            }
        }
    }
}

#[cfg(test)]
mod tests;
