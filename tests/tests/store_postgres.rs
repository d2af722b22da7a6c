//! The store conformance suite ([`aip_connector_testkit::store_conformance`]) against
//! [`PostgresStore`], one test per check (`postgres::*`), plus what only PostgreSQL has: races
//! between independently connected stores, as several host replicas would be, replicas sharing
//! one schema, and schema-name validation. The memory and SQLite backends run the same checks in
//! `store_conformance.rs`.
//!
//! Needs a PostgreSQL server: `AIP_TEST_POSTGRES_URL` names it (e.g.
//! `postgres://postgres@127.0.0.1:5432/test`). Each test works in a fresh schema of its own,
//! dropped when it ends. Without the variable every test says it was skipped and passes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::store::{
    IdempotencyStore, PostgresOptions, PostgresStore, ReserveOutcome, SharedStore, StoreError,
};
use aip_connector_testkit::store_conformance::{
    NOW, assert_single_winner, completed, race_claim_resume, race_plan_claims, race_take_over,
    reservation, reserve_concurrently,
};

/// The variable that names the test server.
const URL_VARIABLE: &str = "AIP_TEST_POSTGRES_URL";

/// How many independently connected stores the race tests use, as separate host replicas.
const REPLICAS: usize = 4;

/// The most connections one test store opens.
const TEST_POOL: usize = 4;

/// A schema of its own for one test, dropped (with everything in it) when the test ends, even
/// when it fails.
struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// A fresh schema name on the test server, or `None` (after saying so) without one.
    fn new() -> Option<Self> {
        let Some(url) = std::env::var(URL_VARIABLE)
            .ok()
            .filter(|url| !url.is_empty())
        else {
            println!("skipped: {URL_VARIABLE} is not set (CI sets it; see .ci/run)");
            return None;
        };
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // The time keeps a schema a killed run left behind (same pid, same counter) from
        // being reused with its rows.
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = format!(
            "aip_test_{}_{millis:x}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Some(Self { url, name })
    }

    /// A new store (with a pool of its own) on this schema, creating the schema if needed.
    async fn connect(&self) -> PostgresStore {
        // Four connections per store: the racing tests open several replicas at once, and the
        // server's default `max_connections` (100) is shared with every other test binary.
        PostgresStore::connect_with(
            &self.url,
            PostgresOptions::new()
                .schema(&self.name)
                .max_connections(TEST_POOL),
        )
        .await
        .expect("connect to the test schema")
    }

    /// `count` independently connected stores on this schema.
    async fn replicas(&self, count: usize) -> Vec<SharedStore> {
        let mut stores: Vec<SharedStore> = Vec::with_capacity(count);
        for _ in 0..count {
            stores.push(Arc::new(self.connect().await));
        }
        stores
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let url = self.url.clone();
        let name = self.name.clone();
        // Drop cannot await, and may run inside the test's runtime: a runtime of its own, on a
        // thread of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime
                .block_on(PostgresStore::drop_schema(&url, &name))
                .map_err(|error| error.to_string())
        })
        .join();
        let outcome = dropped.unwrap_or_else(|_| Err("the drop thread panicked".to_owned()));
        if let Err(error) = outcome
            && !std::thread::panicking()
        {
            panic!("could not drop test schema {}: {error}", self.name);
        }
    }
}

/// Runs `check` on a store of a fresh schema, or says the test was skipped.
async fn on_fresh_schema<F, Fut>(check: F)
where
    F: FnOnce(SharedStore) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(schema) = TestSchema::new() else {
        return;
    };
    check(Arc::new(schema.connect().await)).await;
}

/// Runs every check on a fresh schema, one test per check.
macro_rules! postgres {
    ($($check:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    super::on_fresh_schema(aip_connector_testkit::store_conformance::$check).await;
                }
            )+
        }
    };
}

aip_connector_testkit::for_each_store_check!(postgres);

/// Runs every published cross-replica check on independently connected stores of a fresh
/// schema, one test each (the races below repeat them for many rounds).
macro_rules! postgres_replicas {
    ($($check:ident),+ $(,)?) => {
        mod postgres_replicas {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let Some(schema) = super::TestSchema::new() else {
                        return;
                    };
                    let replicas = schema.replicas(super::REPLICAS).await;
                    aip_connector_testkit::store_conformance::$check(replicas).await;
                }
            )+
        }
    };
}

aip_connector_testkit::for_each_replica_check!(postgres_replicas);

/// 200 rounds of 8 replicas' callers racing to reserve one fresh key: one owner each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_reserve_of_a_fresh_key_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let replicas = schema.replicas(REPLICAS).await;
    for round in 0..200 {
        let key = format!("Capability:cap:race:{round}");
        let outcomes = reserve_concurrently(&replicas, &key, "r", 8, NOW).await;
        assert_single_winner(&outcomes);
    }
}

/// 200 rounds of 8 replicas' callers racing to take over one crashed owner's expired
/// reservation: one new owner each round. Unlike a fresh key (decided by the insert alone), this
/// path is decided under the row lock; the pools are warm after the first round, so the callers
/// really overlap. The replicas rotate, so each holds the crashed owner's reservation in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_take_over_of_an_expired_reservation_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let mut replicas = schema.replicas(REPLICAS).await;
    for round in 0..200 {
        race_take_over(&replicas, &format!("Capability:cap:take-over:{round}"), 8).await;
        replicas.rotate_left(1);
    }
}

