//! A model's inputs and outputs as its config declares them, and the checks every request
//! passes: names, datatypes, shapes and batch size on the way in (with input reshapes applied),
//! and on the way out the model's outputs checked, reshaped back and classified.

use std::collections::HashMap;
use std::sync::Arc;

use super::classify::classify;
use super::triton_order::triton_input_order;
use crate::backend::ExecRequest;
use crate::config::{IoSpec, ModelConfig};
use crate::error::{CoreError, CoreResult};
use crate::infer::{InferRequest, RequestedOutput};
use crate::tensor::{DataType, Tensor, format_shape};

/// The tensor side of a model version: what requests are checked against.
#[derive(Debug, Clone)]
pub struct ModelIo {
    pub name: String,
    /// 0: the model does not batch (no batch dimension).
    pub max_batch_size: i32,
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<IoSpec>,
    /// Classification labels by output name (`label_filename`).
    labels: HashMap<String, Arc<Vec<String>>>,
}

impl ModelIo {
    /// Reads the config's inputs and outputs, and the label files next to it in `model_dir`.
    pub fn from_config(config: &ModelConfig, model_dir: &std::path::Path) -> CoreResult<Self> {
        let inputs = config.input.iter().map(|i| IoSpec::from_config(i, i.optional)).collect::<CoreResult<Vec<_>>>()?;
        let outputs = config.output.iter().map(|o| IoSpec::from_config(o, false)).collect::<CoreResult<Vec<_>>>()?;
        let mut labels = HashMap::new();
        for output in config.output.iter().filter(|o| !o.label_filename.is_empty()) {
            let path = model_dir.join(&output.label_filename);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CoreError::invalid_arg(format!(
                    "failed to read label file {} for output '{}': {e}",
                    path.display(),
                    output.name
                ))
            })?;
            labels.insert(output.name.clone(), Arc::new(text.lines().map(str::to_owned).collect()));
        }
        Ok(Self { name: config.name.clone(), max_batch_size: config.max_batch_size, inputs, outputs, labels })
    }

    /// Checks a request against the config and applies input reshapes, in the order Triton's
    /// core (`InferenceRequest::Normalize`) checks, with its messages: duplicate inputs, the
    /// requested outputs (sorted by name), the number of inputs, then per input (in Triton's
    /// hash-map order, see [`triton_input_order`]) the name, batch dimension and batch size,
    /// datatype, shape, and last the data's size. Door decoders leave sizes to this, so a request
    /// gets the same first error over HTTP, gRPC and shared memory. Returns the instance-facing
    /// request, the batch size (1 for models that do not batch) and the outputs to return.
    ///
    /// The request is taken by value: its tensors move into the instance-facing request (the
    /// per-request path copies no name, shape or data).
    pub fn prepare(&self, mut request: InferRequest) -> CoreResult<(ExecRequest, usize, Vec<RequestedOutput>)> {
        let model = &self.name;
        let requested = std::mem::take(&mut request.outputs);
        // Built only when a check fails: the request's id as Triton's message prefix.
        let log = || request_prefix(&request);
        let invalid = |text: String| CoreError::invalid_arg(format!("{}{text}", log()));
        for (i, tensor) in request.inputs.iter().enumerate() {
            if request.inputs[..i].iter().any(|t| t.name == tensor.name) {
                return Err(invalid(format!("input '{}' already exists in request", tensor.name)));
            }
        }
        // Triton 2.7x refuses an output asked for twice (2.51 answered it once).
        for (i, output) in requested.iter().enumerate() {
            if requested[..i].iter().any(|o| o.name == output.name) {
                return Err(invalid(format!("output '{}' already exists in request", output.name)));
            }
        }
        let wanted = self.check_outputs(requested)?;
        let order = input_order(&request.inputs);
        let in_order = || order.iter().map(|&i| &request.inputs[i]);
        let required = self.inputs.iter().filter(|s| !s.optional).count();
        if request.inputs.len() > self.inputs.len() || request.inputs.len() < required {
            return Err(invalid(self.input_count_message(&request, in_order().map(|t| t.name.as_str()))));
        }
        let batching = self.max_batch_size > 0;
        // Triton keeps the batch size in a u32 and 0 means "not set yet".
        let mut batch_size: u32 = 0;
        if batching {
            for tensor in in_order() {
                self.spec(&tensor.name)?;
                let Some(&first) = tensor.shape.first() else {
                    return Err(invalid(format!(
                        "input '{}' has no shape but model requires batch dimension for '{model}'",
                        tensor.name
                    )));
                };
                if batch_size == 0 {
                    batch_size = first as u32;
                } else if first != i64::from(batch_size) {
                    return Err(invalid(format!(
                        "input '{}' batch size does not match other inputs for '{model}'",
                        tensor.name
                    )));
                }
            }
        }
        if batch_size as i32 > self.max_batch_size {
            return Err(invalid(format!(
                "inference request batch-size must be <= {} for '{model}'",
                self.max_batch_size
            )));
        }
        // (position, the shape the model uses) of the inputs the config reshapes: applied once
        // every check has passed, when the tensors move into the instance's request.
        let mut reshaped: Vec<(usize, Vec<i64>)> = Vec::new();
        for &position in &order {
            let tensor = &request.inputs[position];
            let spec = self.spec(&tensor.name)?;
            if request.unknown_datatype_inputs.contains(&tensor.name) {
                return Err(invalid(format!(
                    "inference input '{}' data-type is '<invalid>', but model '{model}' expects '{}'",
                    tensor.name, spec.datatype
                )));
            }
            if tensor.datatype != spec.datatype {
                return Err(invalid(format!(
                    "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                    tensor.name, tensor.datatype, spec.datatype
                )));
            }
            let dims = if batching { &tensor.shape[1..] } else { &tensor.shape[..] };
            match shape_check(dims, &spec.dims) {
                ShapeCheck::Matches => {}
                ShapeCheck::Wildcard => {
                    return Err(invalid(format!(
                        "All input dimensions should be specified for input '{}' for model '{model}', got {}",
                        tensor.name,
                        format_shape(&tensor.shape)
                    )));
                }
                ShapeCheck::Differs => {
                    let expected: Vec<i64> =
                        if batching { [-1].iter().chain(&spec.dims).copied().collect() } else { spec.dims.clone() };
                    return Err(invalid(format!(
                        "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}. {}",
                        tensor.name,
                        format_shape(&expected),
                        format_shape(&tensor.shape),
                        if batching { BATCH_NOTE } else { "" }
                    )));
                }
            }
            // Triton counts elements over its own batch size (a u32) and the other dims,
            // leaving the batch out when it is 0, multiplying without overflow checks.
            let batch = if batching && batch_size > 0 { i64::from(batch_size) } else { 1 };
            let count = dims.iter().fold(batch, |acc, &d| acc.wrapping_mul(d));
            self.check_data(log, tensor, count)?;
            if let Some(reshape) = &spec.reshape {
                let mut shape: Vec<i64> = if batching { vec![tensor.shape[0]] } else { Vec::new() };
                shape.extend(fill_variable_dims(reshape, &spec.dims, dims));
                reshaped.push((position, shape));
            }
        }
        for tensor in in_order().filter(|t| t.datatype == DataType::Bytes) {
            bytes_overrun(tensor)?;
        }
        // Triton hands these to the backend (negative dims whose product fits, counts that wrap
        // to the data's size); they are refused here, so backends only see consistent tensors.
        for tensor in in_order() {
            tensor.validate().map_err(|e| invalid(e.message))?;
        }
        let missing = self.inputs.iter().any(|s| !s.optional && !request.inputs.iter().any(|t| t.name == s.name));
        if missing {
            return Err(invalid(self.input_count_message(&request, in_order().map(|t| t.name.as_str()))));
        }
        if batching && batch_size == 0 {
            return Err(invalid(format!("inference request batch-size must be >= 1 for '{model}'")));
        }
        let InferRequest { id, mut inputs, parameters, caller, trace, principal, .. } = request;
        for (position, shape) in reshaped {
            inputs[position].shape = shape;
        }
        let exec = ExecRequest {
            id,
            inputs,
            outputs: wanted.iter().map(|o| o.name.clone()).collect(),
            parameters,
            caller,
            trace,
            principal,
            ..Default::default()
        };
        let batch_size = if batching { batch_size as usize } else { 1 };
        Ok((exec, batch_size, wanted))
    }

    /// The config's entry for an input, or Triton's `Model::GetInput` error (it has no prefix).
    fn spec(&self, name: &str) -> CoreResult<&IoSpec> {
        self.inputs.iter().find(|s| s.name == name).ok_or_else(|| {
            CoreError::invalid_arg(format!("unexpected inference input '{name}' for model '{}'", self.name))
        })
    }

    /// Triton's message for a request with too few or too many inputs (its `]` when nothing is
    /// missing included).
    fn input_count_message<'a>(&self, request: &InferRequest, names: impl Iterator<Item = &'a str>) -> String {
        let required = self.inputs.iter().filter(|s| !s.optional).count();
        let mut missing = String::from("[");
        for spec in self.inputs.iter().filter(|s| !s.optional && !request.inputs.iter().any(|t| t.name == s.name)) {
            missing.push_str(&format!("'{}',", spec.name));
        }
        missing.pop();
        missing.push(']');
        let got = names.map(|n| format!("'{n}'")).collect::<Vec<_>>().join(",");
        let expected = if required == self.inputs.len() {
            format!("expected {required} inputs")
        } else {
            format!("expected number of inputs between {required} and {}", self.inputs.len())
        };
        format!(
            "{expected} but got {} inputs for model '{}'. Got input(s) [{got}], but missing required input(s) \
            {missing}. Please provide all required input(s).",
            request.inputs.len(),
            self.name
        )
    }

    /// The data's size against the element count, with Triton's messages: bytes for fixed-size
    /// types, string elements for BYTES.
    fn check_data(&self, log: impl Fn() -> String, tensor: &Tensor, count: i64) -> CoreResult<()> {
        let (name, model) = (&tensor.name, &self.name);
        let invalid = |text: String| Err(CoreError::invalid_arg(format!("{}{text}", log())));
        let Some(size) = tensor.datatype.element_size() else {
            let mut rest = &tensor.data[..];
            let mut found: i64 = 0;
            while !rest.is_empty() {
                let Some((prefix, tail)) = rest.split_first_chunk::<4>() else {
                    return invalid(format!(
                        "incomplete string length indicator for inference input '{name}' for model '{model}', \
                        expecting 4 bytes but only {} bytes available. Please make sure the string length \
                        indicator is in one buffer.",
                        rest.len()
                    ));
                };
                found += 1;
                if found > count {
                    return invalid(format!(
                        "unexpected number of string elements {found} for inference input '{name}' for model \
                        '{model}', expecting {count}"
                    ));
                }
                let len = u32::from_le_bytes(*prefix) as usize;
                // An element longer than the data ends the walk; the backend reports it.
                rest = tail.get(len..).unwrap_or_default();
            }
            if found != count {
                return invalid(format!(
                    "expected {count} string elements for inference input '{name}' for model '{model}', got {found}"
                ));
            }
            return Ok(());
        };
        let expected = count.wrapping_mul(size as i64);
        if i64::try_from(tensor.data.len()) != Ok(expected) {
            return invalid(format!(
                "input byte size mismatch for input '{name}' for model '{model}'. Expected {expected}, got {}",
                tensor.data.len()
            ));
        }
        Ok(())
    }

    /// The outputs to return: the requested ones (checked against the config in name order, as
    /// Triton's `std::set` of them is), or all of them. (An output named twice was refused before.)
    fn check_outputs(&self, requested: Vec<RequestedOutput>) -> CoreResult<Vec<RequestedOutput>> {
        if requested.is_empty() {
            return Ok(self.outputs.iter().map(|o| RequestedOutput::named(o.name.clone())).collect());
        }
        // The first unknown name in name order is the one Triton's set reports.
        let unknown = requested.iter().map(|o| o.name.as_str()).filter(|&n| !self.outputs.iter().any(|s| s.name == n));
        if let Some(name) = unknown.min() {
            return Err(CoreError::invalid_arg(format!(
                "unexpected inference output '{name}' for model '{}'",
                self.name
            )));
        }
        let mut outputs: Vec<RequestedOutput> = Vec::with_capacity(requested.len());
        for out in requested {
            if outputs.iter().any(|o| o.name == out.name) {
                continue;
            }
            let datatype = self.outputs.iter().find(|s| s.name == out.name).map(|s| s.datatype);
            if let Some(datatype) = datatype.filter(|d| out.class_count > 0 && !d.is_numeric()) {
                return Err(CoreError::invalid_arg(format!(
                    "classification is not supported for output '{}' of type {datatype}",
                    out.name
                )));
            }
            outputs.push(out);
        }
        Ok(outputs)
    }

    /// Checks outputs against the config, undoes output reshapes and applies classification.
    pub fn postprocess(
        &self,
        outputs: Vec<Tensor>,
        batch_size: usize,
        wanted: &[RequestedOutput],
    ) -> CoreResult<Vec<Tensor>> {
        let batching = self.max_batch_size > 0;
        let mut outputs = outputs;
        let mut result = Vec::with_capacity(wanted.len());
        for want in wanted {
            let position = outputs.iter().position(|t| t.name == want.name).ok_or_else(|| {
                CoreError::internal(format!("model '{}' did not produce requested output '{}'", self.name, want.name))
            })?;
            let mut tensor = outputs.swap_remove(position);
            let spec =
                self.outputs.iter().find(|s| s.name == tensor.name).ok_or_else(|| {
                    CoreError::internal(format!("model produced unexpected output '{}'", tensor.name))
                })?;
            let model_dims = spec.reshape.as_ref().unwrap_or(&spec.dims);
            let (batch_ok, dims) = match tensor.shape.split_first() {
                Some((&b, rest)) if batching => (b == batch_size as i64, rest),
                _ => (!batching, &tensor.shape[..]),
            };
            if !batch_ok || !shape_matches(dims, model_dims) {
                return Err(CoreError::internal(format!(
                    "model '{}' produced output '{}' with shape {}, which does not match its configuration {}{}",
                    self.name,
                    tensor.name,
                    format_shape(&tensor.shape),
                    format_shape(model_dims),
                    if batching { format!(" with batch size {batch_size}") } else { String::new() }
                )));
            }
            if tensor.datatype != spec.datatype {
                return Err(CoreError::internal(format!(
                    "output '{}' of model '{}' has datatype {} but the configuration declares {}",
                    tensor.name, self.name, tensor.datatype, spec.datatype
                )));
            }
            if let Some(reshape) = &spec.reshape {
                let (prefix, model_dims) = if batching {
                    tensor.shape.split_at(1.min(tensor.shape.len()))
                } else {
                    (&[][..], &tensor.shape[..])
                };
                let mut shape = prefix.to_vec();
                shape.extend(fill_variable_dims(&spec.dims, reshape, model_dims));
                if crate::tensor::element_count(&shape)? != tensor.element_count() {
                    return Err(CoreError::internal(format!(
                        "output '{}' has shape {} which cannot be reshaped to {}",
                        tensor.name,
                        format_shape(&tensor.shape),
                        format_shape(&shape)
                    )));
                }
                tensor.shape = shape;
            }
            if want.class_count > 0 {
                let labels = self.labels.get(&tensor.name).map(|l| l.as_slice());
                tensor = classify(&tensor, want.class_count as usize, labels, batching.then_some(batch_size))?;
            }
            result.push(tensor);
        }
        Ok(result)
    }
}

