//! The carts' HTTP API (JSON):
//!
//! | Request | Body | Does |
//! |---|---|---|
//! | `POST /carts/{id}/items` | `{"item": "socks", "quantity": 2}` | adds an item |
//! | `PUT /carts/{id}/items/{item}` | `{"quantity": 3}` | sets an item's quantity |
//! | `DELETE /carts/{id}/items/{item}` | | removes an item |
//! | `POST /carts/{id}/checkout` | | checks the cart out |
//! | `GET /carts/{id}` | | reads the cart |
//!
//! Every success answers 200 with the cart after the request ([`CartAnswer`]), and a change
//! is answered only once its event is durable in the store. Failures answer
//! `{"message": "..."}` with 400 for a malformed request (bad JSON, a quantity of 0, an empty
//! item name), 409 for a change the cart refuses in its state (the item is already there or
//! not there, the cart is empty or checked out), 504 when the cart did not answer in time
//! (the change may or may not have been made: read the cart), and 503 when the cart could not
//! be reached (its node failed or is leaving: retry).

use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use shardik::{AskError, Sharding, ShardingError};

use crate::cart::{CART, CartCommand, CartError, CartRequest, Summary, check_item, check_quantity};

/// The longest cart id, in bytes.
pub const MAX_CART_ID_LEN: usize = 256;

/// What every successful request answers: the cart's id and contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CartAnswer {
    /// The cart's id.
    pub id: String,
    /// Its contents, and the node that answered for it.
    #[serde(flatten)]
    pub summary: Summary,
}

/// The body of `POST /carts/{id}/items`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddItem {
    /// The item's name.
    pub item: String,
    /// How many; at least 1.
    pub quantity: u32,
}

/// The body of `PUT /carts/{id}/items/{item}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdjustQuantity {
    /// The new quantity; at least 1.
    pub quantity: u32,
}

/// The routes above, asking the carts of `sharding` (where [`cart_kind`](crate::cart_kind)
/// must be registered) and waiting at most `ask_timeout` for each answer. They add no
/// fallback, so they merge with the management API's routes.
pub fn routes(sharding: Sharding, ask_timeout: Duration) -> Router {
    Router::new()
        .route("/carts/{id}", get(read))
        .route("/carts/{id}/items", post(add_item))
        .route(
            "/carts/{id}/items/{item}",
            put(adjust_quantity).delete(remove_item),
        )
        .route("/carts/{id}/checkout", post(checkout))
        .method_not_allowed_fallback(|| async {
            failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this path",
            )
        })
        .with_state(Api {
            sharding,
            ask_timeout,
        })
}

#[derive(Clone)]
struct Api {
    sharding: Sharding,
    ask_timeout: Duration,
}

fn failure(status: StatusCode, message: impl Into<String>) -> Response {
    let message: String = message.into();
    (status, Json(serde_json::json!({ "message": message }))).into_response()
}

fn bad_request(message: impl Into<String>) -> Response {
    failure(StatusCode::BAD_REQUEST, message)
}

async fn read(State(api): State<Api>, Path(id): Path<String>) -> Response {
    api.ask(id, CartCommand::Get).await
}

async fn add_item(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Result<Json<AddItem>, JsonRejection>,
) -> Response {
    // axum answers a body of the wrong shape with 422 and plain text; this API promises 400
    // and a JSON message for every malformed request.
    let Json(AddItem { item, quantity }) = match body {
        Ok(body) => body,
        Err(rejection) => return bad_request(rejection.body_text()),
    };
    if let Err(why) = check_item(&item).and_then(|()| check_quantity(quantity)) {
        return bad_request(why);
    }
    api.ask(id, CartCommand::AddItem { item, quantity }).await
}

async fn adjust_quantity(
    State(api): State<Api>,
    Path((id, item)): Path<(String, String)>,
    body: Result<Json<AdjustQuantity>, JsonRejection>,
) -> Response {
    let Json(AdjustQuantity { quantity }) = match body {
        Ok(body) => body,
        Err(rejection) => return bad_request(rejection.body_text()),
    };
    if let Err(why) = check_item(&item).and_then(|()| check_quantity(quantity)) {
        return bad_request(why);
    }
    api.ask(id, CartCommand::AdjustQuantity { item, quantity })
        .await
}

async fn remove_item(State(api): State<Api>, Path((id, item)): Path<(String, String)>) -> Response {
    if let Err(why) = check_item(&item) {
        return bad_request(why);
    }
    api.ask(id, CartCommand::RemoveItem { item }).await
}

async fn checkout(State(api): State<Api>, Path(id): Path<String>) -> Response {
    api.ask(id, CartCommand::Checkout).await
}

impl Api {
    /// Asks cart `id` and turns its answer into the response.
    async fn ask(&self, id: String, cmd: CartCommand) -> Response {
        if id.is_empty() || id.len() > MAX_CART_ID_LEN {
            return bad_request(format!("a cart id is 1 to {MAX_CART_ID_LEN} bytes"));
        }
        let answer = match self.sharding.entity_ref_for(CART, &id) {
            Ok(cart) => {
                cart.ask_result(CartRequest::of(cmd), self.ask_timeout)
                    .await
            }
            Err(e) => Err(AskError::Sharding(e)),
        };
        match answer {
            Ok(summary) => Json(CartAnswer { id, summary }).into_response(),
            // A malformed command is the request's fault; a refusal in the cart's state is a
            // conflict. Either way the cart's reason is the whole message.
            Err(AskError::Refused(why @ CartError::Invalid(_))) => {
                failure(StatusCode::BAD_REQUEST, why.to_string())
            }
            Err(AskError::Refused(why)) => failure(StatusCode::CONFLICT, why.to_string()),
            Err(AskError::Sharding(e)) => failure(status_of(&e), e.to_string()),
            Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

/// The HTTP status for a failed ask.
fn status_of(e: &ShardingError) -> StatusCode {
    match e {
        ShardingError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        // Passing conditions of the cluster: the cart's node failed, is leaving, or has not
        // registered the kind yet; its write failed and the next command recovers it.
        ShardingError::BufferFull
        | ShardingError::Dropped(_)
        | ShardingError::ShardUnavailable(_)
        | ShardingError::RegionStopped
        | ShardingError::EntityFailed(_)
        | ShardingError::UnknownKind(_) => StatusCode::SERVICE_UNAVAILABLE,
        // The rest are bugs of this program (a codec, a wrong type, a zero timeout).
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_gateway_timeouts_lost_shards_unavailable() {
        assert_eq!(
            status_of(&ShardingError::Timeout(Duration::from_secs(5))),
            StatusCode::GATEWAY_TIMEOUT
        );
        assert_eq!(
            status_of(&ShardingError::ShardUnavailable("node left".into())),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status_of(&ShardingError::InvalidTimeout),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
