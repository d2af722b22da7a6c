//! `ActionResult`, message parts, stream chunks and acknowledgements (`aip-model.md` §4.2).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ProtocolError;
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
}
