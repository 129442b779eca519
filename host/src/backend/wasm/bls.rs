//! Business logic scripting: a guest calling a served model (`host.infer`, `host.infer-stream`)
//! through the [`Infer`] the backend was connected to (the model manager), as ensemble steps do.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use wasmtime::component::Resource;

use super::bindings::{wit, wit_host};
use super::convert::{params_from_wit, wit_error};
use super::resources::{HostPendingInfer, HostResponseStream, HostTensor, OpenCall};
use super::state::{HostView, table_error};
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::execution::Caller;
use crate::infer::{Infer, InferRequest, InferResponse, RequestedOutput};

/// The most BLS calls one store may have open at once: `infer-async` calls running or holding a
/// result not taken yet, and `infer-stream` streams not dropped yet. A guest can neither flood
/// the host with spawned calls nor make it keep results (outputs, buffered responses) it never
/// collects, where its held-bytes limit does not reach.
pub(super) const MAX_OPEN_CALLS: usize = 64;

/// A checked BLS call, ready to run: the request and what running it needs.
pub(super) struct BlsCall {
    infer: Arc<dyn Infer>,
    runtime: tokio::runtime::Handle,
    request: InferRequest,
    timeout: Duration,
}

/// A BLS call that ran out of the caller's time limit: the error the call answers with.
pub(super) struct TimedOut(pub(super) CoreError);

impl BlsCall {
    /// Runs the call (`infer` or `infer_stream`) bounded by the caller's BLS time limit.
    async fn run<T, Fut>(self, call: impl FnOnce(Arc<dyn Infer>, InferRequest) -> Fut) -> CoreResult<T>
    where
        Fut: Future<Output = CoreResult<T>>,
    {
        self.run_bounded(call).await.unwrap_or_else(|TimedOut(e)| Err(e))
    }

    /// [`Self::run`], telling a timeout apart from the callee's own errors.
    async fn run_bounded<T, Fut>(
        self,
        call: impl FnOnce(Arc<dyn Infer>, InferRequest) -> Fut,
    ) -> Result<CoreResult<T>, TimedOut>
    where
        Fut: Future<Output = CoreResult<T>>,
    {
        let model = self.request.model_name.clone();
        let timeout = self.timeout;
        tokio::time::timeout(timeout, call(self.infer, self.request)).await.map_err(|_| {
            TimedOut(CoreError::unavailable(format!(
                "BLS call to model '{model}' timed out after {} ms",
                timeout.as_millis()
            )))
        })
    }
}

