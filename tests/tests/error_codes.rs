//! Keeps the error-code table of `docs/host-runtime.md` complete and honest.
//!
//! The constants are read from the sources (`aip-connector/src/codes.rs` and the `pub mod codes`
//! of `aip-connector-core/src/model/error.rs`), so a constant added there without a table row
//! fails here. Every row must name a real constant; a row marked reserved must name a code that
//! no source raises, and a code that no source raises must be marked reserved. Every code the
//! host raises must be referenced by some test in `tests/tests/`, except the ones listed in
//! [`NOT_YET_COVERED`], which may only shrink.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use aip_connector::codes;

/// Codes the host raises that no test in `tests/tests/` references yet. Remove an entry as soon
/// as a test covers it (the test below fails while a covered code is still listed).
const NOT_YET_COVERED: &[&str] = &[
    // Unreachable through the host: `compensate` outside `supported_modes` is refused earlier as
    // `transaction.mode_unsupported`, and admission refuses a capability that declares the mode
    // without supported compensation (`contract.transaction.compensate_without_compensation`);
    // `tests/tests/host_codes.rs` proves both.
    "TRANSACTION_COMPENSATION_UNSUPPORTED",
    // Unreachable through the host, at stage 3 and at stage 11 alike: envelope validation
    // (stage 0) refuses every commit without `plan_id` as `action.invalid` first;
    // `tests/tests/host_codes.rs` proves it.
    "TRANSACTION_PLAN_REQUIRED",
    // Unreachable through the host: only the direct-commit branch (a commit without `plan_id`)
    // raises it, and envelope validation refuses every such commit first, as above.
    "TRANSACTION_COMMIT_ALREADY_CLAIMED",
    // Unreachable through the host: stage 0 gives every `reconcile` without a transaction id a
    // fresh one, so admission always has an id (and answers `transaction.not_found`).
    "TRANSACTION_RECONCILIATION_ID_REQUIRED",
    // Unreachable through the host: a commit whose tenant differs from the plan's (one of them
    // naming none included) is `transaction.plan_not_found` first, so another tenant learns
    // nothing of the plan; the check stays as upstream's step, behind that one.
    "TRANSACTION_PLAN_TENANT_MISMATCH",
];

/// The constant that is a `source` component, not an error code: it has a row but is never
/// "raised" or "covered".
const NOT_A_CODE: &str = "SOURCE_COMPONENT";

/// What the "When (stage)" cell of a reserved row starts with.
const RESERVED: &str = "reserved: not raised by this version";

/// The columns every table of the error-code section has, in order.
const COLUMNS: [&str; 6] = [
    "Code",
    "Constant",
    "Category",
    "Retryable",
    "When (stage)",
    "Upstream",
];

/// The workspace root (the tests crate sits one level below it).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = workspace().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every `pub const NAME: &str = "value";` in `source`, by name. Fails on a `pub const` that is
/// not a plain string constant, so nothing is skipped silently.
fn string_constants(source: &str, file: &str) -> BTreeMap<String, String> {
    let mut constants = BTreeMap::new();
    for declaration in source.split("pub const ").skip(1) {
        let declaration = declaration
            .split(';')
            .next()
            .expect("split yields at least one piece");
        let parsed = declaration.split_once(':').and_then(|(name, rest)| {
            let literal = rest.trim().strip_prefix("&str")?.trim().strip_prefix('=')?;
            let value = literal.trim().strip_prefix('"')?.strip_suffix('"')?;
            (!value.contains(['"', '\\'])).then(|| (name.trim().to_owned(), value.to_owned()))
        });
        let (name, value) = parsed.unwrap_or_else(|| {
            panic!("{file}: `pub const {declaration}` is not a plain `&str` string constant")
        });
        assert!(
            constants.insert(name.clone(), value).is_none(),
            "{file}: `{name}` declared twice"
        );
    }
    constants
}

/// The body of `pub mod codes { ... }` in `error.rs`, up to the first line that closes it.
fn codes_module(source: &str) -> &str {
    let start = source
        .find("pub mod codes {")
        .expect("error.rs declares `pub mod codes`");
    let body = &source[start..];
    let end = body
        .find("\n}")
        .expect("`pub mod codes` is closed at the start of a line");
    &body[..end]
}

