//! Kill and restart: a host process whose handler checkpoints a provider operation and calls the
//! provider double is killed with SIGKILL before it settles. A new host on the same durable
//! store then finds the transaction recoverable, refuses to execute it again
//! (`transaction.reconciliation_required`), reconciles it against the provider, and the provider
//! saw exactly one effect. On SQLite (a file) and on PostgreSQL (a schema of the machine's
//! server, from `AIP_TEST_POSTGRES_URL`; skipped with a message when it is not set).
//!
//! The child process is this test binary itself, re-run on the ignored test
//! `crash_child_host_process` with the store, the provider's URL and the action in its
//! environment.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{Host, TransactionSelector, TrustedContext};
use aip_connector::ids::{ActionId, TransactionId};
use aip_connector::model::{
    Action, ActionResultStatus, ActionTransaction, Principal, PrincipalKind, ProviderOperationRef,
    TransactionMode, TransactionProtocolStatus,
};
use aip_connector::prelude::*;
use aip_connector::store::{ManualClock, PostgresStore, SharedStore, SqliteStore};
use aip_connector_testkit::provider_double::{OPERATION_ID_HEADER, ProviderDouble};
use serde_json::{Value, json};

const STORE_ENV: &str = "AIP_CRASH_CHILD_STORE";
const PROVIDER_ENV: &str = "AIP_CRASH_CHILD_PROVIDER";
const ACTION_ENV: &str = "AIP_CRASH_CHILD_ACTION";
const POSTGRES_URL_ENV: &str = "AIP_TEST_POSTGRES_URL";

/// How far the restarted host's clock is moved: past the crashed attempt's idempotency
/// reservation (deadline + 60 s grace) and its `reconcile_after_ms` (deadline + 5 s).
const AFTER_THE_CRASH_MS: u64 = 10 * 60 * 1000;

#[derive(Deserialize, JsonSchema)]
struct Booking {
    slot: String,
}

#[derive(Serialize, JsonSchema)]
struct Booked {
    operation_id: String,
}

/// A calendar connector that books through the provider. `hang_after_effect` makes the handler
/// stop right after the provider answered, as if its process died there.
#[derive(Clone)]
struct Calendar {
    client: ProviderClient,
    hang_after_effect: bool,
}

#[connector(id = "crashcal")]
impl Calendar {
    /// Book a slot at the provider.
    #[capability(
        id = "cap:crashcal:book",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = Self::look_up,
    )]
    async fn book(
        &self,
        booking: Booking,
        key: IdempotencyKey,
        checkpoint: Checkpoint,
    ) -> Result<Booked, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: "double".into(),
            operation_id: format!("op-{}", key.as_str()),
            request_id: None,
        };
        // Durable before the provider is called: whatever happens next, a restarted host knows
        // which operation to look up.
        checkpoint.record(operation.clone(), None).await?;
        let answer: Value = self
            .client
            .post("/bookings")
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation.clone())
            .json(&json!({ "slot": booking.slot }))
            .send_json()
            .await?;
        if self.hang_after_effect {
            // The effect is committed at the provider; this process is about to be killed.
            std::future::pending::<()>().await;
        }
        Ok(Booked {
            operation_id: answer["operation_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    async fn look_up(&self, request: Reconciliation) -> Result<ReconcileOutcome, ConnectorFailure> {
        let path = format!("/operations/{}", request.provider_operation.operation_id);
        let answer: Value = self.client.get(&path).send_json().await?;
        Ok(match answer["state"].as_str() {
            Some("committed") => ReconcileOutcome::Committed {
                evidence: Some(answer),
            },
            Some("pending") => ReconcileOutcome::Pending { cursor: None },
            _ => ReconcileOutcome::NotCommitted {
                evidence: Some(answer),
            },
        })
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

/// Where the two processes keep their state.
#[derive(Clone, Debug)]
enum StoreSpec {
    Sqlite(std::path::PathBuf),
    Postgres { url: String, schema: String },
}

impl StoreSpec {
    fn encode(&self) -> String {
        match self {
            StoreSpec::Sqlite(path) => format!("sqlite|{}", path.display()),
            StoreSpec::Postgres { url, schema } => format!("postgres|{url}|{schema}"),
        }
    }

    fn decode(text: &str) -> Self {
        let parts: Vec<&str> = text.splitn(3, '|').collect();
        match parts.as_slice() {
            ["sqlite", path] => StoreSpec::Sqlite(path.into()),
            ["postgres", url, schema] => StoreSpec::Postgres {
                url: (*url).to_owned(),
                schema: (*schema).to_owned(),
            },
            _ => panic!("bad {STORE_ENV}: {text}"),
        }
    }

    async fn open(&self) -> SharedStore {
        match self {
            StoreSpec::Sqlite(path) => Arc::new(SqliteStore::open(path).expect("open SQLite")),
            StoreSpec::Postgres { url, schema } => Arc::new(
                PostgresStore::connect_with_schema(url, schema)
                    .await
                    .expect("connect to PostgreSQL"),
            ),
        }
    }

    async fn remove(&self) {
        match self {
            StoreSpec::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(file);
                }
            }
            StoreSpec::Postgres { url, schema } => {
                PostgresStore::drop_schema(url, schema)
                    .await
                    .expect("drop the test schema");
            }
        }
    }
}

/// The child: runs one action on a host over the given store and never returns (its handler
/// hangs after the provider's effect until the parent kills the process).
#[test]
#[ignore = "entry point of the child process that the crash tests spawn and kill"]
fn crash_child_host_process() {
    let store = StoreSpec::decode(&std::env::var(STORE_ENV).expect("run by a crash test only"));
    let provider = std::env::var(PROVIDER_ENV).expect("provider URL");
    let action: Action =
        serde_json::from_str(&std::env::var(ACTION_ENV).expect("action")).expect("action JSON");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let host = Host::builder()
            .connector(Calendar {
                client: ProviderClient::new(provider).unwrap(),
                hang_after_effect: true,
            })
            .store(store.open().await)
            .build()
            .unwrap();
        let result = host.invoke(action, &caller()).await;
        panic!("the child settled instead of being killed: {result:?}");
    });
}

