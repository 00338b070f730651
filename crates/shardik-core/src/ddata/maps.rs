//! The maps users reach for most, each an [`OrMap`] of one value type with the operations
//! that type calls for: [`LwwMap`], [`PNCounterMap`] and [`OrMultiMap`].

use std::fmt::Debug;

use super::counter::PNCounter;
use super::kernel::DotDelta;
use super::lww_register::LwwRegister;
use super::ormap::OrMap;
use super::orset::OrSet;
use super::replicated::{DeltaReplicatedData, RemovedReplicaPruning, ReplicatedData};

/// Implements the replicated-data traits of a map wrapper by handing them to its `map`.
macro_rules! delegate_to_map {
    ($name:ident<$($p:ident),*>, $value:ty, $key:ty) => {
        impl<$($p: Ord + Clone + Debug),*> ReplicatedData for $name<$($p),*> {
            fn merge(&mut self, other: &Self) {
                self.map.merge(&other.map);
            }
        }

        impl<$($p: Ord + Clone + Debug),*> DeltaReplicatedData for $name<$($p),*> {
            type Delta = DotDelta<R, $key, $value>;

            fn delta(&self) -> Option<Self::Delta> {
                self.map.delta()
            }

            fn reset_delta(&mut self) {
                self.map.reset_delta();
            }

            fn merge_delta(&mut self, delta: &Self::Delta) {
                self.map.merge_delta(delta);
            }
        }

        impl<$($p: Ord + Clone + Debug),*> RemovedReplicaPruning<R> for $name<$($p),*> {
            fn needs_pruning_from(&self, removed: &R) -> bool {
                self.map.needs_pruning_from(removed)
            }

            fn replicas_named(&self, into: &mut std::collections::BTreeSet<R>) {
                self.map.replicas_named(into);
            }

            fn prune(&mut self, removed: &R, owner: &R) {
                self.map.prune(removed, owner);
            }

            fn pruning_cleanup(&mut self, removed: &R) {
                self.map.pruning_cleanup(removed);
            }
        }

        impl<$($p: Ord + Clone + Debug),*> $name<$($p),*> {
            /// An empty map.
            pub fn new() -> Self {
                $name { map: OrMap::new() }
            }

            /// Removes `key` and its value, as far as this replica has seen them; `false` if
            /// the key was not in.
            pub fn remove(&mut self, key: &$key) -> bool {
                self.map.remove(key)
            }

            /// Whether `key` is in.
            pub fn contains_key(&self, key: &$key) -> bool {
                self.map.contains_key(key)
            }

            /// The keys, in order.
            pub fn keys(&self) -> impl Iterator<Item = &$key> {
                self.map.keys()
            }

            /// How many keys the map holds.
            pub fn len(&self) -> usize {
                self.map.len()
            }

            /// Whether the map holds nothing.
            pub fn is_empty(&self) -> bool {
                self.map.is_empty()
            }
        }

        impl<$($p: Ord + Clone + Debug),*> PartialEq for $name<$($p),*> {
            fn eq(&self, other: &Self) -> bool {
                self.map == other.map
            }
        }

        impl<$($p: Ord + Clone + Debug),*> Default for $name<$($p),*> {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

/// A map whose values are last-writer-wins registers: `put` overwrites, and of concurrent
/// puts to one key the later by the writers' clocks wins (see [`LwwRegister`]). A put
/// concurrent with a removal keeps the key.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LwwMap<R: Ord, K: Ord, V> {
    map: OrMap<R, K, LwwRegister<R, V>>,
}

delegate_to_map!(LwwMap<R, K, V>, LwwRegister<R, V>, K);

impl<R: Ord + Clone + Debug, K: Ord + Clone + Debug, V: Ord + Clone + Debug> LwwMap<R, K, V> {
    /// Sets `key` to `value` on behalf of `replica`, at `now` by its clock (milliseconds
    /// since the Unix epoch by convention; a clock behind the current write is moved past it).
    pub fn put(&mut self, replica: &R, key: K, value: V, now: u64) {
        self.map.update(replica, key, |current| match current {
            Some(mut register) => {
                register.set(replica, value, now);
                register
            }
            None => LwwRegister::new(replica, value, now),
        });
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        self.map.get(key).map(|register| register.value().clone())
    }

    /// The keys and their values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, V)> {
        self.map.iter().map(|(k, r)| (k, r.value().clone()))
    }
}

/// A map of counters that go both ways. A key removed and counted again starts from zero
/// wherever the removal was seen; a count concurrent with the removal keeps the key, with
/// the value that replica saw plus its count.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PNCounterMap<R: Ord, K: Ord> {
    map: OrMap<R, K, PNCounter<R>>,
}

delegate_to_map!(PNCounterMap<R, K>, PNCounter<R>, K);

impl<R: Ord + Clone + Debug, K: Ord + Clone + Debug> PNCounterMap<R, K> {
    /// Adds `n` to `key`'s counter on behalf of `replica`.
    pub fn increment(&mut self, replica: &R, key: K, n: u64) {
        self.count(replica, key, |c| c.increment(replica, n));
    }

    /// Takes `n` from `key`'s counter on behalf of `replica`.
    pub fn decrement(&mut self, replica: &R, key: K, n: u64) {
        self.count(replica, key, |c| c.decrement(replica, n));
    }

    /// The value of `key`'s counter.
    pub fn get(&self, key: &K) -> Option<i128> {
        self.map.get(key).map(|c| c.value())
    }

    /// The keys and their counters' values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, i128)> {
        self.map.iter().map(|(k, c)| (k, c.value()))
    }

    fn count(&mut self, replica: &R, key: K, change: impl FnOnce(&mut PNCounter<R>)) {
        self.map.update(replica, key, |current| {
            let mut counter = current.unwrap_or_default();
            change(&mut counter);
            // The map's delta carries the whole counter; the counter's own is not needed.
            counter.reset_delta();
            counter
        });
    }
}

/// A map from keys to sets of values. Adding a binding adds the value to the key's set (and
/// the key, if it was not in); removing the last binding of a key removes the key.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OrMultiMap<R: Ord, K: Ord, V: Ord> {
    map: OrMap<R, K, OrSet<R, V>>,
}

delegate_to_map!(OrMultiMap<R, K, V>, OrSet<R, V>, K);

impl<R: Ord + Clone + Debug, K: Ord + Clone + Debug, V: Ord + Clone + Debug> OrMultiMap<R, K, V> {
    /// Binds `value` to `key` on behalf of `replica`.
    pub fn add_binding(&mut self, replica: &R, key: K, value: V) {
        self.map.update(replica, key, |current| {
            let mut set = current.unwrap_or_default();
            set.add(replica, value);
            set.reset_delta();
            set
        });
    }

    /// Unbinds `value` from `key` on behalf of `replica`, removing the key if that was its
    /// last value; `false` if `value` was not bound to `key`.
    pub fn remove_binding(&mut self, replica: &R, key: &K, value: &V) -> bool {
        let Some(mut set) = self.map.get(key) else {
            return false;
        };
        if !set.remove(value) {
            return false;
        }
        if set.is_empty() {
            self.map.remove(key);
        } else {
            set.reset_delta();
            self.map.update(replica, key.clone(), |_| set);
        }
        true
    }

    /// The values bound to `key`, in order.
    pub fn get(&self, key: &K) -> Option<Vec<V>> {
        self.map
            .get(key)
            .map(|set| set.elements().cloned().collect())
    }

    /// The keys and their values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, Vec<V>)> {
        self.map
            .iter()
            .map(|(k, set)| (k, set.elements().cloned().collect()))
    }
}
