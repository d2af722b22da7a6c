//! Calling providers over HTTP: [`ProviderClient`].
//!
//! A handler reaches its provider in one expression that carries everything the host handed it:
//!
//! ```no_run
//! # use aip_connector::prelude::*;
//! # use aip_connector::provider::ProviderClient;
//! # #[derive(Serialize)] struct Input { slot: String }
//! # #[derive(Deserialize)] struct Booking { id: String }
//! # async fn handler(
//! #     api: &ProviderClient, input: Input, key: IdempotencyKey, deadline: Deadline,
//! #     cancel: Cancellation,
//! # ) -> Result<Booking, ConnectorFailure> {
//! let booking: Booking = api
//!     .post("/bookings")
//!     .idempotency(&key)
//!     .deadline(&deadline)
//!     .cancellation(&cancel)
//!     .json(&input)
//!     .send_json()
//!     .await?;
//! # Ok(booking) }
//! ```
//!
//! Every way the call can go wrong becomes a [`ConnectorFailure`] whose code, category,
//! `retryable` and `uncertain_outcome` say what the host (and a retrying caller) may safely do
//! next. The rule the classification follows: **only a request that provably never left, or that
//! the provider answered, has a known outcome.** A mutating request that was sent and got no
//! complete answer — deadline, cancellation, reset, truncated body, unreadable success body — may
//! have taken effect, so it is `uncertain_outcome: true` and not retryable: the host settles it
//! as an unknown outcome to reconcile, never to repeat blindly.
//!
//! | Situation | Code | Category | Retryable | Uncertain |
//! |---|---|---|---|---|
//! | the request could not be built (body not serializable, bad header) | `provider.request_invalid` | connector | no | no |
//! | nothing sent: connect, DNS or TLS failure | `provider.unavailable` | temporary | yes | no |
//! | the deadline passed before sending | `provider.timeout` | temporary | yes | no |
//! | cancelled before sending | `provider.cancelled` | temporary | yes | no |
//! | sent, no complete response, mutating | `provider.outcome_unknown` (deadline, reset) or `provider.cancelled` | temporary | no | **yes** |
//! | sent, no complete response, not mutating | `provider.timeout` (deadline), `provider.unavailable` (reset) or `provider.cancelled` | temporary | yes | no |
//! | 429 | `provider.rate_limited` (+ `retry_after_ms` from `Retry-After`) | temporary | yes | no |
//! | 503 | `provider.unavailable` (+ `retry_after_ms` from `Retry-After`) | temporary | yes | no |
//! | other 5xx | `provider.server_error` (+ `retry_after_ms` when given) | temporary | yes | no |
//! | 401, 403 | `provider.unauthorized` | auth | no | no |
//! | other 4xx | `provider.rejected` | permanent | no | no |
//! | 2xx whose body is not the expected JSON, or too large; a 1xx/3xx status | `provider.invalid_response` | connector | no | when mutating |
//!
//! "Before sending" ends when the client starts connecting: a deadline or cancellation that
//! fires while it is still connecting (DNS, connect, TLS) counts as sent, so a mutating call
//! then fails with `provider.outcome_unknown` (deadline) or an uncertain `provider.cancelled`.
//!
//! Failures carry the remote status in `remote_status`, the provider's request id (from
//! `x-request-id` by default) in `provider_request_id`, and `{method, path, mutating, phase,
//! cause, ...}` in `redacted_details` (no `cause` for `provider.request_invalid`, whose phase is
//! `build`). They never carry request or response bodies, header values, query strings or
//! credentials: messages name the method and the URL path only, and decode failures report the
//! error class and position, not serde's text (which quotes values).
//!
//! **Paths built from input.** A call path is appended to the base URL's path, so text from an
//! action's input must not shape it: `format!("/repos/{}", input.repo)` with `repo = "../admin"`
//! would call another endpoint with the connector's credentials, and a `?` would start a query.
//! Put such text into a path through [`path_segment`], which percent-encodes everything but
//! letters, digits and `-._~`. Whatever a path holds, the client refuses one with a `.` or `..`
//! segment (raw or percent-encoded; `\` counts as a separator, as URL parsing treats it), or with
//! a tab or line break anywhere (URL parsing drops them first, so `.<TAB>.` is `..`), with
//! `provider.request_invalid` before anything is sent: URL parsing would resolve it, so the
//! request could leave the base path.
//!
//! A request counts as mutating unless its method is `GET`, `HEAD`, `OPTIONS` or `TRACE`;
//! [`ProviderRequest::mutating`] overrides that per call (a `POST` search endpoint is not
//! mutating; a `GET` that triggers work is).

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aip_connector_core::model::{
    ConnectorFailure, ConnectorFailureData, ConnectorOperation, ErrorCategory, ProviderOperationRef,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
pub use reqwest::Method;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

use crate::codes;
use crate::extract::{Cancellation, Deadline, IdempotencyKey};
use crate::invocation::Secret;

/// The header the idempotency key travels in unless the builder names another.
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The response header read as the provider's request id unless the builder names another.
pub const DEFAULT_REQUEST_ID_HEADER: &str = "x-request-id";
/// The per-call timeout of a call without a deadline or an explicit timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long establishing a connection may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest success body the client reads (8 MiB); a larger one is an invalid response.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// Longest provider request id copied into a failure; a longer or non-printable one is dropped.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Why a [`ProviderClient`] could not be built. Messages never quote header values or secrets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderClientError {
    /// The base URL is not an absolute `http` or `https` URL.
    #[error("the provider base URL is invalid: {reason}")]
    InvalidBaseUrl {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A header name is not a valid HTTP header name.
    #[error("`{name}` is not a valid HTTP header name")]
    InvalidHeaderName {
        /// The offending name.
        name: String,
    },
    /// A header value is not a valid HTTP header value (the value is not quoted).
    #[error("the value of header `{name}` is not a valid HTTP header value")]
    InvalidHeaderValue {
        /// The header whose value was refused.
        name: String,
    },
    /// The HTTP stack could not be initialised.
    #[error("the HTTP client could not be built: {reason}")]
    Http {
        /// The HTTP stack's explanation (it never sees credentials).
        reason: String,
    },
}

/// Credential material a client or a call attaches to requests; held as [`Secret`] until the
/// request is built, and sent in a header marked sensitive.
#[derive(Clone)]
enum SecretHeader {
    /// `Authorization: Bearer <secret>`.
    Bearer(Secret),
    /// `Authorization: Basic base64(user:secret)`.
    Basic { user: String, password: Secret },
    /// `<name>: <secret>` (API-key headers).
    Raw(HeaderName, Secret),
}

impl SecretHeader {
    fn name(&self) -> HeaderName {
        match self {
            SecretHeader::Bearer(_) | SecretHeader::Basic { .. } => AUTHORIZATION,
            SecretHeader::Raw(name, _) => name.clone(),
        }
    }

    /// The header value, marked sensitive; `None` when the secret cannot be a header value.
    /// The buffers the value is assembled in hold the secret too, so they are wiped on drop;
    /// the `HeaderValue` itself belongs to `http`, and the copies reqwest and hyper make of it
    /// while sending, to them: those are not.
    fn value(&self) -> Option<HeaderValue> {
        let mut value = match self {
            SecretHeader::Bearer(secret) => {
                let mut bytes = Zeroizing::new(b"Bearer ".to_vec());
                bytes.extend_from_slice(secret.expose_bytes());
                HeaderValue::from_bytes(&bytes).ok()?
            }
            SecretHeader::Basic { user, password } => {
                let mut plain = Zeroizing::new(user.as_bytes().to_vec());
                plain.push(b':');
                plain.extend_from_slice(password.expose_bytes());
                // Encoded straight into a wiped buffer of the exact size (`encode_string`
                // goes through a stack buffer of its own, which nothing wipes).
                let mut header = Zeroizing::new(vec![0u8; 6 + plain.len().div_ceil(3) * 4]);
                header[..6].copy_from_slice(b"Basic ");
                BASE64.encode_slice(&*plain, &mut header[6..]).ok()?;
                HeaderValue::from_bytes(&header).ok()?
            }
            SecretHeader::Raw(_, secret) => HeaderValue::from_bytes(secret.expose_bytes()).ok()?,
        };
        value.set_sensitive(true);
        Some(value)
    }
}

impl fmt::Debug for SecretHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: [REDACTED]", self.name())
    }
}

