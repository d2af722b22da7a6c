//! Notes: a connector of free `#[capability]` functions, split across modules and assembled
//! with [`ConnectorBuilder`], whose handlers share a provider client as the connector's state.
//!
//! - **State**: [`Notes`] holds the [`ProviderClient`]; [`connector`] builds the connector with
//!   it (`ConnectorBuilder::with_state`), and each handler that calls the provider takes
//!   `State<Notes>`. Two connectors built from these functions (two tenants' deployments, or
//!   two conformance scenarios) each call their own provider.
//! - **Companions take the state too**: `cap:notes:create` is reconcilable, and its
//!   `reconcile = find_note` companion takes `State<Notes>` before the host's `Reconciliation`,
//!   as every companion of a handler with state does.
//! - **A capability without state joins any connector**: `cap:notes:limits` answers from
//!   constants, takes no `State`, and is added to the same builder.
//!
//! The write follows the calendar example's pattern: the operation id is chosen and
//! checkpointed before the request leaves, so a lost answer is settled by asking the provider.

use aip_connector::{BuildError, BuiltConnector, ConnectorBuilder, ProviderClient};

/// The connector id.
pub const CONNECTOR_ID: &str = "notes";
/// The note-writing capability.
pub const CREATE_NOTE: &str = writes::create_note::ID;
/// The note lookup capability.
pub const GET_NOTE: &str = reads::get_note::ID;
/// The limits capability (no state).
pub const LIMITS: &str = reads::limits::ID;
/// The `provider` named in the checkpointed operation.
pub const PROVIDER: &str = "notes-provider";
/// The provider route notes are created on.
pub const NOTES_ROUTE: &str = "/notes";
/// The longest note accepted, in characters.
pub const MAX_NOTE_CHARS: usize = 2_000;

/// The state every call of a notes connector receives: the provider it writes to. Cheap to
/// clone (a `ProviderClient` shares its connection pool).
#[derive(Clone, Debug)]
pub struct Notes {
    api: ProviderClient,
}

impl Notes {
    /// Notes kept at the provider behind `api`.
    pub fn new(api: ProviderClient) -> Self {
        Self { api }
    }
}

/// The notes connector, calling the provider behind `api`.
///
/// # Errors
///
/// Never for these capabilities; [`ConnectorBuilder::build`] checks a non-blank id, at least one
/// capability and distinct capability ids.
pub fn connector(api: ProviderClient) -> Result<BuiltConnector<Notes>, BuildError> {
    ConnectorBuilder::with_state(CONNECTOR_ID, Notes::new(api))
        .capability::<writes::create_note>()
        .capability::<reads::get_note>()
        .capability::<reads::limits>()
        .build()
}

/// The capability that changes something at the provider, and its reconciliation.
pub mod writes {
    use aip_connector::prelude::*;

    use super::{CONNECTOR_ID, MAX_NOTE_CHARS, NOTES_ROUTE, Notes, PROVIDER};
    use crate::provider_api::{self, OPERATION_ID_HEADER};

    /// A note to write.
    #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct NewNote {
        /// The note's text.
        pub text: String,
    }

    /// The note written.
    #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct NoteRef {
        /// The provider's id of the note (its operation id).
        pub note_id: String,
    }

    /// What the provider answers to `POST /notes`.
    #[derive(Deserialize)]
    struct ProviderEffect {
        operation_id: String,
    }

    /// What the provider is sent.
    #[derive(Serialize)]
    struct ProviderNote<'a> {
        tenant: &'a str,
        text: &'a str,
    }

    /// Write a note.
    ///
    /// Written at the provider under the tenant-scoped idempotency key; an answer lost on the
    /// wire is settled by asking the provider about the checkpointed operation.
    #[capability(
        id = "cap:notes:create",
        name = "Create note",
        risk = medium,
        side_effects = [write, external_network],
        idempotency(required, scope = tenant),
        data(sensitivity = internal),
        transaction(modes = [execute, reconcile]),
        reconcile = find_note,
        tags = ["notes"],
        examples = [r#"{"text": "Call the venue about the projector"}"#],
    )]
    pub async fn create_note(
        State(notes): State<Notes>,
        input: NewNote,
        key: IdempotencyKey,
        tenant: Tenant,
        deadline: Deadline,
        checkpoint: Checkpoint,
    ) -> Result<NoteRef, ConnectorFailure> {
        if input.text.trim().is_empty() || input.text.chars().count() > MAX_NOTE_CHARS {
            return Err(ConnectorFailure::permanent(
                "notes.text_invalid",
                format!("a note has 1 to {MAX_NOTE_CHARS} characters"),
                CONNECTOR_ID,
            ));
        }
        let operation = checkpoint.operation_for(&key, PROVIDER, "nt");
        checkpoint.record(operation.clone(), None).await?;
        let effect: ProviderEffect = notes
            .api
            .post(NOTES_ROUTE)
            .idempotency(&key)
            .header(OPERATION_ID_HEADER, &operation.operation_id)
            .provider_operation(operation)
            .deadline(&deadline)
            .json(&ProviderNote {
                tenant: tenant.id(),
                text: &input.text,
            })
            .send_json()
            .await?;
        Ok(NoteRef {
            note_id: effect.operation_id,
        })
    }

    /// Asks this connector's provider whether a note whose outcome is unknown was written.
    pub async fn find_note(
        State(notes): State<Notes>,
        request: Reconciliation,
    ) -> Result<ReconcileOutcome, ConnectorFailure> {
        provider_api::reconcile(&notes.api, &request).await
    }
}

