//! Data of any type behind one interface, so that one replicator holds keys of many types:
//! what the replicator does with a value (merge, take its delta, digest, prune) without
//! knowing its type. Typed calls downcast at the edge.

use std::any::Any;
use std::fmt::Debug;

use super::data::{DataType, ReplicaId};
use crate::ddata::ReplicatedData;

/// A value and a delta of some [`DataType`], type erased.
pub trait AnyData: Debug + Send + Sync {
    /// The value, for downcasting to its type.
    fn as_any(&self) -> &dyn Any;
    /// The value, for downcasting to its type, to change it.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// A copy.
    fn clone_data(&self) -> Box<dyn AnyData>;
    /// The data type's name.
    fn type_name(&self) -> String;
    /// Merges `other` in; an error if it is of another type.
    fn merge_data(&mut self, other: &dyn AnyData) -> Result<(), TypeMismatch>;
    /// Whether `other` is the same state.
    fn same_as(&self, other: &dyn AnyData) -> bool;
    /// What changed locally since the last call, forgotten here.
    fn take_delta(&mut self) -> Option<Box<dyn AnyDelta>>;
    /// Merges a delta in; an error if it is of another type.
    fn merge_delta(&mut self, delta: &dyn AnyDelta) -> Result<(), TypeMismatch>;
    /// The state, encoded (CBOR): the same bytes for the same state on every node.
    fn encode(&self) -> Vec<u8>;
    /// Whether the state holds anything of `removed`.
    fn needs_pruning_from(&self, removed: ReplicaId) -> bool;
    /// Adds every replica the state holds something of to `into`.
    fn replicas_named(&self, into: &mut std::collections::BTreeSet<ReplicaId>);
    /// Folds `removed`'s contribution into `owner`'s.
    fn prune(&mut self, removed: ReplicaId, owner: ReplicaId);
    /// Forgets `removed`'s contribution.
    fn pruning_cleanup(&mut self, removed: ReplicaId);
}

/// A delta of some [`DataType`], type erased.
pub trait AnyDelta: Debug + Send + Sync {
    /// The delta, for downcasting to its type.
    fn as_any(&self) -> &dyn Any;
    /// A copy.
    fn clone_delta(&self) -> Box<dyn AnyDelta>;
    /// Merges a later delta of the same key into this one; an error if of another type.
    fn merge_delta(&mut self, other: &dyn AnyDelta) -> Result<(), TypeMismatch>;
    /// The delta, encoded (CBOR).
    fn encode(&self) -> Vec<u8>;
    /// A value holding just this delta: what a replica that never had the key starts from.
    fn to_data(&self) -> Box<dyn AnyData>;
}

impl Clone for Box<dyn AnyData> {
    fn clone(&self) -> Self {
        self.clone_data()
    }
}

impl Clone for Box<dyn AnyDelta> {
    fn clone(&self) -> Self {
        self.clone_delta()
    }
}

/// Data of one type met data of another under the same key: a programming error on some node
/// (two nodes using one key id for two types), reported, never merged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("key holds {held}, got {got}")]
pub struct TypeMismatch {
    /// The type the key holds here.
    pub held: String,
    /// The type that arrived.
    pub got: String,
}

/// CBOR, into a vector: the same value always gives the same bytes (maps and sets are
/// ordered), which is what digests rely on.
pub(super) fn cbor<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("writing CBOR into a vector cannot fail");
    out
}

impl<T: DataType> AnyData for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn clone_data(&self) -> Box<dyn AnyData> {
        Box::new(self.clone())
    }

    fn type_name(&self) -> String {
        T::type_name()
    }

    fn merge_data(&mut self, other: &dyn AnyData) -> Result<(), TypeMismatch> {
        let other = downcast::<T>(other.as_any(), T::type_name, || other.type_name())?;
        self.merge(other);
        Ok(())
    }

    fn same_as(&self, other: &dyn AnyData) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn take_delta(&mut self) -> Option<Box<dyn AnyDelta>> {
        DataType::take_delta(self).map(|d| Box::new(DeltaOf::<T>(d)) as Box<dyn AnyDelta>)
    }

    fn merge_delta(&mut self, delta: &dyn AnyDelta) -> Result<(), TypeMismatch> {
        let delta = downcast::<DeltaOf<T>>(delta.as_any(), T::type_name, || {
            "a delta of another type".into()
        })?;
        DataType::merge_delta(self, &delta.0);
        Ok(())
    }

    fn encode(&self) -> Vec<u8> {
        cbor(self)
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        crate::ddata::RemovedReplicaPruning::needs_pruning_from(self, &removed)
    }

    fn replicas_named(&self, into: &mut std::collections::BTreeSet<ReplicaId>) {
        crate::ddata::RemovedReplicaPruning::replicas_named(self, into);
    }

    fn prune(&mut self, removed: ReplicaId, owner: ReplicaId) {
        crate::ddata::RemovedReplicaPruning::prune(self, &removed, &owner);
    }

    fn pruning_cleanup(&mut self, removed: ReplicaId) {
        crate::ddata::RemovedReplicaPruning::pruning_cleanup(self, &removed);
    }
}

/// A delta of `T`, wrapped so that the blanket implementation for data types does not cover
/// it too (a delta type may itself be a data type).
#[derive(Clone, Debug)]
pub struct DeltaOf<T: DataType>(pub T::Delta);

impl<T: DataType> AnyDelta for DeltaOf<T> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn clone_delta(&self) -> Box<dyn AnyDelta> {
        Box::new(self.clone())
    }

    fn merge_delta(&mut self, other: &dyn AnyDelta) -> Result<(), TypeMismatch> {
        let other = downcast::<DeltaOf<T>>(other.as_any(), T::type_name, || {
            "a delta of another type".into()
        })?;
        self.0.merge(&other.0);
        Ok(())
    }

    fn encode(&self) -> Vec<u8> {
        cbor(&self.0)
    }

    fn to_data(&self) -> Box<dyn AnyData> {
        Box::new(T::from_delta(&self.0))
    }
}

fn downcast<T: 'static>(
    value: &dyn Any,
    held: impl FnOnce() -> String,
    got: impl FnOnce() -> String,
) -> Result<&T, TypeMismatch> {
    value.downcast_ref::<T>().ok_or_else(|| TypeMismatch {
        held: held(),
        got: got(),
    })
}
