//! `ActionResult`, message parts, stream chunks and acknowledgements (`aip-model.md` §4.2).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ProtocolError, ReconciliationResult};
use crate::ids::{ActionId, ApprovalId, ReceiptId};

/// The outcome of an action.
///
/// `usage` and `error` are boxed: a result is moved several times on its way back from a
/// handler, and keeping it small (a completed result carries neither) keeps those moves cheap.
/// The wire form is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionResult {
    /// The action this result is for.
    pub action_id: ActionId,
    /// Outcome.
    pub status: ActionResultStatus,
    /// Structured output, checked against the capability's output schema when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// User-facing message parts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message: Vec<MessagePart>,
    /// Update to shared memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_update: Option<Box<Value>>,
    /// Resource usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
    /// Audit receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Box<ReceiptRef>>,
    /// The error; required when `status` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<ProtocolError>>,
}

impl ActionResult {
    /// A result with only an action id and a status.
    pub fn new(action_id: ActionId, status: ActionResultStatus) -> Self {
        Self {
            action_id,
            status,
            output: None,
            message: Vec::new(),
            memory_update: None,
            usage: None,
            receipt: None,
            error: None,
        }
    }

    /// A completed result carrying `output`.
    pub fn completed(action_id: ActionId, output: Value) -> Self {
        Self {
            output: Some(output),
            ..Self::new(action_id, ActionResultStatus::Completed)
        }
    }

    /// A failed result carrying `error`.
    pub fn failed(action_id: ActionId, error: ProtocolError) -> Self {
        Self {
            error: Some(Box::new(error)),
            ..Self::new(action_id, ActionResultStatus::Failed)
        }
    }

    /// The approval request a `pending_approval` (or `requires_human`) result waits for: its
    /// `output.approval_id`, where the approval gate puts it. `None` for any other status, or
    /// when the output names no well-formed approval id.
    pub fn approval_id(&self) -> Option<ApprovalId> {
        if !matches!(
            self.status,
            ActionResultStatus::PendingApproval | ActionResultStatus::RequiresHuman
        ) {
            return None;
        }
        let id = self.output.as_ref()?.get("approval_id")?.as_str()?;
        ApprovalId::parse(id).ok()
    }

    /// The plan id of a completed `plan` (its output is `{"transaction": "plan", "plan":
    /// {"plan_id": …, …}}`), for the `commit` that follows:
    /// `ActionTransaction::commit(planned.plan_id().unwrap())`. `None` for any other result.
    pub fn plan_id(&self) -> Option<&str> {
        if self.status != ActionResultStatus::Completed {
            return None;
        }
        let output = self.output.as_ref()?;
        if output.get("transaction")?.as_str()? != "plan" {
            return None;
        }
        output.get("plan")?.get("plan_id")?.as_str()
    }

    /// The provider's answer a completed `reconcile` carries (its output is `{"reconciliation":
    /// {"terminal": true, "committed": …, "cursor": …, "evidence": …}}`): whether the effect
    /// happened (`committed`) and what the connector saw at the provider. `None` for any other
    /// result; a reconciliation still pending is a `failed` result
    /// (`transaction.reconciliation_pending`), not one of these. (An author trial read
    /// `output["committed"]` and found `null`: the answer is one level down.)
    ///
    /// ```
    /// use aip_connector_core::ids::ActionId;
    /// use aip_connector_core::model::ActionResult;
    /// use serde_json::json;
    ///
    /// let reconciled = ActionResult::completed(
    ///     ActionId::new(),
    ///     json!({"reconciliation": {"terminal": true, "committed": true, "evidence": {"state": "committed"}}}),
    /// );
    /// let answer = reconciled.reconciliation().expect("a reconcile's answer");
    /// assert_eq!(answer.committed, Some(true));
    /// assert!(ActionResult::completed(ActionId::new(), json!({"committed": true})).reconciliation().is_none());
    /// ```
    pub fn reconciliation(&self) -> Option<ReconciliationResult> {
        if self.status != ActionResultStatus::Completed {
            return None;
        }
        let answer = self.original_output()?.get_mut("reconciliation")?.take();
        serde_json::from_value(answer).ok()
    }
}

