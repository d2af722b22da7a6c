//! `TestHost`: a connector's approvals, credentials and tenants driven through the real host
//! with a few lines of set-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::codes;
use aip_connector::host::{ApproverMemberships, ExternalAccountRef, HostBuildError};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{Action, ActionResultStatus, ApprovalDecisionKind, StreamChunkKind};
use aip_connector::prelude::*;
use aip_connector::store::{ApprovalStatus, MemoryStore, SharedStore};
use aip_connector_testkit::{TEST_CREDENTIAL_SECRET, TEST_DECISION_REASON, TEST_TENANT, TestHost};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Payment {
    cents: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Paid {
    payment_id: String,
}

#[derive(Clone, Default)]
struct Payroll {
    payments: Arc<AtomicUsize>,
}

#[connector(id = "payroll")]
impl Payroll {
    /// Pays out after a finance approval by someone other than the requester.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        approval(required, selector = role("finance"), evidence = [reason], separation(requester_must_differ)),
    )]
    async fn pay(
        &self,
        payment: Payment,
        key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.payments.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("pay-{}-{}", payment.cents, key.as_str()),
        })
    }

    /// Pays out a large sum after two finance approvers.
    #[capability(
        risk = high,
        side_effects = [write, financial],
        idempotency(required, scope = tenant),
        data(sensitivity = confidential),
        approval(required, selector = role("finance"), evidence = [reason], distinct_principals = 2, separation(requester_must_differ)),
    )]
    async fn pay_large(
        &self,
        payment: Payment,
        key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.payments.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("large-{}-{}", payment.cents, key.as_str()),
        })
    }

    /// Reads the balance with the deployment's credential.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, scopes = ["payroll.read"]),
    )]
    async fn balance(
        &self,
        _payment: Payment,
        credential: Credential,
    ) -> Result<Paid, ConnectorFailure> {
        Ok(Paid {
            payment_id: format!("balance-for-{}", credential.id()),
        })
    }
}

/// A read that accepts credentials of one identity provider only.
struct Crm;

#[connector(id = "crm")]
impl Crm {
    /// Reads a contact with a credential of `idp.example`.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, issuers = ["idp.example"], scopes = ["crm.read"]),
    )]
    async fn contact(&self, credential: Credential) -> Result<String, ConnectorFailure> {
        Ok(credential.issuer().to_owned())
    }

    /// Reads a deal with a credential of another identity provider.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        credentials(required, issuers = ["sso.example"], scopes = ["crm.read"]),
    )]
    async fn deal(&self, credential: Credential) -> Result<String, ConnectorFailure> {
        Ok(credential.issuer().to_owned())
    }
}

/// A deployment's credential provider that hands each tenant its own account's credential.
struct PerTenant;

impl aip_connector::host::CredentialProvider for PerTenant {
    fn resolve<'a>(
        &'a self,
        _capability: &'a aip_connector::model::Capability,
        caller: &'a aip_connector::host::TrustedContext,
    ) -> aip_connector::invocation::BoxFuture<
        'a,
        Result<Option<aip_connector::CredentialHandle>, ConnectorFailure>,
    > {
        let credential = caller.tenant.as_ref().map(|tenant| {
            aip_connector::CredentialHandle::new(
                format!("account-of-{}", tenant.id),
                "idp.example",
                Secret::new(format!("token-{}", tenant.id)),
            )
            .with_scopes(["payroll.read"])
            .with_tenant(tenant.id.clone())
        });
        Box::pin(std::future::ready(Ok(credential)))
    }
}

/// Found by a warehouse trial, which had to leave `TestHost` for a bare `Host` to test a
/// provider that hands each tenant its own credential.
#[tokio::test]
async fn a_deployments_credential_provider_serves_each_tenants_callers() {
    let test = TestHost::builder(Payroll::default())
        .credential_provider(PerTenant)
        .build()
        .unwrap();
    let balance = || Action::new("cap:payroll:balance", json!({"cents": 1}));
    let mut outputs = Vec::new();
    for tenant in ["acme", "globex"] {
        let result = test.invoke_in(tenant, "user:ada", balance()).await;
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
        outputs.push(result.output.unwrap()["payment_id"].clone());
    }
    assert_eq!(
        outputs,
        [
            json!("balance-for-account-of-acme"),
            json!("balance-for-account-of-globex")
        ]
    );
}