fn header_name(name: &str) -> Result<HeaderName, ProviderClientError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| ProviderClientError::InvalidHeaderName {
        name: name.to_owned(),
    })
}

/// Configures a [`ProviderClient`]; start with [`ProviderClient::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct ProviderClientBuilder {
    base_url: String,
    headers: Vec<(String, String)>,
    secrets: Vec<SecretHeaderSpec>,
    idempotency_header: String,
    request_id_header: Option<String>,
    default_timeout: Duration,
    connect_timeout: Duration,
    max_response_bytes: usize,
    source_component: String,
    server_errors_uncertain: bool,
    user_agent: String,
    /// `None`: the environment's proxies, except for a loopback base URL.
    proxy_from_environment: Option<bool>,
    error_message: Option<ErrorMessage>,
}

/// What [`ProviderClientBuilder::error_message`] reads an error answer with.
type ErrorMessage = Arc<dyn Fn(&ProviderErrorResponse) -> Option<String> + Send + Sync>;

/// How much of an error answer's body is read for
/// [`error_message`](ProviderClientBuilder::error_message): an explanation fits, a page of HTML
/// is cut.
pub const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;

/// The longest explanation an error message keeps, in characters; a longer one is left out
/// whole. Never cut: the host withholds the credential and redacted input values from a
/// failure by finding them whole, so a cut through one would leave its start readable.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 500;

/// How long an error answer's body may take to arrive for
/// [`error_message`](ProviderClientBuilder::error_message), on top of the call's deadline: the
/// status has settled the outcome already, so a body that is slow or cut off leaves the failure
/// without an explanation, never makes it uncertain.
pub const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(2);

impl fmt::Debug for ProviderClientBuilder {
    /// Lengths and names, never the base URL (it may carry user info, a query or a token in
    /// its path until `build` refuses or keeps it) or header values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("ProviderClientBuilder")
            .field("base_url_bytes", &self.base_url.len())
            .field("headers", &header_names)
            .field("secrets", &self.secrets)
            .field("idempotency_header", &self.idempotency_header)
            .field("default_timeout", &self.default_timeout)
            .field("source_component", &self.source_component)
            .finish_non_exhaustive()
    }
}

/// A secret header as configured, before its name is validated.
#[derive(Debug)]
enum SecretHeaderSpec {
    Bearer(Secret),
    Basic { user: String, password: Secret },
    Raw(String, Secret),
}

impl ProviderClientBuilder {
    /// Adds a header sent on every request (not for credentials: use [`bearer_auth`],
    /// [`basic_auth`] or [`secret_header`], which keep the value out of `Debug`).
    ///
    /// [`bearer_auth`]: Self::bearer_auth
    /// [`basic_auth`]: Self::basic_auth
    /// [`secret_header`]: Self::secret_header
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sends `Authorization: Bearer <token>` on every request.
    pub fn bearer_auth(mut self, token: Secret) -> Self {
        self.secrets.push(SecretHeaderSpec::Bearer(token));
        self
    }

    /// Sends `Authorization: Basic …` for `user` and `password` on every request.
    pub fn basic_auth(mut self, user: impl Into<String>, password: Secret) -> Self {
        self.secrets.push(SecretHeaderSpec::Basic {
            user: user.into(),
            password,
        });
        self
    }

    /// Sends `name: <secret>` on every request (API-key headers such as `x-api-key`).
    pub fn secret_header(mut self, name: impl Into<String>, secret: Secret) -> Self {
        self.secrets
            .push(SecretHeaderSpec::Raw(name.into(), secret));
        self
    }

    /// The header the idempotency key is sent in (default `Idempotency-Key`).
    pub fn idempotency_header(mut self, name: impl Into<String>) -> Self {
        self.idempotency_header = name.into();
        self
    }

    /// The response header read as the provider's request id (default `x-request-id`); `None`
    /// reads none.
    pub fn request_id_header(mut self, name: Option<&str>) -> Self {
        self.request_id_header = name.map(str::to_owned);
        self
    }

    /// The timeout of a call that names neither a deadline nor a timeout (default 30 s). It does
    /// not shorten a call's deadline.
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// How long establishing a connection may take (default 10 s). Running out is a connect
    /// failure: nothing was sent.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest success body read (default 8 MiB).
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// The `source` written on failures (default `aip-connector`); the connector id reads well.
    pub fn source_component(mut self, source: impl Into<String>) -> Self {
        self.source_component = source.into();
        self
    }

    /// Treats a 5xx other than 503 on a mutating request as an uncertain outcome
    /// (`provider.outcome_unknown`, not retryable) instead of a retryable
    /// `provider.server_error`. Turn it on for providers that may apply a change and still answer
    /// 500. Off by default.
    pub fn server_errors_uncertain(mut self, uncertain: bool) -> Self {
        self.server_errors_uncertain = uncertain;
        self
    }

    /// The `User-Agent` sent (default `aip-connector/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Reads the provider's explanation out of an error answer (a non-2xx status), so that the
    /// failure says why the provider refused, not only its status: a model can then correct its
    /// call. Off by default: an error body is never read.
    ///
    /// `read` gets the status, headers and the first [`MAX_ERROR_BODY_BYTES`] of the body (read
    /// within [`ERROR_BODY_TIMEOUT`]; a body slower than that, or cut off, is read as far as it
    /// came), and returns the text to show, or `None`. The text is appended to the failure's
    /// message (`the provider rejected the request (HTTP 422): title is required`) and kept in
    /// `details.provider_message`, as returned; a text longer than [`MAX_ERROR_MESSAGE_CHARS`]
    /// is left out whole, never cut (a cut could split a secret the host withholds). The
    /// classification is the status's alone. Return only what the provider says about the
    /// request: the failure reaches the caller and the store. The host withholds the credential
    /// it resolved for the call, and with redaction the input's values, from every failure, this
    /// text included (docs/host-runtime.md), but not other secrets a provider might echo.
    ///
    /// ```
    /// # use aip_connector::provider::ProviderClient;
    /// #[derive(serde::Deserialize)]
    /// struct GitHubError {
    ///     message: String,
    /// }
    /// let client = ProviderClient::builder("https://api.github.com")
    ///     .error_message(|answer| answer.json::<GitHubError>().map(|error| error.message))
    ///     .build()?;
    /// # Ok::<(), aip_connector::provider::ProviderClientError>(())
    /// ```
    pub fn error_message(
        mut self,
        read: impl Fn(&ProviderErrorResponse) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.error_message = Some(Arc::new(read));
        self
    }

