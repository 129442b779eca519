//! Adoption (WIT `host.adopt`, `host.wait`, `host.finish`): Triton's `async def execute` for
//! decoupled models, whose coroutines run concurrently on one instance's event loop.
//!
//! Triton's python backend runs a decoupled model's coroutine `execute` in the background on an
//! event loop the instance shares, so the instance takes the next request while earlier ones
//! await; a model that is not decoupled runs each coroutine to its end before the next `execute`.
//! Here an instance runs one `execute-by-value` call at a time, and a decoupled model's call may
//! take in later requests instead: the guest's event loop opens the call (`adopt`), and the pool
//! leaves requests that find no idle instance in the instance's mailbox
//! ([`crate::backend::mailbox`]), up to `max_async_requests` unfinished at once, the call's own
//! included. The loop waits (`wait`) for its BLS calls, its timers and new requests at once,
//! starts each request it takes as a coroutine of its own, and ends each request when its
//! coroutine does (`finish`): that request's stream ends and its caller is answered then, however
//! long the call goes on. The call returns once every request it took has ended; `adopt(close)`
//! closes it first, so none is left waiting in the mailbox.
//!
//! Time limit: `max_execute_ms` bounds each request from when the call took it. One that reaches
//! it while the guest waits is ended with the time-limit error (and the guest told, to stop its
//! work); the call's own limit (the epoch deadline that traps a guest that never waits) is the
//! latest of its unfinished requests' limits, so a trap only ever ends requests past their own.
//! A trap fails every unfinished request of the call with its error, and those still waiting in
//! the mailbox too; the instance is rebuilt for the next request as after any trap.
//! Responses of one request keep their order; those of different requests interleave.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Resource;

use super::bindings::{wit, wit_host};
use super::bls::Watched;
use super::convert::kind_from_wit;
use super::pack;
use super::request::{BY_VALUE_INPUT_BYTES, READ_INPUTS_MAX_TOTAL};
use super::resources::{HostPendingInfer, HostRequest};
use super::state::{Adoption, ExecuteCall, HostView, Offer, Tracked};
use crate::backend::mailbox::Done;
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

/// `max_async_requests` when the config does not set it: Triton sets no bound, and one instance's
/// BLS calls are bounded at 64 open at once as well (`bls::MAX_OPEN_CALLS`).
const DEFAULT_MAX_ASYNC_REQUESTS: usize = 64;

/// The most `max_async_requests` may be: every request held in one instance holds its inputs.
const MAX_ASYNC_REQUESTS_CAP: usize = 1024;

/// The config parameter `max_async_requests`: how many requests one instance of a decoupled
/// model runs at once in `async def execute`.
pub(super) fn max_async_requests(config: &ModelConfig) -> CoreResult<usize> {
    const KEY: &str = "max_async_requests";
    let n = crate::config::positive_parameter(config, KEY)
        .map_err(|e| CoreError::invalid_arg(format!("model '{}': {e}", config.name)))?;
    match n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)) {
        None => Ok(DEFAULT_MAX_ASYNC_REQUESTS),
        Some(n) if n <= MAX_ASYNC_REQUESTS_CAP => Ok(n),
        Some(n) => Err(CoreError::invalid_arg(format!(
            "model '{}': parameter '{KEY}' is {n}; at most {MAX_ASYNC_REQUESTS_CAP} is allowed",
            config.name
        ))),
    }
}

/// What `adopt` hands the guest for one request: its position in the call and its inputs' pack.
pub(super) type Adopted = (u32, Vec<u8>);

impl Adoption {
    /// Starts a decoupled model's call, whose own requests (with their callers, `dones`) start now
    /// and may be joined by others through `offer` (none: not an `execute-by-value` call).
    pub(super) fn begin(&mut self, offer: Option<Offer>, deadline: Instant, dones: Vec<Option<Done>>) {
        self.open = false;
        self.requests = dones.into_iter().map(|done| Tracked { deadline, done, ended: None }).collect();
        self.offer = offer;
    }

