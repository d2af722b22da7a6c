//! Canonical JSON and SHA-256 fingerprints.
//!
//! Hashes that must survive a restart or a different host (idempotency fingerprints, approval
//! policy hashes) are taken over a canonical text, so they never depend on the key order a
//! caller happened to send or on the `preserve_order` feature of `serde_json`.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// One piece of pending output of the canonical writer.
enum Step<'a> {
    /// A value still to be written.
    Value(&'a Value),
    /// An object key, written with its `:`.
    Key(&'a str),
    /// Fixed punctuation (`,`, `]`, `}`).
    Punctuation(char),
}

/// Compact JSON with every object's keys sorted (byte order of their UTF-8 text), recursively;
/// array order is kept. Numbers and string escapes are written exactly as `serde_json` writes
/// them, so the text of a value whose objects are already sorted equals `serde_json::to_string`.
/// Iterative, so a deeply nested value cannot exhaust the stack.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    let mut pending = vec![Step::Value(value)];
    while let Some(step) = pending.pop() {
        match step {
            Step::Punctuation(mark) => out.push(mark),
            Step::Key(key) => {
                write_string(&mut out, key);
                out.push(':');
            }
            Step::Value(Value::Null) => out.push_str("null"),
            Step::Value(Value::Bool(flag)) => out.push_str(if *flag { "true" } else { "false" }),
            Step::Value(Value::Number(number)) => out.push_str(&number.to_string()),
            Step::Value(Value::String(text)) => write_string(&mut out, text),
            Step::Value(Value::Array(items)) => {
                out.push('[');
                pending.push(Step::Punctuation(']'));
                // Pushed last-first so they pop in order.
                for (index, item) in items.iter().enumerate().rev() {
                    pending.push(Step::Value(item));
                    if index > 0 {
                        pending.push(Step::Punctuation(','));
                    }
                }
            }
            Step::Value(Value::Object(map)) => {
                out.push('{');
                pending.push(Step::Punctuation('}'));
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|left, right| left.0.cmp(right.0));
                for (index, (key, item)) in entries.into_iter().enumerate().rev() {
                    pending.push(Step::Value(item));
                    pending.push(Step::Key(key));
                    if index > 0 {
                        pending.push(Step::Punctuation(','));
                    }
                }
            }
        }
    }
    out
}

/// Writes `text` as a JSON string literal with `serde_json`'s escapes (short forms for `\b`,
/// `\t`, `\n`, `\f`, `\r`; other control characters as `\u` plus four lowercase hex digits).
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0C}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            control if u32::from(control) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", u32::from(control)));
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn object_keys_are_sorted_at_every_depth_and_arrays_keep_their_order() {
        let value = json!({ "b": { "z": 1, "a": [3, { "y": null, "x": true }] }, "a": "s" });
        assert_eq!(
            canonical_json(&value),
            r#"{"a":"s","b":{"a":[3,{"x":true,"y":null}],"z":1}}"#
        );
    }

    #[test]
    fn key_order_of_the_input_does_not_change_the_text() {
        let forward = json!({ "alpha": 1, "beta": { "one": 1, "two": 2 } });
        let backward = json!({ "beta": { "two": 2, "one": 1 }, "alpha": 1 });
        assert_eq!(canonical_json(&forward), canonical_json(&backward));
    }

    #[test]
    fn keys_sort_by_bytes_not_by_insertion() {
        let value = json!({ "é": 1, "Z": 2, "a": 3, "": 4 });
        assert_eq!(canonical_json(&value), r#"{"":4,"Z":2,"a":3,"é":1}"#);
    }

    #[test]
    fn scalars_and_escapes_match_serde_json() {
        let samples = [
            json!(null),
            json!(false),
            json!(-0.5),
            json!(1e300),
            json!(u64::MAX),
            json!(i64::MIN),
            json!("quote \" backslash \\ slash /"),
            json!("\u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f}\u{7f} é 🦀"),
            json!([]),
            json!({}),
        ];
        for sample in samples {
            let expected = serde_json::to_string(&sample).expect("a value always serializes");
            assert_eq!(canonical_json(&sample), expected, "sample {sample:?}");
        }
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        const DEPTH: usize = 100_000;
        let mut deep = json!(0);
        for _ in 0..DEPTH {
            deep = Value::Array(vec![deep]);
        }
        let text = canonical_json(&deep);
        // Dropping a nested Value recurses inside serde_json: take it apart level by level
        // before asserting, so a failure unwinds without it.
        let mut level = deep;
        while let Value::Array(mut items) = level {
            level = items.pop().unwrap_or(Value::Null);
        }
        assert_eq!(text, format!("{}0{}", "[".repeat(DEPTH), "]".repeat(DEPTH)));
    }

    #[test]
    fn sha256_matches_the_published_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
