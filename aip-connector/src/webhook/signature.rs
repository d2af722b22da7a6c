//! Webhook signatures: the secret, the scheme trait, and the Standard Webhooks scheme.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Mac, digest::KeyInit};
use http::{HeaderMap, HeaderValue};
use zeroize::Zeroizing;

use super::WebhookError;
use crate::store::Millis;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// A webhook signing secret shared with the provider.
///
/// Its `Debug` shows only the length; it is neither `Serialize` nor `Display`, so the key
/// reaches no log, record or error. (Nor `PartialEq`: a comparison of keys that is not
/// constant-time has no use that is safe.) The key is wiped from memory when the secret is
/// dropped.
#[derive(Clone)]
pub struct WebhookSecret(Zeroizing<Vec<u8>>);

impl WebhookSecret {
    /// A secret of raw key bytes (what a provider that shows "the signing secret" as text
    /// means: its UTF-8 bytes, `WebhookSecret::new("s3cr3t")`).
    pub fn new(key: impl Into<Vec<u8>>) -> Self {
        Self(Zeroizing::new(key.into()))
    }

    /// A secret in the Standard Webhooks form, `whsec_<base64 key>` (the prefix is optional):
    /// the key is the decoded base64.
    ///
    /// # Errors
    ///
    /// When the text after the prefix is not base64 or decodes to nothing. The error does not
    /// quote the text.
    pub fn standard(text: &str) -> Result<Self, InvalidSecret> {
        let encoded = text.strip_prefix("whsec_").unwrap_or(text);
        match BASE64.decode(encoded.trim()).map(Zeroizing::new) {
            Ok(key) if !key.is_empty() => Ok(Self(key)),
            _ => Err(InvalidSecret),
        }
    }

    /// The key bytes, for a [`SignatureScheme`] of your own.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// HMAC-SHA256 of `parts`, fed in order, under this secret.
    pub fn hmac_sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.mac();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// Whether `signature` is the HMAC-SHA256 of `parts` under this secret, compared in
    /// constant time. It hashes `parts` on every call: a scheme that accepts several signatures
    /// per delivery should compute [`hmac_sha256`](Self::hmac_sha256) once and compare each
    /// candidate, so an unsigned request cannot make it hash the body once per candidate.
    pub fn verify_hmac_sha256(&self, parts: &[&[u8]], signature: &[u8]) -> bool {
        constant_time_eq(&self.hmac_sha256(parts), signature)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length (longer ones are hashed first), so this cannot fail.
        <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC accepts keys of any length")
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSecret({} bytes, redacted)", self.0.len())
    }
}

/// A secret text that is not a Standard Webhooks secret (`whsec_<base64>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a Standard Webhooks secret is `whsec_` followed by a non-empty base64 key")]
pub struct InvalidSecret;

/// What a valid signature vouches for: the delivery's id and, when the scheme signs one, its
/// timestamp.
///
/// Both must be covered by the signature. A scheme that reads the id from a header the provider
/// does not sign (GitHub's `X-GitHub-Delivery` beside a signature over the body alone) lets
/// anyone resend a captured body under a new id, past replay protection: such a scheme should
/// return an id derived from what is signed (a hex SHA-256 of the body, say) instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedDelivery {
    /// The provider's id of the delivery, the same on every retry of one event: the key replays
    /// are recognised by.
    pub id: String,
    /// When the provider signed it, in milliseconds since the Unix epoch, if the scheme signs a
    /// timestamp. Without one, the receiver cannot reject stale deliveries.
    pub timestamp_ms: Option<Millis>,
}