const BATCH_NOTE: &str = "NOTE: Setting a non-zero max_batch_size in the model config requires a batch \
    dimension to be prepended to each input shape. If you want to specify the full shape including the \
    batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration \
    docs for more info on max_batch_size.";

/// `actual` matches `expected` when ranks agree and every fixed dim is equal (-1 is a wildcard).
fn shape_matches(actual: &[i64], expected: &[i64]) -> bool {
    actual.len() == expected.len() && actual.iter().zip(expected).all(|(&a, &e)| e == -1 || a == e)
}

/// Produces `target` with its -1 dims replaced, in order, by the values `actual` has at the
/// positions where `source` has -1.
fn fill_variable_dims(target: &[i64], source: &[i64], actual: &[i64]) -> Vec<i64> {
    let mut variable = source.iter().zip(actual).filter(|&(&s, _)| s == -1).map(|(_, &a)| a);
    target.iter().map(|&d| if d == -1 { variable.next().unwrap_or(-1) } else { d }).collect()
}

/// How a request's dims (without the batch dim) compare with the config's, checked as Triton
/// does: left to right, a -1 in the request is reported unless an earlier dim already differed.
enum ShapeCheck {
    Matches,
    Wildcard,
    Differs,
}

fn shape_check(actual: &[i64], expected: &[i64]) -> ShapeCheck {
    if actual.len() != expected.len() {
        return ShapeCheck::Differs;
    }
    for (&a, &e) in actual.iter().zip(expected) {
        if a == -1 {
            return ShapeCheck::Wildcard;
        }
        if e != -1 && e != a {
            return ShapeCheck::Differs;
        }
    }
    ShapeCheck::Matches
}

