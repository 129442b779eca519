//! Triton's messages for an infer request body that is valid JSON of the wrong structure.
//!
//! The door parses bodies with typed serde structs, which stop at the first structural problem
//! in the order the JSON is written and describe it in serde's words. Triton parses a tree and
//! walks it field by field (`id`, `parameters`, then each input: the one-data-field check,
//! `name`, `datatype`, `shape`; then `outputs`), with TritonJson's messages. When the typed
//! parse fails on the body's structure, this second pass finds the error Triton would report.
//! It streams over the body like the first pass, keeping a few flags per input and nothing of
//! the values, so a hostile body costs no more here than there.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Triton's message for an input with none, or more than one, of its data fields.
pub(super) const ONE_OF_DATA: &str = "Input must set only one of the following fields: 'data', 'binary_data_size' in \
    'parameters', 'shared_memory_region' in 'parameters'";

/// A member's JSON type as TritonJson's accessors see it.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Member {
    #[default]
    Missing,
    String,
    Array,
    Other,
}

/// What Triton's checks need to know about one input.
#[derive(Default)]
struct InputFacts {
    is_object: bool,
    has_data: bool,
    has_binary_size: bool,
    has_region: bool,
    name: Member,
    datatype: Member,
    shape: Member,
}

impl InputFacts {
    /// Whether Triton would refuse the input.
    fn refused(&self) -> bool {
        let data_fields = [self.has_data, self.has_binary_size, self.has_region].iter().filter(|&&b| b).count();
        !self.is_object
            || data_fields != 1
            || self.name != Member::String
            || self.datatype != Member::String
            || self.shape != Member::Array
    }
}

/// The facts of a whole request, in the order Triton checks them.
#[derive(Default)]
struct RequestFacts {
    is_object: bool,
    id: Member,
    inputs: Member,
    outputs: Member,
    /// The first input Triton would refuse (inputs after it are not looked at).
    bad_input: Option<InputFacts>,
    /// The first output that is not an object or lacks a string `name`.
    bad_output: Option<InputFacts>,
}

/// TritonJson's texts.
fn not_a(field: &str, kind: &str) -> String {
    format!("Unable to parse '{field}': attempt to access JSON non-{kind} as {kind}")
}

fn missing(field: &str) -> String {
    format!("Unable to parse '{field}': attempt to access non-existing object member '{field}'")
}

/// Triton's message for a body whose structure is wrong, with whether it is a 400 (else 500), or
/// `None` when Triton would find nothing wrong with the structure (the caller keeps its error).
pub fn triton_structure_error(json: &[u8]) -> Option<(bool, String)> {
    let mut facts = RequestFacts::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    de.deserialize_any(RootVisitor(&mut facts)).ok()?;
    if !facts.is_object || facts.inputs == Member::Missing {
        return Some((false, missing("inputs")));
    }
    match facts.id {
        Member::Missing | Member::String => {}
        _ => return Some((false, not_a("id", "string"))),
    }
    if facts.inputs != Member::Array {
        return Some((false, not_a("inputs", "array")));
    }
    if let Some(input) = facts.bad_input {
        let set: Vec<&str> = [
            ("'data'", input.has_data),
            ("'binary_data_size'", input.has_binary_size),
            ("'shared_memory_region'", input.has_region),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if !input.is_object || set.is_empty() {
            return Some((true, format!("{}. But no field is set", ONE_OF_DATA)));
        }
        if set.len() > 1 {
            return Some((true, format!("{}. But set {}", ONE_OF_DATA, set.join(" "))));
        }
        for (field, member) in [("name", input.name), ("datatype", input.datatype)] {
            match member {
                Member::String => {}
                Member::Missing => return Some((false, missing(field))),
                _ => return Some((false, not_a(field, "string"))),
            }
        }
        match input.shape {
            Member::Array => {}
            Member::Missing => return Some((false, missing("shape"))),
            _ => return Some((false, not_a("shape", "array"))),
        }
    }
    match facts.outputs {
        Member::Missing | Member::Array => {}
        _ => return Some((false, not_a("outputs", "array"))),
    }
    match facts.bad_output.map(|output| output.name) {
        None => None,
        Some(Member::Missing) => Some((false, missing("name"))),
        Some(_) => Some((false, not_a("name", "string"))),
    }
}

/// The visitor methods for booleans, numbers and null, each answering `$value`: a structure
/// check learns from them only that the member is not a string, an array or an object.
macro_rules! other_scalars {
    ($ty:ty = $value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$ty, E> {
            Ok($value)
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$ty, E> {
            Ok($value)
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$ty, E> {
            Ok($value)
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$ty, E> {
            Ok($value)
        }

        fn visit_unit<E: de::Error>(self) -> Result<$ty, E> {
            Ok($value)
        }
    };
}

/// Reads any JSON value with the visitor: the seed every member here is read with.
#[derive(Clone, Copy)]
struct Any<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Any<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        deserializer.deserialize_any(self.0)
    }
}

/// Reads a member's JSON type and skips its value.
struct TypeOf;

impl<'de> Visitor<'de> for TypeOf {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Member, E> {
        Ok(Member::String)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Member, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Member::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Member, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Member::Other)
    }

    other_scalars!(Member = Member::Other);
}

struct RootVisitor<'a>(&'a mut RequestFacts);

