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

/// The literal pieces of every message the macros report with a string literal
/// (`cx.error_spanned_by(span, "...")`, `cx.error_at(span, format!("...", ..))`), each with the
/// file and line it is written at. A message's `{...}` placeholders split it into pieces; a
/// message held in a constant or variable is not read here (the macro codes are, above).
fn literal_macro_messages() -> Vec<(String, Vec<String>)> {
    let root = workspace_root().join("aip-connector-macros/src");
    let mut messages = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", root.display()))
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "rs"))
        .collect();
    files.sort();
    for path in files {
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
        for call in [".error_spanned_by(", ".error_at("] {
            for (at, _) in source.match_indices(call) {
                let arguments = &source[at + call.len()..];
                let Some(message) = second_argument_literal(arguments) else {
                    continue;
                };
                let line = source[..at].lines().count();
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                messages.push((format!("{name}:{line}"), pieces(&message)));
            }
        }
    }
    messages
}

/// The string literal that starts the second argument of a call whose arguments begin at
/// `arguments`, directly or as the format string of `format!`; `None` when it is something
/// else. The first argument (a span or a tokens value) holds no comma outside brackets.
fn second_argument_literal(arguments: &str) -> Option<String> {
    let mut depth = 0usize;
    let mut comma = None;
    for (index, c) in arguments.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return None,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                comma = Some(index);
                break;
            }
            _ => {}
        }
    }
    let rest = arguments[comma? + 1..].trim_start();
    let rest = rest.strip_prefix('&').unwrap_or(rest);
    let rest = rest.strip_prefix("format!(").map_or(rest, str::trim_start);
    let body = rest.strip_prefix('"')?;
    let mut text = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(text),
            '\\' => match chars.next()? {
                'n' => text.push('\n'),
                other => text.push(other),
            },
            other => text.push(other),
        }
    }
    None
}

/// The literal pieces of a format string, split at its `{...}` placeholders (`{{` and `}}` are
/// literal braces).
fn pieces(format: &str) -> Vec<String> {
    let mut pieces = vec![String::new()];
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('{', Some('{')) | ('}', Some('}')) => {
                chars.next();
                pieces.last_mut().expect("never empty").push(c);
            }
            ('{', _) => {
                for skipped in chars.by_ref() {
                    if skipped == '}' {
                        break;
                    }
                }
                pieces.push(String::new());
            }
            _ => pieces.last_mut().expect("never empty").push(c),
        }
    }
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

/// Every message the macros can report is pinned by a UI test: some `error` line of a
/// `tests/ui/**/*.stderr` snapshot holds its literal pieces, in order.
#[test]
fn every_literal_macro_message_has_a_ui_test() {
    let root = workspace_root();
    let snapshots: Vec<String> = ui_test_files()
        .iter()
        .map(|test| root.join(test.replace(".rs", ".stderr")))
        .filter(|path| path.is_file())
        .map(|path| std::fs::read_to_string(path).expect("readable snapshot"))
        .collect();
    let error_lines: Vec<&str> = snapshots
        .iter()
        .flat_map(|snapshot| snapshot.lines())
        .filter(|line| line.starts_with("error"))
        .collect();
    let messages = literal_macro_messages();
    assert!(
        messages.len() >= 50,
        "only {} literal messages found in aip-connector-macros/src: has the call syntax changed?",
        messages.len()
    );
    let pinned = |pieces: &[String]| {
        error_lines.iter().any(|line| {
            let mut rest = *line;
            pieces.iter().all(|piece| match rest.find(piece.as_str()) {
                Some(at) => {
                    rest = &rest[at + piece.len()..];
                    true
                }
                None => false,
            })
        })
    };
    let unpinned: Vec<String> = messages
        .iter()
        .filter(|(_, pieces)| !pinned(pieces))
        .map(|(at, pieces)| format!("{at}: {}", pieces.join("…")))
        .collect();
    assert!(
        unpinned.is_empty(),
        "macro messages no UI test shows (add `tests/ui/<category>/<name>.rs` and its entry in \
         docs/diagnostics.md):\n{}",
        unpinned.join("\n")
    );
}

#[test]
fn message_pieces_split_at_placeholders() {
    assert_eq!(
        pieces("`{key}` takes `true` or `false`"),
        ["`", "` takes `true` or `false`"]
    );
    assert_eq!(pieces("a {{literal}} brace"), ["a {literal} brace"]);
    assert_eq!(
        second_argument_literal("expr, format!(\"unknown `{other}`\", other)"),
        Some("unknown `{other}`".to_owned())
    );
    assert_eq!(
        second_argument_literal("span, diagnostics::FREE_ID_MISSING.message)"),
        None
    );
    assert_eq!(
        second_argument_literal("item.span(), \"say \\\"hi\\\"\")"),
        Some("say \"hi\"".to_owned())
    );
}
