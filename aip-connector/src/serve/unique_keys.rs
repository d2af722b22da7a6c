//! Refusing JSON bodies whose objects repeat a key.
//!
//! RFC 8259 leaves a repeated member name to the parser, and parsers disagree: serde_json keeps
//! the last, many others the first. A gateway that checks `{"amount_cents": 1,
//! "amount_cents": 999999}` with a first-wins parser approves 1 and this server would run
//! 999999 (found by a hostile review). The envelope's own fields already refuse a repeat (serde's
//! derive), but the action input is a `Value`, which silently keeps the last. So a body is
//! checked once more, object by object, and a repeat anywhere is refused.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::host::Clipped;

/// How much of a repeated key the refusal shows: it is the caller's text.
const SHOWN_KEY_BYTES: usize = 64;

/// `Err` with serde_json's message (a line and a column) when an object of `body` repeats a
/// key: a data error ([`serde_json::Error::is_data`]). A body that is not JSON is a syntax or
/// end-of-input error, which callers leave to their own parser's words.
pub(crate) fn check(body: &[u8]) -> Result<(), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    AnyValue.deserialize(&mut deserializer)?;
    deserializer.end()
}

/// Any JSON value, checked and dropped.
struct AnyValue;

impl<'de> DeserializeSeed<'de> for AnyValue {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnyValue {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(AnyValue)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = members.next_key_seed(Key)? {
            if seen.contains(&key) {
                return Err(de::Error::custom(format_args!(
                    "the object repeats the key `{}`",
                    Clipped::new(&key, SHOWN_KEY_BYTES)
                )));
            }
            members.next_value_seed(AnyValue)?;
            seen.insert(key);
        }
        Ok(())
    }
}

/// A member name, borrowed from the body when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn a_key_repeated_at_any_depth_is_refused() {
        for body in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"input": {"amount_cents": 1, "amount_cents": 999999}}"#,
            r#"[{"x": [{"k": 1, "k": 1}]}]"#,
            // The same name, once escaped: a parser compares the decoded names.
            r#"{"b": 1, "\u0062": 2}"#,
        ] {
            let error = check(body.as_bytes()).expect_err(body);
            assert!(error.is_data(), "{error}");
            assert!(
                error
                    .to_string()
                    .starts_with("the object repeats the key `"),
                "{error}"
            );
        }
    }

    #[test]
    fn distinct_keys_and_the_same_key_in_sibling_objects_pass() {
        for body in [
            r#"{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}"#,
            r#"{}"#,
            r#"[1, "x", null, true, 2.5, -3]"#,
        ] {
            check(body.as_bytes()).unwrap_or_else(|error| panic!("{body}: {error}"));
        }
    }

    #[test]
    fn a_long_repeated_key_is_shown_clipped() {
        let key = "k".repeat(10_000);
        let body = format!(r#"{{"{key}": 1, "{key}": 2}}"#);
        let message = check(body.as_bytes()).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("(10000 bytes)"), "{message}");
    }
}
