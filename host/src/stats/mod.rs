//! Per model-version statistics, recorded once at the model boundary and reported by the
//! statistics extension (`/v2/models/{m}/stats`) in Triton's JSON shape, and their latency
//! distributions for `/metrics` ([`latency`]).

pub mod custom;
mod custom_limits;
mod exposition;
pub mod host;
pub mod latency;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A count of events and their summed duration (Triton's `StatisticDuration`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Duration2 {
    pub count: u64,
    pub ns: u64,
}

impl Duration2 {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns = self.ns.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }
    fn json(self) -> Value {
        json!({ "count": self.count, "ns": self.ns })
    }
}

/// Why a request failed, as Triton's `nv_inference_request_failure{reason=...}` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureReason {
    /// Refused by the scheduler (full queue, queue timeout).
    Rejected,
    Canceled,
    /// The model itself failed (execution error, trap).
    Backend,
    /// Anything else (invalid input, ...).
    Other,
}

impl FailureReason {
    pub const ALL: [FailureReason; 4] = [Self::Rejected, Self::Canceled, Self::Backend, Self::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "REJECTED",
            Self::Canceled => "CANCELED",
            Self::Backend => "BACKEND",
            Self::Other => "OTHER",
        }
    }

    pub fn of(error: &crate::error::CoreError) -> Self {
        use crate::error::ErrorKind;
        match error.kind {
            ErrorKind::Unavailable => Self::Rejected,
            ErrorKind::Cancelled => Self::Canceled,
            ErrorKind::Internal | ErrorKind::Unknown => Self::Backend,
            _ => Self::Other,
        }
    }
}

/// A copy of a model version's statistics, for the front doors to encode.
#[derive(Debug, Default, Clone)]
pub struct Inner {
    pub last_inference_ms: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: Duration2,
    pub fail: Duration2,
    pub queue: Duration2,
    pub compute_input: Duration2,
    pub compute_infer: Duration2,
    pub compute_output: Duration2,
    /// batch size -> (compute_input, compute_infer, compute_output)
    pub batches: BTreeMap<usize, [Duration2; 3]>,
    pub failures: BTreeMap<FailureReason, u64>,
    pub cache_hit: Duration2,
    pub cache_miss: Duration2,
}

pub type StatsSnapshot = Inner;

/// What the statistics lock guards: the counts, and the distributions recorded with them (not
/// copied into snapshots).
#[derive(Debug, Default)]
struct Guarded {
    counts: Inner,
    latency: latency::Latency,
}

#[derive(Debug, Default)]
pub struct ModelStats {
    inner: Mutex<Guarded>,
    /// Requests waiting for an instance (Triton's pending request count).
    pending: AtomicI64,
    /// What the model's sandboxed code used and was refused (Wasm models; zero for others).
    pub usage: SandboxUsage,
    /// Whether its instances keep failing (readiness follows).
    pub health: Health,
}

/// A model's instances' health: after `threshold` executions in a row that failed in the
/// instance itself (a trap, an instance that could not start again, a backend error), the model
/// reports not ready; its next execution that works makes it ready again. Requests keep reaching
/// it meanwhile: the failure may be theirs, and only an execution can show it works again.
#[derive(Debug, Default)]
pub struct Health {
    /// 0: never unhealthy.
    threshold: u32,
    failures: AtomicU32,
    last: Mutex<String>,
}

impl Health {
    pub fn new(threshold: u32) -> Self {
        Self { threshold, ..Self::default() }
    }

    /// An execution reached the instance and came back (whatever each request's result).
    pub fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// An execution failed in the instance with `error`.
    pub fn failed(&self, error: &str) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if failures == self.threshold
            && let Ok(mut last) = self.last.lock()
        {
            *last = error.to_string();
        }
    }

    pub fn healthy(&self) -> bool {
        self.threshold == 0 || self.failures.load(Ordering::Relaxed) < self.threshold
    }

    /// Why the model is not ready, while it is not.
    pub fn reason(&self) -> Option<String> {
        if self.healthy() {
            return None;
        }
        let last = self.last.lock().map(|l| l.clone()).unwrap_or_default();
        Some(format!(
            "unhealthy: the last {} executions failed in the model's instances; the first of those in a row \
             that made it unhealthy: {last}",
            self.failures.load(Ordering::Relaxed)
        ))
    }
}

