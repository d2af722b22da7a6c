//! The host pipeline, stage by stage, with the error code each stage produces, and its order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::codes;
use aip_connector::host::{CancelOutcome, Deployment, Host, HostLimits, TrustedContext};
use aip_connector::model::{
    Action, ActionMode, ActionResult, ActionResultStatus, ActionTransaction, Principal,
    PrincipalKind, StreamChunkKind, TransactionMode,
};
use aip_connector::prelude::*;
use aip_connector::store::MemoryStore;
use aip_connector::{CredentialHandle, Secret, VerifiedTenant};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Order {
    item: String,
    #[serde(default)]
    quantity: u32,
}

#[derive(Serialize, JsonSchema)]
struct Receipt {
    order_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Hit {
    n: u32,
}

/// Counts handler executions so tests can prove "exactly once".
#[derive(Clone, Default)]
struct Shop {
    executions: Arc<AtomicUsize>,
    /// The cancellation a `keep` handler handed out (as a task it spawned would hold it).
    kept: Arc<std::sync::Mutex<Option<Cancellation>>>,
    /// What the drop guard of each stopped `guarded` handler saw: whether its token had fired.
    guard_saw: Arc<std::sync::Mutex<Vec<bool>>>,
}

/// Records, when the handler's future is dropped, whether its cancellation had fired.
struct DropGuard {
    cancel: Cancellation,
    saw: Arc<std::sync::Mutex<Vec<bool>>>,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.saw.lock().unwrap().push(self.cancel.is_cancelled());
    }
}