    /// Ends the call (`trapped`: with the guest's trap). Every request waiting in the mailbox
    /// fails; a request the call took and never ended is failed with the trap, or else ended
    /// now (closed, as at the end of any decoupled call). Returns how the guest ended each of
    /// the call's first `count` requests (its own), where it did: their results.
    pub(super) fn end(&mut self, count: usize, trapped: Option<&CoreError>) -> Vec<Option<CoreResult<()>>> {
        if let Some(offer) = self.offer.take() {
            let left = CoreError::unavailable(format!(
                "model '{}': the execution this request was to join ended before it started the request; \
                 try again",
                offer.model
            ));
            offer.mailbox.reset(trapped.unwrap_or(&left));
        }
        self.open = false;
        let mut own = Vec::with_capacity(count);
        for (position, tracked) in std::mem::take(&mut self.requests).into_iter().enumerate() {
            match (tracked.ended, trapped) {
                (Some(result), _) if position < count => own.push(Some(result)),
                (Some(_), _) => {}
                (None, Some(e)) => {
                    if let Some(done) = &tracked.done {
                        done.finish(Err(e.clone()));
                    }
                    own.push(None);
                }
                (None, None) if position < count => own.push(None),
                (None, None) => {
                    if let Some(done) = &tracked.done {
                        done.finish(Ok(()));
                    }
                }
            }
        }
        own.truncate(count);
        own
    }
}

impl ExecuteCall {
    /// Ends the request at `position` with `result`, if it has not ended: its stream closes (the
    /// caller then gets `result`'s error after what it was sent), and its room is free again.
    fn end_request(&mut self, position: usize, result: CoreResult<()>) {
        let Some(tracked) = self.adoption.requests.get_mut(position) else { return };
        if tracked.ended.is_some() {
            return;
        }
        if let Some(responder) = self.responders.get(position)
            && let Ok(mut outlet) = responder.lock()
        {
            outlet.take();
        }
        if let Some(done) = &tracked.done {
            done.finish(result.clone());
        }
        tracked.ended = Some(result);
        if let Some(offer) = self.adoption.offer.as_ref().filter(|_| self.adoption.open) {
            offer.mailbox.ended(1);
        }
        self.refresh_deadline();
    }

    /// The call's time limit: the latest of its unfinished requests' (unchanged when none is).
    fn refresh_deadline(&mut self) {
        let latest = self.adoption.requests.iter().filter(|t| t.ended.is_none()).map(|t| t.deadline).max();
        if let (Some(latest), Some(_)) = (latest, self.deadline) {
            self.deadline = Some(latest);
        }
    }

    /// The earliest time limit of the call's unfinished requests.
    fn earliest_deadline(&self) -> Option<Instant> {
        self.adoption.requests.iter().filter(|t| t.ended.is_none()).map(|t| t.deadline).min()
    }

    /// Ends every unfinished request past its time limit at `now` with the time-limit error;
    /// their positions.
    fn expire(&mut self, now: Instant) -> Vec<u32> {
        let Some(offer) = &self.adoption.offer else { return Vec::new() };
        let error = CoreError::internal(format!(
            "WebAssembly model '{}' execute exceeded its time limit of {} ms (max_execute_ms)",
            offer.model,
            offer.max_execute.as_millis()
        ));
        let expired: Vec<usize> = (self.adoption.requests.iter().enumerate())
            .filter(|(_, t)| t.ended.is_none() && t.deadline <= now)
            .map(|(position, _)| position)
            .collect();
        for &position in &expired {
            self.end_request(position, Err(error.clone()));
        }
        expired.into_iter().filter_map(|p| u32::try_from(p).ok()).collect()
    }
}

