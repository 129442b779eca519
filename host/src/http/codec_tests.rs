use super::*;
use crate::http::error::status_code;
use crate::infer::ShmTarget;

fn decode(body: &str) -> CoreResult<HttpInferRequest> {
    decode_request(Bytes::from(body.to_string()), None, "m", None)
}

#[test]
fn decodes_nested_and_flat_json_for_every_datatype() {
    let cases = [
        ("BOOL", "[[true,false]]", vec![1u8, 0]),
        ("UINT8", "[1,255]", vec![1, 255]),
        ("INT8", "[-1,2]", vec![255, 2]),
        ("UINT16", "[1,2]", vec![1, 0, 2, 0]),
        ("INT16", "[-1,2]", vec![255, 255, 2, 0]),
        // FP16 and BF16 are refused in JSON, as Triton does (`rejects_out_of_range_and_wrong_kinds`).
    ];
    for (dt, data, bytes) in cases {
        let body = format!(r#"{{"inputs":[{{"name":"x","shape":[1,2],"datatype":"{dt}","data":{data}}}]}}"#);
        let req = decode(&body).unwrap_or_else(|e| panic!("{dt}: {e}"));
        assert_eq!(&req.request.request.inputs[0].data[..], &bytes[..], "{dt}");
    }
    let body = r#"{"inputs":[{"name":"x","shape":[2],"datatype":"BYTES","data":["ab",""]}]}"#;
    let req = decode(body).unwrap();
    assert_eq!(&req.request.request.inputs[0].data[..], b"\x02\x00\x00\x00ab\x00\x00\x00\x00");
}

#[test]
fn rejects_out_of_range_and_wrong_kinds() {
    for (dt, data) in [
        ("UINT8", "[256]"),
        ("INT8", "[-129]"),
        ("INT32", "[1.5]"),
        ("BOOL", "[1]"),
        ("FP32", "[\"a\"]"),
        ("BYTES", "[1]"),
    ] {
        let body = format!(r#"{{"inputs":[{{"name":"x","shape":[1],"datatype":"{dt}","data":{data}}}]}}"#);
        let err = decode(&body).err().unwrap_or_else(|| panic!("{dt} {data} accepted"));
        assert!(err.message.starts_with("Unable to parse"), "{}", err.message);
        assert_eq!(status_code(err.kind), 500);
    }
    for (dt, data, message) in [
        ("FP16", "[1]", "receiving FP16 data via JSON is not supported. Please use the binary data format for input x"),
        ("INT32", "5", "Unable to parse 'data': attempt to access JSON non-array as array"),
    ] {
        let body = format!(r#"{{"inputs":[{{"name":"x","shape":[1],"datatype":"{dt}","data":{data}}}]}}"#);
        assert_eq!(decode(&body).err().unwrap().message, message);
    }
    let err = decode(r#"{"inputs":[{"name":"x","shape":[3],"datatype":"INT32","data":[1,2]}]}"#).err().unwrap();
    assert_eq!(err.message, "Unable to parse 'data': Shape does not match true shape of 'data' field");
    assert_eq!(status_code(err.kind), 500, "Triton answers data/shape mismatches with 500");
    let err = decode(r#"{"inputs":[{"name":"x","shape":[1],"datatype":"FLOAT","data":[1]}]}"#).err().unwrap();
    assert!(err.message.contains("invalid datatype for input x"), "{}", err.message);
    assert_eq!(status_code(err.kind), 400);
    let err = decode(r#"{"inputs":[{"name":"x","shape":[1],"datatype":"INT32"}]}"#).err().unwrap();
    assert!(err.message.contains("But no field is set"), "{}", err.message);
}

#[test]
fn binary_extension_round_trip() {
    let json = concat!(
        r#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}],"#,
        r#""outputs":[{"name":"y","parameters":{"binary_data":true}},{"name":"z"}]}"#
    );
    let mut body = json.as_bytes().to_vec();
    body.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
    let req = decode_request(Bytes::from(body.clone()), Some(json.len() as i64), "m", Some(1)).unwrap();
    assert_eq!(req.request.request.inputs[0].data.len(), 8);
    assert!(req.binary_outputs.is_binary("y"));
    assert!(!req.binary_outputs.is_binary("z"));

    let lying = decode_request(Bytes::from(body.clone()), Some(body.len() as i64 + 1), "m", None).err().unwrap();
    assert!(lying.message.contains("inference header size should be in range"), "{}", lying.message);
    let short =
        decode_request(Bytes::from(body[..body.len() - 1].to_vec()), Some(json.len() as i64), "m", None).err().unwrap();
    assert!(short.message.contains("expecting 1 additional bytes for model 'm'"), "{}", short.message);
    let mut extra = body.clone();
    extra.push(0);
    let extra = decode_request(Bytes::from(extra), Some(json.len() as i64), "m", None).err().unwrap();
    assert!(extra.message.contains("unexpected additional input data for model 'm'"), "{}", extra.message);

    let response = InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: Some("r1".into()),
        outputs: vec![
            Tensor::new("y", DataType::Int32, vec![1], Bytes::from_static(&[7, 0, 0, 0])).unwrap(),
            Tensor::new("z", DataType::Fp32, vec![1], Bytes::from(0.1f32.to_le_bytes().to_vec())).unwrap(),
        ],
        parameters: Default::default(),
        compute: Default::default(),
        shared_memory: Default::default(),
        is_final: true,
    };
    let (out, header) = encode_response(&response, &req.binary_outputs).unwrap();
    let header = header.unwrap();
    let head: Value = serde_json::from_slice(&out[..header]).unwrap();
    assert_eq!(head["id"], "r1");
    assert_eq!(head["model_version"], "1");
    assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], 4);
    assert_eq!(&out[header..], &[7, 0, 0, 0]);
    assert!(String::from_utf8_lossy(&out[..header]).contains("[0.1]"));
}

#[test]
fn shm_inputs_are_described_in_place_not_read() {
    let shm = r#""parameters":{"shared_memory_region":"r","shared_memory_offset":8,"shared_memory_byte_size":4}"#;
    let body = format!(
        r#"{{"inputs":[{{"name":"a","shape":[1],"datatype":"INT32","data":[1]}},
            {{"name":"b","shape":[1],"datatype":"FP32",{shm}}},
            {{"name":"c","shape":[1],"datatype":"INT32","data":[3]}}]}}"#
    );
    let decoded = decode(&body).unwrap().request;
    let names: Vec<&str> = decoded.request.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    let target = ShmTarget { region: "r".into(), offset: 8, byte_size: 4 };
    let b = ShmInput { position: 1, name: "b".into(), datatype: DataType::Fp32, shape: vec![1], target };
    assert_eq!(decoded.shm_inputs, [b]);

    let both = format!(r#"{{"inputs":[{{"name":"b","shape":[1],"datatype":"FP32","data":[1.0],{shm}}}]}}"#);
    assert!(decode(&both).err().unwrap().message.ends_with(". But set 'data' 'shared_memory_region'"));
    let no_size =
        r#"{"inputs":[{"name":"b","shape":[1],"datatype":"FP32","parameters":{"shared_memory_region":"r"}}]}"#;
    // Triton's HTTP door takes a missing byte size as 0 (the region's bounds check reports it).
    assert_eq!(decode(no_size).unwrap().request.shm_inputs[0].target.byte_size, 0);
    let bad_offset = no_size.replace(r#""r"}"#, r#""r","shared_memory_offset":-1}"#);
    assert_eq!(
        decode(&bad_offset).err().unwrap().message,
        "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as unsigned-integer"
    );
}

#[test]
fn malformed_and_deeply_nested_json_is_an_error_not_a_crash() {
    assert!(decode("").err().unwrap().message.contains("empty"));
    let syntax = decode("{").err().unwrap();
    assert!(syntax.message.contains("failed to parse the request JSON buffer"), "{}", syntax.message);
    assert_eq!(status_code(syntax.kind), 500);
    assert!(decode("[]").err().unwrap().message.contains("Unable to parse"));
    assert!(decode("{}").err().unwrap().message.contains("inputs"));
    // Unterminated and deep: rapidjson's answer, found without recursion.
    let deep = "[".repeat(100_000);
    assert!(decode(&deep).err().unwrap().message.ends_with("Invalid value. at 100000"));
    let deep_data = format!(
        r#"{{"inputs":[{{"name":"x","shape":[1],"datatype":"INT32","data":{}1{}}}]}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let nested = decode(&deep_data).err().unwrap();
    assert!(nested.message.contains("JSON nesting depth exceeds maximum allowed limit (100)"), "{}", nested.message);
    assert_eq!(status_code(nested.kind), 400);
}

#[test]
fn response_parameters_are_the_top_level_parameters_object() {
    use crate::infer::{ParamValue, Parameters};
    let mut response = InferResponse { model_name: "m".into(), model_version: 1, ..Default::default() };
    let (out, _) = encode_response(&response, &BinaryOutputs { default: false, overrides: Vec::new() }).unwrap();
    let head: Value = serde_json::from_slice(&out).unwrap();
    assert!(head.get("parameters").is_none(), "no parameters, no object: {head}");
    response.parameters = Parameters::from([
        ("echo".to_string(), ParamValue::String("yes".into())),
        ("count".to_string(), ParamValue::Int(3)),
        ("flag".to_string(), ParamValue::Bool(true)),
    ]);
    let (out, _) = encode_response(&response, &BinaryOutputs { default: false, overrides: Vec::new() }).unwrap();
    let head: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(head["parameters"], serde_json::json!({"echo": "yes", "count": 3, "flag": true}));
}
