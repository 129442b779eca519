//! KServe v2 JSON tensors and Triton's binary tensor data extension, to and from the core types.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::json_data::{self, Bounded, JsonParameters, MAX_DIMS, MAX_INPUTS, MAX_OUTPUTS, ShapeDim};
use crate::config::IoSpec;
use crate::error::{CoreError, CoreResult};
use crate::frontend::DecodedRequest;
use crate::frontend::ServedModel;
use crate::infer::{InferRequest, InferResponse, ParamValue, RequestedOutput};
use crate::shm::ShmInput;
use crate::tensor::{DataType, Tensor, bytes_elements};

#[derive(Deserialize)]
struct JsonRequest {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<JsonParameters>,
    inputs: Bounded<JsonInput, MAX_INPUTS>,
    #[serde(default)]
    outputs: Option<Bounded<JsonOutput, MAX_OUTPUTS>>,
}

#[derive(Deserialize)]
struct JsonInput {
    name: String,
    shape: Bounded<ShapeDim, MAX_DIMS>,
    datatype: String,
    #[serde(default)]
    parameters: Option<JsonParameters>,
    /// Kept as text and decoded straight into tensor bytes once the shape is known.
    #[serde(default)]
    data: Option<Box<RawValue>>,
}

/// A JSON input with its shape checked.
struct DecodedInput {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    parameters: Option<JsonParameters>,
    data: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct JsonOutput {
    name: String,
    #[serde(default)]
    parameters: Option<JsonParameters>,
}

/// A decoded HTTP infer request plus the HTTP-only choice of which outputs travel as binary.
pub struct HttpInferRequest {
    pub request: DecodedRequest,
    pub binary_outputs: BinaryOutputs,
}

pub struct BinaryOutputs {
    default: bool,
    overrides: Vec<(String, bool)>,
}

impl BinaryOutputs {
    fn is_binary(&self, name: &str) -> bool {
        self.overrides.iter().find(|(n, _)| n == name).map_or(self.default, |(_, b)| *b)
    }
}

fn bad(message: impl Into<String>) -> CoreError {
    CoreError::invalid_arg(message)
}

/// Splits `body` at `header_length` (the Inference-Header-Content-Length) into JSON and binary
/// parts and decodes the request. Shared-memory inputs are described, not read.
pub fn decode_request(
    body: Bytes,
    header_length: Option<i64>,
    model: &str,
    version: Option<i64>,
) -> CoreResult<HttpInferRequest> {
    let (json, mut binary) = match header_length {
        None => (body, Bytes::new()),
        // The caller routes raw binary requests (header length 0) to `decode_raw`.
        Some(0) => return Err(CoreError::internal("a raw binary request reached the JSON decoder")),
        Some(n) => match usize::try_from(n).ok().filter(|&n| n <= body.len()) {
            Some(n) => (body.slice(..n), body.slice(n..)),
            None => return Err(bad(format!("inference header size should be in range (0, {}), got: {n}", body.len()))),
        },
    };
    if json.is_empty() {
        // Only reachable through `decode_request` called directly: the door sends empty bodies
        // to `decode_raw`, as Triton treats them.
        return Err(bad(format!(
            "the request body for model '{model}' is empty: an inference request needs a JSON header"
        )));
    }
    let parsed = parse_request_json(&json)?;
    // Triton reads `id`, then `parameters`, then the inputs, then the outputs.
    let request_params = request_parameters(parsed.parameters)?;
    let mut inputs = Vec::with_capacity(parsed.inputs.0.len());
    let mut shm_inputs = Vec::new();
    let mut unknown_datatypes = Vec::new();
    for input in parsed.inputs.0 {
        one_data_field(&input)?;
        // Triton's message for a negative, fractional or non-numeric dimension.
        let shape = input.shape.0.iter().map(|d| d.0).collect::<Option<Vec<i64>>>().ok_or_else(|| {
            CoreError::internal(
                "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
            )
        })?;
        let input = DecodedInput {
            name: input.name,
            shape,
            datatype: input.datatype,
            parameters: input.parameters,
            data: input.data,
        };
        // An unknown datatype is the door's error for JSON data (Triton needs the type to read it)
        // and the model's check otherwise (`InferRequest::unknown_datatype_inputs`).
        let known = DataType::from_protocol(&input.datatype);
        if known.is_none() {
            if input.data.is_some() {
                return Err(bad(format!("invalid datatype for input {}", input.name)));
            }
            unknown_datatypes.push(input.name.clone());
        }
        let datatype = known.unwrap_or(DataType::Bytes);
        if input.parameters.as_ref().is_some_and(|p| p.non_scalar.iter().any(|k| k == "shared_memory_region")) {
            return Err(not_a("shared_memory_region", "string"));
        }
        let params = JsonParameters::into_entries(input.parameters);
        if let Some(target) = crate::shm::parse_target(&params)? {
            let position = inputs.len() + shm_inputs.len();
            shm_inputs.push(ShmInput { position, name: input.name, datatype, shape: input.shape, target });
            continue;
        }
        let data = match (params.get("binary_data_size"), input.data) {
            (Some(size), None) => {
                let size = match size {
                    ParamValue::Int(i) => usize::try_from(*i).ok(),
                    ParamValue::Uint(u) => usize::try_from(*u).ok(),
                    _ => None,
                }
                .ok_or_else(|| not_a("binary_data_size", "unsigned-integer"))?;
                if size > binary.len() {
                    return Err(bad(format!(
                        "unexpected size for input '{}', expecting {} additional bytes for model '{model}'",
                        input.name,
                        size - binary.len()
                    )));
                }
                binary.split_to(size)
            }
            (None, Some(data)) => {
                if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
                    return Err(bad(format!(
                        "receiving {datatype} data via JSON is not supported. Please use the binary data format \
                        for input {}",
                        input.name
                    )));
                }
                if !data.get().trim_start().starts_with('[') {
                    return Err(CoreError::internal(
                        "Unable to parse 'data': attempt to access JSON non-array as array",
                    ));
                }
                let mut text = serde_json::Deserializer::from_str(data.get());
                json_data::decode(&input.name, datatype, &input.shape, &mut text, data.get().len())?
            }
            // `one_data_field` let through a non-integer binary_data_size only.
            _ => return Err(not_a("binary_data_size", "unsigned-integer")),
        };
        inputs.push(Tensor::unchecked(input.name, datatype, input.shape, data));
    }
    if !binary.is_empty() {
        return Err(bad(format!("unexpected additional input data for model '{model}'")));
    }

