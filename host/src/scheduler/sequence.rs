//! Triton's sequence batcher, for stateful models: requests carry a correlation id
//! (`sequence_id`, a uint64 or a string) and `sequence_start` / `sequence_end` flags; the requests
//! of one sequence run one at a time, in arrival order, and the scheduler feeds the model
//! - the configured control inputs (`CONTROL_SEQUENCE_START`, `_END`, `_READY`, `_CORRID`) in
//!   their configured data types, and
//! - implicit state: each `state { input_name output_name ... }` output of a request comes back
//!   as that state's input on the sequence's next request (the first request of a sequence gets
//!   `initial_state`, zeros by default).
//!
//! Batches are formed from the next request of several sequences (one per sequence), oldest
//! first, whenever an instance is free: this is the `oldest` strategy. `direct` additionally
//! limits the live sequences to `max_batch_size x instances` slots; a sequence holds its slot from
//! its first request until its END (or until it idles out) and further sequences wait for a slot.
//! Because state lives in the scheduler and not in an instance, a sequence need not be pinned to
//! one instance. A sequence with no request for `max_sequence_idle_microseconds` (default 1 s) is
//! released with its state; a later request for it without START is an error.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::compatible;
use super::pool::InstancePool;
use crate::backend::ExecRequest;
use crate::config::pb::ModelSequenceBatching;
use crate::config::pb::model_sequence_batching::{StrategyChoice, control::Kind, initial_state::StateData};
use crate::error::{CoreError, CoreResult};
use crate::infer::{ParamValue, Parameters};
use crate::stats::ModelStats;
use crate::tenant::{FlowKey, Shares, flow_of};
use crate::tensor::{DataType, Tensor, push_bytes_element, zeros};

const DEFAULT_IDLE: Duration = Duration::from_secs(1);

/// A sequence's correlation id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Uint(u64),
    Str(String),
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Uint(u) => write!(f, "{u}"),
            // Unquoted, as Triton writes it in its messages.
            Self::Str(s) => f.write_str(s),
        }
    }
}

/// The `sequence_id` / `sequence_start` / `sequence_end` request parameters.
#[derive(Debug, Clone)]
pub struct SequenceFlags {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

impl SequenceFlags {
    pub fn from_parameters(params: &Parameters, model: &str) -> CoreResult<Self> {
        let missing = || {
            CoreError::invalid_arg(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            ))
        };
        let id = match params.get("sequence_id") {
            Some(ParamValue::Int(i)) if *i > 0 => CorrelationId::Uint(*i as u64),
            Some(ParamValue::Uint(u)) if *u > 0 => CorrelationId::Uint(*u),
            Some(ParamValue::String(s)) if !s.is_empty() => CorrelationId::Str(s.clone()),
            Some(ParamValue::Int(i)) if *i < 0 => {
                return Err(CoreError::invalid_arg(format!(
                    "sequence_id {i} for model '{model}' must not be negative"
                )));
            }
            Some(ParamValue::Bool(_) | ParamValue::Double(_)) => {
                return Err(CoreError::invalid_arg(format!(
                    "sequence_id for model '{model}' must be an unsigned integer or a string"
                )));
            }
            _ => return Err(missing()),
        };
        let flag = |key: &str| -> CoreResult<bool> {
            match params.get(key) {
                None => Ok(false),
                Some(ParamValue::Bool(b)) => Ok(*b),
                Some(ParamValue::Int(i)) => Ok(*i != 0),
                Some(_) => Err(CoreError::invalid_arg(format!("{key} for model '{model}' must be a boolean"))),
            }
        };
        Ok(Self { id, start: flag("sequence_start")?, end: flag("sequence_end")? })
    }
}

#[derive(Debug, Clone)]
struct Control {
    input: String,
    kind: Kind,
    datatype: DataType,
    /// Encoded false and true values (START / END / READY).
    values: [Bytes; 2],
}

#[derive(Debug, Clone)]
struct StateSpec {
    input: String,
    output: String,
    initial: Tensor,
}

