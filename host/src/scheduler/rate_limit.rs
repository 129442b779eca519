//! Triton's rate limiter (`--rate-limit execution_count`): an instance executes only when the
//! resources its instance group lists (`rate_limiter { resources [...] priority }`) are free,
//! across every model of the server; it holds them for the execution.
//!
//! As in Triton:
//! - a resource is per device (a GPU instance's device; CPU instances count as device 0) unless
//!   its instance groups mark it `global`, then there is one pool of it for the server (a name
//!   that is global in one group and per-device in another fails the second load);
//! - how many of a resource exist is the largest count any loaded instance asks for, so every
//!   instance can run (recomputed as instances come and go), unless `--rate-limit-resource
//!   name:count[:device]` says otherwise (a model that asks for more than that fails to load,
//!   since it could never run); once the option is given, a resource it does not name has none;
//! - `priority` weights the choice among instances waiting for resources: one with priority 2 is
//!   picked half as often as one with priority 1 (stride scheduling: each grant moves the
//!   instance's pass on by its priority, 0 counting as 1; waiters are served in pass order, and
//!   the first in line waits for its resources rather than being overtaken).
//!
//! Unlike Triton, a request first takes one of its model's idle instances and then waits for
//! that instance's resources: with instance groups of different resources in one model, the
//! instance that is waiting is not swapped for another one whose resources are free.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::oneshot;

use crate::error::{CoreError, CoreResult};

/// Where a resource's copies live: the server (`global`) or one device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub name: String,
    pub device: Option<u32>,
}

/// What one instance needs to execute, and its priority. Dropped with its instance, which takes
/// its asks out of the resources' totals.
#[derive(Debug)]
pub struct Claim {
    limiter: Weak<RateLimiter>,
    needs: Vec<(ResourceKey, u64)>,
    priority: u64,
    pass: AtomicU64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(limiter) = self.limiter.upgrade() {
            limiter.unregister(&self.needs);
        }
    }
}

/// A resource amount from `--rate-limit-resource name:count[:device]` (no device: every device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceOverride {
    pub name: String,
    pub count: u64,
    pub device: Option<u32>,
}

impl std::str::FromStr for ResourceOverride {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = || format!("--rate-limit-resource must be <name>:<count>[:<device>], got '{s}'");
        let (name, count, device) = match parts.as_slice() {
            [name, count] => (*name, *count, None),
            [name, count, device] => (*name, *count, Some(device.parse::<u32>().map_err(|_| bad())?)),
            _ => return Err(bad()),
        };
        if name.is_empty() {
            return Err(bad());
        }
        Ok(Self { name: name.to_string(), count: count.parse().map_err(|_| bad())?, device })
    }
}

#[derive(Default)]
struct State {
    /// Copies of each resource not held by an execution (below zero while executions still hold
    /// copies of a total that shrank).
    free: HashMap<ResourceKey, i64>,
    /// Copies of each resource in all.
    total: HashMap<ResourceKey, u64>,
    /// What the registered instances ask for: count -> how many instances ask that much.
    asks: HashMap<ResourceKey, BTreeMap<u64, usize>>,
    /// Whether each resource name is global (one pool) or per device.
    global: HashMap<String, bool>,
    waiters: Vec<Waiter>,
    /// The pass of the last grant: a claim that starts waiting after a long idle time starts
    /// from here, so it does not get a burst of grants for the time it was not asking.
    virtual_time: u64,
    arrivals: u64,
}

struct Waiter {
    claim: Arc<Claim>,
    arrival: u64,
    wake: oneshot::Sender<()>,
}

pub struct RateLimiter {
    /// `--rate-limit-resource` totals.
    overrides: Vec<ResourceOverride>,
    state: Mutex<State>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter").field("overrides", &self.overrides).field("totals", &self.totals()).finish()
    }
}

/// Resources held by one execution, given back on drop.
pub struct Held {
    limiter: Arc<RateLimiter>,
    claim: Arc<Claim>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.limiter.release(&self.claim);
    }
}

