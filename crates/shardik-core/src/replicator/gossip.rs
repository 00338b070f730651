//! Anti-entropy by digests: what a replicator answers to another's bucket digests, and to
//! the entries that answer brings.
//!
//! A round: node A sends the digests of its non-empty buckets (`Status`). B answers with its
//! own entries of every bucket whose digest differs (`Gossip`, `send_back`), as many buckets
//! as fit a message, and says whether more differed. A merges them and sends back its entries
//! of those buckets that B did not have as A has them now; if more differed, A sends its
//! digests again at once, so a node far behind catches up at the speed of the link rather
//! than one message per gossip interval.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::envelope::MergeRules;
use super::erased::TypeMismatch;
use super::messages::{ReplicatorMessage, Stored};
use super::store::{BUCKETS, Merged, Store};

/// The buckets whose digests differ between ours and `theirs`, starting the walk at `start`
/// (so that successive rounds with a partial answer do not always favour the low buckets).
pub(super) fn differing_buckets(store: &mut Store, theirs: &[(u16, u64)], start: u16) -> Vec<u16> {
    let ours: BTreeMap<u16, u64> = store.bucket_digests().into_iter().collect();
    // A bucket beyond the protocol's count names no key: a peer's mistake, not a difference.
    let theirs: BTreeMap<u16, u64> = theirs
        .iter()
        .copied()
        .filter(|&(b, _)| b < BUCKETS)
        .collect();
    let mut differing: Vec<u16> = ours
        .keys()
        .chain(theirs.keys())
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|b| ours.get(b) != theirs.get(b))
        .collect();
    let split = differing.partition_point(|&b| b < start);
    differing.rotate_left(split);
    differing
}

/// The answer to a peer's digests: our entries of as many differing buckets as fit one
/// message (at least one), asking for theirs back; nothing if no bucket differs.
pub(super) fn answer_status(
    store: &mut Store,
    theirs: &[(u16, u64)],
    budget: usize,
    start: u16,
) -> Option<ReplicatorMessage> {
    let differing = differing_buckets(store, theirs, start);
    let mut buckets = Vec::new();
    let mut entries = Vec::new();
    let mut size = 0;
    for &bucket in &differing {
        let (bucket_entries, bytes) = store.bucket_entries(bucket);
        if !buckets.is_empty() && size + bytes > budget {
            break;
        }
        buckets.push(bucket);
        entries.extend(bucket_entries);
        size += bytes;
    }
    let more = buckets.len() < differing.len();
    (!buckets.is_empty()).then_some(ReplicatorMessage::Gossip {
        buckets,
        entries,
        send_back: true,
        more,
    })
}

/// What merging a peer's entries did.
#[derive(Default)]
pub(super) struct GossipMerged {
    /// Keys whose state changed here.
    pub(super) changed: Vec<Arc<str>>,
    /// Keys whose entry was of another type than ours, not merged.
    pub(super) mismatched: Vec<(Arc<str>, TypeMismatch)>,
    /// Our entries of the peer's buckets it should have: the ones it lacked or held
    /// differently, of as many buckets as fit the budget.
    pub(super) send_back: Vec<(Arc<str>, Stored)>,
    /// Whether buckets were left out of `send_back` for the budget: the exchange should go
    /// on at once.
    pub(super) more_to_send_back: bool,
}

/// Merges a peer's entries; with `send_back`, also works out which of ours it should get, of
/// as many of its buckets as fit `budget` bytes (at least one). A peer that had next to
/// nothing sends small buckets and asks for ours, which may be large: the budget bounds
/// that answer too.
pub(super) fn merge_gossip(
    store: &mut Store,
    buckets: &[u16],
    entries: &[(Arc<str>, Stored)],
    send_back: bool,
    budget: usize,
    rules: MergeRules,
) -> GossipMerged {
    let mut out = GossipMerged::default();
    for (key, stored) in entries {
        match store.merge(key, stored, rules) {
            Ok(Merged::Changed) => out.changed.push(key.clone()),
            Ok(Merged::Unchanged) => {}
            Err(mismatch) => out.mismatched.push((key.clone(), mismatch)),
        }
    }
    if send_back {
        let theirs: BTreeMap<&str, &Stored> = entries.iter().map(|(k, s)| (&**k, s)).collect();
        let mut size = 0;
        for (taken, &bucket) in buckets.iter().enumerate() {
            let (ours_in_bucket, bytes) = store.bucket_entries(bucket);
            if taken > 0 && size + bytes > budget {
                out.more_to_send_back = true;
                break;
            }
            size += bytes;
            for (key, ours) in ours_in_bucket {
                let same = match (theirs.get(&*key), &ours) {
                    (Some(Stored::Deleted), Stored::Deleted) => true,
                    (Some(Stored::Value(t)), Stored::Value(o)) => o.same_as(t),
                    _ => false,
                };
                if !same {
                    out.send_back.push((key, ours));
                }
            }
        }
    }
    out
}