#[derive(Debug, Clone)]
pub struct SequenceConfig {
    model: String,
    batching: bool,
    max_batch_size: usize,
    idle: Duration,
    controls: Vec<Control>,
    states: Vec<StateSpec>,
    /// Most live sequences at once (`direct`: slots; `oldest`: max_candidate_sequences); 0 = no limit.
    max_sequences: usize,
}

fn config_type(name: &str, value: i32) -> CoreResult<DataType> {
    crate::config::datatype_from_config(value)
        .ok_or_else(|| CoreError::invalid_arg(format!("sequence batching: '{name}' has no valid data_type")))
}

impl SequenceConfig {
    /// Reads `sequence_batching` (control inputs, state, strategy) for a model with `instances`
    /// instances. `model_dir` holds the initial-state data files.
    pub fn new(
        model: &str,
        max_batch_size: i32,
        instances: usize,
        config: &ModelSequenceBatching,
        model_dir: &std::path::Path,
    ) -> CoreResult<Self> {
        let batching = max_batch_size > 0;
        let max_batch_size = usize::try_from(max_batch_size).unwrap_or(0).max(1);
        let mut controls = Vec::new();
        for input in &config.control_input {
            for control in &input.control {
                let kind = Kind::try_from(control.kind).map_err(|_| {
                    CoreError::invalid_arg(format!("control input '{}' has an unknown kind", input.name))
                })?;
                let (datatype, values) = if kind == Kind::ControlSequenceCorrid {
                    (config_type(&input.name, control.data_type)?, [Bytes::new(), Bytes::new()])
                } else if let [f, t] = control.int32_false_true[..] {
                    (
                        DataType::Int32,
                        [Bytes::copy_from_slice(&f.to_le_bytes()), Bytes::copy_from_slice(&t.to_le_bytes())],
                    )
                } else if let [f, t] = control.fp32_false_true[..] {
                    (
                        DataType::Fp32,
                        [Bytes::copy_from_slice(&f.to_le_bytes()), Bytes::copy_from_slice(&t.to_le_bytes())],
                    )
                } else if let [f, t] = control.bool_false_true[..] {
                    (DataType::Bool, [Bytes::copy_from_slice(&[u8::from(f)]), Bytes::copy_from_slice(&[u8::from(t)])])
                } else {
                    return Err(CoreError::invalid_arg(format!(
                        "control input '{}' ({}) needs exactly two values in int32_false_true, \
                        fp32_false_true or bool_false_true",
                        input.name,
                        kind.as_str_name()
                    )));
                };
                controls.push(Control { input: input.name.clone(), kind, datatype, values });
            }
        }
        let mut states = Vec::new();
        for state in &config.state {
            let datatype = config_type(&state.input_name, state.data_type)?;
            let initial = match state.initial_state.first() {
                Some(init) => {
                    let mut shape = if batching { vec![1] } else { Vec::new() };
                    shape.extend(&init.dims);
                    let data = match &init.state_data {
                        Some(StateData::DataFile(file)) => {
                            let path = model_dir.join("initial_state").join(file);
                            Bytes::from(std::fs::read(&path).map_err(|e| {
                                CoreError::invalid_arg(format!(
                                    "cannot read initial state file {}: {e}",
                                    path.display()
                                ))
                            })?)
                        }
                        _ => zeros(datatype, &shape)?,
                    };
                    Tensor::new(state.input_name.clone(), datatype, shape, data).map_err(|e| {
                        CoreError::invalid_arg(format!(
                            "initial state '{}' of state '{}': {}",
                            init.name, state.input_name, e.message
                        ))
                    })?
                }
                None => {
                    if state.dims.iter().any(|&d| d < 0) {
                        return Err(CoreError::invalid_arg(format!(
                            "state '{}' has variable dims {:?}: give it an initial_state with fixed dims",
                            state.input_name, state.dims
                        )));
                    }
                    let mut shape = if batching { vec![1] } else { Vec::new() };
                    shape.extend(&state.dims);
                    Tensor::new(state.input_name.clone(), datatype, shape.clone(), zeros(datatype, &shape)?)?
                }
            };
            states.push(StateSpec { input: state.input_name.clone(), output: state.output_name.clone(), initial });
        }
        let max_sequences = match &config.strategy_choice {
            Some(StrategyChoice::Oldest(oldest)) => usize::try_from(oldest.max_candidate_sequences).unwrap_or(0),
            // direct (the default): one slot per batch entry of each instance
            _ => max_batch_size * instances.max(1),
        };
        let idle = match config.max_sequence_idle_microseconds {
            0 => DEFAULT_IDLE,
            us => Duration::from_micros(us),
        };
        Ok(Self { model: model.to_string(), batching, max_batch_size, idle, controls, states, max_sequences })
    }