    /// Whether `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` are honoured. By default they are, except
    /// for a loopback base URL (`localhost` and `*.localhost`, `127.0.0.0/8`, `[::1]`, with or
    /// without a trailing dot): a proxy elsewhere cannot reach this machine's loopback, and a
    /// test's provider double listens there, so sending it a developer's proxy settings only
    /// breaks tests. `true` sends loopback requests to the proxy too; `false` never uses one.
    pub fn proxy_from_environment(mut self, enabled: bool) -> Self {
        self.proxy_from_environment = Some(enabled);
        self
    }

    /// Builds the client. Fails on a base URL that is not absolute `http(s)`, carries user info
    /// (credentials belong in [`basic_auth`](Self::basic_auth)), a query or a fragment, and on
    /// invalid header names or values.
    pub fn build(self) -> Result<ProviderClient, ProviderClientError> {
        let base = reqwest::Url::parse(&self.base_url).map_err(|_| {
            ProviderClientError::InvalidBaseUrl {
                reason: "not an absolute URL",
            }
        })?;
        let invalid = |reason| Err(ProviderClientError::InvalidBaseUrl { reason });
        if !matches!(base.scheme(), "http" | "https") {
            return invalid("the scheme must be http or https");
        }
        if !base.username().is_empty() || base.password().is_some() {
            return invalid("it carries user info; use `basic_auth` with a `Secret`");
        }
        if base.query().is_some() || base.fragment().is_some() {
            return invalid("it carries a query or a fragment; use `secret_header` for API keys");
        }

        let mut default_headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let header = header_name(name)?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| ProviderClientError::InvalidHeaderValue { name: name.clone() })?;
            default_headers.append(header, value);
        }
        let mut secrets = Vec::with_capacity(self.secrets.len());
        for spec in self.secrets {
            let (label, secret) = match spec {
                SecretHeaderSpec::Bearer(token) => {
                    ("authorization".to_owned(), SecretHeader::Bearer(token))
                }
                SecretHeaderSpec::Basic { user, password } => (
                    "authorization".to_owned(),
                    SecretHeader::Basic { user, password },
                ),
                SecretHeaderSpec::Raw(name, secret) => {
                    let header = header_name(&name)?;
                    (name, SecretHeader::Raw(header, secret))
                }
            };
            if secret.value().is_none() {
                return Err(ProviderClientError::InvalidHeaderValue { name: label });
            }
            secrets.push(secret);
        }
        let idempotency_header = header_name(&self.idempotency_header)?;
        let request_id_header = self
            .request_id_header
            .as_deref()
            .map(header_name)
            .transpose()?;

        let mut http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.connect_timeout)
            .user_agent(self.user_agent)
            .default_headers(default_headers);
        if !self
            .proxy_from_environment
            .unwrap_or_else(|| !is_loopback(&base))
        {
            http = http.no_proxy();
        }
        let http = http.build().map_err(|error| ProviderClientError::Http {
            reason: error.to_string(),
        })?;

        let mut base_path = base.path().trim_end_matches('/').to_owned();
        if base_path == "/" {
            base_path.clear();
        }
        Ok(ProviderClient {
            inner: Arc::new(ClientInner {
                http,
                base,
                base_path,
                secrets,
                idempotency_header,
                request_id_header,
                default_timeout: self.default_timeout,
                max_response_bytes: self.max_response_bytes,
                source_component: self.source_component.into(),
                server_errors_uncertain: self.server_errors_uncertain,
                error_message: self.error_message,
            }),
        })
    }
}

/// Whether `url` names this machine by a loopback name or address.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        // `::ffff:127.0.0.1` is an IPv4 loopback address too.
        Ok(address) => address.to_canonical().is_loopback(),
        Err(_) => {
            let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    }
}

/// An HTTP client for one provider: a base URL, default headers and credentials, and the
/// classification of every failure into a [`ConnectorFailure`] (see the [module docs](self)).
///
/// Cheap to clone (the connection pool is shared); build it once per connector.
#[derive(Clone)]
pub struct ProviderClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    http: reqwest::Client,
    base: reqwest::Url,
    /// The base URL's path without a trailing slash; call paths are appended to it.
    base_path: String,
    secrets: Vec<SecretHeader>,
    idempotency_header: HeaderName,
    request_id_header: Option<HeaderName>,
    default_timeout: Duration,
    max_response_bytes: usize,
    source_component: Arc<str>,
    server_errors_uncertain: bool,
    error_message: Option<ErrorMessage>,
}

impl fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        // The origin only: the base path may hold a credential (a webhook URL's token).
        f.debug_struct("ProviderClient")
            .field("origin", &inner.base.origin().ascii_serialization())
            .field("base_path_bytes", &inner.base_path.len())
            .field("secret_headers", &inner.secrets)
            .field("idempotency_header", &inner.idempotency_header)
            .field("default_timeout", &inner.default_timeout)
            .field("source_component", &inner.source_component)
            .finish_non_exhaustive()
    }
}

impl ProviderClient {
    /// A builder for a client whose call paths are appended to `base_url` (its path included:
    /// `https://api.example.com/v2` + `/bookings` → `https://api.example.com/v2/bookings`).
    pub fn builder(base_url: impl Into<String>) -> ProviderClientBuilder {
        ProviderClientBuilder {
            base_url: base_url.into(),
            headers: Vec::new(),
            secrets: Vec::new(),
            idempotency_header: DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            request_id_header: Some(DEFAULT_REQUEST_ID_HEADER.to_owned()),
            default_timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            source_component: codes::SOURCE_COMPONENT.to_owned(),
            server_errors_uncertain: false,
            user_agent: concat!("aip-connector/", env!("CARGO_PKG_VERSION")).to_owned(),
            proxy_from_environment: None,
            error_message: None,
        }
    }

    /// A client with the default settings.
    pub fn new(base_url: impl Into<String>) -> Result<Self, ProviderClientError> {
        Self::builder(base_url).build()
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        self.inner.base.as_str()
    }

    /// A request with any method to `path` (relative to the base URL; a `?query` part is kept
    /// but never printed).
    pub fn request(&self, method: Method, path: &str) -> ProviderRequest {
        ProviderRequest::new(self.clone(), method, path)
    }

    /// A `GET` request (not mutating by default).
    pub fn get(&self, path: &str) -> ProviderRequest {
        self.request(Method::GET, path)
    }

    /// A `POST` request (mutating by default).
    pub fn post(&self, path: &str) -> ProviderRequest {
        self.request(Method::POST, path)
    }

    /// A `PUT` request (mutating by default).
    pub fn put(&self, path: &str) -> ProviderRequest {
        self.request(Method::PUT, path)
    }

    /// A `PATCH` request (mutating by default).
    pub fn patch(&self, path: &str) -> ProviderRequest {
        self.request(Method::PATCH, path)
    }

    /// A `DELETE` request (mutating by default).
    pub fn delete(&self, path: &str) -> ProviderRequest {
        self.request(Method::DELETE, path)
    }
}