/// Every constant of `aip_connector::codes`, name → value.
fn all_constants() -> BTreeMap<String, String> {
    let facade_file = "aip-connector/src/codes.rs";
    let core_file = "aip-connector-core/src/model/error.rs";
    let mut constants = string_constants(&read(facade_file), facade_file);
    let core_source = read(core_file);
    for (name, value) in string_constants(codes_module(&core_source), core_file) {
        assert!(
            constants.insert(name.clone(), value).is_none(),
            "`{name}` is declared in both {facade_file} and {core_file}"
        );
    }
    // The parser read what the compiler sees (one constant from each file).
    for (name, value) in [
        ("RESOURCE_NOT_FOUND", codes::RESOURCE_NOT_FOUND),
        ("SOURCE_COMPONENT", codes::SOURCE_COMPONENT),
        ("ACTION_INVALID_INPUT", codes::ACTION_INVALID_INPUT),
        (
            "TRANSACTION_RECONCILIATION_PENDING",
            codes::TRANSACTION_RECONCILIATION_PENDING,
        ),
    ] {
        assert_eq!(constants.get(name).map(String::as_str), Some(value));
    }
    constants
}

/// One data row of the error-code tables.
struct Row {
    line: usize,
    cells: Vec<String>,
}

impl Row {
    /// The backticked tokens of column `index`.
    fn ticked(&self, index: usize) -> Vec<&str> {
        self.cells[index].split('`').skip(1).step_by(2).collect()
    }

    /// The single backticked token of column `index`.
    fn single(&self, index: usize) -> &str {
        match self.ticked(index).as_slice() {
            [token] => token,
            other => panic!(
                "docs/host-runtime.md:{}: column `{}` must hold exactly one backticked name, found {other:?}",
                self.line, COLUMNS[index]
            ),
        }
    }
}

/// The data rows of every table in the `## … Error codes` section of `docs/host-runtime.md`.
/// Each table must have exactly [`COLUMNS`].
fn table_rows() -> Vec<Row> {
    let doc = read("docs/host-runtime.md");
    let lines: Vec<&str> = doc.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("## ") && l.contains("Error codes"))
        .expect("docs/host-runtime.md has an `## … Error codes` section");
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.starts_with("## "))
        .map_or(lines.len(), |offset| start + 1 + offset);
    let mut rows = Vec::new();
    let mut previous_was_table = false;
    for (index, line) in lines.iter().enumerate().take(end).skip(start + 1) {
        let is_table = line.starts_with('|');
        if is_table {
            let cells: Vec<String> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect();
            let separator = cells.iter().all(|c| c.chars().all(|ch| ch == '-'));
            if !previous_was_table {
                assert_eq!(
                    cells,
                    COLUMNS,
                    "docs/host-runtime.md:{}: every error-code table has these columns",
                    index + 1
                );
            } else if !separator {
                assert_eq!(
                    cells.len(),
                    COLUMNS.len(),
                    "docs/host-runtime.md:{}: wrong number of cells",
                    index + 1
                );
                rows.push(Row {
                    line: index + 1,
                    cells,
                });
            }
        }
        previous_was_table = is_table;
    }
    rows
}

