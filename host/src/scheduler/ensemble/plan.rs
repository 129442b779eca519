//! An ensemble's `ensemble_scheduling` turned into a checked data-flow graph: which step writes
//! each ensemble tensor, which steps read it, and how tensors cross between batching and
//! non-batching steps. Every check Triton makes at load time happens here, with its messages.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::config::pb::model_config::SchedulingChoice;
use crate::config::{ModelConfig, TensorConfig, datatype_from_config};
use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, format_shape};

/// Index of an ensemble tensor in [`EnsemblePlan::tensors`].
pub type TensorId = usize;

/// What an ensemble needs to know about a composing model: the config of the version a step
/// names, as it is loaded now.
pub trait StepCatalog {
    /// The loaded config of `model` (`version` none: the newest ready version), or none when
    /// that model or version is not loaded and ready.
    fn step_config(&self, model: &str, version: Option<i64>) -> Option<ModelConfig>;
}

/// An ensemble tensor: an ensemble input, or a step's output.
#[derive(Debug, Clone)]
pub struct EnsembleTensor {
    pub name: String,
    /// The step that writes it; none for an ensemble input.
    pub producer: Option<usize>,
    /// The steps that read it.
    pub consumers: Vec<usize>,
    /// The decoupled steps it varies with, outermost first: each response of the last one
    /// makes a new value. Empty for tensors that have exactly one value per request.
    pub lineage: Vec<usize>,
}

/// A step input: the model input it feeds and the ensemble tensor it reads.
#[derive(Debug, Clone)]
pub struct StepInput {
    pub model_input: String,
    pub tensor: TensorId,
    /// The ensemble carries a batch dimension the (non-batching) step model does not have:
    /// it is removed on the way in (batch size 1 only).
    pub strip_batch: bool,
}

/// A step output: the model output and the ensemble tensor it writes.
#[derive(Debug, Clone)]
pub struct StepOutput {
    pub model_output: String,
    pub tensor: TensorId,
    /// The (non-batching) step model's output gets the ensemble's batch dimension of 1 back.
    pub add_batch: bool,
}

#[derive(Debug, Clone)]
pub struct Step {
    pub model: String,
    /// None: the newest ready version (`model_version: -1`).
    pub version: Option<i64>,
    pub inputs: Vec<StepInput>,
    pub outputs: Vec<StepOutput>,
    /// The step model answers 0..n times per request.
    pub decoupled: bool,
    /// The outputs to ask the step for when the caller wants every ensemble output (the
    /// common case, computed once): those the ensemble returns or a later step reads.
    pub requested_all: Vec<crate::infer::RequestedOutput>,
}

/// A checked ensemble: steps, tensors and the ensemble's own inputs and outputs.
#[derive(Debug, Clone)]
pub struct EnsemblePlan {
    pub name: String,
    pub steps: Vec<Step>,
    pub tensors: Vec<EnsembleTensor>,
    /// Ensemble input name -> tensor.
    pub inputs: BTreeMap<String, TensorId>,
    /// Ensemble output name -> tensor.
    pub outputs: BTreeMap<String, TensorId>,
    /// Some step is decoupled, so the ensemble is too.
    pub decoupled: bool,
    /// `max_inflight_responses`: step runs of one request in flight at once (0: no limit).
    pub max_inflight: usize,
    /// The steps a request that wants every output needs (computed once).
    pub all_needed: Vec<bool>,
}

/// A tensor's type as one side of a mapping declares it: datatype and full shape (batch
/// dimension included when the model batches).
#[derive(Debug, Clone, PartialEq)]
struct TensorType {
    datatype: DataType,
    shape: Vec<i64>,
    /// Who declared it, for messages: "model m" or "ensemble e".
    origin: String,
}

/// The steps of an ensemble config (`ensemble_scheduling`), or none.
pub fn ensemble_steps(config: &ModelConfig) -> Option<&[crate::config::pb::model_ensembling::Step]> {
    match &config.scheduling_choice {
        Some(SchedulingChoice::EnsembleScheduling(e)) => Some(&e.step),
        _ => None,
    }
}

/// Whether the config describes an ensemble (`platform: "ensemble"`).
pub fn is_ensemble(config: &ModelConfig) -> bool {
    config.platform == "ensemble"
}

/// The models an ensemble's steps name (what it depends on), in step order, deduplicated.
pub fn composing_models(config: &ModelConfig) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ensemble_steps(config)
        .unwrap_or_default()
        .iter()
        .filter(|s| seen.insert(s.model_name.clone()))
        .map(|s| s.model_name.clone())
        .collect()
}

