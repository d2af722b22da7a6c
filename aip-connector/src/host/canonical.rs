//! Canonical JSON and SHA-256 fingerprints.
//!
//! Hashes that must survive a restart or a different host (idempotency fingerprints, approval
//! policy hashes) are taken over a canonical text, so they never depend on the key order a
//! caller happened to send or on the `preserve_order` feature of `serde_json`.

use std::io;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// One piece of pending output of the canonical writer.
enum Step<'a> {
    /// A value still to be written.
    Value(&'a Value),
    /// An array item; `first` items have no `,` before them.
    Item { value: &'a Value, first: bool },
    /// An object member; `first` members have no `,` before them.
    Member {
        key: &'a str,
        value: &'a Value,
        first: bool,
    },
    /// Closing punctuation (`]` or `}`).
    Close(&'static [u8]),
}

/// Where canonical text goes: a buffer that becomes a string, or a hash. Writing cannot fail.
trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);

    /// Appends `text` between double quotes (the caller checked it needs no escapes).
    fn put_quoted(&mut self, text: &[u8]) {
        self.put(b"\"");
        self.put(text);
        self.put(b"\"");
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Lets `serde_json` write into a [`Sink`] (for numbers and strings that need escapes).
struct SinkWriter<'a, S>(&'a mut S);

impl<S: Sink> io::Write for SinkWriter<'_, S> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.put(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the canonical text of `value` to `out`: compact JSON with every object's keys sorted
/// (byte order of their UTF-8 text), recursively; array order is kept. Strings and numbers are
/// written as `serde_json` writes them, so the text of a value whose objects are already sorted
/// equals `serde_json::to_string`. Iterative, so a deeply nested value cannot exhaust the stack,
/// and the only allocation is the stack of pending steps.
fn write_canonical<S: Sink>(out: &mut S, value: &Value) {
    // Sized for an object of a few fields, so the common input never regrows the stack.
    let mut pending = Vec::with_capacity(16);
    pending.push(Step::Value(value));
    while let Some(step) = pending.pop() {
        let value = match step {
            Step::Close(mark) => {
                out.put(mark);
                continue;
            }
            Step::Value(value) => value,
            Step::Item { value, first } => {
                if !first {
                    out.put(b",");
                }
                value
            }
            Step::Member { key, value, first } => {
                if !first {
                    out.put(b",");
                }
                write_string(out, key);
                out.put(b":");
                value
            }
        };
        match value {
            Value::Array(items) => {
                out.put(b"[");
                pending.push(Step::Close(b"]"));
                // Pushed last-first so they pop in order.
                pending.extend(
                    items
                        .iter()
                        .enumerate()
                        .rev()
                        .map(|(index, value)| Step::Item {
                            value,
                            first: index == 0,
                        }),
                );
            }
            Value::Object(map) => {
                out.put(b"{");
                pending.push(Step::Close(b"}"));
                // The members are sorted where they lie on the stack, greatest key first, so
                // they pop in ascending order and no per-object buffer is needed.
                let start = pending.len();
                pending.extend(map.iter().map(|(key, value)| Step::Member {
                    key,
                    value,
                    first: false,
                }));
                let members = &mut pending[start..];
                members.sort_unstable_by(|left, right| member_key(right).cmp(member_key(left)));
                if let Some(Step::Member { first, .. }) = members.last_mut() {
                    *first = true;
                }
            }
            Value::String(text) => write_string(out, text),
            Value::Null => out.put(b"null"),
            Value::Bool(true) => out.put(b"true"),
            Value::Bool(false) => out.put(b"false"),
            // Exactly `serde_json`'s text of the number.
            Value::Number(number) => serde_json::to_writer(SinkWriter(out), number)
                .expect("a number serializes into a sink"),
        }
    }
}

/// Writes `text` as a JSON string literal, escaped exactly as `serde_json` escapes it. Text with
/// nothing to escape (no `"`, `\` or control character) is copied as it is, without running
/// the serializer; anything else goes through `serde_json`.
fn write_string<S: Sink>(out: &mut S, text: &str) {
    if !needs_escape(text.as_bytes()) {
        out.put_quoted(text.as_bytes());
    } else {
        serde_json::to_writer(SinkWriter(out), text).expect("a string serializes into a sink");
    }
}

/// Whether `bytes` hold a byte that a JSON string literal escapes ([`NEEDS_ESCAPE`]), checked
/// eight bytes at a time: a fingerprint writes every key and string of the input, and a byte at
/// a time this check was most of the cost of writing them.
fn needs_escape(bytes: &[u8]) -> bool {
    /// `0x01` in every byte of a word.
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    /// The high bit of every byte of a word.
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    /// Non-zero if and only if a byte of `word` is below `limit` (at most 0x80): subtracting
    /// `limit` borrows into the high bit of exactly the bytes below it, unless the byte had its
    /// high bit set already (`!word` masks those out). A borrow only starts at a byte below
    /// `limit`, so a word without such a byte never reports one (a byte next to a real hit may
    /// be flagged too, which an "any" check does not mind).
    const fn has_byte_below(word: u64, limit: u8) -> u64 {
        word.wrapping_sub(ONES * limit as u64) & !word & HIGHS
    }
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("chunks of eight bytes"));
        let control = has_byte_below(word, 0x20);
        // A byte equal to `"` or `\` is a zero byte of the word XORed with it.
        let quote = has_byte_below(word ^ (ONES * u64::from(b'"')), 1);
        let backslash = has_byte_below(word ^ (ONES * u64::from(b'\\')), 1);
        if control | quote | backslash != 0 {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&byte| NEEDS_ESCAPE[usize::from(byte)])
}