/// Whether `text` contains `word` with no identifier character on either side.
fn contains_word(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// `source` without its trailing inline `#[cfg(test)] mod tests { … }`.
fn without_unit_tests(source: &str) -> &str {
    source
        .match_indices("#[cfg(test)]")
        .find(|(at, marker)| {
            source[at + marker.len()..]
                .trim_start()
                .starts_with("mod tests {")
        })
        .map_or(source, |(at, _)| &source[..at])
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Whether `source` raises constant `name` (value `value`): `codes::NAME` or the literal.
fn raises(source: &str, name: &str, value: &str) -> bool {
    contains_word(source, &format!("codes::{name}")) || source.contains(&format!("\"{value}\""))
}

/// The non-test source of every library crate, minus the declarations of the codes (which
/// would otherwise count as raising them).
fn library_sources() -> Vec<String> {
    let root = workspace();
    let facade_codes = root.join("aip-connector/src/codes.rs");
    let core_codes = root.join("aip-connector-core/src/model/error.rs");
    [
        "aip-connector/src",
        "aip-connector-core/src",
        "aip-connector-macros/src",
        "aip-connector-testkit/src",
    ]
    .iter()
    .flat_map(|dir| rust_files(&root.join(dir)))
    .filter(|path| *path != facade_codes)
    .map(|path| {
        let source = fs::read_to_string(&path).expect("source file is UTF-8");
        let source = without_unit_tests(&source);
        if path == core_codes {
            source.replacen(codes_module(source), "", 1)
        } else {
            source.to_owned()
        }
    })
    .collect()
}

#[test]
fn every_constant_has_a_row_naming_it() {
    let constants = all_constants();
    let rows = table_rows();
    let documented: BTreeMap<&str, &str> =
        rows.iter().map(|r| (r.single(0), r.single(1))).collect();
    let missing: Vec<String> = constants
        .iter()
        .filter(|(name, value)| documented.get(value.as_str()) != Some(&name.as_str()))
        .map(|(name, value)| format!("`{value}` ({name})"))
        .collect();
    assert!(
        missing.is_empty(),
        "add a row to the error-code table of docs/host-runtime.md for: {}",
        missing.join(", ")
    );
}

#[test]
fn every_row_names_a_real_constant_once() {
    let constants = all_constants();
    let mut seen = BTreeSet::new();
    for row in table_rows() {
        for code in row.ticked(0) {
            assert!(
                seen.insert(code.to_owned()),
                "docs/host-runtime.md:{}: `{code}` has two rows",
                row.line
            );
            let name = row.single(1);
            assert_eq!(
                constants.get(name).map(String::as_str),
                Some(code),
                "docs/host-runtime.md:{}: `{code}` is not the value of a constant `{name}` in aip_connector::codes",
                row.line
            );
        }
    }
}

#[test]
fn reserved_rows_are_exactly_the_codes_nothing_raises() {
    let constants = all_constants();
    let sources = library_sources();
    for row in table_rows() {
        let name = row.single(1);
        let value = &constants[name];
        let raised = sources.iter().any(|s| raises(s, name, value));
        let reserved = row.cells[4].starts_with(RESERVED);
        assert!(
            raised != reserved,
            "docs/host-runtime.md:{}: `{value}` is {} but its row {} `{RESERVED}`",
            row.line,
            if raised { "raised" } else { "never raised" },
            if reserved { "says" } else { "does not say" },
        );
    }
}

#[test]
fn every_code_the_host_raises_is_exercised_by_a_test() {
    let constants = all_constants();
    let root = workspace();
    let host: Vec<String> = rust_files(&root.join("aip-connector/src/host"))
        .iter()
        .map(|path| {
            let source = fs::read_to_string(path).expect("source file is UTF-8");
            without_unit_tests(&source).to_owned()
        })
        .collect();
    let tests: Vec<String> = rust_files(&root.join("tests/tests"))
        .iter()
        .filter(|path| !path.ends_with("error_codes.rs"))
        .map(|path| fs::read_to_string(path).expect("test file is UTF-8"))
        .collect();
    let mut uncovered = BTreeSet::new();
    for (name, value) in &constants {
        let raised_by_host = host
            .iter()
            .any(|s| contains_word(s, &format!("codes::{name}")));
        if name == NOT_A_CODE || !raised_by_host {
            continue;
        }
        let covered = tests
            .iter()
            .any(|t| contains_word(t, name) || t.contains(&format!("\"{value}\"")));
        if !covered {
            uncovered.insert(name.as_str());
        }
    }
    let listed: BTreeSet<&str> = NOT_YET_COVERED.iter().copied().collect();
    let newly_uncovered: Vec<&&str> = uncovered.difference(&listed).collect();
    assert!(
        newly_uncovered.is_empty(),
        "the host raises these codes and no test in tests/tests/ references them: {newly_uncovered:?}"
    );
    let now_covered: Vec<&&str> = listed.difference(&uncovered).collect();
    assert!(
        now_covered.is_empty(),
        "these codes are covered by a test now (or no longer raised by the host): remove them from NOT_YET_COVERED in tests/tests/error_codes.rs: {now_covered:?}"
    );
}

#[test]
fn parsing_reads_multi_line_constants_and_refuses_others() {
    let parsed = string_constants(
        "pub const A: &str = \"a.b\";\npub const LONG: &str =\n    \"c.d\";\n",
        "inline",
    );
    assert_eq!(parsed["A"], "a.b");
    assert_eq!(parsed["LONG"], "c.d");
    let refused = std::panic::catch_unwind(|| string_constants("pub const N: usize = 3;", "x"));
    assert!(
        refused.is_err(),
        "a non-string constant must not be skipped"
    );
    assert!(contains_word("x codes::A_B;", "codes::A_B"));
    assert!(!contains_word("x codes::A_BC;", "codes::A_B"));
}
