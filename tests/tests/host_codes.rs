//! One behaviour test per host error code of the pipeline, idempotency, storage, streaming and
//! transaction stages: each triggers the code through the public API and checks the category,
//! the retryable flag and, where the host sets it, `retry_after_ms` (`docs/host-runtime.md` §3).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::{
    ApproverMemberships, CancelOutcome, Deployment, Host, HostBuildError, HostLimits,
    StaticApprovalAuthority, TrustedContext,
};
use aip_connector::ids::{ActionId, ApprovalId};
use aip_connector::invocation::BoxFuture;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ActionTransaction, ApprovalDecision,
    ExternalAccountRef, Principal, PrincipalKind, ProtocolError, StreamChunkKind, TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::store::{ApprovalStatus, MemoryStore, StoreError};
use aip_connector::{ConnectorDefinition, InvocationContext, VerifiedTenant};
use aip_connector_tests::hooked_store::HookedStore;
use serde_json::{Value, json};
use tokio::sync::Notify;

#[derive(Deserialize, JsonSchema)]
struct Ticket {
    seat: String,
}

#[derive(Serialize, JsonSchema)]
struct Booked {
    booking_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Seat {
    n: u32,
}

/// A connector whose write requires a key scoped to the deployment's external account.
#[derive(Clone, Default)]
struct AccountDesk;

#[connector(id = "desk")]
impl AccountDesk {
    /// Books a seat once per key and external account.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = external_account),
        data(sensitivity = internal),
    )]
    async fn book_for_account(
        &self,
        ticket: Ticket,
        key: IdempotencyKey,
    ) -> Result<Booked, ConnectorFailure> {
        Ok(Booked {
            booking_id: format!("{}@{}", ticket.seat, key.scoped()),
        })
    }
}

/// A connector whose read takes an optional key scoped to the external account.
#[derive(Clone, Default)]
struct AccountLookup {
    executions: Arc<AtomicUsize>,
}

#[connector(id = "lookup")]
impl AccountLookup {
    /// Looks a seat up; a keyed lookup is answered once per key and external account.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(scope = external_account),
        data(sensitivity = public),
    )]
    async fn seat(&self, ticket: Ticket) -> Result<Booked, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Booked {
            booking_id: ticket.seat,
        })
    }
}

/// A string that panics when it decodes `"boom"`: a bug in an input type's `Deserialize`.
#[derive(JsonSchema)]
struct Trap(#[allow(dead_code, reason = "decoded, never read")] String);

impl<'de> Deserialize<'de> for Trap {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        assert_ne!(text, "boom", "the input type's decoding has a bug");
        Ok(Trap(text))
    }
}

#[derive(Deserialize, JsonSchema)]
struct Probe {
    #[allow(dead_code, reason = "decoded, never read")]
    value: Trap,
}

/// A connector whose previews run a validation handler.
struct Lab;

#[connector(id = "lab")]
impl Lab {
    /// Previews through a validation handler, then commits a plan.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [dry_run, plan, commit], fidelity = downstream_validation),
        validate = Self::check,
    )]
    async fn change(
        &self,
        _probe: Probe,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        Ok(Booked {
            booking_id: "changed".into(),
        })
    }

    async fn check(&self, _probe: Probe) -> Result<Booked, ConnectorFailure> {
        Ok(Booked {
            booking_id: "would change".into(),
        })
    }
}

/// Holds a handler in flight: it says it started, then waits until the test releases it.
#[derive(Clone, Default)]
struct Gate {
    started: Arc<Notify>,
    release: Arc<Notify>,
}

/// The connector most tests drive; counts executions so "did not run" can be asserted.
#[derive(Clone, Default)]
struct Theatre {
    gate: Gate,
    executions: Arc<AtomicUsize>,
}

impl Theatre {
    fn booked(&self, seat: String) -> Result<Booked, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Booked { booking_id: seat })
    }
}

#[connector(id = "theatre")]
impl Theatre {
    /// Books a seat once per key and principal; another action reusing the key is refused.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, collision = reject_conflict, scope = principal),
        data(sensitivity = internal),
    )]
    async fn book(&self, ticket: Ticket, key: IdempotencyKey) -> Result<Booked, ConnectorFailure> {
        self.booked(format!("{}-{}", ticket.seat, key.as_str()))
    }

    /// Books a seat once per key and tenant.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn book_for_tenant(
        &self,
        ticket: Ticket,
        key: IdempotencyKey,
    ) -> Result<Booked, ConnectorFailure> {
        // The key a provider would get (`ProviderRequest::idempotency` sends `scoped()`).
        self.booked(format!("{}@{}", ticket.seat, key.scoped()))
    }

    /// Books a seat once per key and principal, once the test releases it.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn book_when_released(
        &self,
        ticket: Ticket,
        key: IdempotencyKey,
    ) -> Result<Booked, ConnectorFailure> {
        self.gate.started.notify_one();
        self.gate.release.notified().await;
        self.booked(format!("{}-{}", ticket.seat, key.as_str()))
    }

    /// Writes without taking the key, so it cannot forward it: not retried once interrupted.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn hold_without_key(&self, ticket: Ticket) -> Result<Booked, ConnectorFailure> {
        self.gate.started.notify_one();
        self.gate.release.notified().await;
        self.booked(ticket.seat)
    }

    /// Panics (a handler bug).
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn crash(&self, ticket: Ticket) -> Result<Booked, ConnectorFailure> {
        tokio::task::yield_now().await;
        panic!("the handler of {} has a bug", ticket.seat);
    }

    /// Panics after streaming one seat.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn crash_streaming(
        &self,
        ticket: Ticket,
        sink: StreamSink<Seat>,
    ) -> Result<Booked, ConnectorFailure> {
        sink.send(Seat { n: 1 }).await?;
        panic!("the handler of {} has a bug", ticket.seat);
    }

    /// Looks a seat up.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn lookup(&self, ticket: Ticket) -> Result<Booked, ConnectorFailure> {
        self.booked(ticket.seat)
    }

    /// Waits until the test releases it.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn hold(&self, ticket: Ticket) -> Result<Booked, ConnectorFailure> {
        self.gate.started.notify_one();
        self.gate.release.notified().await;
        self.booked(ticket.seat)
    }

    /// Streams seats until the stream refuses one, and fails with that refusal.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn seats(
        &self,
        _ticket: Ticket,
        sink: StreamSink<Seat>,
    ) -> Result<Booked, ConnectorFailure> {
        for n in 0..1_000 {
            sink.send(Seat { n }).await?;
        }
        self.booked("every seat".into())
    }

    /// Refunds a ticket after one box-office approval.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(required, selector = role("box_office"), evidence = [reason], ttl_ms = 600_000),
    )]
    async fn refund(
        &self,
        ticket: Ticket,
        key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Booked, ConnectorFailure> {
        self.booked(format!("refund-{}-{}", ticket.seat, key.as_str()))
    }
}

