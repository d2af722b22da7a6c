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

/// A key the receiver checks signatures with: a secret shared with the provider (HMAC), or an
/// Ed25519 public key (with its private half when you sign deliveries yourself, in tests).
///
/// Its `Debug` shows only the kind and length; it is neither `Serialize` nor `Display`, so the
/// key reaches no log, record or error. (Nor `PartialEq`: a comparison of keys that is not
/// constant-time has no use that is safe.) Secret bytes are wiped from memory when the key is
/// dropped.
#[derive(Clone)]
pub struct WebhookSecret(Key);

/// What a [`WebhookSecret`] holds.
#[derive(Clone)]
enum Key {
    /// A shared HMAC key.
    Hmac(Zeroizing<Vec<u8>>),
    /// An Ed25519 public key, with the private key's seed when this side signs.
    Ed25519 {
        public: [u8; ED25519_PUBLIC_KEY_LEN],
        seed: Option<Zeroizing<[u8; ED25519_SEED_LEN]>>,
    },
}

/// The length of an Ed25519 public key and of a private key's seed.
const ED25519_PUBLIC_KEY_LEN: usize = 32;
const ED25519_SEED_LEN: usize = 32;

/// The length of an Ed25519 signature.
const ED25519_SIGNATURE_LEN: usize = 64;

impl WebhookSecret {
    /// A shared secret of raw key bytes (what a provider that shows "the signing secret" as
    /// text means: its UTF-8 bytes, `WebhookSecret::new("s3cr3t")`).
    pub fn new(key: impl Into<Vec<u8>>) -> Self {
        Self(Key::Hmac(Zeroizing::new(key.into())))
    }

    /// A key in a Standard Webhooks form, told by its prefix:
    ///
    /// - `whsec_<base64>`: a shared secret (the prefix is optional: text without one of these
    ///   prefixes is a shared secret's base64);
    /// - `whpk_<base64>`: an Ed25519 public key (32 bytes), what a receiver holds when the
    ///   provider signs with `v1a` signatures;
    /// - `whsk_<base64>`: an Ed25519 private key, its 32-byte seed or the 64 bytes of seed and
    ///   public key, for signing deliveries in tests (it verifies too).
    ///
    /// # Errors
    ///
    /// When the text after the prefix is not base64, decodes to nothing, or is not a key of
    /// the prefix's length (or a 64-byte private key whose public half does not belong to its
    /// seed). The error does not quote the text.
    pub fn standard(text: &str) -> Result<Self, InvalidSecret> {
        let decode = |encoded: &str| {
            BASE64
                .decode(encoded.trim())
                .map(Zeroizing::new)
                .map_err(|_| InvalidSecret)
        };
        if let Some(encoded) = text.strip_prefix("whpk_") {
            let bytes = decode(encoded)?;
            let public = <[u8; ED25519_PUBLIC_KEY_LEN]>::try_from(bytes.as_slice())
                .map_err(|_| InvalidSecret)?;
            return Ok(Self::ed25519_public_key(public));
        }
        if let Some(encoded) = text.strip_prefix("whsk_") {
            let bytes = decode(encoded)?;
            let (seed, public) = match bytes.len() {
                ED25519_SEED_LEN => (&bytes[..], None),
                64 => (&bytes[..ED25519_SEED_LEN], Some(&bytes[ED25519_SEED_LEN..])),
                _ => return Err(InvalidSecret),
            };
            let mut seed_array = Zeroizing::new([0u8; ED25519_SEED_LEN]);
            seed_array.copy_from_slice(seed);
            let key = Self::ed25519_secret_key(*seed_array);
            if let (Some(given), Key::Ed25519 { public, .. }) = (public, &key.0)
                && given != public.as_slice()
            {
                return Err(InvalidSecret);
            }
            return Ok(key);
        }
        let encoded = text.strip_prefix("whsec_").unwrap_or(text);
        match decode(encoded) {
            Ok(key) if !key.is_empty() => Ok(Self(Key::Hmac(key))),
            _ => Err(InvalidSecret),
        }
    }

    /// An Ed25519 public key: the receiver's side of a provider that signs with Ed25519. It
    /// verifies; it cannot sign.
    pub fn ed25519_public_key(public: [u8; ED25519_PUBLIC_KEY_LEN]) -> Self {
        Self(Key::Ed25519 { public, seed: None })
    }