impl HostView<'_> {
    /// Checks a BLS call (allowed model, input handles, a live server) and builds its request,
    /// for [`Self::bls`] or [`Self::bls_start`] to run. `Ok(Err(_))` is the guest's error; `Err(_)`
    /// traps (a bad handle).
    pub(super) fn bls_call(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<BlsCall, wit::Error>> {
        if let Err(e) = self.check_allowed(&model) {
            return Ok(Err(wit_error(e)));
        }
        let mut tensors = Vec::with_capacity(inputs.len());
        for handle in &inputs {
            tensors.push(self.handles.tensor(handle)?.clone());
        }
        Ok(self.bls_request(model, version, tensors, outputs, params_from_wit(parameters)).map_err(wit_error))
    }

    /// The guest's config lets it call `model` (the `allowed_models` parameter), and so does
    /// the tenant of every request it is executing: a model the tenant may not call answers as
    /// if it did not exist.
    pub(super) fn check_allowed(&self, model: &str) -> CoreResult<()> {
        if !self.bls.principals.iter().all(|p| p.may_call(model)) {
            return Err(CoreError::not_found(format!("Request for unknown model: '{model}' is not found")));
        }
        if self.shared.allowed_models.allows(model) {
            return Ok(());
        }
        Err(CoreError::new(
            ErrorKind::InvalidArg,
            format!(
                "model '{}' is not allowed to call model '{model}' (add it to the 'allowed_models' parameter; \
                 for models served from model.py, the server's --python-allowed-models sets the default)",
                self.shared.model_name
            ),
        ))
    }

    /// The [`Infer`] BLS calls go to, while the server runs.
    pub(super) fn bls_target(&self) -> CoreResult<(Arc<dyn Infer>, tokio::runtime::Handle)> {
        let infer = self.shared.infer.as_ref().and_then(Weak::upgrade);
        match (infer, self.shared.runtime.clone()) {
            (Some(infer), Some(runtime)) => Ok((infer, runtime)),
            _ => Err(CoreError::unavailable("the server is shutting down")),
        }
    }

    /// A BLS call of `model` on core tensors (see [`Self::bls_call`]). The caller has checked
    /// `model` against the allow-list ([`Self::check_allowed`]), before any work that a refusal
    /// must come first of.
    pub(super) fn bls_request(
        &self,
        model: String,
        version: Option<i64>,
        inputs: Vec<crate::tensor::Tensor>,
        outputs: Vec<String>,
        parameters: crate::infer::Parameters,
    ) -> CoreResult<BlsCall> {
        let (infer, runtime) = self.bls_target()?;
        let request = InferRequest {
            model_name: model,
            model_version: version,
            id: None,
            inputs,
            outputs: outputs.into_iter().map(RequestedOutput::named).collect(),
            parameters,
            unknown_datatype_inputs: Vec::new(),
            caller: Caller::Detached,
            trace: self.bls.trace.as_ref().map(crate::trace::Trace::child),
            principal: self.bls.principals.first().cloned(),
        };
        Ok(BlsCall { infer, runtime, request, timeout: self.shared.bls_timeout })
    }

    /// BLS: runs `model` to its end on this thread (see [`crate::execution::wait_for`]: no thread
    /// hop when the callee runs inline). `call` (infer or infer_stream) runs bounded by the
    /// caller's time limit.
    pub(super) fn bls<T, Fut>(
        mut bls: BlsCall,
        call: impl FnOnce(Arc<dyn Infer>, InferRequest) -> Fut,
    ) -> Result<T, wit::Error>
    where
        Fut: Future<Output = CoreResult<T>>,
    {
        let runtime = bls.runtime.clone();
        bls.request.caller = Caller::Thread;
        crate::execution::wait_for(&runtime, bls.run(call)).map_err(wit_error)
    }

    /// [`Self::bls`], counting the time it takes on this thread as the callee's, not the guest's
    /// (see [`BlsCalls::cpu`](super::state::BlsCalls)).
    pub(super) fn bls_timed<T, Fut>(
        &mut self,
        bls: BlsCall,
        call: impl FnOnce(Arc<dyn Infer>, InferRequest) -> Fut,
    ) -> Result<T, wit::Error>
    where
        Fut: Future<Output = CoreResult<T>>,
    {
        let clock = self.shared.clock;
        let started = clock.now();
        let called = Self::bls(bls, call);
        self.bls.cpu += clock.now().saturating_sub(started);
        called
    }

    /// [`Self::bls`] on core errors, telling a timeout apart.
    pub(super) fn bls_bounded<T, Fut>(
        mut bls: BlsCall,
        call: impl FnOnce(Arc<dyn Infer>, InferRequest) -> Fut,
    ) -> Result<CoreResult<T>, TimedOut>
    where
        Fut: Future<Output = CoreResult<T>>,
    {
        let runtime = bls.runtime.clone();
        bls.request.caller = Caller::Thread;
        crate::execution::wait_for(&runtime, bls.run_bounded(call))
    }

    /// `infer-async`: checks the call like `infer`, then runs it on the runtime and returns at once.
    pub(super) fn bls_start(
        &mut self,
        bls: BlsCall,
    ) -> wasmtime::Result<Result<Resource<HostPendingInfer>, wit::Error>> {
        let open = match self.open_call() {
            Ok(open) => open,
            Err(e) => return Ok(Err(e)),
        };
        let running = Arc::clone(&open);
        let slot = Arc::new(Mutex::new(None));
        let filled = Arc::clone(&slot);
        let done = Arc::clone(&self.bls.done);
        bls.runtime.clone().spawn(async move {
            // Open while it runs, even if the guest drops its handle meanwhile; closed before
            // the result shows, so a guest that saw it finish can start the next call at once
            // (the handle keeps a result nobody took counted).
            let result = bls.run(|infer, request| async move { infer.infer(request).await }).await;
            drop(running);
            if let Ok(mut slot) = filled.lock() {
                *slot = Some(result);
            }
            done.notify_waiters();
        });
        let pending = HostPendingInfer { slot, taken: false, open: Some(open) };
        Ok(Ok(self.handles.table.push(pending).map_err(table_error)?))
    }

    /// Counts one more open call, or refuses past [`MAX_OPEN_CALLS`].
    pub(super) fn open_call(&self) -> Result<Arc<OpenCall>, wit::Error> {
        let counter = Arc::clone(&self.bls.in_flight);
        if counter.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN_CALLS {
            counter.fetch_sub(1, Ordering::SeqCst);
            return Err(wit_error(CoreError::unavailable(format!(
                "model '{}' has {MAX_OPEN_CALLS} BLS calls open (running, with a result not taken, or a stream \
                 not dropped); finish some before starting more",
                self.shared.model_name
            ))));
        }
        Ok(Arc::new(OpenCall(counter)))
    }

    fn pending(&self, handle: &Resource<HostPendingInfer>) -> wasmtime::Result<&HostPendingInfer> {
        self.handles.table.get(handle).map_err(table_error)
    }

    /// Blocks until `finished` says yes or the BLS time limit passes; woken by every call that
    /// finishes. Returns `finished`'s last answer.
    fn wait_until<T>(&self, finished: impl FnMut(&Self) -> Option<T>) -> wasmtime::Result<Option<T>> {
        self.wait_until_by(std::time::Instant::now() + self.shared.bls_timeout, finished)
    }

    /// [`Self::wait_until`], giving up at `deadline`. Whatever else may make `finished` say yes
    /// wakes the store's `bls.done` too (a request left in its mailbox, see `adopt`).
    pub(super) fn wait_until_by<T>(
        &self,
        deadline: std::time::Instant,
        mut finished: impl FnMut(&Self) -> Option<T>,
    ) -> wasmtime::Result<Option<T>> {
        if let Some(found) = finished(self) {
            return Ok(Some(found));
        }
        let Some(runtime) = self.shared.runtime.clone() else { return Ok(None) };
        let done = Arc::clone(&self.bls.done);
        let deadline = tokio::time::Instant::from_std(deadline);
        crate::execution::blocking(|| {
            runtime.block_on(async {
                loop {
                    // Registered before checking, so a call finishing in between still wakes us.
                    let notified = done.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    if let Some(found) = finished(self) {
                        return Ok(Some(found));
                    }
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Ok(finished(self));
                    }
                }
            })
        })
    }
}

