//! The built-in demo entity kind `counter`: a number per id, served over the management API
//! by `shardik node --demo-counters`.
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

use super::{Entity, EntityContext, EntityKind, EntityRegion, ShardingError};

/// The kind's name.
pub const COUNTER_KIND: &str = "counter";

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

    async fn handle(&mut self, cmd: CounterCommand, ctx: &mut EntityContext) -> CounterReply {
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
    EntityKind::new(COUNTER_KIND, |_| Counter::default())
}

/// `POST /demo/counter/{id}/increment` and `GET /demo/counter/{id}`, each answering
/// `{"id", "value", "node"}`.
pub fn counter_routes(region: EntityRegion<Counter>) -> Router {
    Router::new()
        .route("/demo/counter/{id}/increment", post(increment))
        .route("/demo/counter/{id}", get(read))
        .with_state(region)
}

const ASK_TIMEOUT: Duration = Duration::from_secs(5);

async fn increment(
    State(region): State<EntityRegion<Counter>>,
    Path(id): Path<String>,
) -> Response {
    answer(&region, id, CounterCommand::Increment).await
}

async fn read(State(region): State<EntityRegion<Counter>>, Path(id): Path<String>) -> Response {
    answer(&region, id, CounterCommand::Get).await
}

async fn answer(region: &EntityRegion<Counter>, id: String, cmd: CounterCommand) -> Response {
    if id.is_empty() || id.len() > 256 {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({"message": "a counter id is 1 to 256 bytes"})),
        )
            .into_response();
    }
    match region.entity_ref(&id).ask(cmd, ASK_TIMEOUT).await {
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