    /// An Ed25519 private key from its 32-byte seed: the provider's side, for signing
    /// deliveries in tests. It verifies too, with its public half.
    pub fn ed25519_secret_key(seed: [u8; ED25519_SEED_LEN]) -> Self {
        let seed = Zeroizing::new(seed);
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(seed.as_slice())
            .expect("every 32-byte seed is an Ed25519 private key");
        let mut public = [0u8; ED25519_PUBLIC_KEY_LEN];
        public.copy_from_slice(ring::signature::KeyPair::public_key(&pair).as_ref());
        Self(Key::Ed25519 {
            public,
            seed: Some(seed),
        })
    }

    /// An Ed25519 key's public half in the Standard Webhooks form, `whpk_<base64>`: what a
    /// production receiver holds when the provider (or your test) signs with the private key.
    /// `None` for a shared secret.
    pub fn standard_public_key(&self) -> Option<String> {
        match &self.0 {
            Key::Ed25519 { public, .. } => Some(format!("whpk_{}", BASE64.encode(public))),
            Key::Hmac(_) => None,
        }
    }

    /// Whether this is an Ed25519 key (public, or private with its public half) rather than a
    /// shared HMAC secret.
    pub fn is_ed25519(&self) -> bool {
        matches!(self.0, Key::Ed25519 { .. })
    }

    /// Whether this key can sign: a shared secret, or an Ed25519 private key (not a public
    /// key alone).
    pub fn can_sign(&self) -> bool {
        match &self.0 {
            Key::Hmac(_) => true,
            Key::Ed25519 { seed, .. } => seed.is_some(),
        }
    }

    /// The key bytes, for a [`SignatureScheme`] of your own: a shared secret's bytes, or an
    /// Ed25519 key's 32-byte public key (a private key's seed is never handed out).
    pub fn expose(&self) -> &[u8] {
        match &self.0 {
            Key::Hmac(key) => key,
            Key::Ed25519 { public, .. } => public,
        }
    }

    /// HMAC-SHA256 of `parts`, fed in order, under this shared secret; `None` for an Ed25519
    /// key, whose public bytes must never serve as an HMAC key (anyone could sign with them).
    pub fn hmac_sha256(&self, parts: &[&[u8]]) -> Option<[u8; 32]> {
        let Key::Hmac(key) = &self.0 else {
            return None;
        };
        // HMAC takes keys of any length (longer ones are hashed first), so this cannot fail.
        let mut mac =
            <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
        for part in parts {
            mac.update(part);
        }
        Some(mac.finalize().into_bytes().into())
    }

    /// Whether `signature` is the HMAC-SHA256 of `parts` under this shared secret, compared in
    /// constant time; always false for an Ed25519 key. It hashes `parts` on every call: a
    /// scheme that accepts several signatures per delivery should compute
    /// [`hmac_sha256`](Self::hmac_sha256) once and compare each candidate, so an unsigned
    /// request cannot make it hash the body once per candidate.
    pub fn verify_hmac_sha256(&self, parts: &[&[u8]], signature: &[u8]) -> bool {
        self.hmac_sha256(parts)
            .is_some_and(|expected| constant_time_eq(&expected, signature))
    }

    /// Whether `signature` is this Ed25519 key's signature of `parts`, concatenated in order;
    /// always false for a shared secret.
    pub fn verify_ed25519(&self, parts: &[&[u8]], signature: &[u8]) -> bool {
        let Key::Ed25519 { public, .. } = &self.0 else {
            return false;
        };
        signature.len() == ED25519_SIGNATURE_LEN
            && ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
                .verify(&parts.concat(), signature)
                .is_ok()
    }

