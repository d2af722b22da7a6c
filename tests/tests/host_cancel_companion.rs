//! The cancel companion (`cancel = ...`) under the host: called once the handler is stopped by
//! `Host::cancel` or by its deadline, with the action id, the key the provider knows, the reason,
//! the tenant and the credential the handler held; its failure is logged and reported in the
//! result (the `cancelled` output, or a timeout's details), without the credential.

use std::sync::{Arc, Mutex};

use aip_connector::codes;
use aip_connector::host::{CancelOutcome, Deployment, Host, TrustedContext};
use aip_connector::model::{Action, ActionResult, ActionResultStatus, Principal, PrincipalKind};
use aip_connector::prelude::*;
use aip_connector::{CancelReason, CancelRequest, CredentialHandle, Secret, VerifiedTenant};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Job {
    /// `"refuse"`: the cancel companion fails; `"panic"`: it panics.
    #[serde(default)]
    stop: String,
}

#[derive(Serialize, JsonSchema)]
struct Started {
    job_id: String,
}

/// A provider job that runs until stopped; the companion records what it was told.
#[derive(Clone, Default)]
struct Jobs {
    stopped: Arc<Mutex<Vec<CancelRequest>>>,
    /// Notified when a handler starts waiting on its provider.
    waiting: Arc<tokio::sync::Notify>,
    /// `stop_signed` refuses.
    refuse_signed: Arc<std::sync::atomic::AtomicBool>,
}

#[connector(id = "jobs")]
impl Jobs {
    /// Start a job and wait for it.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        cancel = Self::stop,
    )]
    async fn run(&self, job: Job, _key: IdempotencyKey) -> Result<Started, ConnectorFailure> {
        // The provider's job never ends on its own; only the host stops the handler.
        self.waiting.notify_one();
        std::future::pending::<()>().await;
        Ok(Started { job_id: job.stop })
    }

    async fn stop(&self, request: CancelRequest) -> Result<(), ConnectorFailure> {
        self.stopped.lock().unwrap().push(request);
        Ok(())
    }

    /// The same job, waiting on its provider with a call bounded by the action's deadline: the
    /// call gives up at the deadline with a retryable failure of its own, as
    /// `ProviderRequest::deadline` makes a read give up with `provider.timeout`.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        execution(sync, retry),
        cancel = Self::stop,
    )]
    async fn run_bounded(
        &self,
        _job: Job,
        _key: IdempotencyKey,
        deadline: Deadline,
    ) -> Result<Started, ConnectorFailure> {
        tokio::time::sleep_until(deadline.at()).await;
        Err(ConnectorFailure::new(
            "provider.timeout",
            "the provider did not answer before the deadline",
            ErrorCategory::Temporary,
            aip_connector::model::ConnectorOperation::Invocation,
            "jobs",
        )
        .with_retryable(true))
    }

    /// The same job at a provider that names it in its first answer: the handler hands that
    /// name to the companion (`Cancellation::set_handle`), since neither the input nor the key
    /// can name it. `job.stop` is the id the provider assigns.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        cancel = Self::stop,
    )]
    async fn run_tracked(
        &self,
        job: Job,
        _key: IdempotencyKey,
        cancellation: Cancellation,
    ) -> Result<Started, ConnectorFailure> {
        // Restarted once by the provider under a new id: the companion gets the last one.
        cancellation.set_handle(format!("{}-first", job.stop));
        cancellation.set_handle(job.stop.clone());
        self.waiting.notify_one();
        std::future::pending::<()>().await;
        Ok(Started { job_id: job.stop })
    }

    /// The same job, whose provider refuses or breaks on a stop.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        cancel = Self::stop_badly,
    )]
    async fn run_fragile(
        &self,
        job: Job,
        _key: IdempotencyKey,
    ) -> Result<Started, ConnectorFailure> {
        self.waiting.notify_one();
        std::future::pending::<()>().await;
        Ok(Started { job_id: job.stop })
    }

    async fn stop_badly(&self, request: CancelRequest) -> Result<(), ConnectorFailure> {
        self.stopped.lock().unwrap().push(request);
        if self.stopped.lock().unwrap().len() > 1 {
            panic!("the provider client is broken");
        }
        Err(ConnectorFailure::permanent(
            "jobs.not_stoppable",
            "the job is past its point of no return",
            "jobs",
        ))
    }

    /// The same job at a provider that wants the deployment's token on every request, the stop
    /// included.
    #[capability(
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        credentials(required, issuers = ["vault"], scopes = ["jobs.write"]),
        cancel = Self::stop_signed,
    )]
    async fn run_signed(
        &self,
        job: Job,
        _key: IdempotencyKey,
        _token: Credential,
    ) -> Result<Started, ConnectorFailure> {
        self.waiting.notify_one();
        std::future::pending::<()>().await;
        Ok(Started { job_id: job.stop })
    }

    /// Refuses when told to, quoting the token it was handed, as a careless provider client's
    /// error message might.
    async fn stop_signed(&self, request: CancelRequest) -> Result<(), ConnectorFailure> {
        let token = request
            .credential
            .as_ref()
            .map(|credential| credential.secret.expose_str().unwrap().to_owned());
        self.stopped.lock().unwrap().push(request);
        match token {
            Some(token) if self.refuse_signed.load(std::sync::atomic::Ordering::SeqCst) => {
                Err(ConnectorFailure::permanent(
                    "jobs.stop_refused",
                    format!("the provider refused `Bearer {token}`: the job already finished"),
                    "jobs",
                ))
            }
            Some(_) => Ok(()),
            None => Err(ConnectorFailure::permanent(
                "jobs.unauthenticated",
                "no token to stop the job with",
                "jobs",
            )),
        }
    }
}

