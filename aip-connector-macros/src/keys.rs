//! Attribute keys and value names, as named constants so no string literal is scattered through
//! the parser, and so "did you mean" suggestions come from one list per section.

/// Keys of `#[capability(...)]`.
pub(crate) mod capability {
    pub(crate) const ID: &str = "id";
    pub(crate) const NAME: &str = "name";
    pub(crate) const KIND: &str = "kind";
    pub(crate) const RISK: &str = "risk";
    pub(crate) const STABILITY: &str = "stability";
    pub(crate) const SIDE_EFFECTS: &str = "side_effects";
    pub(crate) const IDEMPOTENCY: &str = "idempotency";
    pub(crate) const EXECUTION: &str = "execution";
    pub(crate) const DATA: &str = "data";
    pub(crate) const CREDENTIALS: &str = "credentials";
    pub(crate) const APPROVAL: &str = "approval";
    pub(crate) const SLA: &str = "sla";
    pub(crate) const TRANSACTION: &str = "transaction";
    pub(crate) const COMPENSATION: &str = "compensation";
    pub(crate) const BINDINGS: &str = "bindings";
    pub(crate) const TAGS: &str = "tags";
    pub(crate) const EXAMPLES: &str = "examples";
    pub(crate) const COST: &str = "cost";
    pub(crate) const AUTH: &str = "auth";
    pub(crate) const RECONCILE: &str = "reconcile";
    pub(crate) const VALIDATE: &str = "validate";
    pub(crate) const CANCEL: &str = "cancel";
    pub(crate) const WAIVE: &str = "waive";

    pub(crate) const ALL: &[&str] = &[
        ID,
        NAME,
        KIND,
        RISK,
        STABILITY,
        SIDE_EFFECTS,
        IDEMPOTENCY,
        EXECUTION,
        DATA,
        CREDENTIALS,
        APPROVAL,
        SLA,
        TRANSACTION,
        COMPENSATION,
        BINDINGS,
        TAGS,
        EXAMPLES,
        COST,
        AUTH,
        RECONCILE,
        VALIDATE,
        CANCEL,
        WAIVE,
    ];
}

/// Keys of `idempotency(...)`.
pub(crate) mod idempotency {
    pub(crate) const REQUIRED: &str = "required";
    pub(crate) const OPTIONAL: &str = "optional";
    pub(crate) const UNSUPPORTED: &str = "unsupported";
    pub(crate) const COLLISION: &str = "collision";
    pub(crate) const SCOPE: &str = "scope";
    pub(crate) const TTL_MS: &str = "ttl_ms";
    pub(crate) const ALL: &[&str] = &[REQUIRED, OPTIONAL, UNSUPPORTED, COLLISION, SCOPE, TTL_MS];
}

/// Keys of `execution(...)`.
pub(crate) mod execution {
    pub(crate) const SYNC: &str = "sync";
    pub(crate) const ASYNC: &str = "async";
    pub(crate) const STREAMING: &str = "streaming";
    pub(crate) const CANCEL: &str = "cancel";
    pub(crate) const RETRY: &str = "retry";
    pub(crate) const EXPECTED: &str = "expected";
    pub(crate) const RETRY_SAFETY: &str = "retry_safety";
    pub(crate) const ALL: &[&str] = &[
        SYNC,
        ASYNC,
        STREAMING,
        CANCEL,
        RETRY,
        EXPECTED,
        RETRY_SAFETY,
    ];
}

/// Keys of `data(...)`.
pub(crate) mod data {
    pub(crate) const SENSITIVITY: &str = "sensitivity";
    pub(crate) const PII: &str = "pii";
    pub(crate) const REDACTION: &str = "redaction";
    pub(crate) const RESIDENCY: &str = "residency";
    pub(crate) const RETENTION: &str = "retention";
    pub(crate) const ALL: &[&str] = &[SENSITIVITY, PII, REDACTION, RESIDENCY, RETENTION];

    pub(crate) const ALLOWED: &str = "allowed";
    pub(crate) const PROHIBITED: &str = "prohibited";
    pub(crate) const RESIDENCY_ALL: &[&str] = &[ALLOWED, PROHIBITED];

    pub(crate) const RETAIN_FOR_MS: &str = "retain_for_ms";
    pub(crate) const DELETE_AFTER_MS: &str = "delete_after_ms";
    pub(crate) const LEGAL_HOLD: &str = "legal_hold";
    pub(crate) const RETENTION_ALL: &[&str] = &[RETAIN_FOR_MS, DELETE_AFTER_MS, LEGAL_HOLD];
}

/// Keys of `credentials(...)`.
pub(crate) mod credentials {
    pub(crate) const REQUIRED: &str = "required";
    pub(crate) const OPTIONAL: &str = "optional";
    pub(crate) const ISSUERS: &str = "issuers";
    pub(crate) const SCOPES: &str = "scopes";
    pub(crate) const OAUTH_REFRESH: &str = "oauth_refresh";
    pub(crate) const ALL: &[&str] = &[REQUIRED, OPTIONAL, ISSUERS, SCOPES, OAUTH_REFRESH];
}