#[connector(id = "shop")]
impl Shop {
    /// Place an order.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, collision = revalidate_input_hash, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn place(&self, order: Order, key: IdempotencyKey) -> Result<Receipt, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(Receipt {
            order_id: format!("{}-{}-{}", order.item, order.quantity, key.as_str()),
        })
    }

    /// Hold an item for a minute: the settled key is replayed for that minute only.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant, ttl_ms = 60_000),
        data(sensitivity = internal),
    )]
    async fn hold(&self, order: Order, key: IdempotencyKey) -> Result<Receipt, ConnectorFailure> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Receipt {
            order_id: format!("hold-{}-{}", order.item, key.as_str()),
        })
    }

    /// Look an order up; returns the wrong shape when asked to.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn lookup(&self, order: Order) -> Result<Receipt, ConnectorFailure> {
        if order.item == "break" {
            // Violates the output schema on purpose: the host must catch it.
            return Err(ConnectorFailure::new(
                "shop.not_found",
                "no such order",
                ErrorCategory::Permanent,
                aip_connector::model::ConnectorOperation::Invocation,
                "shop",
            ));
        }
        Ok(Receipt {
            order_id: order.item,
        })
    }

    /// Waits until cancelled or the deadline passes.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), sla(timeout_ms = 200))]
    async fn wait(&self, _order: Order, cancel: Cancellation) -> Result<Receipt, ConnectorFailure> {
        cancel.cancelled().await;
        Ok(Receipt {
            order_id: "never".into(),
        })
    }

    /// Sleeps past any test's patience without watching for cancellation.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn pause(&self, _order: Order) -> Result<Receipt, ConnectorFailure> {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Receipt {
            order_id: "slept".into(),
        })
    }

    /// Waits for a minute with a drop guard watching its cancellation.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn guarded(
        &self,
        _order: Order,
        cancel: Cancellation,
    ) -> Result<Receipt, ConnectorFailure> {
        let _guard = DropGuard {
            cancel,
            saw: Arc::clone(&self.guard_saw),
        };
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(Receipt {
            order_id: "waited".into(),
        })
    }

    /// Hands its cancellation out and returns at once.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn keep(&self, _order: Order, cancel: Cancellation) -> Result<Receipt, ConnectorFailure> {
        assert!(!cancel.is_cancelled(), "a running action is not cancelled");
        *self.kept.lock().unwrap() = Some(cancel);
        Ok(Receipt {
            order_id: "kept".into(),
        })
    }

    /// Streams three hits.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn hits(
        &self,
        _order: Order,
        sink: StreamSink<Hit>,
    ) -> Result<Receipt, ConnectorFailure> {
        for n in 0..3 {
            sink.send(Hit { n }).await?;
        }
        Ok(Receipt {
            order_id: "streamed".into(),
        })
    }

    /// Needs a credential with a scope.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public), credentials(required, issuers = ["vault"], scopes = ["orders.read"]))]
    async fn secret_lookup(
        &self,
        order: Order,
        credential: Credential,
    ) -> Result<Receipt, ConnectorFailure> {
        Ok(Receipt {
            order_id: format!("{}@{}", order.item, credential.issuer()),
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

/// Another person than `caller()`, of `tenant`.
fn person(id: &str, tenant: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new(tenant))
}

fn host_with(shop: Shop, credential: Option<CredentialHandle>) -> Host {
    let deployment = match credential {
        Some(credential) => Deployment::new().with_static_credential(credential),
        None => Deployment::new(),
    };
    Host::builder()
        .connector(shop)
        .store(Arc::new(MemoryStore::default()))
        .deployment(deployment)
        .build()
        .expect("host builds")
}

fn code(result: &ActionResult) -> &str {
    result
        .error
        .as_ref()
        .map(|e| e.code.as_str())
        .unwrap_or("<none>")
}

#[tokio::test]
async fn unknown_capability_is_resource_not_found() {
    let host = host_with(Shop::default(), None);
    let result = host
        .invoke(Action::new("cap:shop:nope", json!({})), &caller())
        .await;
    assert_eq!(code(&result), codes::RESOURCE_NOT_FOUND);
}

#[tokio::test]
async fn invalid_input_fails_schema_validation_with_violations() {
    let host = host_with(Shop::default(), None);
    let result = host
        .invoke(
            Action::new("cap:shop:lookup", json!({ "item": 5 })),
            &caller(),
        )
        .await;
    assert_eq!(code(&result), codes::ACTION_INPUT_SCHEMA_INVALID);
    let error = result.error.unwrap();
    assert_eq!(error.retryable, Some(false));
    assert_eq!(
        error.details.unwrap()["violations"][0]["instance_path"],
        "/item"
    );
}

#[tokio::test]
async fn envelope_and_size_limits_are_checked_first() {
    let host = Host::builder()
        .connector(Shop::default())
        .limits(HostLimits::default().max_input_bytes(64))
        .build()
        .unwrap();
    let result = host
        .invoke(Action::new("cap:shop:lookup", json!(null)), &caller())
        .await;
    assert_eq!(code(&result), codes::ACTION_INVALID);
    let result = host
        .invoke(
            Action::new("cap:shop:lookup", json!({ "item": "x".repeat(100) })),
            &caller(),
        )
        .await;
    assert_eq!(code(&result), codes::ACTION_INPUT_TOO_LARGE);
    // Escapes count: 30 quotes are 30 characters but 60 bytes of JSON, so this input is 71.
    let quotes = json!({ "item": "\"".repeat(30) });
    assert_eq!(quotes.to_string().len(), 71);
    let result = host
        .invoke(Action::new("cap:shop:lookup", quotes), &caller())
        .await;
    assert_eq!(code(&result), codes::ACTION_INPUT_TOO_LARGE);
}

/// A host with `limits` over a fresh shop and memory store, both returned for inspection.
fn limited_host(limits: HostLimits) -> (Shop, MemoryStore, Host) {
    let shop = Shop::default();
    let store = MemoryStore::default();
    let host = Host::builder()
        .connector(shop.clone())
        .store(Arc::new(store.clone()))
        .limits(limits)
        .build()
        .expect("host builds");
    (shop, store, host)
}

#[tokio::test]
async fn an_idempotency_key_longer_than_the_limit_is_refused_before_the_store() {
    use aip_connector::store::IdempotencyStore;

    let (shop, store, host) = limited_host(HostLimits::default().max_idempotency_key_bytes(8));
    let place = |key: &str| {
        Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key(key)
    };

    // Exactly the limit is accepted; the limit counts bytes, so four two-byte characters fit.
    let at_limit = host.invoke(place("12345678"), &caller()).await;
    assert_eq!(
        at_limit.status,
        ActionResultStatus::Completed,
        "{at_limit:?}"
    );
    let multibyte = host.invoke(place("éééé"), &caller()).await;
    assert_eq!(
        multibyte.status,
        ActionResultStatus::Completed,
        "{multibyte:?}"
    );

    // One byte over is refused, with the lengths and without the key.
    for over in ["123456789", "éééé1"] {
        let result = host.invoke(place(over), &caller()).await;
        assert_eq!(code(&result), codes::ACTION_IDEMPOTENCY_KEY_TOO_LONG);
        let error = result.error.expect("a refusal carries an error");
        assert_eq!(error.retryable, Some(false));
        assert_eq!(
            error.details,
            Some(json!({ "key_bytes": 9, "max_key_bytes": 8 }))
        );
        assert!(!error.message.contains(over), "{}", error.message);
        // Nothing was reserved or stored under the key.
        let stored = store
            .record(&format!("Tenant:t1:{over}"), 0)
            .await
            .expect("the memory store answers");
        assert!(stored.is_none());
    }
    assert_eq!(shop.executions.load(Ordering::SeqCst), 2);

    // The default limit is generous for generated keys (a UUID, a SHA-256 hex digest).
    assert_eq!(HostLimits::default().max_idempotency_key_bytes, 255);
    let default_host = host_with(Shop::default(), None);
    let long = "k".repeat(256);
    assert_eq!(
        code(&default_host.invoke(place(&long), &caller()).await),
        codes::ACTION_IDEMPOTENCY_KEY_TOO_LONG
    );
}

#[tokio::test]
async fn an_id_longer_than_the_limit_is_refused_before_the_store() {
    use aip_connector::ids::{ActionId, TransactionId};
    use aip_connector::store::IdempotencyStore;

    let (shop, store, host) = limited_host(HostLimits::default().max_id_bytes(12));
    let action_id = |suffix: &str| ActionId::parse(format!("act_{suffix}")).unwrap();
    let place = |id: ActionId, key: &str| {
        let mut action =
            Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key(key);
        action.id = id;
        action
    };

    // Exactly the limit is accepted (`act_` and eight bytes).
    let at_limit = host
        .invoke(place(action_id("12345678"), "k1"), &caller())
        .await;
    assert_eq!(
        at_limit.status,
        ActionResultStatus::Completed,
        "{at_limit:?}"
    );

    // One byte over is refused with the field and the lengths; the result still names the
    // action, as the wire requires, and nothing is reserved under the key.
    let over = action_id("123456789");
    let result = host.invoke(place(over.clone(), "k2"), &caller()).await;
    assert_eq!(code(&result), codes::ACTION_ID_TOO_LONG);
    assert_eq!(result.action_id, over);
    let error = result.error.expect("a refusal carries an error");
    assert_eq!(error.retryable, Some(false));
    assert_eq!(
        error.details,
        Some(json!({ "field": "id", "id_bytes": 13, "max_id_bytes": 12 }))
    );
    assert!(!error.message.contains(over.as_str()), "{}", error.message);
    let stored = store
        .record("Tenant:t1:k2", 0)
        .await
        .expect("the memory store answers");
    assert!(stored.is_none());
    assert_eq!(shop.executions.load(Ordering::SeqCst), 1);

    // The transaction block's ids are bounded the same way, each named in the details.
    let long = "p".repeat(13);
    let mut transactions = Vec::new();
    let mut commit = ActionTransaction::new(TransactionMode::Commit);
    commit.plan_id = Some(long.clone());
    transactions.push(("transaction.plan_id", commit));
    let mut execute = ActionTransaction::new(TransactionMode::Execute);
    execute.transaction_id = Some(TransactionId::parse(format!("txn_{long}")).unwrap());
    transactions.push(("transaction.transaction_id", execute));
    let mut compensate = ActionTransaction::new(TransactionMode::Compensate);
    compensate.compensation_for = Some(action_id(&long));
    transactions.push(("transaction.compensation_for", compensate));
    for (field, transaction) in transactions {
        let mut action = Action::new("cap:shop:lookup", json!({ "item": "tea" }));
        action.id = action_id("short");
        action.transaction = Some(Box::new(transaction));
        let result = host.invoke(action, &caller()).await;
        assert_eq!(code(&result), codes::ACTION_ID_TOO_LONG, "{field}");
        let details = result.error.and_then(|e| e.details).expect("details");
        assert_eq!(details["field"], field);
        assert!(details["id_bytes"].as_u64().unwrap() > 12, "{details}");
    }

    // A cancel naming such an id is not remembered (no action with it can start here); one
    // at the limit is.
    let too_long = CancelOutcome::IdTooLong { max_id_bytes: 12 };
    assert_eq!(host.cancel(&over), too_long);
    assert_eq!(host.cancel_as(&over, &caller()), too_long);
    assert_eq!(host.cancel(&action_id("87654321")), CancelOutcome::Pending);
    // Nor is one naming an id stage 0 refuses as invalid: empty, or with a NUL character.
    // (The wire's ids are unchecked strings, so a server's cancel can name either.)
    for invalid in ["", "act_\0x"] {
        let id: ActionId = serde_json::from_value(json!(invalid)).unwrap();
        assert_eq!(host.cancel(&id), CancelOutcome::IdInvalid, "{invalid:?}");
        assert_eq!(
            host.cancel_as(&id, &caller()),
            CancelOutcome::IdInvalid,
            "{invalid:?}"
        );
    }

    // The default limit is generous for generated ids (`act_` and 32 hex digits).
    assert_eq!(HostLimits::default().max_id_bytes, 255);
    let default_host = host_with(Shop::default(), None);
    let result = default_host
        .invoke(place(action_id(&"x".repeat(252)), "k3"), &caller())
        .await;
    assert_eq!(code(&result), codes::ACTION_ID_TOO_LONG);
    let generated = Action::new("cap:shop:lookup", json!({ "item": "tea" }));
    assert!(generated.id.as_str().len() <= 255);
}

/// PostgreSQL's `text` cannot hold a NUL character: every write of such an id failed there as a
/// retryable outage. Every store refuses it alike, permanently, before anything is stored.
#[tokio::test]
async fn an_id_or_key_with_a_nul_character_is_refused_before_the_store() {
    use aip_connector::ids::{ActionId, TransactionId};
    use aip_connector::store::IdempotencyStore;

    let (shop, store, host) = limited_host(HostLimits::default());
    let place = || Action::new("cap:shop:place", json!({ "item": "tea" }));
    let mut cases = vec![
        ("idempotency_key", place().with_idempotency_key("k\0ey")),
        ("id", {
            let mut action = place().with_idempotency_key("k1");
            action.id = ActionId::parse("act_a\0b").unwrap();
            action
        }),
    ];
    let mut execute = ActionTransaction::new(TransactionMode::Execute);
    execute.transaction_id = Some(TransactionId::parse("txn_a\0b").unwrap());
    cases.push(("transaction.transaction_id", {
        let mut action = Action::new("cap:shop:lookup", json!({ "item": "tea" }));
        action.transaction = Some(Box::new(execute));
        action
    }));
    for (field, action) in cases {
        let result = host.invoke(action, &caller()).await;
        assert_eq!(code(&result), codes::ACTION_INVALID, "{field}: {result:?}");
        let error = result.error.expect("an error");
        assert_eq!(error.retryable, Some(false), "{field}");
        assert_eq!(error.details, Some(json!({ "field": field })));
    }
    assert_eq!(shop.executions.load(Ordering::SeqCst), 0);
    for key in ["Tenant:t1:k\0ey", "Tenant:t1:k1"] {
        assert!(store.record(key, 0).await.unwrap().is_none(), "{key:?}");
    }
}

/// An empty id (serde reads one; upstream's parsing would refuse it) is refused at stage 0.
#[tokio::test]
async fn an_empty_id_is_refused_before_the_store() {
    use aip_connector::ids::ActionId;

    let (shop, _store, host) = limited_host(HostLimits::default());
    let mut action = Action::new("cap:shop:place", json!({ "item": "tea" }));
    action.id = ActionId::trusted("");
    let result = host.invoke(action, &caller()).await;
    assert_eq!(code(&result), codes::ACTION_INVALID, "{result:?}");
    assert_eq!(
        result.error.and_then(|e| e.details),
        Some(json!({ "field": "id" }))
    );
    let mut plan = ActionTransaction::new(TransactionMode::Plan);
    plan.plan_id = Some(String::new());
    let mut action = Action::new("cap:shop:lookup", json!({ "item": "tea" }));
    action.transaction = Some(Box::new(plan));
    let result = host.invoke(action, &caller()).await;
    assert_eq!(code(&result), codes::ACTION_INVALID, "{result:?}");
    assert_eq!(shop.executions.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn context_blocks_larger_than_the_limit_are_refused_before_the_store() {
    use aip_connector::model::{Callback, ComplianceContext};
    use aip_connector::store::IdempotencyStore;

    let (shop, store, host) = limited_host(HostLimits::default().max_context_bytes(1024));
    let place = |key: &str| {
        Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key(key)
    };

    // Blocks that fit together are accepted.
    let mut fits = place("k1");
    fits.memory_context = Some(Box::new(json!({ "notes": "n".repeat(400) })));
    let result = host.invoke(fits, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");

    // Two blocks each under the limit but over it together: the second is named, nothing is
    // reserved under the key, the handler does not run, and the bytes are not echoed.
    let mut over = place("k2");
    over.memory_context = Some(Box::new(json!({ "notes": "n".repeat(600) })));
    over.compliance = Some(Box::new(ComplianceContext {
        metadata: Some(json!({ "secret_looking": "s".repeat(600) })),
        ..ComplianceContext::default()
    }));
    let result = host.invoke(over, &caller()).await;
    assert_eq!(code(&result), codes::ACTION_CONTEXT_TOO_LARGE);
    let error = result.error.expect("a refusal carries an error");
    assert_eq!(error.retryable, Some(false));
    assert_eq!(
        error.details,
        Some(json!({ "field": "compliance", "max_context_bytes": 1024 }))
    );
    assert!(!error.message.contains("sss"), "{}", error.message);
    assert!(store.record("Tenant:t1:k2", 0).await.unwrap().is_none());
    assert_eq!(shop.executions.load(Ordering::SeqCst), 1);

    // One huge block is refused at that block.
    let mut huge = place("k3");
    huge.callback = Some(Box::new(Callback {
        profile: aip_connector::ids::profiles::HTTP_WEBHOOK.into(),
        target: "https://example.test/hook".into(),
        metadata: Some(json!({ "blob": "b".repeat(1 << 20) })),
    }));
    let result = host.invoke(huge, &caller()).await;
    assert_eq!(code(&result), codes::ACTION_CONTEXT_TOO_LARGE);
    assert_eq!(result.error.unwrap().details.unwrap()["field"], "callback");

    // The caller's `identity` block does not count: the host replaces it with its own.
    let mut with_identity = place("k5");
    with_identity.identity = Some(Box::new(aip_connector::model::IdentityContext {
        human_actor: Some(Box::new(Principal::new(
            format!("user:{}", "h".repeat(2000)),
            PrincipalKind::Human,
        ))),
        ..Default::default()
    }));
    let result = host.invoke(with_identity, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");

    // The default leaves room for a sizeable memory context.
    assert_eq!(HostLimits::default().max_context_bytes, 256 * 1024);
    let default_host = host_with(Shop::default(), None);
    let mut within_default = place("k4");
    within_default.memory_context = Some(Box::new(json!({ "notes": "n".repeat(200_000) })));
    let result = default_host.invoke(within_default, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
}

/// `depth` arrays nested in one another, built without recursion.
fn nested_arrays(depth: usize) -> serde_json::Value {
    // Not `json!([inner])`: the macro serializes its expressions, recursively.
    (1..depth).fold(serde_json::Value::Array(Vec::new()), |inner, _| {
        serde_json::Value::Array(vec![inner])
    })
}

/// A context block built in process (nothing parsed it, so no parser bounded its depth) is
/// refused for nesting deeper than 64 levels before anything walks it recursively; at 64 it
/// runs. Thousands of levels used to overflow the stack while the
/// size check serialized the block.
#[tokio::test]
async fn context_blocks_nested_too_deep_are_refused_without_recursing() {
    let (shop, _store, host) = limited_host(HostLimits::default());
    let with_memory = |depth: usize| {
        let mut action = Action::new("cap:shop:place", json!({ "item": "tea" }))
            .with_idempotency_key(format!("deep-{depth}"));
        action.memory_context = Some(Box::new(nested_arrays(depth)));
        action
    };

    let result = host.invoke(with_memory(64), &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");

    let result = host.invoke(with_memory(65), &caller()).await;
    assert_eq!(code(&result), codes::ACTION_CONTEXT_TOO_LARGE, "{result:?}");
    let error = result.error.unwrap();
    assert_eq!(
        error.details,
        Some(json!({ "field": "memory_context", "max_context_depth": 64 }))
    );
    assert_eq!(shop.executions.load(Ordering::SeqCst), 1);

    // Ten thousand levels on a thread with an 8 MiB stack: refused, no crash. (Dropping such a
    // value recurses too, in serde_json, with smaller frames than serializing it: the stack
    // must hold the drop, which the host cannot avoid, but not a walk of the host's own.)
    let deep = with_memory(10_000);
    let refused = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(host.invoke(deep, &caller()))
        })
        .unwrap()
        .join()
        .expect("the host refuses the block without overflowing the stack");
    assert_eq!(code(&refused), codes::ACTION_CONTEXT_TOO_LARGE);
    assert_eq!(shop.executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn purging_deletes_expired_records_in_batches_and_keeps_live_ones() {
    use aip_connector::store::{Clock, IdempotencyStore, ManualClock, Purged, SqliteStore};

    let clock = Arc::new(ManualClock::new());
    let store = SqliteStore::open_in_memory().expect("open SQLite in memory");
    let shop = Shop::default();
    let host = Host::builder()
        .connector(shop.clone())
        .store(Arc::new(store.clone()))
        .clock(clock.clone())
        .build()
        .expect("host builds");
    let hold = |key: &str| {
        Action::new("cap:shop:hold", json!({ "item": "tea" })).with_idempotency_key(key)
    };
    for key in ["h1", "h2", "h3"] {
        let result = host.invoke(hold(key), &caller()).await;
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    }
    // `place` keeps its records for a day (the macro's default TTL): not purged here.
    let place =
        Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key("forever");
    let placed = host.invoke(place, &caller()).await;
    assert_eq!(placed.status, ActionResultStatus::Completed, "{placed:?}");
    let stored_at = clock.now_ms();

    // Nothing has expired yet.
    assert_eq!(host.purge_expired(2).await, Ok(Purged::default()));
    assert!(
        store
            .record("Tenant:t1:h1", stored_at)
            .await
            .unwrap()
            .is_some()
    );

    // A minute later the three holds have expired: two passes of two delete them.
    clock.advance(60_000);
    assert_eq!(
        host.purge_expired(2).await,
        Ok(Purged {
            records: 3,
            attempt_counts: 0
        })
    );
    // Deleted, not only expired: read at the time they were stored, they are gone.
    for key in ["Tenant:t1:h1", "Tenant:t1:h2", "Tenant:t1:h3"] {
        assert_eq!(store.record(key, stored_at).await, Ok(None), "{key}");
    }
    assert!(
        store
            .record("Tenant:t1:forever", clock.now_ms())
            .await
            .unwrap()
            .is_some()
    );
    // A purged key runs again, as an expired one would.
    let before = shop.executions.load(Ordering::SeqCst);
    let again = host.invoke(hold("h1"), &caller()).await;
    assert_eq!(again.status, ActionResultStatus::Completed, "{again:?}");
    assert_eq!(shop.executions.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn missing_key_and_unsupported_modes_are_contract_failures() {
    let host = host_with(Shop::default(), None);
    let result = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": "tea" })),
            &caller(),
        )
        .await;
    assert_eq!(code(&result), codes::IDEMPOTENCY_REQUIRED);
    // The refusal names the field to set.
    assert_eq!(
        result.error.as_ref().unwrap().message,
        "this capability requires an idempotency key: set the action's `idempotency_key`"
    );
    let mut streaming = Action::new("cap:shop:lookup", json!({ "item": "tea" }));
    streaming.mode = Some(ActionMode::Streaming);
    assert_eq!(
        code(&host.invoke(streaming.clone(), &caller()).await),
        codes::EXECUTION_MODE_UNSUPPORTED
    );
    // Streamed (over HTTP: `Accept: text/event-stream`), the refusal says how to call it.
    let streamed = host
        .invoke_stream(streaming, caller())
        .result()
        .await
        .expect("a terminal chunk");
    let error = streamed.error.expect("refused");
    assert_eq!(error.code, codes::EXECUTION_MODE_UNSUPPORTED);
    assert!(
        error.message.ends_with(
            "it answers once; invoke it plainly (`Host::invoke`; over HTTP, send the action without `Accept: text/event-stream`)"
        ),
        "{}",
        error.message
    );
    let planned = Action::new("cap:shop:lookup", json!({ "item": "tea" }))
        .with_transaction(ActionTransaction::new(TransactionMode::Plan));
    assert_eq!(
        code(&host.invoke(planned, &caller()).await),
        codes::TRANSACTION_UNSUPPORTED
    );
}

#[tokio::test]
async fn duplicate_with_invalid_input_fails_validation_instead_of_replaying() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    let first = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key("k1"),
            &caller(),
        )
        .await;
    assert_eq!(first.status, ActionResultStatus::Completed);
    let bad = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": 1 })).with_idempotency_key("k1"),
            &caller(),
        )
        .await;
    assert_eq!(code(&bad), codes::ACTION_INPUT_SCHEMA_INVALID);
    assert_eq!(shop.executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn replay_mismatch_and_tenant_isolation() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    let first = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key("k"),
            &caller(),
        )
        .await;
    let replay = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key("k"),
            &caller(),
        )
        .await;
    assert_eq!(replay.output.as_ref().unwrap()["idempotent_replay"], true);
    assert_eq!(
        replay.output.as_ref().unwrap()["order_id"],
        first.output.as_ref().unwrap()["order_id"]
    );
    let changed = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": "coffee" })).with_idempotency_key("k"),
            &caller(),
        )
        .await;
    assert_eq!(code(&changed), codes::IDEMPOTENCY_INPUT_HASH_MISMATCH);
    // The same key in another tenant is another key.
    let other = caller().with_tenant(VerifiedTenant::new("t2"));
    let elsewhere = host
        .invoke(
            Action::new("cap:shop:place", json!({ "item": "coffee" })).with_idempotency_key("k"),
            &other,
        )
        .await;
    assert_eq!(elsewhere.status, ActionResultStatus::Completed);
    assert_eq!(shop.executions.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_duplicates_execute_once() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    thousand_duplicates(host, shop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_duplicates_execute_once_on_sqlite() {
    let path = std::env::temp_dir().join(format!(
        "aip-host-dupes-{}.sqlite",
        aip_connector::ids::ActionId::new()
    ));
    let store = aip_connector::store::SqliteStore::open(&path).expect("sqlite opens");
    let shop = Shop::default();
    let host = Host::builder()
        .connector(shop.clone())
        .store(Arc::new(store))
        .build()
        .unwrap();
    thousand_duplicates(host, shop).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

async fn thousand_duplicates(host: Host, shop: Shop) {
    let mut tasks = Vec::new();
    for _ in 0..1_000 {
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            host.invoke(
                Action::new("cap:shop:place", json!({ "item": "tea" }))
                    .with_idempotency_key("same"),
                &caller(),
            )
            .await
        }));
    }
    let mut completed = 0;
    for task in tasks {
        let result = task.await.unwrap();
        match result.status {
            ActionResultStatus::Completed => completed += 1,
            _ => assert_eq!(code(&result), codes::IDEMPOTENCY_IN_PROGRESS),
        }
    }
    assert!(completed >= 1);
    assert_eq!(
        shop.executions.load(Ordering::SeqCst),
        1,
        "the handler ran exactly once"
    );
}

#[tokio::test]
async fn handler_failures_and_output_are_reported() {
    let host = host_with(Shop::default(), None);
    let result = host
        .invoke(
            Action::new("cap:shop:lookup", json!({ "item": "break" })),
            &caller(),
        )
        .await;
    assert_eq!(code(&result), "shop.not_found");
    let result = host
        .invoke(
            Action::new("cap:shop:lookup", json!({ "item": "tea" })),
            &caller(),
        )
        .await;
    assert_eq!(result.output.unwrap()["order_id"], "tea");
}

#[tokio::test]
async fn deadline_from_the_sla_times_out() {
    let host = host_with(Shop::default(), None);
    let result = host
        .invoke(
            Action::new("cap:shop:wait", json!({ "item": "x" })),
            &caller(),
        )
        .await;
    assert_eq!(code(&result), codes::SLA_TIMEOUT_EXCEEDED);
    assert_eq!(result.error.unwrap().category, ErrorCategory::Temporary);
}

#[derive(Clone, Default)]
struct Lookups;

#[connector(id = "lookups")]
impl Lookups {
    /// A lookup that never answers in time; it takes the key, so its contract supports retries.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        idempotency(required),
        sla(timeout_ms = 50)
    )]
    async fn retried(
        &self,
        order: Order,
        _key: IdempotencyKey,
    ) -> Result<Receipt, ConnectorFailure> {
        std::future::pending::<()>().await;
        Ok(Receipt {
            order_id: order.item,
        })
    }

    /// The same lookup, without a key.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        sla(timeout_ms = 50)
    )]
    async fn plain(&self, order: Order) -> Result<Receipt, ConnectorFailure> {
        std::future::pending::<()>().await;
        Ok(Receipt {
            order_id: order.item,
        })
    }
}

/// A read's timeout is retryable only when its contract supports retries, which takes an
/// `IdempotencyKey` parameter (upstream's rule, as docs/checklist.md tells a read's author);
/// without one the timeout is not retryable, though the read's `retry_safety` is `safe` (found
/// surprising by an operations trial).
#[tokio::test]
async fn a_reads_timeout_is_retryable_when_its_contract_supports_retries() {
    let host = Host::builder()
        .connector(Lookups)
        .store(Arc::new(MemoryStore::default()))
        .build()
        .unwrap();
    for (capability, retryable) in [
        ("cap:lookups:retried", Some(true)),
        ("cap:lookups:plain", Some(false)),
    ] {
        let action = Action::new(capability, json!({ "item": "x" })).with_idempotency_key("k-1");
        let result = host.invoke(action, &caller()).await;
        let error = result.error.expect("a timeout");
        assert_eq!(error.code, codes::SLA_TIMEOUT_EXCEEDED, "{capability}");
        assert_eq!(error.retryable, retryable, "{capability}");
    }
}

/// `timeout_ms` is the caller's, any u64. The largest one is clamped to the host's
/// `max_action_timeout_ms` (1 hour by default): the call runs, and its key stays reserved for
/// that hour (plus the grace), not for ever should the host die mid-call, and not for a wrapped
/// expiry in the past, where a duplicate could take the key over and run the handler again.
#[tokio::test]
async fn the_largest_timeout_runs_and_keeps_its_key_reserved() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    let order = || {
        Action::new("cap:shop:place", json!({ "item": "x", "quantity": 1 }))
            .with_idempotency_key("k-max")
            .with_timeout_ms(u64::MAX)
    };
    let first = tokio::spawn({
        let host = host.clone();
        let action = order();
        async move { host.invoke(action, &caller()).await }
    });
    while shop.executions.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let duplicate = host.invoke(order(), &caller()).await;
    assert_eq!(
        code(&duplicate),
        codes::IDEMPOTENCY_IN_PROGRESS,
        "{duplicate:?}"
    );
    let error = duplicate.error.unwrap();
    // The duplicate is asked to come back within a second; the key stays reserved for the
    // clamped hour (plus the grace).
    let retry_after_ms = error.retry_after_ms.unwrap();
    assert!((1..=1_000).contains(&retry_after_ms), "{retry_after_ms}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let held_ms = error.details.unwrap()["reservation_expires_at_ms"]
        .as_u64()
        .unwrap()
        - now_ms;
    assert!(
        (3_590_000..=3_600_000 + 60_000).contains(&held_ms),
        "the key is held for the clamped hour, not {held_ms} ms"
    );

    let ran = first.await.unwrap();
    assert_eq!(ran.status, ActionResultStatus::Completed, "{ran:?}");
    let replay = host.invoke(order(), &caller()).await;
    assert_eq!(replay.output.unwrap()["idempotent_replay"], true);
    assert_eq!(shop.executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn cancellation_by_action_id_fires_the_handlers_token() {
    let host = host_with(Shop::default(), None);
    let action = Action::new("cap:shop:wait", json!({ "item": "x" })).with_timeout_ms(5_000);
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    // Until the handler runs, a cancel is remembered (`Pending`) and fires when it starts.
    let mut outcome = CancelOutcome::NotActive;
    for _ in 0..100 {
        outcome = host.cancel(&id);
        if outcome == CancelOutcome::Cancelled || running.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_ne!(outcome, CancelOutcome::NotActive);
    let result = running.await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled);
    // A cancel after the terminal result is only remembered; it changes nothing.
    assert_eq!(host.cancel(&id), CancelOutcome::Pending);
}

#[tokio::test]
async fn cancellation_ends_a_handler_that_never_looks_at_it() {
    let host = host_with(Shop::default(), None);
    let action = Action::new("cap:shop:pause", json!({ "item": "x" })).with_timeout_ms(60_000);
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    let started = std::time::Instant::now();
    // A cancel before the handler starts is remembered and fires when it starts.
    while host.cancel(&id) != CancelOutcome::Cancelled && !running.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let result = running.await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the race ended at the cancel"
    );
}

#[tokio::test]
async fn the_handlers_token_fires_when_its_action_ends() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    let result = host
        .invoke(
            Action::new("cap:shop:keep", json!({ "item": "x" })),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let kept = shop.kept.lock().unwrap().take().expect("the handler ran");
    // Whatever the handler spawned with its token learns that the action is over.
    assert!(kept.is_cancelled());
}

/// A handler stopped by its deadline or a cancel sees its token fired when its future is
/// dropped, so a drop guard can tell a stopped call from a finished one (found by an author
/// trial: at the deadline the token fired only after the future was gone).
#[tokio::test]
async fn a_stopped_handlers_drop_guard_sees_its_token_fired() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    let timed_out = host
        .invoke(
            Action::new("cap:shop:guarded", json!({ "item": "x" })).with_timeout_ms(50),
            &caller(),
        )
        .await;
    assert_eq!(
        code(&timed_out),
        codes::SLA_TIMEOUT_EXCEEDED,
        "{timed_out:?}"
    );
    assert_eq!(*shop.guard_saw.lock().unwrap(), [true]);

    let action = Action::new("cap:shop:guarded", json!({ "item": "y" })).with_timeout_ms(60_000);
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    while host.cancel(&id) != CancelOutcome::Cancelled && !running.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cancelled = running.await.unwrap();
    assert_eq!(
        cancelled.status,
        ActionResultStatus::Cancelled,
        "{cancelled:?}"
    );
    // A cancel remembered before the handler started stops it before its first poll, when
    // there is no guard yet to see anything.
    let saw = shop.guard_saw.lock().unwrap().clone();
    assert!(saw.iter().all(|fired| *fired), "{saw:?}");
}

/// A hand-written connector that keeps its invocation context past the call, as a task it
/// spawned would, and answers at once.
struct Keeper {
    definition: aip_connector::ConnectorDefinition,
    kept: Arc<std::sync::Mutex<Option<Arc<dyn aip_connector::InvocationContext>>>>,
}

impl aip_connector::Connector for Keeper {
    fn definition(&self) -> &aip_connector::ConnectorDefinition {
        &self.definition
    }

    fn invoke<'a>(
        &'a self,
        _capability_id: &'a str,
        _input: &'a serde_json::Value,
        context: Arc<dyn aip_connector::InvocationContext>,
    ) -> aip_connector::invocation::BoxFuture<'a, Result<serde_json::Value, ConnectorFailure>> {
        *self.kept.lock().unwrap() = Some(context);
        Box::pin(std::future::ready(Ok(json!({ "order_id": "kept" }))))
    }
}

