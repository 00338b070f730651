//! The causal store under the observed-remove types: keys, each kept in by the dots of the
//! changes that put it there, each dot carrying the value that change wrote.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::dots::{Dot, DotContext};
use super::replicated::ReplicatedData;

/// The dots that keep one key in, sorted, each with the value its change wrote. Nearly always
/// one; more while concurrent changes by different replicas have not been folded by a later
/// change.
type Dotted<R, V> = Vec<(Dot<R>, V)>;

/// Keys kept in by dots, and the dots seen. A merge keeps a dot both sides hold, and a dot one
/// side holds unless the other side has seen it (and so removed it): a removal takes away only
/// what its replica had seen, and a change concurrent with a removal survives.
///
/// A dot's value is written once, by the change that made the dot, and never changed after: a
/// later change makes a new dot holding the value of every dot it replaced, changed. The merge
/// is therefore the same as an observed-remove set's of (key, dot, value) triples, and obeys
/// the same laws, whatever the values.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct DotKernel<R: Ord, K: Ord, V> {
    entries: BTreeMap<K, Dotted<R, V>>,
    seen: DotContext<R>,
}

impl<R: Ord, K: Ord, V> Default for DotKernel<R, K, V> {
    fn default() -> Self {
        DotKernel {
            entries: BTreeMap::new(),
            seen: DotContext::default(),
        }
    }
}

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> DotKernel<R, K, V> {
    /// Puts `key` in with `value`, replacing every dot of it this state holds; returns the
    /// delta of the change.
    pub(super) fn put(&mut self, replica: &R, key: K, value: V) -> DotDelta<R, K, V> {
        let dot = self.seen.next_dot(replica);
        let replaced = self
            .entries
            .insert(key.clone(), vec![(dot.clone(), value.clone())]);
        let mut delta = DotDelta::touching(key.clone(), vec![(dot.clone(), value)]);
        delta.0.seen.insert(dot);
        for (old, _) in replaced.into_iter().flatten() {
            delta.0.seen.insert(old);
        }
        delta
    }

    /// Takes `key` out, as far as this state has seen it; returns the delta of the change, or
    /// `None` if the key was not in.
    pub(super) fn remove(&mut self, key: &K) -> Option<DotDelta<R, K, V>> {
        let removed = self.entries.remove(key)?;
        let mut delta = DotDelta::touching(key.clone(), Vec::new());
        for (old, _) in removed {
            delta.0.seen.insert(old);
        }
        Some(delta)
    }

    /// The key's value: the merge of what its dots carry.
    pub(super) fn get(&self, key: &K) -> Option<V> {
        self.entries.get(key).map(|dotted| merged_values(dotted))
    }

    pub(super) fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, V)> {
        self.entries.iter().map(|(k, d)| (k, merged_values(d)))
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Merges a full state: every key of ours is checked against what `other` has seen.
    pub(super) fn merge(&mut self, other: &Self) {
        self.entries.retain(|key, ours| {
            if other.entries.contains_key(key) {
                return true;
            }
            ours.retain(|(dot, _)| !other.seen.contains(dot));
            !ours.is_empty()
        });
        self.join_keys_of(other, false);
    }

    /// Merges a delta: only the keys it touches can change, so only they are visited.
    pub(super) fn merge_delta(&mut self, delta: &DotDelta<R, K, V>) {
        self.join_keys_of(&delta.0, false);
    }

    /// Joins, key by key, every key `other` holds; `keep_empty` keeps keys left with no dot
    /// (a delta's record that it touched them).
    fn join_keys_of(&mut self, other: &Self, keep_empty: bool) {
        for (key, theirs) in &other.entries {
            let ours = self.entries.get(key).map(Vec::as_slice).unwrap_or(&[]);
            let joined = join_dots(ours, &self.seen, theirs, &other.seen);
            if joined.is_empty() && !keep_empty {
                self.entries.remove(key);
            } else {
                self.entries.insert(key.clone(), joined);
            }
        }
        self.seen.merge(&other.seen);
    }

    /// Whether any dot or value names `replica`; `value_names` says whether a value does.
    pub(super) fn names(&self, replica: &R, value_names: impl Fn(&V) -> bool) -> bool {
        self.seen.names(replica)
            || self
                .entries
                .values()
                .flatten()
                .any(|((r, _), v)| r == replica || value_names(v))
    }

    /// Adds to `into` every replica with a dot here, and those `value_names` adds for values.
    pub(super) fn replicas_named(
        &self,
        into: &mut std::collections::BTreeSet<R>,
        value_names: impl Fn(&V, &mut std::collections::BTreeSet<R>),
    ) {
        self.seen.replicas_named(into);
        for ((r, _), v) in self.entries.values().flatten() {
            into.insert(r.clone());
            value_names(v, into);
        }
    }

    /// The keys a dot of `replica` keeps in, or whose value `value_names` says names it.
    pub(super) fn keys_naming(&self, replica: &R, value_names: impl Fn(&V) -> bool) -> Vec<K> {
        self.entries
            .iter()
            .filter(|(_, dotted)| {
                dotted
                    .iter()
                    .any(|((r, _), v)| r == replica || value_names(v))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Forgets every dot of `replica`, and cleans every value with `clean_value`.
    pub(super) fn forget(&mut self, replica: &R, clean_value: impl Fn(&mut V)) {
        self.seen.forget(replica);
        self.entries.retain(|_, dotted| {
            dotted.retain_mut(|((r, _), v)| {
                clean_value(v);
                r != replica
            });
            !dotted.is_empty()
        });
    }
}

/// The merge of the values a key's dots carry.
fn merged_values<R, V: ReplicatedData>(dotted: &[(Dot<R>, V)]) -> V {
    let (first, rest) = dotted.split_first().expect("a key in holds a dot");
    let mut value = first.1.clone();
    for (_, v) in rest {
        value.merge(v);
    }
    value
}

/// One key's dots after a merge: those both sides hold, and those one side holds that the
/// other has not seen. Both inputs are sorted by dot, and so is the output.
fn join_dots<R: Ord + Clone, V: ReplicatedData>(
    ours: &[(Dot<R>, V)],
    our_seen: &DotContext<R>,
    theirs: &[(Dot<R>, V)],
    their_seen: &DotContext<R>,
) -> Dotted<R, V> {
    let mut out = Vec::with_capacity(ours.len().max(theirs.len()));
    let (mut i, mut j) = (0, 0);
    loop {
        let order = match (ours.get(i), theirs.get(j)) {
            (Some(a), Some(b)) => a.0.cmp(&b.0),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => return out,
        };
        match order {
            Ordering::Equal => {
                // The same change on both sides: the same value, merged to be safe.
                out.push((ours[i].0.clone(), ours[i].1.merged(&theirs[j].1)));
                i += 1;
                j += 1;
            }
            Ordering::Less => {
                if !their_seen.contains(&ours[i].0) {
                    out.push(ours[i].clone());
                }
                i += 1;
            }
            Ordering::Greater => {
                if !our_seen.contains(&theirs[j].0) {
                    out.push(theirs[j].clone());
                }
                j += 1;
            }
        }
    }
}

/// A delta of an observed-remove type: the keys its changes touched, each with the dots that
/// keep it in (none if it was removed), and the dots those changes made or replaced. Deltas
/// merge with one another and into states in any order, any number of times.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DotDelta<R: Ord, K: Ord, V>(DotKernel<R, K, V>);

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> DotDelta<R, K, V> {
    fn touching(key: K, dotted: Dotted<R, V>) -> Self {
        let mut kernel = DotKernel::default();
        kernel.entries.insert(key, dotted);
        DotDelta(kernel)
    }

    /// How many keys the delta touches.
    pub fn len(&self) -> usize {
        self.0.entries.len()
    }

    /// Whether the delta touches no key.
    pub fn is_empty(&self) -> bool {
        self.0.entries.is_empty()
    }

    /// Forgets every dot of `replica`, as the state it applies to does after pruning.
    pub(super) fn forget(&mut self, replica: &R, clean_value: impl Fn(&mut V)) {
        self.0.seen.forget(replica);
        for dotted in self.0.entries.values_mut() {
            dotted.retain_mut(|((r, _), v)| {
                clean_value(v);
                r != replica
            });
        }
    }
}

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> ReplicatedData for DotDelta<R, K, V> {
    /// Two deltas merge into one touching the keys of both.
    fn merge(&mut self, other: &Self) {
        self.0.join_keys_of(&other.0, true);
    }
}
