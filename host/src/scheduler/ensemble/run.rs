//! Running one ensemble request: data-driven, as Triton's ensemble scheduler. A step starts as
//! soon as all of its inputs exist, so independent steps run at the same time; steps that no
//! requested output needs never start. Each response of a decoupled step is a new value of its
//! outputs, identified by a key (the response indices along the decoupled steps upstream), and
//! drives the steps downstream again.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::plan::{EnsemblePlan, TensorId};
use crate::backend::ExecRequest;
use crate::error::{CoreError, CoreResult};
use crate::infer::{Infer, InferRequest, InferResponse, ResponseStream};
use crate::tensor::Tensor;

/// Which value of a tensor (or which run of a step): the response index of each decoupled step
/// in the lineage. Empty for everything upstream of any decoupled step.
type Key = Vec<u32>;

/// What a finished piece of step work reports.
enum Event {
    /// A regular step answered.
    Answered { step: usize, key: Key, result: CoreResult<InferResponse>, compute: Duration },
    /// A decoupled step's stream produced its next item (none: the stream ended).
    Streamed { step: usize, key: Key, index: u32, item: Option<CoreResult<InferResponse>>, stream: ResponseStream },
}

type Work = Pin<Box<dyn Future<Output = Event> + Send>>;

/// A step run waiting for the in-flight limit.
struct Waiting {
    step: usize,
    request: InferRequest,
    key: Key,
}

/// A decoupled step's stream not polled until downstream work drains (backpressure).
struct Parked {
    step: usize,
    key: Key,
    index: u32,
    stream: ResponseStream,
}

/// Where a run's complete sets of requested outputs go.
pub(super) trait Outlet: Send {
    /// Takes one set of outputs; false when nobody listens any more (the run ends).
    fn emit(&mut self, outputs: Vec<Tensor>) -> impl std::future::Future<Output = bool> + Send;
}

/// One ensemble request in progress.
pub(super) struct Run<'a> {
    plan: &'a EnsemblePlan,
    infer: Arc<dyn Infer>,
    exec: ExecRequest,
    needed: Cow<'a, [bool]>,
    /// The caller wants every output: the plan's precomputed step requests apply.
    all_wanted: bool,
    /// Ensemble outputs the caller asked for, with the names it knows them by.
    wanted: Vec<(String, TensorId)>,
    /// Every tensor value so far, with its key; `None` for an optional ensemble input the caller
    /// left out. One flat vector, not a map: a regular ensemble has one value per tensor and a
    /// decoupled one a handful, so a scan beats hashing (and it is one allocation per request).
    values: Vec<(TensorId, Key, Option<Tensor>)>,
    started: Vec<(usize, Key)>,
    emitted: Vec<Key>,
    /// Complete sets of requested outputs not handed to the outlet yet.
    outbox: Vec<Vec<Tensor>>,
    /// Step work in flight. One piece alone (a chain of steps) is awaited directly: going
    /// through `FuturesUnordered` costs an extra wake-up hop per step.
    work: FuturesUnordered<Work>,
    only: Option<Work>,
    /// Regular step runs in flight (what `max_inflight_responses` bounds).
    active: usize,
    waiting: VecDeque<Waiting>,
    parked: Vec<Parked>,
    /// Summed compute time of the steps' executions.
    pub(super) compute: Duration,
}

impl<'a> Run<'a> {
    pub(super) fn new(plan: &'a EnsemblePlan, infer: Arc<dyn Infer>, mut exec: ExecRequest) -> Self {
        let wanted: Vec<(String, TensorId)> = std::mem::take(&mut exec.outputs)
            .into_iter()
            .filter_map(|name| plan.outputs.get(&name).copied().map(|t| (name, t)))
            .collect();
        // The model layer refused duplicates, so as many as the plan has means all of them.
        let all_wanted = wanted.len() == plan.outputs.len();
        let needed = if all_wanted {
            Cow::Borrowed(plan.all_needed.as_slice())
        } else {
            Cow::Owned(plan.needed_steps(&wanted.iter().map(|(_, t)| *t).collect::<Vec<_>>()))
        };
        Self {
            plan,
            infer,
            exec,
            needed,
            all_wanted,
            wanted,
            values: Vec::with_capacity(plan.tensors.len()),
            started: Vec::new(),
            emitted: Vec::new(),
            outbox: Vec::new(),
            work: FuturesUnordered::new(),
            only: None,
            active: 0,
            waiting: VecDeque::new(),
            parked: Vec::new(),
            compute: Duration::ZERO,
        }
    }

