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