    /// This Ed25519 private key's signature of `parts`, concatenated in order; `None` for a
    /// shared secret or a public key alone.
    pub fn sign_ed25519(&self, parts: &[&[u8]]) -> Option<[u8; ED25519_SIGNATURE_LEN]> {
        let Key::Ed25519 {
            seed: Some(seed), ..
        } = &self.0
        else {
            return None;
        };
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(seed.as_slice()).ok()?;
        let mut signature = [0u8; ED25519_SIGNATURE_LEN];
        signature.copy_from_slice(pair.sign(&parts.concat()).as_ref());
        Some(signature)
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Key::Hmac(key) => write!(f, "WebhookSecret({} bytes, redacted)", key.len()),
            Key::Ed25519 { seed: None, .. } => write!(f, "WebhookSecret(Ed25519 public key)"),
            Key::Ed25519 { seed: Some(_), .. } => {
                write!(f, "WebhookSecret(Ed25519 private key, redacted)")
            }
        }
    }
}

/// A key text that is not a Standard Webhooks key (`whsec_`, `whpk_` or `whsk_` and base64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a Standard Webhooks key is `whsec_` followed by a non-empty base64 secret, `whpk_` by a \
     base64 Ed25519 public key (32 bytes) or `whsk_` by a base64 Ed25519 private key (32 or 64 \
     bytes)"
)]
pub struct InvalidSecret;

/// What a valid signature vouches for: the delivery's id and, when the scheme signs one, its
/// timestamp.
///
/// Both must be covered by the signature. A scheme that reads the id from a header the provider
/// does not sign (GitHub's `X-GitHub-Delivery` beside a signature over the body alone) lets
/// anyone resend a captured body under a new id, past replay protection: such a scheme should
/// return an id derived from what is signed (a hex SHA-256 of the body, say) instead.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SignedDelivery {
    /// The provider's id of the delivery, the same on every retry of one event: the key replays
    /// are recognised by.
    pub id: String,
    /// When the provider signed it, in milliseconds since the Unix epoch, if the scheme signs a
    /// timestamp. Without one, the receiver cannot reject stale deliveries.
    pub timestamp_ms: Option<Millis>,
}

impl SignedDelivery {
    /// A delivery with the provider's `id` and no signed timestamp.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            timestamp_ms: None,
        }
    }

    /// With the time the provider signed it, in milliseconds since the Unix epoch.
    pub fn with_timestamp_ms(mut self, timestamp_ms: Millis) -> Self {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }
}

/// How a provider signs its webhook deliveries.
///
/// The receiver calls [`verify`](Self::verify) on every delivery before anything else runs;
/// [`sign`](Self::sign) is the provider's side, which the testkit and your tests use to send
/// deliveries a real provider would. [`StandardWebhooks`] is built in; a provider with a scheme
/// of its own gets an implementation of a few lines, with [`WebhookSecret::verify_hmac_sha256`]
/// or [`WebhookSecret::verify_ed25519`] doing the cryptography.
pub trait SignatureScheme: Send + Sync + 'static {
    /// Whether this scheme verifies with `key`: by default shared secrets only, so that an
    /// Ed25519 key given to an HMAC scheme fails when the receiver is built
    /// ([`WebhookConfigError::UnsupportedKey`](super::WebhookConfigError::UnsupportedKey)),
    /// not on every delivery. A scheme that checks Ed25519 signatures answers true for them.
    fn accepts(&self, key: &WebhookSecret) -> bool {
        !key.is_ed25519()
    }

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

    /// The headers a provider holding `secret` sends with `body` for `delivery`. Only called
    /// with a key that [`can_sign`](WebhookSecret::can_sign).
    fn sign(&self, secret: &WebhookSecret, delivery: &SignedDelivery, body: &[u8]) -> HeaderMap;
}

/// The [Standard Webhooks](https://www.standardwebhooks.com/) scheme (Svix and the providers
/// built on it): headers `webhook-id`, `webhook-timestamp` (Unix seconds) and
/// `webhook-signature`, a space-separated list of signatures over `<id>.<timestamp>.<body>`:
/// `v1,<base64 HMAC-SHA256>` under a shared secret (`whsec_`), or `v1a,<base64 Ed25519
/// signature>` checked with the provider's public key (`whpk_`). A delivery passes when one
/// listed signature matches one of the receiver's keys.
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
    /// How many `v1a` signatures of one delivery are checked: each costs an Ed25519
    /// verification per public key, so an unsigned request listing dozens must not buy dozens.
    /// A rotation lists two or three.
    pub const MAX_ED25519_SIGNATURES: usize = 4;
}