    let default_binary = matches!(request_params.get("binary_data_output"), Some(ParamValue::Bool(true)));
    let mut overrides = Vec::new();
    let requested = parsed.outputs.map(|o| o.0).unwrap_or_default();
    let mut outputs = Vec::with_capacity(requested.len());
    for output in requested {
        let params = JsonParameters::into_entries(output.parameters);
        // Triton reads an output's shared-memory settings first, then `binary_data`, then
        // `classification`; it "sets" rather than "parses" them once a region is named.
        let has_region = params.contains_key("shared_memory_region");
        let verb = if has_region { "set" } else { "parse" };
        let binary_data = match params.get("binary_data") {
            None => None,
            Some(ParamValue::Bool(b)) => Some(*b),
            Some(_) => {
                return Err(CoreError::internal(format!(
                    "Unable to {verb} 'binary_data': attempt to access JSON non-boolean as boolean"
                )));
            }
        };
        let class_count = match params.get("classification") {
            None => 0,
            Some(ParamValue::Int(i)) if *i >= 0 => u32::try_from(*i).unwrap_or(u32::MAX),
            Some(ParamValue::Uint(u)) => u32::try_from(*u).unwrap_or(u32::MAX),
            Some(_) => {
                return Err(CoreError::internal(
                    "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer",
                ));
            }
        };
        if has_region && binary_data == Some(true) {
            return Err(bad("Output can't set both 'shared_memory_region' and 'binary_data'"));
        }
        if has_region && class_count > 0 {
            return Err(bad("Output can't set both 'shared_memory_region' and 'classification'"));
        }
        if let Some(b) = binary_data {
            overrides.push((output.name.clone(), b));
        }
        let shared_memory = crate::shm::parse_target(&params)?;
        outputs.push(RequestedOutput { name: output.name, class_count, shared_memory });
    }
    let request = InferRequest {
        model_name: model.to_string(),
        model_version: version,
        id: parsed.id,
        inputs,
        outputs,
        parameters: request_params,
        unknown_datatype_inputs: unknown_datatypes,
        // The infer handler says its caller may block.
        caller: crate::execution::Caller::Detached,
        trace: None,
        principal: None,
    };
    Ok(HttpInferRequest {
        request: DecodedRequest { request, shm_inputs },
        binary_outputs: BinaryOutputs { default: default_binary, overrides },
    })
}