#[tokio::test]
async fn a_context_kept_past_its_action_sees_the_action_over() {
    let kept = Arc::new(std::sync::Mutex::new(None));
    let keeper = Keeper {
        definition: aip_connector::Connector::definition(&Shop::default()).clone(),
        kept: Arc::clone(&kept),
    };
    let host = Host::builder()
        .connector(keeper)
        .store(Arc::new(MemoryStore::default()))
        .build()
        .expect("host builds");
    let result = host
        .invoke(
            Action::new("cap:shop:lookup", json!({ "item": "x" })),
            &caller(),
        )
        .await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    let context = kept.lock().unwrap().take().expect("the connector ran");
    // Its token did not exist while the action ran; asked for afterwards, it has fired.
    assert!(context.cancellation().is_cancelled());
}

#[tokio::test]
async fn a_cancel_before_dispatch_is_remembered_and_the_handler_never_runs() {
    let shop = Shop::default();
    let host = host_with(shop.clone(), None);
    let action = Action::new("cap:shop:wait", json!({ "item": "x" })).with_timeout_ms(5_000);
    assert_eq!(host.cancel(&action.id), CancelOutcome::Pending);
    let result = host.invoke(action.clone(), &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    // The pending cancellation is consumed: the same action sent again runs (and is cancelled
    // in flight here only if asked again).
    let other =
        Action::new("cap:shop:place", json!({ "item": "tea" })).with_idempotency_key("pending");
    assert_eq!(host.cancel(&other.id), CancelOutcome::Pending);
    assert_eq!(
        host.invoke(other, &caller()).await.status,
        ActionResultStatus::Cancelled
    );
}

#[tokio::test]
async fn a_caller_cancels_only_its_own_actions() {
    let host = host_with(Shop::default(), None);
    let stranger = TrustedContext::new(Principal::new("user:eve", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"));
    let same_principal_other_tenant = caller().with_tenant(VerifiedTenant::new("t2"));
    let action = Action::new("cap:shop:wait", json!({ "item": "x" })).with_timeout_ms(2_000);
    let id = action.id.clone();
    // A stranger's pending cancellation does not apply to the owner's action...
    assert_eq!(host.cancel_as(&id, &stranger), CancelOutcome::Pending);
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...nor does a live one, from another principal or from the same principal elsewhere.
    assert_eq!(host.cancel_as(&id, &stranger), CancelOutcome::Pending);
    assert_eq!(
        host.cancel_as(&id, &same_principal_other_tenant),
        CancelOutcome::Pending
    );
    assert!(!running.is_finished());
    assert_eq!(host.cancel_as(&id, &caller()), CancelOutcome::Cancelled);
    let result = running.await.unwrap();
    assert_eq!(result.status, ActionResultStatus::Cancelled);

    // The owner's own pending cancellation applies before dispatch.
    let early = Action::new("cap:shop:wait", json!({ "item": "y" })).with_timeout_ms(2_000);
    assert_eq!(host.cancel_as(&early.id, &caller()), CancelOutcome::Pending);
    let result = host.invoke(early, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled);
}

/// One caller cannot fill the host's table of remembered cancellations: past its own share
/// (`MAX_PENDING_CANCELS_PER_CALLER`) its cancels are not remembered (`NotActive`, retryable
/// over HTTP), while another caller's and an operator's still are. A renewal takes no room.
#[tokio::test]
async fn one_caller_cannot_fill_the_remembered_cancellations() {
    use aip_connector::host::MAX_PENDING_CANCELS_PER_CALLER;
    use aip_connector::ids::ActionId;

    let host = host_with(Shop::default(), None);
    let flooder = person("user:mal", "t2");
    let id = |n: usize| ActionId::parse(format!("act_flood_{n}")).unwrap();
    for n in 0..MAX_PENDING_CANCELS_PER_CALLER {
        assert_eq!(host.cancel_as(&id(n), &flooder), CancelOutcome::Pending);
    }
    assert_eq!(
        host.cancel_as(&id(MAX_PENDING_CANCELS_PER_CALLER), &flooder),
        CancelOutcome::NotActive
    );
    assert_eq!(host.cancel_as(&id(0), &flooder), CancelOutcome::Pending);

    // Ada still cancels her action before it starts; an operator's cancel is remembered too.
    let action = Action::new("cap:shop:wait", json!({ "item": "x" })).with_timeout_ms(2_000);
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::Pending
    );
    assert_eq!(host.cancel(&id(10_000)), CancelOutcome::Pending);
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled);
}

/// Each caller's cancellation of an id is remembered apart: a stranger cancelling the same id
/// after the owner does not replace (and so void) the owner's.
#[tokio::test]
async fn a_strangers_cancel_of_the_same_id_leaves_the_owners_in_place() {
    let host = host_with(Shop::default(), None);
    let stranger = person("user:eve", "t1");
    let action = Action::new("cap:shop:wait", json!({ "item": "x" })).with_timeout_ms(2_000);
    assert_eq!(
        host.cancel_as(&action.id, &caller()),
        CancelOutcome::Pending
    );
    assert_eq!(
        host.cancel_as(&action.id, &stranger),
        CancelOutcome::Pending
    );
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
}

#[tokio::test]
async fn streaming_yields_ordered_chunks_and_one_terminal() {
    let host = host_with(Shop::default(), None);
    let chunks = host
        .invoke_stream(
            Action::new("cap:shop:hits", json!({ "item": "x" })),
            caller(),
        )
        .collect()
        .await;
    let sequences: Vec<u64> = chunks.iter().map(|c| c.sequence).collect();
    assert_eq!(sequences, vec![0, 1, 2, 3]);
    assert_eq!(
        chunks
            .iter()
            .filter(|c| matches!(c.kind, StreamChunkKind::Done | StreamChunkKind::Error))
            .count(),
        1
    );
    assert_eq!(chunks[3].kind, StreamChunkKind::Done);
    assert_eq!(chunks[1].data.as_ref().unwrap()["n"], 1);
}

/// What a handler sent through its `StreamSink<T>`, decoded, and the result; a type the data
/// does not decode into names the chunk (an author trial decoded each chunk by hand).
#[tokio::test]
async fn collect_data_decodes_what_the_sink_sent_and_the_result() {
    #[derive(Deserialize, Debug, PartialEq)]
    struct SentHit {
        n: u32,
    }
    let host = host_with(Shop::default(), None);
    let hits = || Action::new("cap:shop:hits", json!({ "item": "x" }));
    let (items, result) = host
        .invoke_stream(hits(), caller())
        .collect_data::<SentHit>()
        .await
        .unwrap();
    assert_eq!(
        items,
        [SentHit { n: 0 }, SentHit { n: 1 }, SentHit { n: 2 }]
    );
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(result.output.as_ref().unwrap()["order_id"], "streamed");
    let refused = host
        .invoke_stream(hits(), caller())
        .collect_data::<String>()
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            aip_connector::host::StreamDataError::Decode { sequence: 0, .. }
        ),
        "{refused}"
    );
    // A refusal before the handler: no items, the failure as the result.
    let (items, failed) = host
        .invoke_stream(Action::new("cap:shop:hits", json!({ "item": 5 })), caller())
        .collect_data::<SentHit>()
        .await
        .unwrap();
    assert!(items.is_empty());
    assert_eq!(failed.status, ActionResultStatus::Failed, "{failed:?}");
}

