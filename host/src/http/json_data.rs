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

/// Most inputs one request may name. Triton sets no number; models with more inputs than this
/// are unheard of, and the bound stops a body of a million tiny `inputs` objects while it is
/// being parsed rather than after.
pub const MAX_INPUTS: usize = 4096;
/// Most requested outputs per request.
pub const MAX_OUTPUTS: usize = 4096;
/// Most parameters in one `parameters` object (request, input or output).
pub const MAX_PARAMETERS: usize = 1024;

/// Decodes `data` (nested arrays in row-major order, or a scalar) for a tensor of `shape`.
/// `deserializer` is a JSON text (the infer body's raw `data`) or a parsed `Value`.
pub fn decode<'de, D: Deserializer<'de>>(
    name: &str,
    datatype: DataType,
    shape: &[i64],
    deserializer: D,
    size_hint: usize,
) -> CoreResult<Bytes> {
    let expected = element_count(shape).map_err(|e| {
        CoreError::internal(format!(
            "Unable to parse 'data': Shape does not match true shape of 'data' field ({})",
            e.message
        ))
    })?;
    let per_element = datatype.element_size().unwrap_or(4);
    // Every element takes at least one byte of JSON, so the text's size bounds the allocation
    // whatever the shape claims.
    let capacity = expected.min(size_hint).saturating_mul(per_element);
    let mut sink = Sink { name, datatype, expected, count: 0, out: Vec::with_capacity(capacity), error: None };
    let outcome = (&mut sink).deserialize(deserializer);
    if let Some(error) = sink.error.take() {
        return Err(error);
    }
    outcome.map_err(|e| CoreError::internal(format!("Unable to parse 'data': {e}")))?;
    if sink.count != expected {
        return Err(sink.shape_mismatch());
    }
    Ok(Bytes::from(sink.out))
}

/// `data` as a parsed `Value`.
pub fn decode_value(name: &str, datatype: DataType, shape: &[i64], data: &Value) -> CoreResult<Bytes> {
    decode(name, datatype, shape, data, usize::MAX)
}

