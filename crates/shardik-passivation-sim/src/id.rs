//! The simulator's entity id.

use std::hash::{Hash, Hasher};

use shardik_passivation::EntityHash;

/// Simulator entity id: the numeric id plus the Java hash code of its string form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimId {
    /// Numeric id (or interned index for non-numeric trace ids).
    pub id: u64,
    /// Java `String.hashCode` of the id as written in the trace.
    pub hash: i32,
}

impl Hash for SimId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.id);
    }
}

impl EntityHash for SimId {
    fn entity_hash(&self) -> i32 {
        self.hash
    }
}
