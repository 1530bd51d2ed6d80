//! What a JSON API request body may be: one object, each key once, no
//! key the endpoint does not know ([`Object`]). Every JSON endpoint reads
//! its body through it (`api/`, `door.rs`).

use serde::Deserialize;

/// A request body: always a JSON object, read straight into `T`.
///
/// serde's derived structs also accept an array of the field values
/// (`["ann"]` would be a purchase for "ann"), which no client means: the
/// body is offered to `T` as a map only, so an array is refused. Within the
/// object, the derived code refuses a key given twice (serde_json alone
/// keeps the last of two equal keys, so `{"user_id": "ann", "user_id":
/// "bob"}` would buy for bob while a proxy or a log that reads the first key
/// sees ann), and `deny_unknown_fields` refuses the rest.
///
/// Read straight into `T`, not into a map of values first: a sold-out
/// purchase is answered in a few microseconds, and the map was a share.
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// Fields read in our words: a value of the wrong type is refused with
/// what the field must be (`user_id must be a string of 1 to 64
/// characters`), not with serde's `invalid type: integer, expected a
/// string`. Each is a `#[serde(deserialize_with = "...")]` of a field.
pub(crate) mod field {
    use serde::de::{Deserialize, Deserializer, Error};

    use seckill_core::domain::UserId;

    /// `T`, or the error `expected` when the value is not one.
    fn read<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
        expected: impl std::fmt::Display,
    ) -> Result<T, D::Error> {
        T::deserialize(deserializer).map_err(|_| D::Error::custom(expected))
    }

    pub(crate) fn user_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        read(
            deserializer,
            format_args!(
                "user_id must be a string of 1 to {} characters",
                UserId::MAX_CHARS
            ),
        )
    }

    pub(crate) fn admission<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<String>, D::Error> {
        read(
            deserializer,
            "admission must be the string the waiting room gave, or absent",
        )
    }

    pub(crate) fn name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        read(deserializer, "name must be a string")
    }

    pub(crate) fn stock<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        read(deserializer, "stock must be a whole number of units")
    }

    pub(crate) fn price_cents<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        read(deserializer, "price_cents must be a whole number of cents")
    }

    pub(crate) fn starts_at<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, D::Error> {
        read(
            deserializer,
            "starts_at must be a time such as \"2026-11-27T10:00:00Z\", or absent",
        )
    }

    pub(crate) fn ends_at<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, D::Error> {
        read(
            deserializer,
            "ends_at must be a time such as \"2026-11-27T10:00:00Z\", or absent",
        )
    }
}

/// serde's words for a body, form or query that is not what the handler
/// reads, put in ours: `missing field `user_id`` becomes `user_id is
/// missing`. A message of our own (from [`field`]) is kept as it is.
pub(crate) fn reworded(message: &str) -> String {
    let quoted = |rest: &str| rest.split('`').nth(1).unwrap_or(rest).to_owned();
    if let Some(rest) = message.strip_prefix("missing field ") {
        format!("{} is missing", quoted(rest))
    } else if let Some(rest) = message.strip_prefix("duplicate field ") {
        format!("{} is given twice", quoted(rest))
    } else if let Some(rest) = message.strip_prefix("unknown field ") {
        format!("{} is not a field this request takes", quoted(rest))
    } else if let Some(rest) = message.strip_prefix("invalid type: ") {
        // `invalid type: sequence, expected a JSON object`, for a body
        // that is not an object.
        let (found, expected) = rest
            .split_once(", expected ")
            .unwrap_or((rest, "something else"));
        let found = match found.split(' ').next().unwrap_or(found) {
            "sequence" => "an array",
            "map" => "an object",
            "string" => "a string",
            "integer" | "floating" => "a number",
            "boolean" => "true or false",
            "null" => "null",
            other => other,
        };
        format!("the body must be {expected}, not {found}")
    } else {
        message.to_owned()
    }
}

/// A JSON body's parse failure in our words, without serde's position
/// (" at line 1 column 20") where the words say it all.
pub(crate) fn json_error(error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match error.classify() {
        Category::Eof if error.line() == 1 && error.column() == 0 => {
            "the body is empty: it must be a JSON object".to_owned()
        }
        Category::Syntax | Category::Eof => format!(
            "the body is not valid JSON (line {}, column {}): it must be a JSON object",
            error.line(),
            error.column()
        ),
        Category::Data | Category::Io => {
            let text = error.to_string();
            let position = format!(" at line {} column {}", error.line(), error.column());
            reworded(text.strip_suffix(&position).unwrap_or(&text))
        }
    }
}
