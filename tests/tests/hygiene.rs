//! Generated code stays clean under a user's strictest settings and does not rely on the
//! prelude: `Result`, `Ok`, `Option`, `core` and `std` are all shadowed here, and `no_prelude`
//! is compiled under `#![no_implicit_prelude]`. The clippy lints generated code used to trip
//! (`must_use_candidate` on a pub free capability's codecs, `unused_async` on handlers that
//! await nothing, like these, and the restriction lint `question_mark_used` on the `?` that reads
//! an extractor) are denied too: the workspace's `cargo clippy -- -D warnings` checks this file.
#![deny(warnings, missing_docs, unused_qualifications)]
#![deny(
    clippy::must_use_candidate,
    clippy::unused_async,
    clippy::question_mark_used
)]

#[allow(dead_code)]
struct Result;
#[allow(dead_code)]
struct Ok;
#[allow(dead_code)]
struct Option;
#[allow(dead_code)]
mod core {}
#[allow(dead_code)]
mod std {}

use aip_connector::prelude::{
    CancelRequest, Cancellation, ConnectorFailure, Deserialize, IdempotencyKey, JsonSchema,
    Serialize, State, capability, connector,
};

/// Input.
#[derive(Deserialize, JsonSchema)]
pub struct Lookup {
    /// Query.
    pub query: ::std::string::String,
}

/// Output.
#[derive(Serialize, JsonSchema)]
pub struct Found {
    /// Hits.
    pub hits: u32,
}

/// A connector compiled under `deny(warnings)`.
pub struct Strict;

#[connector(id = "strict")]
impl Strict {
    /// Looks something up.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    pub async fn lookup(
        &self,
        input: Lookup,
        cancel: Cancellation,
    ) -> ::core::result::Result<Found, ConnectorFailure> {
        let _ = cancel.is_cancelled();
        ::core::result::Result::Ok(Found {
            hits: input.query.len() as u32,
        })
    }

    /// Writes something, forwarding the key.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal)
    )]
    pub async fn store(
        &self,
        input: Lookup,
        key: IdempotencyKey,
    ) -> ::core::result::Result<Found, ConnectorFailure> {
        ::core::result::Result::Ok(Found {
            hits: (input.query.len() + key.as_str().len()) as u32,
        })
    }
}

/// A free capability compiled under `deny(warnings)`.
#[capability(id = "cap:strict:ping", risk = low, side_effects = [read], data(sensitivity = public))]
pub async fn ping(input: Lookup) -> ::core::result::Result<Found, ConnectorFailure> {
    ::core::result::Result::Ok(Found {
        hits: input.query.len() as u32,
    })
}

/// The state of a strict connector of free capabilities.
#[derive(Clone)]
pub struct Counter {
    /// A starting count.
    pub start: u32,
}

/// A free capability with state and a companion, compiled under `deny(warnings)`.
#[capability(
    id = "cap:strict:count",
    risk = low,
    side_effects = [read],
    data(sensitivity = public),
    cancel = stop_count
)]
pub async fn count(
    input: Lookup,
    State(counter): State<Counter>,
) -> ::core::result::Result<Found, ConnectorFailure> {
    ::core::result::Result::Ok(Found {
        hits: counter.start + input.query.len() as u32,
    })
}

/// Stops a count.
#[allow(clippy::unused_async)] // a free companion is not re-emitted by the macro
pub async fn stop_count(
    State(counter): State<Counter>,
    request: CancelRequest,
) -> ::core::result::Result<(), ConnectorFailure> {
    let _ = (counter.start, request.action_id);
    ::core::result::Result::Ok(())
}

/// Generated code calls no trait method through the prelude: a connector (with a display name,
/// profiles and channels) and a free capability in a module without it.
pub mod no_prelude {
    #![no_implicit_prelude]

    use super::{Found, Lookup};
    use ::aip_connector::prelude::{ConnectorFailure, capability, connector};

    /// A connector without the implicit prelude.
    pub struct Bare;

