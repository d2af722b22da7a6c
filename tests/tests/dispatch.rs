//! Dispatch by capability id through the generated `Connector` impl: decoding, extractors,
//! encoding, failures, and the companion handlers (validate, reconcile, cancel).

use std::sync::Arc;

use aip_connector::model::{Action, ProviderOperationRef, StreamChunkKind};
use aip_connector::prelude::*;
use aip_connector::{
    CallerIdentity, CancelRequest, ConnectorBuilder, FreeCapability, InvocationContext,
    StaticInvocation,
};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct CreateBooking {
    starts_at: String,
}

#[derive(Serialize, JsonSchema)]
struct Booking {
    booking_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Preview {
    would_book: String,
}

struct Calendar;

#[connector(id = "calendar")]
impl Calendar {
    /// Create a booking.
    #[capability(
        id = "cap:calendar:booking:create",
        risk = medium,
        side_effects = [write, external_network],
        idempotency(required, scope = tenant),
        data(sensitivity = internal, pii),
        transaction(modes = [execute, dry_run, plan, commit, reconcile], fidelity = downstream_validation),
        reconcile = Self::find_booking,
        validate = Self::check_booking,
        cancel = Self::abort_booking,
        examples = [r#"{"starts_at": "2026-12-01T09:00:00Z"}"#],
        tags = ["calendar"],
    )]
    async fn create_booking(
        &self,
        input: CreateBooking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booking, ConnectorFailure> {
        checkpoint
            .record(
                ProviderOperationRef {
                    provider: "cal".into(),
                    // Outside a host nothing scopes the key: `scoped()` is the caller's key.
                    operation_id: format!("op-{}", key.scoped()),
                    request_id: None,
                },
                Some("c1".into()),
            )
            .await?;
        Ok(Booking {
            booking_id: format!("bk-{}", input.starts_at),
        })
    }

    async fn check_booking(&self, input: CreateBooking) -> Result<Preview, ConnectorFailure> {
        Ok(Preview {
            would_book: input.starts_at,
        })
    }

    async fn find_booking(
        &self,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        Ok(ReconcileOutcome::Committed {
            evidence: Some(json!({ "operation": request.provider_operation.operation_id })),
        })
    }

    async fn abort_booking(&self, _request: CancelRequest) -> Result<(), ConnectorFailure> {
        Ok(())
    }

    /// Streams search hits.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn search(
        &self,
        input: CreateBooking,
        sink: StreamSink<Booking>,
        cancel: Cancellation,
    ) -> Result<Booking, ConnectorFailure> {
        for n in 0..3 {
            if cancel.is_cancelled() {
                break;
            }
            sink.send(Booking {
                booking_id: format!("{}-{n}", input.starts_at),
            })
            .await?;
        }
        Ok(Booking {
            booking_id: "done".into(),
        })
    }
}

fn caller() -> CallerIdentity {
    CallerIdentity::new("user:ada", "test")
}

fn invocation(capability: &str, input: serde_json::Value) -> StaticInvocation {
    StaticInvocation::new(
        Action::new(capability, input).with_idempotency_key("k-1"),
        caller(),
    )
}

#[tokio::test]
async fn invoke_decodes_extracts_calls_and_encodes() {
    let context = Arc::new(invocation("cap:calendar:booking:create", json!({})).with_checkpoint());
    let dyn_context: Arc<dyn InvocationContext> = context.clone();
    let output = Calendar
        .invoke(
            "cap:calendar:booking:create",
            &json!({ "starts_at": "9am" }),
            dyn_context,
        )
        .await
        .unwrap();
    assert_eq!(output, json!({ "booking_id": "bk-9am" }));
    let (operation, cursor) = context.checkpointed().unwrap();
    assert_eq!(operation.operation_id, "op-k-1");
    assert_eq!(cursor.as_deref(), Some("c1"));
}