    /// A control tensor ([1, 1] for batching models, else [1]).
    fn control_tensor(&self, control: &Control, flags: &SequenceFlags, is_start: bool) -> CoreResult<Tensor> {
        let shape = if self.batching { vec![1, 1] } else { vec![1] };
        let on = |b: bool| control.values[usize::from(b)].clone();
        let data = match control.kind {
            Kind::ControlSequenceStart => on(is_start),
            Kind::ControlSequenceEnd => on(flags.end),
            Kind::ControlSequenceReady => on(true),
            Kind::ControlSequenceCorrid => corrid_bytes(&flags.id, control.datatype, &control.input, &self.model)?,
        };
        Tensor::new(control.input.clone(), control.datatype, shape, data)
    }
}

fn corrid_bytes(id: &CorrelationId, datatype: DataType, input: &str, model: &str) -> CoreResult<Bytes> {
    let mismatch = || {
        CoreError::invalid_arg(format!(
            "correlation id {id} does not fit control input '{input}' of model '{model}' (data type {datatype})"
        ))
    };
    Ok(match (id, datatype) {
        (CorrelationId::Str(s), DataType::Bytes) => {
            let mut out = Vec::new();
            push_bytes_element(&mut out, s.as_bytes())?;
            Bytes::from(out)
        }
        (CorrelationId::Uint(u), DataType::Bytes) => {
            let mut out = Vec::new();
            push_bytes_element(&mut out, u.to_string().as_bytes())?;
            Bytes::from(out)
        }
        (CorrelationId::Uint(u), DataType::Uint64) => Bytes::copy_from_slice(&u.to_le_bytes()),
        (CorrelationId::Uint(u), DataType::Int64) => {
            Bytes::copy_from_slice(&i64::try_from(*u).map_err(|_| mismatch())?.to_le_bytes())
        }
        (CorrelationId::Uint(u), DataType::Uint32) => {
            Bytes::copy_from_slice(&u32::try_from(*u).map_err(|_| mismatch())?.to_le_bytes())
        }
        (CorrelationId::Uint(u), DataType::Int32) => {
            Bytes::copy_from_slice(&i32::try_from(*u).map_err(|_| mismatch())?.to_le_bytes())
        }
        _ => return Err(mismatch()),
    })
}

struct SeqPending {
    exec: ExecRequest,
    flags: SequenceFlags,
    enqueued: Instant,
    reply: oneshot::Sender<CoreResult<Vec<Tensor>>>,
}

enum Message {
    Request(SeqPending),
    /// A request of this sequence finished: its new state (None: keep the old one).
    Done {
        id: CorrelationId,
        state: Option<Vec<Tensor>>,
        end: bool,
    },
}

struct Sequence {
    queue: VecDeque<SeqPending>,
    state: Vec<Tensor>,
    busy: bool,
    has_slot: bool,
    last_active: Instant,
    /// Its END ran while more requests were queued: the next one must START a new sequence.
    ended: bool,
}

/// The handle a model keeps; requests go in through [`SequenceBatcher::submit`].
pub struct SequenceBatcher {
    tx: mpsc::UnboundedSender<Message>,
    stats: Arc<ModelStats>,
    model: String,
}

impl SequenceBatcher {
    pub fn start(config: SequenceConfig, pool: Arc<InstancePool>) -> Self {
        let stats = Arc::clone(pool.stats());
        let (tx, rx) = mpsc::unbounded_channel();
        let model = config.model.clone();
        let task = SequenceTask {
            config: Arc::new(config),
            pool,
            stats: Arc::clone(&stats),
            sequences: HashMap::new(),
            slots_used: 0,
            backlog: VecDeque::new(),
            done_tx: tx.downgrade(),
            shares: Shares::default(),
        };
        tokio::spawn(task.run(rx));
        Self { tx, stats, model }
    }

