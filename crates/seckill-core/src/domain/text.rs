//! What a name a person typed may contain.
//!
//! Control characters (a newline, a NUL) break logs and pages. Unicode
//! "format" characters (general category Cf) are invisible and change how
//! the text around them is shown: a right-to-left override (U+202E) makes
//! `user-evil` print as something else in the admin's table, a zero-width
//! space makes two ids that look the same differ. Neither belongs in a
//! buyer id or a sale's name.

/// The general category Cf (format) of Unicode 15, as ranges. A fixed list:
/// new format characters are rare, and one missing here is only allowed,
/// never dangerous to the data.
const FORMAT: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

/// Whether `c` is a control or an invisible format character.
pub(crate) fn is_hidden(c: char) -> bool {
    c.is_control() || FORMAT.iter().any(|&(low, high)| (low..=high).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_overrides_and_zero_width_characters_are_hidden() {
        for c in [
            '\n',
            '\0',
            '\u{7F}',
            '\u{202E}',
            '\u{200B}',
            '\u{200D}',
            '\u{2066}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{E0041}',
        ] {
            assert!(is_hidden(c), "{c:?} passed");
        }
        for c in ['a', ' ', 'é', '秒', '🙂', '-', '\u{05D0}'] {
            assert!(!is_hidden(c), "{c:?} refused");
        }
    }
}
