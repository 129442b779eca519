//! JSON tensor `data` decoded straight into tensor bytes, and the per-request bounds that keep a
//! hostile JSON body from costing more memory than its size.
//!
//! A `serde_json::Value` costs 32 bytes or more per element, so a 64 MiB body of `[0,0,0,...]`
//! would take about a gigabyte as a tree before any check. Here nested arrays are walked by a
//! visitor that appends each element's encoding to the output and stops as soon as there are
//! more elements than the shape holds; nothing else is kept. The same visitor reads an already
//! parsed `Value` (the generate endpoint), so both paths give the same errors.

use std::fmt;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::{CoreError, CoreResult};
use crate::infer::{ParamValue, Parameters};
use crate::tensor::{DataType, element_count, push_bytes_element};

pub use crate::limits::{MAX_INPUTS, MAX_OUTPUTS, MAX_PARAMETERS};

/// Decodes `data` (nested arrays in row-major order, or a scalar) for a tensor of `shape`.
/// `deserializer` is a JSON text (the infer body's raw `data`) or a parsed `Value`.
pub fn decode<'de, D: Deserializer<'de>>(
    name: &str,
    datatype: DataType,
    shape: &[i64],
    deserializer: D,
    size_hint: usize,
) -> CoreResult<Bytes> {
    // No data is read for an empty shape or a 0 dim: the model's checks then report the shape.
    if shape.is_empty() || !reads_data(name, datatype, shape)? {
        return Ok(Bytes::new());
    }
    let expected = element_count(shape).map_err(|_| shape_mismatch())?;
    // Triton does not count BYTES elements here (the model's checks do, in their own words), so
    // reading stops one element past the shape, which is all those checks need to see.
    let limit = if datatype == DataType::Bytes { expected.saturating_add(1) } else { expected };
    let per_element = datatype.element_size().unwrap_or(4);
    // Every element takes at least one byte of JSON, so the text's size bounds the allocation
    // whatever the shape claims.
    let capacity = limit.min(size_hint).saturating_mul(per_element);
    let mut sink = Sink { name, datatype, limit, count: 0, out: Vec::with_capacity(capacity), error: None, depth: 0 };
    let outcome = (&mut sink).deserialize(deserializer);
    if let Some(error) = sink.error.take() {
        return match error {
            SinkError::Full if datatype == DataType::Bytes => Ok(Bytes::from(sink.out)),
            SinkError::Full => Err(shape_mismatch()),
            SinkError::Core(error) => Err(error),
        };
    }
    outcome.map_err(|e| CoreError::internal(format!("Unable to parse 'data': {e}")))?;
    if datatype != DataType::Bytes && sink.count != expected {
        return Err(shape_mismatch());
    }
    Ok(Bytes::from(sink.out))
}

/// Triton 2.7x's count of a JSON input's elements before its `data` is read (`GetElementCount`,
/// dims in order): a 0 dim means no data (`false`); a -1 dim is left to the shape checks after;
/// another negative dim, a count past i64::MAX or a byte size past it is refused in its words.
fn reads_data(name: &str, datatype: DataType, shape: &[i64]) -> CoreResult<bool> {
    let shape_text = || format!("[{}]", shape.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
    let mut count: i64 = 1;
    for &dim in shape {
        if dim == -1 {
            return Ok(true);
        }
        if dim == 0 {
            return Ok(false);
        }
        if dim < 0 {
            return Err(CoreError::invalid_arg(format!(
                "invalid shape for input '{name}': shape {} contains one or more invalid dimensions",
                shape_text()
            )));
        }
        count = count.checked_mul(dim).ok_or_else(|| {
            CoreError::invalid_arg(format!(
                "invalid shape for input '{name}': shape {} causes total element count to exceed maximum size of {}",
                shape_text(),
                i64::MAX
            ))
        })?;
    }
    let size = i64::try_from(datatype.element_size().unwrap_or(1)).unwrap_or(1);
    if datatype != DataType::Bytes && size > 1 && count > i64::MAX / size {
        return Err(CoreError::invalid_arg(format!(
            "byte size overflow for input '{name}': element count ({count}) * data type size ({size}) exceeds maximum \
             allowed size ({})",
            i64::MAX
        )));
    }
    Ok(true)
}

/// Triton's message when `data` holds more or fewer elements than the shape.
fn shape_mismatch() -> CoreError {
    CoreError::internal("Unable to parse 'data': Shape does not match true shape of 'data' field")
}

/// Why the walk over `data` stopped early.
enum SinkError {
    /// More elements than the limit.
    Full,
    Core(CoreError),
}

/// `data` as a parsed `Value`.
pub fn decode_value(name: &str, datatype: DataType, shape: &[i64], data: &Value) -> CoreResult<Bytes> {
    decode(name, datatype, shape, data, usize::MAX)
}

struct Sink<'a> {
    name: &'a str,
    datatype: DataType,
    /// Most elements read.
    limit: usize,
    count: usize,
    out: Vec<u8>,
    /// The first error, kept whole (serde's error type carries only text).
    error: Option<SinkError>,
    /// Arrays entered and not yet left.
    depth: usize,
}