fn caller() -> TrustedContext {
    TrustedContext::new(Principal::new("user:ada", PrincipalKind::Human), "test")
        .with_tenant(VerifiedTenant::new("t1"))
}

fn host(jobs: &Jobs) -> Host {
    Host::builder().connector(jobs.clone()).build().unwrap()
}

/// Runs `action` and cancels it by id once its handler waits.
async fn run_and_cancel(jobs: &Jobs, host: &Host, action: Action) -> ActionResult {
    let id = action.id.clone();
    let running = tokio::spawn({
        let host = host.clone();
        async move { host.invoke(action, &caller()).await }
    });
    jobs.waiting.notified().await;
    assert_eq!(host.cancel(&id), CancelOutcome::Cancelled);
    running.await.unwrap()
}

#[tokio::test]
async fn a_cancelled_action_calls_its_cancel_companion_with_the_providers_key() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    let action = Action::new("cap:jobs:run", json!({})).with_idempotency_key("job-1");
    let id = action.id.clone();
    let result = run_and_cancel(&jobs, &host, action).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    let stopped = jobs.stopped.lock().unwrap().clone();
    assert_eq!(stopped.len(), 1, "called exactly once: {stopped:?}");
    assert_eq!(stopped[0].action_id, id);
    // The key a handler forwards with `ProviderRequest::idempotency`, not the caller's raw key.
    assert_eq!(
        stopped[0].idempotency_key.as_deref(),
        Some(IdempotencyKey::provider_key_of("Tenant:t1:job-1").as_str())
    );
}

#[tokio::test]
async fn the_companion_gets_the_handle_the_handler_set_on_a_cancel_and_on_the_deadline() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    let cancelled = run_and_cancel(
        &jobs,
        &host,
        Action::new("cap:jobs:run_tracked", json!({"stop": "q-7"})).with_idempotency_key("job-h1"),
    )
    .await;
    assert_eq!(
        cancelled.status,
        ActionResultStatus::Cancelled,
        "{cancelled:?}"
    );
    // A handler that set none hands none on.
    run_and_cancel(
        &jobs,
        &host,
        Action::new("cap:jobs:run", json!({})).with_idempotency_key("job-h3"),
    )
    .await;
    // Last: its handler's notification finds no one waiting and stays behind.
    let timed_out = host
        .invoke(
            Action::new("cap:jobs:run_tracked", json!({"stop": "q-8"}))
                .with_idempotency_key("job-h2")
                .with_timeout_ms(20),
            &caller(),
        )
        .await;
    assert_eq!(
        timed_out.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::SLA_TIMEOUT_EXCEEDED)
    );
    let handles: Vec<_> = jobs
        .stopped
        .lock()
        .unwrap()
        .iter()
        .map(|request| (request.reason, request.handle.clone()))
        .collect();
    assert_eq!(
        handles,
        [
            (CancelReason::Requested, Some("q-7".to_owned())),
            (CancelReason::Requested, None),
            (CancelReason::DeadlineExceeded, Some("q-8".to_owned())),
        ]
    );
}

