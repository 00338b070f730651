//! The simulated entity kind's types, shared by the handlers (`entities.rs`) and the durable
//! journal (`durable.rs`) without either importing the other's module.

use shardik_core::delivery::ConsumerMarks;
use shardik_core::sharding::entities::{self, Lifecycle};
use shardik_persistence::JournalCursor;

use super::messages::{EventRec, SimMsg};

/// One incarnation of a simulated entity.
pub struct SimEntity {
    /// Unique over the run: tells incarnations apart.
    pub(crate) incarnation: u64,
    /// A durable entity's place in its journal (`None`: not recovered yet).
    pub(crate) journal: Option<JournalCursor>,
    /// A durable entity's state: the events it applied.
    pub(crate) state: Vec<EventRec>,
    /// A durable entity's reliable-delivery marks, loaded from the store with its first
    /// sequenced message (`None`: not loaded by this incarnation).
    pub(crate) marks: Option<ConsumerMarks>,
}

/// What a simulated entity is told.
pub enum SimCmd {
    /// A client's command.
    Client(SimMsg),
    /// A timer the incarnation `incarnation` set.
    Tick {
        /// Who set it.
        incarnation: u64,
    },
    /// The kind's stop message.
    Stop,
}

/// Who waits for a reply: the client command's number, or nobody.
pub struct SimAsk(pub Option<u64>);

impl entities::Asker for SimAsk {
    fn nobody() -> Self {
        SimAsk(None)
    }
    fn waits(&self) -> bool {
        self.0.is_some()
    }
}

/// The simulated entity kind's types.
pub struct SimLife;

impl Lifecycle for SimLife {
    type Entity = SimEntity;
    type Command = SimCmd;
    type Reply = u64;
    type Asker = SimAsk;
}
