//! Which guest instances are live. A live instance holds a store, and with it one slot of the
//! engine's pooling allocator, which is sized for `--wasm-max-instances` live instances rather
//! than for every instance of every model: a server with 10,000 Wasm models keeps the recently
//! used ones live, and an instance that was evicted (or never started) is rebuilt on its next
//! request (instantiate + `initialize`, a fraction of a millisecond for a small guest).
//!
//! Eviction takes the least recently used member that is not executing (its lock is free) and
//! runs its `finalize` with a short deadline ([`EVICT_FINALIZE`]); a guest that wants to keep
//! state across its instance's life must not rely on one instance living forever, as with
//! Triton's model instances that are reloaded. Members idle for `--wasm-instance-idle-secs` are
//! evicted by a sweeper thread, so an idle server returns their memory.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::error::{CoreError, CoreResult};
use crate::stats::{ModelStats, Quota};

/// The deadline of `finalize` when an instance is evicted to make room: the request that needs
/// the room is waiting for it.
pub(super) const EVICT_FINALIZE: Duration = Duration::from_millis(10);

/// What a live set holds: built when its slot is admitted, and retired (its own cleanup within a
/// deadline, then dropped) when evicted. The set knows nothing else of it.
pub(super) trait Member: Send + 'static {
    fn retire(self, model: &str, deadline: Duration);
}

/// The live instances of every Wasm model of one engine.
pub(super) struct LiveSet<T> {
    capacity: usize,
    epoch: Instant,
    /// Reserved or live slots; a slot is here from [`LiveSet::admit`] until it is evicted or
    /// leaves.
    members: Mutex<Vec<Arc<Slot<T>>>>,
    /// Stores the idle sweeper took out of the set and has not dropped yet: they still hold
    /// pool slots, so they count against the capacity.
    retiring: AtomicUsize,
}

/// One instance's place: its live store, if any, and when it was last used.
pub(super) struct Slot<T> {
    live: Mutex<Option<T>>,
    last_used_ms: AtomicU64,
    /// The linear memory this slot's store counts in its model's usage.
    memory: AtomicI64,
    stats: Arc<ModelStats>,
    pub(super) model: String,
}

impl<T> Slot<T> {
    pub(super) fn new(model: String, stats: Arc<ModelStats>) -> Arc<Self> {
        Arc::new(Self {
            live: Mutex::new(None),
            last_used_ms: AtomicU64::new(0),
            memory: AtomicI64::new(0),
            stats,
            model,
        })
    }

    /// Locks the slot for one call. Only eviction contends (with `try_lock`), never a second
    /// caller: the instance pool runs one batch per instance at a time.
    pub(super) fn lock(&self) -> CoreResult<MutexGuard<'_, Option<T>>> {
        self.live.lock().map_err(|_| CoreError::internal(format!("instance of '{}' is poisoned", self.model)))
    }

    /// Locks the slot whatever happened before (for dropping the instance).
    pub(super) fn lock_even_if_poisoned(&self) -> MutexGuard<'_, Option<T>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Puts a newly built store in the slot.
    pub(super) fn put(&self, guard: &mut Option<T>, live: T) {
        self.stats.usage.instances_live.fetch_add(1, Ordering::Relaxed);
        *guard = Some(live);
    }

    /// Takes the store out of the slot (to drop or finalize it).
    pub(super) fn take(&self, guard: &mut Option<T>) -> Option<T> {
        let live = guard.take()?;
        self.stats.usage.instances_live.fetch_sub(1, Ordering::Relaxed);
        let memory = self.memory.swap(0, Ordering::Relaxed);
        self.stats.usage.memory_bytes.fetch_sub(memory, Ordering::Relaxed);
        Some(live)
    }

    /// Records the store's linear memory after a call.
    pub(super) fn set_memory(&self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let before = self.memory.swap(bytes, Ordering::Relaxed);
        self.stats.usage.memory_bytes.fetch_add(bytes - before, Ordering::Relaxed);
    }
}

