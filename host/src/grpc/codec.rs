//! `ModelInferRequest` / `ModelInferResponse` to and from the core types.
//!
//! Inputs come as typed `contents`, as `raw_input_contents` (one entry per input that is not in
//! shared memory, in input order) or from a shared-memory region. Outputs always go back as
//! `raw_output_contents`, as Triton sends them; an output written to shared memory gets an empty
//! entry so positions still line up with `outputs` for the client.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::{CoreError, CoreResult};
use crate::frontend::DecodedRequest;
use crate::infer::{InferRequest, InferResponse, ParamValue, Parameters, RequestedOutput, ShmTarget};
use crate::proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::proto::inference::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse, infer_parameter::ParameterChoice,
};
use crate::shm::ShmInput;
use crate::tensor::{DataType, Tensor, push_bytes_element};

fn bad(message: impl Into<String>) -> CoreError {
    CoreError::invalid_arg(message)
}

/// The `version` / `model_version` field of a gRPC request.
pub fn parse_version(version: &str) -> CoreResult<Option<i64>> {
    crate::infer::parse_version_stol(version)
}

pub fn param_from_proto(p: &InferParameter) -> Option<ParamValue> {
    Some(match p.parameter_choice.as_ref()? {
        ParameterChoice::BoolParam(b) => ParamValue::Bool(*b),
        ParameterChoice::Int64Param(i) => ParamValue::Int(*i),
        ParameterChoice::StringParam(s) => ParamValue::String(s.clone()),
        ParameterChoice::DoubleParam(d) => ParamValue::Double(*d),
        ParameterChoice::Uint64Param(u) => match i64::try_from(*u) {
            Ok(i) => ParamValue::Int(i),
            Err(_) => ParamValue::Uint(*u),
        },
    })
}

pub fn param_to_proto(v: &ParamValue) -> InferParameter {
    let choice = match v {
        ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
        ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
        ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
        ParamValue::Uint(u) => ParameterChoice::Uint64Param(*u),
        ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
    };
    InferParameter { parameter_choice: Some(choice) }
}

fn core_params(params: &BTreeMap<String, InferParameter>) -> Parameters {
    params
        .iter()
        .filter_map(|(k, v)| param_from_proto(v).map(|v| (k.clone(), v)))
        .map(|(k, v)| match v {
            // Triton takes an int64 sequence id as a uint64: -1 is 2^64 - 1.
            ParamValue::Int(id) if k == "sequence_id" && id < 0 => (k, ParamValue::Uint(id as u64)),
            v => (k, v),
        })
        .collect()
}

/// The `shared_memory_region` / `_offset` / `_byte_size` parameters of a tensor, if present,
/// checked as Triton's gRPC door does (`grpc_utils.h`): a string region, int64 offset and byte
/// size (a negative one is taken as unsigned, so the region's bounds check reports it), and a
/// byte size only with a region.
fn shm_target(params: &BTreeMap<String, InferParameter>, tensor: &str) -> CoreResult<Option<ShmTarget>> {
    let choice = |key: &str| params.get(key).map(|p| p.parameter_choice.as_ref());
    let wrong = |key: &str, expected: &str| {
        bad(format!("invalid value type for '{key}' parameter for tensor '{tensor}', expected {expected}."))
    };
    let region = match choice("shared_memory_region") {
        None => None,
        Some(Some(ParameterChoice::StringParam(s))) => Some(s.clone()),
        Some(_) => return Err(wrong("shared_memory_region", "string_param")),
    };
    let int = |key: &str| match choice(key) {
        None => Ok(None),
        Some(Some(ParameterChoice::Int64Param(i))) => Ok(Some(*i as u64)),
        Some(_) => Err(wrong(key, "int64_param")),
    };
    let offset = int("shared_memory_offset")?;
    let byte_size = int("shared_memory_byte_size")?;
    let Some(region) = region else {
        for (key, given) in [("shared_memory_byte_size", byte_size), ("shared_memory_offset", offset)] {
            if given.is_some() {
                return Err(bad(format!(
                    "'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
                )));
            }
        }
        return Ok(None);
    };
    let byte_size = byte_size.ok_or_else(|| {
        bad(format!(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor \
            '{tensor}'"
        ))
    })?;
    Ok(Some(ShmTarget { region, offset: offset.unwrap_or(0), byte_size }))
}

