//! What the host stores must be what a store can read back, and one caller's record must never
//! answer another caller: output nesting, connector failure details, the trusted identity's
//! text, and scoped keys built from ids that contain the key separator (from a store audit).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::VerifiedTenant;
use aip_connector::codes;
use aip_connector::host::{
    Deployment, Host, HostBuildError, HostLimits, MAX_STORED_DEPTH, MAX_STREAM_BUFFER,
    TrustedContext,
};
use aip_connector::model::{
    Action, ActionResult, ActionResultStatus, ExternalAccountRef, Principal, PrincipalKind,
    ProtocolError,
};
use aip_connector::prelude::*;
use aip_connector::store::SharedStore;
use aip_connector_tests::TempStoreFile;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Depth {
    /// Levels of nesting of the answer (a scalar is one level).
    levels: usize,
}

#[derive(Deserialize, JsonSchema)]
struct Size {
    /// Bytes of text in the answer.
    bytes: usize,
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Saved {
    run: usize,
    text: String,
}

/// A connector whose keyed writes answer with (or fail with details of) any nesting, and whose
/// principal-scoped write counts its runs.
#[derive(Clone, Default)]
struct Archive {
    runs: Arc<AtomicUsize>,
}

/// `levels` of nested arrays around a number.
fn nested(levels: usize) -> Value {
    let mut value = json!(0);
    for _ in 1..levels {
        value = Value::Array(vec![value]);
    }
    value
}

#[connector(id = "archive")]
impl Archive {
    /// Answers with a value nested `levels` deep.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn nest(&self, depth: Depth, _key: IdempotencyKey) -> Result<Value, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(nested(depth.levels))
    }

    /// Fails with details nested `levels` deep.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn refuse(&self, depth: Depth, _key: IdempotencyKey) -> Result<Saved, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(
            ConnectorFailure::permanent("archive.refused", "refused", "archive")
                .with_redacted_details(nested(depth.levels)),
        )
    }

    /// Answers `{"text": …}` with `bytes` bytes of text.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn fill(&self, size: Size, _key: IdempotencyKey) -> Result<Value, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(json!({ "text": "x".repeat(size.bytes) }))
    }

    /// Fails with details of `{"text": …}` with `bytes` bytes of text.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
    )]
    async fn refuse_at_length(
        &self,
        size: Size,
        _key: IdempotencyKey,
    ) -> Result<Saved, ConnectorFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(
            ConnectorFailure::permanent("archive.refused", "refused", "archive")
                .with_redacted_details(json!({ "text": "x".repeat(size.bytes) })),
        )
    }

    /// Saves a note once per key and principal.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = principal),
        data(sensitivity = internal),
    )]
    async fn save(&self, note: Note, _key: IdempotencyKey) -> Result<Saved, ConnectorFailure> {
        Ok(Saved {
            run: self.runs.fetch_add(1, Ordering::SeqCst),
            text: note.text,
        })
    }
}

