//! `Capability` and its discovery metadata (`aip-model.md` §2.1–§2.3).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::contract::CapabilityContract;
use crate::ids::{CapabilityId, ProfileId};

/// A callable operation exposed by a participant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capability {
    /// Stable capability id, carried by `Action.capability_id`.
    pub id: CapabilityId,
    /// Human-readable name; must not be blank.
    pub name: String,
    /// What sort of operation this is.
    pub kind: CapabilityKind,
    /// Draft 2020-12 JSON Schema of `Action.input`.
    pub input_schema: Value,
    /// Draft 2020-12 JSON Schema of a completed result's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Purpose and limits, for humans and model prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Operational severity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskLevel>,
    /// Lifecycle label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stability: Option<Stability>,
    /// Pricing or metering hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Value>,
    /// Required auth/scopes, as a discovery hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
    /// Profile-specific projection metadata.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Legacy top-level approval flag, still read by policy and conformance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_human_approval: Option<bool>,
    /// The enterprise capability contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<CapabilityContract>,
}

impl Capability {
    /// The description a handler's doc comment gives: the text of each `#[doc]` attribute (one
    /// per `///` line) with one leading space removed and trailing blanks trimmed, joined by
    /// newlines, trimmed; `None` when nothing is left. The `#[capability]` macro applies it at
    /// compile time to `///` lines, and at run time when a doc attribute is an expression
    /// (`#[doc = include_str!("look.md")]`), so both give the same text. A written doc text of
    /// several lines (a `/** ... */` comment) is first passed through
    /// [`undecorated_block_doc`](Self::undecorated_block_doc) by the macro; an expression's
    /// text (a file's) is taken as it is.
    pub fn description_from_doc<'a>(parts: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let lines: Vec<&str> = parts
            .into_iter()
            .map(|part| part.strip_prefix(' ').unwrap_or(part).trim_end())
            .collect();
        let text = lines.join("\n");
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }

    /// A `/** ... */` doc comment's text without its decoration, as rustdoc strips it: blank
    /// first and last lines dropped; then, on the lines after the first, the leading `*` (and
    /// one space after it) when each non-blank one has one, else the indentation they share;
    /// trailing blanks trimmed. Text on the `/**` line itself keeps its words. Found by a
    /// hostile probe: a Javadoc-style comment published its stars.
    pub fn undecorated_block_doc(part: &str) -> String {
        let mut lines: Vec<&str> = part.lines().collect();
        if lines.last().is_some_and(|line| line.trim().is_empty()) {
            lines.pop();
        }
        let head = match lines.first() {
            Some(first) if first.trim().is_empty() => {
                lines.remove(0);
                None
            }
            Some(_) => Some(lines.remove(0)),
            None => None,
        };
        let starred = !lines.is_empty()
            && lines
                .iter()
                .all(|line| line.trim().is_empty() || line.trim_start().starts_with('*'));
        let shared_indent = lines
            .iter()
            .filter(|line| !line.trim().is_empty())
            .map(|line| line.len() - line.trim_start().len())
            .min()
            .unwrap_or(0);
        let body = lines.iter().map(|line| {
            let line = if starred {
                let rest = line.trim_start().strip_prefix('*').unwrap_or("");
                rest.strip_prefix(' ').unwrap_or(rest)
            } else {
                let indent = line.len() - line.trim_start().len();
                line.get(shared_indent.min(indent)..)
                    .unwrap_or_else(|| line.trim_start())
            };
            line.trim_end()
        });
        head.map(|head| head.strip_prefix(' ').unwrap_or(head).trim_end())
            .into_iter()
            .chain(body)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A capability with the given identity and input schema and nothing else declared.
    pub fn new(
        id: impl Into<CapabilityId>,
        name: impl Into<String>,
        kind: CapabilityKind,
        input_schema: Value,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            kind,
            input_schema,
            output_schema: None,
            description: None,
            risk: None,
            stability: None,
            cost: None,
            auth: None,
            bindings: Vec::new(),
            requires_human_approval: None,
            contract: None,
        }
    }

    /// Whether actions may target this capability (`kind != resource`).
    pub fn is_callable(&self) -> bool {
        self.kind != CapabilityKind::Resource
    }

    /// The first binding for `profile`, if any.
    pub fn binding(&self, profile: &str) -> Option<&Binding> {
        self.bindings.iter().find(|b| b.profile == profile)
    }
}

/// What sort of operation a capability is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapabilityKind {
    /// Delegates to another agent.
    Agent,
    /// A tool call.
    Tool,
    /// A multi-step workflow.
    Workflow,
    /// A conversation channel.
    Channel,
    /// Discovery-only readable object; never callable.
    Resource,
    /// A task performed by a human.
    HumanTask,
}

/// Operational severity of a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    /// Low risk.
    Low,
    /// Medium risk.
    Medium,
    /// High risk: hosts require approval.
    High,
    /// Critical risk: hosts require approval.
    Critical,
}

/// Lifecycle label of a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stability {
    /// Stable.
    Stable,
    /// Experimental.
    Experimental,
    /// Deprecated.
    Deprecated,
}

/// Profile-specific binding metadata for a capability.
///
/// Every key other than `profile` sits at the same JSON level (`#[serde(flatten)]`); `tool_name`,
/// `operation_id` and `name` name the projected operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The profile this binding applies to.
    pub profile: ProfileId,
    /// Profile-specific keys.
    #[serde(flatten)]
    pub metadata: Map<String, Value>,
}

impl Binding {
    /// Metadata keys that name the projected operation, in the order discovery reads them.
    pub const NAME_KEYS: [&'static str; 3] = ["tool_name", "operation_id", "name"];

    /// A binding for `profile` with no metadata.
    pub fn new(profile: impl Into<ProfileId>) -> Self {
        Self {
            profile: profile.into(),
            metadata: Map::new(),
        }
    }

    /// Adds one metadata key.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The raw projected name: the first of [`Self::NAME_KEYS`] that is present, if its value is
    /// a string. A present non-string key stops the search (upstream behaviour).
    pub fn projected_name(&self) -> Option<&str> {
        Self::NAME_KEYS
            .iter()
            .find_map(|key| self.metadata.get(*key))
            .and_then(Value::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::Capability;

    #[test]
    fn a_block_doc_comment_loses_its_decoration() {
        let undecorated = Capability::undecorated_block_doc;
        // `/**` on its own line, a star on each line, `*/` on its own line.
        let javadoc = "\n     * Creates a booking.\n     *\n     * Details here.\n     ";
        assert_eq!(undecorated(javadoc), "Creates a booking.\n\nDetails here.");
        // Text on the `/**` line, stars after it.
        let inline = " Creates a booking.\n     * Details here.\n     ";
        assert_eq!(undecorated(inline), "Creates a booking.\nDetails here.");
        // No stars: the shared indentation goes, the relative one stays.
        let plain = "\n    Creates a booking.\n\n      - for one night\n    ";
        assert_eq!(
            undecorated(plain),
            "Creates a booking.\n\n  - for one night"
        );
        // A file's text, taken as it is by `description_from_doc`, keeps its bullets.
        let file = "* one\n* two\n";
        assert_eq!(
            Capability::description_from_doc([file]).as_deref(),
            Some("* one\n* two")
        );
    }
}