/// Keys of `approval(...)`.
pub(crate) mod approval {
    pub(crate) const REQUIRED: &str = "required";
    pub(crate) const OPTIONAL: &str = "optional";
    pub(crate) const REASON: &str = "reason";
    pub(crate) const SELECTOR: &str = "selector";
    pub(crate) const RULE: &str = "rule";
    pub(crate) const EVIDENCE: &str = "evidence";
    pub(crate) const TTL_MS: &str = "ttl_ms";
    pub(crate) const DISTINCT_PRINCIPALS: &str = "distinct_principals";
    pub(crate) const SEPARATION: &str = "separation";
    pub(crate) const POLICY_VERSION: &str = "policy_version";
    pub(crate) const DELEGATED: &str = "delegated";
    pub(crate) const ALL: &[&str] = &[
        REQUIRED,
        OPTIONAL,
        REASON,
        SELECTOR,
        RULE,
        EVIDENCE,
        TTL_MS,
        DISTINCT_PRINCIPALS,
        SEPARATION,
        POLICY_VERSION,
        DELEGATED,
    ];

    pub(crate) const REQUESTER_MUST_DIFFER: &str = "requester_must_differ";
    pub(crate) const OPERATOR_MUST_DIFFER: &str = "operator_must_differ";
    pub(crate) const ALLOW_SELF_APPROVAL: &str = "allow_self_approval";
    pub(crate) const SEPARATION_ALL: &[&str] = &[
        REQUESTER_MUST_DIFFER,
        OPERATOR_MUST_DIFFER,
        ALLOW_SELF_APPROVAL,
    ];

    pub(crate) const PRINCIPAL: &str = "principal";
    pub(crate) const SCOPE: &str = "scope";
    pub(crate) const EXPIRES_AT: &str = "expires_at";
    pub(crate) const DELEGATED_ALL: &[&str] = &[PRINCIPAL, SCOPE, EXPIRES_AT];

    /// Selector and rule-leaf constructors: `role("x")`, `quorum(2, ...)`, ...
    pub(crate) const ROLE: &str = "role";
    pub(crate) const GROUP: &str = "group";
    pub(crate) const TENANT_POLICY: &str = "tenant_policy";
    pub(crate) const EXTERNAL_SYSTEM: &str = "external_system";
    pub(crate) const SELECTORS: &[&str] = &[PRINCIPAL, ROLE, GROUP, TENANT_POLICY, EXTERNAL_SYSTEM];

    pub(crate) const ALL_OF: &str = "all";
    pub(crate) const ANY_OF: &str = "any";
    pub(crate) const QUORUM: &str = "quorum";
    pub(crate) const DELEGATED_AUTHORITY: &str = "delegated_authority";
    pub(crate) const RULES: &[&str] = &[
        ALL_OF,
        ANY_OF,
        QUORUM,
        PRINCIPAL,
        ROLE,
        GROUP,
        TENANT_POLICY,
        EXTERNAL_SYSTEM,
        DELEGATED_AUTHORITY,
    ];
    /// Named arguments inside rule constructors.
    pub(crate) const REUSE: &str = "reuse";
    pub(crate) const MAX_RISK: &str = "max_risk";
    pub(crate) const MAX_VALUE: &str = "max_value";
}

/// Keys of `sla(...)`.
pub(crate) mod sla {
    pub(crate) const LATENCY_MS: &str = "latency_ms";
    pub(crate) const TIMEOUT_MS: &str = "timeout_ms";
    pub(crate) const ASYNC_EXPECTED: &str = "async_expected";
    pub(crate) const QUEUE_DELAY_MS: &str = "queue_delay_ms";
    pub(crate) const AVAILABILITY: &str = "availability";
    pub(crate) const ALL: &[&str] = &[
        LATENCY_MS,
        TIMEOUT_MS,
        ASYNC_EXPECTED,
        QUEUE_DELAY_MS,
        AVAILABILITY,
    ];
}

/// Keys of `transaction(...)`.
pub(crate) mod transaction {
    pub(crate) const MODES: &str = "modes";
    pub(crate) const REQUIRES_PLAN: &str = "requires_plan";
    pub(crate) const FIDELITY: &str = "fidelity";
    pub(crate) const ALL: &[&str] = &[MODES, REQUIRES_PLAN, FIDELITY];
}

/// Keys of `compensation(...)`.
pub(crate) mod compensation {
    pub(crate) const CAPABILITY: &str = "capability";
    pub(crate) const WINDOW_MS: &str = "window_ms";
    pub(crate) const REQUIRES_APPROVAL: &str = "requires_approval";
    /// The four modes are flags: `compensation(supported, capability = "...")`.
    pub(crate) const MODES: &[&str] = &[
        "not_required",
        "supported",
        "best_effort",
        "rollback_not_supported",
    ];
    pub(crate) const ALL: &[&str] = &[
        CAPABILITY,
        WINDOW_MS,
        REQUIRES_APPROVAL,
        "not_required",
        "supported",
        "best_effort",
        "rollback_not_supported",
    ];
}

