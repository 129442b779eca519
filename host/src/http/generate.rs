//! Triton's generate extension: `POST .../generate` (one response) and `.../generate_stream`
//! (server-sent events, one event per response). This is how decoupled models — which may answer
//! any number of times — are reached over HTTP.
//!
//! Request: a JSON object whose keys naming a model input become that input (a scalar is shape
//! [1], a list its nested shape; a batch dimension of 1 is added for batching models) and whose
//! other keys become request parameters. Response: `model_name`, `model_version` and one key per
//! output (a scalar for one element, else a flat list).

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::codec::{json_to_bytes, tensor_to_json};
use super::response::ok_json;
use crate::error::{CoreError, CoreResult};
use crate::frontend::{Frontend, ServedModel};
use crate::infer::{InferRequest, InferResponse, ParamValue};
use crate::tensor::Tensor;

/// Decodes a generate request for `model` (the ready version it will run on: its inputs say which
/// keys are tensors and their datatypes).
pub fn decode(model: &ServedModel, body: &[u8]) -> CoreResult<InferRequest> {
    let object: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| CoreError::invalid_arg(format!("failed to parse the generate request JSON: {e}")))?;
    let mut request = InferRequest {
        model_name: model.name().to_string(),
        model_version: Some(model.version()),
        ..Default::default()
    };
    for (key, value) in object {
        if let Some(spec) = model.inputs().iter().find(|s| s.name == key) {
            let mut shape = if model.max_batch_size() > 0 { vec![1] } else { Vec::new() };
            shape.extend(json_shape(&value));
            let data = json_to_bytes(&key, spec.datatype, &shape, &value)?;
            request.inputs.push(Tensor::new(key, spec.datatype, shape, data)?);
        } else if key == "id" {
            request.id = value.as_str().map(str::to_owned);
        } else {
            let param = match value {
                Value::Bool(b) => ParamValue::Bool(b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => ParamValue::Int(i),
                    None => match n.as_u64() {
                        Some(u) => ParamValue::Uint(u),
                        None => ParamValue::Double(n.as_f64().unwrap_or_default()),
                    },
                },
                Value::String(s) => ParamValue::String(s),
                other => {
                    return Err(CoreError::invalid_arg(format!(
                        "generate request key '{key}' is neither an input of model '{}' nor a scalar parameter \
                        ({other})",
                        model.name()
                    )));
                }
            };
            request.parameters.insert(key, param);
        }
    }
    Ok(request)
}

/// Shape of a (nested) JSON list; a scalar is [1].
fn json_shape(value: &Value) -> Vec<i64> {
    let mut shape = Vec::new();
    let mut current = value;
    while let Value::Array(items) = current {
        shape.push(items.len() as i64);
        match items.first() {
            Some(first) => current = first,
            None => break,
        }
    }
    if shape.is_empty() { vec![1] } else { shape }
}

pub fn encode(response: &InferResponse) -> Value {
    let mut object = Map::new();
    object.insert("model_name".into(), json!(response.model_name));
    object.insert("model_version".into(), json!(response.model_version.to_string()));
    if let Some(id) = &response.id {
        object.insert("id".into(), json!(id));
    }
    for tensor in &response.outputs {
        let data = serde_json::to_value(tensor_to_json(tensor)).unwrap_or(Value::Null);
        let value = match (tensor.element_count(), data) {
            (1, Value::Array(mut items)) if !items.is_empty() => items.swap_remove(0),
            (_, data) => data,
        };
        object.insert(tensor.name.clone(), value);
    }
    Value::Object(object)
}

/// Server-sent events: one `data:` event per response, an error event if a response fails.
pub async fn stream(frontend: &Frontend, model: &ServedModel, request: InferRequest) -> CoreResult<Response> {
    let responses = frontend.infer_stream(model, request).await?;
    let events = futures_util::stream::unfold(responses, |mut responses| async move {
        let item = responses.recv().await?;
        let value = match item {
            Ok(response) => encode(&response),
            Err(e) => json!({ "error": e.message }),
        };
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {value}\n\n"))), responses))
    });
    let mut response = Response::new(Body::from_stream(events));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    Ok(response)
}

/// Exactly one response, as JSON.
pub async fn single(frontend: &Frontend, served: &ServedModel, request: InferRequest) -> CoreResult<Response> {
    let model = request.model_name.clone();
    let mut responses = frontend.infer_stream(served, request).await?;
    let mut collected = Vec::new();
    while let Some(item) = responses.recv().await {
        collected.push(item?);
    }
    match collected.as_slice() {
        [one] => Ok(ok_json(&encode(one))),
        _ => Err(CoreError::unsupported(format!(
            "model '{model}' sent {} responses; use generate_stream for models that answer more than once",
            collected.len()
        ))),
    }
}