/// Bytes of a path segment sent as they are; everything else is percent-encoded (RFC 3986's
/// unreserved characters stay).
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` as one segment of a call path: every byte but letters, digits and `-._~` is
/// percent-encoded, so `/`, `\`, `?`, `#` and `%` in it cannot add segments, a query or a
/// fragment. Use it for every piece of a path that comes from input or from a provider:
///
/// ```
/// use aip_connector::provider::path_segment;
///
/// let repo = "../admin?force=true";
/// assert_eq!(
///     format!("/repos/{}/issues", path_segment(repo)),
///     "/repos/..%2Fadmin%3Fforce%3Dtrue/issues"
/// );
/// ```
///
/// A segment that is exactly `.` or `..` stays as it is, and the request is refused
/// (`provider.request_invalid`): no encoding makes it safe, since URL parsing resolves `%2E%2E`
/// too. Refuse such values in your input type (a `pattern`) to answer the caller precisely.
pub fn path_segment(text: &str) -> PathSegment<'_> {
    PathSegment(text)
}

/// Bytes of a query value sent as they are by `application/x-www-form-urlencoded` (which
/// [`ProviderRequest::query`] uses; a space becomes `+`).
const FORM_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b' ');

/// `text` as [`ProviderRequest::query`] sends it in a query string: the host looks for this
/// form of an input value in a failure it must redact.
pub(crate) fn query_encoded(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, FORM_VALUE)
        .to_string()
        .replace(' ', "+")
}

/// A percent-encoded path segment; see [`path_segment`].
#[derive(Clone, Copy, Debug)]
pub struct PathSegment<'a>(&'a str);

impl fmt::Display for PathSegment<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(
            &percent_encoding::utf8_percent_encode(self.0, PATH_SEGMENT),
            f,
        )
    }
}

/// `path`, a value that holds several segments (a file path in a repository: `src/lib.rs`), as
/// a part of a call path: each piece between `/`s encoded as [`path_segment`] encodes one, the
/// `/`s kept. A piece that is exactly `.` or `..` stays as it is, and [`ProviderClient`] refuses
/// the request (`provider.request_invalid`), as for [`path_segment`]; so is an empty piece
/// (`a//b`, or a leading or trailing `/`), which a provider would read as another path: it is
/// written as `.`, so the refusal names a dot segment. The refusal is the client's: formatted
/// into a URL sent some other way, such a path can still leave its place.
///
/// ```
/// use aip_connector::provider::path_segments;
///
/// let file = "docs/read me?.md";
/// assert_eq!(
///     format!("/repos/acme/contents/{}", path_segments(file)),
///     "/repos/acme/contents/docs/read%20me%3F.md"
/// );
/// ```
pub fn path_segments(path: &str) -> PathSegments<'_> {
    PathSegments(path)
}

/// A percent-encoded path of several segments; see [`path_segments`].
#[derive(Clone, Copy, Debug)]
pub struct PathSegments<'a>(&'a str);

impl fmt::Display for PathSegments<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, piece) in self.0.split('/').enumerate() {
            if index > 0 {
                f.write_str("/")?;
            }
            if piece.is_empty() {
                // An empty piece is sent as `.`: the request is refused as for a dot segment,
                // where the provider would otherwise read `a//b` as another path.
                f.write_str(".")?;
            } else {
                fmt::Display::fmt(&path_segment(piece), f)?;
            }
        }
        Ok(())
    }
}

/// Whether `path` has a segment URL parsing would resolve (`.`, `..`, percent-encoded or not),
/// splitting at `/` and at `\`, which http(s) URLs treat as `/`. URL parsing also drops every
/// tab and line break before it looks at segments (`.<TAB>.` is `..` to it), so a path holding
/// one counts as having a dot segment: no legitimate path needs one raw.
fn has_dot_segment(path: &str) -> bool {
    if path.contains(['\t', '\n', '\r']) {
        return true;
    }
    path.split(['/', '\\']).any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

/// One call being configured; finish with [`send_json`](Self::send_json),
/// [`send_empty`](Self::send_empty) or [`send`](Self::send).
///
/// Configuration errors (a body that does not serialize, an invalid header) are kept and
/// returned by the send method as `provider.request_invalid`, so the chain stays one expression.
#[must_use = "a provider request does nothing until it is sent"]
pub struct ProviderRequest {
    client: ProviderClient,
    method: Method,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    secrets: Vec<SecretHeader>,
    body: Option<Vec<u8>>,
    idempotency_key: Option<String>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    cancellation: Option<CancellationToken>,
    mutating: Option<bool>,
    operation: ConnectorOperation,
    provider_operation: Option<ProviderOperationRef>,
    error: Option<&'static str>,
}

impl fmt::Debug for ProviderRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("has_query", &self.query.is_some())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("secret_headers", &self.secrets)
            .field("has_body", &self.body.is_some())
            .field("has_idempotency_key", &self.idempotency_key.is_some())
            .field("mutating", &self.is_mutating())
            .finish_non_exhaustive()
    }
}

impl ProviderRequest {
    fn new(client: ProviderClient, method: Method, path: &str) -> Self {
        let (path, query) = match path.split_once('?') {
            Some((path, query)) => (path, Some(query.to_owned())),
            None => (path, None),
        };
        Self {
            client,
            method,
            path: path.to_owned(),
            query,
            headers: HeaderMap::new(),
            secrets: Vec::new(),
            body: None,
            idempotency_key: None,
            deadline: None,
            timeout: None,
            cancellation: None,
            mutating: None,
            operation: ConnectorOperation::Invocation,
            provider_operation: None,
            error: None,
        }
    }

    fn fail(mut self, reason: &'static str) -> Self {
        self.error.get_or_insert(reason);
        self
    }

    /// Sends the action's idempotency key in the client's idempotency header, as
    /// [`IdempotencyKey::for_provider`]: a digest of the key as the host scopes it, so the
    /// provider deduplicates exactly the calls the host would replay, two tenants' `invoice-42`
    /// stay two operations, and the provider learns no tenant or principal id.
    pub fn idempotency(self, key: &IdempotencyKey) -> Self {
        self.idempotency_key(key.for_provider())
    }

    /// Sends `key` in the client's idempotency header (for keys derived from the action's, e.g.
    /// one per provider call of a multi-step handler). Derive them from
    /// [`IdempotencyKey::for_provider`], not the caller's key alone, so that the provider keeps
    /// apart what the host keeps apart.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Gives up when the action's deadline passes.
    pub fn deadline(mut self, deadline: &Deadline) -> Self {
        self.deadline = Some(deadline.at());
        self
    }

    /// Gives up after `timeout` (the earlier of this and the deadline wins).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Gives up when the action is cancelled.
    pub fn cancellation(self, cancellation: &Cancellation) -> Self {
        self.cancellation_token(cancellation.token().clone())
    }

