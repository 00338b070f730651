//! The demo's reliable counters: the kind `reliable-counter` (the demo's `counter` entity, made
//! [reliable](shardik_runtime::sharding::EntityKind::reliable)) on every `--demo-counters`
//! node, and, on a node started with `--demo-producer ID` as well, a reliable producer whose
//! durable queue is in the node's store, driven over the management API:
//!
//! * `POST /demo/producer/increment/{id}?times=N` hands N increments of counter `id` to the
//!   producer and answers `{"accepted": N}` once all are accepted (stored in the queue): from
//!   then on each is applied exactly once, whatever node is killed meanwhile;
//! * `GET /demo/producer` answers `{"id", "unconfirmed"}`;
//! * `GET /demo/reliable-counter/{id}` answers `{"id", "value", "node"}` (on every demo node).

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use shardik_runtime::delivery::{Delivery, ProducerOptions, Reliable, ReliableProducer};
use shardik_runtime::http::WriteGuard;
use shardik_runtime::persistence::{EventSourced, EventSourcedKind, Persistence, Retention};
use shardik_runtime::sharding::{EntityRegion, EntityTypeKey, InitError, Sharding};

use crate::counter::{Counter, CounterCommand};

/// The kind's name.
pub const RELIABLE_COUNTER: &str = "reliable-counter";

/// The kind's entities: the demo counter, behind the reliable consumer.
pub type ReliableCounter = Reliable<EventSourced<Counter>>;

/// The most increments one request hands over.
const MAX_TIMES: u32 = 10_000;

const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Registers `reliable-counter`, persisted in `persistence` with the demo counter's snapshots.
pub fn register(
    sharding: &Sharding,
    persistence: &Persistence,
) -> Result<EntityRegion<ReliableCounter>, InitError> {
    let kind = EventSourcedKind::new(EntityTypeKey::new(RELIABLE_COUNTER), persistence, |_| {
        Counter::default()
    })
    .with_snapshots(Retention {
        every: 100,
        keep: 2,
        delete_events: true,
    })
    .into_kind()
    .reliable();
    sharding.init(kind)
}

/// Starts the producer `id` sending to `region`, with its durable queue in `persistence`'s
/// store: what an earlier incarnation of `id` left unconfirmed is sent again first.
pub async fn start_producer(
    id: &str,
    region: &EntityRegion<ReliableCounter>,
    persistence: &Persistence,
) -> anyhow::Result<ReliableProducer<CounterCommand>> {
    let options = ProducerOptions::new(id).with_durable_queue(persistence.store().clone());
    Ok(ReliableProducer::start(region, options).await?)
}

#[derive(Clone)]
struct Routes {
    region: EntityRegion<ReliableCounter>,
    producer: Option<ReliableProducer<CounterCommand>>,
}

/// The routes above; the producer's only when there is one. Handing increments over changes
/// state, so it is behind `guard`.
pub fn routes(
    region: EntityRegion<ReliableCounter>,
    producer: Option<ReliableProducer<CounterCommand>>,
    guard: &WriteGuard,
) -> Router {
    Router::new()
        .route("/demo/reliable-counter/{id}", get(read))
        .route("/demo/producer", get(producer_state))
        .route(
            "/demo/producer/increment/{id}",
            guard.protect(post(increment)),
        )
        .with_state(Routes { region, producer })
}

fn refuse(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "message": message }))).into_response()
}

fn no_producer() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "this node runs no reliable producer: start it with --demo-producer ID".into(),
    )
}

fn bad_id(id: &str) -> Option<Response> {
    (id.is_empty() || id.len() > 256).then(|| {
        refuse(
            StatusCode::BAD_REQUEST,
            "a counter id is 1 to 256 bytes".into(),
        )
    })
}

async fn read(State(routes): State<Routes>, Path(id): Path<String>) -> Response {
    if let Some(refused) = bad_id(&id) {
        return refused;
    }
    let asked = routes
        .region
        .entity_ref(&id)
        .ask(|r| Delivery::Plain(CounterCommand::Get(r)), ASK_TIMEOUT)
        .await;
    match asked {
        Ok(r) => {
            Json(serde_json::json!({"id": id, "value": r.value, "node": r.node})).into_response()
        }
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn producer_state(State(routes): State<Routes>) -> Response {
    match &routes.producer {
        Some(p) => {
            Json(serde_json::json!({"id": p.id(), "unconfirmed": p.unconfirmed()})).into_response()
        }
        None => no_producer(),
    }
}

#[derive(Deserialize)]
struct Times {
    times: Option<u32>,
}

async fn increment(
    State(routes): State<Routes>,
    Path(id): Path<String>,
    Query(q): Query<Times>,
) -> Response {
    let Some(producer) = &routes.producer else {
        return no_producer();
    };
    if let Some(refused) = bad_id(&id) {
        return refused;
    }
    let times = q.times.unwrap_or(1);
    if times == 0 || times > MAX_TIMES {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("times is 1 to {MAX_TIMES}"),
        );
    }
    for accepted in 0..times {
        if let Err(e) = producer.send(&id, CounterCommand::Increment).await {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({"accepted": accepted, "message": e.to_string()})),
            )
                .into_response();
        }
    }
    Json(serde_json::json!({ "accepted": times })).into_response()
}