/// The request JSON, or Triton's error for it (500, INTERNAL, as Triton answers): rapidjson's
/// words and offset for a syntax error, TritonJson's for valid JSON of the wrong structure. What
/// rapidjson accepts and serde does not (a NUL ending the text, a leading byte-order mark) is
/// read as rapidjson reads it; NaN and Infinity stay refused (no tensor JSON type holds them).
fn parse_request_json(json: &[u8]) -> CoreResult<JsonRequest> {
    use serde_json::error::Category;
    let error = match serde_json::from_slice::<JsonRequest>(json) {
        Ok(parsed) => return Ok(parsed),
        Err(e) => e,
    };
    // Triton parses the whole text before it looks at the structure: a syntax error wins.
    if let Some(message) = super::json_syntax::rapidjson_error(json) {
        return Err(CoreError::internal(message));
    }
    if matches!(error.classify(), Category::Data) {
        // Valid JSON of the wrong structure: Triton's message for it, found by a second pass.
        return Err(match super::json_structure::triton_structure_error(json) {
            Some((true, text)) => bad(text),
            Some((false, text)) => CoreError::internal(text),
            None => CoreError::internal(format!(
                "Unable to parse 'inputs': the request must be a JSON object with an 'inputs' array ({error})"
            )),
        });
    }
    let read = super::json_syntax::as_rapidjson_reads(json);
    let read = read.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(read);
    if read.len() < json.len() {
        return parse_request_json(read);
    }
    Err(CoreError::internal(format!("failed to parse the request JSON buffer: {error}")))
}

/// TritonJson's message for a value of the wrong type, under Triton's `Unable to parse` (500).
fn not_a(field: &str, kind: &str) -> CoreError {
    CoreError::internal(format!("Unable to parse '{field}': attempt to access JSON non-{kind} as {kind}"))
}