/// How a provider signs its webhook deliveries.
///
/// The receiver calls [`verify`](Self::verify) on every delivery before anything else runs;
/// [`sign`](Self::sign) is the provider's side, which the testkit and your tests use to send
/// deliveries a real provider would. [`StandardWebhooks`] is built in; a provider with a scheme
/// of its own gets an implementation of a few lines, with [`WebhookSecret::verify_hmac_sha256`]
/// doing the cryptography.
pub trait SignatureScheme: Send + Sync + 'static {
    /// Checks that `body` was signed with one of `secrets` (several while a secret rotates) and
    /// returns what the signature covers.
    ///
    /// # Errors
    ///
    /// [`WebhookError::MissingHeader`] or [`WebhookError::InvalidDelivery`] for a delivery that
    /// does not have the scheme's shape, [`WebhookError::AuthenticationFailed`] when no
    /// signature matches.
    fn verify(
        &self,
        secrets: &[WebhookSecret],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<SignedDelivery, WebhookError>;

    /// The headers a provider holding `secret` sends with `body` for `delivery`.
    fn sign(&self, secret: &WebhookSecret, delivery: &SignedDelivery, body: &[u8]) -> HeaderMap;
}

/// The [Standard Webhooks](https://www.standardwebhooks.com/) scheme (Svix and the providers
/// built on it): headers `webhook-id`, `webhook-timestamp` (Unix seconds) and
/// `webhook-signature`, a space-separated list of `v1,<base64 HMAC-SHA256>` over
/// `<id>.<timestamp>.<body>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct StandardWebhooks;

impl StandardWebhooks {
    /// The delivery id header.
    pub const ID_HEADER: &'static str = "webhook-id";
    /// The timestamp header (Unix seconds).
    pub const TIMESTAMP_HEADER: &'static str = "webhook-timestamp";
    /// The signature header.
    pub const SIGNATURE_HEADER: &'static str = "webhook-signature";
    /// The longest signature header taken (room for dozens of signatures).
    pub const MAX_SIGNATURE_HEADER_BYTES: usize = 4096;
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.ct_eq(b).into()
}

impl SignatureScheme for StandardWebhooks {
    fn verify(
        &self,
        secrets: &[WebhookSecret],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<SignedDelivery, WebhookError> {
        let id = header(headers, Self::ID_HEADER)?;
        let timestamp = header(headers, Self::TIMESTAMP_HEADER)?;
        let signatures = header(headers, Self::SIGNATURE_HEADER)?;
        let seconds: u64 = timestamp.parse().map_err(|_| {
            WebhookError::InvalidDelivery(format!(
                "`{}` is not a number of seconds",
                Self::TIMESTAMP_HEADER
            ))
        })?;
        if signatures.len() > Self::MAX_SIGNATURE_HEADER_BYTES {
            return Err(WebhookError::InvalidDelivery(format!(
                "`{}` is longer than {} bytes",
                Self::SIGNATURE_HEADER,
                Self::MAX_SIGNATURE_HEADER_BYTES
            )));
        }
        let signed = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
        // The body is hashed once per secret, however many signatures the header lists: the
        // work an unsigned request can cause is bounded by the number of secrets. Each entry is
        // `<version>,<signature>`; only `v1` is defined. An entry that is not base64 or not 32
        // bytes cannot match and is skipped, like one of an unknown version.
        let candidates: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|encoded| BASE64.decode(encoded).ok())
            .filter(|signature| signature.len() == 32)
            .collect();
        let matches = !candidates.is_empty()
            && secrets.iter().any(|secret| {
                let expected = secret.hmac_sha256(&signed);
                candidates
                    .iter()
                    .any(|candidate| constant_time_eq(&expected, candidate))
            });
        if !matches {
            return Err(WebhookError::AuthenticationFailed);
        }
        Ok(SignedDelivery {
            id: id.to_owned(),
            timestamp_ms: Some(seconds.saturating_mul(1000)),
        })
    }

