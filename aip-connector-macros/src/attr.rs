//! Interprets the `#[capability(...)]` tree (`meta.rs`) into typed, partially resolved sections.
//!
//! Error policy (as serde_derive's): nothing here returns early. A bad, unknown or duplicated key
//! is recorded in the [`Ctxt`] and parsing goes on, so the author sees every mistake of an
//! attribute in one compile. Every key that is parsed records its span under the JSON Pointer of
//! the wire field it sets (`spans`), so rule issues from `aip-connector-core` (which carry such
//! pointers) are reported on the key that caused them.

use std::collections::{BTreeMap, HashSet};

use aip_connector_core::model::{
    ApprovalPolicy, ApprovalRule, ApproverSelector, Binding, CapabilityKind, CompensationMode,
    CredentialPolicy, DataResidency, DataSensitivity, DelegatedApprovalAuthority, DryRunFidelity,
    EvidenceRequirement, ExpectedCompletionMode, IdempotencyCollisionBehavior, IdempotencyKeyScope,
    IdempotencyRequirement, RetentionPolicy, RetrySafety, RiskLevel, SeparationOfDuties,
    ServiceLevelContract, SideEffect, Stability, TransactionMode,
};
use proc_macro2::Span;
use serde::de::DeserializeOwned;
use serde_json::Value;
use syn::spanned::Spanned;
use syn::{Expr, ExprCall, LitStr};

use crate::ctxt::Ctxt;
use crate::diagnostics;
use crate::keys;
use crate::meta::{self, MetaItem, MetaKind};

/// JSON Pointer (into the capability) → span of the key that set it.
pub(crate) type SpanMap = BTreeMap<String, Span>;

/// Where `risk` is recorded in the [`SpanMap`], whether or not its value parsed.
pub(crate) const RISK_POINTER: &str = "/risk";
/// Where `side_effects` is recorded in the [`SpanMap`], whether or not its value parsed.
pub(crate) const SIDE_EFFECTS_POINTER: &str = "/contract/side_effects";
/// Where the binding of a profile is recorded in the [`SpanMap`]: this prefix and the profile id.
pub(crate) const BINDING_OF_PROFILE: &str = "/bindings/by_profile/";
/// Where `compensation(capability = ...)` is recorded in the [`SpanMap`].
pub(crate) const COMPENSATION_TARGET_POINTER: &str =
    "/contract/compensation/compensation_capability_id";

/// Everything `#[capability(...)]` said, before signature-derived defaults are applied.
#[derive(Default)]
pub(crate) struct CapabilityAttr {
    pub(crate) id: Option<(String, Span)>,
    pub(crate) name: Option<(String, Span)>,
    pub(crate) kind: Option<(CapabilityKind, Span)>,
    pub(crate) risk: Option<RiskLevel>,
    pub(crate) stability: Option<Stability>,
    pub(crate) side_effects: Option<Vec<SideEffect>>,
    pub(crate) idempotency: IdempotencyAttr,
    pub(crate) execution: ExecutionAttr,
    pub(crate) data: DataAttr,
    pub(crate) credentials: Option<CredentialPolicy>,
    pub(crate) approval: Option<ApprovalPolicy>,
    pub(crate) sla: Option<ServiceLevelContract>,
    pub(crate) transaction: Option<TransactionAttr>,
    pub(crate) compensation: Option<CompensationAttr>,
    pub(crate) bindings: Vec<Binding>,
    pub(crate) tags: Vec<String>,
    pub(crate) examples: Vec<(Value, Span)>,
    pub(crate) cost: Option<Value>,
    pub(crate) auth: Option<Value>,
    pub(crate) reconcile: Option<Expr>,
    pub(crate) validate: Option<Expr>,
    pub(crate) cancel: Option<Expr>,
    pub(crate) waivers: Vec<WaiverAttr>,
    pub(crate) spans: SpanMap,
}

/// `idempotency(...)`: every field optional, defaults come from the signature.
#[derive(Default)]
pub(crate) struct IdempotencyAttr {
    pub(crate) present: bool,
    pub(crate) requirement: Option<IdempotencyRequirement>,
    pub(crate) collision: Option<IdempotencyCollisionBehavior>,
    pub(crate) scope: Option<IdempotencyKeyScope>,
    pub(crate) ttl_ms: Option<u64>,
}

/// `execution(...)`: flags the author set explicitly; the rest come from the signature.
#[derive(Default)]
pub(crate) struct ExecutionAttr {
    pub(crate) sync: Option<bool>,
    pub(crate) r#async: Option<bool>,
    pub(crate) streaming: Option<bool>,
    pub(crate) cancel: Option<bool>,
    pub(crate) retry: Option<bool>,
    pub(crate) expected: Option<ExpectedCompletionMode>,
    pub(crate) retry_safety: Option<RetrySafety>,
}

/// `data(...)`.
#[derive(Default)]
pub(crate) struct DataAttr {
    pub(crate) sensitivity: Option<DataSensitivity>,
    pub(crate) pii: Option<bool>,
    pub(crate) redaction: Option<bool>,
    pub(crate) residency: Option<DataResidency>,
    pub(crate) retention: Option<RetentionPolicy>,
}

/// `transaction(...)`.
#[derive(Default)]
pub(crate) struct TransactionAttr {
    pub(crate) modes: Vec<TransactionMode>,
    pub(crate) requires_plan: Option<bool>,
    pub(crate) fidelity: Option<DryRunFidelity>,
}

/// `compensation(...)`.
#[derive(Default)]
pub(crate) struct CompensationAttr {
    pub(crate) mode: Option<CompensationMode>,
    pub(crate) capability: Option<String>,
    pub(crate) window_ms: Option<u64>,
    pub(crate) requires_approval: Option<bool>,
}

/// `waive(code = "...", reason = "...")`.
pub(crate) struct WaiverAttr {
    pub(crate) code: String,
    pub(crate) reason: String,
    /// The `waive` key.
    pub(crate) span: Span,
    /// The code's string literal, for errors about the code itself.
    pub(crate) code_span: Span,
}

/// Parses the attribute arguments of `#[capability(...)]`.
pub(crate) fn parse_capability(cx: &Ctxt, items: &[MetaItem]) -> CapabilityAttr {
    let mut parser = Parser {
        cx,
        spans: SpanMap::new(),
    };
    let mut attr = CapabilityAttr::default();
    for item in parser.unique(items, keys::capability::ALL, "#[capability]") {
        parser.capability_key(&mut attr, item);
    }
    // A misspelt required key (`side_effect = [read]`) already has its error, with the key
    // meant: it is not also missing.
    for item in items {
        let name = item.name();
        if keys::capability::ALL.contains(&name.as_str()) {
            continue;
        }
        let meant = match meta::did_you_mean(&name, keys::capability::ALL) {
            Some(keys::capability::SIDE_EFFECTS) => SIDE_EFFECTS_POINTER,
            Some(keys::capability::RISK) => RISK_POINTER,
            _ => continue,
        };
        parser
            .spans
            .entry(meant.to_owned())
            .or_insert(item.key.span());
    }
    attr.spans = parser.spans;
    attr
}