/// The capabilities that change nothing.
pub mod reads {
    use aip_connector::model::{ConnectorOperation, ProviderOperationRef};
    use aip_connector::prelude::*;
    use serde_json::Value;

    use super::{MAX_NOTE_CHARS, NOTES_ROUTE, Notes, PROVIDER};
    use crate::provider_api::{self, OperationState};

    /// Which note to read.
    #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct GetNote {
        /// The note's id, as `cap:notes:create` answered it.
        pub note_id: String,
    }

    /// A note, if this tenant has one with that id.
    #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct FoundNote {
        /// Whether the note exists for this tenant.
        pub found: bool,
        /// Its text, when found.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub text: Option<String>,
    }

    /// Read a note.
    ///
    /// A lookup changes nothing, so it needs no idempotency key and is safe to repeat.
    #[capability(
        id = "cap:notes:get",
        name = "Get note",
        risk = low,
        side_effects = [read, external_network],
        idempotency(optional),
        execution(retry_safety = safe),
        data(sensitivity = internal),
        waive(
            code = "contract.lint.mutating_without_idempotency",
            reason = "a lookup changes nothing at the provider: external_network only says the read leaves the host"
        ),
        tags = ["notes"],
        examples = [r#"{"note_id": "nt_0190f2a6c8d47b21a5e3d9c0f1b2a3c4"}"#],
    )]
    pub async fn get_note(
        State(notes): State<Notes>,
        input: GetNote,
        tenant: Tenant,
        deadline: Deadline,
    ) -> Result<FoundNote, ConnectorFailure> {
        let operation = ProviderOperationRef {
            provider: PROVIDER.to_owned(),
            operation_id: input.note_id,
            request_id: None,
        };
        let (state, _evidence) = provider_api::look_up(
            &notes.api,
            &operation,
            ConnectorOperation::Invocation,
            Some(&deadline),
        )
        .await?;
        let OperationState::Committed { result } = state else {
            return Ok(FoundNote {
                found: false,
                text: None,
            });
        };
        let request = result.get("request").unwrap_or(&Value::Null);
        let mine = result.get("route").and_then(Value::as_str) == Some(NOTES_ROUTE)
            && request.get("tenant").and_then(Value::as_str) == Some(tenant.id());
        // Another tenant's note is indistinguishable from one that does not exist.
        Ok(FoundNote {
            found: mine,
            text: mine
                .then(|| {
                    request
                        .get("text")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .flatten(),
        })
    }

    /// The connector's limits.
    #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Limits {
        /// The longest note accepted, in characters.
        pub max_note_chars: usize,
    }

    /// The limits notes are written under. Answered from constants: the handler takes no
    /// state, so it joins a connector with any state.
    #[capability(
        id = "cap:notes:limits",
        name = "Note limits",
        risk = low,
        side_effects = [read],
        data(sensitivity = public),
        tags = ["notes"],
    )]
    pub async fn limits() -> Result<Limits, ConnectorFailure> {
        Ok(Limits {
            max_note_chars: MAX_NOTE_CHARS,
        })
    }
}