/// 200 rounds of 8 commit actions on 4 replicas claiming one fresh plan: one claim applies, every
/// other claimer learns the winner's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_plan_claim_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let mut replicas = schema.replicas(REPLICAS).await;
    for round in 0..200 {
        race_plan_claims(&replicas, &format!("race_{round}"), 8).await;
        replicas.rotate_left(1);
    }
}

/// 100 resumers on 4 replicas racing for one approved request: exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_claim_resume_across_replicas() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    race_claim_resume(&schema.replicas(REPLICAS).await, 100).await;
}

/// Replicas starting at once on a new schema all come up, and share one state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_at_once_share_one_schema() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let url = schema.url.clone();
            let name = schema.name.clone();
            tokio::spawn(async move { PostgresStore::connect_with_schema(&url, &name).await })
        })
        .collect();
    let mut replicas = Vec::new();
    for task in tasks {
        replicas.push(task.await.expect("connect task").expect("connect"));
    }
    let owner = reservation("k", "a", NOW + 100);
    assert_eq!(
        replicas[0].reserve(&owner, NOW).await,
        Ok(ReserveOutcome::Acquired)
    );
    assert_eq!(
        replicas[7]
            .reserve(&reservation("k", "b", NOW + 100), NOW)
            .await,
        Ok(ReserveOutcome::InProgress(owner.clone()))
    );
    assert_eq!(replicas[3].settle(&owner, completed(&owner)).await, Ok(()));
    assert_eq!(
        replicas[5].record("k", NOW).await,
        Ok(Some(completed(&owner)))
    );
}

/// A schema name that is not a plain identifier is refused before anything is sent.
#[tokio::test]
async fn schema_names_must_be_plain_identifiers() {
    // Refused before the URL is even parsed, so this runs without a server too.
    for name in [
        "",
        "Upper",
        "1st",
        "semi;colon",
        "quo\"te",
        "space d",
        &"x".repeat(64),
    ] {
        assert!(
            matches!(
                PostgresStore::connect_with_schema("postgres://nowhere.invalid/db", name).await,
                Err(StoreError::InvalidConfig(_))
            ),
            "{name:?}"
        );
    }
}

#[tokio::test]
async fn the_pool_is_bounded_by_max_connections() {
    let Some(schema) = TestSchema::new() else {
        return;
    };
    // 64 concurrent reservations through a store of two connections: all are served, by two
    // connections at most.
    let store = Arc::new(
        PostgresStore::connect_with(
            &schema.url,
            PostgresOptions::new()
                .schema(&schema.name)
                .max_connections(2),
        )
        .await
        .unwrap(),
    );
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .reserve(&reservation(&format!("k{i}"), "a", NOW + 100), NOW)
                    .await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(ReserveOutcome::Acquired));
    }
    let debug = format!("{store:?}");
    assert!(debug.contains("max_size: 2"), "{debug}");
    let size: usize = debug
        .split("size: ")
        .nth(2)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .expect("the pool status shows its size");
    assert!(size <= 2, "{debug}");
    // Zero is taken as one.
    assert_eq!(
        PostgresOptions::new().max_connections(0),
        PostgresOptions::new().max_connections(1)
    );
}

/// Webhook deliveries claimed through replicas sharing one database: copies of one delivery
/// sent to every replica at once run the handler once, and a later copy is a replay everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_delivery_sent_to_every_replica_runs_once() {
    use aip_connector::model::ConnectorFailure;
    use aip_connector::store::IdempotencyStore;
    use aip_connector::webhook::{StandardWebhooks, WebhookReceiver, WebhookSecret};

    let Some(schema) = TestSchema::new() else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let mut receivers = Vec::new();
    for store in schema.replicas(REPLICAS).await {
        let counted = Arc::clone(&runs);
        let store: Arc<dyn IdempotencyStore> = store;
        receivers.push(
            WebhookReceiver::builder("bookings", StandardWebhooks)
                .secret(WebhookSecret::new("s"))
                .store(store)
                .handler(move |_| {
                    let counted = Arc::clone(&counted);
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        Ok::<_, ConnectorFailure>(())
                    }
                })
                .build()
                .unwrap(),
        );
    }
    let body = aip_connector::webhook::Bytes::from_static(b"{}");
    let headers = receivers[0].sign("msg_1", receivers[0].now_ms(), &body);
    let copies: Vec<_> = (0..40)
        .map(|n| {
            let receiver = receivers[n % REPLICAS].clone();
            let (headers, body) = (headers.clone(), body.clone());
            tokio::spawn(
                async move { receiver.receive(&headers, body).await.map_err(|e| e.code()) },
            )
        })
        .collect();
    let mut taken = 0;
    for copy in copies {
        match copy.await.unwrap() {
            Ok(_) => taken += 1,
            Err(code) => assert!(
                [
                    aip_connector::codes::WEBHOOK_IN_PROGRESS,
                    aip_connector::codes::WEBHOOK_REPLAYED
                ]
                .contains(&code),
                "{code}"
            ),
        }
    }
    assert_eq!(taken, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for receiver in &receivers {
        let replay = receiver.receive(&headers, body.clone()).await.unwrap_err();
        assert_eq!(replay.code(), aip_connector::codes::WEBHOOK_REPLAYED);
    }
}