    /// Queues one request of a sequence (batch size 1) and returns the future of its outputs.
    pub fn submit(
        &self,
        exec: ExecRequest,
        batch_size: usize,
    ) -> impl std::future::Future<Output = CoreResult<Vec<Tensor>>> + Send + 'static {
        let flags = SequenceFlags::from_parameters(&exec.parameters, &self.model);
        let (reply, rx) = oneshot::channel();
        let sent = flags.and_then(|flags| {
            if batch_size != 1 {
                return Err(CoreError::invalid_arg(format!(
                    "inference request to model '{}' must specify batch-size 1 due to requirements of sequence \
                    batcher",
                    self.model
                )));
            }
            self.stats.pending_add(1);
            self.tx.send(Message::Request(SeqPending { exec, flags, enqueued: Instant::now(), reply })).map_err(|_| {
                self.stats.pending_add(-1);
                CoreError::unavailable("the model's sequence scheduler has stopped (model unloading)")
            })
        });
        async move {
            sent?;
            rx.await.map_err(|_| CoreError::internal("the model's sequence scheduler dropped the request"))?
        }
    }
}

struct SequenceTask {
    config: Arc<SequenceConfig>,
    pool: Arc<InstancePool>,
    stats: Arc<ModelStats>,
    sequences: HashMap<CorrelationId, Sequence>,
    slots_used: usize,
    /// Sequences waiting for a slot, oldest first (taken by their tenants' shares).
    backlog: VecDeque<CorrelationId>,
    /// For dispatched batches to report back (weak: the task ends when the model is dropped).
    done_tx: mpsc::WeakUnboundedSender<Message>,
    /// The tenants' shares of this model's batches (see `crate::tenant`).
    shares: Shares,
}

impl SequenceTask {
    fn accept(&mut self, p: SeqPending) {
        let now = Instant::now();
        if !p.flags.start && !self.sequences.contains_key(&p.flags.id) {
            self.stats.pending_add(-1);
            let _ = p.reply.send(Err(CoreError::invalid_arg(format!(
                "inference request for sequence {} to model '{}' must specify the START flag on the first \
                request of the sequence",
                p.flags.id, self.config.model
            ))));
            return;
        }
        let id = p.flags.id.clone();
        if !self.sequences.contains_key(&id) {
            let has_slot = self.config.max_sequences == 0 || self.slots_used < self.config.max_sequences;
            if has_slot {
                self.slots_used += 1;
            } else {
                self.backlog.push_back(id.clone());
            }
            self.sequences.insert(
                id.clone(),
                Sequence {
                    queue: VecDeque::new(),
                    state: Vec::new(),
                    busy: false,
                    has_slot,
                    last_active: now,
                    ended: false,
                },
            );
        }
        if let Some(seq) = self.sequences.get_mut(&id) {
            let (flow, weight) = flow_of(p.exec.principal.as_ref());
            self.shares.arrive(&flow, weight);
            seq.last_active = now;
            seq.queue.push_back(p);
        }
    }

    fn release(&mut self, id: &CorrelationId) {
        if let Some(seq) = self.sequences.remove(id) {
            if seq.has_slot {
                self.slots_used = self.slots_used.saturating_sub(1);
            } else {
                self.backlog.retain(|b| b != id);
            }
        }
        while self.config.max_sequences == 0 || self.slots_used < self.config.max_sequences {
            let Some(next) = self.next_waiting() else { break };
            if let Some(seq) = self.sequences.get_mut(&next) {
                seq.has_slot = true;
                self.slots_used += 1;
            }
        }
    }

    /// The waiting sequence whose tenant's turn it is (the oldest of that tenant's).
    fn next_waiting(&mut self) -> Option<CorrelationId> {
        let flow_of_seq = |id: &CorrelationId| {
            let first = self.sequences.get(id).and_then(|s| s.queue.front());
            flow_of(first.and_then(|p| p.exec.principal.as_ref())).0
        };
        let flows: Vec<FlowKey> = self.backlog.iter().map(flow_of_seq).collect();
        let flow = self.shares.next(flows.iter())?;
        let at = flows.iter().position(|f| f == flow)?;
        self.backlog.remove(at)
    }