fn credential(scopes: &[&str], issuer: &str) -> CredentialHandle {
    CredentialHandle::new("cred-1", issuer, Secret::new("canary-secret-4f1a"))
        .with_scopes(scopes.iter().copied())
        .with_tenant("t1")
}

#[tokio::test]
async fn credentials_are_checked_before_the_handler() {
    let input = json!({ "item": "tea" });
    let missing = host_with(Shop::default(), None)
        .invoke(
            Action::new("cap:shop:secret_lookup", input.clone()),
            &caller(),
        )
        .await;
    assert_eq!(code(&missing), codes::CREDENTIAL_MISSING);
    // The refusal says where a deployment gets its credentials (an author trial looked).
    assert!(
        missing.error.as_ref().unwrap().message.ends_with(
            "the host's deployment has no credential provider: give it one \
             (Deployment::with_credentials, or Deployment::with_static_credential for a single \
             credential; in a testkit TestHost, TestHostBuilder::credential with the scopes it \
             grants)"
        ),
        "{missing:?}"
    );
    let wrong_issuer = host_with(Shop::default(), Some(credential(&["orders.read"], "other")))
        .invoke(
            Action::new("cap:shop:secret_lookup", input.clone()),
            &caller(),
        )
        .await;
    assert_eq!(code(&wrong_issuer), codes::CREDENTIAL_ISSUER_DENIED);
    let no_scope = host_with(
        Shop::default(),
        Some(credential(&["orders.write"], "vault")),
    )
    .invoke(
        Action::new("cap:shop:secret_lookup", input.clone()),
        &caller(),
    )
    .await;
    assert_eq!(code(&no_scope), codes::CREDENTIAL_SCOPE_MISSING);
    assert_eq!(
        no_scope.error.as_ref().and_then(|e| e.details.clone()),
        Some(json!({ "missing_scopes": ["orders.read"] }))
    );
    // Upstream's code for an expired credential is `scope_missing` too; the details say which.
    let expired = host_with(
        Shop::default(),
        Some(credential(&["*"], "vault").with_expiry_ms(1_000)),
    )
    .invoke(
        Action::new("cap:shop:secret_lookup", input.clone()),
        &caller(),
    )
    .await;
    assert_eq!(code(&expired), codes::CREDENTIAL_SCOPE_MISSING);
    assert_eq!(
        expired.error.as_ref().and_then(|e| e.details.clone()),
        Some(json!({ "expired": true, "expired_at_ms": 1_000 }))
    );
    let wildcard = host_with(Shop::default(), Some(credential(&["*"], "vault")))
        .invoke(
            Action::new("cap:shop:secret_lookup", input.clone()),
            &caller(),
        )
        .await;
    assert_eq!(wildcard.output.unwrap()["order_id"], "tea@vault");
    let other_tenant = caller().with_tenant(VerifiedTenant::new("t9"));
    let mismatch = host_with(Shop::default(), Some(credential(&["*"], "vault")))
        .invoke(
            Action::new("cap:shop:secret_lookup", input.clone()),
            &other_tenant,
        )
        .await;
    assert_eq!(code(&mismatch), codes::CREDENTIAL_TENANT_MISMATCH);
    assert!(!format!("{mismatch:?}").contains("canary-secret-4f1a"));
    // A call outside every tenant may not use a tenant's credential either.
    let no_tenant = TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test");
    let outside = host_with(Shop::default(), Some(credential(&["*"], "vault")))
        .invoke(Action::new("cap:shop:secret_lookup", input), &no_tenant)
        .await;
    assert_eq!(code(&outside), codes::CREDENTIAL_TENANT_MISMATCH);
    assert!(
        outside.error.unwrap().message.contains("the call has none"),
        "the refusal says what is missing"
    );
}

