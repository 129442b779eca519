//! `backend: "repeat"` (decoupled): for IN (INT32, one dimension) it sends one response per
//! element, the e-th after sleeping DELAY[e] ms (UINT32, IN's shape), with OUT = IN[e] (INT32
//! [1]) and IDX = e (UINT32 [1]); then the final flag alone. The instance is held for WAIT ms
//! (UINT32 [1]) after the request starts, so responses of several requests interleave as in
//! Triton. Responses come from a thread of the request's own, which stops when the caller goes.

use bytes::Bytes;

use super::{Sink, input, invalid, is_decoupled, model_shape, shape_text, sleep_ms, type_name, words};
use crate::backend::{ExecRequest, InstanceContext, ModelInstance};
use crate::config::{ModelConfig, pb};
use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, Tensor};

pub(super) fn create(ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
    validate(ctx.config)?;
    Ok(Box::new(RepeatInstance { decoupled: is_decoupled(ctx.config) }))
}

fn validate(config: &ModelConfig) -> CoreResult<()> {
    if config.max_batch_size != 0 {
        return Err(invalid("repeat backend only supports models with max_batch_size == 0"));
    }
    if config.input.len() != 3 {
        return Err(invalid(format!("expected 3 inputs, got {}", config.input.len())));
    }
    if config.output.len() != 2 {
        return Err(invalid(format!("expected 2 outputs, got {}", config.output.len())));
    }
    let named = |actual: &str, ordinal: &str, kind: &str, expected: &str| {
        if actual == expected {
            Ok(())
        } else {
            Err(invalid(format!("expected {ordinal} {kind} tensor name to be {expected}, got {actual}")))
        }
    };
    let (inp, del, wait) = (&config.input[0], &config.input[1], &config.input[2]);
    let (out, idx) = (&config.output[0], &config.output[1]);
    named(&inp.name, "first", "input", "IN")?;
    named(&del.name, "second", "input", "DELAY")?;
    named(&wait.name, "third", "input", "WAIT")?;
    named(&out.name, "first", "output", "OUT")?;
    named(&idx.name, "second", "output", "IDX")?;
    let (in_shape, delay_shape) = (model_shape(inp), model_shape(del));
    if in_shape.len() != 1 {
        return Err(invalid(format!("expected IN shape to have one dimension, got {}", shape_text(&in_shape))));
    }
    if in_shape != delay_shape {
        return Err(invalid(format!(
            "expected IN and DELAY shape to match, got {} and {}",
            shape_text(&in_shape),
            shape_text(&delay_shape)
        )));
    }
    for (name, shape) in [("WAIT", model_shape(wait)), ("OUT", model_shape(out)), ("IDX", model_shape(idx))] {
        if shape != [1] {
            return Err(invalid(format!("expected {name} shape to be [1], got {}", shape_text(&shape))));
        }
    }
    for (name, data_type, expected) in [
        ("IN", inp.data_type, pb::DataType::TypeInt32),
        ("DELAY", del.data_type, pb::DataType::TypeUint32),
        ("WAIT", wait.data_type, pb::DataType::TypeUint32),
        ("OUT", out.data_type, pb::DataType::TypeInt32),
        ("IDX", idx.data_type, pb::DataType::TypeUint32),
    ] {
        if data_type != expected as i32 {
            let wanted = if expected == pb::DataType::TypeInt32 { "INT32" } else { "UINT32" };
            return Err(invalid(format!("expected {name} datatype to be {wanted}, got {}", type_name(data_type))));
        }
    }
    Ok(())
}

struct RepeatInstance {
    decoupled: bool,
}

/// One request's work, moved to its own thread.
struct Job {
    values: Vec<i32>,
    delays: Vec<u32>,
    want_out: bool,
    want_idx: bool,
}

impl Job {
    fn from_request(request: &ExecRequest) -> CoreResult<(Self, u64)> {
        let values: Vec<i32> = words(input(&request.inputs, "IN")?).map(i32::from_le_bytes).collect();
        let delay = input(&request.inputs, "DELAY")?;
        let delays: Vec<u32> = words(delay).map(u32::from_le_bytes).collect();
        if delays.len() != values.len() {
            let in_shape = &input(&request.inputs, "IN")?.shape;
            return Err(CoreError::invalid_arg(format!(
                "expected IN and DELAY shape to match, got {} and {}",
                shape_text(in_shape),
                shape_text(&delay.shape)
            )));
        }
        let wait = words(input(&request.inputs, "WAIT")?).next().map_or(0, u32::from_le_bytes);
        let wants = |name: &str| request.outputs.iter().any(|o| o == name);
        Ok((Self { values, delays, want_out: wants("OUT"), want_idx: wants("IDX") }, u64::from(wait)))
    }

    fn run(self, sink: &mut Sink) {
        for (e, (value, delay)) in self.values.iter().zip(&self.delays).enumerate() {
            if sink.closed() {
                return;
            }
            sleep_ms(u64::from(*delay));
            let mut outputs = Vec::with_capacity(2);
            if self.want_out {
                outputs.push(scalar("OUT", DataType::Int32, value.to_le_bytes()));
            }
            if self.want_idx {
                let index = u32::try_from(e).unwrap_or(u32::MAX);
                outputs.push(scalar("IDX", DataType::Uint32, index.to_le_bytes()));
            }
            if !sink.send(outputs.into_iter().collect()) {
                return;
            }
        }
    }
}

/// A one-element tensor of shape [1].
fn scalar(name: &str, datatype: DataType, bytes: [u8; 4]) -> CoreResult<Tensor> {
    Tensor::new(name, datatype, vec![1], Bytes::copy_from_slice(&bytes))
}

impl ModelInstance for RepeatInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        let mut results = Vec::with_capacity(batch.len());
        for request in batch {
            let (job, wait_ms) = match Job::from_request(&request) {
                Ok(job) => job,
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            match (self.decoupled, request.responder) {
                (true, Some(responder)) => {
                    // The stream ends (final flag) when the thread drops the responder.
                    let spawned = std::thread::Builder::new().name("repeat-responses".into()).spawn(move || {
                        job.run(&mut Sink::Stream(responder));
                    });
                    results.push(
                        spawned
                            .map(|_| Vec::new())
                            .map_err(|e| CoreError::internal(format!("failed to start the response thread: {e}"))),
                    );
                    sleep_ms(wait_ms);
                }
                _ => {
                    let mut sink = Sink::Collect(Vec::new());
                    job.run(&mut sink);
                    results.push(sink.into_single());
                }
            }
        }
        results
    }
}