    #[connector(
        id = "bare",
        name = "Bare",
        profiles = [native_http, mcp],
        channels = [r#"{"id": "inbox", "kind": "email"}"#]
    )]
    impl Bare {
        /// Looks something up.
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        pub async fn lookup(
            &self,
            input: Lookup,
        ) -> ::core::result::Result<Found, ConnectorFailure> {
            ::core::result::Result::Ok(Found {
                hits: input.query.len() as u32,
            })
        }
    }

    /// A free capability without the implicit prelude.
    #[capability(id = "cap:bare:ping", risk = low, side_effects = [read], data(sensitivity = public))]
    pub async fn bare_ping(input: Lookup) -> ::core::result::Result<Found, ConnectorFailure> {
        ::core::result::Result::Ok(Found {
            hits: input.query.len() as u32,
        })
    }
}

/// Generated code is clean under restriction lints a crate may deny (found by a hostile probe:
/// `exhaustive_structs` fired on a free capability's descriptor type, and
/// `arbitrary_source_item_ordering` on the id constants and codecs generated for two handlers,
/// which follow the handlers' order): the workspace's `cargo clippy -- -D warnings` checks this
/// module. Its own items are ordered and documented as the lints ask.
pub mod restriction {
    #![deny(
        clippy::arbitrary_source_item_ordering,
        clippy::exhaustive_structs,
        clippy::missing_docs_in_private_items,
        clippy::pub_underscore_fields,
        clippy::allow_attributes_without_reason,
        clippy::allow_attributes,
        missing_docs
    )]

    use super::{Found, Lookup};
    use aip_connector::prelude::{ConnectorFailure, capability, connector};

    /// A connector of a crate that denies restriction lints.
    #[non_exhaustive]
    pub struct Restricted;

    #[connector(id = "restricted")]
    impl Restricted {
        /// Counts something (its codecs, `__aip_input_count` and `__aip_output_count`, come
        /// before `lookup`'s: out of the alphabet's order).
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        pub async fn count(&self, input: Lookup) -> Result<Found, ConnectorFailure> {
            Ok(Found {
                hits: u32::try_from(input.query.len()).unwrap_or_default(),
            })
        }

        /// Looks something up.
        #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
        pub async fn lookup(&self, input: Lookup) -> Result<Found, ConnectorFailure> {
            Ok(Found {
                hits: u32::try_from(input.query.len()).unwrap_or_default(),
            })
        }
    }

    /// A free capability of a crate that denies restriction lints.
    #[capability(id = "cap:restricted:ping", risk = low, side_effects = [read], data(sensitivity = public))]
    pub async fn ping(input: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found {
            hits: u32::try_from(input.query.len()).unwrap_or_default(),
        })
    }
}

#[test]
fn a_connector_without_the_implicit_prelude_describes_itself() {
    use aip_connector::Connector as _;
    let definition = no_prelude::Bare.definition();
    assert_eq!(definition.id, "bare");
    assert_eq!(definition.profiles.len(), 2);
    assert_eq!(definition.channels.len(), 1);
    assert_eq!(
        definition.capabilities[0].capability.id.as_str(),
        "cap:bare:lookup"
    );
    let free = <no_prelude::bare_ping as aip_connector::FreeCapability>::definition();
    assert_eq!(free.capability.id.as_str(), "cap:bare:ping");
}

#[test]
fn strict_connector_compiles_and_describes_itself() {
    use aip_connector::Connector as _;
    let definition = Strict.definition();
    assert_eq!(definition.capabilities.len(), 2);
    assert_eq!(
        definition.capabilities[0].capability.id.as_str(),
        "cap:strict:lookup"
    );
    assert_eq!(
        definition.capabilities[1].capability.id.as_str(),
        "cap:strict:store"
    );
    let free = <ping as aip_connector::FreeCapability>::definition();
    assert_eq!(free.capability.id.as_str(), "cap:strict:ping");
    let stateful = <count as aip_connector::FreeCapability<Counter>>::definition();
    assert!(stateful.facts.support.cancellation);
}