fn caller(principal: &str) -> TrustedContext {
    TrustedContext::new(Principal::new(principal, PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(archive: Archive, store: SharedStore) -> Host {
    limited_host(archive, store, HostLimits::default())
}

fn limited_host(archive: Archive, store: SharedStore, limits: HostLimits) -> Host {
    Host::builder()
        .connector(archive)
        .store(store)
        .limits(limits)
        .build()
        .expect("the archive builds")
}

fn keyed(capability: &str, input: Value, key: &str) -> Action {
    let mut action = Action::new(capability, input);
    action.idempotency_key = Some(key.to_owned());
    action
}

/// The error of a failed result.
fn failure(result: &ActionResult) -> &ProtocolError {
    assert_eq!(result.status, ActionResultStatus::Failed, "{result:?}");
    result.error.as_ref().expect("a failed result has an error")
}

/// Runs `check` on a memory store and on a fresh SQLite file (whose reads are the ones that
/// refused deep values).
async fn on_each_store(check: impl AsyncFn(SharedStore)) {
    check(Arc::new(aip_connector::store::MemoryStore::new())).await;
    let file = TempStoreFile::new("stored-values");
    check(file.open()).await;
}

#[tokio::test]
async fn an_output_too_deep_to_read_back_fails_and_its_key_replays_the_failure() {
    on_each_store(async |store| {
        let archive = Archive::default();
        let host = host(archive.clone(), store);
        let deep = keyed(
            "cap:archive:nest",
            json!({ "levels": MAX_STORED_DEPTH + 50 }),
            "deep",
        );
        let first = host.invoke(deep.clone(), &caller("user:ana")).await;
        let error = failure(&first);
        assert_eq!(error.code, codes::ACTION_OUTPUT_SCHEMA_INVALID, "{error:?}");
        assert_eq!(error.retryable, Some(false), "{error:?}");
        assert_eq!(
            error.details.as_ref().unwrap()["max_output_depth"],
            MAX_STORED_DEPTH
        );
        assert!(first.output.is_none(), "{first:?}");
        // The settled failure reads back: a resend replays it rather than failing
        // `storage.unavailable` for good.
        let again = host.invoke(deep, &caller("user:ana")).await;
        assert_eq!(failure(&again).code, codes::ACTION_OUTPUT_SCHEMA_INVALID);
        assert_eq!(archive.runs.load(Ordering::SeqCst), 1);

        // At the limit, the output is stored and replayed whole.
        let limit = keyed(
            "cap:archive:nest",
            json!({ "levels": MAX_STORED_DEPTH }),
            "limit",
        );
        let first = host.invoke(limit.clone(), &caller("user:ana")).await;
        assert_eq!(first.status, ActionResultStatus::Completed, "{first:?}");
        let replay = host.invoke(limit, &caller("user:ana")).await;
        assert_eq!(replay.status, ActionResultStatus::Completed, "{replay:?}");
        assert!(replay.is_idempotent_replay());
        assert_eq!(replay.original_output(), Some(nested(MAX_STORED_DEPTH)));
        assert_eq!(archive.runs.load(Ordering::SeqCst), 2);
    })
    .await;
}

#[tokio::test]
async fn failure_details_too_deep_to_read_back_are_withheld() {
    on_each_store(async |store| {
        let archive = Archive::default();
        let host = host(archive.clone(), store);
        let action = keyed(
            "cap:archive:refuse",
            json!({ "levels": MAX_STORED_DEPTH + 1 }),
            "deep",
        );
        let first = host.invoke(action.clone(), &caller("user:ana")).await;
        let error = failure(&first);
        assert_eq!(error.code, "archive.refused");
        assert!(
            error.details.as_ref().unwrap()["details"]["details_withheld"]
                .as_str()
                .unwrap()
                .contains(&MAX_STORED_DEPTH.to_string()),
            "{error:?}"
        );
        let again = host.invoke(action, &caller("user:ana")).await;
        assert_eq!(failure(&again).code, "archive.refused", "{again:?}");
        assert_eq!(archive.runs.load(Ordering::SeqCst), 1);

        // Shallow details pass untouched.
        let shallow = keyed("cap:archive:refuse", json!({ "levels": 3 }), "shallow");
        let result = host.invoke(shallow, &caller("user:ana")).await;
        assert_eq!(
            failure(&result).details.as_ref().unwrap()["details"],
            nested(3)
        );
    })
    .await;
}

/// An output larger than `max_output_bytes` would be stored whole under its key and sent back
/// (twice over MCP): it fails `action.output_too_large`, without quoting it, and its key replays
/// the failure. An output of exactly the limit passes.
#[tokio::test]
async fn an_output_larger_than_the_limit_fails_and_its_key_replays_the_failure() {
    on_each_store(async |store| {
        let archive = Archive::default();
        let host = limited_host(
            archive.clone(),
            store,
            HostLimits::default().max_output_bytes(64),
        );
        // `{"text":"…"}` is 11 bytes around its text.
        let exact = keyed("cap:archive:fill", json!({ "bytes": 53 }), "exact");
        let result = host.invoke(exact, &caller("user:ana")).await;
        assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");

        let over = keyed("cap:archive:fill", json!({ "bytes": 54 }), "over");
        let first = host.invoke(over.clone(), &caller("user:ana")).await;
        let error = failure(&first);
        assert_eq!(error.code, codes::ACTION_OUTPUT_TOO_LARGE, "{error:?}");
        assert_ne!(error.retryable, Some(true));
        assert_eq!(error.details.as_ref().unwrap()["max_output_bytes"], 64);
        // The write ran: its refusal says its effects happened, though it is no transaction.
        assert_eq!(
            error.details.as_ref().unwrap()["side_effects_committed"],
            true
        );
        assert!(!format!("{first:?}").contains("xxxxxxxx"), "{first:?}");
        let again = host.invoke(over, &caller("user:ana")).await;
        assert_eq!(failure(&again).code, codes::ACTION_OUTPUT_TOO_LARGE);
        assert_eq!(
            archive.runs.load(Ordering::SeqCst),
            2,
            "replayed, not rerun"
        );
    })
    .await;
}

/// A connector failure's own details are bounded like an output: beyond `max_output_bytes` they
/// are withheld, saying why.
#[tokio::test]
async fn failure_details_larger_than_the_output_limit_are_withheld() {
    let host = limited_host(
        Archive::default(),
        Arc::new(aip_connector::store::MemoryStore::new()),
        HostLimits::default().max_output_bytes(64),
    );
    let large = keyed("cap:archive:refuse_at_length", json!({ "bytes": 200 }), "l");
    let result = host.invoke(large, &caller("user:ana")).await;
    let error = failure(&result);
    assert_eq!(error.code, "archive.refused");
    let withheld = &error.details.as_ref().unwrap()["details"]["details_withheld"];
    assert!(
        withheld.as_str().unwrap().contains("larger than 64 bytes"),
        "{error:?}"
    );
    let small = keyed("cap:archive:refuse_at_length", json!({ "bytes": 10 }), "s");
    let result = host.invoke(small, &caller("user:ana")).await;
    assert_eq!(
        failure(&result).details.as_ref().unwrap()["details"],
        json!({ "text": "x".repeat(10) })
    );
}

#[test]
fn an_input_depth_limit_beyond_what_stores_read_back_refuses_to_build() {
    let limits = HostLimits::default().max_input_depth(MAX_STORED_DEPTH + 1);
    let refused = Host::builder()
        .connector(Archive::default())
        .limits(limits)
        .build()
        .expect_err("the limit is refused");
    assert!(
        matches!(
            refused,
            HostBuildError::LimitOutOfRange {
                limit: "max_input_depth",
                value,
                max,
            } if value == MAX_STORED_DEPTH as u64 + 1 && max == MAX_STORED_DEPTH as u64
        ),
        "{refused:?}"
    );
    let at_most = HostLimits::default().max_input_depth(MAX_STORED_DEPTH);
    Host::builder()
        .connector(Archive::default())
        .limits(at_most)
        .build()
        .expect("the largest accepted limit builds");
}

/// Limits the host cannot honour are refused at build time, naming the field: a stream buffer
/// beyond the channel's ceiling (it made every `invoke_stream` panic), and a zero where a zero
/// refuses every call.
#[test]
fn limits_the_host_cannot_honour_refuse_to_build() {
    let build = |limits: HostLimits| {
        Host::builder()
            .connector(Archive::default())
            .limits(limits)
            .build()
    };
    let refused = build(HostLimits::default().stream_buffer(usize::MAX))
        .expect_err("an unbounded stream buffer is refused");
    assert!(
        matches!(
            refused,
            HostBuildError::LimitOutOfRange { limit: "stream_buffer", max, .. }
                if max == MAX_STREAM_BUFFER as u64
        ),
        "{refused:?}"
    );
    build(HostLimits::default().stream_buffer(MAX_STREAM_BUFFER))
        .expect("the largest stream buffer builds");
    type Zero = fn(&mut HostLimits);
    let zeroed: [(&str, Zero); 10] = [
        ("default_timeout_ms", |l| l.default_timeout_ms = 0),
        ("max_action_timeout_ms", |l| l.max_action_timeout_ms = 0),
        ("max_concurrent_actions", |l| l.max_concurrent_actions = 0),
        ("max_input_bytes", |l| l.max_input_bytes = 0),
        ("max_output_bytes", |l| l.max_output_bytes = 0),
        ("max_input_depth", |l| l.max_input_depth = 0),
        ("max_id_bytes", |l| l.max_id_bytes = 0),
        ("max_idempotency_key_bytes", |l| {
            l.max_idempotency_key_bytes = 0
        }),
        ("max_decision_bytes", |l| l.max_decision_bytes = 0),
        ("default_record_ttl_ms", |l| l.default_record_ttl_ms = 0),
    ];
    for (name, zero) in zeroed {
        let mut limits = HostLimits::default();
        zero(&mut limits);
        let refused = build(limits).expect_err(name);
        assert!(
            matches!(refused, HostBuildError::LimitZero { limit } if limit == name),
            "{name}: {refused:?}"
        );
        assert!(refused.to_string().contains(name), "{refused}");
    }
}

#[tokio::test]
async fn ids_that_contain_the_key_separator_never_share_a_record() {
    on_each_store(async |store| {
        let archive = Archive::default();
        let host = host(archive.clone(), store);
        let save = |key: &str| keyed("cap:archive:save", json!({ "text": key }), key);
        // Upstream's bare ':' join made both `Principal:user:1:k`.
        let first = host.invoke(save("1:k"), &caller("user")).await;
        let second = host.invoke(save("k"), &caller("user:1")).await;
        for result in [&first, &second] {
            assert_eq!(result.status, ActionResultStatus::Completed, "{result:?}");
            assert!(!result.is_idempotent_replay(), "{result:?}");
        }
        assert_eq!(second.output.as_ref().unwrap()["text"], "k", "{second:?}");
        assert_eq!(archive.runs.load(Ordering::SeqCst), 2);
        // Each caller's own resend still replays.
        let resent = host.invoke(save("k"), &caller("user:1")).await;
        assert!(resent.is_idempotent_replay(), "{resent:?}");
        assert_eq!(archive.runs.load(Ordering::SeqCst), 2);
    })
    .await;
}

#[tokio::test]
async fn a_trusted_identity_with_a_nul_character_is_refused_before_anything_is_stored() {
    on_each_store(async |store| {
        let archive = Archive::default();
        let save = keyed("cap:archive:save", json!({ "text": "x" }), "k");
        let host = host(archive.clone(), store.clone());
        let cases = [
            ("principal.id", caller("user\0ana")),
            (
                "tenant.id",
                TrustedContext::new(Principal::new("user:ana", PrincipalKind::Human), "test")
                    .with_tenant(VerifiedTenant::new("t1\0")),
            ),
            ("operator", caller("user:ana").with_operator("svc\0".into())),
        ];
        for (field, caller) in cases {
            let result = host.invoke(save.clone(), &caller).await;
            let error = failure(&result);
            assert_eq!(error.code, codes::IDENTITY_INVALID, "{error:?}");
            assert_eq!(error.category, ErrorCategory::Auth, "{error:?}");
            assert_eq!(error.retryable, Some(false), "{error:?}");
            assert_eq!(error.details.as_ref().unwrap()["field"], field);
        }
        let deployment = Deployment::default().with_external_account(ExternalAccountRef {
            id: "acct\0".to_owned(),
            system: "crm".to_owned(),
        });
        let with_account = Host::builder()
            .connector(archive.clone())
            .store(store)
            .deployment(deployment)
            .build()
            .expect("the archive builds");
        let result = with_account.invoke(save, &caller("user:ana")).await;
        assert_eq!(
            failure(&result).details.as_ref().unwrap()["field"],
            "external_account.id"
        );
        assert_eq!(archive.runs.load(Ordering::SeqCst), 0);
    })
    .await;
}