fn invalid<T>(message: String) -> CoreResult<T> {
    Err(CoreError::invalid_arg(message))
}

fn full_shape(dims: &[i64], batching: bool) -> Vec<i64> {
    if batching { std::iter::once(-1).chain(dims.iter().copied()).collect() } else { dims.to_vec() }
}

/// Two shapes agree where both are known (-1 matches anything).
fn shapes_agree(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| *x == -1 || *y == -1 || x == y)
}

fn config_type(name: &str, value: i32, dims: &[i64], batching: bool, origin: String) -> CoreResult<TensorType> {
    let datatype = datatype_from_config(value)
        .ok_or_else(|| CoreError::invalid_arg(format!("tensor '{name}' of {origin} has no valid data_type")))?;
    Ok(TensorType { datatype, shape: full_shape(dims, batching), origin })
}

/// The checks Triton makes on the config alone (`ValidateEnsembleSchedulingConfig`), before it
/// looks at the composing models, with its messages: step fields, outputs mapped once, and the
/// data flow (every ensemble output written from the inputs, no tensor left unused).
fn check_config(config: &ModelConfig, steps: &[crate::config::pb::model_ensembling::Step]) -> CoreResult<()> {
    let name = config.name.as_str();
    if !config.instance_group.is_empty() {
        return invalid(format!("instance group should not be specified for ensemble '{name}'"));
    }
    if !config.model_warmup.is_empty() {
        return invalid(format!("model_warmup can not be specified for ensemble '{name}'"));
    }
    if steps.is_empty() {
        return invalid(format!("must specify 'step' for ensemble '{name}'"));
    }
    // Tensors as nodes: a step links each of its input tensors to each of its output tensors.
    let mut prev: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut written: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (index, step) in steps.iter().enumerate() {
        for (field, empty) in [
            ("model_name", step.model_name.is_empty()),
            ("input_map", step.input_map.is_empty()),
            ("output_map", step.output_map.is_empty()),
        ] {
            if empty {
                return invalid(format!("must specify '{field}' in step {index} of ensemble '{name}'"));
            }
        }
        for output in step.output_map.values() {
            if !written.insert(output.as_str()) {
                return invalid(format!(
                    "ensemble tensor '{output}' can appear in an output map only once for ensemble '{name}' step \
                     {index}"
                ));
            }
            prev.insert(output, step.input_map.values().map(String::as_str).collect());
            next.entry(output).or_default();
        }
        for input in step.input_map.values() {
            let targets = next.entry(input).or_default();
            targets.extend(step.output_map.values().map(String::as_str));
            prev.entry(input).or_default();
        }
    }
    // Ready: an ensemble input, or written by a step whose inputs are all ready.
    let mut ready: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for input in &config.input {
        if !next.contains_key(input.name.as_str()) {
            return invalid(format!("ensemble input '{}' for ensemble {name}' is not used", input.name));
        }
        ready.insert(input.name.as_str());
    }
    let mut changed = true;
    while changed {
        changed = false;
        for (tensor, sources) in &prev {
            if !ready.contains(tensor) && !sources.is_empty() && sources.iter().all(|s| ready.contains(s)) {
                ready.insert(tensor);
                changed = true;
            }
        }
    }
    for output in &config.output {
        let output = output.name.as_str();
        if !next.contains_key(output) {
            return invalid(format!("ensemble output '{output}' for ensemble {name}' is not used"));
        }
        if !ready.contains(output) {
            // Follow not-ready sources back to the first one nothing writes.
            let mut source = output;
            let mut seen = std::collections::HashSet::new();
            while let Some(up) =
                prev.get(source).and_then(|s| s.iter().find(|t| !ready.contains(*t) && seen.insert(**t)))
            {
                source = up;
            }
            let mut message = format!("output '{output}' for ensemble '{name}' is not written");
            if source != output {
                message.push_str(&format!(": at least one of its depending tensors, '{source}', is not connected"));
            }
            return invalid(message);
        }
    }
    let outputs: std::collections::HashSet<&str> = config.output.iter().map(|o| o.name.as_str()).collect();
    let mut tensors: Vec<&&str> = next.keys().collect();
    tensors.sort();
    for tensor in tensors {
        if !outputs.contains(*tensor) && (!ready.contains(*tensor) || next[*tensor].is_empty()) {
            return invalid(format!("ensemble tensor '{tensor}' is unused in ensemble '{name}'"));
        }
    }
    Ok(())
}

