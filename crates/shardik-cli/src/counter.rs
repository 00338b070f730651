//! The demo entity kind `counter` of `shardik node --demo-counters`: a number per id, served
//! over the management API. It is the binary's, not the library's: an example of what a user
//! writes.
//!
//! The value lives in memory only: when the entity is passivated or its shard moves, the next
//! incarnation starts from zero again (durable entities come with the storage layer).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use shardik_runtime::sharding::{
    Entity, EntityContext, EntityKind, EntityTypeKey, Sharding, ShardingError,
};

/// The kind's typed name.
pub const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");

/// What a counter is told.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum CounterCommand {
    /// Add one.
    Increment,
    /// Read.
    Get,
}

/// A counter's answer: its value and the node that hosts it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CounterReply {
    /// The value after the command.
    pub value: u64,
    /// `host:port` of the node running the entity.
    pub node: String,
}

/// A number per id.
#[derive(Debug, Default)]
pub struct Counter {
    value: u64,
}

impl Entity for Counter {
    type Command = CounterCommand;
    type Reply = CounterReply;

    async fn handle(&mut self, cmd: CounterCommand, ctx: &mut EntityContext<Self>) -> CounterReply {
        if cmd == CounterCommand::Increment {
            self.value += 1;
        }
        CounterReply {
            value: self.value,
            node: ctx.node().address.to_string(),
        }
    }
}

/// The `counter` kind.
pub fn counter_kind() -> EntityKind<Counter> {
    EntityKind::for_key(COUNTER, |_| Counter::default())
}

/// `POST /demo/counter/{id}/increment` and `GET /demo/counter/{id}`, each answering
/// `{"id", "value", "node"}`. The counters are looked up by their key on `sharding`, where
/// [`counter_kind`] must have been registered.
pub fn counter_routes(sharding: Sharding) -> Router {
    Router::new()
        .route("/demo/counter/{id}/increment", post(increment))
        .route("/demo/counter/{id}", get(read))
        .with_state(sharding)
}

const ASK_TIMEOUT: Duration = Duration::from_secs(5);

async fn increment(State(sharding): State<Sharding>, Path(id): Path<String>) -> Response {
    answer(&sharding, id, CounterCommand::Increment).await
}

async fn read(State(sharding): State<Sharding>, Path(id): Path<String>) -> Response {
    answer(&sharding, id, CounterCommand::Get).await
}

async fn answer(sharding: &Sharding, id: String, cmd: CounterCommand) -> Response {
    if id.is_empty() || id.len() > 256 {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({"message": "a counter id is 1 to 256 bytes"})),
        )
            .into_response();
    }
    let reply = match sharding.entity_ref_for(COUNTER, &id) {
        Ok(counter) => counter.ask(cmd, ASK_TIMEOUT).await,
        Err(e) => Err(e),
    };
    match reply {
        Ok(r) => {
            Json(serde_json::json!({"id": id, "value": r.value, "node": r.node})).into_response()
        }
        Err(e) => {
            let status = match e {
                ShardingError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                ShardingError::BufferFull => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            (
                status,
                Json(serde_json::json!({"id": id, "message": e.to_string()})),
            )
                .into_response()
        }
    }
}