#[derive(Deserialize, JsonSchema)]
struct Entry {
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Posted {
    entry_id: String,
}

/// A transactional capability: plans, dry runs and commits are declared.
struct Ledger;

#[connector(id = "ledger")]
impl Ledger {
    /// Posts an entry; commits only a plan.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, dry_run, plan, commit], requires_plan),
    )]
    async fn post(
        &self,
        entry: Entry,
        key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<Posted, ConnectorFailure> {
        Ok(Posted {
            entry_id: format!("{}-{}", entry.amount_cents, key.as_str()),
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(connector: impl Connector) -> Host {
    Host::builder()
        .connector(connector)
        .store(Arc::new(MemoryStore::default()))
        .build()
        .expect("host builds")
}

/// The error of a failed result.
fn failure(result: &ActionResult) -> &ProtocolError {
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    result.error.as_ref().expect("a failed result has an error")
}

/// Asserts code, category, retryability and `retry_after_ms` of `error`.
fn assert_error(
    error: &ProtocolError,
    code: &str,
    category: ErrorCategory,
    retryable: bool,
    retry_after_ms: Option<u64>,
) {
    assert_eq!(error.code, code, "{error:?}");
    assert_eq!(error.category, category, "{error:?}");
    assert_eq!(error.retryable, Some(retryable), "{error:?}");
    assert_eq!(error.retry_after_ms, retry_after_ms, "{error:?}");
}

/// A connector behind a hand-edited definition.
struct Redefined<C> {
    inner: C,
    definition: ConnectorDefinition,
}

impl<C: Connector> Connector for Redefined<C> {
    fn definition(&self) -> &ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        capability_id: &'a str,
        input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        self.inner.invoke(capability_id, input, context)
    }
}

// ---- host.overloaded --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beyond_the_concurrency_limit_is_overloaded() {
    let theatre = Theatre::default();
    let host = Host::builder()
        .connector(theatre.clone())
        .limits(HostLimits::default().max_concurrent_actions(1))
        .build()
        .unwrap();
    let started = theatre.gate.started.notified();
    let in_flight = tokio::spawn({
        let host = host.clone();
        async move {
            host.invoke(
                Action::new("cap:theatre:hold", json!({ "seat": "a1" })),
                &caller(),
            )
            .await
        }
    });
    started.await;

    let refused = host
        .invoke(
            Action::new("cap:theatre:lookup", json!({ "seat": "b2" })),
            &caller(),
        )
        .await;
    assert_error(
        failure(&refused),
        codes::HOST_OVERLOADED,
        ErrorCategory::Temporary,
        true,
        Some(100),
    );

    theatre.gate.release.notify_one();
    assert_eq!(
        in_flight.await.unwrap().status,
        ActionResultStatus::Completed
    );
    // The permit is back: the refused call succeeds when retried.
    let retried = host
        .invoke(
            Action::new("cap:theatre:lookup", json!({ "seat": "b2" })),
            &caller(),
        )
        .await;
    assert_eq!(retried.status, ActionResultStatus::Completed);
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 2);
}

/// Under a key scope that is not partitioned by tenant, the same principal id in two tenants
/// reaches one scoped key: the second tenant must not be handed the first one's stored result.
#[tokio::test]
async fn a_record_of_another_tenant_is_never_replayed() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let ada_in = |tenant: &str| {
        TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
            .with_tenant(VerifiedTenant::new(tenant))
    };
    let action =
        || Action::new("cap:theatre:book", json!({ "seat": "a1" })).with_idempotency_key("k1");
    let first = action();
    let first_id = first.id.clone();
    let booked = host.invoke(first, &ada_in("t1")).await;
    assert_eq!(booked.status, ActionResultStatus::Completed, "{booked:?}");
    let elsewhere = host.invoke(action(), &ada_in("t2")).await;
    let error = failure(&elsewhere);
    assert_error(
        error,
        codes::IDEMPOTENCY_CONFLICT,
        ErrorCategory::Permanent,
        false,
        None,
    );
    assert_eq!(error.details, None, "names nothing of the original");
    assert!(elsewhere.output.is_none());
    assert!(!format!("{elsewhere:?}").contains(first_id.as_str()));
    // Its own tenant's resend of the same action still replays.
    let mut resend = action();
    resend.id = first_id;
    let replayed = host.invoke(resend, &ada_in("t1")).await;
    assert_eq!(replayed.output.unwrap()["idempotent_replay"], true);
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
}

/// A key held by another tenant's running action (the same principal id in two tenants, under
/// a principal scope) is in use for the second tenant too, but its answer does not name the
/// other tenant's action; its own tenant's duplicate is told which action holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_another_tenant_is_in_progress_without_naming_its_action() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let ada_in = |tenant: &str| {
        TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
            .with_tenant(VerifiedTenant::new(tenant))
    };
    let action = || {
        Action::new("cap:theatre:book_when_released", json!({ "seat": "a1" }))
            .with_idempotency_key("k1")
    };
    let first = action();
    let first_id = first.id.clone();
    let started = theatre.gate.started.notified();
    let running = tokio::spawn({
        let host = host.clone();
        let caller = ada_in("t1");
        async move { host.invoke(first, &caller).await }
    });
    started.await;

    let elsewhere = host.invoke(action(), &ada_in("t2")).await;
    let error = failure(&elsewhere);
    assert_eq!(error.code, codes::IDEMPOTENCY_IN_PROGRESS, "{error:?}");
    let details = error.details.as_ref().expect("the reservation's expiry");
    assert!(
        details.get("reservation_expires_at_ms").is_some(),
        "{details}"
    );
    assert_eq!(details.get("owner_action_id"), None, "{details}");
    assert!(!format!("{elsewhere:?}").contains(first_id.as_str()));

    let same_tenant = host.invoke(action(), &ada_in("t1")).await;
    let error = failure(&same_tenant);
    assert_eq!(error.code, codes::IDEMPOTENCY_IN_PROGRESS, "{error:?}");
    assert_eq!(
        error.details.as_ref().unwrap()["owner_action_id"],
        json!(first_id)
    );

    theatre.gate.release.notify_one();
    assert_eq!(running.await.unwrap().status, ActionResultStatus::Completed);
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
}

