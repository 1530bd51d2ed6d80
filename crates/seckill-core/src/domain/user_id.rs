use std::fmt;

/// Why a buyer id was refused; the message is what the client reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUserId {
    #[error("user_id must not be empty")]
    Empty,
    #[error("user_id must be at most {max} characters, got {got}", max = UserId::MAX_CHARS)]
    TooLong { got: usize },
    #[error("user_id must not contain control or invisible formatting characters")]
    ControlCharacter,
}

/// A buyer's id: what the client sent without the spaces around it, 1 to
/// 64 characters, no control or invisible formatting characters (see
/// `text.rs`). One buyer may hold one unit per sale, so `" ann"` and
/// `"ann"` are one buyer, whether they come through the form or the API:
/// both parse here.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct UserId(String);

impl UserId {
    pub const MAX_CHARS: usize = 64;

    pub fn parse(raw: &str) -> Result<Self, InvalidUserId> {
        let raw = raw.trim();
        let chars = raw.chars().count();
        if chars == 0 {
            return Err(InvalidUserId::Empty);
        }
        if chars > Self::MAX_CHARS {
            return Err(InvalidUserId::TooLong { got: chars });
        }
        if raw.chars().any(super::text::is_hidden) {
            return Err(InvalidUserId::ControlCharacter);
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids_up_to_64_characters() {
        assert!(UserId::parse("alice").is_ok());
        assert_eq!(UserId::parse("  alice\t"), UserId::parse("alice"));
        assert_eq!(
            UserId::parse(&format!(" {} ", "x".repeat(64))).map(|id| id.as_str().len()),
            Ok(64),
            "the spaces around an id do not count against its length"
        );
        assert!(UserId::parse(&"x".repeat(64)).is_ok());
        // Characters, not bytes: 64 three-byte characters are fine.
        assert!(UserId::parse(&"秒".repeat(64)).is_ok());
    }

    #[test]
    fn rejects_empty_blank_oversized_and_control_characters() {
        for bad in [
            "",
            "   ",
            "a\nb",
            "tab\there",
            "nul\0",
            "user-\u{202E}live",
            "zero\u{200B}width",
        ] {
            assert!(UserId::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(UserId::parse(&"x".repeat(65)).is_err());
    }
}
