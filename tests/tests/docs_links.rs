//! Every relative link of the guides and READMEs resolves: the file exists, and a `#anchor`
//! names a heading of the target Markdown file, as GitHub (and docs.rs) derive anchors. The task
//! index `docs/README.md` is 100-odd such links into other files' sections, so a renamed heading
//! fails here instead of leaving a dead link.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The Markdown files whose links are checked, relative to the workspace root.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for dir in [
        "docs",
        "aip-connector",
        "aip-connector-core",
        "aip-connector-macros",
        "aip-connector-testkit",
        "examples",
    ] {
        let entries = std::fs::read_dir(root.join(dir)).expect("the directory exists");
        for entry in entries {
            let path = entry.expect("a readable entry").path();
            if path.extension().is_some_and(|extension| extension == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A fenced code block's opening fence: three or more backticks or tildes after at most three
/// spaces. Its character and length, which the closing fence must match.
fn fence(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = trimmed.chars().take_while(|c| *c == marker).count();
    (length >= 3).then_some((marker, length))
}

/// The lines of `markdown` outside fenced code blocks, numbered from 1.
fn prose_lines(markdown: &str) -> Vec<(usize, &str)> {
    let mut open: Option<(char, usize)> = None;
    let mut lines = Vec::new();
    for (index, line) in markdown.lines().enumerate() {
        match (open, fence(line)) {
            (None, Some(opening)) => open = Some(opening),
            (None, None) => lines.push((index + 1, line)),
            (Some((marker, length)), Some((closing, closing_length)))
                if closing == marker
                    && closing_length >= length
                    && line.trim().chars().all(|c| c == marker) =>
            {
                open = None;
            }
            (Some(_), _) => {}
        }
    }
    lines
}

/// `[text](url)` becomes `text`, so a heading's anchor is made of what it shows.
fn link_texts(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('[') {
        let Some(middle) = rest[start..].find("](") else {
            break;
        };
        let Some(end) = rest[start + middle..].find(')') else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(&rest[start + 1..start + middle]);
        rest = &rest[start + middle + end + 1..];
    }
    out.push_str(rest);
    out
}

/// GitHub's anchor of a heading's text: lower case, spaces turned into `-`, every character but
/// letters, digits, `-` and `_` removed.
fn slug(heading: &str) -> String {
    link_texts(heading)
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every ATX heading of `markdown`, with GitHub's `-1`, `-2` suffixes for
/// repeated ones.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(markdown) {
        let trimmed = line.trim_start_matches(' ');
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if line.len() - trimmed.len() > 3 || !(1..=6).contains(&level) {
            continue;
        }
        let Some(text) = trimmed[level..].strip_prefix([' ', '\t']) else {
            continue;
        };
        let text = text.trim().trim_end_matches('#').trim_end();
        let base = slug(text);
        let count = seen.entry(base.clone()).or_default();
        anchors.insert(if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The targets of the inline links and images of one line: what stands between `](` and the
/// closing parenthesis, without a title. Code spans are skipped.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(index + 1) == Some(&b'(') => {
                let start = index + 2;
                if let Some(length) = line[start..].find(')') {
                    let target = line[start..start + length]
                        .split_whitespace()
                        .next()
                        .unwrap_or("");
                    targets.push(target);
                    index = start + length;
                }
            }
            _ => {}
        }
        index += 1;
    }
    targets
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace");
    let mut anchors_of: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files(root) {
        let markdown = std::fs::read_to_string(&file).expect("a readable Markdown file");
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (number, line) in prose_lines(&markdown) {
            for target in link_targets(line) {
                let is_url = target
                    .split_once(':')
                    .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()));
                if target.is_empty() || is_url {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let target_file = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().expect("a file has a directory").join(path)
                };
                if !target_file.exists() {
                    broken.push(format!("{shown}:{number}: `{target}`: no such file"));
                    continue;
                }
                if anchor.is_empty() || target_file.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let known = anchors_of.entry(target_file.clone()).or_insert_with(|| {
                    anchors(&std::fs::read_to_string(&target_file).expect("a readable target"))
                });
                if !known.contains(anchor) {
                    broken.push(format!(
                        "{shown}:{number}: `{target}`: no heading with the anchor `#{anchor}`"
                    ));
                }
            }
        }
    }
    assert!(
        checked > 200,
        "only {checked} links found: is the scan broken?"
    );
    assert!(
        broken.is_empty(),
        "{} of {checked} links do not resolve:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The READMEs crates.io shows on each published crate's page, where a relative link has no
/// repository to resolve against.
const PUBLISHED_READMES: [&str; 4] = [
    "aip-connector/README.md",
    "aip-connector-core/README.md",
    "aip-connector-macros/README.md",
    "aip-connector-testkit/README.md",
];

#[test]
fn published_readmes_link_only_absolutely() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace");
    let mut relative = Vec::new();
    for readme in PUBLISHED_READMES {
        let markdown = std::fs::read_to_string(root.join(readme)).expect("a readable README");
        for (number, line) in prose_lines(&markdown) {
            for target in link_targets(line) {
                if !(target.starts_with("https://") || target.starts_with('#')) {
                    relative.push(format!("{readme}:{number}: `{target}`"));
                }
            }
        }
    }
    assert!(
        relative.is_empty(),
        "a published README links relatively (crates.io cannot resolve it; link to the \
         repository's https://github.com/aip-connector/aip-connector/blob/main/... instead):\n{}",
        relative.join("\n")
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    let markdown = "# Where to find it\n\
                    ## 7.2 Cancellation & time-outs\n\
                    ```text\n## Not a heading\n```\n\
                    ### `HostLimits` and [serving](serving.md)\n\
                    ## Limits\n## Limits\n";
    let expected: BTreeSet<String> = [
        "where-to-find-it",
        "72-cancellation--time-outs",
        "hostlimits-and-serving",
        "limits",
        "limits-1",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(anchors(markdown), expected);
    assert_eq!(
        link_targets("see [a](x.md#b), `[c](d.md)` and ![e](f.png \"t\")"),
        ["x.md#b", "f.png"]
    );
}
