//! `backend: "identity"`: each requested `OUTPUT<k>` is input `INPUT<k>` as the request sent it
//! (datatype, shape and bytes, shared without a copy). An optional input that is absent gives
//! zeros in its configured shape. Parameters: `execute_delay_ms` (sleep per execution, times
//! `instance_wise_delay_multiplier` x the instance's index when that is set) and
//! `creation_delay_sec` (sleep when an instance is created), as in Triton's identity backend.

use std::time::Duration;

use super::{invalid, model_shape, numeric_parameter, shape_text, sleep_ms, type_name};
use crate::backend::{ExecRequest, InstanceContext, ModelInstance};
use crate::config::{ModelConfig, datatype_from_config};
use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, Tensor, zeros};

pub(super) fn create(ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
    let config = ctx.config;
    validate(config)?;
    if let Some(secs) = numeric_parameter(config, "creation_delay_sec") {
        tracing::info!(model = config.name.as_str(), "Creation delay is set to: {secs}");
        std::thread::sleep(Duration::from_secs(secs));
    }
    let index: u64 = ctx.instance_name.rsplit('_').next().and_then(|i| i.parse().ok()).unwrap_or(0);
    let delay_ms = numeric_parameter(config, "execute_delay_ms").map(|ms| {
        let multiplier = numeric_parameter(config, "instance_wise_delay_multiplier").unwrap_or(0) * index;
        ms * multiplier.max(1)
    });
    let optional_zeros = config
        .input
        .iter()
        .filter(|i| i.optional)
        .map(|i| {
            let datatype = datatype_from_config(i.data_type).unwrap_or(DataType::Bytes);
            let dims = i.dims.iter().map(|&d| if d < 0 { 1 } else { d }).collect();
            (i.name.clone(), datatype, dims)
        })
        .collect();
    Ok(Box::new(IdentityInstance { delay_ms, batching: config.max_batch_size > 0, optional_zeros }))
}

/// Triton's identity checks: inputs and outputs pair up by the suffix of `INPUT<k>`/`OUTPUT<k>`
/// with equal datatypes and shapes.
fn validate(config: &ModelConfig) -> CoreResult<()> {
    if config.input.len() != config.output.len() {
        return Err(invalid("model configuration must have equal input/output pairs"));
    }
    for input in &config.input {
        if !input.name.starts_with("INPUT") {
            return Err(invalid(format!("expected input name to follow INPUT<index> pattern, got '{}'", input.name)));
        }
    }
    for output in &config.output {
        let Some(index) = output.name.strip_prefix("OUTPUT") else {
            return Err(invalid(format!(
                "expected output name to follow OUTPUT<index> pattern, got '{}'",
                output.name
            )));
        };
        let Some(input) = config.input.iter().find(|i| i.name.strip_prefix("INPUT") == Some(index)) else {
            return Err(invalid("expected input and output indices to match"));
        };
        if input.data_type != output.data_type {
            return Err(invalid(format!(
                "expected input and output datatype to match, got {} and {}",
                type_name(input.data_type),
                type_name(output.data_type)
            )));
        }
        let (a, b) = (model_shape(input), model_shape(output));
        if a != b {
            return Err(invalid(format!(
                "expected input and output shape to match, got {} and {}",
                shape_text(&a),
                shape_text(&b)
            )));
        }
    }
    Ok(())
}

struct IdentityInstance {
    delay_ms: Option<u64>,
    batching: bool,
    /// Optional inputs: (name, datatype, dims with -1 as 1) for the zeros that stand in for them.
    optional_zeros: Vec<(String, DataType, Vec<i64>)>,
}

impl IdentityInstance {
    fn respond(&self, request: &ExecRequest) -> CoreResult<Vec<Tensor>> {
        let batch = request.inputs.first().and_then(|t| t.shape.first().copied()).unwrap_or(1);
        let mut outputs = Vec::with_capacity(request.outputs.len());
        for name in &request.outputs {
            let index = name.strip_prefix("OUTPUT").unwrap_or_default();
            let input_name = format!("INPUT{index}");
            match request.inputs.iter().find(|t| t.name == input_name) {
                Some(input) => outputs.push(Tensor { name: name.clone(), ..input.clone() }),
                None => {
                    let (_, datatype, dims) = self
                        .optional_zeros
                        .iter()
                        .find(|(n, _, _)| *n == input_name)
                        .ok_or_else(|| CoreError::unsupported(format!("failed to get input '{input_name}'")))?;
                    let shape: Vec<i64> = if self.batching {
                        std::iter::once(batch).chain(dims.iter().copied()).collect()
                    } else {
                        dims.clone()
                    };
                    outputs.push(Tensor::new(name.clone(), *datatype, shape.clone(), zeros(*datatype, &shape)?)?);
                }
            }
        }
        Ok(outputs)
    }
}

impl ModelInstance for IdentityInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        if let Some(ms) = self.delay_ms {
            sleep_ms(ms);
        }
        batch.iter().map(|r| self.respond(r)).collect()
    }
}