    fn error(&self, e: CoreError) -> CoreError {
        CoreError::new(e.kind, format!("in ensemble '{}', {}", self.plan.name, e.message))
    }

    /// Runs the request to its end, handing each complete set of requested outputs to `outlet`
    /// (once for a regular ensemble; once per value for a decoupled one). The outlet returns
    /// false when nobody listens any more, which ends the run; it may wait (a decoupled caller
    /// reading slowly), which pauses the run.
    pub(super) async fn run<O: Outlet>(mut self, outlet: &mut O) -> CoreResult<Duration> {
        let inputs = std::mem::take(&mut self.exec.inputs);
        let plan = self.plan;
        for (name, &tensor) in &plan.inputs {
            let value = inputs.iter().find(|t| &t.name == name).cloned();
            let done = self.add_value(tensor, Key::new(), value)?;
            if !self.flush(outlet).await || done {
                return Ok(self.compute);
            }
        }
        loop {
            let event = match self.only.take() {
                Some(only) if self.work.is_empty() => Some(only.await),
                Some(only) => {
                    self.work.push(only);
                    self.work.next().await
                }
                None => self.work.next().await,
            };
            let Some(event) = event else {
                if self.emitted.is_empty() && !plan.decoupled {
                    return Err(self.error(CoreError::internal("the steps ended without producing the outputs")));
                }
                return Ok(self.compute);
            };
            let stop = match event {
                Event::Answered { step, key, result, compute } => {
                    self.active -= 1;
                    self.compute += compute;
                    let response = result.map_err(|e| self.error(e))?;
                    let stop = self.add_outputs(step, &key, response)?;
                    self.release();
                    stop
                }
                Event::Streamed { step, key, index, item, stream } => match item {
                    None => false,
                    Some(Err(e)) => return Err(self.error(e)),
                    Some(Ok(mut response)) => {
                        let mut value_key = key.clone();
                        value_key.push(index);
                        // Kept until the run ends: copied, so the producer's count of bytes
                        // it buffers (a decoupled Wasm step's) drains as each response arrives.
                        response.outputs = response.outputs.into_iter().map(Tensor::with_own_bytes).collect();
                        let stop = self.add_outputs(step, &value_key, response)?;
                        self.poll_stream(Parked { step, key, index: index + 1, stream });
                        stop
                    }
                },
            };
            if !self.flush(outlet).await || stop {
                return Ok(self.compute);
            }
        }
    }

    /// Hands the outbox to the outlet; false when it stopped listening.
    async fn flush<O: Outlet>(&mut self, outlet: &mut O) -> bool {
        for outputs in std::mem::take(&mut self.outbox) {
            if !outlet.emit(outputs).await {
                return false;
            }
        }
        true
    }

