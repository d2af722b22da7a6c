// Impl-block companions whose parameter is `impl Trait` or a generic parameter compile under
// `#![deny(warnings)]`: the host's request goes to them as is (the argument shim would leave its
// type parameter to inference rustc cannot do), while a concrete parameter type still goes
// through the shim.
#![deny(warnings)]

use aip_connector::prelude::*;
use aip_connector::CancelRequest;

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

struct Notes;

#[connector(id = "notes")]
impl Notes {
    /// Create a note.
    #[capability(
        id = "cap:notes:create",
        risk = medium,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [dry_run, plan, commit, execute, reconcile], fidelity = policy_and_schema),
        reconcile = Self::find,
        cancel = Self::stop,
    )]
    async fn create(
        &self,
        note: Note,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
    ) -> Result<String, ConnectorFailure> {
        Ok(note.text)
    }

    async fn find(
        &self,
        request: impl Into<Reconciliation> + Send,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        let request: Reconciliation = request.into();
        Ok(ReconcileOutcome::Pending {
            cursor: Some(request.provider_operation.operation_id),
        })
    }

    async fn stop<R: Into<CancelRequest> + Send>(&self, request: R) -> Result<(), ConnectorFailure> {
        let _request: CancelRequest = request.into();
        Ok(())
    }

    /// Archive a note.
    #[capability(
        id = "cap:notes:archive",
        risk = low,
        side_effects = [write],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        cancel = Self::stop_archive,
    )]
    async fn archive(&self, note: Note, _key: IdempotencyKey) -> Result<String, ConnectorFailure> {
        Ok(note.text)
    }

    async fn stop_archive(&self, _request: CancelRequest) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {
    let _ = Notes;
}