/// The bytes a JSON string literal escapes: `"`, `\` and the control characters below 0x20.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The key of a [`Step::Member`] (the empty string for other steps, which are never sorted).
fn member_key<'a>(step: &Step<'a>) -> &'a str {
    match step {
        Step::Member { key, .. } => key,
        _ => "",
    }
}

/// Compact JSON with every object's keys sorted (byte order of their UTF-8 text), recursively;
/// array order is kept. Numbers and string escapes are written exactly as `serde_json` writes
/// them, so the text of a value whose objects are already sorted equals `serde_json::to_string`.
/// Iterative, so a deeply nested value cannot exhaust the stack.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(&mut out, value);
    String::from_utf8(out).expect("serde_json and ASCII punctuation write UTF-8")
}

/// SHA-256 over text fed piece by piece, so canonical JSON is hashed without being built as a
/// string first. [`CanonicalHash::finish`] gives the same digest as [`sha256_hex`] of the
/// concatenated text.
pub(crate) struct CanonicalHash {
    hasher: Sha256,
    /// Text not yet handed to the hasher: canonical JSON arrives in many small pieces, and the
    /// hasher's bookkeeping per call would cost more than the copy into this buffer.
    buffer: [u8; HASH_BUFFER],
    /// How much of `buffer` is filled.
    filled: usize,
}

/// Bytes [`CanonicalHash`] buffers (a typical fingerprint's whole text).
const HASH_BUFFER: usize = 256;

impl Sink for CanonicalHash {
    #[inline]
    fn put_quoted(&mut self, text: &[u8]) {
        let end = self.filled + text.len() + 2;
        if end > HASH_BUFFER {
            self.put(b"\"");
            self.put(text);
            self.put(b"\"");
            return;
        }
        self.buffer[self.filled] = b'"';
        self.buffer[self.filled + 1..end - 1].copy_from_slice(text);
        self.buffer[end - 1] = b'"';
        self.filled = end;
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if bytes.len() > HASH_BUFFER - self.filled {
            self.hasher.update(&self.buffer[..self.filled]);
            self.filled = 0;
            if bytes.len() > HASH_BUFFER {
                self.hasher.update(bytes);
                return;
            }
        }
        self.buffer[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
    }
}

impl CanonicalHash {
    /// An empty hash.
    pub(crate) fn new() -> Self {
        Self {
            hasher: Sha256::new(),
            buffer: [0; HASH_BUFFER],
            filled: 0,
        }
    }

