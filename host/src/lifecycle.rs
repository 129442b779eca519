//! The part of the server's life the orchestrators watch: inference requests in flight, and the
//! drain that SIGTERM starts.
//!
//! On SIGTERM (Kubernetes' way of ending a pod) the server turns not-ready at once and its doors
//! stop taking connections at once (a new client is refused, and retries elsewhere); requests
//! already sent on open connections are read and answered, each connection closing after its
//! last. The server exits once those connections are done, or when `--exit-timeout-secs` has
//! passed, whichever is first: a request still running then is cut, and an in-process stream's
//! reader gets an error saying so ([`TrackedStream::recv`]). Liveness stays true
//! throughout. Since the ports close at the signal, a deployment needs a preStop sleep to cover
//! the time the endpoint removal takes to reach every node: the chart and both runtimes in
//! deploy/ have one.
//!
//! Triton 2.51 differs: it stays ready until its HTTP connections have drained, then answers live
//! and ready with 503 "Server exiting" and refuses new inference ("Server is stopping, scheduler
//! for model has stopped accepting new inference requests") except a sequence's next request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::{CoreError, CoreResult};
use crate::infer::{InferResponse, ResponseStream};

/// Counts inference requests in flight (one per request, however many responses it streams)
/// and knows whether the server is draining.
#[derive(Debug, Default)]
pub struct Lifecycle {
    in_flight: AtomicUsize,
    idle: Notify,
    /// True from the drain's start: readiness reads it.
    draining: tokio::sync::watch::Sender<bool>,
    /// True once the server has given up on the requests still in flight (the exit timeout
    /// passed): their streams end with [`cut_short`].
    abandoned: tokio::sync::watch::Sender<bool>,
}

/// What a stream's reader gets when the server stops before the stream's last response.
pub fn cut_short() -> CoreError {
    CoreError::unavailable(
        "the server stopped before the request finished: its responses were cut short at the exit timeout",
    )
}

impl Lifecycle {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Counts one request until the returned guard is dropped.
    pub fn start_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Marks the server as draining: readiness turns false.
    pub fn begin_drain(&self) {
        self.draining.send_replace(true);
    }