/// Where a key that is not one of `context`'s belongs, when it is a well-known place: a rule
/// written as a key of `approval(...)` (`quorum = 2`) goes in `rule = ...`.
fn misplaced_key_hint(context: &str, name: &str) -> &'static str {
    match (context, name) {
        ("approval(...)", "quorum" | "all" | "any") => {
            "; who approves is a rule: `rule = quorum(2, role(\"finance\"), role(\"treasury\"))`, or `distinct_principals = 2` for two different approvers of one `selector`"
        }
        ("approval(...)", "role" | "principal" | "group" | "approvers" | "approver") => {
            "; who approves is a rule: `selector = role(\"finance\")`, or `rule = ...` to combine several"
        }
        // rmcp's `#[tool(...)]` keys, which an author moving a tool over writes first.
        ("#[capability]", "description" | "desc") => {
            "; the handler's doc comment is the description: write it as `/// ...` above the `async fn`"
        }
        (
            "#[capability]",
            "annotations" | "read_only_hint" | "destructive_hint" | "idempotent_hint"
            | "open_world_hint",
        ) => {
            "; MCP annotations are derived from the contract (docs/mcp.md §4): `side_effects = [read]` (alone: `[read, external_network]` is not read-only) is `readOnlyHint`, a required `idempotency` is `idempotentHint`, `external_network` is `openWorldHint`, and a `write` that only adds can say `bindings(mcp(destructive = false))`"
        }
        ("#[capability]", "title") => "; a capability's display name is `name = \"...\"`",
        _ => "",
    }
}

struct Parser<'c> {
    cx: &'c Ctxt,
    spans: SpanMap,
}

