//! What the replicator can carry: the element types data types are built from, and the data
//! types themselves, each with a name every node gives it.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ddata::{
    Flag, GCounter, GSet, LwwMap, LwwRegister, OrMap, OrMultiMap, OrSet, PNCounter, PNCounterMap,
    RemovedReplicaPruning, ReplicatedData,
};

/// The replica a node is to the data it changes: the uid of its incarnation, so that a node
/// restarted on the same address is a new replica (its old dots and counts are pruned, not
/// continued by a process that no longer knows them).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ReplicaId(pub u64);

/// A type that elements, keys and values of replicated data are made of. Its name is part of
/// the name of every data type built from it, which is how a node receiving data knows its
/// type: give it one name, the same on every node.
pub trait Element:
    Ord + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The type's name, the same on every node.
    const NAME: &'static str;
}

macro_rules! elements {
    ($($ty:ty => $name:literal),* $(,)?) => {
        $(impl Element for $ty {
            const NAME: &'static str = $name;
        })*
    };
}

elements!(
    String => "string",
    Vec<u8> => "bytes",
    u8 => "u8",
    u16 => "u16",
    u32 => "u32",
    u64 => "u64",
    i32 => "i32",
    i64 => "i64",
    bool => "bool",
);

/// A data type the replicator carries: mergeable, with deltas (or none), prunable, encodable,
/// and named. Every built-in type of [`crate::ddata`] over [`ReplicaId`] and [`Element`]s is
/// one; a type of your own becomes one by implementing this trait (and registering it on every
/// node of the runtime).
pub trait DataType:
    ReplicatedData
    + RemovedReplicaPruning<ReplicaId>
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// What travels for a local change; `Self` for types sent whole.
    type Delta: ReplicatedData + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The type's name, the same on every node: `"OrSet<string>"`, say.
    fn type_name() -> String;

    /// What changed locally since the last call, forgotten here; `None` if nothing did or the
    /// type sends its whole state.
    fn take_delta(&mut self) -> Option<Self::Delta>;

    /// Merges a delta another replica took.
    fn merge_delta(&mut self, delta: &Self::Delta);

    /// A value holding just `delta`: what a replica that never had the key starts from.
    fn from_delta(delta: &Self::Delta) -> Self;
}

/// A type whose changes travel whole: its delta is itself, and it never offers one.
macro_rules! sent_whole {
    ($ty:ty, [$($gen:tt)*], $name:expr) => {
        impl<$($gen)*> DataType for $ty {
            type Delta = Self;

            fn type_name() -> String {
                $name
            }

            fn take_delta(&mut self) -> Option<Self> {
                None
            }

            fn merge_delta(&mut self, delta: &Self) {
                self.merge(delta);
            }

            fn from_delta(delta: &Self) -> Self {
                delta.clone()
            }
        }
    };
}

/// A type with deltas of its own ([`crate::ddata::DeltaReplicatedData`]).
macro_rules! with_deltas {
    ($ty:ty, [$($gen:tt)*], $name:expr) => {
        impl<$($gen)*> DataType for $ty {
            type Delta = <Self as crate::ddata::DeltaReplicatedData>::Delta;

            fn type_name() -> String {
                $name
            }

            fn take_delta(&mut self) -> Option<Self::Delta> {
                let delta = crate::ddata::DeltaReplicatedData::delta(self);
                crate::ddata::DeltaReplicatedData::reset_delta(self);
                delta
            }

            fn merge_delta(&mut self, delta: &Self::Delta) {
                crate::ddata::DeltaReplicatedData::merge_delta(self, delta);
            }

            fn from_delta(delta: &Self::Delta) -> Self {
                let mut value = Self::default();
                crate::ddata::DeltaReplicatedData::merge_delta(&mut value, delta);
                value
            }
        }
    };
}

sent_whole!(Flag, [], "Flag".to_string());
sent_whole!(LwwRegister<ReplicaId, T>, [T: Element], format!("LwwRegister<{}>", T::NAME));
with_deltas!(GCounter<ReplicaId>, [], "GCounter".to_string());
with_deltas!(PNCounter<ReplicaId>, [], "PNCounter".to_string());
with_deltas!(GSet<T>, [T: Element], format!("GSet<{}>", T::NAME));
with_deltas!(OrSet<ReplicaId, T>, [T: Element], format!("OrSet<{}>", T::NAME));
with_deltas!(
    OrMap<ReplicaId, K, V>,
    [K: Element, V: DataType],
    format!("OrMap<{},{}>", K::NAME, V::type_name())
);
with_deltas!(
    LwwMap<ReplicaId, K, V>,
    [K: Element, V: Element],
    format!("LwwMap<{},{}>", K::NAME, V::NAME)
);
with_deltas!(
    PNCounterMap<ReplicaId, K>,
    [K: Element],
    format!("PNCounterMap<{}>", K::NAME)
);
with_deltas!(
    OrMultiMap<ReplicaId, K, V>,
    [K: Element, V: Element],
    format!("OrMultiMap<{},{}>", K::NAME, V::NAME)
);

/// A key naming one replicated value of type `T`: the id is what nodes agree on, the type is
/// what the compiler holds every use of the key to.
pub struct Key<T> {
    id: std::sync::Arc<str>,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    /// The key with this id.
    pub fn new(id: impl Into<std::sync::Arc<str>>) -> Self {
        Key {
            id: id.into(),
            _type: std::marker::PhantomData,
        }
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(super) fn shared_id(&self) -> std::sync::Arc<str> {
        self.id.clone()
    }
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        Key {
            id: self.id.clone(),
            _type: std::marker::PhantomData,
        }
    }
}

impl<T: DataType> Debug for Key<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key<{}>({:?})", T::type_name(), self.id)
    }
}