/// Keys of `bindings(...)`: short names of well-known profiles, plus `profile("id", ...)`.
pub(crate) mod bindings {
    pub(crate) const PROFILE: &str = "profile";
    pub(crate) const ALIASES: &[(&str, &str)] = aip_connector_core::ids::profiles::SHORT_NAMES;
    pub(crate) const ALL: &[&str] = &[
        "native_http",
        "native_nats",
        "mcp",
        "a2a",
        "webhook",
        "sse",
        PROFILE,
    ];
}

/// Keys of `waive(...)`.
pub(crate) mod waive {
    pub(crate) const CODE: &str = "code";
    pub(crate) const REASON: &str = "reason";
    pub(crate) const ALL: &[&str] = &[CODE, REASON];
}

/// Keys of `#[connector(...)]`.
pub(crate) mod connector {
    pub(crate) const ID: &str = "id";
    pub(crate) const NAME: &str = "name";
    pub(crate) const PROFILES: &str = "profiles";
    pub(crate) const AGENT: &str = "agent";
    pub(crate) const COMPATIBILITY: &str = "compatibility";
    pub(crate) const WEBHOOKS: &str = "webhooks";
    pub(crate) const CHANNELS: &str = "channels";
    pub(crate) const CRATE: &str = super::CRATE;
    pub(crate) const ALL: &[&str] = &[
        ID,
        NAME,
        PROFILES,
        AGENT,
        COMPATIBILITY,
        WEBHOOKS,
        CHANNELS,
        CRATE,
    ];
}

/// `crate = "path"`: where the generated code finds the SDK when it is not the dependency
/// `aip_connector` (a facade crate re-exporting it, a renamed dependency). On `#[connector]` and
/// on a free `#[capability]`.
pub(crate) const CRATE: &str = "crate";

/// Wire names of the enums the attribute accepts as bare identifiers.
pub(crate) mod values {
    pub(crate) const KINDS: &[&str] = &[
        "agent",
        "tool",
        "workflow",
        "channel",
        "resource",
        "human_task",
    ];
    pub(crate) const RISKS: &[&str] = &["low", "medium", "high", "critical"];
    pub(crate) const STABILITIES: &[&str] = &["stable", "experimental", "deprecated"];
    pub(crate) const SIDE_EFFECTS: &[&str] = &[
        "read",
        "write",
        "delete",
        "send_message",
        "financial",
        "identity",
        "medical",
        "legal",
        "external_network",
        "code_execution",
    ];
    pub(crate) const COLLISIONS: &[&str] = &[
        "return_original_result",
        "reject_conflict",
        "revalidate_input_hash",
    ];
    pub(crate) const KEY_SCOPES: &[&str] = &[
        "action",
        "capability",
        "principal",
        "tenant",
        "external_account",
    ];
    pub(crate) const COMPLETIONS: &[&str] = &["sync", "async", "streaming", "any"];
    pub(crate) const RETRY_SAFETIES: &[&str] =
        &["safe", "safe_with_idempotency_key", "unsafe", "unknown"];
    pub(crate) const SENSITIVITIES: &[&str] = &[
        "public",
        "internal",
        "confidential",
        "restricted",
        "regulated",
        "unknown",
    ];
    pub(crate) const EVIDENCE: &[&str] = &[
        "reason",
        "input_snapshot",
        "policy_decision",
        "external_ticket",
        "attachment",
    ];
    pub(crate) const TRANSACTION_MODES: &[&str] = &[
        "execute",
        "dry_run",
        "plan",
        "commit",
        "compensate",
        "reconcile",
        "rollback_not_supported",
    ];
    pub(crate) const FIDELITIES: &[&str] = &[
        "schema_only",
        "policy_and_schema",
        "downstream_validation",
        "full_simulation",
    ];
}

/// Names of the Rust attributes the macros read on a handler.
pub(crate) mod attributes {
    pub(crate) const CAPABILITY: &str = "capability";
    pub(crate) const CFG: &str = "cfg";
    pub(crate) const CFG_ATTR: &str = "cfg_attr";
    pub(crate) const DOC: &str = "doc";
}

#[cfg(test)]
mod tests {
    /// `bindings(...)` accepts every short profile name and nothing else besides `profile`:
    /// the key list is written out (it is a `const`), so a name added to core's table must be
    /// added here too.
    #[test]
    fn binding_keys_are_the_short_profile_names() {
        let mut names: Vec<&str> = super::bindings::ALIASES.iter().map(|(n, _)| *n).collect();
        names.push(super::bindings::PROFILE);
        assert_eq!(super::bindings::ALL, names.as_slice());
    }
}