// ---- connector.runtime_failure ---------------------------------------------------------------

/// A handler that panics ends its action like any outcome: a failed result (the outcome is
/// unknown, so not retryable), a terminal chunk for a stream, and the caller's task goes on.
#[tokio::test]
async fn a_panicking_handler_is_a_runtime_failure_and_its_stream_ends() {
    let host = host(Theatre::default());
    let expect_panic = |result: &ActionResult| {
        assert_error(
            failure(result),
            codes::CONNECTOR_RUNTIME_FAILURE,
            ErrorCategory::Connector,
            false,
            None,
        );
        assert_eq!(
            failure(result).details,
            Some(json!({ "uncertain_outcome": true }))
        );
        assert!(
            !format!("{result:?}").contains("has a bug"),
            "no panic text"
        );
    };
    let invoked = host
        .invoke(
            Action::new("cap:theatre:crash", json!({ "seat": "p1" })),
            &caller(),
        )
        .await;
    expect_panic(&invoked);
    // The host carries on.
    let next = host
        .invoke(
            Action::new("cap:theatre:lookup", json!({ "seat": "p1" })),
            &caller(),
        )
        .await;
    assert_eq!(next.status, ActionResultStatus::Completed);

    let chunks = host
        .invoke_stream(
            Action::new("cap:theatre:crash_streaming", json!({ "seat": "p2" })),
            caller(),
        )
        .collect()
        .await;
    let kinds: Vec<_> = chunks.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [StreamChunkKind::Data, StreamChunkKind::Error]);
    let result: ActionResult =
        serde_json::from_value(chunks[1].data.clone().expect("terminal data")).unwrap();
    expect_panic(&result);
}

/// A validation handler that panics while its input is decoded (generated code decodes it
/// before returning the handler's future) is a runtime failure too, and the key is settled:
/// a resend replays it instead of finding the key held until its lease ends.
#[tokio::test]
async fn a_validation_handler_that_panics_while_starting_settles_its_key() {
    let host = host(Lab);
    let preview = || {
        Action::new("cap:lab:change", json!({ "value": "boom" }))
            .with_idempotency_key("k1")
            .with_transaction(ActionTransaction::new(TransactionMode::DryRun))
    };
    let first = host.invoke(preview(), &caller()).await;
    assert_eq!(failure(&first).code, codes::CONNECTOR_RUNTIME_FAILURE);
    let again = host.invoke(preview(), &caller()).await;
    assert_eq!(failure(&again).code, codes::CONNECTOR_RUNTIME_FAILURE);
    assert_eq!(again.output.unwrap()["idempotent_replay"], true);
}

// ---- action.abandoned --------------------------------------------------------------------------

/// The transport giving up on an executing action (`abandon_as`) cancels its handler like a
/// cancel, but the result is the retryable `action.abandoned` and the key is released: the
/// retry with the same key runs the action again. A cancel asked for wins over an abandonment
/// (its `cancelled` is stored and replayed), and an action that is not executing is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_action_releases_its_key_for_the_retry() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let action = || {
        Action::new("cap:theatre:book_when_released", json!({ "seat": "a1" }))
            .with_idempotency_key("k1")
    };
    let first = action();
    let first_id = first.id.clone();
    assert_eq!(
        host.abandon_as(&first_id, &caller()),
        CancelOutcome::NotActive,
        "not executing: nothing is remembered"
    );
    let started = theatre.gate.started.notified();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(first, &caller()).await }
    });
    started.await;
    // Another caller cannot abandon it.
    let stranger = TrustedContext::new(Principal::new("user:eve", PrincipalKind::Human), "test");
    assert_eq!(
        host.abandon_as(&first_id, &stranger),
        CancelOutcome::NotActive
    );
    // The handler registers for cancellation when its first poll leaves it waiting, just
    // after it said it started: an abandonment before that finds nothing executing.
    while host.abandon_as(&first_id, &caller()) != CancelOutcome::Cancelled {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let abandoned = running.await.unwrap();
    assert_error(
        failure(&abandoned),
        codes::ACTION_ABANDONED,
        ErrorCategory::Temporary,
        true,
        None,
    );

    // The retry runs (the key was released), and completes once released.
    let started = theatre.gate.started.notified();
    let retry = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action(), &caller()).await }
    });
    started.await;
    theatre.gate.release.notify_one();
    let retried = retry.await.unwrap();
    assert_eq!(retried.status, ActionResultStatus::Completed, "{retried:?}");
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);

    // A cancel asked for wins over an abandonment: its `cancelled` is kept under the key.
    let third = Action::new("cap:theatre:book_when_released", json!({ "seat": "b2" }))
        .with_idempotency_key("k2");
    let third_id = third.id.clone();
    let started = theatre.gate.started.notified();
    let running = tokio::spawn({
        let host = host.clone();
        let third = third.clone();
        async move { host.invoke(third, &caller()).await }
    });
    started.await;
    // Remembered if the handler has not registered yet: it fires when it does.
    assert_ne!(
        host.cancel_as(&third_id, &caller()),
        CancelOutcome::NotActive
    );
    host.abandon_as(&third_id, &caller());
    assert_eq!(running.await.unwrap().status, ActionResultStatus::Cancelled);
    let replayed = host.invoke(third, &caller()).await;
    assert_eq!(replayed.status, ActionResultStatus::Cancelled);
    assert_eq!(replayed.output.unwrap()["idempotent_replay"], true);
}

/// Without retry support (the handler does not take the key, so its provider cannot
/// deduplicate a second run), an abandoned action is not retryable: its failure is stored and
/// replayed, as a timed-out one is, and the handler never runs twice under the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_action_without_retry_support_keeps_its_key() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let action = Action::new("cap:theatre:hold_without_key", json!({ "seat": "c1" }))
        .with_idempotency_key("k1");
    let started = theatre.gate.started.notified();
    let running = tokio::spawn({
        let host = host.clone();
        let action = action.clone();
        async move { host.invoke(action, &caller()).await }
    });
    started.await;
    while host.abandon_as(&action.id, &caller()) != CancelOutcome::Cancelled {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let abandoned = running.await.unwrap();
    assert_error(
        failure(&abandoned),
        codes::ACTION_ABANDONED,
        ErrorCategory::Temporary,
        false,
        None,
    );
    let replayed = host.invoke(action, &caller()).await;
    assert_eq!(failure(&replayed).code, codes::ACTION_ABANDONED);
    assert_eq!(replayed.output.unwrap()["idempotent_replay"], true);
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 0);
}