/// Found by an author trial: the test credential was always issued by `TEST_ISSUER`, so a
/// capability that restricts issuers refused every call (the conformance suite already picked
/// an accepted issuer). It now takes the first issuer the called capability accepts, or the
/// one the test names.
#[tokio::test]
async fn the_test_credential_is_issued_by_an_accepted_issuer() {
    let action = || Action::new("cap:crm:contact", json!({}));
    let accepted = TestHost::builder(Crm)
        .credential(["crm.read"])
        .build()
        .unwrap();
    let read = accepted.invoke("user:ada", action()).await;
    assert_eq!(read.status, ActionResultStatus::Completed, "{read:?}");
    assert_eq!(read.output, Some(json!("idp.example")));
    // Per capability: the other one trusts another identity provider and is served its own.
    let deal = accepted
        .invoke("user:ada", Action::new("cap:crm:deal", json!({})))
        .await;
    assert_eq!(deal.output, Some(json!("sso.example")), "{deal:?}");

    let foreign = TestHost::builder(Crm)
        .credential(["crm.read"])
        .credential_issuer("idp.elsewhere")
        .build()
        .unwrap();
    let refused = foreign.invoke("user:ada", action()).await;
    assert_eq!(
        refused.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::CREDENTIAL_ISSUER_DENIED),
        "{refused:?}"
    );
}

/// A connector whose write is keyed by the external account.
struct Ledger;

#[connector(id = "ledger")]
impl Ledger {
    /// Posts once per key and account.
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = external_account),
        data(sensitivity = internal),
    )]
    async fn post(&self, payment: Payment, key: IdempotencyKey) -> Result<Paid, ConnectorFailure> {
        Ok(Paid {
            payment_id: format!("{}@{}", payment.cents, key.scoped()),
        })
    }
}

#[derive(Deserialize, JsonSchema)]
struct Erasure {
    email: String,
}

/// A connector whose gated capability handles personal data: its approval record keeps no
/// input, so an approved action is re-submitted rather than resumed from the store.
#[derive(Clone, Default)]
struct Privacy {
    erasures: Arc<AtomicUsize>,
}

#[connector(id = "privacy")]
impl Privacy {
    /// Erases a reporter after a data-protection officer approves.
    #[capability(
        risk = high,
        side_effects = [delete],
        idempotency(required),
        data(sensitivity = internal, pii),
        approval(selector = role("dpo"), evidence = [reason]),
    )]
    async fn erase(
        &self,
        erasure: Erasure,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.erasures.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("erased-{}", erasure.email.len()),
        })
    }
}

#[derive(Deserialize, JsonSchema)]
struct Slot {
    slot_id: String,
}

/// A connector whose approvals require every kind of evidence, found by an author trial: the
/// test host's approvals carried a reason only, and a policy that also required an input
/// snapshot refused them (`policy.approval_evidence_missing`).
#[derive(Clone, Default)]
struct Calendar {
    bookings: Arc<AtomicUsize>,
}

#[connector(id = "calendar")]
impl Calendar {
    /// Books a slot after a calendar admin approves, with every kind of evidence.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        approval(selector = role("calendar-admin"), evidence = [reason, input_snapshot, policy_decision, external_ticket, attachment]),
    )]
    async fn book(
        &self,
        slot: Slot,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.bookings.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("booked-{}", slot.slot_id.len()),
        })
    }

    /// Books a patient's slot: the input is personal data, so the approval record keeps only
    /// its hash.
    #[capability(
        risk = high,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal, pii),
        approval(selector = role("calendar-admin"), evidence = [reason, input_snapshot]),
    )]
    async fn book_patient(
        &self,
        slot: Slot,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.bookings.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("booked-patient-{}", slot.slot_id.len()),
        })
    }
}

fn finance() -> ApproverMemberships {
    ApproverMemberships::new().with_role("finance")
}

