//! The types a user writes against: entities and their context (`entity.rs`), codecs
//! (`codec.rs`), entity kinds (`entity_kind.rs`) and the errors of telling and asking
//! (`errors.rs`). None of them needs the kind's task: they depend only on the strategy and
//! remember-entities settings types.

mod codec;
mod entity;
mod entity_kind;
mod errors;

pub use codec::{Cbor, Codec, CodecError, Postcard};
pub(crate) use entity::done_or_panic;
pub use entity::{Entity, EntityContext, EntityFailure, SyncEntity};
pub use entity_kind::{EntityKind, EntityTypeKey, ShardExtractor};
pub use errors::{AskError, ShardingError, TellError};
