//! Fair waiting for an instance, for the direct scheduler: requests that find every slot taken
//! wait per flow (`crate::tenant`), and each slot given back goes to the next waiter of the flow
//! whose turn it is. With one flow this is first come, first served, as the semaphore it
//! replaces for them was.
//!
//! No waiter is left behind: a request queues and tries for a slot under one lock, and a slot's
//! release hook takes that lock after the slot is free, so either the request finds the slot
//! free or the hook finds the request.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::tenant::{FlowKey, Principal, Shares, flow_of};

/// What a freed slot's release calls (the pool's `ReleaseHook`).
type Hook = Arc<dyn Fn() + Send + Sync>;
/// How the pool makes a slot `S` of a permit.
type SlotMaker<S> = Box<dyn Fn(OwnedSemaphorePermit) -> S + Send + Sync>;

struct Waiting<S> {
    flows: BTreeMap<FlowKey, VecDeque<oneshot::Sender<S>>>,
    shares: Shares,
}

impl<S> Default for Waiting<S> {
    fn default() -> Self {
        Self { flows: BTreeMap::new(), shares: Shares::default() }
    }
}

impl<S> Waiting<S> {
    fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The sender of the waiter whose turn it is.
    fn next(&mut self) -> Option<oneshot::Sender<S>> {
        let flow = self.shares.next(self.flows.keys())?.clone();
        let queue = self.flows.get_mut(&flow)?;
        let sender = queue.pop_front();
        if queue.is_empty() {
            self.flows.remove(&flow);
        }
        self.shares.served(&flow, 1);
        sender
    }
}

/// The waiters of one pool and what hands them slots (`S`: the pool's slot).
pub struct FairWaiters<S> {
    waiting: Mutex<Waiting<S>>,
    available: Arc<Semaphore>,
    /// Makes a slot of a permit, the slot calling this handoff when it is given back.
    make: OnceLock<SlotMaker<S>>,
}

impl<S: Send + 'static> FairWaiters<S> {
    /// Waiters for the slots of `available`.
    pub fn new(available: Arc<Semaphore>) -> Arc<Self> {
        Arc::new(Self { waiting: Mutex::default(), available, make: OnceLock::new() })
    }

    /// The release hook that hands each freed slot to the next waiter; `make` makes a slot of a
    /// permit with that hook (the hook holds the waiters weakly: no cycle).
    pub fn hook(self: &Arc<Self>, make: impl Fn(OwnedSemaphorePermit, Hook) -> S + Send + Sync + 'static) -> Hook {
        let weak: Weak<Self> = Arc::downgrade(self);
        let hook: Hook = Arc::new(move || {
            if let Some(fair) = weak.upgrade() {
                fair.hand_off();
            }
        });
        let for_slots = Arc::clone(&hook);
        let _ = self.make.set(Box::new(move |permit| make(permit, Arc::clone(&for_slots))));
        hook
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting<S>> {
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> Option<S> {
        self.make.get().map(|make| make(permit))
    }

    /// Whether nobody waits here (a request without a principal may then take the plain path).
    pub fn idle(&self) -> bool {
        self.lock().is_empty()
    }

    /// A slot now if one is free and nobody waits before this request, else a place in its
    /// flow's line.
    pub fn acquire(&self, principal: Option<&Arc<Principal>>) -> Result<S, oneshot::Receiver<S>> {
        let mut waiting = self.lock();
        if waiting.is_empty()
            && let Ok(permit) = Arc::clone(&self.available).try_acquire_owned()
            && let Some(slot) = self.slot(permit)
        {
            return Ok(slot);
        }
        let (tx, rx) = oneshot::channel();
        let (flow, weight) = flow_of(principal);
        waiting.shares.arrive(&flow, weight);
        waiting.flows.entry(flow).or_default().push_back(tx);
        Err(rx)
    }

    /// Gives free slots to waiters, by turn, while both last. A waiter that has gone drops its
    /// slot, whose hook brings the next one here. When the pool has no instance left, every
    /// waiter is dropped (its request fails).
    fn hand_off(&self) {
        loop {
            let mut waiting = self.lock();
            if waiting.is_empty() {
                return;
            }
            if self.available.is_closed() {
                *waiting = Waiting::default();
                return;
            }
            let Ok(permit) = Arc::clone(&self.available).try_acquire_owned() else { return };
            let Some(sender) = waiting.next() else { return };
            drop(waiting);
            // Sent outside the lock: a refused slot is dropped here, and its hook locks again.
            let Some(slot) = self.slot(permit) else { return };
            let _ = sender.send(slot);
        }
    }
}