#[tokio::test]
async fn an_approval_is_granted_by_a_named_approver_and_resumed_once() {
    let payroll = Payroll::default();
    let test = TestHost::builder(payroll.clone())
        .approver("user:alice", finance())
        .build()
        .unwrap();
    let pending = test
        .invoke(
            "user:ada",
            Action::new("cap:payroll:pay", json!({ "cents": 500 })).with_idempotency_key("p1"),
        )
        .await;
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    let id = pending.approval_id().expect("the gate names its approval");

    // The requester may not approve, another tenant does not see the request.
    let own = test.approve(&id, "user:ada").await.unwrap_err();
    assert_eq!(own.code, codes::POLICY_SEPARATION_OF_DUTIES_REQUESTER);
    let elsewhere = test
        .host()
        .approval_view(&id, &test.caller_in("tenant-other", "user:alice"))
        .await
        .unwrap();
    assert!(elsewhere.is_none());

    let record = test.approve(&id, "user:alice").await.unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    let paid = test.resume(&id, "user:ada").await;
    assert_eq!(paid.status, ActionResultStatus::Completed, "{paid:?}");
    let paid: Paid = paid.output_as().unwrap();
    assert!(paid.payment_id.starts_with("pay-"), "{paid:?}");
    let again = test.resume(&id, "user:ada").await;
    assert_ne!(again.status, ActionResultStatus::Completed);
    assert_eq!(payroll.payments.load(Ordering::SeqCst), 1);
    assert_eq!(test.tenant().id, TEST_TENANT);
}

/// `approve` supplies, beside its reason, an artifact of every evidence kind the policy
/// requires, which the host accepts: the input snapshot names the approved input by the
/// record's fingerprint (redacted when the record keeps no input), the policy decision the
/// policy snapshot; the approved action then runs once.
#[tokio::test]
async fn an_approval_carries_every_kind_of_evidence_its_policy_requires() {
    let calendar = Calendar::default();
    let test = TestHost::builder(calendar.clone())
        .approver(
            "user:alice",
            ApproverMemberships::new().with_role("calendar-admin"),
        )
        .build()
        .unwrap();
    let cases = [
        (
            "cap:calendar:book",
            vec![
                "input_snapshot",
                "policy_decision",
                "external_ticket",
                "attachment",
            ],
            true,
        ),
        ("cap:calendar:book_patient", vec!["input_snapshot"], false),
    ];
    for (n, (capability, kinds, retained)) in cases.into_iter().enumerate() {
        let pending = test
            .invoke(
                "user:ada",
                Action::new(capability, json!({ "slot_id": "slot-2024-05-01-0900" }))
                    .with_idempotency_key(format!("b{n}")),
            )
            .await;
        let id = pending.approval_id().expect("the gate names its approval");
        let record = test
            .approve(&id, "user:alice")
            .await
            .unwrap_or_else(|refused| panic!("{capability}: {refused:?}"));
        assert_eq!(record.status, ApprovalStatus::Approved, "{capability}");
        assert_eq!(record.input_retained, retained, "{capability}");

        let decision = record.approving_decision().expect("an approving decision");
        let decision_id = decision.decision_id.as_deref().unwrap();
        assert_eq!(
            decision.reason.as_deref(),
            Some(TEST_DECISION_REASON),
            "{capability}"
        );
        let stored: Vec<&str> = decision.evidence.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(stored, kinds, "{capability}: only what the policy requires");
        for artifact in &decision.evidence {
            assert_eq!(artifact.id, format!("{decision_id}/{}", artifact.kind));
            let expected_hash = match artifact.kind.as_str() {
                "input_snapshot" => Some(record.input_hash.as_str()),
                "policy_decision" => Some(record.policy_hash.as_str()),
                _ => None,
            };
            assert_eq!(artifact.hash.as_deref(), expected_hash, "{capability}");
            let redacted = artifact.kind == "input_snapshot" && !retained;
            assert_eq!(artifact.redacted, redacted, "{capability}: {artifact:?}");
        }

        let booked = test.resume(&id, "user:ada").await;
        assert_eq!(booked.status, ActionResultStatus::Completed, "{booked:?}");
    }
    assert_eq!(calendar.bookings.load(Ordering::SeqCst), 2);
}