/// A waiting `acquire`. If its caller goes away, this gives back a grant that arrived but was
/// never used, or takes the waiter out of the queue.
struct Waiting {
    limiter: Arc<RateLimiter>,
    claim: Arc<Claim>,
    arrival: u64,
    woken: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut woken) = self.woken.take() else { return };
        // After `close`, `dispatch` can no longer hand this waiter a grant: either one is in the
        // channel already, or the waiter is still queued (or was just dropped by `dispatch`,
        // which then gave the resources back itself).
        woken.close();
        if woken.try_recv().is_ok() {
            self.limiter.release(&self.claim);
        } else if let Ok(mut state) = self.limiter.state.lock() {
            state.waiters.retain(|w| w.arrival != self.arrival);
            dispatch(&mut state);
        }
    }
}

impl RateLimiter {
    pub fn new(overrides: Vec<ResourceOverride>) -> Arc<Self> {
        Arc::new(Self { overrides, state: Mutex::default() })
    }

    fn state(&self) -> CoreResult<std::sync::MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| CoreError::internal("rate limiter poisoned"))
    }

    /// The `--rate-limit-resource` total of `key`. As in Triton, once any is given, a resource
    /// it does not name has none.
    fn fixed(&self, key: &ResourceKey) -> Option<u64> {
        if self.overrides.is_empty() {
            return None;
        }
        let named = self
            .overrides
            .iter()
            .filter(|o| o.name == key.name && (o.device.is_none() || key.device.is_none() || o.device == key.device))
            .map(|o| o.count)
            .max();
        Some(named.unwrap_or(0))
    }

    /// Sets `key`'s total to the fixed one or the largest ask, adjusting what is free.
    fn retotal(&self, state: &mut State, key: &ResourceKey) {
        let largest = state.asks.get(key).and_then(|a| a.keys().next_back().copied()).unwrap_or(0);
        let total = self.fixed(key).unwrap_or(largest);
        let before = state.total.insert(key.clone(), total).unwrap_or(0);
        let delta = copies(total) - copies(before);
        *state.free.entry(key.clone()).or_default() += delta;
    }

    /// The claim of an instance on `device` whose group lists `resources` (name, count, global)
    /// with `priority` (0, the default, counts as 1). Grows the resources' totals to what it
    /// asks for, unless `--rate-limit-resource` fixed a total that is too small: then the
    /// instance could never run, and this fails. A name must be global everywhere or nowhere.
    pub fn register(
        self: &Arc<Self>,
        resources: &[(String, u64, bool)],
        priority: u32,
        device: u32,
    ) -> CoreResult<Arc<Claim>> {
        let mut state = self.state()?;
        let mut needs = Vec::new();
        for (name, count, global) in resources {
            if let Some(&known) = state.global.get(name)
                && known != *global
            {
                return Err(CoreError::invalid_arg(format!(
                    "rate limiter resource '{name}' is global in one instance group and per-device in another"
                )));
            }
            let key = ResourceKey { name: name.clone(), device: (!global).then_some(device) };
            if let Some(fixed) = self.fixed(&key)
                && fixed < *count
            {
                return Err(CoreError::invalid_arg(format!(
                    "Resource count for \"{name}\" is limited to {fixed} which will prevent scheduling of one or \
                     more model instances, the minimum required count is {count}"
                )));
            }
            needs.push((key, *count));
        }
        for (key, count) in &needs {
            state.global.insert(key.name.clone(), key.device.is_none());
            *state.asks.entry(key.clone()).or_default().entry(*count).or_default() += 1;
            self.retotal(&mut state, key);
        }
        let pass = state.virtual_time;
        dispatch(&mut state);
        Ok(Arc::new(Claim {
            limiter: Arc::downgrade(self),
            needs,
            priority: u64::from(priority.max(1)),
            pass: AtomicU64::new(pass),
        }))
    }

    /// A claim's instance is gone: its asks no longer count towards the totals.
    fn unregister(&self, needs: &[(ResourceKey, u64)]) {
        let Ok(mut state) = self.state.lock() else { return };
        for (key, count) in needs {
            if let Some(asks) = state.asks.get_mut(key)
                && let Some(n) = asks.get_mut(count)
            {
                *n -= 1;
                if *n == 0 {
                    asks.remove(count);
                }
            }
            self.retotal(&mut state, key);
            if state.asks.get(key).is_some_and(BTreeMap::is_empty) {
                state.asks.remove(key);
                if !state.asks.keys().any(|k| k.name == key.name) {
                    state.global.remove(&key.name);
                }
            }
        }
        dispatch(&mut state);
    }

    /// Waits until `claim`'s resources are free and takes them.
    pub async fn acquire(self: &Arc<Self>, claim: &Arc<Claim>) -> CoreResult<Held> {
        let mut waiting = {
            let mut state = self.state()?;
            if state.waiters.is_empty() && fits(&state, claim) {
                grant(&mut state, claim);
                None
            } else {
                let (wake, woken) = oneshot::channel();
                let pass = claim.pass.load(Ordering::Relaxed).max(state.virtual_time);
                claim.pass.store(pass, Ordering::Relaxed);
                state.arrivals += 1;
                let arrival = state.arrivals;
                state.waiters.push(Waiter { claim: Arc::clone(claim), arrival, wake });
                dispatch(&mut state);
                Some(Waiting { limiter: Arc::clone(self), claim: Arc::clone(claim), arrival, woken: Some(woken) })
            }
        };
        if let Some(waiting) = waiting.as_mut()
            && let Some(woken) = waiting.woken.as_mut()
        {
            let granted = woken.await;
            waiting.woken = None;
            granted.map_err(|_| CoreError::internal("rate limiter dropped a waiting execution"))?;
        }
        Ok(Held { limiter: Arc::clone(self), claim: Arc::clone(claim) })
    }

    fn release(&self, claim: &Claim) {
        let Ok(mut state) = self.state.lock() else { return };
        give_back(&mut state, claim);
        dispatch(&mut state);
    }

    /// Copies of each resource in all (for the docs' examples and the tests).
    pub fn totals(&self) -> Vec<(ResourceKey, u64)> {
        let mut totals: Vec<_> =
            self.state.lock().map(|s| s.total.iter().map(|(k, v)| (k.clone(), *v)).collect()).unwrap_or_default();
        totals.sort();
        totals
    }
}

