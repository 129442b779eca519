//! A decoupled request's way out: its responder, and the bytes of its responses that the server
//! still buffers (sent by the guest, not yet written to the caller).
//!
//! A caller that stops reading a stream fills the request's channels (64 responses here, 64 in
//! its response stream, 256 encoded ones in a gRPC stream); a guest could make each of those
//! responses as large as its held-bytes limit and so make the server buffer hundreds of times its
//! memory for one request. Each response's bytes therefore stay counted against the request until
//! the last copy of them is dropped (written out, or dropped with the stream): past
//! `max_memory_bytes` buffered, a send waits for the reader, up to the execution's deadline, as
//! it waits for a full channel. One response larger than that still goes when nothing is
//! buffered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;

use crate::backend::{RawResponse, Responder, Sent, send_blocking, send_blocking_until};
use crate::error::{CoreError, CoreResult};
use crate::tensor::Tensor;

/// How long a send may wait for a reader: until the execution's deadline, on the runtime that
/// times it. `None` outside `execute` or without a runtime (then it waits as long as it takes for
/// a full channel, and not for buffered bytes).
pub(super) type SendDeadline = Option<(Instant, tokio::runtime::Handle)>;

/// See the module docs.
pub(super) struct Outlet {
    responder: Responder,
    buffered: Arc<Buffered>,
}

/// Bytes of one request's responses still alive in the server, and a wake-up when they drop.
#[derive(Default)]
struct Buffered {
    bytes: AtomicUsize,
    drained: tokio::sync::Notify,
}

/// A response tensor's bytes, counted in their request's [`Buffered`] until the last copy goes.
struct Counted {
    data: Bytes,
    buffered: Arc<Buffered>,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.buffered.bytes.fetch_sub(self.data.len(), Ordering::AcqRel);
        self.buffered.drained.notify_waiters();
    }
}

impl Outlet {
    pub(super) fn new(responder: Responder) -> Self {
        Self { responder, buffered: Arc::default() }
    }

    /// Whether the caller has gone: nothing reads the request's responses any more.
    pub(super) fn is_cancelled(&self) -> bool {
        self.responder.is_closed()
    }

    /// Sends one response, waiting (until the deadline) while its request already buffers
    /// `budget` bytes or its channel is full.
    pub(super) fn send(
        &self,
        outputs: CoreResult<Vec<Tensor>>,
        parameters: crate::infer::Parameters,
        is_final: bool,
        budget: usize,
        until: &SendDeadline,
    ) -> Sent {
        let size = outputs.as_ref().map_or(0, |tensors| tensors.iter().map(|t| t.data.len()).sum());
        if let Some((deadline, runtime)) = until
            && !self.wait_for_room(size, budget, *deadline, runtime)
        {
            return Sent::TimedOut;
        }
        let outputs = outputs.map(|tensors| tensors.into_iter().map(|t| self.count(t)).collect());
        let response = RawResponse { outputs, parameters, is_final };
        match until {
            Some((deadline, runtime)) => send_blocking_until(&self.responder, response, *deadline, runtime),
            None if send_blocking(&self.responder, response) => Sent::Delivered,
            None => Sent::Gone,
        }
    }

    /// Ends the request with `error` as its final response, sent from a task once its caller
    /// reads again (or dropped with the stream if it never does), without holding anyone.
    pub(super) fn fail_when_read(self, error: CoreError, runtime: &tokio::runtime::Handle) {
        runtime.spawn(async move {
            let _ = self.responder.send(RawResponse::new(Err(error), true)).await;
        });
    }

    /// Bytes of this request's responses the server still holds.
    #[cfg(test)]
    fn buffered(&self) -> usize {
        self.buffered.bytes.load(Ordering::Acquire)
    }

    fn count(&self, mut tensor: Tensor) -> Tensor {
        if !tensor.data.is_empty() {
            self.buffered.bytes.fetch_add(tensor.data.len(), Ordering::AcqRel);
            let counted = Counted { data: tensor.data, buffered: Arc::clone(&self.buffered) };
            tensor.data = Bytes::from_owner(counted);
        }
        tensor
    }