// ---- idempotency.scope_missing ----------------------------------------------------------------

#[tokio::test]
async fn a_tenant_scoped_key_without_any_tenant_is_scope_missing() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let anonymous = TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test");
    let action = || {
        Action::new("cap:theatre:book_for_tenant", json!({ "seat": "c3" }))
            .with_idempotency_key("k1")
    };
    let refused = host.invoke(action(), &anonymous).await;
    assert_error(
        failure(&refused),
        codes::IDEMPOTENCY_SCOPE_MISSING,
        ErrorCategory::Policy,
        false,
        None,
    );
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 0);

    // The deployment's tenant scopes the key when the caller has none.
    let deployed = Host::builder()
        .connector(theatre.clone())
        .deployment(Deployment::new().with_tenant(VerifiedTenant::new("t1")))
        .build()
        .unwrap();
    let completed = deployed.invoke(action(), &anonymous).await;
    assert_eq!(completed.status, ActionResultStatus::Completed);
    assert_eq!(completed.output.unwrap()["booking_id"], "c3@Tenant:t1:k1");
}

/// Two tenants sending the same key are two operations for the host, and the key the handler
/// forwards to the provider keeps them apart there too.
#[tokio::test]
async fn the_handler_forwards_the_key_as_the_host_scoped_it() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let action = || {
        Action::new("cap:theatre:book_for_tenant", json!({ "seat": "c3" }))
            .with_idempotency_key("invoice-42")
    };
    let in_tenant = |id: &str| {
        TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
            .with_tenant(VerifiedTenant::new(id))
    };
    let acme = host.invoke(action(), &in_tenant("acme")).await;
    let globex = host.invoke(action(), &in_tenant("globex")).await;
    assert_eq!(
        acme.output.unwrap()["booking_id"],
        "c3@Tenant:acme:invoice-42"
    );
    assert_eq!(
        globex.output.unwrap()["booking_id"],
        "c3@Tenant:globex:invoice-42"
    );
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 2);
}

/// A keyed call scoped to the external account on a deployment that acts as none: the key has
/// no partition. (Only an optional key can get here: a capability that requires one is refused
/// when the host is built, see below.)
#[tokio::test]
async fn an_account_scoped_key_without_the_deployments_account_is_scope_missing() {
    let lookup = AccountLookup::default();
    let host = host(lookup.clone());
    let refused = host
        .invoke(
            Action::new("cap:lookup:seat", json!({ "seat": "d4" })).with_idempotency_key("k1"),
            &caller(),
        )
        .await;
    assert_error(
        failure(&refused),
        codes::IDEMPOTENCY_SCOPE_MISSING,
        ErrorCategory::Policy,
        false,
        None,
    );
    assert_eq!(lookup.executions.load(Ordering::SeqCst), 0);
    // Without a key there is nothing to partition.
    let unkeyed = host
        .invoke(
            Action::new("cap:lookup:seat", json!({ "seat": "d4" })),
            &caller(),
        )
        .await;
    assert_eq!(unkeyed.status, ActionResultStatus::Completed, "{unkeyed:?}");
}

/// A capability that requires a key scoped to the external account could never be called on a
/// deployment that acts as no account: the host is not built, and the error says what to set.
#[tokio::test]
async fn a_required_account_scoped_key_without_the_deployments_account_fails_the_build() {
    let error = Host::builder()
        .connector(AccountDesk)
        .build()
        .expect_err("no account to scope the required key by");
    assert!(
        matches!(&error, HostBuildError::ExternalAccountMissing { capability } if capability.as_str() == "cap:desk:book_for_account"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("Deployment::with_external_account"),
        "{error}"
    );

    let deployed = Host::builder()
        .connector(AccountDesk)
        .deployment(
            Deployment::default().with_external_account(ExternalAccountRef {
                id: "acct_9".into(),
                system: "stripe".into(),
            }),
        )
        .build()
        .unwrap();
    let completed = deployed
        .invoke(
            Action::new("cap:desk:book_for_account", json!({ "seat": "d4" }))
                .with_idempotency_key("k1"),
            &caller(),
        )
        .await;
    assert_eq!(completed.status, ActionResultStatus::Completed);
    assert_eq!(
        completed.output.unwrap()["booking_id"],
        "d4@ExternalAccount:stripe:acct_9:k1"
    );
}

// ---- idempotency.conflict ---------------------------------------------------------------------

#[tokio::test]
async fn reject_conflict_replays_an_exact_resend_and_refuses_another_action() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let first = Action::new("cap:theatre:book", json!({ "seat": "e5" })).with_idempotency_key("k");
    let original = host.invoke(first.clone(), &caller()).await;
    assert_eq!(original.status, ActionResultStatus::Completed);

    // Our documented choice (§4.3): the same action id resent is a transport retry, replayed.
    let resend = host.invoke(first.clone(), &caller()).await;
    assert_eq!(resend.status, ActionResultStatus::Completed);
    let output = resend.output.unwrap();
    assert_eq!(output["idempotent_replay"], true);
    assert_eq!(output["booking_id"], original.output.unwrap()["booking_id"]);

    // Another action with the same input and key is a conflict.
    let second = Action::new("cap:theatre:book", json!({ "seat": "e5" })).with_idempotency_key("k");
    let refused = host.invoke(second.clone(), &caller()).await;
    let error = failure(&refused);
    assert_error(
        error,
        codes::IDEMPOTENCY_CONFLICT,
        ErrorCategory::Permanent,
        false,
        None,
    );
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["original_action_id"], json!(first.id));
    assert_eq!(details["action_id"], json!(second.id));
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
}

