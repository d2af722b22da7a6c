//! Webhook receivers over HTTP: `POST <path>` runs the delivery through
//! [`WebhookReceiver::receive`].

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use http::header::{HeaderValue, RETRY_AFTER};
use serde_json::json;

use super::server::{BodyError, json_response, read_limited};
use crate::webhook::{WebhookError, WebhookReceiver};

/// How long a provider told `webhook.in_progress` should wait, in seconds.
const IN_PROGRESS_RETRY_AFTER_SECONDS: &str = "5";

impl WebhookReceiver {
    /// The receiver served at `POST path`, to merge into an application's router (next to an
    /// [`AipServer`](super::AipServer)'s routes, say). Feature `http`.
    ///
    /// The answer is `200 {"delivery_id": …}` for a delivery the handler took, `200
    /// {"delivery_id": …, "replayed": true}` for one it took before (`webhook.replayed`: not run
    /// again, and nothing left for the provider to retry), and otherwise the [`WebhookError`]'s
    /// [status](WebhookError::status) with `{"error": <AIP error>}`; `webhook.in_progress` also
    /// carries `Retry-After`. The provider's own authentication is
    /// the signature: the route takes no bearer token. A body longer than
    /// [`max_body_bytes`](WebhookReceiver::max_body_bytes) is refused before it is read
    /// further.
    ///
    /// # Panics
    ///
    /// When `path` is not a valid axum route path (it must start with `/`).
    pub fn router(&self, path: &str) -> Router {
        Router::new()
            .route(path, post(deliver))
            .with_state(self.clone())
    }
}

async fn deliver(State(receiver): State<WebhookReceiver>, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let limit = receiver.max_body_bytes();
    let body = match read_limited(&parts.headers, body, limit).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            let error = WebhookError::PayloadTooLarge { limit };
            receiver.log_refusal(&error);
            return refused(&error);
        }
        Err(BodyError::Unreadable(why)) => {
            let error = WebhookError::InvalidDelivery(format!("the body could not be read: {why}"));
            receiver.log_refusal(&error);
            return refused(&error);
        }
    };
    match receiver.receive(&parts.headers, body).await {
        Ok(receipt) => json_response(
            http::StatusCode::OK,
            &json!({ "delivery_id": receipt.delivery_id }),
        ),
        // Not run again, and answered as delivered so the provider stops sending it.
        Err(WebhookError::Replayed { delivery_id }) => json_response(
            http::StatusCode::OK,
            &json!({ "delivery_id": delivery_id, "replayed": true }),
        ),
        Err(error) => refused(&error),
    }
}

fn refused(error: &WebhookError) -> Response {
    let mut response = json_response(
        error.status(),
        &json!({ "error": error.to_protocol_error() }),
    );
    if matches!(error, WebhookError::InProgress { .. }) {
        response.headers_mut().insert(
            RETRY_AFTER,
            HeaderValue::from_static(IN_PROGRESS_RETRY_AFTER_SECONDS),
        );
    }
    response
}
