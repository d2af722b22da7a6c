//! `docs/diagnostics.md` is the catalogue of every compile-time diagnostic. These tests keep it
//! complete: every rule code of `aip_connector::rules::RULES` and every macro-only code has an
//! entry with the right waivability, every UI test the document names exists, and every UI test
//! that exists is named by the document.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use aip_connector::rules::RULES;

/// The workspace root (the parent of this package).
fn workspace_root() -> PathBuf {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    package.parent().unwrap_or(package).to_path_buf()
}

/// The text of `docs/diagnostics.md`.
fn diagnostics_doc() -> String {
    let path = workspace_root().join("docs/diagnostics.md");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

/// The entry of `code`: from its `### `code`` heading up to the next `##` or `###` heading.
fn entry<'d>(doc: &'d str, code: &str) -> Option<&'d str> {
    let heading = format!("\n### `{code}`");
    let start = doc.find(&heading)? + 1;
    let rest = &doc[start..];
    let end = ["\n### ", "\n## "]
        .iter()
        .filter_map(|next| rest[1..].find(next))
        .min()
        .map_or(rest.len(), |end| end + 1);
    Some(&rest[..end])
}

/// The codes of the macro's own diagnostics, read from `aip-connector-macros/src/diagnostics.rs`
/// (they are crate-private there, so the source is the only place to read them from).
fn macro_codes() -> Vec<String> {
    let path = workspace_root().join("aip-connector-macros/src/diagnostics.rs");
    let source = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    source
        .split("code: \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// Every `tests/ui/...rs` and `tests/pass/...rs` path the document mentions.
fn documented_tests(doc: &str) -> BTreeSet<String> {
    doc.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./".contains(c)))
        .filter(|word| word.starts_with("tests/ui/") || word.starts_with("tests/pass/"))
        .filter(|word| word.ends_with(".rs"))
        .map(str::to_owned)
        .collect()
}

/// Every `.rs` file under `tests/ui`, as a workspace-relative path with `/` separators.
fn ui_test_files() -> BTreeSet<String> {
    let root = workspace_root();
    let mut pending = vec![root.join("tests/ui")];
    let mut files = BTreeSet::new();
    while let Some(folder) = pending.pop() {
        let entries = std::fs::read_dir(&folder)
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", folder.display()));
        for entry in entries {
            let path = entry.expect("readable directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(&root).unwrap_or(&path);
                let parts: Vec<_> = relative
                    .components()
                    .map(|part| part.as_os_str().to_string_lossy().into_owned())
                    .collect();
                files.insert(parts.join("/"));
            }
        }
    }
    files
}

#[test]
fn every_rule_code_has_an_entry_with_its_waivability() {
    let doc = diagnostics_doc();
    let mut problems = Vec::new();
    for rule in RULES {
        let Some(entry) = entry(&doc, rule.code) else {
            problems.push(format!(
                "`{}` has no `### `{}`` entry",
                rule.code, rule.code
            ));
            continue;
        };
        let expected = if rule.waivable {
            "**Waivable:** yes"
        } else {
            "**Waivable:** no"
        };
        if !entry.contains(expected) {
            problems.push(format!(
                "the entry of `{}` does not say {expected}",
                rule.code
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/diagnostics.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_macro_code_has_an_entry() {
    let doc = diagnostics_doc();
    let codes = macro_codes();
    assert!(
        !codes.is_empty(),
        "no `code: \"...\"` found in aip-connector-macros/src/diagnostics.rs"
    );
    let missing: Vec<_> = codes
        .iter()
        .filter(|code| entry(&doc, code).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/diagnostics.md has no entry for the macro codes {missing:?}"
    );
}

#[test]
fn every_documented_test_exists() {
    let doc = diagnostics_doc();
    let documented = documented_tests(&doc);
    assert!(
        !documented.is_empty(),
        "docs/diagnostics.md names no UI test"
    );
    let root = workspace_root();
    let missing: Vec<_> = documented
        .iter()
        .filter(|path| !root.join(path).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/diagnostics.md names tests that do not exist: {missing:?}"
    );
}

#[test]
fn every_ui_test_is_documented() {
    let documented = documented_tests(&diagnostics_doc());
    let undocumented: Vec<_> = ui_test_files()
        .into_iter()
        .filter(|path| !documented.contains(path))
        .collect();
    assert!(
        undocumented.is_empty(),
        "UI tests missing from docs/diagnostics.md: {undocumented:?}"
    );
}