impl Parser<'_> {
    /// Filters `items` to known, non-duplicated keys, recording an error for each other one.
    fn unique<'i>(
        &self,
        items: &'i [MetaItem],
        allowed: &[&str],
        context: &str,
    ) -> Vec<&'i MetaItem> {
        let mut seen = HashSet::new();
        let mut kept = Vec::new();
        for item in items {
            let name = item.name();
            if !allowed.contains(&name.as_str()) {
                self.cx.error_at(
                    item.key.span(),
                    format!(
                        "unknown key `{name}` in {context}{}; expected one of {}{}",
                        meta::suggestion(&name, allowed),
                        meta::one_of(allowed),
                        misplaced_key_hint(context, &name)
                    ),
                );
            } else if !seen.insert(name.clone()) && !is_repeatable(context, &name) {
                self.cx.error_at(
                    item.key.span(),
                    format!("duplicate key `{name}` in {context}"),
                );
            } else {
                kept.push(item);
            }
        }
        kept
    }

    fn record(&mut self, path: impl Into<String>, span: Span) {
        self.spans.insert(path.into(), span);
    }

    fn capability_key(&mut self, attr: &mut CapabilityAttr, item: &MetaItem) {
        use keys::capability as k;
        let name = item.name();
        match name.as_str() {
            k::ID => {
                attr.id = self.string(item).map(|s| (s, item.span()));
                self.record("/id", item.span());
            }
            k::NAME => {
                attr.name = self.string(item).map(|s| (s, item.span()));
                self.record("/name", item.span());
            }
            k::KIND => {
                attr.kind = self
                    .enum_item(item, keys::values::KINDS, "capability kind")
                    .map(|v| (v, item.span()));
                self.record("/kind", item.span());
            }
            k::RISK => {
                attr.risk = self.enum_item(item, keys::values::RISKS, "risk level");
                self.record(RISK_POINTER, item.span());
            }
            k::STABILITY => {
                attr.stability = self.enum_item(item, keys::values::STABILITIES, "stability");
                self.record("/stability", item.span());
            }
            k::SIDE_EFFECTS => {
                attr.side_effects =
                    self.enum_list_item(item, keys::values::SIDE_EFFECTS, "side effect");
                self.record(SIDE_EFFECTS_POINTER, item.span());
            }
            k::IDEMPOTENCY => self.idempotency(&mut attr.idempotency, item),
            k::EXECUTION => self.execution(&mut attr.execution, item),
            k::DATA => self.data(&mut attr.data, item),
            k::CREDENTIALS => attr.credentials = self.credentials(item),
            k::APPROVAL => attr.approval = self.approval(item),
            k::SLA => attr.sla = self.sla(item),
            k::TRANSACTION => attr.transaction = self.transaction(item),
            k::COMPENSATION => attr.compensation = self.compensation(item),
            k::BINDINGS => attr.bindings = self.bindings(item),
            k::TAGS => attr.tags = self.tags(item),
            k::EXAMPLES => attr.examples = self.examples(item),
            k::COST => {
                attr.cost = self.json(item);
                self.record("/cost", item.span());
            }
            k::AUTH => {
                attr.auth = self.json(item);
                self.record("/auth", item.span());
            }
            k::RECONCILE => attr.reconcile = self.handler_path(item),
            k::VALIDATE => attr.validate = self.handler_path(item),
            k::CANCEL => attr.cancel = self.handler_path(item),
            k::WAIVE => {
                if let Some(waiver) = self.waiver(item) {
                    attr.waivers.push(waiver);
                }
            }
            _ => unreachable!("filtered by unique()"),
        }
    }

    // ----- sections ---------------------------------------------------------------------------

    fn idempotency(&mut self, out: &mut IdempotencyAttr, item: &MetaItem) {
        use keys::idempotency as k;
        const BASE: &str = "/contract/idempotency";
        self.record(BASE, item.span());
        out.present = true;
        let Some(items) = self.list(item) else { return };
        for inner in self.unique(items, k::ALL, "idempotency(...)") {
            let name = inner.name();
            match name.as_str() {
                k::REQUIRED | k::OPTIONAL | k::UNSUPPORTED => {
                    if self.bare_flag(inner) {
                        if out.requirement.is_some() {
                            self.cx.error_at(inner.key.span(), "idempotency requirement given twice: use one of `required`, `optional`, `unsupported`");
                        }
                        out.requirement = serde_value(&name);
                        self.record(format!("{BASE}/requirement"), inner.span());
                    }
                }
                k::COLLISION => {
                    out.collision =
                        self.enum_item(inner, keys::values::COLLISIONS, "collision behavior");
                    self.record(format!("{BASE}/collision_behavior"), inner.span());
                }
                k::SCOPE => {
                    out.scope = self.enum_item(inner, keys::values::KEY_SCOPES, "key scope");
                    self.record(format!("{BASE}/key_scope"), inner.span());
                }
                k::TTL_MS => {
                    out.ttl_ms = self.u64(inner);
                    self.record(format!("{BASE}/ttl_ms"), inner.span());
                }
                _ => unreachable!("filtered by unique()"),
            }
        }
    }

    fn execution(&mut self, out: &mut ExecutionAttr, item: &MetaItem) {
        use keys::execution as k;
        const BASE: &str = "/contract/execution";
        self.record(BASE, item.span());
        let Some(items) = self.list(item) else { return };
        for inner in self.unique(items, k::ALL, "execution(...)") {
            let name = inner.name();
            let (slot, field) = match name.as_str() {
                k::SYNC => (&mut out.sync, "supports_sync"),
                k::ASYNC => (&mut out.r#async, "supports_async"),
                k::STREAMING => (&mut out.streaming, "supports_streaming"),
                k::CANCEL => (&mut out.cancel, "supports_cancel"),
                k::RETRY => (&mut out.retry, "supports_retry"),
                k::EXPECTED => {
                    out.expected =
                        self.enum_item(inner, keys::values::COMPLETIONS, "completion mode");
                    self.record(format!("{BASE}/expected_completion"), inner.span());
                    continue;
                }
                k::RETRY_SAFETY => {
                    out.retry_safety =
                        self.enum_item(inner, keys::values::RETRY_SAFETIES, "retry safety");
                    self.record(format!("{BASE}/retry_safety"), inner.span());
                    continue;
                }
                _ => unreachable!("filtered by unique()"),
            };
            *slot = self.flag(inner);
            self.spans.insert(format!("{BASE}/{field}"), inner.span());
        }
    }

    fn data(&mut self, out: &mut DataAttr, item: &MetaItem) {
        use keys::data as k;
        const BASE: &str = "/contract/data";
        self.record(BASE, item.span());
        let Some(items) = self.list(item) else { return };
        for inner in self.unique(items, k::ALL, "data(...)") {
            match inner.name().as_str() {
                k::SENSITIVITY => {
                    // Personal data is a flag beside the level, not a level: say so instead of
                    // listing the levels.
                    if let Some(value) = self.value(inner) {
                        if meta::as_ident(value).is_some_and(|ident| ident == k::PII) {
                            self.cx.error_spanned_by(
                                value,
                                format!(
                                    "`pii` is not a sensitivity level but a flag of its own: `data(sensitivity = restricted, pii)`; the levels are {}",
                                    meta::one_of(keys::values::SENSITIVITIES)
                                ),
                            );
                        } else {
                            out.sensitivity = self.enum_expr(
                                value,
                                keys::values::SENSITIVITIES,
                                "data sensitivity",
                            );
                        }
                    }
                    self.record(format!("{BASE}/sensitivity"), inner.span());
                }
                k::PII => {
                    out.pii = self.flag(inner);
                    self.record(format!("{BASE}/contains_pii"), inner.span());
                }
                k::REDACTION => {
                    out.redaction = self.flag(inner);
                    self.record(format!("{BASE}/redaction_required"), inner.span());
                }
                k::RESIDENCY => {
                    self.record(format!("{BASE}/residency"), inner.span());
                    let mut residency = DataResidency::default();
                    if let Some(list) = self.list(inner) {
                        for key in self.unique(list, k::RESIDENCY_ALL, "residency(...)") {
                            let regions = self.strings(key).unwrap_or_default();
                            match key.name().as_str() {
                                k::ALLOWED => residency.allowed_regions = regions,
                                _ => residency.prohibited_regions = regions,
                            }
                        }
                    }
                    out.residency = Some(residency);
                }
                k::RETENTION => {
                    self.record(format!("{BASE}/retention"), inner.span());
                    let mut retention = RetentionPolicy::default();
                    if let Some(list) = self.list(inner) {
                        for key in self.unique(list, k::RETENTION_ALL, "retention(...)") {
                            match key.name().as_str() {
                                k::RETAIN_FOR_MS => retention.retain_for_ms = self.u64(key),
                                k::DELETE_AFTER_MS => retention.delete_after_ms = self.u64(key),
                                _ => retention.legal_hold_allowed = self.flag(key).unwrap_or(false),
                            }
                        }
                    }
                    out.retention = Some(retention);
                }
                _ => unreachable!("filtered by unique()"),
            }
        }
    }

    fn credentials(&mut self, item: &MetaItem) -> Option<CredentialPolicy> {
        use keys::credentials as k;
        const BASE: &str = "/contract/credentials";
        self.record(BASE, item.span());
        // Writing the section at all means a credential is needed, unless it says `optional`.
        let mut policy = CredentialPolicy {
            required: true,
            ..CredentialPolicy::default()
        };
        let items = self.list(item)?;
        let mut requirement = false;
        for inner in self.unique(items, k::ALL, "credentials(...)") {
            match inner.name().as_str() {
                k::REQUIRED => {
                    self.requirement_once(&mut requirement, inner, "credentials(...)");
                    policy.required = self.flag(inner).unwrap_or(true);
                    self.record(format!("{BASE}/required"), inner.span());
                }
                k::OPTIONAL => {
                    self.requirement_once(&mut requirement, inner, "credentials(...)");
                    policy.required = !self.flag(inner).unwrap_or(true);
                    self.record(format!("{BASE}/required"), inner.span());
                }
                k::ISSUERS => {
                    policy.accepted_issuers = self.strings(inner).unwrap_or_default();
                    self.record(format!("{BASE}/accepted_issuers"), inner.span());
                }
                k::SCOPES => {
                    policy.required_scopes = self.strings(inner).unwrap_or_default();
                    self.scope_format(inner);
                    self.record(format!("{BASE}/required_scopes"), inner.span());
                }
                k::OAUTH_REFRESH => {
                    policy.allow_oauth_refresh = self.flag(inner).unwrap_or(false);
                    self.record(format!("{BASE}/allow_oauth_refresh"), inner.span());
                }
                _ => unreachable!("filtered by unique()"),
            }
        }
        Some(policy)
    }

    fn approval(&mut self, item: &MetaItem) -> Option<ApprovalPolicy> {
        use keys::approval as k;
        const BASE: &str = "/contract/approval";
        self.record(BASE, item.span());
        // Writing the section at all means approval is needed, unless it says `optional`.
        let mut policy = ApprovalPolicy {
            required: true,
            ..ApprovalPolicy::default()
        };
        let items = self.list(item)?;
        let mut requirement = false;
        for inner in self.unique(items, k::ALL, "approval(...)") {
            match inner.name().as_str() {
                k::REQUIRED => {
                    self.requirement_once(&mut requirement, inner, "approval(...)");
                    policy.required = self.flag(inner).unwrap_or(true);
                    self.record(format!("{BASE}/required"), inner.span());
                }
                k::OPTIONAL => {
                    self.requirement_once(&mut requirement, inner, "approval(...)");
                    policy.required = !self.flag(inner).unwrap_or(true);
                    self.record(format!("{BASE}/required"), inner.span());
                }
                k::REASON => {
                    policy.reason = self.string(inner);
                    self.record(format!("{BASE}/reason"), inner.span());
                }
                k::SELECTOR => {
                    self.record(format!("{BASE}/approver_selector"), inner.span());
                    if let Some(expr) = self.value(inner)
                        && let Some(selector) = self.selector(expr)
                    {
                        policy.approver_selector = selector;
                    }
                }
                k::RULE => {
                    if let Some(expr) = self.value(inner) {
                        policy.rule = self.rule(expr, &format!("{BASE}/rule"));
                    }
                }
                k::EVIDENCE => {
                    policy.evidence_requirements = self
                        .enum_set_item::<EvidenceRequirement>(
                            inner,
                            keys::values::EVIDENCE,
                            "evidence requirement",
                        )
                        .unwrap_or_default();
                    self.record(format!("{BASE}/evidence_requirements"), inner.span());
                }
                k::TTL_MS => {
                    policy.ttl_ms = self.u64(inner);
                    self.record(format!("{BASE}/ttl_ms"), inner.span());
                }
                k::DISTINCT_PRINCIPALS => {
                    if let Some(n) = self.u64(inner) {
                        match u32::try_from(n) {
                            Ok(n) => policy.minimum_distinct_principals = n,
                            Err(_) => self.cx.error_spanned_by(
                                inner.key.clone(),
                                "distinct_principals must fit in a u32",
                            ),
                        }
                    }
                    self.record(format!("{BASE}/minimum_distinct_principals"), inner.span());
                }
                k::SEPARATION => {
                    self.record(format!("{BASE}/separation_of_duties"), inner.span());
                    let mut separation = SeparationOfDuties::default();
                    let mut self_approval = None;
                    if let Some(list) = self.list(inner) {
                        for key in self.unique(list, k::SEPARATION_ALL, "separation(...)") {
                            let value = self.flag(key).unwrap_or(false);
                            match key.name().as_str() {
                                k::REQUESTER_MUST_DIFFER => {
                                    separation.requester_must_differ = value
                                }
                                k::OPERATOR_MUST_DIFFER => separation.operator_must_differ = value,
                                _ => {
                                    separation.allow_self_approval = value;
                                    self_approval = Some(key.key.span());
                                }
                            }
                        }
                    }
                    // The host lets the stricter flag win; written together, one of them is
                    // not what the author meant.
                    if let Some(span) = self_approval.filter(|_| {
                        separation.requester_must_differ && separation.allow_self_approval
                    }) {
                        self.cx.error_at(
                            span,
                            "`allow_self_approval` contradicts `requester_must_differ`: the requester could not approve anyway. Keep the one you mean",
                        );
                    }
                    policy.separation_of_duties = separation;
                }
                k::POLICY_VERSION => {
                    policy.policy_version = self.string(inner);
                    self.record(format!("{BASE}/policy_version"), inner.span());
                }
                k::DELEGATED => {
                    self.record(format!("{BASE}/delegated_authority"), inner.span());
                    policy.delegated_authority = self.delegated(inner);
                }
                _ => unreachable!("filtered by unique()"),
            }
        }
        Some(policy)
    }

    fn delegated(&mut self, item: &MetaItem) -> Option<DelegatedApprovalAuthority> {
        use keys::approval as k;
        let list = self.list(item)?;
        let mut principal = None;
        // Written but refused (blank, or not a string) is reported where it is written.
        let mut principal_written = false;
        let mut scope = Vec::new();
        let mut expires_at = None;
        for key in self.unique(list, k::DELEGATED_ALL, "delegated(...)") {
            match key.name().as_str() {
                k::PRINCIPAL => {
                    principal_written = true;
                    principal = self
                        .string(key)
                        .and_then(|id| self.principal_named(id, key.span()));
                }
                k::SCOPE => scope = self.strings(key).unwrap_or_default(),
                _ => {
                    if let Some(text) = self.string(key) {
                        match time::OffsetDateTime::parse(
                            &text,
                            &time::format_description::well_known::Rfc3339,
                        ) {
                            Ok(at) => expires_at = Some(at),
                            Err(error) => self.cx.error_at(
                                key.span(),
                                format!("`expires_at` must be an RFC 3339 timestamp: {error}"),
                            ),
                        }
                    }
                }
            }
        }
        match principal {
            Some(principal) => Some(DelegatedApprovalAuthority {
                principal: principal.into(),
                scope,
                expires_at,
            }),
            None => {
                if !principal_written {
                    self.cx.error_at(
                        item.key.span(),
                        "`delegated(...)` needs `principal = \"<principal id>\"`",
                    );
                }
                None
            }
        }
    }

    /// `role("x")`, `group("x")`, `principal("id")`, `tenant_policy`, `external_system("s")`.
    fn selector(&mut self, expr: &Expr) -> Option<ApproverSelector> {
        use keys::approval as k;
        if let Some(ident) = meta::as_ident(expr)
            && ident == k::TENANT_POLICY
        {
            return Some(ApproverSelector::TenantPolicy);
        }
        let Some((name, args)) = call_parts(expr) else {
            self.cx.error_spanned_by(
                expr,
                format!(
                    "expected an approver selector: one of {}",
                    meta::one_of(k::SELECTORS)
                ),
            );
            return None;
        };
        let text = |this: &mut Self| this.single_str_arg(&name, expr, &args);
        match name.as_str() {
            k::PRINCIPAL => text(self)
                .and_then(|id| self.principal_named(id, expr.span()))
                .map(|id| ApproverSelector::Principal { id: id.into() }),
            k::ROLE => text(self).map(|name| ApproverSelector::Role { name }),
            k::GROUP => text(self).map(|name| ApproverSelector::Group { name }),
            k::EXTERNAL_SYSTEM => {
                text(self).map(|system| ApproverSelector::ExternalSystem { system })
            }
            k::TENANT_POLICY => {
                self.cx.error_spanned_by(expr, "the `tenant_policy` selector takes no argument; to name a policy write `rule = tenant_policy(\"<policy id>\")`");
                None
            }
            other => {
                self.cx.error_spanned_by(
                    expr,
                    format!(
                        "unknown approver selector `{other}`{}; expected one of {}",
                        meta::suggestion(other, k::SELECTORS),
                        meta::one_of(k::SELECTORS)
                    ),
                );
                None
            }
        }
    }

    /// An approval rule expression: `all(..)`, `any(..)`, `quorum(n, ..)` or a leaf.
    fn rule(&mut self, expr: &Expr, path: &str) -> Option<ApprovalRule> {
        use keys::approval as k;
        self.record(path, expr.span());
        let Some((name, args)) = call_parts(expr) else {
            self.cx.error_spanned_by(
                expr,
                format!(
                    "expected an approval rule: one of {}",
                    meta::one_of(k::RULES)
                ),
            );
            return None;
        };
        let (named, positional): (Vec<&Expr>, Vec<&Expr>) =
            args.iter().partition(|a| matches!(a, Expr::Assign(_)));
        self.named_arguments_once(&named, &name);
        let children = |this: &mut Self, exprs: &[&Expr]| -> Vec<ApprovalRule> {
            exprs
                .iter()
                .enumerate()
                .filter_map(|(j, child)| this.rule(child, &format!("{path}/rules/{j}")))
                .collect()
        };
        match name.as_str() {
            k::ALL_OF => {
                let allow_decision_reuse = self.named_flag(&named, k::REUSE, &[k::REUSE]);
                Some(ApprovalRule::All {
                    rules: children(self, &positional),
                    allow_decision_reuse,
                })
            }
            k::ANY_OF => {
                self.named_flag(&named, "", &[]);
                Some(ApprovalRule::Any {
                    rules: children(self, &positional),
                })
            }
            k::QUORUM => {
                let distinct =
                    !self.named_flag(&named, "allow_same_principal", &["allow_same_principal"]);
                let Some((first, rest)) = positional.split_first() else {
                    self.cx.error_spanned_by(expr, "`quorum` needs the required count first: `quorum(2, role(\"a\"), role(\"b\"))`");
                    return None;
                };
                let Some(required) = meta::as_u64(first).and_then(|n| u32::try_from(n).ok()) else {
                    let message = if meta::is_int_literal(first) {
                        "this count is too large: `quorum` counts its child rules"
                    } else {
                        "the first argument of `quorum` is the number of child rules that must be satisfied"
                    };
                    self.cx.error_spanned_by(first, message);
                    return None;
                };
                Some(ApprovalRule::Quorum {
                    required,
                    rules: children(self, rest),
                    distinct_principals: distinct,
                })
            }
            k::DELEGATED_AUTHORITY => {
                let scope = self.single_str_arg(
                    &name,
                    expr,
                    &positional.iter().map(|e| (*e).clone()).collect::<Vec<_>>(),
                )?;
                let mut max_risk = None;
                let mut max_value = None;
                for assign in &named {
                    let Expr::Assign(assign) = assign else {
                        continue;
                    };
                    let key = meta::as_ident(&assign.left)
                        .map(|i| i.to_string())
                        .unwrap_or_default();
                    match key.as_str() {
                        k::MAX_RISK => {
                            max_risk =
                                self.enum_expr(&assign.right, keys::values::RISKS, "risk level")
                        }
                        k::MAX_VALUE => max_value = self.u64_expr(&assign.right),
                        _ => self.cx.error_spanned_by(
                            &assign.left,
                            format!(
                                "unknown argument of `delegated_authority`; expected `{}` or `{}`",
                                k::MAX_RISK,
                                k::MAX_VALUE
                            ),
                        ),
                    }
                }
                Some(ApprovalRule::DelegatedAuthority {
                    scope,
                    max_risk,
                    max_value,
                })
            }
            k::PRINCIPAL | k::ROLE | k::GROUP | k::TENANT_POLICY | k::EXTERNAL_SYSTEM => {
                self.named_flag(&named, "", &[]);
                let mut value = self.single_str_arg(&name, expr, &args)?;
                if name == k::PRINCIPAL {
                    value = self.principal_named(value, expr.span())?;
                }
                Some(match name.as_str() {
                    k::PRINCIPAL => ApprovalRule::Principal { id: value.into() },
                    k::ROLE => ApprovalRule::Role { name: value },
                    k::GROUP => ApprovalRule::Group { name: value },
                    k::TENANT_POLICY => ApprovalRule::TenantPolicy { policy_id: value },
                    _ => ApprovalRule::ExternalSystem { system: value },
                })
            }
            other => {
                self.cx.error_spanned_by(
                    expr,
                    format!(
                        "unknown approval rule `{other}`{}; expected one of {}",
                        meta::suggestion(other, k::RULES),
                        meta::one_of(k::RULES)
                    ),
                );
                None
            }
        }
    }

    /// A principal id written in an approval rule, selector or delegation; a blank one would name
    /// nobody, so no approval could ever be granted. (Upstream's invariants check the blank names
    /// of the other leaves, `contract.approval.*_empty`, but not this one.)
    fn principal_named(&self, id: String, span: Span) -> Option<String> {
        if id.trim().is_empty() {
            self.cx.error_at(
                span,
                "a blank principal id names no approver, so no approval could be granted: give the approver's principal id, e.g. `principal(\"user:treasurer\")`",
            );
            return None;
        }
        Some(id)
    }

    /// Each named argument of a rule at most once: a second `max_risk = ...` would silently win.
    fn named_arguments_once(&self, named: &[&Expr], rule: &str) {
        let mut seen = HashSet::new();
        for expr in named {
            let Expr::Assign(assign) = expr else { continue };
            let Some(key) = meta::as_ident(&assign.left) else {
                continue;
            };
            if !seen.insert(key.to_string()) {
                self.cx.error_spanned_by(
                    &assign.left,
                    format!("argument `{key}` given twice in `{rule}(...)`: keep one"),
                );
            }
        }
    }

    /// Reports `required` and `optional` both written in one `section(...)`: the later one
    /// would silently win. `given` remembers whether one was seen.
    fn requirement_once(&self, given: &mut bool, inner: &MetaItem, section: &str) {
        if *given {
            self.cx.error_at(
                inner.key.span(),
                format!("`required` and `optional` both given in {section}: use one"),
            );
        }
        *given = true;
    }

    /// Reads `name = true|false` (or bare `name` is not possible inside a call) among `named`;
    /// any other named argument is an error.
    fn named_flag(&self, named: &[&Expr], wanted: &str, allowed: &[&str]) -> bool {
        let mut value = false;
        for expr in named {
            let Expr::Assign(assign) = expr else { continue };
            let key = meta::as_ident(&assign.left)
                .map(|i| i.to_string())
                .unwrap_or_default();
            if !wanted.is_empty() && key == wanted {
                match meta::as_bool(&assign.right) {
                    Some(v) => value = v,
                    None => self.cx.error_spanned_by(
                        &assign.right,
                        format!("`{key}` takes `true` or `false`"),
                    ),
                }
            } else if allowed.is_empty() {
                self.cx
                    .error_spanned_by(&assign.left, "this rule takes no named arguments");
            } else {
                self.cx.error_spanned_by(
                    &assign.left,
                    format!(
                        "unknown argument `{key}`; expected {}",
                        meta::one_of(allowed)
                    ),
                );
            }
        }
        value
    }

    fn single_str_arg(&self, name: &str, expr: &Expr, args: &[Expr]) -> Option<String> {
        let positional: Vec<&Expr> = args
            .iter()
            .filter(|a| !matches!(a, Expr::Assign(_)))
            .collect();
        match positional.as_slice() {
            [only] => match meta::as_str(only) {
                Some(lit) => Some(lit.value()),
                None => {
                    self.cx
                        .error_spanned_by(only, format!("`{name}(...)` takes one string literal"));
                    None
                }
            },
            _ => {
                self.cx.error_spanned_by(
                    expr,
                    format!(
                        "`{name}(...)` takes exactly one string literal, e.g. `{name}(\"finance\")`"
                    ),
                );
                None
            }
        }
    }

    fn sla(&mut self, item: &MetaItem) -> Option<ServiceLevelContract> {
        use keys::sla as k;
        const BASE: &str = "/contract/sla";
        self.record(BASE, item.span());
        let mut sla = ServiceLevelContract::default();
        let items = self.list(item)?;
        for inner in self.unique(items, k::ALL, "sla(...)") {
            let field = match inner.name().as_str() {
                k::LATENCY_MS => {
                    sla.expected_latency_ms = self.u64(inner);
                    "expected_latency_ms"
                }
                k::TIMEOUT_MS => {
                    sla.timeout_ms = self.u64(inner);
                    "timeout_ms"
                }
                k::QUEUE_DELAY_MS => {
                    sla.max_queue_delay_ms = self.u64(inner);
                    "max_queue_delay_ms"
                }
                k::ASYNC_EXPECTED => {
                    sla.async_expected = self.flag(inner).unwrap_or(false);
                    "async_expected"
                }
                k::AVAILABILITY => {
                    sla.availability_target = self.string(inner);
                    "availability_target"
                }
                _ => unreachable!("filtered by unique()"),
            };
            self.record(format!("{BASE}/{field}"), inner.span());
        }
        Some(sla)
    }

    fn transaction(&mut self, item: &MetaItem) -> Option<TransactionAttr> {
        use keys::transaction as k;
        const BASE: &str = "/contract/transaction";
        self.record(BASE, item.span());
        let mut out = TransactionAttr::default();
        let items = self.list(item)?;
        for inner in self.unique(items, k::ALL, "transaction(...)") {
            match inner.name().as_str() {
                k::MODES => {
                    out.modes = self
                        .enum_list_item(inner, keys::values::TRANSACTION_MODES, "transaction mode")
                        .unwrap_or_default();
                    self.record(format!("{BASE}/supported_modes"), inner.span());
                }
                k::REQUIRES_PLAN => {
                    out.requires_plan = self.flag(inner);
                    self.record(format!("{BASE}/requires_plan_before_commit"), inner.span());
                }
                k::FIDELITY => {
                    out.fidelity =
                        self.enum_item(inner, keys::values::FIDELITIES, "dry-run fidelity");
                    self.record(format!("{BASE}/dry_run_fidelity"), inner.span());
                }
                _ => unreachable!("filtered by unique()"),
            }
        }
        Some(out)
    }

    fn compensation(&mut self, item: &MetaItem) -> Option<CompensationAttr> {
        use keys::compensation as k;
        const BASE: &str = "/contract/compensation";
        self.record(BASE, item.span());
        let mut out = CompensationAttr::default();
        let items = self.list(item)?;
        for inner in self.unique(items, k::ALL, "compensation(...)") {
            let name = inner.name();
            match name.as_str() {
                k::CAPABILITY => {
                    out.capability = self.string(inner);
                    // Errors about the target (unknown, the capability itself, not compensating)
                    // point at the id it names.
                    let span = match &inner.kind {
                        MetaKind::Value(value) => value.span(),
                        _ => inner.span(),
                    };
                    self.record(COMPENSATION_TARGET_POINTER, span);
                }
                k::WINDOW_MS => {
                    out.window_ms = self.u64(inner);
                    self.record(format!("{BASE}/compensation_window_ms"), inner.span());
                }
                k::REQUIRES_APPROVAL => {
                    out.requires_approval = self.flag(inner);
                    self.record(format!("{BASE}/requires_approval"), inner.span());
                }
                mode => {
                    if self.bare_flag(inner) {
                        if out.mode.is_some() {
                            self.cx.error_at(
                                inner.key.span(),
                                format!(
                                    "compensation mode given twice: use one of {}",
                                    meta::one_of(k::MODES)
                                ),
                            );
                        }
                        out.mode = serde_value(mode);
                        self.record(format!("{BASE}/mode"), inner.span());
                    }
                }
            }
        }
        Some(out)
    }

    fn bindings(&mut self, item: &MetaItem) -> Vec<Binding> {
        use keys::bindings as k;
        self.record("/bindings", item.span());
        let Some(items) = self.list(item) else {
            return Vec::new();
        };
        let mut bindings: Vec<Binding> = Vec::new();
        for (j, inner) in items.iter().enumerate() {
            let name = inner.name();
            let alias = k::ALIASES
                .iter()
                .find(|(alias, _)| *alias == name)
                .map(|(_, profile)| *profile);
            if alias.is_none() && name != k::PROFILE {
                self.cx.error_at(
                    inner.key.span(),
                    format!(
                        "unknown binding `{name}`{}; expected one of {}",
                        meta::suggestion(&name, k::ALL),
                        meta::one_of(k::ALL)
                    ),
                );
                continue;
            }
            self.record(format!("/bindings/{j}"), inner.span());
            self.record(format!("/bindings/{j}/profile"), inner.span());
            let mut profile = alias.map(str::to_owned);
            let mut binding = Binding::new("");
            if let MetaKind::List(keys) = &inner.kind {
                for key in keys {
                    let key_name = key.name();
                    if key_name == k::PROFILE {
                        if alias.is_some() {
                            self.cx.error_at(key.key.span(), format!("`{name}(...)` already names its profile; remove `profile`, or write `profile(profile = \"...\", ...)` for another profile"));
                        } else {
                            profile = self.string(key);
                        }
                        continue;
                    }
                    if binding.metadata.contains_key(&key_name) {
                        self.cx.error_at(
                            key.key.span(),
                            format!("duplicate binding key `{key_name}`"),
                        );
                        continue;
                    }
                    if let Some(value) = self.literal_value(key) {
                        self.record(format!("/bindings/{j}/{key_name}"), key.key.span());
                        binding.metadata.insert(key_name, value);
                    }
                }
            } else if !matches!(inner.kind, MetaKind::Flag) {
                self.cx.error_at(
                    inner.span(),
                    format!("write a binding as `{name}(tool_name = \"...\")`"),
                );
            }
            match profile {
                Some(profile) if bindings.iter().any(|b| b.profile == profile.as_str()) => {
                    self.cx.error_at(inner.span(), format!("profile `{profile}` is bound twice; one capability has at most one binding per profile"));
                }
                Some(profile) => {
                    self.record(format!("{BINDING_OF_PROFILE}{profile}"), inner.span());
                    binding.profile = profile.into();
                    bindings.push(binding);
                }
                None => self.cx.error_at(inner.span(), "a custom binding needs `profile = \"<profile id>\"`: `profile(profile = \"aip.x.v1\", name = \"...\")`"),
            }
        }
        bindings
    }

    fn examples(&mut self, item: &MetaItem) -> Vec<(Value, Span)> {
        self.record("/examples", item.span());
        let Some(expr) = self.value(item) else {
            return Vec::new();
        };
        let Some(elements) = meta::as_array(expr) else {
            self.cx.error_spanned_by(expr, "`examples` takes an array of JSON object literals as strings: `examples = [r#\"{\"starts_at\": \"...\"}\"#]`");
            return Vec::new();
        };
        elements
            .into_iter()
            .filter_map(|element| {
                let lit = meta::as_str(element).or_else(|| {
                    self.cx.error_spanned_by(element, "each example is a JSON object written as a string literal");
                    None
                })?;
                match serde_json::from_str::<Value>(&lit.value()) {
                    Ok(value) if value.is_object() => Some((value, lit.span())),
                    Ok(_) => {
                        self.cx.error_spanned_by(&lit, "an example input must be a JSON object (the input schema has an object root)");
                        None
                    }
                    Err(error) => {
                        self.cx.error_spanned_by(&lit, format!("example is not valid JSON: {error}"));
                        None
                    }
                }
            })
            .collect()
    }

    fn handler_path(&mut self, item: &MetaItem) -> Option<Expr> {
        let expr = self.value(item)?;
        if matches!(expr, Expr::Path(_)) {
            Some(expr.clone())
        } else {
            self.cx.error_spanned_by(
                expr,
                format!(
                    "`{}` takes the path of a handler: `{} = Self::find_booking` in a `#[connector]` impl block, `{} = find_booking` on a free function",
                    item.name(),
                    item.name(),
                    item.name()
                ),
            );
            None
        }
    }

    fn waiver(&mut self, item: &MetaItem) -> Option<WaiverAttr> {
        use keys::waive as k;
        let list = self.list(item)?;
        let mut code = None;
        let mut code_span = item.span();
        let mut reason = None;
        for key in self.unique(list, k::ALL, "waive(...)") {
            match key.name().as_str() {
                k::CODE => {
                    code = self.string(key);
                    if let MetaKind::Value(value) = &key.kind {
                        code_span = value.span();
                    }
                }
                _ => reason = self.string(key),
            }
        }
        match (code, reason) {
            (Some(code), Some(reason)) => Some(WaiverAttr {
                code,
                reason,
                span: item.span(),
                code_span,
            }),
            _ => {
                self.cx.error_at(item.span(), "`waive` needs both `code = \"<rule code>\"` and `reason = \"<why this capability is exempt>\"`");
                None
            }
        }
    }

    // ----- value helpers ----------------------------------------------------------------------

    fn list<'i>(&self, item: &'i MetaItem) -> Option<&'i [MetaItem]> {
        match &item.kind {
            MetaKind::List(items) => Some(items),
            _ => {
                self.cx.error_at(
                    item.span(),
                    format!("`{}` takes a list: `{}(...)`", item.name(), item.name()),
                );
                None
            }
        }
    }

    fn value<'i>(&self, item: &'i MetaItem) -> Option<&'i Expr> {
        match &item.kind {
            MetaKind::Value(expr) => Some(expr),
            _ => {
                self.cx.error_at(
                    item.span(),
                    format!("`{}` takes a value: `{} = ...`", item.name(), item.name()),
                );
                None
            }
        }
    }

    fn string(&self, item: &MetaItem) -> Option<String> {
        let expr = self.value(item)?;
        match meta::as_str(expr) {
            Some(lit) => Some(lit.value()),
            None => {
                self.cx
                    .error_spanned_by(expr, meta::string_literal_required(&item.name(), expr));
                None
            }
        }
    }

    fn strings(&self, item: &MetaItem) -> Option<Vec<String>> {
        let expr = self.value(item)?;
        let Some(elements) = meta::as_array(expr) else {
            self.cx
                .error_spanned_by(expr, meta::string_array_required(&item.name(), "\"...\""));
            return None;
        };
        let mut out = Vec::new();
        let mut unquoted = None;
        for element in &elements {
            match meta::as_str(element) {
                // A blank item is left to the rule about blanks of its list (a blank scope,
                // issuer or tag), which a second, "repeated", error would only echo.
                Some(lit) if !lit.value().trim().is_empty() && out.contains(&lit.value()) => {
                    self.repeated(item, element, &format!("{:?}", lit.value()));
                }
                Some(lit) => out.push(lit.value()),
                // Text without its quotes is reported once, below, with the list rewritten.
                None if meta::unquoted_text(element).is_some() => {
                    unquoted = unquoted.or(Some(*element));
                }
                None => self
                    .cx
                    .error_spanned_by(element, "expected a string literal"),
            }
        }
        if let Some(first) = unquoted {
            self.unquoted_strings(item, first, &elements);
            return None;
        }
        Some(out)
    }

    /// `scopes = [invoices:write]`: text without its quotes (an author trial met syn's "expected
    /// `,` or `;`" at the `:`). Reported once, on the first such item, with the list as it
    /// should be written.
    fn unquoted_strings(&self, item: &MetaItem, first: &Expr, elements: &[&Expr]) {
        let shown: Vec<String> = elements
            .iter()
            .map(|element| match meta::unquoted_text(element) {
                Some(text) => format!("{text:?}"),
                None => quote::ToTokens::to_token_stream(element).to_string(),
            })
            .collect();
        self.cx.error_spanned_by(
            first,
            meta::string_array_required(&item.name(), &shown.join(", ")),
        );
    }

    /// Reports `element`, an item of the list `item` that repeats an earlier one (`shown` as
    /// written): every list of strings or names of the attribute is a set (scopes, issuers,
    /// tags, regions, evidence), where a repeat means nothing yet would be published.
    fn repeated(&self, item: &MetaItem, element: &Expr, shown: &str) {
        self.cx.error_spanned_by(
            element,
            format!(
                "`{}` lists {shown} twice; {}",
                item.name(),
                diagnostics::LIST_ITEM_REPEATED.message
            ),
        );
    }

    /// `tags = ["..."]`: a list of strings, none blank.
    fn tags(&mut self, item: &MetaItem) -> Vec<String> {
        self.record("/tags", item.span());
        let tags = self.strings(item).unwrap_or_default();
        let blanks = elements(item).into_iter().filter(|element| {
            meta::as_str(element).is_some_and(|lit| lit.value().trim().is_empty())
        });
        for blank in blanks {
            self.cx
                .error_spanned_by(blank, diagnostics::TAG_BLANK.message);
        }
        tags
    }

    /// `scopes = [...]`: each item is one scope, which the host matches by its exact name
    /// against the credential's granted scopes; only a granted `*` grants every scope (host
    /// stage 4). An author trial wrote OAuth's space-separated form, `["invoices:read
    /// invoices:write"]`, which demands one scope of that name, and `["invoices:*"]`, which
    /// demands a scope named `invoices:*`: both compiled, and the host then refused every
    /// credential (`credential.scope_missing`). Reported on the scope. A blank scope is
    /// upstream's `contract.credentials.scope_empty`.
    fn scope_format(&self, item: &MetaItem) {
        let scopes: Vec<LitStr> = elements(item)
            .into_iter()
            .filter_map(meta::as_str)
            .filter(|lit| !lit.value().trim().is_empty())
            .collect();
        let rule = diagnostics::SCOPE_FORMAT;
        let name = item.name();
        for lit in &scopes {
            let scope = lit.value();
            if scope.contains(char::is_whitespace) {
                let parts: Vec<String> = scope
                    .split_whitespace()
                    .map(|part| format!("`{part}`"))
                    .collect();
                // The list as it should be written: every scope split, each once.
                let mut fixed: Vec<String> = Vec::new();
                for lit in &scopes {
                    for part in lit.value().split_whitespace() {
                        let part = format!("{part:?}");
                        if !fixed.contains(&part) {
                            fixed.push(part);
                        }
                    }
                }
                self.cx.error_spanned_by(
                    lit,
                    format!(
                        "the scope {scope:?} holds whitespace: {}, so the host would demand one scope named `{scope}` and refuse a credential granted {} (`credential.scope_missing`); write each scope as its own string (`{name}` is not OAuth's space-separated `scope` parameter): `{name} = [{}]` (rule `{}`)",
                        rule.message,
                        and_list(&parts),
                        fixed.join(", "),
                        rule.code
                    ),
                );
            } else if scope.contains('*') && scope != "*" {
                // `invoices:*` → `invoices:read`, a scope the author meant it to cover.
                let covered = scope
                    .strip_suffix('*')
                    .filter(|prefix| !prefix.is_empty() && !prefix.contains('*'))
                    .map(|prefix| format!("{prefix}read"));
                let refused = covered
                    .as_ref()
                    .map(|covered| format!(" and refuse one granted `{covered}`"))
                    .unwrap_or_default();
                let example = covered.unwrap_or_else(|| "calendar.read".to_owned());
                self.cx.error_spanned_by(
                    lit,
                    format!(
                        "the scope {scope:?} is no wildcard: {}; there are no partial wildcards, so the host would demand a credential granted a scope named `{scope}`{refused} (`credential.scope_missing`); name each scope the capability needs, `{name} = [{example:?}]`, or require `\"*\"` alone for a credential granted every scope (rule `{}`)",
                        rule.message,
                        rule.code
                    ),
                );
            }
        }
    }

    /// A list of enum values in which each counts once (`evidence = [reason, ticket]`): a repeat
    /// is reported on the repeat. (`side_effects` and transaction `modes` have upstream's own
    /// rules for a repeat, `contract.side_effect.duplicate` and
    /// `contract.transaction.mode_duplicate`.)
    fn enum_set_item<T: DeserializeOwned>(
        &self,
        item: &MetaItem,
        names: &[&str],
        what: &str,
    ) -> Option<Vec<T>> {
        let values = self.enum_list_item(item, names, what)?;
        let mut seen = HashSet::new();
        for element in elements(item) {
            // An unknown name has its error already.
            if let Some(ident) = meta::as_ident(element)
                && names.contains(&ident.to_string().as_str())
                && !seen.insert(ident.to_string())
            {
                self.repeated(item, element, &format!("`{ident}`"));
            }
        }
        Some(values)
    }

    fn u64(&self, item: &MetaItem) -> Option<u64> {
        self.u64_expr(self.value(item)?)
    }

    fn u64_expr(&self, expr: &Expr) -> Option<u64> {
        let value = meta::as_u64(expr);
        if value.is_none() {
            let message = if meta::is_int_literal(expr) {
                "this integer is too large (the largest is 18446744073709551615, `u64::MAX`)"
            } else {
                "expected a non-negative integer literal"
            };
            self.cx.error_spanned_by(expr, message);
        }
        value
    }

    /// `key` → true, `key = true|false` → that value.
    fn flag(&self, item: &MetaItem) -> Option<bool> {
        match &item.kind {
            MetaKind::Flag => Some(true),
            MetaKind::Value(expr) => {
                let value = meta::as_bool(expr);
                if value.is_none() {
                    self.cx.error_spanned_by(
                        expr,
                        format!(
                            "`{}` is a flag: write `{}` or `{} = false`",
                            item.name(),
                            item.name(),
                            item.name()
                        ),
                    );
                }
                value
            }
            MetaKind::List(_) => {
                self.cx.error_at(
                    item.span(),
                    format!(
                        "`{}` is a flag: write `{}` or `{} = false`",
                        item.name(),
                        item.name(),
                        item.name()
                    ),
                );
                None
            }
        }
    }

    /// A key that must be written bare (`required`), because it selects one of several values.
    fn bare_flag(&self, item: &MetaItem) -> bool {
        let bare = matches!(item.kind, MetaKind::Flag);
        if !bare {
            self.cx.error_at(
                item.span(),
                format!("`{}` is written bare, without a value", item.name()),
            );
        }
        bare
    }

    fn enum_item<T: DeserializeOwned>(
        &self,
        item: &MetaItem,
        names: &[&str],
        what: &str,
    ) -> Option<T> {
        self.enum_expr(self.value(item)?, names, what)
    }

    fn enum_expr<T: DeserializeOwned>(&self, expr: &Expr, names: &[&str], what: &str) -> Option<T> {
        let Some(ident) = meta::as_ident(expr) else {
            self.cx.error_spanned_by(
                expr,
                format!("expected a {what}: one of {}", meta::one_of(names)),
            );
            return None;
        };
        let name = syn::ext::IdentExt::unraw(&ident).to_string();
        if !names.contains(&name.as_str()) {
            self.cx.error_spanned_by(
                &ident,
                format!(
                    "unknown {what} `{name}`{}; expected one of {}",
                    meta::suggestion(&name, names),
                    meta::one_of(names)
                ),
            );
            return None;
        }
        serde_value(&name)
    }

    fn enum_list_item<T: DeserializeOwned>(
        &self,
        item: &MetaItem,
        names: &[&str],
        what: &str,
    ) -> Option<Vec<T>> {
        let expr = self.value(item)?;
        let Some(elements) = meta::as_array(expr) else {
            self.cx.error_spanned_by(
                expr,
                format!(
                    "`{}` takes an array: `{} = [{}]`",
                    item.name(),
                    item.name(),
                    names[0]
                ),
            );
            return None;
        };
        Some(
            elements
                .into_iter()
                .filter_map(|e| self.enum_expr(e, names, what))
                .collect(),
        )
    }

    fn json(&self, item: &MetaItem) -> Option<Value> {
        let expr = self.value(item)?;
        let Some(lit) = meta::as_str(expr) else {
            self.cx.error_spanned_by(
                expr,
                format!("`{}` takes JSON written as a string literal", item.name()),
            );
            return None;
        };
        serde_json::from_str(&lit.value())
            .map_err(|error| {
                self.cx.error_spanned_by(
                    &lit,
                    format!("`{}` is not valid JSON: {error}", item.name()),
                )
            })
            .ok()
    }

    /// A binding metadata value: string, integer or boolean literal.
    fn literal_value(&self, item: &MetaItem) -> Option<Value> {
        let expr = self.value(item)?;
        if let Some(s) = meta::as_str(expr) {
            Some(Value::String(s.value()))
        } else if let Some(n) = meta::as_u64(expr) {
            Some(Value::from(n))
        } else if let Some(b) = meta::as_bool(expr) {
            Some(Value::Bool(b))
        } else {
            self.cx.error_spanned_by(
                expr,
                "binding metadata takes a string, integer or boolean literal",
            );
            None
        }
    }
}

