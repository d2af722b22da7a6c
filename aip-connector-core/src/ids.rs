//! Identifier newtypes (`aip-model.md` §1).
//!
//! On the wire every id is a plain JSON string (`#[serde(transparent)]`), and deserialization
//! checks nothing, exactly as upstream: golden fixtures carry ids such as `action:x` without the
//! `act_` prefix, and a strict deserializer would refuse them. The checked constructors are
//! [`parse`](ActionId::parse) (prefix and emptiness) and, for the prefixed ids,
//! [`new`](ActionId::new) (prefix + UUIDv7 in its 32-digit "simple" form).

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Why an identifier was refused by a checked constructor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdParseError {
    /// The identifier is the empty string.
    #[error("identifier is empty")]
    Empty,
    /// The identifier does not start with the prefix its type requires.
    #[error("identifier `{actual}` does not start with expected prefix `{expected}`")]
    InvalidPrefix {
        /// The prefix the type requires, e.g. `act_`.
        expected: &'static str,
        /// The identifier that was offered.
        actual: String,
    },
}

/// `prefix` followed by a fresh UUIDv7 in simple form.
///
/// The UUID comes from a per-thread context (`uuid`'s [`ThreadLocalContext`]): `Uuid::now_v7`
/// takes one process-wide lock for every id, so threads creating actions at the same time wait
/// for each other and pass that lock's cache line around. Ids stay monotonic within a thread,
/// and ids of different threads in the same millisecond differ by their 74 random and counter
/// bits, as `now_v7`'s do between processes.
///
/// [`ThreadLocalContext`]: uuid::timestamp::context::ThreadLocalContext
fn prefixed_uuid_v7(prefix: &str) -> String {
    use uuid::timestamp::context::{ContextV7, ThreadLocalContext};
    thread_local! {
        static CONTEXT: ContextV7 = const { ContextV7::new() };
    }
    static PER_THREAD: ThreadLocalContext<ContextV7> = ThreadLocalContext::new(&CONTEXT);
    let uuid = uuid::Uuid::new_v7(uuid::Timestamp::now(&PER_THREAD));
    let mut buffer = uuid::Uuid::encode_buffer();
    let hex = uuid.simple().encode_lower(&mut buffer);
    let mut id = String::with_capacity(prefix.len() + hex.len());
    id.push_str(prefix);
    id.push_str(hex);
    id
}

/// Shared surface of every id newtype: string access, `Display`, `Borrow<str>`, comparisons.
macro_rules! id_common {
    ($name:ident) => {
        impl $name {
            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Consumes the id and returns the inner string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        /// `"act_…".parse::<ActionId>()`: the same check as `parse`.
        impl std::str::FromStr for $name {
            type Err = IdParseError;

            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Self::parse(value)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

/// Ids that carry a type prefix and are generated as prefix + UUIDv7.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every generated id of this type starts with.
            pub const PREFIX: &'static str = $prefix;

            /// Generates a fresh id: the prefix followed by a UUIDv7 in simple form
            /// (32 lowercase hex digits), so ids sort by creation time.
            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                Self(prefixed_uuid_v7($prefix))
            }

            /// Checks that `value` is non-empty and carries the type prefix.
            pub fn parse(value: impl Into<String>) -> Result<Self, IdParseError> {
                let value = value.into();
                if value.is_empty() {
                    return Err(IdParseError::Empty);
                }
                if !value.starts_with($prefix) {
                    return Err(IdParseError::InvalidPrefix { expected: $prefix, actual: value });
                }
                Ok(Self(value))
            }

            /// Wraps a value that came from a trusted source without checking it, as serde does.
            pub fn trusted(value: impl Into<String>) -> Self {
                Self(value.into())
            }
        }

        id_common!($name);
    };
}

/// Ids without a prefix: only emptiness is checked by `parse`.
macro_rules! plain_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Checks that `value` is not the empty string.
            pub fn parse(value: impl Into<String>) -> Result<Self, IdParseError> {
                let value = value.into();
                if value.is_empty() {
                    return Err(IdParseError::Empty);
                }
                Ok(Self(value))
            }

            /// Wraps a value without checking it (compile-time literals, trusted stores).
            pub fn trusted(value: impl Into<String>) -> Self {
                Self(value.into())
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self(value)
            }
        }

        id_common!($name);
    };
}

prefixed_id!(
    /// Identifies one envelope (`msg_…`).
    MessageId,
    "msg_"
);
prefixed_id!(
    /// Identifies a session (`sess_…`).
    SessionId,
    "sess_"
);
prefixed_id!(
    /// Correlates related envelopes (`corr_…`).
    CorrelationId,
    "corr_"
);
prefixed_id!(
    /// Identifies one action, i.e. one capability invocation (`act_…`).
    ActionId,
    "act_"
);
prefixed_id!(
    /// Identifies an approval request (`appr_…`).
    ApprovalId,
    "appr_"
);
prefixed_id!(
    /// Identifies a delegation (`dlg_…`).
    DelegationId,
    "dlg_"
);
prefixed_id!(
    /// Identifies an audit or lifecycle event (`evt_…`).
    EventId,
    "evt_"
);
prefixed_id!(
    /// Identifies a receipt in the audit chain (`rcpt_…`).
    ReceiptId,
    "rcpt_"
);
prefixed_id!(
    /// Identifies a transaction (`txn_…`).
    TransactionId,
    "txn_"
);
prefixed_id!(
    /// Identifies a conversation (`conv_…`).
    ConversationId,
    "conv_"
);