/// How a sandboxed execution ended badly, for `tessera_model_traps_total{kind=...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapKind {
    /// Ran past `max_execute_ms`.
    Timeout,
    /// Grew linear memory past `max_memory_bytes`.
    Memory,
    /// Anything else: a panic, `unreachable`, a bad handle, a wrong result count.
    Fault,
}

impl TrapKind {
    pub const ALL: [TrapKind; 3] = [Self::Timeout, Self::Memory, Self::Fault];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Memory => "memory",
            Self::Fault => "fault",
        }
    }
}

/// The per-model quotas a request can be refused by, for `tessera_model_quota_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// `max_queue_size`: too many requests already waiting.
    Queue,
    /// `max_cpu_ms_per_second`: the model's CPU budget is spent.
    Cpu,
    /// `--wasm-max-instances`: every live instance slot is busy.
    Instances,
}

impl Quota {
    pub const ALL: [Quota; 3] = [Self::Queue, Self::Cpu, Self::Instances];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Cpu => "cpu",
            Self::Instances => "instances",
        }
    }
}

/// Counters a sandboxed model's instances keep up to date (lock-free: they sit on the execute path).
#[derive(Debug, Default)]
pub struct SandboxUsage {
    /// CPU time the model's executions used (thread CPU time, so a guest waiting on a BLS call
    /// is not charged for the wait).
    pub cpu_ns: AtomicU64,
    /// Linear memory of the model's live instances.
    pub memory_bytes: AtomicI64,
    /// Instances holding a live store.
    pub instances_live: AtomicI64,
    traps: [AtomicU64; 3],
    refusals: [AtomicU64; 3],
    /// The CPU quota's token bucket (see [`SandboxUsage::cpu_budget_left`]).
    cpu_bucket: Mutex<Option<CpuBucket>>,
}

/// CPU time a model may still use: refilled at the quota's rate, at most one second's worth.
#[derive(Debug)]
struct CpuBucket {
    level_ns: i64,
    refilled: Instant,
}

impl SandboxUsage {
    /// Whether a model with a CPU quota of `per_second` may start an execution now: its bucket
    /// is not empty. An execution is charged when it ends ([`Self::charge_cpu`]) and may leave
    /// the bucket in debt (it ran up to `max_execute_ms`): the model is then refused until the
    /// refill pays the debt, so over any stretch of time it uses at most its quota plus one
    /// execution.
    pub fn cpu_budget_left(&self, per_second: Duration) -> bool {
        self.with_bucket(per_second, |b| b.level_ns > 0)
    }

    /// Counts `used` CPU time, and takes it from the bucket of a model with a quota.
    pub fn charge_cpu(&self, used: Duration, per_second: Option<Duration>) {
        let ns = u64::try_from(used.as_nanos()).unwrap_or(u64::MAX);
        self.cpu_ns.fetch_add(ns, Ordering::Relaxed);
        if let Some(per_second) = per_second {
            self.with_bucket(per_second, |b| {
                b.level_ns = b.level_ns.saturating_sub(i64::try_from(ns).unwrap_or(i64::MAX))
            });
        }
    }

    fn with_bucket<R>(&self, per_second: Duration, f: impl FnOnce(&mut CpuBucket) -> R) -> R {
        let rate = i64::try_from(per_second.as_nanos()).unwrap_or(i64::MAX);
        let now = Instant::now();
        let mut guard = self.cpu_bucket.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let bucket = guard.get_or_insert(CpuBucket { level_ns: rate, refilled: now });
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        let refill = (elapsed * rate as f64) as i64;
        if refill > 0 {
            bucket.level_ns = bucket.level_ns.saturating_add(refill).min(rate);
            bucket.refilled = now;
        }
        f(bucket)
    }

