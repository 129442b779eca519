//! Models that already speak one of Triton's LLM tensor conventions, served over `/v1` without an
//! adapter, as Triton's OpenAI frontend serves them. Both take the prompt as `text_input` (BYTES)
//! and answer `text_output` (BYTES), optionally with `num_input_tokens` / `num_output_tokens`
//! (which `usage` reports; without them `usage` is null, as in Triton's frontend):
//! - vLLM (`backend: "vllm"`, or any model with a `sampling_parameters` input): the sampling
//!   parameters travel as one JSON string in `sampling_parameters`;
//! - TensorRT-LLM (any other): each parameter is a tensor of its own (`max_tokens`,
//!   `temperature`, `top_p`, `seed` or `random_seed`, `stop_words`, the penalties).
//!
//! Only tensors the model declares are sent, and a parameter the model has no way to take is
//! refused by name rather than ignored: an answer that silently ignored `temperature` or `stop`
//! would look like the model's own behaviour.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::error::{OpenAiError, OpenAiResult};
use super::schema::Sampling;
use crate::config::{IoSpec, config_datatype};
use crate::frontend::ServedModel;
use crate::infer::{InferRequest, InferResponse};
use crate::tensor::{DataType, Tensor, bytes_elements, push_bytes_element};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    Vllm,
    TrtLlm,
}

/// The convention `model` speaks, if any: a BYTES `text_input` and a BYTES `text_output`.
pub fn of(model: &ServedModel) -> Option<Convention> {
    let input = |name: &str| model.inputs().iter().any(|s| s.name == name && s.datatype == DataType::Bytes);
    let text_output = model
        .config()
        .output
        .iter()
        .any(|o| o.name == "text_output" && config_datatype(&o.name, o.data_type).ok() == Some(DataType::Bytes));
    if !input("text_input") || !text_output {
        return None;
    }
    if model.config().backend == "vllm" || input("sampling_parameters") {
        Some(Convention::Vllm)
    } else {
        Some(Convention::TrtLlm)
    }
}

/// One generation's request: the prompt and the parameters, in the model's own tensors.
pub struct Generation<'a> {
    pub prompt: &'a str,
    pub sampling: &'a Sampling,
    pub stream: bool,
    pub echo: bool,
}

/// The value of one scalar tensor.
enum Scalar<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(&'a str),
}

/// The request for `model`, refusing by name what it cannot take.
pub fn request(model: &ServedModel, convention: Convention, generation: &Generation) -> OpenAiResult<InferRequest> {
    let spec = |name: &str| model.inputs().iter().find(|s| s.name == name);
    let mut inputs = vec![tensor(model, spec("text_input"), Scalar::Text(generation.prompt))?];
    let mut send = |name: &str, value: Scalar| -> OpenAiResult<bool> {
        match spec(name) {
            Some(spec) => {
                inputs.push(tensor(model, Some(spec), value)?);
                Ok(true)
            }
            None => Ok(false),
        }
    };
    let refuse = |param: &str| {
        OpenAiError::invalid(
            format!("model '{}' cannot honour '{param}': its config declares no input that takes it", model.name()),
            Some(param),
        )
    };
    // A model without `stream` answers as it always does; the door streams what comes.
    send("stream", Scalar::Bool(generation.stream))?;
    let echo_sent = send("exclude_input_in_output", Scalar::Bool(!generation.echo))?;
    if generation.echo && !echo_sent {
        return Err(refuse("echo"));
    }
    send("return_num_input_tokens", Scalar::Bool(true))?;
    send("return_num_output_tokens", Scalar::Bool(true))?;
    let sampling = generation.sampling;
    match convention {
        Convention::Vllm => {
            let mut params = Map::new();
            let mut put = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    params.insert(key.to_string(), value);
                }
            };
            put("max_tokens", sampling.max_tokens.map(Value::from));
            put("temperature", sampling.temperature.map(Value::from));
            put("top_p", sampling.top_p.map(Value::from));
            put("seed", sampling.seed.map(Value::from));
            put("frequency_penalty", sampling.frequency_penalty.map(Value::from));
            put("presence_penalty", sampling.presence_penalty.map(Value::from));
            put("stop", (!sampling.stop.is_empty()).then(|| json!(sampling.stop)));
            let given = first_given(sampling);
            if !send("sampling_parameters", Scalar::Text(&Value::Object(params).to_string()))?
                && let Some(param) = given
            {
                // backend "vllm" without the input: nothing can carry the parameters
                return Err(refuse(param));
            }
        }
        Convention::TrtLlm => {
            let given: [(&str, &[&str], Option<Scalar>); 6] = [
                ("max_tokens", &["max_tokens"], sampling.max_tokens.map(|n| Scalar::Int(n as i64))),
                ("temperature", &["temperature"], sampling.temperature.map(Scalar::Float)),
                ("top_p", &["top_p", "runtime_top_p"], sampling.top_p.map(Scalar::Float)),
                ("seed", &["seed", "random_seed"], sampling.seed.map(Scalar::Int)),
                ("frequency_penalty", &["frequency_penalty"], sampling.frequency_penalty.map(Scalar::Float)),
                ("presence_penalty", &["presence_penalty"], sampling.presence_penalty.map(Scalar::Float)),
            ];
            for (param, names, value) in given {
                let Some(value) = value else { continue };
                let Some(name) = names.iter().find(|n| spec(n).is_some()) else { return Err(refuse(param)) };
                send(name, value)?;
            }
            if !sampling.stop.is_empty() {
                let spec = spec("stop_words").ok_or_else(|| refuse("stop"))?;
                inputs.push(list_tensor(model, spec, &sampling.stop)?);
            }
        }
    }
    Ok(InferRequest {
        model_name: model.name().to_string(),
        model_version: Some(model.version()),
        inputs,
        ..Default::default()
    })
}

