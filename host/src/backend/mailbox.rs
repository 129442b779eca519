//! Adoption: requests of a decoupled model that join an execution already running on a busy
//! instance, as Triton's python backend runs a decoupled model's `async def execute` coroutines
//! concurrently on one instance's event loop.
//!
//! An instance that can take requests while it executes (a Wasm guest's `async def execute`, see
//! `backend::wasm::adopt`) has a [`Mailbox`]. Its guest opens the mailbox from inside an
//! execution, up to its quota of unfinished requests; the pool
//! (`scheduler::pool::InstancePool::execute_adoptable`) then puts a request that finds no idle
//! instance into an open mailbox with room, and the guest takes it from there and runs it
//! alongside the others. Each request carries its [`Done`]: the instance answers it when that
//! request ends, whether or not the execution goes on with others. A request the mailbox still
//! holds when its execution ends, having never been taken, fails (a trap's error, or
//! UNAVAILABLE); none is left behind unanswered.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{Notify, oneshot};

use super::ExecRequest;
use crate::error::{CoreError, CoreResult};

/// How a decoupled request's caller learns that its request has ended (its stream is complete):
/// the first answer counts, later ones are dropped. Clones share the one answer.
#[derive(Clone)]
pub struct Done(Arc<Mutex<Option<oneshot::Sender<CoreResult<()>>>>>);

impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Done")
    }
}

impl Done {
    /// A new answer slot and the receiver its caller awaits.
    pub fn channel() -> (Self, oneshot::Receiver<CoreResult<()>>) {
        let (tx, rx) = oneshot::channel();
        (Self(Arc::new(Mutex::new(Some(tx)))), rx)
    }

    /// Answers the caller, if nobody has yet.
    pub fn finish(&self, result: CoreResult<()>) {
        if let Some(tx) = self.0.lock().ok().and_then(|mut slot| slot.take()) {
            let _ = tx.send(result);
        }
    }
}

/// See the module docs. Closed until the instance opens it, and again once its execution ends.
#[derive(Default)]
pub struct Mailbox {
    state: Mutex<State>,
    /// Woken when the mailbox opens or has room again: the pool's waiting requests.
    room: OnceLock<Arc<Notify>>,
}

#[derive(Default)]
struct State {
    open: bool,
    /// The most unfinished requests the execution may have (its own and those adopted).
    limit: usize,
    /// Its unfinished requests, those waiting here included.
    in_flight: usize,
    queued: VecDeque<ExecRequest>,
    /// Woken when a request arrives: the instance's thread, waiting in its guest's event loop.
    arrived: Option<Arc<Notify>>,
}