    /// Gives up when `token` fires.
    pub fn cancellation_token(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Sends `body` as JSON (`Content-Type: application/json`).
    pub fn json(mut self, body: &impl Serialize) -> Self {
        match serde_json::to_vec(body) {
            Ok(bytes) => {
                self.body = Some(bytes);
                self
            }
            Err(_) => self.fail("the request body could not be serialized as JSON"),
        }
    }

    /// Appends `params` to the query string (serialized as `application/x-www-form-urlencoded`).
    /// The query is never printed in failures.
    pub fn query(mut self, params: &impl Serialize) -> Self {
        match serde_urlencoded::to_string(params) {
            Ok(encoded) if encoded.is_empty() => self,
            Ok(encoded) => {
                self.query = Some(match self.query.take() {
                    Some(existing) if !existing.is_empty() => format!("{existing}&{encoded}"),
                    _ => encoded,
                });
                self
            }
            Err(_) => self.fail("the query parameters could not be serialized"),
        }
    }

    /// Adds a header to this call (not for credentials: use
    /// [`bearer_auth`](Self::bearer_auth) or [`secret_header`](Self::secret_header)). Names
    /// and values are borrowed or owned strings alike; an invalid one fails the call when it is
    /// sent.
    ///
    /// ```
    /// # use aip_connector::provider::ProviderClient;
    /// # let client = ProviderClient::builder("https://api.example.com").build().unwrap();
    /// let event_id = "evt_7";
    /// let request = client
    ///     .post("/events")
    ///     .header("x-operation-id", format!("create:{event_id}"))
    ///     .header("x-source", "calendar");
    /// # drop(request);
    /// ```
    pub fn header(mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        match (
            HeaderName::from_bytes(name.as_ref().as_bytes()),
            HeaderValue::from_str(value.as_ref()),
        ) {
            (Ok(name), Ok(value)) => {
                self.headers.append(name, value);
                self
            }
            _ => self.fail("a header name or value is invalid"),
        }
    }

    /// Sends `Authorization: Bearer <token>` on this call, replacing the client's.
    pub fn bearer_auth(mut self, token: &Secret) -> Self {
        let secret = SecretHeader::Bearer(token.clone());
        if secret.value().is_none() {
            return self.fail("the bearer token is not a valid header value");
        }
        self.secrets.push(secret);
        self
    }

    /// Sends `name: <secret>` on this call, replacing the client's header of that name.
    pub fn secret_header(mut self, name: &str, secret: &Secret) -> Self {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            return self.fail("a secret header name is invalid");
        };
        let secret = SecretHeader::Raw(name, secret.clone());
        if secret.value().is_none() {
            return self.fail("a secret header value is invalid");
        }
        self.secrets.push(secret);
        self
    }

    /// Overrides whether the request may change provider state (default: every method but
    /// `GET`, `HEAD`, `OPTIONS` and `TRACE`). A mutating request that was sent and got no
    /// complete answer is an uncertain outcome.
    pub fn mutating(mut self, mutating: bool) -> Self {
        self.mutating = Some(mutating);
        self
    }

    /// The connector operation named in failures (default `invocation`; e.g.
    /// `transaction_commit` in a commit handler, `reconciliation` in a reconcile handler).
    pub fn operation(mut self, operation: ConnectorOperation) -> Self {
        self.operation = operation;
        self
    }

    /// The provider operation this call acts on, attached to every failure
    /// (`provider_operation`), so an uncertain outcome names what to reconcile.
    pub fn provider_operation(mut self, operation: ProviderOperationRef) -> Self {
        self.provider_operation = Some(operation);
        self
    }

    fn is_mutating(&self) -> bool {
        self.mutating.unwrap_or(!matches!(
            self.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        ))
    }

    /// Sends the request and decodes a 2xx body as `T`.
    pub async fn send_json<T: DeserializeOwned>(self) -> Result<T, ConnectorFailure> {
        self.send().await?.json()
    }

    /// Sends a lookup and decodes a 2xx body as `T`, or answers `Ok(None)` when the provider
    /// answered `404 Not Found`. Every other failure stays an error (a `410`, a `503`, a
    /// dropped connection), so a lookup that could not tell is never read as "not there".
    ///
    /// A `404` proves absence only where the API means it by one. Many answer `404` for a
    /// resource the credential may not see; a wrong base path or API version answers it for
    /// every route; a store that lags behind its writes answers it for a write that just
    /// committed. A reconcile companion that maps `None` to `NotCommitted` makes a retry run
    /// the write again, so use this where the API's `404` is reliable, and otherwise read the
    /// failure's body (`send`) for the provider's own not-found code.
    ///
    /// ```no_run
    /// # use aip_connector::provider::{ProviderClient, path_segment};
    /// # async fn find(client: &ProviderClient, id: &str) -> Result<(), aip_connector::model::ConnectorFailure> {
    /// let booking: Option<serde_json::Value> = client
    ///     .get(&format!("/bookings/{}", path_segment(id)))
    ///     .send_json_optional()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_json_optional<T: DeserializeOwned>(
        self,
    ) -> Result<Option<T>, ConnectorFailure> {
        match self.send().await {
            Ok(response) => response.json().map(Some),
            Err(failure) if failure.remote_status == Some(404) => Ok(None),
            Err(failure) => Err(failure),
        }
    }

    /// Sends the request and ignores a 2xx body (for `204 No Content` and the like). The body is
    /// still read in full, up to
    /// [`max_response_bytes`](ProviderClientBuilder::max_response_bytes); a larger one fails
    /// with `provider.invalid_response`.
    pub async fn send_empty(self) -> Result<(), ConnectorFailure> {
        self.send().await.map(drop)
    }

    /// Sends the request. A 2xx response is returned whole; everything else is a classified
    /// [`ConnectorFailure`].
    pub async fn send(self) -> Result<ProviderResponse, ConnectorFailure> {
        let inner = Arc::clone(&self.client.inner);
        let mut url = inner.base.clone();
        let path = if self.path.starts_with('/') || self.path.is_empty() {
            format!("{}{}", inner.base_path, self.path)
        } else {
            format!("{}/{}", inner.base_path, self.path)
        };
        url.set_path(&path);
        url.set_query(self.query.as_deref());
        let call = CallInfo {
            method: self.method.clone(),
            // The call's own path, without the base URL's: a base path may hold a credential
            // (a webhook URL's token), and failures are stored and returned to callers.
            path: if self.path.starts_with('/') {
                self.path.clone()
            } else {
                format!("/{}", self.path)
            },
            mutating: self.is_mutating(),
            operation: self.operation,
            provider_operation: self.provider_operation.clone(),
            source: Arc::clone(&inner.source_component),
            server_errors_uncertain: inner.server_errors_uncertain,
        };
        if let Some(reason) = self.error {
            return Err(call.request_invalid(reason));
        }
        if has_dot_segment(&self.path) {
            return Err(call.request_invalid(
                "the path has a `.` or `..` segment (or a tab or line break, which URL parsing drops before it resolves segments), which could take the request out of the base URL's path; put input into paths with `aip_connector::provider::path_segment` and refuse `.` and `..` as values",
            ));
        }

        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        for secret in inner.secrets.iter().chain(&self.secrets) {
            // Validated when configured; a call's secret replaces the client's of that name.
            if let Some(value) = secret.value() {
                headers.insert(secret.name(), value);
            }
        }
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        if let Some(key) = &self.idempotency_key {
            match HeaderValue::from_str(key) {
                Ok(value) => {
                    headers.insert(inner.idempotency_header.clone(), value);
                }
                Err(_) => {
                    return Err(
                        call.request_invalid("the idempotency key is not a valid header value")
                    );
                }
            }
        }
        let mut builder = inner.http.request(self.method.clone(), url);
        if let Some(body) = self.body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            builder = builder.body(body);
        }
        let request = match builder.headers(headers).build() {
            Ok(request) => request,
            Err(_) => return Err(call.request_invalid("the request could not be built")),
        };

        // Nothing has been sent yet: a passed deadline or a fired token costs nothing.
        let now = Instant::now();
        // A timeout too long for the clock (`Duration::MAX`, say) never comes, not a panic.
        let after = |timeout: Duration| crate::extract::instant_after(now, timeout);
        let give_up_at = match (self.deadline, self.timeout) {
            (Some(deadline), Some(timeout)) => deadline.min(after(timeout)),
            (Some(deadline), None) => deadline,
            (None, Some(timeout)) => after(timeout),
            (None, None) => after(inner.default_timeout),
        };
        if self.cancellation.as_ref().is_some_and(|t| t.is_cancelled()) {
            return Err(call.interrupted(Interruption::Cancelled, Sent::No, None));
        }
        if give_up_at <= now {
            return Err(call.interrupted(Interruption::Deadline, Sent::No, None));
        }

        // From here on the request may be on the wire. A deadline or cancellation that fires
        // while still connecting is counted as sent too: the client cannot tell the phases apart
        // from outside, and calling a sent request unsent could repeat an effect.
        let seen = OnceLock::new();
        let exchange = exchange(&inner, request, &seen);
        let outcome = tokio::select! {
            biased;
            () = fired(self.cancellation.as_ref()) => Err(Broken::Interrupted(Interruption::Cancelled)),
            result = tokio::time::timeout_at(give_up_at, exchange) => match result {
                Ok(result) => result,
                Err(_) => Err(Broken::Interrupted(Interruption::Deadline)),
            },
        };
        let seen = seen.get().cloned();
        match outcome {
            Ok(exchanged) if exchanged.status.is_success() => Ok(ProviderResponse {
                status: exchanged.status.as_u16(),
                request_id: exchanged.request_id,
                headers: exchanged.headers,
                body: exchanged.body,
                call,
            }),
            Ok(exchanged) => {
                let body = match exchanged.error_answer {
                    Some(response) => error_body(response).await,
                    None => Vec::new(),
                };
                let answer = ProviderErrorResponse {
                    status: exchanged.status.as_u16(),
                    headers: exchanged.headers,
                    body,
                };
                let explanation = inner
                    .error_message
                    .as_ref()
                    .and_then(|read| read(&answer))
                    .filter(|text| {
                        !text.trim().is_empty() && text.chars().count() <= MAX_ERROR_MESSAGE_CHARS
                    });
                Err(call.status(
                    exchanged.status,
                    &answer.headers,
                    exchanged.request_id,
                    explanation,
                ))
            }
            Err(Broken::Interrupted(interruption)) => {
                Err(call.interrupted(interruption, Sent::Yes, seen))
            }
            Err(Broken::TooLarge) => Err(call.undecodable(seen, "too_large", None, None)),
            Err(Broken::Transport(error)) if error.is_connect() => {
                Err(call.unreachable(io_kind(&error)))
            }
            Err(Broken::Transport(error)) if error.is_builder() => {
                Err(call.request_invalid("the request could not be built"))
            }
            Err(Broken::Transport(error)) => Err(call.interrupted(
                Interruption::ConnectionLost(io_kind(&error)),
                Sent::Yes,
                seen,
            )),
        }
    }
}