    /// A step's response: each output it was asked for becomes a value of its ensemble tensor.
    fn add_outputs(&mut self, step: usize, key: &Key, response: InferResponse) -> CoreResult<bool> {
        let plan = self.plan;
        let mut outputs = response.outputs;
        for output in &plan.steps[step].outputs {
            let Some(position) = outputs.iter().position(|t| t.name == output.model_output) else { continue };
            let mut tensor = outputs.swap_remove(position);
            if output.add_batch {
                tensor.shape.insert(0, 1);
            }
            tensor.name.clone_from(&plan.tensors[output.tensor].name);
            if self.add_value(output.tensor, key.clone(), Some(tensor))? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Records a tensor value, starts every step run it completes, and puts the outputs it
    /// completes in the outbox. Returns true when the run is over (a regular ensemble's outputs
    /// are complete).
    fn add_value(&mut self, tensor: TensorId, key: Key, value: Option<Tensor>) -> CoreResult<bool> {
        self.values.push((tensor, key.clone(), value));
        let plan = self.plan;
        for &step in &plan.tensors[tensor].consumers {
            if !self.needed[step] {
                continue;
            }
            let depth = plan.step_depth(step);
            if key.len() >= depth {
                // The common case (always, without decoupled steps): the one run this value is for.
                self.try_start(step, key[..depth].to_vec())?;
                continue;
            }
            for run_key in self.candidate_keys(plan.steps[step].inputs.iter().map(|i| i.tensor), depth, &key) {
                self.try_start(step, run_key)?;
            }
        }
        if self.wanted.iter().any(|(_, t)| *t == tensor) {
            let depth = self.wanted.iter().map(|(_, t)| plan.tensors[*t].lineage.len()).max().unwrap_or(0);
            let out_keys = if key.len() >= depth {
                vec![key[..depth].to_vec()]
            } else {
                self.candidate_keys(self.wanted.iter().map(|(_, t)| *t), depth, &key)
            };
            for out_key in out_keys {
                if self.emitted.contains(&out_key) {
                    continue;
                }
                let Some(outputs) = self.gather(self.wanted.iter().map(|(_, t)| *t), &out_key) else { continue };
                self.emitted.push(out_key);
                let outputs: Vec<Tensor> = outputs
                    .into_iter()
                    .zip(&self.wanted)
                    .filter_map(|(t, (name, _))| t.map(|t| Tensor { name: name.clone(), ..t }))
                    .collect();
                self.outbox.push(outputs);
                if !plan.decoupled {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Keys of length `depth` that a new value at `key` may complete, among `tensors`' values.
    /// (`key` is shorter than `depth`: a value with a shorter key pairs with every deeper value
    /// that extends it.)
    fn candidate_keys(&self, tensors: impl Iterator<Item = TensorId>, depth: usize, key: &Key) -> Vec<Key> {
        let mut keys: Vec<Key> = Vec::new();
        for tensor in tensors.filter(|&t| self.plan.tensors[t].lineage.len() == depth) {
            keys.extend(
                self.values.iter().filter(|(t, k, _)| *t == tensor && k.starts_with(key)).map(|(_, k, _)| k.clone()),
            );
        }
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The value of each tensor for run key `key` (each tensor's own key is a prefix of it), or
    /// none while one is missing.
    fn gather(&self, tensors: impl Iterator<Item = TensorId>, key: &Key) -> Option<Vec<Option<Tensor>>> {
        tensors.map(|t| self.value(t, key).cloned()).collect()
    }

    /// The value of tensor `t` for run key `key` (the tensor's own key is a prefix of it).
    fn value(&self, t: TensorId, key: &Key) -> Option<&Option<Tensor>> {
        let own = &key[..self.plan.tensors[t].lineage.len().min(key.len())];
        self.values.iter().find(|(tensor, k, _)| *tensor == t && k.as_slice() == own).map(|(_, _, v)| v)
    }

    fn try_start(&mut self, step: usize, key: Key) -> CoreResult<()> {
        if self.started.iter().any(|(s, k)| *s == step && *k == key) {
            return Ok(());
        }
        let plan = self.plan;
        let spec = &plan.steps[step];
        if !spec.inputs.iter().all(|i| self.value(i.tensor, &key).is_some()) {
            return Ok(());
        }
        self.started.push((step, key.clone()));
        let mut inputs = Vec::with_capacity(spec.inputs.len());
        for input in &spec.inputs {
            let Some(Some(tensor)) = self.value(input.tensor, &key) else { continue };
            // Built with the model's input name directly (the value's own name is not copied).
            let mut tensor = Tensor {
                name: input.model_input.clone(),
                datatype: tensor.datatype,
                shape: tensor.shape.clone(),
                data: tensor.data.clone(),
            };
            if input.strip_batch {
                if tensor.shape.first() != Some(&1) {
                    return Err(self.error(CoreError::invalid_arg(format!(
                        "model {} does not support batching, so it can only run a batch of 1 (got shape {} for {})",
                        spec.model,
                        crate::tensor::format_shape(&tensor.shape),
                        input.model_input
                    ))));
                }
                tensor.shape.remove(0);
            }
            inputs.push(tensor);
        }
        // Only the outputs something downstream (or the caller) reads.
        let outputs = if self.all_wanted {
            spec.requested_all.clone()
        } else {
            plan.requested_outputs(step, &self.needed, &|t| self.wanted.iter().any(|(_, w)| *w == t))
        };
        let request = InferRequest {
            model_name: spec.model.clone(),
            model_version: spec.version,
            id: self.exec.id.clone(),
            inputs,
            outputs,
            // Sequence ids and flags, priorities, timeouts: every composing request gets them.
            parameters: self.exec.parameters.clone(),
            unknown_datatype_inputs: Vec::new(),
            // The steps run concurrently on the ensemble's task: none may block it.
            caller: crate::execution::Caller::Detached,
            // A composing model's request is traced as a child of the ensemble's.
            trace: self.exec.trace.as_ref().map(crate::trace::Trace::child),
            // Steps run as the ensemble's caller: its flow in each step's queue. They are not
            // checked against its allow-list: the ensemble is what the tenant was allowed.
            principal: self.exec.principal.clone(),
        };
        if !spec.decoupled && plan.max_inflight > 0 && self.active >= plan.max_inflight {
            self.waiting.push_back(Waiting { step, request, key });
        } else {
            self.launch(step, request, key);
        }
        Ok(())
    }

    fn launch(&mut self, step: usize, request: InferRequest, key: Key) {
        let infer = Arc::clone(&self.infer);
        if self.plan.steps[step].decoupled {
            self.add_work(Box::pin(async move {
                match infer.infer_stream(request).await {
                    Ok(mut stream) => {
                        let item = stream.recv().await;
                        Event::Streamed { step, key, index: 0, item, stream }
                    }
                    Err(e) => {
                        let (_, stream) = crate::infer::response_stream();
                        Event::Streamed { step, key, index: 0, item: Some(Err(e)), stream }
                    }
                }
            }));
            return;
        }
        self.active += 1;
        self.add_work(Box::pin(async move {
            let result = infer.infer(request).await;
            let compute = result.as_ref().map_or(Duration::ZERO, |r| r.compute);
            Event::Answered { step, key, result, compute }
        }));
    }

    fn add_work(&mut self, work: Work) {
        if self.only.is_none() && self.work.is_empty() {
            self.only = Some(work);
        } else {
            if let Some(only) = self.only.take() {
                self.work.push(only);
            }
            self.work.push(work);
        }
    }

    /// Reads a decoupled step's next response, unless downstream is at the in-flight limit.
    fn poll_stream(&mut self, parked: Parked) {
        if self.plan.max_inflight > 0 && self.active >= self.plan.max_inflight {
            self.parked.push(parked);
            return;
        }
        let Parked { step, key, index, mut stream } = parked;
        self.add_work(Box::pin(async move {
            let item = stream.recv().await;
            Event::Streamed { step, key, index, item, stream }
        }));
    }

    /// A regular run finished: start waiting runs, then resume parked streams, within the limit.
    fn release(&mut self) {
        let limit = self.plan.max_inflight;
        while limit == 0 || self.active < limit {
            let Some(Waiting { step, request, key }) = self.waiting.pop_front() else { break };
            self.launch(step, request, key);
        }
        while (limit == 0 || self.active < limit) && !self.parked.is_empty() {
            let parked = self.parked.remove(0);
            self.poll_stream(parked);
        }
    }
}