/// A test host over a SQLite file: an approval requested before a "restart" (a second test
/// host over the same file) is granted and resumed after it, once.
#[tokio::test]
async fn a_test_host_over_sqlite_keeps_its_records_across_a_restart() {
    use aip_connector::store::SqliteStore;

    let path = std::env::temp_dir().join(format!(
        "aip-testkit-test-host-{}-{}.db",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_file(&path);
    let open = || -> SharedStore { Arc::new(SqliteStore::open(&path).unwrap()) };
    let payroll = Payroll::default();
    let id = {
        let before = TestHost::builder(payroll.clone())
            .approver("user:alice", finance())
            .store(open())
            .build()
            .unwrap();
        let pending = before
            .invoke(
                "user:ada",
                Action::new("cap:payroll:pay", json!({ "cents": 500 })).with_idempotency_key("p1"),
            )
            .await;
        assert_eq!(pending.status, ActionResultStatus::PendingApproval);
        pending.approval_id().expect("the gate names its approval")
    };
    let after = TestHost::builder(payroll.clone())
        .approver("user:alice", finance())
        .store(open())
        .build()
        .unwrap();
    let record = after
        .store()
        .approval(&id)
        .await
        .unwrap()
        .expect("kept in the file");
    assert_eq!(record.status, ApprovalStatus::Pending);
    after.approve(&id, "user:alice").await.unwrap();
    let paid = after.resume(&id, "user:ada").await;
    assert_eq!(paid.status, ActionResultStatus::Completed, "{paid:?}");
    assert_eq!(payroll.payments.load(Ordering::SeqCst), 1);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test]
async fn a_denial_closes_the_request() {
    let test = TestHost::builder(Payroll::default())
        .tenant("acme")
        .approver("user:alice", finance())
        .build()
        .unwrap();
    let pending = test
        .invoke(
            "user:ada",
            Action::new("cap:payroll:pay", json!({ "cents": 5 })).with_idempotency_key("p1"),
        )
        .await;
    let id = pending.approval_id().unwrap();
    let record = test.deny(&id, "user:alice").await.unwrap();
    assert_eq!(record.status, ApprovalStatus::Denied);
    assert_eq!(record.tenant_id.as_deref(), Some("acme"));
}

/// Each `approve`/`deny`/`revoke` is a decision of its own, not a resend of the approver's
/// earlier one: an approver who approved may deny while the request is pending, and revoke
/// an approval that completed the request, without `policy.approval_mismatch`.
#[tokio::test]
async fn an_approver_may_deny_or_revoke_after_approving() {
    let payroll = Payroll::default();
    let test = TestHost::builder(payroll.clone())
        .approver("user:alice", finance())
        .approver("user:bob", finance())
        .build()
        .unwrap();
    let request = |capability: &str, key: &str| {
        Action::new(capability, json!({ "cents": 900 })).with_idempotency_key(key)
    };

    // Two approvers needed: alice's approval leaves the request pending, her denial closes it.
    let pending = test
        .invoke("user:ada", request("cap:payroll:pay_large", "large-1"))
        .await;
    let id = pending.approval_id().expect("gated");
    let approved = test.approve(&id, "user:alice").await.unwrap();
    assert_eq!(approved.status, ApprovalStatus::Pending);
    let denied = test.deny(&id, "user:alice").await.unwrap();
    assert_eq!(denied.status, ApprovalStatus::Denied);
    let kinds: Vec<_> = denied.decisions.iter().map(|d| d.decision).collect();
    assert_eq!(
        kinds,
        [ApprovalDecisionKind::Approved, ApprovalDecisionKind::Denied]
    );
    assert_ne!(
        denied.decisions[0].decision_id,
        denied.decisions[1].decision_id
    );

    // One approver needed: once approved the request is closed to a denial (the truthful
    // `not_pending`), and the approver revokes her approval by its decision id instead.
    let pending = test
        .invoke("user:ada", request("cap:payroll:pay", "small-1"))
        .await;
    let id = pending.approval_id().expect("gated");
    let approved = test.approve(&id, "user:alice").await.unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);
    let late = test.deny(&id, "user:alice").await.unwrap_err();
    assert_eq!(late.code, codes::POLICY_APPROVAL_NOT_PENDING, "{late:?}");
    let approval = approved.decisions[0]
        .decision_id
        .as_deref()
        .expect("every decision is stored with an id");
    let revoked = test.revoke(&id, "user:alice", approval).await.unwrap();
    assert_eq!(revoked.status, ApprovalStatus::Revoked);
    let resumed = test.resume(&id, "user:ada").await;
    assert_ne!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(payroll.payments.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_credential_is_handed_out_only_when_asked_for_and_never_shown() {
    let action = || Action::new("cap:payroll:balance", json!({ "cents": 0 }));
    let without = TestHost::builder(Payroll::default()).build().unwrap();
    let refused = without.invoke("user:ada", action()).await;
    assert_eq!(
        refused.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::CREDENTIAL_MISSING)
    );

    let with = TestHost::builder(Payroll::default())
        .credential(["payroll.read"])
        .build()
        .unwrap();
    let read = with.invoke("user:ada", action()).await;
    assert_eq!(read.status, ActionResultStatus::Completed, "{read:?}");
    assert!(!format!("{read:?} {with:?}").contains(TEST_CREDENTIAL_SECRET));
}

#[tokio::test]
async fn an_account_scoped_key_needs_the_account() {
    let refused = TestHost::builder(Ledger).build().unwrap_err();
    assert!(matches!(
        refused,
        HostBuildError::ExternalAccountMissing { .. }
    ));
    let test = TestHost::builder(Ledger)
        .external_account(ExternalAccountRef {
            id: "acct-1".into(),
            system: "bank".into(),
        })
        .build()
        .unwrap();
    let posted = test
        .invoke(
            "user:ada",
            Action::new("cap:ledger:post", json!({ "cents": 7 })).with_idempotency_key("k"),
        )
        .await;
    assert_eq!(
        posted.output.unwrap()["payment_id"],
        "7@ExternalAccount:bank:acct-1:k"
    );
}

/// `resume` works for a redacted capability too: the record kept no input, so `resume_approved`
/// refuses with `policy.approval_resubmission_required`, and `TestHost::resume` re-submits the
/// gated action with the approval attached, once.
#[tokio::test]
async fn a_redacted_action_is_resumed_by_resubmitting_it() {
    let privacy = Privacy::default();
    let test = TestHost::builder(privacy.clone())
        .approver("user:dpo", ApproverMemberships::new().with_role("dpo"))
        .build()
        .unwrap();
    let pending = test
        .invoke(
            "user:ada",
            Action::new("cap:privacy:erase", json!({ "email": "ada@example.com" }))
                .with_idempotency_key("e1"),
        )
        .await;
    let id = pending.approval_id().expect("the gate names its approval");
    let record = test.approve(&id, "user:dpo").await.unwrap();
    assert!(
        !record.input_retained,
        "PII keeps the input out of the record"
    );

    let from_store = test
        .host()
        .resume_approved(&id, &test.caller("user:ada"))
        .await;
    let error = from_store.error.as_ref().expect("refused");
    assert_eq!(error.code, codes::POLICY_APPROVAL_RESUBMISSION_REQUIRED);
    assert_eq!(error.retryable, Some(false));
    assert_eq!(error.details.as_ref().unwrap()["approval_id"], id.as_str());
    assert_eq!(privacy.erasures.load(Ordering::SeqCst), 0);

    let erased = test.resume(&id, "user:ada").await;
    assert_eq!(erased.status, ActionResultStatus::Completed, "{erased:?}");
    let again = test.resume(&id, "user:ada").await;
    assert!(
        again.is_idempotent_replay() || again.status != ActionResultStatus::Completed,
        "{again:?}"
    );
    assert_eq!(privacy.erasures.load(Ordering::SeqCst), 1);
}

/// A restarted `TestHost` never saw the redacted action it is to resume: `resume` answers
/// `policy.approval_resubmission_required`, and `resume_sent` re-submits the action the test
/// first sent. Another input is refused; the approved one runs once.
#[tokio::test]
async fn a_restarted_test_host_resumes_a_redacted_action_it_is_given() {
    let privacy = Privacy::default();
    let store: SharedStore = Arc::new(MemoryStore::default());
    let host = || {
        TestHost::builder(privacy.clone())
            .approver("user:dpo", ApproverMemberships::new().with_role("dpo"))
            .store(store.clone())
            .build()
            .unwrap()
    };
    let sent = Action::new("cap:privacy:erase", json!({ "email": "ada@example.com" }))
        .with_idempotency_key("e1");
    let id = host()
        .invoke("user:ada", sent.clone())
        .await
        .approval_id()
        .expect("the gate names its approval");

    let after = host();
    after.approve(&id, "user:dpo").await.unwrap();
    let unknown = after.resume(&id, "user:ada").await;
    assert_eq!(
        unknown.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::POLICY_APPROVAL_RESUBMISSION_REQUIRED),
        "{unknown:?}"
    );
    let mut forged = sent.clone();
    forged.input = json!({ "email": "grace@example.com" });
    let refused = after.resume_sent(&id, "user:ada", forged).await;
    // The decision was given for the other input's hash.
    assert_eq!(
        refused.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::POLICY_APPROVAL_UNVERIFIED),
        "{refused:?}"
    );
    assert_eq!(privacy.erasures.load(Ordering::SeqCst), 0);

    let erased = after.resume_sent(&id, "user:ada", sent).await;
    assert_eq!(erased.status, ActionResultStatus::Completed, "{erased:?}");
    assert_eq!(privacy.erasures.load(Ordering::SeqCst), 1);
}

