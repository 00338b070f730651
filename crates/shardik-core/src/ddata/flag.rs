//! [`Flag`]: a boolean that, once switched on, stays on.

use super::replicated::{RemovedReplicaPruning, ReplicatedData};

/// A boolean that starts off and, once switched on by any replica, is on everywhere after a
/// merge: on wins. It cannot be switched off again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Flag {
    on: bool,
}

impl Flag {
    /// A flag that is off.
    pub fn new() -> Self {
        Self::default()
    }

    /// Switches the flag on, for good.
    pub fn switch_on(&mut self) {
        self.on = true;
    }

    /// Whether the flag is on.
    pub fn is_on(&self) -> bool {
        self.on
    }
}

impl ReplicatedData for Flag {
    fn merge(&mut self, other: &Self) {
        self.on |= other.on;
    }
}

/// Nothing here is kept per replica, so there is nothing to prune: this lets the type be a
/// map's value, or be replicated under the same rules as the types that are pruned.
impl<R> RemovedReplicaPruning<R> for Flag {
    fn needs_pruning_from(&self, _removed: &R) -> bool {
        false
    }

    fn replicas_named(&self, _into: &mut std::collections::BTreeSet<R>) {}

    fn prune(&mut self, _removed: &R, _owner: &R) {}

    fn pruning_cleanup(&mut self, _removed: &R) {}
}