/// Completes when `token` fires; never without a token.
async fn fired(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// What the response had shown by the time the exchange stopped.
#[derive(Clone)]
struct Seen {
    status: u16,
    request_id: Option<String>,
}

struct Exchanged {
    status: StatusCode,
    request_id: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
    /// An error answer whose body the client's `error_message` reads.
    error_answer: Option<reqwest::Response>,
}

enum Broken {
    Transport(reqwest::Error),
    TooLarge,
    Interrupted(Interruption),
}

/// Sends the request and reads a success body up to the client's limit; records the status line
/// in `seen` as soon as it arrives, so an interruption afterwards can report it.
async fn exchange(
    inner: &ClientInner,
    request: reqwest::Request,
    seen: &OnceLock<Seen>,
) -> Result<Exchanged, Broken> {
    let mut response = inner
        .http
        .execute(request)
        .await
        .map_err(Broken::Transport)?;
    let status = response.status();
    let request_id = inner
        .request_id_header
        .as_ref()
        .and_then(|name| response.headers().get(name))
        .and_then(safe_request_id);
    let _ = seen.set(Seen {
        status: status.as_u16(),
        request_id: request_id.clone(),
    });
    let headers = std::mem::take(response.headers_mut());
    if !status.is_success() {
        // The status is the answer. The body is left unread: the client's `error_message`
        // reads its beginning afterwards, outside the call's deadline (`error_body`).
        return Ok(Exchanged {
            status,
            request_id,
            headers,
            body: Vec::new(),
            error_answer: inner.error_message.is_some().then_some(response),
        });
    }
    let limit = inner.max_response_bytes;
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(Broken::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Broken::Transport)? {
        if body.len() + chunk.len() > limit {
            return Err(Broken::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Exchanged {
        status,
        request_id,
        headers,
        body,
        error_answer: None,
    })
}

/// The first [`MAX_ERROR_BODY_BYTES`] of an error answer's body, as far as it came within
/// [`ERROR_BODY_TIMEOUT`]: the status has decided the failure, so what the body does (stall,
/// break off) changes nothing but the explanation.
async fn error_body(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    let reading = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_ERROR_BODY_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() >= room {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_BODY_TIMEOUT, reading).await;
    body
}

/// A request id worth copying into a failure: short, printable ASCII.
fn safe_request_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?.trim();
    (!text.is_empty()
        && text.len() <= MAX_REQUEST_ID_LEN
        && text.bytes().all(|b| b.is_ascii_graphic()))
    .then(|| text.to_owned())
}

/// The `std::io::ErrorKind` behind a transport error, by name (safe to report: no addresses,
/// no payload).
fn io_kind(error: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return Some(format!("{:?}", io.kind()));
        }
        source = current.source();
    }
    None
}

/// Retry-After as milliseconds: delay-seconds or an IMF-fixdate (RFC 9110 §10.2.3).
fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1000));
    }
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let at = time::PrimitiveDateTime::parse(value, format)
        .ok()?
        .assume_utc();
    let wait = at - time::OffsetDateTime::now_utc();
    Some(u64::try_from(wait.whole_milliseconds()).unwrap_or(0))
}