/// A streaming capability, for `TestHost::invoke_stream`.
struct Countdown;

#[connector(id = "countdown")]
impl Countdown {
    /// Counts down from `cents`, one chunk per step.
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn count(
        &self,
        payment: Payment,
        steps: StreamSink<u64>,
    ) -> Result<u64, ConnectorFailure> {
        for step in (1..=payment.cents).rev() {
            steps.send(step).await?;
        }
        Ok(0)
    }
}

#[tokio::test]
async fn a_streaming_capability_streams_through_the_test_host() {
    let test = TestHost::builder(Countdown).build().unwrap();
    let chunks = test
        .invoke_stream(
            "user:ada",
            Action::new("cap:countdown:count", json!({ "cents": 3 })),
        )
        .collect()
        .await;
    let data: Vec<_> = chunks
        .iter()
        .filter(|c| c.kind == StreamChunkKind::Data)
        .filter_map(|c| c.data.clone())
        .collect();
    assert_eq!(data, [json!(3), json!(2), json!(1)]);
    assert_eq!(
        chunks.last().map(|c| c.kind),
        Some(StreamChunkKind::Done),
        "{chunks:?}"
    );
}

/// A statement export that streams, once finance approved it.
#[derive(Clone, Default)]
struct Statements {
    runs: Arc<AtomicUsize>,
}