#[tokio::test]
async fn a_timed_out_action_calls_its_cancel_companion_and_reports_its_refusal() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    let result = host
        .invoke(
            Action::new("cap:jobs:run_fragile", json!({}))
                .with_idempotency_key("job-2")
                .with_timeout_ms(20),
            &caller(),
        )
        .await;
    let error = result.error.as_ref().expect("timed out");
    assert_eq!(error.code, codes::SLA_TIMEOUT_EXCEEDED, "{result:?}");
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["timeout_ms"], 20);
    assert_eq!(
        details["remote_cancel_error"],
        json!({
            "code": "jobs.not_stoppable",
            "message": "the job is past its point of no return",
        })
    );
    assert_eq!(jobs.stopped.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_panicking_cancel_companion_is_contained_and_the_action_still_ends_cancelled() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    // The first stop refuses, the second panics.
    run_and_cancel(
        &jobs,
        &host,
        Action::new("cap:jobs:run_fragile", json!({})).with_idempotency_key("job-3"),
    )
    .await;
    let result = run_and_cancel(
        &jobs,
        &host,
        Action::new("cap:jobs:run_fragile", json!({})).with_idempotency_key("job-4"),
    )
    .await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert_eq!(jobs.stopped.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_cancel_that_arrives_before_the_handler_runs_does_not_call_the_companion() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    let action = Action::new("cap:jobs:run", json!({})).with_idempotency_key("job-6");
    // Remembered, it stops the handler before its first poll: nothing reached the provider.
    assert_eq!(host.cancel(&action.id), CancelOutcome::Pending);
    let result = host.invoke(action, &caller()).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    assert!(jobs.stopped.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_action_refused_before_its_handler_never_calls_its_cancel_companion() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    // Refused by the schema before the handler: nothing to stop.
    let refused = host
        .invoke(
            Action::new("cap:jobs:run", json!({ "stop": 5 })).with_idempotency_key("job-5"),
            &caller(),
        )
        .await;
    assert_eq!(
        refused.error.unwrap().code,
        codes::ACTION_INPUT_SCHEMA_INVALID
    );
    assert!(jobs.stopped.lock().unwrap().is_empty());
}

/// Found by an author trial: a handler whose provider call was bounded by the action's deadline
/// failed with its own retryable `provider.timeout` when the deadline hit during that call, so
/// the action was not a timeout: the cancel companion was never asked to stop the job, and the
/// released key's retry started a second one. The deadline wins the tie, as a cancel does.
#[tokio::test]
async fn a_failure_at_the_deadline_is_the_deadline_and_calls_the_cancel_companion() {
    let jobs = Jobs::default();
    let host = host(&jobs);
    let result = host
        .invoke(
            Action::new("cap:jobs:run_bounded", json!({}))
                .with_idempotency_key("job-bounded")
                .with_timeout_ms(30),
            &caller(),
        )
        .await;
    let error = result.error.as_deref().expect("a failure");
    assert_eq!(error.code, codes::SLA_TIMEOUT_EXCEEDED, "{result:?}");
    assert_eq!(
        jobs.stopped.lock().unwrap().len(),
        1,
        "the companion was not called"
    );
}

/// The deployment's token for the `jobs` provider.
const TOKEN: &str = "canary-token-9c2e7d";

fn signed_host(jobs: &Jobs) -> Host {
    let credential = CredentialHandle::new("jobs-token", "vault", Secret::new(TOKEN))
        .with_scopes(["jobs.write"])
        .with_tenant("t1");
    Host::builder()
        .connector(jobs.clone())
        .deployment(Deployment::default().with_static_credential(credential))
        .build()
        .unwrap()
}

/// Found by an author trial: the companion was told only the action id and key, so a stop at a
/// provider that wants a token could not authenticate, and a tenant's account could not be
/// picked. It is handed what the handler held.
#[tokio::test]
async fn the_cancel_companion_is_handed_the_handlers_tenant_and_credential() {
    let jobs = Jobs::default();
    let host = signed_host(&jobs);
    let result = run_and_cancel(
        &jobs,
        &host,
        Action::new("cap:jobs:run_signed", json!({ "stop": "" })).with_idempotency_key("job-7"),
    )
    .await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    // The stop succeeded: nothing to report.
    assert_eq!(
        result.output,
        Some(json!({ "cancelled": true, "reason": "action cancellation requested" }))
    );
    let stopped = jobs.stopped.lock().unwrap().clone();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    let request = &stopped[0];
    assert_eq!(request.reason, CancelReason::Requested);
    // What names the thing to stop (a run id) when the handler recorded nothing else.
    assert_eq!(request.input, json!({ "stop": "" }));
    assert_eq!(request.tenant.as_ref().map(|t| t.id.as_str()), Some("t1"));
    let credential = request
        .credential
        .as_ref()
        .expect("the handler's credential");
    assert_eq!(credential.id, "jobs-token");
    assert_eq!(credential.secret.expose_str().unwrap(), TOKEN);
    // The request is `Debug` for a companion's logs, and never shows the token.
    let shown = format!("{request:?}");
    assert!(
        shown.contains("jobs-token") && !shown.contains(TOKEN),
        "{shown}"
    );
}

#[tokio::test]
async fn a_companion_stopped_by_the_deadline_is_told_so() {
    let jobs = Jobs::default();
    let host = signed_host(&jobs);
    let result = host
        .invoke(
            Action::new("cap:jobs:run_signed", json!({}))
                .with_idempotency_key("job-8")
                .with_timeout_ms(20),
            &caller(),
        )
        .await;
    assert_eq!(
        result.error.as_ref().map(|e| e.code.as_str()),
        Some(codes::SLA_TIMEOUT_EXCEEDED),
        "{result:?}"
    );
    let stopped = jobs.stopped.lock().unwrap().clone();
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].reason, CancelReason::DeadlineExceeded);
    assert!(stopped[0].credential.is_some());
}