impl<T: Member> LiveSet<T> {
    pub(super) fn new(capacity: u32, idle_after: Option<Duration>) -> Arc<Self> {
        let set = Arc::new(Self {
            capacity: capacity.max(1) as usize,
            epoch: Instant::now(),
            members: Mutex::default(),
            retiring: AtomicUsize::new(0),
        });
        if let Some(idle_after) = idle_after {
            spawn_sweeper(&set, idle_after);
        }
        set
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Marks `slot` used now.
    pub(super) fn touch(&self, slot: &Slot<T>) {
        slot.last_used_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Makes room for `slot` (whose lock the caller holds, with no store in it) to become live:
    /// a no-op if it already has its room, else it joins the set, evicting the least recently
    /// used member that is not executing when the set is full. When every member is executing
    /// it waits up to `patience` for one to finish (a load, on a blocking thread, may wait; a
    /// request does not), then fails.
    pub(super) fn admit(&self, slot: &Arc<Slot<T>>, patience: Duration) -> CoreResult<()> {
        let started = Instant::now();
        loop {
            match self.try_admit(slot) {
                Err(e) if e.kind == crate::error::ErrorKind::Unavailable && started.elapsed() < patience => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => {
                    slot.stats.usage.record_refusal(Quota::Instances);
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    fn try_admit(&self, slot: &Arc<Slot<T>>) -> CoreResult<()> {
        let evicted = {
            let Ok(mut members) = self.members.lock() else {
                return Err(CoreError::internal("live instance set poisoned"));
            };
            if members.iter().any(|m| Arc::ptr_eq(m, slot)) {
                return Ok(());
            }
            let evicted = if members.len() + self.retiring.load(Ordering::SeqCst) >= self.capacity {
                let Some((index, live)) = take_least_recently_used(&members) else {
                    return Err(CoreError::unavailable(format!(
                        "all {} live WebAssembly instances are executing (--wasm-max-instances); \
                         model '{}' cannot start one now",
                        self.capacity, slot.model
                    )));
                };
                Some((members.swap_remove(index), live))
            } else {
                None
            };
            members.push(Arc::clone(slot));
            evicted
        };
        if let Some((member, Some(live))) = evicted {
            live.retire(&member.model, EVICT_FINALIZE);
        }
        Ok(())
    }

    /// `slot` gives its room back (its store is gone: dropped, or never built).
    pub(super) fn leave(&self, slot: &Arc<Slot<T>>) {
        if let Ok(mut members) = self.members.lock()
            && let Some(index) = members.iter().position(|m| Arc::ptr_eq(m, slot))
        {
            members.swap_remove(index);
        }
    }

    /// Evicts every member unused for `idle_after`; returns how many.
    fn evict_idle(&self, idle_after: Duration) -> usize {
        let cutoff = self.now_ms().saturating_sub(u64::try_from(idle_after.as_millis()).unwrap_or(u64::MAX));
        let mut retired = Vec::new();
        if let Ok(mut members) = self.members.lock() {
            let mut kept = Vec::with_capacity(members.len());
            for member in members.drain(..) {
                let idle = member.last_used_ms.load(Ordering::Relaxed) <= cutoff;
                let taken = if idle { member.live.try_lock().ok().map(|mut g| member.take(&mut g)) } else { None };
                match taken {
                    Some(live) => retired.push((member, live)),
                    None => kept.push(member),
                }
            }
            *members = kept;
            self.retiring.fetch_add(retired.len(), Ordering::SeqCst);
        }
        let count = retired.len();
        for (member, live) in retired {
            if let Some(live) = live {
                live.retire(&member.model, EVICT_FINALIZE);
            }
            self.retiring.fetch_sub(1, Ordering::SeqCst);
        }
        count
    }
}

/// The least recently used member that is not executing, with its store taken out.
fn take_least_recently_used<T>(members: &[Arc<Slot<T>>]) -> Option<(usize, Option<T>)> {
    let mut order: Vec<(u64, usize)> =
        members.iter().enumerate().map(|(i, m)| (m.last_used_ms.load(Ordering::Relaxed), i)).collect();
    order.sort_unstable();
    order.into_iter().find_map(|(_, index)| {
        let member = &members[index];
        let mut guard = member.live.try_lock().ok()?;
        Some((index, member.take(&mut guard)))
    })
}

/// Evicts idle members until the set is dropped.
fn spawn_sweeper<T: Member>(set: &Arc<LiveSet<T>>, idle_after: Duration) {
    let set: Weak<LiveSet<T>> = Arc::downgrade(set);
    let every = (idle_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(10));
    std::thread::Builder::new()
        .name("tessera-wasm-idle".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(set) = set.upgrade() else { return };
                let evicted = set.evict_idle(idle_after);
                if evicted > 0 {
                    tracing::debug!(evicted, "evicted idle WebAssembly instances");
                }
            }
        })
        .ok();
}