    fn finish(&mut self, id: CorrelationId, state: Option<Vec<Tensor>>, end: bool) {
        let Some(seq) = self.sequences.get_mut(&id) else { return };
        seq.busy = false;
        seq.last_active = Instant::now();
        if let Some(state) = state {
            seq.state = state;
        }
        if end {
            if seq.queue.is_empty() {
                self.release(&id);
            } else {
                seq.ended = true;
            }
        }
    }

    /// Releases sequences that have had nothing to do for longer than the idle limit.
    fn expire_idle(&mut self) {
        let now = Instant::now();
        let idle: Vec<CorrelationId> = self
            .sequences
            .iter()
            .filter(|(_, s)| {
                !s.busy && s.queue.is_empty() && now.saturating_duration_since(s.last_active) >= self.config.idle
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            tracing::debug!(model = self.config.model.as_str(), sequence = %id, "sequence idle: released");
            self.release(&id);
        }
    }

    /// Whether some sequence's next request can run now (without sorting, as `ready` does).
    fn has_ready(&self) -> bool {
        self.sequences.values().any(|s| s.has_slot && !s.busy && !s.queue.is_empty())
    }

    /// Sequences whose next request can run now: tenant by tenant as their shares say, and
    /// within a tenant, oldest request first.
    fn ready(&self) -> Vec<CorrelationId> {
        let mut ready: Vec<(Instant, FlowKey, &CorrelationId)> = self
            .sequences
            .iter()
            .filter(|(_, s)| s.has_slot && !s.busy)
            .filter_map(|(id, s)| s.queue.front().map(|p| (p.enqueued, flow_of(p.exec.principal.as_ref()).0, id)))
            .collect();
        ready.sort_by_key(|(t, _, _)| *t);
        let mut shares = self.shares.clone();
        let mut order = Vec::with_capacity(ready.len().min(self.config.max_batch_size));
        while order.len() < self.config.max_batch_size {
            let Some(flow) = shares.next(ready.iter().map(|(_, f, _)| f)).cloned() else { break };
            let Some(at) = ready.iter().position(|(_, f, _)| *f == flow) else { break };
            let (_, _, id) = ready.remove(at);
            shares.served(&flow, 1);
            order.push(id.clone());
        }
        order
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Message>) {
        let mut idle_tick = tokio::time::interval((self.config.idle / 4).max(Duration::from_millis(1)));
        idle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let has_work = self.has_ready();
            tokio::select! {
                biased;
                message = rx.recv() => match message {
                    Some(Message::Request(p)) => self.accept(p),
                    Some(Message::Done { id, state, end }) => self.finish(id, state, end),
                    None => return,
                },
                permit = self.pool.acquire(), if has_work => match permit {
                    Ok(permit) => {
                        // Take everything already sent before choosing the batch.
                        while let Ok(message) = rx.try_recv() {
                            match message {
                                Message::Request(p) => self.accept(p),
                                Message::Done { id, state, end } => self.finish(id, state, end),
                            }
                        }
                        self.dispatch(permit);
                    }
                    Err(e) => return self.fail_all(e, rx).await,
                },
                _ = idle_tick.tick() => self.expire_idle(),
            }
        }
    }

    /// No instance is left (every one panicked and was retired): answers every queued and later
    /// request with `error` until the model is dropped, keeping the pending count right.
    async fn fail_all(mut self, error: CoreError, mut rx: mpsc::UnboundedReceiver<Message>) {
        let fail = |p: SeqPending| {
            self.stats.pending_add(-1);
            let _ = p.reply.send(Err(error.clone()));
        };
        std::mem::take(&mut self.sequences).into_values().flat_map(|s| s.queue).for_each(fail);
        while let Some(message) = rx.recv().await {
            if let Message::Request(p) = message {
                fail(p);
            }
        }
    }