impl EnsemblePlan {
    /// Builds and checks the plan of ensemble `config` against the composing models `catalog`
    /// has loaded.
    pub fn new(config: &ModelConfig, catalog: &dyn StepCatalog) -> CoreResult<Self> {
        let name = config.name.as_str();
        let Some(steps) = ensemble_steps(config) else {
            return invalid(format!("ensemble scheduling must be set for ensemble {name} whose platform is ensemble"));
        };
        check_config(config, steps)?;

        // Every composing model must be loaded (at the version asked for) before anything else.
        let mut configs = Vec::with_capacity(steps.len());
        let mut missing = BTreeSet::new();
        for step in steps {
            let version = (step.model_version >= 0).then_some(step.model_version);
            match catalog.step_config(&step.model_name, version) {
                Some(c) => configs.push(c),
                // The model is there, but not the version the step names (Triton's CheckNode).
                None if version.is_some() && catalog.step_config(&step.model_name, None).is_some() => {
                    return invalid(format!(
                        "ensemble '{name}' depends on '{}' whose required version {} is not loaded.",
                        step.model_name, step.model_version
                    ));
                }
                None => {
                    missing.insert(step.model_name.clone());
                }
            }
        }
        if !missing.is_empty() {
            return Err(CoreError::invalid_arg(format!(
                "ensemble {name} contains models that are not available or ambiguous: {}",
                missing.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }

        let batching = config.max_batch_size > 0;
        let mut tensors: Vec<EnsembleTensor> = Vec::new();
        let mut ids: HashMap<String, TensorId> = HashMap::new();
        // The type each tensor got from whoever declared it first (ensemble I/O or a producer).
        let mut types: HashMap<TensorId, TensorType> = HashMap::new();
        let mut tensor_id = |tensors: &mut Vec<EnsembleTensor>, tensor: &str| -> TensorId {
            *ids.entry(tensor.to_string()).or_insert_with(|| {
                tensors.push(EnsembleTensor {
                    name: tensor.to_string(),
                    producer: None,
                    consumers: Vec::new(),
                    lineage: Vec::new(),
                });
                tensors.len() - 1
            })
        };

        let mut inputs = BTreeMap::new();
        for input in &config.input {
            let id = tensor_id(&mut tensors, &input.name);
            let ty = config_type(&input.name, input.data_type, input.dims(), batching, format!("model {name}"))?;
            types.insert(id, ty);
            inputs.insert(input.name.clone(), id);
        }

        let mut plan_steps = Vec::with_capacity(steps.len());
        for (index, (step, step_config)) in steps.iter().zip(&configs).enumerate() {
            let model = step.model_name.as_str();
            let step_batching = step_config.max_batch_size > 0;
            if batching && step_batching && step_config.max_batch_size < config.max_batch_size {
                return invalid(format!(
                    "ensemble {name} allows maximum batch size {}, but it contains model {model} which only allows \
                     maximum batch size to be {}",
                    config.max_batch_size, step_config.max_batch_size
                ));
            }
            let origin = format!("model {model}");
            let mut step_inputs = Vec::new();
            for (model_input, tensor) in &step.input_map {
                let Some(spec) = step_config.input.iter().find(|i| &i.name == model_input) else {
                    return invalid(format!(
                        "in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input {model_input} \
                         in model {model}"
                    ));
                };
                let id = tensor_id(&mut tensors, tensor);
                let ty = config_type(model_input, spec.data_type, spec.dims(), step_batching, origin.clone())?;
                step_inputs.push((StepInput { model_input: model_input.clone(), tensor: id, strip_batch: false }, ty));
                tensors[id].consumers.push(index);
            }
            for required in step_config.input.iter().filter(|i| !i.optional) {
                if !step.input_map.contains_key(&required.name) {
                    return invalid(format!(
                        "in ensemble {name}, input {} in model {model} is not mapped to any ensemble tensors",
                        required.name
                    ));
                }
            }
            let mut step_outputs = Vec::new();
            for (model_output, tensor) in &step.output_map {
                let Some(spec) = step_config.output.iter().find(|o| &o.name == model_output) else {
                    return invalid(format!(
                        "in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output \
                         {model_output} in model {model}"
                    ));
                };
                let id = tensor_id(&mut tensors, tensor);
                if inputs.values().any(|&i| i == id) {
                    return invalid(format!(
                        "in ensemble {name}, ensemble tensor {tensor} is an ensemble input and cannot be written by \
                         model {model}"
                    ));
                }
                tensors[id].producer = Some(index);
                let ty = config_type(model_output, spec.data_type, spec.dims(), step_batching, origin.clone())?;
                step_outputs
                    .push((StepOutput { model_output: model_output.clone(), tensor: id, add_batch: false }, ty));
            }
            plan_steps.push((step_inputs, step_outputs, step_config.clone()));
        }

        // What each step input expects, by (step, tensor): producers look here to decide whether
        // their output needs the batch dimension added.
        let consumer_types: Vec<((usize, TensorId), TensorType)> = plan_steps
            .iter()
            .enumerate()
            .flat_map(|(c, (ins, _, _))| ins.iter().map(move |(i, ty)| ((c, i.tensor), ty.clone())))
            .collect();

        // check_config made sure every output is some step's output.
        let outputs: BTreeMap<String, TensorId> =
            config.output.iter().filter_map(|o| ids.get(&o.name).map(|&id| (o.name.clone(), id))).collect();

        // Types: ensemble inputs and producers declare a tensor's type; consumers and ensemble
        // outputs must agree. In a batching ensemble every tensor carries the batch dimension: a
        // non-batching step whose shape lacks it has it stripped on the way in and added back on
        // the way out (so it only runs batches of one).
        let ensemble_types: HashMap<&str, TensorType> = config
            .output
            .iter()
            .map(|o| {
                Ok((o.name.as_str(), config_type(&o.name, o.data_type, o.dims(), batching, format!("model {name}"))?))
            })
            .collect::<CoreResult<_>>()?;
        for (index, (_, step_outputs, step_config)) in plan_steps.iter_mut().enumerate() {
            let adapts = batching && step_config.max_batch_size == 0;
            for (output, ty) in step_outputs.iter_mut() {
                let tensor = &tensors[output.tensor];
                if adapts {
                    let batched = TensorType { shape: full_shape(&ty.shape, true), ..ty.clone() };
                    let wants_batch = |other: &TensorType| {
                        !shapes_agree(&other.shape, &ty.shape) && shapes_agree(&other.shape, &batched.shape)
                    };
                    let by_consumer = consumer_types.iter().any(|((c, t), other)| {
                        *t == output.tensor && *c != index && configs[*c].max_batch_size > 0 && wants_batch(other)
                    });
                    let by_output = ensemble_types.get(tensor.name.as_str()).is_some_and(wants_batch);
                    if by_consumer || by_output {
                        output.add_batch = true;
                        *ty = batched;
                    }
                }
                types.insert(output.tensor, ty.clone());
            }
        }
        let agree = |tensor: &str, declared: &TensorType, seen: &TensorType, may_strip: bool| -> CoreResult<bool> {
            if declared.datatype != seen.datatype {
                return invalid(format!(
                    "in ensemble {name}, ensemble tensor {tensor}: inconsistent data type: {} is inferred from {} \
                     while {} is inferred from {}",
                    crate::config::datatype_to_config(declared.datatype).as_str_name(),
                    declared.origin,
                    crate::config::datatype_to_config(seen.datatype).as_str_name(),
                    seen.origin
                ));
            }
            if shapes_agree(&declared.shape, &seen.shape) {
                return Ok(false);
            }
            if may_strip
                && declared.shape.len() == seen.shape.len() + 1
                && shapes_agree(&declared.shape[1..], &seen.shape)
            {
                return Ok(true);
            }
            invalid(format!(
                "in ensemble {name}, ensemble tensor {tensor}: inconsistent shape: {} is inferred from {} while {} \
                 is inferred from {}",
                format_shape(&declared.shape),
                declared.origin,
                format_shape(&seen.shape),
                seen.origin
            ))
        };
        let mut built_steps = Vec::with_capacity(plan_steps.len());
        for (index, (step_inputs, step_outputs, step_config)) in plan_steps.into_iter().enumerate() {
            let adapts = batching && step_config.max_batch_size == 0;
            let mut ins = Vec::with_capacity(step_inputs.len());
            for (mut input, ty) in step_inputs {
                if let Some(declared) = types.get(&input.tensor) {
                    input.strip_batch = agree(&tensors[input.tensor].name, declared, &ty, adapts)?;
                }
                ins.push(input);
            }
            let mut outs = Vec::with_capacity(step_outputs.len());
            for (output, ty) in step_outputs {
                if let Some(declared) = ensemble_types.get(tensors[output.tensor].name.as_str()) {
                    agree(&tensors[output.tensor].name, declared, &ty, false)?;
                }
                outs.push(output);
            }
            built_steps.push(Step {
                model: steps[index].model_name.clone(),
                version: (steps[index].model_version >= 0).then_some(steps[index].model_version),
                inputs: ins,
                outputs: outs,
                decoupled: step_config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled),
                requested_all: Vec::new(),
            });
        }

        let mut plan = Self {
            name: name.to_string(),
            steps: built_steps,
            tensors,
            inputs,
            outputs,
            decoupled: false,
            max_inflight: 0,
            all_needed: Vec::new(),
        };
        plan.order_and_lineage()?;
        plan.all_needed = plan.needed_steps(&plan.outputs.values().copied().collect::<Vec<_>>());
        for index in 0..plan.steps.len() {
            let requested =
                plan.requested_outputs(index, &plan.all_needed, &|t| plan.outputs.values().any(|&o| o == t));
            plan.steps[index].requested_all = requested;
        }
        plan.decoupled = plan.steps.iter().any(|s| s.decoupled);
        if let Some(SchedulingChoice::EnsembleScheduling(e)) = &config.scheduling_choice {
            plan.max_inflight = e.max_inflight_responses as usize;
        }
        Ok(plan)
    }

    /// Checks the steps form no cycle and computes each tensor's lineage (which decoupled steps
    /// it varies with); a step fed by two unrelated decoupled steps is refused.
    fn order_and_lineage(&mut self) -> CoreResult<()> {
        let name = self.name.clone();
        let mut done = vec![false; self.steps.len()];
        let mut remaining = self.steps.len();
        while remaining > 0 {
            let ready = (0..self.steps.len()).find(|&s| {
                !done[s] && self.steps[s].inputs.iter().all(|i| self.tensors[i.tensor].producer.is_none_or(|p| done[p]))
            });
            let Some(step) = ready else {
                let stuck: Vec<&str> =
                    (0..self.steps.len()).filter(|&s| !done[s]).map(|s| self.steps[s].model.as_str()).collect();
                return Err(CoreError::invalid_arg(format!(
                    "in ensemble {name}, the steps of models {} form a cycle: each waits for another's output",
                    stuck.join(", ")
                )));
            };
            // The longest lineage among the inputs; every other one must be its prefix.
            let mut lineage: Vec<usize> = Vec::new();
            for input in &self.steps[step].inputs {
                let other = &self.tensors[input.tensor].lineage;
                let (short, long) = if other.len() > lineage.len() { (&lineage, other) } else { (other, &lineage) };
                if long[..short.len()] != short[..] {
                    return Err(CoreError::invalid_arg(format!(
                        "in ensemble {name}, step of model '{}' receives inputs originated from different decoupled \
                         models",
                        self.steps[step].model
                    )));
                }
                if other.len() > lineage.len() {
                    lineage = other.clone();
                }
            }
            if self.steps[step].decoupled {
                lineage.push(step);
            }
            for output in &self.steps[step].outputs {
                self.tensors[output.tensor].lineage = lineage.clone();
            }
            done[step] = true;
            remaining -= 1;
        }
        Ok(())
    }

    /// The lineage length of a step's runs: how many response indices identify one run.
    pub fn step_depth(&self, step: usize) -> usize {
        self.steps[step].inputs.iter().map(|i| self.tensors[i.tensor].lineage.len()).max().unwrap_or(0)
    }

    /// What to ask step `step` for: the outputs the caller wants (`wanted`) or a needed step reads.
    pub fn requested_outputs(
        &self,
        step: usize,
        needed: &[bool],
        wanted: &dyn Fn(TensorId) -> bool,
    ) -> Vec<crate::infer::RequestedOutput> {
        self.steps[step]
            .outputs
            .iter()
            .filter(|o| wanted(o.tensor) || self.tensors[o.tensor].consumers.iter().any(|&c| needed[c]))
            .map(|o| crate::infer::RequestedOutput::named(o.model_output.clone()))
            .collect()
    }

    /// The steps needed for `wanted` ensemble outputs (others are skipped), by index.
    pub fn needed_steps(&self, wanted: &[TensorId]) -> Vec<bool> {
        let mut needed = vec![false; self.steps.len()];
        let mut stack: Vec<TensorId> = wanted.to_vec();
        while let Some(tensor) = stack.pop() {
            if let Some(step) = self.tensors[tensor].producer
                && !needed[step]
            {
                needed[step] = true;
                stack.extend(self.steps[step].inputs.iter().map(|i| i.tensor));
            }
        }
        needed
    }
}
