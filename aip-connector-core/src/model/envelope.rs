//! The AIP envelope (`aip-model.md` §5): every message on a binding travels in one.
//!
//! [`MessageType`] knows every upstream wire name. [`MessageBody`] types the bodies a connector
//! host sends or answers; any other body is kept as [`MessageBody::Other`] with its key and raw
//! JSON, so an envelope from a richer peer parses, round-trips and is refused by name rather
//! than by a serde error.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use time::OffsetDateTime;

use super::{
    Ack, Action, ActionResult, ApprovalDecision, ErrorBody, Manifest, ManifestRequest, Principal,
    ProtocolError, StreamChunk, TransactionRequest, TransactionResult,
};
use crate::ids::{
    ActionId, ApprovalId, CapabilityId, CorrelationId, MessageId, PrincipalId, SessionId,
    TransactionId,
};

/// The protocol version every envelope carries.
pub const AIP_VERSION: &str = "1.0";

macro_rules! message_types {
    ($( $(#[$doc:meta])* $variant:ident => $wire:literal, $body:literal; )*) => {
        /// Every AIP 1.0 message type, by its wire name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum MessageType {
            $( $(#[$doc])* #[serde(rename = $wire)] $variant, )*
        }

        impl MessageType {
            /// Every message type, in upstream's order.
            pub const ALL: &'static [MessageType] = &[$(MessageType::$variant,)*];

            /// The wire name, e.g. `aip.core.v1.action`.
            pub const fn as_str(self) -> &'static str {
                match self { $(MessageType::$variant => $wire,)* }
            }

            /// The key of the body object this message type carries, e.g. `action`.
            pub const fn body_key(self) -> &'static str {
                match self { $(MessageType::$variant => $body,)* }
            }

            /// The message type whose body key is `key`.
            pub fn from_body_key(key: &str) -> Option<MessageType> {
                match key { $($body => Some(MessageType::$variant),)* _ => None }
            }
        }
    };
}

message_types! {
    /// Opens a session.
    Handshake => "aip.core.v1.handshake", "handshake";
    /// Answers a handshake.
    HandshakeResponse => "aip.core.v1.handshake_response", "handshake_response";
    /// Invokes a capability.
    Action => "aip.core.v1.action", "action";
    /// Acknowledges an action.
    Ack => "aip.core.v1.ack", "ack";
    /// One chunk of a streamed action.
    StreamChunk => "aip.core.v1.stream_chunk", "stream_chunk";
    /// The result of an action.
    ActionResult => "aip.core.v1.action_result", "action_result";
    /// Asks for an action's status.
    ActionStatusRequest => "aip.lifecycle.v1.action_status_request", "action_status_request";
    /// An action's status.
    ActionStatus => "aip.lifecycle.v1.action_status", "action_status";
    /// Asks for an action's result.
    ActionResultRequest => "aip.lifecycle.v1.action_result_request", "action_result_request";
    /// Lists actions.
    ActionListRequest => "aip.lifecycle.v1.action_list_request", "action_list_request";
    /// A list of actions.
    ActionList => "aip.lifecycle.v1.action_list", "action_list";
    /// Asks for an action's events.
    ActionEventsRequest => "aip.lifecycle.v1.action_events_request", "action_events_request";
    /// An action's events.
    ActionEvents => "aip.lifecycle.v1.action_events", "action_events";
    /// Asks for approval.
    ApprovalRequest => "aip.policy.v1.approval_request", "approval_request";
    /// Records an approval decision.
    ApprovalDecision => "aip.policy.v1.approval_decision", "approval_decision";
    /// Reads one approval.
    ApprovalQueryRequest => "aip.policy.v1.approval_query_request", "approval_query_request";
    /// Lists approvals.
    ApprovalListRequest => "aip.policy.v1.approval_list_request", "approval_list_request";
    /// One approval.
    ApprovalRecordView => "aip.policy.v1.approval_record_view", "approval_record_view";
    /// A list of approvals.
    ApprovalList => "aip.policy.v1.approval_list", "approval_list";
    /// Reads one callback delivery.
    CallbackDeliveryQueryRequest => "aip.callback.v1.delivery_query_request", "callback_delivery_query_request";
    /// Lists callback deliveries.
    CallbackDeliveryListRequest => "aip.callback.v1.delivery_list_request", "callback_delivery_list_request";
    /// One callback delivery.
    CallbackDeliveryRecord => "aip.callback.v1.delivery_record", "callback_delivery_record";
    /// A list of callback deliveries.
    CallbackDeliveryList => "aip.callback.v1.delivery_list", "callback_delivery_list";
    /// Opens or reads a session.
    SessionRequest => "aip.session.v1.session_request", "session_request";
    /// One session.
    SessionView => "aip.session.v1.session_view", "session_view";
    /// Lists sessions.
    SessionListRequest => "aip.session.v1.session_list_request", "session_list_request";
    /// A list of sessions.
    SessionList => "aip.session.v1.session_list", "session_list";
    /// Closes a session.
    SessionCloseRequest => "aip.session.v1.session_close_request", "session_close_request";
    /// Resumes a session.
    SessionResumeRequest => "aip.session.v1.session_resume_request", "session_resume_request";
    /// A resumed session.
    SessionResume => "aip.session.v1.session_resume", "session_resume";
    /// Delegates an action.
    DelegationRequest => "aip.agent.v1.delegation_request", "delegation_request";
    /// The result of a delegation.
    DelegationResult => "aip.agent.v1.delegation_result", "delegation_result";
    /// Runs a transaction step.
    TransactionRequest => "aip.transaction.v1.request", "transaction_request";
    /// The state of a transaction after a step.
    TransactionResult => "aip.transaction.v1.result", "transaction_result";
    /// Reads one transaction.
    TransactionQueryRequest => "aip.transaction.v1.query_request", "transaction_query_request";
    /// One transaction.
    TransactionView => "aip.transaction.v1.view", "transaction_view";
    /// An error.
    Error => "aip.core.v1.error", "error";
    /// Cancels an action or a session.
    Cancel => "aip.core.v1.cancel", "cancel";
    /// Liveness probe.
    Heartbeat => "aip.core.v1.heartbeat", "heartbeat";
    /// Answers a heartbeat.
    HeartbeatAck => "aip.core.v1.heartbeat_ack", "heartbeat_ack";
    /// Escalates to a human.
    Escalation => "aip.core.v1.escalation", "escalation";
    /// Resolves an escalation.
    EscalationResolution => "aip.core.v1.escalation_resolution", "escalation_resolution";
    /// Asks for the manifest.
    ManifestRequest => "aip.discovery.v1.manifest_request", "manifest_request";
    /// The manifest.
    ManifestResponse => "aip.discovery.v1.manifest_response", "manifest";
    /// Asks for an event stream.
    EventStreamRequest => "aip.discovery.v1.event_stream_request", "event_stream_request";
    /// An event stream.
    EventStreamResponse => "aip.discovery.v1.event_stream_response", "event_stream";
    /// A channel message was created.
    ChannelMessageCreated => "aip.channel.v1.message_created", "channel_message";
    /// A conversation was updated.
    ConversationUpdated => "aip.channel.v1.conversation_updated", "conversation";
    /// A receipt chain.
    ReceiptChain => "aip.audit.v1.receipt_chain", "receipt_chain";
    /// Asks for receipts.
    ReceiptQueryRequest => "aip.audit.v1.receipt_query_request", "receipt_query_request";
    /// An audit event.
    AuditEvent => "aip.audit.v1.audit_event", "audit_event";
    /// Asks for audit events.
    AuditQueryRequest => "aip.audit.v1.audit_query_request", "audit_query_request";
    /// Audit events.
    AuditQueryResult => "aip.audit.v1.audit_query_result", "audit_query_result";
    /// Lists resources.
    ResourceListRequest => "aip.resource.v1.resource_list_request", "resource_list_request";
    /// A list of resources.
    ResourceList => "aip.resource.v1.resource_list", "resource_list";
    /// Reads a resource.
    ResourceReadRequest => "aip.resource.v1.resource_read_request", "resource_read_request";
    /// A resource's content.
    ResourceReadResult => "aip.resource.v1.resource_read_result", "resource_read_result";
    /// Settles a batch.
    BatchSettlement => "aip.economic.v1.batch_settlement", "batch_settlement";
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a `cancel` targets (externally tagged: `{"action": "act_…"}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelTarget {
    /// One action.
    Action(ActionId),
    /// A session.
    Session(SessionId),
}

/// Asks to cancel an action or a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    /// What to cancel.
    pub target: CancelTarget,
    /// Why, for the audit trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Reads one transaction: exactly one of the three selectors must be set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionQueryRequest {
    /// By transaction id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<TransactionId>,
    /// By plan id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// By the action that owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<ActionId>,
}

/// Reads one approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalQueryRequest {
    /// The approval.
    pub approval_id: ApprovalId,
}

/// Where an approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for decisions.
    Pending,
    /// Enough approvals were recorded; the action may run (once).
    Approved,
    /// A decision denied it.
    Denied,
    /// Its time to live passed.
    Expired,
    /// A decision revoked it.
    Revoked,
}

/// The wire view of one approval: who asked for what, where it stands, and the decisions so
/// far. The gated action's input is never part of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecordView {
    /// The approval.
    pub approval_id: ApprovalId,
    /// Where it stands.
    pub status: ApprovalState,
    /// The gated action.
    pub action_id: ActionId,
    /// Its capability.
    pub capability_id: CapabilityId,
    /// Who asked.
    pub requested_by: PrincipalId,
    /// Decisions so far, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<ApprovalDecision>,
    /// When it was requested.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it expires.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
}

impl ApprovalRecordView {
    /// The first approving decision: what the requester attaches (`Action::approval`) when it
    /// re-submits the approved action, e.g. after `AipClient::decide` or
    /// `AipClient::approval` answered this view.
    pub fn approving_decision(&self) -> Option<&ApprovalDecision> {
        ApprovalDecision::first_approving(&self.decisions)
    }
}

/// An envelope body: exactly one key, the body name of its message type. The bodies a host
/// sends or answers are typed; every other one is kept as it came.
#[derive(Clone, Debug, PartialEq)]
pub enum MessageBody {
    /// `action`.
    Action(Box<Action>),
    /// `ack`.
    Ack(Ack),
    /// `stream_chunk`.
    StreamChunk(StreamChunk),
    /// `action_result`.
    ActionResult(Box<ActionResult>),
    /// `approval_decision`.
    ApprovalDecision(Box<ApprovalDecision>),
    /// `approval_query_request`.
    ApprovalQueryRequest(ApprovalQueryRequest),
    /// `approval_record_view`.
    ApprovalRecordView(Box<ApprovalRecordView>),
    /// `transaction_request`.
    TransactionRequest(Box<TransactionRequest>),
    /// `transaction_result`.
    TransactionResult(Box<TransactionResult>),
    /// `transaction_query_request`.
    TransactionQueryRequest(TransactionQueryRequest),
    /// `transaction_view`: the durable state of one transaction.
    TransactionView(Box<TransactionResult>),
    /// `error`, nesting a [`ProtocolError`] under a second `error` key as upstream does.
    Error(ErrorBody),
    /// `cancel`.
    Cancel(Cancel),
    /// `manifest_request`.
    ManifestRequest(ManifestRequest),
    /// `manifest`.
    Manifest(Box<Manifest>),
    /// Any other body, by its key.
    Other {
        /// The body key, e.g. `heartbeat`.
        key: String,
        /// The body as it came.
        value: Value,
    },
}

impl MessageBody {
    /// The body key this body serializes under.
    pub fn key(&self) -> &str {
        match self {
            MessageBody::Other { key, .. } => key,
            typed => typed
                .message_type()
                .expect("typed bodies have a message type")
                .body_key(),
        }
    }

    /// The message type this body belongs to; `None` for an [`Other`](Self::Other) body whose
    /// key no message type has.
    pub fn message_type(&self) -> Option<MessageType> {
        Some(match self {
            MessageBody::Action(_) => MessageType::Action,
            MessageBody::Ack(_) => MessageType::Ack,
            MessageBody::StreamChunk(_) => MessageType::StreamChunk,
            MessageBody::ActionResult(_) => MessageType::ActionResult,
            MessageBody::ApprovalDecision(_) => MessageType::ApprovalDecision,
            MessageBody::ApprovalQueryRequest(_) => MessageType::ApprovalQueryRequest,
            MessageBody::ApprovalRecordView(_) => MessageType::ApprovalRecordView,
            MessageBody::TransactionRequest(_) => MessageType::TransactionRequest,
            MessageBody::TransactionResult(_) => MessageType::TransactionResult,
            MessageBody::TransactionQueryRequest(_) => MessageType::TransactionQueryRequest,
            MessageBody::TransactionView(_) => MessageType::TransactionView,
            MessageBody::Error(_) => MessageType::Error,
            MessageBody::Cancel(_) => MessageType::Cancel,
            MessageBody::ManifestRequest(_) => MessageType::ManifestRequest,
            MessageBody::Manifest(_) => MessageType::ManifestResponse,
            MessageBody::Other { key, .. } => return MessageType::from_body_key(key),
        })
    }
}

impl Serialize for MessageBody {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        let key = self.key();
        match self {
            MessageBody::Action(b) => map.serialize_entry(key, b)?,
            MessageBody::Ack(b) => map.serialize_entry(key, b)?,
            MessageBody::StreamChunk(b) => map.serialize_entry(key, b)?,
            MessageBody::ActionResult(b) => map.serialize_entry(key, b)?,
            MessageBody::ApprovalDecision(b) => map.serialize_entry(key, b)?,
            MessageBody::ApprovalQueryRequest(b) => map.serialize_entry(key, b)?,
            MessageBody::ApprovalRecordView(b) => map.serialize_entry(key, b)?,
            MessageBody::TransactionRequest(b) => map.serialize_entry(key, b)?,
            MessageBody::TransactionResult(b) => map.serialize_entry(key, b)?,
            MessageBody::TransactionQueryRequest(b) => map.serialize_entry(key, b)?,
            MessageBody::TransactionView(b) => map.serialize_entry(key, b)?,
            MessageBody::Error(b) => map.serialize_entry(key, b)?,
            MessageBody::Cancel(b) => map.serialize_entry(key, b)?,
            MessageBody::ManifestRequest(b) => map.serialize_entry(key, b)?,
            MessageBody::Manifest(b) => map.serialize_entry(key, b)?,
            MessageBody::Other { value, .. } => map.serialize_entry(key, value)?,
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for MessageBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = MessageBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with exactly one key, the body name")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageBody, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::invalid_length(0, &self));
        };
        let body = match MessageType::from_body_key(&key) {
            Some(MessageType::Action) => MessageBody::Action(map.next_value()?),
            Some(MessageType::Ack) => MessageBody::Ack(map.next_value()?),
            Some(MessageType::StreamChunk) => MessageBody::StreamChunk(map.next_value()?),
            Some(MessageType::ActionResult) => MessageBody::ActionResult(map.next_value()?),
            Some(MessageType::ApprovalDecision) => MessageBody::ApprovalDecision(map.next_value()?),
            Some(MessageType::ApprovalQueryRequest) => {
                MessageBody::ApprovalQueryRequest(map.next_value()?)
            }
            Some(MessageType::ApprovalRecordView) => {
                MessageBody::ApprovalRecordView(map.next_value()?)
            }
            Some(MessageType::TransactionRequest) => {
                MessageBody::TransactionRequest(map.next_value()?)
            }
            Some(MessageType::TransactionResult) => {
                MessageBody::TransactionResult(map.next_value()?)
            }
            Some(MessageType::TransactionQueryRequest) => {
                MessageBody::TransactionQueryRequest(map.next_value()?)
            }
            Some(MessageType::TransactionView) => MessageBody::TransactionView(map.next_value()?),
            Some(MessageType::Error) => MessageBody::Error(map.next_value()?),
            Some(MessageType::Cancel) => MessageBody::Cancel(map.next_value()?),
            Some(MessageType::ManifestRequest) => MessageBody::ManifestRequest(map.next_value()?),
            Some(MessageType::ManifestResponse) => MessageBody::Manifest(map.next_value()?),
            _ => MessageBody::Other {
                value: map.next_value()?,
                key,
            },
        };
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(2, &self));
        }
        Ok(body)
    }
}

/// One AIP message with its routing and correlation metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always [`AIP_VERSION`].
    pub aip_version: String,
    /// What the body is.
    pub message_type: MessageType,
    /// This message.
    pub message_id: MessageId,
    /// When it was sent.
    #[serde(with = "time::serde::rfc3339")]
    pub sent_at: OffsetDateTime,
    /// The body, under its key.
    pub body: MessageBody,
    /// The session it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Correlates related messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<CorrelationId>,
    /// The message this one answers (a message or correlation id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_response_to: Option<String>,
    /// Idempotency key of the message itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Sender, as the sender claims it; a host never trusts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Principal>,
    /// Recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Principal>,
    /// Trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Value>,
    /// Security metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Value>,
    /// Extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

impl Envelope {
    /// A new envelope around `body`, sent now, with a fresh message id. Its message type is the
    /// body's.
    ///
    /// # Panics
    /// For an [`MessageBody::Other`] body whose key no message type has.
    pub fn new(body: MessageBody) -> Self {
        let message_type = body
            .message_type()
            .expect("an envelope body must belong to a message type");
        Self {
            aip_version: AIP_VERSION.to_owned(),
            message_type,
            message_id: MessageId::new(),
            sent_at: OffsetDateTime::now_utc(),
            body,
            session_id: None,
            correlation_id: None,
            in_response_to: None,
            idempotency_key: None,
            from: None,
            to: None,
            trace: None,
            security: None,
            extensions: None,
        }
    }

    /// An answer to `request`: `in_response_to` names it and its correlation and session carry
    /// over.
    pub fn reply_to(request: &Envelope, body: MessageBody) -> Self {
        Self {
            in_response_to: Some(request.message_id.to_string()),
            correlation_id: request.correlation_id.clone(),
            session_id: request.session_id.clone(),
            ..Self::new(body)
        }
    }

    /// An `aip.core.v1.error` envelope carrying `error`.
    pub fn error(error: ProtocolError) -> Self {
        Self::new(MessageBody::Error(ErrorBody { error }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::{ValidationError, validate_envelope};

    fn action_envelope() -> Value {
        json!({
            "aip_version": "1.0",
            "message_type": "aip.core.v1.action",
            "message_id": "msg_1",
            "sent_at": "2026-11-30T10:00:00Z",
            "body": {"action": {"id": "act_1", "capability_id": "cap:x:y", "input": {"a": 1}}},
            "idempotency_key": "k1"
        })
    }

    #[test]
    fn an_approval_view_names_its_first_approving_decision() {
        let view: ApprovalRecordView = serde_json::from_value(json!({
            "approval_id": "apr_1",
            "status": "approved",
            "action_id": "act_1",
            "capability_id": "cap:x:y",
            "requested_by": "user:ada",
            "created_at": "2026-11-30T10:00:00Z",
        }))
        .unwrap();
        assert_eq!(view.approving_decision(), None);
        let approver = |id: &str| Principal::new(id, crate::model::PrincipalKind::Human);
        let id = view.approval_id.clone();
        let mut view = view;
        view.decisions = vec![
            ApprovalDecision::deny(id.clone(), approver("user:bob")),
            ApprovalDecision::approve(id.clone(), approver("user:fin")),
            ApprovalDecision::approve(id, approver("user:cfo")),
        ];
        let chosen = view.approving_decision().unwrap();
        assert_eq!(chosen.approver.id.as_str(), "user:fin");
    }

    #[test]
    fn every_message_type_round_trips_by_wire_name_and_body_key() {
        assert_eq!(MessageType::ALL.len(), 58);
        for &ty in MessageType::ALL {
            let wire = serde_json::to_value(ty).unwrap();
            assert_eq!(wire, json!(ty.as_str()));
            assert_eq!(serde_json::from_value::<MessageType>(wire).unwrap(), ty);
            assert_eq!(MessageType::from_body_key(ty.body_key()), Some(ty));
        }
        assert_eq!(MessageType::ManifestResponse.body_key(), "manifest");
    }

    #[test]
    fn a_typed_envelope_round_trips_exactly() {
        let wire = action_envelope();
        let envelope: Envelope = serde_json::from_value(wire.clone()).unwrap();
        assert!(matches!(envelope.body, MessageBody::Action(_)));
        assert_eq!(validate_envelope(&envelope), Ok(()));
        let back = serde_json::to_value(&envelope).unwrap();
        assert_eq!(back["body"]["action"]["input"], json!({"a": 1}));
        assert_eq!(back["message_type"], wire["message_type"]);
        assert_eq!(back["sent_at"], wire["sent_at"]);
    }

    #[test]
    fn an_untyped_body_is_kept_as_it_came() {
        let wire = json!({
            "aip_version": "1.0",
            "message_type": "aip.core.v1.heartbeat",
            "message_id": "msg_2",
            "sent_at": "2026-11-30T10:00:00Z",
            "body": {"heartbeat": {"at": 5}}
        });
        let envelope: Envelope = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(
            envelope.body,
            MessageBody::Other {
                key: "heartbeat".into(),
                value: json!({"at": 5})
            }
        );
        assert_eq!(serde_json::to_value(&envelope).unwrap(), wire);
    }

    #[test]
    fn a_body_of_another_type_is_a_mismatch() {
        let mut wire = action_envelope();
        wire["message_type"] = json!("aip.core.v1.cancel");
        let envelope: Envelope = serde_json::from_value(wire).unwrap();
        let error = validate_envelope(&envelope).unwrap_err();
        assert_eq!(
            error.to_string(),
            "message body does not match declared message type `aip.core.v1.cancel`"
        );
    }

    #[test]
    fn version_and_idempotency_key_are_checked_first() {
        let mut wire = action_envelope();
        wire["aip_version"] = json!("2.0");
        let envelope: Envelope = serde_json::from_value(wire).unwrap();
        assert_eq!(
            validate_envelope(&envelope),
            Err(ValidationError::UnsupportedVersion("2.0".into()))
        );
        let mut wire = action_envelope();
        wire["idempotency_key"] = json!("");
        let envelope: Envelope = serde_json::from_value(wire).unwrap();
        assert_eq!(
            validate_envelope(&envelope),
            Err(ValidationError::EmptyEnvelopeIdempotencyKey)
        );
    }

    #[test]
    fn the_action_body_is_validated_too() {
        let mut wire = action_envelope();
        wire["body"]["action"]["input"] = Value::Null;
        let envelope: Envelope = serde_json::from_value(wire).unwrap();
        assert_eq!(
            validate_envelope(&envelope),
            Err(ValidationError::NullInput)
        );
    }

    #[test]
    fn a_body_needs_exactly_one_key() {
        let mut wire = action_envelope();
        wire["body"]["cancel"] = json!({"target": {"action": "act_1"}});
        assert!(serde_json::from_value::<Envelope>(wire.clone()).is_err());
        wire["body"] = json!({});
        assert!(serde_json::from_value::<Envelope>(wire).is_err());
    }

    #[test]
    fn the_error_body_nests_twice_and_cancel_targets_are_tagged() {
        let envelope = Envelope::error(ProtocolError {
            code: "transport.overloaded".into(),
            message: "busy".into(),
            category: super::super::ErrorCategory::Temporary,
            retryable: Some(true),
            retry_after_ms: None,
            details: None,
            source: None,
        });
        let wire = serde_json::to_value(&envelope).unwrap();
        assert_eq!(
            wire["body"]["error"]["error"]["code"],
            "transport.overloaded"
        );
        let cancel = Cancel {
            target: CancelTarget::Action(ActionId::trusted("act_9")),
            reason: None,
        };
        assert_eq!(
            serde_json::to_value(&cancel).unwrap(),
            json!({"target": {"action": "act_9"}})
        );
    }

    #[test]
    fn a_transaction_query_names_exactly_one_selector() {
        use crate::validation::validate_transaction_query;
        let none = TransactionQueryRequest::default();
        assert!(validate_transaction_query(&none).is_err());
        let one = TransactionQueryRequest {
            plan_id: Some("plan_1".into()),
            ..Default::default()
        };
        assert!(validate_transaction_query(&one).is_ok());
        let two = TransactionQueryRequest {
            action_id: Some(ActionId::trusted("act_1")),
            ..one
        };
        assert!(validate_transaction_query(&two).is_err());
    }
}