#[derive(Serialize, JsonSchema)]
struct Line {
    n: u64,
}

#[connector(id = "statements")]
impl Statements {
    /// Streams one line per cent, after a finance approval.
    #[capability(
        risk = medium,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn export(
        &self,
        payment: Payment,
        _key: IdempotencyKey,
        _approval: Approval,
        sink: StreamSink<Line>,
    ) -> Result<Paid, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        for n in 0..payment.cents {
            sink.send(Line { n }).await?;
        }
        Ok(Paid {
            payment_id: format!("lines-{}", payment.cents),
        })
    }

    /// The same export of restricted data: the approval record keeps no input.
    #[capability(
        risk = medium,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = restricted),
        approval(required, selector = role("finance"), evidence = [reason]),
    )]
    async fn export_restricted(
        &self,
        payment: Payment,
        _key: IdempotencyKey,
        _approval: Approval,
        sink: StreamSink<Line>,
    ) -> Result<Paid, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        for n in 0..payment.cents {
            sink.send(Line { n }).await?;
        }
        Ok(Paid {
            payment_id: format!("restricted-lines-{}", payment.cents),
        })
    }
}

/// Streams `capability` as `user:ada` (the gate answers `pending_approval`), then has
/// `user:alice` approve it.
async fn streamed_and_approved(test: &TestHost, capability: &str, key: &str) -> ApprovalId {
    let action = Action::new(capability, json!({ "cents": 2 })).with_idempotency_key(key);
    let pending = test
        .invoke_stream("user:ada", action)
        .result()
        .await
        .unwrap();
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    let id = pending.approval_id().unwrap();
    test.approve(&id, "user:alice").await.unwrap();
    id
}