/// Triton's backends' message for a BYTES element longer than the data left (no prefix: it
/// comes from the backend, after the core's checks).
fn bytes_overrun(tensor: &Tensor) -> CoreResult<()> {
    let mut rest = &tensor.data[..];
    while let Some((prefix, tail)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*prefix) as usize;
        let Some(next) = tail.get(len..) else {
            return Err(CoreError::invalid_arg(format!(
                "incomplete string data for inference input '{}', expecting string of length {len} but only {} \
                bytes available",
                tensor.name,
                tail.len()
            )));
        };
        rest = next;
    }
    Ok(())
}

/// The order Triton's core checks a request's inputs in ([`triton_input_order`]), without
/// building its hash table for the usual one or two inputs: a second node always goes to the
/// front of libstdc++'s list, whichever bucket it lands in.
fn input_order(inputs: &[Tensor]) -> Vec<usize> {
    match inputs.len() {
        0 => Vec::new(),
        1 => vec![0],
        2 => vec![1, 0],
        _ => triton_input_order(&inputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>()),
    }
}

/// Triton's prefix for the core's request errors.
pub fn request_prefix(request: &InferRequest) -> String {
    crate::error::request_id_prefix(request.id.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_inputs_take_the_order_of_tritons_hash_table() {
        let t = |name: String| Tensor::unchecked(name, DataType::Fp32, vec![1], bytes::Bytes::from_static(&[0; 4]));
        for i in 0..300 {
            let inputs = vec![t(format!("IN{i}")), t(format!("x_{}", i * 7919))];
            let names: Vec<&str> = inputs.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(input_order(&inputs), triton_input_order(&names), "{names:?}");
        }
        let one = vec![t("a".into())];
        assert_eq!(input_order(&one), triton_input_order(&["a"]));
    }

    #[test]
    fn variable_dims_fill_in_order() {
        assert_eq!(fill_variable_dims(&[16], &[4, 4], &[4, 4]), vec![16]);
        assert_eq!(fill_variable_dims(&[-1, 4], &[4, -1], &[4, 7]), vec![7, 4]);
        assert!(shape_matches(&[3, 16], &[-1, 16]));
        assert!(!shape_matches(&[16], &[-1, 16]));
        assert!(!shape_matches(&[1, 15], &[1, 16]));
    }

    fn io(config: &str) -> ModelIo {
        let config = crate::config::parse_pbtxt(config, std::path::Path::new("config.pbtxt")).unwrap();
        ModelIo::from_config(&config, std::path::Path::new("/nonexistent")).unwrap()
    }

    const RESHAPED: &str = r#"
        name: "m"
        max_batch_size: 4
        input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } },
                { name: "b" data_type: TYPE_INT32 dims: [ -1 ] optional: true } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
    "#;

    fn tensor(name: &str, datatype: DataType, shape: Vec<i64>) -> Tensor {
        let data = crate::tensor::zeros(datatype, &shape).unwrap();
        Tensor::new(name, datatype, shape, data).unwrap()
    }

    fn request(inputs: Vec<Tensor>) -> InferRequest {
        InferRequest { model_name: "m".into(), inputs, ..Default::default() }
    }

    #[test]
    fn inputs_are_reshaped_and_the_batch_size_found() {
        let io = io(RESHAPED);
        let (exec, batch, _) = io.prepare(request(vec![tensor("a", DataType::Fp32, vec![3, 4])])).unwrap();
        assert_eq!(batch, 3);
        assert_eq!(exec.inputs[0].shape, vec![3, 2, 2], "the model sees the reshaped input");
    }

    #[test]
    fn bad_inputs_get_tritons_messages() {
        let io = io(RESHAPED);
        let err = |inputs| io.prepare(request(inputs)).unwrap_err().message;
        let a = |shape| tensor("a", DataType::Fp32, shape);
        let p = "[request id: <id_unknown>] ";
        assert!(
            err(vec![a(vec![1, 5])])
                .starts_with(&format!("{p}unexpected shape for input 'a' for model 'm'. Expected [-1,4]"))
        );
        assert_eq!(err(vec![a(vec![5, 4])]), format!("{p}inference request batch-size must be <= 4 for 'm'"));
        assert!(err(vec![tensor("a", DataType::Int32, vec![1, 4])]).contains("data-type is 'INT32'"));
        // GetInput's error has no prefix in Triton.
        assert_eq!(
            err(vec![a(vec![1, 4]), tensor("c", DataType::Fp32, vec![1])]),
            "unexpected inference input 'c' for model 'm'"
        );
        assert_eq!(err(vec![a(vec![1, 4]), a(vec![1, 4])]), format!("{p}input 'a' already exists in request"));
        assert_eq!(
            err(vec![a(vec![1, 4]), tensor("b", DataType::Int32, vec![1, 2]), tensor("c", DataType::Int32, vec![1])]),
            format!(
                "{p}expected number of inputs between 1 and 2 but got 3 inputs for model 'm'. Got input(s) \
                 ['c','b','a'], but missing required input(s) ]. Please provide all required input(s)."
            )
        );
        assert!(err(vec![tensor("b", DataType::Int32, vec![1, 2])]).contains("missing required input(s) ['a']"));
        assert_eq!(
            err(vec![a(vec![1, 4]), tensor("b", DataType::Int32, vec![2, 2])]),
            format!("{p}input 'a' batch size does not match other inputs for 'm'"),
            "named in Triton's hash-map order"
        );
        assert_eq!(
            err(vec![a(vec![])]),
            format!("{p}input 'a' has no shape but model requires batch dimension for 'm'")
        );
    }

    #[test]
    fn data_sizes_are_checked_last_with_tritons_messages() {
        let io = io(RESHAPED);
        let p = "[request id: <id_unknown>] ";
        let raw = |name: &str, datatype, shape: Vec<i64>, data: Vec<u8>| {
            Tensor::unchecked(name, datatype, shape, data.into())
        };
        let err = |inputs| io.prepare(request(inputs)).unwrap_err().message;
        assert_eq!(
            err(vec![raw("a", DataType::Fp32, vec![2, 4], vec![0; 12])]),
            format!("{p}input byte size mismatch for input 'a' for model 'm'. Expected 32, got 12")
        );
        // A batch of 0 leaves the batch dim out of the count, as Triton does.
        assert_eq!(
            err(vec![raw("a", DataType::Fp32, vec![0, 4], Vec::new())]),
            format!("{p}input byte size mismatch for input 'a' for model 'm'. Expected 16, got 0")
        );
        let b = |shape: Vec<i64>, data: Vec<u8>| {
            vec![tensor("a", DataType::Fp32, vec![1, 4]), raw("b", DataType::Int32, shape, data)]
        };
        assert_eq!(
            err(b(vec![1, -1], Vec::new())),
            format!("{p}All input dimensions should be specified for input 'b' for model 'm', got [1,-1]")
        );
        assert_eq!(
            err(b(vec![1, -2], vec![0; 8])),
            format!("{p}input byte size mismatch for input 'b' for model 'm'. Expected -8, got 8")
        );
        // A count that matches only by wrapping is still refused before any backend sees it.
        assert!(err(b(vec![1, -2, -2], vec![0; 16])).contains("unexpected shape"));

        let strings = ModelIo::from_config(
            &crate::config::parse_pbtxt(
                r#"name: "s" input [ { name: "t" data_type: TYPE_STRING dims: [ 2 ] } ]
                   output [ { name: "u" data_type: TYPE_STRING dims: [ 2 ] } ]"#,
                std::path::Path::new("config.pbtxt"),
            )
            .unwrap(),
            std::path::Path::new("/nonexistent"),
        )
        .unwrap();
        let err = |data: &[u8]| {
            let t = raw("t", DataType::Bytes, vec![2], data.to_vec());
            strings.prepare(InferRequest { inputs: vec![t], ..Default::default() }).unwrap_err().message
        };
        assert_eq!(
            err(&[1, 0, 0, 0, b'x']),
            format!("{p}expected 2 string elements for inference input 't' for model 's', got 1")
        );
        assert_eq!(
            err(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            format!("{p}unexpected number of string elements 3 for inference input 't' for model 's', expecting 2")
        );
        assert!(err(&[0, 0, 0, 0, 1, 0]).starts_with(&format!(
            "{p}incomplete string length indicator for inference input 't' for model 's', expecting 4 bytes but \
             only 2 bytes available."
        )));
        assert_eq!(
            err(&[0, 0, 0, 0, 5, 0, 0, 0, b'x']),
            "incomplete string data for inference input 't', expecting string of length 5 but only 1 bytes available"
        );
    }

    #[test]
    fn triton_checks_outputs_first_in_name_order() {
        let io = io(RESHAPED);
        let mut req = request(vec![tensor("zz", DataType::Fp32, vec![1])]);
        req.outputs = vec![RequestedOutput::named("ZZZ"), RequestedOutput::named("AAA")];
        assert_eq!(io.prepare(req).unwrap_err().message, "unexpected inference output 'AAA' for model 'm'");
    }

    #[test]
    fn outputs_are_checked_reshaped_back_and_classified() {
        let io = io(RESHAPED);
        let all = io.check_outputs(Vec::new()).unwrap();
        assert_eq!(all.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["y"]);
        let twice = vec![RequestedOutput::named("y"), RequestedOutput::named("y")];
        let once = io.check_outputs(twice).unwrap();
        assert_eq!(once.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["y"], "named twice, returned once");

        let produced = vec![tensor("y", DataType::Fp32, vec![2, 2, 2])];
        let out = io.postprocess(produced, 2, &all).unwrap();
        assert_eq!(out[0].shape, vec![2, 4], "the caller sees the configured dims");

        let wrong_rows = io.postprocess(vec![tensor("y", DataType::Fp32, vec![3, 2, 2])], 2, &all).unwrap_err();
        assert!(wrong_rows.message.contains("does not match its configuration"), "{}", wrong_rows.message);
        let missing = io.postprocess(Vec::new(), 2, &all).unwrap_err();
        assert!(missing.message.contains("did not produce requested output 'y'"));

        let classified = vec![RequestedOutput { class_count: 1, ..RequestedOutput::named("y") }];
        let out = io.postprocess(vec![tensor("y", DataType::Fp32, vec![1, 2, 2])], 1, &classified).unwrap();
        assert_eq!((out[0].datatype, out[0].shape.clone()), (DataType::Bytes, vec![1, 1]));
    }
}