/// Triton's first check on each input: exactly one of `data`, `binary_data_size` and
/// `shared_memory_region` (the names of those set, in that order, when more than one is).
fn one_data_field(input: &JsonInput) -> CoreResult<()> {
    let has = |key: &str| {
        input.parameters.as_ref().is_some_and(|p| p.entries.contains_key(key) || p.non_scalar.iter().any(|k| k == key))
    };
    let set: Vec<&str> = [
        ("'data'", input.data.is_some()),
        ("'binary_data_size'", has("binary_data_size")),
        ("'shared_memory_region'", has("shared_memory_region")),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    match set.len() {
        1 => Ok(()),
        0 => Err(bad(format!("{}. But no field is set", super::json_structure::ONE_OF_DATA))),
        _ => Err(bad(format!("{}. But set {}", super::json_structure::ONE_OF_DATA, set.join(" ")))),
    }
}

/// The request's `parameters`, checked as Triton's HTTP door does: the types of the keys it
/// reads, `triton_` keys refused, and custom values that are not an int, a bool or a string.
/// (Triton goes in JSON order; with several wrong keys this reports in name order.)
fn request_parameters(params: Option<JsonParameters>) -> CoreResult<crate::infer::Parameters> {
    let Some(params) = params else { return Ok(Default::default()) };
    if params.not_object {
        return Err(CoreError::internal("failed to get request params.: attempt to get members for non-object"));
    }
    let unsigned = |v: Option<&ParamValue>| {
        matches!(v, Some(ParamValue::Uint(_))) || matches!(v, Some(ParamValue::Int(i)) if *i >= 0)
    };
    let keys = params.entries.keys().chain(&params.non_scalar);
    for key in keys {
        let value = params.entries.get(key);
        match key.as_str() {
            "sequence_id" => match value {
                Some(ParamValue::String(id)) => crate::infer::check_string_correlation_id(id)?,
                v if unsigned(v) => {}
                _ => return Err(not_a("sequence_id", "string")),
            },
            "priority" | "timeout" if !unsigned(value) => return Err(not_a(key, "unsigned-integer")),
            "sequence_start" | "sequence_end" | "binary_data_output" if !matches!(value, Some(ParamValue::Bool(_))) => {
                return Err(not_a(key, "boolean"));
            }
            "priority" | "timeout" | "sequence_start" | "sequence_end" | "binary_data_output" => {}
            _ if key.starts_with("triton_") => {
                return Err(bad(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
                ));
            }
            _ if value.is_none() => {
                return Err(bad(format!(
                    "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
                )));
            }
            _ => {}
        }
    }
    Ok(params.entries)
}

/// Triton's raw binary request (`Inference-Header-Content-Length: 0`): the body is the bytes of
/// the model's only input. Its datatype comes from the config; its shape is the config's dims
/// (with a batch dimension of 1 for a batching model) and a single `-1` dimension is deduced
/// from the byte count. A BYTES input must have shape [1]: the whole body is its one element.
/// Every output of the config comes back, in binary. Errors are Triton's, word for word
/// (including the name `raw_input` Triton gives the input in a size mismatch).
pub fn decode_raw(body: Bytes, model: &ServedModel) -> CoreResult<HttpInferRequest> {
    decode_raw_for(body, model.name(), model.max_batch_size() > 0, model.inputs())
}

/// [`decode_raw`] for a model named `model` with these inputs (batching: with a batch dimension).
pub fn decode_raw_for(body: Bytes, model: &str, batching: bool, inputs: &[IoSpec]) -> CoreResult<HttpInferRequest> {
    let refuse = |message: String| bad(format!("[request id: <id_unknown>] {message}"));
    let [input] = inputs else {
        return Err(refuse(format!(
            "Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{model}' model \
            configuration",
            inputs.len(),
        )));
    };
    let mut shape: Vec<i64> = if batching { vec![1] } else { Vec::new() };
    let mut variable = None;
    let mut fixed: i64 = 1;
    for &dim in &input.dims {
        if dim == -1 {
            if variable.is_some() {
                return Err(refuse(format!(
                    "The shape of the raw input '{}' can not be deduced because there are more than one \
                    variable-sized dimension",
                    input.name
                )));
            }
            variable = Some(shape.len());
        } else {
            fixed = fixed.saturating_mul(dim);
        }
        shape.push(dim);
    }
    let data = match input.datatype.element_size() {
        None => {
            if variable.is_some() || fixed != 1 {
                return Err(refuse(format!(
                    "For BYTE datatype raw input '{}', the model must have input shape [1]",
                    input.name
                )));
            }
            let mut element = Vec::with_capacity(body.len() + 4);
            crate::tensor::push_bytes_element(&mut element, &body)?;
            Bytes::from(element)
        }
        Some(size) => {
            let size = i64::try_from(size).unwrap_or(1);
            let total = i64::try_from(body.len()).unwrap_or(i64::MAX);
            if let Some(axis) = variable {
                // Rounded down as Triton does; the size check below reports a remainder. A fixed
                // dimension of 0 leaves nothing to divide by (Triton divides by zero there).
                shape[axis] = if fixed > 0 { total / fixed / size } else { 0 };
            }
            let expected = shape.iter().try_fold(size, |acc, &d| acc.checked_mul(d)).unwrap_or(i64::MAX);
            if expected != total {
                return Err(refuse(format!(
                    "input byte size mismatch for input 'raw_input' for model '{model}'. Expected {expected}, got \
                    {total}"
                )));
            }
            body
        }
    };
    let request = InferRequest {
        model_name: model.to_string(),
        inputs: vec![Tensor::new(input.name.clone(), input.datatype, shape, data)?],
        ..Default::default()
    };
    Ok(HttpInferRequest {
        request: DecodedRequest { request, shm_inputs: Vec::new() },
        binary_outputs: BinaryOutputs { default: true, overrides: Vec::new() },
    })
}

/// Decodes a parsed `Value` as tensor `data` (nested arrays in row-major order).
pub(crate) fn json_to_bytes(name: &str, datatype: DataType, shape: &[i64], data: &Value) -> CoreResult<Bytes> {
    json_data::decode_value(name, datatype, shape, data)
}

#[derive(Serialize)]
struct JsonResponse<'a> {
    model_name: &'a str,
    model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    /// The response's parameters (a python model's `InferenceResponse(parameters=...)`), when it
    /// has any: Triton's top-level `parameters` object.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    parameters: serde_json::Map<String, Value>,
    outputs: Vec<JsonTensor<'a>>,
}

/// Response parameters as the KServe `parameters` object.
pub(crate) fn parameters_json(parameters: &crate::infer::Parameters) -> serde_json::Map<String, Value> {
    parameters
        .iter()
        .map(|(key, value)| {
            let value = match value {
                ParamValue::Bool(b) => Value::Bool(*b),
                ParamValue::Int(i) => Value::from(*i),
                ParamValue::Uint(u) => Value::from(*u),
                ParamValue::Double(d) => Value::from(*d),
                ParamValue::String(s) => Value::String(s.clone()),
            };
            (key.clone(), value)
        })
        .collect()
}

#[derive(Serialize)]
struct JsonTensor<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<BinaryDataSize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonData>,
}