/// Principal scope partitions keys by caller only, so two capabilities reach one scoped key: the
/// second is refused, never handed the first one's result (upstream replays it, or, under
/// `revalidate_input_hash`, says the input changed).
#[tokio::test]
async fn a_key_settled_by_another_capability_is_a_conflict_not_a_replay() {
    let theatre = Theatre::default();
    let host = host(theatre.clone());
    let first =
        Action::new("cap:theatre:book", json!({ "seat": "f1" })).with_idempotency_key("shared");
    let booked = host.invoke(first.clone(), &caller()).await;
    assert_eq!(booked.status, ActionResultStatus::Completed, "{booked:?}");
    let other = Action::new("cap:theatre:book_when_released", json!({ "seat": "f1" }))
        .with_idempotency_key("shared");
    let other_id = other.id.clone();
    let refused = host.invoke(other, &caller()).await;
    let error = failure(&refused);
    assert_error(
        error,
        codes::IDEMPOTENCY_CONFLICT,
        ErrorCategory::Permanent,
        false,
        None,
    );
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["original_capability_id"], "cap:theatre:book");
    assert_eq!(details["original_action_id"], json!(first.id));
    assert_eq!(details["action_id"], json!(other_id));
    assert!(refused.output.is_none(), "{refused:?}");
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
    // The first capability's own resend still replays.
    let resend = host.invoke(first, &caller()).await;
    assert!(resend.is_idempotent_replay(), "{resend:?}");
}

// ---- action.output_schema_invalid -------------------------------------------------------------

/// The theatre behind a definition whose `lookup` output schema also requires an `audit_id` the
/// handler never returns.
fn strict_theatre() -> Redefined<Theatre> {
    let inner = Theatre::default();
    let mut definition = Connector::definition(&inner).clone();
    let lookup = definition
        .capabilities
        .iter_mut()
        .find(|c| c.capability.id == "cap:theatre:lookup")
        .expect("theatre has lookup");
    let schema = lookup
        .capability
        .output_schema
        .as_mut()
        .expect("lookup publishes an output schema");
    schema["properties"]["audit_id"] = json!({ "type": "string" });
    schema["required"] = json!(["booking_id", "audit_id"]);
    Redefined { inner, definition }
}

#[tokio::test]
async fn an_output_that_violates_the_output_schema_replaces_the_result() {
    let host = host(strict_theatre());
    let result = host
        .invoke(
            Action::new("cap:theatre:lookup", json!({ "seat": "f6" })),
            &caller(),
        )
        .await;
    let error = failure(&result);
    assert_error(
        error,
        codes::ACTION_OUTPUT_SCHEMA_INVALID,
        ErrorCategory::Permanent,
        false,
        None,
    );
    assert!(result.output.is_none(), "{result:?}");
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["capability_id"], "cap:theatre:lookup");
    let violation = &details["violations"][0];
    assert_eq!(violation["instance_path"], "");
    assert!(
        violation["message"].as_str().unwrap().contains("audit_id"),
        "{violation}"
    );
}

// ---- storage.unavailable ----------------------------------------------------------------------

fn flaky_host(theatre: Theatre, store: Arc<HookedStore>) -> Host {
    let clerk = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("box_office");
    Host::builder()
        .connector(theatre)
        .store(store)
        .approval_authority(StaticApprovalAuthority::new().with("user:clerk", clerk))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_failing_reservation_is_storage_unavailable_and_nothing_runs() {
    let theatre = Theatre::default();
    let store = Arc::new(HookedStore::default());
    let host = flaky_host(theatre.clone(), store.clone());
    let action = Action::new("cap:theatre:book", json!({ "seat": "g7" })).with_idempotency_key("k");
    store.fail_reservations(true);
    let refused = host.invoke(action.clone(), &caller()).await;
    let error = failure(&refused);
    assert_error(
        error,
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        true,
        Some(1_000),
    );
    assert_eq!(
        error.source,
        Some(json!({ "component": "aip-connector.host" }))
    );
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 0);

    // Retrying once the store is back runs the action.
    store.fail_reservations(false);
    let retried = host.invoke(action, &caller()).await;
    assert_eq!(retried.status, ActionResultStatus::Completed);
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
}

/// Gates a refund and returns the approval id.
async fn gated_refund(host: &Host) -> ApprovalId {
    let pending = host
        .invoke(
            Action::new("cap:theatre:refund", json!({ "seat": "h8" })).with_idempotency_key("r"),
            &caller(),
        )
        .await;
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    pending.approval_id().expect("the gate names its approval")
}

fn clerk_approves(id: &ApprovalId) -> ApprovalDecision {
    ApprovalDecision::approve(
        id.clone(),
        Principal::new("user:clerk", PrincipalKind::Human),
    )
    .with_reason("seat was double-booked")
}

fn clerk() -> TrustedContext {
    TrustedContext::new(Principal::new("user:clerk", PrincipalKind::Human), "test")
}

/// A resume whose key cannot be reserved gives its claim back: retried once the store is back,
/// the approved action runs (once), instead of reading as already resumed.
#[tokio::test]
async fn a_resume_whose_reservation_fails_can_be_retried() {
    let theatre = Theatre::default();
    let store = Arc::new(HookedStore::default());
    let host = flaky_host(theatre.clone(), store.clone());
    let id = gated_refund(&host).await;
    let approved = host
        .record_approval_decision(clerk_approves(&id), &clerk())
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);

    store.fail_reservations(true);
    let failed = host.resume_approved(&id, &caller()).await;
    assert_error(
        failure(&failed),
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        true,
        Some(1_000),
    );
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 0);
    let record = host.approval(&id).await.unwrap().unwrap();
    assert!(!record.resumed, "the claim was given back: {record:?}");

    // A corrupt entry under the key is not retryable (a retry meets it again), yet the action
    // did not run: the claim goes back all the same.
    store.fail_reservations_with(Some(StoreError::Corrupt("bad json".into())));
    let failed = host.resume_approved(&id, &caller()).await;
    assert_error(
        failure(&failed),
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        false,
        None,
    );
    let record = host.approval(&id).await.unwrap().unwrap();
    assert!(!record.resumed, "the claim was given back: {record:?}");

    store.fail_reservations(false);
    let resumed = host.resume_approved(&id, &caller()).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
    let again = host.resume_approved(&id, &caller()).await;
    assert_eq!(failure(&again).code, codes::POLICY_APPROVAL_ALREADY_RESUMED);
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
}