/// A host's Debug says what it serves and how it is deployed, and never the credential its
/// deployment hands out.
#[test]
fn a_host_shows_its_connectors_and_deployment_but_no_secret_in_debug() {
    let host = host_with(Shop::default(), Some(credential(&["*"], "vault")));
    let shown = format!("{host:?}");
    assert!(shown.contains("connectors: [\"shop\"]"), "{shown}");
    assert!(shown.contains("max_concurrent_actions"), "{shown}");
    assert!(!shown.contains("canary-secret-4f1a"), "{shown}");
}

#[tokio::test]
async fn tenants_customers_and_contacts_may_not_invoke() {
    let host = host_with(Shop::default(), None);
    let tenant = TrustedContext::new(Principal::new("tenant:acme", PrincipalKind::Tenant), "test");
    let result = host
        .invoke(
            Action::new("cap:shop:lookup", json!({ "item": "x" })),
            &tenant,
        )
        .await;
    assert_eq!(code(&result), codes::AUTH_NOT_AUTHORIZED);
}

/// Another connector claiming one of the shop's capability ids.
struct Rival;

#[connector(id = "rival")]
impl Rival {
    /// Looks an order up, under the shop's id.
    #[capability(id = "cap:shop:lookup", risk = low, side_effects = [read], data(sensitivity = public))]
    async fn lookup(&self, order: Order) -> Result<Receipt, ConnectorFailure> {
        Ok(Receipt {
            order_id: order.item,
        })
    }
}