/// The field a host adds to the `output` of a replayed result, set to `true`
/// (`aip-runtime.md` §2.4): the result was stored under the action's idempotency key by an
/// earlier execution and answered again without running the handler.
pub const IDEMPOTENT_REPLAY: &str = "idempotent_replay";

/// Where a replay keeps an output that cannot carry [`IDEMPOTENT_REPLAY`] itself.
///
/// Upstream replaces an output that is not an object (a list, a string, a number) by
/// `{"idempotent_replay": true}`, so a client that lost the first answer can never get it
/// back. Our host keeps it: `{"idempotent_replay": true, "original_output": <the output>}`. An
/// object that has an `idempotent_replay` key of its own (the marker would overwrite the
/// handler's value), or whose only key is `original_output`, is wrapped the same way, so the
/// two forms cannot be mistaken for each other.
/// [`ActionResult::original_output`] undoes either form.
pub const ORIGINAL_OUTPUT: &str = "original_output";

impl ActionResult {
    /// Marks this result as a replay of a stored one (what a host does before answering a
    /// duplicate with it): an object output gets `idempotent_replay: true`, any other output
    /// (and an object whose own `idempotent_replay` is not `true`) is kept under
    /// [`ORIGINAL_OUTPUT`] beside the marker, and no output becomes
    /// `{"idempotent_replay": true}`. An object already carrying `idempotent_replay: true` is
    /// left as it is, so marking a marked result changes nothing.
    pub fn mark_idempotent_replay(&mut self) {
        let marker = || (IDEMPOTENT_REPLAY.to_owned(), Value::Bool(true));
        self.output = Some(match self.output.take() {
            None => Value::Object(Map::from_iter([marker()])),
            // Already marked (a replay replayed again, e.g. a result stored under a second key),
            // or a handler's own `true`, which says the same: left as it is.
            Some(Value::Object(object))
                if object.get(IDEMPOTENT_REPLAY) == Some(&Value::Bool(true)) =>
            {
                Value::Object(object)
            }
            Some(Value::Object(mut object))
                if !object.contains_key(IDEMPOTENT_REPLAY) && !looks_wrapped(&object) =>
            {
                object.insert(IDEMPOTENT_REPLAY.to_owned(), Value::Bool(true));
                Value::Object(object)
            }
            Some(original) => Value::Object(Map::from_iter([
                marker(),
                (ORIGINAL_OUTPUT.to_owned(), original),
            ])),
        });
    }

