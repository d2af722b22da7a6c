//! Resuming an approved streaming action: `resume_approved_stream` streams it exactly once, and
//! `resume_approved` refuses it before claiming anything (it would run without the stream its
//! handler needs and spend the approval on `execution.mode_unsupported`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{ApproverMemberships, Host, StaticApprovalAuthority, TrustedContext};
use aip_connector::ids::ApprovalId;
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ApprovalDecision, ApprovalDecisionKind, Principal,
    PrincipalKind, StreamChunk, StreamChunkKind,
};
use aip_connector::prelude::*;
use aip_connector::store::{ApprovalStatus, MemoryStore};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Export {
    rows: u32,
}

#[derive(Serialize, JsonSchema)]
struct Row {
    n: u32,
}

#[derive(Serialize, JsonSchema)]
struct Exported {
    rows: u32,
}

#[derive(Clone, Default)]
struct Warehouse {
    runs: Arc<AtomicUsize>,
}

#[connector(id = "warehouse")]
impl Warehouse {
    /// Streams a table out of the tenant, once a data steward approved it.
    #[capability(
        risk = medium,
        side_effects = [read],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        approval(required, selector = role("steward"), evidence = [reason]),
    )]
    async fn export(
        &self,
        export: Export,
        _key: IdempotencyKey,
        _approval: Approval,
        sink: StreamSink<Row>,
    ) -> Result<Exported, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        for n in 0..export.rows {
            sink.send(Row { n }).await?;
        }
        Ok(Exported { rows: export.rows })
    }
}

fn person(id: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(id, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(warehouse: Warehouse) -> Host {
    let steward = ApproverMemberships::new()
        .with_tenant("t1")
        .with_role("steward");
    Host::builder()
        .connector(warehouse)
        .store(Arc::new(MemoryStore::default()))
        .approval_authority(StaticApprovalAuthority::new().with("user:steward", steward))
        .build()
        .unwrap()
}

fn export_action() -> Action {
    Action::new("cap:warehouse:export", json!({ "rows": 3 })).with_idempotency_key("export-1")
}

/// Streams the export as `user:req` (the gate answers `pending_approval`), then approves it.
async fn gated_and_approved(host: &Host) -> ApprovalId {
    let pending = host
        .invoke_stream(export_action(), person("user:req"))
        .result()
        .await
        .expect("a terminal chunk");
    assert_eq!(pending.status, ActionResultStatus::PendingApproval);
    let approval = pending.approval_id().expect("the gate names its approval");
    let decision = ApprovalDecision::new(
        approval.clone(),
        ApprovalDecisionKind::Approved,
        Principal::new("user:steward", PrincipalKind::Human),
    )
    .with_reason("the table is internal")
    .with_decision_id("dec-steward");
    let record = host
        .record_approval_decision(decision, &person("user:steward"))
        .await
        .unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    approval
}

fn result_of(chunks: &[StreamChunk]) -> ActionResult {
    let last = chunks.last().expect("a terminal chunk");
    assert!(
        matches!(last.kind, StreamChunkKind::Done | StreamChunkKind::Error),
        "{chunks:?}"
    );
    serde_json::from_value(last.data.clone().unwrap()).unwrap()
}

#[tokio::test]
async fn an_approved_streaming_action_resumes_as_a_stream_exactly_once() {
    let warehouse = Warehouse::default();
    let host = host(warehouse.clone());
    let approval = gated_and_approved(&host).await;

    let gated_id = host.approval(&approval).await.unwrap().unwrap().action.id;
    let chunks = host
        .resume_approved_stream(&approval, person("user:req"))
        .collect()
        .await;
    assert!(chunks.iter().all(|c| c.action_id == gated_id), "{chunks:?}");
    let rows: Vec<_> = chunks
        .iter()
        .filter(|c| c.kind == StreamChunkKind::Data)
        .map(|c| c.data.clone().unwrap())
        .collect();
    assert_eq!(
        rows,
        [json!({ "n": 0 }), json!({ "n": 1 }), json!({ "n": 2 })]
    );
    let sequences: Vec<u64> = chunks.iter().map(|c| c.sequence).collect();
    assert_eq!(sequences, [0, 1, 2, 3]);
    let result = result_of(&chunks);
    assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
    assert_eq!(result.output, Some(json!({ "rows": 3 })));
    assert_eq!(warehouse.runs.load(Ordering::SeqCst), 1);

    // Exactly once: a second streamed resume is refused in its one terminal chunk.
    let again = host
        .resume_approved_stream(&approval, person("user:req"))
        .collect()
        .await;
    assert_eq!(again.len(), 1, "{again:?}");
    let again = result_of(&again);
    assert_eq!(
        again.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::POLICY_APPROVAL_ALREADY_RESUMED)
    );
    assert_eq!(again.action_id, gated_id);
    // So is `resume_approved`: the action ran, whatever mode it ran in.
    let unary = host.resume_approved(&approval, &person("user:req")).await;
    assert_eq!(
        unary.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::POLICY_APPROVAL_ALREADY_RESUMED)
    );
    assert_eq!(warehouse.runs.load(Ordering::SeqCst), 1);

    // The gated action's key now holds the streamed run's result.
    let replay = host
        .invoke_stream(export_action(), person("user:req"))
        .result()
        .await
        .unwrap();
    assert_eq!(replay.status, ActionResultStatus::Completed);
    assert!(replay.is_idempotent_replay());
}

