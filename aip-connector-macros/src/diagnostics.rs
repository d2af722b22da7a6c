//! The macro's own diagnostics (grammar and item rules), each with a stable code listed in
//! `docs/diagnostics.md` next to the shared contract rules of `aip_connector_core::rules`.

/// One macro-only diagnostic.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Diagnostic {
    #[allow(dead_code)] // read by the catalogue test and the docs check
    pub(crate) code: &'static str,
    pub(crate) message: &'static str,
}

pub(crate) const MISSING_SIDE_EFFECTS: Diagnostic = Diagnostic {
    code: "attribute.side_effects_missing",
    message: "missing required key `side_effects`: classification is never inferred; list every consequence, e.g. `side_effects = [read]` or `side_effects = [write, external_network]`",
};

pub(crate) const MISSING_RISK: Diagnostic = Diagnostic {
    code: "attribute.risk_missing",
    message: "missing required key `risk`: classification is never inferred; add `risk = low`, `medium`, `high` or `critical`",
};

pub(crate) const EMPTY_ID: Diagnostic = Diagnostic {
    code: "attribute.id_empty",
    message: "`id` must not be empty; by convention it reads `cap:<connector>:<operation>`",
};

pub(crate) const EMPTY_NAME: Diagnostic = Diagnostic {
    code: "attribute.name_empty",
    message: "`name` must not be empty; leave it out to derive it from the function name",
};

pub(crate) const RESOURCE_KIND: Diagnostic = Diagnostic {
    code: "attribute.resource_kind",
    message: "`kind = resource` cannot be a handler: resources are discovery-only; publish readable objects as manifest resources, or use `kind = tool`",
};

pub(crate) const NOT_A_FUNCTION: Diagnostic = Diagnostic {
    code: "item.not_a_function",
    message: "`#[capability]` goes on an `async fn` handler (a free function, or a method inside a `#[connector]` impl block)",
};

pub(crate) const FREE_ID_MISSING: Diagnostic = Diagnostic {
    code: "attribute.id_missing",
    message: "missing `id`: a free capability has no connector to derive its id from; add `id = \"cap:<connector>:<operation>\"`, or, if this function is in an impl block, put `#[connector(id = \"...\")]` on the block (without it the macro sees a free function: a handler without `self` then fails with rustc's \"struct is not supported in `trait`s or `impl`s\")",
};

pub(crate) const FREE_COMPANION_SELF: Diagnostic = Diagnostic {
    code: "attribute.free_companion_self",
    message: "a free capability has no `Self`: name its companion as a free `async fn` (`reconcile = find_booking`), or move the capability into a `#[connector]` impl block",
};

pub(crate) const STATE_IN_CONNECTOR: Diagnostic = Diagnostic {
    code: "item.state_in_connector",
    message: "`State<S>` is the state of a free capability's connector (`ConnectorBuilder::with_state`); a `#[connector]` handler reads its connector's state through `&self`: make what it needs a field of the connector type (if this `State` is a type of your own, such as the input, rename it or import it under another name: the macro recognises `State<...>` by its name)",
};

pub(crate) const MCP_DESTRUCTIVE_NOT_BOOL: Diagnostic = Diagnostic {
    code: "attribute.mcp_destructive_type",
    message: "`destructive` in an `mcp(...)` binding takes `true` or `false`: `mcp(destructive = false)` declares the tool's writes additive",
};

pub(crate) const MCP_DESTRUCTIVE_DENIED: Diagnostic = Diagnostic {
    code: "attribute.mcp_destructive_denied",
    message: "`destructive = false` tells MCP clients the tool never changes or destroys what existed before the call, but a `delete`, `financial`, `identity`, `medical`, `legal` or `code_execution` side effect does: a client that asks before destructive calls would not ask; remove `destructive = false` (it may declare only a `write` additive)",
};

pub(crate) const BORROWED_STATE: Diagnostic = Diagnostic {
    code: "item.borrowed_state",
    message: "a connector's state cannot borrow: each call gets its own clone of it, which may outlive the call (a spawned task, a stream); take an owned type (`String` or `Arc<str>` for `&str`, an `Arc<T>` for shared data) or `'static` data",
};

