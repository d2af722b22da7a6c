//! Projected operation names (admission Phase E).
//!
//! Each binding profile exposes a capability under a name derived from its binding metadata or
//! its id. [`stable_profile_name`] normalises that raw name the way upstream does, so two raw
//! names that normalise alike (for example `"same name"` and `"same_name"`) are detected as a
//! `manifest.profile_name.collision`.
//!
//! The function is idempotent: its output only holds lowercase ASCII letters, digits, `.`, `-`
//! and single inner `_`, starts with a letter and is at most 128 bytes long, so normalising it
//! again changes nothing.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Longest projected name kept as is, in bytes.
pub const MAX_PROFILE_NAME_LEN: usize = 128;
/// Bytes of the normalised name kept before the hash suffix when a name is too long.
pub const TRUNCATED_PROFILE_NAME_LEN: usize = 115;
/// Bytes of the raw name's SHA-256 appended (as lowercase hex) to a truncated name.
pub const PROFILE_NAME_HASH_BYTES: usize = 6;

/// The name used when nothing usable is left after normalising.
const FALLBACK_NAME: &str = "operation";

/// Normalises a raw operation name into the identifier a binding profile projects (upstream
/// `stable_profile_name`).
///
/// 1. ASCII letters and digits, `.` and `-` are kept, lowercased; every other character (`_`
///    and all non-ASCII included) becomes one `_` separator, never leading, runs collapsed.
/// 2. `_` is trimmed from both ends.
/// 3. An empty result becomes `operation`.
/// 4. A result not starting with an ASCII letter gets the prefix `operation_`.
/// 5. A result of at most 128 bytes is done.
/// 6. A longer one is cut to 115 bytes, stripped of trailing `_`, `.` and `-`, and given the
///    suffix `_` + the lowercase hex of the first 6 bytes of SHA-256 over the **raw** input.
pub fn stable_profile_name(raw: &str) -> String {
    let separated = separate_words(raw);
    let trimmed = separated.trim_matches('_');
    let named = starting_with_letter(trimmed);
    if named.len() <= MAX_PROFILE_NAME_LEN {
        return named;
    }
    shorten_with_hash(&named, raw)
}

/// Step 1: keeps name characters (lowercased) and turns every other run into one `_`.
fn separate_words(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for character in raw.chars() {
        if character.is_ascii_alphanumeric() || character == '.' || character == '-' {
            out.push(character.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    out
}

/// Steps 3 and 4: a projected name is never empty and always starts with a letter.
fn starting_with_letter(trimmed: &str) -> String {
    match trimmed.chars().next() {
        None => FALLBACK_NAME.to_owned(),
        Some(first) if first.is_ascii_alphabetic() => trimmed.to_owned(),
        Some(_) => format!("{FALLBACK_NAME}_{trimmed}"),
    }
}

/// Step 6: keeps over-long names unique by replacing their tail with a hash of the raw input.
fn shorten_with_hash(named: &str, raw: &str) -> String {
    // `named` is ASCII only, so any byte index is a character boundary.
    let kept = named[..TRUNCATED_PROFILE_NAME_LEN].trim_end_matches(['_', '.', '-']);
    let digest = Sha256::digest(raw.as_bytes());
    let mut out = String::with_capacity(kept.len() + 1 + 2 * PROFILE_NAME_HASH_BYTES);
    out.push_str(kept);
    out.push('_');
    for byte in &digest[..PROFILE_NAME_HASH_BYTES] {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn spaces_and_underscores_collide() {
        assert_eq!(stable_profile_name("same name"), "same_name");
        assert_eq!(stable_profile_name("same_name"), "same_name");
        assert_eq!(stable_profile_name("same  __ name"), "same_name");
    }

    #[test]
    fn capability_ids_become_snake_names() {
        assert_eq!(
            stable_profile_name("cap:calendar:booking:create"),
            "cap_calendar_booking_create"
        );
        assert_eq!(
            stable_profile_name("Calendar.Book-Slot"),
            "calendar.book-slot"
        );
    }

    #[test]
    fn names_start_with_a_letter() {
        assert_eq!(stable_profile_name("9lives"), "operation_9lives");
        assert_eq!(stable_profile_name("_9lives"), "operation_9lives");
        assert_eq!(stable_profile_name("-x"), "operation_-x");
        assert_eq!(stable_profile_name(".x"), "operation_.x");
    }

    #[test]
    fn empty_names_fall_back_to_operation() {
        assert_eq!(stable_profile_name(""), "operation");
        assert_eq!(stable_profile_name("___"), "operation");
        assert_eq!(stable_profile_name("  !! "), "operation");
    }

    #[test]
    fn non_ascii_characters_are_separators() {
        assert_eq!(stable_profile_name("Größe ändern"), "gr_e_ndern");
        assert_eq!(stable_profile_name("日本語"), "operation");
        assert_eq!(stable_profile_name("créer_événement"), "cr_er_v_nement");
    }

    #[test]
    fn trailing_separators_are_trimmed() {
        assert_eq!(stable_profile_name("tool name!!"), "tool_name");
        assert_eq!(stable_profile_name("  tool"), "tool");
    }

    #[test]
    fn names_up_to_128_bytes_are_kept() {
        let exact = "a".repeat(128);
        assert_eq!(stable_profile_name(&exact), exact);
    }

    #[test]
    fn long_names_are_truncated_with_a_hash_of_the_raw_input() {
        let raw = format!("Tool {}", "x".repeat(295));
        assert_eq!(raw.len(), 300);
        let digest = Sha256::digest(raw.as_bytes());
        let suffix: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        let expected = format!("tool_{}_{suffix}", "x".repeat(110));
        let name = stable_profile_name(&raw);
        assert_eq!(name, expected);
        assert_eq!(name.len(), 115 + 1 + 12);
    }

    #[test]
    fn truncation_strips_trailing_punctuation_before_the_hash() {
        // Bytes 113 to 115 of the normalised name are ".-_": the cut ends right after them and
        // they are stripped.
        let raw = format!("{}.-_{}", "a".repeat(112), "b".repeat(100));
        let name = stable_profile_name(&raw);
        let digest = Sha256::digest(raw.as_bytes());
        let suffix: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(name, format!("{}_{suffix}", "a".repeat(112)));
    }

    #[test]
    fn one_byte_over_the_limit_is_hashed() {
        let raw = "a".repeat(129);
        let name = stable_profile_name(&raw);
        assert_eq!(name.len(), 128);
        assert!(name.starts_with(&"a".repeat(115)));
        assert_ne!(name, "a".repeat(128));
    }

    proptest! {
        #[test]
        fn output_is_a_normalised_identifier(raw in "\\PC{0,300}") {
            let name = stable_profile_name(&raw);
            prop_assert!(name.len() <= MAX_PROFILE_NAME_LEN);
            prop_assert!(name.starts_with(|c: char| c.is_ascii_lowercase()));
            prop_assert!(!name.ends_with('_'));
            prop_assert!(!name.contains("__"));
            prop_assert!(name.chars().all(|c| c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, '.' | '-' | '_')));
            prop_assert_eq!(stable_profile_name(&name), name);
        }
    }
}