#[tokio::test]
async fn an_approved_stream_is_resumed_as_a_stream() {
    let statements = Statements::default();
    let test = TestHost::builder(statements.clone())
        .approver("user:alice", finance())
        .build()
        .unwrap();
    let id = streamed_and_approved(&test, "cap:statements:export", "s1").await;

    // The host's `resume_approved` answers one result, which a streaming handler cannot give:
    // refused, and nothing claimed.
    let unary = test
        .host()
        .resume_approved(&id, &test.caller("user:ada"))
        .await;
    assert_eq!(
        unary.error.map(|e| e.code),
        Some(codes::EXECUTION_MODE_UNSUPPORTED.to_owned())
    );
    let chunks = test.resume_stream(&id, "user:ada").await.collect().await;
    let kinds: Vec<StreamChunkKind> = chunks.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            StreamChunkKind::Data,
            StreamChunkKind::Data,
            StreamChunkKind::Done
        ]
    );
    assert_eq!(statements.runs.load(Ordering::SeqCst), 1);

    // `resume` reads another approved stream to its result.
    let id = streamed_and_approved(&test, "cap:statements:export", "s2").await;
    let paid: Paid = test.resume(&id, "user:ada").await.output_as().unwrap();
    assert_eq!(paid.payment_id, "lines-2");
    assert_eq!(statements.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_approved_stream_of_restricted_data_is_re_submitted_as_a_stream() {
    let statements = Statements::default();
    let test = TestHost::builder(statements.clone())
        .approver("user:alice", finance())
        .build()
        .unwrap();
    let id = streamed_and_approved(&test, "cap:statements:export_restricted", "r1").await;
    // The record kept no input: the host cannot resume it from the store.
    let record = test.host().approval(&id).await.unwrap().unwrap();
    assert!(!record.input_retained);

    let chunks = test.resume_stream(&id, "user:ada").await.collect().await;
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    let result: aip_connector::model::ActionResult =
        serde_json::from_value(chunks[2].data.clone().unwrap()).unwrap();
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(statements.runs.load(Ordering::SeqCst), 1);

    let id = streamed_and_approved(&test, "cap:statements:export_restricted", "r2").await;
    let resumed = test.resume(&id, "user:ada").await;
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(statements.runs.load(Ordering::SeqCst), 2);
}

/// A gate whose approval requests expire after a minute.
#[derive(Clone, Default)]
struct Offboarding {
    offboarded: Arc<AtomicUsize>,
}

#[connector(id = "offboarding")]
impl Offboarding {
    /// Closes an employee's accounts, once an HR lead approves within the hour.
    #[capability(
        risk = critical,
        side_effects = [delete],
        idempotency(required),
        data(sensitivity = internal),
        approval(required, selector = role("hr-lead"), evidence = [reason], ttl_ms = 3_600_000),
    )]
    async fn offboard(
        &self,
        payment: Payment,
        _key: IdempotencyKey,
        _approval: Approval,
    ) -> Result<Paid, ConnectorFailure> {
        self.offboarded.fetch_add(1, Ordering::SeqCst);
        Ok(Paid {
            payment_id: format!("off-{}", payment.cents),
        })
    }
}

/// With a manual clock, an approval's expiry is tested without waiting, with the test host's
/// helpers (an approval trial had to give them up to set a clock).
#[tokio::test]
async fn a_manual_clock_expires_an_approval_without_waiting() {
    let clock = Arc::new(aip_connector::store::ManualClock::new());
    let offboarding = Offboarding::default();
    let test = TestHost::builder(offboarding.clone())
        .approver("user:lead", ApproverMemberships::new().with_role("hr-lead"))
        .clock(clock.clone())
        .build()
        .unwrap();
    let action = || {
        Action::new("cap:offboarding:offboard", json!({ "cents": 7 })).with_idempotency_key("off-7")
    };
    let pending = test.invoke("user:ada", action()).await;
    let approval = pending
        .approval_id()
        .expect("the offboarding waits for approval");
    clock.advance(61 * 60 * 1000);
    let late = test.approve(&approval, "user:lead").await.unwrap_err();
    assert_eq!(late.code, codes::POLICY_APPROVAL_EXPIRED);
    let replay = test.invoke("user:ada", action()).await;
    assert_eq!(
        replay.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::POLICY_APPROVAL_EXPIRED),
        "{replay:?}"
    );
    assert_eq!(offboarding.offboarded.load(Ordering::SeqCst), 0);
}