/// Why an exchange stopped without a complete response.
enum Interruption {
    Deadline,
    Cancelled,
    ConnectionLost(Option<String>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sent {
    No,
    Yes,
}

/// What a failure needs to know about the call, and nothing that could leak.
#[derive(Clone)]
struct CallInfo {
    method: Method,
    /// The URL path (never the query).
    path: String,
    mutating: bool,
    operation: ConnectorOperation,
    provider_operation: Option<ProviderOperationRef>,
    source: Arc<str>,
    server_errors_uncertain: bool,
}

/// The classification of one failure, before it becomes a [`ConnectorFailure`].
struct Class {
    code: &'static str,
    category: ErrorCategory,
    retryable: bool,
    uncertain: bool,
}

impl CallInfo {
    fn failure(
        &self,
        class: Class,
        message: String,
        seen: Option<Seen>,
        retry_after_ms: Option<u64>,
        details: Value,
    ) -> ConnectorFailure {
        let mut all = Map::new();
        all.insert("method".into(), Value::from(self.method.as_str()));
        all.insert("path".into(), Value::from(self.path.as_str()));
        all.insert("mutating".into(), Value::from(self.mutating));
        if let Value::Object(extra) = details {
            all.extend(extra);
        }
        let (remote_status, provider_request_id) = match seen {
            Some(seen) => (Some(seen.status), seen.request_id),
            None => (None, None),
        };
        ConnectorFailure::from(ConnectorFailureData {
            code: class.code.to_owned(),
            message: format!("{} {}: {message}", self.method, self.path),
            category: class.category,
            retryable: class.retryable,
            retry_after_ms: retry_after_ms.filter(|_| class.retryable),
            provider_request_id,
            provider_operation: self.provider_operation.clone(),
            remote_status,
            uncertain_outcome: class.uncertain,
            redacted_details: Some(Value::Object(all)),
            source_component: self.source.to_string(),
            operation: self.operation,
        })
    }

    fn request_invalid(&self, reason: &'static str) -> ConnectorFailure {
        self.failure(
            Class {
                code: codes::PROVIDER_REQUEST_INVALID,
                category: ErrorCategory::Connector,
                retryable: false,
                uncertain: false,
            },
            format!("{reason}; nothing was sent"),
            None,
            None,
            json!({ "phase": "build" }),
        )
    }

    fn unreachable(&self, io_error: Option<String>) -> ConnectorFailure {
        self.failure(
            Class {
                code: codes::PROVIDER_UNAVAILABLE,
                category: ErrorCategory::Temporary,
                retryable: true,
                uncertain: false,
            },
            "the provider could not be reached; nothing was sent".to_owned(),
            None,
            None,
            json!({ "phase": "connect", "cause": "connect", "io_error": io_error }),
        )
    }

    fn interrupted(
        &self,
        interruption: Interruption,
        sent: Sent,
        seen: Option<Seen>,
    ) -> ConnectorFailure {
        let uncertain = sent == Sent::Yes && self.mutating;
        let (code, cause, io_error, what) = match interruption {
            Interruption::Cancelled => (
                codes::PROVIDER_CANCELLED,
                "cancelled",
                None,
                "the action was cancelled",
            ),
            Interruption::Deadline if uncertain => (
                codes::PROVIDER_OUTCOME_UNKNOWN,
                "deadline",
                None,
                "the deadline passed",
            ),
            Interruption::Deadline => (
                codes::PROVIDER_TIMEOUT,
                "deadline",
                None,
                "the deadline passed",
            ),
            Interruption::ConnectionLost(io) if uncertain => (
                codes::PROVIDER_OUTCOME_UNKNOWN,
                "connection_lost",
                io,
                "the connection was lost",
            ),
            Interruption::ConnectionLost(io) => (
                codes::PROVIDER_UNAVAILABLE,
                "connection_lost",
                io,
                "the connection was lost",
            ),
        };
        let message = match (sent, uncertain) {
            (Sent::No, _) => format!("{what} before the request was sent; nothing was sent"),
            (Sent::Yes, true) => format!(
                "{what} after the request was sent and before a complete response; \
                 the provider may have applied it"
            ),
            (Sent::Yes, false) => {
                format!("{what} after the request was sent and before a complete response")
            }
        };
        let phase = match (sent, &seen) {
            (Sent::No, _) => "before_send",
            (Sent::Yes, None) => "awaiting_response",
            (Sent::Yes, Some(_)) => "reading_body",
        };
        self.failure(
            Class {
                code,
                category: ErrorCategory::Temporary,
                retryable: !uncertain,
                uncertain,
            },
            message,
            seen,
            None,
            json!({ "phase": phase, "cause": cause, "io_error": io_error }),
        )
    }

    fn status(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        request_id: Option<String>,
        explanation: Option<String>,
    ) -> ConnectorFailure {
        let code = status.as_u16();
        let class = |code, category, retryable, uncertain| Class {
            code,
            category,
            retryable,
            uncertain,
        };
        let (class, what) = match code {
            429 => (
                class(
                    codes::PROVIDER_RATE_LIMITED,
                    ErrorCategory::Temporary,
                    true,
                    false,
                ),
                "the provider is rate limiting",
            ),
            503 => (
                class(
                    codes::PROVIDER_UNAVAILABLE,
                    ErrorCategory::Temporary,
                    true,
                    false,
                ),
                "the provider is unavailable",
            ),
            500..=599 if self.mutating && self.server_errors_uncertain => (
                class(
                    codes::PROVIDER_OUTCOME_UNKNOWN,
                    ErrorCategory::Temporary,
                    false,
                    true,
                ),
                "the provider failed and may have applied the request",
            ),
            500..=599 => (
                class(
                    codes::PROVIDER_SERVER_ERROR,
                    ErrorCategory::Temporary,
                    true,
                    false,
                ),
                "the provider failed",
            ),
            401 | 403 => (
                class(
                    codes::PROVIDER_UNAUTHORIZED,
                    ErrorCategory::Auth,
                    false,
                    false,
                ),
                "the provider refused the credentials",
            ),
            400..=499 => (
                class(
                    codes::PROVIDER_REJECTED,
                    ErrorCategory::Permanent,
                    false,
                    false,
                ),
                "the provider rejected the request",
            ),
            _ => (
                class(
                    codes::PROVIDER_INVALID_RESPONSE,
                    ErrorCategory::Connector,
                    false,
                    self.mutating,
                ),
                "the provider answered with an unexpected status",
            ),
        };
        let retry_after = retry_after_ms(headers);
        let mut details = json!({ "phase": "status", "cause": "status", "status": code });
        let message = match explanation {
            Some(explanation) => {
                let message = format!("{what} (HTTP {code}): {explanation}");
                details["provider_message"] = Value::String(explanation);
                message
            }
            None => format!("{what} (HTTP {code})"),
        };
        self.failure(
            class,
            message,
            Some(Seen {
                status: code,
                request_id,
            }),
            retry_after,
            details,
        )
    }

    /// A 2xx answer whose body cannot be used. For a mutating call the provider said it acted
    /// but the client cannot tell what it did, so the outcome is uncertain.
    fn undecodable(
        &self,
        seen: Option<Seen>,
        reason: &'static str,
        position: Option<(usize, usize)>,
        expected: Option<&'static str>,
    ) -> ConnectorFailure {
        let status = seen.as_ref().map_or(0, |s| s.status);
        let what = match reason {
            "too_large" => "body is larger than the client's limit".to_owned(),
            "eof" => "body ends before the JSON value does".to_owned(),
            "syntax" => "body is not JSON".to_owned(),
            _ => "body is JSON of another shape than expected".to_owned(),
        };
        let at = position.map_or_else(String::new, |(line, column)| {
            format!(" (line {line}, column {column})")
        });
        let mut details = json!({ "phase": "decode", "cause": reason });
        if let Some((line, column)) = position {
            details["line"] = json!(line);
            details["column"] = json!(column);
        }
        if let Some(expected) = expected {
            details["expected"] = json!(short_type_name(expected));
        }
        let suffix = if self.mutating {
            "; the provider may have applied the request"
        } else {
            ""
        };
        self.failure(
            Class {
                code: codes::PROVIDER_INVALID_RESPONSE,
                category: ErrorCategory::Connector,
                retryable: false,
                uncertain: self.mutating,
            },
            format!("the HTTP {status} response {what}{at}{suffix}"),
            seen,
            None,
            details,
        )
    }
}

/// An error answer (a non-2xx status) as [`ProviderClientBuilder::error_message`] reads it:
/// the status, the headers, and the first [`MAX_ERROR_BODY_BYTES`] of the body.
pub struct ProviderErrorResponse {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl fmt::Debug for ProviderErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderErrorResponse")
            .field("status", &self.status)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl ProviderErrorResponse {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// A response header, when present and valid text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body's first [`MAX_ERROR_BODY_BYTES`].
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text, when it is UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }

    /// The body decoded as `T`; `None` when it is not JSON of that shape (or was cut).
    pub fn json<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// A 2xx answer from the provider.
pub struct ProviderResponse {
    status: u16,
    request_id: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
    call: CallInfo,
}

impl fmt::Debug for ProviderResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderResponse")
            .field("status", &self.status)
            .field("request_id", &self.request_id)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl ProviderResponse {
    /// The HTTP status (2xx).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The provider's request id, when the configured header carried a printable one.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// A response header, when present and valid text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The raw body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Decodes the body as `T`; a body that is not JSON of that shape is
    /// `provider.invalid_response` (uncertain for a mutating call).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ConnectorFailure> {
        serde_json::from_slice(&self.body).map_err(|error| {
            let reason = match error.classify() {
                serde_json::error::Category::Syntax => "syntax",
                serde_json::error::Category::Eof => "eof",
                serde_json::error::Category::Data | serde_json::error::Category::Io => "shape",
            };
            self.call.undecodable(
                Some(Seen {
                    status: self.status,
                    request_id: self.request_id.clone(),
                }),
                reason,
                Some((error.line(), error.column())),
                Some(std::any::type_name::<T>()),
            )
        })
    }
}

/// A Rust type's name without its module paths (`Vec<Page>` for
/// `alloc::vec::Vec<my_connector::api::Page>`): enough to tell which decode failed, while a
/// failure the host returns to remote callers does not spell out the connector's crate and
/// module layout (found by an author trial).
fn short_type_name(full: &str) -> String {
    let mut short = String::with_capacity(full.len());
    let mut segment_start = 0;
    for (at, character) in full.char_indices() {
        if character.is_alphanumeric() || character == '_' {
            continue;
        }
        if character == ':' {
            // The `::` after a module's name: what came since the segment's start was a path
            // prefix, dropped with its separators.
            segment_start = at + 1;
            continue;
        }
        short.push_str(&full[segment_start..at]);
        short.push(character);
        segment_start = at + character.len_utf8();
    }
    short.push_str(&full[segment_start..]);
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_base_urls_are_told_from_others() {
        let loopback = |url: &str| is_loopback(&reqwest::Url::parse(url).unwrap());
        for url in [
            "http://127.0.0.1:8080",
            "http://127.8.9.10",
            "http://[::1]:9000",
            "http://[::ffff:127.0.0.1]",
            "http://localhost",
            "http://LocalHost:1",
            "http://localhost.",
            "http://api.localhost",
        ] {
            assert!(loopback(url), "{url}");
        }
        for url in [
            "http://10.0.0.1",
            "http://[::2]",
            "http://localhost.example.com",
            "http://example.com",
            "http://notlocalhost",
        ] {
            assert!(!loopback(url), "{url}");
        }
    }

    #[test]
    fn a_type_name_loses_its_module_paths() {
        assert_eq!(
            short_type_name("alloc::vec::Vec<my_connector::api::Page>"),
            "Vec<Page>"
        );
        assert_eq!(
            short_type_name("core::option::Option<(u32, &str, [a::B; 2])>"),
            "Option<(u32, &str, [B; 2])>"
        );
        assert_eq!(
            short_type_name(
                "std::collections::hash::map::HashMap<alloc::string::String, x::Y<'static>>"
            ),
            "HashMap<String, Y<'static>>"
        );
        assert_eq!(short_type_name("Created"), "Created");
        assert_eq!(
            short_type_name(std::any::type_name::<Vec<serde_json::Value>>()),
            "Vec<Value>"
        );
    }

    #[test]
    fn basic_credentials_are_base64_of_user_colon_password() {
        // RFC 7617 §2's example.
        let header = SecretHeader::Basic {
            user: "Aladdin".into(),
            password: Secret::new("open sesame"),
        };
        let value = header.value().expect("a valid header value");
        assert_eq!(value, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert!(value.is_sensitive());
        let bearer = SecretHeader::Bearer(Secret::from(String::from("tok"))).value();
        assert_eq!(bearer.expect("a valid header value"), "Bearer tok");
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert(reqwest::header::RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after_ms(&headers), Some(7_000));
        headers.insert(
            reqwest::header::RETRY_AFTER,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after_ms(&headers), Some(0), "a past date means now");
        let later = time::OffsetDateTime::now_utc() + time::Duration::seconds(120);
        let format = time::macros::format_description!(
            "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
        );
        let text = later.format(format).unwrap();
        headers.insert(
            reqwest::header::RETRY_AFTER,
            HeaderValue::from_str(&text).unwrap(),
        );
        let ms = retry_after_ms(&headers).unwrap();
        assert!((110_000..=120_000).contains(&ms), "{ms}");
        headers.insert(
            reqwest::header::RETRY_AFTER,
            HeaderValue::from_static("soon"),
        );
        assert_eq!(retry_after_ms(&headers), None);
    }

    #[test]
    fn request_ids_are_copied_only_when_short_and_printable() {
        assert_eq!(
            safe_request_id(&HeaderValue::from_static("req_123")),
            Some("req_123".into())
        );
        assert_eq!(safe_request_id(&HeaderValue::from_static("a b")), None);
        let long = "x".repeat(MAX_REQUEST_ID_LEN + 1);
        assert_eq!(
            safe_request_id(&HeaderValue::from_str(&long).unwrap()),
            None
        );
    }

    #[test]
    fn builder_refuses_credentials_and_queries_in_the_base_url() {
        for url in [
            "https://user:pw@api.example.com",
            "https://api.example.com/?api_key=s3cret",
            "ftp://api.example.com",
            "not a url",
        ] {
            let error = ProviderClient::new(url).unwrap_err().to_string();
            assert!(
                !error.contains("s3cret") && !error.contains("pw"),
                "{error}"
            );
        }
        let error = ProviderClient::builder("https://api.example.com")
            .secret_header("x-api-key", Secret::new("bad\nvalue"))
            .build()
            .unwrap_err();
        assert!(
            matches!(&error, ProviderClientError::InvalidHeaderValue { name } if name == "x-api-key")
        );
        assert!(!error.to_string().contains("bad"));
    }

    #[test]
    fn debug_never_shows_secrets() {
        let client = ProviderClient::builder("https://api.example.com/v1")
            .bearer_auth(Secret::new("tok_live_123"))
            .basic_auth("acct", Secret::new("pw_456"))
            .secret_header("x-api-key", Secret::new("key_789"))
            .build()
            .unwrap();
        let request = client
            .post("/x?token=q_000")
            .bearer_auth(&Secret::new("tok_call"));
        let builder = ProviderClient::builder("https://user:pw_111@api.example.com/hooks/tok_222")
            .header("x-plain", "plain_333");
        let text = format!("{client:?} {request:?} {builder:?}");
        for secret in [
            "tok_live_123",
            "pw_456",
            "key_789",
            "tok_call",
            "q_000",
            "pw_111",
            "tok_222",
            "plain_333",
        ] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("x-api-key: [REDACTED]"), "{text}");
    }
}
