//! The hidden demo kind `evolving` of `shardik node --demo-evolving v1|v2`: one command type
//! in two versions compiled into the same binary, so that a test can run a cluster in the
//! middle of a rolling update (some nodes on v1, some on v2) with the real binary and check
//! that commands and replies cross versions both ways (`tests/evolving_multiprocess.rs`).
//!
//! Version 2 added a field with a default to the command (`note`) and to the reply. The kind
//! uses the CBOR codec: a v1 node's command, without `note`, reads on a v2 node as `None`;
//! a v2 node's command, with it, reads on a v1 node, which ignores it. With postcard neither
//! would decode (docs/EVOLUTION.md).
//!
//! `POST /demo/evolving/{id}` with `{"name", "value", "note"}` (a v1 node cannot send the
//! note, as its command has no such field) asks the entity and answers
//! `{"id", "sender", "reply": {"host", "version", "name", "value", "note"?}}`: which node and
//! version handled it, and what it read.

mod v1;
mod v2;
mod version;

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use shardik_runtime::http::WriteGuard;
use shardik_runtime::sharding::{Cbor, EntityKind, EntityTypeKey, Sharding};

use version::{SetRequest, Version};

/// Which version of the demo's command type this node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EvolvingVersion {
    V1,
    V2,
}

/// The kind's name, the same in both versions: they are one kind at two versions.
const KIND: &str = "evolving";

const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Registers the kind at `version` on `sharding` and returns its route behind `guard`.
pub fn register(
    version: EvolvingVersion,
    sharding: &Sharding,
    guard: &WriteGuard,
) -> anyhow::Result<Router> {
    match version {
        EvolvingVersion::V1 => register_version::<v1::Evolving>(sharding, guard),
        EvolvingVersion::V2 => register_version::<v2::Evolving>(sharding, guard),
    }
}

fn register_version<V: Version>(sharding: &Sharding, guard: &WriteGuard) -> anyhow::Result<Router>
where
    V::Command: DeserializeOwned,
{
    // Its entities keep nothing: there is no store to remember them in, whatever
    // remember-entities says for the node's durable kinds.
    let kind = EntityKind::<V>::new(KIND, V::create)
        .without_remember_entities()
        .with_codec(Cbor);
    sharding.init(kind)?;
    Ok(Router::new()
        .route("/demo/evolving/{id}", guard.protect(post(set::<V>)))
        .with_state(sharding.clone()))
}

async fn set<V: Version>(
    State(sharding): State<Sharding>,
    Path(id): Path<String>,
    Json(request): Json<SetRequest>,
) -> Response {
    let key = EntityTypeKey::<V>::new(KIND);
    let reply = match sharding.entity_ref_for(key, &id) {
        Ok(entity) => {
            entity
                .ask(|reply_to| V::command(request, reply_to), ASK_TIMEOUT)
                .await
        }
        Err(e) => Err(e),
    };
    match reply {
        Ok(reply) => {
            Json(serde_json::json!({"id": id, "sender": V::NAME, "reply": reply})).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"id": id, "sender": V::NAME, "message": e.to_string()})),
        )
            .into_response(),
    }
}
