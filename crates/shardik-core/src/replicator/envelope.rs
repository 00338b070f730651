//! A key's value as replicas hold and exchange it: the data and its pruning markers.

use crate::address::UniqueAddress;

use super::data::ReplicaId;
use super::erased::{AnyData, AnyDelta, TypeMismatch, cbor};
use super::pruning::{PruningMarkers, mark_seen, merge_markers, performed};
use super::settings::ReplicatorSettings;

/// How merges into one replica go.
#[derive(Clone, Copy, Debug)]
pub(super) struct MergeRules<'a> {
    /// This replica's node: it adds itself to the markers it merges.
    pub(super) me: &'a UniqueAddress,
    /// Pruning's safety rule; off only as a deliberate fault (see
    /// [`DeliberateFaults`](super::DeliberateFaults)).
    pub(super) strip_pruned: bool,
}

impl<'a> MergeRules<'a> {
    /// The rules of the replica of `me` with `settings`.
    pub(super) fn of(me: &'a UniqueAddress, settings: &ReplicatorSettings) -> Self {
        MergeRules {
            me,
            strip_pruned: !settings.faults.skip_pruning_safety_rule,
        }
    }
}

/// A key's data with the pruning markers that travel with it.
#[derive(Clone, Debug)]
pub struct DataEnvelope {
    /// The data.
    pub data: Box<dyn AnyData>,
    /// Where pruning of each removed replica stands in this key.
    pub pruning: PruningMarkers,
}

impl DataEnvelope {
    /// Data with no pruning markers.
    pub fn new(data: Box<dyn AnyData>) -> Self {
        DataEnvelope {
            data,
            pruning: PruningMarkers::new(),
        }
    }

    /// Whether `other` holds the same data and markers.
    pub fn same_as(&self, other: &DataEnvelope) -> bool {
        self.pruning == other.pruning && self.data.same_as(other.data.as_ref())
    }

    /// Merges `other` in: markers first, then the data, stripped of every replica whose
    /// pruning was performed (the safety rule: an old copy never brings a pruned replica's
    /// data back).
    pub(super) fn merge(
        &mut self,
        other: &DataEnvelope,
        rules: MergeRules,
    ) -> Result<(), TypeMismatch> {
        let strip_pruned = rules.strip_pruned;
        merge_markers(&mut self.pruning, &other.pruning);
        mark_seen(&mut self.pruning, rules.me);
        let pruned: Vec<ReplicaId> = performed(&self.pruning).collect();
        if pruned.is_empty() || !strip_pruned {
            self.data.merge_data(other.data.as_ref())?;
        } else {
            let mut incoming = other.data.clone_data();
            for &replica in &pruned {
                incoming.pruning_cleanup(replica);
            }
            self.data.merge_data(incoming.as_ref())?;
        }
        if strip_pruned {
            self.strip_pruned();
        }
        Ok(())
    }

    /// Merges a delta in, then strips every pruned replica's data it may have carried.
    pub(super) fn merge_delta(
        &mut self,
        delta: &dyn AnyDelta,
        rules: MergeRules,
    ) -> Result<(), TypeMismatch> {
        self.data.merge_delta(delta)?;
        if rules.strip_pruned {
            self.strip_pruned();
        }
        Ok(())
    }

    fn strip_pruned(&mut self) {
        let pruned: Vec<ReplicaId> = performed(&self.pruning).collect();
        for replica in pruned {
            if self.data.needs_pruning_from(replica) {
                self.data.pruning_cleanup(replica);
            }
        }
    }

    /// The envelope encoded (data, then markers): the same bytes for the same state.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut bytes = self.data.encode();
        if !self.pruning.is_empty() {
            bytes.extend(cbor(&self.pruning));
        }
        bytes
    }
}