    pub fn record_trap(&self, kind: TrapKind) {
        self.traps[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn traps(&self, kind: TrapKind) -> u64 {
        self.traps[kind as usize].load(Ordering::Relaxed)
    }

    pub fn record_refusal(&self, quota: Quota) {
        self.refusals[quota as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn refusals(&self, quota: Quota) -> u64 {
        self.refusals[quota as usize].load(Ordering::Relaxed)
    }
}

impl ModelStats {
    /// Statistics that also record the latency distributions `latency` turns on, and that turn
    /// unhealthy after `unhealthy_after` instance failures in a row (0: never).
    pub fn new(latency: latency::Latency, unhealthy_after: u32) -> Self {
        Self {
            inner: Mutex::new(Guarded { counts: Inner::default(), latency }),
            health: Health::new(unhealthy_after),
            ..Self::default()
        }
    }

    fn with(&self, f: impl FnOnce(&mut Inner, &mut latency::Latency)) {
        if let Ok(mut guarded) = self.inner.lock() {
            let Guarded { counts, latency } = &mut *guarded;
            f(counts, latency);
        }
    }

    /// Runs `f` on the latency distributions (to render them).
    pub fn with_latency(&self, f: impl FnOnce(&mut latency::Latency)) {
        self.with(|_, latency| f(latency));
    }

    /// A request finished (successfully or not) after `total` time; `answered` when that is also
    /// the time of its first response (a successful request of a model that is not decoupled).
    pub fn record_request(&self, ok: bool, total: Duration, now_ms: u64, answered: bool) {
        self.with(|s, latency| {
            if ok {
                s.success.add(total)
            } else {
                s.fail.add(total)
            }
            s.last_inference_ms = now_ms;
            latency.record_request(total);
            if ok && answered {
                latency.record_first_response(total);
            }
        });
    }

    /// A request's first response (its only one, unless the model is decoupled) came `after`
    /// its arrival.
    pub fn record_first_response(&self, after: Duration) {
        self.with(|_, latency| latency.record_first_response(after));
    }

    pub fn record_failure(&self, reason: FailureReason) {
        self.with(|s, _| *s.failures.entry(reason).or_default() += 1);
    }

    /// A response cache lookup that found (`hit`) or did not find the response, and its cost
    /// (for a miss: the insertion after execution).
    pub fn record_cache(&self, hit: bool, took: Duration) {
        self.with(|s, latency| {
            if hit {
                s.cache_hit.add(took)
            } else {
                s.cache_miss.add(took)
            }
            latency.record_cache(hit, took);
        });
    }

    pub fn pending_add(&self, n: i64) {
        self.pending.fetch_add(n, Ordering::Relaxed);
    }

    pub fn pending(&self) -> i64 {
        self.pending.load(Ordering::Relaxed).max(0)
    }

    pub fn record_queue(&self, waited: Duration) {
        self.with(|s, latency| {
            s.queue.add(waited);
            latency.record_queue(waited);
        });
    }

    /// A successful execution of `batch_size` inferences.
    pub fn record_execution(&self, batch_size: usize, input: Duration, infer: Duration, output: Duration) {
        self.with(|s, latency| {
            s.inference_count += batch_size as u64;
            s.execution_count += 1;
            s.compute_input.add(input);
            s.compute_infer.add(infer);
            s.compute_output.add(output);
            let entry = s.batches.entry(batch_size).or_default();
            entry[0].add(input);
            entry[1].add(infer);
            entry[2].add(output);
            latency.record_execution(input, infer, output);
        });
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        self.inner.lock().map(|s| s.counts.clone()).unwrap_or_default()
    }

    /// One entry of the statistics extension's `model_stats` array.
    pub fn to_json(&self, name: &str, version: i64) -> Value {
        let Ok(guarded) = self.inner.lock() else { return Value::Null };
        let s = &guarded.counts;
        let batch_stats: Vec<Value> = s
            .batches
            .iter()
            .map(|(size, [i, c, o])| {
                json!({
                    "batch_size": size,
                    "compute_input": i.json(),
                    "compute_infer": c.json(),
                    "compute_output": o.json(),
                })
            })
            .collect();
        json!({
            "name": name,
            "version": version.to_string(),
            "last_inference": s.last_inference_ms,
            "inference_count": s.inference_count,
            "execution_count": s.execution_count,
            "inference_stats": {
                "success": s.success.json(),
                "fail": s.fail.json(),
                "queue": s.queue.json(),
                "compute_input": s.compute_input.json(),
                "compute_infer": s.compute_infer.json(),
                "compute_output": s.compute_output.json(),
                "cache_hit": s.cache_hit.json(),
                "cache_miss": s.cache_miss.json(),
            },
            "response_stats": {},
            "batch_stats": batch_stats,
            "memory_usage": [],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_batches_accumulate() {
        let stats = ModelStats::default();
        stats.record_execution(2, Duration::from_nanos(10), Duration::from_nanos(20), Duration::from_nanos(30));
        stats.record_request(true, Duration::from_nanos(100), 42, true);
        stats.record_request(false, Duration::from_nanos(5), 43, true);
        let j = stats.to_json("m", 3);
        assert_eq!(j["version"], "3");
        assert_eq!(j["inference_count"], 2);
        assert_eq!(j["execution_count"], 1);
        assert_eq!(j["last_inference"], 43);
        assert_eq!(j["inference_stats"]["success"]["count"], 1);
        assert_eq!(j["inference_stats"]["fail"]["count"], 1);
        assert_eq!(j["batch_stats"][0]["batch_size"], 2);
        assert_eq!(j["batch_stats"][0]["compute_infer"]["ns"], 20);
    }

    #[test]
    fn the_cpu_bucket_allows_a_seconds_worth_then_refuses_until_refilled() {
        let usage = SandboxUsage::default();
        let quota = Duration::from_millis(100);
        assert!(usage.cpu_budget_left(quota), "a fresh model starts with a full bucket");
        usage.charge_cpu(Duration::from_millis(60), Some(quota));
        assert!(usage.cpu_budget_left(quota));
        // One execution may overrun: the model is then in debt.
        usage.charge_cpu(Duration::from_millis(300), Some(quota));
        assert!(!usage.cpu_budget_left(quota));
        assert_eq!(usage.cpu_ns.load(Ordering::Relaxed), 360_000_000, "every execution is counted");
        // Pretend the refill has had 2.7 s (270 ms at 100 ms/s): the 260 ms debt is paid.
        if let Ok(mut bucket) = usage.cpu_bucket.lock()
            && let Some(b) = bucket.as_mut()
        {
            b.refilled -= Duration::from_millis(2_700);
        }
        assert!(usage.cpu_budget_left(quota));
        // Without a quota nothing is refused, and nothing is kept in a bucket.
        let free = SandboxUsage::default();
        free.charge_cpu(Duration::from_secs(10), None);
        assert!(free.cpu_bucket.lock().unwrap().is_none());
    }

    #[test]
    fn health_turns_after_the_threshold_in_a_row_and_back_on_success() {
        let health = Health::new(3);
        health.failed("first");
        health.failed("second");
        health.succeeded();
        health.failed("a");
        health.failed("b");
        assert!(health.healthy() && health.reason().is_none());
        health.failed("c");
        assert!(!health.healthy());
        let reason = health.reason().unwrap();
        assert!(reason.starts_with("unhealthy: the last 3 executions failed") && reason.ends_with(": c"), "{reason}");
        health.failed("d");
        assert!(health.reason().unwrap().contains("the last 4 executions"));
        health.succeeded();
        assert!(health.healthy());
        let never = Health::new(0);
        (0..100).for_each(|_| never.failed("x"));
        assert!(never.healthy());
    }

    #[test]
    fn traps_and_refusals_are_counted_by_kind() {
        let usage = SandboxUsage::default();
        usage.record_trap(TrapKind::Memory);
        usage.record_trap(TrapKind::Memory);
        usage.record_refusal(Quota::Cpu);
        assert_eq!(TrapKind::ALL.map(|k| usage.traps(k)), [0, 2, 0]);
        assert_eq!(Quota::ALL.map(|q| usage.refusals(q)), [0, 1, 0]);
        assert_eq!(TrapKind::ALL.map(TrapKind::as_str), ["timeout", "memory", "fault"]);
        assert_eq!(Quota::ALL.map(Quota::as_str), ["queue", "cpu", "instances"]);
    }
}