#[test]
fn duplicate_capability_ids_across_connectors_are_refused() {
    let error = Host::builder()
        .connector(Shop::default())
        .connector(Rival)
        .build()
        .expect_err("refused");
    assert!(
        matches!(
            &error,
            aip_connector::host::HostBuildError::DuplicateCapability { capability, first, second }
                if capability.as_str() == "cap:shop:lookup" && first == "shop" && second == "rival"
        ),
        "{error}"
    );
}

/// Found by an author trial: one macro invocation cannot see another, so two connectors with
/// one id compiled, and a host took both.
#[test]
fn duplicate_connector_ids_are_refused() {
    let error = Host::builder()
        .connector(Shop::default())
        .connector(Shop::default())
        .build()
        .expect_err("refused");
    assert!(
        matches!(
            &error,
            aip_connector::host::HostBuildError::DuplicateConnector { connector } if connector == "shop"
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "two connectors have the id `shop`; give each connector of a host its own id"
    );
}

struct Scalar;

/// A string under a struct's name: the macro cannot see through it (a bare `String` input is a
/// compile error, `tests/ui/grammar/input-not-object.rs`), so `Host::build` is what refuses it.
#[derive(Deserialize, JsonSchema)]
#[serde(transparent)]
struct Text(String);

#[connector(id = "scalar")]
impl Scalar {
    /// Takes a bare string, which `Action.input` (an object) can never be.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn shout(&self, text: Text) -> Result<String, ConnectorFailure> {
        Ok(text.0.to_uppercase())
    }
}