impl<'de> Visitor<'de> for RootVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.is_object = true;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "id" => self.0.id = map.next_value_seed(Any(TypeOf))?,
                "inputs" => {
                    self.0.inputs =
                        map.next_value_seed(Any(FirstRefused(OneInput, &mut self.0.bad_input, InputFacts::refused)))?
                }
                "outputs" => {
                    // An output is read as an input is; only its `name` is checked.
                    let refused = |output: &InputFacts| output.name != Member::String;
                    self.0.outputs =
                        map.next_value_seed(Any(FirstRefused(OneInput, &mut self.0.bad_output, refused)))?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    other_scalars!(() = ());
}

/// An array member (`inputs`, `outputs`): its type, with the first element, read with the visitor,
/// that the function refuses (the elements after it are not looked at).
struct FirstRefused<'a, S, V>(S, &'a mut Option<V>, fn(&V) -> bool);

impl<'de, V, S: Visitor<'de, Value = V> + Copy> Visitor<'de> for FirstRefused<'_, S, V> {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Member, A::Error> {
        while let Some(element) = seq.next_element_seed(Any(self.0))? {
            if self.1.is_none() && (self.2)(&element) {
                *self.1 = Some(element);
            }
        }
        Ok(Member::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Member, A::Error> {
        TypeOf.visit_map(map)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Member, E> {
        Ok(Member::Other)
    }

    other_scalars!(Member = Member::Other);
}

/// One element of `inputs` (or of `outputs`, whose checks look at its `name` alone).
#[derive(Clone, Copy)]
struct OneInput;

impl<'de> Visitor<'de> for OneInput {
    type Value = InputFacts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputFacts, A::Error> {
        let mut input = InputFacts { is_object: true, ..Default::default() };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "name" => input.name = map.next_value_seed(Any(TypeOf))?,
                "datatype" => input.datatype = map.next_value_seed(Any(TypeOf))?,
                "shape" => input.shape = map.next_value_seed(Any(TypeOf))?,
                "data" => {
                    map.next_value::<IgnoredAny>()?;
                    input.has_data = true;
                }
                "parameters" => {
                    let (binary_size, region) = map.next_value_seed(Any(DataParameters))?;
                    input.has_binary_size = binary_size;
                    input.has_region = region;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(input)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<InputFacts, A::Error> {
        TypeOf.visit_seq(seq).map(|_| InputFacts::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<InputFacts, E> {
        Ok(InputFacts::default())
    }

    other_scalars!(InputFacts = InputFacts::default());
}

/// An input's `parameters`: whether it names `binary_data_size` and `shared_memory_region`.
struct DataParameters;

impl<'de> Visitor<'de> for DataParameters {
    type Value = (bool, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(bool, bool), A::Error> {
        let mut found = (false, false);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            map.next_value::<IgnoredAny>()?;
            match key.as_ref() {
                "binary_data_size" => found.0 = true,
                "shared_memory_region" => found.1 = true,
                _ => {}
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(bool, bool), A::Error> {
        TypeOf.visit_seq(seq).map(|_| (false, false))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(bool, bool), E> {
        Ok((false, false))
    }

    other_scalars!((bool, bool) = (false, false));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Option<(bool, String)> {
        triton_structure_error(json.as_bytes())
    }

    #[test]
    fn structure_errors_are_tritonjsons() {
        let inputs_missing = "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'";
        assert_eq!(check("[1]"), Some((false, inputs_missing.into())));
        assert_eq!(check(r#"{"id": "x"}"#), Some((false, inputs_missing.into())));
        assert_eq!(check(r#"{"inputs": 5}"#).unwrap().1, not_a("inputs", "array"));
        assert_eq!(check(r#"{"inputs": 5, "id": 3}"#).unwrap().1, not_a("id", "string"), "id is read first");
        let good = r#"{"name":"a","datatype":"INT32","shape":[1],"data":[1]}"#;
        assert_eq!(check(&format!(r#"{{"inputs":[{good}]}}"#)), None);
        let (is_400, text) = check(r#"{"inputs":[5]}"#).unwrap();
        assert!(is_400 && text.ends_with(". But no field is set"), "{text}");
        assert_eq!(check(r#"{"inputs":[{"datatype":"INT32","shape":[1],"data":[1]}]}"#).unwrap().1, missing("name"));
        assert_eq!(
            check(r#"{"inputs":[{"name":1,"datatype":2,"shape":[1],"data":[1]}]}"#).unwrap().1,
            not_a("name", "string")
        );
        assert_eq!(
            check(r#"{"inputs":[{"name":"a","datatype":2,"shape":[1],"data":[1]}]}"#).unwrap().1,
            not_a("datatype", "string")
        );
        assert_eq!(check(r#"{"inputs":[{"name":"a","datatype":"INT32","data":[1]}]}"#).unwrap().1, missing("shape"));
        assert_eq!(
            check(r#"{"inputs":[{"name":"a","datatype":"INT32","shape":7,"data":[1]}]}"#).unwrap().1,
            not_a("shape", "array")
        );
        assert_eq!(check(&format!(r#"{{"inputs":[{good}],"outputs":{{}}}}"#)).unwrap().1, not_a("outputs", "array"));
        assert_eq!(check(&format!(r#"{{"inputs":[{good}],"outputs":[{{}}]}}"#)).unwrap().1, missing("name"));
        assert_eq!(
            check(&format!(r#"{{"inputs":[{good}],"outputs":[{{"name":[]}}]}}"#)).unwrap().1,
            not_a("name", "string")
        );
    }
}
