//! The keys a replicator holds, split into a fixed number of buckets by a hash of the key,
//! with digests per entry and per bucket computed when asked for and cached until a change.
//!
//! Buckets are what gossip compares: two nodes exchange one digest per non-empty bucket and
//! then whole entries of the buckets that differ, so a node that is behind on a few keys
//! receives a few buckets, and a new node receives everything in large chunks.

use std::collections::BTreeMap;
use std::sync::Arc;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::envelope::{DataEnvelope, MergeRules};
use super::erased::{AnyDelta, TypeMismatch};
use super::messages::Stored;
use super::pruning::mark_seen;

/// How many buckets keys are split into. Part of the protocol: every node must use the same.
pub(super) const BUCKETS: u16 = 1024;

/// The digest of a deleted key's mark.
const DELETED_DIGEST: u64 = 0x6465_6c65_7465_6421;

/// One key's state and, once computed, its digest and encoded size.
#[derive(Debug)]
struct Entry {
    stored: Stored,
    digest: Option<Digest>,
}

#[derive(Clone, Copy, Debug)]
struct Digest {
    hash: u64,
    encoded_len: usize,
}

#[derive(Debug, Default)]
struct Bucket {
    entries: BTreeMap<Arc<str>, Entry>,
    /// The bucket's digest, `None` while some entry changed since it was computed.
    digest: Option<u64>,
}

/// Every key's state, bucketed.
#[derive(Debug)]
pub(super) struct Store {
    buckets: Vec<Bucket>,
    len: usize,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            buckets: (0..BUCKETS).map(|_| Bucket::default()).collect(),
            len: 0,
        }
    }
}

/// What a merge into the store did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Merged {
    /// The key's state is different now.
    Changed,
    /// The key already held all of it.
    Unchanged,
}

impl Store {
    /// The bucket a key belongs to.
    pub(super) fn bucket_of(key: &str) -> u16 {
        (xxh3_64(key.as_bytes()) % u64::from(BUCKETS)) as u16
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, key: &str) -> Option<&Stored> {
        self.bucket(key).entries.get(key).map(|e| &e.stored)
    }

    /// The key's value, to change in place; its digests are dropped, as it is about to change.
    pub(super) fn value_mut(&mut self, key: &str) -> Option<&mut DataEnvelope> {
        let bucket = self.bucket_mut(key);
        let entry = bucket.entries.get_mut(key)?;
        match &mut entry.stored {
            Stored::Value(envelope) => {
                entry.digest = None;
                bucket.digest = None;
                Some(envelope)
            }
            Stored::Deleted => None,
        }
    }

    /// Puts `stored` under `key`, replacing what was there.
    pub(super) fn insert(&mut self, key: Arc<str>, stored: Stored) {
        let bucket = self.bucket_mut(&key);
        bucket.digest = None;
        let entry = Entry {
            stored,
            digest: None,
        };
        if bucket.entries.insert(key, entry).is_none() {
            self.len += 1;
        }
    }

    /// Merges a whole state into the key, by `rules` (see [`DataEnvelope::merge`]).
    pub(super) fn merge(
        &mut self,
        key: &Arc<str>,
        incoming: &Stored,
        rules: MergeRules,
    ) -> Result<Merged, TypeMismatch> {
        let Some(current) = self.get(key) else {
            let mut stored = incoming.clone();
            if let Stored::Value(envelope) = &mut stored {
                mark_seen(&mut envelope.pruning, rules.me);
            }
            self.insert(key.clone(), stored);
            return Ok(Merged::Changed);
        };
        let merged = match (current, incoming) {
            (Stored::Deleted, _) => return Ok(Merged::Unchanged),
            (Stored::Value(_), Stored::Deleted) => {
                self.insert(key.clone(), Stored::Deleted);
                return Ok(Merged::Changed);
            }
            (Stored::Value(ours), Stored::Value(theirs)) => {
                if ours.same_as(theirs) {
                    return Ok(Merged::Unchanged);
                }
                let mut merged = ours.clone();
                merged.merge(theirs, rules)?;
                if merged.same_as(ours) {
                    return Ok(Merged::Unchanged);
                }
                merged
            }
        };
        self.insert(key.clone(), Stored::Value(merged));
        Ok(Merged::Changed)
    }

