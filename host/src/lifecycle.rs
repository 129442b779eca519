//! The part of the server's life the orchestrators watch: inference requests in flight, and the
//! drain that SIGTERM starts.
//!
//! On SIGTERM (Kubernetes' way of ending a pod) the server turns not-ready at once, so the
//! readiness probe takes it out of its Service, and keeps its doors open and serving, new
//! requests included: those are the ones sent before every node has seen the endpoint removed.
//! It stops its doors when no inference request is in flight, or when `--exit-timeout-secs` has
//! passed, whichever is first. Liveness stays true throughout.
//!
//! Triton 2.51 differs, on purpose here: it stays ready until its HTTP connections have drained,
//! then answers live and ready with 503 "Server exiting" and refuses new inference ("Server is
//! stopping, scheduler for model has stopped accepting new inference requests") except a
//! sequence's next request. Either way a server with nothing in flight closes its ports as soon
//! as SIGTERM arrives, so a deployment still needs a preStop sleep to cover the time the
//! endpoint removal takes to reach every node: the chart and both runtimes in deploy/ have one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::CoreResult;
use crate::infer::{InferResponse, ResponseStream};

/// Counts inference requests in flight (one per request, however many responses it streams)
/// and knows whether the server is draining.
#[derive(Debug, Default)]
pub struct Lifecycle {
    in_flight: AtomicUsize,
    idle: Notify,
    /// True from the drain's start: readiness reads it, and the HTTP door closes its idle
    /// keep-alive connections when it turns.
    draining: tokio::sync::watch::Sender<bool>,
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

    /// Turns true when a drain starts.
    pub fn drain_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.draining.subscribe()
    }

    /// Marks the server as draining (readiness turns false), then waits until no request is in
    /// flight or `timeout` passes. Returns the number still in flight (0: drained).
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.draining.send_replace(true);
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
    _in_flight: InFlight,
}

impl TrackedStream {
    pub fn new(responses: ResponseStream, in_flight: InFlight) -> Self {
        Self { responses, _in_flight: in_flight }
    }

    /// The next response; `None` once the request has answered its last.
    pub async fn recv(&mut self) -> Option<CoreResult<InferResponse>> {
        self.responses.recv().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_returns_when_the_last_request_ends() {
        let lifecycle = Lifecycle::new();
        let first = lifecycle.start_request();
        let second = lifecycle.start_request();
        let draining = {
            let lifecycle = Arc::clone(&lifecycle);
            tokio::spawn(async move { lifecycle.drain(Duration::from_secs(30)).await })
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
        assert_eq!(lifecycle.drain(Duration::from_millis(20)).await, 1);
    }

    #[tokio::test]
    async fn an_idle_server_drains_at_once() {
        assert_eq!(Lifecycle::new().drain(Duration::from_secs(30)).await, 0);
    }
}