    /// Waits until no request is in flight or `timeout` passes. Returns the number still in
    /// flight (0: drained).
    pub async fn wait_idle(&self, timeout: Duration) -> usize {
        let wait_idle = async {
            loop {
                // Registered before the check, so a request ending in between still wakes us.
                let notified = self.idle.notified();
                if self.in_flight() == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait_idle).await;
        self.in_flight()
    }

    /// Gives up on the requests still in flight: their streams' readers get [`cut_short`] instead
    /// of an end that would look like the stream's natural one.
    pub fn abandon(&self) {
        self.abandoned.send_replace(true);
    }

    /// Whether [`Self::abandon`] has been called.
    pub fn is_abandoned(&self) -> bool {
        *self.abandoned.borrow()
    }
}

/// One request in flight; dropping it ends the count.
#[derive(Debug)]
pub struct InFlight(Arc<Lifecycle>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A request's responses, counted in flight until the stream is dropped.
#[derive(Debug)]
pub struct TrackedStream {
    responses: ResponseStream,
    abandoned: tokio::sync::watch::Receiver<bool>,
    /// Its final response (or its end, or the cut) has been returned: nothing follows.
    over: bool,
    _in_flight: InFlight,
}

impl TrackedStream {
    pub fn new(responses: ResponseStream, in_flight: InFlight) -> Self {
        let abandoned = in_flight.0.abandoned.subscribe();
        Self { responses, abandoned, over: false, _in_flight: in_flight }
    }

    /// The next response; `None` once the request has answered its last. When the server stops
    /// before that (its exit timeout passed with the request still running), the responses
    /// already produced come first, then one [`cut_short`] error, then `None`: a reader can tell
    /// a stream cut short from one that ended.
    pub async fn recv(&mut self) -> Option<CoreResult<InferResponse>> {
        if self.over {
            return None;
        }
        // `None`: the server gave up on the request (checked after what was already sent).
        let received = if *self.abandoned.borrow() {
            None
        } else {
            tokio::select! {
                biased;
                item = self.responses.recv() => Some(item),
                _ = self.abandoned.wait_for(|a| *a) => None,
            }
        };
        let item = match received {
            Some(item) => item,
            None => self.buffered(),
        };
        self.over |= matches!(&item, None | Some(Ok(InferResponse { is_final: true, .. })));
        item
    }

    /// After the cut: a response produced before it, else the cut's error.
    fn buffered(&mut self) -> Option<CoreResult<InferResponse>> {
        match self.responses.try_recv() {
            Ok(item) => Some(item),
            Err(_) => {
                self.over = true;
                Some(Err(cut_short()))
            }
        }
    }

    /// Whether the stream has returned its last item (its final response, its end or the cut).
    pub fn is_over(&self) -> bool {
        self.over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response stream counted as one request in flight on `lifecycle`, and its sender.
    fn tracked(lifecycle: &Arc<Lifecycle>) -> (crate::infer::ResponseSender, TrackedStream) {
        let (tx, rx) = crate::infer::response_stream();
        (tx, TrackedStream::new(rx, lifecycle.start_request()))
    }

    #[tokio::test]
    async fn drain_returns_when_the_last_request_ends() {
        let lifecycle = Lifecycle::new();
        let first = lifecycle.start_request();
        let second = lifecycle.start_request();
        let draining = {
            let lifecycle = Arc::clone(&lifecycle);
            tokio::spawn(async move {
                lifecycle.begin_drain();
                lifecycle.wait_idle(Duration::from_secs(30)).await
            })
        };
        tokio::task::yield_now().await;
        assert!(lifecycle.is_draining());
        drop(first);
        tokio::task::yield_now().await;
        assert!(!draining.is_finished());
        drop(second);
        assert_eq!(draining.await.ok(), Some(0));
    }

    #[tokio::test]
    async fn drain_gives_up_at_the_timeout_and_says_how_many_remain() {
        let lifecycle = Lifecycle::new();
        let _stuck = lifecycle.start_request();
        assert_eq!(lifecycle.wait_idle(Duration::from_millis(20)).await, 1);
    }

    #[tokio::test]
    async fn an_idle_server_drains_at_once() {
        assert_eq!(Lifecycle::new().wait_idle(Duration::from_secs(30)).await, 0);
    }

    #[tokio::test]
    async fn a_stream_cut_at_the_exit_timeout_ends_with_an_error_after_what_it_had() {
        let lifecycle = Lifecycle::new();
        let (tx, mut stream) = tracked(&lifecycle);
        tx.try_send(Ok(InferResponse { is_final: false, ..Default::default() })).unwrap();
        lifecycle.abandon();
        assert!(matches!(stream.recv().await, Some(Ok(InferResponse { is_final: false, .. }))));
        let cut = stream.recv().await.expect("an item").expect_err("the cut");
        assert!(cut.message.contains("cut short"), "{}", cut.message);
        assert!(stream.is_over());
        assert!(stream.recv().await.is_none());
        drop(tx);
    }

    #[tokio::test]
    async fn a_reader_waiting_when_the_server_gives_up_gets_the_error() {
        let lifecycle = Lifecycle::new();
        let (_tx, mut stream) = tracked(&lifecycle);
        let reader = tokio::spawn(async move { stream.recv().await });
        tokio::task::yield_now().await;
        lifecycle.abandon();
        let item = reader.await.expect("joined");
        assert!(matches!(item, Some(Err(e)) if e.message.contains("cut short")));
    }

    #[tokio::test]
    async fn a_stream_that_ended_is_not_reported_cut() {
        let lifecycle = Lifecycle::new();
        let (tx, mut stream) = tracked(&lifecycle);
        tx.try_send(Ok(InferResponse { is_final: true, ..Default::default() })).unwrap();
        assert!(matches!(stream.recv().await, Some(Ok(InferResponse { is_final: true, .. }))));
        lifecycle.abandon();
        assert!(stream.recv().await.is_none(), "nothing after the final response");
    }
}