    /// Whether `size` more bytes fit the request's budget before `deadline` (at once when
    /// nothing is buffered), or the caller went (the send then finds it gone).
    fn wait_for_room(&self, size: usize, budget: usize, deadline: Instant, runtime: &tokio::runtime::Handle) -> bool {
        let buffered = &self.buffered;
        let room = || {
            let held = buffered.bytes.load(Ordering::Acquire);
            held == 0 || held.saturating_add(size) <= budget || self.responder.is_closed()
        };
        if room() {
            return true;
        }
        let wait = async {
            loop {
                let drained = buffered.drained.notified();
                let mut drained = std::pin::pin!(drained);
                // Registered before the check, so a drop between the two still wakes it.
                drained.as_mut().enable();
                if room() {
                    return;
                }
                tokio::select! {
                    () = drained => {}
                    () = self.responder.closed() => return,
                }
            }
        };
        // An async block: the timer is made at the first poll, inside the runtime's context.
        let deadline = tokio::time::Instant::from_std(deadline);
        crate::execution::wait_for(runtime, async { tokio::time::timeout_at(deadline, wait).await }).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::infer::Parameters;
    use crate::tensor::DataType;

    fn tensor(bytes: usize) -> Tensor {
        Tensor::new("OUT", DataType::Uint8, vec![bytes as i64], Bytes::from(vec![1u8; bytes])).expect("tensor")
    }

    #[test]
    fn responses_count_until_their_bytes_are_dropped_and_a_full_budget_waits_for_the_reader() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().expect("rt");
        let (tx, mut rx) = crate::backend::responder();
        let outlet = Outlet::new(tx);
        let until = |ms| Some((Instant::now() + Duration::from_millis(ms), runtime.handle().clone()));
        // Larger than the budget, but nothing is buffered: it goes.
        assert_eq!(outlet.send(Ok(vec![tensor(300)]), Parameters::new(), false, 100, &until(30)), Sent::Delivered);
        assert_eq!(outlet.buffered(), 300);
        // Nothing more fits until the reader drops that response.
        let started = Instant::now();
        assert_eq!(outlet.send(Ok(vec![tensor(1)]), Parameters::new(), false, 100, &until(30)), Sent::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(25), "it waited for the reader");
        let first = rx.try_recv().expect("the first response");
        let copy = first.outputs.as_ref().expect("outputs")[0].data.clone();
        drop(first);
        assert_eq!(outlet.buffered(), 300, "a copy of the bytes (an encoded message) still counts");
        drop(copy);
        assert_eq!(outlet.buffered(), 0);
        // A consumer that keeps a stream's tensors (an ensemble's run, a BLS caller) copies them
        // out: what it keeps no longer counts.
        assert_eq!(outlet.send(Ok(vec![tensor(50)]), Parameters::new(), false, 100, &until(30)), Sent::Delivered);
        let response = rx.try_recv().expect("a response");
        let kept: Vec<Tensor> = response.outputs.expect("outputs").into_iter().map(Tensor::with_own_bytes).collect();
        assert_eq!((outlet.buffered(), kept[0].data.len()), (0, 50));
        // A reader that drops the bytes while the send waits lets it through.
        assert_eq!(outlet.send(Ok(vec![tensor(80)]), Parameters::new(), false, 100, &until(1000)), Sent::Delivered);
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(rx.try_recv());
            rx
        });
        assert_eq!(outlet.send(Ok(vec![tensor(80)]), Parameters::new(), false, 100, &until(5000)), Sent::Delivered);
        let rx = reader.join().expect("reader");
        assert_eq!(outlet.buffered(), 80);
        // Errors and final flags carry no bytes.
        assert_eq!(
            outlet.send(Err(crate::error::CoreError::internal("x")), Parameters::new(), true, 100, &until(30)),
            Sent::Delivered
        );
        drop(rx);
        assert_eq!(outlet.buffered(), 0, "a dropped stream gives every byte back");
        // A request closed for a reader that does not read ends with the error once it reads.
        let (tx, mut rx) = crate::backend::responder();
        let outlet = Outlet::new(tx);
        for _ in 0..crate::infer::RESPONSE_BUFFER {
            assert_eq!(outlet.send(Ok(Vec::new()), Parameters::new(), false, 100, &until(1000)), Sent::Delivered);
        }
        assert_eq!(outlet.send(Ok(Vec::new()), Parameters::new(), false, 100, &until(20)), Sent::TimedOut);
        outlet.fail_when_read(CoreError::unavailable("not read in time"), runtime.handle());
        for _ in 0..crate::infer::RESPONSE_BUFFER {
            assert!(runtime.block_on(rx.recv()).expect("a buffered response").outputs.is_ok());
        }
        let last = runtime.block_on(rx.recv()).expect("the error");
        assert!(last.is_final);
        assert_eq!(last.outputs.expect_err("an error").message, "not read in time");
        assert!(runtime.block_on(rx.recv()).is_none(), "then the end of the stream");
        // A caller that went while its bytes live on elsewhere: the send finds it gone at once.
        let (tx, mut rx) = crate::backend::responder();
        let outlet = Outlet::new(tx);
        assert_eq!(outlet.send(Ok(vec![tensor(300)]), Parameters::new(), false, 100, &until(1000)), Sent::Delivered);
        let kept = rx.try_recv().expect("the response");
        drop(rx);
        let started = Instant::now();
        assert_eq!(outlet.send(Ok(vec![tensor(1)]), Parameters::new(), false, 100, &until(5000)), Sent::Gone);
        assert!(started.elapsed() < Duration::from_secs(1), "it did not wait for its deadline");
        drop(kept);
    }
}