    fn sign(&self, secret: &WebhookSecret, delivery: &SignedDelivery, body: &[u8]) -> HeaderMap {
        let seconds = delivery.timestamp_ms.unwrap_or(0) / 1000;
        let timestamp = seconds.to_string();
        let mac = secret.hmac_sha256(&[
            delivery.id.as_bytes(),
            b".",
            timestamp.as_bytes(),
            b".",
            body,
        ]);
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name, value);
            }
        };
        put(Self::ID_HEADER, delivery.id.clone());
        put(Self::TIMESTAMP_HEADER, timestamp);
        put(Self::SIGNATURE_HEADER, format!("v1,{}", BASE64.encode(mac)));
        headers
    }
}

/// The value of header `name` as text, trimmed: [`WebhookError::MissingHeader`] when it is absent
/// or blank, [`WebhookError::InvalidDelivery`] when it holds anything but visible ASCII, spaces
/// and tabs.
pub fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, WebhookError> {
    let value = headers.get(name).ok_or(WebhookError::MissingHeader(name))?;
    let text = value
        .to_str()
        .map_err(|_| WebhookError::InvalidDelivery(format!("`{name}` is not visible ASCII")))?
        .trim();
    if text.is_empty() {
        return Err(WebhookError::MissingHeader(name));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: &str, seconds: u64) -> SignedDelivery {
        SignedDelivery {
            id: id.to_owned(),
            timestamp_ms: Some(seconds * 1000),
        }
    }

    #[test]
    fn standard_webhooks_matches_the_specification_example() {
        // The example of the Standard Webhooks specification's reference tests.
        let secret = WebhookSecret::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let headers = StandardWebhooks.sign(
            &secret,
            &delivery("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330),
            body,
        );
        assert_eq!(
            headers[StandardWebhooks::SIGNATURE_HEADER],
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let signed = StandardWebhooks
            .verify(std::slice::from_ref(&secret), &headers, body)
            .unwrap();
        assert_eq!(
            signed,
            delivery("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330)
        );
    }

    #[test]
    fn a_tampered_body_id_or_timestamp_fails_authentication() {
        let secret = WebhookSecret::new("s3cr3t");
        let secrets = std::slice::from_ref(&secret);
        let headers = StandardWebhooks.sign(&secret, &delivery("msg_1", 1_700_000_000), b"{}");
        let verify =
            |headers: &HeaderMap, body: &[u8]| StandardWebhooks.verify(secrets, headers, body);
        assert!(verify(&headers, b"{}").is_ok());
        assert_eq!(
            verify(&headers, b"{ }").unwrap_err().code(),
            crate::codes::WEBHOOK_AUTHENTICATION_FAILED
        );
        for (name, value) in [
            (StandardWebhooks::ID_HEADER, "msg_2"),
            (StandardWebhooks::TIMESTAMP_HEADER, "1700000001"),
            (StandardWebhooks::SIGNATURE_HEADER, "v1,AAAA"),
            (StandardWebhooks::SIGNATURE_HEADER, "v2,not-base64 v1,%%%"),
            // Right length, wrong bytes: compared, not matched.
            (
                StandardWebhooks::SIGNATURE_HEADER,
                "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            ),
        ] {
            let mut tampered = headers.clone();
            tampered.insert(name, HeaderValue::from_static(value));
            assert!(
                matches!(
                    verify(&tampered, b"{}"),
                    Err(WebhookError::AuthenticationFailed)
                ),
                "{name}: {value}"
            );
        }
        let other = WebhookSecret::new("other");
        assert!(matches!(
            StandardWebhooks.verify(std::slice::from_ref(&other), &headers, b"{}"),
            Err(WebhookError::AuthenticationFailed)
        ));
    }

    #[test]
    fn any_of_several_secrets_and_signatures_may_match() {
        let old = WebhookSecret::new("old");
        let new = WebhookSecret::new("new");
        let signed_old = StandardWebhooks.sign(&old, &delivery("msg_1", 1), b"x");
        let signed_new = StandardWebhooks.sign(&new, &delivery("msg_1", 1), b"x");
        // A rotating receiver accepts either secret.
        let both = [new.clone(), old.clone()];
        assert!(StandardWebhooks.verify(&both, &signed_old, b"x").is_ok());
        // A provider sending both signatures during its own rotation is accepted by either.
        let mut two = signed_new.clone();
        let list = format!(
            "{} {}",
            signed_old[StandardWebhooks::SIGNATURE_HEADER]
                .to_str()
                .unwrap(),
            signed_new[StandardWebhooks::SIGNATURE_HEADER]
                .to_str()
                .unwrap()
        );
        two.insert(
            StandardWebhooks::SIGNATURE_HEADER,
            HeaderValue::try_from(list).unwrap(),
        );
        assert!(
            StandardWebhooks
                .verify(std::slice::from_ref(&new), &two, b"x")
                .is_ok()
        );
        assert!(
            StandardWebhooks
                .verify(std::slice::from_ref(&old), &two, b"x")
                .is_ok()
        );
    }

    #[test]
    fn an_oversized_signature_header_is_refused_before_any_hashing() {
        let secret = WebhookSecret::new("s");
        let mut headers = StandardWebhooks.sign(&secret, &delivery("msg_1", 1), b"x");
        let genuine = headers[StandardWebhooks::SIGNATURE_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let padded = format!("{} {genuine}", "v1,AAAA ".repeat(600));
        headers.insert(
            StandardWebhooks::SIGNATURE_HEADER,
            HeaderValue::try_from(padded).unwrap(),
        );
        let error = StandardWebhooks
            .verify(std::slice::from_ref(&secret), &headers, b"x")
            .unwrap_err();
        assert_eq!(error.code(), crate::codes::WEBHOOK_INVALID_DELIVERY);
    }

    #[test]
    fn missing_blank_and_malformed_headers_are_named() {
        let secret = WebhookSecret::new("s");
        let headers = StandardWebhooks.sign(&secret, &delivery("msg_1", 1), b"x");
        for name in [
            StandardWebhooks::ID_HEADER,
            StandardWebhooks::TIMESTAMP_HEADER,
            StandardWebhooks::SIGNATURE_HEADER,
        ] {
            let mut missing = headers.clone();
            missing.remove(name);
            let error = StandardWebhooks
                .verify(std::slice::from_ref(&secret), &missing, b"x")
                .unwrap_err();
            assert_eq!(error.code(), crate::codes::WEBHOOK_MISSING_HEADER);
            assert!(error.to_string().contains(name), "{error}");
            let mut blank = headers.clone();
            blank.insert(name, HeaderValue::from_static("  "));
            assert!(matches!(
                StandardWebhooks.verify(std::slice::from_ref(&secret), &blank, b"x"),
                Err(WebhookError::MissingHeader(n)) if n == name
            ));
        }
        let mut malformed = headers.clone();
        malformed.insert(
            StandardWebhooks::TIMESTAMP_HEADER,
            HeaderValue::from_static("yesterday"),
        );
        let error = StandardWebhooks
            .verify(std::slice::from_ref(&secret), &malformed, b"x")
            .unwrap_err();
        assert_eq!(error.code(), crate::codes::WEBHOOK_INVALID_DELIVERY);
    }

    #[test]
    fn secrets_never_show_their_key() {
        let secret = WebhookSecret::standard("whsec_c2VjcmV0LWNhbmFyeQ==").unwrap();
        assert_eq!(secret.expose(), b"secret-canary");
        let debug = format!("{secret:?}");
        assert!(
            !debug.contains("canary") && !debug.contains("c2Vj"),
            "{debug}"
        );
        assert_eq!(
            WebhookSecret::standard("whsec_%%%").unwrap_err(),
            InvalidSecret
        );
        assert_eq!(
            WebhookSecret::standard("whsec_").unwrap_err(),
            InvalidSecret
        );
        assert!(!InvalidSecret.to_string().contains("%%%"));
    }
}