/// Triton 2.7x's limit on arrays nested in `data` (`HTTP_MAX_JSON_NESTING_DEPTH`): a value under
/// this many arrays is refused.
const MAX_NESTING: usize = 100;

/// One scalar of `data`.
enum Leaf<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'a str),
    Other(&'static str),
}

impl fmt::Display for Leaf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool(b) => write!(f, "{b}"),
            Self::Int(i) => write!(f, "{i}"),
            Self::Uint(u) => write!(f, "{u}"),
            Self::Float(x) => write!(f, "{}", Value::from(*x)),
            Self::Str(s) => write!(f, "{}", Value::from(*s)),
            Self::Other(what) => f.write_str(what),
        }
    }
}

impl Sink<'_> {
    fn fail<E: de::Error>(&mut self, error: CoreError) -> E {
        let text = error.message.clone();
        self.error.get_or_insert(SinkError::Core(error));
        E::custom(text)
    }

    fn push<E: de::Error>(&mut self, leaf: Leaf<'_>) -> Result<(), E> {
        if self.count == self.limit {
            self.error.get_or_insert(SinkError::Full);
            return Err(E::custom("more elements than the shape holds"));
        }
        self.count += 1;
        let datatype = self.datatype;
        // TritonJson's words for an element of the wrong JSON type.
        let wrong = |_: &Leaf<'_>, _: &str| {
            CoreError::internal(match datatype {
                DataType::Bytes => "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
                DataType::Bool => "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
                DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
                    "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
                }
                DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                    "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
                }
                _ => "Unable to parse 'data': attempt to access JSON non-number as double",
            })
        };
        macro_rules! int {
            ($ty:ty) => {{
                // An integer of the right kind but out of range: Triton truncates it silently,
                // Tessera refuses it in its own words.
                let x = match leaf {
                    Leaf::Int(i) if i >= 0 || <$ty>::MIN != 0 => {
                        Some(<$ty>::try_from(i).map_err(|_| format!("{i} is out of range for {datatype}")))
                    }
                    Leaf::Uint(u) => {
                        Some(<$ty>::try_from(u).map_err(|_| format!("{u} is out of range for {datatype}")))
                    }
                    _ => None,
                };
                match x {
                    Some(Ok(x)) => self.out.extend_from_slice(&x.to_le_bytes()),
                    Some(Err(range)) => {
                        let error =
                            CoreError::internal(format!("Unable to parse 'data': {range} (input '{}')", self.name));
                        return Err(self.fail(error));
                    }
                    None => {
                        let error = wrong(&leaf, self.name);
                        return Err(self.fail(error));
                    }
                }
            }};
        }
        match datatype {
            DataType::Bool => match leaf {
                Leaf::Bool(b) => self.out.push(u8::from(b)),
                _ => {
                    let error = wrong(&leaf, self.name);
                    return Err(self.fail(error));
                }
            },
            DataType::Uint8 => int!(u8),
            DataType::Uint16 => int!(u16),
            DataType::Uint32 => int!(u32),
            DataType::Uint64 => int!(u64),
            DataType::Int8 => int!(i8),
            DataType::Int16 => int!(i16),
            DataType::Int32 => int!(i32),
            DataType::Int64 => int!(i64),
            DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64 => {
                let x = match leaf {
                    Leaf::Int(i) => i as f64,
                    Leaf::Uint(u) => u as f64,
                    Leaf::Float(x) => x,
                    _ => {
                        let error = wrong(&leaf, self.name);
                        return Err(self.fail(error));
                    }
                };
                match datatype {
                    DataType::Fp16 => self.out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
                    DataType::Bf16 => self.out.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
                    DataType::Fp32 => self.out.extend_from_slice(&(x as f32).to_le_bytes()),
                    _ => self.out.extend_from_slice(&x.to_le_bytes()),
                }
            }
            DataType::Bytes => match leaf {
                Leaf::Str(s) => {
                    if let Err(error) = push_bytes_element(&mut self.out, s.as_bytes()) {
                        return Err(self.fail(error));
                    }
                }
                _ => {
                    let error = wrong(&leaf, self.name);
                    return Err(self.fail(error));
                }
            },
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Sink<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Sink<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor data: nested arrays of numbers, booleans or strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.depth += 1;
        if self.depth >= MAX_NESTING {
            let text = format!("JSON nesting depth exceeds maximum allowed limit ({MAX_NESTING})");
            // As Triton words it: BYTES data is walked before the other types' parse.
            let text = if self.datatype == DataType::Bytes { text } else { format!("Unable to parse 'data': {text}") };
            return Err(self.fail(CoreError::invalid_arg(text)));
        }
        while seq.next_element_seed(&mut *self)?.is_some() {}
        self.depth -= 1;
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.push(Leaf::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.push(Leaf::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.push(Leaf::Uint(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.push(Leaf::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.push(Leaf::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.push(Leaf::Other("null"))
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<(), A::Error> {
        self.push(Leaf::Other("an object"))
    }
}

/// A JSON array of at most `MAX` items, refused while it is being parsed once it grows past that.
#[derive(Debug)]
pub struct Bounded<T, const MAX: usize>(pub Vec<T>);

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for Bounded<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Items<T, const MAX: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for Items<T, MAX> {
            type Value = Bounded<T, MAX>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {MAX} items")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(item) = seq.next_element()? {
                    if items.len() == MAX {
                        return Err(de::Error::custom(format!("more than {MAX} items (this server's limit)")));
                    }
                    items.push(item);
                }
                Ok(Bounded(items))
            }
        }
        deserializer.deserialize_seq(Items::<T, MAX>(std::marker::PhantomData))
    }
}

/// One entry of a JSON `shape`: the dimension when it is an unsigned integer that fits an i64,
/// else `None` (the caller answers with Triton's message). Nested values are skipped without
/// being kept.
#[derive(Debug, Clone, Copy)]
pub struct ShapeDim(pub Option<i64>);

impl<'de> Deserialize<'de> for ShapeDim {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A number that fits an i64 comes as `Int` (a larger one as `Uint`).
        Ok(ShapeDim(match Scalar::deserialize(deserializer)?.0 {
            Some(ParamValue::Int(v)) => (v >= 0).then_some(v),
            _ => None,
        }))
    }
}

/// Most dimensions a JSON `shape` may have.
pub const MAX_DIMS: usize = 64;

/// A `parameters` value: at most [`MAX_PARAMETERS`] entries, each a bool, number or string (the
/// protocol's parameter types). Keys whose values are anything else (null, an array, an object)
/// are kept by name only, and a `parameters` that is not an object is noted, so the door can
/// answer each in Triton's words; neither keeps a large nested value.
#[derive(Debug, Default)]
pub struct JsonParameters {
    pub entries: Parameters,
    /// Keys whose values are not scalars, in the order they came.
    pub non_scalar: Vec<String>,
    /// `parameters` was not an object (Triton ignores that on inputs and outputs).
    pub not_object: bool,
}

impl JsonParameters {
    /// The scalar entries, for inputs and outputs (Triton looks up the keys it knows and
    /// ignores the rest).
    pub fn into_entries(params: Option<Self>) -> Parameters {
        params.map(|p| p.entries).unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for JsonParameters {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = JsonParameters;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a parameters object of at most {MAX_PARAMETERS} entries")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonParameters, A::Error> {
                let mut params = JsonParameters::default();
                while let Some(key) = map.next_key::<String>()? {
                    if params.entries.len() + params.non_scalar.len() == MAX_PARAMETERS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_PARAMETERS} parameters (this server's limit)"
                        )));
                    }
                    // A repeated key: the last one wins, as in a JSON object.
                    match map.next_value::<Scalar>()?.0 {
                        Some(value) => {
                            params.non_scalar.retain(|k| *k != key);
                            params.entries.insert(key, value);
                        }
                        None => {
                            params.entries.remove(&key);
                            params.non_scalar.push(key);
                        }
                    }
                }
                Ok(params)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonParameters, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(JsonParameters { not_object: true, ..Default::default() })
            }

            fn visit_unit<E: de::Error>(self) -> Result<JsonParameters, E> {
                Ok(JsonParameters { not_object: true, ..Default::default() })
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<JsonParameters, E> {
                self.visit_unit()
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<JsonParameters, E> {
                self.visit_unit()
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<JsonParameters, E> {
                self.visit_unit()
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<JsonParameters, E> {
                self.visit_unit()
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<JsonParameters, E> {
                self.visit_unit()
            }
        }
        deserializer.deserialize_any(Entries)
    }
}

/// A parameter's value: `None` for a null, an array or an object (skipped over, not kept).
struct Scalar(Option<ParamValue>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct One;
        impl<'de> Visitor<'de> for One {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(Some(ParamValue::Bool(v))))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(Some(ParamValue::Int(v))))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(Some(i64::try_from(v).map_or(ParamValue::Uint(v), ParamValue::Int))))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(Some(ParamValue::Double(v))))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(Some(ParamValue::String(v.to_owned()))))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar(Some(ParamValue::String(v))))
            }

            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Scalar(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(Scalar(None))
            }
        }
        deserializer.deserialize_any(One)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(datatype: DataType, shape: &[i64], json: &str) -> CoreResult<Vec<u8>> {
        let mut de = serde_json::Deserializer::from_str(json);
        decode("x", datatype, shape, &mut de, json.len()).map(|b| b.to_vec())
    }

    #[test]
    fn nested_and_flat_data_encode_alike() {
        let nested = text(DataType::Int32, &[2, 2], "[[1, 2], [3, -4]]").unwrap();
        let flat = text(DataType::Int32, &[2, 2], "[1, 2, 3, -4]").unwrap();
        assert_eq!(nested, flat);
        assert_eq!(nested, [1i32, 2, 3, -4].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        let value: Value = serde_json::from_str("[[1, 2], [3, -4]]").unwrap();
        assert_eq!(decode_value("x", DataType::Int32, &[2, 2], &value).unwrap().to_vec(), nested);
    }

    #[test]
    fn errors_name_the_problem() {
        for (datatype, shape, json, needle) in [
            (DataType::Uint8, vec![1], "[256]", "256 is out of range for UINT8 (input 'x')"),
            (DataType::Int8, vec![1], "[-129]", "-129 is out of range for INT8 (input 'x')"),
            (DataType::Uint8, vec![1], "[-1]", "attempt to access JSON non-unsigned-integer as unsigned-integer"),
            (DataType::Int32, vec![1], "[1.5]", "attempt to access JSON non-signed-integer as signed-integer"),
            (DataType::Bool, vec![1], "[1]", "attempt to access JSON non-boolean as boolean"),
            (DataType::Bytes, vec![1], "[3]", "Unable to parse JSON bytes array: attempt to access JSON non-string"),
            (DataType::Fp32, vec![1], "[null]", "attempt to access JSON non-number as double"),
            (DataType::Fp32, vec![1], "[{\"a\": 1}]", "attempt to access JSON non-number as double"),
            (DataType::Fp32, vec![3], "[1, 2]", "Shape does not match true shape of 'data' field"),
            (DataType::Fp32, vec![1], "[1, 2]", "Shape does not match true shape of 'data' field"),
            (DataType::Fp32, vec![-1], "[1]", "Shape does not match"),
        ] {
            let message = text(datatype, &shape, json).unwrap_err().message;
            assert!(message.contains(needle), "{json}: {message}");
        }
    }

    #[test]
    fn a_huge_shape_allocates_by_the_text_not_the_shape() {
        // 2^40 elements claimed, three given: refused after reading them, without reserving 4 TiB.
        let message = text(DataType::Fp32, &[1 << 40], "[1, 2, 3]").unwrap_err().message;
        assert!(message.contains("Shape does not match"), "{message}");
        // BYTES elements are counted by the model's checks: reading stops one past the shape.
        let two = text(DataType::Bytes, &[1], r#"["a", "b", "c"]"#).unwrap();
        assert_eq!(crate::tensor::bytes_elements(&two).count(), 2);
        assert!(text(DataType::Int32, &[], "[1, 2]").unwrap().is_empty(), "an empty shape reads no data");
    }

    #[test]
    fn bounded_lists_and_parameters_stop_while_parsing() {
        let ok: Bounded<u8, 3> = serde_json::from_str("[1, 2, 3]").unwrap();
        assert_eq!(ok.0, [1, 2, 3]);
        let err = serde_json::from_str::<Bounded<u8, 3>>("[1, 2, 3, 4]").unwrap_err().to_string();
        assert!(err.contains("more than 3 items"), "{err}");

        let params: JsonParameters = serde_json::from_str(r#"{"a": 1, "b": "s", "c": true, "d": 0.5}"#).unwrap();
        assert_eq!(params.entries.get("a"), Some(&ParamValue::Int(1)));
        assert_eq!(params.entries.get("c"), Some(&ParamValue::Bool(true)));
        let odd: JsonParameters = serde_json::from_str(r#"{"a": [1, 2], "b": null, "c": {"d": 1}, "e": 2}"#).unwrap();
        assert_eq!((odd.non_scalar, odd.entries.len()), (vec!["a".into(), "b".into(), "c".into()], 1));
        assert!(serde_json::from_str::<JsonParameters>("[1]").unwrap().not_object);
        let many =
            format!("{{{}}}", (0..=MAX_PARAMETERS).map(|i| format!("\"k{i}\": 1")).collect::<Vec<_>>().join(","));
        let err = serde_json::from_str::<JsonParameters>(&many).unwrap_err().to_string();
        assert!(err.contains("more than 1024 parameters"), "{err}");
    }

    #[test]
    fn data_under_a_hundred_arrays_is_refused_as_triton_2_7x_does() {
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let shape = |depth: usize| vec![1i64; depth];
        assert!(text(DataType::Int32, &shape(99), &nested(99)).is_ok(), "99 arrays are within the limit");
        let refused = text(DataType::Int32, &shape(100), &nested(100)).unwrap_err();
        assert_eq!(refused.kind, crate::error::ErrorKind::InvalidArg);
        assert_eq!(refused.message, "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)");
        let value: Value = serde_json::from_str(&nested(120)).unwrap();
        let refused = decode_value("x", DataType::Bytes, &shape(120), &value).unwrap_err();
        assert_eq!(refused.message, "JSON nesting depth exceeds maximum allowed limit (100)");
    }

    #[test]
    fn shapes_triton_2_7x_refuses_before_reading_data() {
        let refused = text(DataType::Int32, &[2, -3], "[1, 2]").unwrap_err();
        assert_eq!(refused.kind, crate::error::ErrorKind::InvalidArg);
        assert_eq!(
            refused.message,
            "invalid shape for input 'x': shape [2,-3] contains one or more invalid dimensions"
        );
        let huge = i64::MAX / 2 + 1;
        let refused = text(DataType::Int32, &[huge, 4], "[1]").unwrap_err();
        assert_eq!(
            refused.message,
            format!(
                "invalid shape for input 'x': shape [{huge},4] causes total element count to exceed maximum size of \
                 9223372036854775807"
            )
        );
        let refused = text(DataType::Int64, &[huge], "[1]").unwrap_err();
        assert_eq!(
            refused.message,
            format!(
                "byte size overflow for input 'x': element count ({huge}) * data type size (8) exceeds maximum allowed \
                 size (9223372036854775807)"
            )
        );
        assert!(text(DataType::Int32, &[0, -3], "[]").unwrap().is_empty(), "a 0 dim before reads nothing");
    }
}
