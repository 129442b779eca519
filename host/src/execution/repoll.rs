//! A future that is polled again at once when it wakes itself during its own poll.
//!
//! hyper runs an HTTP/1 connection and the request it serves in one task, and hands the request
//! body from one to the other through a channel: when the handler asks for the body before the
//! connection has pushed it, the body signals "want" by waking the connection, which is the task
//! being polled. tokio treats a task woken while it runs as a yield: it goes to the back of the
//! run queue and an idle worker is unparked (a futex wake and a context switch) to look for
//! work. Measured at concurrency 1 (add_sub_rust): two futex calls and two context switches per
//! request, about one request's worth of CPU on the other core. Polling the connection again
//! right away does the same work without the hand-off.
//!
//! Wakes from elsewhere (socket readiness, timers, another task) go to the runtime as usual; a
//! self-wake repeated past [`MAX_REPOLLS`] in one poll is handed to the runtime too, so a
//! connection that keeps waking itself still yields to the others. The cap is small on purpose:
//! the body handshake needs two polls, and hyper's own yield (after 16 turns of its loop, for a
//! pipelining client) or tokio's exhausted budget also wake the task itself, and those must reach
//! the runtime soon.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// Polls in a row at most, before a self-wake is handed to the runtime.
const MAX_REPOLLS: usize = 4;

pub struct RepollOnSelfWake<F> {
    inner: Pin<Box<F>>,
    state: Arc<WakeState>,
    waker: Waker,
}

struct WakeState {
    /// The inner future is being polled by us now.
    polling: AtomicBool,
    /// A wake arrived since the last poll began.
    woken: AtomicBool,
    /// The task's own waker, for wakes that arrive between polls.
    outer: Mutex<Option<Waker>>,
}

impl Wake for WakeState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Set before reading `polling`: a poll that ends meanwhile sees the flag and polls again.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst)
            && let Some(waker) = self.outer.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
        {
            waker.wake_by_ref();
        }
    }
}

impl<F: Future> RepollOnSelfWake<F> {
    pub fn new(inner: F) -> Self {
        let state = Arc::new(WakeState {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            outer: Mutex::new(None),
        });
        let waker = Waker::from(Arc::clone(&state));
        Self { inner: Box::pin(inner), state, waker }
    }

    pub fn inner_mut(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }
}

impl<F: Future> Future for RepollOnSelfWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let mut outer = this.state.outer.lock().unwrap_or_else(PoisonError::into_inner);
        if !outer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *outer = Some(cx.waker().clone());
        }
        drop(outer);
        let mut inner_cx = Context::from_waker(&this.waker);
        // With the fast paths off, a self-wake goes to the runtime at once, as without this.
        let polls = if super::fast_paths() { MAX_REPOLLS } else { 1 };
        for _ in 0..polls {
            this.state.woken.store(false, Ordering::SeqCst);
            this.state.polling.store(true, Ordering::SeqCst);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            this.state.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.state.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `self_wakes` times, then finishes.
    struct SelfWaking {
        self_wakes: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.self_wakes == 0 {
                return Poll::Ready(());
            }
            self.self_wakes -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts how often the task's own waker was woken.
    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once<F: Future>(future: &mut RepollOnSelfWake<F>, outer: &Arc<CountingWaker>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::clone(outer));
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn self_wakes_are_repolled_in_place_without_waking_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = RepollOnSelfWake::new(SelfWaking { self_wakes: 3, polls: Arc::clone(&polls) });
        let outer = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert!(poll_once(&mut future, &outer).is_ready(), "finished within one poll of the task");
        assert_eq!(polls.load(Ordering::SeqCst), 4);
        assert_eq!(outer.0.load(Ordering::SeqCst), 0, "the runtime was never asked to reschedule");
    }

    #[test]
    fn endless_self_wakes_yield_to_the_runtime() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = RepollOnSelfWake::new(SelfWaking { self_wakes: usize::MAX, polls: Arc::clone(&polls) });
        let outer = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert!(poll_once(&mut future, &outer).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_REPOLLS);
        assert_eq!(outer.0.load(Ordering::SeqCst), 1, "the task is rescheduled, so others get their turn");
    }

    #[test]
    fn a_wake_from_another_thread_during_the_poll_is_repolled() {
        /// Pending once, after another thread woke it while it was being polled; then ready.
        struct WokenElsewhere(bool);
        impl Future for WokenElsewhere {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                if self.0 {
                    return Poll::Ready(());
                }
                self.0 = true;
                let waker = cx.waker().clone();
                std::thread::spawn(move || waker.wake()).join().expect("waker thread");
                Poll::Pending
            }
        }
        let mut future = RepollOnSelfWake::new(WokenElsewhere(false));
        let outer = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert!(poll_once(&mut future, &outer).is_ready(), "the wake was lost");
        assert_eq!(outer.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_between_polls_reaches_the_task() {
        struct Parked(Option<Waker>);
        impl Future for Parked {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                self.0 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
        let mut future = RepollOnSelfWake::new(Parked(None));
        let outer = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert!(poll_once(&mut future, &outer).is_pending());
        let stored = future.inner_mut().0.clone();
        stored.expect("the inner future kept a waker").wake();
        assert_eq!(outer.0.load(Ordering::SeqCst), 1, "a wake from outside the poll is not lost");
    }
}
