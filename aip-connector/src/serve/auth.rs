//! Caller authentication for servers: a request's transport credentials become the
//! [`TrustedContext`] the host runs it for. Identity in the payload (`Envelope.from`,
//! `Action.identity`) is never consulted.

use std::collections::HashMap;
use std::fmt;

use aip_connector_core::model::{ErrorCategory, ProtocolError};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::codes;
use crate::host::TrustedContext;
use crate::invocation::BoxFuture;

/// Maps an incoming request to the principal and tenant it is authenticated as.
///
/// Implement it for your deployment's scheme (JWT validation, mTLS peer certificates, a gateway
/// header behind a trusted proxy, ...). An `Err` is answered with the error as an
/// `aip.core.v1.error` envelope, by both the AIP server and the MCP routes:
///
/// - `401 Unauthorized` with the [`challenge`](Self::challenge) in `WWW-Authenticate`; use
///   [`unauthenticated`] to build the error;
/// - `503 Service Unavailable` when the error's category is `temporary` (the identity provider
///   or its key set could not be reached), with `Retry-After` when the error sets
///   `retry_after_ms`: the caller's credentials were not judged, so it should retry rather than
///   ask its user for new ones.
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticates `request` (method, URI, headers and extensions; never the body).
    fn authenticate<'a>(
        &'a self,
        request: &'a Parts,
    ) -> BoxFuture<'a, Result<TrustedContext, ProtocolError>>;

    /// The `WWW-Authenticate` challenge of a `401` (RFC 9110 §11.6.1): the scheme, and any
    /// parameters, a client must answer with. `Bearer` unless overridden (for example
    /// `Basic realm="acme"`, or `Bearer error="invalid_token"`); `None` sends no header, for
    /// schemes a client cannot answer in the request (mTLS, an identity header a trusted
    /// gateway sets).
    fn challenge(&self) -> Option<HeaderValue> {
        Some(HeaderValue::from_static("Bearer"))
    }
}

/// The status and headers answering a request `authenticator` refused with `error` (see
/// [`Authenticator`]). Shared by the AIP server and the MCP routes, so both answer alike.
pub(crate) fn refusal_head(
    authenticator: &dyn Authenticator,
    error: &ProtocolError,
) -> (StatusCode, HeaderMap) {
    let mut headers = HeaderMap::new();
    // One line per refusal, so an operator sees rejected credentials; the code only: an
    // authenticator's message is its own and might quote what the caller sent.
    if error.category == ErrorCategory::Temporary {
        tracing::warn!(code = %error.code, "request refused: the authenticator is unavailable");
        if let Some(seconds) = retry_after(error) {
            headers.insert(header::RETRY_AFTER, seconds);
        }
        return (StatusCode::SERVICE_UNAVAILABLE, headers);
    }
    tracing::info!(code = %error.code, "request refused by the authenticator");
    if let Some(challenge) = authenticator.challenge() {
        headers.insert(header::WWW_AUTHENTICATE, challenge);
    }
    (StatusCode::UNAUTHORIZED, headers)
}

/// `Retry-After` in whole seconds (at least one) for an error that sets `retry_after_ms`.
pub(crate) fn retry_after(error: &ProtocolError) -> Option<HeaderValue> {
    let seconds = error.retry_after_ms?.div_ceil(1000).max(1);
    HeaderValue::from_str(&seconds.to_string()).ok()
}

/// The `auth.unauthenticated` error (category `auth`, not retryable), with `message`.
pub fn unauthenticated(message: impl Into<String>) -> ProtocolError {
    super::error(
        codes::AUTH_UNAUTHENTICATED,
        message,
        ErrorCategory::Auth,
        false,
    )
}

/// Static bearer tokens, each standing for one trusted context: `Authorization: Bearer <token>`.
///
/// For deployments whose tokens are provisioned out of band, and for tests. Only SHA-256 digests
/// of the tokens are kept, so neither `Debug` nor a memory dump of the map shows one, and the
/// lookup compares digests rather than the secret itself.
#[derive(Clone, Default)]
pub struct BearerTokens {
    by_digest: HashMap<[u8; 32], TrustedContext>,
}

impl BearerTokens {
    /// No tokens: every request is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `token` as `context`. A later call with the same token replaces the context.
    pub fn with(mut self, token: impl AsRef<str>, context: TrustedContext) -> Self {
        self.by_digest.insert(digest(token.as_ref()), context);
        self
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether no token is accepted.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The context `token` stands for.
    pub fn context_for(&self, token: &str) -> Option<&TrustedContext> {
        self.by_digest.get(&digest(token))
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokens")
            .field("tokens", &self.by_digest.len())
            .finish_non_exhaustive()
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub fn bearer_token(request: &Parts) -> Option<&str> {
    let value = request
        .headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Authenticator for BearerTokens {
    fn authenticate<'a>(
        &'a self,
        request: &'a Parts,
    ) -> BoxFuture<'a, Result<TrustedContext, ProtocolError>> {
        let outcome = match bearer_token(request) {
            None => Err(unauthenticated(
                "the request carries no `Authorization: Bearer` token",
            )),
            Some(token) => self
                .context_for(token)
                .cloned()
                .ok_or_else(|| unauthenticated("the bearer token is not accepted")),
        };
        Box::pin(std::future::ready(outcome))
    }
}

#[cfg(test)]
mod tests {
    use aip_connector_core::model::{Principal, PrincipalKind};

    use super::*;

    fn parts(authorization: Option<&str>) -> Parts {
        let mut request = http::Request::builder().uri("/aip/v1/messages");
        if let Some(value) = authorization {
            request = request.header(http::header::AUTHORIZATION, value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn tokens() -> BearerTokens {
        BearerTokens::new().with(
            "s3cr3t-canary",
            TrustedContext::new(
                Principal::new("agent-1", PrincipalKind::Agent),
                "static-bearer",
            ),
        )
    }

    #[tokio::test]
    async fn a_known_token_is_its_context_and_others_are_refused() {
        let tokens = tokens();
        let context = tokens
            .authenticate(&parts(Some("Bearer s3cr3t-canary")))
            .await
            .unwrap();
        assert_eq!(context.principal.id.as_str(), "agent-1");
        assert!(
            tokens
                .authenticate(&parts(Some("bearer s3cr3t-canary")))
                .await
                .is_ok()
        );
        for header in [
            None,
            Some("Bearer nope"),
            Some("Basic s3cr3t-canary"),
            Some("Bearer "),
        ] {
            let error = tokens.authenticate(&parts(header)).await.unwrap_err();
            assert_eq!(error.code, codes::AUTH_UNAUTHENTICATED);
            assert_eq!(error.category, ErrorCategory::Auth);
            assert_eq!(error.retryable, Some(false));
            assert!(!error.message.contains("s3cr3t"));
        }
    }

    #[test]
    fn debug_never_shows_a_token() {
        let shown = format!("{:?}", tokens());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("tokens: 1"));
    }
}