impl HostView<'_> {
    /// `adopt`: see the WIT docs and the module docs.
    pub(super) fn adopt_requests(&mut self, close: bool) -> wasmtime::Result<Option<Vec<Adopted>>> {
        let call = &mut *self.call;
        let Some(offer) = call.adoption.offer.as_ref() else { return Ok(None) };
        let mailbox = Arc::clone(&offer.mailbox);
        let deadline = Instant::now() + offer.max_execute;
        if !call.adoption.open {
            call.adoption.open = true;
            let unfinished = call.adoption.requests.iter().filter(|t| t.ended.is_none()).count();
            mailbox.open(offer.limit, unfinished, Arc::clone(&self.bls.done));
        }
        let taken = if close { mailbox.close() } else { mailbox.take() };
        let mut budget = READ_INPUTS_MAX_TOTAL;
        let mut adopted = Vec::with_capacity(taken.len());
        for mut request in taken {
            let position = call.adoption.requests.len();
            let pack = pack::pack_inputs(&request.inputs, BY_VALUE_INPUT_BYTES, &mut budget);
            let done = request.done.take();
            let (host_request, responder) = HostRequest::new(request, call.number, position);
            call.responders.push(responder);
            // Positions of `request.at` are those of `pending_requests`: the call's own first.
            call.pending_requests.resize_with(position, || None);
            call.pending_requests.push(Some(host_request));
            call.adoption.requests.push(Tracked { deadline, done, ended: None });
            adopted.push((u32::try_from(position).unwrap_or(u32::MAX), pack));
        }
        call.refresh_deadline();
        Ok(Some(adopted))
    }

    /// `finish`: see the WIT docs.
    pub(super) fn finish_request(&mut self, position: u32, answer: wit::Answer) {
        if !self.call.adoption.open {
            return;
        }
        let result = match answer {
            wit::Answer::Given => Ok(()),
            wit::Answer::Error(e) => Err(CoreError::new(kind_from_wit(e.code), e.message)),
            wit::Answer::Outputs(_) => Err(CoreError::internal(format!(
                "decoupled model '{}' answered with outputs; it must send them through response senders",
                self.shared.model_name
            ))),
        };
        self.call.end_request(position as usize, result);
    }

    /// `wait`: see the WIT docs.
    pub(super) fn wait_wake(
        &mut self,
        calls: &[Resource<HostPendingInfer>],
        timeout_ns: Option<u64>,
    ) -> wasmtime::Result<wit_host::Wake> {
        let watched = Watched::new(self, calls)?;
        let started = Instant::now();
        let mut until = started + self.shared.bls_timeout;
        if let Some(ns) = timeout_ns {
            until = until.min(started + Duration::from_nanos(ns));
        }
        let expires = self.call.earliest_deadline();
        if let Some(expires) = expires {
            until = until.min(expires);
        }
        let mailbox = self.call.adoption.offer.as_ref().filter(|_| self.call.adoption.open).map(|o| &o.mailbox);
        let mailbox = mailbox.cloned();
        let woken = |_: &HostView<'_>| {
            let ready = watched.first_finished().is_some()
                || mailbox.as_ref().is_some_and(|m| m.has_waiting())
                || expires.is_some_and(|at| at <= Instant::now());
            ready.then_some(())
        };
        self.wait_until_by(until, woken)?;
        let expired = self.call.expire(Instant::now());
        Ok(wit_host::Wake {
            finished: watched.first_finished(),
            requests: mailbox.is_some_and(|m| m.has_waiting()),
            expired: (!expired.is_empty()).then_some(expired),
            waited_ns: u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Mutex;

    use super::*;
    use crate::backend::mailbox::Mailbox;

    #[test]
    fn max_async_requests_has_a_default_and_a_cap() {
        let config = |extra: &str| {
            let text = format!(
                "name: \"m\" {extra} input [ {{ name: \"x\" data_type: TYPE_INT32 dims: [ 1 ] }} ] \
                 output [ {{ name: \"y\" data_type: TYPE_INT32 dims: [ 1 ] }} ]"
            );
            crate::config::parse_pbtxt(&text, Path::new("config.pbtxt")).expect("config")
        };
        let param =
            |v: &str| format!("parameters {{ key: \"max_async_requests\" value: {{ string_value: \"{v}\" }} }}");
        assert_eq!(max_async_requests(&config("")).expect("default"), 64);
        assert_eq!(max_async_requests(&config(&param("8"))).expect("set"), 8);
        let e = max_async_requests(&config(&param("5000"))).expect_err("past the cap");
        assert_eq!(e.message, "model 'm': parameter 'max_async_requests' is 5000; at most 1024 is allowed");
        let e = max_async_requests(&config(&param("0"))).expect_err("not positive");
        assert_eq!(e.message, "model 'm': parameter 'max_async_requests' must be a positive integer, got '0'");
    }

    /// A call of one request adopting up to 4, its adoption and mailbox open, and the channel
    /// its own request's end arrives on.
    fn adopting_call() -> (ExecuteCall, Arc<Mailbox>, tokio::sync::oneshot::Receiver<CoreResult<()>>) {
        let (own, own_ended) = Done::channel();
        let mut call = ExecuteCall::default();
        let mailbox = Mailbox::new();
        let limit = 4;
        let offer =
            Offer { mailbox: Arc::clone(&mailbox), limit, max_execute: Duration::from_millis(50), model: "m".into() };
        let now = Instant::now();
        call.deadline = Some(now + Duration::from_millis(50));
        call.responders.push(Arc::new(Mutex::new(None)));
        call.adoption.begin(Some(offer), now + Duration::from_millis(50), vec![Some(own)]);
        call.adoption.open = true;
        mailbox.open(limit, 1, Arc::new(tokio::sync::Notify::new()));
        (call, mailbox, own_ended)
    }

    #[tokio::test]
    async fn each_request_ends_on_its_own_and_past_its_limit_with_the_time_limit_error() {
        let (mut call, mailbox, own_ended) = adopting_call();
        assert_eq!(mailbox.room(), 3);
        call.end_request(0, Err(CoreError::invalid_arg("bad input")));
        assert_eq!(own_ended.await.expect("answered").expect_err("its error").message, "bad input");
        assert_eq!(mailbox.room(), 4, "its room is free again");
        call.end_request(0, Ok(()));
        // A request past its limit is ended with the time-limit error.
        call.adoption.requests.push(Tracked { deadline: Instant::now(), done: None, ended: None });
        call.responders.push(Arc::new(Mutex::new(None)));
        assert_eq!(call.expire(Instant::now()), vec![1]);
        let ended = call.adoption.requests[1].ended.clone().expect("ended");
        let message = ended.expect_err("time limit").message;
        assert_eq!(message, "WebAssembly model 'm' execute exceeded its time limit of 50 ms (max_execute_ms)");
        assert!(call.expire(Instant::now()).is_empty(), "once");
        // The call's own results say how the guest ended them.
        let own = call.adoption.end(1, None);
        assert_eq!(own.len(), 1);
        assert_eq!(own[0].clone().expect("ended").expect_err("error").message, "bad input");
    }

    #[tokio::test]
    async fn a_trap_fails_every_unfinished_request_and_those_waiting() {
        let (mut call, mailbox, own_ended) = adopting_call();
        let (waiting, waiting_ended) = Done::channel();
        let request = crate::backend::ExecRequest { done: Some(waiting), ..Default::default() };
        mailbox.offer(request).expect("room");
        let own = call.adoption.end(1, Some(&CoreError::internal("trapped")));
        assert!(own[0].is_none(), "not ended by the guest: the batch's result stands");
        assert_eq!(own_ended.await.expect("answered").expect_err("trap").message, "trapped");
        assert_eq!(waiting_ended.await.expect("answered").expect_err("trap").message, "trapped");
        assert_eq!(mailbox.room(), 0, "closed");
    }
}
