//! The demo entity kind `counter` of `shardik node --demo-counters`: a number per id, served
//! over the management API. It is the binary's, not the library's: an example of what a user
//! writes.
//!
//! Counters are event sourced: each increment is one `Incremented` event in the node's store,
//! written before the increment is answered, so a counter keeps its value when it is
//! passivated, when its shard moves, when its node is killed and when the whole cluster
//! restarts.
//!
//! Each node also says which counters run on it and since when (`GET /demo/counters/live`,
//! [`live`]), so that a test can prove that no counter ever ran on two nodes at once.

pub mod live;

use std::sync::OnceLock;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use shardik_runtime::http::WriteGuard;
use shardik_runtime::persistence::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence,
    Retention,
};
use shardik_runtime::sharding::{EntityKind, EntityTypeKey, ReplyTo, Sharding, ShardingError};

/// The kind's typed name.
pub const COUNTER: EntityTypeKey<EventSourced<Counter>> = EntityTypeKey::new("counter");

/// What a counter is told or asked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CounterCommand {
    /// Add one, answering nobody (a tell).
    Increment,
    /// Add one, and answer the new value.
    IncrementAndGet(ReplyTo<CounterReply>),
    /// Read.
    Get(ReplyTo<CounterReply>),
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
    /// Lists this incarnation as live from its first command until the state is dropped with
    /// it. Set on the first command, not at creation: recovery replaces the state it started
    /// with, and the state it ends with is the one commands see.
    #[serde(skip)]
    incarnation: OnceLock<live::Incarnation>,
}

impl EventSourcedEntity for Counter {
    type Command = CounterCommand;
    type Event = Incremented;

    fn handle_command(
        &self,
        cmd: CounterCommand,
        ctx: &mut EventSourcedContext<Self>,
    ) -> Effect<Self> {
        self.incarnation
            .get_or_init(|| live::Incarnation::begin(ctx.node(), ctx.entity_id()));
        let node = ctx.node().address.to_string();
        match cmd {
            CounterCommand::Increment => Self::persist(Incremented),
            CounterCommand::IncrementAndGet(reply_to) => {
                Self::persist(Incremented).then_reply(reply_to, move |s| CounterReply {
                    value: s.value,
                    node,
                })
            }
            CounterCommand::Get(reply_to) => Effect::reply(
                reply_to,
                CounterReply {
                    value: self.value,
                    node,
                },
            ),
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

/// Every `/demo/...` route of a node started without `--demo-counters`: 404, saying that the
/// `counter` kind was never initialised here and how to start it, instead of the API's
/// generic "no such route" (the routes exist on the nodes that run the demo).
pub fn counters_not_started_routes() -> Router {
    async fn not_started() -> Response {
        (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({
                "message": "the demo entity kind `counter` was never initialised on this node: \
                            start `shardik node` with --demo-counters to serve /demo/counter/..."
            })),
        )
            .into_response()
    }
    Router::new()
        .route("/demo", any(not_started))
        .route("/demo/{*rest}", any(not_started))
}

/// `POST /demo/counter/{id}/increment` and `GET /demo/counter/{id}`, each answering
/// `{"id", "value", "node"}`; an increment is answered once it is durable. The counters are
/// looked up by their key on `sharding`, where [`counter_kind`] must have been registered.
/// The increment is a state-changing route behind `guard` (the management API's rule; the
/// caller decides whether asking for the demo enables it, see `node.rs`); the reads are open.
///
/// `GET /demo/counters/live` answers `{"node", "nodeUid", "now", "counters": [{"id",
/// "startedAt"}]}`: the counters running on this node at the instant `now`, each with the
/// instant its incarnation began, both in `CLOCK_MONOTONIC` nanoseconds (see [`live`]).
pub fn counter_routes(sharding: Sharding, guard: &WriteGuard) -> Router {
    Router::new()
        .route(
            "/demo/counter/{id}/increment",
            guard.protect(post(increment)),
        )
        .route("/demo/counter/{id}", get(read))
        .route("/demo/counters/live", get(live_counters))
        .with_state(sharding)
}

async fn live_counters(State(sharding): State<Sharding>) -> Json<live::LiveReport> {
    Json(live::report(sharding.self_node()))
}

const ASK_TIMEOUT: Duration = Duration::from_secs(5);

async fn increment(State(sharding): State<Sharding>, Path(id): Path<String>) -> Response {
    answer(&sharding, id, CounterCommand::IncrementAndGet).await
}

async fn read(State(sharding): State<Sharding>, Path(id): Path<String>) -> Response {
    answer(&sharding, id, CounterCommand::Get).await
}

async fn answer(
    sharding: &Sharding,
    id: String,
    cmd: fn(ReplyTo<CounterReply>) -> CounterCommand,
) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_listed_as_live_from_its_first_command_until_it_is_dropped() {
        let id = "live-listing-test";
        let mut ctx = EventSourcedContext::<Counter>::detached(id);
        let node = ctx.node().clone();
        let listed = || {
            live::report(&node)
                .counters
                .iter()
                .filter(|c| c.id == id)
                .count()
        };
        let counter = Counter::default();
        assert_eq!(
            listed(),
            0,
            "not before its first command (recovery may replace it)"
        );
        let (reply_to, _) = ReplyTo::detached();
        let _ = counter.handle_command(CounterCommand::Get(reply_to), &mut ctx);
        let _ = counter.handle_command(CounterCommand::Increment, &mut ctx);
        assert_eq!(listed(), 1, "one incarnation, however many commands");
        // A snapshot of the state is a value, not an incarnation.
        let snapshot: Counter =
            serde_json::from_str(&serde_json::to_string(&counter).unwrap()).unwrap();
        drop(snapshot);
        assert_eq!(listed(), 1);
        drop(counter);
        assert_eq!(listed(), 0, "gone with its state");
    }

    /// The strangers test (`tests/strangers.rs`) forges increments by hand, with these bytes
    /// as the command: if the kind's codec or the command's shape changed, its forged frames
    /// would stop meaning "increment" and the test would prove nothing.
    #[test]
    fn an_increment_travels_as_the_single_byte_the_strangers_test_forges() {
        use shardik_runtime::sharding::{Codec, Postcard};
        // The kind's codec is postcard (the type says so: this fails to compile otherwise).
        let _: fn(&Persistence) -> EntityKind<EventSourced<Counter>, Postcard> = counter_kind;
        assert_eq!(Postcard.encode(&CounterCommand::Increment).unwrap(), [0]);
        assert!(matches!(
            Postcard.decode::<CounterCommand>(&[0]).unwrap(),
            CounterCommand::Increment
        ));
    }
}