/// Typed `contents` to the core's little-endian bytes, checked as Triton's gRPC door checks
/// them: one typed field only, of the kind the datatype uses (`int_contents` for INT8..INT32,
/// `uint_contents` for UINT8..UINT32; FP16 and BF16 have none). The element count is left to the
/// model's checks, which report it as Triton's core does (a byte-size or string-count mismatch).
fn contents_to_bytes(
    input: &InferInputTensor,
    known: Option<DataType>,
    contents: &InferTensorContents,
    model: &str,
) -> CoreResult<Bytes> {
    use DataType as D;
    let name = &input.name;
    // An unknown datatype takes no typed field (Triton names it '<invalid>').
    let (datatype, shown) = match known {
        Some(d) => (d, d.as_str()),
        None => (D::Fp16, "<invalid>"),
    };
    // Triton's order of the fields, each with the type name its messages give it.
    let fields = [
        ("BOOL", contents.bool_contents.len(), matches!(datatype, D::Bool)),
        ("INT32", contents.int_contents.len(), matches!(datatype, D::Int8 | D::Int16 | D::Int32)),
        ("INT64", contents.int64_contents.len(), matches!(datatype, D::Int64)),
        ("UINT32", contents.uint_contents.len(), matches!(datatype, D::Uint8 | D::Uint16 | D::Uint32)),
        ("UINT64", contents.uint64_contents.len(), matches!(datatype, D::Uint64)),
        ("FP32", contents.fp32_contents.len(), matches!(datatype, D::Fp32)),
        ("FP64", contents.fp64_contents.len(), matches!(datatype, D::Fp64)),
        ("BYTES", contents.bytes_contents.len(), matches!(datatype, D::Bytes)),
    ];
    let mut supplied = false;
    for (field_type, len, fits) in fields {
        if len == 0 {
            continue;
        }
        if supplied {
            return Err(bad(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}', binary data was \
                already supplied."
            )));
        }
        if !fits {
            return Err(bad(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}' of type \
                '{field_type}', expected datatype '{shown}'"
            )));
        }
        supplied = true;
    }
    // Sized from what was sent, never from the (client-chosen) shape.
    let mut out = Vec::new();
    macro_rules! narrow {
        ($field:ident, $ty:ty) => {{
            for &v in &contents.$field {
                // Triton keeps the low bytes of a value out of range; Tessera refuses it.
                let x = <$ty>::try_from(v)
                    .map_err(|_| bad(format!("value {v} does not fit {datatype} for input '{name}'")))?;
                out.extend_from_slice(&x.to_le_bytes());
            }
        }};
    }
    match datatype {
        D::Bool => out.extend(contents.bool_contents.iter().map(|&b| u8::from(b))),
        D::Int8 => narrow!(int_contents, i8),
        D::Int16 => narrow!(int_contents, i16),
        D::Int32 => narrow!(int_contents, i32),
        D::Int64 => narrow!(int64_contents, i64),
        D::Uint8 => narrow!(uint_contents, u8),
        D::Uint16 => narrow!(uint_contents, u16),
        D::Uint32 => narrow!(uint_contents, u32),
        D::Uint64 => narrow!(uint64_contents, u64),
        D::Fp32 => narrow!(fp32_contents, f32),
        D::Fp64 => narrow!(fp64_contents, f64),
        D::Bytes => {
            for item in &contents.bytes_contents {
                push_bytes_element(&mut out, item)?;
            }
        }
        // No typed field carries these: any field set was refused above.
        D::Fp16 | D::Bf16 => {}
    }
    Ok(Bytes::from(out))
}

/// Decodes a gRPC infer request. Shared-memory inputs are described, not read.
pub fn decode_request(request: ModelInferRequest) -> CoreResult<DecodedRequest> {
    let model = request.model_name;
    let version = parse_version(&request.model_version)?;
    let raw = request.raw_input_contents;
    let mut raw_iter = raw.iter();
    let mut raw_used = 0usize;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    let mut shm_inputs = Vec::new();
    let mut unknown_datatypes = Vec::new();
    for input in request.inputs {
        // An unknown datatype is left to the model's checks, which report it as Triton does.
        let known = DataType::from_protocol(&input.datatype);
        if known.is_none() {
            unknown_datatypes.push(input.name.clone());
        }
        let datatype = known.unwrap_or(DataType::Bytes);
        if let Some(target) = shm_target(&input.parameters, &input.name)? {
            if input.contents.is_some() {
                return Err(bad(format!(
                    "unexpected 'content' provided when using shared memory for input tensor '{}' for model '{model}'",
                    input.name
                )));
            }
            let position = inputs.len() + shm_inputs.len();
            shm_inputs.push(ShmInput { position, name: input.name, datatype, shape: input.shape, target });
            continue;
        }
        let data = match &input.contents {
            Some(contents) => {
                if !raw.is_empty() {
                    return Err(bad(format!(
                        "contents field must not be specified when using raw_input_contents for '{}' for model \
                        '{model}'",
                        input.name
                    )));
                }
                contents_to_bytes(&input, known, contents, &model)?
            }
            None => match raw_iter.next() {
                Some(bytes) => {
                    raw_used += 1;
                    bytes.clone()
                }
                None => {
                    return Err(bad(format!(
                        "unable to find data for input tensor '{}' for model '{model}' in request.",
                        input.name
                    )));
                }
            },
        };
        inputs.push(Tensor::unchecked(input.name, datatype, input.shape, data));
    }
    if raw_used != raw.len() {
        return Err(bad(format!(
            "expected {raw_used} raw_input_contents entries (one per input sent raw) but got {} for model '{model}'",
            raw.len()
        )));
    }
    let outputs = request.outputs.into_iter().map(decode_output).collect::<CoreResult<Vec<_>>>()?;
    let parameters = core_params(&request.parameters);
    let request = InferRequest {
        model_name: model,
        model_version: version,
        id: Some(request.id).filter(|id| !id.is_empty()),
        inputs,
        outputs,
        parameters,
        unknown_datatype_inputs: unknown_datatypes,
        // A stream's requests stay so; the unary door says its caller may block.
        caller: crate::execution::Caller::Detached,
        trace: None,
        principal: None,
    };
    Ok(DecodedRequest { request, shm_inputs })
}