struct Sink<'a> {
    name: &'a str,
    datatype: DataType,
    expected: usize,
    count: usize,
    out: Vec<u8>,
    /// The first error, kept whole (serde's error type carries only text).
    error: Option<CoreError>,
}

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
    fn shape_mismatch(&self) -> CoreError {
        let has =
            if self.count > self.expected { format!("more than {}", self.expected) } else { self.count.to_string() };
        CoreError::internal(format!(
            "Unable to parse 'data': Shape does not match true shape of 'data' field (input '{}': shape needs {} \
            elements, 'data' has {has})",
            self.name, self.expected
        ))
    }

    fn fail<E: de::Error>(&mut self, error: CoreError) -> E {
        let text = error.message.clone();
        self.error.get_or_insert(error);
        E::custom(text)
    }

    fn push<E: de::Error>(&mut self, leaf: Leaf<'_>) -> Result<(), E> {
        self.count += 1;
        if self.count > self.expected {
            let error = self.shape_mismatch();
            return Err(self.fail(error));
        }
        let datatype = self.datatype;
        let wrong = |leaf: &Leaf<'_>, name: &str| {
            CoreError::internal(format!(
                "Unable to parse 'data': {leaf} is not a valid {datatype} value for input '{name}'"
            ))
        };
        macro_rules! int {
            ($ty:ty) => {{
                let x = match leaf {
                    Leaf::Int(i) => <$ty>::try_from(i).ok(),
                    Leaf::Uint(u) => <$ty>::try_from(u).ok(),
                    _ => None,
                };
                match x {
                    Some(x) => self.out.extend_from_slice(&x.to_le_bytes()),
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
        // Nesting depth is bounded by the JSON parser (serde_json's recursion limit of 128).
        while seq.next_element_seed(&mut *self)?.is_some() {}
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
        struct Dim;
        impl<'de> Visitor<'de> for Dim {
            type Value = ShapeDim;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a dimension")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ShapeDim, E> {
                Ok(ShapeDim(i64::try_from(v).ok()))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ShapeDim, E> {
                Ok(ShapeDim((v >= 0).then_some(v)))
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<ShapeDim, E> {
                Ok(ShapeDim(None))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<ShapeDim, E> {
                Ok(ShapeDim(None))
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<ShapeDim, E> {
                Ok(ShapeDim(None))
            }

            fn visit_unit<E: de::Error>(self) -> Result<ShapeDim, E> {
                Ok(ShapeDim(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ShapeDim, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(ShapeDim(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ShapeDim, A::Error> {
                while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(ShapeDim(None))
            }
        }
        deserializer.deserialize_any(Dim)
    }
}

/// Most dimensions a JSON `shape` may have.
pub const MAX_DIMS: usize = 64;

/// A `parameters` object: at most [`MAX_PARAMETERS`] entries, each a bool, number or string (the
/// protocol's parameter types); anything else is refused while parsing, so a parameter cannot
/// carry a large nested value.
#[derive(Debug, Default)]
pub struct JsonParameters(pub Parameters);

impl<'de> Deserialize<'de> for JsonParameters {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = JsonParameters;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a parameters object of at most {MAX_PARAMETERS} bool, number or string values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonParameters, A::Error> {
                let mut entries = Parameters::new();
                while let Some(key) = map.next_key::<String>()? {
                    if entries.len() == MAX_PARAMETERS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_PARAMETERS} parameters (this server's limit)"
                        )));
                    }
                    let value = map.next_value::<Scalar>().map_err(|_| {
                        de::Error::custom(format!("parameter '{key}' must be a bool, a number or a string"))
                    })?;
                    // A repeated key: the last one wins, as in a JSON object.
                    entries.insert(key, value.0);
                }
                Ok(JsonParameters(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

struct Scalar(ParamValue);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct One;
        impl Visitor<'_> for One {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a bool, a number or a string")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(ParamValue::Bool(v)))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(ParamValue::Int(v)))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(i64::try_from(v).map_or(ParamValue::Uint(v), ParamValue::Int)))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(ParamValue::Double(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(ParamValue::String(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar(ParamValue::String(v)))
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
            (DataType::Uint8, vec![1], "[256]", "256 is not a valid UINT8 value"),
            (DataType::Int32, vec![1], "[1.5]", "1.5 is not a valid INT32 value"),
            (DataType::Bool, vec![1], "[1]", "1 is not a valid BOOL value"),
            (DataType::Bytes, vec![1], "[3]", "3 is not a valid BYTES value"),
            (DataType::Fp32, vec![1], "[null]", "null is not a valid FP32 value"),
            (DataType::Fp32, vec![1], "[{\"a\": 1}]", "an object is not a valid FP32 value"),
            (DataType::Fp32, vec![3], "[1, 2]", "needs 3 elements, 'data' has 2"),
            (DataType::Fp32, vec![1], "[1, 2]", "needs 1 elements, 'data' has more than 1"),
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
        assert!(message.contains("'data' has 3"), "{message}");
    }

    #[test]
    fn bounded_lists_and_parameters_stop_while_parsing() {
        let ok: Bounded<u8, 3> = serde_json::from_str("[1, 2, 3]").unwrap();
        assert_eq!(ok.0, [1, 2, 3]);
        let err = serde_json::from_str::<Bounded<u8, 3>>("[1, 2, 3, 4]").unwrap_err().to_string();
        assert!(err.contains("more than 3 items"), "{err}");

        let params: JsonParameters = serde_json::from_str(r#"{"a": 1, "b": "s", "c": true, "d": 0.5}"#).unwrap();
        assert_eq!(params.0.get("a"), Some(&ParamValue::Int(1)));
        assert_eq!(params.0.get("c"), Some(&ParamValue::Bool(true)));
        let err = serde_json::from_str::<JsonParameters>(r#"{"a": [1, 2]}"#).unwrap_err().to_string();
        assert!(err.contains("parameter 'a' must be a bool, a number or a string"), "{err}");
        let many =
            format!("{{{}}}", (0..=MAX_PARAMETERS).map(|i| format!("\"k{i}\": 1")).collect::<Vec<_>>().join(","));
        let err = serde_json::from_str::<JsonParameters>(&many).unwrap_err().to_string();
        assert!(err.contains("more than 1024 parameters"), "{err}");
    }
}