/// Found by an author trial: a companion that could not stop the provider's work was only
/// logged, and the caller was told `cancelled` as if nothing went on. The `cancelled` output says
/// what the companion answered, as a timeout's details do, without the credential it quoted.
#[tokio::test]
async fn a_refused_stop_is_reported_in_the_cancelled_output_without_the_credential() {
    let jobs = Jobs::default();
    jobs.refuse_signed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let host = signed_host(&jobs);
    let action = Action::new("cap:jobs:run_signed", json!({})).with_idempotency_key("job-9");
    let resend = action.clone();
    let result = run_and_cancel(&jobs, &host, action).await;
    assert_eq!(result.status, ActionResultStatus::Cancelled, "{result:?}");
    let expected = json!({
        "cancelled": true,
        "reason": "action cancellation requested",
        "remote_cancel_error": {
            "code": "jobs.stop_refused",
            "message": "the provider refused `Bearer [withheld]`: the job already finished",
        },
    });
    assert_eq!(result.output, Some(expected.clone()));
    // Stored as it was answered: a resend replays the report, and the token is nowhere.
    let replayed = host.invoke(resend, &caller()).await;
    let mut replayed_output = replayed.output.clone().expect("replayed");
    replayed_output
        .as_object_mut()
        .unwrap()
        .remove("idempotent_replay");
    assert_eq!(replayed_output, expected, "{replayed:?}");
    assert!(!serde_json::to_string(&replayed).unwrap().contains(TOKEN));
    // And the same through a timeout.
    let timed_out = host
        .invoke(
            Action::new("cap:jobs:run_signed", json!({}))
                .with_idempotency_key("job-10")
                .with_timeout_ms(20),
            &caller(),
        )
        .await;
    let details = timed_out.error.as_ref().unwrap().details.as_ref().unwrap();
    assert_eq!(
        details["remote_cancel_error"]["message"],
        "the provider refused `Bearer [withheld]`: the job already finished"
    );
}
