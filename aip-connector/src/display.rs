//! Text from callers or handlers shown on one line of someone's terminal or log: which
//! characters change how that line reads.

/// Whether `character` breaks the line or reorders what follows it: a control character (line
/// breaks, escape sequences), a line or paragraph separator (U+2028, U+2029), or a
/// bidirectional formatting character (a right-to-left override makes `txt.exe` read `exe.txt`).
/// Each place that shows untrusted text adds what it also needs replaced.
pub(crate) fn changes_line_layout(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{2028}'
                | '\u{2029}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}