#[test]
fn inputs_without_an_object_root_are_refused_at_build_time() {
    let error = Host::builder()
        .connector(Scalar)
        .build()
        .expect_err("refused");
    assert!(
        matches!(
            error,
            aip_connector::host::HostBuildError::InputNotObject { .. }
        ),
        "{error}"
    );
}

/// Reports the tenant its handler was given.
#[derive(Clone, Default)]
struct Whoami;

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[derive(Serialize, JsonSchema)]
struct TenantSeen {
    tenant: String,
    system: Option<String>,
}

#[connector(id = "whoami")]
impl Whoami {
    /// Name the tenant the host verified.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn tenant(
        &self,
        _input: Nothing,
        tenant: Tenant,
    ) -> Result<TenantSeen, ConnectorFailure> {
        Ok(TenantSeen {
            tenant: tenant.id().to_owned(),
            system: tenant.system().map(str::to_owned),
        })
    }
}

/// The handler's tenant is the caller's verified one, else the deployment's; a tenant the
/// payload claims is never it.
#[tokio::test]
async fn the_handler_sees_the_verified_tenant_never_the_payloads() {
    let host = Host::builder()
        .connector(Whoami)
        .store(Arc::new(MemoryStore::new()))
        .deployment(
            Deployment::new()
                .with_tenant(VerifiedTenant::new("deployment_tenant").with_system("erp")),
        )
        .build()
        .unwrap();
    let spoofed = || {
        let mut action = Action::new("cap:whoami:tenant", json!({}));
        action.identity =
            serde_json::from_value(json!({ "tenant": { "id": "spoofed", "system": "x" } }))
                .unwrap();
        action
    };
    let anonymous = TrustedContext::new(Principal::new("user:bo", PrincipalKind::Human), "test");
    let result = host.invoke(spoofed(), &anonymous).await;
    assert_eq!(
        result.output,
        Some(json!({ "tenant": "deployment_tenant", "system": "erp" })),
        "{:?}",
        result.error
    );
    let result = host.invoke(spoofed(), &caller()).await;
    assert_eq!(
        result.output,
        Some(json!({ "tenant": "t1", "system": null })),
        "{:?}",
        result.error
    );
}

/// The per-tenant credential provider of docs/host-runtime.md ("Deployment identity"): one
/// token per tenant, looked up by the caller's verified tenant.
struct PerTenantTokens(std::collections::HashMap<String, CredentialHandle>);

impl aip_connector::host::CredentialProvider for PerTenantTokens {
    fn resolve<'a>(
        &'a self,
        _capability: &'a aip_connector::model::Capability,
        caller: &'a TrustedContext,
    ) -> aip_connector::invocation::BoxFuture<'a, Result<Option<CredentialHandle>, ConnectorFailure>>
    {
        let handle = caller
            .tenant
            .as_ref()
            .and_then(|tenant| self.0.get(&tenant.id))
            .cloned();
        Box::pin(async move { Ok(handle) })
    }
}

#[tokio::test]
async fn a_credential_provider_resolves_one_credential_per_tenant() {
    let acme = CredentialHandle::new("cred-acme", "vault", Secret::new("tok_acme"))
        .with_scopes(["orders.read"])
        .with_tenant("acme");
    let tokens = PerTenantTokens([("acme".to_owned(), acme)].into_iter().collect());
    let host = Host::builder()
        .connector(Shop::default())
        .store(Arc::new(MemoryStore::default()))
        .deployment(Deployment::default().with_credentials(tokens))
        .build()
        .expect("host builds");
    let in_tenant = |id: &str| {
        TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
            .with_tenant(VerifiedTenant::new(id))
    };
    let lookup = || {
        Action::new(
            "cap:shop:secret_lookup",
            json!({ "item": "tea", "quantity": 1 }),
        )
    };

    let served = host.invoke(lookup(), &in_tenant("acme")).await;
    assert_eq!(served.status, ActionResultStatus::Completed, "{served:?}");
    // A tenant without a token has no credential: the contract requires one.
    let refused = host.invoke(lookup(), &in_tenant("globex")).await;
    assert_eq!(code(&refused), codes::CREDENTIAL_MISSING, "{refused:?}");
    assert!(
        refused
            .error
            .as_ref()
            .unwrap()
            .message
            .ends_with("its credential provider answered none for this call"),
        "{refused:?}"
    );
}

