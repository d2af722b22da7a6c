//! A key sent to a capability that publishes no idempotency TTL is still kept for a bounded
//! time (`HostLimits::default_record_ttl_ms`): upstream would keep its result, personal data
//! included, for good (found by an HR author trial).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::host::{Host, HostLimits, TrustedContext};
use aip_connector::model::{
    Action, ActionResultStatus, IdempotencyRequirement, Principal, PrincipalKind,
};
use aip_connector::prelude::*;
use aip_connector::store::{Clock, IdempotencyStore, ManualClock, MemoryStore, Purged};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Recalled {
    copy: String,
}

#[derive(Clone, Default)]
struct Journal {
    reads: Arc<AtomicUsize>,
}

#[connector(id = "journal")]
impl Journal {
    /// Read a note back: a read declared `idempotency(unsupported)`, so no `ttl_ms` is
    /// published (the trial's personal-data read).
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(unsupported),
        data(sensitivity = regulated, pii = true)
    )]
    async fn recall(&self, note: Note) -> Result<Recalled, ConnectorFailure> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(Recalled { copy: note.text })
    }

    /// Read a note back once someone approved it: no `ttl_ms` published either.
    #[capability(
        risk = low,
        side_effects = [read],
        idempotency(unsupported),
        approval(required, selector = role("archivist"), evidence = [reason]),
        data(sensitivity = internal)
    )]
    async fn recall_approved(
        &self,
        note: Note,
        _approval: Approval,
    ) -> Result<Recalled, ConnectorFailure> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(Recalled { copy: note.text })
    }
}

/// The scoped key: `unsupported` publishes the default scope, `tenant`.
const KEY: &str = "Tenant:t1:k1";

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

#[test]
fn the_default_record_ttl_is_a_day() {
    assert_eq!(HostLimits::default().default_record_ttl_ms, 86_400_000);
}

#[tokio::test]
async fn a_key_sent_to_a_capability_without_a_ttl_is_kept_for_the_default_record_ttl() {
    let journal = Journal::default();
    let contract = journal.definition().capabilities[0]
        .capability
        .contract
        .clone()
        .expect("a generated capability has a contract");
    assert_eq!(
        (
            contract.idempotency.requirement,
            contract.idempotency.ttl_ms
        ),
        (IdempotencyRequirement::Unsupported, None),
        "the case under test: no TTL is published"
    );

    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::default();
    let host = Host::builder()
        .connector(journal.clone())
        .store(Arc::new(store.clone()))
        .clock(clock.clone())
        .limits(HostLimits::default().default_record_ttl_ms(5_000))
        .build()
        .expect("host builds");
    let recall = || {
        Action::new("cap:journal:recall", json!({ "text": "987-65-4321" }))
            .with_idempotency_key("k1")
    };

    // `ManualClock` is the system clock plus an offset: the claim time lies in this window.
    let before = clock.now_ms();
    let first = host.invoke(recall(), &caller()).await;
    assert_eq!(first.status, ActionResultStatus::Completed, "{first:?}");
    let stored_at = clock.now_ms();
    let record = store
        .record(KEY, stored_at)
        .await
        .expect("the store answers");
    let record = record.expect("the caller's key is tracked, as upstream tracks it");
    let expires_at = record.expires_at_ms.expect("the record expires");
    assert!(
        (before + 5_000..=stored_at + 5_000).contains(&expires_at),
        "claimed in {before}..={stored_at}, expires at {expires_at}"
    );

    // Within the TTL a resend replays.
    let mut resend = recall();
    resend.id = first.action_id.clone();
    let resent = host.invoke(resend, &caller()).await;
    assert_eq!(resent.status, ActionResultStatus::Completed, "{resent:?}");
    assert_eq!(journal.reads.load(Ordering::SeqCst), 1);

    // After it, the record is purged: the output is no longer kept.
    clock.advance(5_000);
    assert_eq!(
        host.purge_expired(10).await,
        Ok(Purged {
            records: 1,
            attempt_counts: 0
        })
    );
    assert_eq!(store.record(KEY, stored_at).await, Ok(None));
}

/// A pending approval's record is the exception: it holds no output, and its requester resumes
/// it by calling again with the key however long the approvers take, so it keeps the
/// contract's TTL, here none (a review: a day's bound would have turned that call into a new
/// request).
#[tokio::test]
async fn a_pending_approval_keeps_its_record_past_the_default_record_ttl() {
    let store = MemoryStore::default();
    let host = Host::builder()
        .connector(Journal::default())
        .store(Arc::new(store.clone()))
        .limits(HostLimits::default().default_record_ttl_ms(5_000))
        .build()
        .expect("host builds");
    let gated = Action::new("cap:journal:recall_approved", json!({ "text": "n1" }))
        .with_idempotency_key("k1");
    let pending = host.invoke(gated, &caller()).await;
    assert_eq!(
        pending.status,
        ActionResultStatus::PendingApproval,
        "{pending:?}"
    );
    let now = Clock::now_ms(&aip_connector::store::SystemClock);
    let record = store
        .record(KEY, now)
        .await
        .expect("the store answers")
        .expect("the pending approval is stored under the key");
    assert_eq!(record.expires_at_ms, None);
}