fn first_given(sampling: &Sampling) -> Option<&'static str> {
    [
        ("max_tokens", sampling.max_tokens.is_some()),
        ("temperature", sampling.temperature.is_some()),
        ("top_p", sampling.top_p.is_some()),
        ("seed", sampling.seed.is_some()),
        ("stop", !sampling.stop.is_empty()),
        ("frequency_penalty", sampling.frequency_penalty.is_some()),
        ("presence_penalty", sampling.presence_penalty.is_some()),
    ]
    .into_iter()
    .find_map(|(name, given)| given.then_some(name))
}

/// The shape of one element for `spec`: a batch of one for batching models, every dimension 1.
fn one_element(model: &ServedModel, spec: &IoSpec) -> Vec<i64> {
    let batch = (model.max_batch_size() > 0).then_some(1);
    batch.into_iter().chain(spec.dims.iter().map(|_| 1)).collect()
}

fn tensor(model: &ServedModel, spec: Option<&IoSpec>, value: Scalar) -> OpenAiResult<Tensor> {
    let spec = spec.ok_or_else(|| OpenAiError::invalid(format!("model '{}' has no text_input", model.name()), None))?;
    let wrong = || {
        let (name, datatype) = (model.name(), spec.datatype.as_str());
        OpenAiError::invalid(
            format!("model '{name}' declares '{}' as {datatype}, which /v1 cannot fill", spec.name),
            None,
        )
    };
    let data: Vec<u8> = match (value, spec.datatype) {
        (Scalar::Text(text), DataType::Bytes) => {
            let mut out = Vec::new();
            push_bytes_element(&mut out, text.as_bytes())?;
            out
        }
        (Scalar::Bool(b), DataType::Bool) => vec![u8::from(b)],
        (Scalar::Int(n), datatype) => match datatype {
            DataType::Int32 => (n.clamp(i32::MIN.into(), i32::MAX.into()) as i32).to_le_bytes().to_vec(),
            DataType::Int64 => n.to_le_bytes().to_vec(),
            DataType::Uint32 => (n.clamp(0, u32::MAX.into()) as u32).to_le_bytes().to_vec(),
            DataType::Uint64 => (n.max(0) as u64).to_le_bytes().to_vec(),
            _ => return Err(wrong()),
        },
        (Scalar::Float(x), DataType::Fp32) => (x as f32).to_le_bytes().to_vec(),
        (Scalar::Float(x), DataType::Fp64) => x.to_le_bytes().to_vec(),
        _ => return Err(wrong()),
    };
    Ok(Tensor::unchecked(spec.name.clone(), spec.datatype, one_element(model, spec), Bytes::from(data)))
}

/// A BYTES list (`stop_words`): its last dimension holds the items.
fn list_tensor(model: &ServedModel, spec: &IoSpec, items: &[String]) -> OpenAiResult<Tensor> {
    if spec.datatype != DataType::Bytes {
        return Err(OpenAiError::invalid(
            format!("model '{}' takes stop_words as {}", model.name(), spec.datatype.as_str()),
            Some("stop"),
        ));
    }
    let mut data = Vec::new();
    for item in items {
        push_bytes_element(&mut data, item.as_bytes())?;
    }
    let mut shape = one_element(model, spec);
    if let Some(last) = shape.last_mut() {
        *last = items.len() as i64;
    }
    Ok(Tensor::unchecked(spec.name.clone(), DataType::Bytes, shape, Bytes::from(data)))
}

/// The text of one response (its `text_output` elements, joined); empty for a response without
/// one (a decoupled model's closing flag).
pub fn text(response: &InferResponse) -> OpenAiResult<String> {
    let Some(output) = response.outputs.iter().find(|t| t.name == "text_output") else { return Ok(String::new()) };
    let mut text = Vec::new();
    for element in bytes_elements(&output.data) {
        text.extend_from_slice(element);
    }
    String::from_utf8(text).map_err(|_| {
        OpenAiError::from(crate::error::CoreError::internal(format!(
            "model '{}' answered text_output that is not UTF-8",
            response.model_name
        )))
    })
}

/// `num_input_tokens` or `num_output_tokens` of a response, when the model reports it.
pub fn count(response: &InferResponse, name: &str) -> Option<u64> {
    let output = response.outputs.iter().find(|t| t.name == name)?;
    let data = output.data.as_ref();
    Some(match output.datatype {
        DataType::Int32 => i32::from_le_bytes(data.get(..4)?.try_into().ok()?).max(0) as u64,
        DataType::Uint32 => u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as u64,
        DataType::Int64 => i64::from_le_bytes(data.get(..8)?.try_into().ok()?).max(0) as u64,
        DataType::Uint64 => u64::from_le_bytes(data.get(..8)?.try_into().ok()?),
        _ => return None,
    })
}
