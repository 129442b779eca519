//! A model's inputs and outputs as its config declares them, and the checks every request
//! passes: names, datatypes, shapes and batch size on the way in (with input reshapes applied),
//! and on the way out the model's outputs checked, reshaped back and classified.

use std::collections::HashMap;
use std::sync::Arc;

use super::classify::classify;
use crate::backend::ExecRequest;
use crate::config::{ModelConfig, TensorConfig, datatype_from_config};
use crate::error::{CoreError, CoreResult};
use crate::infer::{InferRequest, RequestedOutput};
use crate::tensor::{DataType, Tensor, format_shape};

/// An input or output as the config declares it.
#[derive(Debug, Clone)]
pub struct IoSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dims without the batch dimension, as written in the config.
    pub dims: Vec<i64>,
    /// The shape the model itself uses, when the config reshapes.
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
}

impl IoSpec {
    pub fn from_config(tensor: &impl TensorConfig, optional: bool) -> CoreResult<Self> {
        Ok(Self {
            name: tensor.name().to_string(),
            datatype: config_datatype(tensor.name(), tensor.data_type())?,
            dims: tensor.dims().to_vec(),
            reshape: tensor.reshape().map(|r| r.shape.clone()),
            optional,
        })
    }
}

pub fn config_datatype(name: &str, value: i32) -> CoreResult<DataType> {
    datatype_from_config(value).ok_or_else(|| CoreError::invalid_arg(format!("tensor '{name}' has no valid data_type")))
}

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

    /// Checks the request's inputs against the config (names, datatypes, shapes, batch size) and
    /// applies input reshapes. Returns the instance-facing inputs and the batch size (1 for models
    /// that do not batch).
    pub fn prepare(&self, request: &InferRequest) -> CoreResult<(ExecRequest, usize)> {
        let model = &self.name;
        let batching = self.max_batch_size > 0;
        // Like Triton, agree on the batch size (dim 0 of every input) before checking shapes.
        let mut batch_size: Option<(i64, &str)> = None;
        if batching {
            for tensor in &request.inputs {
                let b = tensor.shape.first().copied().unwrap_or(0);
                match batch_size {
                    None => batch_size = Some((b, &tensor.name)),
                    Some((prev, first)) if prev != b => {
                        return Err(CoreError::invalid_arg(format!(
                            "input '{}' batch size does not match other inputs for '{model}' (input \
                            '{first}' has batch size {prev}, '{}' has {b})",
                            tensor.name, tensor.name
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        let mut inputs = Vec::with_capacity(request.inputs.len());
        for (i, tensor) in request.inputs.iter().enumerate() {
            if request.inputs[..i].iter().any(|t| t.name == tensor.name) {
                return Err(CoreError::invalid_arg(format!("input '{}' already exists in request", tensor.name)));
            }
            let spec = self.inputs.iter().find(|s| s.name == tensor.name).ok_or_else(|| {
                CoreError::invalid_arg(format!(
                    "unexpected inference input '{}' for model '{model}'. Allowed inputs are: {}",
                    tensor.name,
                    self.inputs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                ))
            })?;
            if tensor.datatype != spec.datatype {
                return Err(CoreError::invalid_arg(format!(
                    "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                    tensor.name, tensor.datatype, spec.datatype
                )));
            }
            let dims = if batching {
                let Some((_, rest)) = tensor.shape.split_first() else {
                    return Err(CoreError::invalid_arg(format!(
                        "input '{}' has no batch dimension but model '{model}' supports batching (max_batch_size {})",
                        tensor.name, self.max_batch_size
                    )));
                };
                rest
            } else {
                &tensor.shape[..]
            };
            if !shape_matches(dims, &spec.dims) {
                let expected: Vec<i64> =
                    if batching { [-1].iter().chain(&spec.dims).copied().collect() } else { spec.dims.clone() };
                return Err(CoreError::invalid_arg(format!(
                    "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}. {}",
                    tensor.name,
                    format_shape(&expected),
                    format_shape(&tensor.shape),
                    if batching { BATCH_NOTE } else { "" }
                )));
            }
            let mut model_tensor = tensor.clone();
            if let Some(reshape) = &spec.reshape {
                let mut shape: Vec<i64> = if batching { vec![tensor.shape[0]] } else { Vec::new() };
                shape.extend(fill_variable_dims(reshape, &spec.dims, dims));
                model_tensor.shape = shape;
            }
            inputs.push(model_tensor);
        }
        let missing: Vec<&str> = self
            .inputs
            .iter()
            .filter(|s| !s.optional && !request.inputs.iter().any(|t| t.name == s.name))
            .map(|s| s.name.as_str())
            .collect();
        if !missing.is_empty() {
            let quoted =
                |names: &mut dyn Iterator<Item = &str>| names.map(|n| format!("'{n}'")).collect::<Vec<_>>().join(",");
            return Err(CoreError::invalid_arg(format!(
                "expected {} inputs but got {} inputs for model '{model}'. Got input(s) [{}], but missing \
                required input(s) [{}]. Please provide all required input(s).",
                self.inputs.iter().filter(|s| !s.optional).count(),
                request.inputs.len(),
                quoted(&mut request.inputs.iter().map(|t| t.name.as_str())),
                quoted(&mut missing.iter().copied())
            )));
        }
        let batch_size = batch_size.map_or(1, |(b, _)| b);
        if batching && (batch_size < 1 || batch_size > i64::from(self.max_batch_size)) {
            return Err(CoreError::invalid_arg(format!(
                "inference request batch-size must be <= {} for '{model}'",
                self.max_batch_size
            )));
        }

        let exec = ExecRequest {
            id: request.id.clone(),
            inputs,
            parameters: request.parameters.clone(),
            ..Default::default()
        };
        Ok((exec, usize::try_from(batch_size).unwrap_or(1)))
    }

    /// The outputs to return: the requested ones (checked against the config), or all of them.
    /// An output named twice is returned once, with its first entry's settings (as Triton does).
    pub fn check_outputs(&self, request: &InferRequest) -> CoreResult<Vec<RequestedOutput>> {
        let model = &self.name;
        Ok(if request.outputs.is_empty() {
            self.outputs.iter().map(|o| RequestedOutput::named(o.name.clone())).collect()
        } else {
            for (i, out) in request.outputs.iter().enumerate() {
                let spec = self.outputs.iter().find(|s| s.name == out.name).ok_or_else(|| {
                    CoreError::invalid_arg(format!("unexpected inference output '{}' for model '{model}'", out.name))
                })?;
                if request.outputs[..i].iter().any(|o| o.name == out.name) {
                    continue;
                }
                if out.class_count > 0 && !spec.datatype.is_numeric() {
                    return Err(CoreError::invalid_arg(format!(
                        "classification is not supported for output '{}' of type {}",
                        out.name, spec.datatype
                    )));
                }
            }
            let mut outputs: Vec<RequestedOutput> = Vec::with_capacity(request.outputs.len());
            for out in &request.outputs {
                if !outputs.iter().any(|o| o.name == out.name) {
                    outputs.push(out.clone());
                }
            }
            outputs
        })
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let (exec, batch) = io.prepare(&request(vec![tensor("a", DataType::Fp32, vec![3, 4])])).unwrap();
        assert_eq!(batch, 3);
        assert_eq!(exec.inputs[0].shape, vec![3, 2, 2], "the model sees the reshaped input");
    }

    #[test]
    fn bad_inputs_get_tritons_messages() {
        let io = io(RESHAPED);
        let err = |inputs| io.prepare(&request(inputs)).unwrap_err().message;
        let a = |shape| tensor("a", DataType::Fp32, shape);
        assert!(err(vec![a(vec![1, 5])]).starts_with("unexpected shape for input 'a' for model 'm'. Expected [-1,4]"));
        assert!(err(vec![a(vec![5, 4])]).contains("batch-size must be <= 4"));
        assert!(err(vec![tensor("a", DataType::Int32, vec![1, 4])]).contains("data-type is 'INT32'"));
        assert!(
            err(vec![a(vec![1, 4]), tensor("c", DataType::Fp32, vec![1])]).contains("unexpected inference input 'c'")
        );
        assert!(err(vec![a(vec![1, 4]), a(vec![1, 4])]).contains("already exists"));
        assert!(err(vec![tensor("b", DataType::Int32, vec![1, 2])]).contains("missing required input(s) ['a']"));
        let mismatch = err(vec![a(vec![1, 4]), tensor("b", DataType::Int32, vec![2, 2])]);
        assert!(mismatch.contains("batch size does not match"), "{mismatch}");
    }

    #[test]
    fn outputs_are_checked_reshaped_back_and_classified() {
        let io = io(RESHAPED);
        let all = io.check_outputs(&request(Vec::new())).unwrap();
        assert_eq!(all.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["y"]);
        let mut twice = request(Vec::new());
        twice.outputs = vec![RequestedOutput::named("y"), RequestedOutput::named("y")];
        let once = io.check_outputs(&twice).unwrap();
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
