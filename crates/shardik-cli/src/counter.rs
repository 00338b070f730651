//! The demo entity kind `counter` of `shardik node --demo-counters`: a number per id, served
//! over the management API. It is the binary's, not the library's: an example of what a user
//! writes.
//!
//! Counters are event sourced: each increment is one `Incremented` event in the node's store,
//! written before the increment is answered, so a counter keeps its value when it is
//! passivated, when its shard moves, when its node is killed and when the whole cluster
//! restarts.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use shardik_runtime::persistence::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence,
    Retention,
};
use shardik_runtime::sharding::{EntityKind, EntityTypeKey, Sharding, ShardingError};

/// The kind's typed name.
pub const COUNTER: EntityTypeKey<EventSourced<Counter>> = EntityTypeKey::new("counter");

/// What a counter is told.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum CounterCommand {
    /// Add one.
    Increment,
    /// Read.
    Get,
}

/// What a counter records: one event per increment.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Incremented;

/// A counter's answer: its value and the node that hosts it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CounterReply {
    /// The value after the command.
    pub value: u64,
    /// `host:port` of the node running the entity.
    pub node: String,
}

/// A number per id: the count of its `Incremented` events.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    value: u64,
}

impl EventSourcedEntity for Counter {
    type Command = CounterCommand;
    type Event = Incremented;
    type Reply = CounterReply;

    fn handle_command(
        &self,
        cmd: CounterCommand,
        ctx: &mut EventSourcedContext<Self>,
    ) -> Effect<Self> {
        let node = ctx.node().address.to_string();
        match cmd {
            CounterCommand::Increment => {
                Effect::persist(Incremented, move |s: &Self| CounterReply {
                    value: s.value,
                    node,
                })
            }
            CounterCommand::Get => Effect::reply(CounterReply {
                value: self.value,
                node,
            }),
        }
    }

    fn apply_event(&mut self, _: &Incremented) {
        self.value += 1;
    }
}

/// The `counter` kind, persisted in `persistence`, with a snapshot every 100 increments (the
/// newest two kept, older events deleted) so that recovering a busy counter stays quick.
pub fn counter_kind(persistence: &Persistence) -> EntityKind<EventSourced<Counter>> {
    EventSourcedKind::new(COUNTER, persistence, |_| Counter::default())
        .with_snapshots(Retention {
            every: 100,
            keep: 2,
            delete_events: true,
        })
        .into_kind()
}

/// `POST /demo/counter/{id}/increment` and `GET /demo/counter/{id}`, each answering
/// `{"id", "value", "node"}`; an increment is answered once it is durable. The counters are looked up by their key on `sharding`, where
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