/// A resume whose key cannot be reserved, dropped while it gives its claim back (its transport
/// timed out), still gives it back on a task of its own: retried once the store is back, the
/// approved action runs.
#[tokio::test]
async fn a_resume_dropped_while_giving_its_claim_back_still_gives_it_back() {
    let theatre = Theatre::default();
    let gate = aip_connector_tests::hooked_store::Gate::default();
    let store = Arc::new(HookedStore::before_release_resume({
        let gate = gate.clone();
        move |_| gate.hold()
    }));
    let host = flaky_host(theatre.clone(), store.clone());
    let id = gated_refund(&host).await;
    host.record_approval_decision(clerk_approves(&id), &clerk())
        .await
        .unwrap();

    store.fail_reservations(true);
    let resume = tokio::spawn({
        let (host, id) = (host.clone(), id.clone());
        async move { host.resume_approved(&id, &caller()).await }
    });
    gate.entered().await;
    resume.abort();
    assert!(resume.await.unwrap_err().is_cancelled());
    gate.open();
    tokio::time::timeout(Duration::from_secs(5), async {
        while host.approval(&id).await.unwrap().unwrap().resumed {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the dropped resume gave its claim back");

    store.fail_reservations(false);
    let resumed = host.resume_approved(&id, &caller()).await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(theatre.executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unreachable_approval_store_is_storage_unavailable_and_retryable() {
    let store = Arc::new(HookedStore::default());
    let host = flaky_host(Theatre::default(), store.clone());
    let id = gated_refund(&host).await;
    store.fail_approval_reads(Some(StoreError::Unavailable("replica down".into())));

    let decided = host
        .record_approval_decision(clerk_approves(&id), &clerk())
        .await
        .unwrap_err();
    assert_error(
        &decided,
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        true,
        Some(1_000),
    );
    assert_eq!(
        decided.source,
        Some(json!({ "component": "aip-connector.approval" }))
    );
    let read = host.approval(&id).await.unwrap_err();
    assert_error(
        &read,
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        true,
        Some(1_000),
    );
    let resumed = host.resume_approved(&id, &caller()).await;
    assert_error(
        failure(&resumed),
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        true,
        Some(1_000),
    );
}

/// A corrupt row met after the key was reserved (here the transaction's, at admission) fails
/// the call, not retryable, since a retry meets it again; but it is not the action's outcome,
/// so it is not stored under the key: once the row is repaired, the same call runs (found by
/// a review: the failure was stored and replayed for the key's whole TTL).
#[tokio::test]
async fn a_corrupt_row_after_the_reservation_is_not_stored_under_the_key() {
    let store = Arc::new(HookedStore::default());
    let host = Host::builder()
        .connector(Ledger)
        .store(store.clone())
        .build()
        .unwrap();
    let action = Action::new("cap:ledger:post", json!({ "amount_cents": 500 }))
        .with_idempotency_key("post-corrupt")
        .with_transaction(ActionTransaction::new(TransactionMode::Execute));
    store.fail_transaction_reads(Some(StoreError::Corrupt("bad json".into())));
    let refused = host.invoke(action.clone(), &caller()).await;
    assert_error(
        failure(&refused),
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        false,
        None,
    );
    assert_eq!(store.settles(), 0, "the failure was stored under the key");
    store.fail_transaction_reads(None);
    let posted = host.invoke(action, &caller()).await;
    assert_eq!(posted.status, ActionResultStatus::Completed, "{posted:?}");
    assert!(!posted.is_idempotent_replay(), "{posted:?}");
}

/// A connector whose handler fails with the host's storage code after it ran.
#[derive(Clone, Default)]
struct Archive {
    runs: Arc<AtomicUsize>,
}

#[connector(id = "archive")]
impl Archive {
    /// Files a document in the connector's own database.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal)
    )]
    async fn file(&self, _entry: Entry, _key: IdempotencyKey) -> Result<Posted, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(ConnectorFailure::new(
            codes::STORAGE_UNAVAILABLE,
            "the archive's own index is corrupt",
            ErrorCategory::Temporary,
            ConnectorOperation::Invocation,
            // Forwarded from another AIP host: its source, not this connector's.
            "aip-connector.host",
        )
        .with_retryable(false))
    }
}

/// Only the host's own corrupt-row answer, before any handler started, is "not attempted": a
/// connector's failure with the same code (even one forwarded from another host, under that
/// host's source) came after its handler ran, and is stored and replayed as any (found by two
/// reviews: it was released, so a resend ran the handler again).
#[tokio::test]
async fn a_connectors_storage_failure_is_stored_under_the_key() {
    let archive = Archive::default();
    let host = host(archive.clone());
    let action = Action::new("cap:archive:file", json!({ "amount_cents": 1 }))
        .with_idempotency_key("file-1");
    let failed = host.invoke(action.clone(), &caller()).await;
    assert_eq!(failure(&failed).code, codes::STORAGE_UNAVAILABLE);
    let replayed = host.invoke(action, &caller()).await;
    assert!(replayed.is_idempotent_replay(), "{replayed:?}");
    assert_eq!(archive.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_corrupt_approval_row_is_storage_unavailable_but_not_retryable() {
    let store = Arc::new(HookedStore::default());
    let host = flaky_host(Theatre::default(), store.clone());
    let id = gated_refund(&host).await;
    store.fail_approval_reads(Some(StoreError::Corrupt("bad json".into())));
    let error = host
        .record_approval_decision(clerk_approves(&id), &clerk())
        .await
        .unwrap_err();
    assert_error(
        &error,
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        false,
        None,
    );
}

#[tokio::test]
async fn an_approval_update_that_always_loses_its_race_is_storage_unavailable() {
    let store = Arc::new(HookedStore::default());
    let host = flaky_host(Theatre::default(), store.clone());
    let id = gated_refund(&host).await;
    store.lose_approval_updates(true);
    let error = host
        .record_approval_decision(clerk_approves(&id), &clerk())
        .await
        .unwrap_err();
    assert_error(
        &error,
        codes::STORAGE_UNAVAILABLE,
        ErrorCategory::Temporary,
        true,
        Some(100),
    );
    assert_eq!(error.details.as_ref().unwrap()["approval_id"], json!(id));

    // Nothing was stored: once updates land, the same decision is accepted.
    store.lose_approval_updates(false);
    let record = host
        .record_approval_decision(clerk_approves(&id), &clerk())
        .await
        .unwrap();
    assert_eq!(record.decisions.len(), 1);
}

// ---- stream.closed / stream.terminal_reserved -------------------------------------------------

/// A hand-implemented streaming connector that sends until the sink refuses a chunk, and
/// remembers the refusal.
struct Leaver {
    definition: ConnectorDefinition,
    refusal: Arc<std::sync::Mutex<Option<ConnectorFailure>>>,
    runs: Arc<AtomicUsize>,
}

impl Connector for Leaver {
    fn definition(&self) -> &ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        _capability_id: &'a str,
        _input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            let sink = context.stream().expect("a streamed call has a sink");
            loop {
                if let Err(refusal) = sink.send(StreamChunkKind::Data, json!({ "n": 1 })).await {
                    *self.refusal.lock().unwrap() = Some(refusal.clone());
                    return Err(refusal);
                }
                tokio::task::yield_now().await;
            }
        })
    }
}

/// The handler's send fails with `stream.closed` once the consumer is gone; the action itself
/// is abandoned (`action.abandoned`, host-runtime §7.1), so for this read the key is released
/// and the resend runs it again rather than replaying the sink's refusal.
#[tokio::test]
async fn a_chunk_sent_after_the_consumer_left_is_stream_closed() {
    let leaver = Leaver {
        definition: Connector::definition(&Theatre::default()).clone(),
        refusal: Arc::default(),
        runs: Arc::default(),
    };
    let (refusal, runs) = (leaver.refusal.clone(), leaver.runs.clone());
    let host = host(leaver);
    let action =
        Action::new("cap:theatre:seats", json!({ "seat": "i9" })).with_idempotency_key("s");
    let mut stream = host.invoke_stream(action.clone(), caller());
    assert_eq!(stream.next().await.unwrap().kind, StreamChunkKind::Data);
    drop(stream);
    for _ in 0..200 {
        if refusal.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = refusal
        .lock()
        .unwrap()
        .clone()
        .expect("the sink refused a chunk");
    assert_eq!(refused.code, codes::STREAM_CLOSED);
    assert_eq!(refused.category, ErrorCategory::Permanent);
    assert!(!refused.retryable);

    // Not stored: the resend runs the handler again.
    for _ in 0..200 {
        let mut resent = host.invoke_stream(action.clone(), caller());
        let first = resent.next().await.unwrap();
        if first.kind == StreamChunkKind::Data {
            assert_eq!(runs.load(Ordering::SeqCst), 2);
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the first run never released its key");
}

/// A hand-implemented streaming connector that tries to end the stream itself through the raw
/// chunk sink (the typed `StreamSink` cannot send terminal kinds).
struct EarlyFinisher {
    definition: ConnectorDefinition,
    refused: Arc<AtomicUsize>,
}

impl Connector for EarlyFinisher {
    fn definition(&self) -> &ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        _capability_id: &'a str,
        _input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        Box::pin(async move {
            let sink = context.stream().expect("a streamed call has a sink");
            if sink.send(StreamChunkKind::Error, json!({})).await.is_err() {
                self.refused.fetch_add(1, Ordering::SeqCst);
            }
            sink.send(StreamChunkKind::Done, json!({ "early": true }))
                .await?;
            Ok(json!({ "booking_id": "never" }))
        })
    }
}

#[tokio::test]
async fn a_handler_sending_a_terminal_chunk_is_terminal_reserved() {
    let refused = Arc::new(AtomicUsize::new(0));
    let finisher = EarlyFinisher {
        definition: Connector::definition(&Theatre::default()).clone(),
        refused: refused.clone(),
    };
    let host = host(finisher);
    let chunks = host
        .invoke_stream(
            Action::new("cap:theatre:seats", json!({ "seat": "j10" })),
            caller(),
        )
        .collect()
        .await;
    // Only the host's own terminal chunk reaches the consumer.
    let [terminal] = chunks.as_slice() else {
        panic!("exactly one chunk, the host's terminal one: {chunks:?}");
    };
    assert_eq!(terminal.kind, StreamChunkKind::Error);
    assert_eq!(terminal.sequence, 0);
    assert_eq!(
        refused.load(Ordering::SeqCst),
        1,
        "an error chunk is refused too"
    );
    let result: ActionResult = serde_json::from_value(terminal.data.clone().unwrap()).unwrap();
    assert_error(
        failure(&result),
        codes::STREAM_TERMINAL_RESERVED,
        ErrorCategory::Connector,
        false,
        None,
    );
}

// ---- stream.chunk_too_large ---------------------------------------------------------------------

/// A hand-implemented streaming connector that sends a chunk too large, then one too deep, then
/// a small one, and remembers the refusals.
struct Oversender {
    definition: ConnectorDefinition,
    refusals: Arc<std::sync::Mutex<Vec<ConnectorFailure>>>,
}

impl Connector for Oversender {
    fn definition(&self) -> &ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        _capability_id: &'a str,
        _input: &'a Value,
        context: Arc<dyn InvocationContext>,
    ) -> BoxFuture<'a, Result<Value, ConnectorFailure>> {
        Box::pin(async move {
            let sink = context.stream().expect("a streamed call has a sink");
            let deep = (0..150).fold(json!(1), |inner, _| json!([inner]));
            for chunk in [json!({ "text": "x".repeat(300) }), deep] {
                if let Err(refusal) = sink.send(StreamChunkKind::Data, chunk).await {
                    self.refusals.lock().unwrap().push(refusal);
                }
            }
            sink.send(StreamChunkKind::Data, json!({ "n": 1 })).await?;
            Ok(json!({ "booking_id": "b1" }))
        })
    }
}

/// A chunk is bounded as a result is: larger than `max_output_bytes` or deeper than the host
/// stores, `send` refuses it (`stream.chunk_too_large`, connector, not retryable, the bound in
/// its details) and nothing reaches the consumer; the stream goes on. Chunks had no bound before
/// (a hostile probe), and an HTTP client fails a whole stream on one event beyond its limit.
#[tokio::test]
async fn a_chunk_larger_than_max_output_bytes_is_chunk_too_large() {
    let refusals = Arc::default();
    let oversender = Oversender {
        definition: Connector::definition(&Theatre::default()).clone(),
        refusals: Arc::clone(&refusals),
    };
    let host = Host::builder()
        .connector(oversender)
        .store(Arc::new(MemoryStore::default()))
        .limits(HostLimits::default().max_output_bytes(256))
        .build()
        .expect("host builds");
    let chunks = host
        .invoke_stream(
            Action::new("cap:theatre:seats", json!({ "seat": "k11" })),
            caller(),
        )
        .collect()
        .await;
    let kinds: Vec<_> = chunks.iter().map(|chunk| chunk.kind).collect();
    assert_eq!(kinds, [StreamChunkKind::Data, StreamChunkKind::Done]);
    assert_eq!(chunks[0].data, Some(json!({ "n": 1 })));
    assert_eq!(
        chunks[0].sequence, 0,
        "a refused chunk takes no sequence number"
    );

    let refusals = refusals.lock().unwrap();
    let [large, deep] = refusals.as_slice() else {
        panic!("two refusals: {refusals:?}");
    };
    for (refusal, details) in [
        (large, json!({ "max_chunk_bytes": 256 })),
        (deep, json!({ "max_chunk_depth": 100 })),
    ] {
        assert_eq!(refusal.code, codes::STREAM_CHUNK_TOO_LARGE);
        assert_eq!(refusal.category, ErrorCategory::Connector);
        assert!(!refusal.retryable);
        assert_eq!(refusal.redacted_details, Some(details));
    }
}

// ---- transaction.* ----------------------------------------------------------------------------

fn ledger_action(transaction: ActionTransaction) -> Action {
    Action::new("cap:ledger:post", json!({ "amount_cents": 500 }))
        .with_idempotency_key("p")
        .with_transaction(transaction)
}

#[tokio::test]
async fn a_transaction_mode_the_contract_does_not_declare_is_mode_unsupported() {
    let host = host(Ledger);
    let result = host
        .invoke(
            ledger_action(ActionTransaction::new(TransactionMode::Reconcile)),
            &caller(),
        )
        .await;
    assert_error(
        failure(&result),
        codes::TRANSACTION_MODE_UNSUPPORTED,
        ErrorCategory::Permanent,
        false,
        None,
    );
    assert!(failure(&result).message.contains("does not declare"));
}

/// A declared best-effort `compensate` passes the mode checks and reaches compensation
/// admission (which refuses a target without a durable transaction); a mode the contract does
/// not declare is `transaction.mode_unsupported`.
#[tokio::test]
async fn declared_compensate_is_admitted_and_undeclared_modes_are_mode_unsupported() {
    let mut definition = Connector::definition(&Ledger).clone();
    let contract = definition.capabilities[0]
        .capability
        .contract
        .as_mut()
        .expect("post declares a contract");
    contract
        .transaction
        .as_mut()
        .expect("post declares a transaction contract")
        .supported_modes
        .push(TransactionMode::Compensate);
    contract.compensation = Some(aip_connector::model::CompensationContract {
        mode: aip_connector::model::CompensationMode::BestEffort,
        compensation_capability_id: None,
        compensation_window_ms: None,
        requires_approval: false,
    });
    let host = host(Redefined {
        inner: Ledger,
        definition,
    });
    let with_key = |transaction: ActionTransaction, key: &str| {
        ledger_action(transaction).with_idempotency_key(key)
    };

    for (mode, key) in [(TransactionMode::DryRun, "d"), (TransactionMode::Plan, "p")] {
        let result = host
            .invoke(with_key(ActionTransaction::new(mode), key), &caller())
            .await;
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    }

    let mut compensate = ActionTransaction::new(TransactionMode::Compensate);
    compensate.compensation_for = Some(ActionId::new());
    let refused = host.invoke(with_key(compensate, "c"), &caller()).await;
    let error = failure(&refused);
    assert_error(
        error,
        codes::TRANSACTION_COMPENSATION_TARGET_NOT_COMPLETED,
        ErrorCategory::Policy,
        false,
        None,
    );

    let undeclared = host
        .invoke(
            with_key(ActionTransaction::new(TransactionMode::Reconcile), "r"),
            &caller(),
        )
        .await;
    let error = failure(&undeclared);
    assert_error(
        error,
        codes::TRANSACTION_MODE_UNSUPPORTED,
        ErrorCategory::Permanent,
        false,
        None,
    );
    assert!(error.message.contains("does not declare"), "{error:?}");
}

/// A commit without a plan never reaches the contract check for it: envelope validation (stage
/// 0) refuses it first, so the contract's own code for it is unreachable through the host.
#[tokio::test]
async fn a_commit_without_a_plan_is_refused_by_envelope_validation_first() {
    let host = host(Ledger);
    let result = host
        .invoke(
            ledger_action(ActionTransaction::new(TransactionMode::Commit)),
            &caller(),
        )
        .await;
    let error = failure(&result);
    assert_error(
        error,
        codes::ACTION_INVALID,
        ErrorCategory::Permanent,
        false,
        None,
    );
    assert!(error.message.contains("plan_id is required"), "{error:?}");
}

/// `compensate` on a capability that does not declare it is `transaction.mode_unsupported`, and a
/// capability that declares it without supported compensation is refused at build time, so the
/// stage-3 compensation check has no admitted capability to refuse.
#[tokio::test]
async fn compensation_without_supported_compensation_never_reaches_the_pipeline() {
    let mut compensate = ActionTransaction::new(TransactionMode::Compensate);
    compensate.compensation_for = Some(ActionId::new());
    let result = host(Ledger)
        .invoke(ledger_action(compensate), &caller())
        .await;
    assert_error(
        failure(&result),
        codes::TRANSACTION_MODE_UNSUPPORTED,
        ErrorCategory::Permanent,
        false,
        None,
    );

    let mut definition = Connector::definition(&Ledger).clone();
    let transaction = definition.capabilities[0]
        .capability
        .contract
        .as_mut()
        .and_then(|c| c.transaction.as_mut())
        .expect("post declares a transaction contract");
    transaction
        .supported_modes
        .push(TransactionMode::Compensate);
    let error = Host::builder()
        .connector(Redefined {
            inner: Ledger,
            definition,
        })
        .build()
        .expect_err("admission refuses compensate without compensation");
    // The message names the capability each issue is about, not only its pointer.
    let message = error.to_string();
    assert!(
        message.contains("at /capabilities/0/contract/transaction")
            && message.contains("(capability `cap:ledger:post`"),
        "{message}"
    );
    let HostBuildError::Admission { report, .. } = error else {
        panic!("refused by admission: {error}");
    };
    assert!(
        report
            .codes()
            .contains(&"contract.transaction.compensate_without_compensation"),
        "{report}"
    );
}