    /// Whether this result is a replay of a stored one: its output carries
    /// `idempotent_replay: true`.
    ///
    /// The marker shares the output's namespace (upstream's wire): an output type with a field
    /// of that name that is `true` reads as a replay, and [`original_output`](Self::original_output)
    /// removes it. Name output fields otherwise.
    pub fn is_idempotent_replay(&self) -> bool {
        self.output
            .as_ref()
            .and_then(|output| output.get(IDEMPOTENT_REPLAY))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// The output as the execution that produced it returned it: for a replay, without the
    /// replay marker and with a wrapped output unwrapped ([`ORIGINAL_OUTPUT`]). `None` when the
    /// result has no output, or is a replay of one that had none (a replayed failure carries
    /// only the marker). A completed replay of an empty object is the empty object.
    pub fn original_output(&self) -> Option<Value> {
        let mut output = self.output.clone()?;
        let (marked, had_output) = unmark_idempotent_replay(&mut output);
        match (marked, had_output) {
            (true, false) if self.status != ActionResultStatus::Completed => None,
            _ => Some(output),
        }
    }

    /// The output of a completed result decoded as `T`, the capability's output type; for a
    /// replay, the original output ([`ActionResult::original_output`]), so a type that denies
    /// unknown fields, or one that is not an object, decodes a replay as it decodes the first
    /// answer. Use [`ActionResult::is_idempotent_replay`] to learn which one it was.
    ///
    /// # Errors
    ///
    /// [`OutputError::NotCompleted`] when the result is not `completed` (it carries the
    /// result's error, if any), [`OutputError::Decode`] when the output is not a `T`. A
    /// completed result without output decodes from `null` (the output of a handler returning
    /// `()`).
    ///
    /// ```
    /// use aip_connector_core::ids::ActionId;
    /// use aip_connector_core::model::ActionResult;
    /// use serde_json::json;
    ///
    /// let first = ActionResult::completed(ActionId::new(), json!(["urgent", "vip"]));
    /// let mut replay = first.clone();
    /// replay.mark_idempotent_replay(); // what the host does for a duplicate
    ///
    /// assert_eq!(replay.output, Some(json!({"idempotent_replay": true, "original_output": ["urgent", "vip"]})));
    /// assert!(replay.is_idempotent_replay());
    /// assert_eq!(replay.output_as::<Vec<String>>()?, ["urgent", "vip"]);
    /// assert_eq!(first.output_as::<Vec<String>>()?, ["urgent", "vip"]);
    /// # Ok::<(), aip_connector_core::model::OutputError>(())
    /// ```
    pub fn output_as<T: DeserializeOwned>(&self) -> Result<T, OutputError> {
        if self.status != ActionResultStatus::Completed {
            return Err(OutputError::NotCompleted {
                status: self.status,
                error: self.error.clone(),
            });
        }
        let output = self.original_output().unwrap_or(Value::Null);
        serde_json::from_value(output).map_err(OutputError::Decode)
    }
}

/// Removes a replay's marker from `output` in place, unwrapping an output kept under
/// [`ORIGINAL_OUTPUT`]. Returns whether `output` was marked, and whether anything is left of
/// it: `(true, false)` for a bare `{"idempotent_replay": true}`, which a host writes for a
/// replayed result without output (and for a completed output that was an empty object).
/// An output that is not marked is left alone: `(false, true)`.
pub fn unmark_idempotent_replay(output: &mut Value) -> (bool, bool) {
    let Some(object) = output.as_object_mut() else {
        return (false, true);
    };
    if object.get(IDEMPOTENT_REPLAY) != Some(&Value::Bool(true)) {
        return (false, true);
    }
    if looks_wrapped(object) {
        *output = object.remove(ORIGINAL_OUTPUT).unwrap_or(Value::Null);
        return (true, true);
    }
    object.remove(IDEMPOTENT_REPLAY);
    let had_output = !object.is_empty();
    (true, had_output)
}

/// Whether `object` has the shape of a wrapped replay: `original_output` and nothing else but
/// the marker.
fn looks_wrapped(object: &Map<String, Value>) -> bool {
    object.contains_key(ORIGINAL_OUTPUT)
        && object
            .keys()
            .all(|key| key == ORIGINAL_OUTPUT || key == IDEMPOTENT_REPLAY)
}

/// Why [`ActionResult::output_as`] has no `T` to give.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The result is not `completed`, so it carries no output of the capability.
    #[error("the action did not complete: its result is `{status}`{}", error_suffix(.error.as_deref()))]
    NotCompleted {
        /// The result's status.
        status: ActionResultStatus,
        /// The result's error, when it has one.
        error: Option<Box<ProtocolError>>,
    },
    /// The output is not a value of the requested type.
    #[error("the output does not decode into the requested type: {0}")]
    Decode(#[source] serde_json::Error),
}

fn error_suffix(error: Option<&ProtocolError>) -> String {
    error.map_or_else(String::new, |error| {
        format!(" ({}: {})", error.code, error.message)
    })
}

/// Outcome of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionResultStatus {
    /// Finished successfully.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled before completion.
    Cancelled,
    /// Waiting for an approval decision.
    PendingApproval,
    /// A human must take over.
    RequiresHuman,
}

impl ActionResultStatus {
    /// Every status, in declaration order.
    pub const ALL: [Self; 5] = [
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::PendingApproval,
        Self::RequiresHuman,
    ];

    /// The wire name (`pending_approval`, ...), as serde spells it: for messages and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::PendingApproval => "pending_approval",
            Self::RequiresHuman => "requires_human",
        }
    }
}

