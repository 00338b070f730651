//! What both versions of the demo provide: the [`Version`] trait (entity, answer, command)
//! and the [`SetRequest`] each makes its command from.
//!
//! Kept apart from the parent module, which picks a version and serves the route, so that
//! `v1.rs` and `v2.rs` implement it without importing the module that chooses between them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shardik_runtime::sharding::{Cbor, Entity, ReplyTo};

/// What the HTTP route is given.
#[derive(Debug, Deserialize)]
pub(super) struct SetRequest {
    pub(super) name: String,
    pub(super) value: u64,
    #[serde(default)]
    pub(super) note: Option<String>,
}

/// One version of the demo: its entity, its answer, and how it makes its command from a
/// request (the answer crosses the network as CBOR, which reads across versions).
pub(super) trait Version: Entity + Send + 'static {
    const NAME: &'static str;
    type Seen: Serialize + DeserializeOwned + Send + 'static;
    fn command(request: SetRequest, reply_to: ReplyTo<Self::Seen, Cbor>) -> Self::Command;
    fn create(id: &str) -> Self;
}