/// A binary output's only parameter (a struct, not a JSON map: nothing to build per output).
#[derive(Serialize)]
struct BinaryDataSize {
    binary_data_size: usize,
}

/// Typed so that FP32 values print in their shortest f32 form ("0.1", not "0.10000000149011612").
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum JsonData {
    Bool(Vec<bool>),
    Unsigned(Vec<u64>),
    Signed(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(Vec<String>),
}

pub(crate) fn tensor_to_json(t: &Tensor) -> JsonData {
    let d = &t.data[..];
    fn le<const N: usize, T>(d: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        d.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect()
    }
    match t.datatype {
        DataType::Bool => JsonData::Bool(d.iter().map(|&b| b != 0).collect()),
        DataType::Uint8 => JsonData::Unsigned(d.iter().map(|&b| u64::from(b)).collect()),
        DataType::Uint16 => JsonData::Unsigned(le::<2, _>(d, |b| u64::from(u16::from_le_bytes(b)))),
        DataType::Uint32 => JsonData::Unsigned(le::<4, _>(d, |b| u64::from(u32::from_le_bytes(b)))),
        DataType::Uint64 => JsonData::Unsigned(le::<8, _>(d, u64::from_le_bytes)),
        DataType::Int8 => JsonData::Signed(d.iter().map(|&b| i64::from(b as i8)).collect()),
        DataType::Int16 => JsonData::Signed(le::<2, _>(d, |b| i64::from(i16::from_le_bytes(b)))),
        DataType::Int32 => JsonData::Signed(le::<4, _>(d, |b| i64::from(i32::from_le_bytes(b)))),
        DataType::Int64 => JsonData::Signed(le::<8, _>(d, i64::from_le_bytes)),
        DataType::Fp16 => JsonData::F32(le::<2, _>(d, |b| half::f16::from_le_bytes(b).to_f32())),
        DataType::Bf16 => JsonData::F32(le::<2, _>(d, |b| half::bf16::from_le_bytes(b).to_f32())),
        DataType::Fp32 => JsonData::F32(le::<4, _>(d, f32::from_le_bytes)),
        DataType::Fp64 => JsonData::F64(le::<8, _>(d, f64::from_le_bytes)),
        DataType::Bytes => JsonData::Str(bytes_elements(d).map(|s| String::from_utf8_lossy(s).into_owned()).collect()),
    }
}

/// Encodes a response. Returns the body and, when any output is binary, the JSON header length
/// for the Inference-Header-Content-Length header.
pub fn encode_response(response: &InferResponse, binary: &BinaryOutputs) -> CoreResult<(Vec<u8>, Option<usize>)> {
    let mut binary_parts: Vec<&Bytes> = Vec::new();
    // An output named twice is sent once (its first tensor); outputs are few, so no hash set.
    let outputs = response
        .outputs
        .iter()
        .enumerate()
        .filter(|&(i, t)| !response.outputs[..i].iter().any(|earlier| earlier.name == t.name))
        .map(|(_, t)| {
            if response.shared_memory.contains_key(&t.name) {
                // As in Triton: the bytes are in the region; the entry names the tensor only.
                JsonTensor {
                    name: &t.name,
                    datatype: t.datatype.as_str(),
                    shape: &t.shape,
                    parameters: None,
                    data: None,
                }
            } else if binary.is_binary(&t.name) {
                binary_parts.push(&t.data);
                JsonTensor {
                    name: &t.name,
                    datatype: t.datatype.as_str(),
                    shape: &t.shape,
                    parameters: Some(BinaryDataSize { binary_data_size: t.data.len() }),
                    data: None,
                }
            } else {
                JsonTensor {
                    name: &t.name,
                    datatype: t.datatype.as_str(),
                    shape: &t.shape,
                    parameters: None,
                    data: Some(tensor_to_json(t)),
                }
            }
        })
        .collect();
    let json = JsonResponse {
        model_name: &response.model_name,
        model_version: response.model_version.to_string(),
        id: response.id.as_deref(),
        parameters: parameters_json(&response.parameters),
        outputs,
    };
    let mut body =
        serde_json::to_vec(&json).map_err(|e| CoreError::internal(format!("failed to encode response: {e}")))?;
    if binary_parts.is_empty() {
        return Ok((body, None));
    }
    let header_length = body.len();
    body.reserve(binary_parts.iter().map(|b| b.len()).sum());
    for part in binary_parts {
        body.extend_from_slice(part);
    }
    Ok((body, Some(header_length)))
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