impl Mailbox {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Wakes `room` whenever the mailbox opens or has room again (once; later calls do nothing).
    pub fn watch(&self, room: Arc<Notify>) {
        let _ = self.room.set(room);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wake_pool(&self) {
        if let Some(room) = self.room.get() {
            room.notify_waiters();
        }
    }

    /// How many more requests it takes now (0 when closed).
    pub fn room(&self) -> usize {
        let state = self.lock();
        if state.open { state.limit.saturating_sub(state.in_flight) } else { 0 }
    }

    /// Leaves `request` for the running execution, or gives it back when the mailbox is closed
    /// or full.
    #[allow(clippy::result_large_err, reason = "the request goes back to its caller unchanged")]
    pub fn offer(&self, request: ExecRequest) -> Result<(), ExecRequest> {
        let mut state = self.lock();
        if !state.open || state.in_flight >= state.limit {
            return Err(request);
        }
        state.in_flight += 1;
        state.queued.push_back(request);
        if let Some(arrived) = &state.arrived {
            arrived.notify_waiters();
        }
        Ok(())
    }

    /// Opens the mailbox for an execution with `in_flight` unfinished requests of its own, up to
    /// `limit` in all; `arrived` is woken whenever a request is left here.
    pub fn open(&self, limit: usize, in_flight: usize, arrived: Arc<Notify>) {
        {
            let mut state = self.lock();
            state.open = true;
            state.limit = limit;
            state.in_flight = in_flight;
            state.arrived = Some(arrived);
        }
        self.wake_pool();
    }

    /// Whether requests are waiting to be taken.
    pub fn has_waiting(&self) -> bool {
        !self.lock().queued.is_empty()
    }

    /// The requests waiting, which the execution now runs (still counted until they end).
    pub fn take(&self) -> Vec<ExecRequest> {
        self.lock().queued.drain(..).collect()
    }

    /// Closes the mailbox to further requests; returns those still waiting, which the
    /// execution must still run.
    pub fn close(&self) -> Vec<ExecRequest> {
        let mut state = self.lock();
        state.open = false;
        state.queued.drain(..).collect()
    }

    /// `count` of the execution's requests have ended: their room goes to the next ones.
    pub fn ended(&self, count: usize) {
        {
            let mut state = self.lock();
            state.in_flight = state.in_flight.saturating_sub(count);
        }
        self.wake_pool();
    }

    /// The execution is over (or its instance trapped): closed and empty. Each request still
    /// waiting fails with `error`.
    pub fn reset(&self, error: &CoreError) {
        let left: Vec<ExecRequest> = {
            let mut state = self.lock();
            let was_open = state.open || state.in_flight > 0;
            let old = std::mem::take(&mut *state);
            if !was_open {
                return;
            }
            old.queued.into_iter().collect()
        };
        for request in left {
            if let Some(done) = &request.done {
                done.finish(Err(error.clone()));
            }
        }
        self.wake_pool();
    }
}

/// The open mailbox with the most room, if one has any.
pub(crate) fn with_room(mailboxes: &[Arc<Mailbox>]) -> Option<&Arc<Mailbox>> {
    mailboxes.iter().map(|m| (m.room(), m)).filter(|(room, _)| *room > 0).max_by_key(|(room, _)| *room).map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(done: &Done) -> ExecRequest {
        ExecRequest { done: Some(done.clone()), ..ExecRequest::default() }
    }

    #[test]
    fn a_closed_or_full_mailbox_gives_the_request_back() {
        let mailbox = Mailbox::new();
        let (done, _rx) = Done::channel();
        assert!(mailbox.offer(request(&done)).is_err(), "closed until opened");
        let arrived = Arc::new(Notify::new());
        mailbox.open(3, 1, Arc::clone(&arrived));
        assert_eq!(mailbox.room(), 2);
        assert!(mailbox.offer(request(&done)).is_ok());
        assert!(mailbox.offer(request(&done)).is_ok());
        assert!(mailbox.offer(request(&done)).is_err(), "the quota counts the execution's own request");
        assert!(mailbox.has_waiting());
        assert_eq!(mailbox.take().len(), 2);
        assert!(!mailbox.has_waiting());
        assert_eq!(mailbox.room(), 0, "taken requests still count until they end");
        mailbox.ended(1);
        assert_eq!(mailbox.room(), 1);
        assert!(mailbox.offer(request(&done)).is_ok());
        assert_eq!(mailbox.close().len(), 1, "closing hands back what waits, to be run");
        assert!(mailbox.offer(request(&done)).is_err(), "closed");
    }

    #[tokio::test]
    async fn what_is_left_when_the_execution_ends_fails_and_the_pool_hears_of_room() {
        let mailbox = Mailbox::new();
        let room = Arc::new(Notify::new());
        mailbox.watch(Arc::clone(&room));
        let woken = room.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        mailbox.open(4, 1, Arc::new(Notify::new()));
        woken.await;
        let (done, rx) = Done::channel();
        mailbox.offer(request(&done)).expect("room");
        mailbox.reset(&CoreError::internal("trapped"));
        assert_eq!(rx.await.expect("answered").expect_err("failed").message, "trapped");
        assert_eq!(mailbox.room(), 0, "closed");
        assert!(with_room(&[Arc::clone(&mailbox)]).is_none());
        // The first answer counts.
        let (done, rx) = Done::channel();
        done.finish(Ok(()));
        done.finish(Err(CoreError::internal("late")));
        assert!(rx.await.expect("answered").is_ok());
    }
}