/// Why no signature could have matched, when the delivery is signed only with a kind of key the
/// receiver holds none of: a provider that moved to Ed25519 (or back) while the receiver kept
/// its old keys fails every delivery, and `authentication_failed` alone reads like a bad secret.
fn key_kind_mismatch(
    secrets: &[WebhookSecret],
    has_hmac_signature: bool,
    has_ed25519_signature: bool,
) -> Option<&'static str> {
    let holds_ed25519 = secrets.iter().any(WebhookSecret::is_ed25519);
    let holds_shared = secrets.iter().any(|secret| !secret.is_ed25519());
    match (has_hmac_signature, has_ed25519_signature) {
        (false, true) if !holds_ed25519 => Some(
            "the delivery carries only `v1a` (Ed25519) signatures and the receiver holds only shared secrets: give it the provider's public key (`WebhookSecret::standard(\"whpk_...\")`)",
        ),
        (true, false) if !holds_shared => Some(
            "the delivery carries only `v1` (HMAC-SHA256) signatures and the receiver holds only Ed25519 keys: give it the provider's shared secret (`WebhookSecret::standard(\"whsec_...\")`)",
        ),
        _ => None,
    }
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
        // Each entry is `<version>,<signature>`: `v1` (HMAC-SHA256) or `v1a` (Ed25519). An
        // entry that is not base64 or not of its version's length cannot match and is skipped,
        // like one of an unknown version. The body is hashed once per shared secret, however
        // many `v1` signatures the header lists, and at most `MAX_ED25519_SIGNATURES` `v1a`
        // signatures are verified per public key: the work an unsigned request can cause is
        // bounded by the number of keys.
        let candidates = |version: &str, len: usize| -> Vec<Vec<u8>> {
            signatures
                .split(' ')
                .filter_map(|entry| entry.strip_prefix(version))
                .filter_map(|encoded| BASE64.decode(encoded).ok())
                .filter(|signature| signature.len() == len)
                .collect()
        };
        let hmac_candidates = candidates("v1,", 32);
        let mut ed25519_candidates = candidates("v1a,", ED25519_SIGNATURE_LEN);
        ed25519_candidates.truncate(Self::MAX_ED25519_SIGNATURES);
        let matches = secrets.iter().any(|secret| {
            if secret.is_ed25519() {
                ed25519_candidates
                    .iter()
                    .any(|candidate| secret.verify_ed25519(&signed, candidate))
            } else {
                !hmac_candidates.is_empty()
                    && secret.hmac_sha256(&signed).is_some_and(|expected| {
                        hmac_candidates
                            .iter()
                            .any(|candidate| constant_time_eq(&expected, candidate))
                    })
            }
        });
        if !matches {
            // Logged for the operator, not answered: whoever posted the delivery learns nothing
            // of the receiver's keys.
            if let Some(hint) = key_kind_mismatch(
                secrets,
                !hmac_candidates.is_empty(),
                !ed25519_candidates.is_empty(),
            ) {
                tracing::warn!(hint, "webhook delivery signed with another kind of key");
            }
            return Err(WebhookError::AuthenticationFailed);
        }
        Ok(SignedDelivery {
            id: id.to_owned(),
            timestamp_ms: Some(seconds.saturating_mul(1000)),
        })
    }

    fn accepts(&self, _key: &WebhookSecret) -> bool {
        true
    }

    /// Signs `v1` with a shared secret and `v1a` with an Ed25519 private key; a public key
    /// alone cannot sign, and the headers then carry no signature.
    fn sign(&self, secret: &WebhookSecret, delivery: &SignedDelivery, body: &[u8]) -> HeaderMap {
        let seconds = delivery.timestamp_ms.unwrap_or(0) / 1000;
        let timestamp = seconds.to_string();
        let signed = [
            delivery.id.as_bytes(),
            b".",
            timestamp.as_bytes(),
            b".",
            body,
        ];
        let signature = match secret.hmac_sha256(&signed) {
            Some(mac) => Some(format!("v1,{}", BASE64.encode(mac))),
            None => secret
                .sign_ed25519(&signed)
                .map(|signature| format!("v1a,{}", BASE64.encode(signature))),
        };
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name, value);
            }
        };
        put(Self::ID_HEADER, delivery.id.clone());
        put(Self::TIMESTAMP_HEADER, timestamp);
        if let Some(signature) = signature {
            put(Self::SIGNATURE_HEADER, signature);
        }
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

    /// RFC 8032's first Ed25519 test vector (the empty message): its seed, public key and
    /// signature, in the Standard Webhooks spellings.
    const RFC8032_SEED: &str = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";
    const RFC8032_PAIR: &str = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2DXWpgBgrEKt9VL/tPJZAc6DuFy89qmIyWvAhpo9wdRGg==";
    const RFC8032_PUBLIC: &str = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
    const RFC8032_SIGNATURE: &str =
        "5VZDAMNgrHKQhuLMgG6CioSHfx645dl02HPgZSJJAVVfuIIVkKM7rMYeOXAc+bRr0lv18FlbviRlUUFDjnoQCw==";

    #[test]
    fn ed25519_keys_match_the_rfc_8032_vector() {
        let signature = BASE64.decode(RFC8032_SIGNATURE).unwrap();
        for text in [RFC8032_SEED, RFC8032_PAIR] {
            let private = WebhookSecret::standard(text).unwrap();
            assert!(private.is_ed25519() && private.can_sign());
            assert_eq!(private.sign_ed25519(&[b""]).unwrap().as_slice(), signature);
            assert!(private.verify_ed25519(&[b""], &signature));
        }
        let public = WebhookSecret::standard(RFC8032_PUBLIC).unwrap();
        assert!(public.is_ed25519() && !public.can_sign());
        for key in [RFC8032_SEED, RFC8032_PAIR, RFC8032_PUBLIC] {
            assert_eq!(
                WebhookSecret::standard(key)
                    .unwrap()
                    .standard_public_key()
                    .as_deref(),
                Some(RFC8032_PUBLIC)
            );
        }
        assert_eq!(WebhookSecret::new("s3cr3t").standard_public_key(), None);
        assert_eq!(
            public.expose(),
            WebhookSecret::standard(RFC8032_SEED).unwrap().expose(),
            "a private key exposes its public half"
        );
        assert!(public.verify_ed25519(&[b""], &signature));
        assert!(!public.verify_ed25519(&[b"x"], &signature));
        assert!(!public.verify_ed25519(&[b""], &signature[..63]));
        assert_eq!(public.sign_ed25519(&[b""]), None);
        // The kinds never cross: no HMAC under a public key, no Ed25519 under a secret.
        assert_eq!(public.hmac_sha256(&[b""]), None);
        assert!(!WebhookSecret::new("s3cr3t").verify_ed25519(&[b""], &signature));
        assert_eq!(WebhookSecret::new("s3cr3t").sign_ed25519(&[b""]), None);
    }

    #[test]
    fn malformed_ed25519_keys_are_refused() {
        // A 64-byte private key whose public half is not its seed's.
        let mut pair = BASE64.decode(&RFC8032_PAIR["whsk_".len()..]).unwrap();
        pair[63] ^= 1;
        for text in [
            format!("whsk_{}", BASE64.encode(&pair)),
            "whsk_AAAA".to_owned(),
            "whpk_AAAA".to_owned(),
            "whpk_%%%".to_owned(),
            format!("whpk_{}", BASE64.encode([0u8; 33])),
        ] {
            assert_eq!(
                WebhookSecret::standard(&text).unwrap_err(),
                InvalidSecret,
                "{text}"
            );
        }
    }

    #[test]
    fn standard_webhooks_checks_v1a_signatures_with_public_keys() {
        let private = WebhookSecret::standard(RFC8032_SEED).unwrap();
        let public = WebhookSecret::standard(RFC8032_PUBLIC).unwrap();
        let body = br#"{"event":"charge.succeeded"}"#;
        let headers = StandardWebhooks.sign(&private, &delivery("msg_1", 1_700_000_000), body);
        let signatures = headers[StandardWebhooks::SIGNATURE_HEADER]
            .to_str()
            .unwrap();
        assert!(signatures.starts_with("v1a,"), "{signatures}");
        // The receiver holds the public key only, beside an unrelated shared secret.
        let keys = [WebhookSecret::new("other"), public.clone()];
        assert_eq!(
            StandardWebhooks.verify(&keys, &headers, body).unwrap(),
            delivery("msg_1", 1_700_000_000)
        );
        assert_eq!(
            StandardWebhooks
                .verify(&keys, &headers, b"{}")
                .unwrap_err()
                .code(),
            crate::codes::WEBHOOK_AUTHENTICATION_FAILED
        );
        // A public key cannot sign: no signature header at all.
        let unsigned = StandardWebhooks.sign(&public, &delivery("msg_1", 1_700_000_000), body);
        assert!(unsigned.get(StandardWebhooks::SIGNATURE_HEADER).is_none());
        // Anyone knows the public key: an HMAC `v1` signature keyed with its bytes is refused.
        let forged = StandardWebhooks.sign(
            &WebhookSecret::new(public.expose().to_vec()),
            &delivery("msg_1", 1_700_000_000),
            body,
        );
        assert_eq!(
            StandardWebhooks
                .verify(std::slice::from_ref(&public), &forged, body)
                .unwrap_err()
                .code(),
            crate::codes::WEBHOOK_AUTHENTICATION_FAILED
        );
    }

    #[test]
    fn a_delivery_signed_only_with_keys_the_receiver_lacks_is_named() {
        let shared = [WebhookSecret::new("s3cr3t")];
        let public = [WebhookSecret::standard(RFC8032_PUBLIC).unwrap()];
        let both = [shared[0].clone(), public[0].clone()];
        let hint = key_kind_mismatch(&shared, false, true).expect("v1a to shared secrets only");
        assert!(hint.contains("`v1a`") && hint.contains("whpk_"), "{hint}");
        let hint = key_kind_mismatch(&public, true, false).expect("v1 to public keys only");
        assert!(hint.contains("`v1`") && hint.contains("whsec_"), "{hint}");
        // A signature of a kind the receiver holds failed on its own: a wrong secret, a
        // tampered body. No hint then, nor for a header listing both kinds.
        for (keys, v1, v1a) in [
            (&shared[..], true, false),
            (&public[..], false, true),
            (&both[..], false, true),
            (&both[..], true, false),
            (&shared[..], true, true),
            (&shared[..], false, false),
        ] {
            assert_eq!(key_kind_mismatch(keys, v1, v1a), None, "{v1} {v1a}");
        }
    }

    #[test]
    fn only_the_first_ed25519_signatures_of_a_delivery_are_checked() {
        let private = WebhookSecret::standard(RFC8032_SEED).unwrap();
        let public = WebhookSecret::standard(RFC8032_PUBLIC).unwrap();
        let mut headers = StandardWebhooks.sign(&private, &delivery("msg_1", 1_700_000_000), b"{}");
        let genuine = headers[StandardWebhooks::SIGNATURE_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let junk = format!("v1a,{}", BASE64.encode([7u8; 64]));
        let listed = |junk_before: usize| {
            let mut entries = vec![junk.clone(); junk_before];
            entries.push(genuine.clone());
            HeaderValue::try_from(entries.join(" ")).unwrap()
        };
        let keys = std::slice::from_ref(&public);
        headers.insert(
            StandardWebhooks::SIGNATURE_HEADER,
            listed(StandardWebhooks::MAX_ED25519_SIGNATURES - 1),
        );
        assert!(StandardWebhooks.verify(keys, &headers, b"{}").is_ok());
        headers.insert(
            StandardWebhooks::SIGNATURE_HEADER,
            listed(StandardWebhooks::MAX_ED25519_SIGNATURES),
        );
        assert!(StandardWebhooks.verify(keys, &headers, b"{}").is_err());
    }

    #[test]
    fn ed25519_keys_never_show_their_private_half() {
        let private = WebhookSecret::standard(RFC8032_SEED).unwrap();
        let debug = format!("{private:?}");
        assert_eq!(debug, "WebhookSecret(Ed25519 private key, redacted)");
        assert_ne!(
            private.expose(),
            &BASE64.decode(&RFC8032_SEED["whsk_".len()..]).unwrap()[..]
        );
        let public = WebhookSecret::standard(RFC8032_PUBLIC).unwrap();
        assert_eq!(format!("{public:?}"), "WebhookSecret(Ed25519 public key)");
    }
}
