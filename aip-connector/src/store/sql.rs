//! What the SQL stores (SQLite and PostgreSQL) share in how they write rows: record bodies as
//! JSON text, times and counters as 64-bit signed integers. One copy, so the two backends word
//! a corrupt or overflowing row alike.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Millis, StoreError};

/// A row body that is not the expected JSON; says where, never what (serde quotes values).
fn corrupt_json(what: &str, error: &serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!(
        "{what}: {:?} error at line {} column {}",
        error.classify(),
        error.line(),
        error.column()
    ))
}

/// Encodes a record as its JSON body.
pub(super) fn encode<T: Serialize>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| {
        StoreError::Unavailable(format!(
            "could not encode {what}: {:?} error",
            error.classify()
        ))
    })
}

/// Decodes a JSON body.
pub(super) fn decode<T: DeserializeOwned>(what: &str, body: &str) -> Result<T, StoreError> {
    serde_json::from_str(body).map_err(|error| corrupt_json(what, &error))
}

/// Milliseconds as a 64-bit SQL integer; beyond `i64::MAX` (year 292,000,000) saturates.
pub(super) fn millis_to_sql(millis: Millis) -> i64 {
    i64::try_from(millis).unwrap_or(i64::MAX)
}

/// A stored integer that must not be negative (an expiry, a version, a revision).
pub(super) fn unsigned_from_sql(what: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} is negative")))
}

/// A version or revision as a 64-bit SQL integer; one past `i64::MAX` cannot be stored.
pub(super) fn counter_to_sql(what: &str, counter: u64) -> Result<i64, StoreError> {
    i64::try_from(counter).map_err(|_| StoreError::Unavailable(format!("{what} overflow")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_saturate_or_refuse_at_the_sql_range() {
        assert_eq!(millis_to_sql(Millis::MAX), i64::MAX);
        assert_eq!(millis_to_sql(42), 42);
        assert!(matches!(
            unsigned_from_sql("expiry", -1),
            Err(StoreError::Corrupt(m)) if m == "expiry is negative"
        ));
        assert_eq!(unsigned_from_sql("expiry", 7).ok(), Some(7));
        assert!(matches!(
            counter_to_sql("transaction revision", u64::MAX),
            Err(StoreError::Unavailable(m)) if m == "transaction revision overflow"
        ));
    }

    #[test]
    fn a_corrupt_body_is_located_not_quoted() {
        let error = decode::<Vec<u8>>("approval row", "\"secret-ish\"").unwrap_err();
        let StoreError::Corrupt(message) = error else {
            panic!("expected Corrupt, got {error:?}");
        };
        assert!(
            message.starts_with("approval row: Data error at line 1"),
            "{message}"
        );
        assert!(!message.contains("secret-ish"), "{message}");
    }
}