/// Kills the child when the test ends, whatever happens.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // The time keeps what a killed run left behind (same pid, same counter: a file, a
    // schema with rows) from being reused.
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "{prefix}_{}_{millis:x}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn crash_then_recover(spec: StoreSpec) {
    let (double, provider) = ProviderDouble::start().await;
    // The store's schema exists before the child starts (migrations run once, here).
    drop(spec.open().await);

    let mut transaction = ActionTransaction::new(TransactionMode::Execute);
    transaction.transaction_id = Some(TransactionId::new());
    let action = Action::new("cap:crashcal:book", json!({ "slot": "9am" }))
        .with_idempotency_key("crash-1")
        .with_transaction(transaction.clone());
    let transaction_id = transaction.transaction_id.clone().unwrap();

    // 1. The child host runs the action and is killed with SIGKILL after the provider's effect
    // committed and before the host settled anything.
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_host_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(STORE_ENV, spec.encode())
        .env(PROVIDER_ENV, double.base_url())
        .env(ACTION_ENV, serde_json::to_string(&action).unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child host");
    let mut child = KillOnDrop(child);
    assert!(
        provider.wait_for_effects(1, Duration::from_secs(60)).await,
        "the child never reached the provider"
    );
    child.0.kill().expect("SIGKILL the child");
    let status = child.0.wait().unwrap();
    assert!(!status.success(), "the child was killed, not finished");

    // 2. A new host on the same store, later.
    let clock = Arc::new(ManualClock::new());
    clock.advance(AFTER_THE_CRASH_MS);
    let store = spec.open().await;
    let host = Host::builder()
        .connector(Calendar {
            client: ProviderClient::new(double.base_url()).unwrap(),
            hang_after_effect: false,
        })
        .store(store.clone())
        .clock(clock)
        .build()
        .unwrap();

    let recoverable = store.recoverable().await.unwrap();
    let record = recoverable
        .iter()
        .find(|r| r.transaction_id == transaction_id)
        .expect("the killed attempt's record is recoverable");
    assert_eq!(record.status, TransactionProtocolStatus::Prepared);
    assert_eq!(
        record
            .provider_operation
            .as_ref()
            .map(|op| op.operation_id.as_str()),
        Some("op-crash-1"),
        "the checkpoint was durable before the provider call"
    );

    // 3. Executing it again is refused: the provider may have the effect.
    let again = host.invoke(action.clone(), &caller()).await;
    assert_eq!(again.status, ActionResultStatus::Failed, "{again:?}");
    assert_eq!(
        again.error.as_ref().unwrap().code,
        codes::TRANSACTION_RECONCILIATION_REQUIRED
    );

    // 4. Reconciliation asks the provider and settles the transaction.
    let mut reconcile_block = ActionTransaction::new(TransactionMode::Reconcile);
    reconcile_block.transaction_id = Some(transaction_id.clone());
    let reconcile = Action::new("cap:crashcal:book", json!({ "slot": "9am" }))
        .with_idempotency_key("reconcile-1")
        .with_transaction(reconcile_block);
    let reconciled = host.invoke(reconcile, &caller()).await;
    assert_eq!(
        reconciled.status,
        ActionResultStatus::Completed,
        "{reconciled:?}"
    );
    assert_eq!(
        reconciled.output.as_ref().unwrap()["reconciliation"]["committed"],
        true
    );
    let view = host
        .transaction(&TransactionSelector::Transaction(transaction_id), &caller())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TransactionProtocolStatus::Reconciled);

    // 5. Still exactly one effect, and a further execute does not run the handler.
    let after = host
        .invoke(
            Action {
                id: ActionId::new(),
                ..action
            },
            &caller(),
        )
        .await;
    assert_eq!(after.status, ActionResultStatus::Failed);
    assert_eq!(provider.effect_total(), 1, "{:?}", provider.effects());
    // The key as the host scoped it (`scope = principal`), which the handler forwards.
    // Digested, as `ProviderRequest::idempotency` sends it.
    let sent = IdempotencyKey::provider_key_of("Principal:user%3Aada:crash-1");
    assert_eq!(provider.effect_count(&sent), 1);

    drop(host);
    drop(store);
    spec.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_host_killed_after_the_provider_effect_recovers_by_reconciliation() {
    let path = std::env::temp_dir().join(format!("{}.db", unique("aip-crash")));
    crash_then_recover(StoreSpec::Sqlite(path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_host_killed_after_the_provider_effect_recovers_by_reconciliation() {
    let Ok(url) = std::env::var(POSTGRES_URL_ENV) else {
        eprintln!(
            "skipped: {POSTGRES_URL_ENV} is not set (e.g. postgres://postgres@127.0.0.1:5432/test); .ci/run sets it"
        );
        return;
    };
    crash_then_recover(StoreSpec::Postgres {
        url,
        schema: unique("aip_crash"),
    })
    .await;
}