    /// Merges a delta into the key; a key unknown here starts from the delta. A deleted key
    /// ignores it.
    pub(super) fn merge_delta(
        &mut self,
        key: &Arc<str>,
        delta: &dyn AnyDelta,
        rules: MergeRules,
    ) -> Result<Merged, TypeMismatch> {
        match self.get(key) {
            None => {
                let envelope = DataEnvelope::new(delta.to_data());
                self.insert(key.clone(), Stored::Value(envelope));
                Ok(Merged::Changed)
            }
            Some(Stored::Deleted) => Ok(Merged::Unchanged),
            Some(Stored::Value(_)) => {
                let envelope = self.value_mut(key).expect("a value is there");
                envelope.merge_delta(delta, rules)?;
                Ok(Merged::Changed)
            }
        }
    }

    /// Every key holding a value, with it, to change in place (digests are dropped for
    /// those `change` says it changed).
    pub(super) fn change_values(
        &mut self,
        mut change: impl FnMut(&Arc<str>, &mut DataEnvelope) -> bool,
    ) {
        for bucket in &mut self.buckets {
            for (key, entry) in &mut bucket.entries {
                if let Stored::Value(envelope) = &mut entry.stored
                    && change(key, envelope)
                {
                    entry.digest = None;
                    bucket.digest = None;
                }
            }
        }
    }

    /// The digest of every non-empty bucket, in bucket order.
    pub(super) fn bucket_digests(&mut self) -> Vec<(u16, u64)> {
        let mut out = Vec::new();
        for (index, bucket) in self.buckets.iter_mut().enumerate() {
            if bucket.entries.is_empty() {
                continue;
            }
            let digest = match bucket.digest {
                Some(digest) => digest,
                None => {
                    let digest = bucket
                        .entries
                        .iter_mut()
                        .map(|(key, entry)| {
                            xxh3_64_with_seed(key.as_bytes(), digest_of(entry).hash)
                        })
                        .fold(0u64, u64::wrapping_add);
                    bucket.digest = Some(digest);
                    digest
                }
            };
            out.push((index as u16, digest));
        }
        out
    }

    /// The entries of `bucket`, copied, and their encoded size.
    pub(super) fn bucket_entries(&mut self, bucket: u16) -> (Vec<(Arc<str>, Stored)>, usize) {
        let Some(bucket) = self.buckets.get_mut(usize::from(bucket)) else {
            return (Vec::new(), 0);
        };
        let mut size = 0;
        let entries = bucket
            .entries
            .iter_mut()
            .map(|(key, entry)| {
                size += key.len() + digest_of(entry).encoded_len;
                (key.clone(), entry.stored.clone())
            })
            .collect();
        (entries, size)
    }

    /// The keys, in bucket order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.buckets.iter().flat_map(|b| b.entries.keys())
    }

    fn bucket(&self, key: &str) -> &Bucket {
        &self.buckets[usize::from(Self::bucket_of(key))]
    }

    fn bucket_mut(&mut self, key: &str) -> &mut Bucket {
        &mut self.buckets[usize::from(Self::bucket_of(key))]
    }
}

/// The entry's digest, computed (by encoding the state) if it changed since the last time.
fn digest_of(entry: &mut Entry) -> Digest {
    *entry.digest.get_or_insert_with(|| match &entry.stored {
        Stored::Value(envelope) => {
            let bytes = envelope.encode();
            Digest {
                hash: xxh3_64(&bytes),
                encoded_len: bytes.len(),
            }
        }
        Stored::Deleted => Digest {
            hash: DELETED_DIGEST,
            encoded_len: 1,
        },
    })
}