    /// Appends `text` as it is (framing the caller writes itself: keys, punctuation).
    pub(crate) fn raw(&mut self, text: &str) {
        self.put(text.as_bytes());
    }

    /// Appends `text` as a JSON string literal, escaped as `serde_json` escapes it.
    pub(crate) fn string(&mut self, text: &str) {
        write_string(self, text);
    }

    /// Appends the canonical text of `value` (see [`canonical_json`]).
    pub(crate) fn value(&mut self, value: &Value) {
        write_canonical(self, value);
    }

    /// Lowercase hex of the digest.
    pub(crate) fn finish(mut self) -> String {
        self.hasher.update(&self.buffer[..self.filled]);
        hex(&self.hasher.finalize())
    }
}

/// Lowercase hex SHA-256 of the canonical text of `value`, hashed as it is written.
pub(crate) fn canonical_sha256(value: &Value) -> String {
    let mut hash = CanonicalHash::new();
    hash.value(value);
    hash.finish()
}

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex digits, by value.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of `bytes`, two digits per byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Appends the lowercase hex of `bytes` to `out`, from a lookup table (no formatting machinery).
/// The digits of up to 32 bytes are written into a stack buffer and appended at once: pushing
/// them one `char` at a time checked the capacity and encoded UTF-8 for every digit.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    const CHUNK: usize = 32;
    let mut digits = [0u8; 2 * CHUNK];
    for chunk in bytes.chunks(CHUNK) {
        let written = &mut digits[..2 * chunk.len()];
        for (pair, byte) in written.chunks_exact_mut(2).zip(chunk) {
            pair[0] = HEX_DIGITS[usize::from(byte >> 4)];
            pair[1] = HEX_DIGITS[usize::from(byte & 0x0f)];
        }
        out.push_str(std::str::from_utf8(written).expect("hex digits are ASCII"));
    }
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
    fn hashing_as_written_equals_hashing_the_text() {
        let samples = [
            json!({ "b": [1, 2.5, { "y": "\u{1}", "x": null }], "a": { "é": true, "Z": "q\"" } }),
            json!("plain"),
            json!([]),
            json!({}),
        ];
        for sample in samples {
            assert_eq!(
                canonical_sha256(&sample),
                sha256_hex(canonical_json(&sample).as_bytes()),
                "sample {sample:?}"
            );
        }
        let long = Value::String("x".repeat(3 * HASH_BUFFER));
        let nested = json!({ "a": [long.clone(), "short", long.clone()], "b": long });
        assert_eq!(
            canonical_sha256(&nested),
            sha256_hex(canonical_json(&nested).as_bytes())
        );
        let mut framed = CanonicalHash::new();
        framed.raw("{\"k\":");
        framed.string("a\"b");
        framed.raw("}");
        assert_eq!(framed.finish(), sha256_hex(br#"{"k":"a\"b"}"#));
    }

    /// The word-at-a-time check agrees with the byte table for every byte value at every
    /// position of a word and of the remainder, next to both plain and high-bit neighbours.
    #[test]
    fn escape_check_agrees_with_the_table_for_every_byte_and_position() {
        for filler in [b'a', 0x7f, 0x80, 0xff, 0x21, 0x5d] {
            for len in 1..=19 {
                for position in 0..len {
                    for byte in 0..=255u8 {
                        let mut bytes = vec![filler; len];
                        bytes[position] = byte;
                        let expected = bytes.iter().any(|&b| NEEDS_ESCAPE[usize::from(b)]);
                        assert_eq!(
                            needs_escape(&bytes),
                            expected,
                            "byte {byte:#04x} at {position} of {len}, filler {filler:#04x}"
                        );
                    }
                }
            }
        }
        assert!(!needs_escape(b""));
        assert!(!needs_escape("cus_0123456789abcdef ü €".as_bytes()));
    }

    #[test]
    fn hex_uses_two_lowercase_digits_per_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
        // Longer than one stack chunk: every byte, in order, across the chunk boundary.
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(hex(&bytes), expected);
        let mut appended = String::from("prefix-");
        push_hex(&mut appended, &bytes[..33]);
        assert_eq!(appended, format!("prefix-{}", &expected[..66]));
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