fn decode_output(output: InferRequestedOutputTensor) -> CoreResult<RequestedOutput> {
    // Triton's messages (grpc_utils.cc), the missing period included.
    let class_count = match output.parameters.get("classification").map(|p| p.parameter_choice.as_ref()) {
        None => 0,
        Some(Some(ParameterChoice::Int64Param(c))) => u32::try_from(*c).map_err(|_| {
            if *c < 0 {
                bad("invalid value for 'classification' parameter, expected >= 0")
            } else {
                bad(format!("classification count for output '{}' must be below 2^32", output.name))
            }
        })?,
        Some(_) => return Err(bad("invalid value type for 'classification' parameter, expected int64_param")),
    };
    if class_count > 0 && output.parameters.contains_key("shared_memory_region") {
        return Err(bad("output can't set both 'shared_memory_region' and 'classification'"));
    }
    let shared_memory = shm_target(&output.parameters, &output.name)?;
    Ok(RequestedOutput { name: output.name, class_count, shared_memory })
}

/// Encodes a response: every output's bytes in `raw_output_contents`; an output written to shared
/// memory has an empty raw entry (as in Triton, its region is not echoed back).
pub fn encode_response(response: InferResponse) -> ModelInferResponse {
    let mut outputs = Vec::with_capacity(response.outputs.len());
    let mut raw = Vec::with_capacity(response.outputs.len());
    for tensor in response.outputs {
        // A shared-memory output's data is already empty: its raw entry is the placeholder.
        outputs.push(InferOutputTensor {
            name: tensor.name,
            datatype: tensor.datatype.as_str().to_string(),
            shape: tensor.shape,
            parameters: BTreeMap::new(),
            contents: None,
        });
        raw.push(tensor.data);
    }
    ModelInferResponse {
        model_name: response.model_name,
        model_version: response.model_version.to_string(),
        id: response.id.unwrap_or_default(),
        parameters: response.parameters.iter().map(|(k, v)| (k.clone(), param_to_proto(v))).collect(),
        outputs,
        raw_output_contents: raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_infer_request::InferInputTensor;

    fn input(name: &str, datatype: &str, shape: Vec<i64>, contents: Option<InferTensorContents>) -> InferInputTensor {
        InferInputTensor { name: name.into(), datatype: datatype.into(), shape, parameters: BTreeMap::new(), contents }
    }

    #[test]
    fn typed_and_raw_contents_decode() {
        let typed = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![
                input(
                    "a",
                    "INT16",
                    vec![2],
                    Some(InferTensorContents { int_contents: vec![-1, 2], ..Default::default() }),
                ),
                input(
                    "s",
                    "BYTES",
                    vec![1],
                    Some(InferTensorContents { bytes_contents: vec![b"hi".to_vec()], ..Default::default() }),
                ),
            ],
            ..Default::default()
        };
        let r = decode_request(typed).unwrap().request;
        assert_eq!(&r.inputs[0].data[..], &[0xff, 0xff, 2, 0]);
        assert_eq!(&r.inputs[1].data[..], b"\x02\x00\x00\x00hi");
        assert_eq!(r.model_version, None);

        let overflow = ModelInferRequest {
            inputs: vec![input(
                "a",
                "INT8",
                vec![1],
                Some(InferTensorContents { int_contents: vec![300], ..Default::default() }),
            )],
            ..Default::default()
        };
        assert!(decode_request(overflow).unwrap_err().message.contains("does not fit INT8"));

        let both = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input(
                "a",
                "INT32",
                vec![1],
                Some(InferTensorContents { int_contents: vec![1], ..Default::default() }),
            )],
            raw_input_contents: vec![Bytes::from_static(&[1, 0, 0, 0])],
            ..Default::default()
        };
        assert!(decode_request(both).unwrap_err().message.contains("contents field must not be specified"));

        let extra_raw = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("a", "INT32", vec![1], None)],
            raw_input_contents: vec![Bytes::from_static(&[1, 0, 0, 0]), Bytes::from_static(&[1, 0, 0, 0])],
            ..Default::default()
        };
        assert!(decode_request(extra_raw).unwrap_err().message.contains("expected 1 raw_input_contents entries"));

        let short_raw = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("a", "INT32", vec![2], None)],
            raw_input_contents: vec![Bytes::from_static(&[1, 0, 0, 0])],
            ..Default::default()
        };
        // Sizes are the model's check, made after its name, datatype and shape checks (Triton's order).
        assert_eq!(decode_request(short_raw).unwrap().request.inputs[0].data.len(), 4);

        // Triton's messages for typed fields of the wrong kind, and for two fields.
        let typed = |datatype: &str, contents: InferTensorContents| ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("h", datatype, vec![1], Some(contents))],
            ..Default::default()
        };
        let fp32 = || InferTensorContents { fp32_contents: vec![1.0], ..Default::default() };
        assert_eq!(
            decode_request(typed("FP16", fp32())).unwrap_err().message,
            "unexpected explicit tensor data for input tensor 'h' for model 'm' of type 'FP32', expected datatype \
             'FP16'"
        );
        let two = InferTensorContents { int_contents: vec![1], ..fp32() };
        assert_eq!(
            decode_request(typed("INT32", two)).unwrap_err().message,
            "unexpected explicit tensor data for input tensor 'h' for model 'm', binary data was already supplied."
        );
        // The count is the model's check (Triton's core reports it as a byte-size mismatch).
        let long = InferTensorContents { int_contents: vec![1, 2], ..Default::default() };
        assert_eq!(decode_request(typed("INT32", long)).unwrap().request.inputs[0].data.len(), 8);
        let version = ModelInferRequest { model_version: "x".into(), ..Default::default() };
        assert!(decode_request(version).is_err());
    }

    #[test]
    fn shm_inputs_are_described_in_place_and_take_no_raw_entry() {
        let shm_params = |offset: i64| {
            BTreeMap::from([
                ("shared_memory_region".to_string(), param_to_proto(&ParamValue::String("r".into()))),
                ("shared_memory_offset".to_string(), param_to_proto(&ParamValue::Int(offset))),
                ("shared_memory_byte_size".to_string(), param_to_proto(&ParamValue::Int(4))),
            ])
        };
        let in_shm = |name: &str, offset| InferInputTensor {
            parameters: shm_params(offset),
            ..input(name, "INT32", vec![1], None)
        };
        let request = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![in_shm("a", 0), input("b", "INT32", vec![1], None), in_shm("c", 4)],
            raw_input_contents: vec![Bytes::from_static(&[2, 0, 0, 0])],
            ..Default::default()
        };
        let decoded = decode_request(request).unwrap();
        assert_eq!(decoded.request.inputs.len(), 1);
        assert_eq!(decoded.request.inputs[0].name, "b");
        let described: Vec<(usize, &str, u64)> =
            decoded.shm_inputs.iter().map(|i| (i.position, i.name.as_str(), i.target.offset)).collect();
        assert_eq!(described, [(0, "a", 0), (2, "c", 4)]);

        let with_contents = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![InferInputTensor { contents: Some(InferTensorContents::default()), ..in_shm("a", 0) }],
            ..Default::default()
        };
        let err = decode_request(with_contents).unwrap_err();
        assert!(err.message.contains("unexpected 'content' provided when using shared memory"), "{}", err.message);
    }

    #[test]
    fn shm_outputs_keep_raw_positions() {
        let mut shared_memory = BTreeMap::new();
        shared_memory.insert("a".to_string(), ShmTarget { region: "r".into(), offset: 8, byte_size: 4 });
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            outputs: vec![
                Tensor::new("a", DataType::Int32, vec![1], Bytes::new()).unwrap_or_else(|_| Tensor {
                    name: "a".into(),
                    datatype: DataType::Int32,
                    shape: vec![1],
                    data: Bytes::new(),
                }),
                Tensor::new("b", DataType::Int32, vec![1], Bytes::from_static(&[5, 0, 0, 0])).unwrap(),
            ],
            shared_memory,
            ..Default::default()
        };
        let encoded = encode_response(response);
        assert_eq!(encoded.raw_output_contents.len(), 2);
        assert!(encoded.raw_output_contents[0].is_empty());
        assert_eq!(&encoded.raw_output_contents[1][..], &[5, 0, 0, 0]);
        assert_eq!(encoded.model_version, "1");
    }
}
