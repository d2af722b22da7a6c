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

/// How long a provider told to send a delivery again (`webhook.in_progress`, a handler that
/// failed retryably or timed out, the store unavailable) should wait, in seconds.
const RETRY_AFTER_SECONDS: &str = "5";

impl WebhookReceiver {
    /// The receiver served at `POST path`, to merge into an application's router (next to an
    /// [`AipServer`](super::AipServer)'s routes, say). Feature `http`.
    ///
    /// The answer is `200 {"delivery_id": …}` for a delivery the handler took, `200
    /// {"delivery_id": …, "replayed": true}` for one it took before (`webhook.replayed`: not run
    /// again, and nothing left for the provider to retry), and otherwise the [`WebhookError`]'s
    /// [status](WebhookError::status) with `{"error": <AIP error>}`; every refusal the provider
    /// should retry (`webhook.in_progress`, a handler timeout, a retryable handler failure, the
    /// store unavailable) also carries `Retry-After: 5`. The provider's own authentication is
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
    // The route has no authentication of its own before the signature, which needs the whole
    // body: an upload that stalls must not hold the request (and its buffer) for ever.
    let timeout = receiver.body_timeout();
    let body = match read_limited(&parts.headers, body, limit, timeout).await {
        Ok(body) => body,
        Err(BodyError::TimedOut) => {
            let error = WebhookError::BodyTimeout { timeout };
            receiver.log_refusal(&error);
            return refused(&error);
        }
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
    let mut body = error.to_protocol_error();
    // Every refusal worth sending again says when: a provider without the hint backs off by its
    // own schedule (a billing trial found a handler timeout answered without one). The body
    // says it too, as the AIP routes' errors do.
    if error.is_retryable() && body.retry_after_ms.is_none() {
        body.retry_after_ms = Some(RETRY_AFTER_MS);
    }
    let mut response = json_response(error.status(), &json!({ "error": body }));
    if error.is_retryable() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
    }
    // A `401` carries a challenge (RFC 9110 §15.5.2): the delivery's signature is what this
    // route authenticates.
    if response.status() == http::StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static(WEBHOOK_CHALLENGE),
        );
    }
    response
}

/// `RETRY_AFTER_SECONDS` in the body's unit.
const RETRY_AFTER_MS: u64 = 5_000;

/// The challenge of a refused delivery's `401`: a signed delivery is what the route takes.
const WEBHOOK_CHALLENGE: &str = "Signature realm=\"webhook\"";

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_refusal_to_retry_says_when() {
        let retry_after = |error: &WebhookError| {
            refused(error)
                .headers()
                .get(RETRY_AFTER)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        for retryable in [
            WebhookError::InProgress {
                delivery_id: "d".into(),
            },
            WebhookError::HandlerTimeout {
                timeout: Duration::from_secs(1),
            },
            WebhookError::BodyTimeout {
                timeout: Duration::from_secs(1),
            },
        ] {
            assert_eq!(retry_after(&retryable).as_deref(), Some("5"), "{retryable}");
        }
        for final_answer in [
            WebhookError::AuthenticationFailed,
            WebhookError::DeliveryConflict {
                delivery_id: "d".into(),
            },
        ] {
            assert_eq!(retry_after(&final_answer), None, "{final_answer}");
        }
    }

    /// The body of a retryable refusal says when too (a wire trial's client read only the
    /// body), and a `401` carries a challenge, as RFC 9110 asks.
    #[tokio::test]
    async fn a_retryable_body_says_when_and_a_401_challenges() {
        use http_body_util::BodyExt as _;
        let body = |response: Response| async move {
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        let in_progress = refused(&WebhookError::InProgress {
            delivery_id: "d".into(),
        });
        assert_eq!(
            body(in_progress).await["error"]["retry_after_ms"],
            json!(RETRY_AFTER_MS)
        );
        let forged = refused(&WebhookError::AuthenticationFailed);
        assert_eq!(forged.status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(
            forged.headers().get(http::header::WWW_AUTHENTICATE),
            Some(&HeaderValue::from_static(WEBHOOK_CHALLENGE))
        );
        let conflict = refused(&WebhookError::DeliveryConflict {
            delivery_id: "d".into(),
        });
        assert!(
            conflict
                .headers()
                .get(http::header::WWW_AUTHENTICATE)
                .is_none()
        );
        assert!(
            body(conflict).await["error"]
                .get("retry_after_ms")
                .is_none()
        );
    }
}