/// A provider job that runs until it is stopped.
#[derive(Clone, Default)]
struct Jobs {
    /// Notified when a run starts waiting on its provider.
    waiting: Arc<tokio::sync::Notify>,
}

#[connector(id = "jobs")]
impl Jobs {
    /// Runs a job until it is stopped.
    #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    async fn run(&self, _payment: Payment, stop: Cancellation) -> Result<Paid, ConnectorFailure> {
        self.waiting.notify_one();
        stop.cancelled().await;
        Err(ConnectorFailure::permanent(
            "jobs.stopped",
            "the job was stopped",
            "jobs",
        ))
    }

    /// Watches a job, reporting progress, until it is stopped.
    #[capability(risk = low, side_effects = [read], data(sensitivity = internal))]
    async fn watch(
        &self,
        _payment: Payment,
        sink: StreamSink<Paid>,
        stop: Cancellation,
    ) -> Result<Paid, ConnectorFailure> {
        sink.progress(json!({ "stage": "queued" })).await?;
        self.waiting.notify_one();
        stop.cancelled().await;
        Err(ConnectorFailure::permanent(
            "jobs.stopped",
            "the watch was stopped",
            "jobs",
        ))
    }
}

/// A migration trial cancelled a streaming tool with `spawn_invoke`, which calls it the plain way
/// (`execution.mode_unsupported`); `spawn_invoke_stream` starts it streaming.
#[tokio::test]
async fn a_running_stream_is_cancelled_through_the_test_host() {
    use aip_connector::host::CancelOutcome;
    use aip_connector_testkit::{assert_cancelled, assert_failed};

    let jobs = Jobs::default();
    let test = TestHost::builder(jobs.clone()).build().unwrap();
    let plain = test
        .spawn_invoke(
            "user:ada",
            Action::new("cap:jobs:watch", json!({ "cents": 1 })),
        )
        .await
        .unwrap();
    assert_failed!(plain, codes::EXECUTION_MODE_UNSUPPORTED);

    let action = Action::new("cap:jobs:watch", json!({ "cents": 1 }));
    let id = action.id.clone();
    let running = test.spawn_invoke_stream("user:ada", action);
    jobs.waiting.notified().await;
    assert_eq!(test.cancel(&id, "user:ada"), CancelOutcome::Cancelled);
    assert_cancelled!(running.await.unwrap());
}

/// An author trial cancelled a call through `Arc<TestHost>`, a spawned task and
/// `test.host().cancel_as(..)`: `spawn_invoke`, `cancel` and `assert_cancelled!` say it in three
/// lines.
#[tokio::test]
async fn a_running_action_is_cancelled_through_the_test_host() {
    use aip_connector::host::CancelOutcome;
    use aip_connector_testkit::{assert_cancelled, assert_failed};

    let jobs = Jobs::default();
    let test = TestHost::builder(jobs.clone()).build().unwrap();
    let action = Action::new("cap:jobs:run", json!({ "cents": 1 }));
    let id = action.id.clone();
    let running = test.spawn_invoke("user:ada", action);
    jobs.waiting.notified().await;
    // Another caller's cancel does not reach it (the server's `cancel_as` rule).
    assert_ne!(test.cancel(&id, "user:mallory"), CancelOutcome::Cancelled);
    assert_eq!(test.cancel(&id, "user:ada"), CancelOutcome::Cancelled);
    assert_cancelled!(running.await.unwrap());

    // A result that is not `cancelled` fails the assertion, saying what it was.
    let refused = test
        .invoke("user:ada", Action::new("cap:jobs:run", json!({})))
        .await;
    assert_failed!(refused, codes::ACTION_INPUT_SCHEMA_INVALID);
    let text = std::panic::catch_unwind(|| assert_cancelled!(refused, "stopped"))
        .expect_err("not cancelled");
    let text = text.downcast_ref::<String>().unwrap();
    assert!(
        text.starts_with(
            "stopped: expected `cancelled`, got `failed` (action.input_schema_invalid"
        ),
        "{text}"
    );
}