/// The wire name (see [`ActionResultStatus::as_str`]).
impl fmt::Display for ActionResultStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One part of a user-facing message, tagged on `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessagePart {
    /// Text.
    Text {
        /// The text.
        text: String,
        /// Text format, e.g. `plain` or `markdown`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<String>,
    },
    /// An image, by URL or inline data.
    Image {
        /// Where the image can be fetched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Inline data (base64).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// MIME type.
        mime_type: String,
        /// Alternative text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        alt: Option<String>,
    },
    /// A file, by URL or inline data.
    File {
        /// Where the file can be fetched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Inline data (base64).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// MIME type.
        mime_type: String,
        /// File name.
        filename: String,
        /// Size in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size_bytes: Option<u64>,
    },
    /// Audio, by URL or inline data.
    Audio {
        /// Where the audio can be fetched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Inline data (base64).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// MIME type.
        mime_type: String,
        /// Transcript.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transcript: Option<String>,
    },
    /// A form to fill in.
    Form {
        /// Form fields.
        fields: Vec<Value>,
        /// Form actions.
        actions: Vec<Value>,
    },
    /// A card.
    Card {
        /// Title.
        title: String,
        /// Body text.
        body: String,
        /// Card actions.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        actions: Vec<Value>,
        /// Attached media.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media: Option<Value>,
    },
    /// Structured JSON.
    Json {
        /// The data.
        data: Value,
        /// Schema of the data.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
    },
    /// The result of a tool call.
    ToolResult {
        /// The tool call answered.
        tool_call_id: String,
        /// The tool's output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
        /// The tool's error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Value>,
    },
}

impl MessagePart {
    /// A plain-text part (`format` = `plain`).
    pub fn text(text: impl Into<String>) -> Self {
        MessagePart::Text {
            text: text.into(),
            format: Some("plain".to_owned()),
        }
    }
}

/// Resource usage of an action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Value>,
    /// Tool usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// Wall-clock latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Value>,
}

/// Reference to an audit receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptRef {
    /// Receipt id.
    pub id: ReceiptId,
    /// Receipt hash in the audit chain.
    pub hash: String,
}

/// One chunk of a streaming action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamChunk {
    /// The action streaming.
    pub action_id: ActionId,
    /// Strictly increasing sequence number.
    pub sequence: u64,
    /// What the chunk carries.
    pub kind: StreamChunkKind,
    /// Structured payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// User-facing payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<MessagePart>,
}

impl StreamChunk {
    /// Whether this chunk ends its stream (`done` or `error`): exactly one does, last.
    pub fn is_terminal(&self) -> bool {
        matches!(self.kind, StreamChunkKind::Done | StreamChunkKind::Error)
    }

    /// The `data` decoded as `T` (an item a handler sent through its `StreamSink<T>`, a
    /// progress report); a chunk without data decodes from `null`.
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(self.data.as_ref().unwrap_or(&Value::Null))
    }

    /// The result a terminal chunk carries; `None` for any other chunk, or a terminal one
    /// whose data is not an `ActionResult`.
    pub fn result(&self) -> Option<ActionResult> {
        if !self.is_terminal() {
            return None;
        }
        self.data_as().ok()
    }
}

/// What a stream chunk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamChunkKind {
    /// Output data.
    Data,
    /// Progress report.
    Progress,
    /// Tool activity.
    Tool,
    /// Model reasoning.
    Thought,
    /// Preview of the output.
    Preview,
    /// The action now waits for approval.
    PendingApproval,
    /// Terminal error.
    Error,
    /// Terminal end of stream.
    Done,
}

/// Acknowledgement of an action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// The action acknowledged.
    pub action_id: ActionId,
    /// How it was received.
    pub status: AckStatus,
    /// Why, for rejections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Earliest useful retry delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Queue the action was placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

/// How an action was received.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckStatus {
    /// Accepted for execution.
    Accepted,
    /// Refused.
    Rejected,
    /// Queued.
    Queued,
    /// Streaming has started.
    Streaming,
    /// An idempotent replay returned the stored result.
    Cached,
}

/// Lifecycle state of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionLifecycleState {
    /// Not known to the runtime.
    Unknown,
    /// Accepted.
    Accepted,
    /// Queued.
    Queued,
    /// Running.
    Running,
    /// Streaming.
    Streaming,
    /// Waiting for approval.
    PendingApproval,
    /// Cancellation requested.
    Cancelling,
    /// Cancelled.
    Cancelled,
    /// Completed.
    Completed,
    /// Failed.
    Failed,
    /// Expired.
    Expired,
    /// Gave up after retries.
    DeadLettered,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::ErrorCategory;

    /// A stream's chunks read in tests: data decoded, the terminal one told apart and its
    /// result read.
    #[test]
    fn chunks_decode_their_data_and_the_terminal_one_its_result() {
        let chunk = |kind, data| StreamChunk {
            action_id: ActionId::trusted("a1"),
            sequence: 0,
            kind,
            data,
            part: None,
        };
        let item = chunk(StreamChunkKind::Data, Some(json!({ "title": "Rust" })));
        assert!(!item.is_terminal());
        assert_eq!(item.data_as::<Value>().unwrap(), json!({ "title": "Rust" }));
        assert!(item.data_as::<u32>().is_err());
        assert_eq!(item.result(), None);
        assert_eq!(
            chunk(StreamChunkKind::Progress, None)
                .data_as::<Option<u32>>()
                .unwrap(),
            None
        );

        let result = ActionResult::completed(ActionId::trusted("a1"), json!({ "sent": 1 }));
        let done = chunk(
            StreamChunkKind::Done,
            Some(serde_json::to_value(&result).unwrap()),
        );
        assert!(done.is_terminal() && chunk(StreamChunkKind::Error, None).is_terminal());
        assert_eq!(done.result(), Some(result));
        assert_eq!(chunk(StreamChunkKind::Done, Some(json!(7))).result(), None);
    }

    /// `as_str` and `Display` spell statuses as serde does, so messages and the wire agree.
    #[test]
    fn status_names_are_the_wire_spelling() {
        for status in ActionResultStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                Value::String(status.to_string())
            );
            assert_eq!(status.to_string(), status.as_str());
        }
        let refused = OutputError::NotCompleted {
            status: ActionResultStatus::PendingApproval,
            error: None,
        };
        assert_eq!(
            refused.to_string(),
            "the action did not complete: its result is `pending_approval`"
        );
    }

    #[test]
    fn plan_id_is_read_from_a_completed_plan_only() {
        let planned = ActionResult::completed(
            ActionId::new(),
            json!({"transaction": "plan", "plan": {"plan_id": "plan_1", "capability_id": "cap:x"}}),
        );
        assert_eq!(planned.plan_id(), Some("plan_1"));
        let mut replayed = planned.clone();
        replayed.mark_idempotent_replay();
        assert_eq!(replayed.plan_id(), Some("plan_1"));
        let other =
            ActionResult::completed(ActionId::new(), json!({"plan": {"plan_id": "plan_1"}}));
        assert_eq!(other.plan_id(), None, "not a plan's output");
        let mut failed = planned.clone();
        failed.status = ActionResultStatus::Failed;
        assert_eq!(failed.plan_id(), None);
    }

    #[test]
    fn approval_id_is_read_from_a_waiting_result_only() {
        let id = "appr_0190f2a6c8d47b21a5e3d9c0f1b2a3c4";
        let mut pending = ActionResult::new(ActionId::new(), ActionResultStatus::PendingApproval);
        pending.output = Some(json!({ "approval_id": id, "request": {} }));
        assert_eq!(
            pending.approval_id().map(|a| a.to_string()).as_deref(),
            Some(id)
        );

        let mut human = pending.clone();
        human.status = ActionResultStatus::RequiresHuman;
        assert!(human.approval_id().is_some());

        let completed = ActionResult::completed(ActionId::new(), json!({ "approval_id": id }));
        assert_eq!(
            completed.approval_id(),
            None,
            "a completed output is the handler's"
        );

        let mut malformed = pending.clone();
        malformed.output = Some(json!({ "approval_id": "not an id" }));
        assert_eq!(malformed.approval_id(), None);
        let mut absent = pending;
        absent.output = None;
        assert_eq!(absent.approval_id(), None);
    }

    /// A result is moved several times on its way back from a handler. Before `usage` and
    /// `error` were boxed it was 696 bytes; with `memory_update` and `receipt` inline, 264.
    #[test]
    fn a_result_stays_small() {
        let size = std::mem::size_of::<ActionResult>();
        assert!(size <= 160, "ActionResult is {size} bytes");
    }

    fn round_trip<T>(value: &T, expected: &str)
    where
        T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let text = serde_json::to_string(value).unwrap();
        assert_eq!(text, expected);
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, value);
    }

    #[test]
    fn full_action_result_round_trips_in_declaration_order() {
        let result = ActionResult {
            action_id: ActionId::trusted("act_1"),
            status: ActionResultStatus::Failed,
            output: Some(json!({"partial": true})),
            message: vec![MessagePart::text("sorry")],
            memory_update: Some(Box::new(json!({"seen": 1}))),
            usage: Some(Box::new(Usage {
                tokens: Some(json!({"in": 3})),
                tools: Some(json!(["search"])),
                latency_ms: Some(12),
                cost: Some(json!(0.5)),
            })),
            receipt: Some(Box::new(ReceiptRef {
                id: ReceiptId::trusted("rcpt_1"),
                hash: "sha256:ff".into(),
            })),
            error: Some(Box::new(ProtocolError::new(
                "x.y",
                "m",
                ErrorCategory::Connector,
            ))),
        };
        round_trip(
            &result,
            concat!(
                r#"{"action_id":"act_1","status":"failed","output":{"partial":true},"#,
                r#""message":[{"type":"text","text":"sorry","format":"plain"}],"#,
                r#""memory_update":{"seen":1},"#,
                r#""usage":{"tokens":{"in":3},"tools":["search"],"latency_ms":12,"cost":0.5},"#,
                r#""receipt":{"id":"rcpt_1","hash":"sha256:ff"},"#,
                r#""error":{"code":"x.y","message":"m","category":"connector"}}"#
            ),
        );
    }

    #[test]
    fn helpers_set_status_and_payload() {
        let done = ActionResult::completed(ActionId::trusted("act_1"), json!({"ok": true}));
        assert_eq!(
            serde_json::to_string(&done).unwrap(),
            r#"{"action_id":"act_1","status":"completed","output":{"ok":true}}"#
        );
        let failed = ActionResult::failed(
            ActionId::trusted("act_1"),
            ProtocolError::invalid_input("x"),
        );
        assert_eq!(failed.status, ActionResultStatus::Failed);
        assert_eq!(
            failed.error,
            Some(Box::new(ProtocolError::invalid_input("x")))
        );
    }

    #[test]
    fn every_message_part_variant_round_trips() {
        round_trip(
            &MessagePart::Text {
                text: "hi".into(),
                format: Some("markdown".into()),
            },
            r#"{"type":"text","text":"hi","format":"markdown"}"#,
        );
        round_trip(
            &MessagePart::Image {
                url: Some("https://i/1.png".into()),
                data: Some("aGk=".into()),
                mime_type: "image/png".into(),
                alt: Some("logo".into()),
            },
            r#"{"type":"image","url":"https://i/1.png","data":"aGk=","mime_type":"image/png","alt":"logo"}"#,
        );
        round_trip(
            &MessagePart::File {
                url: Some("https://f/1".into()),
                data: Some("aGk=".into()),
                mime_type: "text/plain".into(),
                filename: "a.txt".into(),
                size_bytes: Some(2),
            },
            r#"{"type":"file","url":"https://f/1","data":"aGk=","mime_type":"text/plain","filename":"a.txt","size_bytes":2}"#,
        );
        round_trip(
            &MessagePart::Audio {
                url: Some("https://a/1".into()),
                data: Some("aGk=".into()),
                mime_type: "audio/ogg".into(),
                transcript: Some("hi".into()),
            },
            r#"{"type":"audio","url":"https://a/1","data":"aGk=","mime_type":"audio/ogg","transcript":"hi"}"#,
        );
        round_trip(
            &MessagePart::Form {
                fields: vec![json!({"name": "n"})],
                actions: vec![json!({"id": "submit"})],
            },
            r#"{"type":"form","fields":[{"name":"n"}],"actions":[{"id":"submit"}]}"#,
        );
        round_trip(
            &MessagePart::Card {
                title: "T".into(),
                body: "B".into(),
                actions: vec![json!({"id": "open"})],
                media: Some(json!({"url": "https://m"})),
            },
            r#"{"type":"card","title":"T","body":"B","actions":[{"id":"open"}],"media":{"url":"https://m"}}"#,
        );
        round_trip(
            &MessagePart::Json {
                data: json!({"a": 1}),
                schema: Some(json!({"type": "object"})),
            },
            r#"{"type":"json","data":{"a":1},"schema":{"type":"object"}}"#,
        );
        round_trip(
            &MessagePart::ToolResult {
                tool_call_id: "call_1".into(),
                data: Some(json!([1])),
                error: Some(json!({"code": "e"})),
            },
            r#"{"type":"tool_result","tool_call_id":"call_1","data":[1],"error":{"code":"e"}}"#,
        );
    }

    #[test]
    fn message_parts_skip_absent_fields_but_form_lists_are_required() {
        round_trip(
            &MessagePart::Image {
                url: None,
                data: None,
                mime_type: "image/png".into(),
                alt: None,
            },
            r#"{"type":"image","mime_type":"image/png"}"#,
        );
        round_trip(
            &MessagePart::Form {
                fields: Vec::new(),
                actions: Vec::new(),
            },
            r#"{"type":"form","fields":[],"actions":[]}"#,
        );
        assert!(serde_json::from_str::<MessagePart>(r#"{"type":"form","fields":[]}"#).is_err());
        assert!(serde_json::from_str::<MessagePart>(r#"{"type":"video","url":"x"}"#).is_err());
        round_trip(
            &MessagePart::Card {
                title: "T".into(),
                body: "B".into(),
                actions: Vec::new(),
                media: None,
            },
            r#"{"type":"card","title":"T","body":"B"}"#,
        );
    }

    #[test]
    fn message_list_rejects_null_and_may_be_absent() {
        assert!(
            serde_json::from_str::<ActionResult>(
                r#"{"action_id":"a","status":"completed","message":null}"#
            )
            .is_err()
        );
        let result: ActionResult =
            serde_json::from_str(r#"{"action_id":"a","status":"completed"}"#).unwrap();
        assert!(result.message.is_empty());
    }

    #[test]
    fn stream_chunk_and_ack_round_trip() {
        round_trip(
            &StreamChunk {
                action_id: ActionId::trusted("act_1"),
                sequence: 3,
                kind: StreamChunkKind::PendingApproval,
                data: Some(json!({"p": 50})),
                part: Some(MessagePart::text("half")),
            },
            r#"{"action_id":"act_1","sequence":3,"kind":"pending_approval","data":{"p":50},"part":{"type":"text","text":"half","format":"plain"}}"#,
        );
        round_trip(
            &Ack {
                action_id: ActionId::trusted("act_1"),
                status: AckStatus::Cached,
                reason: Some("replay".into()),
                retry_after_ms: Some(10),
                queue: Some("q".into()),
            },
            r#"{"action_id":"act_1","status":"cached","reason":"replay","retry_after_ms":10,"queue":"q"}"#,
        );
        round_trip(&ActionLifecycleState::DeadLettered, r#""dead_lettered""#);
    }

    fn replayed(status: ActionResultStatus, output: Option<Value>) -> ActionResult {
        let mut result = ActionResult::new(ActionId::new(), status);
        result.output = output;
        result.mark_idempotent_replay();
        result
    }

    #[test]
    fn a_replay_marks_an_object_output_in_place() {
        let result = replayed(ActionResultStatus::Completed, Some(json!({"n": 1})));
        assert_eq!(
            result.output,
            Some(json!({"n": 1, "idempotent_replay": true}))
        );
        assert!(result.is_idempotent_replay());
        assert_eq!(result.original_output(), Some(json!({"n": 1})));
    }

    #[test]
    fn a_replay_keeps_an_output_that_is_not_an_object() {
        for original in [
            json!([1, 2]),
            json!("tkt_1"),
            json!(7),
            json!(null),
            json!(false),
        ] {
            let result = replayed(ActionResultStatus::Completed, Some(original.clone()));
            assert_eq!(
                result.output,
                Some(json!({"idempotent_replay": true, "original_output": original}))
            );
            assert!(result.is_idempotent_replay());
            assert_eq!(result.original_output(), Some(original));
        }
    }

    #[test]
    fn an_object_shaped_like_the_wrapper_is_wrapped_too() {
        for original in [
            json!({"original_output": 1}),
            json!({"original_output": 1, "idempotent_replay": false}),
        ] {
            let result = replayed(ActionResultStatus::Completed, Some(original.clone()));
            assert_eq!(result.output.as_ref().unwrap()["original_output"], original);
            assert_eq!(result.original_output(), Some(original));
        }
        // With another key beside it, the object is not mistaken for the wrapper.
        let original = json!({"original_output": 1, "other": 2});
        let result = replayed(ActionResultStatus::Completed, Some(original.clone()));
        assert_eq!(result.output.as_ref().unwrap()["other"], 2);
        assert_eq!(result.original_output(), Some(original));
    }

    /// Found by a hostile audit: the marker overwrote a handler's own `idempotent_replay`
    /// value, and `original_output` then deleted the field.
    #[test]
    fn an_output_with_its_own_marker_field_is_wrapped() {
        let original = json!({"charge_id": "ch_1", "idempotent_replay": false});
        let result = replayed(ActionResultStatus::Completed, Some(original.clone()));
        assert_eq!(
            result.output,
            Some(json!({"idempotent_replay": true, "original_output": original}))
        );
        assert!(result.is_idempotent_replay());
        assert_eq!(result.original_output(), Some(original));
    }

    #[test]
    fn marking_twice_is_marking_once() {
        for original in [
            json!({"n": 1}),
            json!([1]),
            json!({"idempotent_replay": false}),
        ] {
            let once = replayed(ActionResultStatus::Completed, Some(original.clone()));
            let mut twice = once.clone();
            twice.mark_idempotent_replay();
            assert_eq!(twice, once);
            assert_eq!(twice.original_output(), Some(original));
        }
    }

    #[test]
    fn a_replay_without_output_has_none_to_give_back() {
        let failed = replayed(ActionResultStatus::Failed, None);
        assert_eq!(failed.output, Some(json!({"idempotent_replay": true})));
        assert!(failed.is_idempotent_replay());
        assert_eq!(failed.original_output(), None);
        // A completed empty object stays one.
        let empty = replayed(ActionResultStatus::Completed, Some(json!({})));
        assert_eq!(empty.original_output(), Some(json!({})));
    }

    #[test]
    fn an_output_without_the_marker_is_left_alone() {
        let mut output = json!({"idempotent_replay": false, "original_output": [1]});
        assert_eq!(unmark_idempotent_replay(&mut output), (false, true));
        assert_eq!(
            output,
            json!({"idempotent_replay": false, "original_output": [1]})
        );
        let mut list = json!([1]);
        assert_eq!(unmark_idempotent_replay(&mut list), (false, true));
        let live = ActionResult::completed(ActionId::new(), json!({"n": 1}));
        assert!(!live.is_idempotent_replay());
        assert_eq!(live.original_output(), Some(json!({"n": 1})));
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ticket {
        id: String,
    }

    #[test]
    fn output_as_decodes_a_replay_as_the_first_answer() {
        let first = ActionResult::completed(ActionId::new(), json!({"id": "t1"}));
        let expected = Ticket { id: "t1".into() };
        assert_eq!(first.output_as::<Ticket>().unwrap(), expected);
        let mut replay = first.clone();
        replay.mark_idempotent_replay();
        // The marker alone would break a type that denies unknown fields.
        assert!(serde_json::from_value::<Ticket>(replay.output.clone().unwrap()).is_err());
        assert_eq!(replay.output_as::<Ticket>().unwrap(), expected);

        let mut ids = ActionResult::completed(ActionId::new(), json!(["a", "b"]));
        ids.mark_idempotent_replay();
        assert_eq!(ids.output_as::<Vec<String>>().unwrap(), ["a", "b"]);

        let unit = ActionResult::new(ActionId::new(), ActionResultStatus::Completed);
        unit.output_as::<()>().unwrap();
    }

    #[test]
    fn output_as_says_why_there_is_no_output() {
        let error = ProtocolError::new("x.failed", "it broke", ErrorCategory::Connector);
        let failed = ActionResult::failed(ActionId::new(), error);
        let refused = failed.output_as::<Ticket>().unwrap_err();
        assert!(matches!(
            &refused,
            OutputError::NotCompleted { status: ActionResultStatus::Failed, error: Some(e) }
                if e.code == "x.failed"
        ));
        assert_eq!(
            refused.to_string(),
            "the action did not complete: its result is `failed` (x.failed: it broke)"
        );
        let pending = ActionResult::new(ActionId::new(), ActionResultStatus::PendingApproval);
        assert_eq!(
            pending.output_as::<Ticket>().unwrap_err().to_string(),
            "the action did not complete: its result is `pending_approval`"
        );
        let wrong = ActionResult::completed(ActionId::new(), json!({"id": 5}));
        let OutputError::Decode(source) = wrong.output_as::<Ticket>().unwrap_err() else {
            panic!("a wrong type is a decode error");
        };
        assert!(source.to_string().contains("invalid type"), "{source}");
    }
}
