//! The join check that keeps a cluster on one store: every node that opened its store before
//! joining sends the store's identity, and a member on another store refuses it.
//!
//! Durable entities keep their history in the node's store, and shards and the coordinator
//! run under leases kept there. A node on a store of its own would start an entity it is
//! given from an empty journal, and its leases would keep no other node out: acknowledged
//! writes lost without a word. So the identity a store got when it was created (the same for
//! every process that opens it, under any path or host name) is compared on every join path
//! like any other join key, and a difference refuses the joiner.
//!
//! A node that joins without having opened a store sends neither key and is let in: it can
//! host no durable entity of the node's store. (A node that opens its store only after it
//! joined is not checked: the runtime warns when that happens.)

use std::collections::BTreeMap;

use super::compat::JoinConfigCompatChecker;

/// The join key carrying the identity of the joiner's store.
pub const STORE_IDENTITY_JOIN_KEY: &str = "persistence.store-id";

/// The join key carrying where the joiner's store is (its location, never a password): only
/// for the message, the identity alone decides.
pub const STORE_LOCATION_JOIN_KEY: &str = "persistence.store";

/// Refuses a joiner whose store is not this node's (see the module's docs).
///
/// ```
/// use shardik_core::membership::{JoinConfigCompatChecker, SameStore};
/// let ours = SameStore::new("5d1f", "sqlite:/data/a/shardik.db");
/// let theirs = SameStore::new("90ab", "sqlite:/data/b/shardik.db");
/// let refusal = ours.check(&theirs.required_keys(), &ours.required_keys());
/// assert_eq!(refusal.len(), 1);
/// assert!(refusal[0].contains("sqlite:/data/a/shardik.db"));
/// assert!(refusal[0].contains("sqlite:/data/b/shardik.db"));
/// assert!(ours.check(&ours.required_keys(), &ours.required_keys()).is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SameStore {
    identity: String,
    location: String,
}

impl SameStore {
    /// The check for a node whose store has `identity` and is at `location`.
    pub fn new(identity: impl Into<String>, location: impl Into<String>) -> Self {
        SameStore {
            identity: identity.into(),
            location: location.into(),
        }
    }
}

impl JoinConfigCompatChecker for SameStore {
    fn required_keys(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (STORE_IDENTITY_JOIN_KEY.to_string(), self.identity.clone()),
            (STORE_LOCATION_JOIN_KEY.to_string(), self.location.clone()),
        ])
    }

    fn check(
        &self,
        joiner: &BTreeMap<String, String>,
        member: &BTreeMap<String, String>,
    ) -> Vec<String> {
        let Some(theirs) = joiner.get(STORE_IDENTITY_JOIN_KEY) else {
            // It opened no store before joining: nothing of ours to lose.
            return Vec::new();
        };
        let ours = member
            .get(STORE_IDENTITY_JOIN_KEY)
            .unwrap_or(&self.identity);
        if theirs == ours {
            return Vec::new();
        }
        let unknown = String::from("(a store it did not name)");
        let our_location = member
            .get(STORE_LOCATION_JOIN_KEY)
            .unwrap_or(&self.location);
        let their_location = joiner.get(STORE_LOCATION_JOIN_KEY).unwrap_or(&unknown);
        vec![format!(
            "`persistence.store` differs: the cluster keeps its durable entities and leases in \
             {our_location} (store {ours}), the joiner in {their_location} (store {theirs}). \
             A durable entity that moves to a node on another store starts again from an \
             empty history, and leases in another store keep nobody out. Give every node the \
             same store: one PostgreSQL server for nodes on several machines \
             (persistence.store = \"postgres://HOST/DATABASE\"), or one SQLite file for the \
             nodes of one machine (the same persistence.store, or the same --data-dir)"
        )]
    }
}

#[cfg(test)]
mod tests;