#[tokio::test]
async fn resume_approved_refuses_a_streaming_action_without_claiming_it() {
    let warehouse = Warehouse::default();
    let host = host(warehouse.clone());
    let approval = gated_and_approved(&host).await;

    let refused = host.resume_approved(&approval, &person("user:req")).await;
    assert_eq!(refused.status, ActionResultStatus::Failed);
    let error = refused.error.as_ref().unwrap();
    assert_eq!(error.code, codes::EXECUTION_MODE_UNSUPPORTED);
    assert!(
        error.message.contains("resume_approved_stream"),
        "{error:?}"
    );
    assert_eq!(warehouse.runs.load(Ordering::SeqCst), 0);

    // Nothing was claimed: the streamed resume still runs it.
    let resumed = host
        .resume_approved_stream(&approval, person("user:req"))
        .result()
        .await
        .unwrap();
    assert_eq!(resumed.status, ActionResultStatus::Completed, "{resumed:?}");
    assert_eq!(warehouse.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_streamed_resume_gets_every_refusal_of_resume_approved_as_its_terminal_chunk() {
    let warehouse = Warehouse::default();
    let host = host(warehouse.clone());

    let unknown = host
        .resume_approved_stream(&ApprovalId::new(), person("user:req"))
        .collect()
        .await;
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].kind, StreamChunkKind::Error);
    // Under a fresh action id, the one its result names.
    assert_eq!(unknown[0].action_id, result_of(&unknown).action_id);
    assert_eq!(
        result_of(&unknown).error.map(|e| e.code),
        Some(codes::POLICY_APPROVAL_NOT_FOUND.to_owned())
    );

    let approval = gated_and_approved(&host).await;
    let gated_id = host.approval(&approval).await.unwrap().unwrap().action.id;
    let stranger = host
        .resume_approved_stream(&approval, person("user:other"))
        .collect()
        .await;
    assert_eq!(stranger.len(), 1);
    assert_eq!(stranger[0].action_id, gated_id);
    assert_eq!(
        result_of(&stranger).error.map(|e| e.code),
        Some(codes::AUTH_NOT_AUTHORIZED.to_owned())
    );
    assert_eq!(warehouse.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn two_racing_streamed_resumes_run_the_action_once() {
    let warehouse = Warehouse::default();
    let host = host(warehouse.clone());
    let approval = gated_and_approved(&host).await;

    let (a, b) = tokio::join!(
        host.resume_approved_stream(&approval, person("user:req"))
            .result(),
        host.resume_approved_stream(&approval, person("user:req"))
            .result(),
    );
    let mut codes_seen: Vec<Option<String>> = [a.unwrap(), b.unwrap()]
        .into_iter()
        .map(|r| r.error.map(|e| e.code))
        .collect();
    codes_seen.sort();
    // One ran; the other found the resume claimed (or, racing its reservation, the key busy).
    assert_eq!(codes_seen[0], None, "{codes_seen:?}");
    assert!(
        [
            Some(codes::POLICY_APPROVAL_ALREADY_RESUMED.to_owned()),
            Some(codes::IDEMPOTENCY_IN_PROGRESS.to_owned())
        ]
        .contains(&codes_seen[1]),
        "{codes_seen:?}"
    );
    assert_eq!(warehouse.runs.load(Ordering::SeqCst), 1);
}