impl HostPendingInfer {
    fn is_ready(&self) -> bool {
        self.taken || self.slot.lock().is_ok_and(|slot| slot.is_some())
    }
}

impl wit_host::HostPendingInfer for HostView<'_> {
    fn ready(&mut self, handle: Resource<HostPendingInfer>) -> wasmtime::Result<bool> {
        Ok(self.pending(&handle)?.is_ready())
    }

    fn get(
        &mut self,
        handle: Resource<HostPendingInfer>,
    ) -> wasmtime::Result<Result<Vec<Resource<HostTensor>>, wit::Error>> {
        if self.pending(&handle)?.taken {
            return Ok(Err(wit_error(CoreError::invalid_arg("the result of this BLS call was already taken"))));
        }
        let slot = Arc::clone(&self.pending(&handle)?.slot);
        let take = |_: &Self| slot.lock().ok().and_then(|mut s| s.take());
        // The spawned call is itself bounded by the time limit, so it always fills the slot; the
        // wait's own limit only guards against a runtime that stopped.
        let taken = self.wait_until(take)?;
        let pending = self.handles.table.get_mut(&handle).map_err(table_error)?;
        pending.taken = true;
        if taken.is_some() {
            // The result left the slot: nothing of the call stays with the handle.
            pending.open = None;
        }
        // Otherwise the wait gave up before the call ended: its result will still arrive, and
        // stays counted with the handle until the handle is dropped.
        let result = taken.unwrap_or_else(|| Err(CoreError::unavailable("the server is shutting down")));
        match result {
            Ok(response) => self.handles.new_held_tensors(response.outputs),
            Err(e) => Ok(Err(wit_error(e))),
        }
    }

    fn drop(&mut self, handle: Resource<HostPendingInfer>) -> wasmtime::Result<()> {
        // A call the guest no longer waits for runs to its end (bounded by the time limit).
        self.handles.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

/// `wait-any`: the index of a finished call among `calls`.
pub(super) fn wait_any(
    state: &mut HostView<'_>,
    calls: &[Resource<HostPendingInfer>],
) -> wasmtime::Result<Option<u32>> {
    let watched = Watched::new(state, calls)?;
    if watched.0.is_empty() {
        return Ok(None);
    }
    state.wait_until(|_| watched.first_finished())
}

/// What `wait-any` and `wait` watch of each of their calls: whether it has finished.
pub(super) struct Watched(Vec<(bool, ResultSlot)>);

/// Where a spawned `infer-async` call leaves its result.
type ResultSlot = Arc<Mutex<Option<CoreResult<InferResponse>>>>;

impl Watched {
    pub(super) fn new(state: &HostView<'_>, calls: &[Resource<HostPendingInfer>]) -> wasmtime::Result<Self> {
        let mut slots = Vec::with_capacity(calls.len());
        for call in calls {
            let pending = state.pending(call)?;
            slots.push((pending.taken, Arc::clone(&pending.slot)));
        }
        Ok(Self(slots))
    }

    /// The index of the first finished call.
    pub(super) fn first_finished(&self) -> Option<u32> {
        let at = self.0.iter().position(|(taken, slot)| *taken || slot.lock().is_ok_and(|s| s.is_some()))?;
        u32::try_from(at).ok()
    }
}

impl wit_host::HostResponseStream for HostView<'_> {
    fn next(
        &mut self,
        handle: Resource<HostResponseStream>,
    ) -> wasmtime::Result<Option<Result<Vec<Resource<HostTensor>>, wit::Error>>> {
        let Some(runtime) = self.shared.runtime.clone() else {
            return Ok(None);
        };
        let timeout = self.shared.bls_timeout;
        let stream = self.handles.table.get_mut(&handle).map_err(table_error)?;
        // An async block: the timer is made at the first poll, inside the runtime's context.
        let item = crate::execution::wait_for(&runtime, async { tokio::time::timeout(timeout, stream.0.recv()).await });
        match item {
            Ok(None) => Ok(None),
            // Copied: the guest may keep them as long as it likes, on its own account, while the
            // callee's count of the bytes it buffers for this stream drains (see outlet.rs).
            Ok(Some(Ok(response))) => {
                let outputs = response.outputs.into_iter().map(crate::tensor::Tensor::with_own_bytes).collect();
                Ok(Some(self.handles.new_held_tensors(outputs)?))
            }
            Ok(Some(Err(e))) => Ok(Some(Err(wit_error(e)))),
            Err(_) => Ok(Some(Err(wit_error(CoreError::unavailable(format!(
                "no response from the streaming BLS call within {} ms",
                timeout.as_millis()
            )))))),
        }
    }

    fn drop(&mut self, handle: Resource<HostResponseStream>) -> wasmtime::Result<()> {
        self.handles.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use bytes::Bytes;
    use wit_host::{Host as _, HostResponseStream as _};

    use super::super::sandbox::AllowList;
    use super::super::state::{GuestShared, GuestState};
    use super::super::test_support::{shared, state};
    use super::*;
    use crate::infer::{InferFuture, InferResponse, ParamValue, ResponseStream};
    use crate::tensor::{DataType, Tensor};

    /// Records requests; answers with the inputs renamed `OUT`, or per the model name: `slow`
    /// never answers, `missing` is not found, and `stream` streams two responses and an error.
    #[derive(Default)]
    struct FakeInfer {
        seen: Mutex<Vec<InferRequest>>,
        /// Senders of streams kept open without responses.
        open: Mutex<Vec<crate::infer::ResponseSender>>,
    }

    impl FakeInfer {
        fn answer(&self, request: InferRequest) -> CoreResult<InferResponse> {
            self.seen.lock().expect("lock").push(request.clone());
            if request.model_name == "missing" {
                return Err(CoreError::not_found(format!("unknown model: '{}'", request.model_name)));
            }
            let outputs = request.inputs.into_iter().map(|t| Tensor { name: "OUT".into(), ..t }).collect();
            Ok(InferResponse { model_name: request.model_name, outputs, is_final: true, ..Default::default() })
        }
    }

    impl Infer for FakeInfer {
        fn infer(&self, request: InferRequest) -> InferFuture<'_, InferResponse> {
            Box::pin(async move {
                if request.model_name == "slow" {
                    std::future::pending::<()>().await;
                }
                self.answer(request)
            })
        }

        fn infer_stream(&self, request: InferRequest) -> InferFuture<'_, ResponseStream> {
            Box::pin(async move {
                let (tx, rx) = crate::infer::response_stream();
                let slow = request.model_name == "slow";
                let first = self.answer(request)?;
                let _ = tx.try_send(Ok(first.clone()));
                if slow {
                    self.open.lock().expect("lock").push(tx);
                    return Ok(rx);
                }
                let _ = tx.try_send(Ok(first));
                let _ = tx.try_send(Err(CoreError::internal("stream broke")));
                Ok(rx)
            })
        }
    }

    struct Fixture {
        runtime: tokio::runtime::Runtime,
        infer: Arc<FakeInfer>,
    }

    impl Fixture {
        fn new() -> Self {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().expect("runtime");
            Self { runtime, infer: Arc::default() }
        }

        fn state(&self, allowed: AllowList) -> GuestState {
            let infer: Arc<dyn Infer> = self.infer.clone();
            let infer: Weak<dyn Infer> = Arc::downgrade(&infer);
            state(Arc::new(GuestShared {
                model_name: "caller".into(),
                allowed_models: allowed,
                bls_timeout: Duration::from_millis(100),
                infer: Some(infer),
                runtime: Some(self.runtime.handle().clone()),
                clock: crate::backend::wasm::timing::ExecutionClock::Wall,
                telemetry: Default::default(),
                capabilities: Default::default(),
            }))
        }
    }

    fn input(s: &mut GuestState) -> Resource<HostTensor> {
        let t = Tensor::new("IN", DataType::Uint8, vec![2], Bytes::from_static(&[4, 5])).expect("tensor");
        s.handles.new_tensor(t).expect("push")
    }

    fn call(s: &mut GuestState, model: &str) -> Result<Vec<Resource<HostTensor>>, wit::Error> {
        let t = input(s);
        let params = vec![wit::Parameter { key: "p".into(), value: wit::ParamValue::Bool(true) }];
        s.host()
            .infer(model.into(), Some(2), vec![Resource::new_borrow(t.rep())], vec!["OUT".into()], params)
            .expect("no trap")
    }

    #[test]
    fn builds_the_request_and_returns_the_outputs() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let outputs = call(&mut s, "target").expect("answered");
        assert_eq!(outputs.len(), 1);
        let out = s.handles.tensor(&outputs[0]).expect("output tensor");
        assert_eq!((out.name.as_str(), out.data.as_ref()), ("OUT", &[4u8, 5][..]));

        let seen = f.infer.seen.lock().expect("lock");
        let request = &seen[0];
        assert_eq!(request.model_name, "target");
        assert_eq!(request.model_version, Some(2));
        assert_eq!(request.id, None);
        assert_eq!(request.inputs.len(), 1);
        assert_eq!(request.inputs[0].name, "IN");
        assert_eq!(request.outputs, vec![RequestedOutput::named("OUT")]);
        assert_eq!(request.parameters.get("p"), Some(&ParamValue::Bool(true)));
    }

    #[test]
    fn outputs_are_held_on_the_callers_account() {
        // The test state's memory limit is 1 MiB: what it holds may reach 4 MiB. The fake's
        // output shares the input's bytes, which charge nothing until they come back as outputs.
        let fx = Fixture::new();
        let mut s = fx.state(AllowList::Any);
        // Each output's name and shape ("OUT", one dimension) count too: 11 bytes.
        let n = (1 << 20) - 11;
        let mib = Tensor::new("IN", DataType::Uint8, vec![n as i64], Bytes::from(vec![7u8; n])).expect("tensor");
        let big = s.handles.new_tensor(mib).expect("push");
        let run = |s: &mut GuestState| {
            s.host()
                .infer("m".into(), None, vec![Resource::new_borrow(big.rep())], Vec::new(), Vec::new())
                .expect("no trap")
        };
        let mut held: Vec<_> = (0..4).flat_map(|_| run(&mut s).expect("within the limit")).collect();
        let refused = run(&mut s).expect_err("a fifth MiB passes the limit");
        assert_eq!(refused.code, wit::ErrorCode::Internal);
        assert!(refused.message.contains("already take 4194304 bytes; 1048576 more would pass"), "{}", refused.message);
        wit::HostTensor::drop(&mut s.types(), held.pop().expect("four")).expect("drop");
        held.extend(run(&mut s).expect("a dropped output gave its bytes back"));
        assert_eq!(held.len(), 4);
    }

    #[test]
    fn refuses_models_not_allowed_before_anything_else() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Only(vec!["other".into()]));
        let e = call(&mut s, "target").expect_err("refused");
        assert_eq!(e.code, wit::ErrorCode::InvalidArg);
        assert_eq!(
            e.message,
            "model 'caller' is not allowed to call model 'target' (add it to the 'allowed_models' parameter; for \
             models served from model.py, the server's --python-allowed-models sets the default)"
        );
        assert!(f.infer.seen.lock().expect("lock").is_empty());
        // Even a bad input handle is not looked at first.
        let refused = s.host().infer("target".into(), None, vec![Resource::new_borrow(999)], vec![], vec![]);
        assert!(refused.expect("no trap").is_err());
    }

    #[test]
    fn a_bad_input_handle_traps() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let trap = s.host().infer("target".into(), None, vec![Resource::new_borrow(999)], vec![], vec![]);
        assert!(trap.is_err());
    }

    #[test]
    fn errors_of_the_target_reach_the_guest() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let e = call(&mut s, "missing").expect_err("not found");
        assert_eq!((e.code, e.message.as_str()), (wit::ErrorCode::NotFound, "unknown model: 'missing'"));
    }

    #[test]
    fn calls_are_bounded_by_the_time_limit() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let e = call(&mut s, "slow").expect_err("timed out");
        assert_eq!(e.code, wit::ErrorCode::Unavailable);
        assert_eq!(e.message, "BLS call to model 'slow' timed out after 100 ms");
    }

    #[test]
    fn without_a_connection_or_runtime_the_server_is_shutting_down() {
        let mut s = state(shared(AllowList::Any, None));
        let e = call(&mut s, "target").expect_err("unavailable");
        assert_eq!((e.code, e.message.as_str()), (wit::ErrorCode::Unavailable, "the server is shutting down"));

        // A manager that is gone is the same.
        let gone: Weak<dyn Infer> = {
            let infer: Arc<dyn Infer> = Arc::new(FakeInfer::default());
            Arc::downgrade(&infer)
        };
        let f = Fixture::new();
        let mut s = state(Arc::new(GuestShared {
            model_name: "caller".into(),
            allowed_models: AllowList::Any,
            bls_timeout: Duration::from_millis(100),
            infer: Some(gone),
            runtime: Some(f.runtime.handle().clone()),
            clock: crate::backend::wasm::timing::ExecutionClock::Wall,
            telemetry: Default::default(),
            capabilities: Default::default(),
        }));
        let e = call(&mut s, "target").expect_err("unavailable");
        assert_eq!(e.message, "the server is shutting down");
    }

    #[test]
    fn open_calls_count_until_their_results_are_taken_or_their_handles_dropped() {
        use wit_host::HostPendingInfer as _;
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let start =
            |s: &mut GuestState| s.host().infer_async("m".into(), None, vec![], vec![], vec![]).expect("no trap");
        let mut calls: Vec<_> = (0..MAX_OPEN_CALLS).map(|_| start(&mut s).expect("open")).collect();
        // Finished, but with results nobody took: still open (the host keeps their outputs).
        for call in &calls {
            assert_eq!(wait_any(&mut s.host(), &[Resource::new_borrow(call.rep())]).expect("no trap"), Some(0));
        }
        let refused = start(&mut s).expect_err("one call too many");
        assert_eq!(refused.code, wit::ErrorCode::Unavailable);
        assert!(refused.message.contains("has 64 BLS calls open"), "{}", refused.message);
        // Taking a result closes its call; so does dropping a handle.
        s.host().get(Resource::new_borrow(calls[0].rep())).expect("no trap").expect("outputs");
        calls.push(start(&mut s).expect("room for one"));
        wit_host::HostPendingInfer::drop(&mut s.host(), calls.swap_remove(1)).expect("drop");
        // A stream is open until dropped.
        let stream =
            s.host().infer_stream("target".into(), None, vec![], vec![], vec![]).expect("no trap").expect("open");
        assert!(start(&mut s).is_err(), "the stream took the last room");
        wit_host::HostResponseStream::drop(&mut s.host(), stream).expect("drop");
        assert!(start(&mut s).is_ok(), "a dropped stream gave its room back");
    }

    #[test]
    fn streams_yield_every_response_then_end() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let t = input(&mut s);
        let stream = s
            .host()
            .infer_stream("target".into(), None, vec![Resource::new_borrow(t.rep())], vec![], vec![])
            .expect("no trap")
            .expect("started");
        let next = |s: &mut GuestState| s.host().next(Resource::new_borrow(stream.rep())).expect("no trap");
        for _ in 0..2 {
            let outputs = next(&mut s).expect("a response").expect("outputs");
            assert_eq!(s.handles.tensor(&outputs[0]).expect("tensor").name, "OUT");
        }
        let e = next(&mut s).expect("an error response").expect_err("error");
        assert_eq!((e.code, e.message.as_str()), (wit::ErrorCode::Internal, "stream broke"));
        assert!(next(&mut s).is_none());
        wit_host::HostResponseStream::drop(&mut s.host(), stream).expect("drop");
        assert_eq!(f.infer.seen.lock().expect("lock")[0].model_version, None);
    }

    #[test]
    fn a_silent_stream_times_out_per_response() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let stream =
            s.host().infer_stream("slow".into(), None, vec![], vec![], vec![]).expect("no trap").expect("started");
        let borrow = || Resource::<HostResponseStream>::new_borrow(stream.rep());
        assert!(s.host().next(borrow()).expect("no trap").expect("first").is_ok());
        let e = s.host().next(borrow()).expect("no trap").expect("an error").expect_err("timed out");
        assert_eq!(e.code, wit::ErrorCode::Unavailable);
        assert_eq!(e.message, "no response from the streaming BLS call within 100 ms");
    }

    #[test]
    fn a_stream_start_error_is_returned() {
        let f = Fixture::new();
        let mut s = f.state(AllowList::Any);
        let Err(e) = s.host().infer_stream("missing".into(), None, vec![], vec![], vec![]).expect("no trap") else {
            panic!("must fail");
        };
        assert_eq!(e.code, wit::ErrorCode::NotFound);
    }
}