/// Scoped like the contract (`scope = tenant`), the static context hands the handler the key a
/// host would: `Tenant:<tenant>:<key>`, so the provider sees the same key in a unit test as in
/// production.
#[tokio::test]
async fn a_static_invocation_scopes_the_key_as_the_host_does() {
    use aip_connector::VerifiedTenant;
    use aip_connector::model::IdempotencyKeyScope;

    let context = Arc::new(
        invocation("cap:calendar:booking:create", json!({}))
            .with_checkpoint()
            .with_tenant(VerifiedTenant::new("acme"))
            .with_idempotency_scope(IdempotencyKeyScope::Tenant),
    );
    assert_eq!(
        context.scoped_idempotency_key().as_deref(),
        Some("Tenant:acme:k-1")
    );
    let dyn_context: Arc<dyn InvocationContext> = context.clone();
    Calendar
        .invoke(
            "cap:calendar:booking:create",
            &json!({ "starts_at": "9am" }),
            dyn_context,
        )
        .await
        .unwrap();
    let (operation, _) = context.checkpointed().unwrap();
    assert_eq!(operation.operation_id, "op-Tenant:acme:k-1");

    // The account scope takes the deployment's account as its partition.
    let account = invocation("cap:calendar:booking:create", json!({}))
        .with_external_account(aip_connector::model::ExternalAccountRef {
            id: "acct_1".into(),
            system: "cal".into(),
        })
        .with_idempotency_scope(IdempotencyKeyScope::ExternalAccount);
    assert_eq!(
        account.scoped_idempotency_key().as_deref(),
        Some("ExternalAccount:cal:acct_1:k-1")
    );
    // The handler reads the tenant and the account from the action, where a host writes them.
    let identity = account.action().identity.as_deref().expect("an identity");
    assert_eq!(
        identity.external_account.as_ref().map(|a| a.id.as_str()),
        Some("acct_1")
    );
    let identity = context.action().identity.as_deref().expect("an identity");
    assert_eq!(
        identity.tenant.as_ref().map(|t| t.id.as_str()),
        Some("acme")
    );
}

/// A scope whose partition is missing is a mistake in the test's setup, said at once (a host
/// refuses such an action with `idempotency.scope_missing` before its handler runs).
#[test]
#[should_panic(expected = "tenant-scoped idempotency requires a verified tenant")]
fn a_static_invocation_scoped_by_a_missing_tenant_panics() {
    use aip_connector::model::IdempotencyKeyScope;

    let context = invocation("cap:calendar:booking:create", json!({}))
        .with_idempotency_scope(IdempotencyKeyScope::Tenant);
    let _ = context.scoped_idempotency_key();
}