/// The items of the array `item` holds, if it holds one (its shape is reported where it is
/// read).
fn elements(item: &MetaItem) -> Vec<&Expr> {
    match &item.kind {
        MetaKind::Value(expr) => meta::as_array(expr).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// "`a`", "`a` and `b`", "`a`, `b` and `c`".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [only] => only.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Keys that may appear more than once in the same list.
fn is_repeatable(context: &str, name: &str) -> bool {
    context == "#[capability]" && name == keys::capability::WAIVE
}

/// The wire-named enum value `name` (already checked against the list of names).
fn serde_value<T: DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(Value::String(name.to_owned())).ok()
}

/// `name(args...)` → (name, args), for selector and rule constructors.
fn call_parts(expr: &Expr) -> Option<(String, Vec<Expr>)> {
    match expr {
        Expr::Call(ExprCall { func, args, .. }) => {
            let name = meta::as_ident(func)?.to_string();
            Some((name, args.iter().cloned().collect()))
        }
        Expr::Group(group) => call_parts(&group.expr),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_capability;
    use crate::ctxt::Ctxt;
    use crate::meta::MetaArgs;

    /// The messages `#[capability(<args>)]` gets from parsing alone.
    fn errors(args: &str) -> Vec<String> {
        let MetaArgs(items) = syn::parse_str(args).expect("the attribute parses");
        let cx = Ctxt::new();
        let _ = parse_capability(&cx, &items);
        match cx.check() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn scopes(list: &str) -> Vec<String> {
        errors(&format!("credentials(required, scopes = [{list}])"))
    }

    #[test]
    fn scopes_are_single_names_or_the_whole_wildcard() {
        for fine in [
            r#""invoices:read""#,
            r#""invoices:read", "invoices:write""#,
            r#""*""#,
            r#""https://www.googleapis.com/auth/calendar.readonly""#,
            // A blank scope is upstream's `contract.credentials.scope_empty`, not this rule.
            r#""calendar.read", " ""#,
        ] {
            assert_eq!(scopes(fine), Vec::<String>::new(), "{fine}");
        }
        let spaced = scopes(r#""invoices:read invoices:write", "invoices:read""#);
        assert_eq!(spaced.len(), 1, "{spaced:?}");
        assert!(spaced[0].contains("attribute.scope_format"), "{spaced:?}");
        assert!(
            spaced[0].contains(r#"`scopes = ["invoices:read", "invoices:write"]`"#),
            "{spaced:?}"
        );
        let padded = scopes(r#"" calendar.read""#);
        assert!(
            padded[0].contains(r#"`scopes = ["calendar.read"]`"#),
            "{padded:?}"
        );
        for partial in [r#""invoices:*""#, r#""*.read""#, r#""a*b""#, r#""**""#] {
            let refused = scopes(partial);
            assert_eq!(refused.len(), 1, "{partial}: {refused:?}");
            assert!(refused[0].contains("is no wildcard"), "{refused:?}");
        }
        assert!(scopes(r#""invoices:*""#)[0].contains(r#"`scopes = ["invoices:read"]`"#));
        // Only `scopes` is matched this way: issuers and tags are names of their own.
        assert_eq!(
            errors(r#"credentials(required, scopes = ["a"], issuers = ["idp *"]), tags = ["a b"]"#),
            Vec::<String>::new()
        );
    }

    #[test]
    fn unquoted_text_in_a_list_of_strings_is_shown_quoted() {
        assert_eq!(
            scopes("invoices:write"),
            [r#"`scopes` takes an array of string literals: `scopes = ["invoices:write"]`"#]
        );
        assert_eq!(
            scopes(r#""invoices:read", invoices:write, crm.read"#),
            [
                r#"`scopes` takes an array of string literals: `scopes = ["invoices:read", "invoices:write", "crm.read"]`"#
            ]
        );
        assert_eq!(
            errors("tags = [billing]"),
            [r#"`tags` takes an array of string literals: `tags = ["billing"]`"#]
        );
        // Not text: a number, a constant.
        assert_eq!(scopes("5"), ["expected a string literal"]);
        assert_eq!(scopes("Self::SCOPE"), ["expected a string literal"]);
        assert_eq!(scopes("SCOPE"), ["expected a string literal"]);
        // A list of names is unchanged: `[read:write]` is reported at its item.
        let names = errors("risk = low, side_effects = [read:write]");
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].starts_with("expected a side effect"), "{names:?}");
    }
}
