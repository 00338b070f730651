//! The answers every part of the API words alike: a JSON `{"message": ...}` with a status
//! ([`message`], used by the routes, the write guard and the port's own refusals), and the
//! two fallbacks for a request no route takes (an unknown path, a method the path does not
//! serve); the management server also puts the first behind the application's routes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::management_json::Message;

/// A JSON `{"message": text}` answer with `status`.
pub(crate) fn message(status: StatusCode, text: impl Into<String>) -> Response {
    (
        status,
        Json(Message {
            message: text.into(),
        }),
    )
        .into_response()
}

pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    message(
        StatusCode::NOT_FOUND,
        format!(
            "no route for {}; the routes are /cluster/members, /cluster/members/{{address}}, \
             /cluster/shards/{{type}}, /ready, /alive, /metrics and /bootstrap/seed-nodes",
            uri.path()
        ),
    )
}

pub(super) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    message(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}
