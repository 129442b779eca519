//! `POST /v1/embeddings`: the body (`input` as a string, a list of strings, a list of tokens or a
//! list of token lists; `encoding_format` `float` or `base64`; `dimensions`) and the answer.
//!
//! `base64` is what the official client asks for when its caller names no format: the vector's
//! float32 values, little-endian, base64-encoded. `dimensions` keeps the first `dimensions`
//! values and normalises them again to length 1, as OpenAI shortens its own embeddings.

use base64::Engine;
use serde_json::{Value, json};

use super::error::{OpenAiError, OpenAiResult};
use super::schema::{Prompt, bounded, integer, known_fields, model, object, present, string, token_list, wrong_type};
use crate::infer::InferResponse;
use crate::tensor::DataType;

/// At most this many inputs in one call (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingRequest {
    pub model: String,
    pub inputs: Vec<Prompt>,
    pub encoding: Encoding,
    pub dimensions: Option<u64>,
}

fn inputs(object: &serde_json::Map<String, Value>) -> OpenAiResult<Vec<Prompt>> {
    let expected = "a string, a list of strings, a list of tokens or a list of token lists";
    let inputs = match present(object, "input") {
        None => return Err(OpenAiError::invalid("Missing required parameter: 'input'.", Some("input"))),
        Some(Value::String(text)) => vec![Prompt::Text(text.clone())],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(OpenAiError::invalid("'input' must not be an empty list.", Some("input")));
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(Value::as_str).map(|s| Prompt::Text(s.to_string())).collect()
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_array) => items
            .iter()
            .map(|item| {
                item.as_array()
                    .and_then(|t| token_list(t))
                    .map(Prompt::Tokens)
                    .ok_or_else(|| wrong_type("input", expected))
            })
            .collect::<OpenAiResult<_>>()?,
        Some(Value::Array(items)) => {
            vec![Prompt::Tokens(token_list(items).ok_or_else(|| wrong_type("input", expected))?)]
        }
        Some(_) => return Err(wrong_type("input", expected)),
    };
    if inputs.len() > MAX_INPUTS {
        return Err(OpenAiError::invalid(
            format!("{} inputs given: at most {MAX_INPUTS} are allowed.", inputs.len()),
            Some("input"),
        ));
    }
    for (i, input) in inputs.iter().enumerate() {
        let empty = match input {
            Prompt::Text(text) => text.is_empty(),
            Prompt::Tokens(tokens) => tokens.is_empty(),
        };
        if empty {
            return Err(OpenAiError::invalid(format!("'input' [{i}] is empty."), Some("input")));
        }
    }
    Ok(inputs)
}

impl EmbeddingRequest {
    pub fn parse(body: &[u8]) -> OpenAiResult<Self> {
        let object = object(body)?;
        known_fields(&object, &["model", "input", "encoding_format", "dimensions", "user"])?;
        let encoding = match string(&object, "encoding_format")? {
            None | Some("float") => Encoding::Float,
            Some("base64") => Encoding::Base64,
            Some(other) => {
                return Err(OpenAiError::invalid(
                    format!("Invalid value: '{}'. Supported values are: 'float' and 'base64'.", bounded(other)),
                    Some("encoding_format"),
                ));
            }
        };
        let _user = string(&object, "user")?;
        Ok(Self {
            model: model(&object)?,
            inputs: inputs(&object)?,
            encoding,
            dimensions: integer(&object, "dimensions", 1)?.map(|n| n as u64),
        })
    }
}

/// The answer from the adapter's response: `embedding` FP32 `[N, D]`, `num_input_tokens`.
pub fn answer(request: &EmbeddingRequest, response: &InferResponse) -> OpenAiResult<Value> {
    let internal = |what: &str| {
        OpenAiError::from(crate::error::CoreError::internal(format!(
            "the adapter of model '{}' answered {what}",
            request.model
        )))
    };
    let output =
        response.outputs.iter().find(|t| t.name == "embedding").ok_or_else(|| internal("no 'embedding' output"))?;
    let n = request.inputs.len();
    let depth = match output.shape.as_slice() {
        [rows, depth] if *rows == n as i64 && *depth > 0 && output.datatype == DataType::Fp32 => *depth as usize,
        _ => return Err(internal("an 'embedding' that is not FP32 [inputs, dimensions]")),
    };
    if output.data.len() != n * depth * 4 {
        return Err(internal("an 'embedding' of the wrong size"));
    }
    let keep = match request.dimensions {
        Some(d) if d as usize > depth => {
            return Err(OpenAiError::invalid(
                format!("model '{}' makes embeddings of {depth} dimensions: 'dimensions' {d} is more", request.model),
                Some("dimensions"),
            ));
        }
        Some(d) => d as usize,
        None => depth,
    };
    let values: Vec<f32> = output.data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let data: Vec<Value> = values
        .chunks_exact(depth)
        .enumerate()
        .map(|(index, row)| {
            let mut row = row[..keep].to_vec();
            if keep < depth {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|v| *v /= norm);
            }
            let embedding = match request.encoding {
                Encoding::Float => json!(row),
                Encoding::Base64 => {
                    let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                    Value::from(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    let tokens = super::convention::count(response, "num_input_tokens").unwrap_or(0);
    Ok(json!({
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_shape_and_format_is_read() {
        let parse = |body: &str| EmbeddingRequest::parse(body.as_bytes());
        let one = parse(r#"{"model": "m", "input": "hi"}"#).expect("a string");
        assert_eq!((one.inputs.len(), one.encoding), (1, Encoding::Float));
        let many = parse(r#"{"model": "m", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8}"#)
            .expect("strings");
        assert_eq!((many.inputs.len(), many.encoding, many.dimensions), (2, Encoding::Base64, Some(8)));
        let tokens = parse(r#"{"model": "m", "input": [[1, 2], [3]]}"#).expect("token lists");
        assert_eq!(tokens.inputs, vec![Prompt::Tokens(vec![1, 2]), Prompt::Tokens(vec![3])]);
        for (body, expected) in [
            (r#"{"model": "m"}"#, "'input'"),
            (r#"{"model": "m", "input": []}"#, "empty list"),
            (r#"{"model": "m", "input": ["a", ""]}"#, "[1] is empty"),
            (r#"{"model": "m", "input": "a", "encoding_format": "hex"}"#, "'float' and 'base64'"),
            (r#"{"model": "m", "input": "a", "dimensions": 0}"#, "'dimensions'"),
        ] {
            let error = parse(body).expect_err(body);
            assert!(error.message.contains(expected), "{body}: {}", error.message);
        }
    }
}