/// A count of copies as the signed number `State::free` keeps.
fn copies(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn fits(state: &State, claim: &Claim) -> bool {
    claim.needs.iter().all(|(key, count)| state.free.get(key).copied().unwrap_or(0) >= copies(*count))
}

fn grant(state: &mut State, claim: &Claim) {
    for (key, count) in &claim.needs {
        *state.free.entry(key.clone()).or_default() -= copies(*count);
    }
    let pass = claim.pass.load(Ordering::Relaxed);
    state.virtual_time = state.virtual_time.max(pass);
    claim.pass.store(pass + claim.priority, Ordering::Relaxed);
}

/// Wakes waiters in order (smallest pass, then earliest arrival) while the first one's resources
/// are free. As in Triton, the first in line blocks the ones behind it, so an instance that
/// needs many copies of a resource is not starved by a stream of instances that need few.
fn dispatch(state: &mut State) {
    loop {
        let next = state
            .waiters
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (w.claim.pass.load(Ordering::Relaxed), w.arrival))
            .map(|(i, _)| i);
        let Some(index) = next else { return };
        if !fits(state, &state.waiters[index].claim) {
            return;
        }
        let waiter = state.waiters.swap_remove(index);
        grant(state, &waiter.claim);
        if waiter.wake.send(()).is_err() {
            // Its caller went away while waiting: the resources go back at once.
            give_back(state, &waiter.claim);
        }
    }
}