pub(crate) const CAPABILITY_UNDER_CFG_ATTR: Diagnostic = Diagnostic {
    code: "item.capability_under_cfg_attr",
    message: "`#[capability]` applied through `cfg_attr` is not read by `#[connector]`, which collects its capabilities before `cfg_attr` expands; put the condition on the handler as `#[cfg(...)]`, next to a plain `#[capability(...)]`, so that the handler and its capability are compiled in or out together",
};

pub(crate) const PARAMETER_ATTRIBUTE: Diagnostic = Diagnostic {
    code: "item.parameter_attribute",
    message: "a handler's parameter takes no doc comment or attribute (other than lint levels): the input is one type, and the doc comments of its fields become the schema's descriptions: put the parameters in one input type, each doc comment above its field (`/// The text to look for.` above `text: String`), and take `input: SearchInput`",
};

pub(crate) const PARAMETER_CFG: Diagnostic = Diagnostic {
    code: "item.parameter_cfg",
    message: "a handler's parameter cannot be configured out: the generated call passes every parameter the handler declares, and the published support record is derived from them; put the `#[cfg]` on the handler (a second handler under the opposite `#[cfg]` can take the other parameters)",
};

pub(crate) const CAPABILITY_REPEATED: Diagnostic = Diagnostic {
    code: "item.capability_repeated",
    message: "`#[capability]` is given twice on this handler: one handler is one capability; remove this one (two capabilities need two handlers)",
};

pub(crate) const LIST_ITEM_REPEATED: Diagnostic = Diagnostic {
    code: "attribute.list_item_repeated",
    message: "an item of this list counts once, yet a repeat is published in the manifest as written: remove the repeat",
};

pub(crate) const TAG_BLANK: Diagnostic = Diagnostic {
    code: "attribute.tag_blank",
    message: "a blank tag names nothing to search or group capabilities by, yet it is published in the manifest: remove it, or write the tag, e.g. `tags = [\"calendar\"]`",
};

pub(crate) const LITERAL_SUFFIX: Diagnostic = Diagnostic {
    code: "attribute.literal_suffix",
    message: "a literal of the attribute takes no suffix: the macro reads the value alone, so a type suffix (`300u8`) is not checked against anything and any other suffix (`\"cap:demo:look\"x`) is dropped; write the value without it",
};

pub(crate) const PROFILE_TYPO: Diagnostic = Diagnostic {
    code: "attribute.profile_typo",
    message: "is not a profile the SDK knows, but is a typo's distance from one: a misspelt profile compiles as a custom one, and nothing serves it",
};

pub(crate) const MCP_BINDING_KEY: Diagnostic = Diagnostic {
    code: "attribute.mcp_binding_key",
    message: "sets nothing: the MCP projection reads only `tool_name` (or `operation_id`, `name`) and `destructive` from `mcp(...)`",
};

pub(crate) const SCOPE_FORMAT: Diagnostic = Diagnostic {
    code: "attribute.scope_format",
    message: "each string of `scopes` is one scope, which the host matches by its exact name against the credential's granted scopes, and only a granted `*` grants every scope (docs/host-runtime.md §2, stage 4)",
};

/// Every macro-only diagnostic, for the catalogue test.
#[allow(dead_code)]
pub(crate) const ALL: &[Diagnostic] = &[
    MISSING_SIDE_EFFECTS,
    MISSING_RISK,
    EMPTY_ID,
    EMPTY_NAME,
    RESOURCE_KIND,
    NOT_A_FUNCTION,
    FREE_ID_MISSING,
    FREE_COMPANION_SELF,
    STATE_IN_CONNECTOR,
    BORROWED_STATE,
    MCP_DESTRUCTIVE_NOT_BOOL,
    MCP_DESTRUCTIVE_DENIED,
    CAPABILITY_UNDER_CFG_ATTR,
    PARAMETER_ATTRIBUTE,
    PARAMETER_CFG,
    CAPABILITY_REPEATED,
    LIST_ITEM_REPEATED,
    TAG_BLANK,
    LITERAL_SUFFIX,
    PROFILE_TYPO,
    MCP_BINDING_KEY,
    SCOPE_FORMAT,
];
