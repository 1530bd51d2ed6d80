//! The report as JSON: every field of [`Report`], for machines and for
//! comparing runs. Its shape is versioned by [`SCHEMA`](super::SCHEMA):
//! the integration tests and anyone's scripts read these field names.

use super::Report;

impl Report {
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }
}