/// A keyed write whose output is a list, and one whose output type denies unknown fields.
#[derive(Clone, Default)]
struct Labels {
    executions: Arc<AtomicUsize>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Labelled {
    labels: Vec<String>,
}

#[connector(id = "labels")]
impl Labels {
    /// Adds a label and answers every label the item now has.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn add(
        &self,
        order: Order,
        _key: IdempotencyKey,
    ) -> Result<Vec<String>, ConnectorFailure> {
        let n = self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(vec![order.item, format!("run-{n}")])
    }

    /// The same, answered as a closed object.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn add_closed(
        &self,
        order: Order,
        _key: IdempotencyKey,
    ) -> Result<Labelled, ConnectorFailure> {
        let n = self.executions.fetch_add(1, Ordering::SeqCst);
        Ok(Labelled {
            labels: vec![order.item, format!("run-{n}")],
        })
    }
}

/// A replay gives the first answer back whatever its shape: upstream replaces an output that is
/// not an object by the bare marker, so a client that lost the first answer lost it for good.
#[tokio::test]
async fn a_replay_keeps_an_output_that_is_not_an_object() {
    let labels = Labels::default();
    let host = aip_connector_testkit::TestHost::builder(labels.clone())
        .build()
        .unwrap();
    let action =
        || Action::new("cap:labels:add", json!({"item": "urgent"})).with_idempotency_key("k");
    let first = host.invoke("ana", action()).await;
    let replay = host.invoke("ana", action()).await;
    assert_eq!(labels.executions.load(Ordering::SeqCst), 1);
    assert!(!first.is_idempotent_replay());
    assert!(replay.is_idempotent_replay());
    assert_eq!(
        replay.output,
        Some(json!({"idempotent_replay": true, "original_output": ["urgent", "run-0"]}))
    );
    assert_eq!(
        replay.output_as::<Vec<String>>().unwrap(),
        first.output_as::<Vec<String>>().unwrap()
    );

    // A closed output type decodes the replay as it decoded the first answer.
    let action =
        || Action::new("cap:labels:add_closed", json!({"item": "vip"})).with_idempotency_key("c");
    let first = host
        .invoke("ana", action())
        .await
        .output_as::<Labelled>()
        .unwrap();
    let replay = host.invoke("ana", action()).await;
    assert!(replay.is_idempotent_replay());
    assert_eq!(replay.output_as::<Labelled>().unwrap(), first);
    assert_eq!(labels.executions.load(Ordering::SeqCst), 2);
}

/// A connector whose declared example misspells its input's field.
struct Misexampled;

#[connector(id = "misexampled")]
impl Misexampled {
    /// Looks an order up.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        examples = [r#"{"item": "tea"}"#, r#"{"itme": "tea"}"#]
    )]
    async fn lookup(&self, order: Order) -> Result<Receipt, ConnectorFailure> {
        Ok(Receipt {
            order_id: order.item,
        })
    }
}

/// Found by an author trial: an example the input schema refuses was published in the manifest
/// as a valid call, and the conformance scenarios then failed invoking it.
#[test]
fn an_example_that_does_not_match_the_input_schema_is_refused_at_build_time() {
    let error = Host::builder()
        .connector(Misexampled)
        .build()
        .expect_err("refused");
    let aip_connector::host::HostBuildError::ExampleInvalid {
        capability,
        index,
        violations,
    } = &error
    else {
        panic!("wanted ExampleInvalid, got {error}");
    };
    assert_eq!(capability.as_str(), "cap:misexampled:lookup");
    assert_eq!(*index, 1);
    assert!(!violations.is_empty());
    assert!(
        error.to_string().contains("example 1 of capability"),
        "{error}"
    );
    // The missing property is reported at the instance's root, named in words.
    assert!(
        error
            .to_string()
            .contains("\"item\" is a required property (at the root)"),
        "{error}"
    );
}

/// A connector whose handler's doc comment is partly an expression.
struct Documented;

#[connector(id = "documented")]
impl Documented {
    /// Looks an order up.
    #[doc = concat!("Answers within ", "one second.")]
    ///
    /// Reads only.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn lookup(&self, order: Order) -> Result<Receipt, ConnectorFailure> {
        Ok(Receipt {
            order_id: order.item,
        })
    }
}

/// Found by an author trial: a `#[doc = include_str!(..)]` or `concat!` doc attribute was
/// dropped, and with it the whole description, silently. Such parts are joined at run time by
/// the rule `///` lines follow at compile time.
#[test]
fn a_doc_comment_with_expressions_is_the_description() {
    use aip_connector::Connector;
    let definition = Documented.definition();
    assert_eq!(
        definition.capabilities[0].capability.description.as_deref(),
        Some("Looks an order up.\nAnswers within one second.\n\nReads only.")
    );
    assert_eq!(
        Shop::default().definition().capabilities[0]
            .capability
            .description
            .as_deref(),
        Some("Place an order.")
    );
}

/// A handler that, in the middle of a poll, is cancelled and answers its token with a failure of
/// its own: what happens when `Host::cancel` runs on another worker while the handler runs (the
/// signal fires, then the token). Here the handler cancels itself, so the order is certain.
#[derive(Clone, Default)]
struct SelfCancelling {
    host: Arc<std::sync::OnceLock<Host>>,
}

#[derive(Deserialize, JsonSchema)]
struct Target {
    action_id: String,
    /// Complete instead of failing once cancelled.
    #[serde(default)]
    complete: bool,
    /// Fail saying side effects were committed.
    #[serde(default)]
    committed: bool,
}

#[connector(id = "selfcancel")]
impl SelfCancelling {
    /// Cancels its own action, then answers the token.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn stop(
        &self,
        target: Target,
        cancel: Cancellation,
    ) -> Result<Receipt, ConnectorFailure> {
        // Wait once, so the action is registered for `Host::cancel`.
        tokio::task::yield_now().await;
        let id = aip_connector::ids::ActionId::parse(target.action_id).expect("an action id");
        let host = self.host.get().expect("the test sets the host");
        assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
        assert!(cancel.is_cancelled());
        if target.complete {
            return Ok(Receipt {
                order_id: "done anyway".into(),
            });
        }
        let failure = ConnectorFailure::new(
            "selfcancel.stopped",
            "stopped on the token",
            ErrorCategory::Connector,
            aip_connector::model::ConnectorOperation::Invocation,
            "selfcancel",
        );
        Err(if target.committed {
            failure.with_committed_side_effects()
        } else {
            failure
        })
    }
}

/// Found by an author trial: `cancel` answered `Cancelled`, and the action ended `failed` with
/// the handler's own error about half the time on a multi-thread runtime.
#[tokio::test]
async fn a_handler_failing_on_its_fired_token_ends_cancelled_as_the_cancel_answered() {
    let connector = SelfCancelling::default();
    let host = Host::builder()
        .connector(connector.clone())
        .store(Arc::new(MemoryStore::default()))
        .build()
        .unwrap();
    connector.host.set(host.clone()).ok();

    let action = Action::new("cap:selfcancel:stop", json!({ "action_id": "" }));
    let mut action = action;
    action.input = json!({ "action_id": action.id.as_str() });
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert!(result.error.is_none(), "{result:?}");

    // A handler that had completed its work keeps its result: nothing is undone by saying
    // "cancelled" about it.
    let mut action = Action::new("cap:selfcancel:stop", json!({}));
    action.input = json!({ "action_id": action.id.as_str(), "complete": true });
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(result.output.unwrap()["order_id"], "done anyway");

    // Nor does a failure that says what reached the provider: committed side effects must be
    // recorded to be compensated (a hostile review's cancel erased them).
    let mut action = Action::new("cap:selfcancel:stop", json!({}));
    action.input = json!({ "action_id": action.id.as_str(), "committed": true });
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    assert_eq!(result.error.unwrap().code, "selfcancel.stopped");
}