/// Returns a granted claim's copies to the free pool.
fn give_back(state: &mut State, claim: &Claim) {
    for (key, count) in &claim.needs {
        *state.free.entry(key.clone()).or_default() += copies(*count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str, count: u64, global: bool) -> (String, u64, bool) {
        (name.to_string(), count, global)
    }

    #[test]
    fn totals_are_the_largest_ask_unless_overridden() {
        // Triton's documented example: A [R1: 4, R2: 4], B [R2: 5, R3: 10, R4: 5], C [R1: 1, R3: 7, R4: 2].
        let limiter = RateLimiter::new(vec![]);
        // (The claims live as long as their instances: dropped, they leave the totals.)
        let _a = limiter.register(&[res("R1", 4, false), res("R2", 4, false)], 1, 0).expect("A");
        let _b = limiter.register(&[res("R2", 5, false), res("R3", 10, false), res("R4", 5, false)], 1, 0).expect("B");
        let _c = limiter.register(&[res("R1", 1, false), res("R3", 7, false), res("R4", 2, false)], 1, 0).expect("C");
        let totals: Vec<(String, u64)> = limiter.totals().into_iter().map(|(k, v)| (k.name, v)).collect();
        assert_eq!(totals, [("R1".into(), 4), ("R2".into(), 5), ("R3".into(), 10), ("R4".into(), 5)]);

        let fixed = RateLimiter::new(vec!["R1:10".parse().expect("override"), "R2:5:0".parse().expect("override")]);
        let _fits = fixed.register(&[res("R1", 4, false), res("R2", 4, false)], 1, 0).expect("fits");
        let e = fixed.register(&[res("R2", 6, false)], 1, 0).expect_err("more than the fixed total");
        assert_eq!(
            e.message,
            "Resource count for \"R2\" is limited to 5 which will prevent scheduling of one or more model instances, \
             the minimum required count is 6"
        );
        let e = fixed.register(&[res("R3", 1, false)], 1, 0).expect_err("R3 is not named: none of it");
        assert!(e.message.contains("\"R3\" is limited to 0"), "{}", e.message);
    }

    #[test]
    fn overrides_parse_or_say_what_is_expected() {
        assert_eq!(
            "R2:8:1".parse::<ResourceOverride>(),
            Ok(ResourceOverride { name: "R2".into(), count: 8, device: Some(1) })
        );
        assert_eq!("R1:10".parse::<ResourceOverride>().map(|o| o.device), Ok(None));
        for bad in ["R1", "R1:x", ":3", "R1:1:gpu", "R1:1:0:0"] {
            let e = bad.parse::<ResourceOverride>().expect_err(bad);
            assert!(e.contains("<name>:<count>[:<device>]"), "{e}");
        }
    }

    #[tokio::test]
    async fn an_instance_waits_until_its_resources_are_free() {
        let limiter = RateLimiter::new(vec![]);
        let big = limiter.register(&[res("R", 2, false)], 1, 0).expect("big");
        let small = limiter.register(&[res("R", 1, false)], 1, 0).expect("small");
        let held = limiter.acquire(&big).await.expect("free at first");
        let waiting = {
            let limiter = Arc::clone(&limiter);
            let small = Arc::clone(&small);
            tokio::spawn(async move { limiter.acquire(&small).await.map(drop) })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "R is all held by the first execution");
        drop(held);
        waiting.await.expect("join").expect("granted once released");
    }

    #[tokio::test]
    async fn global_resources_are_shared_across_devices() {
        let limiter = RateLimiter::new(vec![]);
        let gpu0 = limiter.register(&[res("G", 1, true)], 1, 0).expect("gpu0");
        let gpu1 = limiter.register(&[res("G", 1, true)], 1, 1).expect("gpu1");
        let local0 = limiter.register(&[res("L", 1, false)], 1, 0).expect("local0");
        let local1 = limiter.register(&[res("L", 1, false)], 1, 1).expect("local1");
        let _l0 = limiter.acquire(&local0).await.expect("L on device 0");
        let _l1 = limiter.acquire(&local1).await.expect("L on device 1 is another copy");
        let _g = limiter.acquire(&gpu0).await.expect("G");
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(20), limiter.acquire(&gpu1)).await;
        assert!(blocked.is_err(), "the one global G is held");
    }

    #[tokio::test]
    async fn priority_two_gets_half_the_grants_of_priority_one() {
        let limiter = RateLimiter::new(vec![]);
        let one = limiter.register(&[res("R", 1, false)], 1, 0).expect("one");
        let two = limiter.register(&[res("R", 1, false)], 2, 0).expect("two");
        let blocker = limiter.register(&[res("R", 1, false)], 1, 0).expect("blocker");
        // Hold R, queue many executions of both, then let them run one at a time.
        let held = limiter.acquire(&blocker).await.expect("blocker");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..60 {
            let (claim, tag) = if i % 2 == 0 { (Arc::clone(&one), 1) } else { (Arc::clone(&two), 2) };
            let (limiter, order) = (Arc::clone(&limiter), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let _held = limiter.acquire(&claim).await.expect("granted");
                order.lock().expect("order").push(tag);
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in tasks {
            t.await.expect("join");
        }
        let order = order.lock().expect("order").clone();
        // In the first 30 grants, while both kinds are waiting, priority 1 gets two of every three.
        let ones = order[..30].iter().filter(|t| **t == 1).count();
        assert!((19..=21).contains(&ones), "priority 1 got {ones} of the first 30 grants: {order:?}");
    }

    #[tokio::test]
    async fn a_grant_that_arrives_after_the_caller_left_goes_back() {
        let limiter = RateLimiter::new(vec![]);
        let claim = limiter.register(&[res("R", 1, false)], 1, 0).expect("claim");
        let held = limiter.acquire(&claim).await.expect("first");
        let mut late = Box::pin(limiter.acquire(&claim));
        let queued = tokio::time::timeout(std::time::Duration::from_millis(5), &mut late).await;
        assert!(queued.is_err(), "R is held: the second acquire waits");
        drop(held); // the grant goes to `late`, which is never polled again
        drop(late);
        let again = tokio::time::timeout(std::time::Duration::from_secs(5), limiter.acquire(&claim)).await;
        assert!(again.is_ok(), "the unused grant was given back");
    }

    #[tokio::test]
    async fn the_first_in_line_is_not_overtaken_by_smaller_asks() {
        let limiter = RateLimiter::new(vec![]);
        let big = limiter.register(&[res("R", 2, false)], 1, 0).expect("big");
        let small = limiter.register(&[res("R", 1, false)], 1, 0).expect("small");
        let first = limiter.acquire(&small).await.expect("1 of 2");
        let mut big_waits = Box::pin(limiter.acquire(&big));
        assert!(tokio::time::timeout(std::time::Duration::from_millis(5), &mut big_waits).await.is_err());
        // One copy is free, but `big` is first in line.
        let overtaking = tokio::time::timeout(std::time::Duration::from_millis(5), limiter.acquire(&small)).await;
        assert!(overtaking.is_err(), "a small ask overtook the big one waiting first");
        drop(first);
        let _big = tokio::time::timeout(std::time::Duration::from_secs(5), big_waits).await.expect("big runs next");
    }

    #[test]
    fn totals_follow_the_instances_that_are_loaded_and_names_keep_one_scope() {
        let limiter = RateLimiter::new(vec![]);
        let small = limiter.register(&[res("R", 1, false)], 1, 0).expect("small");
        let big = limiter.register(&[res("R", 4, false)], 1, 0).expect("big");
        assert_eq!(limiter.totals()[0].1, 4);
        drop(big);
        assert_eq!(limiter.totals()[0].1, 1, "the big instance was unloaded");
        let e = limiter.register(&[res("R", 1, true)], 1, 0).expect_err("R is per-device already");
        assert_eq!(e.message, "rate limiter resource 'R' is global in one instance group and per-device in another");
        drop(small);
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_gives_its_grant_back() {
        let limiter = RateLimiter::new(vec![]);
        let claim = limiter.register(&[res("R", 1, false)], 1, 0).expect("claim");
        let held = limiter.acquire(&claim).await.expect("first");
        let abandoned = tokio::time::timeout(std::time::Duration::from_millis(5), limiter.acquire(&claim)).await;
        assert!(abandoned.is_err());
        drop(held);
        let again = tokio::time::timeout(std::time::Duration::from_secs(5), limiter.acquire(&claim)).await;
        assert!(again.is_ok(), "R was returned when the abandoned waiter's grant found no one");
    }
}