plain_id!(
    /// Identifies a principal (human, agent, service, ...). No prefix convention.
    PrincipalId
);
plain_id!(
    /// Identifies a capability; by convention `cap:<connector>:<operation>`.
    CapabilityId
);
plain_id!(
    /// Identifies a profile, e.g. `aip.native.http.v1`.
    ProfileId
);

/// Well-known profile ids (`aip-model.md` §1).
pub mod profiles {
    /// Native AIP over HTTP.
    pub const NATIVE_HTTP: &str = "aip.native.http.v1";
    /// Native AIP over NATS.
    pub const NATIVE_NATS: &str = "aip.native.nats.v1";
    /// MCP compatibility projection.
    pub const MCP_COMPAT: &str = "aip.mcp.compat.v1";
    /// A2A compatibility projection.
    pub const A2A_COMPAT: &str = "aip.a2a.compat.v1";
    /// Webhook ingestion over HTTP.
    pub const HTTP_WEBHOOK: &str = "aip.http.webhook.v1";
    /// Server-sent event streams.
    pub const SSE_STREAM: &str = "aip.sse.stream.v1";
    /// The short names `#[connector(profiles = [...])]`, `bindings(...)` and
    /// `ConnectorBuilder::profile` accept for the well-known profiles, with their ids.
    pub const SHORT_NAMES: &[(&str, &str)] = &[
        ("native_http", NATIVE_HTTP),
        ("native_nats", NATIVE_NATS),
        ("mcp", MCP_COMPAT),
        ("a2a", A2A_COMPAT),
        ("webhook", HTTP_WEBHOOK),
        ("sse", SSE_STREAM),
    ];

    /// The id of a well-known profile's short name (`"mcp"` → [`MCP_COMPAT`]); any other name
    /// as it is.
    pub fn resolve(name: &str) -> &str {
        SHORT_NAMES
            .iter()
            .find(|(short, _)| *short == name)
            .map_or(name, |(_, id)| id)
    }

    /// The key of an [`MCP_COMPAT`] binding that declares the capability's `write` additive,
    /// so the projection publishes `destructiveHint: false` (`mcp(destructive = false)`).
    pub const MCP_DESTRUCTIVE_KEY: &str = "destructive";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_profile_names_resolve_to_their_ids() {
        assert_eq!(profiles::resolve("mcp"), profiles::MCP_COMPAT);
        assert_eq!(profiles::resolve("native_http"), profiles::NATIVE_HTTP);
        assert_eq!(profiles::resolve("x.custom.v1"), "x.custom.v1");
    }

    #[test]
    fn ids_parse_from_str_with_the_same_checks() {
        let id: ActionId = "act_0190f2a6c8d47b21a5e3d9c0f1b2a3c4".parse().unwrap();
        assert_eq!(id.as_str(), "act_0190f2a6c8d47b21a5e3d9c0f1b2a3c4");
        assert!(matches!(
            "appr_1".parse::<ActionId>(),
            Err(IdParseError::InvalidPrefix {
                expected: "act_",
                ..
            })
        ));
        assert!(matches!(
            "".parse::<CapabilityId>(),
            Err(IdParseError::Empty)
        ));
        assert_eq!("cap:x".parse::<CapabilityId>().unwrap().as_str(), "cap:x");
    }

    #[test]
    fn generated_ids_are_prefix_plus_simple_uuid_v7() {
        let id = ActionId::new();
        let hex = id.as_str().strip_prefix("act_").expect("prefix");
        assert_eq!(hex.len(), 32);
        assert!(
            hex.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        // Version nibble of a UUIDv7 is the 13th hex digit.
        assert_eq!(&hex[12..13], "7");
        assert!(ActionId::parse(id.as_str()).is_ok());
    }

    /// Ids from racing threads are distinct, and each thread's ids sort in creation order.
    #[test]
    fn generated_ids_are_unique_across_threads_and_ordered_within_one() {
        let per_thread: Vec<Vec<ActionId>> = (0..4)
            .map(|_| std::thread::spawn(|| (0..5_000).map(|_| ActionId::new()).collect()))
            .map(|thread| thread.join().expect("the thread does not panic"))
            .collect();
        for ids in &per_thread {
            assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
        }
        let all: std::collections::HashSet<&ActionId> = per_thread.iter().flatten().collect();
        assert_eq!(all.len(), 4 * 5_000);
    }

    #[test]
    fn parse_checks_prefix_and_emptiness() {
        assert_eq!(TransactionId::parse(""), Err(IdParseError::Empty));
        assert_eq!(
            TransactionId::parse("act_1").unwrap_err().to_string(),
            "identifier `act_1` does not start with expected prefix `txn_`"
        );
        assert_eq!(CapabilityId::parse(""), Err(IdParseError::Empty));
        assert!(CapabilityId::parse("cap:x:y").is_ok());
    }

    #[test]
    fn serde_is_transparent_and_unchecked() {
        let id: ActionId = serde_json::from_str("\"action:fixture\"").unwrap();
        assert_eq!(id, "action:fixture");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"action:fixture\"");
    }
}
