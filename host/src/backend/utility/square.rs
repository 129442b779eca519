//! `backend: "square"` (decoupled): IN = n (INT32 [1]) gives n responses, each OUT = n (INT32
//! [1]), then the final flag alone. Parameters as in Triton's square backend (string values of
//! digits): `CUSTOM_INFER_DELAY_NS` (before each response), `CUSTOM_OUTPUT_DELAY_NS` (after each
//! output is made), `CUSTOM_FAIL_COUNT` (that many of the last responses fail with "simulated
//! failure") and `CUSTOM_EMPTY_COUNT` (that many final responses are not sent at all).

use std::time::Duration;

use bytes::Bytes;

use super::{Sink, input, invalid, is_decoupled, model_shape, numeric_parameter, shape_text, type_name, words};
use crate::backend::{ExecRequest, InstanceContext, ModelInstance};
use crate::config::{ModelConfig, pb};
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::tensor::{DataType, Tensor};

pub(super) fn create(ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
    let config = ctx.config;
    validate(config)?;
    let ns = |key: &str| Duration::from_nanos(numeric_parameter(config, key).unwrap_or(0));
    Ok(Box::new(SquareInstance {
        decoupled: is_decoupled(config),
        pacing: Pacing {
            infer_delay: ns("CUSTOM_INFER_DELAY_NS"),
            output_delay: ns("CUSTOM_OUTPUT_DELAY_NS"),
            fail_count: numeric_parameter(config, "CUSTOM_FAIL_COUNT").unwrap_or(0),
            empty_count: numeric_parameter(config, "CUSTOM_EMPTY_COUNT").unwrap_or(0),
        },
    }))
}

fn validate(config: &ModelConfig) -> CoreResult<()> {
    if config.input.len() != 1 {
        return Err(invalid(format!("expected 1 input, got {}", config.input.len())));
    }
    if config.output.len() != 1 {
        return Err(invalid(format!("expected 1 output, got {}", config.output.len())));
    }
    let (inp, out) = (&config.input[0], &config.output[0]);
    if inp.name != "IN" {
        return Err(invalid(format!("expected first input tensor name to be IN, got {}", inp.name)));
    }
    if out.name != "OUT" {
        return Err(invalid(format!("expected first output tensor name to be OUT, got {}", out.name)));
    }
    for (name, tensor_shape, data_type) in
        [("IN", model_shape(inp), inp.data_type), ("OUT", model_shape(out), out.data_type)]
    {
        if tensor_shape != [1] {
            return Err(invalid(format!("expected {name} shape to be [1], got {}", shape_text(&tensor_shape))));
        }
        if data_type != pb::DataType::TypeInt32 as i32 {
            return Err(invalid(format!("expected {name} datatype to be INT32, got {}", type_name(data_type))));
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Pacing {
    infer_delay: Duration,
    output_delay: Duration,
    fail_count: u64,
    empty_count: u64,
}

struct SquareInstance {
    decoupled: bool,
    pacing: Pacing,
}

fn sleep(d: Duration) {
    if !d.is_zero() {
        std::thread::sleep(d);
    }
}

/// Sends `count` responses of OUT = `count` (shape `out_shape`) into `sink`.
fn respond(count: u64, out_shape: &[i64], pacing: Pacing, sink: &mut Sink) {
    let value = i32::try_from(count).unwrap_or(i32::MAX);
    let failing_from = count.saturating_sub(pacing.empty_count).saturating_sub(pacing.fail_count);
    let empty_from = count.saturating_sub(pacing.empty_count);
    for index in 0..empty_from {
        if sink.closed() {
            return;
        }
        sleep(pacing.infer_delay);
        let outputs = if index >= failing_from {
            Err(CoreError::new(ErrorKind::Unknown, "simulated failure"))
        } else {
            let out =
                Tensor::new("OUT", DataType::Int32, out_shape.to_vec(), Bytes::copy_from_slice(&value.to_le_bytes()));
            sleep(pacing.output_delay);
            out.map(|t| vec![t])
        };
        if !sink.send(outputs) {
            return;
        }
    }
}

impl ModelInstance for SquareInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        let mut results = Vec::with_capacity(batch.len());
        for request in batch {
            let prepared = input(&request.inputs, "IN").and_then(|tensor| {
                if tensor.shape.len() == 2 && tensor.shape[0] != 1 {
                    return Err(CoreError::invalid_arg("unexpected shape for IN input"));
                }
                let n = words(tensor).next().map_or(0, i32::from_le_bytes);
                let count = u64::try_from(n).map_err(|_| {
                    CoreError::invalid_arg(format!("IN must not be negative for a square model, got {n}"))
                })?;
                Ok((count, vec![1i64; tensor.shape.len()]))
            });
            let (count, out_shape) = match prepared {
                Ok(p) => p,
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            let pacing = self.pacing;
            match (self.decoupled, request.responder) {
                (true, Some(responder)) => {
                    let spawned = std::thread::Builder::new().name("square-responses".into()).spawn(move || {
                        respond(count, &out_shape, pacing, &mut Sink::Stream(responder));
                    });
                    results.push(
                        spawned
                            .map(|_| Vec::new())
                            .map_err(|e| CoreError::internal(format!("failed to start the response thread: {e}"))),
                    );
                }
                _ => {
                    let mut sink = Sink::Collect(Vec::new());
                    respond(count, &out_shape, pacing, &mut sink);
                    results.push(sink.into_single());
                }
            }
        }
        results
    }
}