#[tokio::test]
async fn invalid_input_is_a_typed_permanent_failure_naming_the_field() {
    let context: Arc<dyn InvocationContext> =
        Arc::new(invocation("cap:calendar:booking:create", json!({})).with_checkpoint());
    let failure = Calendar
        .invoke(
            "cap:calendar:booking:create",
            &json!({ "starts_at": 5 }),
            context,
        )
        .await
        .unwrap_err();
    assert_eq!(failure.code, "action.invalid_input");
    assert!(!failure.retryable);
    assert!(
        failure.message.contains("/starts_at"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn missing_extractor_material_and_unknown_capabilities_fail_cleanly() {
    // No checkpoint in the context: the extractor reports it instead of the handler running.
    let context: Arc<dyn InvocationContext> =
        Arc::new(invocation("cap:calendar:booking:create", json!({})));
    let failure = Calendar
        .invoke(
            "cap:calendar:booking:create",
            &json!({ "starts_at": "9am" }),
            context.clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(failure.code, "transaction.context_missing");
    let failure = Calendar
        .invoke("cap:calendar:nope", &json!({}), context)
        .await
        .unwrap_err();
    assert_eq!(failure.code, "capability.not_found");
}

#[tokio::test]
async fn streaming_handler_emits_chunks_in_order() {
    let context = Arc::new(invocation("cap:calendar:search", json!({})).with_stream());
    let dyn_context: Arc<dyn InvocationContext> = context.clone();
    let output = Calendar
        .invoke(
            "cap:calendar:search",
            &json!({ "starts_at": "x" }),
            dyn_context,
        )
        .await
        .unwrap();
    assert_eq!(output, json!({ "booking_id": "done" }));
    let chunks = context.streamed();
    assert_eq!(chunks.len(), 3);
    assert!(
        chunks
            .iter()
            .all(|(kind, _)| *kind == StreamChunkKind::Data)
    );
    assert_eq!(chunks[2].1, json!({ "booking_id": "x-2" }));
}

#[tokio::test]
async fn companion_handlers_are_dispatched_by_capability_id() {
    let context: Arc<dyn InvocationContext> =
        Arc::new(invocation("cap:calendar:booking:create", json!({})));
    let preview = Calendar
        .validate(
            "cap:calendar:booking:create",
            &json!({ "starts_at": "9am" }),
            context.clone(),
        )
        .await
        .unwrap();
    assert_eq!(preview, json!({ "would_book": "9am" }));
    let outcome = Calendar
        .reconcile(
            "cap:calendar:booking:create",
            Reconciliation::new(
                aip_connector::ids::TransactionId::new(),
                ProviderOperationRef {
                    provider: "cal".into(),
                    operation_id: "op-1".into(),
                    request_id: None,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ReconcileOutcome::Committed {
            evidence: Some(json!({ "operation": "op-1" }))
        }
    );
    Calendar
        .cancel(
            "cap:calendar:booking:create",
            CancelRequest::new(aip_connector::ids::ActionId::new()),
        )
        .await
        .unwrap();
    // A capability without companions answers "unsupported" for them.
    let failure = Calendar
        .validate("cap:calendar:search", &json!({}), context)
        .await
        .unwrap_err();
    assert_eq!(failure.code, "connector.operation_unsupported");
}

#[test]
fn companions_and_metadata_are_reflected_in_the_definition() {
    let definition = Calendar.definition();
    let create = definition
        .capability("cap:calendar:booking:create")
        .unwrap();
    assert!(create.facts.support.reconciliation);
    assert!(
        create.facts.support.cancellation,
        "a cancel companion proves cancellation"
    );
    assert!(create.facts.support.transaction);
    assert!(create.facts.validation_handler);
    assert_eq!(
        create.examples,
        vec![json!({ "starts_at": "2026-12-01T09:00:00Z" })]
    );
    assert_eq!(create.tags, vec!["calendar".to_owned()]);
    let manifest = definition.manifest();
    let extension = &manifest.extensions.as_ref().unwrap()["aip_connector"]["capabilities"]["cap:calendar:booking:create"];
    assert_eq!(extension["tags"], json!(["calendar"]));
}

/// Every capability of a `#[connector]` has a `<METHOD>_ID` constant holding its id, declared
/// or defaulted (`cap:<connector>:<method>`), so a test names it through the compiler.
#[test]
fn each_method_capability_has_an_id_constant() {
    assert_eq!(Calendar::CREATE_BOOKING_ID, "cap:calendar:booking:create");
    assert_eq!(Calendar::SEARCH_ID, "cap:calendar:search");
    let declared: Vec<&str> = Calendar
        .definition()
        .capabilities
        .iter()
        .map(|c| c.capability.id.as_str())
        .collect();
    assert_eq!(declared, [Calendar::CREATE_BOOKING_ID, Calendar::SEARCH_ID]);
}

/// A free capability's constant is `ID` on its same-named type.
#[test]
fn a_free_capability_has_an_id_constant() {
    assert_eq!(echo::ID, "cap:tools:echo");
    assert_eq!(
        <echo as FreeCapability<()>>::definition()
            .capability
            .id
            .as_str(),
        echo::ID
    );
}

/// A free capability, assembled with the builder.
#[capability(id = "cap:tools:echo", risk = low, side_effects = [read], data(sensitivity = public))]
async fn echo(input: CreateBooking) -> Result<Booking, ConnectorFailure> {
    Ok(Booking {
        booking_id: input.starts_at,
    })
}

#[tokio::test]
async fn free_capabilities_assemble_with_the_builder() {
    let connector = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .build()
        .unwrap();
    assert_eq!(
        connector.definition().capabilities[0].capability.name,
        "Echo"
    );
    let context: Arc<dyn InvocationContext> = Arc::new(invocation("cap:tools:echo", json!({})));
    let output = connector
        .invoke("cap:tools:echo", &json!({ "starts_at": "now" }), context)
        .await
        .unwrap();
    assert_eq!(output, json!({ "booking_id": "now" }));
    let duplicate = ConnectorBuilder::new("tools")
        .capability::<echo>()
        .capability::<echo>()
        .build();
    assert!(matches!(
        duplicate,
        Err(aip_connector::BuildError::DuplicateCapability(_))
    ));
}

/// Alternatives of one capability id under different `#[cfg]`s: the one compiled in answers.
struct Versioned;

#[connector(id = "versioned")]
impl Versioned {
    #[cfg(not(test))]
    #[capability(id = "cap:versioned:echo", risk = low, side_effects = [read], data(sensitivity = public))]
    async fn echo_release(&self) -> Result<String, ConnectorFailure> {
        Ok("release".into())
    }

    #[cfg(test)]
    #[capability(id = "cap:versioned:echo", risk = low, side_effects = [read], data(sensitivity = public))]
    async fn echo_test(&self) -> Result<String, ConnectorFailure> {
        Ok("test".into())
    }
}

#[tokio::test]
async fn the_cfg_alternative_compiled_in_is_the_capability() {
    assert_eq!(Versioned.definition().capabilities.len(), 1);
    // Each alternative's constant is under its own `#[cfg]`: the compiled-in one's exists
    // (tests/pass/id-constants-under-cfg-alternatives.rs shows the other one's does not).
    assert_eq!(Versioned::ECHO_TEST_ID, "cap:versioned:echo");
    let context: Arc<dyn InvocationContext> = Arc::new(StaticInvocation::new(
        Action::new("cap:versioned:echo", json!({})),
        caller(),
    ));
    let output = Versioned
        .invoke("cap:versioned:echo", &json!({}), context)
        .await
        .unwrap();
    assert_eq!(output, json!("test"));
}

/// `StaticInvocation`'s checkpoint behaves as the host's: recording the same operation again
/// without a cursor keeps the cursor; another operation is refused.
#[tokio::test]
async fn a_static_checkpoint_keeps_the_cursor_and_refuses_another_operation() {
    let context = invocation("cap:calendar:booking:create", json!({})).with_checkpoint();
    let checkpoint = context.checkpoint().expect("a checkpoint was asked for");
    let operation = ProviderOperationRef {
        provider: "cal".into(),
        operation_id: "op-1".into(),
        request_id: None,
    };
    checkpoint
        .record(operation.clone(), Some("c1".into()))
        .await
        .unwrap();
    checkpoint.record(operation.clone(), None).await.unwrap();
    assert_eq!(
        context.checkpointed(),
        Some((operation.clone(), Some("c1".to_owned())))
    );
    let other = ProviderOperationRef {
        operation_id: "op-2".into(),
        ..operation
    };
    assert_eq!(
        checkpoint.record(other, None).await.unwrap_err().code,
        aip_connector::codes::TRANSACTION_CHECKPOINT_CONFLICT
    );
}

/// A connector whose every capability is configured out in this build: the macro cannot see
/// it (`cfg` is evaluated after it), so the host refuses it when it is built (upstream would
/// admit a manifest without capability, on which a peer could call nothing).
struct Configured;

#[connector(id = "configured")]
impl Configured {
    #[cfg(not(test))]
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn only_in_release(&self) -> Result<String, ConnectorFailure> {
        Ok("release".into())
    }
}

#[test]
fn a_connector_whose_capabilities_are_all_configured_out_is_refused_by_the_host() {
    assert!(Configured.definition().capabilities.is_empty());
    let refused = aip_connector::host::Host::builder()
        .connector(Configured)
        .build()
        .expect_err("a connector without capability is refused");
    assert!(
        matches!(
            &refused,
            aip_connector::host::HostBuildError::NoCapability { connector } if connector == "configured"
        ),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("has no capability"),
        "{refused}"
    );
}