    fn dispatch(&mut self, permit: super::pool::InstanceSlot) {
        let ids = self.ready();
        if ids.is_empty() {
            return;
        }
        let started = Instant::now();
        let config = Arc::clone(&self.config);
        let mut execs = Vec::with_capacity(ids.len());
        let mut replies = Vec::with_capacity(ids.len());
        // Only requests that can share one model call (same inputs and non-batch dims as the
        // first) join the batch; the others wait for the next one.
        let mut signature: Option<ExecRequest> = None;
        let mut finished = Vec::new();
        for id in ids {
            let Some(seq) = self.sequences.get_mut(&id) else { continue };
            let Some(head) = seq.queue.front() else { continue };
            if signature.as_ref().is_some_and(|first| !compatible(first, &head.exec)) {
                continue;
            }
            let Some(p) = seq.queue.pop_front() else { continue };
            self.stats.pending_add(-1);
            let waited = started.saturating_duration_since(p.enqueued);
            self.stats.record_queue(waited);
            self.shares.served(&flow_of(p.exec.principal.as_ref()).0, 1);
            if let Some(principal) = &p.exec.principal {
                principal.record_queue(waited);
            }
            if seq.ended {
                if p.flags.start {
                    seq.ended = false;
                } else {
                    let _ = p.reply.send(Err(CoreError::invalid_arg(format!(
                        "inference request for sequence {} to model '{}' must specify the START flag on the \
                        first request of the sequence",
                        p.flags.id, config.model
                    ))));
                    if seq.queue.is_empty() {
                        finished.push(id);
                    }
                    continue;
                }
            }
            if p.flags.start {
                seq.state = config.states.iter().map(|s| s.initial.clone()).collect();
            }
            if signature.is_none() {
                signature = Some(ExecRequest { inputs: p.exec.inputs.clone(), ..Default::default() });
            }
            match config.prepare(p.exec, &p.flags, &seq.state) {
                Ok(exec) => {
                    seq.busy = true;
                    execs.push(exec);
                    replies.push((id, p.flags.end, p.reply));
                }
                Err(e) => {
                    let _ = p.reply.send(Err(e));
                    if p.flags.end && seq.queue.is_empty() {
                        finished.push(id);
                    }
                }
            }
        }
        for id in finished {
            self.release(&id);
        }
        if execs.is_empty() {
            return;
        }
        let pool = Arc::clone(&self.pool);
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let total = execs.len();
            let results = pool.run(permit, execs, total).await;
            for ((id, end, reply), result) in replies.into_iter().zip(results) {
                let (outputs, state) = match result {
                    Ok(outputs) => {
                        let (state, outputs): (Vec<Tensor>, Vec<Tensor>) =
                            outputs.into_iter().partition(|t| config.states.iter().any(|s| s.output == t.name));
                        match config.next_state(state) {
                            Ok(state) => (Ok(outputs), Some(state)),
                            Err(e) => (Err(e), None),
                        }
                    }
                    Err(e) => (Err(e), None),
                };
                let _ = reply.send(outputs);
                if let Some(done) = done.upgrade() {
                    let _ = done.send(Message::Done { id, state, end });
                }
            }
        });
    }
}

impl SequenceConfig {
    /// Adds the control inputs and the sequence's state to a request, and asks for the state
    /// outputs.
    fn prepare(&self, mut exec: ExecRequest, flags: &SequenceFlags, state: &[Tensor]) -> CoreResult<ExecRequest> {
        for control in &self.controls {
            exec.inputs.push(self.control_tensor(control, flags, flags.start)?);
        }
        for (spec, value) in self.states.iter().zip(state) {
            let mut input = value.clone();
            input.name = spec.input.clone();
            exec.inputs.push(input);
            if !exec.outputs.contains(&spec.output) {
                exec.outputs.push(spec.output.clone());
            }
        }
        Ok(exec)
    }

    /// The state outputs of one request, in the order of the `state` entries.
    fn next_state(&self, mut outputs: Vec<Tensor>) -> CoreResult<Vec<Tensor>> {
        self.states
            .iter()
            .map(|spec| {
                let i = outputs.iter().position(|t| t.name == spec.output).ok_or_else(|| {
                    CoreError::internal(format!(
                        "model '{}' did not produce state output '{}'",
                        self.model, spec.output
                    ))
                })?;
                Ok(outputs.swap_remove(i))
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "sequence_tests.rs"]
mod tests;
