//! The rule catalogue agrees with the `codes` module.

use std::collections::BTreeSet;

use crate::rules::{RULES, rule_info};

/// Every string value of a `pub const` in `codes.rs`, read from its source so that a new
/// constant cannot be forgotten in the catalogue.
fn declared_codes() -> BTreeSet<&'static str> {
    include_str!("../codes.rs")
        .split("pub const ")
        .skip(1)
        .filter_map(|declaration| declaration.split('"').nth(1))
        .collect()
}

#[test]
fn every_code_is_catalogued_and_every_catalogued_code_is_declared() {
    let declared = declared_codes();
    let catalogued: BTreeSet<&str> = RULES.iter().map(|rule| rule.code).collect();
    assert_eq!(declared.len(), 59, "codes.rs declares {declared:#?}");
    assert_eq!(declared, catalogued);
    assert_eq!(catalogued.len(), RULES.len(), "a code is catalogued twice");
}

#[test]
fn catalogue_entries_are_complete() {
    for rule in RULES {
        assert!(!rule.summary.is_empty(), "{}", rule.code);
        assert!(
            rule.fix.ends_with('.'),
            "{}: fix is one sentence",
            rule.code
        );
        if rule.waivable {
            assert!(
                rule.fix
                    .contains(&format!("waive `{}` with a reason", rule.code)),
                "{}: a waivable rule's fix names its waiver",
                rule.code
            );
        }
    }
}

#[test]
fn only_lints_and_external_compensation_targets_are_waivable() {
    let waivable: Vec<&str> = RULES
        .iter()
        .filter(|rule| rule.waivable)
        .map(|rule| rule.code)
        .collect();
    assert!(
        waivable
            .iter()
            .all(|code| code.starts_with("contract.lint.")
                || *code == crate::rules::codes::MANIFEST_COMPENSATION_CAPABILITY_UNKNOWN)
    );
    assert_eq!(waivable.len(), 8);
}

#[test]
fn rule_info_finds_codes() {
    let rule = rule_info("contract.execution.no_completion_mode");
    assert_eq!(rule.map(|rule| rule.waivable), Some(false));
    assert!(rule_info("contract.nope").is_none());
}
