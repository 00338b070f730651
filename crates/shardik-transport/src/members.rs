//! The member directory: which peer incarnations are current members, for the connection
//! readers.
//!
//! The node driver replaces the set whenever its membership state changes; each change bumps a
//! generation counter. A reader caches "my peer is a member" with the generation it saw and
//! looks the set up again only when the generation moved ([`MemberCache`]), so the hot path of
//! a user frame costs one atomic load.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use shardik_core::membership::UniqueAddress;

/// The current members' incarnations (any status in the gossip, not yet removed).
///
/// Cloning shares the directory. A node's transport uses a real one ([`MemberDirectory::new`]),
/// which starts empty and is filled by the node driver; transport tests and benchmarks without
/// a membership use [`MemberDirectory::everyone`].
#[derive(Clone, Debug)]
pub struct MemberDirectory {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Every peer counts as a member (no membership behind this transport).
    everyone: bool,
    /// Bumped after each change of `members` (release), read before looking it up (acquire).
    generation: AtomicU64,
    members: RwLock<BTreeSet<UniqueAddress>>,
}

impl Default for MemberDirectory {
    fn default() -> Self {
        MemberDirectory::new()
    }
}

impl MemberDirectory {
    /// An empty directory: nobody is a member until [`set`](Self::set) says so.
    pub fn new() -> Self {
        MemberDirectory::with(false)
    }

    /// A directory in which every peer is a member, for a transport with no membership behind
    /// it (transport tests, benchmarks). A node never uses one.
    pub fn everyone() -> Self {
        MemberDirectory::with(true)
    }

    fn with(everyone: bool) -> Self {
        MemberDirectory {
            inner: Arc::new(Inner {
                everyone,
                generation: AtomicU64::new(0),
                members: RwLock::new(BTreeSet::new()),
            }),
        }
    }

    /// Whether every peer counts as a member.
    pub fn accepts_everyone(&self) -> bool {
        self.inner.everyone
    }

    /// Replaces the members with `members`. The generation moves only if the set changed, so
    /// that a gossip round that changed nobody's membership costs the readers nothing.
    pub fn set(&self, members: impl IntoIterator<Item = UniqueAddress>) {
        let next: BTreeSet<UniqueAddress> = members.into_iter().collect();
        let mut current = self
            .inner
            .members
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if *current == next {
            return;
        }
        *current = next;
        // Bumped while the new set is in place (and still under the lock), so a reader that
        // sees the new generation finds at least this set.
        self.inner.generation.fetch_add(1, Ordering::Release);
    }

    /// Whether `node` is a current member.
    pub fn contains(&self, node: &UniqueAddress) -> bool {
        self.inner.everyone
            || self
                .inner
                .members
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(node)
    }

    /// How many times the set changed.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

/// One connection's cached answer to "is my peer a member?".
#[derive(Debug)]
pub(crate) struct MemberCache {
    peer: UniqueAddress,
    generation: u64,
    member: bool,
}

impl MemberCache {
    /// Looks `peer` up in `directory` now.
    pub(crate) fn new(directory: &MemberDirectory, peer: UniqueAddress) -> Self {
        let generation = directory.generation();
        let member = directory.contains(&peer);
        MemberCache {
            peer,
            generation,
            member,
        }
    }

    /// Whether the peer is a member: one atomic load, plus a look-up when the directory
    /// changed since the last call. The second value says whether the answer changed.
    pub(crate) fn check(&mut self, directory: &MemberDirectory) -> (bool, bool) {
        let generation = directory.generation();
        if generation == self.generation {
            return (self.member, false);
        }
        self.generation = generation;
        let member = directory.contains(&self.peer);
        let changed = member != self.member;
        self.member = member;
        (member, changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port))
    }

    #[test]
    fn the_cache_follows_the_directory_and_only_looks_up_after_a_change() {
        let dir = MemberDirectory::new();
        let mut cache = MemberCache::new(&dir, node(1));
        assert_eq!(cache.check(&dir), (false, false));
        dir.set([node(2)]);
        assert_eq!(cache.check(&dir), (false, false), "another node joined");
        let g = dir.generation();
        dir.set([node(2)]);
        assert_eq!(dir.generation(), g, "an unchanged set keeps its generation");
        dir.set([node(1), node(2)]);
        assert_eq!(cache.check(&dir), (true, true), "the peer became a member");
        assert_eq!(cache.check(&dir), (true, false));
        dir.set([node(2)]);
        assert_eq!(cache.check(&dir), (false, true), "the peer was removed");
    }

    #[test]
    fn another_incarnation_at_the_same_address_is_not_a_member() {
        let dir = MemberDirectory::new();
        dir.set([node(1)]);
        let other = UniqueAddress::new(Address::new("127.0.0.1", 1), 99);
        assert!(!dir.contains(&other));
        assert!(dir.contains(&node(1)));
    }

    #[test]
    fn everyone_is_a_member_of_an_open_directory() {
        let dir = MemberDirectory::everyone();
        let mut cache = MemberCache::new(&dir, node(5));
        assert_eq!(cache.check(&dir), (true, false));
        assert!(dir.accepts_everyone());
        assert!(!MemberDirectory::new().accepts_everyone());
    }
}
